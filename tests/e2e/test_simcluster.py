"""Tests of the simulated cluster itself (tests/e2e/simcluster.py and the fake tools).

The first group runs the fakes directly on the host (no root needed); the rest brings up
real sshd nodes and checks them with the real OpenSSH client.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
import types
from pathlib import Path

import pytest
import yaml

from . import simcluster as simmod
from .simcluster import (DEFAULT_NOFILE, FAKES_DIR, HEALTHY_ENV, SimCluster, make_state,
                         nofile_ceiling)

REPO = Path(__file__).resolve().parents[2]
HCCN = "/usr/local/Ascend/driver/tools/hccn_tool"


def fixture(rel: str) -> str:
    """A raw capture from fixtures/ascend (the repo's copy if there is one, else shared/)."""
    for base in (REPO / "tests" / "fixtures" / "ascend", REPO / "tests" / "fixtures",
                 REPO.parent / "shared" / "fixtures" / "ascend", Path("/work/shared/fixtures/ascend")):
        p = base / rel
        if p.is_file():
            return p.read_text()
    msg = "fixture %s not found (tests/fixtures/ or ../shared/fixtures/ascend/)" % rel
    if os.environ.get("CI"):
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)


# --------------------------------------------------------------------------- fakes, directly
@pytest.fixture
def fake(tmp_path):
    """Run a fake tool on the host against a state file in tmp_path."""
    state_path = tmp_path / "state.json"

    def run(prog: str, *args: str, state: dict | None = None) -> subprocess.CompletedProcess:
        state_path.write_text(json.dumps(state if state is not None else make_state()))
        return subprocess.run([str(FAKES_DIR / prog), *args], capture_output=True, text=True, timeout=20,
                              env={"SIMCLUSTER_STATE": str(state_path), "PATH": "/usr/bin:/bin"})
    run.calls = tmp_path / "calls.log"
    return run


def test_fake_npu_smi_default_is_the_910b4_capture(fake):
    r = fake("npu-smi", "info")
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == fixture("npu-smi/info/a2-910b4-25.0.rc1.1-idle.txt")


def test_fake_npu_smi_mapping_and_list_match_captures(fake):
    # The captures show the tool's leading TAB as 8 blanks.
    assert fake("npu-smi", "info", "-m").stdout.replace("\t", " " * 8) == \
        fixture("npu-smi/info-m/a2-910b4-8npu-mcu.txt")
    assert fake("npu-smi", "info", "-l").stdout.replace("\t", " " * 8) == \
        fixture("npu-smi/info-l/a2-910b4-8npu.txt")
    board = fake("npu-smi", "info", "-t", "board", "-i", "0", "-c", "0").stdout.replace("\t", " " * 8)
    assert board.startswith(fixture("npu-smi/board/a2-910b4-chip-npu0-c0-head.txt"))


def test_fake_npu_smi_health_alarm_matches_synthetic_capture(fake):
    state = make_state()
    state["npus"][5]["health"] = "Alarm"
    assert fake("npu-smi", "info", state=state).stdout == \
        fixture("npu-smi/info/a2-910b4-25.0.rc1.1-health-alarm-npu5.txt")


def test_fake_npu_smi_busy_rows_match_capture(fake):
    # 910B1 docstring capture: 5-digit HBM use touches the slash; process rows.
    state = make_state(npus=2, chip="910B1")
    state["npu_smi_version"] = state["driver_version"] = "23.0.rc3.3"
    for n, power, temp, core, hbm, bus in ((state["npus"][0], 271.1, 41, 55, 65099, "0000:C1:00.0"),
                                          (state["npus"][1], 275.0, 42, 66, 65098, "0000:01:00.0")):
        n.update(power=power, temp=temp, aicore=core, hbm_used=hbm, hbm_total=65536, bus_id=bus)
    state["processes"] = [{"npu": 0, "chip": 0, "pid": 576489, "name": "python", "memory": 60703},
                          {"npu": 1, "chip": 0, "pid": 576491, "name": "python", "memory": 60704}]
    got = fake("npu-smi", "info", state=state).stdout.splitlines()
    want = fixture("npu-smi/info/a2-910b1-23.0.rc3.3-busy-2npu-docstring.txt").splitlines()
    assert len(got) == len(want)
    # the docstring's version row is one character short (a known quirk of that capture)
    assert [g for i, g in enumerate(got) if i != 1] == [w for i, w in enumerate(want) if i != 1]


