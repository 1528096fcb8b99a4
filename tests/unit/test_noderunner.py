"""preflight.noderunner: the probe's python runner on a node.  Its records are covered with the
bash runner's in test_probe.py; here: that it is the one that runs, that the script falls back
to bash when it cannot, and its process handling (codes, groups killed, nothing left behind)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from preflight import noderunner
from preflight.probe import ProbeCommand, build_script, new_nonce, parse_probe_output

from .test_local_transport import marker, processes_with
from .test_probe import _can_unshare_mount

BASH = "/bin/bash"


def _probe(script: str, **kw):
    proc = subprocess.run(["bash", "-c", script], capture_output=True, timeout=60, stdin=subprocess.DEVNULL, **kw)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_the_python_runner_runs_the_commands_when_the_node_has_python3():
    nonce = new_nonce()
    cmds = [ProbeCommand("parent", "cat /proc/$PPID/comm")]
    auto = parse_probe_output(_probe(build_script(cmds, nonce, 5)).stdout, nonce)
    bash = parse_probe_output(_probe(build_script(cmds, nonce, 5, runner="bash")).stdout, nonce)
    assert auto.complete and bash.complete
    assert auto.outputs["parent"].stdout.startswith("python3")
    assert bash.outputs["parent"].stdout == "timeout\n"  # GNU timeout starts each command there


def test_the_python_runner_writes_no_bytecode_on_the_node():
    """-I makes Python ignore PYTHONDONTWRITEBYTECODE: without -B, a node whose standard library has no
    caches (python:* images delete them) got __pycache__ files from the probe."""
    nonce = new_nonce()
    cmds = [ProbeCommand("parent", "tr '\\0' ' ' < /proc/$PPID/cmdline")]
    out = parse_probe_output(_probe(build_script(cmds, nonce, 5)).stdout, nonce).outputs["parent"].stdout
    flags = out.split(" -c ")[0].split()[1:]
    assert "-B" in flags and "-I" in flags, out[:200]

    core = parse_probe_output(_probe(build_script([ProbeCommand("core", "ulimit -c")], nonce, 5)).stdout, nonce)
    assert core.outputs["core"].stdout == "0\n"  # a crashing tool leaves no core file on the node


def test_unknown_runner_is_refused():
    with pytest.raises(ValueError, match="runner"):
        build_script([], new_nonce(), 5, runner="perl")


@pytest.mark.skipif(not _can_unshare_mount(), reason="needs root and unshare -m")
@pytest.mark.parametrize("broken", ["/bin/false", "/nonexistent"], ids=["runner-fails", "no-python3"])
def test_a_node_whose_python3_fails_or_is_missing_gets_the_bash_runner(broken):
    nonce = new_nonce()
    script = build_script([ProbeCommand("a", "echo a; cat /proc/$PPID/comm"),
                           ProbeCommand("d", 'echo "d$PF_DEV"', tool="t", per_device=True)], nonce, 5)
    # A private mount namespace where python3 is /bin/false (or not there at all) and off PATH.
    hide = f"mount --bind {'/bin/false' if broken == '/bin/false' else '/dev/null'} /usr/bin/python3"
    setup = f'{hide} && PATH=/usr/bin:/bin exec /bin/bash -c "$0"'
    if not os.path.exists("/usr/bin/python3"):
        pytest.skip("this machine has no /usr/bin/python3 to hide")
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", setup, script],
                          capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    probe = parse_probe_output(proc.stdout, nonce)
    assert probe.complete
    assert probe.outputs["a"].stdout == "a\ntimeout\n" and probe.outputs["a"].rc == 0


# ------------------------------------------------------------------------- run_command


def test_stdout_stderr_and_exit_code():
    out, err, rc, ms = noderunner.run_command(BASH, "echo out; echo err >&2; exit 7", dict(os.environ), 5, 100)
    assert (out, err, rc) == (b"out\n", b"err\n", 7) and 0 <= ms < 5000


def test_streams_are_cut_at_the_read_size_and_the_writer_stops():
    out, err, rc, _ = noderunner.run_command(BASH, "yes | head -c 10000000; yes >&2", dict(os.environ), 10, 1000)
    assert out == b"y\n" * 500 and err == b"y\n" * 500
    assert rc == 141  # SIGPIPE, as with `| head -c`


def test_timeout_kills_the_whole_process_group_with_124():
    t0 = time.monotonic()
    m = marker()
    out, _, rc, ms = noderunner.run_command(BASH, f"sleep {m} & sleep {m}; echo never", dict(os.environ), 1, 100)
    assert rc == 124 and out == b"" and 900 <= ms < 30000  # bounds far below the 100 s sleep: a stalled VM
    assert time.monotonic() - t0 < 30
    assert _gone(m)


def test_a_command_that_ignores_sigterm_is_killed_with_137():
    m = marker()
    out, _, rc, ms = noderunner.run_command(BASH, f"trap '' TERM; echo started; sleep {m}", dict(os.environ), 1, 100)
    assert rc == 137 and out == b"started\n" and ms >= 2900
    assert _gone(m)


def test_a_command_that_cannot_die_does_not_hold_the_runner(monkeypatch):
    """A command in uninterruptible sleep (an ioctl into a wedged driver, a hung mount) survives
    SIGKILL: the runner waits a bounded time for it, reports it killed (137, so its tool is
    skipped from then on) and goes on; it waited forever, and its group's records with it."""
    real_kill = noderunner._kill_group
    survivors = []

    def kill_group(pid, sig):  # SIGKILL does not take: the process stays, as one in D state would
        if sig == signal.SIGKILL:
            survivors.append(pid)
        else:
            real_kill(pid, sig)

    monkeypatch.setattr(noderunner, "_kill_group", kill_group)
    monkeypatch.setattr(noderunner, "REAP_SECONDS", 1)
    reaps = []
    real_reap = noderunner._reap
    monkeypatch.setattr(noderunner, "_reap", lambda proc: (reaps.append(proc.pid), real_reap(proc)))
    m = marker()
    t0 = time.monotonic()
    try:
        _, _, rc, ms = noderunner.run_command(BASH, f"trap '' TERM; sleep {m}", dict(os.environ), 1, 100)
        took = time.monotonic() - t0
    finally:
        for pid in set(survivors):
            real_kill(pid, signal.SIGKILL)
    assert rc == 137 and ms >= 2900 and survivors
    assert len(reaps) == 1  # waited for once, not again on the way out
    assert took < 20  # the sleep is 100 s: bounded by the timeout, SIGTERM's grace and two short reaps
    assert _gone(m)


