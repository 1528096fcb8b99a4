"""``connection: local``: the same probe, run by a subprocess on the controller."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

from . import RunResult, wait_readable


# How long the probe's python runner is given, after SIGTERM, to kill the commands it started.
STOP_GRACE_SECONDS = 1.0


def _kill_group(proc: subprocess.Popen) -> None:
    # SIGTERM first: the probe's python runner then kills the commands it started, each in a
    # session of its own that the group's SIGKILL would not reach (a hung hccn_tool would
    # outlive the run); SIGKILL for whatever is left.
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    # Until the whole group is gone, not only bash: the runner may still be at work.
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    while time.monotonic() < deadline:
        proc.poll()
        try:
            os.killpg(proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.02)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class LocalTransport:
    def __init__(self, name: str = "localhost"):
        self.name = name
        self._procs: list[subprocess.Popen] = []
        self._lock = threading.Lock()
        self._closes = 0  # how many times close() ran: a run started before one is killed by it

    def connect(self) -> None:
        pass

    def run(self, command: str, timeout: float, max_bytes: int) -> RunResult:
        closes = self._closes
        # A session of its own, so that a deadline kills every child, not just bash.
        proc = subprocess.Popen(["bash", "-c", command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        with self._lock:
            self._procs.append(proc)
            # close() may have run while Popen was still returning: it could not see this process.
            if self._closes != closes:
                _kill_group(proc)
        out, err = bytearray(), bytearray()
        streams = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
        deadline = time.monotonic() + timeout
        truncated = False
        try:
            while streams:
                left = deadline - time.monotonic()
                if left <= 0:
                    _kill_group(proc)
                    proc.wait()
                    return RunResult(bytes(out), bytes(err), None, truncated, ended="deadline")
                ready = wait_readable(list(streams), min(left, 0.5))
                for fd in ready:
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        del streams[fd]
                        continue
                    buf = streams[fd]
                    room = max_bytes - len(buf)
                    if len(chunk) > room:
                        truncated = True
                    buf.extend(chunk[:max(room, 0)])
            left = max(deadline - time.monotonic(), 0.1)
            try:
                rc = proc.wait(timeout=left)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                proc.wait()
                return RunResult(bytes(out), bytes(err), None, truncated, ended="deadline")
            return RunResult(bytes(out), bytes(err), rc, truncated)
        finally:
            proc.stdout.close()
            proc.stderr.close()
            with self._lock:
                self._procs.remove(proc)

    def start(self, command: str) -> "LocalProcess":
        proc = subprocess.Popen(["bash", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        return LocalProcess(proc)

    def close(self) -> None:
        with self._lock:
            self._closes += 1
            procs = list(self._procs)
        for proc in procs:
            _kill_group(proc)


class LocalProcess:
    """A long-running command whose stdout is read line by line (phase-two listeners)."""

    def __init__(self, proc: subprocess.Popen):
        self._proc = proc
        self._buf = b""

    def readline(self, timeout: float) -> str | None:
        deadline = time.monotonic() + timeout
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready = wait_readable([fd], left)
            if not ready:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                return None
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode("utf-8", errors="replace")

    def close(self) -> None:
        try:
            self._proc.stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            _kill_group(self._proc)
            self._proc.wait()
        self._proc.stdout.close()
