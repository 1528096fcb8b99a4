"""Run one piece of work in a forked child process and read back the records it wrote.

Gathering at fleet size runs this way (:meth:`preflight.run.PreflightRun._gather`): a thousand
open SSH connections and their threads cost the controller ~200 MB, and glibc keeps most of it
after they close (it was freed in the threads' arenas, which the checks, on the main thread, do
not reuse).  In a child, that memory goes when the child exits; the controller only reads the
facts back.

The records travel as JSON lines in a private folder (mode 0700, removed afterwards): they may
hold secrets from the nodes' environments, as the facts in memory do.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from typing import Callable

_END = '"end of records"'  # the child's last line: without it the hand-over is incomplete


class ChildFailed(RuntimeError):
    """The child ended without handing over everything (it raised, crashed or was killed)."""


def available() -> bool:
    return hasattr(os, "fork")


def run_forked(produce: Callable[[Callable[[dict], None]], None], consume: Callable[[dict], None]) -> None:
    """``produce(write)`` runs in a forked child; each record it passes to ``write`` is given to
    ``consume`` here, in order, once the child has ended.

    Ctrl-C: the first one is passed on to the child (a terminal sends it to both; the child acts on
    one only), which is expected to hand over what it has; the records are consumed and
    ``KeyboardInterrupt`` is raised here afterwards.  A second Ctrl-C kills the child: what it
    wrote by then is consumed, then ``KeyboardInterrupt``.  A child that fails raises
    :class:`ChildFailed` here, after its records are consumed.
    """
    folder = tempfile.mkdtemp(prefix="preflight-child-")
    records, errors = os.path.join(folder, "records.jsonl"), os.path.join(folder, "error.txt")
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        # The child's garbage collector would otherwise write to every object it inherited (and so
        # copy every page of them: the collected pytest items alone are ~150 MB at 1000 hosts).
        gc.freeze()
        pid = os.fork()
        if pid == 0:
            _child(produce, records, errors)  # never returns
        gc.unfreeze()
        interrupted, status = _wait(pid)
        complete = _read(records, consume)
        if interrupted:
            raise KeyboardInterrupt
        if not complete:
            raise ChildFailed(_failure(status, errors))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# After a Ctrl-C, how long the child has to hand over what it has before it is killed: handing
# over takes a moment, but a child stuck (in a library call that ignores the interrupt) would
# otherwise keep the operator's Ctrl-C from ever ending the run.
HANDOVER_S = 30.0


def _wait(pid: int) -> tuple[bool, int]:
    """(whether Ctrl-C came meanwhile, the child's wait status)."""
    interrupted = False
    kill_at = None  # set by the first Ctrl-C: the wait is bounded from then on
    while True:
        try:
            if kill_at is None:
                _, status = os.waitpid(pid, 0)
                return interrupted, status
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return interrupted, status
            if time.monotonic() >= kill_at:
                _signal(pid, signal.SIGKILL)
                kill_at = None
            else:
                time.sleep(0.1)
        except KeyboardInterrupt:
            if interrupted:
                _signal(pid, signal.SIGKILL)
                kill_at = None
            else:
                _signal(pid, signal.SIGINT)
                interrupted, kill_at = True, time.monotonic() + HANDOVER_S
        except ChildProcessError:  # already reaped
            return interrupted, 0


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _read(path: str, consume: Callable[[dict], None]) -> bool:
    """Consume the records in ``path``; whether the child's end line was there."""
    try:
        fh = open(path, encoding="utf-8")
    except FileNotFoundError:
        return False
    with fh:
        for line in fh:
            if not line.endswith("\n"):
                return False  # cut off mid-record: the child died writing it
            if line.rstrip("\n") == _END:
                return True
            consume(json.loads(line))
    return False


def _failure(status: int, errors: str) -> str:
    try:
        with open(errors, encoding="utf-8") as fh:
            said = fh.read().strip()
    except OSError:
        said = ""
    if os.WIFSIGNALED(status):
        how = f"was killed by signal {os.WTERMSIG(status)}"
    else:
        how = f"exited with code {os.waitstatus_to_exitcode(status)}"
    return f"the gathering process {how} before handing over all facts" + (f": {said}" if said else "")


def _first_interrupt_only(signum, frame):
    # A terminal's Ctrl-C reaches the child directly and again through the parent: act on one.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def _child(produce, records: str, errors: str) -> None:
    code = 70
    try:
        signal.signal(signal.SIGINT, _first_interrupt_only)
        # Line-buffered: a child killed midway has handed over every record written before.
        with open(os.open(records, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8",
                  buffering=1) as fh:
            produce(lambda record: fh.write(json.dumps(record) + "\n"))
            fh.write(_END + "\n")
        code = 0
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it there
        try:
            with open(os.open(errors, os.O_WRONLY | os.O_CREAT, 0o600), "w", encoding="utf-8") as fh:
                fh.write("".join(traceback.format_exception_only(type(exc), exc)).strip())
        except OSError:
            pass
    finally:
        exit_child(code)


def exit_child(code: int) -> None:
    """End a forked child: flush what it printed, then go without atexit handlers or pytest's
    teardown (those belong to the parent).  Never returns."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - nothing more to do on the way out
            pass
    os._exit(code)