def test_killed_by_a_signal_reads_as_the_shell_would():
    assert noderunner.run_command(BASH, "kill -9 $$", dict(os.environ), 5, 100)[2] == 137


def test_background_child_holding_the_pipe_is_bounded_and_removed():
    t0 = time.monotonic()
    m = marker()
    out, _, rc, _ = noderunner.run_command(BASH, f"sleep {m} & echo hi", dict(os.environ), 1, 100)
    assert out == b"hi\n" and rc == 0
    assert time.monotonic() - t0 < 30  # not the child's 100 s
    assert _gone(m)


@pytest.mark.parametrize("start", ["", "setsid "])
def test_a_command_that_exits_leaving_a_child_on_its_pipe_is_done_when_it_exits(start):
    """A tool that prints, starts a helper in the background and exits 0 cost its whole timeout on
    every call (one per NPU: past the host's deadline, every hccn_tool result lost).  Its own output
    is kept, whoever holds the pipe: its group is killed, an escaped (setsid) child is not waited for."""
    m = marker()
    t0 = time.monotonic()
    out, _, rc, _ = noderunner.run_command(
        BASH, f"head -c 300000 /dev/zero | tr '\\0' x; {start}sleep {m} & exit 3", dict(os.environ), 60, 1 << 20)
    took = time.monotonic() - t0
    assert out == b"x" * 300000 and rc == 3
    assert took < 30, took  # the command's own time, not its 60 s timeout
    if start:
        subprocess.run(["pkill", "-f", f"sleep {m}"])
    assert _gone(m)


def test_a_helper_finishing_the_commands_output_after_it_exits_is_read():
    """bash does not wait for a process substitution: killing the group as bash exited lost its line."""
    out, _, rc, _ = noderunner.run_command(BASH, "echo direct; echo via-helper > >(sleep 0.2; cat)",
                                           dict(os.environ), 10, 1000)
    assert (out, rc) == (b"direct\nvia-helper\n", 0)


def test_no_stdin():
    out, _, rc, _ = noderunner.run_command(BASH, "cat; echo done", dict(os.environ), 5, 100)
    assert (out, rc) == (b"done\n", 0)


