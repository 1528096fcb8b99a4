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
from tests.factsets import fake_agent  # noqa: E402
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


@pytest.mark.parametrize("command, user, port", [
    ("ssh -W %h:%p -q admin@bastion", "admin", 22), ("ssh -q -l ops -p 2222 -W %h:%p bastion", "ops", 2222)])
def test_an_ssh_config_proxycommand_through_a_bastion_is_its_shared_jump_connection(tmp_path, no_network, command,
                                                                                    user, port):
    """`ProxyCommand ssh -W %h:%p bastion` in ssh_config started one `ssh` to the bastion per target,
    uncapped: at a fan-out of 32 a bastion's default MaxStartups 10:30:100 refuses some."""
    ctx = SshContext(SshSettings())
    (tmp_path / "ssh_config").write_text(f"Host node-*\n  ProxyCommand {command}\n")
    gateways = set()
    for name in ("node-01", "node-02"):
        host = Host(name=name, address=name, ssh_config=str(tmp_path / "ssh_config"))
        conn, gate = ctx.connection(host, name, "root", 22, None, name)
        assert gate is not None and conn.gateway.host == "bastion"
        assert (conn.gateway.user, conn.gateway.port) == (user, port)
        gateways.add(id(conn.gateway))
    assert len(gateways) == 1 and {id(c) for c in no_network} == gateways  # one bastion connection for both
    # Any other ProxyCommand is left to run as written.
    (tmp_path / "ssh_config").write_text("Host node-*\n  ProxyCommand nc -X connect -x proxy:3128 %h %p\n")
    host = Host(name="node-03", address="node-03", ssh_config=str(tmp_path / "ssh_config"))
    conn, gate = SshContext(SshSettings()).connection(host, "node-03", "root", 22, None, "node-03")
    assert gate is None and "nc -X connect" in str(conn.gateway)


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
    # The inventory takes each form too (ssh:// was refused as "invalid user 'ssh://admin'").
    from preflight.inventory import load_inventory

    (tmp_path / "inv.yaml").write_text(f'hosts:\n  - {{name: n1, jump_host: "{jump}"}}\n')
    assert load_inventory(str(tmp_path / "inv.yaml")).hosts[0].jump_host == jump


# -- a jump host that fails, and known_hosts files as OpenSSH writes them ----------------------

import socket  # noqa: E402

import paramiko  # noqa: E402

from preflight.transport.ssh import HostKeyStore, SshTransport, _KnownHostsPolicy, open_connection  # noqa: E402


def _tcp_server(on_accept):
    """A listening socket on 127.0.0.1 whose accepted connections go to ``on_accept``."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            on_accept(conn)

    threading.Thread(target=serve, daemon=True).start()
    return server


@pytest.fixture
def mute_bastion():
    """A TCP port that accepts connections and never says a word (no SSH banner)."""
    accepted = []
    server = _tcp_server(accepted.append)
    yield server.getsockname()[1], accepted
    server.close()
    for conn in accepted:
        conn.close()


def test_a_dead_jump_host_is_tried_once_and_named_for_every_target(tmp_path, monkeypatch, mute_bastion):
    """Every target behind a mute bastion retried it in turn (a connect timeout each): the later
    ones ran out of --host-timeout with an error that did not name the jump host."""
    monkeypatch.setenv("HOME", str(tmp_path))
    port, accepted = mute_bastion
    ctx = SshContext(SshSettings(connect_timeout=1))
    errors = []
    for i in range(4):
        host = Host(name=f"n{i}", address=f"10.9.9.{i}", jump_host=f"admin@127.0.0.1:{port}")
        with pytest.raises(TransportError) as exc:
            SshTransport(host, ctx).connect()
        errors.append(exc.value)
    assert len(accepted) == 1  # one attempt at the bastion for the four targets
    for e in errors:
        assert e.kind == "unreachable" and f"jump host admin@127.0.0.1:{port}" in str(e), str(e)
        assert "no SSH banner" in str(e)


def test_a_server_closing_before_its_banner_is_not_called_a_timeout(tmp_path, monkeypatch):
    """paramiko says "Error reading SSH protocol banner" for a wait that ran out and for a closed
    socket alike; a server that closes at once (MaxStartups, hosts.deny) read as "no banner within
    10s" while the run took under a second (found by review)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    server = _tcp_server(lambda conn: conn.close())
    try:
        host = Host(name="n1", address="127.0.0.1", port=server.getsockname()[1])
        with pytest.raises(TransportError) as exc:
            SshTransport(host, SshContext(SshSettings(connect_timeout=5))).connect()
    finally:
        server.close()
    assert exc.value.kind == "unreachable"
    assert "closed the connection before sending its SSH banner" in str(exc.value), str(exc.value)
    assert "within" not in str(exc.value)


