"""``preflight``: the checker as one command, for nightly jobs and people who never type pytest.

``preflight --inventory hosts.yaml [pytest options]`` is ``pytest --inventory hosts.yaml``
with the plugin loaded explicitly, so it works whatever plugins the environment has,
and without a cache directory (the current directory may be read-only).
"""

from __future__ import annotations

import difflib
import sys

import pytest

# The options that make a run (one of them is needed): a misspelt one is named, not a bare usage.
_RUN_OPTIONS = ("--inventory", "--preflight-inventory", "--facts-in", "--job", "--job-local")


def _plugin_options() -> set[str]:
    """Every option the plugin defines (--facts-out is one, not a misspelt --facts-in)."""
    names: set[str] = set()

    class _Group:
        def addoption(self, *opts, **_):
            names.update(opts)

    class _Parser:
        _groups: list = []
        _anonymous = None

        def getgroup(self, *_, **__):
            return _Group()

        def addini(self, *_, **__):
            pass

        def __getattr__(self, _):
            return lambda *a, **k: None

    from . import plugin

    try:
        plugin.pytest_addoption(_Parser(), None)
    except Exception:  # noqa: BLE001 - a guess at a typo must never stop the usage text
        pass
    return names


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["merge"]:  # `preflight merge ...` = preflight-merge (shards from several controllers)
        from .merge import main as merge_main

        return merge_main(args[1:])
    if "--version" in args or "-V" in args:
        from . import __version__

        print(f"ascend-preflight {__version__} (pytest {pytest.__version__})")
        return 0
    # What makes a run: an inventory, saved facts, or a job read on this machine (--job-local).
    local_job = "--job-local" in args and any(a == "--job" or a.startswith("--job=") for a in args)
    if not local_job and not any(a in ("--inventory", "--preflight-inventory", "--facts-in") or
                                 a.startswith(("--inventory=", "--preflight-inventory=", "--facts-in="))
                                 or a in ("-h", "--help") for a in args):
        for arg in args:
            name = arg.split("=", 1)[0]
            close = difflib.get_close_matches(name, _RUN_OPTIONS, n=1, cutoff=0.75) if name.startswith("--") else []
            if close and name not in _RUN_OPTIONS and name not in _plugin_options():
                print(f"preflight: unknown option {name} (did you mean {close[0]}?)", file=sys.stderr)
                return int(pytest.ExitCode.USAGE_ERROR)
        print("usage: preflight --inventory hosts.yaml [--report-dir DIR] [pytest options]\n"
              "       preflight --facts-in facts.json   (re-check saved facts, no network)\n"
              "       preflight --job run.sh --job-local (check a job on this machine)\n"
              "see `preflight --help` for every option", file=sys.stderr)
        return int(pytest.ExitCode.USAGE_ERROR)
    # --inventory may be owned by pytest-ansible; --preflight-inventory always exists.
    args = ["--preflight-inventory" + a[len("--inventory"):] if a.startswith("--inventory") else a
            for a in args]
    # This module imported the preflight package already, so pytest cannot assertion-rewrite the
    # plugin module; the checks do not rely on assert rewriting, so that warning is noise here.
    # A conftest.py where it is run (a project's checkout: importing torch, its own fixtures and
    # hooks) is not the checker's: --noconftest keeps it out, as the plugin list is kept explicit.
    return int(pytest.main(["-p", "no:cacheprovider", "--noconftest", "-W", "ignore::pytest.PytestAssertRewriteWarning",
                            *args]))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
