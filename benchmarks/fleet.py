"""Simulated fleets for the benchmark.

* :func:`namespaced` — N nodes as in the e2e tests (tests/e2e/simcluster.py): one network,
  mount and UTS namespace and one real sshd per node (N <= 200).
* :func:`loopback` — N "nodes" that are N addresses of ONE simulated node: its namespace gets
  198.19.0.0/22 as local addresses, a few extra sshd (one per port) listen on all of them, and
  the controller reaches that /22 through the node's veth.  Every such node shares one
  filesystem view (the same /dev/davinci*, fakes, CANN files) and one host key; each address
  is a separate TCP connection, SSH handshake and session, which is what the controller pays for.

:func:`cache_fakes` replaces the Python fakes (npu-smi, hccn_tool: ~50-80 ms of interpreter
start-up per call on a small box) with bash scripts that print the same bytes, captured once from
the Python fakes, and HCCN pings by one healthy reply replayed per address; the probe is unchanged.
"""
from __future__ import annotations

import ipaddress
import re
import shlex
import subprocess
import time
from pathlib import Path

from tests.e2e.simcluster import SSHD, SimCluster, SimNode

LOOPBACK_NET = ipaddress.ip_network("198.19.0.0/22")  # inside 198.18.0.0/15 (benchmark range)


def node_names(n: int) -> list[str]:
    return [f"node-{i:04d}" for i in range(1, n + 1)]


def namespaced(n: int) -> SimCluster:
    return SimCluster(names=node_names(n), start_timeout=max(30.0, n * 0.6))


def _bash_literal(data: bytes) -> str:
    out = ["$'"]
    for b in data:
        c = chr(b)
        if c in "\\'":
            out.append("\\" + c)
        elif 32 <= b < 127:
            out.append(c)
        else:
            out.append("\\x%02x" % b)
    out.append("'")
    return "".join(out)