class _FakeConn:
    """What open_connection touches on a fabric Connection."""

    def __init__(self, port):
        self.host, self.port, self.gateway, self.connect_kwargs = "127.0.0.1", port, None, {}
        self.opened, self.client = [], type("C", (), {"close": lambda self: None})()

    def open(self):
        self.opened.append(self.connect_kwargs["sock"])


def test_reopening_a_dropped_connection_uses_a_new_socket(mute_bastion):
    """The first connection's socket stayed in connect_kwargs and was reused closed: a jump host
    that dropped once failed every later target with 'Bad file descriptor'."""
    port, _ = mute_bastion
    conn = _FakeConn(port)
    open_connection(conn, 1)
    first = conn.connect_kwargs["sock"]
    first.close()  # the peer went away; paramiko closed it
    open_connection(conn, 1)
    assert conn.opened[1] is not first and conn.opened[1].fileno() != -1
    conn.opened[1].close()


def _key_line(name, key):
    return f"{name} {key.get_name()} {key.get_base64()}\n"


def test_known_hosts_marker_lines_are_honoured_not_fatal(tmp_path):
    """One @cert-authority line (common in /etc/ssh/ssh_known_hosts) made paramiko's reader raise,
    and every host was 'unreachable: InvalidHostKey'."""
    good, revoked = paramiko.RSAKey.generate(1024), paramiko.RSAKey.generate(1024)
    path = tmp_path / "known_hosts"
    path.write_text("@cert-authority *.example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE\n"
                    + _key_line("node-01", good) + _key_line("node-02", revoked)
                    + f"@revoked * {revoked.get_name()} {revoked.get_base64()}\n"
                    + "node-03 ssh-rsa not-base64!\n")
    store = HostKeyStore()
    assert store.lookup((str(path),), "node-01") == {good.get_name(): good}
    assert store.lookup((str(path),), "node-02") == {}  # a revoked key is not a known one
    policy = _KnownHostsPolicy(store, (str(path),), accept_new=True, label="node-02")
    with pytest.raises(TransportError) as exc:
        policy.missing_host_key(None, "node-02", revoked)  # refused even with --accept-new-host-keys
    assert exc.value.kind == "hostkey" and "@revoked" in str(exc.value)


def test_a_key_revoked_in_another_known_hosts_file_is_not_a_known_one(tmp_path):
    """@revoked in /etc/ssh/ssh_known_hosts, the key still listed in ~/.ssh/known_hosts: OpenSSH
    refuses it; preloaded as known, paramiko accepted it without asking the policy."""
    key = paramiko.RSAKey.generate(1024)
    user, system = tmp_path / "known_hosts", tmp_path / "ssh_known_hosts"
    user.write_text(_key_line("node-02", key))
    system.write_text(f"@revoked * {key.get_name()} {key.get_base64()}\n")
    store = HostKeyStore()
    assert store.lookup((str(user), str(system)), "node-02") == {}
    policy = _KnownHostsPolicy(store, (str(user), str(system)), accept_new=True, label="node-02")
    with pytest.raises(TransportError) as exc:
        policy.missing_host_key(None, "node-02", key)
    assert exc.value.kind == "hostkey" and "@revoked" in str(exc.value)


