"""Every built-in check on a passing and a failing fact set (real captured outputs)."""

import json
import os
import stat

import pytest

from preflight.checks import cluster as cluster_checks
from preflight.checks import devices, env, hccl, limits, network, npu, tools
from preflight.facts import HostFacts
from preflight.parsers.versions import LOGIN_MARKER
from tests.factsets import (IFACES, cluster_of, fixture, healthy_raw, make_facts, make_host, out,
                            run_check, tls_line)


def outcomes(results):
    return {(r.subject, r.outcome) for r in results}


def failed(results):
    return [r for r in results if r.outcome in ("failed", "warning")]


def assert_explained(result, *needles):
    """A failure says what was observed and expected, where, the remedy and the source."""
    assert result.observed and result.expected
    assert result.remedy and result.reference
    for needle in needles:
        assert needle in result.message, (needle, result.message)


# -- cluster.reachable ----------------------------------------------------------------

def test_reachable_passes_for_a_gathered_host():
    host = make_host()
    results = run_check(cluster_checks.test_reachable, host=host, gathered=make_facts())
    assert [r.outcome for r in results] == ["passed"]


@pytest.mark.parametrize("kind, remedy_word", [("hostkey", "known_hosts"), ("auth", "authorized_keys"),
                                               ("unreachable", "sshd")])
def test_reachable_fails_with_a_remedy_for_the_cause(kind, remedy_word):
    host = make_host("node-03")
    gathered = HostFacts(host="node-03", reachable=False, error="node-03: connection refused", error_kind=kind)
    [result] = run_check(cluster_checks.test_reachable, host=host, gathered=gathered)
    assert result.outcome == "failed"
    assert_explained(result, "node-03", "connection refused")
    assert remedy_word in result.remedy
    if kind == "unreachable":  # the login to paste, this host's own
        assert "ssh -o BatchMode=yes root@node-03 true" in result.remedy, result.remedy


# -- devices ---------------------------------------------------------------------------

def test_davinci_nodes_pass_with_expected_count():
    host = make_host(npus_per_node=8)
    assert outcomes(run_check(devices.test_davinci_nodes, host=host, facts=make_facts())) == {(None, "passed")}


def test_davinci_nodes_count_from_npu_smi_without_inventory_expectation():
    assert outcomes(run_check(devices.test_davinci_nodes, host=make_host(), facts=make_facts())) == {(None, "passed")}


def test_missing_davinci_node_is_named():
    raw = healthy_raw()
    raw["dev.nodes"] = out("".join(line + "\n" for line in raw["dev.nodes"].stdout.splitlines()
                                   if not line.startswith("davinci3|")))
    [result] = run_check(devices.test_davinci_nodes, host=make_host(npus_per_node=8), facts=make_facts(raw=raw))
    assert result.outcome == "failed"
    assert_explained(result, "/dev/davinci3 missing", "node-01")
    assert "7 present" in result.message


def test_davinci_nodes_expectation_scales_with_chips_per_npu_on_a3():
    raw = healthy_raw(npus=16)
    raw["npu_smi.info"] = out(fixture("npu-smi/info/a3-ascend910-24.1.rc3.7-classic-idle.txt"))
    assert outcomes(run_check(devices.test_davinci_nodes, host=make_host(npus_per_node=8),
                              facts=make_facts(raw=raw))) == {(None, "passed")}
    raw = healthy_raw(npus=8)
    raw["npu_smi.info"] = out(fixture("npu-smi/info/a3-ascend910-24.1.rc3.7-classic-idle.txt"))
    [result] = run_check(devices.test_davinci_nodes, host=make_host(npus_per_node=8), facts=make_facts(raw=raw))
    assert result.outcome == "failed" and "davinci[8-15]" in result.message


def test_no_devices_and_no_expectation_fails():
    raw = healthy_raw()
    raw["dev.nodes"] = out("")
    raw["npu_smi.info"] = out("", rc=127)
    [result] = run_check(devices.test_davinci_nodes, host=make_host(), facts=make_facts(raw=raw))
    assert result.outcome == "failed" and "no /dev/davinciN" in result.message


def _container_npus_3_4(devices=(3, 4)):
    """A container given NPUs 3 and 4: /dev/davinci3 and 4, and npu-smi lists NPU 3 and 4 (labels, not indexes)."""
    raw = healthy_raw(npus=0)
    raw["dev.nodes"] = out("".join(f"davinci{i}|character special file|ec|{i:x}|root|root|660\n" for i in devices)
                           + raw["dev.nodes"].stdout)
    text = fixture("npu-smi/info/a2-910b1-23.0.rc3.3-busy-2npu-docstring.txt")
    for old, new in (("| 0     910B1", "| 3     910B1"), ("| 1     910B1", "| 4     910B1"),
                     ("| 0       0 ", "| 3       0 "), ("| 1       0 ", "| 4       0 ")):
        text = text.replace(old, new)
    raw["npu_smi.info"] = out(text)
    return raw


def test_davinci_nodes_are_labels_not_indexes_in_a_container():
    raw = _container_npus_3_4()
    [result] = run_check(devices.test_davinci_nodes, host=make_host(npus_per_node=2), facts=make_facts(raw=raw))
    assert result.outcome == "passed" and "davinci[3-4]" in result.message, result.message
    raw["npu_smi.info"] = out("", rc=127)  # npu-smi not mounted: the count still matches, whatever the numbers
    [result] = run_check(devices.test_davinci_nodes, host=make_host(npus_per_node=2), facts=make_facts(raw=raw))
    assert result.outcome == "passed", result.message
    [result] = run_check(devices.test_davinci_nodes, host=make_host(npus_per_node=2, chip="910B1"),
                         facts=make_facts(raw=raw))
    assert result.outcome == "passed", result.message


def test_davinci_missing_node_is_named_from_the_npu_smi_ids():
    raw = _container_npus_3_4(devices=(3,))
    [result] = run_check(devices.test_davinci_nodes, host=make_host(npus_per_node=2), facts=make_facts(raw=raw))
    assert result.outcome == "failed"
    assert_explained(result, "node-01", "/dev/davinci4 missing", "npu-smi info shows them as npu4", "1 present: davinci3")
    assert "davinci0" not in result.message and "davinci[0" not in result.message


def test_davinci_count_is_reported_when_missing_numbers_would_be_a_guess():
    # 3 NPUs expected, the container has davinci3 and davinci4 and npu-smi lists only those: no index is missing
    # that anyone can name (davinci0..2 would be a guess), so the count is what the result reports.
    raw = _container_npus_3_4()
    [result] = run_check(devices.test_davinci_nodes, host=make_host(npus_per_node=3), facts=make_facts(raw=raw))
    assert result.outcome == "failed"
    assert_explained(result, "node-01", "2 device nodes (davinci[3-4])", "expected 3 device nodes (npus_per_node=3)")
    assert "davinci0" not in result.message and "davinci[0" not in result.message and "missing" not in result.message
    raw["npu_smi.info"] = out("", rc=127)
    [result] = run_check(devices.test_davinci_nodes, host=make_host(npus_per_node=3), facts=make_facts(raw=raw))
    assert result.outcome == "failed" and "davinci[0" not in result.message and "2 device nodes" in result.message


def test_davinci_nodes_on_a3_without_npu_smi_take_chips_per_npu_from_the_inventory_chip():
    raw = healthy_raw(npus=16)
    raw["npu_smi.info"] = out("", rc=127)
    [result] = run_check(devices.test_davinci_nodes, host=make_host(npus_per_node=8, chip="Ascend910_9392"),
                         facts=make_facts(raw=raw))
    assert result.outcome == "passed", result.message
    assert "16 device nodes" in result.message and "2 chips per NPU" in result.message
    # Only 8 of the 16 dies exposed: the inventory chip says A3, so 8 nodes are missing, by name.
    raw = healthy_raw(npus=8)
    raw["npu_smi.info"] = out("", rc=127)
    [result] = run_check(devices.test_davinci_nodes, host=make_host(npus_per_node=8, chip="Ascend910_9392"),
                         facts=make_facts(raw=raw))
    assert result.outcome == "failed"
    assert_explained(result, "node-01", "/dev/davinci[8-15] missing", "16 device nodes", "2 chips per NPU")


