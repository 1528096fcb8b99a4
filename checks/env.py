"""The environment a job gets in a non-interactive SSH session (what pdsh and launchers use),
overlaid with the ``env`` the inventory declares for the job."""

import ipaddress
from collections import Counter, defaultdict

from preflight import faq
from preflight.activeprobe import is_loopback
from preflight.check import check, nothing_to_compare
from preflight.facts import FactUnavailable, remedy_for_unevaluated
from preflight.hostlist import fold
from preflight.outliers import split
from preflight.ifname import VARIABLES, describe, effective_env, hccl_own_choice, route_to, select
from preflight.parsers.versions import inventory_chip_family, npu_smi_node_family

IFNAME_REMEDY = ("List the node's interfaces (ip -br addr) and set the variable to the NIC that carries "
                 "the cluster network, with the same name on every node: export HCCL_SOCKET_IFNAME==<nic> "
                 "GLOO_SOCKET_IFNAME=<nic> TP_SOCKET_IFNAME=<nic> (HCCL's leading = means exactly this name, "
                 "not every name it begins; in the launch script or ~/.bashrc, before its interactive guard); "
                 "bring the interface up and give it an address if it has none.")


def _loopback_nic(iface) -> bool:
    ips = iface.ips()
    return iface.name == "lo" or bool(ips) and all(is_loopback(a) for a in ips)


@check("env.socket_ifname", title="*_SOCKET_IFNAME name an interface that exists, is up and has an address",
       reference=faq.M12, needs=("session.env", "net.interfaces", "session.env_login?"), remedy=IFNAME_REMEDY)
def test_socket_ifname(host, facts, cluster, verdict):
    env = effective_env(host, facts.get("session.env"))
    interfaces = facts.get("net.interfaces")
    present = [v for v in VARIABLES if env.get(v)]
    several = cluster is None or len(cluster.hosts) > 1
    # Set in ~/.bashrc after its interactive guard: a login shell has it, the sessions pdsh and
    # launchers start do not, and HCCL picks a NIC itself (this read as "not set", a skip).
    if_ip = (env.get("HCCL_IF_IP") or "").strip()
    # (HCCL_SOCKET_IFNAME beside HCCL_IF_IP is not read by HCCL: missing it is no fault either.)
    # HCCL_IF_IP set only in the interactive shell: the job's HCCL picks a NIC of its own instead.
    login_only = [v for v in interactive_only((*VARIABLES, "HCCL_IF_IP"), env, _login_env(facts))
                  if not (if_ip and v == "HCCL_SOCKET_IFNAME")]
    for variable in login_only:
        verdict.failed(variable, observed=f"{variable} is set in an interactive shell but not in "
                                          f"{session_of(host)}: the job's processes do not get it",
                       expected=f"{variable} set in the non-interactive session pdsh and launchers get",
                       remedy=_before_guard(variable))
    if if_ip:
        _hccl_if_ip(host, if_ip, interfaces, verdict, several=several)
        if not present:
            return
    if not present and login_only:
        return  # said above
    if not present:
        own = hccl_own_choice(interfaces) if not env.get("HCCL_IF_IP") else None
        aside = f"; HCCL picks {describe({own: interfaces[own]})}, the first NIC by name other than docker and lo" \
            if own else ""
        verdict.skipped(message=f"no *_SOCKET_IFNAME variable set (the libraries pick an interface themselves{aside})")
        return
    for variable in present:
        sel = select(variable, env[variable], interfaces)
        shown = f"{variable}={sel.value}"
        if variable == "HCCL_SOCKET_IFNAME" and if_ip:
            # HCCL reads HCCL_SOCKET_IFNAME only when HCCL_IF_IP is unset: a wrong name here is no fault.
            verdict.passed(variable, message=f"{shown} is not used: HCCL_IF_IP={if_ip} takes precedence")
            continue
        spaced = [v for v in sel.value.split(",") if v != v.strip()] if variable == "GLOO_SOCKET_IFNAME" else []
        loopback = [n for n in (sel.usable if variable == "GLOO_SOCKET_IFNAME" else [sel.chosen])
                    if n and _loopback_nic(interfaces[n])]
        # HCCL's exact list is a list of alternatives (the CANN docs' own example is
        # `==eth0,endvnic`: the first one present wins), gloo's a list of NICs it uses.
        alternatives = variable == "HCCL_SOCKET_IFNAME" and bool(sel.usable)
        if spaced:
            # torch splits the value on commas and looks each piece up as it is, blanks included.
            verdict.failed(variable, observed=f"{shown}: {', '.join(repr(v) for v in spaced)} has blanks around it, "
                                              f"and gloo looks the name up with them",
                           expected="interface names separated by commas only, e.g. GLOO_SOCKET_IFNAME="
                                    + ",".join(v.strip() for v in sel.value.split(",") if v.strip()))
        elif loopback and several:
            verdict.failed(variable, observed=f"{shown} selects {', '.join(loopback)} "
                                              f"({describe({n: interfaces[n] for n in loopback})}), the loopback "
                                              f"interface: no other node reaches {host.name} there",
                           expected="the NIC of the network the nodes share (loopback suits a single-node job only)")
        elif variable == "TP_SOCKET_IFNAME" and "," in sel.value:
            verdict.failed(variable, observed=f"{shown} lists several interfaces; TensorPipe (torch RPC) takes one "
                                              f"name and looks the whole value up as it",
                           expected="one interface name, e.g. TP_SOCKET_IFNAME=" + sel.value.split(",")[0].strip())
        elif sel.missing and not alternatives and sel.value.startswith("=="):
            # `export HCCL_SOCKET_IFNAME==eth0` is shell: the value it sets is "=eth0".
            verdict.failed(variable, observed=f"{shown} names {', '.join(sel.missing)}: the value holds two '=', "
                                              f"the shell form `export {variable}=={sel.value[2:]}` copied as a value",
                           expected="one '=' in the value (exact match): =" + sel.value[2:],
                           remedy=f"Write the value with one '=': {variable}: \"={sel.value[2:]}\" in the inventory's "
                                  f"env, or export {variable}=={sel.value[2:]} in a shell.")
        elif sel.missing and not alternatives:
            verdict.failed(variable, observed=f"{shown} names {', '.join(sel.missing)}, which does not exist "
                                              f"(interfaces: {describe(interfaces)})",
                           expected="an existing interface",
                           remedy=_rename_hint(host, interfaces, variable, cluster))
        elif not sel.matched:
            verdict.failed(variable, observed=f"{shown} matches no interface (interfaces: {describe(interfaces)})",
                           expected="at least one matching interface",
                           remedy=_rename_hint(host, interfaces, variable, cluster))
        elif sel.exact and not alternatives and len(sel.usable) < len(sel.matched):
            bad = [n for n in sel.matched if n not in sel.usable]
            verdict.failed(variable, observed=f"{shown}: {', '.join(bad)} is down or has no address "
                                              f"({describe({n: interfaces[n] for n in bad})})",
                           expected="every named interface up with an address")
        elif not sel.usable:
            verdict.failed(variable, observed=f"{shown} matches {', '.join(sel.matched)}, none of them up with "
                                              f"an address ({describe({n: interfaces[n] for n in sel.matched})})",
                           expected="a matching interface that is up with an address")
        else:
            unused = [n for n in sel.missing + sel.matched if n not in sel.usable] if sel.exact else []
            aside = f"; {', '.join(unused)} not present or not usable here" if unused else ""
            verdict.passed(variable, message=f"{shown} selects {sel.chosen} "
                                             f"({describe({sel.chosen: interfaces[sel.chosen]})}){aside}")


