"""Whether a host could be logged in to: the judgement of the ``cluster.reachable`` check.

The run makes the same judgement itself for a host it could not reach when that check was not
selected (``-k versions``): the selected checks then leave the host out or skip it, and a run that
never looked at a node must not say READY.
"""

from __future__ import annotations

from . import faq
from .check import CheckInfo, Verdict
from .results import Result

CHECK_ID = "cluster.reachable"
NOT_REPLAYED = "not-in-facts-file"  # HostFacts.error_kind of an inventory host a --facts-in file lacks

# The keywords of @check for cluster.reachable (checks/cluster.py), kept here for the run's use.
DECLARATION = dict(
    title="Every inventory host answers over SSH", reference=faq.X_REACHABLE,
    remedy=("Check that the node is up and sshd listens on its address and port: "
            "ssh -o BatchMode=yes USER@ADDRESS true from the controller; fix the address, port, "
            "jump host or network path in the inventory or on the node."))

_REMEDIES = {
    "hostkey": ("Verify the node's host key out of band (ssh-keyscan from a trusted path, or the console), "
                "then add or correct its known_hosts entry; use --accept-new-host-keys only for first contact."),
    "auth": ("Install the controller's public key in the node's authorized_keys for the inventory user, "
             "or set identity_file/user in the inventory to ones the node accepts."),
}


def judge(host, gathered, verdict: Verdict, note: str = "") -> None:
    """``gathered`` is the host's HostFacts (None: never gathered); ``note`` ends a failure's
    observation (why the run, not the check, recorded it)."""
    if gathered is None:
        verdict.error(message=f"{host.name} was not gathered")
    elif not gathered.reachable and gathered.error_kind == NOT_REPLAYED:
        # A replay (--facts-in with --inventory): nothing was logged in to, so sshd is not the cause.
        verdict.failed(observed=f"no facts: {gathered.error}{note}",  # no host name: hosts lacking alike fold
                       expected="the host's facts in the file given with --facts-in",
                       remedy=f"Capture {host.name}'s facts too (a run with --facts-out that reaches it), or give "
                              f"--facts-in with the inventory the file was captured from (or with no --inventory: "
                              f"the file holds its own).")
    elif not gathered.reachable:
        verdict.failed(observed=f"cannot log in ({gathered.error}){note}",
                       expected=f"an SSH login to {host.address}"
                                + (f" port {host.port}" if host.port and int(host.port) != 22 else "")
                                + " within --connect-timeout",
                       remedy=_REMEDIES.get(gathered.error_kind) or _login_remedy(host))
    elif gathered.error_kind == "lost":
        verdict.failed(observed=f"logged in, then {gathered.error}{note}",
                       expected="the connection to stay up for the whole probe")
    elif gathered.error:
        verdict.passed(message=f"{host.name} answered, but {gathered.error}")
    else:
        verdict.passed(message=f"{host.name} answered in {gathered.gather_s:.1f}s")


def _login_remedy(host) -> str | None:
    """The check's remedy with this host's own login in it, to paste as it is."""
    if host.connection == "local":
        return None
    login = f"{host.user + '@' if host.user else ''}{host.address}"
    port = f" -p {host.port}" if host.port and int(host.port) != 22 else ""
    jump = f" -J {host.jump_host}" if host.jump_host else ""
    return (f"Check that {host.name} is up and its sshd listens: ssh -o BatchMode=yes{port}{jump} {login} true from "
            f"the controller; fix the address, port, jump host or network path in the inventory or on the node.")


def unjudged_failures(hosts, facts: dict, results) -> list[Result]:
    """cluster.reachable's failures for the hosts it did not judge (it was not selected): one
    per host that could not be reached or whose connection was lost."""
    judged = {r.host for r in results if r.check == CHECK_ID}
    info = CheckInfo(id=CHECK_ID, severity="error", **DECLARATION)
    out: list[Result] = []
    for host in hosts:
        gathered = facts.get(host.name)
        if host.name in judged or gathered is None or (gathered.reachable and gathered.error_kind != "lost"):
            continue
        verdict = Verdict(info, host.name)
        judge(host, gathered, verdict, note=f"; recorded by the run, as {CHECK_ID} was not selected")
        out.extend(verdict.results)
    return out
