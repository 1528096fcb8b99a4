"""The SSH layer and the deadlines, end to end against real sshd nodes.

A jump host that is the only way in, ssh_config aliases, a per-host deadline shorter than a
hung tool, a hung tool under its per-command timeout, and garbage output: each ends in bounded
time with one precise result, while the other hosts' results stay intact.
"""

from __future__ import annotations

import time

import yaml

from .test_preflight_e2e import by_check, problems, run_preflight


def _inventory(sim, tmp_path, **kw):
    return sim.write_inventory(tmp_path / "hosts.yaml", head={"min_nofile": sim.default_nofile},
                               worker={"min_nofile": sim.default_nofile}, **kw)


def test_workers_reached_only_through_a_jump_host(sim, tmp_path, require_iptables):
    bastion = sim.node("node-01")
    # The controller (the bridge address) may not reach the workers' sshd; the bastion may.
    undos = [sim.node(n).firewall(22, "DROP", source=sim.gateway) for n in ("node-02", "node-03")]
    try:
        inv = _inventory(sim, tmp_path)
        data = yaml.safe_load(inv.read_text())
        for entry in data["hosts"]:
            if entry["name"] != "node-01":
                entry["jump_host"] = f"root@{bastion.address}"
        inv.write_text(yaml.safe_dump(data))
        direct = sim.write_inventory(tmp_path / "direct.yaml")
        proc, doc = run_preflight(direct, tmp_path / "direct", "--connect-timeout", "5",
                                  "-k", "reachable")
        assert {p[1] for p in problems(doc)} == {"node-02", "node-03"}  # proves the firewall works
        before = len(bastion.sshd_log.read_text())
        proc, doc = run_preflight(inv, tmp_path / "jump")
        assert problems(doc) == set(), proc.stdout[-3000:]
        # One shared bastion connection: the bastion saw two logins from the controller (its own
        # probe, and the jump connection both workers share), not one more per target.
        log = bastion.sshd_log.read_text()[before:]
        # (" port" ends the address: the launcher's login to itself comes from node-01's own address,
        # which the gateway's is a prefix of.)
        assert log.count(f"Accepted publickey for root from {sim.gateway} port") == 2, log
    finally:
        for undo in undos:
            undo.undo()


def test_ssh_config_alias_is_honoured(sim, tmp_path):
    node = sim.node("node-02")
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(f"Host gpu-box\n  HostName {node.address}\n  User root\n"
                          f"  IdentityFile {sim.identity_file}\n")
    inv = tmp_path / "alias.yaml"
    inv.write_text(f"defaults: {{known_hosts: {sim.known_hosts_path}, ssh_config: {ssh_config}}}\n"
                   f"hosts:\n  - {{name: gpu-box, groups: [worker]}}\n"
                   f"groups:\n  worker: {{npus_per_node: 8, min_nofile: {sim.default_nofile}}}\n")
    proc, doc = run_preflight(inv, tmp_path, "-k", "reachable or nofile")
    assert problems(doc) == set(), proc.stdout[-3000:]
    assert [h["name"] for h in doc["hosts"] if h["reachable"]] == ["gpu-box"]


def test_hung_tool_costs_one_timeout_and_is_reported(sim, tmp_path):
    inv = _inventory(sim, tmp_path)
    with sim.node("node-02").override("hccn_tool", "*", sleep=3600):
        t0 = time.monotonic()
        proc, doc = run_preflight(inv, tmp_path, "--command-timeout", "6")
        elapsed = time.monotonic() - t0
    assert elapsed < 60, elapsed  # one timeout, not one per NPU and per command (16 x 6 s)
    found = problems(doc)
    # Everything hccn_tool tells about node-02 is "not evaluated"; nothing fails, no other host is touched.
    assert {p[3] for p in found} == {"error"}, found
    assert {p[1] for p in found} <= {"node-02", None}, found
    for r in doc["results"]:
        if r["outcome"] == "error" and r["host"] is None:
            assert "node-02" in r["message"], r
    assert {"hccl.link_up", "hccl.tls_node"} <= {p[0] for p in found}
    messages = [r["message"] for r in by_check(doc, "hccl.link_up") if r["host"] == "node-02"]
    assert any("timed out" in m for m in messages)
    assert any("timed out earlier on this host" in m for m in messages)
    # cluster.tls_agree still judges the other nodes, and says node-02 was not evaluated in a result
    # of its own (node-02's matrix cell).
    [agree] = [r for r in by_check(doc, "cluster.tls_agree") if r["outcome"] == "passed"]
    assert "node-02" in agree["message"]
    [unread] = [r for r in by_check(doc, "cluster.tls_agree") if r["outcome"] == "error"]
    assert unread["outliers"] == ["node-02"] and unread["remedy"]