def _choices(cluster, variable: str) -> dict[str, tuple[str, str]]:
    """{host: (the variable's value, the NIC it selects)} on every reachable node where it selects
    one; made once per run and variable (every failing node asks for it)."""
    cache = getattr(cluster, "_ifname_choices", None)
    if cache is None:
        cache = {}
        try:
            cluster._ifname_choices = cache
        except AttributeError:
            pass
    if variable not in cache:
        chosen = {}
        for other, facts in cluster.reachable():
            try:
                env = effective_env(other, facts.get("session.env"))
                interfaces = facts.get("net.interfaces")
            except FactUnavailable:
                continue
            if env.get(variable) and not (variable == "HCCL_SOCKET_IFNAME" and (env.get("HCCL_IF_IP") or "").strip()):
                nic = select(variable, env[variable], interfaces).chosen
                if nic:
                    chosen[other.name] = (env[variable], nic)
        cache[variable] = chosen
    return cache[variable]


def _rename_hint(host, interfaces: dict, variable: str, cluster) -> str:
    """What to do on a node whose variable selects nothing, from what the other nodes select:
    their NIC's name when this node has it too (a wrong value here), else the NIC that carries
    this node's inventory address, to be given the others' name (enp189s0f0 beside eth0)."""
    others = {h: c for h, c in (_choices(cluster, variable) if cluster is not None else {}).items() if h != host.name}
    if not others:
        return IFNAME_REMEDY
    sides = split({h: nic for h, (_, nic) in others.items()})
    if sides.tied:
        return IFNAME_REMEDY
    theirs, agreeing = sides.majority, sides.agreeing
    value = Counter(others[h][0] for h in agreeing).most_common(1)[0][0]
    if theirs in interfaces:
        return (f"The other nodes ({fold(agreeing)}) set {variable}={value}, which selects {theirs}, and {host.name} "
                f"has {theirs} too: set {variable}={value} for {host.name} as well (in the inventory's env: or the "
                f"launch script), so every node uses one network (cluster.ifname_agree).")
    nic = next((n for n, iface in interfaces.items() if host.address in iface.ips()), None)
    if nic is None:
        return (f"The other nodes ({fold(agreeing)}) use {theirs} ({variable}={value}), which {host.name} does not "
                f"have. " + IFNAME_REMEDY)
    return (f"On {host.name}, {nic} carries {host.address}, the address the inventory reaches it by: give it the "
            f"name the other nodes use ({theirs}, {variable}={value} on {fold(agreeing)}) with a udev rule or "
            f"netplan's set-name, so one name serves every node (cluster.ifname_agree), or, if the cluster network "
            f"is another NIC, name that one. " + IFNAME_REMEDY)


def _hccl_if_ip(host, value: str, interfaces: dict, verdict, several: bool = True) -> None:
    """HCCL_IF_IP, which HCCL prefers to any interface name, is an address of this node: HCCL binds
    its host sockets to it, and a copied value (another node's) cannot be bound."""
    text, _, zone = value.partition("%")
    try:
        ip = ipaddress.ip_address(text)
        if ip.version == 6 and ip.ipv4_mapped:
            ip = ip.ipv4_mapped
        address = str(ip)
    except ValueError:
        verdict.failed("HCCL_IF_IP", observed=f"HCCL_IF_IP={value} is not an IP address",
                       expected="one IPv4 or IPv6 address of this node",
                       remedy="Set HCCL_IF_IP to this node's own address on the network the nodes share, or unset it "
                              "and name the NIC with HCCL_SOCKET_IFNAME.")
        return
    owner = next((name for name, iface in interfaces.items() if address in iface.ips(link_local=True)
                  and (not zone or name == zone)), None)
    if ip.is_loopback and not several:
        verdict.passed("HCCL_IF_IP", message=f"HCCL_IF_IP={value}: a loopback address, which serves a single-node "
                                             f"inventory")
    elif ip.is_loopback:
        verdict.failed("HCCL_IF_IP", severity="warning",
                       observed=f"HCCL_IF_IP={value} is a loopback address: no other node can connect to it",
                       expected="this node's address on the network the nodes share (loopback suits a "
                                "single-node job only)",
                       remedy="Set HCCL_IF_IP to each node's own address on the cluster network, or unset it.")
    elif owner is None:
        verdict.failed("HCCL_IF_IP", observed=f"HCCL_IF_IP={value} is not an address of {host.name} "
                                              f"(interfaces: {describe(interfaces)})",
                       expected="an address of this node (HCCL binds its host sockets to it)",
                       remedy="HCCL_IF_IP is per node: set it to each node's own address (e.g. in the launch script, "
                              "from `hostname -I`), or unset it and name the NIC with HCCL_SOCKET_IFNAME.")
    elif not interfaces[owner].up:
        verdict.failed("HCCL_IF_IP", observed=f"HCCL_IF_IP={value} is on {describe({owner: interfaces[owner]})}, "
                                              f"which is not up",
                       expected="the address of an interface that is up")
    else:
        verdict.passed("HCCL_IF_IP", message=f"HCCL_IF_IP={value} is on {describe({owner: interfaces[owner]})}")