def test_a_host_named_in_capitals_is_looked_up_as_openssh_does_in_lower_case(tmp_path, monkeypatch):
    """Inventory name Node-01, known_hosts line node-01 (OpenSSH lowercases the name): the key was
    not found, so --accept-new-host-keys recorded whatever key the host presented, a changed one."""
    monkeypatch.setenv("HOME", str(tmp_path))
    known, other = paramiko.RSAKey.generate(1024), paramiko.RSAKey.generate(1024)
    path = tmp_path / "known_hosts"
    path.write_text(_key_line("node-01", known))
    ctx = SshContext(SshSettings(accept_new_host_keys=True))
    host = Host(name="Node-01", address="Node-01", known_hosts=str(path))
    conn, _ = ctx.connection(host, "Node-01", "root", 22, None, "Node-01")
    assert conn.client.get_host_keys().lookup("Node-01") is not None  # preloaded: paramiko compares itself
    policy = _KnownHostsPolicy(ctx.hostkeys, (str(path),), accept_new=True, label="Node-01")
    with pytest.raises(TransportError) as exc:
        policy.missing_host_key(None, "NODE-01", paramiko.ECDSAKey.generate())
    assert exc.value.kind == "hostkey"
    assert path.read_text() == _key_line("node-01", known)  # nothing recorded
    policy.missing_host_key(None, "Node-02", other)  # a new host: recorded as OpenSSH would
    assert path.read_text().endswith(_key_line("node-02", other))


def test_a_wildcard_known_hosts_line_is_a_known_key_never_a_new_one(tmp_path):
    """known_hosts naming hosts by pattern ([10.0.0.*]:2222, *.cluster): paramiko matched names
    exactly, so the host read as unknown, and --accept-new-host-keys recorded whatever key it
    presented, a changed one included, which OpenSSH refuses."""
    listed, other = paramiko.RSAKey.generate(1024), paramiko.RSAKey.generate(1024)
    path = tmp_path / "known_hosts"
    path.write_text(_key_line("[10.0.0.*]:2222,*.cluster,!bad.cluster", listed))
    store = HostKeyStore()
    assert store.lookup((str(path),), "[10.0.0.7]:2222") == {listed.get_name(): listed}
    assert store.lookup((str(path),), "node-01.cluster") == {listed.get_name(): listed}
    assert store.lookup((str(path),), "bad.cluster") == {}  # a negated pattern wins
    assert store.lookup((str(path),), "[10.0.0.7]:22") == {}
    # Through the connection as it is built: the listed key is preloaded for paramiko to compare.
    host = Host(name="n1", address="10.0.0.7", port=2222, known_hosts=str(path))
    ctx = SshContext(SshSettings(accept_new_host_keys=True))
    conn, _ = ctx.connection(host, "10.0.0.7", "root", 2222, None, "n1")
    assert conn.client.get_host_keys().lookup("[10.0.0.7]:2222")[listed.get_name()] == listed
    # A key of another type for a host the pattern lists is refused too, not accepted.
    with pytest.raises(TransportError) as exc:
        _KnownHostsPolicy(store, (str(path),), accept_new=True, label="n1").missing_host_key(
            None, "[10.0.0.7]:2222", paramiko.ECDSAKey.generate())
    assert exc.value.kind == "hostkey"
    assert path.read_text().count("\n") == 1  # nothing recorded
    assert other.get_base64() not in path.read_text()


def test_ssh_config_host_key_alias_is_the_name_keys_are_looked_up_and_recorded_under(tmp_path):
    key = paramiko.RSAKey.generate(1024)
    kh = tmp_path / "known_hosts"
    kh.write_text(_key_line("gpu-node-7", key))
    (tmp_path / "ssh_config").write_text("Host n7\n  HostName 10.0.0.7\n  Port 2222\n  HostKeyAlias gpu-node-7\n")
    host = Host(name="n7", address="n7", ssh_config=str(tmp_path / "ssh_config"), known_hosts=str(kh))
    ctx = SshContext(SshSettings(accept_new_host_keys=True))
    conn, _ = ctx.connection(host, "n7", "root", None, None, "n7")
    name = "[10.0.0.7]:2222"
    assert conn.client.get_host_keys().lookup(name)[key.get_name()] == key
    # An unknown host under an alias is recorded under the alias, as OpenSSH records it.
    kh.write_text("")
    ctx = SshContext(SshSettings(accept_new_host_keys=True))
    conn, _ = ctx.connection(host, "n7", "root", None, None, "n7")
    conn.client._policy.missing_host_key(conn.client, name, key)
    assert kh.read_text().startswith("gpu-node-7 ssh-rsa ")


