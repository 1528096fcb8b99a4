"""ssh_config Include, expanded as OpenSSH expands it (paramiko ignores the directive)."""
from __future__ import annotations

import paramiko
import pytest

from preflight.inventory import Host
from preflight.transport import TransportError
from preflight.transport.ssh import SshContext, SshSettings
from preflight.transport.sshconfig import MAX_DEPTH, SshConfigError, expanded_text


def _lookup(path, name):
    return paramiko.SSHConfig.from_text(expanded_text(str(path))).lookup(name)


def test_an_included_alias_is_found_with_its_port_user_and_jump_host(tmp_path):
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "10-nodes.conf").write_text(
        "Host incalias\n  HostName 10.0.0.7\n  Port 2222\n  User ops\n  ProxyJump bastion\n")
    (tmp_path / "conf.d" / "notes.txt~").write_text("Host incalias\n  Port 1\n")  # the glob does not match it
    cfg = tmp_path / "config"
    cfg.write_text(f'Include {tmp_path}/conf.d/*.conf\nHost *\n  ServerAliveInterval 30\n')
    found = _lookup(cfg, "incalias")
    assert (found["hostname"], found["port"], found["user"], found["proxyjump"]) == ("10.0.0.7", "2222", "ops", "bastion")
    assert found["serveraliveinterval"] == "30"


def test_lines_after_an_include_are_back_in_the_includes_own_block(tmp_path):
    """The included file ends inside its own Host block; the outer file's next lines are global again."""
    (tmp_path / "nodes").write_text("Host node-07\n  Port 2207\n")
    cfg = tmp_path / "config"
    cfg.write_text(f"Include {tmp_path}/nodes\nUser everyone\n")
    assert _lookup(cfg, "other")["user"] == "everyone"
    assert _lookup(cfg, "node-07")["port"] == "2207"


def test_relative_tilde_quoted_and_missing_includes(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    (home / ".ssh" / "work conf").write_text("Host w1\n  Port 2001\n")
    (home / ".ssh" / "extra").write_text("Host w2\n  Port 2002\n")
    cfg = tmp_path / "config"
    cfg.write_text('Include "work conf" ~/.ssh/extra /nonexistent/*.conf\n')  # relative: under ~/.ssh
    assert _lookup(cfg, "w1")["port"] == "2001" and _lookup(cfg, "w2")["port"] == "2002"


def test_an_include_loop_is_one_clear_error(tmp_path):
    cfg = tmp_path / "config"
    cfg.write_text(f"Include {cfg}\n")
    with pytest.raises(SshConfigError, match=f"nested more than {MAX_DEPTH} levels"):
        expanded_text(str(cfg))
    # Through the transport: a config error naming the file, not a crash.
    host = Host(name="n1", address="n1", ssh_config=str(cfg))
    with pytest.raises(TransportError) as exc:
        SshContext(SshSettings()).connection(host, "n1", "root", 22, None, "n1")
    assert exc.value.kind == "config" and str(cfg) in str(exc.value)


def test_the_transport_connects_an_included_alias_to_its_real_address(tmp_path):
    (tmp_path / "inc.conf").write_text("Host incalias\n  HostName 10.0.0.9\n  Port 2209\n")
    (tmp_path / "config").write_text(f"Include {tmp_path}/inc.conf\n")
    host = Host(name="incalias", address="incalias", ssh_config=str(tmp_path / "config"))
    conn, _ = SshContext(SshSettings()).connection(host, "incalias", None, None, None, "incalias")
    assert (conn.host, conn.port) == ("10.0.0.9", 2209)


def test_an_include_inside_a_host_block(tmp_path):
    """Inlined, an included file's own `Host *` under `Host bastion` applied to every host (node-01
    got the bastion's user and port). Options alone join the block; blocks of its own are refused."""
    (tmp_path / "options.conf").write_text("User admin\nPort 2222\n")
    (tmp_path / "blocks.conf").write_text("Host *\n  User admin\n  Port 2222\n")
    cfg = tmp_path / "config"
    cfg.write_text(f"Host bastion\n  Include {tmp_path}/options.conf\nHost node-*\n  User trainer\n")
    assert (_lookup(cfg, "bastion")["user"], _lookup(cfg, "bastion")["port"]) == ("admin", "2222")
    assert _lookup(cfg, "node-01")["user"] == "trainer" and "port" not in _lookup(cfg, "node-01")
    cfg.write_text(f"Host bastion\n  Include {tmp_path}/blocks.conf\nHost node-*\n  User trainer\n")
    with pytest.raises(SshConfigError, match="has Host or Match blocks of its own"):
        expanded_text(str(cfg))
    cfg.write_text(f"Host *\n  Include {tmp_path}/blocks.conf\n")  # under Host *: read as at the top
    assert _lookup(cfg, "node-01")["user"] == "admin"
