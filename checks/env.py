"""The environment a job gets in a non-interactive SSH session (what pdsh and launchers use),
overlaid with the ``env`` the inventory declares for the job."""

from collections import defaultdict

from preflight import faq
from preflight.check import check
from preflight.facts import FactUnavailable
from preflight.hostlist import fold
from preflight.ifname import VARIABLES, describe, effective_env, select

IFNAME_REMEDY = ("List the node's interfaces (ip -br addr) and set the variable to the NIC that carries "
                 "the cluster network, with the same name on every node: export HCCL_SOCKET_IFNAME=<nic> "
                 "GLOO_SOCKET_IFNAME=<nic> TP_SOCKET_IFNAME=<nic> (in the launch script or ~/.bashrc, before "
                 "its interactive guard); bring the interface up and give it an address if it has none.")


@check("env.socket_ifname", title="*_SOCKET_IFNAME name an interface that exists, is up and has an address",
       reference=faq.M12, needs=("session.env", "net.interfaces"), remedy=IFNAME_REMEDY)
def test_socket_ifname(host, facts, verdict):
    env = effective_env(host, facts.get("session.env"))
    interfaces = facts.get("net.interfaces")
    present = [v for v in VARIABLES if env.get(v)]
    if not present:
        verdict.skipped(message="no *_SOCKET_IFNAME variable set (the libraries pick an interface themselves)")
        return
    for variable in present:
        sel = select(variable, env[variable], interfaces)
        shown = f"{variable}={sel.value}"
        if sel.missing:
            verdict.failed(variable, observed=f"{shown} names {', '.join(sel.missing)}, which does not exist "
                                              f"(interfaces: {describe(interfaces)})",
                           expected="an existing interface")
        elif not sel.matched:
            verdict.failed(variable, observed=f"{shown} matches no interface (interfaces: {describe(interfaces)})",
                           expected="at least one matching interface")
        elif sel.exact and len(sel.usable) < len(sel.matched):
            bad = [n for n in sel.matched if n not in sel.usable]
            verdict.failed(variable, observed=f"{shown}: {', '.join(bad)} is down or has no address "
                                              f"({describe({n: interfaces[n] for n in bad})})",
                           expected="every named interface up with an address")
        elif not sel.usable:
            verdict.failed(variable, observed=f"{shown} matches {', '.join(sel.matched)}, none of them up with "
                                              f"an address ({describe({n: interfaces[n] for n in sel.matched})})",
                           expected="a matching interface that is up with an address")
        else:
            verdict.passed(variable, message=f"{shown} selects {sel.chosen} ({describe({sel.chosen: interfaces[sel.chosen]})})")


@check("cluster.ifname_agree", title="The socket interface is the same on every node", scope="cluster",
       reference=faq.R_CROSS_NODE_IFNAME, needs=("session.env", "net.interfaces"), remedy=IFNAME_REMEDY)
def test_ifname_agree(cluster, verdict):
    values: dict[str, dict[str, str | None]] = defaultdict(dict)  # variable -> host -> chosen interface
    unreadable = []
    unresolved: dict[str, list[str]] = defaultdict(list)
    for host, facts in cluster.reachable():
        try:
            env = effective_env(host, facts.get("session.env"))
            interfaces = facts.get("net.interfaces")
        except FactUnavailable:
            unreadable.append(host.name)
            continue
        for variable in VARIABLES:
            if env.get(variable):
                sel = select(variable, env[variable], interfaces)
                if sel.chosen:
                    values[variable][host.name] = sel.chosen
                else:  # selects nothing on this node: env.socket_ifname reports it there
                    unresolved[variable].append(host.name)
            else:
                values[variable][host.name] = None
    evaluated = False
    for variable in VARIABLES:
        per_host = values.get(variable, {})
        if not any(per_host.values()):
            continue
        evaluated = True
        groups = defaultdict(list)
        for name, chosen in per_host.items():
            groups[chosen or "unset"].append(name)
        skipped = (f" (selects no interface on {fold(unresolved[variable])}: see env.socket_ifname)"
                   if unresolved[variable] else "")
        if len(groups) == 1:
            verdict.passed(variable, message=f"{variable} selects {next(iter(groups))} on all "
                                             f"{len(per_host)} nodes{skipped}")
            continue
        majority = max(groups, key=lambda k: (len(groups[k]), k != "unset"))
        odd = sorted(n for k, names in groups.items() if k != majority for n in names)
        described = "; ".join(f"{fold(names)}: {k}" for k, names in groups.items() if k != majority)
        verdict.failed(variable, outliers=tuple(odd), where=variable,
                       observed=f"{described}, while {fold(groups[majority])} use {majority}{skipped}",
                       expected="the same interface name on every node")
    if not evaluated:
        verdict.skipped(message="no *_SOCKET_IFNAME variable set on any node")
    if unreadable:
        verdict.error(message=f"environment or interfaces unreadable on {fold(unreadable)}")
