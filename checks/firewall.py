"""Host firewalls on multi-node hosts."""

import ipaddress
from collections import Counter

from preflight import faq
from preflight.activeprobe import hccl_endpoint, node_addresses
from preflight.check import check
from preflight.parsers.versions import networks_of


@check("net.firewall", title="No firewall (firewalld, ufw, a blanket iptables or nftables drop) on multi-node hosts",
       severity="warning", reference=faq.R_FIREWALL,
       needs=("net.firewall", "ascend.files?", "net.interfaces?", "session.env?"),
       remedy=("Stop the firewall on training nodes (systemctl stop firewalld && systemctl disable firewalld; "
               "ufw disable; for nftables rules of your own: systemctl disable --now nftables, or remove the drop "
               "from the input chain named), or allow all TCP between the training nodes (e.g. firewall-cmd "
               "--permanent --zone=trusted --add-source=<nodes' subnet>): HCCL's host ports (60000-60031), "
               "the rendezvous port, and Ray's 6379, 8265, 10001, 10002-19999 plus its node-manager and "
               "object-manager ports, which are random unless ray start pins them (--node-manager-port, "
               "--object-manager-port). The NPUs' own RoCE ports (16666) do not pass the host firewall."))
def test_firewall(host, facts, cluster, verdict):
    if len(cluster.hosts) < 2:
        verdict.skipped(message="a single-node inventory: no traffic between nodes to block")
        return
    state = facts.get("net.firewall")
    used = _cluster_ports(host, facts, cluster)
    # `! --dport 22,6379,...` drops every port but those: no finding when the cluster's are all among them.
    found = [f for f in state.active if not (state.excepts_ports(f) and not _hits(state, f, used))]
    allowed = _peers_allowed(state, host, cluster) if found else None
    hits = _cluster_port_drops(state, host, facts, cluster, used)
    if allowed and not hits:
        verdict.passed(message=f"{'; '.join(found)}, but the nodes' network is accepted ahead of it "
                               f"(-s {', '.join(allowed)}: the addresses every other node sends from, its own and HCCL's, are there)")
    elif found and not allowed:
        verdict.failed(observed="; ".join(found), expected="no host firewall between the training nodes")
    elif state.unreadable and _in_container(facts):
        # A container without NET_ADMIN cannot read the rules, and they are the host's anyway.
        verdict.skipped(message=f"{host.name} is a container that cannot read the firewall "
                                f"({'; '.join(state.unreadable)}): the host's firewall is judged by a run "
                                f"against the host; the cross-node port checks test the paths either way")
    elif state.unreadable:
        # Reading iptables and ufw needs root: a login that cannot read them has not seen "no firewall".
        # A warning, as the check is: the cross-node port checks test the paths themselves, and an
        # error here made every non-root multi-node run NOT READY whatever its nodes.
        verdict.failed(observed=f"cannot read the firewall: {'; '.join(state.unreadable)}",
                       expected="the firewall rules read (iptables, ufw and nft need root); the cross-node port "
                                "checks test the paths between the nodes either way",
                       remedy="Run the preflight as root on the nodes (iptables -S INPUT, ufw status and nft list "
                              "ruleset need it), "
                              "or check the firewall there by hand: iptables -S INPUT; ufw status; "
                              "nft list ruleset.")
    else:
        seen = [f"firewalld {state.firewalld}" if state.firewalld else None,
                f"ufw {state.ufw}" if state.ufw else None,
                f"iptables INPUT policy {state.input_policy}" if state.input_policy else None,
                f"{state.nft_input_chains} nftables input chain(s) accepting" if state.nft_input_chains else None]
        tools = ", ".join(s for s in seen if s) or "no firewall tool"
        if hits:
            # No blanket firewall, but a rule for one of the ports the nodes connect to (it had
            # read "no active firewall" on the very node whose Ray port was dropped).
            verdict.failed(observed="; ".join(f"{rule} drops {what}" for rule, what in hits),
                           expected="no drop rule for the ports the other nodes connect to",
                           remedy="Remove the rule on this node (iptables -S INPUT --line-numbers, then iptables -D "
                                  "INPUT <n>; iptables-legacy for a rule it holds; for nftables: nft -a list ruleset, "
                                  "then nft delete rule <family> <table> <chain> handle <n>), or accept the training nodes' network ahead of it; "
                                  "persist the change where the rules are loaded from.")
        elif state.port_rules:
            verdict.passed(message=f"no blanket firewall ({tools}); {len(state.port_rules)} rule(s) dropping some "
                                   f"ports, none of the cluster's for the other nodes: {'; '.join(state.port_rules[:3])}")
        else:
            verdict.passed(message=f"no active firewall ({tools})")


def _cluster_ports(host, facts, cluster) -> list[tuple[str, int, int]]:
    """(name, first, last) of the TCP ports the other nodes connect to on this node: its HCCL host
    ports, Ray's when the inventory has a Ray head (GCS, dashboard and client on the head only), and
    MASTER_PORT on the node MASTER_ADDR names."""
    from preflight.activeprobe import (DEFAULT_RAY_PORTS, hccl_base_port, hccl_host_port_ranges, master_host,
                                       rendezvous_plan)
    from preflight.ifname import effective_env

    env = effective_env(host, facts.optional("session.env", {}))
    base = hccl_base_port(env)
    used = [(f"HCCL host port {low}" + (f"-{high}" if high != low else ""), low, high)
            for low, high in (hccl_host_port_ranges(env.get("HCCL_HOST_SOCKET_PORT_RANGE", "")) or [(base, base + 31)])]
    if cluster.with_role("head"):
        ray = {label: int(host.vars.get(key) or default) for key, label, default in DEFAULT_RAY_PORTS}
        first, last = ray.pop("worker range (first)"), ray.pop("worker range (last)")
        if "head" in host.roles:
            used += [(f"Ray {label} {port}", port, port) for label, port in ray.items()]
        used.append((f"Ray worker ports {first}-{last}", first, last))
    master = env.get("MASTER_PORT", "")
    # The master's port only: on the node MASTER_ADDR names (this node's value, else the one the
    # nodes share); on every node when no inventory host is named.
    address = env.get("MASTER_ADDR") or _shared_master_addr(cluster, rendezvous_plan)
    owner = master_host(cluster, address) if address else None
    if master.isdigit() and (owner is None or owner.name == host.name):
        used.append((f"MASTER_PORT {master}", int(master), int(master)))
    return used