ROUTE_SUBJECT = "NPU device IP route"
ROUTE_REMEDY = ("On the outlier and on a good node, run `ip route get <NPU device IP>` (hccn_tool -i <N> -ip -g "
                "gives the IP) and compare the `dev` each names. Add the route for the device network the other "
                "nodes have (or remove the odd one) with ip route and in the node's network configuration, and give "
                "the NIC that carries it the same name on every node (the same bond, or a udev/netplan rename); "
                "HCCL_SOCKET_IFNAME must then name the same NIC everywhere.")
BY_DEFAULT, NO_ROUTE = "the default route", "no route"


@check("cluster.ifname_agree", title="The socket interface is the same on every node", scope="cluster",
       reference=faq.R_CROSS_NODE_IFNAME, needs=("session.env", "net.interfaces", "net.routes", "hccn.ip"),
       remedy=IFNAME_REMEDY)
def test_ifname_agree(cluster, verdict):
    if nothing_to_compare(cluster, verdict, "the interfaces the socket variables select"):
        return
    values: dict[str, dict[str, str | None]] = defaultdict(dict)  # variable -> host -> chosen interface
    addresses: dict[str, dict[str, set]] = defaultdict(dict)  # variable -> host -> the chosen NIC's addresses
    if_ips: dict[str, list[str]] = defaultdict(list)  # HCCL_IF_IP value -> hosts
    unreadable = []
    unresolved: dict[str, list[str]] = defaultdict(list)
    for host, facts in cluster.reachable():
        try:
            env = effective_env(host, facts.get("session.env"))
            interfaces = facts.get("net.interfaces")
        except FactUnavailable:
            unreadable.append(host.name)
            continue
        if (env.get("HCCL_IF_IP") or "").strip():
            if_ips[env["HCCL_IF_IP"].strip()].append(host.name)
        for variable in VARIABLES:
            if variable == "HCCL_SOCKET_IFNAME" and (env.get("HCCL_IF_IP") or "").strip():
                continue  # HCCL_IF_IP takes precedence: the name is not used there, set or not
            elif env.get(variable):
                sel = select(variable, env[variable], interfaces)
                if sel.chosen:
                    values[variable][host.name] = sel.chosen
                    addresses[variable][host.name] = set(interfaces[sel.chosen].ips())
                else:  # selects nothing on this node: env.socket_ifname reports it there
                    unresolved[variable].append(host.name)
            else:
                values[variable][host.name] = None
    evaluated = _shared_if_ip(if_ips, verdict)
    for variable in VARIABLES:
        per_host = values.get(variable, {})
        if not any(per_host.values()):
            continue
        evaluated = True
        if _host_local_nic(variable, per_host, addresses[variable], verdict):
            continue
        sides = split({name: chosen or "unset" for name, chosen in per_host.items()}, missing="unset")
        skipped = (f" (selects no interface on {fold(unresolved[variable])}: see env.socket_ifname)"
                   if unresolved[variable] else "")
        if sides.unanimous and sides.majority == "lo" and len(cluster.hosts) > 1:
            # The same on every node, and no node reaches another there: env.socket_ifname fails each.
            verdict.skipped(variable, message=f"{variable} selects lo on all {len(per_host)} nodes: the loopback "
                                              f"interface, no common network (see env.socket_ifname)")
            continue
        if unresolved[variable]:
            # Their own result, so that their cells show it rather than the others' agreement.
            verdict.error(f"{variable} on {fold(unresolved[variable])}", outliers=tuple(unresolved[variable]),
                          message=f"not evaluated: {variable} selects no interface on {fold(unresolved[variable])} "
                                  f"(see env.socket_ifname)",
                          remedy="Fix the variable on those nodes as env.socket_ifname says, then re-run the "
                                 "preflight.")
        if sides.unanimous:
            where = " where it selects one" if unresolved[variable] else ""
            verdict.passed(variable, message=f"{variable} selects {sides.majority} on all "
                                             f"{len(per_host)} nodes{where}{skipped}", agreed={variable: sides.majority})
            continue
        verdict.failed(variable, outliers=sides.outliers, where=variable,
                       observed=f"{sides.describe()}{sides.versus(lambda hs, v: f'{fold(hs)} use {v}')}{skipped}",
                       expected="the same interface name on every node")
    evaluated = _device_routes_agree(cluster, verdict) or evaluated
    if not evaluated:
        verdict.skipped(message="no *_SOCKET_IFNAME variable set and no NPU device IP read on any node")
    if unreadable:
        verdict.error(message=f"environment or interfaces unreadable on {fold(unreadable)}",
                      outliers=tuple(unreadable))


def _host_local_nic(variable, per_host, addresses, verdict) -> bool:
    """Fail a NIC whose addresses every node also has (docker0's 172.17.0.1, a bridge copied to
    each node): it is each host's own, not a network between them, whatever its name."""
    seen = Counter(a for ips in addresses.values() for a in ips)
    # lo's 127.0.0.1 is every node's too: env.socket_ifname fails lo on its own terms.
    shared = sorted(h for h, ips in addresses.items()
                    if ips and per_host[h] != "lo" and all(seen[a] > 1 for a in ips))
    if len(addresses) < 2 or not shared:
        return False
    nics = sorted({per_host[h] for h in shared})
    ips = sorted({a for h in shared for a in addresses[h]})
    verdict.failed(variable, outliers=tuple(shared), where=variable,
                   observed=f"{variable} selects {', '.join(nics)} on {fold(shared)}, whose address "
                            f"{', '.join(ips[:3])} is on several nodes at once: a host-local bridge (docker0, "
                            f"br-..., virbr0), not a network between the nodes",
                   expected="the NIC of the network the nodes reach each other on (each node its own address)")
    return True