def test_bash_that_cannot_start_is_a_record_not_a_crash():
    out, err, rc, _ = noderunner.run_command("/nonexistent/bash", "true", dict(os.environ), 5, 100)
    assert rc == 127 and b"cannot start" in err


# ------------------------------------------------------------------------- simple commands

TOOL = {"PF_HCCN": "/usr/local/Ascend/driver/tools/hccn_tool", "PF_DEV": "3"}


@pytest.mark.parametrize("command, argv", [
    ('"$PF_HCCN" -i "$PF_DEV" -link -g', ["/usr/local/Ascend/driver/tools/hccn_tool", "-i", "3", "-link", "-g"]),
    ('"$PF_HCCN" -i "$PF_DEV" -ping -g address 10.0.0.2',
     ["/usr/local/Ascend/driver/tools/hccn_tool", "-i", "3", "-ping", "-g", "address", "10.0.0.2"]),
    ('/bin/true "$PF_UNSET"', ["/bin/true", ""]),  # an unset quoted value is an empty word, as in bash
])
def test_a_simple_command_is_the_argv_bash_would_exec(command, argv):
    assert noderunner.simple_argv(command, TOOL) == argv


@pytest.mark.parametrize("command", [
    "env -0",                        # found on PATH: could be a builtin or an exported function
    '"$PF_NPUSMI" info',             # unset: the empty name is not an absolute path
    "/bin/echo $PF_DEV",             # unquoted: bash would split it
    "/bin/echo *",                   # a glob
    "/bin/echo a  b",                # two spaces: an empty word here, none in bash
    "A=1 /bin/env",                  # an assignment
    "/bin/echo a; /bin/echo b",      # a list
    "/bin/echo a | /bin/cat",        # a pipeline
    "/bin/echo ~",                   # tilde expansion
    "/bin/echo 'a'",                 # quotes other than "$PF_*"
    '/bin/echo "$HOME"',             # only the probe's own values
    "/bin/echo a\n/bin/echo b",
])
def test_anything_else_goes_to_bash(command):
    assert noderunner.simple_argv(command, dict(TOOL, PF_NPUSMI="")) is None


def test_a_simple_command_starts_without_bash_and_gets_the_same_answer(tmp_path):
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\necho \"$1 $2\"; echo $PPID; echo err >&2; exit 3\n")
    tool.chmod(0o755)
    env = dict(os.environ, PF_TOOL=str(tool), PF_DEV="5")
    out, err, rc, _ = noderunner.run_command(BASH, '"$PF_TOOL" -i "$PF_DEV"', env, 5, 1000)
    assert (out.decode().splitlines()[0], err, rc) == ("-i 5", b"err\n", 3)
    assert out.decode().splitlines()[1] == str(os.getpid())  # started by the runner itself, not by a bash


def test_the_c_locale_prefix_goes_through_the_environment_so_the_fast_path_stays(tmp_path, monkeypatch):
    """Every probe command carries the C locale; as a text prefix it made each one a shell line,
    so none started without bash any more. The runner sets it in the command's environment."""
    tool = tmp_path / "tool"
    tool.write_text('#!/bin/sh\necho "$LC_ALL ${LANGUAGE-unset} $PPID"\n')
    tool.chmod(0o755)
    monkeypatch.setenv("LANGUAGE", "de")
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")
    ctx = noderunner.Context(b"PFX", 1000, 5, [], BASH)
    ctx.env["PF_TOOL"] = str(tool)
    out = []
    noderunner.Group([], out).one(ctx, "t", "t", noderunner.C_LOCALE + '"$PF_TOOL"', ctx.env)
    record = b"".join(out).decode()
    stdout = [line for line in record.splitlines() if line.startswith("PFX O ")][0][6:]
    import base64
    assert base64.b64decode(stdout).decode() == f"C unset {os.getpid()}\n"  # C locale, started directly


@pytest.mark.parametrize("mode, body, rc, words", [
    (0o644, "#!/bin/sh\necho hi\n", 126, b"Permission denied"),   # no execute bit: bash's own words
    (0o755, "echo no shebang line\n", 0, b""),                    # bash runs it as a script
])
def test_a_simple_command_that_cannot_be_started_directly_is_left_to_bash(tmp_path, mode, body, rc, words):
    tool = tmp_path / "tool"
    tool.write_text(body)
    tool.chmod(mode)
    env = dict(os.environ, PF_TOOL=str(tool))
    out, err, got, _ = noderunner.run_command(BASH, '"$PF_TOOL" -x', env, 5, 1000)
    assert got == rc and words in err
    assert out == (b"no shebang line\n" if rc == 0 else b"")