def test_fake_npu_smi_errors(fake):
    r = fake("npu-smi", "info", state=dict(make_state(), npus=[]))
    assert r.returncode == 1 and "dcmi model initialized failed" in r.stdout
    r = fake("npu-smi", "info", "-t", "board", "-i", "9", "-c", "0")
    assert r.returncode == 1 and "Error parameter of -i" in r.stdout
    assert fake("npu-smi", "bogus").returncode == 1
    assert fake("npu-smi", "-v").stdout == "npu-smi version: 25.0.rc1.1\n"


def test_fake_hccn_tool_outputs(fake):
    assert fake("hccn_tool", "-i", "3", "-link", "-g").stdout == "link status: UP\n"
    k = make_state(node_index=1, k=0)["npus"][3]["ip"]
    assert fake("hccn_tool", "-i", "3", "-ip", "-g").stdout == "ipaddr:%s\nnetmask:255.255.0.0\n" % k
    assert fake("hccn_tool", "-i", "3", "-net_health", "-g").stdout == "net health status: Success\n"
    assert fake("hccn_tool", "-i", "3", "-netdetect", "-g").stdout == "netdetect address: 29.1.0.1\n"
    assert fake("hccn_tool", "-i", "3", "-gateway", "-g").stdout == "default gateway:29.1.0.1, Iface:eth3\n"
    tls = fake("hccn_tool", "-i", "3", "-tls", "-g").stdout.splitlines()
    assert tls[0] == ("dev_id:3, tls switch[0](0:disable, 1:enable), tls preconfigured[1](0:non-preset, "
                      "1:preset), tls alarm time threshold[60]days") and len(tls) == 3
    ping = fake("hccn_tool", "-i", "3", "-ping", "-g", "address", "29.1.0.20")
    assert ping.returncode == 0 and ping.stdout.startswith("device 3 PING 29.1.0.20\nrecv seq=0,time=")
    assert ping.stdout.endswith("3 packets transmitted, 3 received, 0.00% packet loss\n")
    stat = fake("hccn_tool", "-i", "0", "-link_stat", "-g").stdout.splitlines()
    assert stat[1] == "[devid 0]link up count       : 1" and stat[-1].endswith("    LINK UP")


def test_fake_hccn_tool_faults(fake):
    state = make_state()
    state["npus"][2]["ip"] = None
    state["npus"][4]["link"] = "DOWN"
    state["ping_fail"] = ["29.1.0.99"]
    r = fake("hccn_tool", "-i", "2", "-ip", "-g", state=state)
    assert (r.returncode, r.stdout, r.stderr) == (1, "", "Get ipconf failed, because no ip was preset there!\n")
    r = fake("hccn_tool", "-i", "0", "-ping", "-g", "address", "29.1.0.99", state=state)
    assert r.returncode == 1
    assert r.stdout.splitlines()[-1] == "3 packets transmitted, 0 received, 100.00% packet loss"
    r = fake("hccn_tool", "-i", "4", "-ping", "-g", "address", "29.1.0.20", state=state)
    assert r.returncode == 1                     # the NPU's own link is down
    stat = fake("hccn_tool", "-i", "4", "-link_stat", "-g", state=state).stdout.splitlines()
    assert stat[4].endswith("    LINK DOWN")      # newest record first
    r = fake("hccn_tool", "-i", "8", "-link", "-g")
    assert r.returncode == 1 and "Error parameter of -i" in r.stderr
    assert fake("hccn_tool", "-i", "0", "-tls", "-s", "enable", "0").stdout == "Cmd executed successfully!\n"
    calls = [json.loads(x)["args"] for x in fake.calls.read_text().splitlines()]
    assert ["-i", "0", "-tls", "-s", "enable", "0"] in calls     # set attempts are visible


def test_fake_overrides(fake):
    state = make_state()
    state["overrides"] = {"hccn_tool": {"-i 3 -link -g": {"stdout": "", "stderr": "boom\n", "rc": 7}},
                          "npu-smi": {"*": {"stdout": "x\n", "rc": 0, "sleep": 0.2}}}
    r = fake("hccn_tool", "-i", "3", "-link", "-g", state=state)
    assert (r.returncode, r.stderr) == (7, "boom\n")
    assert fake("hccn_tool", "-i", "2", "-link", "-g", state=state).stdout == "link status: UP\n"
    t0 = time.monotonic()
    assert fake("npu-smi", "info", state=state).stdout == "x\n"
    assert time.monotonic() - t0 >= 0.2


