"""The node catalog (issue 3): parsers on every fixture they read, and every check on a passing
and a failing fact set built from real captured outputs."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess

import pytest

from preflight import compat as C
from preflight.check import Verdict, info_of
from preflight.checks import checkpoint, devices, env, firewall, hccl, npu, packages, versions
from preflight.facts import FactUnavailable
from preflight.parsers import ParseError
from preflight.parsers import hccn_tool as hccn
from preflight.parsers import versions as pv
from tests.factsets import FIXTURES, cluster_of, fixture, healthy_raw, make_facts, make_host, out

TOOLKIT = "/usr/local/Ascend/ascend-toolkit/latest"
REAL = "/usr/local/Ascend/ascend-toolkit/8.2.RC1"
ATB = "/usr/local/Ascend/nnal/atb/latest/atb/cxx_abi_1"

HEALTHY_ENV = {
    "ASCEND_HOME_PATH": TOOLKIT, "ASCEND_TOOLKIT_HOME": TOOLKIT, "ASCEND_OPP_PATH": TOOLKIT + "/opp",
    "LD_LIBRARY_PATH": f"/usr/local/Ascend/driver/lib64:{TOOLKIT}/lib64:{ATB}/lib",
    "PYTHONPATH": f"{TOOLKIT}/python/site-packages", "PATH": f"{TOOLKIT}/bin:/usr/bin:/bin",
    "ATB_HOME_PATH": ATB, "HCCL_CONNECT_TIMEOUT": "1200", "TASK_QUEUE_ENABLE": "2", "CPU_AFFINITY_CONF": "2",
    "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True", "ASCEND_GLOBAL_LOG_LEVEL": "3",
}

PACKAGES = {"torch": "2.6.0", "torch_npu": "2.6.0", "mindspeed": "2.1.0", "megatron-core": "0.12.1"}


def frame_file(label, path, text):
    return f"@@F\t{label}\t{path}\n{text}\n@@E\n"


def files_output(driver="driver-version-info/25.0.rc1.1.txt", firmware="firmware-version-info/7.7.0.1.231.txt",
                 toolkit="toolkit-install-info/8.2.RC1-aarch64.txt", kernels="opp-kernel-version-info/8.2.RC1.txt",
                 atb="atb-version-info/8.2.RC1.txt", install="ascend_install.info/with-install-status-complete.txt",
                 libatb=True, root=TOOLKIT, real=REAL, extra="", socs=("ascend910b",), container=False):
    s = ""
    for label, rel, path in (("driver", driver, "/usr/local/Ascend/driver/version.info"),
                             ("firmware", firmware, "/usr/local/Ascend/firmware/version.info"),
                             ("install", install, "/etc/ascend_install.info")):
        if rel:
            s += frame_file(label, path, fixture(f"files/{rel}"))
    s += "@@L\tdriver_dir\t/usr/local/Ascend/driver\t/usr/local/Ascend/driver\n"
    for p in ("/usr/local/Ascend/driver/lib64", "/usr/local/Ascend/driver/version.info"):
        s += f"@@L\tpath\t{p}\t{p}\n"
    if container:
        s += "@@C\n"
    if toolkit:
        s += f"@@L\troot\t{root}\t{real}\n"
        s += frame_file(f"install_info:{root}", f"{root}/aarch64-linux/ascend_toolkit_install.info",
                        fixture(f"files/{toolkit}"))
        s += frame_file(f"toolkit_version:{root}", f"{root}/toolkit/version.info",
                        fixture("files/toolkit-version-info/8.2.RC1.txt"))
        if kernels:
            s += frame_file(f"kernels:{root}", f"{root}/opp_kernel/version.info", fixture(f"files/{kernels}"))
        for soc in socs:
            s += f"@@K\t{root}\t{soc}\n"
        s += f"@@L\troot\t{real}\t{real}\n"
    if atb:
        s += frame_file("atb", "/usr/local/Ascend/nnal/atb/latest/version.info", fixture(f"files/{atb}"))
    if libatb:
        s += f"@@L\tlibatb\t{ATB}/lib/libatb.so\t{ATB}/lib/libatb.so\n"
    return s + extra + "@@DONE\n"


def stack_output(packages=None, modules=None, version="3.10.12", build_info=None,
                 path=(f"{TOOLKIT}/python/site-packages",), **more):
    mods = {"acl": f"{TOOLKIT}/python/site-packages/acl.so", "torch": "/x/torch/__init__.py"}
    mods.update(modules or {})
    doc = {"executable": "/usr/bin/python3", "version": version, "packages": dict(PACKAGES if packages is None else packages),
           "modules": mods, "path": list(path), "build_info": build_info or {}, **more}
    return "@@PY " + json.dumps(doc) + "\n"


def login_output(env_):
    return "Welcome banner\n" + pv.LOGIN_MARKER + "\n" + "\0".join(f"{k}={v}" for k, v in env_.items()) + "\0"


def node_raw(env_=None, npus=8, **over):
    e = dict(HEALTHY_ENV)
    e.update(env_ or {})
    e = {k: v for k, v in e.items() if v is not None}
    raw = healthy_raw(npus=npus, env=e)
    raw["ascend.files"] = out(files_output())
    raw["python.stack"] = out(stack_output())
    raw["session.env_login"] = out(login_output({**e, "PS1": "$ "}))
    raw["npu_smi.board"] = out(fixture("npu-smi/board/a2-910b4-chip-npu0-c0-head.txt"))
    raw["net.firewall"] = out("firewalld=not running\niptables=-P INPUT ACCEPT\n")
    raw["storage.checkpoint"] = out("path=/ckpt\nexists=1\ndir=1\nwritable=1\navail_kb=524288000\nfs=nfs:/x\nmount=/ckpt\n")
    for i in range(npus):
        raw[f"hccn.ip/{i}"] = out(f"ipaddr:29.1.112.{10 + i}\nnetmask:255.255.0.0\n")
        raw[f"hccn.net_health/{i}"] = out(fixture("hccn_tool/net_health/success.txt"))
        raw[f"hccn.netdetect/{i}"] = out(fixture("hccn_tool/netdetect/address-form.txt"))
        raw[f"hccn.link_stat/{i}"] = out(fixture("hccn_tool/link_stat/devid-healthy.txt"))
    for k, v in over.items():
        raw[k.replace("__", "/").replace("_dot_", ".")] = v
    return raw


def run(func, host=None, facts=None, cluster=None, compat=None):
    class _Item:
        def get_closest_marker(self, name):
            return next((m for m in func.pytestmark if m.name == name), None)
    verdict = Verdict(info_of(_Item()), host.name if host else None)
    kwargs = {"verdict": verdict}
    params = func.__code__.co_varnames[:func.__code__.co_argcount]
    if cluster is None and host is not None and facts is not None and "cluster" in params:
        cluster = cluster_of((host, facts))  # a host check runs in a cluster: by default, this host's own
    for name, value in (("host", host), ("facts", facts), ("cluster", cluster),
                        ("compat", compat or C.load())):
        if name in params:
            kwargs[name] = value
    func(**kwargs)
    return verdict.results


def bad(results):
    return [r for r in results if r.outcome in ("failed", "warning")]


def ok(results):
    assert not [r for r in results if r.outcome in ("failed", "warning", "error")], [r.message for r in results]
    return results


def explained(r, *needles):
    assert r.observed and r.expected and r.remedy and r.reference, r
    for n in needles:
        assert n in r.message, (n, r.message)


def facts_of(**kw):
    return make_facts(raw=node_raw(**kw))


H = make_host(npus_per_node=8, chip="910B4")


# -- parsers ------------------------------------------------------------------------------

@pytest.mark.parametrize("rel", sorted(p.name for p in (FIXTURES / "files" / "driver-version-info").iterdir()))
def test_driver_version_info_fixtures(rel):
    info = pv.parse_driver_version_info(fixture(f"files/driver-version-info/{rel}"))
    assert info.version == rel.split("-")[0].removesuffix(".txt")
    assert info.firmware_ranges and info.firmware_ranges[0][0] == "7.0.0"


@pytest.mark.parametrize("rel", sorted(p.name for p in (FIXTURES / "files" / "firmware-version-info").iterdir()))
def test_firmware_version_info_fixtures(rel):
    info = pv.parse_firmware_version_info(fixture(f"files/firmware-version-info/{rel}"))
    assert info.version == rel.removesuffix(".txt") and "23.0.0" in info.driver_prefixes
    assert any(pv.driver_matches_prefix(pv.parse_kv(fixture(f"files/firmware-version-info/{rel}"))["package_version"], p)
               for p in info.driver_prefixes)


@pytest.mark.parametrize("driver, matched", [
    ("23.0.7", ["23.0.0"]), ("23.0.rc3", ["23.0.rc3"]), ("23.0.rc3.1", ["23.0.rc3"]),
    ("23.0.rc2", []), ("23.0.RC1", []), ("24.1.rc2", ["24.1"]), ("25.0.rc1.1", ["25.0"])])
def test_a_firmware_entry_naming_a_release_candidate_takes_that_candidate_only(driver, matched):
    """[23.0.rc3,23.0.rc3.] beside [23.0.0,23.0.0.] (firmware 7.1.0.11): read by major.minor alone, both
    took 23.0.rc1 and rc2, which that firmware does not list."""
    entries = ("23.0.rc3", "23.0.0", "24.0", "24.1", "25.0")
    assert [p for p in entries if pv.driver_matches_prefix(driver, p)] == matched


@pytest.mark.parametrize("rel, version, arch", [
    ("8.2.RC1-aarch64.txt", "8.2.RC1", "aarch64"), ("8.5.0-aarch64-cann-root.txt", "8.5.0", "aarch64"),
    ("8.5.0-x86_64-cann-root.txt", "8.5.0", "x86_64"), ("7.0.T10-aarch64-internal.txt", "7.0.T10", "aarch64")])
def test_toolkit_install_info_fixtures(rel, version, arch):
    kv = pv.parse_kv(fixture(f"files/toolkit-install-info/{rel}"))
    assert (kv["version"], kv["arch"]) == (version, arch)


def test_other_version_files():
    assert pv.parse_atb_version(fixture("files/atb-version-info/8.2.RC1.txt")) == "8.2.RC1"
    assert pv.parse_kv(fixture("files/opp-kernel-version-info/8.2.RC1.txt"))["version_dir"] == "8.2.RC1"
    assert pv.parse_kv(fixture("files/toolkit-version-info/8.2.RC1.txt"))["version_dir"] == "8.2.RC1"
    assert pv.parse_kv(fixture("files/nnae-install-info/8.0.RC3-x86_64.txt"))["version"] == "8.0.RC3"
    assert "driver_install_status" not in pv.parse_kv(fixture("files/ascend_install.info/no-install-status.txt"))
    assert pv.parse_kv(fixture("files/ascend_install.info/with-install-status-complete.txt"))[
        "driver_install_status"] == "complete"
    cfg = pv.parse_kv(fixture("files/version-cfg/cann-8.0.0.txt"))
    assert cfg["runtime_running_version"] == "[7.6.0.1.220:8.0.0]"
    assert "ascend_toolkit_home" not in pv.parse_kv(fixture("files/set_env.sh/ascend-toolkit-8.0.0.txt")) or True
    with pytest.raises(ParseError):
        pv.parse_driver_version_info("garbage\n")


def test_ascend_files_bundle_classic_and_85_layout():
    files = pv.parse_ascend_files(files_output())
    assert files.driver.version == "25.0.rc1.1" and files.firmware.version == "7.7.0.1.231"
    active = files.active_cann()
    assert (active.version, active.kernels_version, active.kernel_socs) == ("8.2.RC1", "8.2.RC1", ("ascend910b",))
    assert len(files.cann) == 1 and files.version_of_root(REAL) == "8.2.RC1"
    assert files.atb_version == "8.2.RC1" and files.libatb
    new = pv.parse_ascend_files(files_output(toolkit="toolkit-install-info/8.5.0-aarch64-cann-root.txt",
                                             root="/usr/local/Ascend/cann-8.5.0", real="/usr/local/Ascend/cann-8.5.0",
                                             kernels=None))
    assert new.active_cann().version == "8.5.0"
    empty = pv.parse_ascend_files("@@DONE\n")
    assert empty.driver is None and empty.cann == ()
    with pytest.raises(ParseError):
        pv.parse_ascend_files("bash: something\n")
    # Cut short: the @@L records of the driver and CANN folders come last and would be read as absent.
    whole = files_output()
    assert whole.endswith("@@DONE\n")
    with pytest.raises(ParseError, match="before its @@DONE marker"):
        pv.parse_ascend_files(whole[:whole.index("@@L\troot")])
    with pytest.raises(ParseError, match="ends inside /usr/local/Ascend/driver/version.info"):
        pv.parse_ascend_files(whole[:whole.index("@@E")])


@pytest.mark.parametrize("rel, soc, family", [
    ("a2-910b4-chip-npu0-c0-head.txt", "ascend910b4", "A2"), ("a3-9392-chip-npu0-c0-head.txt", "ascend910_9392", "A3"),
    ("a1-910a-chip-npu0-c0.txt", "ascend910a", "A1"), ("a1-910a-card-npu0-23.0.5.txt", None, None)])
def test_board_fixtures(rel, soc, family):
    board = pv.parse_board(fixture(f"npu-smi/board/{rel}"))
    assert board.npu_id == 0 and board.soc == soc and pv.soc_family(board.soc) == family


def board_with_card(chip="npu-smi/board/a2-910b4-chip-npu0-c0-head.txt", compatibility="OK",
                    driver="25.0.rc1.1", firmware="7.7.0.1.231"):
    """The BOARD probe's output: chip level, the @@CARD line, then the card level (the captured
    910A card block with the versions and verdict under test)."""
    card = (fixture("npu-smi/board/a1-910a-card-npu0-23.0.5.txt").replace("23.0.5", driver)
            .replace("7.1.0.7.220", firmware).replace(": OK", f": {compatibility}"))
    chip_text = fixture(chip) if chip else "Invalid card id.\n"
    return chip_text + "\n" + pv.BOARD_CARD_MARK + "\n" + card


def test_board_card_level():
    board = pv.parse_board(board_with_card())
    assert board.soc == "ascend910b4" and board.npu_id == 0
    assert (board.compatibility, board.driver_version, board.firmware_version) == ("OK", "25.0.rc1.1", "7.7.0.1.231")
    # -c 0 refused (a 950 takes no -c), the card level read alone; an older capture has no card level.
    alone = pv.parse_board(board_with_card(chip=None, compatibility="NOK"))
    assert alone.fields == {} and alone.soc is None and alone.compatibility == "NOK" and alone.npu_id == 0
    old = pv.parse_board(fixture("npu-smi/board/a2-910b4-chip-npu0-c0-head.txt"))
    assert old.card == {} and old.compatibility is None and old.soc == "ascend910b4"
    with pytest.raises(ParseError):
        pv.parse_board("Invalid card id.\n\n" + pv.BOARD_CARD_MARK + "\nInvalid card id.\n")


def test_board_invalid_card_is_an_error():
    with pytest.raises(ParseError):
        pv.parse_board(fixture("npu-smi/board/invalid-card-id.txt"))


@pytest.mark.parametrize("name", sorted(p.name for p in (FIXTURES / "hccn_tool" / "net_health").iterdir()))
def test_net_health_fixtures(name):
    status = hccn.parse_net_health(fixture(f"hccn_tool/net_health/{name}"))
    assert status and (status == "Success") == (name == "success.txt")


@pytest.mark.parametrize("name", ["addr-form.txt", "address-form.txt"])
def test_netdetect_fixtures(name):
    assert hccn.parse_netdetect(fixture(f"hccn_tool/netdetect/{name}"))


def test_ip_and_link_stat_fixtures():
    assert hccn.parse_ip(fixture("hccn_tool/ip/a2-dev3.txt")).address == "29.1.112.213"
    assert hccn.parse_ip(fixture("hccn_tool/ip/unconfigured-empty.txt")) is None
    for name in ("device-prefix-doc.txt", "devid-healthy.txt"):
        assert hccn.parse_link_stat(fixture(f"hccn_tool/link_stat/{name}")).up_count is not None


def test_python_stack_login_env_firewall_checkpoint_parsers():
    stack = pv.parse_python_stack("noise\n" + stack_output())
    assert stack.version_of("torch_npu") == "2.6.0" and stack.version_of("Torch-NPU") == "2.6.0"
    with pytest.raises(ParseError):
        pv.parse_python_stack("Traceback ...")
    assert pv.parse_login_env(login_output({"A": "1"})) == {"A": "1"}
    with pytest.raises(ParseError):
        pv.parse_login_env("bash: no job control\n")
    fw = pv.parse_firewall("firewalld=running\nufw=Status: inactive\niptables=-P INPUT ACCEPT\n"
                           "iptables=-A INPUT -p tcp -m tcp --dport 6379 -j DROP\niptables=-A INPUT -j REJECT\n")
    assert fw.active == ["firewalld is running", "iptables rule `-A INPUT -j REJECT`"]
    assert pv.parse_checkpoint("unset\n").path is None
    assert pv.parse_checkpoint("path=/c\nexists=0\ndir=0\nwritable=0\n").exists is False


def test_compat_data_ships_with_sources():
    table = C.load()
    assert table.data_version and all(table.source(r) for rows in table.tables.values() for r in rows)
    assert C.cmp_versions("8.2.RC1", "8.2.0") < 0 and C.cmp_versions("25.0.rc1.1", "25.0.rc1") > 0
    assert C.norm_pip("2.9.0.post1+git4c901a4") == "2.9.0.post1" and C.base_release("2.9.0+cpu") == "2.9.0"


def test_version_sort_keys_agree_with_the_comparison():
    """version_key sorts as cmp_versions compares (cut at its trailing zeros, 8.2.0 sorted below
    8.2.RC1); pip versions sort by pip's rules, post-releases after the release."""
    ascend = ["25.0.0", "8.2.RC1", "8.5.0", "8.2", "8.5.0.alpha001", "25.0.rc1.1", "8.2.1", "25.0.rc1", "8.5.0.B100"]
    ordered = sorted(ascend, key=C.version_key)
    assert ordered == ["8.2.RC1", "8.2", "8.2.1", "8.5.0.alpha001", "8.5.0.B100", "8.5.0", "25.0.rc1", "25.0.rc1.1",
                       "25.0.0"]
    assert all(C.cmp_versions(a, b) <= 0 for a, b in zip(ordered, ordered[1:]))
    assert C.version_key("8.2") == C.version_key("8.2.0")
    assert max(["2.1.0.rc1", "2.1.0.post8", "2.1.0.post3", "2.1.0", "2.1.0.post10"], key=C.pip_key) == "2.1.0.post10"
    assert C.pip_key("2.1.0+cpu") == C.pip_key("2.1.0") and C.pip_key("garbage") < C.pip_key("0.1")


def test_compat_file_extends_and_is_validated(tmp_path):
    extra = tmp_path / "c.yaml"
    extra.write_text("torch_npu:\n  - {torch_npu: '2.6.0', torch: '2.6.0', cann: ['8.3.RC1'], source: site}\n"
                     "known_bad:\n  - {when: {driver: '<25.0.rc1.1'}, why: site rule}\n")
    table = C.load([extra])
    row = next(r for r in table.rows("torch_npu") if r["torch_npu"] == "2.6.0")
    assert row["cann"] == ["8.3.RC1"] and table.known_bad
    # A site row replaces the shipped one however it spells the release (install.info writes 8.2.rc1).
    extra.write_text("cann_driver:\n  - {cann: '8.2.rc1', driver_min: '25.2.0', source: site}\n")
    rows = [r for r in C.load([extra]).rows("cann_driver") if r["cann"].upper() == "8.2.RC1"]
    assert [r["driver_min"] for r in rows] == ["25.2.0"]
    (tmp_path / "bad.yaml").write_text("torch_npu: {x: 1}\n")
    with pytest.raises(C.CompatError, match="bad.yaml"):
        C.load([tmp_path / "bad.yaml"])
    # A site row spelling a release otherwise (2.0.1rc1 for 2.0.1.rc1) replaces the shipped one.
    extra.write_text("torch_npu:\n  - {torch_npu: '2.0.1rc1', torch: '2.0.1', cann: ['6.3.RC9'], source: site}\n")
    rows = [r for r in C.load([extra]).rows("torch_npu") if C.pip_equal(r["torch_npu"], "2.0.1.rc1")]
    assert [r["cann"] for r in rows] == [["6.3.RC9"]]
    # pip's spelling of a known_bad key names the same package.
    extra.write_text("known_bad:\n  - {when: {torch-npu: '2.6.0', triton-ascend: '3.2.0'}, why: x}\n")
    assert C.load([extra]).known_bad[0]["when"] == {"torch_npu": "2.6.0", "triton_ascend": "3.2.0"}
    # A known_bad key the checks cannot read (misspelt, or not a version they read) is refused.
    (tmp_path / "kb.yaml").write_text("known_bad:\n  - {when: {torchnpu: '2.6.0', cann: '8.2.RC1'}, why: x}\n")
    with pytest.raises(C.CompatError, match=r"kb.yaml: known_bad\[0\] names torchnpu, which it cannot match"):
        C.load([tmp_path / "kb.yaml"])
    # A row without a column the checks read is refused when loaded, not a KeyError in every check.
    for text, words in (("torch_npu:\n  - {torch_npu: '2.6.0.post9', cann: ['8.3.RC2']}\n",
                         "the torch_npu row for '2.6.0.post9' has no 'torch' value"),
                        ("cann_driver:\n  - {cann: '8.3.RC2'}\n", "the cann_driver row for '8.3.RC2' has no "
                                                                 "'driver_min' value")):
        (tmp_path / "site.yaml").write_text(text)
        with pytest.raises(C.CompatError, match="site.yaml: " + re.escape(words)):
            C.load([tmp_path / "site.yaml"])


# -- versions.* -----------------------------------------------------------------------------

def test_stack_passes_on_a_published_set():
    results = ok(run(versions.test_stack, H, facts_of()))
    assert {r.subject for r in results} >= {"driver/firmware", "cann/driver", "kernels", "nnal", "torch_npu/cann"}


def test_stack_driver_firmware_mismatch_and_old_driver():
    raw = node_raw(ascend_dot_files=out(files_output(firmware="firmware-version-info/7.1.0.11.220.txt",
                                                     driver="driver-version-info/23.0.7.txt")))
    results = run(versions.test_stack, H, make_facts(raw=raw))
    subjects = {(r.subject, r.outcome) for r in bad(results)}
    assert ("cann/driver", "failed") in subjects
    r = next(r for r in bad(results) if r.subject == "cann/driver")
    explained(r, "driver 23.0.7 is older than CANN 8.2.RC1 needs", "25.0.rc1")
    assert r.remedy.startswith("Upgrade the NPU driver to 25.0.rc1 or newer with its firmware"), r.remedy
    raw = node_raw(ascend_dot_files=out(files_output(firmware="firmware-version-info/7.1.0.11.220.txt")))
    [r] = [x for x in bad(run(versions.test_stack, H, make_facts(raw=raw))) if x.subject == "driver/firmware"]
    explained(r, "not among the drivers firmware 7.1.0.11.220 accepts")
    # The HDK's remedy, not the CANN/torch one the check falls back to.
    assert r.remedy == versions.DRIVER_PAIR_REMEDY and "firmware first" in r.remedy and "torch" not in r.remedy
    # Inventory pins that the node does not meet say which to change.
    pinned = make_host(npus_per_node=8, chip="910B4", driver="25.2.0", cann="8.3.RC1")
    by = {x.subject: x for x in bad(run(versions.test_stack, pinned, facts_of()))}
    assert by["driver"].remedy.startswith("Install driver 25.2.0") and "correct `driver:`" in by["driver"].remedy
    assert by["cann"].remedy.startswith("Install CANN 8.3.RC1") and "correct `cann:`" in by["cann"].remedy


