"""The checkpoint directory: present, writable (tested without writing), with room for a checkpoint."""

from preflight import faq
from preflight.check import check

DEFAULT_FREE_GB = 60  # MindSpeed-MM FAQ #13: about 60 GB per node per checkpoint


@check("storage.checkpoint_dir", title="Checkpoint directory exists, is writable and has room for a checkpoint",
       severity="warning", reference=faq.M13, needs=("storage.checkpoint",),
       remedy=("Create the checkpoint directory on fast shared storage, writable by the job's user, with at least "
               "one checkpoint's worth of free space (about 60 GB per node; checkpoint_free_gb in the inventory); "
               "saving ~60 GB must finish within 36 minutes, i.e. at least 28 MB/s per node."))
def test_checkpoint_dir(host, facts, verdict):
    if not host.vars.get("checkpoint_dir"):
        verdict.skipped(message="no checkpoint_dir in the inventory")
        return
    ck = facts.get("storage.checkpoint")
    path = ck.path or host.vars.get("checkpoint_dir")
    given = host.vars.get("checkpoint_free_gb")
    need_gb = float(DEFAULT_FREE_GB if given is None else given)  # 0 is a valid "no minimum"
    if not ck.exists:
        verdict.failed(path, observed=f"{path} does not exist", expected="an existing directory")
    elif not ck.is_dir:
        verdict.failed(path, observed=f"{path} is not a directory", expected="a directory")
    elif not ck.writable:
        verdict.failed(path, observed=f"{path} is not writable by the login user (test -w)",
                       expected="a directory the job can write")
    elif ck.avail_kb is None:
        verdict.error(path, message=f"{host.name}: df could not tell the free space of {path}",
                      remedy=f"Run df -P {path} on that node: a hung or stale network mount shows there (remount "
                             f"it), then re-run the preflight.")
    elif ck.avail_kb / 1024 / 1024 < need_gb:
        verdict.failed(path, observed=f"{path}: {ck.avail_kb / 1024 / 1024:.1f} GB free on {ck.mount or ck.filesystem}",
                       expected=f"at least {need_gb:g} GB free (checkpoint_free_gb)")
    else:
        verdict.passed(path, message=f"{path}: writable, {ck.avail_kb / 1024 / 1024:.1f} GB free on "
                                     f"{ck.mount or ck.filesystem}")
