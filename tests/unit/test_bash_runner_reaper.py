"""The bash runner (nodes without python3) kills what a command left running in its process group
when the command ends (tested in test_probe.py), but only in a group that GNU timeout made for it."""
from __future__ import annotations

import secrets
import subprocess

from preflight.probe import ProbeCommand, build_script, new_nonce, parse_probe_output

from .test_probe import _left_running


def test_the_reaper_leaves_a_group_that_is_not_timeouts_own(tmp_path):
    """busybox's timeout makes no process group of its own: the command's group is then the whole
    probe's, and the reaper must not touch it (the probe would kill itself)."""
    fake = tmp_path / "timeout"  # runs the command as its child, in the caller's group, as busybox's does
    fake.write_text('#!/bin/bash\nwhile [[ $1 == -* ]]; do shift 2; done\nshift\n"$@"\n')
    fake.chmod(0o755)
    m = f"100.{secrets.randbelow(10**9):09d}"
    try:
        nonce = new_nonce()
        script = build_script([ProbeCommand("bg", f"sleep {m} >/dev/null 2>&1 & echo hi"),
                               ProbeCommand("after", "echo a")], nonce, 2, runner="bash")
        # A session of its own, as sshd gives the probe's shell.
        proc = subprocess.run(["bash", "-c", f"PATH={tmp_path}:$PATH; " + script], capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=60, start_new_session=True)
        probe = parse_probe_output(proc.stdout, nonce)
        assert probe.complete and probe.outputs["after"].stdout == "a\n"
        assert probe.outputs["bg"].stdout == "hi\n" and probe.outputs["bg"].rc == 0
        assert _left_running(m, seconds=0)  # not reaped: the group was not the command's alone
    finally:
        subprocess.run(["pkill", "-f", f"sleep {m}"])
