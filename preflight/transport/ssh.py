"""SSH transport: fabric/paramiko, wrapped where their defaults are unsafe.

fabric out of the box auto-adds unknown host keys and loads no known_hosts, opens one
bastion connection per target, and waits up to an hour for a channel.  Here:

* known_hosts files are parsed once and shared; unknown keys are refused unless the
  operator passed ``--accept-new-host-keys`` (OpenSSH's ``accept-new``), changed keys
  are always refused;
* ``~/.ssh/config`` (or the inventory's ``ssh_config``) is honoured through fabric,
  and a ``ProxyJump`` from it or from the inventory's ``jump_host`` becomes one shared
  gateway connection per bastion, with a cap on concurrent handshakes through it;
* every wait has a bound: connect, banner, auth, channel open, and the run itself.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import shlex
import socket
import threading
import time
from dataclasses import dataclass

import paramiko
from fabric import Config, Connection

from . import RunResult, TransportError, wait_readable
from .sshconfig import SshConfigError, expanded_text

logging.getLogger("paramiko").setLevel(logging.CRITICAL)  # its thread tracebacks are ours to report

DEFAULT_KNOWN_HOSTS = ("~/.ssh/known_hosts", "/etc/ssh/ssh_known_hosts")
GATEWAY_HANDSHAKES = 8  # concurrent new sessions through one bastion (its MaxStartups defaults to 10)
KEEPALIVE_S = 15
# How often an idle connection's paramiko thread wakes: only to send a keepalive that is due
# (a close wakes it at once, see close_connection).  paramiko's default is every 0.1 s.
IDLE_POLL_S = float(KEEPALIVE_S)
# How often a jump host is asked for a sign of life (see _JumpWatch); it has max(3 x this,
# 2 x the connect timeout) to answer.
JUMP_CHECK_S = 5.0


@dataclass(frozen=True)
class SshSettings:
    connect_timeout: float = 10.0
    accept_new_host_keys: bool = False


def _fingerprint(key: paramiko.PKey) -> str:
    return key.fingerprint if hasattr(key, "fingerprint") else key.get_name()


def hostkey_name(address: str, port: int) -> str:
    """How OpenSSH and paramiko name a host in known_hosts."""
    return address if int(port) == 22 else f"[{address}]:{int(port)}"


class HostKeyStore:
    """known_hosts files, each parsed once per run (parsing is quadratic in paramiko)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._files: dict[str, paramiko.HostKeys] = {}
        self._revoked: dict[str, set[tuple[str, str]]] = {}  # path -> {(key type, base64)}
        self._authorities: dict[str, list[str]] = {}  # path -> @cert-authority host patterns
        # path -> [(host patterns, key)]: lines naming hosts by wildcard (*.cluster, 10.0.0.*) or
        # negation, which paramiko's lookup (exact names and hashes only) never matches.
        self._patterns: dict[str, list[tuple[str, paramiko.PKey]]] = {}

    def _load(self, path: str) -> paramiko.HostKeys:
        with self._lock:
            if path not in self._files:
                keys, revoked, authorities, patterns = paramiko.HostKeys(), set(), [], []
                if os.path.exists(path):
                    try:
                        _read_known_hosts(path, keys, revoked, authorities, patterns)
                    except OSError as exc:
                        raise TransportError("config", f"cannot read known_hosts file {path}: {exc}") from None
                self._files[path], self._revoked[path], self._authorities[path] = keys, revoked, authorities
                self._patterns[path] = patterns
            return self._files[path]

    def certified_by(self, paths: tuple[str, ...], name: str) -> str | None:
        """The file whose @cert-authority line covers host ``name``, or None."""
        for path in paths:
            self._load(path)
            if any(_matches_patterns(name, patterns) for patterns in self._authorities[path]):
                return path
        return None

    def revoked(self, paths: tuple[str, ...], key: paramiko.PKey) -> str | None:
        """The file that marks ``key`` @revoked, or None."""
        for path in paths:
            self._load(path)
            if (key.get_name(), key.get_base64()) in self._revoked[path]:
                return path
        return None

    def lookup(self, paths: tuple[str, ...], name: str) -> dict[str, paramiko.PKey]:
        found: dict[str, paramiko.PKey] = {}
        for path in paths:
            self._load(path)
        # As OpenSSH: a key @revoked in any of the files (the global one, most often) is refused,
        # also where another file lists it for the host.
        revoked = set().union(*(self._revoked[path] for path in paths))
        for path in paths:
            entry = self._load(path).lookup(name)
            keys = [entry[keytype] for keytype in entry.keys()] if entry else []
            # A wildcard line counts as OpenSSH counts it: a key it gives for this host that differs
            # from the one presented is a changed key, never a new one to accept.
            keys += [key for patterns, key in self._patterns[path] if _matches_patterns(name, patterns)]
            for key in keys:
                if (key.get_name(), key.get_base64()) not in revoked:
                    found.setdefault(key.get_name(), key)
        return found

    def accept_new(self, path: str, name: str, key: paramiko.PKey) -> None:
        """Record a first-seen key, as OpenSSH's StrictHostKeyChecking=accept-new does."""
        with self._lock:
            keys = self._files.setdefault(path, paramiko.HostKeys())
            keys.add(name, key.get_name(), key)
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(path, "a", encoding="ascii") as fh:
                fh.write(f"{name} {key.get_name()} {key.get_base64()}\n")