def test_an_unknown_host_key_on_another_port_suggests_keyscan_with_that_port(tmp_path):
    store = HostKeyStore()
    policy = _KnownHostsPolicy(store, (str(tmp_path / "kh"),), accept_new=False, label="n1")
    with pytest.raises(TransportError) as exc:
        policy.missing_host_key(None, "[10.0.0.1]:2222", paramiko.RSAKey.generate(1024))
    assert "ssh-keyscan -t ssh-rsa -p 2222 10.0.0.1 >> " in str(exc.value)


def test_a_jump_host_on_the_targets_address_but_another_port_is_still_used(tmp_path, no_network):
    host = Host(name="n1", address="127.0.0.1", port=2201, jump_host="admin@127.0.0.1:2200")
    conn, _ = SshContext(SshSettings()).connection(host, "127.0.0.1", "root", 2201, host.jump_host, "n1")
    assert conn.gateway is not None and conn.gateway.port == 2200


def test_a_key_accepted_by_another_connection_meanwhile_is_not_called_tampering(tmp_path):
    """--accept-new-host-keys: two connections to a new host (a jump host that is also a target);
    the second was refused as 'reinstalled or intercepted' for the key the first had just accepted."""
    key = paramiko.RSAKey.generate(1024)
    store = HostKeyStore()
    first = _KnownHostsPolicy(store, (str(tmp_path / "kh"),), accept_new=True, label="n1")
    second = _KnownHostsPolicy(store, (str(tmp_path / "kh"),), accept_new=True, label="n1")
    first.missing_host_key(None, "n1", key)
    second.missing_host_key(None, "n1", key)  # no error
    with pytest.raises(TransportError) as exc:  # another key of that type is still refused
        second.missing_host_key(None, "n1", paramiko.RSAKey.generate(1024))
    assert exc.value.kind == "hostkey"
    assert (tmp_path / "kh").read_text().count("n1 ssh-rsa") == 1


class _HungChannel:
    """A channel whose exec request the server never answers (paramiko waits for it unbounded)."""

    def __init__(self):
        self.closed, self._answer = False, threading.Event()

    def exec_command(self, command):
        self._answer.wait()
        raise paramiko.SSHException("Channel closed.")

    def close(self):
        self.closed = True
        self._answer.set()


def test_a_command_sshd_never_starts_ends_at_its_deadline(monkeypatch):
    """run() checked its deadline only after exec_command returned: a hung sshd held it forever."""
    from preflight.transport.ssh import exec_within

    chan = _HungChannel()
    assert exec_within(chan, "true", 0.2) is False and chan.closed
    transport = SshTransport(Host(name="n1", address="n1"), SshContext(SshSettings(connect_timeout=0.2)))
    monkeypatch.setattr(transport, "_open_channel", _HungChannel)
    result = transport.run("true", timeout=0.2, max_bytes=100)
    assert result.ended == "deadline" and result.exit_code is None
    with pytest.raises(TransportError) as exc:
        transport.start("listen")
    assert exc.value.kind == "timeout" and "did not start the command" in str(exc.value)


def test_the_bastion_itself_on_its_own_port_goes_direct(tmp_path, no_network):
    (tmp_path / "ssh_config").write_text("Host *\n  ProxyJump bastion\n")
    host = Host(name="bastion", address="bastion", port=2222, ssh_config=str(tmp_path / "ssh_config"))
    conn, _ = SshContext(SshSettings()).connection(host, "bastion", "root", 2222, None, "bastion")
    assert conn.gateway is None


@pytest.mark.parametrize("config, expected", [
    ("", ("~/.ssh/known_hosts", "/etc/ssh/ssh_known_hosts")),
    ("Host *\n  UserKnownHostsFile /k/a /k/b\n", ("/k/a", "/k/b", "/etc/ssh/ssh_known_hosts")),
    ("Host *\n  GlobalKnownHostsFile /k/g\n", ("~/.ssh/known_hosts", "/k/g")),
])
def test_known_hosts_files_are_read_as_openssh_reads_them(tmp_path, config, expected):
    """UserKnownHostsFile in ssh_config dropped /etc/ssh/ssh_known_hosts, which OpenSSH still reads."""
    import os

    (tmp_path / "ssh_config").write_text(config or "Host *\n  User root\n")
    host = Host(name="n1", address="n1", ssh_config=str(tmp_path / "ssh_config"))
    ctx = SshContext(SshSettings())
    conn, _ = ctx.connection(host, "n1", "root", 22, None, "n1")
    assert ctx.known_hosts_paths(host, conn.ssh_config) == tuple(os.path.expanduser(p) for p in expected)


