"""Gathering: one probe per host over a bounded pool, each host under a deadline.

Phase one runs the generated probe script on every host (one SSH connection and one
session each).  Phase two (:mod:`preflight.activeprobe`) reuses those connections
for the cross-node probes built from phase one's facts.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Callable

from .facts import FactSpec, HostFacts
from .probe import DEFAULT_CAP, build_script, new_nonce, parse_probe_output
from .transport import TransportError
from .transport.local import LocalTransport
from .transport.ssh import SshContext, SshSettings, SshTransport


@dataclass(frozen=True)
class GatherSettings:
    fanout: int = 32
    host_timeout: float = 60.0
    command_timeout: float = 10.0
    connect_timeout: float = 10.0
    accept_new_host_keys: bool = False
    output_cap: int = DEFAULT_CAP


Progress = Callable[[int, int, dict], None]  # (done, total, {host: seconds running})


class Gatherer:
    """Owns the transports of one run, so phase two can reuse phase one's connections."""

    def __init__(self, settings: GatherSettings):
        self.settings = settings
        self.ssh = SshContext(SshSettings(connect_timeout=settings.connect_timeout,
                                          accept_new_host_keys=settings.accept_new_host_keys))
        self.transports: dict[str, object] = {}
        self._lock = threading.Lock()

    def transport(self, host):
        with self._lock:
            if host.name not in self.transports:
                self.transports[host.name] = (LocalTransport(host.name) if host.connection == "local"
                                              else SshTransport(host, self.ssh))
            return self.transports[host.name]

    # -- phase one -------------------------------------------------------------------
    def gather(self, hosts, specs: list[FactSpec], progress: Progress | None = None) -> dict[str, HostFacts]:
        nonce = new_nonce()
        script = build_script([s.probe_command() for s in specs], nonce, self.settings.command_timeout,
                              self.settings.output_cap)
        return self.run_all(hosts, lambda host, left: self._probe(host, script, nonce, left), progress)

    def _probe(self, host, script: str, nonce: str, left: float) -> HostFacts:
        started = time.monotonic()
        transport = self.transport(host)
        transport.connect()
        # The whole stream is bounded too: every command's stdout and stderr, base64'd, plus framing.
        budget = self.settings.output_cap * 4 + (1 << 20)
        result = transport.run("bash -c " + _quote(script), max(left - (time.monotonic() - started), 1.0), budget)
        probe = parse_probe_output(result.stdout, nonce, self.settings.output_cap)
        facts = HostFacts(host=host.name, address=host.address, raw=probe.outputs,
                          command_timeout=self.settings.command_timeout)
        if result.exit_code is None and not probe.complete:
            facts.error = (f"the probe did not finish within --host-timeout {self.settings.host_timeout:g}s; "
                           f"facts gathered before the deadline are kept")
        elif not probe.complete:
            stderr = result.stderr.decode("utf-8", errors="replace").strip().splitlines()
            facts.error = ("the probe script stopped early (exit code "
                           f"{result.exit_code}{': ' + stderr[-1][:200] if stderr else ''})")
        facts.gather_s = time.monotonic() - started
        return facts

    # -- the pool --------------------------------------------------------------------
    def run_all(self, hosts, work, progress: Progress | None = None) -> dict[str, HostFacts]:
        """Run ``work(host, seconds_left)`` on every host, at most ``fanout`` at once.

        A host that raises becomes ``reachable=False`` with the error's message; a host
        still running past its deadline is abandoned (its connection closed) with an
        error saying so, and the run goes on.
        """
        settings = self.settings
        results: dict[str, HostFacts] = {}
        started: dict[str, float] = {}
        lock = threading.Lock()

        def task(host):
            t0 = time.monotonic()
            with lock:
                started[host.name] = t0
            try:
                return work(host, settings.host_timeout)
            except TransportError as exc:
                return HostFacts(host=host.name, address=host.address, reachable=False, error=str(exc),
                                 error_kind=exc.kind, gather_s=time.monotonic() - t0)
            except Exception as exc:  # noqa: BLE001 - one host's surprise must not stop the run
                return HostFacts(host=host.name, address=host.address, reachable=False,
                                 error=f"{type(exc).__name__}: {exc}", gather_s=time.monotonic() - t0)

        pool = ThreadPoolExecutor(max_workers=max(1, settings.fanout), thread_name_prefix="preflight-gather")
        try:
            pending = {pool.submit(task, h): h for h in hosts}
            total = len(pending)
            while pending:
                done, _ = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
                for fut in done:
                    host = pending.pop(fut)
                    results[host.name] = fut.result()
                now = time.monotonic()
                for fut, host in list(pending.items()):
                    t0 = started.get(host.name)
                    if t0 is not None and now - t0 > settings.host_timeout + 2:
                        pending.pop(fut)
                        results[host.name] = HostFacts(
                            host=host.name, address=host.address, reachable=False, gather_s=now - t0,
                            error_kind="timeout",
                            error=f"no complete answer within --host-timeout {settings.host_timeout:g}s "
                                  f"(connection abandoned)")
                        _close_quietly(self.transports.get(host.name))
                if progress:
                    running = {h.name: now - started[h.name] for h in pending.values() if h.name in started}
                    progress(total - len(pending), total, running)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        return results

    def close(self) -> None:
        for transport in self.transports.values():
            _close_quietly(transport)
        self.ssh.close()


def _close_quietly(transport) -> None:
    if transport is None:
        return
    try:
        transport.close()
    except Exception:  # noqa: BLE001 - closing is best effort
        pass


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"