def _read_known_hosts(path: str, keys: paramiko.HostKeys, revoked: set, authorities: list, patterns: list) -> None:
    """OpenSSH's known_hosts into ``keys``.  paramiko's own reader stops at the first marker line
    (``@cert-authority`` is common in /etc/ssh/ssh_known_hosts) and every host then failed:
    ``@revoked`` keys are collected and refused, ``@cert-authority`` lines give only their host
    patterns (host certificates are not checked, so such a host is unknown, as without the line,
    and its error says why), and a line that does not parse is skipped, as OpenSSH does."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, raw in enumerate(fh, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("@"):
                fields = line.split()
                if fields[0] == "@revoked" and len(fields) >= 4:
                    revoked.add((fields[2], fields[3]))
                elif fields[0] == "@cert-authority" and len(fields) >= 4:
                    authorities.append(fields[1])
                continue
            try:
                entry = paramiko.hostkeys.HostKeyEntry.from_line(line, lineno)
            except (paramiko.SSHException, paramiko.hostkeys.InvalidHostKey, ValueError):
                continue
            if entry is None:
                continue
            if any(c in line.split()[0] for c in "*?!"):
                patterns.append((line.split()[0], entry.key))
                continue
            for name in entry.hostnames:
                keys.add(name, entry.key.get_name(), entry.key)


class _KnownHostsPolicy(paramiko.MissingHostKeyPolicy):
    """Called by paramiko only for a host absent from the keys we preloaded."""

    def __init__(self, store: HostKeyStore, paths: tuple[str, ...], accept_new: bool, label: str,
                 alias: str | None = None):
        self.store, self.paths, self.accept_new, self.label = store, paths, accept_new, label
        self.alias = alias

    def missing_host_key(self, client, hostname, key):
        # OpenSSH looks a host up (and records it) by its name in lower case: Node-01 is node-01.
        hostname = self.alias or hostname.lower()
        revoked_in = self.store.revoked(self.paths, key)
        if revoked_in:
            raise TransportError("hostkey", f"host key of {self.label} ({hostname}, {key.get_name()} "
                                            f"{_fingerprint(key)}) is marked @revoked in {revoked_in}: refusing "
                                            f"to connect")
        known = self.store.lookup(self.paths, hostname)
        same = known.get(key.get_name())
        if same is not None and same.get_base64() == key.get_base64():
            return  # known since this connection was built: another one accepted it (--accept-new-host-keys)
        if known:  # known, but only with other key types: OpenSSH refuses this too
            raise TransportError(
                "hostkey",
                f"host key of {self.label} ({hostname}) is a {key.get_name()} key but known_hosts only has "
                f"{', '.join(known)} for it: the host may have been reinstalled or intercepted; verify and update "
                f"{self.paths[0]}")
        if self.accept_new:
            self.store.accept_new(os.path.expanduser(self.paths[0]), hostname, key)
            return
        # A fleet that trusts a host CA has no per-host lines: say so, or "not in known_hosts" reads
        # like a broken node when `ssh` to it works.
        ca_file = self.store.certified_by(self.paths, hostname)
        why = (f"; {ca_file} trusts a host certificate authority (@cert-authority) for it, and preflight "
               f"does not check host certificates, only host keys" if ca_file else "")
        # A mistyped known_hosts path reads as an empty file: say so, or it looks like a new node
        # (OpenSSH's own files missing on a fresh controller are no news).
        absent = [p for p in self.paths if not os.path.exists(os.path.expanduser(p))]
        if absent and len(absent) == len(self.paths) and not set(absent) <= _DEFAULT_FILES:
            why += f"; {' and '.join(absent)} {'does' if len(absent) == 1 else 'do'} not exist"
        if self.paths and all(os.path.realpath(os.path.expanduser(p)) == os.devnull for p in self.paths):
            # Ansible's `-o UserKnownHostsFile=/dev/null` (with StrictHostKeyChecking=no): preflight checks keys.
            raise TransportError(
                "hostkey", f"host key of {self.label} ({hostname}) cannot be verified: known_hosts is /dev/null, "
                           f"which holds no keys; run with --accept-new-host-keys to trust each node's key on first "
                           f"contact, or point known_hosts (UserKnownHostsFile) at a real file")
        raise TransportError(
            "hostkey",
            f"host key of {self.label} ({hostname}, {key.get_name()} {_fingerprint(key)}) is not in known_hosts "
            f"({', '.join(self.paths)}){why}: verify it, then add it (ssh-keyscan -t {key.get_name()}"
            f"{_port_option(hostname)} {hostname.strip('[').split(']')[0]} >> {self.paths[0]}) or run with "
            f"--accept-new-host-keys")


# OpenSSH's own files, each with its "2" twin: their absence on a fresh controller is no news.
_DEFAULT_FILES = {os.path.expanduser(p + twin) for p in DEFAULT_KNOWN_HOSTS for twin in ("", "2")}


def _matches_patterns(name: str, patterns: str) -> bool:
    """OpenSSH's host pattern list (``*.example.com,!bad.example.com``): a negated match wins.
    A bare host on port 22 is written without brackets, as in known_hosts."""
    hit = False
    for pattern in patterns.split(","):
        negated = pattern.startswith("!")
        # Only * and ? are wildcards: "[10.0.0.1]:2222" is a literal name, not a character class.
        regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern.lstrip("!"))
        if re.fullmatch(regex, name, re.IGNORECASE):
            if negated:
                return False
            hit = True
    return hit


def _port_option(hostname: str) -> str:
    """`` -p 2222`` for a known_hosts name ``[host]:2222``: ssh-keyscan then records it under that name."""
    return f" -p {hostname.rsplit(':', 1)[1]}" if hostname.startswith("[") and "]:" in hostname else ""


def _translate(exc: BaseException, label: str, timeout: float, conn=None) -> TransportError:
    if isinstance(exc, TransportError):
        return exc
    if isinstance(exc, paramiko.BadHostKeyException):
        # The entry as known_hosts files it ([10.0.0.7]:2222, a HostKeyAlias), in the file it is in:
        # paramiko names the bare host, which `ssh-keygen -R` does not find on another port.
        name, path = getattr(conn, "hostkey_entry", None) or (exc.hostname, None)
        default = path is None or path == os.path.expanduser(DEFAULT_KNOWN_HOSTS[0])
        return TransportError(
            "hostkey",
            f"WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED for {label}! The {exc.key.get_name()} key it "
            f"presented ({_fingerprint(exc.key)}) differs from the one in known_hosts "
            f"({_fingerprint(exc.expected_key)}). Someone could be eavesdropping (man-in-the-middle), or the "
            f"host was reinstalled. Refusing to connect; verify the new key and remove the old entry with "
            f"ssh-keygen -R {shlex.quote(name)}" + ("" if default else f" -f {shlex.quote(path)}"))
    if isinstance(exc, SecondFactorRequired):
        return TransportError("auth", f"{label} accepted the key but asks for a second factor or an interactive "
                                      f"login (keyboard-interactive or password, e.g. sshd's AuthenticationMethods "
                                      f"publickey,keyboard-interactive), which a non-interactive checker cannot "
                                      f"give; preflight never prompts. Let the checker's user log in with its key "
                                      f"alone (a Match block in the node's sshd_config)")
    if isinstance(exc, paramiko.AuthenticationException):
        return TransportError("auth", f"authentication refused by {label}: {exc} (check user and identity_file, "
                                      f"and the node's authorized_keys)")
    if isinstance(exc, socket.gaierror):
        return TransportError("unreachable", f"{label}: name does not resolve ({exc.strerror or exc})")
    if isinstance(exc, _LookupTimeout):
        return TransportError("unreachable", f"{label}: {exc}")
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return TransportError("unreachable", f"{label}: no answer within {timeout:g}s (connect timed out)")
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        return TransportError("unreachable", f"{label}: connection refused (sshd not running, or the port is "
                                             f"closed)")
    if isinstance(exc, ConnectionRefusedError):
        return TransportError("unreachable", f"{label}: connection refused (sshd not running, or the port is "
                                             f"closed)")
    if isinstance(exc, paramiko.SSHException):
        text = str(exc)
        if text == "No authentication methods available":  # paramiko found no key to offer at all
            return TransportError("auth", f"{label}: no key to log in with (no identity_file in the inventory, "
                                          f"no usable ssh-agent, no key in ~/.ssh); give identity_file")
        # "No existing session": the handshake died before authentication (paramiko's words).
        if "banner" in text.lower() and isinstance(exc.__context__, (EOFError, ConnectionResetError)):
            # paramiko says "Error reading SSH protocol banner" for both; the closed socket is the
            # exception it was handling, a wait that ran out is a timeout.
            return TransportError("unreachable", f"{label}: the server closed the connection before sending its "
                                                 f"SSH banner (sshd refusing new connections: MaxStartups reached, "
                                                 f"a hosts.deny or fail2ban rule; or not an SSH server)")
        if "banner" in text.lower() or "No existing session" in text:
            return TransportError("unreachable", f"{label}: TCP port open but no SSH banner or handshake "
                                                 f"within {timeout:g}s (sshd overloaded or MaxStartups reached, or "
                                                 f"not an SSH server)")
        return TransportError("unreachable", f"{label}: SSH handshake failed: {text}")
    if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
        return TransportError("config", f"{label}: the controller ran out of open files "
                                        f"({exc.strerror}); raise `ulimit -n` where the checker runs")
    if isinstance(exc, OSError) and exc.filename:
        # A local file (the identity_file, most often): which one, and it is not the node's fault.
        return TransportError("config", f"{label}: {exc.strerror or exc}: {exc.filename} (check identity_file "
                                        f"and the other paths in the inventory)")
    if isinstance(exc, OSError):
        return TransportError("unreachable", f"{label}: {exc.strerror or exc}")
    return TransportError("unreachable", f"{label}: {type(exc).__name__}: {exc}")


class SecondFactorRequired(paramiko.AuthenticationException):
    """The node wants more than the key (keyboard-interactive or a password) to let us in."""


def _refuse_prompt(username, *args, **kwargs):
    raise SecondFactorRequired(username)


class _NoPromptClient(paramiko.SSHClient):
    """paramiko's SSHClient, never prompting on the controller's terminal.

    When a node accepts the key but asks for more (``AuthenticationMethods
    publickey,keyboard-interactive``), SSHClient falls back to ``auth_interactive_dumb``, which
    calls ``input()`` for each of the node's prompts: under ``pytest -s`` that read the operator's
    terminal and sent what was typed to the node.  A non-interactive checker gives no second
    factor; that login is refused instead (:func:`_translate` says why)."""

    def _auth(self, username, *args, **kwargs):
        self._transport.auth_interactive_dumb = _refuse_prompt
        return super()._auth(username, *args, **kwargs)


class _Connection(Connection):
    """fabric's Connection with ``inline_ssh_env`` declared as a plain attribute.

    fabric 3 assigns it in ``__init__`` without declaring it, so invoke's DataProxy stores it in
    the Config the connection was given, the run's *shared* one, and re-merges that Config:
    ``_config = {}``, then refilled.  That cost 5 ms of a connection's 8.6 ms, and a thread
    building another connection meanwhile read an empty Config (``AttributeError: No attribute
    or config key found for 'gateway'``: a healthy node reported unreachable, seen in a 100-node
    run)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # No SSHClient state is set yet but its host key policy, which _guard_host_keys replaces.
        self.client = _NoPromptClient()

    inline_ssh_env = None
    hostkey_entry = None  # (name, known_hosts file) the host's key is filed under; ours, declared alike
    watch = None  # a jump host's connection: its _JumpWatch, once opened
    # Declared, as every attribute set on it must be (see above): set when the hung agent was left out.
    agent_left_out = False

    def get_gateway(self):
        # SshContext resolves ProxyJump itself (one shared, host-key-checked connection per jump
        # host).  fabric's own resolution recurses without end on the usual OpenSSH pattern
        # `Host bastion / ProxyJump none` + `Host * / ProxyJump bastion` ("none" read as a host).
        if "proxyjump" in self.ssh_config:
            return None
        command = self.ssh_config.get("proxycommand")
        if command:
            return None if command.strip().lower() == "none" else command
        return self.config.gateway