def test_an_unknown_host_under_a_host_ca_says_certificates_are_not_checked(tmp_path):
    """A fleet that trusts a host CA has no per-host lines: the error said only 'not in known_hosts',
    which reads like a broken node when `ssh` to it works."""
    path = tmp_path / "known_hosts"
    path.write_text("@cert-authority *.cluster.example,!bad.cluster.example,[10.0.0.?]:2222 ssh-ed25519 "
                    "AAAAC3NzaC1lZDI1NTE5AAAAIE\n")
    store = HostKeyStore()
    key = paramiko.RSAKey.generate(1024)

    def error(name):
        policy = _KnownHostsPolicy(store, (str(path),), accept_new=False, label="n1")
        with pytest.raises(TransportError) as exc:
            policy.missing_host_key(None, name, key)
        assert exc.value.kind == "hostkey" and "ssh-keyscan" in str(exc.value)
        return str(exc.value)

    assert f"{path} trusts a host certificate authority (@cert-authority)" in error("node-7.CLUSTER.example")
    assert "does not check host certificates" in error("[10.0.0.5]:2222")
    assert "@cert-authority" not in error("bad.cluster.example")  # negated
    assert "@cert-authority" not in error("[10.0.0.15]:2222")  # ? is one character
    assert "@cert-authority" not in error("other.example")


def test_an_unknown_host_key_with_a_known_hosts_file_that_does_not_exist_says_so(tmp_path):
    """A mistyped known_hosts path reads as an empty file: the error looked like a new node's."""
    key = paramiko.RSAKey.generate(1024)
    missing = str(tmp_path / "known_hostz")
    policy = _KnownHostsPolicy(HostKeyStore(), (missing,), accept_new=False, label="n1")
    with pytest.raises(TransportError) as exc:
        policy.missing_host_key(None, "10.0.0.5", key)
    assert f"{missing} does not exist" in str(exc.value)
    present = tmp_path / "known_hosts"
    present.write_text("")
    policy = _KnownHostsPolicy(HostKeyStore(), (str(present),), accept_new=False, label="n1")
    with pytest.raises(TransportError) as exc:
        policy.missing_host_key(None, "10.0.0.5", key)
    assert "does not exist" not in str(exc.value)


def test_known_hosts_dev_null_says_how_to_run_with_it():
    key = paramiko.RSAKey.generate(1024)
    policy = _KnownHostsPolicy(HostKeyStore(), ("/dev/null",), accept_new=False, label="n1")
    with pytest.raises(TransportError) as exc:
        policy.missing_host_key(None, "10.0.0.5", key)
    assert exc.value.kind == "hostkey" and "known_hosts is /dev/null, which holds no keys" in str(exc.value)
    assert "--accept-new-host-keys" in str(exc.value)
    # With it, the key is trusted for the run (appending to /dev/null is harmless).
    _KnownHostsPolicy(HostKeyStore(), ("/dev/null",), accept_new=True, label="n1").missing_host_key(None, "10.0.0.5", key)


def test_openssh_default_files_missing_on_a_fresh_controller_are_not_news(tmp_path, monkeypatch):
    from preflight.transport import ssh
    key = paramiko.RSAKey.generate(1024)
    missing = str(tmp_path / "known_hosts")
    monkeypatch.setattr(ssh, "_DEFAULT_FILES", {missing})
    policy = _KnownHostsPolicy(HostKeyStore(), (missing,), accept_new=False, label="n1")
    with pytest.raises(TransportError) as exc:
        policy.missing_host_key(None, "10.0.0.5", key)
    assert "does not exist" not in str(exc.value) and "ssh-keyscan" in str(exc.value)


