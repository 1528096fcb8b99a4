"""How a check is declared and how it records what it saw.

A check is a pytest test function decorated with :func:`check`.  It receives parsed
facts through fixtures (``host``, ``facts``, ``cluster``) and records one result per
subject through the ``verdict`` fixture, so a single test can say "npu3 failed, the
other seven passed".  Check bodies do no I/O: everything they need was gathered
before the first test ran, from the fact names listed in ``needs``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from .facts import remedy_for_unevaluated
from .results import SEVERITIES, Result, one_line

MARKER = "preflight_check"


@dataclass(frozen=True)
class CheckInfo:
    id: str
    severity: str
    title: str
    remedy: str
    reference: str
    needs: tuple[str, ...] = ()
    scope: str = "host"  # "host": parametrized per inventory host; "cluster": once for all hosts


def check(id: str, *, title: str, remedy: str, reference: str, severity: str = "error",
          needs: tuple[str, ...] | list[str] = (), scope: str = "host"):
    """Mark a test function as the preflight check ``id``.

    ``needs`` names the facts (see :mod:`preflight.facts`) the check reads; only the
    facts of the selected checks are gathered.  ``remedy`` is the default fix shown
    with every failure, ``reference`` the FAQ item the check comes from.
    """
    if severity not in SEVERITIES:
        raise ValueError(f"{id}: severity must be one of {SEVERITIES}")
    if scope not in ("host", "cluster"):
        raise ValueError(f"{id}: scope must be 'host' or 'cluster'")
    info = CheckInfo(id=id, severity=severity, title=title, remedy=remedy, reference=reference,
                     needs=tuple(needs), scope=scope)
    return getattr(pytest.mark, MARKER)(info)


def nothing_to_compare(cluster, verdict, what: str) -> bool:
    """For a check that compares the nodes: True (and a result saying why) when there is nothing to
    compare: a single-node inventory (its host checks judge that node), or no node reached."""
    if len(cluster.hosts) < 2:
        verdict.skipped(message=f"a single-node inventory: no other node to compare {what} with")
        return True
    if not cluster.reachable():
        verdict.error(message="not evaluated: no node was reached")
        return True
    return False


def info_of(item) -> CheckInfo | None:
    marker = item.get_closest_marker(MARKER)
    return marker.args[0] if marker else None


def _visible(value):
    return one_line(value) if isinstance(value, str) else value


class Verdict:
    """Collects the results of one check invocation (one host, or the cluster)."""

    def __init__(self, info: CheckInfo, host: str | None, nodeid: str | None = None):
        self.info = info
        self.host = host
        self.nodeid = nodeid
        self.results: list[Result] = []

    def _add(self, outcome, subject, message, *, severity=None, observed=None, expected=None,
             remedy=None, outliers=(), host=..., agreed=None):
        self.results.append(Result(
            check=self.info.id,
            host=self.host if host is ... else host,
            subject=subject,
            outcome=outcome,
            severity=severity or self.info.severity,
            # What a check quotes may come from a node: it reaches the terminal and the reports.
            message=_visible(message),
            # A remedy a check writes may quote a node's value too (an env value, MASTER_ADDR).
            remedy=self.info.remedy if remedy is None else _visible(remedy),
            reference=self.info.reference,
            observed=_visible(observed),
            expected=_visible(expected),
            outliers=tuple(outliers),
            nodeid=self.nodeid,
            agreed=tuple((str(k), str(v)) for k, v in (agreed or {}).items()),
        ))

    def passed(self, subject: str | None = None, message: str = "ok", **kw) -> None:
        """``agreed={key: value}``: what a cluster-wide check found every node to agree on, for
        preflight-merge to compare across shards."""
        self._add("passed", subject, message, remedy="", **kw)

    def failed(self, subject: str | None = None, *, observed: str, expected: str,
               where: str | None = None, severity: str | None = None, remedy: str | None = None,
               outliers=(), **kw) -> None:
        """Record a failure: what was observed, what was expected, and where."""
        severity = severity or self.info.severity
        host = kw.get("host", self.host)
        place = where or " ".join(p for p in (host, subject) if p)
        message = f"{place}: {observed}; expected {expected}" if place else f"{observed}; expected {expected}"
        outcome = "warning" if severity == "warning" else "failed"
        self._add(outcome, subject, message, severity=severity, observed=observed, expected=expected,
                  remedy=remedy, outliers=outliers, **kw)

    def error(self, subject: str | None = None, message: str = "", **kw) -> None:
        """The check could not be evaluated (output missing, timed out or unreadable); without a
        ``remedy``, the next step for the reason in ``message`` (a hung tool, a missing one ...)."""
        self._add("error", subject, message, remedy=kw.pop("remedy", "") or remedy_for_unevaluated(message), **kw)

    def skipped(self, subject: str | None = None, message: str = "not applicable", **kw) -> None:
        self._add("skipped", subject, message, remedy="", **kw)


def catalog(skip: tuple[str, ...] = ()) -> dict[str, CheckInfo]:
    """The built-in checks' declarations by id, from every module of ``preflight.checks`` but
    those named in ``skip``."""
    import importlib
    import pkgutil

    import preflight.checks as pkg

    found: dict[str, CheckInfo] = {}
    for mod in pkgutil.iter_modules(pkg.__path__):
        if mod.name in skip:
            continue
        module = importlib.import_module(f"preflight.checks.{mod.name}")
        for obj in vars(module).values():
            for mark in getattr(obj, "pytestmark", []):
                if mark.name == MARKER:
                    found[mark.args[0].id] = mark.args[0]
    return found