def _jump_target(spec: str, label: str) -> tuple[str | None, str, int | None]:
    """(user, host, port) of a jump host as the inventory or ssh_config's ProxyJump writes it
    (``[user@]host[:port]``, IPv6 as ``[addr]:port``, or an ``ssh://`` URI)."""
    from ..inventory import parse_jump_host

    try:
        return parse_jump_host(spec)
    except ValueError as exc:
        raise TransportError("config", f"{label}: jump host {spec!r}: {exc}") from None


def _proxy_command_jump(command: str, host: str, port) -> str | None:
    """The jump host of ssh_config's classic ``ProxyCommand ssh -W %h:%p [-q] [-l user] [-p port]
    bastion`` (paramiko hands it over with %h:%p filled in), else None.  Taken as a ProxyJump, it is
    one shared, host-key-checked connection with its handshakes capped, not one `ssh` per target
    that a bastion's MaxStartups would throttle at a wide fan-out."""
    from ..inventory import _Invalid, _proxy_command

    try:
        words = shlex.split(command)
    except ValueError:
        return None
    target = f"{host}:{port or 22}"
    try:
        return _proxy_command(shlex.join(["%h:%p" if w == target else w for w in words]))
    except (_Invalid, ValueError):
        return None


def _same_endpoint(jump: tuple, target: tuple) -> bool:
    """Whether a jump host (user, host, port) is the target itself; an unset port or user matches
    any (`Host *` / `ProxyJump bastion` reaching the bastion itself on its own port)."""
    (ju, jh, jp), (tu, th, tp) = jump, target
    return jh == th and (jp is None or tp is None or int(jp) == int(tp)) and (ju is None or tu is None or ju == tu)


