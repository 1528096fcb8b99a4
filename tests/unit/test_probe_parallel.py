"""The probe runs independent tool groups at the same time on the node (issue 6), without
temp files, without interleaving records, and with the hang breaker intact per tool."""
from __future__ import annotations

import subprocess

import pytest

from preflight.probe import ProbeCommand, build_script, command_groups, new_nonce, parse_probe_output

from .test_probe import _can_unshare_mount


def test_groups_one_per_repeated_tool_and_the_rest_first():
    cmds = [ProbeCommand("env", "env"), ProbeCommand("smi", "x", tool="npu-smi"),
            ProbeCommand("link", "y", tool="hccn", per_device=True), ProbeCommand("ip", "ip a", tool="ip"),
            ProbeCommand("board", "z", tool="npu-smi")]
    assert [[c.name for c in g] for g in command_groups(cmds)] == [["env", "ip"], ["smi", "board"], ["link"]]
    assert command_groups([]) == []


def _run_with_dev(script: str, with_fd: bool):
    fd = "ln -s /proc/self/fd fd && " if with_fd else ""
    setup = ("mount -t tmpfs none /dev && cd /dev && touch null davinci0 davinci1 davinci2 && " + fd +
             'cd / && exec bash -c "$0"')
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", setup, script],
                          capture_output=True, timeout=60)


@pytest.mark.skipif(not _can_unshare_mount(), reason="needs root and unshare -m for a private /dev")
@pytest.mark.parametrize("runner,with_fd", [("bash", True), ("bash", False), ("auto", True), ("auto", False)],
                         ids=["bash-parallel", "bash-no-dev-fd-sequential", "python-parallel", "python-no-dev-fd"])
def test_groups_run_concurrently_and_the_breaker_holds(runner, with_fd):
    nonce = new_nonce()
    big = "yes 0123456789abcdef | head -c 300000"  # bigger than a pipe buffer
    script = build_script([
        # Each command notes on stderr when it began (and "first" when it ended): order, not time taken,
        # tells side by side from one after another, however slow the machine.
        ProbeCommand("first", 'echo "$EPOCHREALTIME" >&2; sleep 1; echo first; echo "$EPOCHREALTIME" >&2'),
        ProbeCommand("a", 'echo "$EPOCHREALTIME" >&2; sleep 1; echo "a=$PF_DEV"', tool="ta", per_device=True),
        ProbeCommand("hang", 'echo "$EPOCHREALTIME" >&2; [ "$PF_DEV" = 1 ] && sleep 30; echo "h=$PF_DEV"', tool="th",
                     per_device=True),
        ProbeCommand("big", big, tool="tb"), ProbeCommand("big2", big, tool="tb"),
    ], nonce, timeout=2, runner=runner)
    proc = _run_with_dev(script, with_fd)
    assert proc.returncode == 0, proc.stderr
    probe = parse_probe_output(proc.stdout, nonce)
    assert probe.complete
    assert probe.outputs["first"].stdout == "first\n"
    assert [probe.outputs[f"a/{d}"].stdout for d in (0, 1, 2)] == ["a=0\n", "a=1\n", "a=2\n"]
    assert probe.outputs["hang/0"].stdout == "h=0\n" and probe.outputs["hang/1"].rc == 124
    if runner == "bash":
        assert "timed out earlier" in probe.outputs["hang/2"].skipped  # one hung tool, one timeout
    else:  # NPUs side by side after the first answered: the hang costs its own NPU only
        assert probe.outputs["hang/2"].stdout == "h=2\n"
    assert len(probe.outputs["big"].stdout) == 300000 and probe.outputs["big"].stdout == probe.outputs["big2"].stdout
    stamps = {name: [float(t) for t in out.stderr.split()] for name, out in probe.outputs.items() if out.stderr}
    first_ended = stamps["first"][1]
    others_began = [stamps["a/0"][0], stamps["hang/0"][0]]
    if with_fd or runner == "auto":  # the python runner needs no /dev/fd for its threads
        assert all(t < first_ended for t in others_began), (stamps, "the tool groups waited for the first")
    else:
        assert all(t >= first_ended for t in others_began), (stamps, "without /dev/fd the groups run after")