def test_davinci_nodes_without_npu_smi_or_chip_are_an_error_not_a_failure():
    raw = healthy_raw(npus=16)
    raw["npu_smi.info"] = out("", rc=127)
    [result] = run_check(devices.test_davinci_nodes, host=make_host(npus_per_node=8), facts=make_facts(raw=raw))
    assert result.outcome == "error", result.message
    assert "node-01" in result.message and "16 device nodes" in result.message
    assert "chips" in result.message and "npu-smi info could not be read" in result.message
    assert result.observed and result.expected and result.reference
    assert "chip" in result.remedy and "npu-smi" in result.remedy
    # "Ascend910" is how npu-smi names both an A1 910A and an A3 die: it does not tell chips per NPU.
    [result] = run_check(devices.test_davinci_nodes, host=make_host(npus_per_node=8, chip="Ascend910"),
                         facts=make_facts(raw=raw))
    assert result.outcome == "error" and "Ascend910 does not tell" in result.message
    # Fewer nodes than NPUs is missing nodes whatever the chips per NPU.
    raw = healthy_raw(npus=6)
    raw["npu_smi.info"] = out("", rc=127)
    [result] = run_check(devices.test_davinci_nodes, host=make_host(npus_per_node=8), facts=make_facts(raw=raw))
    assert result.outcome == "failed" and "/dev/davinci[6-7] missing" in result.message
    assert "at least 8" in result.message


def test_management_nodes():
    assert {o for _, o in outcomes(run_check(devices.test_management_nodes, host=make_host(),
                                             facts=make_facts()))} == {"passed"}
    raw = healthy_raw()
    raw["dev.nodes"] = out(raw["dev.nodes"].stdout.replace("hisi_hdc|character special file", "hisi_hdc|regular file"))
    raw["dev.nodes"] = out("".join(line + "\n" for line in raw["dev.nodes"].stdout.splitlines()
                                   if not line.startswith("devmm_svm")))
    results = run_check(devices.test_management_nodes, host=make_host(), facts=make_facts(raw=raw))
    assert outcomes(results) == {("davinci_manager", "passed"), ("devmm_svm", "failed"), ("hisi_hdc", "failed")}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make device nodes and become nobody")
def test_device_nodes_a_non_root_login_cannot_open_fail():
    """/dev/davinci* are root:HwHiAiUser 660: a login outside that group found them all present and
    passed, and the job could not open one. The probe's own command, run in a folder of real
    device nodes as root and as nobody."""
    import shutil
    import tempfile

    dev = tempfile.mkdtemp(prefix="pf-dev-")  # pytest's own tmp_path is closed to other users
    try:
        os.chmod(dev, 0o755)
        for name, minor in (("davinci0", 0), ("davinci1", 1), ("davinci_manager", 2), ("devmm_svm", 3),
                            ("hisi_hdc", 4)):
            os.mknod(os.path.join(dev, name), 0o660 | stat.S_IFCHR, os.makedev(236, minor))
        _judge_device_access(dev)
    finally:
        shutil.rmtree(dev)


def _judge_device_access(dev):
    import subprocess

    from preflight.facts import FACTS

    command = FACTS["dev.nodes"].command.replace("cd /dev", f"cd {dev}", 1)
    as_root = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30).stdout
    as_nobody = subprocess.run(["su", "nobody", "-s", "/bin/bash", "-c", command], capture_output=True, text=True,
                               timeout=30).stdout
    for text, usable in ((as_root, True), (as_nobody, False)):
        raw = healthy_raw(npus=2)
        raw["dev.nodes"] = out(text)
        facts = make_facts(raw=raw)
        nodes = run_check(devices.test_davinci_nodes, host=make_host(npus_per_node=2), facts=facts)
        mgmt = run_check(devices.test_management_nodes, host=make_host(), facts=facts)
        if usable:
            assert {r.outcome for r in nodes + mgmt} == {"passed"}, [r.message for r in nodes + mgmt]
        else:
            [access] = [r for r in nodes if r.subject == "access"]
            assert access.outcome == "failed" and "/dev/davinci0 (root:root 6" in access.message, access.message
            assert "not readable and writable by the login user" in access.message and "HwHiAiUser" in access.remedy
            assert {(r.subject, r.outcome) for r in mgmt} == {(n, "failed") for n in
                                                               ("davinci_manager", "devmm_svm", "hisi_hdc")}


# -- npu.health ------------------------------------------------------------------------

def test_health_all_ok():
    results = run_check(npu.test_health, host=make_host(), facts=make_facts())
    assert len(results) == 8 and {r.outcome for r in results} == {"passed"}


@pytest.mark.parametrize("name, subject, outcome, severity", [
    ("a2-910b4-25.0.rc1.1-health-alarm-npu5.txt", "npu5", "failed", "error"),
    ("a2-910b4-25.0.rc1.1-health-critical-npu0.txt", "npu0", "failed", "error"),
    ("a2-910b4-25.0.rc1.1-health-unknown-npu7.txt", "npu7", "failed", "error"),
    ("a2-910b4-25.0.rc1.1-health-warning-npu3.txt", "npu3", "warning", "warning"),
])
def test_health_names_the_bad_chip(name, subject, outcome, severity):
    facts = make_facts(npu_smi_dot_info=out(fixture(f"npu-smi/info/{name}")))
    results = run_check(npu.test_health, host=make_host(), facts=facts)
    [bad] = failed(results)
    assert (bad.subject, bad.outcome, bad.severity) == (subject, outcome, severity)
    assert_explained(bad, "node-01 " + subject)


def test_health_on_a3_names_npu_and_chip():
    facts = make_facts(npu_smi_dot_info=out(fixture("npu-smi/info/a3-ascend910-24.1.rc3.7-classic-idle.txt")))
    results = run_check(npu.test_health, host=make_host(), facts=facts)
    assert {r.subject for r in results} >= {"npu0.chip0", "npu0.chip1", "npu7.chip1"}


# -- hccl ------------------------------------------------------------------------------

def test_link_up_all_up():
    results = run_check(hccl.test_link_up, host=make_host(), facts=make_facts())
    assert {o for _, o in outcomes(results)} == {"passed"} and len(results) == 8


def test_link_down_on_one_npu():
    facts = make_facts(**{"hccn.link__3": out(fixture("hccn_tool/link/down.txt"))})
    results = run_check(hccl.test_link_up, host=make_host(), facts=facts)
    [bad] = failed(results)
    assert bad.subject == "npu3"
    assert_explained(bad, "hccn_tool -i 3 -link -g", "DOWN")


def test_link_down_remedy_names_the_chip_npu_smi_resets():
    # hccn_tool -i takes the physical id; npu-smi's reset takes NPU and chip: on A3 phy 13 is NPU 6 chip 1.
    a3 = out(fixture("npu-smi/info/a3-ascend910-24.1.rc3.7-classic-idle.txt"))
    raw = healthy_raw(npus=16)
    raw["npu_smi.info"] = a3
    raw["hccn.link/13"] = out(fixture("hccn_tool/link/down.txt"))
    [bad] = failed(run_check(hccl.test_link_up, host=make_host(), facts=make_facts(raw=raw)))
    assert bad.subject == "npu13" and "npu13 (npu-smi NPU 6 chip 1)" in bad.message
    assert "npu-smi set -t reset -i 6 -c 1 -m 1" in bad.remedy and "hccn_tool -i 13 -optical -g" in bad.remedy
    # A2: one chip per NPU, the same number
    facts = make_facts(**{"hccn.link__3": out(fixture("hccn_tool/link/down.txt"))})
    [bad] = failed(run_check(hccl.test_link_up, host=make_host(), facts=facts))
    assert "npu-smi set -t reset -i 3 -c 0 -m 1" in bad.remedy and "(npu-smi" not in bad.message


def test_link_unreadable_is_an_error_for_that_npu_only():
    facts = make_facts(**{"hccn.link__2": out("", rc=124)})
    results = run_check(hccl.test_link_up, host=make_host(), facts=facts)
    assert ("npu2", "error") in outcomes(results)
    assert sum(1 for r in results if r.outcome == "passed") == 7
    assert "timed out" in next(r for r in results if r.subject == "npu2").message