def test_a_firmware_driver_list_read_in_part_is_not_read_at_all():
    info = pv.parse_firmware_version_info("Version=7.7.0.1.231\ncompatible_version_drv=[24.1,24.1.],junk\n")
    assert info.driver_prefixes == () and info.driver_compat == "[24.1,24.1.],junk"


def test_a_firmware_driver_list_that_cannot_be_read_is_not_a_pass():
    """The driver side already said so for its compatible_version_fw; the firmware's list of drivers
    read as nothing to compare, and the pair passed."""
    fw = fixture("files/firmware-version-info/7.7.0.1.231.txt").replace(
        "compatible_version_drv=[23.0.0,23.0.0.],[24.0,24.0.],[24.1,24.1.],[25.0,25.0.]",
        "compatible_version_drv=23.0.0;24.0;24.1")
    files = files_output().replace(fixture("files/firmware-version-info/7.7.0.1.231.txt"), fw)
    assert "23.0.0;24.0;24.1" in files
    [r] = [r for r in run(versions.test_stack, H, make_facts(raw=node_raw(ascend_dot_files=out(files))))
           if r.subject == "driver/firmware"]
    assert r.outcome == "failed" and "compatible_version_drv=23.0.0;24.0;24.1 is not a list" in r.message, r


def test_a_driver_version_that_is_not_a_version_is_unreadable_not_too_old():
    """npu-smi in a container can print "NA" for the driver: compared, it read as older than any
    CANN needs, and as a driver the firmware does not accept."""
    files = files_output().replace("Version=25.0.rc1.1\n", "Version=NA\n")
    results = run(versions.test_stack, H, make_facts(raw=node_raw(ascend_dot_files=out(files))))
    by = {r.subject: r for r in results}
    assert by["cann/driver"].outcome == "error" and "reads 'NA', which is not a version" in by["cann/driver"].message
    assert by["driver/firmware"].outcome == "failed" and "Version=NA is not a version" in by["driver/firmware"].message
    assert not [r for r in results if "older" in r.message]
    # In a container without the version files, npu-smi's NA is the host's to judge, as the rest is.
    raw = node_raw(ascend_dot_files=out(files_output(driver=None, firmware=None, container=True)),
                   npu_smi_dot_board=out(board_with_card(driver="NA", compatibility="UNKNOWN")))
    by = {r.subject: r for r in run(versions.test_stack, H, make_facts(raw=raw))}
    assert by["cann/driver"].outcome == "skipped" and "the preflight run against the host" in by["cann/driver"].message


@pytest.mark.parametrize("compat, firmware, outcome, words", [
    ("[7.0.0,7.7.99]", "7.9.0.1.100", "failed", "outside the range"),
    ("[6.4.0,6.4.99],[7.0.0,7.7.99]", "7.9.0.1.100", "failed", "=[6.4.0,6.4.99],[7.0.0,7.7.99]"),
    ("[6.4.0,6.4.99],[7.0.0,7.7.99]", "6.4.12.1.241", None, None),
    ("[6.4.0,6.4.99],[7.0.0,7.7.99]", "7.7.0.1.231", None, None),
    ("7.0.0-7.7.99", "7.9.0.1.100", "failed", "is not a list of [min,max] ranges"),
], ids=["one-range-outside", "two-ranges-outside", "in-the-first", "in-the-second", "unreadable"])
def test_stack_reads_every_firmware_range_a_driver_lists(compat, firmware, outcome, words):
    """Drivers from 25.0 list several ranges (compatible_version_fw=[6.4.0,6.4.99],[7.0.0,7.7.99]):
    the one-range pattern read none and the pairing passed without a comparison (found by review)."""
    files = files_output().replace("compatible_version_fw=[7.0.0,7.7.99]", f"compatible_version_fw={compat}")
    files = files.replace("Version=7.7.0.1.231", f"Version={firmware}")
    assert f"compatible_version_fw={compat}" in files and f"Version={firmware}" in files
    [r] = [x for x in run(versions.test_stack, H, make_facts(raw=node_raw(ascend_dot_files=out(files))))
           if x.subject == "driver/firmware"]
    if outcome is None:
        assert r.outcome == "passed", r.message
    else:
        assert r.outcome == outcome
        explained(r, words, f"firmware {firmware}")


def _cann_driver(cann, driver):
    files = files_output().replace("version=8.2.RC1\ninnerversion", f"version={cann}\ninnerversion")
    files = files.replace("Version=25.0.rc1.1\n", f"Version={driver}\n")
    [r] = [x for x in run(versions.test_stack, H, make_facts(raw=node_raw(ascend_dot_files=out(files))))
           if x.subject == "cann/driver"]
    assert f"CANN {cann}" in r.message and f"driver {driver}" in r.message, r.message
    return r


@pytest.mark.parametrize("cann, driver, outcome, says", [
    # Listed from the CANN 9.1.0 release notes: 9.0.X runs on HDK 25.0.X and newer, 9.1.X on 25.2.X and newer.
    ("9.0.0", "25.0.rc1.1", "passed", "needs >= 25.0.rc1"), ("9.1.0", "25.0.rc1.1", "failed", "25.2.0 or newer"),
    ("9.1.0", "25.3.rc1", "passed", "needs >= 25.2.0"),
    # Between two listed releases that need the same driver (8.2.RC1 and 8.5.0: 25.0.rc1): known.
    ("8.3.RC1", "25.0.rc1.1", "passed", "already serves the newer CANN 8.5.0"),
    ("8.3.RC2", "23.0.7", "failed", "the older CANN 8.2.RC1 already needs driver 25.0.rc1"),
    # Newer than the table: at least the newest listed release's minimum, else unknown.
    ("9.3.0", "24.1.rc2", "failed", "the older CANN 9.1.0 already needs driver 25.2.0"),
    ("9.3.0", "25.5.0", "warning", "not in the table; the table's nearest older release, CANN 9.1.0, needs driver 25.2.0"),
])
def test_cann_driver_for_releases_the_table_does_not_list(cann, driver, outcome, says):
    r = _cann_driver(cann, driver)
    assert r.outcome == outcome and says in r.message, r.message
    if outcome != "passed":
        explained(r)


def test_cann_driver_minimum_follows_the_chip_where_310p_differs():
    """HDK table (Ascend/docs package_info.js): CANN 7.0.0 wants driver 23.0.3 on 910b, 23.0.1 on 310p."""
    row = next(r for r in C.load().rows("cann_driver") if r["cann"] == "7.0.0")
    smi_310p = out(fixture("npu-smi/info/310p3-24.1.rc2-host-npu1-2.txt"))
    assert versions._driver_min(row, facts_of()) == "23.0.3"
    card_310p = node_raw(npu_smi_dot_info=smi_310p)
    del card_310p["npu_smi.board"]  # no 310P board capture: npu-smi info's chip name tells
    assert versions._driver_min(row, make_facts(raw=card_310p)) == "23.0.1"
    newer = next(r for r in C.load().rows("cann_driver") if r["cann"] == "8.2.RC1")
    assert versions._driver_min(newer, make_facts(raw=card_310p)) == "25.0.rc1"


def test_stack_off_table_torch_npu_is_a_warning_and_expectations_fail():
    raw = node_raw(python_dot_stack=out(stack_output(packages={**PACKAGES, "torch": "2.4.0", "torch_npu": "2.4.0.post2"})))
    [r] = bad(run(versions.test_stack, H, make_facts(raw=raw)))
    assert r.outcome == "warning" and "not a published pairing" in r.message
    results = bad(run(versions.test_stack, make_host(cann="8.3.RC1", driver="24.1.rc2"), facts_of()))
    assert {r.subject for r in results} == {"cann", "driver"}


def test_stack_missing_kernels_and_toolkit():
    raw = node_raw(ascend_dot_files=out(files_output(kernels=None)))
    [r] = bad(run(versions.test_stack, H, make_facts(raw=raw)))
    explained(r, "opp_kernel/version.info missing")
    raw = node_raw(ascend_dot_files=out(files_output(toolkit=None)))
    assert ("cann", "failed") in {(r.subject, r.outcome) for r in run(versions.test_stack, H, make_facts(raw=raw))}


def test_stack_unreadable_driver_is_an_error_not_a_guess():
    raw = node_raw(ascend_dot_files=out(files_output(driver=None)))
    results = run(versions.test_stack, H, make_facts(raw=raw))
    assert ("driver/firmware", "error") in {(r.subject, r.outcome) for r in results}


@pytest.mark.parametrize("driver, firmware", [(None, None), ("driver-version-info/25.0.rc1.1.txt", None),
                                               (None, "firmware-version-info/7.7.0.1.231.txt")])
def test_stack_in_a_container_without_version_files_is_skipped_for_the_host_to_judge(driver, firmware):
    # The Ascend docker runtime mounts driver/lib64 but not driver/ or firmware/version.info (ascend-formats 5.2).
    raw = node_raw(ascend_dot_files=out(files_output(driver=driver, firmware=firmware, container=True)))
    results = ok(run(versions.test_stack, H, make_facts(raw=raw)))  # no error: the node can be READY
    [r] = [x for x in results if x.subject == "driver/firmware"]
    assert r.outcome == "skipped"
    for needle in ("node-01 is a container", "not found", "version.info:/usr/local/Ascend/driver/version.info:ro",
                   "/usr/local/Ascend/firmware/version.info:ro", "against the host"):
        assert needle in r.message, (needle, r.message)
    if driver is None:
        assert "/usr/local/Ascend/driver/version.info" in r.message.split("not found")[0]
        assert "CANN minimum driver" in r.message
    else:  # the driver's version is known, so the CANN minimum is still judged here
        assert ("cann/driver", "passed") in {(x.subject, x.outcome) for x in results}


def test_stack_in_a_container_reads_the_pairing_from_npu_smi():
    def stack(compatibility, driver="25.0.rc1.1", container=True, files_driver=None):
        raw = node_raw(ascend_dot_files=out(files_output(driver=files_driver, firmware=None if container else
                                                         "firmware-version-info/7.7.0.1.231.txt",
                                                         container=container)),
                       npu_smi_dot_board=out(board_with_card(compatibility=compatibility, driver=driver)))
        return {x.subject: x for x in run(versions.test_stack, H, make_facts(raw=raw))}

    ok_ = stack("OK")
    assert ok_["driver/firmware"].outcome == "passed"
    assert "driver 25.0.rc1.1, firmware 7.7.0.1.231: Compatibility OK (npu-smi info -t board -i 0" in \
        ok_["driver/firmware"].message
    assert ok_["cann/driver"].outcome == "passed"  # the CANN minimum from npu-smi's driver version
    nok = stack("NOK")
    explained(nok["driver/firmware"], "npu-smi info -t board -i 0 on node-01 reports Compatibility NOK")
    old = stack("OK", driver="23.0.5")
    explained(old["cann/driver"], "driver 23.0.5 is older than CANN 8.2.RC1 needs")
    assert stack("UNKNOWN")["driver/firmware"].outcome == "skipped"
    # Outside a container the version files judge, and npu-smi's NOK is one more finding.
    host = stack("NOK", container=False, files_driver="driver-version-info/25.0.rc1.1.txt")["driver/firmware"]
    explained(host, "reports Compatibility NOK")


def test_stack_missing_version_files_outside_a_container_is_an_error_with_a_remedy():
    raw = node_raw(ascend_dot_files=out(files_output(driver=None, firmware=None)))
    [r] = [x for x in run(versions.test_stack, H, make_facts(raw=raw)) if x.subject == "driver/firmware"]
    assert r.outcome == "error"
    assert r.remedy and "npu-driver" in r.remedy and "npu-firmware" in r.remedy and ":ro" in r.remedy
    assert r.observed and r.expected and r.reference
    assert "node-01" in r.message and "/usr/local/Ascend/firmware/version.info" in r.message
    assert "container" not in r.message


@pytest.mark.parametrize("torch, tnpu, outcome", [
    ("2.6.0", "2.6.0", "passed"), ("2.1.0+cpu", "2.1.0.post8.dev20241009", "passed"),
    ("2.5.1", "2.6.0", "failed"), (None, "2.6.0", "failed")])
def test_torch_pair(torch, tnpu, outcome):
    pk = {k: v for k, v in {**PACKAGES, "torch": torch, "torch_npu": tnpu}.items() if v}
    [r] = run(versions.test_torch_pair, H, facts_of(python_dot_stack=out(stack_output(packages=pk))))
    assert r.outcome == outcome
    if outcome == "failed":
        explained(r)
    if torch == "2.5.1":  # the command with this node's versions, not X.Y.Z placeholders
        assert "-m pip install torch_npu==2.5.1.post" in r.remedy and "pip install torch==2.6.0" in r.remedy


@pytest.mark.parametrize("cann, tnpu", [("8.0.RC2", "1.11.0.post14"), ("6.3.RC3.1", "1.11.0.post3")])
def test_the_historical_torch_npu_releases_are_in_the_table(cann, tnpu):
    """Ascend/pytorch's table keeps its 1.x releases in a <details> section: they were "not in the
    table" warnings (failures under --strict)."""
    files = files_output().replace("version=8.2.RC1\ninnerversion", f"version={cann}\ninnerversion")
    facts = make_facts(raw=node_raw(ascend_dot_files=out(files), python_dot_stack=out(stack_output(
        packages={"torch": "1.11.0", "torch_npu": tnpu}, version="3.9.18"))))
    [r] = [r for r in run(versions.test_stack, H, facts) if r.subject == "torch_npu/cann"]
    assert r.outcome == "passed" and f"torch_npu {tnpu} with CANN {cann}" in r.message, r


def test_torch_pair_remedy_names_a_torch_npu_for_the_nodes_cann():
    """The torch_npu to install is the newest the table lists for this torch *and* this node's CANN
    (the newest for the torch alone was built for another CANN, or was 2.1.0.rc1: a pre-release
    sorted last); keeping torch_npu is offered only where it suits the CANN too."""
    def remedy(cann, torch, tnpu):
        files = files_output().replace("version=8.2.RC1\ninnerversion", f"version={cann}\ninnerversion")
        facts = make_facts(raw=node_raw(ascend_dot_files=out(files), python_dot_stack=out(stack_output(
            packages={"torch": torch, "torch_npu": tnpu}))))
        assert versions._cann_of(facts.get("ascend.files")) == cann
        [r] = run(versions.test_torch_pair, H, facts)
        assert r.outcome == "failed"
        return r.remedy

    r = remedy("8.0.RC3", "2.1.0", "2.6.0")
    assert r.startswith("/usr/bin/python3 -m pip install torch_npu==2.1.0.post8 (built for torch 2.1.0 and CANN "
                        "8.0.RC3), on this node"), r  # 2.6.0 is not for CANN 8.0.RC3: no "keep" offered
    r = remedy("8.2.RC1", "2.7.1", "2.6.0")
    assert ("torch_npu==2.7.1 (built for torch 2.7.1 and CANN 8.2.RC1; or /usr/bin/python3 -m pip install "
            "torch==2.6.0 to keep") in r, r
    r = remedy("8.0.RC3", "2.9.0", "2.6.0")  # the nearest torch below with a torch_npu for this CANN
    assert r.startswith("The compatibility table lists no torch_npu for torch 2.9.0 and CANN 8.0.RC3 on Python "
                        "3.10.12: install a torch that has one, e.g. /usr/bin/python3 -m pip install torch==2.4.0 "
                        "torch_npu==2.4.0"), r
    # Only releases made for the node's Python: on 3.9 with CANN 9.1.0, torch 2.7.1 (2.12.0 needs 3.10).
    files = files_output().replace("version=8.2.RC1\ninnerversion", "version=9.1.0\ninnerversion")
    facts = make_facts(raw=node_raw(ascend_dot_files=out(files), python_dot_stack=out(stack_output(
        packages={"torch": "2.3.1", "torch_npu": "2.6.0"}, version="3.9.18"))))
    [r] = run(versions.test_torch_pair, H, facts)
    assert "e.g. /usr/bin/python3 -m pip install torch==2.7.1 torch_npu==2.7.1.post8" in r.remedy, r.remedy


@pytest.mark.parametrize("ms, mcore, outcome", [
    ("2.1.0", "0.12.1", "passed"), ("2.3.0_core_r0.12.1", "0.12.1", "passed"), ("0.12.1", "0.12.1", "passed"),
    ("2.3.0", "0.8.0", "failed"), ("2.3.0", None, "warning"), ("9.9.9", "0.12.1", "warning")])
def test_mindspeed_megatron(ms, mcore, outcome):
    pk = {k: v for k, v in {**PACKAGES, "mindspeed": ms, "megatron-core": mcore}.items() if v}
    results = run(versions.test_mindspeed_megatron, H, facts_of(python_dot_stack=out(stack_output(packages=pk))))
    assert [r.outcome for r in results if r.subject == "megatron"] == [outcome]
    if outcome == "failed":  # the core this MindSpeed wants, not a fixed example
        [r] = [r for r in results if r.subject == "megatron"]
        assert "git checkout core_v0.12.1, then pip install -e . there" in r.remedy, r.remedy


def test_mindspeed_megatron_remedy_names_the_core_of_the_branch():
    s = mindspeed_mm_stack(ms_head="ref: refs/heads/2.1.0_core_r0.8.0", mm_head="ref: refs/heads/2.1.0",
                           copied="0.12.1")
    results = run(versions.test_mindspeed_megatron, H, facts_of(python_dot_stack=out(s)))
    [r] = [r for r in results if r.subject == "megatron"]
    assert r.outcome == "failed" and "expected Megatron core 0.8.0" in r.message, r
    assert "git checkout core_v0.8.0, then copy its megatron/ folder into the MindSpeed-MM checkout" in r.remedy, \
        r.remedy


def test_mindspeed_absent_is_skipped_and_verl_needs_230():
    pk = {"torch": "2.6.0", "torch_npu": "2.6.0"}
    [r] = run(versions.test_mindspeed_megatron, H, facts_of(python_dot_stack=out(stack_output(packages=pk))))
    assert r.outcome == "skipped"
    pk = {**PACKAGES, "verl": "0.6.1"}
    results = run(versions.test_mindspeed_megatron, H, facts_of(python_dot_stack=out(stack_output(packages=pk))))
    assert ("verl", "failed") in {(r.subject, r.outcome) for r in results}


@pytest.mark.parametrize("ms, outcome", [("0.8.0", "failed"), ("0.16.0", "passed"), ("2.3.0_core_r0.12.1", "passed"),
                                         ("2.2.0", "failed"),
                                         # 2.1.0, 2.2.0 and 2.3.0 all follow core 0.12.1: which one is not known
                                         ("0.12.1", "warning")])
def test_verl_needs_mindspeed_230_or_a_0x_release_following_core_0121(ms, outcome):
    """A 0.x MindSpeed is numbered after its Megatron core: verl's minimum is then core 0.12.1."""
    pk = {**PACKAGES, "verl": "0.6.1", "mindspeed": ms, "megatron-core": "0.8.0"}
    results = run(versions.test_mindspeed_megatron, H, facts_of(python_dot_stack=out(stack_output(packages=pk))))
    [r] = [r for r in results if r.subject == "verl"]
    assert r.outcome == outcome, r.message
    if outcome != "passed":
        explained(r, f"MindSpeed {ms}", "MindSpeed 2.3.0_core_r0.12.1 or newer for verl")


def mindspeed_mm_stack(ms_head="ref: refs/heads/2.3.0_core_r0.12.1", mm_head="ref: refs/heads/2.3.0",
                       copied="0.12.1", verl=None):
    """MindSpeed-MM as its install guide sets it up: MindSpeed and MindSpeed-MM pip install -e'd from
    git checkouts (package versions 0.12.1 and the placeholder 0.1), Megatron-LM's megatron/ copied
    into the MindSpeed-MM checkout (no megatron-core package, not importable outside it)."""
    pk = {**{k: v for k, v in PACKAGES.items() if k != "megatron-core"}, "mindspeed": "0.12.1", "mindspeed-mm": "0.1",
          **({"verl": verl} if verl else {})}
    return stack_output(packages=pk, modules={"megatron": None, "mindspeed": "/opt/MindSpeed/mindspeed/__init__.py",
                                              "mindspeed_mm": "/opt/MindSpeed-MM/mindspeed_mm/__init__.py"},
                        checkouts={"mindspeed": {"root": "/opt/MindSpeed", "head": ms_head},
                                   "mindspeed_mm": {"root": "/opt/MindSpeed-MM", "head": mm_head}},
                        megatron_core={"path": "/opt/MindSpeed-MM/megatron", "version": copied} if copied else None)


@pytest.mark.parametrize("release", ["26.1.0", "26.0.0"])
def test_mindspeed_mm_26_releases_pair_with_their_mindspeed_branch(release):
    stack = mindspeed_mm_stack(ms_head=f"ref: refs/heads/{release}_core_r0.12.1", mm_head=f"ref: refs/heads/{release}")
    by = {r.subject: r for r in run(versions.test_mindspeed_megatron, H, facts_of(python_dot_stack=out(stack)))}
    assert by["mindspeed-mm"].outcome == "passed", by["mindspeed-mm"].message
    assert f"MindSpeed-MM {release} with MindSpeed {release}_core_r0.12.1" in by["mindspeed-mm"].message
    other = "26.0.0" if release == "26.1.0" else "26.1.0"
    stack = mindspeed_mm_stack(ms_head=f"ref: refs/heads/{other}_core_r0.12.1", mm_head=f"ref: refs/heads/{release}")
    by = {r.subject: r for r in run(versions.test_mindspeed_megatron, H, facts_of(python_dot_stack=out(stack)))}
    assert by["mindspeed-mm"].outcome == "failed"


def test_mindspeed_mm_as_installed_by_its_guide():
    # On the CANN MindSpeed 2.3.0 was released for (the default node's 8.2.RC1 is another's).
    cann_85 = out(files_output(toolkit="toolkit-install-info/8.5.0-aarch64-cann-root.txt", kernels=None, atb=None))

    def on_cann_85(stack):
        return facts_of(python_dot_stack=out(stack), ascend_dot_files=cann_85)

    results = ok(run(versions.test_mindspeed_megatron, H, on_cann_85(mindspeed_mm_stack())))
    by = {r.subject: r for r in results}
    assert "MindSpeed-MM 2.3.0 with MindSpeed 2.3.0_core_r0.12.1" in by["mindspeed-mm"].message
    assert "Megatron core 0.12.1 (/opt/MindSpeed-MM/megatron/core/package_info.py)" in by["megatron"].message
    # An older core copied in; a MindSpeed branch MindSpeed-MM's release does not go with.
    [r] = bad(run(versions.test_mindspeed_megatron, H, on_cann_85(mindspeed_mm_stack(copied="0.8.0"))))
    assert r.outcome == "failed"
    explained(r, "with Megatron core 0.8.0 (/opt/MindSpeed-MM/megatron/core/package_info.py)", "0.12.1")
    older = mindspeed_mm_stack(ms_head="ref: refs/heads/2.1.0_core_r0.12.1")
    [r] = [r for r in bad(run(versions.test_mindspeed_megatron, H, on_cann_85(older))) if r.subject == "mindspeed-mm"]
    assert r.outcome == "failed"
    explained(r, "MindSpeed-MM 2.3.0 (branch 2.3.0 of /opt/MindSpeed-MM)", "MindSpeed 2.3.0")
    # verl reads the release off the branch: 2.1.0 on core 0.12.1 is too old for it.
    with_verl = mindspeed_mm_stack(ms_head="ref: refs/heads/2.1.0_core_r0.12.1", verl="0.6.1")
    [r] = [r for r in run(versions.test_mindspeed_megatron, H, on_cann_85(with_verl)) if r.subject == "verl"]
    assert r.outcome == "failed" and "branch 2.1.0_core_r0.12.1 of /opt/MindSpeed" in r.message


def test_mindspeed_off_the_cann_and_torch_it_was_released_for_warns():
    """The table's cann and torch columns were never read: MindSpeed 26.0.0 on CANN 8.2.RC1 passed."""
    stack = mindspeed_mm_stack(ms_head="ref: refs/heads/26.0.0_core_r0.12.1", mm_head="ref: refs/heads/26.0.0")
    by = {r.subject: r for r in run(versions.test_mindspeed_megatron, H, facts_of(python_dot_stack=out(stack)))}
    assert by["mindspeed-stack"].outcome == "warning"
    explained(by["mindspeed-stack"], "MindSpeed 26.0.0_core_r0.12.1", "with CANN 8.2.RC1", "CANN 9.0.0 and torch 2.7.1")


