"""The comparison arms of the benchmark, each run as its own process so that its
controller CPU and peak RSS are measured alone (``os.wait4`` in :mod:`benchmarks.run`).

    python -m benchmarks.arms floor     INVENTORY FANOUT       # connect + `true`, same pool, same SSH layer
    python -m benchmarks.arms commands  INVENTORY FANOUT       # connect + every command in one plain script
    python -m benchmarks.arms percheck  INVENTORY SAMPLE       # one exec per command (and cross-node check), host after host
    python -m benchmarks.arms testinfra INVENTORY SAMPLE       # the same, as a real pytest-testinfra suite
    python -m benchmarks.arms testinfra INVENTORY SAMPLE shipped   # ... with testinfra's defaults

Each prints one JSON line on stdout.  ``percheck`` and ``testinfra`` run on the first SAMPLE hosts
only (they are serial, so their time is linear in the number of hosts); run.py scales them to N.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.run import UNRELATED_PLUGINS
from preflight.activeprobe import (CONNECT_TIMEOUT, DEFAULT_HCCL_BASE_PORT, HCCL_PORTS_PROBED, LAUNCHER_ROLES,
                                  LAUNCHER_SSH_OPTIONS, PING_TIMEOUT, ray_plan)
from preflight.facts import HostFacts, resolve
from preflight.gather import Gatherer, GatherSettings
from preflight.inventory import load_inventory
from preflight.parsers.hccn_tool import parse_ip
from preflight.probe import ProbeCommand
from preflight.run import Cluster, probe_params


def catalog_needs() -> set[str]:
    """Every fact the built-in node catalog needs (what a plain `pytest --inventory` gathers)."""
    from preflight.check import catalog

    return {need for info in catalog(skip=("job",)).values() for need in info.needs}


def phase_one_commands() -> list[ProbeCommand]:
    return [s.probe_command() for s in resolve(catalog_needs()) if s.phase == 1]


def _on_every_host(inventory: str, fanout: int, command_for) -> dict:
    """Connect to every host and run ``command_for(host, hosts)`` there, in the checker's pool with
    ``fanout``, through its SSH layer; wall time of the whole, hosts where it exited 0, stdout size."""
    from preflight.facts import HostFacts

    hosts = load_inventory(inventory).hosts
    g = Gatherer(GatherSettings(fanout=fanout))
    out_bytes = []

    def work(host, left):
        t = g.transport(host)
        t.connect()
        r = t.run(command_for(host, hosts), left, 8 << 20)
        out_bytes.append(len(r.stdout))
        return HostFacts(host=host.name, reachable=r.exit_code == 0, error=None)

    t0 = time.monotonic()
    res = g.run_all(hosts, work)
    wall = time.monotonic() - t0
    g.close()
    return {"wall_s": wall, "ok": sum(1 for f in res.values() if f.reachable), "hosts": len(hosts),
            "stdout_bytes_per_host": sum(out_bytes) / max(1, len(out_bytes))}


def floor(inventory: str, fanout: int) -> dict:
    """Connect + ``true``: what reaching the hosts costs, with nothing to do on them."""
    return _on_every_host(inventory, fanout, lambda host, hosts: "true")


HCCN_TOOL = "/usr/local/Ascend/driver/tools/hccn_tool"  # where the fakes (and CANN) put it


def _exports(host, hosts) -> str:
    """The probe's ``PF_*`` values and tool paths as a shell prefix (what a per-check suite would
    have to send too)."""
    prefix = "".join(f"export {k}={shlex.quote(v)}; " for k, v in sorted(probe_params(host, hosts).items()))
    return prefix + f"export PF_NPUSMI=npu-smi PF_HCCN={HCCN_TOOL}; "


LIST_DEVICES = "ls /dev | sed -n 's/^davinci\\([0-9][0-9]*\\)$/\\1/p'"


def commands_script(host, hosts) -> str:
    """Every phase-one command in one plain shell script: in order, each in a subshell (some
    ``exit``), the per-NPU ones once per device; no framing, timeouts, caps or parallelism."""
    lines = [_exports(host, hosts), f"devs=$({LIST_DEVICES})"]
    for cmd in phase_one_commands():
        body = f"(\n{cmd.command}\n)"
        lines.append(f"for PF_DEV in $devs; do export PF_DEV; {body}; done" if cmd.per_device else body)
    return "\n".join(lines) + "\n"


def commands(inventory: str, fanout: int) -> dict:
    """The least any tool could do to run the checks' commands: connect, then one exec per host
    running every phase-one command (:func:`commands_script`); same SSH layer, pool and fan-out.
    The floor for phase one with these commands on these nodes."""
    return _on_every_host(inventory, fanout, commands_script)


def percheck(inventory: str, sample: int) -> dict:
    """testinfra-style: one connection per host, reused; one exec per command (per device for the
    per-NPU ones), each the bare command as ``host.run(...)`` would send it (the probe's ``PF_*``
    values and tool paths exported in front, no timeout, cap or framing); host after host.

    Then the cross-node checks the same way (:func:`phase_two_execs`), one exec per thing checked,
    as a testinfra suite would write them (``host.addr(a).port(p).is_reachable`` is one exec per
    port); the launcher's SSH logins, one exec per target, are timed apart (``launcher_per_target_s``)
    because their number grows with N on one host, where everything else grows with N hosts."""
    hosts = load_inventory(inventory).hosts
    sample_hosts = hosts[:sample]
    commands = phase_one_commands()
    g = Gatherer(GatherSettings(fanout=1))
    execs = execs2 = 0
    ok = 0
    t0 = time.monotonic()
    for host in sample_hosts:
        t = g.transport(host)
        t.connect()
        prefix = _exports(host, hosts)
        # The device list first (one exec), as a per-check suite would ask for it.
        devs = t.run(LIST_DEVICES, 30, 1 << 20).stdout.split()
        execs += 1
        for cmd in commands:
            for dev in (devs if cmd.per_device else [None]):
                body = prefix + (f"export PF_DEV={int(dev)}; " if dev is not None else "") + cmd.command
                # As host.run sends it: the login shell (bash here) runs it, no second shell.
                r = t.run(body, 30, 8 << 20)
                execs += 1
                ok += r.exit_code is not None
    wall = time.monotonic() - t0
    # Phase two's equivalents, host after host (the peers' device IPs are looked up untimed).
    plans = [(host, phase_two_execs(host, hosts, _peer_device_ips(g, host, hosts))) for host in sample_hosts]
    seconds = {}
    for host, bodies in plans:
        t = g.transport(host)
        t1 = time.monotonic()
        for body in bodies:
            t.run(body, 60, 1 << 20)
            execs2 += 1
        seconds[host.name] = time.monotonic() - t1
    launcher, targets = launcher_and_targets(hosts, sample)
    launcher_s = 0.0
    if launcher is not None:
        t = g.transport(launcher)
        t.connect()  # untimed; already open when the launcher is a sampled host
        t2 = time.monotonic()
        for target in targets:
            r = t.run(launcher_ssh_exec(target, GatherSettings().connect_timeout), 60, 1 << 20)
            ok += r.exit_code == 0
        launcher_s = time.monotonic() - t2
    g.close()
    return {"wall_s": wall, "hosts_sampled": len(sample_hosts), "execs": execs, "commands_ok": ok,
            "per_host_s": wall / max(1, len(sample_hosts)),
            "phase_two_execs": execs2, "phase_two_est_s": scale_by_role(seconds, hosts),
            "launchers": sum(1 for h in hosts if LAUNCHER_ROLES & h.roles),
            "launcher_targets_sampled": len(targets),
            "launcher_per_target_s": launcher_s / max(1, len(targets)),
            "inner_s": time.monotonic() - t0}


def launcher_and_targets(hosts, sample: int):
    """The inventory's first launcher and the first ``sample`` other hosts it logs in to."""
    launcher = next((h for h in hosts if LAUNCHER_ROLES & h.roles), None)
    if launcher is None:
        return None, []
    return launcher, [h for h in hosts if h.name != launcher.name and h.connection != "local"][:sample]