def test_a_name_lookup_that_hangs_is_bounded_by_the_connect_timeout(tmp_path, monkeypatch):
    """getaddrinfo takes no timeout: an unreachable DNS server held every host for resolv.conf's
    retries before --connect-timeout even started, and the error did not say it was DNS."""
    monkeypatch.setenv("HOME", str(tmp_path))
    release = threading.Event()

    def stuck(*args, **kwargs):
        release.wait(30)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(ssh_module.socket, "getaddrinfo", stuck)
    ctx = SshContext(SshSettings(connect_timeout=0.3))
    try:
        with pytest.raises(TransportError) as exc:
            SshTransport(Host(name="n1", address="node-01.cluster.example"), ctx).connect()
    finally:
        release.set()
    assert exc.value.kind == "unreachable"
    assert "name lookup of node-01.cluster.example took longer than 0.3s" in str(exc.value)
    assert "/etc/resolv.conf" in str(exc.value)


def test_a_name_that_does_not_resolve_and_a_refused_port_keep_their_own_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(ssh_module.socket, "getaddrinfo", lambda *a, **k: (_ for _ in ()).throw(
        socket.gaierror(socket.EAI_NONAME, "Name or service not known")))
    with pytest.raises(TransportError) as exc:
        SshTransport(Host(name="n1", address="nowhere.example"), SshContext(SshSettings(connect_timeout=1))).connect()
    assert "name does not resolve (Name or service not known)" in str(exc.value)
    monkeypatch.undo()
    monkeypatch.setenv("HOME", str(tmp_path))
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there
    with pytest.raises(TransportError) as exc:
        SshTransport(Host(name="n1", address="127.0.0.1", port=port), SshContext(SshSettings(connect_timeout=1))).connect()
    assert "connection refused" in str(exc.value)


def test_handshakes_through_one_bastion_are_capped_whatever_the_fanout(tmp_path, monkeypatch):
    """Issue 6: with a jump host, at most GATEWAY_HANDSHAKES targets shake hands through it at once
    (the e2e bastion test checked the constant only)."""
    import time as _time

    from preflight.transport.ssh import GATEWAY_HANDSHAKES

    lock, now, peak = threading.Lock(), [0], [0]

    def slow_open(conn, timeout):
        if conn.host == "bastion":
            return
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        _time.sleep(0.5)  # long enough for every waiting thread to queue at the cap, even on a loaded box
        with lock:
            now[0] -= 1
        raise socket.timeout("timed out")  # each target then fails, after holding its turn

    monkeypatch.setattr(ssh_module, "open_connection", slow_open)
    ctx = SshContext(SshSettings(connect_timeout=5))
    hosts = [Host(name=f"node-{i:02d}", address=f"node-{i:02d}", jump_host="root@bastion") for i in range(24)]
    errors = []

    def one(host):
        try:
            SshTransport(host, ctx).connect()
        except TransportError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(h,)) for h in hosts]  # a fan-out of 24
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(errors) == 24 and peak[0] == GATEWAY_HANDSHAKES == 8, peak  # 8: the README's figure


# -- a jump host that stops answering is given up, and named for every target behind it ---------

import time  # noqa: E402

class _StalledJumpTransport:
    """A jump host's paramiko Transport whose peer stopped reading: a request never gets through."""

    def __init__(self, sock):
        self.sock, self.requests = sock, 0

    def is_active(self):
        return self.sock.fileno() != -1

    def global_request(self, kind, data=None, wait=True):
        self.requests += 1
        threading.Event().wait()  # blocked on paramiko's send lock, as with a full TCP window


