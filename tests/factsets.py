"""Build HostFacts from raw command outputs, the way the probe would return them.

Check tests feed real captured outputs (tests/fixtures/ascend) through the real parsers,
so a check is tested on what a node prints, not on hand-made objects.
"""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from types import MappingProxyType

from preflight.check import Verdict, info_of
from preflight.facts import HostFacts
from preflight.inventory import Host
from preflight.probe import CommandOutput
from preflight.run import Cluster

FIXTURES = Path(__file__).parent / "fixtures" / "ascend"


def fixture(rel: str) -> str:
    return (FIXTURES / rel).read_text(encoding="utf-8")


def make_host(name="node-01", groups=(), address=None, **vars_) -> Host:
    return Host(name=name, address=address or name, connection="ssh", user="root", port=22, identity_file=None,
                jump_host=None, known_hosts=None, ssh_config=None, groups=tuple(groups),
                vars=MappingProxyType(dict(vars_)), line=1)


def out(stdout="", rc=0, stderr="") -> CommandOutput:
    return CommandOutput(stdout=stdout, stderr=stderr, rc=rc)


IFACES = [
    {"ifname": "lo", "flags": ["LOOPBACK", "UP", "LOWER_UP"], "operstate": "UNKNOWN",
     "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}]},
    {"ifname": "eth0", "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"], "operstate": "UP",
     "addr_info": [{"family": "inet", "local": "10.0.0.1", "prefixlen": 24}]},
]


def link_fixture(state: str) -> str:
    return f"link status: {state}\n"


def tls_line(dev: int, on: int) -> str:
    return (f"dev_id:{dev}, tls switch[{on}](0:disable, 1:enable), tls preconfigured[1](0:non-preset, 1:preset), "
            f"tls alarm time threshold[60]days\n")


def healthy_raw(npus=8, env=None, nofile="65536 65536", interfaces=None) -> dict[str, CommandOutput]:
    """A healthy 8 x 910B4 node, from the verbatim 910B4 capture."""
    env = {"PATH": "/usr/bin:/bin", "HCCL_SOCKET_IFNAME": "eth0", **(env or {})}
    devs = "".join(f"davinci{i}|character special file|ec|{i:x}|root|root|660\n" for i in range(npus))
    devs += ("davinci_manager|character special file|eb|0|root|root|660\n"
             "devmm_svm|character special file|ee|0|root|root|660\n"
             "hisi_hdc|character special file|ed|0|root|root|660\n")
    raw = {
        "probe.devices": out(" ".join(str(i) for i in range(npus)) + "\n"),
        "session.env": out("\0".join(f"{k}={v}" for k, v in env.items() if v is not None) + "\0"),
        "session.nofile": out(nofile + "\n"),
        "net.interfaces": out(json.dumps(interfaces if interfaces is not None else IFACES)),
        "net.listening": out("  sl  local_address rem_address   st\n"),
        "dev.nodes": out(devs),
        "tools.pdsh": out("/usr/bin/pdsh\npdsh-2.34 (+readline+debug)\nrcmd modules: ssh,rsh,exec (default: ssh)\nmisc modules: machines,dshgroup,netgroup,genders\n"),
        "tools.python3": out("/usr/bin/python3\n"),
        "npu_smi.info": out(fixture("npu-smi/info/a2-910b4-25.0.rc1.1-idle.txt")),
    }
    for i in range(npus):
        raw[f"hccn.link/{i}"] = out(link_fixture("UP"))
        raw[f"hccn.tls/{i}"] = out(tls_line(i, 0))
    return raw


def make_facts(name="node-01", raw=None, **changes) -> HostFacts:
    raw = dict(raw if raw is not None else healthy_raw())
    for key, value in changes.items():
        raw[key.replace("__", "/").replace("_dot_", ".")] = value
    return HostFacts(host=name, address=name, raw=raw, command_timeout=10)


def run_check(func, *, host=None, facts=None, cluster=None, gathered=None):
    """Call a check function the way pytest would, and return its results."""
    info = info_of(_AsItem(func))
    verdict = Verdict(info, host.name if host is not None else None)
    kwargs = {"verdict": verdict}
    params = func.__code__.co_varnames[:func.__code__.co_argcount]
    for name, value in (("host", host), ("facts", facts), ("cluster", cluster), ("gathered", gathered)):
        if name in params:
            kwargs[name] = value
    func(**kwargs)
    return verdict.results


def cluster_of(*pairs) -> Cluster:
    """A cluster of ``(host, facts)``.  A host whose facts have the default interfaces gets its own
    IPv4 inventory address on eth0 in place of 10.0.0.1 (every host holding one address hid false
    passes in the cross-node checks, which tell nodes apart by their addresses)."""
    default = json.dumps(IFACES)
    for host, facts in pairs:
        found = facts.raw.get("net.interfaces")
        if found is not None and found.stdout == default and _is_ipv4(host.address) and host.address != "10.0.0.1":
            facts.raw["net.interfaces"] = out(default.replace('"10.0.0.1"', json.dumps(host.address)))
            facts._cache.pop("net.interfaces", None)
    hosts = tuple(h for h, _ in pairs)
    return Cluster(hosts, {h.name: f for h, f in pairs})


def _is_ipv4(text: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(text).version == 4
    except ValueError:
        return False


class _AsItem:
    """Lets info_of() read the marker of a bare function."""

    def __init__(self, func):
        self.func = func

    def get_closest_marker(self, name):
        for mark in getattr(self.func, "pytestmark", []):
            if mark.name == name:
                return mark
        return None


def fake_agent(tmp_path, answer: bytes | None):
    """A unix socket at which an ssh-agent accepts and answers ``answer`` (None: never answers):
    (its path, the listening socket, the connections accepted)."""
    path = str(tmp_path / "agent.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(64)
    accepted = []

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(conn)
            if answer is not None:
                conn.recv(64)
                conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    return path, server, accepted