class _JumpWatch:
    """Asks a jump host for a sign of life every JUMP_CHECK_S (a keepalive that wants a reply, as
    OpenSSH's ServerAliveInterval), and gives the jump host up when none comes in time.

    Every target behind a jump host writes through its one connection.  A jump host that stops
    reading (its sshd stopped, a paused VM, a black hole) fills the TCP window, and paramiko then
    waits without any limit for its send lock, in every thread writing through that connection:
    probes, keepalives and closes alike (a whole run hung so, Ctrl-C included).  Giving up shuts
    the jump host's TCP socket down, which fails every such writer at once; ``error`` then says why
    for each target behind it (:func:`jump_failure`)."""

    def __init__(self, conn: Connection, spec: str, answer_s: float, on_failure):
        self.conn, self.spec, self.answer_s, self.on_failure = conn, spec, answer_s, on_failure
        self.error: TransportError | None = None
        self._stop = threading.Event()
        threading.Thread(target=self._watch, daemon=True, name=f"preflight-jump-watch {spec}").start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        transport = self.conn.transport
        while not self._stop.wait(JUMP_CHECK_S):
            if transport is None or not transport.is_active():
                return
            answered = threading.Event()

            def ask():
                # Returns on the reply (sshd refuses this request: any reply is a sign of life),
                # or once the connection is gone.
                with contextlib.suppress(Exception):
                    transport.global_request("keepalive@openssh.com", wait=True)
                answered.set()

            threading.Thread(target=ask, daemon=True, name=f"preflight-jump-keepalive {self.spec}").start()
            if answered.wait(self.answer_s) or self._stop.is_set() or not transport.is_active():
                continue
            self.error = TransportError(
                "unreachable", f"jump host {self.spec} stopped answering (no reply to a keepalive within "
                               f"{self.answer_s:g}s: its sshd is stopped or overloaded, the machine is paused, or "
                               f"the network to it drops packets); its connection was closed")
            self.on_failure(self.error)
            _give_up(self.conn)
            return