def test_tool_hung_on_one_npu_costs_that_npu_only(sim, tmp_path):
    inv = _inventory(sim, tmp_path)
    node = sim.node("node-02")
    node.clear_calls()
    with node.override("hccn_tool", "-i 3 -link -g", sleep=3600):
        proc, doc = run_preflight(inv, tmp_path, "--command-timeout", "6")
    found = problems(doc)
    assert {p[1] for p in found} <= {"node-02", None}, found
    links = [r for r in by_check(doc, "hccl.link_up") if r["host"] == "node-02"]
    [hung] = [r for r in links if r["outcome"] != "passed"]
    assert hung["outcome"] == "error" and hung["message"].startswith("node-02 npu3: `hccn_tool -i 3 -link -g` timed out")
    assert "--command-timeout" in hung["remedy"]  # what to do next, not the link's remedy
    assert "remedy: The command did not answer within --command-timeout" in proc.stdout
    assert len(links) == 8
    # Nothing more is asked about NPU 3; every other NPU is asked everything and judged.
    calls = [c["args"] for c in node.calls("hccn_tool")]
    assert [a for a in calls if a[:2] == ["-i", "3"]] == ["-i 3 -link -g".split()], calls
    for dev in (0, 1, 2, 4, 5, 6, 7):  # six queries each (and phase two's ring ping)
        assert sum(a[:2] == ["-i", str(dev)] and a[2] != "-ping" for a in calls) == 6, (dev, calls)
    tls = {r["outcome"]: r["message"] for r in by_check(doc, "hccl.tls_node") if r["host"] == "node-02"}
    assert tls["error"].startswith("node-02 npu3: `hccn_tool -i 3 -tls -g` was not run"), tls
    assert "all 7 NPUs" in tls["passed"], tls


def test_host_deadline_ends_a_slow_host_and_keeps_the_others(sim, tmp_path):
    inv = _inventory(sim, tmp_path)
    with sim.node("node-03").override("npu-smi", "info", sleep=3600):
        t0 = time.monotonic()
        proc, doc = run_preflight(inv, tmp_path, "--command-timeout", "60", "--host-timeout", "15")
        elapsed = time.monotonic() - t0
    assert elapsed < 55, elapsed  # the host deadline, not npu-smi's 60 s
    [host] = [h for h in doc["hosts"] if h["name"] == "node-03"]
    assert "host-timeout" in (host["error"] or ""), host
    found = problems(doc)
    assert {p[1] for p in found} <= {"node-03", None}, found
    assert all(p[3] == "error" for p in found if p[1] == "node-03")
    # Facts gathered before npu-smi hung are kept: the session checks still ran on node-03.
    [nofile] = [r for r in by_check(doc, "limits.nofile") if r["host"] == "node-03"]
    assert nofile["outcome"] == "passed"


def test_garbage_from_npu_smi_is_one_precise_error(sim, tmp_path):
    inv = _inventory(sim, tmp_path)
    garbage = "\x1b[31m<script>alert(1)</script>\udcff binary \x00\x01 junk\n"
    with sim.node("node-01").override("npu-smi", "info", stdout=garbage.encode("utf-8", "surrogateescape")
                                      .decode("utf-8", "replace"), rc=0):
        proc, doc = run_preflight(inv, tmp_path)
    found = problems(doc)
    # Every check that reads npu-smi says it could not; only "npu-smi works" itself fails.
    assert ("npu.health", "node-01", None, "error") in found
    assert {p for p in found if p[3] != "error"} == {("devices.driver_mounts", "node-01", "npu-smi", "failed")}
    assert {p[1] for p in found} <= {"node-01", None}, found
    for r in doc["results"]:
        if r["outcome"] == "error":
            assert "npu-smi" in r["message"] or "node-01" in r["message"], r
    [bad] = [r for r in by_check(doc, "npu.health") if r["host"] == "node-01"]
    assert "unreadable output of `npu-smi info`" in bad["message"]
    html = (tmp_path / "reports" / "matrix.html").read_text()
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def _direct_and_jumped(sim, tmp_path):
    """A Gatherer and two connected transports: node-03 direct, node-02 through node-01 as its
    jump host."""
    from preflight.gather import Gatherer, GatherSettings
    from preflight.inventory import load_inventory

    data = yaml.safe_load(sim.write_inventory(tmp_path / "hosts.yaml").read_text())
    for entry in data["hosts"]:
        if entry["name"] == "node-02":
            entry["jump_host"] = f"root@{sim.node('node-01').address}"
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump(data))
    hosts = {h.name: h for h in load_inventory(str(tmp_path / "hosts.yaml")).hosts}
    gatherer = Gatherer(GatherSettings())
    direct, jumped = gatherer.transport(hosts["node-03"]), gatherer.transport(hosts["node-02"])
    try:
        for transport in (direct, jumped):
            transport.connect()
    except BaseException:
        gatherer.close()
        raise
    return gatherer, direct, jumped


