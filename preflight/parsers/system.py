"""Parsers for plain Linux facts the probe collects: environment, limits, interfaces,
device nodes and listening sockets.  The probe's commands fix these formats."""

from __future__ import annotations

import ipaddress
import json
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


@dataclass(frozen=True)
class NetInterface:
    name: str
    up: bool  # administratively up and the carrier is not known to be down
    operstate: str
    addresses: tuple[str, ...]  # "10.0.0.1/24" forms


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
        addrs = tuple(
            f"{a.get('local')}/{a.get('prefixlen')}"
            for a in addr_info
            if isinstance(a, dict) and a.get("local")
        )
        name = str(entry["ifname"])
        interfaces[name] = NetInterface(name=name, up=up, operstate=operstate, addresses=addrs)
    return interfaces


@dataclass(frozen=True)
class Route:
    """One route of ``ip -j route show table main`` (IPv4 or IPv6)."""
    network: ipaddress.IPv4Network | ipaddress.IPv6Network  # "default" is 0.0.0.0/0 or ::/0
    nics: tuple[str, ...]  # the device; a multipath route's nexthop devices
    kind: str  # "unicast", or "blackhole", "unreachable", "prohibit", "throw", ... (no NIC)
    metric: int  # absent in the JSON when 0


def _route(entry: dict, family: int) -> Route:
    dst = entry.get("dst")
    if not isinstance(dst, str):
        raise ParseError(f"`ip -j route`: a route without a destination: {str(entry)[:80]}")
    if dst == "default":
        dst = "0.0.0.0/0" if family == 4 else "::/0"
    try:
        network = ipaddress.ip_network(dst, strict=False)
    except ValueError:
        # A host route prints as a bare address; anything else is not a route we can match on.
        raise ParseError(f"`ip -j route`: destination {dst[:60]!r} is not an address or network") from None
    kind = str(entry.get("type", "unicast"))
    hops = entry.get("nexthops")
    if isinstance(hops, list):
        nics = tuple(str(h["dev"]) for h in hops if isinstance(h, dict) and h.get("dev"))
    else:
        nics = (str(entry["dev"]),) if entry.get("dev") else ()
    metric = entry.get("metric", 0)
    if not isinstance(metric, int) or isinstance(metric, bool):
        raise ParseError(f"`ip -j route`: metric {str(metric)[:20]!r} of {dst} is not a number")
    return Route(network, nics, kind, metric)


def parse_ip_route_json(text: str) -> tuple[Route, ...]:
    """``ip -j route show table main`` then ``ip -j -6 route show table main``: two JSON lists,
    one after the other (the second may be missing: IPv6 disabled on the node)."""
    decoder = json.JSONDecoder()
    routes: list[Route] = []
    pos, lists = 0, 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos == len(text):
            break
        try:
            data, pos = decoder.raw_decode(text, pos)
        except ValueError as exc:
            raise ParseError(f"`ip -j route` did not print JSON ({getattr(exc, 'msg', exc)})") from None
        except RecursionError:
            raise ParseError("`ip -j route` printed JSON nested too deeply to be routes") from None
        if not isinstance(data, list):
            raise ParseError("`ip -j route` JSON is not a list of routes")
        lists += 1
        for entry in data:
            if isinstance(entry, dict):
                # The family is the list's: the first is IPv4, the second IPv6 ("default" in each).
                routes.append(_route(entry, 4 if lists == 1 else 6))
    if not lists:
        raise ParseError("`ip -j route` printed nothing")
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
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != 7:
            continue
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
    return nodes


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