def _shared_if_ip(if_ips, verdict) -> bool:
    """HCCL_IF_IP copied to several nodes: every rank would bind one address."""
    copied = {ip: hosts for ip, hosts in if_ips.items() if len(hosts) > 1}
    for ip, hosts in sorted(copied.items()):
        verdict.failed("HCCL_IF_IP", outliers=tuple(hosts), where="HCCL_IF_IP",
                       observed=f"HCCL_IF_IP={ip} on {fold(hosts)}: one address on several nodes",
                       expected="each node's own address in HCCL_IF_IP",
                       remedy="Set HCCL_IF_IP per node to that node's own address on the cluster network (e.g. in "
                              "its own ~/.bashrc or launch environment), or unset it and use HCCL_SOCKET_IFNAME.")
    return bool(copied)


def device_route_nics(facts) -> str | None:
    """How a node routes its own NPUs' device IPs (``ip route get <device IP>``), as one value to
    compare across nodes: the NICs of routes for the device network (``eth1``), ``the default route``
    where only a default route matches, ``no route``; several, comma-separated, when its NPUs differ.
    None without a device IP; FactUnavailable when the routes are unreadable.

    Only routes for the device network name NICs: a node usually has none (the device IPs live
    on the NPUs' own ports), and then the default route's NIC, the management network's, is no
    concern of HCCL's and may well be named differently on different hardware."""
    # Not configured, or unreadable (cluster.device_ip_unique names those): nothing to route.
    ips = [ip.address for _, ip in sorted(facts.per_device("hccn.ip").items())
           if ip is not None and not isinstance(ip, FactUnavailable)]
    if not ips:
        return None
    routes = facts.get("net.routes")
    ways = set()
    for address in ips:
        route = route_to(routes, address)
        if route is None or not route.usable_nics:
            ways.add(NO_ROUTE)
        elif route.network.prefixlen == 0:
            ways.add(BY_DEFAULT)
        else:
            ways.update(route.usable_nics)  # a multipath route: the set of its NICs, in any order
    return ", ".join(sorted(ways))


def _how_routed(value: str, what: str = "theirs") -> str:
    if value == NO_ROUTE:
        return f"have no route to {what}"
    if value == BY_DEFAULT:
        return f"reach {what} by the default route only"
    return f"route {what} by {value}"


def _device_routes_agree(cluster, verdict) -> bool:
    """The FAQ's other half: the NPU device IPs are routed alike, by same-named NICs, on every
    node.  A warning: a difference is suspect, not proof that HCCL will fail.  Whether anything
    was compared."""
    per_host: dict[str, str] = {}
    unreadable: dict[str, list[str]] = defaultdict(list)  # why -> hosts
    for host, facts in cluster.reachable():
        try:
            value = device_route_nics(facts)
        except FactUnavailable as exc:
            # Without the host's own name ("... was not gathered from node-03"): one reason, one result.
            unreadable[str(exc).replace(f" from {host.name}", "")].append(host.name)
            continue
        if value is not None:
            per_host[host.name] = value
    for why, hosts in unreadable.items():
        verdict.error(ROUTE_SUBJECT, message=f"routing table unreadable on {fold(hosts)}: {why}",
                      outliers=tuple(hosts))
    if not per_host:
        return bool(unreadable)
    sides = split(per_host, missing=NO_ROUTE)
    if sides.unanimous:
        verdict.passed(ROUTE_SUBJECT, message=f"all {len(per_host)} nodes "
                                              f"{_how_routed(sides.majority, 'their NPU device IPs')} "
                                              f"(ip route get <NPU device IP>)")
    else:
        verdict.failed(ROUTE_SUBJECT, outliers=sides.outliers, where=ROUTE_SUBJECT, remedy=ROUTE_REMEDY,
                       severity="warning",
                       observed=f"ip route get <NPU device IP> finds {sides.describe()}"
                                + sides.versus(lambda hs, v: f"{fold(hs)} {_how_routed(v)}"),
                       expected="the NPU device IPs routed alike, by same-named NICs, on every node")
    return True


# -- the CANN environment a job gets (issue 3) -------------------------------------------------

import os.path as _osp  # noqa: E402
import re as _re  # noqa: E402

CANN_VARS = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")
SET_ENV = "/usr/local/Ascend/ascend-toolkit/set_env.sh"
ATB_SET_ENV = "/usr/local/Ascend/nnal/atb/set_env.sh"
GUARD_REMEDY = ("source {script} before the interactive guard in ~/.bashrc (the `case $- in *i*) ...` or "
                "`[ -z \"$PS1\" ] && return` line), or in the launch script, so that non-interactive SSH "
                "sessions (pdsh, launchers, Ray) get it too (/etc/profile.d is read by login shells only, not "
                "by `ssh node cmd`)")


def session_of(host) -> str:
    """The session whose environment was read: what a job started there gets."""
    if host.connection == "local":
        return "the shell running preflight (connection: local)"
    return "a non-interactive SSH session"


def set_env_script(files) -> str:
    """The set_env.sh of the CANN found on the node: ascend-toolkit/set_env.sh beside latest/ up
    to 8.3, <root>/set_env.sh in the cann or cann-<version> folder from 8.5 on."""
    for install in (files.cann if files is not None else ()):
        root = install.root.rstrip("/")
        if root.endswith("/latest"):
            return _osp.dirname(root) + "/set_env.sh"
        if _osp.basename(root).startswith("cann"):
            return root + "/set_env.sh"
    return SET_ENV


def atb_set_env_script(files) -> str:
    """nnal/atb's set_env.sh beside the libatb.so found (~/Ascend/nnal/atb for a non-root install);
    with several, the one in the same Ascend folder as the active CANN."""
    active = files.active_cann()
    prefixes = [lib.partition("/nnal/atb/")[0] for lib in files.libatb if "/nnal/atb/" in lib]
    if not prefixes:
        return ATB_SET_ENV
    if active is not None:
        prefixes.sort(key=lambda prefix: not (active.root + "/").startswith(prefix + "/"))
    return f"{prefixes[0]}/nnal/atb/set_env.sh"


def _login_env(facts):
    return facts.optional("session.env_login")


def _before_guard(variable: str) -> str:
    """The remedy for a variable set only after ~/.bashrc's interactive guard."""
    return (f"export {variable} before the interactive guard in ~/.bashrc (the `case $- in *i*) ...` or "
            f"`[ -z \"$PS1\" ] && return` line), or in the launch script.")