def test_tls_node_uniform_and_mixed():
    assert outcomes(run_check(hccl.test_tls_node, host=make_host(), facts=make_facts())) == {(None, "passed")}
    raw = healthy_raw()
    raw["hccn.tls/5"] = out(tls_line(5, 1))
    [bad] = run_check(hccl.test_tls_node, host=make_host(), facts=make_facts(raw=raw))
    assert bad.outcome == "failed" and bad.subject == "npu5"
    assert_explained(bad, "npu5 tls switch[1] (on)", "npu[0-4,6-7] tls switch[0] (off)")
    assert "on node-01: hccn_tool -i 5 -tls -s enable 0" in bad.remedy  # the command for the NPU named
    assert "or switch it on on all the other NPUs instead, if the cluster is meant to use TLS" in bad.remedy
    # Most NPUs on, one off: switching the rest off (the FAQ's advice) is the alternative offered.
    raw = healthy_raw()
    for i in range(8):
        raw[f"hccn.tls/{i}"] = out(tls_line(i, 0 if i == 2 else 1))
    [bad] = run_check(hccl.test_tls_node, host=make_host(), facts=make_facts(raw=raw))
    assert "on node-01: hccn_tool -i 2 -tls -s enable 1" in bad.remedy
    assert "as the FAQ advises (TLS off throughout), switch it off on all the other NPUs instead" in bad.remedy


def test_tls_missing_switch_line_is_unknown_not_off():
    facts = make_facts(**{"hccn.tls__1": out("some certificate text only\n")})
    results = run_check(hccl.test_tls_node, host=make_host(), facts=facts)
    assert ("npu1", "error") in outcomes(results) and (None, "passed") in outcomes(results)


def test_tls_agree_across_nodes():
    hosts = [make_host(f"node-0{i}") for i in (1, 2, 3)]
    healthy = cluster_of(*[(h, make_facts(h.name)) for h in hosts])
    assert outcomes(run_check(hccl.test_tls_agree, cluster=healthy)) == {(None, "passed")}
    raw_on = healthy_raw()
    for i in range(8):
        raw_on[f"hccn.tls/{i}"] = out(tls_line(i, 1))
    mixed = cluster_of((hosts[0], make_facts("node-01")), (hosts[1], make_facts("node-02", raw=raw_on)),
                       (hosts[2], make_facts("node-03")))
    [bad] = run_check(hccl.test_tls_agree, cluster=mixed)
    assert bad.outcome == "failed" and bad.host is None and bad.outliers == ("node-02",)
    assert_explained(bad, "node-02 npu[0-7]")
    assert "on node-02: hccn_tool -i 0 -tls -s enable 0; hccn_tool -i 1 -tls -s enable 0;" in bad.remedy


def _tls_node(name, npus, on):
    raw = healthy_raw(npus=npus)
    for i in range(npus):
        raw[f"hccn.tls/{i}"] = out(tls_line(i, on))
    return make_facts(name, raw=raw)


def test_tls_agree_counts_the_majority_by_node():
    """Two 16-NPU nodes with TLS on outvoted three 8-NPU nodes with it off (32 NPUs against 24):
    the three were told to switch TLS on."""
    hosts = [make_host(f"node-0{i}") for i in range(1, 6)]
    cl = cluster_of(*[(h, _tls_node(h.name, 16 if i < 2 else 8, 1 if i < 2 else 0)) for i, h in enumerate(hosts)])
    [bad] = run_check(hccl.test_tls_agree, cluster=cl)
    assert bad.outcome == "failed" and bad.outliers == ("node-01", "node-02")
    assert_explained(bad, "node-01 npu[0-15]", "while the rest (node-[03-05]) has tls switch[0] (off)")
    assert "on node-01: hccn_tool -i 0 -tls -s enable 0" in bad.remedy and "enable 1" not in bad.remedy
    # A node mixed within itself has no vote; uniform nodes decide, and its odd NPUs are named.
    mixed = healthy_raw()
    for i in range(8):
        mixed[f"hccn.tls/{i}"] = out(tls_line(i, 1 if i < 6 else 0))
    cl = cluster_of((hosts[0], make_facts("node-01", raw=mixed)), (hosts[1], _tls_node("node-02", 8, 0)),
                    (hosts[2], _tls_node("node-03", 8, 0)))
    [bad] = run_check(hccl.test_tls_agree, cluster=cl)
    assert bad.outliers == ("node-01",) and "node-01 npu[0-5]" in bad.observed
    # Only mixed nodes: the NPUs are counted, as before.
    cl = cluster_of((hosts[0], make_facts("node-01", raw=mixed)), (hosts[1], make_facts("node-02", raw=mixed)))
    [bad] = run_check(hccl.test_tls_agree, cluster=cl)
    assert bad.outliers == ("node-01", "node-02") and "node-01 npu[6-7]" in bad.observed


def test_tls_agree_marks_a_node_it_could_not_read_as_not_evaluated():
    """Its matrix cell showed the others' pass (a green tick for a node nobody read)."""
    from preflight.report.matrix import cells

    hosts = [make_host(f"node-0{i}") for i in (1, 2, 3)]
    garbled = make_facts("node-03", **{"hccn.tls__0": out("some certificate text only\n")})
    cl = cluster_of((hosts[0], make_facts("node-01")), (hosts[1], make_facts("node-02")), (hosts[2], garbled))
    results = run_check(hccl.test_tls_agree, cluster=cl)
    assert outcomes(results) == {(None, "passed"), ("node-03", "error")}
    [unread] = [r for r in results if r.outcome == "error"]
    assert unread.outliers == ("node-03",) and "not evaluated on node-03" in unread.message and unread.remedy
    doc = {"hosts": [{"name": h.name, "reachable": True} for h in hosts],
           "results": [r.to_json() for r in results]}
    _, _, grid = cells(doc)
    assert grid[("node-03", "cluster.tls_agree")][0] == "error"
    assert grid[("node-01", "cluster.tls_agree")][0] == "passed"


# -- env -------------------------------------------------------------------------------

def test_ifname_agree_marks_a_node_whose_variable_selects_nothing():
    """Its cell showed the others' pass, and the message "all 2 nodes" in a 3-node cluster."""
    from preflight.report.matrix import cells

    hosts = [make_host(f"node-0{i}", address=f"10.0.0.{i}") for i in (1, 2, 3)]
    bad = make_facts("node-03", raw=healthy_raw(env={"HCCL_SOCKET_IFNAME": "eth9"}))
    cl = cluster_of((hosts[0], make_facts("node-01")), (hosts[1], make_facts("node-02")), (hosts[2], bad))
    results = [r for r in run_check(env.test_ifname_agree, cluster=cl) if r.subject != env.ROUTE_SUBJECT]
    [ok] = [r for r in results if r.outcome == "passed"]
    assert ok.message.startswith("HCCL_SOCKET_IFNAME selects eth0 on all 2 nodes where it selects one"), ok.message
    [unread] = [r for r in results if r.outcome == "error"]
    assert unread.outliers == ("node-03",) and "see env.socket_ifname" in unread.message and unread.remedy
    doc = {"hosts": [{"name": h.name, "reachable": True} for h in hosts], "results": [r.to_json() for r in results]}
    _, _, grid = cells(doc)
    assert grid[("node-03", "cluster.ifname_agree")][0] == "error"
    assert grid[("node-01", "cluster.ifname_agree")][0] == "passed"


def test_socket_ifname_present_and_missing():
    ok = run_check(env.test_socket_ifname, host=make_host(), facts=make_facts())
    assert outcomes(ok) == {("HCCL_SOCKET_IFNAME", "passed")}
    raw = healthy_raw(env={"HCCL_SOCKET_IFNAME": "eth9", "GLOO_SOCKET_IFNAME": "eth0"})
    results = run_check(env.test_socket_ifname, host=make_host(), facts=make_facts(raw=raw))
    assert outcomes(results) == {("HCCL_SOCKET_IFNAME", "failed"), ("GLOO_SOCKET_IFNAME", "passed")}
    bad = failed(results)[0]
    assert_explained(bad, "HCCL_SOCKET_IFNAME=eth9", "eth0 UP 10.0.0.1/24")
    # Alone, nothing tells which name is meant: no claim about "the other nodes".
    host = make_host(address="10.0.0.1")
    [bad] = failed(run_check(env.test_socket_ifname, host=host, facts=make_facts(raw=raw)))
    assert "other nodes" not in bad.remedy and bad.remedy == env.IFNAME_REMEDY
    # The others select eth0, which this node has: its own value is the fault (it was told to rename
    # eth0 to eth9, "the name the other nodes use").
    others = [make_host(f"node-0{i}", address=f"10.0.0.{i}") for i in (2, 3)]
    cl = cluster_of((host, make_facts("node-01", raw=raw)), *[(h, make_facts(h.name)) for h in others])
    [bad] = failed(run_check(env.test_socket_ifname, host=host, facts=cl.facts["node-01"], cluster=cl))
    assert bad.remedy.startswith("The other nodes (node-[02-03]) set HCCL_SOCKET_IFNAME=eth0, which selects eth0, and "
                                 "node-01 has eth0 too: set HCCL_SOCKET_IFNAME=eth0 for node-01 as well"), bad.remedy
    # The others select a NIC this node lacks: the NIC holding its own address is to take their name.
    renamed = json.loads(json.dumps(IFACES))
    renamed[1]["ifname"] = "enp189s0f0"
    theirs = healthy_raw(env={"HCCL_SOCKET_IFNAME": "enp189s0f0"}, interfaces=renamed)
    cl = cluster_of((host, make_facts("node-01", raw=raw)), *[(h, make_facts(h.name, raw=dict(theirs))) for h in others])
    [bad] = failed(run_check(env.test_socket_ifname, host=host, facts=cl.facts["node-01"], cluster=cl))
    assert "On node-01, eth0 carries 10.0.0.1" in bad.remedy, bad.remedy
    assert "the name the other nodes use (enp189s0f0, HCCL_SOCKET_IFNAME=enp189s0f0 on node-[02-03])" in bad.remedy