@pytest.mark.parametrize("mm, ms, outcome", [
    ("2.1.0", "2.1.0_core_r0.8.0", "passed"), ("2.1.0", "2.1.0_core_r0.12.1", "failed"),
    ("1.0.0", "1.0.0_core_r0.6.0", "passed"), ("1.0.0", "1.0.0_core_r0.7.0", "failed"),
    ("2.1.0", "2.1.0", "passed"), ("1.0.0", "1.0.RC3_core_r0.6.0", "failed"),
    # 1.0.RC3 is a release of its own, not 1.0.0's row: it told the operator to install 1.0.0's MindSpeed.
    ("1.0.RC3", "1.0.RC3_core_r0.6.0", "warning")])
def test_mindspeed_mm_wants_one_megatron_core_of_a_mindspeed_release(mm, ms, outcome):
    # MindSpeed 2.1.0 and 1.0.0 each have branches on two cores; MindSpeed-MM's README names one.
    stack = mindspeed_mm_stack(ms_head=f"ref: refs/heads/{ms}", mm_head=f"ref: refs/heads/{mm}")
    [r] = [r for r in run(versions.test_mindspeed_megatron, H, facts_of(python_dot_stack=out(stack)))
           if r.subject == "mindspeed-mm"]
    assert r.outcome == outcome, r.message
    if outcome == "failed":
        want = {"2.1.0": "2.1.0_core_r0.8.0", "1.0.0": "1.0.0_core_r0.6.0"}[mm]
        explained(r, f"MindSpeed-MM {mm} (branch {mm} of /opt/MindSpeed-MM) with MindSpeed {ms}", f"MindSpeed {want}")


@pytest.mark.parametrize("ms, outcome", [("0.8.0", "failed"), ("0.12.1", "passed")])
def test_mindspeed_mm_with_a_mindspeed_only_its_core_names(ms, outcome):
    # MindSpeed-MM 2.3.0 wants MindSpeed 2.3.0, which follows Megatron core 0.12.1.
    stack = mindspeed_mm_stack(ms_head="3f2c9a1d").replace('"mindspeed": "0.12.1"', f'"mindspeed": "{ms}"')
    results = run(versions.test_mindspeed_megatron, H, facts_of(python_dot_stack=out(stack)))
    [r] = [r for r in results if r.subject == "mindspeed-mm"]
    assert r.outcome == outcome, r.message
    if outcome == "failed":
        explained(r, "with MindSpeed 0.8.0 (package version 0.8.0, which follows Megatron core 0.8.0)",
                  "MindSpeed 2.3.0_core_r0.12.1 (Megatron core 0.12.1")


def test_mindspeed_mm_without_a_readable_release_or_megatron():
    stack = mindspeed_mm_stack(mm_head="3f2c9a1d0b7e", copied=None)  # detached, nothing copied in
    results = run(versions.test_mindspeed_megatron, H, facts_of(python_dot_stack=out(stack)))
    by = {r.subject: r for r in results}
    assert by["mindspeed-mm"].outcome == "skipped"
    assert "placeholder and /opt/MindSpeed-MM is on a detached commit" in by["mindspeed-mm"].message
    assert by["megatron"].outcome == "warning"
    explained(by["megatron"], "nor copied into the MindSpeed-MM checkout at /opt/MindSpeed-MM/megatron")


@pytest.mark.parametrize("extra, outcome", [
    # (the node's CANN is 8.2.RC1: triton-ascend 3.2.0 is made for 8.5.x, 3.9.0 is in no table)
    ({}, "skipped"), ({"vllm-ascend": "0.13.0", "triton-ascend": "3.9.0"}, "passed"),
    ({"vllm-ascend": "0.13.0", "triton-ascend": "3.2.0"}, "warning"),
    ({"vllm-ascend": "0.13.0", "triton": "3.2.0"}, "failed"), ({"triton": "3.1.0", "triton-ascend": "3.2.0"}, "failed"),
    ({"vllm-ascend": "0.9.1"}, "passed")])
def test_triton(extra, outcome):
    [r] = run(versions.test_triton, H, facts_of(python_dot_stack=out(stack_output(packages={**PACKAGES, **extra}))))
    assert r.outcome == outcome


def test_triton_ascend_made_for_another_cann_warns_with_the_release_for_this_one():
    """The triton-ascend table (its README): 3.2.0 is for CANN 8.5.x, 3.2.2 for 9.1.0.  Checked
    whether or not vllm-ascend is there (MindSpeed-MM uses triton-ascend too)."""
    cann_85 = files_output(toolkit="toolkit-install-info/8.5.0-aarch64-cann-root.txt", kernels=None, atb=None)
    cann_91 = cann_85.replace("version=8.5.0\n", "version=9.1.0\n")

    def results(files, **packages):
        raw = node_raw(python_dot_stack=out(stack_output(packages={**PACKAGES, **packages})),
                       ascend_dot_files=out(files))
        return run(versions.test_triton, H, make_facts(raw=raw))

    assert versions._cann_of(make_facts(raw=node_raw(ascend_dot_files=out(cann_91))).get("ascend.files")) == "9.1.0"
    [r] = results(cann_85, **{"triton-ascend": "3.2.0"})
    assert r.outcome == "passed", r
    [r] = results(cann_91, **{"triton-ascend": "3.2.0"})
    assert r.outcome == "warning" and r.severity == "warning", r
    explained(r, "triton-ascend 3.2.0 with CANN 9.1.0", "expected triton-ascend made for CANN 9.1.0: 3.2.2 (3.2.0 is "
              "for CANN 8.5.0, 8.5.1")
    assert r.remedy.startswith("pip install triton-ascend==3.2.2 (the release for CANN 9.1.0)")
    # The standard triton beside it: removed, and the release for this CANN installed.
    [r] = results(cann_91, **{"triton-ascend": "3.2.2", "triton": "3.3.0"})
    assert r.outcome == "failed" and r.remedy == ("pip uninstall -y triton triton-ascend && pip install "
                                                  "triton-ascend==3.2.2 (the release for CANN 9.1.0).")
    # A site file's vllm-ascend row may pin triton-ascend as a number or a list: read as text.
    site = C.load()
    site.tables["vllm_ascend"] = [dict(r, triton_ascend=3.2 if i == 0 else ["3.2.0", "3.2.1"])
                                  for i, r in enumerate(site.rows("vllm_ascend")[:2])]
    for row in site.rows("vllm_ascend"):
        raw = node_raw(python_dot_stack=out(stack_output(packages={**PACKAGES, "vllm-ascend": row["vllm_ascend"]})),
                       ascend_dot_files=out(cann_91))
        [r] = run(versions.test_triton, H, make_facts(raw=raw), compat=site)
        assert r.outcome == "failed" and "expected triton-ascend 3.2" in r.message, r
    # A release the table does not list is not judged against it.
    [r] = results(cann_91, **{"triton-ascend": "3.9.0"})
    assert r.outcome == "passed"


def _vllm_results(files=None, **packages):
    raw = node_raw(python_dot_stack=out(stack_output(packages={**PACKAGES, **packages})))
    if files is not None:
        raw["ascend.files"] = out(files)
    return {r.subject: r for r in run(versions.test_vllm, H, make_facts(raw=raw))}


def test_vllm_ascend_needs_the_vllm_release_it_was_made_for():
    # The table (vllm-ascend's versioning policy): 0.13.0 goes with vllm 0.13.0, CANN 8.5.0, torch_npu 2.8.0.post2.
    cann_85 = files_output(toolkit="toolkit-install-info/8.5.0-aarch64-cann-root.txt", kernels=None, atb=None)
    ok = _vllm_results(cann_85, **{"vllm-ascend": "0.13.0", "vllm": "0.13.0+empty", "torch": "2.8.0",
                                   "torch_npu": "2.8.0.post2"})
    assert {s: r.outcome for s, r in ok.items()} == {"vllm": "passed", "cann": "passed", "torch_npu": "passed"}
    bad = _vllm_results(cann_85, **{"vllm-ascend": "0.13.0", "vllm": "0.11.0", "torch_npu": "2.8.0.post2"})
    assert bad["vllm"].outcome == "failed" and bad["vllm"].severity == "error"
    explained(bad["vllm"], "vllm-ascend 0.13.0 with vllm 0.11.0", "expected vllm 0.13.0")
    assert "--branch v0.13.0" in bad["vllm"].remedy and "VLLM_TARGET_DEVICE=empty" in bad["vllm"].remedy
    assert bad["vllm"].reference.startswith("ROLL Ascend NPU FAQ")


def test_vllm_ascend_with_another_cann_or_torch_npu_warns():
    # The default node has CANN 8.2.RC1 and torch_npu 2.6.0.
    r = _vllm_results(**{"vllm-ascend": "0.13.0", "vllm": "0.13.0"})
    assert r["vllm"].outcome == "passed"
    assert r["cann"].outcome == "warning"
    explained(r["cann"], "vllm-ascend 0.13.0 with CANN 8.2.RC1", "CANN 8.5.0")
    assert r["torch_npu"].outcome == "warning"
    explained(r["torch_npu"], "torch_npu 2.6.0", "torch_npu 2.8.0.post2")
    assert "pip install torch_npu==2.8.0.post2" in r["torch_npu"].remedy


def test_vllm_ascend_with_another_triton_ascend_or_python_warns():
    """The row's triton-ascend and Python were never read: 0.23.0 with triton-ascend 3.2.0 (CANN 8.5's) passed."""
    r = _vllm_results(**{"vllm-ascend": "0.23.0", "vllm": "0.23.0", "triton-ascend": "3.2.0"})
    assert r["triton-ascend"].outcome == "warning"
    explained(r["triton-ascend"], "vllm-ascend 0.23.0 with triton-ascend 3.2.0", "triton-ascend 3.2.2")
    assert _vllm_results(**{"vllm-ascend": "0.23.0", "vllm": "0.23.0", "triton-ascend": "3.2.2"})[
        "triton-ascend"].outcome == "passed"
    raw = node_raw(python_dot_stack=out(stack_output(packages={**PACKAGES, "vllm-ascend": "0.13.0", "vllm": "0.13.0"},
                                                     version="3.12.3")))
    [py] = [x for x in run(versions.test_vllm, H, make_facts(raw=raw)) if x.subject == "python"]
    assert py.outcome == "warning"
    explained(py, "vllm-ascend 0.13.0 on Python 3.12.3", "Python >=3.10,<3.12")


def test_vllm_ascend_without_vllm_or_off_the_table():
    r = _vllm_results(**{"vllm-ascend": "0.13.0rc1"})
    assert r["vllm"].outcome == "failed"
    explained(r["vllm"], "installed without vllm", "vllm 0.13.0")
    # Not in the table: the release lines are compared.
    r = _vllm_results(**{"vllm-ascend": "0.6.2rc1", "vllm": "0.6.2"})
    assert set(r) == {"vllm"} and r["vllm"].outcome == "passed" and "not in the table" in r["vllm"].message
    r = _vllm_results(**{"vllm-ascend": "0.6.2rc1", "vllm": "0.11.0"})
    assert r["vllm"].outcome == "warning"
    explained(r["vllm"], "different release lines", "vllm 0.6.x")
    # A row naming two vllm releases accepts either.
    r = _vllm_results(**{"vllm-ascend": "0.10.1rc1", "vllm": "0.10.1.1"})
    assert r["vllm"].outcome == "passed"
    r = _vllm_results(**{"vllm-ascend": "0.10.1rc1", "vllm": "0.10.2"})
    explained(r["vllm"], "expected vllm 0.10.1 or 0.10.1.1")
    [skip] = _vllm_results(vllm="0.11.0").values()
    assert skip.outcome == "skipped" and "vllm 0.11.0 alone" in skip.message


def test_vllm_built_without_git_metadata_is_read_from_vllm_version():
    """vllm built from a source tree without .git says 0.0.0+empty; vllm-ascend reads VLLM_VERSION then."""
    r = _vllm_results(**{"vllm-ascend": "0.13.0", "vllm": "0.0.0+empty"})
    assert r["vllm"].outcome == "skipped" and "VLLM_VERSION is not set" in r["vllm"].message
    raw = node_raw({"VLLM_VERSION": "0.13.0"},
                   python_dot_stack=out(stack_output(packages={**PACKAGES, "vllm-ascend": "0.13.0", "vllm": "0.0.0+empty"})))
    by = {x.subject: x for x in run(versions.test_vllm, H, make_facts(raw=raw))}
    assert by["vllm"].outcome == "passed" and "0.13.0 (VLLM_VERSION; the package says 0.0.0+empty)" in by["vllm"].message
    raw = node_raw({"VLLM_VERSION": "0.11.0"},
                   python_dot_stack=out(stack_output(packages={**PACKAGES, "vllm-ascend": "0.13.0", "vllm": "0.0.0+empty"})))
    by = {x.subject: x for x in run(versions.test_vllm, H, make_facts(raw=raw))}
    assert by["vllm"].outcome == "failed" and "expected vllm 0.13.0" in by["vllm"].message


def test_soc_match():
    [r] = run(versions.test_soc_match, H, facts_of())
    assert r.outcome == "passed"
    raw = node_raw(python_dot_stack=out(stack_output(build_info={"__soc_version__": "ASCEND910_9391"})))
    [r] = run(versions.test_soc_match, H, make_facts(raw=raw))
    explained(r, "ASCEND910_9391", "the chip is A2")
    raw = node_raw({"SOC_VERSION": "ascend910b1"})
    raw["npu_smi.info"] = out(fixture("npu-smi/info/a3-ascend910-24.1.rc3.7-classic-idle.txt"))
    raw["npu_smi.board"] = out(fixture("npu-smi/board/a3-9392-chip-npu0-c0-head.txt"))
    raw["ascend.files"] = out(files_output(socs=("ascend910_93",)))
    [r] = run(versions.test_soc_match, H, make_facts(raw=raw))
    assert r.outcome == "failed" and "SOC_VERSION=ascend910b1" in r.message
    raw = node_raw(ascend_dot_files=out(files_output(socs=())))
    assert run(versions.test_soc_match, H, make_facts(raw=raw))[0].outcome == "skipped"


def test_soc_match_passes_a_healthy_a3_node_with_its_board_info():
    """An A3 board says Chip Name Ascend910 (the A1 spelling) with NPU Name 9392: every healthy A3
    node failed, told to install A1 builds."""
    raw = node_raw(python_dot_stack=out(stack_output(build_info={"__soc_version__": "ASCEND910_9392"})))
    raw["npu_smi.info"] = out(fixture("npu-smi/info/a3-ascend910-24.1.rc3.7-classic-idle.txt"))
    raw["npu_smi.board"] = out(fixture("npu-smi/board/a3-9392-chip-npu0-c0-head.txt"))
    raw["ascend.files"] = out(files_output(socs=("ascend910_93",)))
    [r] = run(versions.test_soc_match, H, make_facts(raw=raw))
    assert r.outcome == "passed" and "A3" in r.message, r.message


@pytest.mark.parametrize("name, npu_smi, build", [
    ("910B", "A1", "A2"), ("Ascend 910B", "A1", "A2"), ("910B1", "A2", "A2"), ("910B2C", "A2", "A2"),
    ("910A", "A1", "A1"), ("910ProB", "A1", "A1"), ("Ascend910_9392", "A3", "A3"), ("310P3", "310P", "310P")])
def test_bare_910b_is_an_a1_chip_in_npu_smi_and_an_a2_build_target(name, npu_smi, build):
    assert pv.npu_smi_chip_family(name) == npu_smi and pv.soc_family(name) == build


def a1_910b_raw(**over):
    """An A1 node whose npu-smi names its chips 910B (the A1 variant, not the A2 910B1..4)."""
    info = fixture("npu-smi/info/a2-910b1-23.0.rc2-idle-no-proc-section.txt").replace("910B1", "910B ")
    board = fixture("npu-smi/board/a1-910a-chip-npu0-c0.txt").replace("910A", "910B")
    return node_raw(npu_smi_dot_info=out(info), npu_smi_dot_board=out(board), **over)


def test_soc_match_reads_a_bare_910b_as_a1():
    raw = a1_910b_raw(env_={"SOC_VERSION": "ascend910b1"})
    [r] = run(versions.test_soc_match, H, make_facts(raw=raw))
    assert r.outcome == "failed", r.message
    explained(r, "SOC_VERSION=ascend910b1 (A2)", "the chip is A1", "Chip Name 910B")
    del raw["npu_smi.board"]  # from npu-smi info's Name column alone
    [r] = run(versions.test_soc_match, H, make_facts(raw=raw))
    assert r.outcome == "failed" and "npu-smi info: chip 910B" in r.message, r.message


def test_hccl_exec_timeout_range_from_npu_smi_names():
    # No chip in the inventory: npu-smi's 910B (A1) or 910ProB name gives the A1 range; an A3
    # die's "Ascend910" does not.
    host = make_host(npus_per_node=8)
    env_ = {"HCCL_CONNECT_TIMEOUT": "1200", "HCCL_EXEC_TIMEOUT": "0"}
    a3 = fixture("npu-smi/info/a3-ascend910-24.1.rc3.7-classic-idle.txt")
    prob = fixture("npu-smi/info/a2-910b1-23.0.rc2-idle-no-proc-section.txt").replace("910B1  ", "910ProB")
    for raw, outcome in ((a1_910b_raw(env_=env_), "warning"), (node_raw(env_, npu_smi_dot_info=out(prob)), "warning"),
                         (node_raw(env_, npu_smi_dot_info=out(a3)), "passed"), (node_raw(env_), "passed")):
        [r] = [r for r in run(env.test_hccl_timeouts, host, make_facts(raw=raw)) if r.subject == "HCCL_EXEC_TIMEOUT"]
        assert r.outcome == outcome, r.message
        assert outcome == "passed" or "on A1" in r.expected


def test_versions_agree():
    hosts = [make_host(f"node-0{i}") for i in (1, 2, 3)]
    same = cluster_of(*[(h, make_facts(h.name, raw=node_raw())) for h in hosts])
    ok(run(versions.test_versions_agree, cluster=same))
    odd = node_raw(python_dot_stack=out(stack_output(packages={**PACKAGES, "torch_npu": "2.6.0.post3"})))
    differ = cluster_of((hosts[0], make_facts("node-01", raw=node_raw())), (hosts[1], make_facts("node-02", raw=odd)),
                        (hosts[2], make_facts("node-03", raw=node_raw())))
    [r] = bad(run(versions.test_versions_agree, cluster=differ))
    assert r.subject == "torch_npu" and r.outliers == ("node-02",)
    explained(r, "node-02: 2.6.0.post3")


def test_versions_agree_reads_each_unreadable_node_apart_and_counts_the_nodes_read():
    """Unreadable nodes were one error naming each node and its reason (30 kB at 100 nodes); a
    node not read made the others' agreement "on all 2 nodes" of 3."""
    from preflight.facts import HostFacts

    hosts = [make_host(f"node-0{i}") for i in (1, 2, 3)]
    unread = node_raw(python_dot_stack=out("", rc=127))
    results = run(versions.test_versions_agree, cluster=cluster_of(
        (hosts[0], make_facts("node-01", raw=node_raw())), (hosts[1], make_facts("node-02", raw=unread)),
        (hosts[2], HostFacts(host="node-03", address="10.0.0.3", reachable=False, error="refused"))))
    [error] = [r for r in results if r.outcome == "error"]
    assert error.host == "node-02" and error.message.startswith("node-02: versions unreadable: `"), error.message
    [python] = [r for r in results if r.subject == "python"]
    assert python.outcome == "passed" and python.message.endswith("on the 1 of 3 nodes read"), python.message


def test_versions_agree_compares_the_mindspeed_release_not_its_pip_version():
    # 2.1.0_core_r0.12.1 and 2.3.0_core_r0.12.1 both install as mindspeed 0.12.1.
    hosts = [make_host(f"node-0{i}") for i in (1, 2, 3)]
    heads = {"node-01": "2.3.0_core_r0.12.1", "node-02": "2.1.0_core_r0.12.1", "node-03": "2.3.0_core_r0.12.1"}
    raws = {n: node_raw(python_dot_stack=out(mindspeed_mm_stack(ms_head=f"ref: refs/heads/{b}"))) for n, b in heads.items()}
    [r] = [r for r in run(versions.test_versions_agree, cluster=cluster_of(*[(h, make_facts(h.name, raw=raws[h.name]))
                                                                            for h in hosts]))
           if r.subject == "mindspeed"]
    assert r.outcome == "failed" and r.outliers == ("node-02",), r.message
    explained(r, "node-02: 2.1.0_core_r0.12.1")
    # The same code from a branch on two nodes and a detached tag on the third: one pip version.
    heads["node-02"] = "3f2c9a1d0b7e"
    raws = {n: node_raw(python_dot_stack=out(mindspeed_mm_stack(ms_head=b if "_" not in b else f"ref: refs/heads/{b}")))
            for n, b in heads.items()}
    results = run(versions.test_versions_agree, cluster=cluster_of(*[(h, make_facts(h.name, raw=raws[h.name]))
                                                                    for h in hosts]))
    [r] = [r for r in results if r.subject == "mindspeed"]
    assert r.outcome == "passed" and "0.12.1 on all 3 nodes" in r.message, r.message


def test_versions_agree_compares_a_megatron_copied_into_the_checkout():
    """MindSpeed-MM's guide copies megatron/ in (no pip package): cores 0.12.1 and 0.8.0 passed as agreeing."""
    hosts = [make_host(f"node-0{i}") for i in (1, 2, 3)]
    raws = {h.name: node_raw(python_dot_stack=out(mindspeed_mm_stack(copied="0.8.0" if h.name == "node-02" else "0.12.1")))
            for h in hosts}
    [r] = [r for r in run(versions.test_versions_agree, cluster=cluster_of(*[(h, make_facts(h.name, raw=raws[h.name]))
                                                                            for h in hosts]))
           if r.subject == "megatron-core"]
    assert r.outcome == "failed" and r.outliers == ("node-02",), r.message


@pytest.mark.parametrize("odd, outcome", [("3.10.14", "warning"), ("3.11.9", "failed")])
def test_versions_agree_python_a_patch_release_apart_is_a_warning(odd, outcome):
    hosts = [make_host(f"node-0{i}") for i in (1, 2, 3)]
    raws = {"node-01": node_raw(), "node-02": node_raw(python_dot_stack=out(stack_output(version=odd))),
            "node-03": node_raw()}
    [r] = bad(run(versions.test_versions_agree, cluster=cluster_of(*[(h, make_facts(h.name, raw=raws[h.name]))
                                                                     for h in hosts])))
    assert r.subject == "python" and r.outcome == outcome and r.outliers == ("node-02",), r.message
    assert ("patch releases of one Python" in r.message) == (outcome == "warning")


@pytest.mark.parametrize("odd, outcome", [("2.6.0", "warning"), ("2.6.0+cu124", "warning"), ("2.5.1+cpu", "failed")])
def test_versions_agree_torch_builds_of_one_release_are_a_warning(odd, outcome):
    """torch 2.6.0+cpu on two nodes and 2.6.0 on one was a NOT READY: one release, two wheel indexes."""
    hosts = [make_host(f"node-0{i}") for i in (1, 2, 3)]
    cpu = node_raw(python_dot_stack=out(stack_output(packages={**PACKAGES, "torch": "2.6.0+cpu"})))
    raws = {"node-01": cpu, "node-02": node_raw(python_dot_stack=out(stack_output(packages={**PACKAGES, "torch": odd}))),
            "node-03": cpu}
    [r] = [r for r in run(versions.test_versions_agree, cluster=cluster_of(*[(h, make_facts(h.name, raw=raws[h.name]))
                                                                            for h in hosts]))
           if r.subject == "torch"]
    assert r.outcome == outcome and r.outliers == ("node-02",), r.message
    assert ("builds of one release, 2.6.0," in r.message) == (outcome == "warning"), r.message


