"""Parsers for plain Linux facts the probe collects: environment, limits, interfaces,
device nodes and listening sockets.  The probe's commands fix these formats."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import re
from dataclasses import dataclass

from . import ParseError


def parse_env0(text: str) -> dict[str, str]:
    """``env -0``: NUL-separated ``NAME=value`` records (values may contain newlines)."""
    env: dict[str, str] = {}
    for record in text.split("\0"):
        if not record:
            continue
        name, sep, value = record.partition("=")
        if not sep or not name:
            continue  # a stray fragment: not an assignment, skip it rather than guess
        env[name] = value
    if not env:
        raise ParseError("empty environment (expected NAME=value records from `env -0`)")
    return env


@dataclass(frozen=True)
class NofileLimit:
    soft: int | None  # None = unlimited
    hard: int | None


def _limit(token: str) -> int | None:
    if token == "unlimited":
        return None
    if not (token.isascii() and token.isdigit()):
        raise ParseError(f"not a limit: {token!r}")
    return int(token)


def parse_nofile(text: str) -> NofileLimit:
    """``printf '%s %s' "$(ulimit -Sn)" "$(ulimit -Hn)"``."""
    tokens = text.split()
    if len(tokens) != 2:
        raise ParseError(f"expected 'soft hard' open-file limits, got {text.strip()[:80]!r}")
    return NofileLimit(_limit(tokens[0]), _limit(tokens[1]))


RCMD_DEFAULT_FILE = "/etc/pdsh/rcmd_default"  # Debian's /usr/bin/pdsh wrapper (beside pdsh.bin) reads it
RCMD_DEFAULT_MARK = "@@RCMD_DEFAULT "


@dataclass(frozen=True)
class Pdsh:
    path: str
    # From ``pdsh -V``: the remote-command modules it can load, and the one it was built to use
    # without ``-R`` or PDSH_RCMD_TYPE.  None: this pdsh did not say.
    rcmd: tuple[str, ...] | None = None
    default_rcmd: str | None = None
    # The module named in /etc/pdsh/rcmd_default, which Debian's wrapper exports as
    # PDSH_RCMD_TYPE (``pdsh -V`` still prints the built-in default).
    default_file: str | None = None
    # What ``pdsh -V`` printed instead of its version ("Couldn't load any pdsh modules"): this pdsh
    # cannot run.
    broken: str | None = None

    @property
    def site_default(self) -> str | None:
        """What a plain ``pdsh -w`` connects with when PDSH_RCMD_TYPE is not set."""
        return self.default_file or self.default_rcmd


def parse_pdsh(text: str) -> Pdsh | None:
    """``command -v pdsh``, then ``pdsh -V``, then an ``@@RCMD_DEFAULT`` line with the contents
    of /etc/pdsh/rcmd_default when it exists.  None when pdsh is not on PATH.

    ``pdsh -V`` prints ``pdsh-2.34 (+readline+debug)``, then ``rcmd modules: ssh,rsh,exec
    (default: rsh)`` (``(none)`` when no module loads), then the misc modules."""
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        return None
    path = lines[0].strip()
    rcmd = default = chosen = None
    said = [ln.strip() for ln in lines[1:] if ln.strip() and not ln.startswith(RCMD_DEFAULT_MARK)]
    if said and not any(ln.startswith("pdsh-") for ln in said) and not any("rcmd modules" in ln for ln in said):
        return Pdsh(path, broken="; ".join(said[:3]))
    for line in lines[1:]:
        if line.startswith(RCMD_DEFAULT_MARK):
            chosen = line[len(RCMD_DEFAULT_MARK):].strip() or None
            continue
        key, sep, value = line.partition(":")
        if not sep or key.strip() != "rcmd modules" or rcmd is not None:
            continue
        names, _, default = value.partition("(default:")
        rcmd = tuple(n.strip() for n in names.split(",") if n.strip() and n.strip() != "(none)")
        default = default.rstrip().rstrip(")").strip()
        default = None if default in ("", "none", "(none)") else default
        if default is None and len(rcmd) == 1:
            default = rcmd[0]  # pdsh names a default only when it has more than one module
    return Pdsh(path, rcmd, default, chosen)


@dataclass(frozen=True)
class NetInterface:
    name: str
    up: bool  # administratively up and the carrier is not known to be down
    operstate: str
    addresses: tuple[str, ...]  # "10.0.0.1/24" forms, link-local ones apart
    # fe80::/64 (and 169.254/16) addresses: the kernel gives every up interface an fe80 one, so
    # it says nothing about whether the NIC was configured, and no other node reaches it by it.
    link_local: tuple[str, ...] = ()

    def ips(self, link_local: bool = False) -> list[str]:
        """Its addresses without the prefix length (10.0.0.1), the link-local ones too if asked."""
        return [a.split("/")[0] for a in self.addresses + (self.link_local if link_local else ())]


def parse_ip_addr_json(text: str) -> dict[str, NetInterface]:
    """``ip -j addr show`` (iproute2 JSON)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ParseError(f"`ip -j addr` did not print JSON ({getattr(exc, 'msg', exc)})") from None
    except RecursionError:
        raise ParseError("`ip -j addr` printed JSON nested too deeply to be interface data") from None
    if not isinstance(data, list):
        raise ParseError("`ip -j addr` JSON is not a list of interfaces")
    interfaces = {}
    for entry in data:
        if not isinstance(entry, dict) or "ifname" not in entry:
            continue
        flags = entry.get("flags") or []
        addr_info = entry.get("addr_info") or []
        if not isinstance(flags, list) or not isinstance(addr_info, list):
            raise ParseError(f"`ip -j addr`: interface {str(entry['ifname'])[:40]!r} has malformed flags or addresses")
        operstate = str(entry.get("operstate", "UNKNOWN"))
        up = "UP" in flags and "NO-CARRIER" not in flags and operstate != "DOWN"
        addrs = [a for a in addr_info if isinstance(a, dict) and a.get("local")]
        name = str(entry["ifname"])
        interfaces[name] = NetInterface(
            name=name, up=up, operstate=operstate,
            addresses=tuple(f"{a['local']}/{a.get('prefixlen')}" for a in addrs if not _link_local(a)),
            link_local=tuple(f"{a['local']}/{a.get('prefixlen')}" for a in addrs if _link_local(a)))
    return interfaces