def test_a_missing_tool_reads_as_bash_says_it():
    env = dict(os.environ, PF_TOOL="/nonexistent/hccn_tool")
    _, err, rc, _ = noderunner.run_command(BASH, '"$PF_TOOL" -x', env, 5, 1000)
    assert rc == 127 and b"No such file or directory" in err


def test_stopping_the_runner_leaves_no_command_behind():
    nonce = new_nonce()
    m = marker()
    plan = json.dumps([[["slow", "", f"echo started; sleep {m}", False]]])
    src = open(noderunner.__file__).read()
    p = subprocess.Popen([sys.executable, "-I", "-S", "-c", src, nonce, "101", "30", plan, "", BASH],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = p.stdout.readline()
    assert line.startswith(nonce.encode() + b" I slow")  # running; its records come whole when it ends
    deadline = time.monotonic() + 10
    while not processes_with(m) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with(m)
    p.send_signal(signal.SIGHUP)  # what a closed SSH session sends
    p.wait(10)
    assert _gone(m)


def test_a_command_stopped_before_it_is_recorded_goes_too():
    """The window the test above can hit only by chance: the runner is stopped after a command
    started but before it was recorded as running. The runner's children are killed all the same."""
    m = marker()
    src = open(noderunner.__file__).read().replace('if __name__ == "__main__":', "if False:")
    script = src + (
        "\nimport signal, subprocess, time\n"
        f"p = subprocess.Popen(['sleep', '{m}'], start_new_session=True)\n"
        "assert not _live\n"
        "_stop(signal.SIGHUP, None)\n")
    p = subprocess.run([sys.executable, "-I", "-S", "-c", script], capture_output=True, timeout=30)
    assert p.returncode == 128 + signal.SIGHUP, p.stderr
    assert _gone(m)


def _gone(text: str) -> bool:
    """No process with ``text`` in its command line within 30 s (a kill takes a moment; a stalled VM longer)."""
    deadline = time.monotonic() + 30
    while processes_with(text):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_losing_the_channel_stops_every_running_command():
    """The controller's deadline closes the channel: the runner's next write fails, and the commands
    still running (here a slow one in a parallel group) are killed, not left without a timeout."""
    nonce = new_nonce()
    m = marker()
    plan = json.dumps([[["first", "", "echo first; sleep 1", False]], [["slow", "t", f"sleep {m}", False]]])
    src = open(noderunner.__file__).read()
    p = subprocess.Popen([sys.executable, "-I", "-S", "-c", src, nonce, "101", "30", plan, "", BASH],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.readline().startswith(nonce.encode() + b" I ")  # a command is running
    deadline = time.monotonic() + 10
    while not processes_with(m) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with(m)
    p.stdout.close()  # the channel goes away; "first" ends after 1 s and its record cannot be written
    assert p.wait(10) == 128 + signal.SIGPIPE
    assert _gone(m)


def test_losing_the_channel_stops_the_runner_while_nothing_is_written():
    """The runner noticed a closed channel only at its next write: a command hanging for minutes
    kept it, and every later command of its group, running after the controller had left."""
    nonce = new_nonce()
    m = marker()
    plan = json.dumps([[["slow", "", f"sleep {m}", False], ["later", "", "echo never", False]]])
    src = open(noderunner.__file__).read()
    p = subprocess.Popen([sys.executable, "-I", "-S", "-c", src, nonce, "101", "60", plan, "", BASH],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.readline().startswith(nonce.encode() + b" I slow")
    p.stdout.close()  # nothing more is written until the sleep ends, a minute from now
    assert p.wait(10) == 128 + signal.SIGPIPE
    assert _gone(m)


# ---------------------------------------------------------------- one tool, every NPU: lanes

def _run_plan(groups, devs="0 1 2", timeout=2):
    """Run the node runner as the probe does, with ``groups`` as its plan; the parsed records."""
    nonce = new_nonce()
    plan = [[[name, tool, command, per_device] for name, tool, command, per_device in g] for g in groups]
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", noderunner_source(), nonce, str(1 << 20),
                           str(timeout), json.dumps(plan), devs, BASH],
                          capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return parse_probe_output(proc.stdout, nonce).outputs


def noderunner_source():
    from preflight.probe import _node_runner_source
    return _node_runner_source()


# Each call notes on stderr when it began and ended: order, not time taken, tells side by side
# from one after another, however slow the machine.
_STAMPED = 'echo "$EPOCHREALTIME" >&2; sleep 0.3; echo "%s=$PF_DEV"; echo "$EPOCHREALTIME" >&2'


def _span(out):
    began, ended = (float(t) for t in out.stderr.split())
    return began, ended


def test_one_tools_calls_run_one_npu_at_a_time_and_npus_side_by_side():
    cmds = [("link", "hccn", _STAMPED % "link", True), ("tls", "hccn", _STAMPED % "tls", True)]
    out = _run_plan([cmds], devs="0 1 2 3")
    assert [out[f"{n}/{d}"].stdout for d in range(4) for n in ("link", "tls")] == \
        [f"{n}={d}\n" for d in range(4) for n in ("link", "tls")]
    span = {name: _span(o) for name, o in out.items()}
    # The first call runs alone: every other starts after it ended.
    assert all(b >= span["link/0"][1] for name, (b, _) in span.items() if name != "link/0"), span
    # About one NPU, in order.
    assert all(span[f"tls/{d}"][0] >= span[f"link/{d}"][1] for d in range(4)), span
    # NPUs side by side: the first calls about NPUs 1-3 all began before any of them ended.
    assert max(span[f"link/{d}"][0] for d in (1, 2, 3)) < min(span[f"link/{d}"][1] for d in (1, 2, 3)), span


def test_a_tool_hung_on_every_npu_costs_one_timeout_and_one_process():
    cmds = [("link", "hccn", "sleep 30", True), ("tls", "hccn", "echo tls", True)]
    out = _run_plan([cmds], devs="0 1 2 3")
    assert out["link/0"].rc == 124
    skipped = {name for name, o in out.items() if o.skipped}
    assert skipped == {"tls/0"} | {f"{n}/{d}" for n in ("link", "tls") for d in (1, 2, 3)}
    assert all("timed out earlier on this host (link/0)" in out[name].skipped for name in skipped)


def test_a_sudo_refusal_stops_the_tools_later_calls():
    """With sudo: true and no NOPASSWD, every call was refused again: an auth-log entry (and a mail to
    root) per NPU and per query."""
    refused = "echo 'sudo: a password is required' >&2; exit 1"
    out = _run_plan([[("link", "hccn", refused, True), ("tls", "hccn", "echo tls", True)]], devs="0 1 2 3")
    ran = [d for d in range(4) if out[f"link/{d}"].rc == 1]
    assert ran  # NPUs asked side by side before the first refusal came back were refused once each
    for d in range(4):
        assert d in ran or "sudo -n refused hccn earlier on this host" in out[f"link/{d}"].skipped
        assert "sudo -n refused hccn earlier on this host" in out[f"tls/{d}"].skipped


def test_a_sudo_rule_refusing_one_query_stops_that_query_only():
    refused = "echo \"Sorry, user op is not allowed to execute '/usr/bin/hccn_tool -i $PF_DEV -tls -g' as root\" >&2; exit 1"
    out = _run_plan([[("tls", "hccn", refused, True), ("link", "hccn", "echo up", True)]], devs="0 1")
    assert all(out[f"link/{d}"].stdout == "up\n" for d in range(2))  # the allowed query still runs

    # No rule for the tool at all (sudo says "not allowed" too): after two queries, the rest are spared.
    refuse_all = "echo \"Sorry, user op is not allowed to execute '/usr/bin/hccn_tool' as root\" >&2; exit 1"
    plan = [(q, "hccn", refuse_all, True) for q in ("link", "tls", "ip", "health", "stat", "speed")]
    out = _run_plan([plan], devs="0")
    assert sum(1 for o in out.values() if o.rc == 1) == 2, {k: (o.rc, o.skipped) for k, o in out.items()}


def test_a_call_hung_on_one_npu_stops_that_npus_lane_only():
    hang_on_2 = '[ "$PF_DEV" = 2 ] && sleep 30; echo "link=$PF_DEV"'
    cmds = [("link", "hccn", hang_on_2, True), ("tls", "hccn", 'echo "tls=$PF_DEV"', True)]
    out = _run_plan([cmds], devs="0 1 2 3")
    assert out["link/2"].rc == 124 and "timed out earlier on this host (link/2)" in out["tls/2"].skipped
    assert [out[f"tls/{d}"].stdout for d in (0, 1, 3)] == ["tls=0\n", "tls=1\n", "tls=3\n"]
    assert [out[f"link/{d}"].stdout for d in (0, 1, 3)] == ["link=0\n", "link=1\n", "link=3\n"]


def test_no_more_than_max_lanes_npus_at_once():
    # Each call holds a slot for a while and notes how many were busy when it began.
    cmds = [("n", "t", 'echo "$EPOCHREALTIME" >&2; sleep 0.4; echo "$EPOCHREALTIME" >&2', True)]
    devs = " ".join(str(d) for d in range(noderunner.MAX_LANES + 4))
    out = _run_plan([cmds], devs=devs, timeout=10)
    spans = [_span(o) for o in out.values()]
    assert len(spans) == noderunner.MAX_LANES + 4
    most = max(sum(1 for b, e in spans if b <= t < e) for t, _ in spans)
    assert 1 < most <= noderunner.MAX_LANES, spans


def test_a_group_mixing_per_npu_and_other_calls_stays_in_order():
    cmds = [("board", "smi", "echo board", False), ("link", "smi", _STAMPED % "link", True)]
    out = _run_plan([cmds], devs="0 1")
    span = {name: _span(o) for name, o in out.items() if o.stderr}
    assert span["link/1"][0] >= span["link/0"][1], span
    assert out["board"].stdout == "board\n"


def _stream_with_npu2_hung(link, tls):
    """Run a one-group plan (``link`` per NPU, then ``tls``; NPU 2's ``link`` call sleeps a minute)
    and read its streamed records until every other NPU is through, as the host deadline would
    cut it there; returns the probe read so far and whether the runner was still running."""
    nonce = new_nonce()
    plan = [[[link, "hccn", '[ "$PF_DEV" = 2 ] && sleep 60; echo "link=$PF_DEV"', True],
             [tls, "hccn", 'echo "tls=$PF_DEV"', True]]]
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", noderunner_source(), nonce, str(1 << 20), "120",
                             json.dumps(plan), "0 1 2 3", BASH],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        lines, want = [], {f"{n}/{d}" for n in (link, tls) for d in (0, 1, 3)}
        deadline = time.monotonic() + 50  # well before NPU 2's call could end
        while time.monotonic() < deadline:
            lines.append(proc.stdout.readline().decode())
            if want <= {k for k, o in parse_probe_output("".join(lines), nonce).outputs.items() if o.rc is not None}:
                break
        running = proc.poll() is None
    finally:
        proc.terminate()  # the runner's own handler ends the hung call's process group too
        proc.wait()
    return parse_probe_output("".join(lines), nonce), running


def test_a_streaming_lane_group_passes_on_each_npus_records_while_another_npu_hangs():
    # Only the per-NPU group in the plan: it is the first group, whose records stream (they survive
    # a later hang or the host deadline). NPU 2 hangs for a minute; the others' records come first.
    probe, running = _stream_with_npu2_hung("link", "tls")
    got = probe.outputs
    assert running  # still waiting on NPU 2
    want = {f"{n}/{d}" for n in ("link", "tls") for d in (0, 1, 3)}
    assert {k: got[k].stdout for k in want} == {k: k.replace("/", "=") + "\n" for k in want}
    assert got["link/2"].rc is None and not got["link/2"].skipped and not got["link/2"].stdout  # running


def test_a_call_the_host_deadline_cuts_off_in_a_streaming_lane_group_did_not_finish():
    # The probe cut off once the other NPUs are through: NPU 2's hung call reads as started and
    # unfinished, not as never gathered; its next call, never started, as not gathered.
    from preflight.facts import FactUnavailable, HostFacts
    from preflight.probe import CommandOutput

    probe, _ = _stream_with_npu2_hung("hccn.link", "hccn.tls")
    assert not probe.complete
    hung = probe.outputs["hccn.link/2"]
    assert hung.rc is None and not hung.skipped
    assert "hccn.tls/2" not in probe.outputs
    raw = dict(probe.outputs, **{"probe.devices": CommandOutput(stdout="0 1 2 3\n", stderr="", rc=0)})
    facts = HostFacts(host="node-01", address="node-01", raw=raw, command_timeout=10)
    link, tls = facts.per_device("hccn.link"), facts.per_device("hccn.tls")
    assert isinstance(link[2], FactUnavailable) and "did not finish before the host's deadline" in str(link[2])
    assert isinstance(tls[2], FactUnavailable) and "was not gathered" in str(tls[2])


def test_the_runner_is_python_3_6_syntax():
    # It runs on the node's own python3, which on older training images is 3.6 or 3.7.
    import ast
    ast.parse(noderunner_source(), feature_version=(3, 6))
    with pytest.raises(SyntaxError):  # the check itself can fail: a 3.8 walrus is refused
        ast.parse("if (n := 1):\n    pass\n", feature_version=(3, 6))


def test_a_tool_off_sudos_secure_path_stops_its_later_calls():
    """sudo's "command not found" (hccn_tool outside secure_path) refuses every call alike: read as
    a refusal by the report (preflight.facts) and, now, by the runner too, which asked once per NPU
    and query."""
    from preflight.facts import SUDO_REFUSAL

    refused = "echo 'sudo: hccn_tool: command not found' >&2; exit 1"
    out = _run_plan([[("link", "hccn", refused, True), ("tls", "hccn", "echo tls", True)]], devs="0 1 2 3")
    assert all("sudo -n refused hccn earlier on this host" in out[f"tls/{d}"].skipped for d in range(4))
    assert SUDO_REFUSAL == noderunner.SUDO_REFUSED_ERE


def test_a_group_that_finished_is_recorded_while_another_still_runs():
    """Only the first group streamed: npu-smi's answer, done in milliseconds, waited behind a slow
    login shell in the first group, and the host deadline lost it ("was not gathered", blaming npu-smi)."""
    nonce = new_nonce()
    m = marker()
    plan = json.dumps([[["slow", "", f"sleep {m}", False]], [["fast", "t", "echo quick answer", False]]])
    src = open(noderunner.__file__).read()
    done = subprocess.run(["timeout", "2", sys.executable, "-I", "-S", "-c", src, nonce, "101", "30", plan, "", BASH],
                          capture_output=True, timeout=30)
    assert done.returncode == 124  # cut off, as the host deadline cuts a probe off
    from preflight.probe import parse_probe_output

    outputs = parse_probe_output(done.stdout.decode(), nonce).outputs
    assert outputs["fast"].rc == 0 and outputs["fast"].stdout == "quick answer\n", outputs
    assert outputs["slow"].rc is None  # started, not finished
    assert _gone(m)


@pytest.mark.parametrize("runner", ["auto", "bash"])
def test_what_a_timed_out_command_printed_is_kept_by_both_runners(runner):
    """The bash runner's readers were killed at the same moment as the command: head's unwritten
    buffer went with them, so a hung command's partial output read as empty there (not in python's)."""
    nonce = new_nonce()
    script = build_script([ProbeCommand("hang", "echo before; echo said >&2; sleep 100")], nonce, 2, runner=runner)
    proc = subprocess.run(["bash", "-c", script], capture_output=True, timeout=60)
    out = parse_probe_output(proc.stdout, nonce).outputs["hang"]
    assert (out.rc, out.stdout, out.stderr) == (124, "before\n", "said\n"), out


def test_a_runner_stopped_with_its_channel_is_not_followed_by_the_bash_runner():
    """The script took any failure of the python runner, 141 from a lost channel included, for a
    runner that could not work here, and ran every command again in bash with no one reading."""
    nonce = new_nonce()
    m, m2 = marker(), marker()
    # A group of its own (tool t, two calls): the bash runner starts it before it writes anything.
    script = build_script([ProbeCommand("slow", f"sleep {m}"), ProbeCommand("t1", f"sleep {m2}", tool="t"),
                           ProbeCommand("t2", "true", tool="t")], nonce, 60)
    p = subprocess.Popen(["bash", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while not processes_with(m) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with(m)
    p.stdout.close()
    assert p.wait(15) in (128 + signal.SIGPIPE, -signal.SIGPIPE)  # the script ends (its own exit, or a write)
    assert _gone(m) and _gone(m2)
    time.sleep(1.5)
    assert not processes_with(m) and not processes_with(m2)  # not started again by the bash runner
