"""Building SSH connections leaves the run's shared fabric Config alone (preflight.transport.ssh)."""

from __future__ import annotations

import sys
import threading

import invoke.config

from preflight.inventory import Host
from preflight.transport.ssh import SshContext, SshSettings


def test_a_new_connection_does_not_rewrite_the_shared_config(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh/config: the run's default Config
    ctx = SshContext(SshSettings())
    shared = ctx.fabric_config(None)  # made (and merged) once per run
    merges = []
    original = invoke.config.Config.merge
    monkeypatch.setattr(invoke.config.Config, "merge", lambda self: (merges.append(self), original(self))[1])
    conn, gate = ctx.connection(Host(name="n1", address="10.0.0.1"), "10.0.0.1", "root", 22, None, "n1")
    assert merges == []  # fabric alone re-merges the Config it was given, once per connection
    assert gate is None and conn.inline_ssh_env is True  # fabric's default still reaches the connection
    assert "inline_ssh_env" not in shared._modifications


def test_connections_built_side_by_side_all_see_the_config(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    ctx = SshContext(SshSettings())
    errors = []

    def build(i):
        try:
            for j in range(60):
                name = f"n{i}-{j}"
                conn, _ = ctx.connection(Host(name=name, address=name), name, "root", 22, None, name)
                assert conn.gateway is None
        except Exception as exc:  # noqa: BLE001 - collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=build, args=(i,)) for i in range(8)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # threads take turns often, as a loaded controller's do
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