@pytest.mark.parametrize("value, outcome", [
    ("eth", "passed"), ("=eth0", "passed"), ("^=eth0", "failed"), ("^eth", "failed"), ("^lo", "passed"),
    ("enp,eth", "passed"), ("=eth1", "failed"), ("ib", "failed"), ("=eth9,eth0", "passed"), ("=eth9,ib0", "failed"),
])
def test_hccl_ifname_syntax(value, outcome):
    raw = healthy_raw(env={"HCCL_SOCKET_IFNAME": value})
    [result] = run_check(env.test_socket_ifname, host=make_host(), facts=make_facts(raw=raw))
    assert result.outcome == outcome, result.message


def test_hccl_exact_list_is_alternatives_gloo_list_is_not():
    """HCCL takes the first listed NIC present (CANN's example `==eth0,endvnic` names NICs of two
    kinds of node); gloo uses every NIC it is given, so each must exist."""
    raw = healthy_raw(env={"HCCL_SOCKET_IFNAME": "=eth9,eth0", "GLOO_SOCKET_IFNAME": "eth9,eth0"})
    results = run_check(env.test_socket_ifname, host=make_host(), facts=make_facts(raw=raw))
    assert outcomes(results) == {("HCCL_SOCKET_IFNAME", "passed"), ("GLOO_SOCKET_IFNAME", "failed")}
    hccl = next(r for r in results if r.subject == "HCCL_SOCKET_IFNAME")
    assert "selects eth0" in hccl.message and "eth9 not present or not usable here" in hccl.message
    assert_explained(failed(results)[0], "GLOO_SOCKET_IFNAME=eth9,eth0", "eth9, which does not exist")


def _eth0_down():
    ifaces = json.loads(json.dumps(IFACES))
    ifaces[1]["flags"] = ["BROADCAST", "MULTICAST", "NO-CARRIER", "UP"]
    ifaces[1]["operstate"] = "DOWN"
    return ifaces


def test_socket_ifname_down_interface():
    raw = healthy_raw(env={"TP_SOCKET_IFNAME": "eth0", "HCCL_SOCKET_IFNAME": None}, interfaces=_eth0_down())
    [result] = run_check(env.test_socket_ifname, host=make_host(), facts=make_facts(raw=raw))
    assert result.outcome == "failed" and "down or has no address" in result.message


def test_hccl_if_ip_must_be_an_address_of_the_node():
    """HCCL_IF_IP wins over any interface name: another node's address copied in cannot be bound."""
    for value, outcome, words in (("10.0.0.1", "passed", "HCCL_IF_IP=10.0.0.1 is on eth0 UP 10.0.0.1/24"),
                                  ("10.0.0.9", "failed", "HCCL_IF_IP=10.0.0.9 is not an address of node-01"),
                                  ("eth0", "failed", "HCCL_IF_IP=eth0 is not an IP address"),
                                  ("::ffff:10.0.0.1", "passed", "is on eth0 UP 10.0.0.1/24"),
                                  ("127.0.0.1", "warning", "is a loopback address: no other node can connect"),
                                  ("10.0.0.1%lo", "failed", "is not an address of node-01")):
        raw = healthy_raw(env={"HCCL_IF_IP": value, "HCCL_SOCKET_IFNAME": None})
        [r] = run_check(env.test_socket_ifname, host=make_host(), facts=make_facts(raw=raw))
        assert (r.subject, r.outcome) == ("HCCL_IF_IP", outcome), r
        assert words in r.message, r.message
        if outcome != "passed":
            assert_explained(r, words)


def test_hccl_if_ip_loopback_serves_a_single_node_inventory():
    raw = healthy_raw(env={"HCCL_IF_IP": "127.0.0.1", "HCCL_SOCKET_IFNAME": None})
    one = make_host()
    [r] = run_check(env.test_socket_ifname, host=one, facts=make_facts(raw=raw), cluster=cluster_of((one, make_facts())))
    assert r.outcome == "passed" and "single-node" in r.message


def test_hccl_if_ip_on_an_interface_that_is_down_fails():
    raw = healthy_raw(env={"HCCL_IF_IP": "10.0.0.1", "HCCL_SOCKET_IFNAME": None}, interfaces=_eth0_down())
    [r] = run_check(env.test_socket_ifname, host=make_host(), facts=make_facts(raw=raw))
    assert r.outcome == "failed" and "which is not up" in r.message, r


def test_tp_socket_ifname_takes_one_name_where_gloo_takes_a_list():
    raw = healthy_raw(env={"TP_SOCKET_IFNAME": "eth0,lo", "GLOO_SOCKET_IFNAME": "eth0,lo", "HCCL_SOCKET_IFNAME": None})
    results = run_check(env.test_socket_ifname, host=make_host(), facts=make_facts(raw=raw))
    assert outcomes(results) == {("TP_SOCKET_IFNAME", "failed"), ("GLOO_SOCKET_IFNAME", "failed")}
    tp = next(r for r in results if r.subject == "TP_SOCKET_IFNAME")
    assert_explained(tp, "TP_SOCKET_IFNAME=eth0,lo lists several interfaces", "TP_SOCKET_IFNAME=eth0")
    # gloo uses every NIC listed: lo among them is no network the other nodes share.
    gloo = next(r for r in results if r.subject == "GLOO_SOCKET_IFNAME")
    assert_explained(gloo, "GLOO_SOCKET_IFNAME=eth0,lo selects lo (lo UP 127.0.0.1/8), the loopback interface")


def test_socket_ifname_on_loopback_fails_a_multi_node_inventory_only():
    """A single-node launch script's `lo` copied to a cluster: HCCL, gloo and TensorPipe bind
    127.0.0.1, which no other node reaches (it passed as "selects lo, UP with an address")."""
    lo = {"HCCL_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo", "TP_SOCKET_IFNAME": "lo"}
    one, two = make_host("node-01", address="10.0.0.1"), make_host("node-02", address="10.0.0.2")
    facts = make_facts(raw=healthy_raw(env=lo))
    results = run_check(env.test_socket_ifname, host=one, facts=facts, cluster=cluster_of((one, facts), (two, facts)))
    assert outcomes(results) == {(v, "failed") for v in lo}
    assert_explained(results[0], "HCCL_SOCKET_IFNAME=lo selects lo (lo UP 127.0.0.1/8), the loopback interface: no "
                                 "other node reaches node-01 there")
    alone = run_check(env.test_socket_ifname, host=one, facts=facts, cluster=cluster_of((one, facts)))
    assert outcomes(alone) == {(v, "passed") for v in lo}
    # cluster.ifname_agree does not call "lo on every node" agreement.
    cl = cluster_of((one, make_facts(raw=healthy_raw(env=lo))), (two, make_facts(raw=healthy_raw(env=lo))))
    agree = {r.subject: r for r in run_check(env.test_ifname_agree, cluster=cl)}
    assert agree["HCCL_SOCKET_IFNAME"].outcome == "skipped" and "the loopback interface" in agree[
        "HCCL_SOCKET_IFNAME"].message


