"""Tools the launch scripts rely on."""

from preflight import faq
from preflight.activeprobe import launcher_hosts
from preflight.check import check


def is_launcher(host, cluster) -> bool:
    """A marked launcher, or any host when the inventory marks none (pdsh is then needed anywhere)."""
    marked = launcher_hosts(cluster)
    return not marked or host.name in {h.name for h in marked}


@check("tools.pdsh", title="pdsh installed on the nodes that launch multi-node jobs", reference=faq.M4,
       needs=("tools.pdsh",),
       remedy="Install pdsh on the launcher node: apt install pdsh (Debian/Ubuntu) or yum install pdsh (openEuler/CentOS).")
def test_pdsh(host, facts, cluster, verdict):
    if len(cluster.hosts) < 2:
        verdict.skipped(message="a single-node inventory: no multi-node launch")
        return
    if not is_launcher(host, cluster):
        verdict.skipped(message=f"{host.name} does not launch jobs (not in group head, launcher: false)")
        return
    path = facts.get("tools.pdsh")
    if path:
        verdict.passed(message=f"pdsh at {path}")
    else:
        verdict.failed(observed="pdsh not found on PATH in a non-interactive SSH session",
                       expected="pdsh installed (multi-node launch scripts hang silently without it)")