def test_a_jump_host_that_stops_answering_is_given_up_and_named_for_its_targets(tmp_path, monkeypatch):
    """A jump host whose sshd was SIGSTOPped hung the whole run: every thread writing through its
    connection waited forever on paramiko's send lock (found by review)."""
    monkeypatch.setattr(ssh_module, "JUMP_CHECK_S", 0.05)
    ours, theirs = socket.socketpair()
    try:
        bastion = ssh_module._Connection("bastion", user="root", port=22)
        bastion.transport = _StalledJumpTransport(ours)
        failures = []
        watch = ssh_module._JumpWatch(bastion, "root@bastion", 0.2, failures.append)
        bastion.watch = watch
        target = ssh_module._Connection("node-01", user="root", port=22, gateway=bastion)
        theirs.settimeout(60)
        assert theirs.recv(1) == b""  # the socket was shut down: every writer blocked on it fails
        deadline = time.monotonic() + 60
        while not failures and time.monotonic() < deadline:
            time.sleep(0.02)
        assert failures == [watch.error] and watch.error.kind == "unreachable"
        assert "jump host root@bastion stopped answering" in str(watch.error)
        assert ssh_module.jump_failure(target) is watch.error
        transport = SshTransport(Host(name="node-01", address="node-01"), SshContext(SshSettings()))
        transport._conn = target
        assert transport.jump_failure() is watch.error
    finally:
        ours.close()
        theirs.close()


def test_a_jump_host_that_answers_is_kept(monkeypatch):
    monkeypatch.setattr(ssh_module, "JUMP_CHECK_S", 0.05)
    ours, theirs = socket.socketpair()

    class Answering(_StalledJumpTransport):
        def global_request(self, kind, data=None, wait=True):
            self.requests += 1
            return None  # sshd refuses keepalive@openssh.com: that reply is the sign of life

    try:
        bastion = ssh_module._Connection("bastion", user="root", port=22)
        bastion.transport = Answering(ours)
        watch = ssh_module._JumpWatch(bastion, "root@bastion", 0.2, lambda error: None)
        deadline = time.monotonic() + 60
        while bastion.transport.requests < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        watch.stop()
        assert bastion.transport.requests >= 5 and watch.error is None
        assert ours.fileno() != -1
        ours.setblocking(False)
        with pytest.raises(BlockingIOError):
            theirs.setblocking(False)
            theirs.recv(1)  # not shut down: nothing to read, no EOF
    finally:
        ours.close()
        theirs.close()


def test_a_probe_whose_jump_host_was_given_up_reports_the_jump_host(monkeypatch):
    """A run through a jump host that was given up ends with paramiko's bare EOFError, or as a
    connection "lost" that blames the node: the jump host is the cause to report."""
    bastion = ssh_module._Connection("bastion", user="root", port=22)
    bastion.watch = type("W", (), {"error": TransportError("unreachable", "jump host bastion stopped answering")})()
    transport = SshTransport(Host(name="n1", address="n1"), SshContext(SshSettings(connect_timeout=0.2)))
    transport._conn = ssh_module._Connection("n1", user="root", port=22, gateway=bastion)

    class Broken:
        def exec_command(self, command):
            raise EOFError()

        def close(self):
            raise EOFError()  # the close fails too: it must not hide the cause

    monkeypatch.setattr(transport, "_open_channel", Broken)
    with pytest.raises(TransportError) as exc:
        transport.run("true", timeout=5, max_bytes=100)
    assert str(exc.value) == "n1: jump host bastion stopped answering" and exc.value.kind == "unreachable"


# -- an ssh-agent that never answers is asked once, within the connect timeout, then left out -----

_agent = fake_agent


