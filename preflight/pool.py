"""A bounded pool whose every item has a deadline, and which never blocks exit.

``concurrent.futures`` joins its worker threads when the interpreter exits, so one SSH
call stuck inside a library would hang the whole run at the end.  Here workers are
daemon threads: an item past its deadline is abandoned (reported by ``on_timeout``) and
the run goes on; the stuck thread dies with the process.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Callable, Iterable, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def run_bounded(items: Iterable[T], work: Callable[[T], R], *, workers: int, deadline: float,
                on_timeout: Callable[[T, float], R], on_tick: Callable[[int, int, dict], None] | None = None,
                key: Callable[[T], str] = str, results: dict[str, R] | None = None) -> dict[str, R]:
    """``{key(item): work(item)}``, at most ``workers`` at once.

    ``deadline`` is per item, counted from when the item starts.  ``on_tick(done, total,
    {key: seconds running})`` is called a few times a second for progress displays.
    ``results``, when given, is filled as items finish, so a caller interrupted meanwhile
    (Ctrl-C) still has what was done.
    """
    items = list(items)
    todo: queue.Queue = queue.Queue()
    for item in items:
        todo.put(item)
    results = {} if results is None else results
    started: dict[str, tuple[float, T]] = {}
    abandoned: set[str] = set()  # past their deadline: a late answer is dropped
    lock = threading.Condition()

    def worker():
        while True:
            try:
                item = todo.get_nowait()
            except queue.Empty:
                return
            name = key(item)
            with lock:
                started[name] = (time.monotonic(), item)
            value = work(item)
            with lock:
                if name not in results and name not in abandoned:
                    results[name] = value
                started.pop(name, None)
                lock.notify_all()

    for _ in range(max(1, min(workers, len(items)))):
        threading.Thread(target=worker, daemon=True, name="preflight-worker").start()

    total = len(items)
    with lock:
        while len(results) < total:
            lock.wait(timeout=0.25)
            now = time.monotonic()
            expired = [(name, item, now - t0) for name, (t0, item) in started.items() if now - t0 > deadline]
            for name, _, _ in expired:
                started.pop(name)
                abandoned.add(name)
            if expired:
                # on_timeout runs without the lock: if it blocks (closing a connection whose peer
                # stopped reading can), the workers still record what they finish meanwhile.
                try:
                    lock.release()  # in the try: an interrupt between the two leaves the lock as it was
                    values = [(name, on_timeout(item, elapsed)) for name, item, elapsed in expired]
                finally:
                    lock.acquire()
                for name, value in values:
                    results[name] = value
                    # The stuck worker never comes back: start a replacement so the rest proceeds.
                    threading.Thread(target=worker, daemon=True, name="preflight-worker").start()
            if on_tick:
                on_tick(len(results), total, {n: now - t0 for n, (t0, _) in started.items()})
    return results