def cache_fakes(nodes: list[SimNode], probe) -> int:
    """Run ``probe()`` once (the Python fakes log every call), then replace npu-smi and
    hccn_tool on ``nodes`` by bash scripts that print the captured bytes for the same
    arguments (any other arguments fall through to the Python fake).  Returns calls cached."""
    first = nodes[0]
    first.clear_calls()
    probe()
    calls = {(c["prog"], tuple(c["args"])) for c in first.calls() if c["prog"] in ("npu-smi", "hccn_tool")}
    scripts: dict[str, list[str]] = {"npu-smi": [], "hccn_tool": []}
    for prog, args in sorted(calls):
        path = "/usr/local/sbin/npu-smi" if prog == "npu-smi" else "/usr/local/Ascend/driver/tools/hccn_tool"
        p = subprocess.run(first._nsenter() + [path, *args], capture_output=True, timeout=30,
                           stdin=subprocess.DEVNULL)
        scripts[prog].append("%s) printf '%%s' %s; printf '%%s' %s >&2; exit %d;;" % (
            shlex.quote(" ".join(args)), _bash_literal(p.stdout), _bash_literal(p.stderr), p.returncode))
    # Pings (phase two) differ per node pair, so they are not in the warm-up's calls: one healthy
    # reply is captured and replayed with the device and the address of each call.
    ping_ip = "203.0.113.77"
    p = subprocess.run(first._nsenter() + ["/usr/local/Ascend/driver/tools/hccn_tool", "-i", "0", "-ping", "-g",
                                           "address", ping_ip], capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    if p.returncode == 0:
        scripts["hccn_tool"].append(
            "'-i '[0-9]*' -ping -g address '*) [ $# = 6 ] || exec /usr/bin/python3 -IS /usr/local/Ascend/.hccn_tool.py "
            "\"$@\"; o=%s; o=${o//%s/$6}; printf '%%s' \"${o/device 0 /device $2 }\"; exit 0;;" % (
                _bash_literal(p.stdout), ping_ip))
    # Each node's device IPs are its own (the captured outputs carry the first node's), so the fleet
    # is as healthy as the Python fakes make it: no duplicate device IPs across nodes.
    first_ips = [(n["ip"], n["id"]) for n in first.state.get("npus") or [] if n.get("ip")]
    for prog, cases in scripts.items():
        text = ("#!/bin/bash\n# benchmark: outputs of the Python fake, captured once (benchmarks/fleet.py)\n"
                'case "$*" in\n' + "\n".join(cases) +
                "\n*) exec /usr/bin/python3 -IS /usr/local/Ascend/.%s.py \"$@\";;\nesac\n" % prog)
        for node in nodes:
            mapping = {}
            for ip, npu_id in first_ips:
                try:
                    mapping[ip] = node.npu(npu_id).get("ip") or ip
                except KeyError:
                    pass
            # One pass, whole addresses only: 29.1.0.1 must not rewrite 29.1.0.10.
            own = re.sub(r"(?<![0-9.])(%s)(?![0-9])" % "|".join(re.escape(ip) for ip in mapping),
                         lambda m: mapping[m.group(1)], text) if mapping else text
            dst = node.tool_path(prog)
            # keep the Python fake beside it for arguments we did not capture
            (node.ascend_dir / (".%s.py" % prog)).write_bytes(dst.read_bytes()) if not (
                node.ascend_dir / (".%s.py" % prog)).exists() else None
            tmp = dst.with_name("." + dst.name + ".tmp")
            tmp.write_text(own)
            tmp.chmod(0o755)
            tmp.replace(dst)
    return len(calls)


class LoopbackFleet:
    """N addresses of one simulated node, served by ``sshds`` extra sshd (ports 2201...)."""

    def __init__(self, n: int, sshds: int = 4):
        if n > LOOPBACK_NET.num_addresses - 2:
            raise ValueError("at most %d loopback nodes" % (LOOPBACK_NET.num_addresses - 2))
        self.n = n
        self.cluster = SimCluster(names=["fleet"], start_timeout=30)
        self.node = self.cluster.nodes[0]
        self.procs: list[subprocess.Popen] = []
        self.ports = [2201 + i for i in range(sshds)]
        c, node = self.cluster, self.node
        try:
            node.run("ip addr add %s/%d dev lo" % (LOOPBACK_NET[1], LOOPBACK_NET.prefixlen), check=True)
            subprocess.run(["ip", "route", "replace", str(LOOPBACK_NET), "via", node.address], check=True)
            self._routed = True
            for port in self.ports:
                cfg = node.dir / ("sshd_bench_%d" % port)
                base = node.sshd_config.read_text()
                lines = [l for l in base.splitlines() if not l.startswith(("ListenAddress", "Port", "PidFile",
                                                                             "MaxStartups", "LogLevel"))]
                lines += ["Port %d" % port, "ListenAddress 0.0.0.0", "PidFile %s" % (node.dir / ("sshd_%d.pid" % port)),
                          "MaxStartups 2000:30:4000", "MaxSessions 100", "LogLevel VERBOSE"]
                cfg.write_text("\n".join(lines) + "\n")
                log = open(node.dir / ("sshd_bench_%d.log" % port), "ab")
                self.procs.append(subprocess.Popen(
                    node._nsenter() + ["sh", "-c", "ulimit -n %d && exec %s -D -e -f %s"
                                       % (int(node.nofile), SSHD, shlex.quote(str(cfg)))],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True))
            self.addresses = [str(LOOPBACK_NET[i + 1]) for i in range(n)]
            kh = c.workdir / "known_hosts_fleet"
            pub = node.host_pub
            kh.write_text("".join("[%s]:%d %s\n" % (a, self._port(i), pub) for i, a in enumerate(self.addresses)))
            self.known_hosts = kh
            # The launcher (one of these addresses) logs in to the others with its own known_hosts,
            # as pdsh would: without them there its logins failed at once and phase two was short.
            with open(node.root_dir / ".ssh" / "known_hosts", "a") as fh:
                fh.write(kh.read_text())
            self.inventory_path = c.workdir / "inventory_fleet.yaml"
            hosts = "".join('  - {name: "lb-%04d", address: "%s", port: %d, groups: [%s]}\n'
                            % (i + 1, a, self._port(i), "head" if i == 0 else "worker")
                            for i, a in enumerate(self.addresses))
            self.inventory_path.write_text(
                "defaults: {user: root, identity_file: %s, known_hosts: %s, ssh_config: %s}\nhosts:\n%s"
                "groups:\n  head: {npus_per_node: %d, chip: %s}\n  worker: {npus_per_node: %d, chip: %s}\n"
                % (c.identity_file, kh, c.ssh_config_path, hosts, c.npus, c.chip, c.npus, c.chip))
            self._wait()
        except BaseException:
            self.close()
            raise

    def _port(self, i: int) -> int:
        return self.ports[i % len(self.ports)]

    def _wait(self) -> None:
        deadline = time.monotonic() + 20
        for port in self.ports:
            while True:
                p = subprocess.run(self.node.ssh_args("true", options=["-p", str(port)]), capture_output=True,
                                   timeout=10, stdin=subprocess.DEVNULL)
                if p.returncode == 0:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("bench sshd on port %d does not answer: %s" % (port, p.stderr[-300:]))
                time.sleep(0.1)

    def sshd_logs(self) -> list[Path]:
        return [self.node.dir / ("sshd_bench_%d.log" % p) for p in self.ports]

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)
        self.procs = []
        if getattr(self, "_routed", False):
            subprocess.run(["ip", "route", "del", str(LOOPBACK_NET)], capture_output=True)
            self._routed = False
        self.cluster.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