def test_an_ssh_agent_that_never_answers_is_asked_once_then_left_out(tmp_path, monkeypatch):
    """paramiko asks $SSH_AUTH_SOCK's agent with no timeout, in every login: a hung agent held each
    host for the whole --host-timeout, reported as "cannot log in" with an sshd remedy (found by review)."""
    path, server, accepted = _agent(tmp_path, None)
    monkeypatch.setenv("SSH_AUTH_SOCK", path)
    monkeypatch.setenv("HOME", str(tmp_path))
    try:
        ctx = SshContext(SshSettings(connect_timeout=0.5))
        t0 = time.monotonic()
        conns = [ctx.connection(Host(name=f"n{i}", address=f"n{i}"), f"n{i}", "root", 22, None, f"n{i}")[0]
                 for i in range(3)]
        assert time.monotonic() - t0 < 30
        assert len(accepted) == 1  # asked once per run, not once per host
        assert all(c.connect_kwargs["allow_agent"] is False for c in conns)
        assert f"SSH_AUTH_SOCK={path} did not answer within 0.5s" in ctx.agent_note
        auth = paramiko.AuthenticationException("no key")
        refused = ctx.with_agent_note(TransportError("auth", "authentication refused by n1: no key"), conns[0], auth)
        assert refused.kind == "auth" and f"SSH_AUTH_SOCK={path}" in str(refused)
        assert ctx.with_agent_note(TransportError("unreachable", "n1: refused"), conns[0], OSError()).args[0] == \
            "n1: refused"
        # Not for a second factor (the key was accepted), nor a host with its own identity_file, in
        # the same run: the agent played no part in those.
        from preflight.transport.ssh import SecondFactorRequired

        second = TransportError("auth", "n1 accepted the key but asks for a second factor")
        assert ctx.with_agent_note(second, conns[0], SecondFactorRequired("root")) is second
        key_conn, _ = ctx.connection(Host(name="k", address="k", identity_file=str(tmp_path / "id")), "k", "root", 22,
                                     None, "k")
        assert ctx.with_agent_note(refused_plain := TransportError("auth", "refused by k"), key_conn, auth) is \
            refused_plain
        # A host with its own identity_file never needed the agent (and never asked it).
        keyed = SshContext(SshSettings(connect_timeout=0.5))
        keyed.connection(Host(name="k", address="k", identity_file=str(tmp_path / "id")), "k", "root", 22, None, "k")
        assert len(accepted) == 1 and keyed.agent_note is None
    finally:
        server.close()


def test_an_ssh_agent_that_answers_is_used(tmp_path, monkeypatch):
    path, server, accepted = _agent(tmp_path, b"\x00\x00\x00\x05\x0c\x00\x00\x00\x00")  # no keys
    monkeypatch.setenv("SSH_AUTH_SOCK", path)
    monkeypatch.setenv("HOME", str(tmp_path))
    try:
        ctx = SshContext(SshSettings(connect_timeout=5))
        conn, _ = ctx.connection(Host(name="n1", address="n1"), "n1", "root", 22, None, "n1")
        assert "allow_agent" not in conn.connect_kwargs and ctx.agent_note is None
    finally:
        server.close()


def test_abandoning_a_host_whose_connection_is_still_opening_closes_its_socket(tmp_path, monkeypatch):
    """SshTransport.close did nothing before the login was done: a host abandoned in a handshake
    or login that hung kept its socket (and paramiko's thread) open."""
    monkeypatch.setenv("HOME", str(tmp_path))
    ours, theirs = socket.socketpair()
    try:
        transport = SshTransport(Host(name="n1", address="n1"), SshContext(SshSettings()))
        conn = ssh_module._Connection("n1", user="root", port=22)
        conn.connect_kwargs["sock"] = ours
        transport._opening = conn
        transport.close()
        theirs.settimeout(30)
        assert theirs.recv(1) == b""
    finally:
        ours.close()
        theirs.close()


def test_a_second_factor_is_refused_and_never_prompted_for(monkeypatch):
    """paramiko's SSHClient answered a node's keyboard-interactive prompts with input() on the
    controller's terminal once the key was accepted (found by review)."""
    import builtins

    monkeypatch.setattr(builtins, "input", lambda *a: pytest.fail("prompted on the controller's terminal"))

    class KeyThenMore:
        def auth_publickey(self, username, key):
            return ["keyboard-interactive"]  # the key is accepted, and one more method is wanted

        def auth_interactive(self, username, handler, submethods=""):
            handler("node", "", [("Verification code: ", False)])

        def auth_interactive_dumb(self, username, handler=None, submethods=""):
            return self.auth_interactive(username, lambda t, i, p: [input(q) for q, _ in p])

        def _log(self, *args):
            pass

    conn = ssh_module._Connection("n1", user="root", port=22)
    client = conn.client
    assert isinstance(client, ssh_module._NoPromptClient)
    client._transport = KeyThenMore()
    with pytest.raises(ssh_module.SecondFactorRequired) as exc:
        client._auth("root", None, paramiko.Ed25519Key.generate() if hasattr(paramiko.Ed25519Key, "generate")
                     else paramiko.RSAKey.generate(1024), [], False, False, None)
    error = ssh_module._translate(exc.value, "n1", 10)
    assert error.kind == "auth" and "asks for a second factor or an interactive login" in str(error)
    assert "preflight never prompts" in str(error)
