"""Reaching the nodes at all."""

from preflight import faq
from preflight.check import check

_REMEDIES = {
    "hostkey": ("Verify the node's host key out of band (ssh-keyscan from a trusted path, or the console), "
                "then add or correct its known_hosts entry; use --accept-new-host-keys only for first contact."),
    "auth": ("Install the controller's public key in the node's authorized_keys for the inventory user, "
             "or set identity_file/user in the inventory to ones the node accepts."),
}


@check("cluster.reachable", title="Every inventory host answers over SSH", reference=faq.X_REACHABLE,
       remedy=("Check that the node is up and sshd listens on its address and port: "
               "ssh -o BatchMode=yes USER@ADDRESS true from the controller; fix the address, port, "
               "jump host or network path in the inventory or on the node."))
def test_reachable(host, gathered, verdict):
    if gathered is None:
        verdict.error(message=f"{host.name} was not gathered")
    elif not gathered.reachable:
        verdict.failed(observed=f"cannot log in ({gathered.error})",
                       expected=f"an SSH login to {host.address} within --connect-timeout",
                       remedy=_REMEDIES.get(gathered.error_kind))
    elif gathered.error_kind == "lost":
        verdict.failed(observed=f"logged in, then {gathered.error}",
                       expected="the connection to stay up for the whole probe")
    elif gathered.error:
        verdict.passed(message=f"{host.name} answered, but {gathered.error}")
    else:
        verdict.passed(message=f"{host.name} answered in {gathered.gather_s:.1f}s")
