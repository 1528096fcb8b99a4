"""Node catalog (issue 3) end to end: one injected fault per new check on the simulated cluster,
caught by that check; the other node-catalog checks stay green (problems are filtered to the
node catalog so the assertions do not depend on the cross-node checks being built beside them)."""

from __future__ import annotations

import pytest

from .test_preflight_e2e import NODE_CATALOG, inventory, run_preflight  # noqa: F401 - fixture reused


def mine(doc):
    return {(r["check"], r["host"], r["subject"], r["outcome"]) for r in doc["results"]
            if r["outcome"] not in ("passed", "skipped") and r["check"] in NODE_CATALOG}


def only(doc, *checks):
    found = mine(doc)
    assert found and {c for c, *_ in found} <= set(checks), found
    for r in doc["results"]:
        if r["check"] in checks and r["outcome"] in ("failed", "warning"):
            assert r["message"] and r["reference"] and r["remedy"], r
    return found


def test_healthy_node_catalog_is_green(sim, inventory, tmp_path):
    _, doc = run_preflight(inventory, tmp_path)
    assert mine(doc) == set()
    assert NODE_CATALOG <= {r["check"] for r in doc["results"]}


def test_cann_env_only_in_interactive_shell(sim, inventory, tmp_path):
    node = sim.node("node-02")
    moved = {k: node.env[k] for k in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")}
    node.interactive_env = moved
    node.set_env(ASCEND_HOME_PATH=None, ASCEND_TOOLKIT_HOME=None)
    _, doc = run_preflight(inventory, tmp_path)
    found = only(doc, "env.cann_loaded")
    assert found == {("env.cann_loaded", "node-02", None, "failed")}
    [r] = [r for r in doc["results"] if r["check"] == "env.cann_loaded" and r["outcome"] == "failed"]
    assert "set in an interactive shell but not in a non-interactive SSH session" in r["message"]


@pytest.mark.parametrize("packages, check, also", [
    ({"torch_npu": "2.5.1"}, "versions.torch_pair", ()),
    ({"megatron_core": "0.7.0"}, "versions.mindspeed_megatron", ()),
    ({"triton": "3.1.0", "triton_ascend": "3.2.0"}, "versions.triton", ()),
    # vllm-ascend 0.11.0 was made for CANN 8.3.RC2 and torch_npu 2.7.1.post1: warnings beside NZ's
    ({"vllm_ascend": "0.11.0", "vllm": "0.11.0"}, "env.vllm_nz", ("versions.vllm",)),
    # (and triton-ascend 3.2.0 was made for CANN 8.5.x: the nodes run 8.2.RC1)
    ({"vllm_ascend": "0.13.0", "vllm": "0.11.0", "triton_ascend": "3.2.0"}, "versions.vllm",
     ("env.vllm_nz", "versions.triton")),
])
def test_python_stack_faults(sim, inventory, tmp_path, packages, check, also):
    sim.node("node-03").set_packages(**packages)
    _, doc = run_preflight(inventory, tmp_path)
    found = mine(doc)
    assert {(c, h) for c, h, _, _ in found if c == check} == {(check, "node-03")}, found
    # the odd node also disagrees with the others
    assert {c for c, *_ in found} <= {check, *also, "cluster.versions_agree", "versions.stack"}, found
    if check == "versions.vllm":
        assert ("versions.vllm", "node-03", "vllm", "failed") in found, found


def test_device_ip_missing_duplicate_and_net_health(sim, inventory, tmp_path):
    n1, n2 = sim.node("node-01"), sim.node("node-02")
    with n1.set_npu(2, ip=None), n2.set_npu(5, ip=n1.npu(4)["ip"]), n2.set_npu(1, net_health="Receive timeout"), \
            n1.set_npu(6, net_health="Init", netdetect=None):
        _, doc = run_preflight(inventory, tmp_path)
    found = only(doc, "hccl.device_ip", "hccl.net_health", "cluster.device_ip_unique")
    assert ("hccl.device_ip", "node-01", "npu2", "failed") in found
    assert ("hccl.net_health", "node-02", "npu1", "failed") in found
    assert ("hccl.net_health", "node-01", "npu6", "warning") in found
    assert any(c == "cluster.device_ip_unique" and o == "failed" for c, _, _, o in found)


def test_link_flapping_warns(sim, inventory, tmp_path):
    with sim.node("node-03").set_npu(0, link_up_count=9, link_down_count=8):
        _, doc = run_preflight(inventory, tmp_path)
    found = {f for f in mine(doc)} | {(r["check"], r["host"], r["subject"], r["outcome"]) for r in doc["results"]
                                       if r["check"] == "hccl.link_up" and r["outcome"] == "warning"}
    assert ("hccl.link_up", "node-03", "npu0", "warning") in found


def test_npu_busy_missing_and_driver_warning(sim, inventory, tmp_path):
    n2, n3 = sim.node("node-02"), sim.node("node-03")
    npus = [dict(n) for n in n3.state["npus"][:7]]
    with n2.set_state(processes=[{"npu": 4, "pid": 4242, "name": "python", "memory": 30000}],
                      driver_incomplete_warning=True), n3.set_state(npus=npus):
        _, doc = run_preflight(inventory, tmp_path)
    found = mine(doc)
    assert ("npu.idle", "node-02", "npu4", "warning") in found
    assert ("npu.driver_install_complete", "node-02", None, "failed") in found
    assert ("npu.count_and_type", "node-03", "count", "failed") in found
    assert any(c == "cluster.hardware_agree" for c, *_ in found)


def test_versions_files_faults(sim, inventory, tmp_path):
    node = sim.node("node-01")
    kernels = node.ascend_dir / "ascend-toolkit" / "8.2.RC1" / "opp_kernel" / "version.info"
    kernels.unlink()
    firmware = node.ascend_dir / "firmware" / "version.info"
    healthy = firmware.read_text()
    firmware.write_text("Version=7.1.0.11.220\nfirmware_version=1.0\npackage_version=23.0.7\n"
                        "compatible_version_drv=[23.0.rc3,23.0.rc3.],[23.0.0,23.0.0.]\n")
    try:
        _, doc = run_preflight(inventory, tmp_path)
    finally:
        firmware.write_text(healthy)
    found = mine(doc)
    assert ("versions.stack", "node-01", "kernels", "failed") in found
    assert ("versions.stack", "node-01", "driver/firmware", "failed") in found
    assert any(c == "cluster.versions_agree" and s == "firmware" for c, _, s, _ in found)


def test_env_faults(sim, inventory, tmp_path):
    node = sim.node("node-02")
    with node.set_env(ATB_HOME_PATH=None, HCCL_CONNECT_TIMEOUT=None, TASK_QUEUE_ENABLE=None,
                      ASCEND_RT_VISIBLE_DEVICES="0,9", SOC_VERSION="Ascend910_9391",
                      LD_LIBRARY_PATH="/usr/local/Ascend/ascend-toolkit/8.0.RC3/lib64:" + node.env["LD_LIBRARY_PATH"]):
        _, doc = run_preflight(inventory, tmp_path)
    found = {(c, s, o) for c, h, s, o in mine(doc) if h == "node-02"}
    assert ("env.nnal_atb", None, "failed") in found
    assert ("env.hccl_timeouts", "HCCL_CONNECT_TIMEOUT", "warning") in found
    assert ("env.recommended", "TASK_QUEUE_ENABLE", "warning") in found
    assert ("env.visible_devices", "ASCEND_RT_VISIBLE_DEVICES", "failed") in found
    assert ("versions.soc_match", None, "failed") in found
    assert ("env.single_cann", None, "failed") in found


def test_firewall_checkpoint_modules_port_range(sim, tmp_path):
    path = sim.write_inventory(tmp_path / "hosts.yaml",
                               worker={"checkpoint_dir": "/nonexistent/ckpt", "python_modules": ["json", "decord"],
                                       "processes_per_npu": 2})
    with sim.node("node-03").firewall(None, action="DROP", proto="udp"):
        _, doc = run_preflight(path, tmp_path)
    found = mine(doc)
    assert ("storage.checkpoint_dir", "node-02", "/nonexistent/ckpt", "warning") in found
    assert ("packages.required", "node-02", "decord", "failed") in found
    assert ("hccl.port_range", "node-03", None, "warning") in found
    assert ("net.firewall", "node-03", None, "warning") in found