def scale_by_role(seconds: dict, hosts) -> float:
    """Phase two's seconds for every host from the sampled ones: the head makes no Ray connects,
    so heads and the other hosts are averaged apart and each mean is taken as often as the
    inventory has such hosts (one class not sampled: the other's mean)."""
    def mean(names):
        return sum(seconds[n] for n in names) / len(names) if names else None

    heads = [h.name for h in hosts if "head" in h.roles]
    head_s = mean([n for n in seconds if n in heads])
    other_s = mean([n for n in seconds if n not in heads])
    head_s = other_s if head_s is None else head_s
    other_s = head_s if other_s is None else other_s
    return (head_s or 0.0) * len(heads) + (other_s or 0.0) * (len(hosts) - len(heads))


def _next_host(host, hosts):
    """The host's successor in the checker's HCCL and ping ring (inventory order, wrapping)."""
    return hosts[(hosts.index(host) + 1) % len(hosts)]


def _peer_device_ips(g, host, hosts) -> list[str]:
    """The device IPs of the host after ``host`` (the ring's neighbour), asked on that host."""
    peer = _next_host(host, hosts)
    t = g.transport(peer)
    t.connect()
    devs = t.run(LIST_DEVICES, 30, 1 << 20).stdout.split()
    ips = [parse_ip(t.run(f"{HCCN_TOOL} -i {int(dev)} -ip -g", 30, 1 << 20).stdout.decode(errors="replace"))
           for dev in devs]
    return [ip.address for ip in ips if ip is not None]


