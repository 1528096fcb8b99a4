"""Which network interfaces a ``*_SOCKET_IFNAME`` variable selects on a node.

HCCL_SOCKET_IFNAME (CANN docs): ``eth,enp`` selects interfaces by prefix, ``^eth`` excludes
prefixes, ``=eth0,enp0`` selects exact names, ``^=eth0`` excludes exact names; the first
match in name order wins.  GLOO_SOCKET_IFNAME and TP_SOCKET_IFNAME name exact interfaces
(comma-separated for gloo; TensorPipe looks its whole value up as one name).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

VARIABLES = ("HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")


@dataclass(frozen=True)
class Selection:
    variable: str
    value: str
    matched: tuple[str, ...]  # interfaces the value names or matches, in name order
    usable: tuple[str, ...]  # of those: up, with an address
    exact: bool  # the value names interfaces exactly (gloo and TP use each; HCCL the first usable one)
    missing: tuple[str, ...]  # exact names that do not exist on the node

    @property
    def chosen(self) -> str | None:
        """The interface the library will use (HCCL: the first usable match)."""
        return self.usable[0] if self.usable else None


def _usable(iface) -> bool:
    return iface.up and bool(iface.addresses)


def select(variable: str, value: str, interfaces: dict) -> Selection:
    names = sorted(interfaces)
    items = [v.strip() for v in value.split(",") if v.strip()]
    if variable == "HCCL_SOCKET_IFNAME":
        if value.startswith("^="):
            excluded = {v.strip() for v in value[2:].split(",") if v.strip()}
            matched = [n for n in names if n not in excluded and n != "lo"]
            exact, wanted = False, []
        elif value.startswith("^"):
            prefixes = [v.strip() for v in value[1:].split(",") if v.strip()]
            matched = [n for n in names if not any(n.startswith(p) for p in prefixes) and n != "lo"]
            exact, wanted = False, []
        elif value.startswith("="):
            wanted = [v.strip() for v in value[1:].split(",") if v.strip()]
            matched = [n for n in wanted if n in interfaces]
            exact = True
        else:
            matched = [n for n in names if any(n.startswith(p) for p in items)]
            exact, wanted = False, []
    else:
        wanted = [value.strip()] if variable == "TP_SOCKET_IFNAME" else items
        matched = [n for n in wanted if n in interfaces]
        exact = True
    usable = tuple(n for n in matched if _usable(interfaces[n]))
    missing = tuple(n for n in wanted if n not in interfaces) if exact else ()
    return Selection(variable, value, tuple(matched), usable, exact, missing)


def hccl_own_choice(interfaces: dict) -> str | None:
    """The NIC HCCL binds its host sockets to when neither HCCL_IF_IP nor HCCL_SOCKET_IFNAME is
    set (CANN docs): the first NIC by name other than docker and lo, then docker, then lo; of
    those up with an address."""
    usable = [n for n in sorted(interfaces) if _usable(interfaces[n])]
    for preferred in ([n for n in usable if n != "lo" and not n.startswith("docker")],
                      [n for n in usable if n.startswith("docker")], [n for n in usable if n == "lo"]):
        if preferred:
            return preferred[0]
    return None


def describe(interfaces: dict) -> str:
    parts = []
    for name in sorted(interfaces):
        iface = interfaces[name]
        state = "UP" if iface.up else iface.operstate or "DOWN"
        if iface.addresses:
            addr = ",".join(iface.addresses)
        else:
            addr = f"only the link-local {','.join(iface.link_local)}" if iface.link_local else "no address"
        parts.append(f"{name} {state} {addr}")
    return "; ".join(parts) or "none"


def effective_env(host, env: dict) -> dict[str, str]:
    """The session environment, overlaid with the job environment the inventory declares."""
    merged = dict(env)
    for name, value in (host.vars.get("env") or {}).items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = str(value)
    return merged


def route_to(routes, address: str):
    """The route a node's main routing table sends ``address`` by, as ``ip route get`` finds it
    there (policy rules aside): the longest matching prefix, then the lowest metric.  None when
    nothing matches.  A blackhole, unreachable, prohibit or throw route has no NICs."""
    try:
        target = ipaddress.ip_address(address)
    except ValueError:
        return None
    best = None
    for route in routes:
        if route.tos or route.network.version != target.version or target not in route.network:
            continue
        rank = (route.network.prefixlen, -route.metric)
        if best is None or rank > best[0]:
            best = (rank, route)
    return best[1] if best else None


def route_nics(routes, address: str) -> tuple[str, ...]:
    """The NICs ``address`` leaves by (``ip route get``'s ``dev``; every live nexthop's for a
    multipath route); empty when there is no usable route."""
    route = route_to(routes, address)
    return route.usable_nics if route is not None else ()