def test_connections_send_packets_at_once_direct_and_through_a_jump_host(sim, tmp_path):
    # With Nagle's algorithm on (paramiko's default) each session's small packets waited for the
    # node's delayed ACK: 49 ms per command on an open connection instead of 4 (measured).
    import socket

    def no_delay(sock) -> bool:
        return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0

    gatherer, direct, jumped = _direct_and_jumped(sim, tmp_path)
    try:
        for transport in (direct, jumped):
            assert transport.run("echo hi", timeout=10, max_bytes=64).stdout == b"hi\n"
        assert no_delay(direct._conn.transport.sock)  # set before the handshake: the socket is ours
        [(gateway, _, _)] = gatherer.ssh._gateways.values()
        assert no_delay(gateway.transport.sock)  # the jumped connection's packets ride on it
        assert not isinstance(jumped._conn.transport.sock, socket.socket)
    finally:
        gatherer.close()


def test_idle_connections_sleep_until_a_keepalive_is_due_answer_at_once_and_close_at_once(sim, tmp_path):
    # paramiko's thread polls every 0.1 s by default: a third of a core at 1000 open connections.
    # It now sleeps in recv() until data, a due keepalive, or a close, which must wake it: closing
    # the descriptor alone would leave it asleep (and the node's session open) for up to the poll.
    from preflight.transport.ssh import IDLE_POLL_S, KEEPALIVE_S

    gatherer, direct, jumped = _direct_and_jumped(sim, tmp_path)
    try:
        for transport in (direct, jumped):
            assert transport._conn.transport.sock.gettimeout() == IDLE_POLL_S == KEEPALIVE_S == 15
        time.sleep(1.5)  # idle
        for transport in (direct, jumped):
            for _ in range(3):
                result = transport.run("echo still here", timeout=10, max_bytes=64)
                assert (result.stdout, result.exit_code) == (b"still here\n", 0)
            assert transport._conn.transport.is_active()
        [(gateway, _, _)] = gatherer.ssh._gateways.values()
        threads = [direct._conn.transport, jumped._conn.transport, gateway.transport]
    finally:
        t0 = time.monotonic()
        gatherer.close()
    for thread in threads:
        # "At once" is milliseconds; without the wake-up each thread sleeps out its 15 s poll,
        # started at its last packet, moments before the close.
        thread.join(max(0.0, 10 - (time.monotonic() - t0)))
        assert not thread.is_alive() and not thread.is_active()


def test_channels_numbered_above_1023_are_read(sim, tmp_path, fds_above_1023):
    # A controller holding a thousand connections hands out descriptors above 1023; select()
    # refused them ("filedescriptor out of range in select()"), so the last hosts of a
    # 1000-host run were reported unreachable.
    from preflight.gather import Gatherer, GatherSettings
    from preflight.inventory import load_inventory

    hosts = load_inventory(str(sim.write_inventory(tmp_path / "hosts.yaml"))).hosts
    gatherer = Gatherer(GatherSettings())
    try:
        transport = gatherer.transport(hosts[0])
        transport.connect()
        assert transport._conn.transport.sock.fileno() > 1023
        result = transport.run("echo out; echo err >&2; exit 3", timeout=10, max_bytes=64)
        assert (result.stdout, result.stderr, result.exit_code) == (b"out\n", b"err\n", 3)
        process = transport.start("echo ready; cat")
        try:
            assert process.readline(10) == "ready"
        finally:
            process.close()
    finally:
        gatherer.close()


def test_a_hard_open_files_limit_too_low_for_the_inventory_is_named_and_the_run_goes_on(sim, tmp_path):
    import json
    import resource
    import subprocess
    import sys

    inv = _inventory(sim, tmp_path)
    limit = 200  # 3 hosts ask for 256 + 4 x 3 = 268

    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    reports = tmp_path / "reports"
    proc = subprocess.run([sys.executable, "-m", "pytest", "--inventory", str(inv), "--report-dir", str(reports),
                           "-p", "no:cacheprovider", "-k", "reachable"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=180, preexec_fn=low_limit)
    assert ("warning: the open-files limit of this process (200, hard limit 200) is below the ~268 that 3 hosts' "
            "connections need") in proc.stdout, proc.stdout[-3000:]
    doc = json.loads((reports / "preflight.json").read_text())
    assert [h["reachable"] for h in doc["hosts"]] == [True, True, True]


def test_a_target_the_jump_host_cannot_reach_names_the_jump_host(sim, tmp_path):
    """The bastion's refused forward (ChannelException) read "node-02: SSH handshake failed:
    ChannelException(2, 'Connect failed')": blamed on the target's handshake, jump host unnamed."""
    bastion = sim.node("node-01")
    inv = _inventory(sim, tmp_path, hosts=["node-01"],
                     extra_hosts=[{"name": "node-02", "address": sim.node("node-02").address, "port": 1,
                                   "jump_host": f"root@{bastion.address}"}])
    proc, doc = run_preflight(inv, tmp_path / "r", "--connect-timeout", "5", "-k", "reachable")
    [r] = [r for r in doc["results"] if r["host"] == "node-02"]
    assert r["outcome"] == "failed", proc.stdout[-2000:]
    assert f"the jump host root@{bastion.address} could not open a connection to it" in r["message"], r["message"]
    assert "AllowTcpForwarding" in r["message"]