def test_socket_ifname_set_only_after_bashrcs_interactive_guard_fails():
    """Exported in ~/.bashrc below its `case $- in *i*) ;; *) return;; esac`: a login shell has it,
    the sessions pdsh and launchers start do not (it read as "no variable set", a skip)."""
    raw = healthy_raw(env={"HCCL_SOCKET_IFNAME": None})
    raw["session.env_login"] = out("Welcome\n" + LOGIN_MARKER + "\nHCCL_SOCKET_IFNAME=eth0\0PATH=/usr/bin\0")
    results = run_check(env.test_socket_ifname, host=make_host(), facts=make_facts(raw=raw))
    assert outcomes(results) == {("HCCL_SOCKET_IFNAME", "failed")}, results
    assert_explained(results[0], "HCCL_SOCKET_IFNAME is set in an interactive shell but not in a non-interactive "
                                 "SSH session")
    assert "before the interactive guard in ~/.bashrc" in results[0].remedy


def test_hccl_if_ip_and_the_connect_timeout_set_only_after_the_interactive_guard_fail():
    """HCCL_IF_IP below ~/.bashrc's guard read as unset (a skip: HCCL picks its own NIC), and an
    HCCL_CONNECT_TIMEOUT set there read only as "unset (default 120 s)", not saying where it is set."""
    raw = healthy_raw(env={"HCCL_SOCKET_IFNAME": None})
    raw["session.env_login"] = out(LOGIN_MARKER + "\nHCCL_IF_IP=10.0.0.1\0HCCL_CONNECT_TIMEOUT=1200\0PATH=/usr/bin\0")
    results = run_check(env.test_socket_ifname, host=make_host(), facts=make_facts(raw=raw))
    [r] = [r for r in results if r.subject == "HCCL_IF_IP"]
    assert r.outcome == "failed" and "HCCL_IF_IP is set in an interactive shell but not in" in r.message
    [r] = [r for r in run_check(env.test_hccl_timeouts, host=make_host(), facts=make_facts(raw=raw))
           if r.subject == "HCCL_CONNECT_TIMEOUT"]
    assert r.outcome == "warning" and "HCCL_CONNECT_TIMEOUT=1200 is set in an interactive shell" in r.message
    assert "before the interactive guard" in r.remedy


def test_a_socket_ifname_value_with_two_equals_signs_says_so():
    """`export HCCL_SOCKET_IFNAME==eth0` copied into the inventory as ==eth0: the remedy asked for a NIC
    to be renamed to "=eth0"."""
    results = run_check(env.test_socket_ifname, host=make_host(address="10.0.0.1"),
                        facts=make_facts(raw=healthy_raw(env={"HCCL_SOCKET_IFNAME": "==eth0"})))
    [r] = [r for r in results if r.subject == "HCCL_SOCKET_IFNAME"]
    assert r.outcome == "failed" and "the value holds two '='" in r.message, r.message
    assert 'HCCL_SOCKET_IFNAME: "=eth0"' in r.remedy and "udev" not in r.remedy


def test_hccl_socket_ifname_is_not_judged_where_hccl_if_ip_is_set():
    """HCCL reads HCCL_SOCKET_IFNAME only without HCCL_IF_IP (CANN docs): a stale name beside a good
    HCCL_IF_IP is no fault and must not block the launch."""
    raw = healthy_raw(env={"HCCL_SOCKET_IFNAME": "eth9", "HCCL_IF_IP": "10.0.0.1"})
    results = {r.subject: r for r in run_check(env.test_socket_ifname, host=make_host(), facts=make_facts(raw=raw))}
    assert results["HCCL_IF_IP"].outcome == "passed"
    assert results["HCCL_SOCKET_IFNAME"].outcome == "passed"
    assert "is not used: HCCL_IF_IP=10.0.0.1 takes precedence" in results["HCCL_SOCKET_IFNAME"].message
    # Nor is it missing from the session (set in the login shell only), nor different across nodes.
    raw = healthy_raw(env={"HCCL_SOCKET_IFNAME": None, "HCCL_IF_IP": "10.0.0.1"})
    raw["session.env_login"] = out("Welcome\n" + LOGIN_MARKER + "\nHCCL_SOCKET_IFNAME=eth0\0")
    results = run_check(env.test_socket_ifname, host=make_host(), facts=make_facts(raw=raw))
    assert outcomes(results) == {("HCCL_IF_IP", "passed")}, results
    one, two = make_host("node-01", address="10.0.0.1"), make_host("node-02", address="10.0.0.2")
    ifaces2 = json.loads(json.dumps(IFACES).replace("10.0.0.1", "10.0.0.2").replace('"eth0"', '"ens1"'))
    cl = cluster_of((one, make_facts("node-01", raw=healthy_raw(env={"HCCL_SOCKET_IFNAME": "eth0",
                                                                     "HCCL_IF_IP": "10.0.0.1"}))),
                    (two, make_facts("node-02", raw=healthy_raw(env={"HCCL_SOCKET_IFNAME": "ens1",
                                                                     "HCCL_IF_IP": "10.0.0.2"}, interfaces=ifaces2))))
    agree = {r.subject: r.outcome for r in run_check(env.test_ifname_agree, cluster=cl)}
    assert "HCCL_SOCKET_IFNAME" not in agree and "failed" not in agree.values(), agree


def test_gloo_socket_ifname_with_blanks_around_a_name_fails():
    raw = healthy_raw(env={"GLOO_SOCKET_IFNAME": "eth0, lo", "HCCL_SOCKET_IFNAME": None})
    [r] = run_check(env.test_socket_ifname, host=make_host(), facts=make_facts(raw=raw))
    assert_explained(r, "GLOO_SOCKET_IFNAME=eth0, lo: ' lo' has blanks around it", "GLOO_SOCKET_IFNAME=eth0,lo")


def test_socket_ifname_with_only_a_link_local_address_is_not_usable():
    # An interface that lost its IPv4 (DHCP or netplan failed) keeps the fe80:: address the
    # kernel gives every up interface: no other node reaches it there.
    ifaces = json.loads(json.dumps(IFACES))
    ifaces[1]["addr_info"] = [{"family": "inet6", "local": "fe80::6c34:91ff:fe87:3d46", "prefixlen": 64,
                               "scope": "link"}]
    raw = healthy_raw(env={"HCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"}, interfaces=ifaces)
    results = run_check(env.test_socket_ifname, host=make_host(), facts=make_facts(raw=raw))
    assert outcomes(results) == {("HCCL_SOCKET_IFNAME", "failed"), ("GLOO_SOCKET_IFNAME", "failed")}
    for r in results:
        assert_explained(r, "eth0 UP only the link-local fe80::6c34:91ff:fe87:3d46/64")


def test_socket_ifname_unset_is_skipped_and_inventory_env_counts():
    raw = healthy_raw(env={"HCCL_SOCKET_IFNAME": None})
    [skip] = run_check(env.test_socket_ifname, host=make_host(), facts=make_facts(raw=raw))
    assert skip.outcome == "skipped" and skip.message.endswith(
        "themselves; HCCL picks eth0 UP 10.0.0.1/24, the first NIC by name other than docker and lo)")
    host = make_host(env={"GLOO_SOCKET_IFNAME": "bond0"})
    results = run_check(env.test_socket_ifname, host=host, facts=make_facts(raw=raw))
    assert outcomes(results) == {("GLOO_SOCKET_IFNAME", "failed")}


def test_ifname_agree():
    hosts = [make_host(f"node-0{i}", address=f"10.0.0.{i}") for i in (1, 2, 3)]  # each its own eth0 address
    same = cluster_of(*[(h, make_facts(h.name)) for h in hosts])
    assert outcomes(run_check(env.test_ifname_agree, cluster=same)) == {("HCCL_SOCKET_IFNAME", "passed")}
    ifaces = json.loads(json.dumps(IFACES))
    ifaces[1]["ifname"] = "ens3"
    ifaces[1]["addr_info"][0]["local"] = "10.0.0.3"
    odd = make_facts("node-03", raw=healthy_raw(env={"HCCL_SOCKET_IFNAME": "ens3"}, interfaces=ifaces))
    differ = cluster_of((hosts[0], make_facts("node-01")), (hosts[1], make_facts("node-02")), (hosts[2], odd))
    [bad] = run_check(env.test_ifname_agree, cluster=differ)
    assert bad.outcome == "failed" and bad.outliers == ("node-03",)
    assert_explained(bad, "node-03: ens3", "node-[01-02] use eth0")