def _give_up(conn: Connection) -> None:
    """End ``conn`` without waiting on its peer: a TCP socket is shut down (every thread blocked
    sending on it fails, its reader wakes); a connection carried by another (a channel) is closed
    in the background, since that close is a message to send."""
    transport = conn.transport
    sock = transport.sock if transport is not None else None
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    else:
        threading.Thread(target=lambda: _suppressed(close_connection, conn), daemon=True,
                         name="preflight-give-up").start()


def _suppressed(fn, *args) -> None:
    with contextlib.suppress(Exception):
        fn(*args)


def jump_failure(conn: Connection | None) -> TransportError | None:
    """Why the jump host ``conn`` goes through was given up (the hop nearest the controller first:
    its stall stalls every hop behind it), or None."""
    hops = []
    gateway = getattr(conn, "gateway", None)
    while isinstance(gateway, Connection):
        hops.append(gateway)
        gateway = gateway.gateway
    for hop in reversed(hops):
        if hop.watch is not None and hop.watch.error is not None:
            return hop.watch.error
    return None


class SshContext:
    """What SSH connections of one run share: host keys, ssh_config, gateways."""

    def __init__(self, settings: SshSettings):
        self.settings = settings
        self.hostkeys = HostKeyStore()
        self._lock = threading.RLock()
        self._configs: dict[str | None, Config] = {}
        self._gateways: dict[tuple, tuple[Connection, threading.Semaphore, threading.Lock]] = {}
        # A jump host that could not be opened: every target behind it gets that error at once,
        # instead of retrying one after another (each a full connect timeout) until the later
        # targets run out of --host-timeout with an error that does not name the jump host.
        self._gateway_failures: dict[tuple, TransportError] = {}
        self._agent_lock = threading.Lock()
        self._agent_answers: bool | None = None  # whether $SSH_AUTH_SOCK's agent answered, once asked
        self.agent_note: str | None = None  # why the agent is not used, for each login that then fails

    def agent_usable(self) -> bool:
        """Whether the ssh-agent at $SSH_AUTH_SOCK answers, asked once per run within the connect
        timeout.  paramiko asks it, in every login, with no timeout at all: an agent that accepts
        and never answers (hung, or a forwarded socket whose far end is gone) held every host for
        the whole --host-timeout, reported as the node's fault."""
        path = os.environ.get("SSH_AUTH_SOCK")
        if not path:
            return True  # no agent: paramiko asks nothing
        with self._agent_lock:
            if self._agent_answers is None:
                timeout = self.settings.connect_timeout
                answer: list = []

                def ask():
                    try:
                        agent = paramiko.Agent()
                        answer.append(len(agent.get_keys()))
                        agent.close()
                    except Exception as exc:  # noqa: BLE001 - any failure: not usable
                        answer.append(exc)

                asking = threading.Thread(target=ask, daemon=True, name="preflight-agent-check")
                asking.start()
                asking.join(timeout)
                self._agent_answers = bool(answer) and not isinstance(answer[0], Exception)
                if not self._agent_answers:
                    why = (f"failed ({answer[0]})" if answer else f"did not answer within {timeout:g}s")
                    self.agent_note = (f"the ssh-agent at SSH_AUTH_SOCK={path} {why}, so its keys were not "
                                       f"tried; restart it (or unset SSH_AUTH_SOCK), or give identity_file "
                                       f"in the inventory")
            return self._agent_answers

    def with_agent_note(self, error: TransportError, conn, exc: BaseException) -> TransportError:
        """A login refused while the agent was left out of it says so: its keys may be the ones that
        work.  Not for a login with identity_file (no agent either way), nor one whose key was
        accepted (a second factor asked)."""
        if (error.kind == "auth" and self.agent_note and getattr(conn, "agent_left_out", False)
                and not isinstance(exc, SecondFactorRequired)):
            return TransportError(error.kind, f"{error}; {self.agent_note}")
        return error

    def fabric_config(self, ssh_config: str | None) -> Config:
        path = ssh_config
        if path is None and os.path.exists(os.path.expanduser("~/.ssh/config")):
            path = os.path.expanduser("~/.ssh/config")
        with self._lock:
            if path not in self._configs:
                if path:
                    if not os.path.exists(path):
                        raise TransportError("config", f"ssh_config file {path} does not exist")
                    # paramiko ignores Include: the text is read with them expanded.
                    try:
                        text = expanded_text(path)
                    except SshConfigError as exc:
                        raise TransportError("config", str(exc)) from None
                    cfg = Config(ssh_config=paramiko.SSHConfig.from_text(text))
                else:
                    cfg = Config(overrides={"load_ssh_configs": False})
                self._configs[path] = cfg
            return self._configs[path]

    def known_hosts_paths(self, host, ssh_options: dict) -> tuple[str, ...]:
        if host.known_hosts:
            return (os.path.expanduser(host.known_hosts),)
        user_files = str(ssh_options.get("userknownhostsfile") or DEFAULT_KNOWN_HOSTS[0]).split()
        # As OpenSSH: UserKnownHostsFile replaces the user's file only; the global one is still read.
        global_files = str(ssh_options.get("globalknownhostsfile") or DEFAULT_KNOWN_HOSTS[1]).split()
        return tuple(os.path.expanduser(p) for p in (*user_files, *global_files))

    def connection(self, host, address: str, user: str | None, port: int | None, gateway_spec: str | None,
                   label: str, chain: tuple[str, ...] = ()) -> tuple[Connection, threading.Semaphore | None]:
        """``chain``: the hosts this connection is a jump host for (a ProxyJump loop is an error)."""
        cfg = self.fabric_config(host.ssh_config)
        kwargs = {
            "banner_timeout": self.settings.connect_timeout,
            "auth_timeout": self.settings.connect_timeout,
            "channel_timeout": self.settings.connect_timeout,
        }
        if host.identity_file:
            kwargs.update(key_filename=[os.path.expanduser(host.identity_file)], look_for_keys=False,
                          allow_agent=False)
        elif not self.agent_usable():
            kwargs.update(allow_agent=False)  # it would hold this login without a limit
        gateway, gate = None, None
        conn = _Connection(address, user=user, port=port, config=cfg, connect_timeout=self.settings.connect_timeout,
                           connect_kwargs=dict(kwargs))
        conn.agent_left_out = not host.identity_file and kwargs.get("allow_agent") is False
        if not gateway_spec and "proxyjump" not in conn.ssh_config and conn.ssh_config.get("proxycommand"):
            gateway_spec = _proxy_command_jump(conn.ssh_config["proxycommand"], conn.host, conn.port)
        # ProxyJump a,b,c: the target is reached through c, c through b, b through a (OpenSSH runs
        # `ssh -J a,b -W target c`): the hops before the last are c's own jump spec.
        hops = [h.strip() for h in (gateway_spec or conn.ssh_config.get("proxyjump") or "").split(",")]
        spec, before = hops[-1], ",".join(hops[:-1]) or None
        jump = _jump_target(spec, label) if spec.lower() not in ("", "none") else None
        # A jump host that is the target itself (`Host *` naming the bastion) means: go direct.
        if jump is not None and not _same_endpoint(jump, (user, address, port)):
            if jump[1] in chain:
                raise TransportError("config", f"{label}: ProxyJump loop in ssh_config: "
                                               f"{' -> '.join((*chain, address, jump[1]))}")
            gateway, gate = self.gateway(host, spec, jump, chain + (address,), before)
            conn = _Connection(address, user=user, port=port, config=cfg, gateway=gateway,
                               connect_timeout=self.settings.connect_timeout, connect_kwargs=dict(kwargs))
        self._guard_host_keys(conn, host, label)
        return conn, gate

    def _guard_host_keys(self, conn: Connection, host, label: str) -> None:
        paths = self.known_hosts_paths(host, conn.ssh_config)
        name = hostkey_name(conn.host, conn.port)
        # ssh_config's HostKeyAlias: the name the host's key is filed (and accepted) under, port and all.
        alias = str(conn.ssh_config.get("hostkeyalias") or "").strip() or None
        # Preloading this host's known keys lets paramiko detect a changed key itself and
        # prefer the known key type in the handshake; a missing key reaches the policy.
        for keytype, key in self.hostkeys.lookup(paths, alias or name.lower()).items():
            conn.client.get_host_keys().add(name, keytype, key)
        conn.client.set_missing_host_key_policy(
            _KnownHostsPolicy(self.hostkeys, paths, self.settings.accept_new_host_keys, label, alias))
        conn.hostkey_entry = (alias or name.lower(), paths[0] if paths else None)  # for a changed key's remedy

    def gateway(self, host, spec: str, jump: tuple[str | None, str, int | None],
                chain: tuple[str, ...] = (), before: str | None = None) -> tuple[Connection, threading.Semaphore]:
        """The shared connection to a jump host; ``before``: the hops in front of it (a chain's)."""
        user, address, port = jump
        key = (user, address, port, host.identity_file, host.ssh_config, host.known_hosts, before)
        with self._lock:
            if key not in self._gateways:
                conn, _ = self.connection(host, address, user, port, before, f"jump host {spec}", chain)
                self._gateways[key] = (conn, threading.Semaphore(GATEWAY_HANDSHAKES), threading.Lock())
            conn, gate, opening = self._gateways[key]
        # One handshake with the bastion, shared by every target behind it.
        with opening:
            if key in self._gateway_failures:
                failed = self._gateway_failures[key]
                raise TransportError(failed.kind, str(failed))  # a new one per target: threads raise it
            if not conn.is_connected:
                try:
                    open_connection(conn, self.settings.connect_timeout)
                except Exception as exc:  # noqa: BLE001 - translated into one precise error
                    error = self.with_agent_note(_translate(exc, f"jump host {spec}", self.settings.connect_timeout,
                                                            conn), conn, exc)
                    self._gateway_failures[key] = error
                    raise error from None
                if conn.watch is not None:
                    conn.watch.stop()  # the connection it watched dropped; this one is new
                # Generous, as OpenSSH's ServerAliveCountMax 3 is: giving a busy jump host up for one
                # slow reply would fail every host behind it.
                conn.watch = _JumpWatch(conn, spec, max(2 * self.settings.connect_timeout, 3 * JUMP_CHECK_S),
                                        lambda error: self._gateway_failures.setdefault(key, error))
        return conn, gate

    def close(self) -> None:
        # In the order they were opened: a jump host in front of another is shut (its TCP socket
        # shut down, which no stalled peer can hold up) before the close of the one behind it
        # would have to be sent through it.
        for conn, _, _ in list(self._gateways.values()):
            if conn.watch is not None:
                conn.watch.stop()
            _suppressed(close_connection, conn)