IP_TEXT_MARK = "@@IP-TEXT"  # the probe's fallback: iproute2 before 4.14 (CentOS 7) has no -j

_IP_LINK = re.compile(r"^\d+:\s+([^:@\s]+)(?:@\S*)?:\s+<([^>]*)>(.*)$")
_IP_ADDR = re.compile(r"^\s+inet6?\s+(\S+)(?:.*\sscope\s+(\S+))?")


def parse_ip_addr(text: str) -> dict[str, NetInterface]:
    """``ip -j addr show``, or, where iproute2 has no JSON (``Option "-j" is unknown``), the probe's
    marker and ``ip addr show``."""
    if text.startswith(IP_TEXT_MARK):
        return parse_ip_addr_text(text[len(IP_TEXT_MARK):])
    return parse_ip_addr_json(text)


def parse_ip_addr_text(text: str) -> dict[str, NetInterface]:
    """``ip addr show``: ``2: eth0@if5: <BROADCAST,UP,LOWER_UP> mtu 1500 ... state UP ...`` per
    interface, then ``inet 10.0.0.1/24 ... scope global eth0`` per address; the same NetInterfaces as
    the JSON form."""
    entries: list[dict] = []
    for line in text.splitlines():
        link = _IP_LINK.match(line)
        if link:
            state = re.search(r"\sstate\s+(\S+)", link[3])
            entries.append({"ifname": link[1], "flags": link[2].split(","),
                            "operstate": state[1] if state else "UNKNOWN", "addr_info": []})
            continue
        addr = _IP_ADDR.match(line)
        if addr and entries:
            local, _, prefix = addr[1].partition("/")
            info = {"local": local, "prefixlen": int(prefix) if prefix.isdigit() else (128 if ":" in local else 32)}
            if addr[2]:
                info["scope"] = addr[2]
            entries[-1]["addr_info"].append(info)
    if not entries and text.strip():
        raise ParseError(f"unreadable `ip addr show` output: {text.strip()[:80]!r}")
    return parse_ip_addr_json(json.dumps(entries))