def test_versions_agree_on_two_nodes_that_differ_blames_neither():
    """Two nodes, two torch_npu versions: node-02 was named the outlier because it came second."""
    one, two = make_host("node-01"), make_host("node-02")
    odd = node_raw(python_dot_stack=out(stack_output(packages={**PACKAGES, "torch_npu": "2.6.0.post3"})))
    for order in ((one, two), (two, one)):
        raws = {"node-01": node_raw(), "node-02": odd}
        [r] = bad(run(versions.test_versions_agree,
                      cluster=cluster_of(*[(h, make_facts(h.name, raw=raws[h.name])) for h in order])))
        assert r.outliers == ("node-01", "node-02"), r.message
        assert "node-02: 2.6.0.post3" in r.message and "no majority" in r.message


# -- env.* ---------------------------------------------------------------------------------

def test_cann_loaded_passes_and_explains_the_interactive_guard():
    ok(run(env.test_cann_loaded, H, facts_of()))
    raw = node_raw({"ASCEND_HOME_PATH": None, "ASCEND_TOOLKIT_HOME": None})
    raw["session.env_login"] = out(login_output(HEALTHY_ENV))
    [r] = run(env.test_cann_loaded, H, make_facts(raw=raw))
    explained(r, "`ASCEND_HOME_PATH` and `ASCEND_TOOLKIT_HOME` are set in an interactive shell but not in a "
                 "non-interactive SSH session: source set_env.sh before the interactive guard in ~/.bashrc")
    raw["session.env_login"] = out(login_output({"PATH": "/usr/bin"}))
    [r] = run(env.test_cann_loaded, H, make_facts(raw=raw))
    assert r.outcome == "failed" and "nor in an interactive login shell" in r.message
    assert "source /usr/local/Ascend/ascend-toolkit/set_env.sh" in r.message  # beside latest/


def test_cann_loaded_with_no_toolkit_installed_says_so_and_a_local_entry_names_its_shell():
    """It told the operator to source a set_env.sh that does not exist, while versions.stack said no
    CANN is installed; for connection: local it spoke of an SSH session (found by review)."""
    raw = node_raw({"ASCEND_HOME_PATH": None, "ASCEND_TOOLKIT_HOME": None},
                   ascend_dot_files=out(files_output(toolkit=None, atb=None, libatb=False)))
    raw["session.env_login"] = out(login_output({"PATH": "/usr/bin"}))
    [r] = run(env.test_cann_loaded, H, make_facts(raw=raw))
    explained(r, "no CANN toolkit is installed (see versions.stack)")
    assert "Install the CANN toolkit" in r.remedy
    raw = node_raw({"ASCEND_HOME_PATH": None, "ASCEND_TOOLKIT_HOME": None})
    raw["session.env_login"] = out(login_output({"PATH": "/usr/bin"}))
    [r] = run(env.test_cann_loaded, dataclasses.replace(H, connection="local"), make_facts(raw=raw))
    explained(r, "not set in the shell running preflight (connection: local)")
    # A toolkit folder is there but its version files could not be read (a root install without
    # --install-for-all, read by another user): not "not installed" (found by review).
    unreadable = files_output(toolkit=None, atb=None, libatb=False).replace(
        "@@DONE", f"@@L\troot\t{TOOLKIT}\t{REAL}\n@@DONE")
    raw = node_raw({"ASCEND_HOME_PATH": None, "ASCEND_TOOLKIT_HOME": None}, ascend_dot_files=out(unreadable))
    raw["session.env_login"] = out(login_output({"PATH": "/usr/bin"}))
    [r] = run(env.test_cann_loaded, H, make_facts(raw=raw))
    assert "no CANN toolkit is installed" not in r.message and "set_env.sh" in r.message, r.message


def test_cann_loaded_names_the_set_env_of_the_cann_layout_found():
    # CANN 8.5 and later install into /usr/local/Ascend/cann-<version> (and cann): set_env.sh is there.
    raw = node_raw({"ASCEND_HOME_PATH": None, "ASCEND_TOOLKIT_HOME": None}, ascend_dot_files=out(files_output(
        toolkit="toolkit-install-info/8.5.0-aarch64-cann-root.txt", root="/usr/local/Ascend/cann-8.5.0",
        real="/usr/local/Ascend/cann-8.5.0", kernels=None)))
    [r] = run(env.test_cann_loaded, H, make_facts(raw=raw))
    explained(r, "source /usr/local/Ascend/cann-8.5.0/set_env.sh in ~/.bashrc")


def test_cann_loaded_acl_not_on_python_path():
    raw = node_raw(python_dot_stack=out(stack_output(modules={"acl": None}, path=("/usr/lib/python3",))))
    [r] = run(env.test_cann_loaded, H, make_facts(raw=raw))
    explained(r, "import acl fails")
    # The inventory's env: declares what the launch script's set_env.sh exports: that Python path counts.
    declared = make_host(env={"PYTHONPATH": f"{TOOLKIT}/python/site-packages:/opt/extra"})
    [r] = run(env.test_cann_loaded, declared, make_facts(raw=raw))
    assert r.outcome == "passed" and "through PYTHONPATH under env: in the inventory" in r.message, r.message


def test_nnal_atb():
    ok(run(env.test_nnal_atb, H, facts_of()))
    [r] = run(env.test_nnal_atb, H, facts_of(env_={"ATB_HOME_PATH": None}))
    assert r.outcome == "failed" and "ATB_HOME_PATH" in r.message
    [r] = run(env.test_nnal_atb, H, facts_of(ascend_dot_files=out(files_output(libatb=False, atb=None))))
    explained(r, "nnal/atb is not installed")
    assert "after sourcing /usr/local/Ascend/ascend-toolkit/set_env.sh" in r.remedy
    cann85 = files_output(toolkit="toolkit-install-info/8.5.0-aarch64-cann-root.txt", root="/usr/local/Ascend/cann-8.5.0",
                          real="/usr/local/Ascend/cann-8.5.0", kernels=None, libatb=False, atb=None)
    [r] = run(env.test_nnal_atb, H, facts_of(ascend_dot_files=out(cann85)))
    assert "after sourcing /usr/local/Ascend/cann-8.5.0/set_env.sh" in r.remedy


def test_single_cann():
    ok(run(env.test_single_cann, H, facts_of()))
    [r] = run(env.test_single_cann, H, facts_of(env_={"LD_LIBRARY_PATH": "/usr/local/Ascend/ascend-toolkit/8.0.RC3/lib64"}))
    explained(r, "2 CANN versions", "8.0.RC3", "8.2.RC1")

    # `latest` is a link to one version folder: without the version files it is unknown, not a second version.
    unread = {"ASCEND_HOME_PATH": "/usr/local/Ascend/ascend-toolkit/latest",
              "LD_LIBRARY_PATH": "/usr/local/Ascend/ascend-toolkit/8.0.RC2/lib64"}
    [r] = run(env.test_single_cann, H, facts_of(env_=unread, ascend_dot_files=out("", rc=1, stderr="cat: oops")))
    assert r.outcome == "passed" and "one CANN version (8.0.RC2)" in r.message, r
    assert "version of /usr/local/Ascend/ascend-toolkit/latest (ASCEND_HOME_PATH, " in r.message and "unknown" in r.message
    both = {"ASCEND_HOME_PATH": "/usr/local/Ascend/ascend-toolkit/latest", "LD_LIBRARY_PATH": "/usr/local/Ascend/nnae/latest/lib64"}
    [r] = run(env.test_single_cann, H, facts_of(env_=both, ascend_dot_files=out("", rc=1, stderr="cat: oops")))
    assert r.outcome == "error" and "could not be read" in r.message, r


@pytest.mark.parametrize("value, extra, outcome", [
    (None, {}, "passed"), ("0,1,2,3,4,5,6,7", {}, "passed"), ("0,8", {}, "failed"), ("1,1", {}, "failed"),
    ("", {}, "failed")])
def test_visible_devices(value, extra, outcome):
    results = run(env.test_visible_devices, H, facts_of(env_={"ASCEND_RT_VISIBLE_DEVICES": value, **extra}))
    assert [r.outcome for r in results] == [outcome]


