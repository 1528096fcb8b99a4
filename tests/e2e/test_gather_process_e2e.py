"""Gathering in a forked child (--gather-process child, the default above 64 hosts) or spread over
forked shards (--gather-process shards) gives the same results as gathering in the pytest process,
with the same SSH logins, and leaves nothing behind."""

import glob
import json
import os
import tempfile

import pytest

from .test_preflight_e2e import problems, run_preflight
from .test_xdist_e2e import _logins, results


@pytest.mark.parametrize("mode", [("child",), ("shards", "--gather-shards", "2")], ids=["child", "shards"])
def test_gathering_elsewhere_matches_gathering_inline(sim, tmp_path, mode):
    groups = {"min_nofile": sim.default_nofile}
    inv = sim.write_inventory(tmp_path / "hosts.yaml", head=groups, worker=groups)
    folders = set(glob.glob(os.path.join(tempfile.gettempdir(), "preflight-child-*")))
    with sim.node("node-02").set_npu(3, link="DOWN"):
        before = _logins(sim)
        inline_proc, inline = run_preflight(inv, tmp_path / "inline", "--gather-process", "inline")
        middle = _logins(sim)
        child_proc, child = run_preflight(inv, tmp_path / "child", "--gather-process", *mode)
        after = _logins(sim)
    assert {n: after[n] - middle[n] for n in after} == {n: middle[n] - before[n] for n in middle}
    assert results(child) == results(inline)
    assert ("hccl.link_up", "node-02", "npu3", "failed") in problems(child)
    assert child["ready"] is inline["ready"] is False
    assert child_proc.returncode == inline_proc.returncode == 1
    # Phase two ran (in the child, or through the shards' connections); its step times came back.
    assert _steps(child) == _steps(inline) and child["timings"]["phase_two"] > 0
    assert child["timings"]["gather_cpu_s"] > 0
    if mode[0] == "shards":  # the shards' CPU apart from the controller's
        assert 0 < child["timings"]["gather_cpu_largest_shard_s"] < child["timings"]["gather_cpu_shards_s"]
    assert [h["gather_s"] > 0 for h in child["hosts"]] == [True, True, True]
    assert "gathering facts: 3/3 hosts done" in child_proc.stdout
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "preflight-child-*"))) <= folders  # none left


def _steps(doc) -> set[str]:
    return {k for k in doc["timings"] if not k.startswith("gather_cpu")}


# Collected with the built-in checks: notes which forks of the pytest process exist while the
# checks are being collected (the shards, if they were forked before collection).
_FORKS_AT_COLLECTION = '''
import json, os

def _forks():
    me = os.getpid()
    with open(f"/proc/{me}/cmdline", "rb") as fh:
        mine = fh.read()
    kids = []
    for task in os.listdir(f"/proc/{me}/task"):
        with open(f"/proc/{me}/task/{task}/children") as fh:
            kids += [int(k) for k in fh.read().split()]
    found = []
    for kid in kids:
        try:
            with open(f"/proc/{kid}/cmdline", "rb") as fh:
                if fh.read() == mine:
                    found.append(kid)
        except OSError:
            pass
    return found

with open(os.environ["PF_FORKS_FILE"], "w") as fh:
    json.dump(_forks(), fh)
'''


def test_shards_are_forked_before_the_checks_are_collected(sim, tmp_path, monkeypatch):
    # A shard forked after collection starts as a copy of every collected item (~150 MB at 1000
    # hosts) and copies the pages it allocates among; forked at configuration it does not.
    checks = tmp_path / "site_checks"
    checks.mkdir()
    (checks / "test_forks_at_collection.py").write_text(_FORKS_AT_COLLECTION)
    forks = tmp_path / "forks.json"
    monkeypatch.setenv("PF_FORKS_FILE", str(forks))
    groups = {"min_nofile": sim.default_nofile}
    inv = sim.write_inventory(tmp_path / "hosts.yaml", head=groups, worker=groups)
    proc, doc = run_preflight(inv, tmp_path / "run", "--gather-process", "shards", "--gather-shards", "2",
                              str(checks))
    assert len(json.loads(forks.read_text())) == 2, proc.stdout[-2000:]
    assert [h["reachable"] for h in doc["hosts"]] == [True, True, True]
    assert doc["timings"]["gather_cpu_shards_s"] > 0  # they did the gathering
    # In one process nothing is forked, before collection or after.
    run_preflight(inv, tmp_path / "inline", "--gather-process", "inline", str(checks))
    assert json.loads(forks.read_text()) == []
