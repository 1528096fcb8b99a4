"""Ports that must be reachable between nodes (phase two: probes from node to node)."""

from preflight import faq
from preflight.activeprobe import ray_target
from preflight.check import check
from preflight.facts import FactUnavailable

RAY_REMEDY = ("Open the Ray head's GCS port to the workers: on the head, sudo systemctl stop firewalld (or add "
              "firewall-cmd --permanent --add-port=6379/tcp and reload), and check security groups or switch ACLs "
              "between the nodes; then test from a worker with nc -zv <head> 6379.")


@check("cluster.ray_ports", title="Ray head's GCS port reachable from every worker", reference=faq.R_RAY_JOIN,
       needs=("tcp.ray_gcs", "net.listening?", "tools.python3?"), remedy=RAY_REMEDY)
def test_ray_gcs(host, facts, cluster, verdict):
    heads = cluster.with_role("head")
    if not heads:
        verdict.skipped(message="no host in group head: no Ray head to reach")
        return
    if len(heads) > 1:
        verdict.error(message=f"{len(heads)} hosts in group head ({', '.join(h.name for h in heads)}): "
                              f"Ray has one head")
        return
    head, port = ray_target(cluster)
    if head.name == host.name:
        verdict.skipped(message=f"{host.name} is the Ray head")
        return
    head_facts = cluster.facts.get(head.name)
    if head_facts is None or not head_facts.reachable:
        verdict.error(message=f"not evaluated: the Ray head {head.name} is unreachable")
        return
    subject = f"{head.name}:{port}"
    try:
        probe = facts.get("tcp.ray_gcs")
    except FactUnavailable as exc:
        verdict.error(subject, message=f"{host.name} -> {subject}: {exc}")
        return
    path = f"{host.name} -> {head.name} ({probe.address}:{probe.port})"
    if probe.state == "open":
        how = "Ray is listening" if probe.listener == "existing" else "through a temporary listener"
        verdict.passed(subject, message=f"{path}: TCP connect succeeded ({how})")
    elif probe.state == "timeout":
        verdict.failed(subject, observed=f"{path}: no answer to a TCP connect within the timeout "
                                         f"(packets dropped: a firewall on the head or in between)",
                       expected="the connection accepted")
    elif probe.state == "refused" and probe.listener in ("existing", "temporary"):
        verdict.failed(subject, observed=f"{path}: connection refused although a listener is open on the head "
                                         f"(a firewall REJECT rule)",
                       expected="the connection accepted")
    elif probe.state == "refused":
        verdict.error(subject, message=f"{path}: connection refused and nothing listens on the head yet; no "
                                       f"temporary listener could be opened there (python3 missing or port "
                                       f"in use), so a firewall cannot be told from a head not started")
    else:
        verdict.failed(subject, observed=f"{path}: {probe.state} ({probe.detail})",
                       expected="the connection accepted")
