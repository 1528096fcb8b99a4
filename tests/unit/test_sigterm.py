"""SIGTERM stops a run as Ctrl-C does (PreflightRun.catch_sigterm): KeyboardInterrupt in the
controller's main thread, once, for the run only; forked children leave it to the controller."""

from __future__ import annotations

import os
import signal
import threading
import time
from types import SimpleNamespace

import pytest

from preflight import forked
from preflight.run import PreflightRun


def new_run(config=None) -> PreflightRun:
    return PreflightRun(config or SimpleNamespace(), (), "", None, "reports", None, None, False)


@pytest.fixture(autouse=True)
def keep_sigterm():
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


def term_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.5)  # the handler runs on the main thread's next bytecode; not later than this


def test_sigterm_is_a_keyboard_interrupt_once_and_close_puts_the_previous_handler_back():
    previous = lambda signum, frame: None  # noqa: E731 - another plugin's handler, say
    signal.signal(signal.SIGTERM, previous)
    run = new_run()
    run.catch_sigterm()
    with pytest.raises(KeyboardInterrupt):
        term_self()
    assert run.terminated
    term_self()  # a second one (`timeout` signals the run and its group) lets the hand-over finish
    run.close()
    assert signal.getsignal(signal.SIGTERM) is previous


def test_sigterm_while_the_reports_are_written_does_not_cut_them_short():
    run = new_run()
    run.catch_sigterm()
    run._stopping = True  # as finish() sets it, first thing
    term_self()
    assert not run.terminated
    run.close()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


@pytest.mark.parametrize("why", ["ignored", "xdist worker", "not the main thread"])
def test_no_handler_where_it_does_not_belong(why):
    signal.signal(signal.SIGTERM, signal.SIG_IGN if why == "ignored" else signal.SIG_DFL)
    before = signal.getsignal(signal.SIGTERM)
    run = new_run(SimpleNamespace(workerinput={}) if why == "xdist worker" else None)
    if why == "not the main thread":
        thread = threading.Thread(target=run.catch_sigterm)
        thread.start()
        thread.join()
    else:
        run.catch_sigterm()
    assert signal.getsignal(signal.SIGTERM) == before
    run.close()
    assert signal.getsignal(signal.SIGTERM) == before


def test_the_forked_gathering_child_hands_over_when_the_run_and_its_group_get_sigterm(tmp_path):
    """The child inherits the handler and leaves the decision to the run, which passes it a
    SIGINT (forked.run_forked): what it had is handed over, then the run raises."""
    run = new_run()
    run.catch_sigterm()
    sleeping = tmp_path / "child-sleeping"
    child_pid = []

    def produce(write):
        try:
            sleeping.write_text(str(os.getpid()))
            time.sleep(60)  # gathering that the SIGTERM cuts short
            write({"finished": True})
        except KeyboardInterrupt:
            write({"interrupted": True, "terminated": run.terminated})

    def sigterm_once_the_child_sleeps():
        deadline = time.monotonic() + 30
        while not (sleeping.exists() and sleeping.read_text()) and time.monotonic() < deadline:
            time.sleep(0.02)
        child_pid.append(int(sleeping.read_text()))
        os.kill(child_pid[0], signal.SIGTERM)  # as `timeout` does: the group (the child) and the run
        os.kill(os.getpid(), signal.SIGTERM)

    timer = threading.Thread(target=sigterm_once_the_child_sleeps)
    timer.start()
    got = []
    t0 = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            forked.run_forked(produce, got.append)
    finally:
        timer.join()
        run.close()
    assert child_pid
    # The child's SIGTERM did nothing there (not terminated in the child), the run's SIGINT did.
    assert got == [{"interrupted": True, "terminated": False}]
    assert run.terminated and time.monotonic() - t0 < 30

