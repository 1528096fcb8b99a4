"""Host firewalls on multi-node hosts."""

from preflight import faq
from preflight.check import check


@check("net.firewall", title="No firewall (firewalld, ufw, a blanket iptables or nftables drop) on multi-node hosts",
       severity="warning", reference=faq.R_FIREWALL, needs=("net.firewall", "ascend.files?"),
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
    found = state.active
    if found:
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
        verdict.passed(message="no active firewall (" + (", ".join(s for s in seen if s) or "no firewall tool") + ")")


def _in_container(facts) -> bool:
    files = facts.optional("ascend.files")
    return files is not None and files.container