# --------------------------------------------------------------------------- real nodes
def test_each_node_answers_with_its_hostname(sim):
    for n in sim.nodes:
        r = n.ssh("hostname; ip -4 -o addr show eth0")
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0] == n.name
        assert " %s/24 " % n.address in lines[1]
    assert [n.address for n in sim.nodes] == ["198.18.%d.%d" % (sim.k, 11 + i) for i in range(3)]


def test_hccl_port_blocks_are_out_of_each_nodes_ephemeral_range(sim):
    # A connect's local port must never take an HCCL port the tests probe (it would read as held).
    for n in sim.nodes:
        r = n.ssh("cat /proc/sys/net/ipv4/ip_local_reserved_ports")
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == simmod.RESERVED_PORTS, n.name


def test_npu_smi_info_over_ssh_is_the_capture(sim):
    r = sim.node("node-02").ssh("npu-smi info")
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == fixture("npu-smi/info/a2-910b4-25.0.rc1.1-idle.txt")
    r = sim.node("node-02").ssh("cat /usr/local/Ascend/driver/version.info; command -v npu-smi pdsh")
    assert r.stdout.startswith("Version=25.0.rc1.1\n")
    assert r.stdout.endswith("/usr/local/sbin/npu-smi\n/usr/local/sbin/pdsh\n")


def test_hccn_link_down_and_back(sim):
    n = sim.node("node-03")
    assert n.ssh(HCCN + " -i 3 -link -g").stdout == "link status: UP\n"
    with n.set_npu(3, link="DOWN"):
        assert n.ssh(HCCN + " -i 3 -link -g").stdout == "link status: DOWN\n"
        assert n.ssh(HCCN + " -i 2 -link -g").stdout == "link status: UP\n"
    assert n.ssh(HCCN + " -i 3 -link -g").stdout == "link status: UP\n"
    assert [c["args"] for c in n.calls("hccn_tool")][-1] == ["-i", "3", "-link", "-g"]


def test_remove_device(sim):
    n = sim.node("node-01")
    probe = "ls /dev; stat -c '%F %t:%T %a' /dev/davinci3"
    r = n.ssh(probe)
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "character special file ec:3 660"  # 236=0xec
    with n.remove_device("davinci3"):
        r = n.ssh(probe)
        assert r.returncode != 0 and "No such file" in r.stderr
        assert "davinci3" not in r.stdout.split() and "davinci2" in r.stdout.split()
    assert n.ssh(probe).stdout.splitlines()[-1] == "character special file ec:3 660"
    assert n.ssh("head -c 4 /dev/zero | od -An -tx1").stdout.split() == ["00"] * 4


def test_ulimit_default_and_after_restart(sim):
    n = sim.node("node-02")
    ceiling = nofile_ceiling()
    expected = DEFAULT_NOFILE if ceiling is None or ceiling >= DEFAULT_NOFILE else ceiling
    assert n.nofile == sim.default_nofile == expected
    assert n.ssh("ulimit -Sn; ulimit -Hn").stdout.split() == [str(expected)] * 2
    with n.restart(nofile=1024):
        assert n.ssh("ulimit -Sn; ulimit -Hn").stdout.split() == ["1024", "1024"]
    assert n.ssh("ulimit -n").stdout.split() == [str(expected)]


def test_session_environment_from_bashrc(sim):
    n = sim.node("node-01")
    show = "echo $HCCL_SOCKET_IFNAME $GLOO_SOCKET_IFNAME $TP_SOCKET_IFNAME; echo $PATH"
    r = n.ssh(show)
    lines = r.stdout.splitlines()
    assert lines[0] == "eth0 eth0 eth0"
    assert lines[1] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    with n.set_env(HCCL_SOCKET_IFNAME=None, GLOO_SOCKET_IFNAME="eth9", EXTRA="a b'c"):
        r = n.ssh("echo \"[$HCCL_SOCKET_IFNAME] $GLOO_SOCKET_IFNAME\"; printenv EXTRA")
        assert r.stdout == "[] eth9\na b'c\n"
    assert n.ssh(show).stdout.splitlines()[0] == "eth0 eth0 eth0"
    assert n.env == HEALTHY_ENV