def _tcp_connect(address: str, port: int) -> str:
    return f"timeout {CONNECT_TIMEOUT} bash -c 'exec 3<>/dev/tcp/$0/$1' {shlex.quote(address)} {int(port)}"


def phase_two_execs(host, hosts, peer_ips: list[str]) -> list[str]:
    """What a per-check suite sends from ``host`` for the cross-node checks the checker's phase two
    makes (the same plan: activeprobe's Ray ports, HCCL ring neighbour and ports, ring pings),
    one exec each: the clock; a TCP connect per Ray port the checker's plan gives the host (the
    head's on workers, the next worker's range); a TCP connect per probed HCCL port on the next
    host; one ``hccn_tool -ping`` per NPU to the next host's NPU."""
    bodies = ["date +%s.%N"]
    everyone = Cluster(tuple(hosts), {h.name: HostFacts(h.name) for h in hosts})  # all reachable
    for node, _, port in ray_plan(everyone).get(host.name, []):
        bodies.append(_tcp_connect(node.address, port))
    peer = _next_host(host, hosts)
    if peer.name != host.name:
        for off in HCCL_PORTS_PROBED:
            bodies.append(_tcp_connect(peer.address, DEFAULT_HCCL_BASE_PORT + off))
        for dev, ip in enumerate(peer_ips):
            bodies.append(f"timeout {PING_TIMEOUT} {HCCN_TOOL} -i {dev} -ping -g address {shlex.quote(ip)}")
    return bodies


def launcher_ssh_exec(target, timeout: float) -> str:
    """The launcher's non-interactive login to ``target``, as the checker's probe makes it."""
    login = f"{target.user + '@' if target.user else ''}{target.address}"
    return (f"ssh {LAUNCHER_SSH_OPTIONS} -o ConnectTimeout={int(timeout)} -p {int(target.port or 22)} "
            f"{shlex.quote(login)} true")


# The test module of the testinfra arm: one test per check command (per-NPU commands loop over the
# host's devices), each command one `host.run`, as a hand-written testinfra suite would send it.
_TESTINFRA_SUITE = """
import json, os
import pytest

PLAN = json.load(open(os.environ["PF_TESTINFRA_PLAN"]))
_devices = {}
_execs = []


def devices(host):
    name = host.backend.get_hostname()
    if name not in _devices:
        _devices[name] = host.run(PLAN["list_devices"]).stdout.split()
        _execs.append(1)
    return _devices[name]


@pytest.mark.parametrize("body, per_device", [(c[1], c[2]) for c in PLAN["commands"]],
                         ids=[c[0] for c in PLAN["commands"]])
def test_check(host, body, per_device):
    prefix = PLAN["prefix"][host.backend.get_hostname()]
    for dev in (devices(host) if per_device else [None]):
        r = host.run(prefix + ("export PF_DEV=%d; " % int(dev) if dev is not None else "") + body)
        _execs.append(1)
        assert r.rc is not None


@pytest.mark.parametrize("i", range(max([len(v) for v in PLAN["cross"].values()] or [0])))
def test_cross_node(host, i):
    # Phase two's checks from this host, one exec each (clock, Ray and HCCL connects, pings).
    bodies = PLAN["cross"][host.backend.get_hostname()]
    if i >= len(bodies):
        pytest.skip("nothing more to check from this host")
    r = host.run(bodies[i])
    _execs.append(1)
    assert r.rc is not None


@pytest.mark.parametrize("j", range(len(PLAN["launcher"]["targets"])))
def test_launcher_ssh(host, j):
    if host.backend.get_hostname() != PLAN["launcher"]["alias"]:
        pytest.skip("not the launcher")
    r = host.run(PLAN["launcher"]["targets"][j])
    _execs.append(1)
    assert r.rc == 0, r.stderr


def teardown_module():
    with open(os.environ["PF_TESTINFRA_PLAN"] + ".execs", "w") as fh:
        fh.write(str(len(_execs)))
"""