@pytest.mark.parametrize("listed", ["0,1", None])
def test_visible_devices_with_ray_needs_noset(listed):
    """verl FAQ Q1 and the vllm-ascend Ray guide set NOSET on every node: without it Ray rewrites the
    device list per worker, whether or not the node sets one."""
    with_ray = out(stack_output(packages={**PACKAGES, "ray": "2.40.0"}))
    results = run(env.test_visible_devices, H, make_facts(raw=node_raw({"ASCEND_RT_VISIBLE_DEVICES": listed},
                                                                      python_dot_stack=with_ray)))
    [r] = bad(results)
    explained(r, "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=(unset)",
              "is set" if listed else "ASCEND_RT_VISIBLE_DEVICES is unset")
    noset = {"ASCEND_RT_VISIBLE_DEVICES": listed, "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "1"}
    results = run(env.test_visible_devices, H, make_facts(raw=node_raw(noset, python_dot_stack=with_ray)))
    assert [(r.subject, r.outcome) for r in results] == [
        ("ASCEND_RT_VISIBLE_DEVICES", "passed"), ("RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES", "passed")]
    # Ray reads any non-empty value as set (`if os.environ.get(NOSET_...)`): `true` passed Ray, not us.
    for value, outcome in (("true", "passed"), ("0", "passed"), ("", "failed")):
        noset["RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"] = value
        [r] = [r for r in run(env.test_visible_devices, H, make_facts(raw=node_raw(noset, python_dot_stack=with_ray)))
               if r.subject == "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"]
        assert r.outcome == outcome, (value, r)
        if outcome == "passed":
            assert "Ray reads any non-empty value as set" in r.message


def test_visible_devices_as_a_range_says_to_list_each_id():
    [r] = bad(run(env.test_visible_devices, H, facts_of(env_={"ASCEND_RT_VISIBLE_DEVICES": "0-3,x"})))
    explained(r, "ranges are not read: 0-3 (list each id: 0,1,2,3)", "not NPU ids: x")
    [r] = bad(run(env.test_visible_devices, H, facts_of(env_={"ASCEND_RT_VISIBLE_DEVICES": "0-3,4-7"})))
    assert "(list each id: 0,1,2,3,4,5,6,7)" in r.message
    for huge in ("0-2000000", "3-0"):  # a node's value: never spelled out without bound, never an empty list
        [r] = bad(run(env.test_visible_devices, H, facts_of(env_={"ASCEND_RT_VISIBLE_DEVICES": huge})))
        assert f"ranges are not read: {huge};" in r.message and len(r.message) < 300


def test_visible_devices_on_a_node_without_device_nodes_is_not_evaluated():
    """It printed "0, 1, 8, 1 beyond the 0 NPU(s) of the node; expected ids among 0..-1" (found by review)."""
    raw = node_raw({"ASCEND_RT_VISIBLE_DEVICES": "0,1,8,1"}, npus=0)
    [r] = [r for r in run(env.test_visible_devices, H, make_facts(raw=raw)) if r.subject == "ASCEND_RT_VISIBLE_DEVICES"]
    assert r.outcome == "error" and "no /dev/davinciN device nodes" in r.message and "0..-1" not in r.message
    assert r.remedy
    # Unset there: nothing to judge ("not set: all 0 NPU(s) visible" had passed).
    raw = node_raw({"ASCEND_RT_VISIBLE_DEVICES": None}, npus=0)
    [r] = [r for r in run(env.test_visible_devices, H, make_facts(raw=raw)) if r.subject == "ASCEND_RT_VISIBLE_DEVICES"]
    assert r.outcome == "skipped" and "no /dev/davinciN device nodes" in r.message, r
    del raw["probe.devices"]  # not listed at all (a probe cut short): not evaluated, not "no NPU"
    [r] = [r for r in run(env.test_visible_devices, H, make_facts(raw=raw)) if r.subject == "ASCEND_RT_VISIBLE_DEVICES"]
    assert r.outcome == "error" and "were not listed" in r.message and r.remedy, r
    for value in ("NoDevFiles", ""):  # nothing visible is definite, NPUs or not
        raw = node_raw({"ASCEND_RT_VISIBLE_DEVICES": value}, npus=0)
        [r] = [r for r in run(env.test_visible_devices, H, make_facts(raw=raw)) if r.subject == "ASCEND_RT_VISIBLE_DEVICES"]
        assert r.outcome == "failed" and "0..-1" not in r.message, r.message
    [r] = [r for r in run(env.test_visible_devices, H, make_facts(raw=node_raw({"ASCEND_RT_VISIBLE_DEVICES": "0,9,9"})))
           if r.subject == "ASCEND_RT_VISIBLE_DEVICES"]
    assert "9 beyond the 8 NPU(s)" in r.message and "9 listed twice" in r.message


@pytest.mark.parametrize("conn, exe, outcomes", [
    ("1200", None, ["passed", "passed"]), (None, None, ["warning", "passed"]), ("7200", "0", ["passed", "passed"]),
    ("abc", "100", ["warning", "warning"]), ("9000", "7200", ["warning", "passed"])])
def test_hccl_timeouts(conn, exe, outcomes):
    results = run(env.test_hccl_timeouts, H, facts_of(env_={"HCCL_CONNECT_TIMEOUT": conn, "HCCL_EXEC_TIMEOUT": exe}))
    assert [r.outcome for r in results] == outcomes
    # Each subject's own remedy: the connect timeout's does not talk about the exec timeout.
    for r in results:
        if r.outcome == "warning":
            other = "HCCL_EXEC_TIMEOUT" if r.subject == "HCCL_CONNECT_TIMEOUT" else "HCCL_CONNECT_TIMEOUT"
            assert f"export {r.subject}=" in r.remedy and other not in r.remedy, r.remedy


@pytest.mark.parametrize("chip, exe, outcome", [
    ("910B4", "0", "passed"), ("910B4", "36000", "passed"),  # A2: 0 = never, up to 2^31-1
    ("910ProB", "0", "warning"), ("910A", "36000", "warning"), ("910A", "17340", "passed"),
    ("310P3", "0", "warning"), ("Ascend910_9392", "0", "passed"),  # A3 as A2
    ("Ascend910", "0", "passed"),  # what npu-smi prints for an A3 die: not taken for A1
])
def test_hccl_exec_timeout_range_follows_the_chip(chip, exe, outcome):
    # A1 and 310P take (0, 17340]: 0 ("never") and larger values are out of range there.
    host = make_host(npus_per_node=8, chip=chip)
    results = run(env.test_hccl_timeouts, host, facts_of(env_={"HCCL_CONNECT_TIMEOUT": "1200",
                                                             "HCCL_EXEC_TIMEOUT": exe}))
    [r] = [r for r in results if r.subject == "HCCL_EXEC_TIMEOUT"]
    assert r.outcome == outcome, r.message
    if outcome == "warning":
        assert "17340" in r.message and host.vars["chip"] not in ("910B4",)


@pytest.mark.parametrize("exe, says", [
    ("0", "caps at 1091 s (not never)"), ("7200", "caps at 1091 s (not 7200 s)"),
    (None, "default 1091 s in AIV mode"), ("1000", "HCCL_EXEC_TIMEOUT=1000")])
def test_hccl_exec_timeout_in_aiv_mode_says_what_applies(exe, says):
    results = run(env.test_hccl_timeouts, H, facts_of(env_={"HCCL_CONNECT_TIMEOUT": "1200", "HCCL_EXEC_TIMEOUT": exe,
                                                            "HCCL_OP_EXPANSION_MODE": "AIV"}))
    [r] = [r for r in results if r.subject == "HCCL_EXEC_TIMEOUT"]
    assert r.outcome == "passed" and says in r.message, r.message
    [short] = [r for r in run(env.test_hccl_timeouts, H, facts_of(env_={
        "HCCL_CONNECT_TIMEOUT": "1200", "HCCL_EXEC_TIMEOUT": "100", "HCCL_OP_EXPANSION_MODE": "AIV"}))
        if r.subject == "HCCL_EXEC_TIMEOUT"]
    assert short.outcome == "warning" and "600..1091 s in AIV mode" in short.expected
    # Hundredths of a second are valid in AIV (and AI_CPU) mode, not elsewhere.
    for mode, outcome in (("AIV", "passed"), ("AI_CPU", "passed"), (None, "warning")):
        [r] = [r for r in run(env.test_hccl_timeouts, H, facts_of(env_={
            "HCCL_CONNECT_TIMEOUT": "1200", "HCCL_EXEC_TIMEOUT": "1000.25", "HCCL_OP_EXPANSION_MODE": mode}))
            if r.subject == "HCCL_EXEC_TIMEOUT"]
        assert r.outcome == outcome, (mode, r.message)


def test_recommended():
    ok(run(env.test_recommended, H, facts_of()))
    results = run(env.test_recommended, H, facts_of(env_={"TASK_QUEUE_ENABLE": None, "ASCEND_GLOBAL_LOG_LEVEL": "0",
                                                         "PYTORCH_NPU_ALLOC_CONF": "max_split_size_mb:128"}))
    assert {r.subject for r in bad(results)} == {"TASK_QUEUE_ENABLE", "ASCEND_GLOBAL_LOG_LEVEL", "PYTORCH_NPU_ALLOC_CONF"}
    assert all(r.outcome == "warning" for r in bad(results))
    # The remedy gives the FAQ's values (M 18: ASCEND_GLOBAL_LOG_LEVEL=1).
    assert all("ASCEND_GLOBAL_LOG_LEVEL=1 " in r.remedy for r in bad(results))


def test_vllm_nz():
    assert run(env.test_vllm_nz, H, facts_of())[0].outcome == "skipped"
    stack = out(stack_output(packages={**PACKAGES, "vllm-ascend": "0.11.0"}))
    [r] = run(env.test_vllm_nz, H, facts_of(python_dot_stack=stack))
    assert r.outcome == "warning" and "unset" in r.message
    assert run(env.test_vllm_nz, H, facts_of(env_={"VLLM_ASCEND_ENABLE_NZ": "0"}, python_dot_stack=stack))[0].outcome == "passed"


@pytest.mark.parametrize("value, outcome", [("0", "passed"), (" 0", "passed"), ("00", "passed"), ("1", "warning"),
                                            ("2", "warning"), ("false", "warning"), ("False", "warning")])
def test_vllm_nz_takes_what_vllm_ascend_reads_with_int(value, outcome):
    """vllm-ascend reads the variable with int(): "false" passed here and stopped vllm-ascend's start-up
    with a ValueError (found by review)."""
    stack = out(stack_output(packages={**PACKAGES, "vllm-ascend": "0.11.0"}))
    [r] = run(env.test_vllm_nz, H, facts_of(env_={"VLLM_ASCEND_ENABLE_NZ": value}, python_dot_stack=stack))
    assert r.outcome == outcome, r.message
    if value.lower() == "false":
        explained(r, "not a number", "int()")


# -- hccl ---------------------------------------------------------------------------------------

def test_device_ip_missing_and_duplicate():
    assert len(ok(run(hccl.test_device_ip, H, facts_of()))) == 8
    raw = node_raw(hccn_dot_ip__2=out("", rc=1, stderr=fixture("hccn_tool/ip/unconfigured-stderr.txt")),
                   hccn_dot_ip__5=out("ipaddr:29.1.112.10\nnetmask:255.255.0.0\n"))
    results = bad(run(hccl.test_device_ip, H, make_facts(raw=raw)))
    assert {r.subject for r in results} == {"npu2", "npu0", "npu5"}
    by = {r.subject: r for r in results}  # remedies with the NPU's own number, not -i <N>
    assert by["npu2"].remedy.startswith("On node-01: Configure npu2's RoCE address: hccn_tool -i 2 -ip -s address")
    assert "address_2 and netmask_2 lines" in by["npu2"].remedy
    assert by["npu5"].remedy.startswith("On node-01: Give npu5 (or npu0) its own address instead of 29.1.112.10: "
                                        "hccn_tool -i 5 -ip -s address")


@pytest.mark.parametrize("printed, says", [
    ("ipaddr:0.0.0.0\nnetmask:0.0.0.0\n", "ipaddr 0.0.0.0, the unspecified address"),
    ("ipaddr:127.0.0.1\nnetmask:255.0.0.0\n", "ipaddr 127.0.0.1, a loopback address"),
    ("ipaddr:224.0.0.5\nnetmask:255.255.255.0\n", "ipaddr 224.0.0.5, a multicast address"),
    ("ipaddr:29.1.112.13\n", "ipaddr 29.1.112.13 without a netmask line")])
def test_device_ip_that_cannot_carry_hccl_fails(printed, says):
    [r] = bad(run(hccl.test_device_ip, H, make_facts(raw=node_raw(hccn_dot_ip__3=out(printed)))))
    assert r.subject == "npu3" and r.outcome == "failed"
    explained(r, f"hccn_tool -i 3 -ip -g: {says}")


@pytest.mark.parametrize("rc, stderr, outcome, says", [
    # The driver exits with 0x400D & 0xFF = 13 and says so when no IP was preset; some say nothing.
    (13, "hccn_tool/ip/unconfigured-stderr.txt", "failed", "no device IP configured"),
    (1, "hccn_tool/ip/unconfigured-stderr.txt", "failed", "no device IP configured"),
    (1, None, "failed", "no device IP configured"),
    # Any other failure (UDA_DSMI_EXE_ERR, exit 1) is not an answer: the port may well have an IP.
    (1, "Command execute failed!\n", "error", "failed with exit code 1: Command execute failed!"),
    (12, "permission denied: pls check this cmd run permission.\n", "error", "permission denied"),
])
def test_device_ip_unconfigured_is_told_from_a_failure(rc, stderr, outcome, says):
    text = fixture(stderr) if stderr and stderr.endswith(".txt") else (stderr or "")
    raw = node_raw(hccn_dot_ip__2=out("", rc=rc, stderr=text))
    [r] = [r for r in run(hccl.test_device_ip, H, make_facts(raw=raw)) if r.subject == "npu2"]
    assert r.outcome == outcome and says in r.message, r.message
    if outcome == "error" and rc == 12:
        assert "sudo: true" in r.remedy


def test_netdetect_unset_address_reads_as_none():
    assert hccn.parse_netdetect("netdetect address: 0.0.0.0\n") is None
    assert hccn.parse_netdetect("netdetect address: 10.1.1.1\n") == "10.1.1.1"


def test_net_health():
    ok(run(hccl.test_net_health, H, facts_of()))
    raw = node_raw(hccn_dot_net_health__1=out(fixture("hccn_tool/net_health/init.txt")),
                   hccn_dot_netdetect__1=out("", rc=1),
                   hccn_dot_net_health__4=out(fixture("hccn_tool/net_health/socket-fail.txt")))
    results = {r.subject: r for r in bad(run(hccl.test_net_health, H, make_facts(raw=raw)))}
    assert results["npu1"].outcome == "warning" and "no detect IP" in results["npu1"].message
    assert results["npu4"].outcome == "failed"
    explained(results["npu4"], "Socket fail")
    assert "hccn_tool -i 4 -ip -g; hccn_tool -i 4 -gateway -g; hccn_tool -i 4 -link -g" in results["npu4"].remedy
    assert "hccn_tool -i 1 -netdetect -s address <gateway IP>" in results["npu1"].remedy
    # Init with a detect address set: detection has not started; that address is named.
    raw = node_raw(hccn_dot_net_health__6=out(fixture("hccn_tool/net_health/init.txt")),
                   hccn_dot_netdetect__6=out("netdetect address: 10.1.1.1\n"))
    [r] = bad(run(hccl.test_net_health, H, make_facts(raw=raw)))
    assert "detection not started" in r.message and "npu6 has detect address 10.1.1.1" in r.remedy, r
    # Right after a detect IP is set: look again, not a failure.
    [r] = bad(run(hccl.test_net_health, H, facts_of(hccn_dot_net_health__2=out("net health status: Detect ip set\n"))))
    assert (r.subject, r.outcome) == ("npu2", "warning") and "just set" in r.message
    assert "hccn_tool -i 2 -net_health -g again" in r.remedy


def test_link_downs_over_a_day_old_are_not_flapping_now():
    """The counts run since the driver loaded: links that bounced at boot, or once last month,
    warned forever.  The last down within a day of the tool's own clock is flapping."""
    def stat(now, last_down):
        return ("[devid 3]current time        : " + now + "\n[devid 3]link up count       : 6\n"
                "[devid 3]link down count     : 5\n[devid 3]link change records :\n"
                "[devid 3]    " + last_down + "    LINK UP\n[devid 3]    " + last_down + "    LINK DOWN\n")

    settled = stat("Wed Aug  9 03:09:26 2023", "Tue Aug  1 14:43:40 2023")
    assert hccn.parse_link_stat(settled).current_time == "Wed Aug  9 03:09:26 2023"
    ok(run(hccl.test_link_up, H, facts_of(hccn_dot_link_stat__3=out(settled))))
    recent = stat("Wed Aug  2 03:09:26 2023", "Tue Aug  1 14:43:40 2023")
    [r] = bad(run(hccl.test_link_up, H, facts_of(hccn_dot_link_stat__3=out(recent))))
    assert (r.subject, r.outcome) == ("npu3", "warning") and "down 5 times" in r.message
    # Without the tool's clock (or records) it stays a warning, as before.
    no_clock = recent.replace("[devid 3]current time        : Wed Aug  2 03:09:26 2023\n", "")
    assert bad(run(hccl.test_link_up, H, facts_of(hccn_dot_link_stat__3=out(no_clock))))


def test_link_flapping_warns_in_link_up():
    ok(run(hccl.test_link_up, H, facts_of()))
    flap = "[devid 3]link up count       : 6\n[devid 3]link down count     : 5\n[devid 3]link change records :\n"
    results = bad(run(hccl.test_link_up, H, facts_of(hccn_dot_link_stat__3=out(flap))))
    [r] = results
    assert (r.subject, r.outcome) == ("npu3", "warning") and "down 5 times" in r.message
    # Older drivers: no down count, records kept short; 40 link-ups since boot are 39 downs.
    old_driver = ("[devid 3]link up count       : 40\n[devid 3]link change records :\n"
                  "[devid 3]    Tue Aug  1 14:43:40 2022    LINK UP\n[devid 3]    Tue Aug  1 14:43:40 2022    LINK DOWN\n")
    [r] = bad(run(hccl.test_link_up, H, facts_of(hccn_dot_link_stat__3=out(old_driver))))
    assert (r.subject, r.outcome) == ("npu3", "warning") and "down 39 times" in r.message


def test_one_machine_listed_twice_is_named_as_such_not_as_duplicate_device_ips():
    """node-01 by name and node-01-ip by address: "device IP 29.1.112.10 on node-01,node-01-ip
    npu0" with the remedy to re-address NPUs."""
    twins = [make_host("node-01", address="10.0.0.1"), make_host("node-01-ip", address="10.0.0.1")]
    other = make_host("node-02", address="10.0.0.2")
    others = {f"hccn_dot_ip__{i}": out(f"ipaddr:29.2.0.{i}\n") for i in range(8)}
    results = run(hccl.test_device_ip_unique, cluster=cluster_of(
        (twins[0], make_facts("node-01", raw=node_raw())), (twins[1], make_facts("node-01-ip", raw=node_raw())),
        (other, make_facts("node-02", raw=node_raw(**others)))))
    [r] = bad(results)
    assert r.outliers == ("node-01", "node-01-ip") and not [x for x in results if x.outcome == "passed"], results
    explained(r, "node-01 and node-01-ip report the same interfaces and addresses and the same 8 device IP(s)",
              "one machine listed 2 times in the inventory")
    assert r.remedy.startswith("List the machine once in the inventory")
    # Two machines with their own addresses and a copied hccn.conf: duplicate device IPs, as before.
    [r, *_] = bad(run(hccl.test_device_ip_unique, cluster=cluster_of(
        (twins[0], make_facts("node-01", raw=node_raw())), (other, make_facts("node-02", raw=node_raw())))))
    assert "device IP 29.1.112.10 on node-[01-02] npu0" in r.message


def test_device_ip_unique_names_the_npus_it_could_not_read_as_a_set_per_node():
    hosts = [make_host("node-01", address="10.0.0.1"), make_host("node-02", address="10.0.0.2")]
    hung = {f"hccn_dot_ip__{i}": out("", rc=124) for i in range(8)}
    others = {f"hccn_dot_ip__{i}": out(f"ipaddr:29.2.0.{i}\n") for i in range(8)}
    results = run(hccl.test_device_ip_unique, cluster=cluster_of(
        (hosts[0], make_facts("node-01", raw=node_raw(**hung))), (hosts[1], make_facts("node-02", raw=node_raw(**others)))))
    [r] = [r for r in results if r.outcome == "error"]
    assert r.message == "device IP unreadable on node-01 npu[0-7]" and r.outliers == ("node-01",), r


def test_device_ip_unique_across_nodes():
    hosts = [make_host("node-01"), make_host("node-02")]
    other = {f"hccn_dot_ip__{i}": out(f"ipaddr:29.2.0.{i}\n") for i in range(8)}
    ok(run(hccl.test_device_ip_unique, cluster=cluster_of(
        (hosts[0], make_facts("node-01", raw=node_raw())), (hosts[1], make_facts("node-02", raw=node_raw(**other))))))
    other["hccn_dot_ip__0"] = out("ipaddr:29.1.112.10\n")
    [r] = bad(run(hccl.test_device_ip_unique, cluster=cluster_of(
        (hosts[0], make_facts("node-01", raw=node_raw())), (hosts[1], make_facts("node-02", raw=node_raw(**other))))))
    assert r.outliers == ("node-01", "node-02") and "29.1.112.10" in r.message
    explained(r, "device IP 29.1.112.10 on node-[01-02] npu0")
    # A copied hccn.conf on a fleet: one address per NPU on every node, each named once as a node set.
    fleet = [(make_host(f"node-{i:04d}", address=f"10.1.{i // 250}.{i % 250 + 1}"),
              make_facts(f"node-{i:04d}", raw=node_raw())) for i in range(1, 1001)]
    results = bad(run(hccl.test_device_ip_unique, cluster=cluster_of(*fleet)))
    assert len(results) == 8 and all(len(r.outliers) == 1000 for r in results)
    assert "device IP 29.1.112.10 on node-[0001-1000] npu0;" in results[0].message, results[0].message
    assert all(len(r.message) < 400 for r in results), results[0].message
    # NPUs that differ are listed one by one.
    other["hccn_dot_ip__5"] = out("ipaddr:29.1.112.10\n")
    [r] = bad(run(hccl.test_device_ip_unique, cluster=cluster_of(
        (hosts[0], make_facts("node-01", raw=node_raw())), (hosts[1], make_facts("node-02", raw=node_raw(**other))))))
    assert "device IP 29.1.112.10 on node-[01-02] npu0, node-02 npu5" in r.message

    # Twice on one node is twice in the cluster: it said "15 device IPs, all distinct" for 16 NPUs.
    [r] = bad(run(hccl.test_device_ip_unique, cluster=cluster_of(
        (hosts[0], make_facts("node-01", raw=node_raw(hccn_dot_ip__1=out("ipaddr:29.1.112.10\n")))),
        (hosts[1], make_facts("node-02", raw=node_raw(**{f"hccn_dot_ip__{i}": out(f"ipaddr:29.2.0.{i}\n")
                                                          for i in range(8)}))))))
    assert r.outliers == ("node-01",)
    explained(r, "device IP 29.1.112.10 on node-01 npu0, node-01 npu1")
    # A node whose device IPs cannot be read is the outlier of its own result (its matrix cell).
    results = run(hccl.test_device_ip_unique, cluster=cluster_of(
        (hosts[0], make_facts("node-01", raw=node_raw(hccn_dot_ip__2=out("", rc=1, stderr="Cmd execute failed!")))),
        (hosts[1], make_facts("node-02", raw=node_raw(**{f"hccn_dot_ip__{i}": out(f"ipaddr:29.2.0.{i}\n")
                                                          for i in range(8)})))))
    [unread] = [r for r in results if r.outcome == "error"]
    assert unread.outliers == ("node-01",) and "node-01 npu2" in unread.message


def test_port_range_set_on_some_nodes_only():
    """HCCL_NPU_SOCKET_PORT_RANGE=auto on node-01 and not on node-02: both skipped ("one process per
    NPU"), though every card of a communicator must set it if one does."""
    one, two = make_host("node-01", address="10.0.0.1"), make_host("node-02", address="10.0.0.2")
    with_range = make_facts("node-01", raw=node_raw(env_={"HCCL_NPU_SOCKET_PORT_RANGE": "auto"}))
    without = make_facts("node-02", raw=node_raw())
    cl = cluster_of((one, with_range), (two, without))
    [r] = run(hccl.test_port_range, two, without, cl)
    assert r.outcome == "warning" and "not set on node-02, but node-01 sets it" in r.message, r.message
    assert run(hccl.test_port_range, one, with_range, cl)[0].outcome == "skipped"
    both = cluster_of((one, with_range), (two, make_facts("node-02", raw=node_raw(env_={"HCCL_NPU_SOCKET_PORT_RANGE": "auto"}))))
    assert run(hccl.test_port_range, two, both.facts["node-02"], both)[0].outcome == "skipped"


def test_port_range():
    assert run(hccl.test_port_range, H, facts_of())[0].outcome == "skipped"
    # Two processes on an NPU before a launch are leftovers (npu.idle warns), not a reason to ask for a
    # port range: it said both "stop the leftover" and "it is a colocated job" (found by review).
    two = fixture("npu-smi/info/a2-910b1-23.0.rc3.3-busy-2npu-docstring.txt").replace(
        "| 1       0                 | 576491  ", "| 0       0                 | 576491  ")
    assert two.count("| 0       0                 | 5764") == 2
    [r] = run(hccl.test_port_range, H, facts_of(npu_smi_dot_info=out(two)))
    assert r.outcome == "skipped" and "npu-smi info shows 2 processes on NPU 0 now (leftovers, see npu.idle" in r.message
    [r] = run(hccl.test_port_range, make_host(processes_per_npu=2), facts_of())
    assert r.outcome == "warning"
    [r] = run(hccl.test_port_range, make_host(processes_per_npu=2), facts_of(env_={"HCCL_NPU_SOCKET_PORT_RANGE": "auto"}))
    assert r.outcome == "passed"


@pytest.mark.parametrize("value, outcome, says", [
    ("61000-61050", "passed", None), ("61000,61050-61100", "passed", None), ("AUTO", "passed", None),
    ("61000-61002", "warning", "gives 3 ports for processes_per_npu=4"),
    ("16666", "warning", "gives 1 port for"),
    ("61050-61000", "warning", "61050-61000 runs backwards"),
    ("61000-61010,61005-61020", "warning", "its ranges overlap"),
    ("abc", "warning", "'abc' is neither a port nor a range"),
    ("70000-70010", "warning", "70000-70010 is outside 1..65535"),
])
def test_port_range_value_is_read(value, outcome, says):
    """Any value passed; one HCCL cannot use (or too few ports for the processes sharing an NPU)
    leaves them binding the same port."""
    [r] = run(hccl.test_port_range, make_host(processes_per_npu=4),
              facts_of(env_={"HCCL_NPU_SOCKET_PORT_RANGE": value}))
    assert r.outcome == outcome, r
    if says:
        explained(r, says)


# -- npu, devices -----------------------------------------------------------------------------

def test_count_and_type():
    ok(run(npu.test_count_and_type, H, facts_of()))
    results = bad(run(npu.test_count_and_type, make_host(npus_per_node=16, chip="910B3"), facts_of()))
    assert {r.subject for r in results} == {"count", "type"}
    raw = node_raw(npus=16)
    raw["npu_smi.info"] = out(fixture("npu-smi/info/a3-ascend910-24.1.rc3.7-classic-idle.txt"))
    raw["npu_smi.board"] = out(fixture("npu-smi/board/a3-9392-chip-npu0-c0-head.txt"))
    for chip in ("Ascend910", "ascend910_9392"):
        ok(run(npu.test_count_and_type, make_host(npus_per_node=8, chip=chip), make_facts(raw=raw)))
    # The board unread (a sudo refusal, a timeout): A3's table names only the family, so the SoC the
    # inventory names is not known, not wrong (it failed at error severity on a healthy node).
    raw["npu_smi.board"] = out("", rc=1, stderr="sudo: a password is required")
    [r] = [r for r in run(npu.test_count_and_type, make_host(npus_per_node=8, chip="Ascend910_9392"),
                          make_facts(raw=raw)) if r.subject == "type"]
    assert r.outcome == "error" and r.message.startswith("not evaluated: npu-smi info names the family Ascend910 only")
    [r] = bad(run(npu.test_count_and_type, make_host(npus_per_node=8, chip="910B3"), make_facts(raw=raw)))
    assert r.outcome == "failed" and "chip Ascend910" in r.message


def _without_chip(text, npu, phy):
    """npu-smi info's table with the chip of Phy-ID ``phy`` (its two rows and the rule after them) gone."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines[:-1]):
        nxt = lines[i + 1].strip("|").split()
        if line.strip("|").split()[:1] == [str(npu)] and nxt[:2] == ["1", str(phy)]:
            return "".join(lines[:i] + lines[i + 3:])
    raise AssertionError(f"no chip {phy} of npu{npu} in the table")


def test_count_and_type_fails_an_a3_npu_that_lost_a_die():
    """An A3 node with one die gone from npu-smi info (NPU 6 listing one chip of two) passed every
    check: 8 NPU ids still, and 16 /dev/davinci nodes against the 2 chips per NPU the others show."""
    text = fixture("npu-smi/info/a3-ascend910-24.1.rc3.7-classic-idle.txt")
    raw = node_raw(npus=16)
    raw["npu_smi.info"] = out(_without_chip(text, npu=6, phy=13))
    results = run(npu.test_count_and_type, make_host(npus_per_node=8), make_facts(raw=raw))
    [r] = [r for r in results if r.subject == "chips"]
    assert r.outcome == "failed" and "npu6 lists 1 chip(s) in npu-smi info, the other NPUs 2" in r.message, r.message
    raw["npu_smi.info"] = out(text)
    assert not [r for r in run(npu.test_count_and_type, make_host(npus_per_node=8), make_facts(raw=raw))
                if r.subject == "chips"]
    # A 310P Duo node of two cards whose first card lost a chip: a tie, read by the order of the NPUs.
    duo = fixture("npu-smi/info/310p3-24.1.rc2-host-npu1-2.txt")
    raw["npu_smi.info"] = out(_without_chip(duo, npu=1, phy=1))
    [r] = [r for r in run(npu.test_count_and_type, make_host(), make_facts(raw=raw)) if r.subject == "chips"]
    assert r.outcome == "failed" and "npu1 lists 1 chip(s)" in r.message, r.message


def test_hardware_agree_tells_a3_socs_apart_by_the_board():
    """Every A3 die is named Ascend910 in the table: 9391 and 9392 nodes in one group agreed."""
    a3 = fixture("npu-smi/info/a3-ascend910-24.1.rc3.7-classic-idle.txt")
    board = fixture("npu-smi/board/a3-9392-chip-npu0-c0-head.txt")
    hosts = [make_host(f"node-0{i}", groups=["worker"]) for i in (1, 2, 3)]

    def node(name, soc):
        raw = node_raw(npus=16)
        raw["npu_smi.info"] = out(a3)
        raw["npu_smi.board"] = out(board.replace("9392", soc)) if soc else out("", rc=1, stderr="timed out")
        return make_facts(name, raw=raw)

    [r] = bad(run(npu.test_hardware_agree, cluster=cluster_of(
        *[(h, node(h.name, "9391" if h.name == "node-02" else "9392")) for h in hosts])))
    assert r.outliers == ("node-02",) and "ascend910_9391" in r.message, r.message
    # One board unread: the SoC is not compared (the unread node would differ by that alone).
    ok(run(npu.test_hardware_agree, cluster=cluster_of(
        *[(h, node(h.name, None if h.name == "node-02" else "9392")) for h in hosts])))


def test_hardware_agree():
    hosts = [make_host(f"node-0{i}", groups=["worker"]) for i in (1, 2, 3)]
    ok(run(npu.test_hardware_agree, cluster=cluster_of(*[(h, make_facts(h.name, raw=node_raw())) for h in hosts])))
    odd = node_raw(npu_smi_dot_info=out(fixture("npu-smi/info/a2-910b1-23.0.rc2-idle-no-proc-section.txt")))
    [r] = bad(run(npu.test_hardware_agree, cluster=cluster_of(
        (hosts[0], make_facts("node-01", raw=node_raw())), (hosts[1], make_facts("node-02", raw=odd)),
        (hosts[2], make_facts("node-03", raw=node_raw())))))
    assert r.outliers == ("node-02",) and "910B1" in r.message

    # head and worker are roles, not hardware groups: one head and one worker are compared together.
    a3 = node_raw(npu_smi_dot_info=out(fixture("npu-smi/info/a3-ascend910-24.1.rc3.7-classic-idle.txt")))
    head, worker = make_host("node-01", groups=["head"]), make_host("node-02", groups=["worker"])
    [r] = bad(run(npu.test_hardware_agree, cluster=cluster_of((head, make_facts("node-01", raw=a3)),
                                                              (worker, make_facts("node-02", raw=node_raw())))))
    # Two nodes, two kinds: no majority, both named, neither blamed by inventory order.
    assert r.outliers == ("node-01", "node-02") and "no majority" in r.message, r.message
    # Roles the inventory declares different NPU counts for are compared within each declaration.
    small = node_raw(npu_smi_dot_info=out(fixture("npu-smi/info/a2-910b1-23.0.rc3.3-busy-2npu-docstring.txt")))
    head4, worker8 = make_host("node-01", groups=["head"], npus_per_node=2), make_host("node-02", groups=["worker"],
                                                                                       npus_per_node=8)
    results = run(npu.test_hardware_agree, cluster=cluster_of((head4, make_facts("node-01", raw=small)),
                                                              (worker8, make_facts("node-02", raw=node_raw()))))
    assert {r.outcome for r in results} == {"passed"} and len(results) == 2, [r.message for r in results]
    # A worker declaring nothing is compared with the workers (it was alone in a bucket and passed).
    bare = make_host("node-03", groups=["worker"])
    results = run(npu.test_hardware_agree, cluster=cluster_of((head4, make_facts("node-01", raw=small)),
                                                              (worker8, make_facts("node-02", raw=node_raw())),
                                                              (bare, make_facts("node-03", raw=small))))
    [bad_bucket] = [r for r in results if r.outcome == "failed"]
    assert bad_bucket.outliers == ("node-02", "node-03") and "npus_per_node 8" in bad_bucket.message
    # A hardware group of its own is still compared within itself only.
    racks = [make_host("a1", groups=["head", "rackA"]), make_host("a2", groups=["worker", "rackA"]),
             make_host("b1", groups=["worker", "rackB"])]
    results = run(npu.test_hardware_agree, cluster=cluster_of((racks[0], make_facts("a1", raw=node_raw())),
                                                              (racks[1], make_facts("a2", raw=node_raw())),
                                                              (racks[2], make_facts("b1", raw=a3))))
    assert {(r.subject, r.outcome) for r in results} == {("rackA", "passed"), ("rackB", "passed")}


def test_hardware_agree_marks_a_node_it_could_not_read_as_not_evaluated():
    """The error named no host, so the matrix showed the group's pass in that node's cell."""
    from preflight.report.matrix import cells

    hosts = [make_host(f"node-0{i}", groups=["worker"]) for i in (1, 2, 3)]
    unread = node_raw(npu_smi_dot_info=out("", rc=124, stderr="timed out"))
    results = run(npu.test_hardware_agree, cluster=cluster_of((hosts[0], make_facts("node-01", raw=node_raw())),
                                                              (hosts[1], make_facts("node-02", raw=node_raw())),
                                                              (hosts[2], make_facts("node-03", raw=unread))))
    [error] = [r for r in results if r.outcome == "error"]
    assert error.outliers == ("node-03",) and error.message.startswith("not evaluated: npu-smi info unreadable on "
                                                                       "node-03")
    assert "its row in the report" in error.remedy
    doc = {"hosts": [{"name": h.name, "reachable": True} for h in hosts], "results": [r.to_json() for r in results]}
    _, _, grid = cells(doc)
    assert grid[("node-03", "cluster.hardware_agree")][0] == "error"
    assert grid[("node-01", "cluster.hardware_agree")][0] == "passed"


def test_idle():
    ok(run(npu.test_idle, H, facts_of()))
    busy = facts_of(npu_smi_dot_info=out(fixture("npu-smi/info/a2-910b1-23.0.rc3.3-busy-2npu-docstring.txt")))
    results = bad(run(npu.test_idle, H, busy))
    assert {r.subject for r in results} == {"npu0", "npu1"} and all(r.outcome == "warning" for r in results)
    explained(results[0], "process 576489 (python) holds 60703 MB")
    assert len(bad(run(npu.test_idle, make_host(hbm_idle_mb=1000), facts_of()))) == 8
    # A driver that leaves the name column empty (a real A3 capture): no "()" in the message.
    unnamed = fixture("npu-smi/info/a2-910b1-23.0.rc3.3-busy-2npu-docstring.txt").replace(
        "| python                   |", "|                          |")
    results = bad(run(npu.test_idle, H, facts_of(npu_smi_dot_info=out(unnamed))))
    assert "process 576489 holds 60703 MB" in results[0].message, results[0].message


def test_idle_without_the_process_table_says_a_process_cannot_be_ruled_out():
    cut = facts_of(npu_smi_dot_info=out(fixture("npu-smi/info/a2-910b1-23.0.rc2-idle-no-proc-section.txt")))
    results = run(npu.test_idle, H, cut)
    [r] = bad(results)
    assert r.subject == "processes" and r.outcome == "warning"
    explained(r, "no process table", "cannot be ruled out")
    assert sum(x.outcome == "passed" for x in results) == 8  # the chips are still judged on HBM use
    [r] = run(hccl.test_port_range, H, cut)
    assert r.outcome == "skipped" and "one process per NPU" in r.message


def test_driver_install_complete():
    ok(run(npu.test_driver_install_complete, H, facts_of()))
    raw = node_raw(npu_smi_dot_info=out(fixture("npu-smi/info/a2-910b4-25.0.rc1.1-driver-incomplete-warning.txt")))
    [r] = run(npu.test_driver_install_complete, H, make_facts(raw=raw))
    explained(r, "may not be completely installed")
    ok(run(npu.test_driver_install_complete, H, facts_of(
        ascend_dot_files=out(files_output(install="ascend_install.info/no-install-status.txt")))))


def test_driver_mounts():
    ok(run(devices.test_driver_mounts, H, facts_of()))
    ok(run(devices.test_driver_mounts, H, facts_of(ascend_dot_files=out(files_output(container=True)))))
    raw = node_raw(npu_smi_dot_info=out("", rc=127), ascend_dot_files=out(files_output(container=True)))
    [r] = bad(run(devices.test_driver_mounts, H, make_facts(raw=raw)))
    # The cause seen is the missing binary: said so, not the dcmi/add-ons mounts (found by review).
    assert r.subject == "npu-smi" and "not found" in r.message and "(not mounted into the container)" in r.message
    assert "-v /usr/local/bin/npu-smi:/usr/local/bin/npu-smi" in r.remedy
    raw = node_raw(npu_smi_dot_info=out("", rc=127))
    [r] = bad(run(devices.test_driver_mounts, H, make_facts(raw=raw)))
    # The driver folder is there (passed above it): not "not installed" (found by review).
    assert "though the driver folder is there" in r.message and "the NPU driver is not installed" not in r.message
    raw = node_raw(npu_smi_dot_info=out("", rc=127), ascend_dot_files=out(
        files_output().replace("@@L\tdriver_dir", "@@X")))
    assert "(the NPU driver is not installed)" in bad(run(devices.test_driver_mounts, H, make_facts(raw=raw)))[-1].message
    # npu-smi runs and says the device was not found: not a PATH problem.
    raw = node_raw(npu_smi_dot_info=out("Failed to get device count, the Ascend device was not found.\n", rc=1))
    [r] = bad(run(devices.test_driver_mounts, H, make_facts(raw=raw)))
    assert "not on this session's PATH" not in r.message and "device was not found" in r.message, r.message
    raw = node_raw(npu_smi_dot_info=out("", rc=127, stderr="npu-smi: error while loading shared libraries: "
                                                           "libdrvdsmi_host.so: cannot open shared object file\n"),
                   ascend_dot_files=out(files_output(container=True)))
    [r] = bad(run(devices.test_driver_mounts, H, make_facts(raw=raw)))
    assert "its libraries are missing" in r.message, r.message
    raw = node_raw(npu_smi_dot_info=out("", rc=1, stderr="dcmi module initialize failed. ret is -8005\n"),
                   ascend_dot_files=out(files_output(container=True)))
    [r] = bad(run(devices.test_driver_mounts, H, make_facts(raw=raw)))
    assert "in a container without /usr/local/dcmi and /usr/local/Ascend/add-ons mounted" in r.message, r.message
    raw = node_raw(ascend_dot_files=out(files_output().replace("@@L\tdriver_dir", "@@X")))
    [r] = bad(run(devices.test_driver_mounts, H, make_facts(raw=raw)))
    assert r.subject == "driver" and "missing" in r.message


# -- firewall, checkpoint, packages --------------------------------------------------------------

def test_firewall():
    hosts = [make_host("node-01"), make_host("node-02")]
    cl = cluster_of(*[(h, make_facts(h.name)) for h in hosts])
    ok(run(firewall.test_firewall, hosts[0], facts_of(), cl))
    [r] = run(firewall.test_firewall, hosts[0], facts_of(net_dot_firewall=out("firewalld=running\n")), cl)
    assert r.outcome == "warning"
    explained(r, "firewalld is running")
    single = cluster_of((hosts[0], make_facts("node-01")))
    assert run(firewall.test_firewall, hosts[0], facts_of(), single)[0].outcome == "skipped"
    # A login that may not read iptables or ufw has not seen "no firewall".
    denied = ("firewalld=not running\nufw=ERROR: You need to be root to run this script\n"
              "iptables_unreadable=iptables v1.8.9 (nf_tables): Could not fetch rule set generation id: "
              "Permission denied (you must be root)\n")
    [r] = run(firewall.test_firewall, hosts[0], facts_of(net_dot_firewall=out(denied)), cl)
    assert r.outcome == "warning", r.message  # not evaluated, but the check's severity: no NOT READY for it
    assert "cannot read the firewall: ufw status: ERROR: You need to be root" in r.message
    assert "iptables -S INPUT: iptables v1.8.9" in r.message and "as root" in r.remedy
    # In a container without NET_ADMIN the rules cannot be read, and they are the host's: not judged here.
    [r] = run(firewall.test_firewall, hosts[0], facts_of(net_dot_firewall=out(denied),
                                                         ascend_dot_files=out(files_output(container=True))), cl)
    assert r.outcome == "skipped" and "container that cannot read the firewall" in r.message
    # Found active anyway: that is the finding.
    [r] = run(firewall.test_firewall, hosts[0], facts_of(net_dot_firewall=out(denied.replace("not running", "running"))), cl)
    assert r.outcome == "warning"


def test_a_firewall_that_accepts_the_nodes_network_first_passes():
    """Default DROP with the nodes' subnet accepted ahead of it is the usual hardened cluster, and what
    the remedy asks for: it warned all the same."""
    from tests.factsets import IFACES, healthy_raw

    def node(i):  # eth0 10.0.0.i/24, and docker0's 172.17.0.1 that every node has
        nics = json.loads(json.dumps(IFACES))
        nics[1]["addr_info"] = [{"family": "inet", "local": f"10.0.0.{i}", "prefixlen": 24}]
        nics.append({"ifname": "docker0", "flags": ["UP"], "operstate": "UP",
                     "addr_info": [{"family": "inet", "local": "172.17.0.1", "prefixlen": 16}]})
        return make_facts(f"node-0{i}", raw=healthy_raw(interfaces=nics))

    hosts = [make_host("node-01"), make_host("node-02")]
    cl = cluster_of((hosts[0], node(1)), (hosts[1], node(2)))
    rules = ("iptables=-P INPUT DROP\niptables=-A INPUT -i lo -j ACCEPT\n"
             'iptables=-A INPUT -s 10.0.0.0/24 -m comment --comment "cluster" -j ACCEPT\n')
    [r] = run(firewall.test_firewall, hosts[0], facts_of(net_dot_firewall=out(rules)), cl)
    assert r.outcome == "passed" and "accepted ahead of it (-s 10.0.0.0/24" in r.message, r.message
    # A subnet the other node is not in, or an accept after the drop, leaves the finding.
    for text in (rules.replace("10.0.0.0/24", "192.168.0.0/16"),
                 "iptables=-P INPUT ACCEPT\niptables=-A INPUT -j DROP\niptables=-A INPUT -s 10.0.0.0/24 -j ACCEPT\n"):
        [r] = run(firewall.test_firewall, hosts[0], facts_of(net_dot_firewall=out(text)), cl)
        assert r.outcome == "warning", (text, r.message)
    # A chain INPUT enters before the accept is reached first: its drop stands (iptables -S lists it last).
    harden = ("iptables=-P INPUT ACCEPT\niptables=-A INPUT -j HARDEN\niptables=-A INPUT -s 10.0.0.0/24 -j ACCEPT\n"
              "iptables_chain=-N HARDEN\niptables_chain=-A HARDEN -j DROP\n")
    [r] = run(firewall.test_firewall, hosts[0], facts_of(net_dot_firewall=out(harden)), cl)
    assert r.outcome == "warning", r.message
    # Chains INPUT enters that drop nothing before the accept (kube-proxy's, fail2ban's conditional one),
    # and an accept inside a chain INPUT enters, still let the nodes in.
    for text in ("iptables=-P INPUT DROP\niptables=-A INPUT -j KUBE-FIREWALL\niptables=-A INPUT -s 10.0.0.0/24 -j ACCEPT\n",
                 "iptables=-P INPUT DROP\niptables=-A INPUT -p tcp -m multiport --dports 22 -j f2b-sshd\n"
                 "iptables=-A INPUT -s 10.0.0.0/24 -j ACCEPT\niptables_chain=-N f2b-sshd\niptables_chain=-A f2b-sshd -j RETURN\n",
                 "iptables=-P INPUT DROP\niptables=-A INPUT -j CLUSTER\niptables_chain=-N CLUSTER\n"
                 "iptables_chain=-A CLUSTER -s 10.0.0.0/24 -j ACCEPT\n"):
        [r] = run(firewall.test_firewall, hosts[0], facts_of(net_dot_firewall=out(text)), cl)
        assert r.outcome == "passed", (text, r.message)
    # A subnet holding only an address every node shares (docker0) lets no node in.
    [r] = run(firewall.test_firewall, hosts[0], facts_of(net_dot_firewall=out(rules.replace("10.0.0.0/24", "172.17.0.0/16"))), cl)
    assert r.outcome == "warning", r.message
    # firewalld's zones are not read rule by rule: still a finding.
    [r] = run(firewall.test_firewall, hosts[0], facts_of(net_dot_firewall=out("firewalld=running\n" + rules)), cl)
    assert r.outcome == "warning"


def test_a_firewall_accepting_only_a_pod_network_does_not_let_the_nodes_in():
    """eth0 on 192.168.1.0/24 carries the nodes' traffic, cni0 has a pod-network address of each node's
    own: an accept of 10.0.0.0/8 passed ('every other node has an address there') while every packet
    from the other node, sent from its eth0 address, was dropped."""
    from tests.factsets import IFACES, healthy_raw

    def node(i, env=None):
        nics = json.loads(json.dumps(IFACES))
        nics[1]["addr_info"] = [{"family": "inet", "local": f"192.168.1.{i}", "prefixlen": 24}]
        nics.append({"ifname": "cni0", "flags": ["UP"], "operstate": "UP",
                     "addr_info": [{"family": "inet", "local": f"10.244.{i}.1", "prefixlen": 24}]})
        return make_facts(f"node-0{i}", raw=healthy_raw(interfaces=nics, env=env))

    def verdict(accepted, env=None, address=lambda i: None):
        hosts = [make_host(f"node-0{i}", address=address(i)) for i in (1, 2)]
        cl = cluster_of(*[(h, node(i, env)) for h, i in zip(hosts, (1, 2))])
        rules = f"iptables=-P INPUT DROP\niptables=-A INPUT -s {accepted} -j ACCEPT\n"
        [r] = run(firewall.test_firewall, hosts[0], facts_of(net_dot_firewall=out(rules)), cl)
        return r

    r = verdict("10.0.0.0/8")
    assert r.outcome == "warning" and "iptables INPUT policy" in r.message, r.message
    r = verdict("10.0.0.0/8", address=lambda i: f"192.168.1.{i}")  # by inventory address, too
    assert r.outcome == "warning", r.message
    assert verdict("192.168.1.0/24").outcome == "passed"
    assert verdict("192.168.1.0/24", address=lambda i: f"192.168.1.{i}").outcome == "passed"
    # HCCL left to choose binds cni0 (first by name): its sockets' traffic is not accepted.
    r = verdict("192.168.1.0/24", env={"HCCL_SOCKET_IFNAME": None})
    assert r.outcome == "warning", r.message
    assert verdict("0.0.0.0/0", env={"HCCL_SOCKET_IFNAME": None}).outcome == "passed"


@pytest.mark.parametrize("address", [None, "192.168.1.{i}", "203.0.113.{i}", "fd00::{i}"],
                         ids=["by-name", "own-ipv4", "nat-address", "ipv6-address"])
def test_a_firewall_accepting_the_nodes_subnet_passes_however_the_inventory_names_them(address):
    """An inventory address not on the node (a NAT or elastic IP) or IPv6 (iptables' networks are
    IPv4) was taken as a source the accept must hold: a hardened fleet warned."""
    from tests.factsets import IFACES, healthy_raw

    def node(i):
        nics = json.loads(json.dumps(IFACES))
        nics[1]["addr_info"] = [{"family": "inet", "local": f"192.168.1.{i}", "prefixlen": 24},
                                {"family": "inet6", "local": f"fd00::{i}", "prefixlen": 64}]
        return make_facts(f"node-0{i}", raw=healthy_raw(interfaces=nics))

    hosts = [make_host(f"node-0{i}", address=address.format(i=i) if address else None) for i in (1, 2)]
    cl = cluster_of(*[(h, node(i)) for h, i in zip(hosts, (1, 2))])
    rules = "iptables=-P INPUT DROP\niptables=-A INPUT -s 192.168.1.0/24 -j ACCEPT\n"
    [r] = run(firewall.test_firewall, hosts[0], facts_of(net_dot_firewall=out(rules)), cl)
    assert r.outcome == "passed", r.message
    # ... and a subnet that is not the nodes' still warns, however they are named.
    [r] = run(firewall.test_firewall, hosts[0], facts_of(net_dot_firewall=out(rules.replace("192.168.1.0", "10.9.9.0"))), cl)
    assert r.outcome == "warning", r.message


def test_a_firewall_between_routed_nodes_passes_only_when_every_address_of_theirs_is_accepted():
    """Nodes on subnets of their own (routed), named by host name, the session env unreadable: the
    source is not known, and an accept holding one of a node's two networks passed."""
    from tests.factsets import IFACES, healthy_raw

    def node(i):
        nics = json.loads(json.dumps(IFACES))
        nics[1]["addr_info"] = [{"family": "inet", "local": f"10.1.{i}.5", "prefixlen": 24}]
        nics.append({"ifname": "eth1", "flags": ["UP"], "operstate": "UP",
                     "addr_info": [{"family": "inet", "local": f"172.16.{i}.5", "prefixlen": 24}]})
        raw = healthy_raw(interfaces=nics)
        raw["session.env"] = out("", rc=1, stderr="env: cannot run")
        return make_facts(f"node-0{i}", raw=raw)

    hosts = [make_host(f"node-0{i}") for i in (1, 2)]
    cl = cluster_of(*[(h, node(i)) for h, i in zip(hosts, (1, 2))])
    for accepted, outcome in (("172.16.0.0/16", "warning"), ("10.0.0.0/8,172.16.0.0/16", "passed")):
        rules = "iptables=-P INPUT DROP\n" + "".join(f"iptables=-A INPUT -s {n} -j ACCEPT\n" for n in accepted.split(","))
        [r] = run(firewall.test_firewall, hosts[0], facts_of(net_dot_firewall=out(rules)), cl)
        assert r.outcome == outcome, (accepted, r.message)


def test_a_nat_inventory_address_is_not_taken_as_hccls_either():
    """HCCL's address falls back to the inventory address when the env cannot be read: a NAT address
    in front of the node was then required in the accept."""
    from tests.factsets import IFACES, healthy_raw

    def node(i):
        nics = json.loads(json.dumps(IFACES))
        nics[1]["addr_info"] = [{"family": "inet", "local": f"192.168.1.{i}", "prefixlen": 24}]
        raw = healthy_raw(interfaces=nics)
        raw["session.env"] = out("", rc=1, stderr="env: cannot run")
        return make_facts(f"node-0{i}", raw=raw)

    hosts = [make_host(f"node-0{i}", address=f"203.0.113.{i}") for i in (1, 2)]
    cl = cluster_of(*[(h, node(i)) for h, i in zip(hosts, (1, 2))])
    rules = "iptables=-P INPUT DROP\niptables=-A INPUT -s 192.168.1.0/24 -j ACCEPT\n"
    [r] = run(firewall.test_firewall, hosts[0], facts_of(net_dot_firewall=out(rules)), cl)
    assert r.outcome == "passed", r.message


def test_firewall_names_a_drop_of_a_port_the_cluster_uses():
    """`-A INPUT -p tcp --dport 6379 -j DROP` on the Ray head read "no active firewall", while
    cluster.ray_ports blamed "a firewall on the target"."""
    head, worker = make_host("node-01", groups=["head"]), make_host("node-02", groups=["worker"])
    cl = cluster_of((head, make_facts("node-01")), (worker, make_facts("node-02")))
    ray = "firewalld=not running\niptables=-P INPUT ACCEPT\niptables=-A INPUT -p tcp -m tcp --dport 6379 -j DROP\n"
    [r] = run(firewall.test_firewall, head, facts_of(net_dot_firewall=out(ray)), cl)
    assert r.outcome == "warning", r
    explained(r, "-A INPUT -p tcp -m tcp --dport 6379 -j DROP drops Ray GCS 6379")
    assert "iptables -D INPUT" in r.remedy
    # nftables, a range over HCCL's block; and MASTER_PORT where the node sets it.
    hccl = ("firewalld=not running\nnft_read=\nnft=inet filter input policy accept\n"
            "nft=inet filter input rule tcp dport { 29500, 60010-60020 } drop\n")
    master = {"MASTER_ADDR": "node-01", "MASTER_PORT": "29500"}
    [r] = run(firewall.test_firewall, head, facts_of(net_dot_firewall=out(hccl), env_=master), cl)
    assert r.outcome == "warning" and "HCCL host port 60000-60031, MASTER_PORT 29500" in r.message, r.message
    # On a worker: the master's port and the head's Ray ports are not its to serve.
    [r] = run(firewall.test_firewall, worker, facts_of(net_dot_firewall=out(hccl.replace("60010-60020", "1")),
                                                       env_=master), cl)
    assert r.outcome == "passed", r.message
    [r] = run(firewall.test_firewall, worker, facts_of(net_dot_firewall=out(ray)), cl)
    assert r.outcome == "passed", r.message
    # The nodes' network accepted ahead of the drop: a drop for everyone else, no finding.
    ahead = ray.replace("iptables=-A INPUT -p tcp", "iptables=-A INPUT -s 10.0.0.0/8 -j ACCEPT\niptables=-A INPUT -p tcp")
    nodes = cluster_of((make_host("node-01", groups=["head"], address="10.0.0.1"), make_facts("node-01")),
                       (make_host("node-02", groups=["worker"], address="10.0.0.2"), make_facts("node-02")))
    [r] = run(firewall.test_firewall, nodes.hosts[0], facts_of(net_dot_firewall=out(ahead)), nodes)
    assert r.outcome == "passed", r.message
    # A drop narrowed to a set or a destination is not the port's; `! --dport 22` drops every other port.
    narrowed = ray.replace("-p tcp -m tcp", "-p tcp -m set ! --match-set cluster src -m tcp")
    [r] = run(firewall.test_firewall, head, facts_of(net_dot_firewall=out(narrowed)), cl)
    assert r.outcome == "passed", r.message
    [r] = run(firewall.test_firewall, head, facts_of(net_dot_firewall=out(ray.replace("--dport 6379", "! --dport 22"))),
              cl)
    assert r.outcome == "warning" and "! --dport 22" in r.message, r.message
    # ... but one that excepts the cluster's ports drops none of them.
    spared = ray.replace("-m tcp --dport 6379", "-m multiport ! --dports 22,6379,8265,10001:19999,60000:60031")
    [r] = run(firewall.test_firewall, head, facts_of(net_dot_firewall=out(spared)), cl)
    assert r.outcome == "passed", r.message
    # The same rule twice, an accept of the nodes between: the first still drops them (review).
    twice = ray.replace("iptables=-A INPUT -p tcp -m tcp --dport 6379 -j DROP\n",
                        "iptables=-A INPUT -p tcp -m tcp --dport 6379 -j DROP\niptables=-A INPUT -s 10.0.0.0/8 -j ACCEPT\n"
                        "iptables=-A INPUT -p tcp -m tcp --dport 6379 -j DROP\n")
    [r] = run(firewall.test_firewall, nodes.hosts[0], facts_of(net_dot_firewall=out(twice)), nodes)
    assert r.outcome == "warning", r.message
    # To this node's own address (-d): its drop; to another (a container's): not.
    own = ray.replace("-p tcp -m tcp --dport", "-d 10.0.0.1/32 -p tcp -m tcp --dport")
    [r] = run(firewall.test_firewall, nodes.hosts[0], facts_of(net_dot_firewall=out(own)), nodes)
    assert r.outcome == "warning", r.message
    [r] = run(firewall.test_firewall, nodes.hosts[0], facts_of(net_dot_firewall=out(own.replace("10.0.0.1/32",
                                                                                                  "172.17.0.2/32"))), nodes)
    assert r.outcome == "passed", r.message
    # MASTER_PORT with no MASTER_ADDR to say whose: checked on every node, as before.
    port = ray.replace("--dport 6379", "--dport 29500")
    [r] = run(firewall.test_firewall, worker, facts_of(net_dot_firewall=out(port), env_={"MASTER_PORT": "29500"}), cl)
    assert r.outcome == "warning" and "MASTER_PORT 29500" in r.message, r.message
    # A port no one in the cluster uses: no finding, but not "no active firewall" either.
    other = ray.replace("6379", "2049")
    [r] = run(firewall.test_firewall, head, facts_of(net_dot_firewall=out(other)), cl)
    assert r.outcome == "passed" and r.message.startswith("no blanket firewall") and "none of the cluster's" in r.message
    # Without a Ray head in the inventory, 6379 is nobody's.
    plain = cluster_of((make_host("node-01"), make_facts("node-01")), (make_host("node-02"), make_facts("node-02")))
    [r] = run(firewall.test_firewall, make_host("node-01"), facts_of(net_dot_firewall=out(ray)), plain)
    assert r.outcome == "passed", r


def test_firewall_port_rules_against_accepts_jumps_legacy_and_destinations():
    """Review cases: each was a false pass or a false failure in one version of the port rules."""
    head, worker = make_host("node-01", groups=["head"], address="10.0.0.1"), make_host("node-02", address="10.0.0.2")
    cl = cluster_of((head, make_facts("node-01")), (worker, make_facts("node-02")))

    def outcome(text):
        [r] = run(firewall.test_firewall, head, facts_of(net_dot_firewall=out("firewalld=not running\n" + text)), cl)
        return r.outcome

    # Accepted through a chain INPUT jumps to, ahead of `! --dport 22`: the nodes pass.
    assert outcome("iptables=-P INPUT ACCEPT\niptables=-A INPUT -j NODES\n"
                   "iptables=-A INPUT -p tcp -m tcp ! --dport 22 -j DROP\n"
                   "iptables_chain=-A NODES -s 10.0.0.0/8 -j ACCEPT\n") == "passed"
    # A port drop before the accept that lets the nodes through a later blanket drop: still a drop.
    assert outcome("iptables=-P INPUT ACCEPT\niptables=-A INPUT -p tcp -m tcp --dport 6379 -j DROP\n"
                   "iptables=-A INPUT -s 10.0.0.0/8 -j ACCEPT\niptables=-A INPUT -j DROP\n") == "warning"
    # iptables-legacy's `! --dport 22`; nft's with qualifiers around the port match.
    assert outcome("iptables=-P INPUT ACCEPT\niptables_legacy=-P INPUT ACCEPT\n"
                   "iptables_legacy=-A INPUT -p tcp -m tcp ! --dport 22 -j DROP\n") == "warning"
    assert outcome("nft_read=\nnft=inet filter input policy accept\n"
                   "nft=inet filter input rule meta nfproto ipv4 tcp dport != 22 drop\n") == "warning"
    # In a chain INPUT jumps to: `! --dport 22` and a drop of Ray's port (neither was read), the
    # nodes' network accepted ahead of it in INPUT or in the chain (not credited before), or after it.
    chain = "iptables=-P INPUT ACCEPT\niptables=-A INPUT -j NODES\n"
    assert outcome(chain + "iptables_chain=-A NODES -p tcp -m tcp ! --dport 22 -j DROP\n") == "warning"
    assert outcome(chain + "iptables_chain=-A NODES -p tcp -m tcp --dport 6379 -j DROP\n") == "warning"
    assert outcome("iptables=-P INPUT ACCEPT\niptables=-A INPUT -s 10.0.0.0/8 -j ACCEPT\niptables=-A INPUT -j NODES\n"
                   "iptables_chain=-A NODES -p tcp -m tcp --dport 6379 -j DROP\n") == "passed"
    assert outcome("iptables=-P INPUT ACCEPT\niptables=-A INPUT -j NODES\niptables=-A INPUT -s 10.0.0.0/8 -j ACCEPT\n"
                   "iptables_chain=-A NODES -p tcp -m tcp --dport 6379 -j DROP\n") == "warning"
    assert outcome("iptables=-P INPUT ACCEPT\niptables=-A INPUT -j TRUSTED\n"
                   "iptables=-A INPUT -p tcp -m tcp --dport 6379 -j DROP\n"
                   "iptables_chain=-A TRUSTED -s 10.0.0.0/8 -j ACCEPT\n") == "passed"
    # A chain INPUT does not jump to (listed, but no packet of INPUT's reaches it): not a finding.
    assert outcome("iptables=-P INPUT ACCEPT\n"
                   "iptables_chain=-A OTHER -p tcp -m tcp --dport 6379 -j DROP\n") == "passed"
    [r] = run(firewall.test_firewall, head, facts_of(net_dot_firewall=out(
        "firewalld=not running\n" + chain + "iptables_chain=-A NODES -p tcp -m tcp --dport 6379 -j DROP\n")), cl)
    assert "-A NODES -p tcp -m tcp --dport 6379 -j DROP (INPUT jumps to NODES) drops Ray GCS 6379" in r.message
    # iptables-legacy's drop of Ray's port alone (kube-proxy or docker in legacy mode): it was not read;
    # unless legacy's INPUT accepts the nodes ahead of it; with nft's port rules before it.
    legacy = "iptables=-P INPUT ACCEPT\niptables_legacy=-P INPUT ACCEPT\n"
    assert outcome(legacy + "iptables_legacy=-A INPUT -p tcp -m tcp --dport 6379 -j DROP\n") == "warning"
    assert outcome(legacy + "iptables_legacy=-A INPUT -s 10.0.0.0/8 -j ACCEPT\n"
                            "iptables_legacy=-A INPUT -p tcp -m tcp --dport 6379 -j DROP\n") == "passed"
    assert outcome(legacy + "iptables_legacy=-A INPUT -p tcp -m tcp --dport 2049 -j DROP\n") == "passed"
    both = pv.parse_firewall(legacy + "iptables=-A INPUT -s 10.9.0.0/16 -j ACCEPT\n"
                             "iptables=-A INPUT -p tcp -m tcp --dport 8265 -j DROP\n"
                             "nft_read=\nnft=inet filter input policy accept\nnft=inet filter input rule tcp dport 6380 drop\n"
                             "iptables_legacy=-A INPUT -s 10.0.0.0/8 -j ACCEPT\n"
                             "iptables_legacy=-A INPUT -p tcp -m tcp --dport 6379 -j DROP\n")
    assert both.port_rules == ("-A INPUT -p tcp -m tcp --dport 8265 -j DROP",
                               "nftables chain inet filter input rule `tcp dport 6380 drop`",
                               "iptables-legacy: -A INPUT -p tcp -m tcp --dport 6379 -j DROP"), both.port_rules
    assert both.port_rule_accepts == (("10.9.0.0/16",), (), ("10.0.0.0/8",))
    [r] = run(firewall.test_firewall, head, facts_of(net_dot_firewall=out(
        "firewalld=not running\n" + legacy + "iptables_legacy=-A INPUT -p tcp -m tcp --dport 6379 -j DROP\n")), cl)
    assert "iptables-legacy: -A INPUT -p tcp -m tcp --dport 6379 -j DROP drops Ray GCS 6379" in r.message, r.message
    assert "iptables-legacy for a rule it holds" in r.remedy
    assert outcome("nft_read=\nnft=inet filter input policy accept\n"
                   "nft=inet filter input rule tcp dport 6379 ct state new drop\n") == "warning"
    # `! -d` spares an address; -d to loopback or another host's address is not the nodes' way in.
    for rule, want in (("! -d 10.0.0.1/32", "passed"), ("-d 127.0.0.1/32", "passed"), ("-d 10.0.0.1/32", "warning")):
        assert outcome(f"iptables=-P INPUT ACCEPT\niptables=-A INPUT {rule} -p tcp -m tcp --dport 6379 -j DROP\n") \
            == want, rule


def test_firewall_judges_nftables_and_iptables_rules_alike():
    """`ct state new drop` stops every new connection as iptables' `--ctstate NEW -j DROP` does, and
    was not a finding; an ipset blacklist (`-m set`) drops chosen sources only, and was one."""
    for rule in ("ct state new drop", "meta l4proto tcp drop", "ct state { new } counter drop"):
        assert pv.parse_firewall(f"nft_read=\nnft=inet filter input rule {rule}\n").active == [
            f"nftables chain inet filter input rule `{rule}`"]
    for rule in ("ct state invalid drop", "ip saddr @blacklist drop", 'iifname "eth9" drop', "tcp dport 6379 drop"):
        assert pv.parse_firewall(f"nft_read=\nnft=inet filter input rule {rule}\n").active == [], rule
    for rule in ("-A INPUT -m set --match-set blacklist src -j DROP", "-A INPUT -m recent --rcheck -j DROP"):
        assert pv.parse_firewall(f"iptables=-P INPUT ACCEPT\niptables={rule}\n").active == [], rule
    assert pv.parse_firewall("iptables=-P INPUT ACCEPT\niptables=-A INPUT -m conntrack --ctstate NEW -j DROP\n").active


def test_firewall_reads_nftables_input_chains():
    """nftables-native rules (nftables.service) are not in iptables -S: an input-hook chain's drop
    policy or a rule dropping everything is a finding; matched drops are not; iptables-nft's own
    INPUT chain and firewalld's table are not counted twice."""
    text = ("iptables=-P INPUT ACCEPT\n"
            "nft=inet filter input policy drop\n"
            "nft=inet filter input rule counter packets 0 bytes 0 reject with icmpx admin-prohibited\n"
            "nft=inet filter input rule ct state invalid drop\n"
            "nft=inet filter input rule tcp dport 6379 drop\n"
            'nft=inet filter input rule log prefix "in: " level info drop\n'
            "nft=ip filter INPUT policy accept\n"
            "nft=ip filter INPUT rule counter packets 0 bytes 0 drop\n")
    assert pv.parse_firewall(text).active == [
        "nftables chain inet filter input policy is drop",
        "nftables chain inet filter input rule `counter packets 0 bytes 0 reject with icmpx admin-prohibited`",
        'nftables chain inet filter input rule `log prefix "in: " level info drop`']
    # iptables unreadable or absent: iptables-nft's chain is read from nft.
    assert pv.parse_firewall(text.replace("iptables=-P INPUT ACCEPT\n", "")).active[-1] == (
        "nftables chain ip filter INPUT rule `counter packets 0 bytes 0 drop`")
    firewalld = "firewalld=running\nnft=inet firewalld filter_INPUT rule reject with icmpx admin-prohibited\n"
    assert pv.parse_firewall(firewalld).active == ["firewalld is running"]
    # nft read, nothing else there (a container without iptables): a state, not "no state lines".
    assert pv.parse_firewall("nft_read=\n").active == []
    # IPv6-only hardening (ip6tables-nft's INPUT drop) is not a finding: every link here is IPv4.
    assert pv.parse_firewall("nft_read=\nnft=ip6 filter INPUT policy drop\n").active == []
    accepting = pv.parse_firewall("iptables=-P INPUT ACCEPT\nnft=inet filter input policy accept\n")
    assert accepting.active == [] and accepting.nft_input_chains == 1
    hosts = [make_host("node-01"), make_host("node-02")]
    cl = cluster_of(*[(h, make_facts(h.name)) for h in hosts])
    [r] = run(firewall.test_firewall, hosts[0], facts_of(net_dot_firewall=out(text)), cl)
    assert r.outcome == "warning"
    explained(r, "nftables chain inet filter input policy is drop")
    [r] = run(firewall.test_firewall, hosts[0], facts_of(net_dot_firewall=out(
        "iptables=-P INPUT ACCEPT\nnft=inet filter input policy accept\n")), cl)
    assert r.outcome == "passed" and "1 nftables input chain(s) accepting" in r.message
    denied = "nft_unreadable=Error: Operation not permitted (you must be root)\n"
    [r] = run(firewall.test_firewall, hosts[0], facts_of(net_dot_firewall=out(denied)), cl)
    assert r.outcome == "warning" and "nft list ruleset: Error: Operation not permitted" in r.message


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("nft"),
                    reason="needs root, iproute2 and nft for a netns with its own ruleset")