def _link_local(addr_info: dict) -> bool:
    if addr_info.get("scope") == "link":
        return True
    try:
        return ipaddress.ip_address(str(addr_info["local"])).is_link_local
    except ValueError:
        return False


@dataclass(frozen=True)
class Route:
    """One route of ``ip -o route show table main`` (IPv4 or IPv6)."""
    network: ipaddress.IPv4Network | ipaddress.IPv6Network  # "default" is 0.0.0.0/0 or ::/0
    nics: tuple[str, ...]  # the device; a multipath route's live nexthops' devices
    kind: str  # "unicast", or "blackhole", "unreachable", "prohibit", "throw", ... (no NIC)
    metric: int  # 0 when not printed
    tos: bool = False  # matches only packets of one TOS (not what `ip route get <address>` asks)

    @property
    def usable_nics(self) -> tuple[str, ...]:
        """The NICs traffic leaves by; none for a blackhole, unreachable, prohibit or throw route."""
        return self.nics if self.kind == "unicast" else ()


ROUTES_V6_MARK = "@@IPV6"
_ROUTE_TYPES = {"unicast", "local", "broadcast", "multicast", "anycast", "blackhole", "unreachable",
                "prohibit", "throw", "nat"}


def _route_line(line: str, family: int) -> Route:
    # One line per route (-o); a multipath route's nexthops follow on it, each after "nexthop".
    words = line.replace("\\", " ").split()
    kind = words.pop(0) if words[0] in _ROUTE_TYPES else "unicast"
    if not words:
        raise ParseError(f"`ip route`: a {kind} route without a destination")
    dst = words[0]
    if dst == "default":
        dst = "0.0.0.0/0" if family == 4 else "::/0"
    try:
        network = ipaddress.ip_network(dst, strict=False)
    except ValueError:
        raise ParseError(f"`ip route`: {line.strip()[:80]!r} does not start with an address or network") from None
    if network.version != family:
        raise ParseError(f"`ip route`: an IPv{network.version} route among the IPv{family} ones: {dst[:60]!r}")
    parts: list[list[str]] = [[]]  # the route's own fields, then one list per nexthop
    for word in words[1:]:
        if word == "nexthop":
            parts.append([])
        else:
            parts[-1].append(word)
    fields, hops = parts[0], parts[1:]

    def after(keyword: str, where: list[str]) -> str | None:
        return where[where.index(keyword) + 1] if keyword in where[:-1] else None

    metric = after("metric", fields) or "0"
    if not metric.isascii() or not metric.isdigit():
        raise ParseError(f"`ip route`: metric {metric[:20]!r} of {dst} is not a number")
    tos = (after("tos", fields) or after("dsfield", fields) or "0") not in ("0", "0x00", "default")
    if hops:
        # A dead nexthop (its NIC down) is skipped by the kernel; the others share the traffic.
        nics = tuple(dev for hop in hops if "dead" not in hop and (dev := after("dev", hop)))
    else:
        nics = (dev,) if (dev := after("dev", fields)) else ()
    return Route(network, nics, kind, int(metric), tos)


