"""Transports: how a command reaches a host.  One small class per transport behind
one interface, like pytest-testinfra's backends:

* :class:`~preflight.transport.local.LocalTransport` — a subprocess on the controller;
* :class:`~preflight.transport.ssh.SshTransport` — fabric/paramiko, wrapped so that
  host keys are verified and every wait is bounded.
"""

from __future__ import annotations

import select
from dataclasses import dataclass
from typing import Protocol


@dataclass
class RunResult:
    stdout: bytes
    stderr: bytes
    exit_code: int | None  # None: no exit status (see ``ended``)
    truncated: bool = False  # more than max_bytes arrived; the rest was dropped
    ended: str = "exit"  # "exit", "deadline" (we stopped waiting), "lost" (the connection went away)


class TransportError(Exception):
    """The host could not be reached or logged into; ``kind`` sorts the cause."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind  # "unreachable", "auth", "hostkey", "timeout", "config"


class RemoteProcess(Protocol):
    def readline(self, timeout: float) -> str | None: ...
    def close(self) -> None: ...


class Transport(Protocol):
    def connect(self) -> None: ...
    def run(self, command: str, timeout: float, max_bytes: int) -> RunResult: ...
    def start(self, command: str) -> RemoteProcess: ...
    def close(self) -> None: ...


def wait_readable(streams, timeout: float) -> list:
    """The ``streams`` (file descriptors, or objects with ``fileno()`` such as a paramiko
    Channel) that are readable within ``timeout`` seconds: data, EOF or an error.

    ``poll``, not ``select``: select refuses any descriptor above 1023 ("filedescriptor out of
    range in select()"), and a controller holding a thousand connections has such descriptors
    (a socket per connection, a pipe per channel waited on)."""
    poller = select.poll()
    by_fd = {}
    for stream in streams:
        fd = stream if isinstance(stream, int) else stream.fileno()
        by_fd[fd] = stream
        poller.register(fd, select.POLLIN)
    return [by_fd[fd] for fd, _ in poller.poll(max(timeout, 0) * 1000)]
