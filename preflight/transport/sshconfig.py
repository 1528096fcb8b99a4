"""ssh_config text with its ``Include`` directives expanded, which paramiko's parser ignores.

Many ``~/.ssh/config`` files are little more than ``Include config.d/*``: read as paramiko reads
them, every alias in the included files was unknown ("name does not resolve"), or a name that
does resolve was reached with the wrong port, user or jump host.  OpenSSH's rules, kept here:
paths may hold globs and ``~``, a relative path is under ``~/.ssh`` (the files preflight reads
are user configuration files), files matching no path are skipped silently, and nesting stops
at 16 levels.  After an included file, the block the ``Include`` stood in (``Host *`` at the
top) applies again, as OpenSSH returns to it.  An ``Include`` inside another ``Host`` or ``Match``
block is read when its file sets options only (they join that block); one whose file has blocks
of its own is refused with the line, as inlining it would apply them to every host.
"""
from __future__ import annotations

import glob
import os
import re

MAX_DEPTH = 16  # OpenSSH's READCONF_MAX_DEPTH

_INCLUDE = re.compile(r"^\s*include(?:\s*=\s*|\s+)(.+?)\s*$", re.IGNORECASE)
_BLOCK = re.compile(r"^\s*(host|match)(\s*=\s*|\s+)\S", re.IGNORECASE)
_GLOBAL = re.compile(r"\s*(host(\s*=\s*|\s+)\*|match(\s*=\s*|\s+)all)\s*", re.IGNORECASE)


class SshConfigError(Exception):
    """An ssh_config file that cannot be read, or Includes nested past OpenSSH's limit."""


def expanded_text(path: str) -> str:
    """The text of ssh_config ``path`` with every ``Include`` replaced by the files it names."""
    return _expand(path, 0)


def _expand(path: str, depth: int) -> str:
    if depth > MAX_DEPTH:
        raise SshConfigError(f"ssh_config {path}: Include nested more than {MAX_DEPTH} levels deep")
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        raise SshConfigError(f"ssh_config {path}: cannot read: {exc.strerror or exc}") from None
    out: list[str] = []
    block = "Host *"  # the block the lines read now belong to
    for line in lines:
        if _BLOCK.match(line):
            block = line.strip()
        m = _INCLUDE.match(line)
        if not m:
            out.append(line)
            continue
        out.append(f"# {line.strip()}")
        for name in _words(m.group(1)):
            for included in _paths(name):
                text = _expand(included, depth + 1)
                blocks = any(_BLOCK.match(ln) for ln in text.splitlines())
                if blocks and not _GLOBAL.fullmatch(block):
                    # OpenSSH reads such a file only when the enclosing block applies; inlined, its
                    # Host blocks would apply to every host.  Said, not read wrongly.
                    raise SshConfigError(f"ssh_config {path}: `{line.strip()}` inside `{block}` includes "
                                         f"{included}, which has Host or Match blocks of its own: preflight "
                                         f"reads Include with blocks only at the top of the file or under "
                                         f"`Host *`; move it there")
                out.append(text)
                if blocks:
                    out.append(block)  # back to the Include's own block
    return "\n".join(out) + "\n"


def _words(value: str) -> list[str]:
    """Include's arguments: space-separated, each optionally double-quoted."""
    return [a or b for a, b in re.findall(r'"([^"]*)"|(\S+)', value)]


def _paths(name: str) -> list[str]:
    name = os.path.expanduser(name)
    if not os.path.isabs(name):
        name = os.path.join(os.path.expanduser("~/.ssh"), name)
    return sorted(p for p in glob.glob(name) if os.path.isfile(p))