def test_node_to_node_tcp_through_the_bridge(sim, require_iptables):
    n1, n2 = sim.node("node-01"), sim.node("node-02")
    assert n2.ssh("bash -c '</dev/tcp/%s/22' && echo open" % n1.address).stdout == "open\n"
    # Long enough for an open or refused connect on a loaded machine; short where it must time out.
    reach = "timeout 10 bash -c '</dev/tcp/%s/29500'; echo $?" % n1.address
    dropped = "timeout 1 bash -c '</dev/tcp/%s/29500'; echo $?" % n1.address
    with n1.listen(29500):
        assert n2.ssh(reach).stdout == "0\n"
        with n1.firewall(29500, "DROP"):
            assert n2.ssh(dropped).stdout == "124\n"           # silently dropped: times out
            assert n1.ssh("true").returncode == 0             # the controller's path is untouched
        with n1.firewall(29500, "REJECT"):
            assert n2.ssh(reach).stdout == "1\n"               # refused, not timed out (124)
        assert n2.ssh(reach).stdout == "0\n"
    assert n2.ssh(reach).stdout == "1\n"                       # listener gone: refused


def test_stopped_node_refuses_connections(sim):
    n = sim.node("node-03")
    with n.stop():
        r = n.ssh("true", timeout=15)
        assert r.returncode == 255 and "Connection refused" in r.stderr
        assert n.run("hostname").stdout == "node-03\n"        # the node itself is still there
        assert n.extra_processes() == []
    assert n.ssh("hostname").stdout == "node-03\n"


def test_disconnected_node_is_silent(sim):
    n1, n3 = sim.node("node-01"), sim.node("node-03")
    with n3.disconnect():
        t0 = time.monotonic()
        r = n3.ssh("true", connect_timeout=1, timeout=15)
        assert r.returncode == 255 and time.monotonic() - t0 >= 0.9     # no answer at all
        assert n1.ssh("timeout 1 bash -c '</dev/tcp/%s/22'; echo $?" % n3.address).stdout == "124\n"
        assert n3.run("hostname").stdout == "node-03\n"
    assert n3.ssh("hostname").stdout == "node-03\n"


def test_hung_tool_and_nothing_left_behind(sim):
    n = sim.node("node-02")
    with n.override("npu-smi", "info", sleep=1e9):
        t0 = time.monotonic()
        r = n.ssh("timeout 1 npu-smi info; echo rc=$?")
        assert r.stdout.endswith("rc=124\n") and time.monotonic() - t0 < 30
    assert n.ssh("npu-smi info").stdout.startswith("+---")
    deadline = time.monotonic() + 30                 # sshd's session processes exit asynchronously
    while n.extra_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert n.extra_processes() == []
    # and what a careless command leaves behind is seen
    n.ssh("nohup sleep 300 >/dev/null 2>&1 &")

    def argv(pid):
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2]
        except OSError:
            return None
    # The session's own sshd may still be exiting, and nohup may not have exec'd sleep yet.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = n.extra_processes()
        if len(left) == 1 and argv(left[0]) == [b"sleep", b"300"]:
            break
        time.sleep(0.05)
    assert len(left) == 1
    assert argv(left[0]) == [b"sleep", b"300"]
    n.kill_strays()