def interactive_only(names, env, login) -> list[str]:
    """Variables set in an interactive login shell but not in the non-interactive SSH session."""
    if not login:
        return []
    return [n for n in names if not env.get(n) and login.get(n)]


def _not_loaded(verdict, subject, names, env, login, script, what, host=None):
    only = interactive_only(names, env, login)
    session = session_of(host) if host is not None else "a non-interactive SSH session"
    if only:
        shown = " and ".join(f"`{n}`" for n in only)
        verdict.failed(subject, observed=f"{shown} {'is' if len(only) == 1 else 'are'} set in an interactive shell but "
                                         f"not in {session}: source {_osp.basename(script)} "
                                         f"before the interactive guard in ~/.bashrc",
                       expected=f"{what} loaded in the non-interactive session pdsh and launchers get",
                       remedy=GUARD_REMEDY.format(script=script))
    else:
        missing = " and ".join(names)
        how = " nor in an interactive login shell" if login is not None else ""
        verdict.failed(subject, observed=f"{missing} not set in {session}{how}",
                       expected=f"{what} loaded in every session a job starts from: source {script} in ~/.bashrc "
                                f"(before its interactive guard)")


@check("env.cann_loaded", title="CANN environment loaded in a non-interactive SSH session (import acl works)",
       reference=faq.M2, needs=("session.env", "session.env_login?", "ascend.files?", "python.stack?"),
       remedy=(f"Source CANN's environment for every session: add `source {SET_ENV}` (CANN 8.5 and later: "
               "/usr/local/Ascend/cann/set_env.sh) to ~/.bashrc above its interactive guard (or to the launch "
               "script), then check with ssh NODE 'echo $ASCEND_HOME_PATH'."))
def test_cann_loaded(host, facts, verdict):
    env = effective_env(host, facts.get("session.env"))
    login = _login_env(facts)
    present = [n for n in CANN_VARS if env.get(n)]
    if not present:
        files = facts.optional("ascend.files")
        if files is not None and not files.cann and not files.roots and not interactive_only(CANN_VARS, env, login):
            # Nothing to source: the toolkit itself is missing (versions.stack says where it looked).
            verdict.failed(observed=f"{' and '.join(CANN_VARS)} not set, and no CANN toolkit is installed "
                                    f"(see versions.stack)",
                           expected="the CANN toolkit installed and its set_env.sh loaded",
                           remedy="Install the CANN toolkit (and its kernels package) of the release the stack "
                                  "needs, then source its set_env.sh in ~/.bashrc above the interactive guard "
                                  f"({SET_ENV}; CANN 8.5 and later: /usr/local/Ascend/cann/set_env.sh).")
            return
        script = set_env_script(files)
        _not_loaded(verdict, None, CANN_VARS, env, login, script, "the CANN toolkit environment (set_env.sh)", host)
        return
    home = env[present[0]].rstrip("/")
    try:
        files = facts.get("ascend.files")
    except FactUnavailable as exc:
        verdict.error(message=f"{host.name}: {exc}")
        return
    if home not in files.roots and home not in {c.real for c in files.cann}:
        verdict.failed(observed=f"{present[0]}={home} does not exist on the node",
                       expected="a variable pointing at the installed CANN toolkit")
        return
    try:
        stack = facts.get("python.stack")
    except FactUnavailable as exc:
        verdict.error(message=f"{host.name}: {present[0]}={home}, but the job's Python could not be asked "
                              f"whether `import acl` works: {exc}",
                      remedy=remedy_for_unevaluated(str(exc)) or "Check the inventory's python for this node (it "
                             "must be the Python the job runs) and run it by hand there: python -c 'import acl'.")
        return
    real = files.roots.get(home, home)
    cann_py = [f"{r}/python/site-packages" for r in {home, real}]
    # The inventory's env: (what the launch script exports) reaches the job, not the probe's python.
    on_sys_path = any(p.rstrip("/") in cann_py for p in stack.sys_path)
    declared = str((host.vars.get("env") or {}).get("PYTHONPATH") or "").split(":")
    on_path = on_sys_path or any(p.rstrip("/") in cann_py for p in declared if p)
    if stack.modules.get("acl"):
        verdict.passed(message=f"{present[0]}={home}; python3 finds acl at {stack.modules['acl']}")
    elif not on_path:
        verdict.failed(observed=f"{present[0]}={home} is set, but {home}/python/site-packages is not on the "
                                f"Python path of {stack.executable or 'python3'}: import acl fails "
                                f"(No module named 'acl')",
                       expected=f"PYTHONPATH with {home}/python/site-packages, as set_env.sh exports it")
    elif not on_sys_path:
        verdict.passed(message=f"{present[0]}={home}; {home}/python/site-packages is on the job's Python path "
                               f"through PYTHONPATH under env: in the inventory")
    else:
        verdict.passed(message=f"{present[0]}={home}, {home}/python/site-packages on the Python path "
                               f"(the toolkit ships no acl module here)")


@check("env.nnal_atb", title="nnal/atb installed (libatb.so) and its set_env.sh loaded (ATB_HOME_PATH)",
       reference=faq.M3, needs=("ascend.files", "session.env", "session.env_login?"),
       remedy=(f"Install the nnal package of the CANN release after sourcing {SET_ENV} (the installer needs it), "
               f"then add `source {ATB_SET_ENV}` to ~/.bashrc above its interactive guard."))
def test_nnal_atb(host, facts, verdict):
    files = facts.get("ascend.files")
    env = effective_env(host, facts.get("session.env"))
    if not files.libatb:
        verdict.failed(observed="nnal/atb is not installed: no libatb.so under "
                                "/usr/local/Ascend/nnal/atb/latest/atb/cxx_abi_*/lib (nor ~/Ascend/nnal/atb)",
                       expected="the nnal package of the CANN release installed",
                       remedy=(f"Install the nnal package of the CANN release after sourcing {set_env_script(files)} "
                               f"(the installer needs it), then add `source {ATB_SET_ENV}` to ~/.bashrc above its "
                               f"interactive guard."))
        return
    atb_home = env.get("ATB_HOME_PATH")
    if not atb_home:
        _not_loaded(verdict, None, ("ATB_HOME_PATH",), env, _login_env(facts), atb_set_env_script(files),
                    "nnal/atb's set_env.sh", host)
        return
    lib = f"{atb_home.rstrip('/')}/lib/libatb.so"
    if lib not in files.libatb:
        verdict.failed(observed=f"ATB_HOME_PATH={atb_home}, but {lib} does not exist "
                                f"(installed: {', '.join(files.libatb)})",
                       expected="ATB_HOME_PATH pointing at an installed cxx_abi_N folder")
    else:
        verdict.passed(message=f"ATB_HOME_PATH={atb_home}, libatb.so present"
                               + (f" (nnal {files.atb_version})" if files.atb_version else ""))