def testinfra(inventory: str, sample: int, shipped: bool = False) -> dict:
    """A real pytest-testinfra suite (its ``ssh://`` backend: OpenSSH with a reused control
    connection per host) sending the same commands as ``percheck``, phase two's included, host
    after host.
    ``shipped``: no ControlPath, as testinfra ships (a new login per command)."""
    hosts = load_inventory(inventory).hosts
    sample_hosts = hosts[:sample]
    # What phase two checks from each sampled host, and the launcher's logins to as many targets
    # (the peers' device IPs looked up first, over the checker's SSH layer, untimed).
    g = Gatherer(GatherSettings(fanout=1))
    cross = {f"pf{i}": phase_two_execs(h, hosts, _peer_device_ips(g, h, hosts)) for i, h in enumerate(sample_hosts)}
    g.close()
    launcher, targets = launcher_and_targets(hosts, sample)
    if launcher not in sample_hosts:  # the suite runs on the sampled hosts only: no launcher among them
        launcher, targets = None, []
    launcher_plan = {"alias": f"pf{sample_hosts.index(launcher)}" if launcher else None,
                     "targets": [launcher_ssh_exec(t, GatherSettings().connect_timeout) for t in targets]}
    with tempfile.TemporaryDirectory(prefix="preflight-testinfra-") as tmp:
        d = Path(tmp)
        config, prefix = [], {}
        for i, h in enumerate(sample_hosts):
            alias = f"pf{i}"
            # testinfra asks for ControlMaster=auto but sets no ControlPath, and OpenSSH does not
            # multiplex without one: every host.run would be a new login. One here, so that the
            # connection is reused, as the per-check arm says (and as a tuned suite does).
            config += [f"Host {alias}", f"  HostName {h.address}", f"  Port {h.port or 22}", f"  User {h.user or 'root'}",
                       "  BatchMode yes", "  StrictHostKeyChecking yes", "  GlobalKnownHostsFile /dev/null"]
            if not shipped:
                config.append(f"  ControlPath {d}/cm-%C")
            if h.identity_file:
                config += [f"  IdentityFile {h.identity_file}", "  IdentitiesOnly yes"]
            if h.known_hosts:
                config.append(f"  UserKnownHostsFile {h.known_hosts}")
            prefix[alias] = _exports(h, hosts)
        (d / "ssh_config").write_text("\n".join(config) + "\n")
        plan = d / "plan.json"
        plan.write_text(json.dumps({"prefix": prefix, "list_devices": LIST_DEVICES, "cross": cross,
                                    "launcher": launcher_plan,
                                    "commands": [[c.name, c.command, c.per_device] for c in phase_one_commands()]}))
        (d / "test_checks.py").write_text(_TESTINFRA_SUITE)
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *UNRELATED_PLUGINS,
               "-p", "no:ascend_preflight",
               "--hosts", ",".join(f"ssh://pf{i}" for i in range(len(sample_hosts))),
               "--ssh-config", str(d / "ssh_config"), "test_checks.py"]
        env = dict(os.environ, PF_TESTINFRA_PLAN=str(plan))
        # pytest's own start and collection, once per run whatever N is: timed apart, not scaled to N.
        t0 = time.monotonic()
        subprocess.run(cmd + ["--collect-only"], cwd=d, capture_output=True, env=env)
        startup = time.monotonic() - t0
        t0 = time.monotonic()
        proc = subprocess.run(cmd + ["--junitxml", str(d / "times.xml")], cwd=d, capture_output=True, text=True,
                              env=env)
        wall = time.monotonic() - t0
        execs_file = Path(str(plan) + ".execs")
        execs = int(execs_file.read_text()) if execs_file.exists() else 0
        # The launcher's logins grow with N on one host, the rest with N hosts: timed apart, and
        # the cross-node tests per host (heads and other hosts scaled apart).
        launcher_s = _junit_seconds(d / "times.xml", "test_launcher_ssh")
        cross = {h.name: _junit_seconds(d / "times.xml", "test_cross_node", f"ssh://pf{i}")
                 for i, h in enumerate(sample_hosts)}
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-300:]
    return {"wall_s": wall, "startup_s": startup, "hosts_sampled": len(sample_hosts), "execs": execs,
            "rc": proc.returncode, "summary": tail,
            "per_host_s": max(0.0, wall - startup - launcher_s - sum(cross.values())) / max(1, len(sample_hosts)),
            "phase_two_est_s": scale_by_role(cross, hosts),
            "launchers": sum(1 for h in hosts if LAUNCHER_ROLES & h.roles),
            "launcher_per_target_s": launcher_s / len(targets) if targets else None}


def _junit_seconds(path: Path, test: str, host: str = "") -> float:
    """Seconds pytest's JUnit XML gives the run (not skipped) cases of function ``test``, on the
    testinfra host whose id contains ``host`` if given (0 when there are none)."""
    import xml.etree.ElementTree as ET

    if not path.exists():
        return 0.0
    return sum(float(case.get("time", 0)) for case in ET.parse(path).iter("testcase")
               if case.get("name", "").split("[")[0] == test and host + "-" in case.get("name", "") + "-"
               and case.find("skipped") is None)


def main(argv: list[str]) -> int:
    arm, inventory, arg = argv[0], argv[1], int(argv[2])
    if arm == "testinfra":
        out = testinfra(inventory, arg, shipped=argv[3:] == ["shipped"])
    else:
        out = {"floor": floor, "commands": commands, "percheck": percheck}[arm](inventory, arg)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
