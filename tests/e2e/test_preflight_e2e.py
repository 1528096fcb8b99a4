"""`pytest --inventory` end to end, against three simulated nodes with real sshd.

Each test injects one fault into an otherwise healthy cluster, runs the checker in a
subprocess exactly as an operator would, and asserts on preflight.json: the fault yields
exactly the expected results, and nothing else fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from preflight.parsers.system import parse_listening_ports

from .simcluster import nofile_ceiling

HEALTHY_SKIPS = {
    ("tools.pdsh", "node-02"), ("tools.pdsh", "node-03"),  # workers do not launch
    ("cluster.launcher_ssh", "node-02"), ("cluster.launcher_ssh", "node-03"),
    ("cluster.rendezvous", None),  # no MASTER_ADDR before the launcher sets it
    ("cluster.shared_storage", None),  # the default inventory names no shared path
    # node catalog: nothing to judge on the healthy nodes (no vllm-ascend, no triton, one process per NPU,
    # no checkpoint_dir or python_modules in the default inventory)
    *{(c, n) for c in ("versions.triton", "versions.vllm", "env.vllm_nz", "hccl.port_range", "storage.checkpoint_dir",
                       "packages.required") for n in ("node-01", "node-02", "node-03")},
}

NODE_CATALOG = {
    "versions.stack", "versions.torch_pair", "versions.mindspeed_megatron", "versions.triton", "versions.vllm",
    "versions.soc_match",
    "cluster.versions_agree", "env.cann_loaded", "env.nnal_atb", "env.single_cann", "env.visible_devices",
    "env.hccl_timeouts", "env.recommended", "env.vllm_nz", "hccl.device_ip", "hccl.net_health",
    "cluster.device_ip_unique", "npu.count_and_type", "cluster.hardware_agree", "npu.idle",
    "npu.driver_install_complete", "devices.driver_mounts", "net.firewall", "storage.checkpoint_dir",
    "hccl.port_range", "packages.required"}


@pytest.fixture(scope="module")
def inventory(sim_cluster, tmp_path_factory):
    # Some sandboxes cap the hard open-file limit below 65536; the healthy threshold
    # follows what a node here can have, and the fault (1024) stays far below it.
    ceiling = nofile_ceiling()
    minimum = min(65536, ceiling) if ceiling else 65536
    path = tmp_path_factory.mktemp("inv") / "hosts.yaml"
    return sim_cluster.write_inventory(path, head={"min_nofile": minimum}, worker={"min_nofile": minimum})


def run_env(tmp_path):
    """The run's environment, with a temporary folder of its own (``tmp_path/tmp``): what a run
    leaves there is its own, not the other xdist worker's run's."""
    (tmp_path / "tmp").mkdir(parents=True, exist_ok=True)
    return {**os.environ, "TMPDIR": str(tmp_path / "tmp")}


def run_preflight(inventory, tmp_path, *extra, timeout=180):
    tmp_path.mkdir(parents=True, exist_ok=True)
    reports = tmp_path / "reports"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--inventory", str(inventory), "--report-dir", str(reports),
         "-p", "no:cacheprovider", *extra],
        cwd=tmp_path, capture_output=True, text=True, timeout=timeout, env=run_env(tmp_path))
    doc = json.loads((reports / "preflight.json").read_text())
    return proc, doc


def still_listening(node, ports, seconds=30):
    """Which of ``ports`` something still listens on at ``node``, once its listeners have had
    ``seconds`` to exit (closing one waits a few seconds for its exit, not longer)."""
    deadline = time.monotonic() + seconds
    while True:
        left = ports & parse_listening_ports(node.run("cat /proc/net/tcp /proc/net/tcp6").stdout)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def problems(doc):
    return {(r["check"], r["host"], r["subject"], r["outcome"]) for r in doc["results"]
            if r["outcome"] not in ("passed", "skipped")}


def by_check(doc, check):
    return [r for r in doc["results"] if r["check"] == check]


def assert_explained(result):
    assert result["message"] and result["reference"], result
    if result["outcome"] == "failed":
        assert result["remedy"] and result["observed"] and result["expected"], result


def test_healthy_cluster_is_all_green(sim, inventory, tmp_path):
    proc, doc = run_preflight(inventory, tmp_path)
    assert problems(doc) == set(), proc.stdout[-3000:]
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert doc["ready"] is True
    skipped = {(r["check"], r["host"]) for r in doc["results"] if r["outcome"] == "skipped"}
    assert skipped == HEALTHY_SKIPS
    assert [h["name"] for h in doc["hosts"] if h["reachable"]] == ["node-01", "node-02", "node-03"]
    # Every check of the first set ran (later sets add more).
    assert {r["check"] for r in doc["results"]} >= {
        "cluster.reachable", "devices.davinci_nodes", "devices.management_nodes", "npu.health", "hccl.link_up",
        "hccl.tls_node", "cluster.tls_agree", "env.socket_ifname", "cluster.ifname_agree", "tools.pdsh",
        "limits.nofile", "cluster.ray_ports"} | NODE_CATALOG
    # One result per NPU for per-NPU checks.
    assert len([r for r in by_check(doc, "hccl.link_up") if r["host"] == "node-02"]) == 8
    assert "gathering facts: 3/3 hosts done" in proc.stdout
    for name in ("preflight.html", "matrix.html", "preflight.json"):
        assert (tmp_path / "reports" / name).stat().st_size > 0


def test_link_down_on_one_npu(sim, inventory, tmp_path):
    with sim.node("node-02").set_npu(3, link="DOWN"):
        proc, doc = run_preflight(inventory, tmp_path)
    found = problems(doc)
    assert ("hccl.link_up", "node-02", "npu3", "failed") in found
    # The same dead port also fails its RoCE pings; nothing else is affected.
    others = found - {("hccl.link_up", "node-02", "npu3", "failed")}
    assert {p[0] for p in others} <= {"cluster.device_ping"}, others
    assert all(("node-02" == p[1] and p[2].startswith("npu3->")) or p[2].endswith("node-02:npu3") for p in others)
    assert proc.returncode == 1
    [bad] = [r for r in by_check(doc, "hccl.link_up") if r["outcome"] == "failed"]
    assert_explained(bad)
    assert "hccn_tool -i 3 -link -g" in bad["message"] and "DOWN" in bad["message"]


def test_tls_on_for_one_node(sim, inventory, tmp_path):
    node = sim.node("node-03")
    undos = [node.set_npu(i, tls=1) for i in range(8)]
    try:
        proc, doc = run_preflight(inventory, tmp_path)
    finally:
        for undo in reversed(undos):
            undo.undo()
    assert problems(doc) == {("cluster.tls_agree", None, "node-03", "failed")}
    [bad] = [r for r in by_check(doc, "cluster.tls_agree") if r["outcome"] == "failed"]
    assert bad["outliers"] == ["node-03"]
    assert_explained(bad)


def test_tls_on_for_one_npu(sim, inventory, tmp_path):
    with sim.node("node-01").set_npu(5, tls=1):
        proc, doc = run_preflight(inventory, tmp_path)
    assert problems(doc) == {("hccl.tls_node", "node-01", "npu5", "failed"),
                             ("cluster.tls_agree", None, "node-01", "failed")}


def test_socket_interface_missing(sim, inventory, tmp_path):
    with sim.node("node-02").set_env(HCCL_SOCKET_IFNAME="eth9"):
        proc, doc = run_preflight(inventory, tmp_path)
    # node-02's own finding; the comparison marks node-02 as not compared (its cell not the others' pass).
    assert problems(doc) == {("env.socket_ifname", "node-02", "HCCL_SOCKET_IFNAME", "failed"),
                             ("cluster.ifname_agree", None, "HCCL_SOCKET_IFNAME on node-02", "error")}
    [bad] = [r for r in by_check(doc, "env.socket_ifname") if r["outcome"] == "failed"]
    assert "eth9" in bad["message"] and "eth0" in bad["message"]
    assert "set HCCL_SOCKET_IFNAME=eth0 for node-02" in bad["remedy"], bad["remedy"]  # the others' value
    assert_explained(bad)


def test_socket_interface_differs_between_nodes(sim, inventory, tmp_path):
    with sim.node("node-03").set_env(GLOO_SOCKET_IFNAME="lo"):
        proc, doc = run_preflight(inventory, tmp_path)
    # (lo is also no NIC for a multi-node job: node-03's own check says so)
    assert problems(doc) == {("cluster.ifname_agree", None, "GLOO_SOCKET_IFNAME", "failed"),
                             ("env.socket_ifname", "node-03", "GLOO_SOCKET_IFNAME", "failed")}
    [bad] = [r for r in by_check(doc, "cluster.ifname_agree") if r["outcome"] == "failed"]
    assert bad["outliers"] == ["node-03"]


def test_device_ip_route_by_another_nic_on_one_node(sim, inventory, tmp_path):
    # The FAQ's `ip route get <NPU device IP>`: node-03 alone sends its device network out of lo.
    node = sim.node("node-03")
    before = {n.name: n.ssh("ip -o route get 29.1.0.1 2>&1 || true").stdout for n in sim.nodes}
    node.run("ip route add 29.0.0.0/8 dev lo", check=True)
    try:
        proc, doc = run_preflight(inventory, tmp_path)
    finally:
        node.run("ip route del 29.0.0.0/8 dev lo", check=True)
    assert problems(doc) == {("cluster.ifname_agree", None, "NPU device IP route", "warning")}, before
    [bad] = [r for r in by_check(doc, "cluster.ifname_agree") if r["outcome"] == "warning"]
    assert bad["outliers"] == ["node-03"]
    assert_explained(bad)
    assert "node-03: lo, while node-[01-02] have no route to theirs" in bad["message"]
    assert "ip route get" in bad["remedy"] and bad["observed"] and bad["expected"]


def test_no_pdsh_on_the_head(sim, inventory, tmp_path):
    with sim.node("node-01").remove_tool("pdsh"):
        proc, doc = run_preflight(inventory, tmp_path)
    assert problems(doc) == {("tools.pdsh", "node-01", None, "failed")}


def test_ulimit_1024(sim, inventory, tmp_path):
    with sim.node("node-03").restart(nofile=1024):
        proc, doc = run_preflight(inventory, tmp_path)
    assert problems(doc) == {("limits.nofile", "node-03", None, "failed")}
    [bad] = [r for r in by_check(doc, "limits.nofile") if r["outcome"] == "failed"]
    assert "soft 1024, hard 1024" in bad["message"]


def test_davinci_node_missing(sim, inventory, tmp_path):
    with sim.node("node-02").remove_device("davinci3"):
        proc, doc = run_preflight(inventory, tmp_path)
    assert problems(doc) == {("devices.davinci_nodes", "node-02", None, "failed")}
    [bad] = [r for r in by_check(doc, "devices.davinci_nodes") if r["outcome"] == "failed"]
    assert "/dev/davinci3 missing" in bad["message"]


def test_ray_port_closed_by_a_firewall(sim, inventory, tmp_path, require_iptables):
    with sim.node("node-01").firewall(6379, "DROP"):
        proc, doc = run_preflight(inventory, tmp_path)
    # The head's own firewall check names the rule (a warning: the port checks are the errors).
    assert problems(doc) == {("cluster.ray_ports", "node-02", "node-01:6379", "failed"),
                             ("cluster.ray_ports", "node-03", "node-01:6379", "failed"),
                             ("net.firewall", "node-01", None, "warning")}
    for bad in (r for r in by_check(doc, "cluster.ray_ports") if r["outcome"] == "failed"):
        assert "no answer" in bad["message"] and bad["outliers"] == ["node-01"]
        assert_explained(bad)
    [rule] = [r for r in by_check(doc, "net.firewall") if r["outcome"] == "warning"]
    assert "--dport 6379 -j DROP drops Ray GCS 6379" in rule["message"], rule["message"]
    # The temporary listener on the head is gone afterwards.
    assert still_listening(sim.node("node-01"), {6379}) == set()


def test_a_workers_ray_worker_range_dropped(sim, inventory, tmp_path, require_iptables):
    """A worker whose firewall drops its own worker ports (the head's are open): found by the node
    probing that worker's range, named as the worker's port, an error (the job's calls to actors on
    that node would hang)."""
    with sim.node("node-03").firewall(19999, "DROP"):
        proc, doc = run_preflight(inventory, tmp_path)
    assert problems(doc) == {("cluster.ray_ports", "node-02", "node-03:19999", "failed"),
                             ("net.firewall", "node-03", None, "warning")}
    assert proc.returncode == 1
    [bad] = [r for r in by_check(doc, "cluster.ray_ports") if r["outcome"] == "failed"]
    assert "node-02 -> node-03 Ray worker range (last) port" in bad["message"] and "no answer" in bad["message"]
    assert_explained(bad)
    assert {r["subject"] for r in by_check(doc, "cluster.ray_ports") if r["host"] == "node-01"} == {
        "node-02:10002", "node-02:19999"}


def test_ray_port_rejected(sim, inventory, tmp_path, require_iptables):
    with sim.node("node-01").firewall(6379, "REJECT"):
        proc, doc = run_preflight(inventory, tmp_path)
    assert {(p[0], p[1], p[3]) for p in problems(doc)} == {("cluster.ray_ports", "node-02", "failed"),
                                                            ("cluster.ray_ports", "node-03", "failed"),
                                                            ("net.firewall", "node-01", "warning")}
    assert all("REJECT" in r["message"] for r in by_check(doc, "cluster.ray_ports") if r["outcome"] == "failed")


def test_one_host_down(sim, inventory, tmp_path):
    with sim.node("node-03").stop():
        proc, doc = run_preflight(inventory, tmp_path)
    found = problems(doc)
    assert {p for p in found if p[3] == "failed"} == {("cluster.reachable", "node-03", None, "failed")}
    # Everything else about node-03 is "not evaluated", and nothing about the other nodes fails.
    assert {p[1] for p in found} == {"node-03"}
    for r in doc["results"]:
        if r["host"] == "node-03" and r["check"] != "cluster.reachable":
            assert r["outcome"] == "error" and "unreachable" in r["message"]
    [host] = [h for h in doc["hosts"] if h["name"] == "node-03"]
    assert host["reachable"] is False and "refused" in host["error"]
    assert proc.returncode == 1


def test_host_key_not_in_known_hosts(sim, inventory, tmp_path):
    inv = sim.write_inventory(tmp_path / "hosts.yaml", exclude_known_hosts=["node-02"],
                              **_groups_of(inventory))
    proc, doc = run_preflight(inv, tmp_path)
    found = problems(doc)
    assert {p for p in found if p[3] == "failed"} == {("cluster.reachable", "node-02", None, "failed")}
    assert {p[1] for p in found} == {"node-02"}
    [bad] = [r for r in by_check(doc, "cluster.reachable") if r["host"] == "node-02"]
    assert "not in known_hosts" in bad["message"] and "known_hosts" in bad["remedy"]
    # Opting in accepts the unknown key (and records it), and the host is then checked.
    proc, doc = run_preflight(inv, tmp_path, "--accept-new-host-keys")
    assert problems(doc) == set(), proc.stdout[-2000:]
    assert sim.node("node-02").address in (tmp_path / "hosts.yaml.known_hosts").read_text()


def test_changed_host_key_is_always_refused(sim, inventory, tmp_path):
    with sim.node("node-01").regenerate_host_key():
        for extra in ((), ("--accept-new-host-keys",)):
            proc, doc = run_preflight(inventory, tmp_path, *extra)
            [bad] = [r for r in by_check(doc, "cluster.reachable") if r["host"] == "node-01"]
            assert bad["outcome"] == "failed", bad
            assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in bad["message"]
            # The entry as the inventory's known_hosts file holds it, in that file.
            kh = [ln.split()[0] for ln in open(sim.known_hosts_path) if ln.strip()
                  and sim.node("node-01").address in ln.split()[0].strip("[").split("]")[0].split(",")][0]
            assert f"ssh-keygen -R {kh} -f {sim.known_hosts_path}" in bad["message"], bad["message"]
            assert {p[3] for p in problems(doc) if p[1] != "node-01"} <= {"error"}  # ray: head unreachable


def test_an_identity_file_that_does_not_exist_is_named(sim, inventory, tmp_path):
    missing = tmp_path / "keys" / "id_missing"
    inv = sim.write_inventory(tmp_path / "hosts.yaml", defaults={"identity_file": str(missing)},
                              **_groups_of(inventory))
    proc = subprocess.run([sys.executable, "-m", "pytest", "--inventory", str(inv), "--report-dir",
                           str(tmp_path / "reports"), "-p", "no:cacheprovider"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=180, env=run_env(tmp_path))
    # A mistake in the inventory, said once with its line and key before any node is contacted:
    # it was every node failing to log in, exit 1, with a remedy about the nodes' sshd.
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    said = proc.stdout + proc.stderr
    assert f"identity_file: {missing} does not exist on this machine (hosts " in said, said[-2000:]
    assert f"{inv}:" in said


def _groups_of(inventory):
    import yaml

    data = yaml.safe_load(inventory.read_text())
    return dict(data.get("groups") or {})