_ROOT = _re.compile(r"(/[^:\s]*?/(?:ascend-toolkit|nnae)/[^/:\s]+|/[^:\s]*?/cann-[^/:\s]+|/[^:\s]*?/Ascend/cann)(?=/|$)")
SINGLE_VARS = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "ASCEND_OPP_PATH",
               "ASCEND_AICPU_PATH", "TOOLCHAIN_HOME", "ASCEND_TOOLKIT_LATEST_HOME")


def cann_roots(env) -> dict[str, set[str]]:
    """CANN install roots named in the environment -> the variables naming them."""
    roots: dict[str, set[str]] = defaultdict(set)
    for var in SINGLE_VARS:
        for entry in (env.get(var) or "").split(":"):
            m = _ROOT.search(entry)
            if m and not m.group(1).endswith(".sh"):
                roots[m.group(1)].add(var)
    return roots


def _root_version(root: str, files) -> str:
    if files is not None:
        version = files.version_of_root(root)
        if version:
            return version
    m = _re.search(r"(?:cann-)?(\d+\.\d+(?:\.[0-9A-Za-z]+)*)$", root)
    return m.group(1) if m else root


@check("env.single_cann", title="PATH, LD_LIBRARY_PATH and ASCEND_* point into one CANN version only",
       reference=faq.M15, needs=("session.env", "ascend.files?"),
       remedy=("Load exactly one CANN: remove the other version's set_env.sh line (or hand-written exports) from "
               "~/.bashrc and /etc/profile.d, open a new session, and keep other versions in separate containers."))
def test_single_cann(host, facts, verdict):
    env = effective_env(host, facts.get("session.env"))
    files = facts.optional("ascend.files")
    roots = cann_roots(env)
    if not roots:
        verdict.skipped(message="no CANN path in PATH, LD_LIBRARY_PATH or ASCEND_* (env.cann_loaded reports it)")
        return
    by_version: dict[str, list[str]] = defaultdict(list)
    unknown = []  # a `latest` link whose target the probe could not read: it may be any of the others
    for root, variables in sorted(roots.items()):
        version = _root_version(root, files)
        where = f"{root} ({', '.join(sorted(variables))})"
        if version == root and root.endswith("/latest"):
            unknown.append(where)
        else:
            by_version[version].append(where)
    aside = f"; version of {', '.join(unknown)} unknown (its version files were not read)" if unknown else ""
    if not by_version and len(unknown) == 1:
        verdict.passed(message=f"one CANN root: {unknown[0]}")
    elif not by_version:
        verdict.error(message=f"CANN roots {'; '.join(unknown)}: their versions could not be read (see versions.stack)")
    elif len(by_version) == 1:
        version = next(iter(by_version))
        verdict.passed(message=f"one CANN version ({version}): {'; '.join(by_version[version])}{aside}")
    else:
        described = "; ".join(f"{v}: {', '.join(where)}" for v, where in sorted(by_version.items()))
        verdict.failed(observed=f"{len(by_version)} CANN versions in the environment: {described}",
                       expected="every CANN path from one version")


@check("env.visible_devices", title="ASCEND_RT_VISIBLE_DEVICES names existing NPUs; Ray does not override it",
       reference=faq.V_Q1, needs=("session.env", "dev.nodes", "python.stack?"),
       remedy=("Set ASCEND_RT_VISIBLE_DEVICES to logical NPU ids that exist on the node (0..N-1, comma-separated, "
               "no repeats), or unset it; with Ray also export RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1 "
               "so Ray does not overwrite it."))
def test_visible_devices(host, facts, verdict):
    env = effective_env(host, facts.get("session.env"))
    # No device list at all (a probe cut short, an older facts file) is not "no NPU".
    _visible_list(env, len(facts.devices()) if "probe.devices" in facts.raw else None, verdict)
    try:
        stack = facts.get("python.stack")
        ray = stack.version_of("ray") or stack.modules.get("ray")
    except FactUnavailable:
        ray = None
    if ray:
        # The catalog and the vllm-ascend Ray guide ask for it on every node, whether or not the node
        # lists its devices: without it Ray writes each worker's own ASCEND_RT_VISIBLE_DEVICES.
        noset = "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"
        value = env.get(noset)
        if not value:  # Ray tests the variable for any non-empty value, `true` and even `0` alike
            listed = ("ASCEND_RT_VISIBLE_DEVICES is set" if env.get("ASCEND_RT_VISIBLE_DEVICES") is not None
                      else "ASCEND_RT_VISIBLE_DEVICES is unset")
            verdict.failed(noset, observed=f"Ray is installed and {listed}, but {noset}="
                                           f"{env.get(noset, '(unset)')}: Ray rewrites ASCEND_RT_VISIBLE_DEVICES "
                                           f"for each worker to the NPUs it assigned",
                           expected=f"{noset}=1")
        else:
            verdict.passed(noset, message=f"{noset}={value}" + (
                "" if value == "1" else " (Ray reads any non-empty value as set)"))


