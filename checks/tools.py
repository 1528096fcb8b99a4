"""Tools the launch scripts rely on."""

from preflight import faq
from preflight.activeprobe import launcher_hosts
from preflight.check import check
from preflight.ifname import effective_env
from preflight.parsers.system import RCMD_DEFAULT_FILE


def is_launcher(host, cluster) -> bool:
    """A marked launcher, or any host when the inventory marks none (pdsh is then needed anywhere)."""
    marked = launcher_hosts(cluster)
    return not marked or host.name in {h.name for h in marked}


PDSH_INSTALL = ("Install pdsh on the launcher node: apt install pdsh (Debian/Ubuntu) or yum install pdsh "
                "pdsh-rcmd-ssh (openEuler/CentOS).")


@check("tools.pdsh", title="pdsh installed on the nodes that launch multi-node jobs", reference=faq.M4,
       needs=("tools.pdsh", "session.env?"), remedy=PDSH_INSTALL)
def test_pdsh(host, facts, cluster, verdict):
    if len(cluster.hosts) < 2:
        verdict.skipped(message="a single-node inventory: no multi-node launch")
        return
    if not is_launcher(host, cluster):
        verdict.skipped(message=f"{host.name} does not launch jobs (not in group head, launcher: false)")
        return
    pdsh = facts.get("tools.pdsh")
    if pdsh is None:
        verdict.failed(observed="pdsh not found on PATH in a non-interactive SSH session",
                       expected="pdsh installed (multi-node launch scripts hang silently without it)")
        return
    if pdsh.rcmd is None:
        verdict.passed(message=f"pdsh at {pdsh.path} (its rcmd modules not listed by pdsh -V)")
        return
    modules = ",".join(pdsh.rcmd) or "none"
    if "ssh" not in pdsh.rcmd:
        # yum's pdsh loads rsh and exec only: `pdsh -R ssh` then fails at once.
        verdict.failed(observed=f"pdsh at {pdsh.path} has no ssh rcmd module (pdsh -V: rcmd modules {modules})",
                       expected="pdsh able to log in with ssh, as launch scripts do (pdsh -R ssh, PDSH_RCMD_TYPE=ssh)",
                       remedy="Install pdsh's ssh module on the launcher node: yum install pdsh-rcmd-ssh "
                              "(openEuler/CentOS; Debian's and Ubuntu's pdsh has it built in), then check that "
                              "`pdsh -V` lists ssh.")
        return
    env = effective_env(host, facts.optional("session.env") or {})
    chosen = env.get("PDSH_RCMD_TYPE")
    used = chosen or pdsh.site_default
    if used != "ssh":
        if chosen:
            why = f"PDSH_RCMD_TYPE={chosen}"
        elif pdsh.default_file:
            why = f"{RCMD_DEFAULT_FILE} names {used}"
        else:
            why = f"its default rcmd module is {used or 'none'}"
        verdict.failed(observed=f"pdsh at {pdsh.path} connects with {used or 'no module'} unless told otherwise "
                                f"({why}; rcmd modules {modules})",
                       expected="ssh, which the nodes accept (rsh's port 514 is closed on most clusters)",
                       severity="warning",
                       remedy="Set PDSH_RCMD_TYPE=ssh in the launcher's environment (~/.bashrc, above its "
                              f"interactive guard; on Debian and Ubuntu `echo ssh > {RCMD_DEFAULT_FILE}` does it "
                              "for every user), or pass `-R ssh` to pdsh in the launch script. DeepSpeed's "
                              "launcher sets PDSH_RCMD_TYPE=ssh itself.")
        return
    verdict.passed(message=f"pdsh at {pdsh.path}, connecting with ssh")