def test_ifname_agree_fails_a_bridge_every_node_has_and_a_copied_hccl_if_ip():
    """HCCL_SOCKET_IFNAME=^eth picked docker0 (172.17.0.1 on every node) and passed, as did one
    HCCL_IF_IP copied to every node; a node with HCCL_IF_IP was called "unset" for HCCL_SOCKET_IFNAME."""
    def node(name, i, env):
        nics = json.loads(json.dumps(IFACES))
        nics[1]["ifname"] = "enp189s0f0"
        nics[1]["addr_info"][0]["local"] = f"10.0.0.{i}"
        nics.append({"ifname": "docker0", "flags": ["UP"], "operstate": "UP",
                     "addr_info": [{"family": "inet", "local": "172.17.0.1", "prefixlen": 16}]})
        return make_facts(name, raw=healthy_raw(env=env, interfaces=nics))

    hosts = [make_host(f"node-0{i}", address=f"10.0.0.{i}") for i in (1, 2)]
    for env_ in ({"HCCL_SOCKET_IFNAME": "^eth"}, {"HCCL_SOCKET_IFNAME": "docker0"}):
        cl = cluster_of(*[(h, node(h.name, i, env_)) for h, i in zip(hosts, (1, 2))])
        [r] = [r for r in run_check(env.test_ifname_agree, cluster=cl) if r.subject == "HCCL_SOCKET_IFNAME"]
        assert r.outcome == "failed" and r.outliers == ("node-01", "node-02"), r.message
        assert_explained(r, "selects docker0 on node-[01-02], whose address 172.17.0.1 is on several nodes")
    cl = cluster_of(*[(h, node(h.name, i, {"HCCL_SOCKET_IFNAME": "enp189s0f0"})) for h, i in zip(hosts, (1, 2))])
    assert outcomes(run_check(env.test_ifname_agree, cluster=cl)) == {("HCCL_SOCKET_IFNAME", "passed")}
    # One HCCL_IF_IP on every node.
    cl = cluster_of(*[(h, node(h.name, i, {"HCCL_IF_IP": "172.17.0.1"})) for h, i in zip(hosts, (1, 2))])
    [r] = [r for r in run_check(env.test_ifname_agree, cluster=cl) if r.subject == "HCCL_IF_IP"]
    assert r.outcome == "failed" and "HCCL_IF_IP=172.17.0.1 on node-[01-02]: one address on several nodes" in r.message
    # HCCL_IF_IP on one node, HCCL_SOCKET_IFNAME on both: that node's name is not used, not "unset".
    cl = cluster_of((hosts[0], node("node-01", 1, {"HCCL_IF_IP": "10.0.0.1", "HCCL_SOCKET_IFNAME": "enp189s0f0"})),
                    (hosts[1], node("node-02", 2, {"HCCL_SOCKET_IFNAME": "enp189s0f0"})))
    assert outcomes(run_check(env.test_ifname_agree, cluster=cl)) == {("HCCL_SOCKET_IFNAME", "passed")}


def _routed(name, nic_of_npu, env=None, routes=None, default_nic="eth0"):
    """A node whose NPU device IPs (the a2-dev3 capture's, one per NPU) are routed by the given NICs:
    a NIC name is a route for that NPU's /24 by it, "default" the default route only, None none."""
    raw = healthy_raw(npus=len(nic_of_npu), env=env)
    table = [f"default via 10.0.0.254 dev {default_nic} proto static metric 100"] if default_nic else []
    for npu, nic in enumerate(nic_of_npu):
        ip = fixture("hccn_tool/ip/a2-dev3.txt").replace("29.1.112.213", f"29.1.{npu}.9")
        raw[f"hccn.ip/{npu}"] = out(ip)
        if nic is None:
            table.append(f"unreachable 29.1.{npu}.0/24")
        elif nic != "default":
            table.append(f"29.1.{npu}.0/24 via 192.168.0.1 dev {nic}")
    raw["net.routes"] = routes if routes is not None else out("\n".join(table) + "\n@@IPV6\n")
    return make_facts(name, raw=raw)


def test_ifname_agree_compares_the_route_to_the_npu_device_ips():
    hosts = [make_host(f"node-0{i}", address=f"10.0.0.{i}") for i in (1, 2, 3)]
    same = cluster_of(*[(h, _routed(h.name, ["eth1"] * 4)) for h in hosts])
    results = run_check(env.test_ifname_agree, cluster=same)
    assert outcomes(results) == {("HCCL_SOCKET_IFNAME", "passed"), (env.ROUTE_SUBJECT, "passed")}
    assert "all 3 nodes route their NPU device IPs by eth1" in results[-1].message

    # node-03 sends npu2-3's device IPs out of bond0: a warning naming it, with the route remedy.
    odd = cluster_of((hosts[0], _routed("node-01", ["eth1"] * 4)), (hosts[1], _routed("node-02", ["eth1"] * 4)),
                     (hosts[2], _routed("node-03", ["eth1", "eth1", "bond0", "bond0"])))
    [bad] = [r for r in run_check(env.test_ifname_agree, cluster=odd) if r.subject == env.ROUTE_SUBJECT]
    assert bad.outcome == "warning" and bad.outliers == ("node-03",)
    assert_explained(bad, "node-03: bond0, eth1", "node-[01-02] route theirs by eth1")
    assert "ip route get" in bad.remedy and bad.remedy != env.IFNAME_REMEDY


def test_ifname_agree_default_route_nics_are_not_compared():
    # Mixed hardware: the management NIC (the default route's) is eno1 here and enp61s0f0 there,
    # and no node routes its device network specially. Nothing for HCCL to trip on.
    hosts = [make_host(f"node-0{i}", address=f"10.0.0.{i}") for i in (1, 2, 3)]
    mixed = cluster_of((hosts[0], _routed("node-01", ["default"] * 2, default_nic="eno1")),
                       (hosts[1], _routed("node-02", ["default"] * 2, default_nic="enp61s0f0")),
                       (hosts[2], _routed("node-03", ["default"] * 2, default_nic="eno1")))
    [route] = [r for r in run_check(env.test_ifname_agree, cluster=mixed) if r.subject == env.ROUTE_SUBJECT]
    assert route.outcome == "passed" and "reach their NPU device IPs by the default route only" in route.message
    # One node has a route for the device network the others lack (or the reverse): that is named.
    one = cluster_of((hosts[0], _routed("node-01", ["default"] * 2)), (hosts[1], _routed("node-02", ["default"] * 2)),
                     (hosts[2], _routed("node-03", ["eth2", "eth2"])))
    [bad] = [r for r in run_check(env.test_ifname_agree, cluster=one) if r.subject == env.ROUTE_SUBJECT]
    assert bad.outliers == ("node-03",) and "node-03: eth2, while node-[01-02] reach theirs by the default route only" \
        in bad.message


def test_ifname_agree_multipath_order_and_npu_counts_do_not_matter():
    ecmp = "default via 10.0.0.254 dev eth0\n29.1.0.0/16 \\\tnexthop via 192.168.0.1 dev {} weight 1 " \
           "\\\tnexthop via 192.168.0.2 dev {} weight 1 \n@@IPV6\n"
    hosts = [make_host(f"node-0{i}", address=f"10.0.0.{i}") for i in (1, 2, 3, 4)]
    cl = cluster_of((hosts[0], _routed("node-01", ["x"] * 2, routes=out(ecmp.format("eth1", "eth2")))),
                    (hosts[1], _routed("node-02", ["x"] * 2, routes=out(ecmp.format("eth2", "eth1")))),
                    (hosts[2], _routed("node-03", ["x"] * 8, routes=out(ecmp.format("eth1", "eth2")))),
                    (hosts[3], _routed("node-04", ["x"] * 1, routes=out(ecmp.format("eth2", "eth1")))))
    [route] = [r for r in run_check(env.test_ifname_agree, cluster=cl) if r.subject == env.ROUTE_SUBJECT]
    assert route.outcome == "passed" and "by eth1, eth2" in route.message, route.message