def test_the_firewall_probe_reads_a_real_nftables_ruleset():
    """The probe's shell, run in a network namespace holding a real nftables ruleset."""
    import subprocess

    from preflight.nodefacts import FIREWALL

    ruleset = ("table inet filter {\n chain input {\n  type filter hook input priority filter; policy drop;\n"
               '  iif "lo" accept\n  tcp dport 22 accept\n  ct state invalid drop\n  counter reject\n }\n'
               " chain forward {\n  type filter hook forward priority filter; policy drop;\n }\n}\n"
               "table ip other {\n set blocked {\n  type ipv4_addr\n  elements = { 10.9.9.9 }\n }\n"
               " chain in2 {\n  type filter hook input priority 10; policy accept;\n"
               "  ip saddr @blocked drop\n }\n}\n")
    ns = f"pf-nft-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=ruleset, text=True, check=True)
        text = subprocess.run(["ip", "netns", "exec", ns, "bash", "-c", FIREWALL], capture_output=True, text=True,
                              timeout=60).stdout
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
    state = pv.parse_firewall(text)
    assert [f for f in state.active if f.startswith("nftables")] == [
        "nftables chain inet filter input policy is drop",
        "nftables chain inet filter input rule `counter packets 0 bytes 0 reject`"], text
    assert state.nft_input_chains == 2


