"""Tools the launch scripts rely on."""

from preflight import faq
from preflight.activeprobe import launcher_hosts
from preflight.check import check
from preflight.facts import FactUnavailable
from preflight.ifname import effective_env
from preflight.parsers.system import RCMD_DEFAULT_FILE


def is_launcher(host, cluster) -> bool:
    """A marked launcher, or any host when the inventory marks none (pdsh is then needed anywhere)
    but one with `launcher: false`. A head is a marking even with `launcher: false`: with no other
    launcher, no host launches with pdsh."""
    if any("head" in h.roles or h.vars.get("launcher") is True for h in cluster.hosts):
        return host.name in {h.name for h in launcher_hosts(cluster)}
    return host.vars.get("launcher") is not False


PDSH_INSTALL = ("Install pdsh on the launcher node: apt install pdsh (Debian/Ubuntu) or yum install pdsh "
                "pdsh-rcmd-ssh (openEuler/CentOS).")


@check("tools.pdsh", title="pdsh installed on the nodes that launch multi-node jobs", reference=faq.M4,
       needs=("tools.pdsh?", "session.env?"), remedy=PDSH_INSTALL)
def test_pdsh(host, facts, cluster, verdict):
    if len(cluster.hosts) < 2:
        verdict.skipped(message="a single-node inventory: no multi-node launch")
        return
    if not is_launcher(host, cluster):
        why = "launcher: false" if host.vars.get("launcher") is False else "not in group head, nor launcher: true"
        verdict.skipped(message=f"{host.name} does not launch jobs ({why})")
        return
    try:  # read after the skips: a worker's hung `pdsh -V` must not block a launch it plays no part in
        pdsh = facts.get("tools.pdsh")
    except FactUnavailable as exc:
        verdict.error(message=f"not evaluated on {host.name}: {exc}")
        return
    if pdsh is None:
        verdict.failed(observed="pdsh not found on PATH in a non-interactive SSH session",
                       expected="pdsh installed (multi-node launch scripts hang silently without it)")
        return
    if pdsh.broken:
        verdict.failed(observed=f"pdsh at {pdsh.path} does not start: pdsh -V says: {pdsh.broken}",
                       expected="pdsh -V printing its version and rcmd modules",
                       remedy="Reinstall pdsh on the launcher node (its modules, under /usr/lib*/pdsh, are missing "
                              "or unreadable), with its ssh module: apt install --reinstall pdsh, or yum reinstall "
                              "pdsh pdsh-rcmd-ssh.")
        return
    if pdsh.rcmd is None:
        verdict.passed(message=f"pdsh at {pdsh.path} (its rcmd modules not listed by pdsh -V)")
        return
    modules = ",".join(pdsh.rcmd) or "none"
    if "ssh" not in pdsh.rcmd:
        # yum's pdsh loads rsh and exec only: `pdsh -R ssh` (and DeepSpeed, which sets
        # PDSH_RCMD_TYPE=ssh) then fails at once.
        verdict.failed(observed=f"pdsh at {pdsh.path} has no ssh rcmd module (pdsh -V: rcmd modules {modules})",
                       expected="pdsh able to log in with ssh, as launch scripts do (pdsh -R ssh, PDSH_RCMD_TYPE=ssh)",
                       remedy="Install pdsh's ssh module on the launcher node: yum install pdsh-rcmd-ssh "
                              "(openEuler/CentOS; Debian's and Ubuntu's pdsh has it built in), then check that "
                              "`pdsh -V` lists ssh.")
        return
    # Launchers choose ssh themselves (DeepSpeed sets PDSH_RCMD_TYPE=ssh); what a plain `pdsh -w`
    # would use is said, not judged.
    env = effective_env(host, facts.optional("session.env") or {})
    chosen = env.get("PDSH_RCMD_TYPE")
    used = chosen or pdsh.site_default
    how = (f"PDSH_RCMD_TYPE={chosen}" if chosen else f"{RCMD_DEFAULT_FILE}" if pdsh.default_file
           else "its default")
    plain = f"; a plain `pdsh -w` uses {used or 'no module'} ({how}): pass -R ssh or set PDSH_RCMD_TYPE=ssh" \
        if used != "ssh" else f"; a plain `pdsh -w` uses ssh ({how})"
    verdict.passed(message=f"pdsh at {pdsh.path} with its ssh module (rcmd modules {modules}){plain}")