def parse_ip_route(text: str) -> tuple[Route, ...]:
    """``ip -4 -o route show table main``, then a line ``@@IPV6`` and ``ip -6 -o route show
    table main`` (empty with IPv6 disabled on the node).  Plain text rather than ``-j``: iproute2
    before 4.17 prints text whatever -j says, and some later ones printed invalid route JSON."""
    routes: list[Route] = []
    family, marked = 4, False
    for line in text.splitlines():
        if line.strip() == ROUTES_V6_MARK:
            family, marked = 6, True
        elif line.strip():
            routes.append(_route_line(line, family))
    if not marked:
        raise ParseError("`ip route` output is cut short (the IPv6 part never began)")
    return tuple(routes)


@dataclass(frozen=True)
class DevNode:
    name: str
    kind: str  # "char", "block", "file", "directory", "link", "other"
    major: int | None
    minor: int | None
    owner: str
    group: str
    mode: str
    # Whether the login user (the one the job runs as) may open it read-write; None: not asked.
    usable: bool | None = None


_KINDS = {
    "character special file": "char",
    "block special file": "block",
    "regular file": "file",
    "regular empty file": "file",
    "directory": "directory",
    "symbolic link": "link",
}


def parse_dev_listing(text: str) -> dict[str, DevNode]:
    """``stat -c '%n|%F|%t|%T|%U|%G|%a'`` run in /dev (major/minor in hex)."""
    nodes = {}
    access = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("stat: "):  # stat's word on a glob that matched nothing
            continue
        if line.startswith("@@A|"):  # @@A|<name>|rw or |no: test -r -a -w as the login user
            _, name, how = (line.split("|") + ["", ""])[:3]
            access[name] = how == "rw"
            continue
        parts = line.split("|")
        if len(parts) != 7:
            # Not stat's line: garbage read as "no /dev/davinci node" would blame the node's devices.
            raise ParseError(f"unreadable stat line {line[:80]!r} (expected name|type|major|minor|owner|group|mode)")
        name, kind, major, minor, owner, group, mode = parts
        is_dev = kind in ("character special file", "block special file")
        try:
            nodes[name] = DevNode(
                name=name,
                kind=_KINDS.get(kind, "other"),
                major=int(major, 16) if is_dev else None,
                minor=int(minor, 16) if is_dev else None,
                owner=owner, group=group, mode=mode,
            )
        except ValueError:
            raise ParseError(f"unreadable stat line {line[:80]!r}") from None
    return {name: dataclasses.replace(node, usable=access[name]) if name in access else node
            for name, node in nodes.items()}


def parse_listening_ports(text: str) -> frozenset[int]:
    """TCP ports in LISTEN state from ``/proc/net/tcp`` and ``/proc/net/tcp6``."""
    ports = set()
    seen_header = False
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        if fields[0] == "sl":
            seen_header = True
            continue
        local, state = fields[1], fields[3]
        if state != "0A" or ":" not in local:
            continue
        try:
            ports.add(int(local.rsplit(":", 1)[1], 16))
        except ValueError:
            continue
    if not seen_header:
        raise ParseError("no /proc/net/tcp table header")
    return frozenset(ports)


@dataclass(frozen=True)
class TcpProbe:
    """One bounded TCP connect made from a node (phase two)."""

    state: str  # open, refused, timeout, unreachable, unresolved, error
    address: str
    port: int
    # On the target: "existing" (something already listens), "temporary" (ours), "held" (no listener:
    # a connection holds the port as its local port, so ours could not bind it), "none".
    listener: str
    detail: str


_TCP_STATES = ("open", "refused", "timeout", "unreachable", "unresolved", "error")


def parse_tcp_probe(text: str) -> TcpProbe:
    """``<state> <address> <port> <listener> [detail]`` as written by the phase-two probe."""
    parts = text.strip().split(" ", 4)
    if len(parts) < 4 or parts[0] not in _TCP_STATES or not (parts[2].isascii() and parts[2].isdigit()):
        raise ParseError(f"unreadable TCP probe record {text.strip()[:80]!r}")
    return TcpProbe(state=parts[0], address=parts[1], port=int(parts[2]), listener=parts[3],
                    detail=parts[4] if len(parts) > 4 else "")
