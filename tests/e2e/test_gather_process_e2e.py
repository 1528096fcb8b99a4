"""Gathering in a forked child (--gather-process child, the default above 64 hosts) or spread over
forked shards (--gather-process shards) gives the same results as gathering in the pytest process,
with the same SSH logins, and leaves nothing behind."""

import glob
import os

import pytest

from .test_preflight_e2e import problems, run_preflight
from .test_xdist_e2e import _logins, results


@pytest.mark.parametrize("mode", [("child",), ("shards", "--gather-shards", "2")], ids=["child", "shards"])
def test_gathering_elsewhere_matches_gathering_inline(sim, tmp_path, mode):
    groups = {"min_nofile": sim.default_nofile}
    inv = sim.write_inventory(tmp_path / "hosts.yaml", head=groups, worker=groups)
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
    assert glob.glob(os.path.join(tmp_path / "child" / "tmp", "preflight-*")) == []  # none left (TMPDIR: run_env)


def _steps(doc) -> set[str]:
    return {k for k in doc["timings"] if not k.startswith("gather_cpu")}
