"""preflight.transport.local: ``connection: local`` runs commands with a subprocess, bounded by a
deadline that kills the whole process group, with capped output; plus the line-reading
long-running process used by phase-two listeners."""

from __future__ import annotations

import os
import shlex
import signal
import secrets
import threading
import time

import pytest

from preflight.transport import RunResult
from preflight.transport.local import LocalProcess, LocalTransport


def marker() -> str:
    """A unique sleep duration (GNU sleep takes fractions): its command line names our processes only."""
    return f"100.{secrets.randbelow(10**9):09d}"


def processes_with(text: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(pid))
    return found


# Bounds on things that should happen "soon" are generous: this suite also runs on shared VMs
# whose hypervisor can stall them for seconds; a passing test returns as soon as the thing happens.
def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_gone(text: str, seconds: float = 15.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = processes_with(text)
        if not left:
            return []
        time.sleep(0.05)
    return processes_with(text)


@pytest.fixture
def transport():
    t = LocalTransport("localhost")
    t.connect()
    yield t
    t.close()


# ------------------------------------------------------------------------------ run


def test_run_returns_stdout_stderr_and_exit_code(transport):
    result = transport.run("echo out; echo err >&2; exit 7", timeout=10, max_bytes=1 << 20)
    assert isinstance(result, RunResult)
    assert result == RunResult(b"out\n", b"err\n", 7, False)


def test_run_success_and_binary_output(transport):
    result = transport.run(r"printf '\x00\xff\xfe\n'; printf '\x80' >&2", timeout=10, max_bytes=1024)
    assert result.stdout == b"\x00\xff\xfe\n"
    assert result.stderr == b"\x80"
    assert result.exit_code == 0


def test_run_command_sees_no_stdin(transport):
    result = transport.run("cat; echo done", timeout=5, max_bytes=1024)
    assert result.stdout == b"done\n" and result.exit_code == 0


def test_run_signal_death_is_a_negative_exit_code(transport):
    result = transport.run("kill -TERM $$", timeout=5, max_bytes=1024)
    assert result.exit_code == -15


def test_deadline_kills_the_child_and_its_grandchildren(transport):
    m = marker()
    command = f"bash -c 'sleep {m} & sleep {m}'"
    t0 = time.monotonic()
    result = transport.run(command, timeout=0.7, max_bytes=1024)
    took = time.monotonic() - t0
    assert result.exit_code is None  # killed at the deadline
    assert 0.6 <= took < 30, took  # the deadline, not the 100 s sleeps
    assert wait_gone(m) == [], f"processes survived the deadline: {processes_with(m)}"


def test_deadline_keeps_output_printed_before_it(transport):
    m = marker()
    result = transport.run(f"echo early; echo warn >&2; sleep {m}", timeout=0.5, max_bytes=1024)
    assert result.stdout == b"early\n" and result.stderr == b"warn\n"
    assert result.exit_code is None
    assert wait_gone(m) == []


def test_background_child_holding_stdout_is_bounded_by_the_deadline(transport):
    m = marker()
    t0 = time.monotonic()
    result = transport.run(f"sleep {m} & echo hi", timeout=0.7, max_bytes=1024)
    assert time.monotonic() - t0 < 30  # not the child's 100 s
    assert result.stdout == b"hi\n"
    assert wait_gone(m) == []


def test_deadline_stops_the_commands_the_probe_runner_started(transport):
    """The probe's python runner starts each command in a session of its own; SIGKILL to the
    probe's group alone left a hung tool running after the run (local connection)."""
    from preflight.probe import ProbeCommand, build_script, new_nonce

    m = marker()
    script = build_script([ProbeCommand("hung", f"sleep {m}")], new_nonce(), timeout=600)
    t0 = time.monotonic()
    result = transport.run("bash -c " + shlex.quote(script), timeout=3, max_bytes=1 << 20)
    assert result.exit_code is None and result.ended == "deadline"
    assert time.monotonic() - t0 < 60
    assert wait_gone(m) == []


def test_output_over_max_bytes_is_cut_and_flagged(transport):
    result = transport.run("head -c 200000 /dev/zero | tr '\\0' x; head -c 5000 /dev/zero | tr '\\0' y >&2",
                           timeout=10, max_bytes=1000)
    assert result.stdout == b"x" * 1000
    assert result.stderr == b"y" * 1000
    assert result.truncated is True
    assert result.exit_code == 0  # the command was read to its end, not killed


def test_output_of_exactly_max_bytes_is_not_flagged(transport):
    result = transport.run("head -c 1000 /dev/zero | tr '\\0' x", timeout=10, max_bytes=1000)
    assert result.stdout == b"x" * 1000
    assert result.truncated is False


def test_endless_output_is_bounded_by_the_deadline(transport):
    t0 = time.monotonic()
    result = transport.run("yes", timeout=0.5, max_bytes=4096)
    assert time.monotonic() - t0 < 30  # bounded: `yes` never ends
    assert len(result.stdout) == 4096 and result.truncated
    assert result.exit_code is None


def test_close_kills_a_run_in_progress(transport):
    m = marker()
    box = {}

    def work():
        box["result"] = transport.run(f"sleep {m}", timeout=30, max_bytes=1024)

    thread = threading.Thread(target=work)
    thread.start()
    deadline = time.monotonic() + 30
    while not processes_with(m) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert processes_with(m)
    transport.close()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert box["result"].exit_code == -signal.SIGTERM  # SIGTERM first, for the probe runner's sake
    assert wait_gone(m) == []


def test_close_kills_a_run_whose_start_it_overlapped(transport, monkeypatch):
    # close() can come while Popen has started the command but not yet returned it (seen on a
    # loaded box): the command must still die, not run its 30 s out.
    import preflight.transport.local as local

    m = marker()
    real_popen = local.subprocess.Popen
    spawned, release = threading.Event(), threading.Event()

    def slow_popen(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        spawned.set()
        release.wait(10)
        return proc

    monkeypatch.setattr(local.subprocess, "Popen", slow_popen)
    box = {}
    thread = threading.Thread(target=lambda: box.update(result=transport.run(f"sleep {m}", timeout=30,
                                                                             max_bytes=1024)))
    thread.start()
    assert spawned.wait(10)
    transport.close()
    release.set()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert box["result"].exit_code == -signal.SIGTERM  # SIGTERM first, for the probe runner's sake
    assert wait_gone(m) == []


def test_a_run_after_close_is_not_killed(transport):
    transport.close()
    assert transport.run("echo still here", timeout=10, max_bytes=64).stdout == b"still here\n"


def test_sequential_runs_do_not_leak_file_descriptors(transport):
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        transport.run("echo x", timeout=5, max_bytes=64)
    assert len(os.listdir("/proc/self/fd")) <= before + 2


# ------------------------------------------------------------------------------ start / readline / close


def test_start_readline_close(transport):
    proc = transport.start("echo one; printf 'two\\nthr'; sleep 0.2; echo ee; printf '\\xff\\n'; exec cat")
    assert isinstance(proc, LocalProcess)
    assert proc.readline(timeout=5) == "one"
    assert proc.readline(timeout=5) == "two"
    assert proc.readline(timeout=5) == "three"  # a line split across reads
    assert proc.readline(timeout=5) == "\ufffd"
    t0 = time.monotonic()
    assert proc.readline(timeout=0.3) is None  # nothing more yet: bounded wait
    assert time.monotonic() - t0 < 30
    proc.close()
    assert proc._proc.returncode == 0  # closing stdin ended `cat` (a kill would read -9)


def test_readline_at_eof_is_none(transport):
    proc = transport.start("echo only")
    assert proc.readline(timeout=5) == "only"
    assert proc.readline(timeout=5) is None
    proc.close()


def test_close_kills_a_process_that_ignores_stdin_and_its_children(transport):
    m = marker()
    # The background child's pid comes from bash itself: it exists once the line is read, with no
    # wait on /proc (a stalled VM made a poll of /proc for both processes miss one in CI).
    proc = transport.start(f"sleep {m} & echo $!; sleep {m}")
    child = int(proc.readline(timeout=30))
    assert _alive(child)
    t0 = time.monotonic()
    proc.close()  # waits a bounded time for EOF to work, then kills the group
    assert time.monotonic() - t0 < 30  # not the 100 s of the sleeps
    assert wait_gone(m) == []


def test_pipes_numbered_above_1023_are_read(fds_above_1023):
    t = LocalTransport("localhost")
    r = t.run("echo out; echo err >&2; exit 3", 10, 1 << 20)
    assert (r.stdout, r.stderr, r.exit_code) == (b"out\n", b"err\n", 3)
    p = t.start("echo ready; cat")
    try:
        assert p.readline(10) == "ready"
    finally:
        p.close()
        t.close()
