"""Gathering spread over several forked processes ("shards"), each holding its hosts' connections.

One Python process does every host's SSH handshake, cipher work and probe framing under one GIL,
so at fleet size the controller's gathering is bounded by one core however many it has.  With
``--gather-process shards`` the hosts are split between K forked processes:

* phase one runs in each shard on its own hosts (the same :class:`~preflight.gather.Gatherer`,
  with the run's ``--fanout`` divided between the shards, so a node never sees more at once);
* phase two runs here, in the controller, as it always does, but the transport it gets for a
  host is a proxy: each command goes to the shard that holds that host's connection, runs there
  and comes back (:class:`ShardTransport`).  Phase two's plans need every host's facts; its SSH
  work does not need to be in the process that makes them.

Hosts behind one jump host go to one shard: a bastion carries one shared connection, and its
handshake cap (:mod:`preflight.transport.ssh`) holds for the whole run only if one process owns it.

Messages are pickles on a private socketpair between this process and its forked children.
The shards ignore Ctrl-C: the controller asks them for what they gathered so far, then ends them.
"""

from __future__ import annotations

import gc
import itertools
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from multiprocessing.connection import Pipe

from .facts import HostFacts
from .forked import exit_child
from .gather import Gatherer, GatherSettings, Progress
from .transport import RunResult, TransportError

# A reply may come this long after the command's own timeout before the shard counts as stuck.
REPLY_GRACE_S = 30.0
_TICK_S = 0.5


def shard_hosts(hosts, processes: int) -> list[list]:
    """Split ``hosts`` into at most ``processes`` shards of about equal size; the hosts reached
    through one jump host stay together (largest group first, each to the smallest shard)."""
    groups: dict[str, list] = {}
    for host in hosts:
        groups.setdefault(f"jump:{host.jump_host}" if host.jump_host else f"host:{host.name}", []).append(host)
    shards: list[list] = [[] for _ in range(max(1, min(processes, len(groups))))]
    for group in sorted(groups.values(), key=len, reverse=True):
        min(shards, key=len).extend(group)
    return [s for s in shards if s]


class ShardFailed(TransportError):
    def __init__(self, message: str):
        super().__init__("lost", message)


class _Shard:
    """The controller's end of one shard: its process, its link, and the calls waiting on it."""

    def __init__(self, index: int, pid: int, link, hosts, outputs):
        self.index, self.pid, self.link, self.hosts, self.outputs = index, pid, link, hosts, outputs
        self.facts: dict[str, HostFacts] = {}
        self.phase_one_done = threading.Event()
        self.progress = (0, {})  # (hosts done, {host: seconds running}) as the shard last said
        self.dead: str | None = None
        self._send_lock = threading.Lock()
        self._pending: dict[int, list] = {}  # call id -> [event, ok, value]
        self._ids = itertools.count(1)
        self._reader = threading.Thread(target=self._read, daemon=True, name=f"preflight-shard-{index}")

    def start_reading(self) -> None:
        self._reader.start()  # once every shard is forked: no thread of ours is copied into a child

    def _read(self) -> None:
        try:
            while True:
                message = self.link.recv()
                kind = message[0]
                if kind == "reply":
                    _, call, ok, value = message
                    waiting = self._pending.pop(call, None)
                    if waiting is not None:
                        waiting[1:] = [ok, value]
                        waiting[0].set()
                elif kind == "facts":
                    facts = HostFacts.from_json(message[1], self.outputs)
                    self.facts[facts.host] = facts
                elif kind == "tick":
                    self.progress = (message[1], message[2])
                elif kind == "phase_one_failed":  # its hosts get this as their error (_collect)
                    self.dead = f"the gathering process {self.index + 1} ({self.pid}) failed: {message[1]}"
                elif kind == "phase_one_done":
                    self.phase_one_done.set()
        except (EOFError, OSError):
            pass
        with self._send_lock:  # no call is added to _pending unseen from here on
            self.dead = self.dead or f"the gathering process {self.index + 1} ({self.pid}) ended unexpectedly"
            pending, self._pending = self._pending, {}
        self.phase_one_done.set()
        for waiting in pending.values():
            waiting[1:] = [False, ("lost", self.dead)]
            waiting[0].set()

    def call(self, op: str, *args, wait: float):
        """Run ``op`` in the shard and return its value; its exception is raised here."""
        call = next(self._ids)
        waiting = [threading.Event(), False, None]
        try:
            with self._send_lock:
                if self.dead:
                    raise ShardFailed(self.dead)
                self._pending[call] = waiting
                self.link.send((op, call) + args)
        except (OSError, ValueError) as exc:
            self._pending.pop(call, None)
            raise ShardFailed(f"the gathering process {self.index + 1} cannot be reached: {exc}") from None
        if not waiting[0].wait(wait):
            self._pending.pop(call, None)
            raise TransportError("timeout", f"no answer from gathering process {self.index + 1} within {wait:.0f}s")
        _, ok, value = waiting
        if ok:
            return value
        kind, message = value
        raise _exception(kind, message)

    def send(self, message) -> None:
        try:
            with self._send_lock:
                self.link.send(message)
        except (OSError, ValueError):
            pass