def _visible_list(env: dict, count: int, verdict) -> None:
    value = env.get("ASCEND_RT_VISIBLE_DEVICES")
    if count is None:
        verdict.error("ASCEND_RT_VISIBLE_DEVICES", message="not evaluated: the node's /dev/davinciN device nodes were "
                                                           "not listed (the probe did not get that far)",
                      remedy=remedy_for_unevaluated("was not gathered"))
        return
    if value is None and count == 0:  # "all 0 NPU(s) visible" read as a pass on a node without NPUs
        verdict.skipped("ASCEND_RT_VISIBLE_DEVICES", message="not set, and the node has no /dev/davinciN device "
                                                             "nodes to make visible (see devices.davinci_nodes)")
        return
    if value is None:
        verdict.passed("ASCEND_RT_VISIBLE_DEVICES", message=f"not set: all {count} NPU(s) visible")
        return
    tokens = [t.strip() for t in value.split(",")]
    if count == 0 and value.strip() and value.strip() != "NoDevFiles":
        verdict.error("ASCEND_RT_VISIBLE_DEVICES",
                      message=f"ASCEND_RT_VISIBLE_DEVICES={value}: not evaluated, the node has no /dev/davinciN "
                              f"device nodes to check the ids against (see devices.davinci_nodes)")
        return
    if not value.strip() or value.strip() == "NoDevFiles":
        verdict.failed("ASCEND_RT_VISIBLE_DEVICES", observed=f"ASCEND_RT_VISIBLE_DEVICES={value!r}: no NPU visible",
                       expected=f"ids among 0..{count - 1}" if count else "the ids of the node's NPUs, or unset")
        return
    bad = [t for t in tokens if not t.isdigit()]
    ids = [int(t) for t in tokens if t.isdigit()]
    beyond = sorted({i for i in ids if i >= count})
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    problems = []
    ranges = [t for t in bad if _re.fullmatch(r"\d+-\d+", t)]
    if ranges:  # Ray splits the list on commas only; CANN's examples list each id
        spelled = [i for a, b in (map(int, r.split("-")) for r in ranges) for i in range(a, min(b, a + 64) + 1)]
        fix = f" (list each id: {','.join(map(str, spelled))})" if spelled and len(spelled) <= 64 else ""
        problems.append(f"ranges are not read: {', '.join(ranges)}{fix}")
    if len(bad) > len(ranges):
        problems.append(f"not NPU ids: {', '.join(t for t in bad if t not in ranges)}")
    if beyond:
        problems.append(f"{', '.join(map(str, beyond))} beyond the {count} NPU(s) of the node")
    if dupes:
        problems.append(f"{', '.join(map(str, dupes))} listed twice")
    if problems:
        verdict.failed("ASCEND_RT_VISIBLE_DEVICES", observed=f"ASCEND_RT_VISIBLE_DEVICES={value}: {'; '.join(problems)}",
                       expected=f"distinct ids among 0..{count - 1}")
    else:
        verdict.passed("ASCEND_RT_VISIBLE_DEVICES", message=f"ASCEND_RT_VISIBLE_DEVICES={value} ({count} NPUs present)")


def _int_or_none(value):
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


# HCCL_EXEC_TIMEOUT's range on A1 (Atlas training, 910A/910ProB) and 310P cards: (0, 17340], in
# steps of 68 s; 0 ("never") exists only on A2/A3.
EXEC_TIMEOUT_MAX_A1 = 17340
EXEC_TIMEOUT_MAX_AIV = 1091  # HCCL_OP_EXPANSION_MODE=AIV: 0 and larger values mean this


def _exec_timeout_family(host, facts):
    """'A1' or '310P' when the node's SoC is one of them (inventory chip, else npu-smi's chip names)."""
    family = inventory_chip_family(host.vars.get("chip"))
    if family is None:
        info = facts.optional("npu_smi.info")
        family = npu_smi_node_family(c.name for c in info.chips) if info is not None else None
    return family if family in ("A1", "310P") else None


CONNECT_TIMEOUT_REMEDY = ("export HCCL_CONNECT_TIMEOUT=1200 (allowed 120..7200 s; the default 120 s is too short "
                          "for large jobs; the FAQs use 600 to 7200) in the launch script or in ~/.bashrc above its "
                          "interactive guard, on every node.")
EXEC_TIMEOUT_REMEDY = ("export HCCL_EXEC_TIMEOUT=1800 (or up to 7200, as the ROLL FAQ does) in the launch script or in "
                       "~/.bashrc above its interactive guard, on every node: long enough for a slow collective, "
                       "short enough that a hung one ends in an error. On A1 and 310P cards it must be at most "
                       "17340; with HCCL_OP_EXPANSION_MODE=AIV, 0 and values above 1091 are taken as 1091.")


@check("env.hccl_timeouts", title="HCCL_CONNECT_TIMEOUT >= 600 s and HCCL_EXEC_TIMEOUT sane", severity="warning",
       reference=faq.M18, needs=("session.env", "session.env_login?", "npu_smi.info?"),
       remedy=CONNECT_TIMEOUT_REMEDY)