@pytest.mark.parametrize("record, outcome", [
    ("path=/ckpt\nexists=1\ndir=1\nwritable=1\navail_kb=524288000\n", "passed"),
    ("path=/ckpt\nexists=0\ndir=0\nwritable=0\n", "warning"),
    ("path=/ckpt\nexists=1\ndir=1\nwritable=0\navail_kb=524288000\n", "warning"),
    ("path=/ckpt\nexists=1\ndir=1\nwritable=1\navail_kb=1048576\n", "warning")])
def test_checkpoint_dir(record, outcome):
    [r] = run(checkpoint.test_checkpoint_dir, make_host(checkpoint_dir="/ckpt"),
              facts_of(storage_dot_checkpoint=out(record)))
    assert r.outcome == outcome
    assert run(checkpoint.test_checkpoint_dir, H, facts_of())[0].outcome == "skipped"


def test_packages_required():
    host = make_host(python_modules=("torch", "decord"))
    results = run(packages.test_required, host, facts_of(python_dot_stack=out(stack_output(modules={"decord": None}))))
    assert {(r.subject, r.outcome) for r in results} == {("torch", "passed"), ("decord", "failed")}
    assert run(packages.test_required, H, facts_of())[0].outcome == "skipped"


def test_unreadable_python_is_an_error_not_a_pass():
    facts = facts_of(python_dot_stack=out("", rc=127))
    with pytest.raises(FactUnavailable, match="not found"):
        facts.get("python.stack")


def _stack_probe(python: str, cwd, pythonpath: str = "") -> dict:
    import subprocess

    from preflight.nodefacts import PYTHON_STACK

    env = {"PF_PYTHON": python, "PATH": "/usr/bin:/bin"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    proc = subprocess.run(["bash", "-c", PYTHON_STACK], env=env, cwd=cwd, capture_output=True, text=True, timeout=30)
    return json.loads(proc.stdout.split("@@PY ", 1)[1])


def test_the_stack_probe_reads_mindspeed_branches_and_the_megatron_copied_into_mindspeed_mm(tmp_path):
    import sys

    ms, mm, links = tmp_path / "MindSpeed", tmp_path / "MindSpeed-MM", tmp_path / "site"
    for root, package, head in ((ms, "mindspeed", "ref: refs/heads/2.3.0_core_r0.12.1\n"),
                                (mm, "mindspeed_mm", "ref: refs/heads/2.3.0\n")):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("raise SystemExit('imported')\n")
        (root / ".git").mkdir()
        (root / ".git" / "HEAD").write_text(head)
    (mm / "megatron" / "core").mkdir(parents=True)
    (mm / "megatron" / "core" / "package_info.py").write_text("MAJOR = 0\nMINOR = 12\nPATCH = 1\nPRE_RELEASE = ''\n")
    # MindSpeed-MM reached the way an editable install does, without its checkout on sys.path:
    # megatron/ is not importable, only found beside the package.
    links.mkdir()
    (links / "mindspeed_mm").symlink_to(mm / "mindspeed_mm")
    doc = _stack_probe(sys.executable, tmp_path / "site", pythonpath=f"{ms}:{links}")
    stack = pv.parse_python_stack("@@PY " + json.dumps(doc))
    assert stack.modules["megatron"] is None
    assert stack.release_branch("mindspeed") == "2.3.0_core_r0.12.1" and stack.release_branch("mindspeed_mm") == "2.3.0"
    assert stack.checkouts["mindspeed_mm"]["root"] == str(mm)
    assert stack.megatron_core == {"path": str(mm / "megatron"), "version": "0.12.1"}


def _importlib_metadata(python: str, cwd, pythonpath: str = "") -> dict:
    """normalised name -> version as importlib.metadata sees it (the first one on sys.path wins)."""
    import subprocess
    import sys

    code = ("import importlib.metadata as md, json, re\nd = {}\nfor x in md.distributions():\n"
            "    n = x.metadata['Name']\n    if n: d.setdefault(re.sub(r'[-_.]+', '-', n).lower(), x.version)\n"
            "print(json.dumps(d))")
    env = {"PATH": "/usr/bin:/bin", **({"PYTHONPATH": pythonpath} if pythonpath else {})}
    out = subprocess.run([python or sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True,
                         timeout=30)
    return json.loads(out.stdout)


def test_the_package_scan_sees_what_importlib_metadata_sees_on_this_interpreter(tmp_path):
    import sys

    doc = _stack_probe(sys.executable, tmp_path)
    assert "error" not in doc
    mine = {pv.norm_dist(k): v for k, v in doc["packages"].items()}
    assert mine == _importlib_metadata(sys.executable, tmp_path) and "pytest" in mine


def test_the_package_scan_reads_folder_names_and_headers_first_on_path_wins(tmp_path):
    import sys

    first, second = tmp_path / "first", tmp_path / "second"
    for d in (first, second):
        d.mkdir()

    def dist(where, folder, name, version, leaf="METADATA"):
        (where / folder).mkdir()
        (where / folder / leaf).write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nbody\n")

    dist(first, "torch_npu-2.6.0.post1.dist-info", "torch-npu", "2.6.0.post1")
    dist(first, "PyYAML-6.0.2.dist-info", "PyYAML", "6.0.2")
    dist(first, "megatron_core-0.12.1-py3.10.egg-info", "megatron-core", "0.12.1", leaf="PKG-INFO")
    dist(first, "oddly.dist-info", "Odd.Pkg", "3.0")          # not named by the spec: its header says
    dist(second, "torch_npu-2.1.0.dist-info", "torch_npu", "2.1.0")  # shadowed by the first on sys.path
    (first / "not-a-dist.txt").write_text("x")
    path = f"{first}:{second}"
    doc = _stack_probe(sys.executable, tmp_path, path)
    mine = {pv.norm_dist(k): v for k, v in doc["packages"].items()}
    assert {k: mine[k] for k in ("torch-npu", "pyyaml", "megatron-core", "odd-pkg")} == {
        "torch-npu": "2.6.0.post1", "pyyaml": "6.0.2", "megatron-core": "0.12.1", "odd-pkg": "3.0"}
    assert mine == _importlib_metadata(sys.executable, tmp_path, path)


def test_ascend_files_probe_resolves_every_link_and_names_kernel_dirs(tmp_path):
    """The probe command itself, on a small tree standing in for /usr/local/Ascend."""
    import subprocess

    from preflight.nodefacts import ASCEND_FILES

    a = tmp_path / "Ascend"
    real_drv = tmp_path / "drivers" / "25.0"
    (real_drv / "lib64").mkdir(parents=True)
    (real_drv / "version.info").write_text("Version=25.0.rc1.1\n")
    (a / "driver").parent.mkdir(parents=True)
    (a / "driver").symlink_to(real_drv)
    toolkit = a / "ascend-toolkit" / "8.2.RC1"
    for soc in ("ascend910b", "ascend910_93"):
        (toolkit / "opp/built-in/op_impl/ai_core/tbe/kernel" / soc).mkdir(parents=True)
    (toolkit / "toolkit").mkdir()
    (toolkit / "toolkit" / "version.info").write_text("Version=8.2.RC1\n")
    (a / "ascend-toolkit" / "latest").symlink_to(toolkit)
    odd = tmp_path / "with space"
    odd.mkdir()
    (a / "add-ons").symlink_to(odd)
    command = ASCEND_FILES.replace("A=/usr/local/Ascend", f"A={a}")
    assert command != ASCEND_FILES
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin"})
    links = [line.split("\t")[1:] for line in proc.stdout.splitlines() if line.startswith("@@L")]
    assert [str(a / "driver"), str(real_drv)] in [l[1:] for l in links if l[0] == "driver_dir"]
    assert ["path", str(a / "add-ons"), str(odd)] in links
    assert ["path", str(a / "driver" / "lib64"), str(real_drv / "lib64")] in links
    assert ["root", str(a / "ascend-toolkit" / "latest"), str(toolkit)] in links
    files = pv.parse_ascend_files(proc.stdout)
    assert files.paths[str(a / "driver" / "version.info")] == str(real_drv / "version.info")
    kernels = {tuple(line.split("\t")[1:]) for line in proc.stdout.splitlines() if line.startswith("@@K")}
    latest = str(a / "ascend-toolkit" / "latest")
    assert {soc for root, soc in kernels if root == latest} == {"ascend910b", "ascend910_93"}


def test_hccn_tool_of_a_driver_installed_elsewhere_is_found(tmp_path):
    """Off PATH, hccn_tool is in the driver's tools folder: /usr/local/Ascend's, or where
    /etc/ascend_install.info says the driver went (every NPU read "hccn_tool not found" there).
    The probe and phase two's pings look alike."""
    import subprocess

    from preflight.activeprobe import _PING
    from preflight.probe import FIND_HCCN, _PRELUDE

    assert FIND_HCCN.strip() in _PRELUDE and FIND_HCCN.strip() in _PING
    tools = tmp_path / "opt" / "Ascend" / "driver" / "tools"
    tools.mkdir(parents=True)
    (tools / "hccn_tool").write_text("#!/bin/sh\n")
    info = tmp_path / "ascend_install.info"
    snippet = FIND_HCCN.replace("pf_info=/etc/ascend_install.info", f"pf_info={info}") + '\nprintf %s "$PF_HCCN"'
    assert snippet.count(str(info)) == 1

    def found(text):
        if text is not None:
            info.write_text(text)
        return subprocess.run(["bash", "-c", snippet], capture_output=True, text=True, timeout=30,
                              env={"PATH": "/usr/bin:/bin"})

    done = found(f"UserName=HwHiAiUser\r\nDriver_Install_Path_Param = \"{tmp_path}/opt/Ascend/\"\r\n")
    assert done.stdout == f"{tools}/hccn_tool" and done.stderr == "", done
    assert found(f"Driver_Install_Path_Param={tmp_path}/elsewhere").stdout == ""
    info.unlink()
    done = found(None)  # no install info at all: nothing found, nothing said
    assert done.stdout == "" and done.stderr == "", done


def test_the_cann_the_inventory_env_names_is_looked_at_first(tmp_path):
    """An ASCEND_HOME_PATH declared only under the inventory's env: (what the launch script exports)
    was never looked at by the probe, and env.cann_loaded said it "does not exist on the node"."""
    import subprocess

    from preflight.checks import env as env_checks
    from preflight.nodefacts import ASCEND_FILES
    from preflight.run import probe_params

    toolkit = tmp_path / "opt" / "cann" / "ascend-toolkit" / "8.2.RC1"
    (toolkit / "aarch64-linux").mkdir(parents=True)
    (toolkit / "aarch64-linux" / "ascend_toolkit_install.info").write_text(
        fixture("files/toolkit-install-info/8.2.RC1-aarch64.txt"))
    (tmp_path / "opt" / "cann" / "ascend-toolkit" / "latest").symlink_to(toolkit)
    home = str(tmp_path / "opt" / "cann" / "ascend-toolkit" / "latest")
    host = make_host(npus_per_node=8, chip="910B4", env={"ASCEND_HOME_PATH": home})
    params = probe_params(host, [host])
    assert params["PF_JOB_CANN_HOME"] == home
    # Another CANN in the session's own ASCEND_HOME_PATH: the job's (the inventory's) comes first.
    other = tmp_path / "session-cann"
    (other / "aarch64-linux").mkdir(parents=True)
    (other / "aarch64-linux" / "ascend_toolkit_install.info").write_text(
        fixture("files/toolkit-install-info/8.5.0-aarch64-cann-root.txt"))
    command = ASCEND_FILES.replace("A=/usr/local/Ascend", f"A={tmp_path / 'no-usr-local'}")

    def probe(job_home):
        return subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30,
                              env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PF_JOB_CANN_HOME": job_home,
                                   "ASCEND_HOME_PATH": str(other)}).stdout

    text = probe(home)
    files = pv.parse_ascend_files(text)
    assert files.active_cann() is not None and files.active_cann().root == home, text
    assert [c.root for c in files.cann][:2] == [home, str(other)]
    # The inventory may write it from the login's home.
    assert pv.parse_ascend_files(probe("~/opt/cann/ascend-toolkit/latest")).active_cann().version == "8.2.RC1"
    raw = node_raw(ascend_dot_files=out(text), env_={"ASCEND_HOME_PATH": None, "ASCEND_TOOLKIT_HOME": None})
    facts = make_facts(raw=raw)
    facts.raw["python.stack"] = out(stack_output(modules={"acl": f"{home}/python/site-packages/acl.so"},
                                                 path=(f"{home}/python/site-packages",)))
    results = run(env_checks.test_cann_loaded, host, facts)
    assert [r.outcome for r in results] == ["passed"], results


def test_a_driver_installed_elsewhere_is_read_where_ascend_install_info_says(tmp_path):
    """The driver and firmware installers take --install-path; /etc/ascend_install.info records it
    (Driver_Install_Path_Param, which CANN's set_env.sh reads).  Such a node read as "no driver":
    versions.stack an error and devices.driver_mounts a failure, the node NOT READY."""
    import subprocess

    from preflight.checks import devices
    from preflight.nodefacts import ASCEND_FILES

    opt = tmp_path / "opt" / "Ascend"
    for part, name in (("driver", "driver-version-info/25.0.rc1.1.txt"),
                       ("firmware", "firmware-version-info/7.7.0.1.231.txt")):
        (opt / part).mkdir(parents=True)
        (opt / part / "version.info").write_text(fixture(f"files/{name}"))
    (opt / "driver" / "lib64").mkdir()
    info = tmp_path / "ascend_install.info"
    info.write_text(f"UserName=HwHiAiUser\r\nDriver_Install_Path_Param={opt}/\r\n"
                    f"Firmware_Install_Path_Param={opt}\r\n")
    command = ASCEND_FILES.replace("A=/usr/local/Ascend", f"A={tmp_path / 'no-usr-local'}")
    command = command.replace("pf_info=/etc/ascend_install.info", f"pf_info={info}")
    assert command.count(str(info)) == 1
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    files = pv.parse_ascend_files(proc.stdout)
    assert files.driver is not None and files.driver.version == "25.0.rc1.1" and files.firmware is not None
    assert files.driver_dir == str(opt / "driver")
    facts = make_facts(raw=node_raw(ascend_dot_files=out(proc.stdout)))
    [r] = [r for r in run(versions.test_stack, H, facts) if r.subject == "driver/firmware"]
    assert r.outcome == "passed", r
    [r] = [r for r in run(devices.test_driver_mounts, H, facts) if r.subject == "driver"]
    assert r.outcome == "passed" and r.message.startswith(f"{opt}/driver present (lib64, version.info)"), r
    # Written other ways the parser reads alike: blanks around =, quotes, no newline at the end.
    for text in (f"Driver_Install_Path_Param = {opt}\nFirmware_Install_Path_Param=\"{opt}\"",
                 f"UserName=HwHiAiUser\nFirmware_Install_Path_Param={opt}\nDriver_Install_Path_Param={opt}"):
        info.write_text(text)
        found = pv.parse_ascend_files(subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                                                     timeout=30, env={"PATH": "/usr/bin:/bin"}).stdout)
        assert found.driver is not None and found.firmware is not None and found.driver_dir == str(opt / "driver")
    # A file missing there but present in /usr/local/Ascend (a container mounting it at the usual
    # path) is read there: each file falls back on its own.
    usual = tmp_path / "no-usr-local" / "firmware"
    usual.mkdir(parents=True)
    (opt / "firmware" / "version.info").rename(usual / "version.info")
    found = pv.parse_ascend_files(subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                                                 timeout=30, env={"PATH": "/usr/bin:/bin"}).stdout)
    assert found.firmware is not None and found.driver is not None
    (usual / "version.info").rename(opt / "firmware" / "version.info")
    info.write_text(f"Driver_Install_Path_Param={opt}\nFirmware_Install_Path_Param={opt}\n")
    # Nothing there: the error names where the install info said to look.
    for part in ("driver", "firmware"):
        (opt / part / "version.info").unlink()
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    host_output = proc.stdout.replace("@@C\n", "")  # as on a host (this test may run in a container)
    facts = make_facts(raw=node_raw(ascend_dot_files=out(host_output)))
    [r] = [r for r in run(versions.test_stack, H, facts) if r.subject == "driver/firmware"]
    assert r.outcome == "error" and f"{opt}/driver/version.info, {opt}/firmware/version.info not found" in r.message