def test_ifname_agree_routes_are_compared_without_socket_ifname_and_no_route_never_wins():
    hosts = [make_host(f"node-0{i}") for i in (1, 2)]
    unset = {"HCCL_SOCKET_IFNAME": None}
    split_even = cluster_of((hosts[0], _routed("node-01", ["eth1"] * 2, env=unset)),
                            (hosts[1], _routed("node-02", [None, None], env=unset)))
    [bad] = run_check(env.test_ifname_agree, cluster=split_even)
    assert bad.subject == env.ROUTE_SUBJECT and bad.outcome == "warning" and bad.outliers == ("node-02",)
    assert "node-02: no route" in bad.message
    [none] = run_check(env.test_ifname_agree, cluster=cluster_of(
        (hosts[0], _routed("node-01", [None], env=unset)), (hosts[1], _routed("node-02", [None], env=unset))))
    assert none.outcome == "passed" and "all 2 nodes have no route to their NPU device IPs" in none.message
    # Nothing to compare at all: skipped, saying so.
    [skip] = run_check(env.test_ifname_agree, cluster=cluster_of(
        (hosts[0], make_facts("node-01", raw=healthy_raw(env=unset)))))
    assert skip.outcome == "skipped" and "a single-node inventory" in skip.message
    # A single node with a socket variable set passed "on all 1 nodes": still nothing to compare.
    [skip] = run_check(env.test_ifname_agree, cluster=cluster_of((hosts[0], make_facts("node-01"))))
    assert skip.outcome == "skipped" and "a single-node inventory" in skip.message, skip


def test_ifname_agree_unreadable_routes_are_an_error_naming_the_hosts():
    hosts = [make_host(f"node-0{i}") for i in (1, 2, 3)]
    garbage = out("Object \"route\" is unknown, try \"ip help\".\n", rc=255)
    cl = cluster_of((hosts[0], _routed("node-01", ["eth1"] * 2)), (hosts[1], _routed("node-02", ["eth1"] * 2)),
                    (hosts[2], _routed("node-03", ["eth1"] * 2, routes=garbage)))
    results = {r.outcome: r for r in run_check(env.test_ifname_agree, cluster=cl) if r.subject == env.ROUTE_SUBJECT}
    assert set(results) == {"error", "passed"}
    assert "routing table unreadable on node-03" in results["error"].message
    assert "ip route show table main" in results["error"].message and results["error"].remedy
    assert "all 2 nodes" in results["passed"].message

    # The same reason on several nodes is one result naming them, each node its outlier.
    lost = [(h, _routed(h.name, ["eth1"] * 2)) for h in hosts]
    for _, facts in lost[1:]:
        del facts.raw["net.routes"]
    [unread] = [r for r in run_check(env.test_ifname_agree, cluster=cluster_of(*lost))
                if r.subject == env.ROUTE_SUBJECT and r.outcome == "error"]
    assert unread.message.startswith("routing table unreadable on node-[02-03]: `ip route show table main` was not "
                                     "gathered"), unread.message
    assert unread.outliers == ("node-02", "node-03")


# -- tools, limits ----------------------------------------------------------------------

def test_pdsh_on_launchers_only():
    head, worker = make_host("node-01", groups=["head"]), make_host("node-02", groups=["worker"])
    cl = cluster_of((head, make_facts("node-01")), (worker, make_facts("node-02")))
    assert outcomes(run_check(tools.test_pdsh, host=head, facts=make_facts(), cluster=cl)) == {(None, "passed")}
    assert outcomes(run_check(tools.test_pdsh, host=worker, facts=make_facts(), cluster=cl)) == {(None, "skipped")}
    missing = make_facts(tools_dot_pdsh=out("", rc=1))
    [bad] = run_check(tools.test_pdsh, host=head, facts=missing, cluster=cl)
    assert bad.outcome == "failed"
    assert_explained(bad, "pdsh not found")


def test_launcher_false_takes_a_head_out_of_the_launchers():
    """A Ray head that never runs pdsh: `launcher: false` was ignored for group head."""
    from preflight.activeprobe import launcher_hosts

    head = make_host("node-01", groups=["head"], launcher=False)
    login, worker = make_host("login", launcher=True), make_host("node-02", groups=["worker"])
    cl = cluster_of((head, make_facts("node-01")), (login, make_facts("login")), (worker, make_facts("node-02")))
    assert [h.name for h in launcher_hosts(cl)] == ["login"]
    missing = make_facts(tools_dot_pdsh=out("", rc=1))
    assert outcomes(run_check(tools.test_pdsh, host=head, facts=missing, cluster=cl)) == {(None, "skipped")}
    # The head opted out and no other launcher: no host launches with pdsh (the workers needed it).
    cl = cluster_of((head, make_facts("node-01")), (worker, make_facts("node-02")))
    [r] = run_check(tools.test_pdsh, host=head, facts=missing, cluster=cl)
    assert r.outcome == "skipped" and "(launcher: false)" in r.message
    [r] = run_check(tools.test_pdsh, host=worker, facts=missing, cluster=cl)
    assert r.outcome == "skipped" and "not in group head, nor launcher: true" in r.message
    # No head, one storage node opting out: pdsh is still needed everywhere else.
    plain, storage = make_host("node-03"), make_host("storage", launcher=False)
    cl = cluster_of((plain, make_facts("node-03")), (storage, make_facts("storage")))
    assert outcomes(run_check(tools.test_pdsh, host=plain, facts=missing, cluster=cl)) == {(None, "failed")}
    assert outcomes(run_check(tools.test_pdsh, host=storage, facts=missing, cluster=cl)) == {(None, "skipped")}


def test_pdsh_everywhere_when_no_launcher_is_marked():
    hosts = [make_host("node-01"), make_host("node-02")]
    cl = cluster_of(*[(h, make_facts(h.name)) for h in hosts])
    for host in hosts:
        [bad] = run_check(tools.test_pdsh, host=host, facts=make_facts(tools_dot_pdsh=out("", rc=1)), cluster=cl)
        assert bad.outcome == "failed"


def _pdsh(modules="ssh,rsh,exec", default="rsh"):
    return out(f"/usr/bin/pdsh\npdsh-2.34 (+readline+debug)\nrcmd modules: {modules} (default: {default})\n"
               "misc modules: machines,dshgroup,netgroup,genders\n")


def test_pdsh_without_its_ssh_module_fails_naming_the_package():
    head, worker = make_host("node-01", groups=["head"]), make_host("node-02")
    cl = cluster_of((head, make_facts("node-01")), (worker, make_facts("node-02")))
    [bad] = run_check(tools.test_pdsh, host=head, facts=make_facts(tools_dot_pdsh=_pdsh("rsh,exec")), cluster=cl)
    assert bad.outcome == "failed" and bad.severity == "error"
    assert_explained(bad, "no ssh rcmd module")
    assert "rsh,exec" in bad.observed and "pdsh-rcmd-ssh" in bad.remedy


def test_pdsh_with_its_ssh_module_passes_saying_what_a_plain_pdsh_uses():
    """Launchers choose ssh themselves (DeepSpeed sets PDSH_RCMD_TYPE=ssh): a default of rsh is said,
    not a warning on every stock Ubuntu launcher."""
    head, worker = make_host("node-01", groups=["head"]), make_host("node-02")
    cl = cluster_of((head, make_facts("node-01")), (worker, make_facts("node-02")))
    [ok] = run_check(tools.test_pdsh, host=head, facts=make_facts(tools_dot_pdsh=_pdsh()), cluster=cl)
    assert ok.outcome == "passed" and "a plain `pdsh -w` uses rsh (its default): pass -R ssh" in ok.message
    env = make_facts().get("session.env")
    chosen = make_facts(tools_dot_pdsh=_pdsh(), session_dot_env=out(
        "\0".join(f"{k}={v}" for k, v in {**env, "PDSH_RCMD_TYPE": "ssh"}.items()) + "\0"))
    [ok] = run_check(tools.test_pdsh, host=head, facts=chosen, cluster=cl)
    assert ok.outcome == "passed" and "uses ssh (PDSH_RCMD_TYPE=ssh)" in ok.message
    declared = make_host("node-01", groups=["head"], env={"PDSH_RCMD_TYPE": "ssh"})
    [ok] = run_check(tools.test_pdsh, host=declared, facts=make_facts(tools_dot_pdsh=_pdsh()), cluster=cl)
    assert ok.outcome == "passed" and "uses ssh (PDSH_RCMD_TYPE=ssh)" in ok.message
    # Only the ssh module (built with one module, pdsh names no default): ssh it is.
    only = out("/usr/bin/pdsh\npdsh-2.34 (+readline+debug)\nrcmd modules: ssh\nmisc modules: (none)\n")
    [ok] = run_check(tools.test_pdsh, host=head, facts=make_facts(tools_dot_pdsh=only), cluster=cl)
    assert ok.outcome == "passed" and "uses ssh (its default)" in ok.message