def _exception(kind: str, message: str) -> BaseException:
    # The categories phase two tells apart (TransportError, OSError, EOFError); others as they were.
    if kind == "EOFError":
        return EOFError(message)
    if kind == "OSError":
        return OSError(message)
    if kind.startswith("RuntimeError:"):
        return RuntimeError(message)
    return TransportError(kind, message)


def _describe(exc: BaseException) -> tuple[str, str]:
    if isinstance(exc, TransportError):
        return exc.kind, str(exc)
    if isinstance(exc, EOFError):
        return "EOFError", str(exc)
    if isinstance(exc, OSError):
        return "OSError", str(exc)
    return "RuntimeError:" + type(exc).__name__, f"{type(exc).__name__}: {exc}"


class ShardTransport:
    """A host's transport as phase two sees it: each call runs in the shard holding the connection."""

    def __init__(self, shard: _Shard, host: str, settings: GatherSettings):
        self.shard, self.host, self.settings = shard, host, settings

    def connect(self) -> None:
        pass  # connected in the shard by phase one; a later call reconnects there if needed

    def run(self, command: str, timeout: float, max_bytes: int) -> RunResult:
        return self.shard.call("run", self.host, command, timeout, max_bytes,
                               wait=timeout + self.settings.connect_timeout + REPLY_GRACE_S)

    def start(self, command: str) -> "ShardProcess":
        handle = self.shard.call("start", self.host, command, wait=self.settings.connect_timeout + REPLY_GRACE_S)
        return ShardProcess(self.shard, handle)

    def close(self) -> None:
        pass  # the shard closes its connections when it ends


class ShardProcess:
    def __init__(self, shard: _Shard, handle: int):
        self.shard, self.handle = shard, handle

    def readline(self, timeout: float) -> str | None:
        try:
            return self.shard.call("readline", self.handle, timeout, wait=timeout + REPLY_GRACE_S)
        except TransportError:
            return None

    def close(self) -> None:
        try:
            self.shard.call("close", self.handle, wait=REPLY_GRACE_S)
        except TransportError:
            pass