def open_connection(conn: Connection, timeout: float) -> None:
    """``conn.open()``, on a TCP socket of ours with TCP_NODELAY set before the handshake, as
    OpenSSH does. paramiko would open the socket itself with Nagle's algorithm on: every small
    packet then waits for the peer's delayed ACK, about 40 ms each time (measured: a command on an
    open connection 49 ms instead of 4, a handshake 73 ms instead of 27). A connection carried by a
    gateway (a jump host's channel: the bastion's own socket has it) or a ProxyCommand is opened as
    fabric does."""
    sock = None
    if not conn.gateway:
        # A fresh socket on every open: a jump host whose connection dropped is opened again, not
        # on the closed socket of its first connection ("Bad file descriptor" for every target).
        old = conn.connect_kwargs.pop("sock", None)
        if old is not None:
            old.close()
        sock = _tcp_connect(conn.host, int(conn.port), timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.connect_kwargs["sock"] = sock
    try:
        conn.open()
    except BaseException:
        # paramiko leaves its transport running when a host key or login is refused: through a
        # jump host that is a thread and a forwarded channel held for the rest of the run.
        with contextlib.suppress(Exception):
            conn.client.close()
        if sock is not None:
            sock.close()
            conn.connect_kwargs.pop("sock", None)
        raise


def _tcp_connect(host: str, port: int, timeout: float) -> socket.socket:
    """``socket.create_connection`` with the name lookup bounded too: getaddrinfo takes no timeout,
    and an unreachable DNS server holds it for resolv.conf's timeout x attempts x servers (30 s and
    more) before the connect timeout even starts."""
    answer: list = []
    lookup = threading.Thread(target=lambda: answer.append(_getaddrinfo(host, port)), daemon=True,
                              name=f"resolve {host}")
    lookup.start()
    lookup.join(timeout)
    if not answer:
        raise _LookupTimeout(f"name lookup of {host} took longer than {timeout:g}s (is the DNS server in "
                             f"/etc/resolv.conf reachable from here? an IP address in the inventory avoids it)")
    if isinstance(answer[0], BaseException):
        raise answer[0]
    error: OSError | None = None
    for family, kind, proto, _, address in answer[0]:
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise error or OSError(f"{host}: no address to connect to")


class _LookupTimeout(TimeoutError):
    """The name lookup, not the connect, ran out of time."""


def _getaddrinfo(host: str, port: int):
    try:
        return socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
    except OSError as exc:
        return exc


def close_connection(conn: Connection) -> None:
    """Close ``conn`` now.  Its paramiko thread may be asleep in recv() for up to IDLE_POLL_S;
    paramiko closes the descriptor, which neither wakes that recv() nor sends the FIN while the
    call holds the socket.  A shutdown does both (a jump host's channel wakes on its own close)."""
    # fabric sets conn.transport only once the login is done; a connection still opening has
    # paramiko's transport (or, before the handshake, only our socket).
    transport = conn.transport or conn.client.get_transport()
    sock = transport.sock if transport is not None else conn.connect_kwargs.get("sock")
    if isinstance(sock, socket.socket) and (transport is None or transport.active):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    if conn.transport is None:
        conn.client.close()  # fabric's close does nothing before the login is done


class SshTransport:
    def __init__(self, host, context: SshContext):
        self.host = host
        self.context = context
        self.label = host.name if host.name == host.address else f"{host.name} ({host.address})"
        self._conn: Connection | None = None
        self._opening: Connection | None = None  # the connection connect() is opening

    def connect(self) -> None:
        ctx = self.context
        conn = None
        try:
            conn, gate = ctx.connection(self.host, self.host.address, self.host.user, self.host.port,
                                        self.host.jump_host, self.label)
            with gate or contextlib.nullcontext():
                self._opening = conn  # so that abandoning this host meanwhile can close it
                open_connection(conn, ctx.settings.connect_timeout)
        except paramiko.ChannelException as exc:
            # The jump host refused to forward to the target (down or unreachable from there, or
            # AllowTcpForwarding no): the target's SSH was never reached.
            via = self.host.jump_host or (conn.ssh_config.get("proxyjump") if conn is not None else None) or ""
            raise TransportError("unreachable", f"{self.label}: the jump host {via} could not open a connection "
                                                f"to it ({exc.text or exc}): the node is down or not reachable "
                                                f"from the jump host, or the jump host forbids forwarding "
                                                f"(AllowTcpForwarding)") from None
        except Exception as exc:  # noqa: BLE001 - every cause becomes one precise TransportError
            raise self._jump_error(conn) or ctx.with_agent_note(
                _translate(exc, self.label, ctx.settings.connect_timeout, conn), conn, exc) from None
        finally:
            self._opening = None
        conn.transport.set_keepalive(KEEPALIVE_S)
        # paramiko's thread for this connection wakes every 0.1 s to see whether it was closed; a
        # thousand idle connections doing so cost the controller a third of a core (measured: 0.10
        # CPU-s per second at 300 idle connections, 0.023 at a 1 s poll). Data wakes it at once,
        # and so does close_connection; the poll is left for the keepalive.
        conn.transport.sock.settimeout(IDLE_POLL_S)
        self._conn = conn

    def run(self, command: str, timeout: float, max_bytes: int) -> RunResult:
        chan = self._open_channel()
        out, err = bytearray(), bytearray()
        truncated = False
        deadline = time.monotonic() + timeout

        def lost():
            error = self._jump_error(self._conn)
            if error is not None:  # the jump host was given up: that is the cause, not this host
                raise error
            return RunResult(bytes(out), bytes(err), None, truncated, ended="lost")

        try:
            if not exec_within(chan, command, timeout):
                return RunResult(b"", b"", None, False, ended="deadline")
            chan.shutdown_write()
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return RunResult(bytes(out), bytes(err), None, truncated, ended="deadline")
                wait_readable([chan], min(left, 0.5))
                got = False
                while chan.recv_ready():
                    chunk = chan.recv(65536)
                    got = True
                    room = max_bytes - len(out)
                    truncated |= len(chunk) > room
                    out.extend(chunk[:max(room, 0)])
                while chan.recv_stderr_ready():
                    chunk = chan.recv_stderr(65536)
                    got = True
                    room = max_bytes - len(err)
                    truncated |= len(chunk) > room
                    err.extend(chunk[:max(room, 0)])
                if not got and chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                    status = chan.recv_exit_status()
                    if status == -1:  # paramiko's "closed without an exit status": the far end died
                        return lost()
                    return RunResult(bytes(out), bytes(err), status, truncated)
                # EOF may come a moment before the exit status; a closed channel or a dead
                # transport without one means the other end went away.
                if not got and (chan.closed or not self._conn.transport.is_active()):
                    if chan.exit_status_ready():
                        continue
                    return lost()
        except Exception:
            # Sending the command through a stalled jump host waits until it is given up, then
            # fails with paramiko's bare EOFError: the jump host is the cause to report.
            error = self._jump_error(self._conn)
            if error is not None:
                raise error from None
            raise
        finally:
            # Through a stalled jump host this close waits until the jump host is given up, and
            # then fails (the connection under it is gone): neither may hide the result.
            with contextlib.suppress(Exception):
                chan.close()

    def jump_failure(self) -> TransportError | None:
        """Why the jump host this host is reached through was given up, or None."""
        return jump_failure(self._conn)

    def _jump_error(self, conn) -> TransportError | None:
        failure = jump_failure(conn)
        return TransportError(failure.kind, f"{self.label}: {failure}") if failure is not None else None

    def _open_channel(self):
        if self._conn is None:
            self.connect()
        try:
            return self._conn.transport.open_session(timeout=self.context.settings.connect_timeout)
        except Exception as exc:  # noqa: BLE001
            raise self._jump_error(self._conn) or _translate(exc, self.label,
                                                             self.context.settings.connect_timeout) from None

    def start(self, command: str) -> "SshProcess":
        chan = self._open_channel()
        timeout = self.context.settings.connect_timeout
        try:
            started = exec_within(chan, command, timeout)
        except BaseException:
            chan.close()
            raise
        if not started:
            raise TransportError("timeout", f"{self.label}: sshd did not start the command within {timeout:g}s")
        return SshProcess(chan)

    def close(self) -> None:
        # A connection still opening (a handshake or login that hangs) is closed too: its socket
        # shut down, the wait in connect() then ends at once.
        conn = self._conn or self._opening
        if conn is not None:
            close_connection(conn)


def exec_within(chan, command: str, timeout: float) -> bool:
    """``chan.exec_command(command)``, bounded: paramiko waits for the server's answer to the exec
    request without a limit, so a hung sshd that opened the channel held the caller past every
    deadline.  False when ``timeout`` passed first (the channel is then closed, which is what
    wakes paramiko's wait)."""
    expired = threading.Event()

    def expire():
        expired.set()
        chan.close()

    timer = threading.Timer(max(timeout, 0.0), expire)
    timer.daemon = True
    timer.start()
    try:
        chan.exec_command(command)
    except Exception:
        if expired.is_set():
            return False
        raise
    finally:
        timer.cancel()
    return not expired.is_set()


class SshProcess:
    """A long-running remote command (phase-two listeners); closing stdin ends it."""

    def __init__(self, chan):
        self._chan = chan
        self._buf = b""

    def readline(self, timeout: float) -> str | None:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            wait_readable([self._chan], left)
            if self._chan.recv_ready():
                chunk = self._chan.recv(4096)
                if not chunk:
                    return None
                self._buf += chunk
            elif self._chan.exit_status_ready() or self._chan.closed:
                return None
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode("utf-8", errors="replace")

    def close(self) -> None:
        try:
            self._chan.shutdown_write()
            deadline = time.monotonic() + 3
            while not self._chan.exit_status_ready() and time.monotonic() < deadline:
                time.sleep(0.05)
        except (OSError, EOFError, paramiko.SSHException):
            pass
        finally:
            self._chan.close()