def test_pdsh_that_cannot_load_its_modules_fails():
    head, worker = make_host("node-01", groups=["head"]), make_host("node-02")
    cl = cluster_of((head, make_facts("node-01")), (worker, make_facts("node-02")))
    broken = out('/usr/bin/pdsh\npdsh@vm: Can\'t stat "/usr/lib/x86_64-linux-gnu/pdsh": No such file or directory\n'
                 "pdsh@vm: Couldn't load any pdsh modules\n")
    [bad] = run_check(tools.test_pdsh, host=head, facts=make_facts(tools_dot_pdsh=broken), cluster=cl)
    assert bad.outcome == "failed" and "does not start" in bad.observed
    assert "Couldn't load any pdsh modules" in bad.observed and "reinstall" in bad.remedy


def test_pdsh_follows_debians_rcmd_default_file():
    head, worker = make_host("node-01", groups=["head"]), make_host("node-02")
    cl = cluster_of((head, make_facts("node-01")), (worker, make_facts("node-02")))
    debian = out(_pdsh().stdout + "@@RCMD_DEFAULT ssh\n")
    [ok] = run_check(tools.test_pdsh, host=head, facts=make_facts(tools_dot_pdsh=debian), cluster=cl)
    assert ok.outcome == "passed" and "uses ssh (/etc/pdsh/rcmd_default)" in ok.message
    rsh = out(_pdsh(default="ssh").stdout + "@@RCMD_DEFAULT rsh\n")
    [ok] = run_check(tools.test_pdsh, host=head, facts=make_facts(tools_dot_pdsh=rsh), cluster=cl)
    assert ok.outcome == "passed" and "uses rsh (/etc/pdsh/rcmd_default)" in ok.message


def test_pdsh_whose_modules_are_unknown_passes_saying_so():
    head, worker = make_host("node-01", groups=["head"]), make_host("node-02")
    cl = cluster_of((head, make_facts("node-01")), (worker, make_facts("node-02")))
    [ok] = run_check(tools.test_pdsh, host=head, facts=make_facts(tools_dot_pdsh=out("/usr/bin/pdsh\n")), cluster=cl)
    assert ok.outcome == "passed" and "not listed" in ok.message


def test_pdsh_not_needed_on_a_single_node():
    host = make_host("node-01", groups=["head"])
    cl = cluster_of((host, make_facts("node-01")))
    [skip] = run_check(tools.test_pdsh, host=host, facts=make_facts(tools_dot_pdsh=out("", rc=1)), cluster=cl)
    assert skip.outcome == "skipped" and "single-node" in skip.message


@pytest.mark.parametrize("limits_text, host_vars, outcome", [
    ("65536 65536", {}, "passed"), ("unlimited unlimited", {}, "passed"), ("1024 1024", {}, "failed"),
    ("1024 65536", {}, "failed"), ("65536 65536", {"min_nofile": 1048576}, "failed"),
    ("4096 4096", {"min_nofile": 4096}, "passed"),
])
def test_nofile(limits_text, host_vars, outcome):
    [result] = run_check(limits.test_nofile, host=make_host(**host_vars),
                         facts=make_facts(session_dot_nofile=out(limits_text)))
    assert result.outcome == outcome
    if outcome == "failed":
        assert_explained(result, "ulimit -n soft")


def test_nofile_remedy_follows_which_limit_is_low():
    """A low hard limit needs limits.conf (with root's own lines: '*' does not cover root) or docker's
    --ulimit; a low soft limit under a high hard one is one `ulimit -n` in the launch script."""
    [hard] = run_check(limits.test_nofile, host=make_host(), facts=make_facts(session_dot_nofile=out("1024 4096")))
    assert "root hard nofile 65536" in hard.remedy and "docker run --ulimit nofile=65536:65536" in hard.remedy
    [soft] = run_check(limits.test_nofile, host=make_host(), facts=make_facts(session_dot_nofile=out("1024 1048576")))
    assert soft.remedy.startswith("The hard limit allows it: run `ulimit -n 65536`")
    [big] = run_check(limits.test_nofile, host=make_host(min_nofile=1048576),
                      facts=make_facts(session_dot_nofile=out("65536 65536")))
    assert "nofile=1048576:1048576" in big.remedy


# -- cluster.ray_ports --------------------------------------------------------------------

def _ray_cluster(record):
    head, worker = make_host("node-01", groups=["head"]), make_host("node-02", groups=["worker"])
    wf = make_facts("node-02")
    if record is not None:
        wf.raw["tcp.ray"] = out(record)
    return head, worker, wf, cluster_of((head, make_facts("node-01")), (worker, wf))


OPEN_REST = ("open node-01 8265 temporary\nopen node-01 10001 temporary\nopen node-01 10002 temporary\n"
             "open node-01 19999 temporary\n")


@pytest.mark.parametrize("record, outcome, words", [
    ("open node-01 6379 temporary", "passed", "temporary listener"),
    ("timeout node-01 6379 temporary no answer within 3s", "failed", "packets dropped"),
    ("refused node-01 6379 existing bash: connect: Connection refused", "failed", "REJECT"),
    ("refused node-01 6379 none bash: connect: Connection refused", "error", "cannot be told"),
    ("unreachable node-01 6379 temporary No route to host", "failed", "No route"),
])
def test_ray_gcs(record, outcome, words):
    _, worker, wf, cl = _ray_cluster(record + "\n" + OPEN_REST)
    results = run_check(network.test_ray_ports, host=worker, facts=wf, cluster=cl)
    [result] = [r for r in results if r.subject == "node-01:6379"]
    assert result.outcome == outcome and words in result.message
    assert {r.outcome for r in results if r.subject != "node-01:6379"} == {"passed"}


def test_ray_head_probes_the_first_workers_range_and_a_lone_head_is_skipped():
    head, _, _, cl = _ray_cluster("open node-01 6379 existing")
    cl.facts["node-01"].raw["tcp.ray"] = out("open node-02 10002 temporary\ntimeout node-02 19999 temporary x\n")
    results = run_check(network.test_ray_ports, host=head, facts=cl.facts["node-01"], cluster=cl)
    assert [(r.subject, r.outcome) for r in results] == [("node-02:10002", "passed"), ("node-02:19999", "failed")]
    assert "node-01 -> node-02 Ray worker range (last) port (node-02:19999): no answer" in results[1].message
    alone = cluster_of((head, make_facts("node-01")))
    [result] = run_check(network.test_ray_ports, host=head, facts=alone.facts["node-01"], cluster=alone)
    assert (result.outcome, result.message) == ("skipped", "node-01 is the Ray head and no worker is reachable")
    lone = make_host("node-05")
    cl = cluster_of((lone, make_facts("node-05")))
    assert run_check(network.test_ray_ports, host=lone, facts=make_facts(), cluster=cl)[0].outcome == "skipped"


def test_ray_without_probe_record_is_an_error():
    _, worker, wf, cl = _ray_cluster(None)
    [result] = run_check(network.test_ray_ports, host=worker, facts=wf, cluster=cl)
    assert result.outcome == "error" and "not gathered" in result.message


def test_checks_comparing_nodes_skip_a_single_node_and_say_when_none_was_reached():
    """A one-host inventory got "no node's TLS switch could be read" and "npu-smi info unreadable"
    from the cluster checks, repeating the host's own errors; with every host down,
    cluster.hardware_agree recorded nothing at all (found by review)."""
    from preflight.facts import HostFacts

    one = make_host("node-01")
    for func in (hccl.test_tls_agree, hccl.test_device_ip_unique, npu.test_hardware_agree):
        [r] = run_check(func, cluster=cluster_of((one, make_facts("node-01"))))
        assert r.outcome == "skipped" and "single-node inventory" in r.message, (func.__name__, r.message)
    hosts = [make_host(f"node-0{i}") for i in (1, 2)]
    down = [HostFacts(host=h.name, address=h.address, reachable=False, error=f"{h.name}: refused",
                      error_kind="unreachable") for h in hosts]
    for func in (hccl.test_tls_agree, hccl.test_device_ip_unique, npu.test_hardware_agree):
        [r] = run_check(func, cluster=cluster_of(*zip(hosts, down)))
        assert r.outcome == "error" and "no node was reached" in r.message, (func.__name__, r.message)