def test_a_cann_installed_in_the_users_home_is_found_and_its_set_env_named(tmp_path):
    """A non-root user's CANN installs to ~/Ascend; the driver stays in /usr/local/Ascend. Before,
    such a node read as "no CANN" and the remedy named /usr/local/Ascend's set_env.sh."""
    import subprocess

    from preflight.nodefacts import ASCEND_FILES

    home = tmp_path / "home" / "alice"
    toolkit = home / "Ascend" / "ascend-toolkit" / "8.2.RC1"
    (toolkit / "toolkit").mkdir(parents=True)
    (home / "Ascend" / "ascend-toolkit" / "latest").symlink_to(toolkit)
    atb = home / "Ascend" / "nnal" / "atb" / "latest"
    (atb / "atb" / "cxx_abi_1" / "lib").mkdir(parents=True)
    (atb / "atb" / "cxx_abi_1" / "lib" / "libatb.so").write_text("")
    (atb / "version.info").write_text((FIXTURES / "files" / "atb-version-info" / "8.2.RC1.txt").read_text())
    (toolkit / "toolkit" / "version.info").write_text("Version=8.2.RC1\n")
    command = ASCEND_FILES.replace("A=/usr/local/Ascend", f"A={tmp_path / 'no-usr-local'}")
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(home)})
    files = pv.parse_ascend_files(proc.stdout)
    latest = str(home / "Ascend" / "ascend-toolkit" / "latest")
    assert files.active_cann() is not None and files.active_cann().root == latest
    assert files.active_cann().version == "8.2.RC1"
    assert files.libatb and files.atb_version == "8.2.RC1"
    assert env.set_env_script(files) == str(home / "Ascend" / "ascend-toolkit" / "set_env.sh")
    assert env.atb_set_env_script(files) == str(home / "Ascend" / "nnal" / "atb" / "set_env.sh")
    # Both installed: the one beside the active CANN, whichever sorts first.
    both = dataclasses.replace(files, libatb=("/a/Ascend/nnal/atb/latest/atb/cxx_abi_1/lib/libatb.so",
                                              *files.libatb))
    assert env.atb_set_env_script(both) == str(home / "Ascend" / "nnal" / "atb" / "set_env.sh")
    # What the operator reads: the scripts in their home, not /usr/local/Ascend's.
    raw = dict(healthy_raw(), **{"ascend.files": out(proc.stdout)})
    raw["session.env"] = out("PATH=/usr/bin:/bin\0HOME=" + str(home) + "\0")
    facts_ = make_facts(raw=raw)
    for check_fn, script in ((env.test_cann_loaded, "ascend-toolkit/set_env.sh"), (env.test_nnal_atb, "nnal/atb/set_env.sh")):
        [r] = run(check_fn, H, facts_)
        assert r.outcome == "failed" and str(home / "Ascend" / script) in (r.expected + r.observed + r.remedy), r
    # Without HOME, or with HOME the same as the system root, nothing is searched twice.
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
    assert pv.parse_ascend_files(proc.stdout).active_cann() is None


@pytest.mark.skipif(not os.path.exists("/usr/sbin/iptables"), reason="needs iptables in /usr/sbin")
def test_the_firewall_probe_finds_the_tools_off_a_non_root_path():
    """Debian gives a non-root SSH session PATH=/usr/local/bin:/usr/bin:/bin: iptables, nft and ufw
    in /usr/sbin are still read (or reported unreadable), never taken for "no firewall tool"."""
    import subprocess

    from preflight.nodefacts import FIREWALL

    text = subprocess.run(["bash", "-c", FIREWALL], env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60).stdout
    assert "none=" not in text and ("iptables=" in text or "iptables_unreadable=" in text), text


@pytest.mark.parametrize("held", ["briefly", "for good"])
def test_the_firewall_probe_waits_for_the_xtables_lock(tmp_path, held):
    """Legacy iptables fails at once while another program holds the xtables lock (kube-proxy,
    docker): the probe asks again with -w, so a busy lock is neither "unreadable" nor "no rules";
    a lock held past 5 s is unreadable, saying why."""
    import subprocess

    from preflight.nodefacts import FIREWALL

    lock = "Another app is currently holding the xtables lock. Perhaps you want to use the -w option?"
    waited = 'sleep 6; exit 4' if held == "for good" else 'true'
    fake = tmp_path / "iptables"
    fake.write_text(f"""#!/bin/bash
[ "$1" = -V ] && {{ echo "iptables v1.8.9 (nf_tables)"; exit 0; }}  # listed as is (a legacy one: see below)
case " $* " in *" -w "*) {waited} ;; *) echo "{lock}" >&2; exit 4 ;; esac
case "$*" in *INPUT*) printf -- '-P INPUT DROP\\n-A INPUT -j HARDEN\\n' ;; *HARDEN*) printf -- '-N HARDEN\\n-A HARDEN -s 10.0.0.0/24 -j ACCEPT\\n' ;; esac
""")
    fake.chmod(0o755)
    text = subprocess.run(["bash", "-c", FIREWALL], env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60).stdout
    state = pv.parse_firewall(text)
    if held == "briefly":
        assert state.input_policy == "DROP" and "iptables_chain=-A HARDEN -s 10.0.0.0/24 -j ACCEPT" in text, text
        assert not state.unreadable
    else:
        assert state.unreadable == ("iptables -S INPUT: the xtables lock stayed held by another program for 5 s",)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare") or not os.path.exists("/usr/sbin/iptables-legacy"),
                    reason="needs root, unshare and iptables-legacy")
def test_the_firewall_probe_does_not_make_the_kernel_create_a_legacy_filter_table(tmp_path):
    """Where `iptables` is the legacy one (CentOS 7, EulerOS), listing INPUT as root loaded ip_tables
    and created an empty filter table: a change to the node.  Where no legacy filter table exists the
    probe lists nothing and says no rules; where one exists it reads it."""
    import shlex
    import subprocess

    from preflight.nodefacts import FIREWALL

    (tmp_path / "iptables").symlink_to("/usr/sbin/iptables-legacy")
    probe = f"PATH={tmp_path}:/usr/bin:/bin bash -c {shlex.quote(FIREWALL)}; echo @@TABLES; cat /proc/net/ip_tables_names"
    for before, rules in (("", "iptables=-P INPUT ACCEPT\n"),
                          ("/usr/sbin/iptables-legacy -P INPUT DROP; ", "iptables=-P INPUT DROP\n")):
        text = subprocess.run(["unshare", "-n", "bash", "-c", before + probe], capture_output=True, text=True,
                              timeout=60).stdout
        probed, tables = text.split("@@TABLES\n")
        assert tables == ("filter\n" if before else ""), text  # none made by the probe
        assert rules in probed, text


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare") or not os.path.exists("/usr/sbin/iptables-legacy"),
                    reason="needs root, unshare and iptables-legacy")
def test_the_firewall_probe_reads_iptables_legacy_when_iptables_nft_says_its_tables_are_loaded(tmp_path):
    """iptables (the nft variant) lists only its own tables and warns "iptables-legacy tables present"
    on stderr: a DROP in the legacy tables (kube-proxy or docker in legacy mode) passed unseen.  Only a
    legacy filter table holds INPUT: with a nat table alone, listing INPUT would create one."""
    import shlex
    import subprocess

    from preflight.nodefacts import FIREWALL

    calls = tmp_path / "legacy-calls"

    def tool(name, body):
        (tmp_path / name).write_text("#!/bin/bash\n" + body)
        (tmp_path / name).chmod(0o755)

    def run_it(table="filter"):
        # A private network namespace whose legacy tables are the given one (the kernel lists them in
        # /proc/net/ip_tables_names), then the probe with the fakes first on PATH.
        setup = ("/usr/sbin/iptables-legacy -P INPUT ACCEPT" if table == "filter" else
                 "/usr/sbin/iptables-legacy -t nat -A POSTROUTING -j MASQUERADE")
        return subprocess.run(["unshare", "-n", "bash", "-c", f"{setup} && exec bash -c {shlex.quote(FIREWALL)}"],
                              env={"PATH": f"{tmp_path}:/usr/bin:/bin"}, capture_output=True, text=True,
                              timeout=60).stdout

    tool("iptables", "echo '# Warning: iptables-legacy tables present, use iptables-legacy to see them' >&2\n"
                     "printf -- '-P INPUT ACCEPT\\n-A INPUT -s 10.0.0.0/24 -j ACCEPT\\n'\n")
    tool("iptables-legacy", f'echo "$*" >> {calls}\n'
                            'case "$*" in *INPUT*) printf -- "-P INPUT ACCEPT\\n-A INPUT -j HARDEN\\n" ;;\n'
                            '*HARDEN*) printf -- "-N HARDEN\\n-A HARDEN -j DROP\\n" ;; esac\n')
    state = pv.parse_firewall(run_it())
    assert state.active == ["iptables-legacy rule `-A HARDEN -j DROP` (INPUT jumps to HARDEN)"], state
    assert state.accepted_sources == ()  # the nft side's ACCEPT does not get past the legacy drop
    # A legacy nat table alone: no legacy INPUT to read, and reading it would create the filter table.
    calls.unlink()
    assert "iptables_legacy" not in run_it("nat") and not calls.exists()
    # Both sides accept the nodes' network first: let through.
    tool("iptables-legacy", 'printf -- "-P INPUT DROP\\n-A INPUT -s 10.0.0.0/24 -j ACCEPT\\n"\n')
    state = pv.parse_firewall(run_it())
    assert state.active == ["iptables-legacy INPUT policy is DROP"] and state.accepted_sources == ("10.0.0.0/24",)
    # No warning: iptables-legacy is not asked.
    tool("iptables", "printf -- '-P INPUT ACCEPT\\n'\n")
    assert "iptables_legacy" not in run_it()


HCCN_CHECKS = ((hccl.test_link_up, "hccn.link"), (hccl.test_tls_node, "hccn.tls"), (hccl.test_device_ip, "hccn.ip"),
               (hccl.test_net_health, "hccn.net_health"))


def _without_hccn(raw, out_):
    for key in [k for k in raw if k.split("/")[0] in ("hccn.link", "hccn.tls", "hccn.ip", "hccn.net_health",
                                                        "hccn.netdetect", "hccn.link_stat")]:
        raw[key] = out_
    return raw


@pytest.mark.parametrize("case", ["310P", "container"])
def test_hccl_checks_do_not_apply_to_310p_cards_or_a_container_without_hccn_tool(case):
    if case == "310P":  # no RoCE port: hccn_tool answers "not supported"
        raw = _without_hccn(node_raw(npu_smi_dot_info=out(fixture("npu-smi/info/310p3-25.2.0-duo-npu2-3.txt"))),
                            out("The command is not supported on this product.\n", rc=13))
        says = "310P3 cards have no RoCE port"
    else:  # the Ascend docker runtime mounts no hccn_tool
        raw = _without_hccn(node_raw(ascend_dot_files=out(files_output(container=True))), out("", rc=127))
        says = "hccn_tool is not in this container"
    facts = make_facts(raw=raw)
    for check, _ in HCCN_CHECKS:
        [r] = run(check, H, facts)
        assert r.outcome == "skipped" and says in r.message, (check.__name__, r.message)
    cl = cluster_of((H, facts), (make_host("node-02"), make_facts("node-02", raw=dict(raw))))
    for check in (hccl.test_tls_agree, hccl.test_device_ip_unique):
        [r] = run(check, cluster=cl)
        assert r.outcome == "skipped" and says in r.message, (check.__name__, r.message)
    # On a host (not a container) a missing hccn_tool is still an error per NPU.
    if case == "container":
        host_raw = _without_hccn(node_raw(), out("", rc=127))
        assert {r.outcome for r in run(hccl.test_link_up, H, make_facts(raw=host_raw))} == {"error"}
        # hccn_tool present in the container but failing, whatever its words: still an error per NPU.
        failing = _without_hccn(node_raw(ascend_dot_files=out(files_output(container=True))),
                                out("", rc=1, stderr="device not found on the host\n"))
        assert {r.outcome for r in run(hccl.test_link_up, H, make_facts(raw=failing))} == {"error"}


def test_hccl_failures_name_the_a3_die_as_npu_smi_does():
    a3 = fixture("npu-smi/info/a3-ascend910-24.1.rc3.7-classic-idle.txt")
    raw = node_raw(npus=16, npu_smi_dot_info=out(a3),
                   hccn_dot_net_health__6=out(fixture("hccn_tool/net_health/socket-fail.txt")),
                   hccn_dot_ip__13=out(""))
    [r] = bad(run(hccl.test_net_health, H, make_facts(raw=raw)))
    assert r.message.startswith("node-01 npu6 (npu-smi NPU 3 chip 0):"), r.message
    [r] = bad(run(hccl.test_device_ip, H, make_facts(raw=raw)))
    assert r.message.startswith("node-01 npu13 (npu-smi NPU 6 chip 1):"), r.message


def test_firewall_follows_input_into_a_chain_it_jumps_to():
    # -A INPUT -j HARDEN, and the drop is in HARDEN (a common hardening layout): it passed.
    text = ("iptables=-P INPUT ACCEPT\niptables=-A INPUT -j HARDEN\n"
            "iptables_chain=-N HARDEN\niptables_chain=-A HARDEN -i lo -j ACCEPT\n"
            "iptables_chain=-A HARDEN -p tcp -m tcp --dport 22 -j ACCEPT\niptables_chain=-A HARDEN -j DROP\n")
    assert pv.parse_firewall(text).active == ["iptables rule `-A HARDEN -j DROP` (INPUT jumps to HARDEN)"]
    # Past an unconditional RETURN or ACCEPT nothing is reached.
    assert pv.parse_firewall(text.replace("iptables_chain=-A HARDEN -j DROP\n",
                                          "iptables_chain=-A HARDEN -j RETURN\niptables_chain=-A HARDEN -j DROP\n")
                             ).active == []
    assert pv.parse_firewall("iptables=-P INPUT ACCEPT\niptables=-A INPUT -j ACCEPT\niptables=-A INPUT -j DROP\n"
                             ).active == []


def test_firewall_a_port_drop_in_a_chain_input_jumps_to_twice_is_judged_where_first_reached():
    """INPUT jumps to HARDEN, accepts 10.0.0.0/8, jumps to HARDEN again: a packet from the nodes is
    dropped on the first pass; the second pass's accepts were credited to the rule."""
    state = pv.parse_firewall("iptables=-P INPUT ACCEPT\niptables=-A INPUT -j HARDEN\n"
                              "iptables=-A INPUT -s 10.0.0.0/8 -j ACCEPT\niptables=-A INPUT -j HARDEN\n"
                              "iptables_chain=-N HARDEN\niptables_chain=-A HARDEN -p tcp -m tcp --dport 6379 -j DROP\n")
    assert state.port_rule_accepts == ((),), state


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip") or not os.path.exists("/usr/sbin/iptables"),
                    reason="needs root, iproute2 and iptables for a netns with rules")
def test_the_firewall_probe_reads_a_chain_input_jumps_to_in_a_real_netns():
    import subprocess
    import uuid

    from preflight.nodefacts import FIREWALL

    ns = f"pf-fw-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        for rule in ("-N HARDEN", "-A INPUT -j HARDEN", "-A HARDEN -p tcp --dport 22 -j ACCEPT", "-A HARDEN -j DROP"):
            subprocess.run(["ip", "netns", "exec", ns, "iptables", *rule.split()], check=True, capture_output=True)
        text = subprocess.run(["ip", "netns", "exec", ns, "bash", "-c", FIREWALL], capture_output=True, text=True,
                              timeout=60, env={"PATH": "/usr/local/bin:/usr/bin:/bin"}).stdout
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
    assert "iptables rule `-A HARDEN -j DROP` (INPUT jumps to HARDEN)" in pv.parse_firewall(text).active, text


def test_firewall_leaves_kubernetes_mark_drops_alone():
    # kubelet: -A INPUT -j KUBE-FIREWALL, whose DROP matches marked packets only (never listed by
    # the probe, and a marked drop in a chain it does list is not a blanket one either).
    text = ("iptables=-P INPUT ACCEPT\niptables=-A INPUT -j KUBE-FIREWALL\niptables=-A INPUT -j HARDEN\n"
            "iptables_chain=-A HARDEN -m mark --mark 0x8000/0x8000 -j DROP\n")
    assert pv.parse_firewall(text).active == []


def _fake_npu_smi(tmp_path, chip_ok=True, card_ok=True):
    """npu-smi whose chip-level board read waits (up to 5 s) to see the card-level read started, and
    says whether it did: read one after the other, it never would."""
    started = tmp_path / "card-started"
    chip = ("for i in $(seq 50); do [ -e %s ] && break; sleep 0.1; done; "
            "printf '\\tNPU ID : 4\\n\\tChip Type : Ascend\\n\\tChip Name : 910B4\\n'; "
            "[ -e %s ] && printf '\\tCard Seen : yes\\n'" % (started, started)) if chip_ok else \
        "echo 'Invalid card id.'; exit 1"
    card = ("touch %s; printf '\\tNPU ID : 4\\n\\tSoftware Version : 25.0.rc1.1\\n\\tFirmware Version : "
            "7.7.0.1.231\\n\\tCompatibility : NOK\\n'" % started) if card_ok else \
        "touch %s; echo 'Invalid card id.'; exit 1" % started
    fake = tmp_path / "npu-smi"
    fake.write_text("#!/bin/bash\ncase \"$*\" in\n"
                    " \"info -m\") printf 'NPU ID  Chip ID  Chip Logic ID  Chip Name\\n4  0  0  Ascend 910B4\\n' ;;\n"
                    f" \"info -t board -i 4 -c 0\") {chip} ;;\n"
                    f" \"info -t board -i 4\") {card} ;;\n"
                    " *) exit 2 ;;\nesac\n")
    fake.chmod(0o755)
    return str(fake)


@pytest.mark.parametrize("chip_ok, card_ok, rc", [(True, True, 0), (False, True, 0), (True, False, 0),
                                                   (False, False, 1)])
def test_the_board_probe_reads_chip_and_card_side_by_side(tmp_path, chip_ok, card_ok, rc):
    import subprocess

    from preflight.nodefacts import BOARD

    done = subprocess.run(["bash", "-c", BOARD], capture_output=True, text=True, timeout=30,
                          env={"PF_NPUSMI": _fake_npu_smi(tmp_path, chip_ok, card_ok), "PATH": "/usr/bin:/bin"})
    assert done.returncode == rc, done.stdout + done.stderr
    if rc == 0:
        board = pv.parse_board(done.stdout)
        assert board.npu_id == 4
        assert (board.soc == "ascend910b4") == chip_ok and (board.compatibility == "NOK") == card_ok
        if chip_ok and card_ok:
            assert board.fields.get("card seen") == "yes"  # the card read ran while the chip read did


def test_a_mindspeed_rc_release_is_its_own_row_not_the_ga_one():
    # 1.0.RC2 goes with core 0.6.0 only; the 1.0.0 row also allows 0.7.0.
    stack = mindspeed_mm_stack(ms_head="ref: refs/heads/1.0.RC2", copied="0.7.0")
    stack = stack.replace('"mindspeed-mm": "0.1", ', "")
    [r] = [r for r in run(versions.test_mindspeed_megatron, H, facts_of(python_dot_stack=out(stack)))
           if r.subject == "megatron"]
    assert r.outcome == "failed" and "Megatron core 0.6.0" in r.message, r.message


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare(1)")
@pytest.mark.parametrize("pod, container", [(False, False), (True, True)])
def test_a_kubernetes_pod_is_a_container_without_dockers_marker_file(pod, container):
    """containerd writes no /.dockerenv: a pod read as a host, and the container skips (hccn_tool
    not mounted, the firewall not the pod's) became errors. In a private mount namespace the marker
    is hidden (/dev/null bound over it) and a service-account folder made as a pod has it."""
    from preflight.nodefacts import ASCEND_FILES

    setup = "[ -e /.dockerenv ] && mount --bind /dev/null /.dockerenv; mount -t tmpfs tmpfs /run; "
    if pod:
        setup += "mkdir -p /run/secrets/kubernetes.io/serviceaccount; "  # /var/run is /run
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "bash", "-c",
                           setup + 'exec bash -c "$0"', ASCEND_FILES], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert pv.parse_ascend_files(done.stdout).container is container


def test_checkpoint_free_space_with_a_space_in_the_source_or_mount_point(tmp_path):
    """df -P splits on blanks: a CIFS source //nas/ckpt share shifted every field, and "Used" was
    read as the space left (a healthy node failed for want of space)."""
    import subprocess

    from preflight.nodefacts import CHECKPOINT

    (tmp_path / "ckpt").mkdir()
    fake = tmp_path / "df"
    fake.write_text("#!/bin/sh\necho 'Filesystem 1024-blocks Used Available Capacity Mounted on'\n"
                    "echo '//nas/ckpt share 1000000 900000 100000 90% /mnt/my ckpt'\n")
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "HOME": str(tmp_path), "PF_CHECKPOINT_DIR": str(tmp_path / "ckpt")}
    state = pv.parse_checkpoint(subprocess.run(["bash", "-c", CHECKPOINT], env=env, capture_output=True, text=True,
                                               timeout=30).stdout)
    assert (state.avail_kb, state.filesystem, state.mount) == (100000, "//nas/ckpt share", "/mnt/my ckpt")
    # The real df on this machine reads as before.
    env["PATH"] = "/usr/bin:/bin"
    state = pv.parse_checkpoint(subprocess.run(["bash", "-c", CHECKPOINT], env=env, capture_output=True, text=True,
                                               timeout=30).stdout)
    assert state.avail_kb and state.avail_kb > 0 and state.mount and state.mount.startswith("/")


def test_the_stack_probe_does_not_read_the_working_directory_as_installed(tmp_path):
    """The probe runs from the login's home, which Python put first on sys.path (the script comes on
    stdin): a torch/ folder or a stray *.dist-info there was read as the installed torch."""
    import sys

    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("__version__ = '0.0.1'\n")
    (tmp_path / "torch-0.0.1.dist-info").mkdir()
    (tmp_path / "torch-0.0.1.dist-info" / "METADATA").write_text("Name: torch\nVersion: 0.0.1\n\n")
    doc = _stack_probe(sys.executable, tmp_path)
    assert doc["packages"].get("torch") != "0.0.1", doc["packages"].get("torch")
    assert str(tmp_path) not in json.dumps(doc), [k for k, v in doc["modules"].items() if str(tmp_path) in str(v)]


def test_nodes_accepted_by_both_iptables_and_iptables_legacy_in_nested_networks():
    """Both sets of tables drop and each accepts the nodes' network first, one as a /16, the other
    as the /24 inside it: the nodes in the /24 pass both (the exact-string match saw no network in
    common and warned); a network only one side accepts is not let through."""
    text = ("iptables=-P INPUT DROP\niptables=-A INPUT -s 10.0.0.0/16 -j ACCEPT\n"
            "iptables=-A INPUT -s 192.168.7.0/24 -j ACCEPT\n"
            "iptables_legacy=-P INPUT DROP\niptables_legacy=-A INPUT -s 10.0.0.0/24 -j ACCEPT\n"
            "iptables_legacy=-A INPUT -s 172.16.0.0/12 -j ACCEPT\n")
    assert pv.parse_firewall(text).accepted_sources == ("10.0.0.0/24",)
    swapped = text.replace("10.0.0.0/16", "10.0.0.0/X").replace("10.0.0.0/24", "10.0.0.0/16").replace(
        "10.0.0.0/X", "10.0.0.0/24")
    assert pv.parse_firewall(swapped).accepted_sources == ("10.0.0.0/24",)
    assert pv.parse_firewall(text.replace("10.0.0.0/24", "10.1.0.0/24")).accepted_sources == ()