def test_hccl_timeouts(host, facts, verdict):
    env = effective_env(host, facts.get("session.env"))
    minimum = int(host.vars.get("hccl_connect_timeout") or 600)
    raw = env.get("HCCL_CONNECT_TIMEOUT")
    value = _int_or_none(raw) if raw is not None else 120
    login_only = interactive_only(("HCCL_CONNECT_TIMEOUT",), env, _login_env(facts))
    if login_only:
        # Set, but after ~/.bashrc's interactive guard: the job runs with the default (FAQ's own pattern).
        verdict.failed("HCCL_CONNECT_TIMEOUT",
                       observed=f"HCCL_CONNECT_TIMEOUT={_login_env(facts)['HCCL_CONNECT_TIMEOUT']} is set in an "
                                f"interactive shell but not in {session_of(host)}: the job gets the default 120 s",
                       expected=f"HCCL_CONNECT_TIMEOUT of at least {minimum} s in the non-interactive session pdsh "
                                f"and launchers get",
                       remedy=_before_guard("HCCL_CONNECT_TIMEOUT"))
    elif raw is not None and value is None:
        verdict.failed("HCCL_CONNECT_TIMEOUT", observed=f"HCCL_CONNECT_TIMEOUT={raw!r} is not a number of seconds",
                       expected=f"an integer in {minimum}..7200")
    elif value < minimum or value > 7200:
        shown = f"HCCL_CONNECT_TIMEOUT={raw}" if raw is not None else "HCCL_CONNECT_TIMEOUT unset (default 120 s)"
        verdict.failed("HCCL_CONNECT_TIMEOUT", observed=shown,
                       expected=f"at least {minimum} s and at most 7200 s")
    else:
        verdict.passed("HCCL_CONNECT_TIMEOUT", message=f"HCCL_CONNECT_TIMEOUT={value}")
    raw = env.get("HCCL_EXEC_TIMEOUT")
    # AIV expansion mode has its own range, [0, 1091]: 0 and anything above are 1091 s there.
    mode = (env.get("HCCL_OP_EXPANSION_MODE") or "").strip().upper()
    aiv = mode == "AIV"
    if raw is None:
        verdict.passed("HCCL_EXEC_TIMEOUT", message="HCCL_EXEC_TIMEOUT unset (default 1091 s in AIV mode, "
                                                    "HCCL_OP_EXPANSION_MODE=AIV)" if aiv else
                                                    "HCCL_EXEC_TIMEOUT unset (default 1836 s)")
        return
    # CANN 9 takes hundredths of a second in the AI_CPU and AIV expansion modes.
    value = _int_or_none(raw)
    if value is None and mode in ("AIV", "AI_CPU") and _re.fullmatch(r"\d+\.\d{1,2}", str(raw).strip()):
        value = float(raw)
    if value is None or value < 0 or value > 2147483647:
        verdict.failed("HCCL_EXEC_TIMEOUT", observed=f"HCCL_EXEC_TIMEOUT={raw!r} is not a valid number of seconds",
                       expected="0 (never) or a positive integer", remedy=EXEC_TIMEOUT_REMEDY)
    elif 0 < value < 600:
        verdict.failed("HCCL_EXEC_TIMEOUT", observed=f"HCCL_EXEC_TIMEOUT={value}: shorter than a slow collective "
                                                     f"on a large job",
                       expected=(f"600..{EXEC_TIMEOUT_MAX_AIV} s in AIV mode (0 and larger values mean "
                                 f"{EXEC_TIMEOUT_MAX_AIV})" if aiv else "0 (never) or at least 600 s"),
                       remedy=EXEC_TIMEOUT_REMEDY)
    elif (family := _exec_timeout_family(host, facts)) and not 0 < value <= EXEC_TIMEOUT_MAX_A1:
        verdict.failed("HCCL_EXEC_TIMEOUT", observed=f"HCCL_EXEC_TIMEOUT={value} on an {family} node",
                       expected=f"600..{EXEC_TIMEOUT_MAX_A1} s on {family} (its range is (0, {EXEC_TIMEOUT_MAX_A1}], "
                                f"rounded down to a multiple of 68; 0 = never exists only on A2/A3)",
                       remedy=EXEC_TIMEOUT_REMEDY)
    elif aiv and not 0 < value <= EXEC_TIMEOUT_MAX_AIV:
        # Within what the check asks for, but not what the operator wrote: say what applies.
        verdict.passed("HCCL_EXEC_TIMEOUT", message=f"HCCL_EXEC_TIMEOUT={value}, which HCCL_OP_EXPANSION_MODE=AIV "
                                                    f"caps at {EXEC_TIMEOUT_MAX_AIV} s "
                                                    f"({'not never' if value == 0 else 'not ' + str(value) + ' s'})")
    else:
        verdict.passed("HCCL_EXEC_TIMEOUT", message=f"HCCL_EXEC_TIMEOUT={value}")


RECOMMENDED = (
    ("TASK_QUEUE_ENABLE", lambda v: v in ("1", "2"), "1 or 2 (2 recommended)"),
    ("CPU_AFFINITY_CONF", lambda v: bool(v) and v != "0", "1 or 2 (core binding on)"),
    ("PYTORCH_NPU_ALLOC_CONF", lambda v: "expandable_segments:true" in v.replace(" ", "").lower(),
     "expandable_segments:True"),
    ("ASCEND_GLOBAL_LOG_LEVEL", lambda v: v.strip() != "0", "1 (INFO) or higher, not 0 (DEBUG) in production"),
)


@check("env.recommended", title="Recommended NPU environment variables set", severity="warning", reference=faq.M18,
       needs=("session.env",),
       remedy=("export TASK_QUEUE_ENABLE=2 CPU_AFFINITY_CONF=2 PYTORCH_NPU_ALLOC_CONF=expandable_segments:True "
               "ASCEND_GLOBAL_LOG_LEVEL=1 (the FAQ's values; TASK_QUEUE_ENABLE=1 also serves, and log level 3 logs errors only) in the launch script or in ~/.bashrc "
               "above its interactive guard."))
def test_recommended(host, facts, verdict):
    env = effective_env(host, facts.get("session.env"))
    for name, ok, want in RECOMMENDED:
        value = env.get(name)
        if name == "ASCEND_GLOBAL_LOG_LEVEL" and value is None:
            verdict.passed(name, message=f"{name} unset (default 3, ERROR)")
        elif value is not None and ok(value):
            verdict.passed(name, message=f"{name}={value}")
        else:
            verdict.failed(name, observed=f"{name}={value}" if value is not None else f"{name} unset",
                           expected=f"{name}={want}")


@check("env.vllm_nz", title="VLLM_ASCEND_ENABLE_NZ=0 where vllm-ascend is installed (RL jobs)", severity="warning",
       reference=faq.R_NZ, needs=("python.stack", "session.env"),
       remedy="export VLLM_ASCEND_ENABLE_NZ=0 before the RL launch script (FRACTAL_NZ weights break RL precision).")
def test_vllm_nz(host, facts, verdict):
    stack = facts.get("python.stack")
    version = stack.version_of("vllm-ascend") or stack.version_of("vllm_ascend")
    if not version:
        verdict.skipped(message="vllm-ascend is not installed in the job's Python")
        return
    env = effective_env(host, facts.get("session.env"))
    value = env.get("VLLM_ASCEND_ENABLE_NZ")
    try:
        number = int(value) if value is not None else None  # what vllm-ascend's envs.py does with it
    except ValueError:
        verdict.failed(observed=f"vllm-ascend {version} with VLLM_ASCEND_ENABLE_NZ={value}: not a number, "
                                f"vllm-ascend reads it with int() and fails to start",
                       expected="VLLM_ASCEND_ENABLE_NZ=0 for RL training")
        return
    if number == 0:
        verdict.passed(message=f"VLLM_ASCEND_ENABLE_NZ={value} (vllm-ascend {version})")
    else:
        verdict.failed(observed=f"vllm-ascend {version} with VLLM_ASCEND_ENABLE_NZ="
                                f"{value if value is not None else '(unset: NZ on)'}",
                       expected="VLLM_ASCEND_ENABLE_NZ=0 for RL training")