def test_host_keys_and_inventory(sim, tmp_path):
    inv = yaml.safe_load(sim.inventory_path.read_text())
    assert inv["defaults"] == {"user": "root", "port": 22, "identity_file": str(sim.identity_file),
                               "known_hosts": str(sim.known_hosts_path), "ssh_config": str(sim.ssh_config_path)}
    assert inv["hosts"] == [{"name": "node-01", "address": sim.node("node-01").address, "groups": ["head"]},
                            {"name": "node-02", "address": sim.node("node-02").address, "groups": ["worker"]},
                            {"name": "node-03", "address": sim.node("node-03").address, "groups": ["worker"]}]
    assert inv["groups"] == {"head": {"npus_per_node": 8, "chip": "910B4"},
                             "worker": {"npus_per_node": 8, "chip": "910B4"}}
    assert sim.ssh_config_path.read_text() == ""
    kh = sim.known_hosts_path.read_text().splitlines()
    assert [line.split()[:2] for line in kh] == [[n.address, "ssh-ed25519"] for n in sim.nodes]

    variant = sim.write_inventory(tmp_path / "inv.yaml", exclude_known_hosts=["node-02"],
                                  extra_hosts=["ghost-01"], worker={"npus_per_node": 16})
    v = yaml.safe_load(variant.read_text())
    assert v["hosts"][-1] == {"name": "ghost-01"} and v["groups"]["worker"]["npus_per_node"] == 16
    partial = Path(v["defaults"]["known_hosts"])
    n2 = sim.node("node-02")
    r = n2.ssh("true", options=["-o", "UserKnownHostsFile=%s" % partial])
    assert r.returncode == 255 and "Host key verification failed" in r.stderr
    assert sim.node("node-01").ssh("true", options=["-o", "UserKnownHostsFile=%s" % partial]).returncode == 0

    with n2.regenerate_host_key():
        r = n2.ssh("true", timeout=15)
        assert r.returncode == 255 and "REMOTE HOST IDENTIFICATION HAS CHANGED" in r.stderr
    assert n2.ssh("true").returncode == 0


def test_passwordless_ssh_between_nodes(sim):
    r = sim.node("node-01").ssh("ssh -o BatchMode=yes node-03 hostname; ssh -o BatchMode=yes %s hostname"
                                % sim.node("node-02").address)
    assert (r.returncode, r.stdout) == (0, "node-03\nnode-02\n"), r.stderr


def test_reset_undoes_everything(sim):
    n = sim.node("node-03")
    n.set_npu(1, health="Alarm")
    n.remove_tool("hccn_tool")
    n.remove_device("davinci0")
    n.set_env(HCCL_SOCKET_IFNAME=None)
    n.stop()
    sim.reset()
    r = n.ssh("npu-smi info | grep -c ' OK '; test -x %s && test -c /dev/davinci0 && echo $HCCL_SOCKET_IFNAME" % HCCN)
    assert r.stdout == "8\neth0\n"


def test_second_cluster_does_not_collide_and_close_leaves_nothing(sim, sim_prereqs):
    c = SimCluster(names=("node-01", "node-02"), npus=2)
    try:
        assert c.k != sim.k and c.bridge != sim.bridge
        assert {n.netns for n in c.nodes}.isdisjoint(n.netns for n in sim.nodes)
        assert c.start_seconds < 60  # an upper bound only: the other xdist worker may hold the lock
        n1 = c.node("node-01")
        assert n1.ssh("hostname; ls /dev | grep -c '^davinci[0-9]'").stdout == "node-01\n2\n"
        assert sim.node("node-01").ssh("true").returncode == 0
        n1.ssh("nohup sleep 300 >/dev/null 2>&1 &")           # a stray, to be killed by close()
        pids = [p for n in c.nodes for p in n.processes()]
        assert len(pids) >= 5                                 # 2 anchors, 2 sshd, the stray
        names = [n.netns for n in c.nodes] + [n.host_if for n in c.nodes] + [c.bridge]
        workdir = c.workdir
    finally:
        c.close()
    c.close()                                                 # idempotent
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    for name in names:
        assert name not in netns and name not in links
    for pid in pids:
        assert not Path("/proc/%d" % pid).exists() or _zombie(pid), pid
    assert str(workdir) not in Path("/proc/mounts").read_text() and not workdir.exists()
    assert not Path("/run/simcluster/%s.json" % c.id).exists()
    assert sim.node("node-01").ssh("true").returncode == 0   # the other cluster is unharmed


def test_failed_start_cleans_up(sim_prereqs, monkeypatch):
    cid = "f0" + os.urandom(2).hex()
    monkeypatch.setattr(simmod, "secrets", types.SimpleNamespace(token_hex=lambda n: cid))
    monkeypatch.setattr(simmod, "SSHD", "/bin/false")          # sshd "exits" at once
    with pytest.raises(simmod.SimClusterError, match="sshd exited"):
        SimCluster(names=("node-01",), npus=1, start_timeout=5)
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "sim" + cid not in netns + links
    assert "simcluster-" + cid not in Path("/proc/mounts").read_text()
    assert not list(Path("/tmp").glob("simcluster-%s-*" % cid))
    assert not Path("/run/simcluster/%s.json" % cid).exists()


def _zombie(pid: int) -> bool:
    try:
        return Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
