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


# -- ProxyJump as ssh_config and the inventory write it: resolved by SshContext, never recursing ---

import pytest  # noqa: E402

import preflight.transport.ssh as ssh_module  # noqa: E402
from preflight.transport import TransportError  # noqa: E402


@pytest.fixture
def no_network(monkeypatch):
    opened = []
    monkeypatch.setattr(ssh_module, "open_connection", lambda conn, timeout: opened.append(conn))
    return opened


def _jumped(tmp_path, config: str, target="node-01", jump_host=None):
    path = tmp_path / "ssh_config"
    path.write_text(config)
    host = Host(name=target, address=target, ssh_config=str(path), jump_host=jump_host)
    conn, _ = SshContext(SshSettings()).connection(host, target, "root", 22, jump_host, target)
    return conn


@pytest.mark.parametrize("config", [
    "Host bastion\n  ProxyJump none\n\nHost *\n  ProxyJump bastion\n",  # OpenSSH's usual exception
    "Host *\n  ProxyJump bastion\n",  # no exception: the bastion itself goes direct
    "Host bastion\n  ProxyJump NONE\nHost *\n  ProxyJump bastion\n",
], ids=["proxyjump-none", "bastion-matches-its-own-pattern", "none-in-capitals"])
def test_ssh_config_proxyjump_reaches_the_bastion_directly(tmp_path, no_network, config):
    conn = _jumped(tmp_path, config)
    assert conn.host == "node-01" and conn.gateway is not None
    assert conn.gateway.host == "bastion" and conn.gateway.gateway is None
    assert no_network == [conn.gateway]  # only the bastion was connected (the target is the caller's)


def test_a_proxyjump_chain_in_ssh_config_goes_through_every_hop_in_order(tmp_path, no_network):
    """OpenSSH reaches the target through the last hop, the last through the one before, and so
    on; only the last hop was used (straight to it, skipping x1 and x2)."""
    conn = _jumped(tmp_path, "Host node-01\n  ProxyJump x1,admin@x2:2222,x3\n")
    hops = []
    gateway = conn.gateway
    while gateway is not None:
        hops.append((gateway.user, gateway.host, gateway.port))
        gateway = gateway.gateway
    assert [h[1] for h in hops] == ["x3", "x2", "x1"]
    assert hops[1][0] == "admin" and hops[1][2] == 2222
    assert [c.host for c in no_network] == ["x1", "x2", "x3"]  # opened from the first hop on


def test_a_proxyjump_loop_is_one_config_error(tmp_path, no_network):
    with pytest.raises(TransportError) as caught:
        _jumped(tmp_path, "Host node-01\n  ProxyJump a\nHost a\n  ProxyJump b\nHost b\n  ProxyJump a\n")
    assert caught.value.kind == "config"
    assert "ProxyJump loop in ssh_config: node-01 -> a -> b -> a" in str(caught.value)
    assert no_network == []


@pytest.mark.parametrize("jump, host, port, user", [
    ("[2001:db8::1]:2222", "2001:db8::1", 2222, "root"),
    ("admin@[2001:db8::1]", "2001:db8::1", None, "admin"),
    ("ssh://admin@bastion:2222", "bastion", 2222, "admin"),
])
def test_jump_hosts_in_every_written_form(tmp_path, no_network, jump, host, port, user):
    conn = _jumped(tmp_path, "", jump_host=jump)
    assert (conn.gateway.host, conn.gateway.user) == (host, user)
    assert conn.gateway.port == (port or 22)
