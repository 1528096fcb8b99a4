"""Gathering: one probe per host over a bounded pool, each host under a deadline.

Phase one runs the generated probe script on every host (one SSH connection and one
session each).  Phase two (:mod:`preflight.activeprobe`) reuses those connections
for the cross-node probes built from phase one's facts.
"""

from __future__ import annotations

import resource
import threading
import time
from dataclasses import dataclass
from typing import Callable

from .facts import FactSpec, HostFacts, SharedOutputs
from .pool import run_bounded
from .probe import DEFAULT_CAP, build_script, new_nonce, parse_probe_output
from .results import shortened
from .transport import TransportError
from .transport.local import LocalTransport
from .transport.ssh import SshContext, SshSettings, SshTransport


# Descriptors a gathered host can hold at once: its connection's socket and, while phase two
# waits on them, channels (a pipe each) for a listener and a probe; plus the run's own files.
FILES_PER_HOST = 4
FILES_BASE = 256


def raise_open_files_limit(hosts: int) -> str | None:
    """Raise this process's soft open-files limit (often 1024) towards its hard limit, so that
    every host's connection can stay open until phase two ends.  Returns a warning when the hard
    limit is too low for ``hosts``; the hosts past it would fail with "Too many open files"."""
    need = FILES_BASE + FILES_PER_HOST * hosts
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return None
    target = need if hard == resource.RLIM_INFINITY else min(need, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        target = soft
    if target < need:
        return (f"the open-files limit of this process ({target}, hard limit {hard}) is below the ~{need} "
                f"that {hosts} hosts' connections need; hosts past it fail with 'Too many open files'. "
                f"Raise it (ulimit -n {need}; LimitNOFILE= for a service) or split the inventory")
    return None


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

    def __init__(self, settings: GatherSettings, outputs: SharedOutputs | None = None):
        self.settings = settings
        self.outputs = outputs  # the run's store of equal outputs (each kept and parsed once)
        self.ssh = SshContext(SshSettings(connect_timeout=settings.connect_timeout,
                                          accept_new_host_keys=settings.accept_new_host_keys))
        self.transports: dict[str, object] = {}
        self.partial: dict[str, HostFacts] = {}  # phase one's results so far (kept on Ctrl-C)
        self._lock = threading.Lock()

    def transport(self, host):
        with self._lock:
            if host.name not in self.transports:
                self.transports[host.name] = (LocalTransport(host.name) if host.connection == "local"
                                              else SshTransport(host, self.ssh))
            return self.transports[host.name]

    # -- phase one -------------------------------------------------------------------
    def gather(self, hosts, specs: list[FactSpec], progress: Progress | None = None,
               params_for: Callable[[object], dict[str, str]] | None = None) -> dict[str, HostFacts]:
        """Phase one.  ``params_for(host)`` gives the ``PF_*`` values that host's probe exports."""
        nonce = new_nonce()
        commands = [s.probe_command() for s in specs]

        def probe(host, left):
            script = build_script(commands, nonce, self.settings.command_timeout, self.settings.output_cap,
                                  params_for(host) if params_for else None)
            return self._probe(host, script, nonce, left)

        return self.run_all(hosts, probe, progress)

    def _probe(self, host, script: str, nonce: str, left: float) -> HostFacts:
        started = time.monotonic()
        transport = self.transport(host)
        transport.connect()
        # The whole stream is bounded too: every command's stdout and stderr, base64'd, plus framing.
        budget = self.settings.output_cap * 4 + (1 << 20)
        result = transport.run("bash -c " + _quote(script), max(left - (time.monotonic() - started), 1.0), budget)
        probe = parse_probe_output(result.stdout, nonce, self.settings.output_cap)
        raw = self.outputs.keep(probe.outputs) if self.outputs else probe.outputs
        facts = HostFacts(host=host.name, address=host.address, raw=raw, shared=self.outputs,
                          command_timeout=self.settings.command_timeout)
        if result.ended == "lost" and not probe.complete:
            facts.error_kind = "lost"
            facts.error = ("the SSH connection was lost in the middle of the probe (sshd died or the node went "
                           "away); facts gathered before that are kept")
        elif result.truncated and not probe.complete:
            facts.error = (f"the probe's output passed its {budget >> 20} MiB bound (commands printing megabytes each: "
                           f"every command's output is cut at {self.settings.output_cap >> 20} MiB, the whole "
                           f"stream at this bound); the rest was dropped; facts read before it are kept")
        elif result.exit_code is None and not probe.complete and _jump_cause(transport) is not None:
            # The jump host stalled near the end of this host's time: that is the cause, not the node.
            facts.error_kind = "lost"  # cluster.reachable: "logged in, then <the jump host's failure>"
            facts.error = f"{_jump_cause(transport)}; facts gathered before that are kept"
        elif result.exit_code is None and not probe.complete:
            facts.error_kind = "deadline"
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

        def task(host):
            t0 = time.monotonic()
            try:
                return work(host, settings.host_timeout)
            except TransportError as exc:
                return HostFacts(host=host.name, address=host.address, reachable=False, error=shortened(str(exc)),
                                 error_kind=exc.kind, gather_s=time.monotonic() - t0)
            except Exception as exc:  # noqa: BLE001 - one host's surprise must not stop the run
                return HostFacts(host=host.name, address=host.address, reachable=False,
                                 error=shortened(f"{type(exc).__name__}: {exc}"), gather_s=time.monotonic() - t0)

        def abandon(host, elapsed):
            transport = self.transports.get(host.name)
            # In the background: closing a connection carried by a jump host that stopped reading
            # waits until that jump host is given up (see SshContext), and the pool must go on.
            _close_in_background([transport])
            cause = _jump_cause(transport)
            if cause is not None:  # the jump host stalled: that is the cause, not this host
                return HostFacts(host=host.name, address=host.address, reachable=False, gather_s=elapsed,
                                 error_kind=cause.kind, error=shortened(f"{transport.label}: {cause}"))
            return HostFacts(host=host.name, address=host.address, reachable=False, gather_s=elapsed,
                             error_kind="timeout",
                             error=f"no complete answer within --host-timeout {settings.host_timeout:g}s "
                                   f"(connection abandoned)")

        # The probe itself stops at the deadline; the pool's own deadline is the backstop for
        # a connection stuck inside the SSH library.
        self.partial = {}
        return run_bounded(hosts, task, workers=settings.fanout, deadline=settings.host_timeout + 5,
                           on_timeout=abandon, on_tick=progress, key=lambda h: h.name, results=self.partial)

    def close(self) -> None:
        """Close every connection, waiting at most CLOSE_WAIT_S for the targets' closes: one
        behind a stalled jump host cannot send its close until the jump host's connection is
        shut, which ``self.ssh.close()`` then does (and that ends the waiting closes too)."""
        transports, self.transports = list(self.transports.values()), {}
        _close_in_background(transports).join(CLOSE_WAIT_S)
        self.ssh.close()


# How long Gatherer.close waits for the targets' connections to close (a thousand healthy ones
# take a second or two) before it shuts the jump hosts' connections, which ends any still waiting.
CLOSE_WAIT_S = 10.0


def _jump_cause(transport):
    """Why the jump host ``transport`` goes through was given up, or None (no jump host, local)."""
    return getattr(transport, "jump_failure", lambda: None)()


def _close_in_background(transports) -> threading.Thread:
    """Close ``transports`` one after another in a daemon thread (returned, started)."""
    def close_all():
        for transport in transports:
            _close_quietly(transport)

    closer = threading.Thread(target=close_all, daemon=True, name="preflight-close")
    closer.start()
    return closer


def _close_quietly(transport) -> None:
    if transport is None:
        return
    try:
        transport.close()
    except Exception:  # noqa: BLE001 - closing is best effort
        pass


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"