def _hits(state, rule: str, used) -> str:
    """The cluster ports ``rule`` drops, named ("" for none)."""
    dropped = state.dropped_ports(rule)
    return ", ".join(name for name, low, high in used if any(a <= high and low <= b for a, b in dropped))


def _cluster_port_drops(state, host, facts, cluster, used) -> list[tuple[str, str]]:
    """(rule, which cluster ports it drops) for this node's port-specific drop rules, leaving out
    those the nodes' network is accepted ahead of and those for another destination."""
    if not state.port_rules:
        return []
    counts = Counter(a for _, f in cluster.reachable() for a in node_addresses(f))
    # The addresses the other nodes reach this one by (not loopback, nor docker0's shared one).
    reached = {ipaddress.ip_address(a) for a in _own_targets(host, facts, counts) if _ip(a)}
    accepts = list(state.port_rule_accepts) + [()] * (len(state.port_rules) - len(state.port_rule_accepts))
    hits = []
    for rule, accepted in zip(state.port_rules, accepts):
        if accepted and _peers_allowed(state, host, cluster, accepted):
            continue  # the nodes' network is accepted ahead of it: the drop is for everyone else
        destination = state.destinations(rule)
        if destination is not None and reached and not any(a in n for n in destination for a in reached
                                                           if a.version == n.version):
            continue  # to an address the other nodes do not use (a container's, docker0's, loopback)
        names = _hits(state, rule, used)
        if names:
            hits.append((rule, names))
    return hits


def _peers_allowed(state, host, cluster, sources=None) -> list[str] | None:
    """The accepted source networks (``sources``, else those ahead of every blanket drop), when
    they hold every address another reachable node sends from and iptables' drops are all there is
    (firewalld, ufw and nftables are not read rule by rule)."""
    if (state.firewalld or "").strip().lower() in ("running", "active") or state.ufw == "active" \
            or state.nft_findings or not (state.accepted_sources if sources is None else sources):
        return None
    networks = state.accepted_networks if sources is None else networks_of(sources)
    peers = [(other, facts) for other, facts in cluster.reachable() if other.name != host.name]
    if not peers or not networks:
        return None
    # An address several nodes share (docker0's 172.17.0.1 everywhere) is no node's own: a subnet
    # holding only those does not let the nodes in.
    counts = Counter(a for _, facts in cluster.reachable() for a in node_addresses(facts))
    families = {n.version for n in networks}  # iptables' rules are IPv4: an IPv6 source is not theirs to judge
    mine = [ipaddress.ip_address(a) for a in _own_targets(host, cluster.facts.get(host.name), counts)]
    for other, facts in peers:
        required = [a for a in _sources(other, facts, mine, counts) if a.version in families]
        if not required or not all(any(a in n for n in networks if a.version == n.version) for a in required):
            return None
    return [str(n) for n in networks]


def _shared_master_addr(cluster, rendezvous_plan):
    """The MASTER_ADDR most nodes share (or the job's), made once per run: every node with a port
    rule asks, and the plan reads every node's environment."""
    cached = getattr(cluster, "_master_addr", ())
    if cached == ():
        cached = getattr(rendezvous_plan(cluster), "address", None)
        try:
            cluster._master_addr = cached
        except AttributeError:
            pass
    return cached


def _own_targets(host, facts, counts) -> list[str]:
    """The addresses the other nodes reach this host by: its inventory address when it is on the
    host (not a NAT or elastic address in front of it), else its own addresses."""
    own = node_addresses(facts) if facts is not None else set()
    if _ip(host.address) and host.address in own:
        return [host.address]
    return [a for a in own if counts[a] == 1]


def _sources(peer, facts, targets, counts) -> list:
    """Every address the peer's traffic to this host may come from: the one it reaches this host
    from (its inventory address when it is on the peer, or its address on the subnet this host is
    on) and the one HCCL binds its sockets to.  Where none is on this host's subnet (routed), the
    source is not known: every address of its own then.  A pod network's address on the peer
    (cni0) is its own, but sends nothing here: accepting it lets no traffic in."""
    own = node_addresses(facts)
    found = set()
    if _ip(peer.address) and peer.address in own:
        found.add(ipaddress.ip_address(peer.address))
    else:
        for iface in facts.optional("net.interfaces", {}).values():
            for cidr in iface.addresses:
                try:
                    net = ipaddress.ip_interface(cidr)
                except ValueError:
                    continue
                if counts[str(net.ip)] == 1 and any(t in net.network for t in targets if t.version == net.version):
                    found.add(net.ip)
    if not found:
        found.update(ipaddress.ip_address(a) for a in own if counts[a] == 1)
    address = hccl_endpoint(peer, facts)[0]
    # HCCL's address falls back to the inventory address, which may be a NAT one in front of the node.
    if _ip(address) and counts[address] <= 1 and (address in own or address != peer.address):
        found.add(ipaddress.ip_address(address))
    return sorted(found, key=lambda a: (a.version, a))


def _ip(text) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def _in_container(facts) -> bool:
    files = facts.optional("ascend.files")
    return files is not None and files.container
