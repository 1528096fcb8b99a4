"""Every fact a check reads is one it declares in ``needs``: only the needs of the selected checks
are gathered, so a fact read but not declared is silently missing when the check runs alone
(``pytest -k hostnames``) and an ``optional`` read turns into a pass."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import preflight.checks
from preflight.check import MARKER
from preflight.facts import FACTS

CHECKS = sorted(Path(preflight.checks.__file__).parent.glob("*.py"))
# Modules whose helpers the checks call with their facts (hccl_endpoint, ray_plan, ...).
HELPERS = [Path(preflight.__file__).parent / name for name in ("activeprobe.py", "ifname.py", "outliers.py")]


def _reads(node) -> set[str]:
    """Fact names in ``X.get("name")``, ``X.optional("name")`` and ``X.per_device("name")`` calls."""
    names = set()
    for call in ast.walk(node):
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr in ("get", "optional", "per_device") and call.args
                and isinstance(call.args[0], ast.Constant) and call.args[0].value in FACTS):
            names.add(call.args[0].value)
    return names


def _called(node, functions) -> set[str]:
    return {c.func.id for c in ast.walk(node)
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id in functions}


def _checks_and_their_reads(path: Path):
    module = importlib.import_module(f"preflight.checks.{path.stem}")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    functions = {n.name: n for p in HELPERS for n in ast.parse(p.read_text(encoding="utf-8")).body
                 if isinstance(n, ast.FunctionDef)}
    functions.update((n.name, n) for n in tree.body if isinstance(n, ast.FunctionDef))
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        for dec in fn.decorator_list:
            if isinstance(dec, ast.Call) and getattr(dec.func, "id", None) == "check":
                info = next(m.args[0] for m in getattr(module, fn.name).pytestmark if m.name == MARKER)
                declared = {n.rstrip("?") for n in info.needs}
                reads, seen, todo = set(), set(), [fn.name]
                while todo:  # the check and the module's helpers it calls, transitively
                    name = todo.pop()
                    if name not in seen:
                        seen.add(name)
                        reads |= _reads(functions[name])
                        todo += _called(functions[name], functions)
                yield dec.args[0].value, declared, reads


CASES = [case for path in CHECKS for case in _checks_and_their_reads(path)]


def test_the_checks_were_found():
    assert len(CASES) > 40 and "cluster.hostnames" in {c[0] for c in CASES}


@pytest.mark.parametrize("check_id, declared, reads", CASES, ids=[c[0] for c in CASES])
def test_a_check_declares_every_fact_it_reads(check_id, declared, reads):
    assert reads <= declared, f"{check_id} reads {sorted(reads - declared)} without declaring them in needs"
