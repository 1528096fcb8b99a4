"""preflight.forked: work done in a forked child, its records read back in order; a child that
fails, dies or is interrupted loses nothing it wrote, and its private folder goes."""

from __future__ import annotations

import gc
import glob
import os
import signal
import tempfile
import threading
import time

import pytest

from preflight import forked

pytestmark = pytest.mark.skipif(not forked.available(), reason="needs os.fork")


@pytest.fixture(autouse=True)
def private_tmp(tmp_path, monkeypatch):
    # The hand-over folders of this test only, not those of a run going on beside it.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def leftovers():
    return glob.glob(os.path.join(tempfile.gettempdir(), "preflight-child-*"))


def run(produce):
    got = []
    forked.run_forked(produce, got.append)
    return got


def test_records_come_back_in_order_from_another_process():
    def produce(write):
        for i in range(3):
            write({"i": i, "pid": os.getpid(), "text": "line\nbreak \u00e9"})

    got = run(produce)
    assert [r["i"] for r in got] == [0, 1, 2]
    assert {r["pid"] for r in got} != {os.getpid()}
    assert got[0]["text"] == "line\nbreak \u00e9"
    assert not leftovers()
    assert gc.get_freeze_count() == 0  # frozen for the fork only: this process collects as before


def test_the_childs_memory_is_its_own():
    box = {"seen": []}

    def produce(write):
        box["seen"].append("child")  # changes the child's copy only
        write({"seen": list(box["seen"])})

    assert run(produce) == [{"seen": ["child"]}]
    assert box["seen"] == []


def test_a_child_that_raises_hands_over_what_it_wrote_and_says_why():
    def produce(write):
        write({"host": "node-01"})
        raise ValueError("inventory changed under us")

    got = []
    with pytest.raises(forked.ChildFailed, match="exited with code 70.*ValueError: inventory changed under us"):
        forked.run_forked(produce, got.append)
    assert got == [{"host": "node-01"}]
    assert not leftovers()


def test_a_child_killed_midway_is_reported_with_its_signal():
    def produce(write):
        write({"host": "node-01"})
        os.kill(os.getpid(), signal.SIGKILL)

    got = []
    with pytest.raises(forked.ChildFailed, match="killed by signal 9"):
        forked.run_forked(produce, got.append)
    assert got == [{"host": "node-01"}]  # written before it died: not lost
    assert not leftovers()


def test_ctrl_c_reaches_the_child_which_hands_over_then_the_parent_raises(tmp_path, monkeypatch):
    main = threading.get_ident()
    sleeping = tmp_path / "child-sleeping"
    # Ctrl-C once the parent waits for the child too: one that lands while the parent is still in
    # os.fork() is the parent's own (the child never hears of it), not what this test is about.
    waiting = threading.Event()
    real_wait = forked._wait

    def wait(pid):
        waiting.set()
        return real_wait(pid)

    monkeypatch.setattr(forked, "_wait", wait)

    def produce(write):
        try:
            sleeping.touch()
            time.sleep(60)  # gathering that Ctrl-C cuts short
            write({"finished": True})
        except KeyboardInterrupt:
            write({"interrupted": True})

    def ctrl_c_once_the_child_sleeps():
        # Not after a fixed delay: on a loaded machine the fork can come later than any delay.
        deadline = time.monotonic() + 30
        while not (sleeping.exists() and waiting.is_set()) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)  # the parent from _wait's first line into os.waitpid
        signal.pthread_kill(main, signal.SIGINT)

    # Ctrl-C as `kill -INT <pid of the run>` sends it: to the parent only; it passes it on.
    timer = threading.Thread(target=ctrl_c_once_the_child_sleeps)
    timer.start()
    got = []
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        forked.run_forked(produce, got.append)
    timer.join()
    assert got == [{"interrupted": True}]
    assert time.monotonic() - t0 < 30
    assert not leftovers()


def test_a_child_stuck_after_ctrl_c_is_killed_once_its_hand_over_time_is_up(tmp_path, monkeypatch):
    """The parent waited for the child without a bound: a child stuck in a call that a Ctrl-C does
    not end (a close through a stalled jump host) kept the run alive for good (found by review)."""
    monkeypatch.setattr(forked, "HANDOVER_S", 1.0)
    main = threading.get_ident()
    started = tmp_path / "child-started"

    def produce(write):
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # stuck where the interrupt does not reach
        write({"host": "node-01"})
        started.touch()
        time.sleep(300)

    def ctrl_c_once_the_child_runs():
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        signal.pthread_kill(main, signal.SIGINT)

    timer = threading.Thread(target=ctrl_c_once_the_child_runs)
    timer.start()
    got = []
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        forked.run_forked(produce, got.append)
    timer.join()
    assert time.monotonic() - t0 < 120  # far from the child's 300 s
    assert got == [{"host": "node-01"}]  # what it wrote before it got stuck is kept
    assert not leftovers()


@pytest.mark.parametrize("where, hosts, xdist_worker, shards, expected", [
    ("auto", 64, False, 0, "inline"),   # small runs gather inline, as they always did
    ("auto", 65, False, 0, "child"),    # fleet size: the connections' memory leaves with the child
    ("auto", 1000, True, 0, "inline"),  # never fork an xdist worker (execnet's threads)
    ("auto", 10, False, 4, "shards"),   # --gather-shards 4 alone is enough
    ("auto", 1000, False, 1, "child"),  # one shard is no spreading
    ("child", 1, False, 0, "child"),
    ("shards", 3, False, 0, "shards"),
    ("shards", 1000, True, 4, "inline"),
    ("inline", 1000, False, 4, "inline"),  # said explicitly: wins over --gather-shards
])
def test_where_gathering_runs(where, hosts, xdist_worker, shards, expected):
    from preflight.run import gathering_mode

    assert gathering_mode(where, hosts, xdist_worker, shards) == expected


@pytest.mark.parametrize("option, hosts, cores, expected", [
    (3, 10, 64, 3),        # said explicitly
    (0, 10, 64, 2),        # at least two
    (0, 1000, 64, 2),      # one per 500 hosts (each costs memory), not one per core
    (0, 4000, 64, 8),
    (0, 4000, 4, 4),       # never more than the cores
    (0, 4000, 1, 2),       # but two even on one core: asked for shards
])
def test_how_many_shards(option, hosts, cores, expected):
    from preflight.run import shard_count

    assert shard_count(option, hosts, cores) == expected