class ShardedGatherer:
    """:class:`~preflight.gather.Gatherer`'s interface, with the connections in ``processes`` shards."""

    def __init__(self, settings: GatherSettings, outputs=None, processes: int = 2):
        self.settings = settings
        self.outputs = outputs
        self.processes = max(1, min(processes, settings.fanout))
        self.shards: list[_Shard] = []
        self._owner: dict[str, _Shard] = {}
        self.partial: dict[str, HostFacts] = {}
        self.cpu_s: list[float] = []  # each shard's CPU seconds, once it has ended

    def transport(self, host):
        return ShardTransport(self._owner[host.name], host.name, self.settings)

    def gather(self, hosts, specs, progress: Progress | None = None, params_for=None) -> dict[str, HostFacts]:
        hosts = list(hosts)
        groups = shard_hosts(hosts, self.processes)
        fanout = max(1, self.settings.fanout // len(groups))
        sys.stdout.flush()
        sys.stderr.flush()
        gc.freeze()  # a forked child's collector would otherwise copy every inherited page
        try:
            for index, group in enumerate(groups):
                parent_end, child_end = Pipe()
                pid = os.fork()
                if pid == 0:
                    parent_end.close()
                    for shard in self.shards:
                        shard.link.close()
                    _serve(child_end, replace(self.settings, fanout=fanout), group, specs, params_for)  # never returns
                child_end.close()
                shard = _Shard(index, pid, parent_end, group, self.outputs)
                self.shards.append(shard)
                for h in group:
                    self._owner[h.name] = shard
        finally:
            gc.unfreeze()
        for shard in self.shards:
            shard.start_reading()
        try:
            self._wait_phase_one(len(hosts), progress)
        except KeyboardInterrupt:
            self._collect_partial()
            raise
        self._collect(hosts)
        return dict(self.partial)

    def _wait_phase_one(self, total: int, progress: Progress | None) -> None:
        for shard in self.shards:
            while not shard.phase_one_done.wait(0.25):  # short waits: Ctrl-C is not held up
                if progress:
                    running: dict = {}
                    for s in self.shards:
                        running.update(s.progress[1])
                    progress(sum(len(s.facts) if s.phase_one_done.is_set() else s.progress[0] for s in self.shards),
                             total, running)

    def _collect(self, hosts) -> None:
        for shard in self.shards:
            self.partial.update(shard.facts)
        for host in hosts:
            if host.name not in self.partial:
                shard = self._owner[host.name]
                self.partial[host.name] = HostFacts(
                    host=host.name, address=host.address, reachable=False, error_kind="lost",
                    error=f"{shard.dead or 'the gathering process handed over no facts'} before this host's "
                          f"facts came back")

    def _collect_partial(self) -> None:
        """Ctrl-C: what each shard has finished so far."""
        for shard in self.shards:
            try:
                done = shard.call("partial", wait=5)
            except (TransportError, OSError):
                continue
            for data in done:
                self.partial[data["host"]] = HostFacts.from_json(data, self.outputs)

    def close(self) -> None:
        """End the shards (they close their connections) and note each one's CPU seconds."""
        for shard in self.shards:
            shard.send(("exit",))
        deadline = time.monotonic() + 10
        for shard in self.shards:
            usage = None
            while time.monotonic() < deadline:
                try:
                    pid, _, usage = os.wait4(shard.pid, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid:
                    break
                usage = None
                time.sleep(0.02)
            else:
                usage = _kill(shard.pid)
            if usage is not None:
                self.cpu_s.append(usage.ru_utime + usage.ru_stime)
            shard.link.close()
        self.shards = []


def _kill(pid: int):
    try:
        os.kill(pid, signal.SIGKILL)
        return os.wait4(pid, 0)[2]
    except (ProcessLookupError, ChildProcessError):
        return None


# -- the shard's side ---------------------------------------------------------------------------


def _serve(link, settings: GatherSettings, hosts, specs, params_for) -> None:
    """A shard's whole life: phase one on ``hosts``, then the controller's calls until "exit"."""
    code = 70
    try:
        # The controller decides what Ctrl-C means and asks for the facts; a terminal's SIGINT
        # reaches this process too.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _ShardServer(link, settings, hosts, specs, params_for).serve()
        code = 0
    finally:
        exit_child(code)


class _ShardServer:
    def __init__(self, link, settings, hosts, specs, params_for):
        self.link = link
        self.hosts = {h.name: h for h in hosts}
        self.specs, self.params_for = specs, params_for
        self.gatherer = Gatherer(settings)
        self.processes: dict[int, object] = {}
        self.handles = itertools.count(1)
        self.lock = threading.Lock()

    def send(self, message) -> None:
        with self.lock:
            self.link.send(message)

    def serve(self) -> None:
        threading.Thread(target=self.phase_one, daemon=True, name="preflight-shard-phase-one").start()
        try:
            while True:
                message = self.link.recv()
                if message[0] == "exit":
                    break
                threading.Thread(target=self.answer, args=(message,), daemon=True,
                                 name="preflight-shard-call").start()
        except (EOFError, OSError):
            pass  # the controller went away: end, closing the connections
        finally:
            for process in list(self.processes.values()):
                _close_quietly(process)
            self.gatherer.close()

    def phase_one(self) -> None:
        last = [0.0]

        def tick(done, total, running):
            now = time.monotonic()
            if now - last[0] >= _TICK_S:
                last[0] = now
                slowest = dict(sorted(running.items(), key=lambda kv: -kv[1])[:3])
                self.send(("tick", done, slowest))

        try:
            facts = self.gatherer.gather(list(self.hosts.values()), self.specs, tick,
                                         params_for=self.params_for)
            for one in facts.values():
                self.send(("facts", one.raw_json()))
            self.send(("phase_one_done",))
        except (EOFError, OSError):
            pass
        except Exception as exc:  # noqa: BLE001 - a bug here must not leave the controller waiting forever
            try:
                self.send(("phase_one_failed", f"{type(exc).__name__}: {exc}"))
                self.send(("phase_one_done",))
            except (EOFError, OSError):
                pass

    def answer(self, message) -> None:
        op, call, *args = message
        try:
            ok, value = True, getattr(self, "op_" + op)(*args)
        except BaseException as exc:  # noqa: BLE001 - raised again in the controller
            ok, value = False, _describe(exc)
        try:
            self.send(("reply", call, ok, value))
        except (EOFError, OSError):
            pass

    def op_run(self, host, command, timeout, max_bytes):
        return self.gatherer.transport(self.hosts[host]).run(command, timeout, max_bytes)

    def op_start(self, host, command):
        process = self.gatherer.transport(self.hosts[host]).start(command)
        handle = next(self.handles)
        self.processes[handle] = process
        return handle

    def op_readline(self, handle, timeout):
        return self.processes[handle].readline(timeout)

    def op_close(self, handle):
        process = self.processes.pop(handle, None)
        if process is not None:
            process.close()

    def op_partial(self):
        return [f.raw_json() for f in dict(self.gatherer.partial).values()]


def _close_quietly(process) -> None:
    try:
        process.close()
    except Exception:  # noqa: BLE001 - closing is best effort
        pass
