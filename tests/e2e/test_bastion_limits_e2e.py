"""sshd limits behind a bastion (issue 6): every target's session is carried by the ONE shared
connection to the jump host, so a hardened bastion (MaxStartups 1, MaxSessions 1) still serves a
fan-out of 32.  Forwarded TCP channels (direct-tcpip) do not count against MaxSessions, and only
one unauthenticated connection (ours) ever reaches the bastion's MaxStartups; new handshakes
through it are capped at GATEWAY_HANDSHAKES (8) at a time on our side.  Gathering spread over
shards keeps that: the hosts behind one jump host are all in one shard."""
from __future__ import annotations

import pytest
import yaml

from preflight.transport.ssh import GATEWAY_HANDSHAKES

from .test_preflight_e2e import problems, run_preflight

NAMES = [f"node-{i:02d}" for i in range(1, 11)]


@pytest.mark.parametrize("gathering", [(), ("--gather-process", "shards", "--gather-shards", "3")],
                         ids=["one-process", "shards"])
def test_hardened_bastion_carries_a_wide_fanout(sim_cluster_factory, tmp_path, gathering):
    assert GATEWAY_HANDSHAKES <= 8  # below sshd's default MaxStartups 10 of a bastion we do not control
    sim = sim_cluster_factory(names=NAMES, head="node-02")
    bastion = sim.node("node-01")
    bastion.restart(sshd_options={"MaxStartups": "1", "MaxSessions": "1"})
    targets = NAMES[1:]
    inv = sim.write_inventory(tmp_path / "hosts.yaml", hosts=targets, head={"min_nofile": sim.default_nofile},
                              worker={"min_nofile": sim.default_nofile})
    data = yaml.safe_load(inv.read_text())
    for entry in data["hosts"]:
        entry["jump_host"] = f"root@{bastion.address}"
    inv.write_text(yaml.safe_dump(data))
    before = len(bastion.sshd_log.read_text())
    proc, doc = run_preflight(inv, tmp_path, "--fanout", "32", "-k", "not ping", *gathering)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert problems(doc) == set(), proc.stdout[-3000:]
    assert sorted(h["name"] for h in doc["hosts"] if h["reachable"]) == targets
    log = bastion.sshd_log.read_text()[before:]
    # one login on the bastion for 9 targets, and it never had to throttle or refuse
    assert log.count(f"Accepted publickey for root from {sim.gateway}") == 1, log
    assert "MaxStartups" not in log and "drop connection" not in log, log
