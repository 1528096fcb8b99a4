"""Load an inventory (native YAML or Ansible YAML) into plain, read-only objects.

Native format (top-level keys ``defaults``, ``hosts``, ``groups``; see inventory.example.yaml)::

    defaults: {user: root, port: 22}
    hosts:
      - {name: localhost, connection: local}
      - {name: node-01, address: 10.0.0.1, groups: [head]}
      - {name: "node[02-16]", groups: [worker]}
    groups:
      worker: {npus_per_node: 8, chip: 910B3}

Ansible YAML format (detected by a top-level ``all:``): ``all: {hosts, vars, children}``
recursively, ``ansible_host``/``ansible_user``/``ansible_port``/``ansible_ssh_private_key_file``/
``ansible_connection``, and ``-o ProxyJump=``/``-J`` inside ``ansible_ssh_args``,
``ansible_ssh_common_args`` or ``ansible_ssh_extra_args``.

Precedence, lowest first: native ``defaults`` < groups (in the order the host lists them) < the
host entry; Ansible ``all.vars`` < parent group < child group (groups of one depth by
``ansible_group_priority``, then name) < host vars. Mapping-valued keys
(``env``, ``tags``) merge key by key; any key set to ``null`` clears what it inherited.

Every value that may reach a shell command or an SSH connection is validated here and rejected
(not escaped) when it is unsafe. Every problem is one :class:`InventoryError` naming the file,
the line and the key -- never a traceback.
"""

from __future__ import annotations

import difflib
import functools
import ipaddress
import math
import os
import re
import shlex
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from .hostlist import HostlistError, expand

__all__ = [
    "KEYS",
    "Host",
    "Inventory",
    "InventoryError",
    "KeySpec",
    "check_host",
    "load_inventory",
    "FrozenDict",
    "parse_jump_host",
]


class InventoryError(Exception):
    """A bad inventory. ``str(e)`` is one line: ``<file>:<line>: <key>: <message>``."""

    def __init__(self, file: str, line: int | None, key: str | None, message: str):
        super().__init__(file, line, key, message)
        self.file = file
        self.line = line
        self.key = key
        self.message = message

    def __str__(self) -> str:
        where = str(self.file) if self.file is not None else ""
        if self.line is not None:
            where = f"{where}:{self.line}" if where else str(self.line)
        parts = [p for p in (where, self.key) if p]
        text = " ".join(str(self.message).split("\n"))
        return ": ".join([*parts, text])


class _Invalid(Exception):
    """Raised by a validator; ``at`` names a sub-key (for example an env variable) to point at."""

    def __init__(self, message: str, at: str | None = None):
        super().__init__(message)
        self.message = message
        self.at = at


# ------------------------------------------------------------------------------------ validators

_USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_GROUP = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOSTNAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_HOST_CHARS = re.compile(r"[A-Za-z0-9_.:%-]+")
_IPV4ISH = re.compile(r"[0-9.]*\.[0-9.]*")
_SCOPE = re.compile(r"[A-Za-z0-9_.-]+")
_NUMERIC_HOST = re.compile(r"[0-9]+|0[xX][0-9A-Fa-f]+")


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a mapping"}.get(type(value), type(value).__name__)


def _host_problem(value: str) -> str | None:
    """Why ``value`` is not a safe host name / IPv4 / IPv6 address, or None when it is."""
    if not value:
        return "is empty"
    if len(value) > 253:
        return "is longer than 253 characters"
    if value.startswith("-"):
        return "starts with '-'"
    if not _HOST_CHARS.fullmatch(value):
        return "is not a valid host name or IP address (allowed: letters, digits, '.', '-', '_', and ':' in IPv6)"
    if ":" in value:
        addr, _, scope = value.partition("%")
        if "%" in value and not _SCOPE.fullmatch(scope):
            return "has an invalid IPv6 zone"
        try:
            ipaddress.IPv6Address(addr)
        except ValueError:
            host, _, port = value.rpartition(":")
            if port.isdigit() and ":" not in host and not _host_problem(host):
                # node-01:2222 is the ssh-style address with a port, not a broken IPv6 address.
                return f"has a port in it: write address: {host} and port: {port}"
            return "is not a valid IPv6 address"
        return None
    if "%" in value:
        return "is not a valid host name ('%' is only allowed as an IPv6 zone)"
    if _IPV4ISH.fullmatch(value):
        try:
            ipaddress.IPv4Address(value)
        except ValueError:
            return "is not a valid IPv4 address"
        return None
    if not _HOSTNAME.fullmatch(value):
        return "is not a valid host name (dot-separated labels of letters, digits, '-' and '_', up to 63 each)"
    if _NUMERIC_HOST.fullmatch(value):
        # The resolver reads these as IPv4 numbers (12345 is 0.0.48.57, 0x7f000001 is 127.0.0.1).
        return "is a bare number, which the resolver reads as an IPv4 address: write the address dotted (a.b.c.d)"
    return None


def check_host(value: str) -> str:
    """Return ``value`` when it is a safe host name, IPv4 or IPv6 address; raise ValueError otherwise."""
    problem = _host_problem(value) if isinstance(value, str) else "is not a string"
    if problem:
        raise ValueError(f"{value!r} {problem}")
    return value


def parse_jump_host(value: str) -> tuple[str | None, str, int | None]:
    """Split ``[user@]host[:port]`` (IPv6 as ``[addr]:port``), or the ``ssh://`` URI of it that
    ProxyJump also takes, into (user, host, port); ValueError if unsafe."""
    if not isinstance(value, str):
        raise ValueError(f"jump host must be a string, not {_type_name(value)}")
    if value.lower().startswith("ssh://"):
        value = value[len("ssh://"):]
    if "," in value:
        raise ValueError("only one jump host is supported (no comma-separated chain)")
    rest = value
    user = None
    if "@" in rest:
        user, _, rest = rest.rpartition("@")
        if not _USER.fullmatch(user):
            raise ValueError(f"invalid user {user!r} (expected [A-Za-z_][A-Za-z0-9_.-]{{0,31}})")
    port_text = None
    if rest.startswith("["):
        m = re.fullmatch(r"\[([^\]]*)\](?::(.*))?", rest)
        if not m or ":" not in m.group(1):
            raise ValueError("brackets are only for an IPv6 address, as [addr]:port")
        host, port_text = m.group(1), m.group(2)
    elif rest.count(":") == 1:
        host, _, port_text = rest.partition(":")
    else:
        host = rest
    problem = _host_problem(host)
    if problem:
        raise ValueError(f"host {host!r} {problem}")
    port = None
    if port_text is not None:
        if not _ascii_digits(port_text) or not 1 <= int(port_text) <= 65535:
            raise ValueError(f"port {port_text!r} is not a number in 1..65535")
        port = int(port_text)
    return user, host, port


def _want_str(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        raise _Invalid(f"must be a string, not {_type_name(value)}; quote it in YAML")
    if value is not None and not isinstance(value, (list, dict, set, tuple)):
        # 910 -> int, 8.0 -> float, 2024-01-01 -> date: YAML guessed a type for an unquoted value
        raise _Invalid(f"must be a string, not {_type_name(value)}; quote it in YAML (\"{value}\")")
    raise _Invalid(f"must be a string, not {_type_name(value)}")


def _text(value: Any) -> str:
    value = _want_str(value)
    if not value.strip():
        raise _Invalid("must not be empty")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise _Invalid(f"{value!r} contains a control character (newline, NUL, ...)")
    return value


def _path(expand_home: bool) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        value = _want_str(value)
        if not value:
            raise _Invalid("must not be empty")
        if "\0" in value or "\n" in value or "\r" in value:
            raise _Invalid(f"{value!r} contains a NUL or newline")
        return os.path.expanduser(value) if expand_home else value
    return check


def _interpreter(value: Any) -> str:
    """A program name or path (python3, /opt/conda/bin/python): quoted wherever it is used, and
    still refused when it could not be one (``python3; touch x``)."""
    value = _path(False)(value)
    if not re.fullmatch(r"[A-Za-z0-9_./+~-]+", value):
        raise _Invalid(f"{value!r} is not a program name or path (letters, digits, . _ + - / ~ only)")
    return value


def _int(low: int | None = None, high: int | None = None) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Invalid(f"must be an integer, not {_type_name(value)} {value!r}")
        if low is not None and value < low or high is not None and value > high:
            bounds = f"{low}..{high}" if high is not None else f">= {low}"
            raise _Invalid(f"{value!r} is out of range (expected {bounds})")
        return value
    return check


def _number(low: float = 0) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _Invalid(f"must be a number, not {_type_name(value)} {value!r}")
        if not math.isfinite(value):  # nan compares false with everything: a check could never fail
            raise _Invalid(f"must be a finite number, not {value!r}")
        if value < low:
            raise _Invalid(f"{value!r} is out of range (expected >= {low})")
        return value
    return check


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Invalid(f"must be true or false, not {_type_name(value)} {value!r}")
    return value


def _connection(value: Any) -> str:
    if value not in ("ssh", "local"):
        raise _Invalid(f"must be 'ssh' or 'local', not {value!r}")
    return value


def _user(value: Any) -> str:
    value = _want_str(value)
    if not _USER.fullmatch(value):
        raise _Invalid(f"invalid user name {value!r} (expected [A-Za-z_][A-Za-z0-9_.-]{{0,31}})")
    return value


def _jump(value: Any) -> str:
    try:
        parse_jump_host(value)
    except ValueError as e:
        raise _Invalid(f"invalid jump host {value!r}: {e}") from None
    return value


def _host_range(value: Any) -> list[str]:
    """A host name or address, possibly a range; returns the expanded, validated names."""
    value = _want_str(value)
    bracketed = re.fullmatch(r"\[([0-9A-Fa-f:.%\w]*:[0-9A-Fa-f:.%\w]*)\](?::(\d+))?", value.strip())
    if bracketed:  # [2001:db8::1]:2222, as ssh and URLs write it: brackets are our range syntax
        port = f" and port: {bracketed.group(2)}" if bracketed.group(2) else ""
        raise _Invalid(f"{value!r}: write an IPv6 address without brackets: address: {bracketed.group(1)}{port}")
    try:
        names = expand(value)
    except HostlistError as e:
        raise _Invalid(f"bad range: {e}") from None
    for n in names:
        problem = _host_problem(n)
        if problem:
            shown = f"{n!r} (from {value!r})" if n != value else repr(n)
            raise _Invalid(f"{shown} {problem}")
    return names


def _group_list(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise _Invalid(f"must be a list of group names, not {_type_name(value)}")
    out: list[str] = []
    for g in value:
        _check_group_name(g)
        if g not in out:
            out.append(g)
    return tuple(out)


def _check_group_name(name: Any) -> str:
    if not isinstance(name, str) or not _GROUP.fullmatch(name):
        raise _Invalid(f"invalid group name {name!r} (letters, digits, '_', '.', '-'; not starting with '.' or '-')")
    return name


def _env(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise _Invalid(f"must be a mapping of variable name to value, not {_type_name(value)}")
    out: dict[str, str] = {}
    for name, v in value.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise _Invalid(f"invalid environment variable name {name!r} (expected [A-Za-z_][A-Za-z0-9_]*)",
                           at=name if isinstance(name, str) else None)
        if v is None:  # clears a value declared at a lower level (defaults, a group)
            out[name] = None
            continue
        if isinstance(v, int) and not isinstance(v, bool):
            v = str(v)
        if not isinstance(v, str):
            hint = "; quote it in YAML" if isinstance(v, (bool, float)) else ""
            raise _Invalid(f"value of {name} must be a string, not {_type_name(v)} {v!r}{hint}", at=name)
        if "\0" in v or "\n" in v or "\r" in v:
            raise _Invalid(f"value of {name} {v!r} contains a NUL or newline", at=name)
        out[name] = v
    return out


def _env_numbers_as_written(doc: "_Doc", node: yaml.Node, path: str) -> None:
    """An unquoted env value YAML reads as a number other than its text (0x10, 010, 1_000, 1:30 are
    16, 8, 1000 and 90 in YAML 1.1) would be judged as a value the launch script never exports."""
    if not isinstance(node, yaml.MappingNode):
        return
    for knode, vnode in node.value:
        if (isinstance(vnode, yaml.ScalarNode) and vnode.tag == "tag:yaml.org,2002:int" and not vnode.style
                and vnode.value.strip() != str(doc.value(vnode, path))):
            raise doc.error(vnode, _join(path, knode.value),
                            f"{vnode.value} reads as the number {doc.value(vnode, path)} in YAML; quote it "
                            f"({knode.value}: '{vnode.value}') to keep it as written")


# Free-form values are copied into preflight.json and --facts-out as written out, and YAML aliases
# repeat a node without copying it: ten levels of ten aliases are 10^10 values there.
FREE_FORM_MAX_VALUES = 10_000


def _free_mapping(value: Any) -> dict:
    if not isinstance(value, dict):
        raise _Invalid(f"must be a mapping, not {_type_name(value)}")
    return _bounded(value)


def _bounded(value: Any) -> Any:
    """``value``, if it holds at most FREE_FORM_MAX_VALUES values with its aliases written out."""
    count, stack = 0, [value]
    while stack:
        item = stack.pop()
        count += 1
        if count > FREE_FORM_MAX_VALUES:
            raise _Invalid(f"holds more than {FREE_FORM_MAX_VALUES} values once its YAML aliases are "
                           f"written out: labels, not data")
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return value


# ---------------------------------------------------------------------------------- the key table

HOST_ONLY, CONN, VAR = "host", "conn", "var"


def _path_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise _Invalid(f"expected a list of paths, got {_type_name(value)}")
    check = _path(False)
    return tuple(check(item) for item in value)


def _module_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(m, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", m) for m in value):
        raise _Invalid("expected a list of Python module names (e.g. [deepspeed, decord])")
    return tuple(value)


@dataclass(frozen=True)
class KeySpec:
    """One inventory key: where it may appear, how it is checked, what it means."""

    kind: str                          # HOST_ONLY (host entries), CONN (connection setting), VAR (Host.vars)
    check: Callable[[Any], Any]        # returns the normalised value or raises _Invalid
    doc: str
    merge: bool = False                # mapping values merge key by key across levels


#: Every key of the native format. Add a key with one line here; it then works on defaults,
#: groups and hosts (VAR keys are also validated when they appear as Ansible variables).
KEYS: dict[str, KeySpec] = {
    "name":          KeySpec(HOST_ONLY, _host_range, "inventory name or range (node[02-16]); the result id"),
    "address":       KeySpec(HOST_ONLY, _host_range, "host name or IP to connect to (a range of the same length for a range name); default: the name"),
    "groups":        KeySpec(HOST_ONLY, _group_list, "groups the host belongs to; later groups override earlier ones"),
    "connection":    KeySpec(CONN, _connection, "ssh (default) or local (run on this machine, no SSH)"),
    "user":          KeySpec(CONN, _user, "SSH login user"),
    "port":          KeySpec(CONN, _int(1, 65535), "SSH port"),
    "identity_file": KeySpec(CONN, _path(True), "SSH private key file (~ expanded)"),
    "known_hosts":   KeySpec(CONN, _path(True), "known_hosts file (~ expanded); default: OpenSSH's own files"),
    "ssh_config":    KeySpec(CONN, _path(True), "ssh_config file (~ expanded); default: ~/.ssh/config when it exists"),
    "jump_host":     KeySpec(CONN, _jump, "ProxyJump host, [user@]host[:port]"),
    "npus_per_node": KeySpec(VAR, _int(1), "expected number of NPUs on the node"),
    "chip":          KeySpec(VAR, _text, "expected chip name, as npu-smi reports it (910B3, 310P3, ...)"),
    "min_nofile":    KeySpec(VAR, _int(1), "minimum open-files limit (ulimit -n)"),
    "ray_port":      KeySpec(VAR, _int(1, 65535), "Ray head GCS port to probe (default 6379)"),
    "ray_dashboard_port": KeySpec(VAR, _int(1, 65535), "Ray dashboard port to probe (default 8265)"),
    "ray_client_port": KeySpec(VAR, _int(1, 65535), "Ray client server port to probe (default 10001)"),
    "ray_min_worker_port": KeySpec(VAR, _int(1, 65535), "first port of Ray's worker range to probe (default 10002)"),
    "ray_max_worker_port": KeySpec(VAR, _int(1, 65535), "last port of Ray's worker range to probe (default 19999)"),
    "shared_paths":  KeySpec(VAR, _path_list, "paths (model, data, checkpoints) every node must see as one shared filesystem"),
    "max_clock_skew_s": KeySpec(VAR, _number(0), "largest clock difference between nodes before a warning (default 1.0)"),
    "launcher":      KeySpec(VAR, _bool, "the node the job is launched from (needs passwordless SSH to the others)"),
    "env":           KeySpec(VAR, _env, "expected environment variables, NAME: value", merge=True),
    "python":        KeySpec(VAR, _interpreter, "Python interpreter on the node to inspect (torch, torch_npu, ...)"),
    "sudo":          KeySpec(VAR, _bool, "run the commands that need root through sudo -n"),
    "cann":          KeySpec(VAR, _text, "expected CANN toolkit version"),
    "driver":        KeySpec(VAR, _text, "expected NPU driver version"),
    # HCCL accepts 120..7200 s: a minimum above 7200 could never be met.
    "hccl_connect_timeout": KeySpec(VAR, _int(1, 7200), "expected minimum HCCL_CONNECT_TIMEOUT, seconds"),
    "hbm_idle_mb":   KeySpec(VAR, _int(0), "HBM in use above this many MB means the NPU is not idle"),
    "checkpoint_dir": KeySpec(VAR, _path(False), "checkpoint directory on the node (shared storage)"),
    "checkpoint_free_gb": KeySpec(VAR, _number(0), "minimum free space in checkpoint_dir, GB"),
    "python_modules": KeySpec(VAR, _module_list, "Python modules the job imports (packages.required checks them)"),
    "processes_per_npu": KeySpec(VAR, _int(1), "processes the job runs on one NPU (colocated jobs; hccl.port_range)"),
    "tags":          KeySpec(VAR, _free_mapping, "free-form labels, at most 10 000 values", merge=True),
}

_LEVEL_KEYS = sorted(k for k, s in KEYS.items() if s.kind != HOST_ONLY)
_HOST_KEYS = sorted(KEYS)


# ----------------------------------------------------------------------------------- data objects

class FrozenDict(dict):
    """A read-only dict: JSON-serialisable, picklable, deep-copyable, hashable (when its values are)."""

    __slots__ = ()

    def _read_only(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("inventory vars are read-only")

    __setitem__ = __delitem__ = __ior__ = _read_only  # type: ignore[assignment]
    clear = pop = popitem = setdefault = update = _read_only  # type: ignore[assignment]

    def __reduce_ex__(self, protocol: Any) -> tuple:
        return (type(self), (dict(self),))

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def __repr__(self) -> str:
        return f"FrozenDict({dict.__repr__(self)})"


def _freeze(value: Any, memo: dict[int, Any] | None = None) -> Any:
    """Read-only deep copy: dict -> FrozenDict, list -> tuple. Shared (aliased) parts stay shared."""
    if isinstance(value, FrozenDict) or not isinstance(value, (Mapping, list, tuple, set)):
        return value
    memo = {} if memo is None else memo
    if id(value) in memo:
        return memo[id(value)]
    if isinstance(value, Mapping):
        out: Any = FrozenDict({k: _freeze(v, memo) for k, v in value.items()})
    elif isinstance(value, set):
        out = frozenset(_freeze(v, memo) for v in value)
    else:
        out = tuple(_freeze(v, memo) for v in value)
    memo[id(value)] = out
    return out


_EMPTY: Mapping[str, Any] = FrozenDict()


@dataclass(frozen=True)
class Host:
    """One inventory host, after range expansion and merging of defaults, groups and host keys."""

    name: str                             # inventory name; the result id
    address: str                          # what SSH connects to; defaults to the name
    connection: str = "ssh"               # "ssh" | "local"
    user: str | None = None               # None: ssh_config / the local user
    port: int | None = None               # None: ssh_config / 22
    identity_file: str | None = None      # "~" expanded
    jump_host: str | None = None          # "[user@]host[:port]"; see parse_jump_host()
    known_hosts: str | None = None        # "~" expanded; None = OpenSSH's default files
    ssh_config: str | None = None         # "~" expanded; None = ~/.ssh/config if it exists (transport decides)
    groups: tuple[str, ...] = ()          # in the order given
    vars: Mapping[str, Any] = field(default_factory=lambda: _EMPTY, hash=False)  # read-only (FrozenDict)
    line: int | None = field(default=None, compare=False)  # 1-based line where the host was declared

    def __post_init__(self) -> None:
        if not isinstance(self.vars, FrozenDict):  # Host(...) built by hand, e.g. from --facts-in JSON
            object.__setattr__(self, "vars", _freeze(self.vars))
        if not isinstance(self.groups, tuple):
            object.__setattr__(self, "groups", tuple(self.groups))

    @functools.cached_property  # asked for every host by every per-host check (fleet size: N x N)
    def roles(self) -> frozenset[str]:
        """{"head", "worker"} that the host's groups name, plus "launcher" when vars["launcher"] is true."""
        roles = {"head", "worker"} & set(self.groups)
        if self.vars.get("launcher") is True:
            roles.add("launcher")
        return frozenset(roles)

    @property
    def is_local(self) -> bool:
        return self.connection == "local"


@dataclass(frozen=True)
class Inventory:
    path: str
    hosts: tuple[Host, ...]
    _index: Mapping[str, Host] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {h.name: h for h in self.hosts})

    def by_name(self, name: str) -> Host:
        try:
            return self._index[name]
        except KeyError:
            raise KeyError(f"no host {name!r} in inventory {self.path}") from None

    def with_role(self, role: str) -> tuple[Host, ...]:
        return tuple(h for h in self.hosts if role in h.roles)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(h.name for h in self.hosts)

    def __iter__(self) -> Iterator[Host]:
        return iter(self.hosts)

    def __len__(self) -> int:
        return len(self.hosts)


# --------------------------------------------------------------------------------- YAML plumbing

_MERGE_TAG = "tag:yaml.org,2002:merge"


def _line(node: yaml.Node | None) -> int | None:
    return node.start_mark.line + 1 if node is not None else None


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _typo_of(name: str, meant: str, plurals: bool = False) -> bool:
    """``name`` is ``meant`` mistyped: another case, a plural (when ``plurals``), or one letter
    added, dropped, changed or swapped inside the word.  Not a different last or first letter, nor
    a different number: rack1 next to rack2 or rack01, pod-a next to pod-b, python3 next to python
    are names of their own."""
    if name == meant:
        return False
    if name.lower() == meant.lower() or (plurals and (name + "s" == meant or meant + "s" == name)):
        return True
    if name[:1] != meant[:1] or name[-1:] != meant[-1:]:
        return False
    a, b = (name, meant) if len(name) <= len(meant) else (meant, name)
    if len(b) - len(a) > 1:
        return False
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    if b[i].isdigit() or (i < len(a) and a[i].isdigit()):
        return False  # numbers differ (rack01 and rack1, gpu12 and gpu13): other names
    if len(a) == len(b):
        rest_a, rest_b = a[i + 1:], b[i + 1:]
        swapped = i + 1 < len(a) and a[i] == b[i + 1] and a[i + 1] == b[i] and a[i + 2:] == b[i + 2:]
        return rest_a == rest_b or swapped
    return a[i:] == b[i + 1:]


def _suggest(key: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (allowed: {', '.join(candidates)})"


# "[head]" or "[workers:vars]" alone on the first line: an INI section, never a YAML inventory.
_INI_SECTION = re.compile(r"\[[A-Za-z0-9_.-]+(:(vars|children))?\]")
# "node-01 ansible_host=10.0.0.1": an INI host line with no section above it (the implicit "ungrouped").
_INI_HOST = re.compile(r"[^\s:=#{}\[\]]+(\s+[A-Za-z_][A-Za-z0-9_]*=\S+)+")


def _ini_uncommented(line: str) -> str:
    """An INI line without its trailing comment: "[head]  # the Ray head" is "[head]"."""
    return re.sub(r"\s+[#;].*", "", line).strip()


def _cut(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Doc:
    """One parsed YAML file: composes nodes, constructs values, reports errors with lines."""

    def __init__(self, file: str, text: str):
        self.file = file
        first = next(((n, line.strip()) for n, line in enumerate(text.splitlines(), 1)
                      if line.strip() and not line.lstrip().startswith(("#", ";"))), None)
        if first and (_INI_SECTION.fullmatch(_ini_uncommented(first[1])) or _INI_HOST.fullmatch(first[1])):
            raise self.ini(first[0], first[1])
        try:
            self.loader = yaml.SafeLoader(text)
            self.root = self.loader.get_single_node()
            if self.root is not None and not isinstance(self.root, yaml.MappingNode):
                self.ini_section(text)  # "node01" above "[worker]": YAML reads one long scalar
        except yaml.MarkedYAMLError as e:
            self.ini_section(text)  # "[head]  # the Ray head", "node01 ansible_port=22  # ssh"
            mark = e.problem_mark or e.context_mark
            what = e.problem or e.context or "invalid YAML"
            if e.context and e.problem:
                what = f"{e.problem} ({e.context})"
            raise InventoryError(file, _line_of_mark(mark), None, f"YAML syntax error: {what}") from None
        except yaml.reader.ReaderError as e:
            line = text[: e.position].count("\n") + 1
            raise InventoryError(file, line, None, f"YAML error: unacceptable character "
                                                   f"{chr(e.character)!r} (#x{e.character:04x})") from None
        except yaml.YAMLError as e:
            raise InventoryError(file, None, None, f"YAML error: {e}") from None

    def ini(self, number: int, line: str) -> InventoryError:
        return InventoryError(self.file, number, None,
                              f"{_cut(line)} starts an Ansible INI inventory; this reads YAML inventories (its "
                              f"own or Ansible's YAML form): convert it with ansible-inventory -i "
                              f"{os.path.basename(self.file)} --list --yaml > hosts.yaml")

    def ini_section(self, text: str) -> None:
        """Raise the INI error at the first ``[section]`` line, when the file has one."""
        for number, line in enumerate(text.splitlines(), 1):
            if line[:1] == "[" and _INI_SECTION.fullmatch(_ini_uncommented(line)):
                raise self.ini(number, line.strip())

    def error(self, node: yaml.Node | None, key: str | None, message: str) -> InventoryError:
        return InventoryError(self.file, _line(node), key or None, message)

    def value(self, node: yaml.Node, path: str) -> Any:
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            return_msg = e.problem or e.context or "cannot read value"
            raise InventoryError(self.file, _line_of_mark(mark) or _line(node), path or None,
                                 f"YAML error: {return_msg}") from None

    def items(self, node: yaml.Node | None, path: str, what: str = "a mapping",
              allow_null: bool = True) -> list[tuple[str, yaml.Node, yaml.Node]]:
        """(key, key node, value node) of a mapping node, merge keys applied, keys checked to be strings."""
        if node is None or _is_null(node):
            if allow_null:
                return []
            raise self.error(node, path, f"must be {what}, not null")
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, path, f"must be {what}, not {_node_kind(node)}")
        try:
            self.loader.flatten_mapping(node)
        except yaml.MarkedYAMLError as e:
            raise InventoryError(self.file, _line_of_mark(e.problem_mark) or _line(node), path or None,
                                 f"YAML error: {e.problem}") from None
        out = []
        for knode, vnode in node.value:
            key = self.value(knode, path)
            if not isinstance(key, str):
                raise self.error(knode, path, f"keys must be strings, not {_type_name(key)} {key!r}")
            out.append((key, knode, vnode))
        return out

    def check_duplicates(self) -> None:
        """PyYAML silently keeps the last of duplicate keys; make that an error."""
        seen_nodes: set[int] = set()

        def walk(node: yaml.Node, path: str) -> None:
            if id(node) in seen_nodes:
                return
            seen_nodes.add(id(node))
            if isinstance(node, yaml.MappingNode):
                first: dict[Any, int | None] = {}
                for knode, vnode in node.value:
                    if knode.tag == _MERGE_TAG:
                        walk(vnode, path)
                        continue
                    key = self.value(knode, path) if isinstance(knode, yaml.ScalarNode) else None
                    try:
                        hash(key)
                    except TypeError:
                        key = None
                    if key is not None:
                        marker = (type(key), key)
                        if marker in first:
                            raise self.error(knode, _join(path, key),
                                             f"duplicate key {key!r} (first at line {first[marker]})")
                        first[marker] = _line(knode)
                    walk(vnode, _join(path, key if key is not None else "?"))
            elif isinstance(node, yaml.SequenceNode):
                for i, child in enumerate(node.value):
                    walk(child, f"{path}[{i}]")

        if self.root is not None:
            walk(self.root, "")

    def close(self) -> None:
        self.loader.dispose()


def _line_of_mark(mark: Any) -> int | None:
    return mark.line + 1 if mark is not None else None


def _is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"


def _node_kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return f"the scalar {node.value!r}"


def _find_subkey(node: yaml.Node, key: str) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for knode, _ in node.value:
            if isinstance(knode, yaml.ScalarNode) and knode.value == key:
                return knode
    return None


# ------------------------------------------------------------------------------- levels and merge

class _Level:
    """Settings from one place (defaults, a group, a host entry, Ansible vars); None = cleared."""

    def __init__(self) -> None:
        self.conn: dict[str, Any] = {}
        self.vars: dict[str, Any] = {}


def _merge(levels: list[_Level]) -> tuple[dict[str, Any], dict[str, Any]]:
    conn: dict[str, Any] = {}
    vars_: dict[str, Any] = {}
    for level in levels:
        conn.update(level.conn)
        for k, v in level.vars.items():
            spec = KEYS.get(k)
            if spec is not None and spec.merge and isinstance(v, dict) and isinstance(vars_.get(k), dict):
                vars_[k] = {**vars_[k], **v}
            else:
                vars_[k] = v
    return conn, _without_cleared(vars_)


def _without_cleared(vars_: dict[str, Any]) -> dict[str, Any]:
    """Settings set to null cleared what they inherited: as if never declared (a key of a merged
    mapping such as env too)."""
    return {k: ({kk: vv for kk, vv in v.items() if vv is not None} if isinstance(v, dict)
                and KEYS.get(k) is not None and KEYS[k].merge else v)
            for k, v in vars_.items() if v is not None}


def _validate(doc: _Doc, spec: KeySpec, key: str, vnode: yaml.Node, path: str) -> Any:
    value = doc.value(vnode, path)
    if value is None:
        return None
    if spec.check is _env:
        _env_numbers_as_written(doc, vnode, path)
    elif (isinstance(vnode, yaml.ScalarNode) and vnode.tag == "tag:yaml.org,2002:int" and not vnode.style
          and not re.fullmatch(r"[-+]?(0|[1-9][0-9]*)", vnode.value.strip())):
        # YAML 1.1 reads 02222 as octal (port 1170), 0x8AE as hex and 1_000 as 1000: a number not
        # in plain decimal is almost always a typo for one that is.
        raise doc.error(vnode, path, f"{vnode.value} reads as the number {value} in YAML (octal, hex or "
                                     f"with '_'); write it in plain decimal")
    try:
        return spec.check(value)
    except _Invalid as e:
        if e.at is not None:
            sub = _find_subkey(vnode, e.at)
            raise doc.error(sub or vnode, path, e.message) from None
        raise doc.error(vnode, path, e.message) from None


def _make_host(name: str, address: str | None, conn: dict[str, Any], vars_: Mapping[str, Any],
               groups: tuple[str, ...], line: int | None) -> Host:
    return Host(
        name=name,
        address=address or name,
        connection=conn.get("connection") or "ssh",
        user=conn.get("user"),
        port=conn.get("port"),
        identity_file=conn.get("identity_file"),
        jump_host=conn.get("jump_host"),
        known_hosts=conn.get("known_hosts"),
        ssh_config=conn.get("ssh_config"),
        groups=groups,
        vars=_freeze(vars_),
        line=line,
    )


# --------------------------------------------------------------------------------- native format

_NATIVE_TOP = ("defaults", "hosts", "groups")
_ANSIBLE_GROUP_KEYS = ("hosts", "vars", "children")


def _native_level(doc: _Doc, node: yaml.Node | None, path: str) -> _Level:
    level = _Level()
    for key, knode, vnode in doc.items(node, path):
        kpath = _join(path, key)
        spec = KEYS.get(key)
        if spec is None:
            raise doc.error(knode, kpath, f"unknown key {key!r}{_suggest(key, _LEVEL_KEYS)}")
        if spec.kind == HOST_ONLY:
            raise doc.error(knode, kpath, f"{key!r} is only allowed on a host entry")
        value = _validate(doc, spec, key, vnode, kpath)
        (level.conn if spec.kind == CONN else level.vars)[key] = value
    return level


def _load_native(doc: _Doc, top: dict[str, tuple[yaml.Node, yaml.Node]]) -> tuple[Host, ...]:
    defaults = _native_level(doc, top["defaults"][1], "defaults") if "defaults" in top else _Level()

    groups: dict[str, _Level] = {}
    group_nodes: dict[str, yaml.Node] = {}
    if "groups" in top:
        for gname, gknode, gvnode in doc.items(top["groups"][1], "groups",
                                                 "a mapping of group name to settings"):
            try:
                _check_group_name(gname)
            except _Invalid as e:
                raise doc.error(gknode, _join("groups", gname), e.message) from None
            groups[gname] = _native_level(doc, gvnode, _join("groups", gname))
            group_nodes[gname] = gknode

    if "hosts" not in top:
        raise doc.error(doc.root, "hosts", "no hosts: the inventory needs a 'hosts:' list")
    hknode, hnode = top["hosts"]
    if _is_null(hnode) or (isinstance(hnode, yaml.SequenceNode) and not hnode.value):
        raise doc.error(hknode, "hosts", "no hosts: the 'hosts:' list is empty")
    if not isinstance(hnode, yaml.SequenceNode):
        raise doc.error(hnode, "hosts", f"must be a list of host entries, not {_node_kind(hnode)}")

    hosts: list[Host] = []
    first_line: dict[str, int | None] = {}
    for i, entry in enumerate(hnode.value):
        path = f"hosts[{i}]"
        fields: dict[str, Any] = {}
        nodes: dict[str, yaml.Node] = {}
        if isinstance(entry, yaml.ScalarNode) and not _is_null(entry):
            # shorthand: "- node[01-04]" is {name: node[01-04]}
            fields["name"] = _validate(doc, KEYS["name"], "name", entry, _join(path, "name"))
            nodes["name"] = entry
        else:
            for key, knode, vnode in doc.items(entry, path, "a host entry mapping ({name: ...})",
                                               allow_null=False):
                kpath = _join(path, key)
                spec = KEYS.get(key)
                if spec is None:
                    raise doc.error(knode, kpath, f"unknown key {key!r}{_suggest(key, _HOST_KEYS)}")
                fields[key] = _validate(doc, spec, key, vnode, kpath)
                nodes[key] = vnode
        if fields.get("name") is None:
            raise doc.error(entry, path, "host entry has no 'name'")
        names: list[str] = fields["name"]
        addresses: list[str] | None = fields.get("address")
        if addresses is not None and len(addresses) != len(names):
            if len(names) == 1:
                msg = (f"address {doc.value(nodes['address'], path)!r} expands to {len(addresses)} "
                       f"addresses but the name is one host")
            else:
                msg = (f"name {doc.value(nodes['name'], path)!r} expands to {len(names)} hosts but address "
                       f"{doc.value(nodes['address'], path)!r} to {len(addresses)}; give an address range "
                       f"of the same length, or leave address out")
            raise doc.error(nodes["address"], _join(path, "address"), msg)
        host_groups: tuple[str, ...] = fields.get("groups") or ()
        for g in host_groups:
            # A group named nowhere is a label (a role: head, worker); one a typo away from a
            # defined group or a role would drop its settings without a word.
            known = [*groups, "head", "worker"]
            close = [k for k in known if g not in known and _typo_of(g, k, plurals=True)]
            if close:
                raise doc.error(nodes["groups"], _join(path, "groups"),
                                f"group {g!r} is neither defined under groups: nor a role (did you mean "
                                f"{close[0]!r}?); its settings would not apply")
        level = _Level()
        for key, value in fields.items():
            spec = KEYS[key]
            if spec.kind == CONN:
                level.conn[key] = value
            elif spec.kind == VAR:
                level.vars[key] = value
        conn, merged_vars = _merge([defaults, *(groups[g] for g in host_groups if g in groups), level])
        vars_ = _freeze(merged_vars)  # one read-only mapping shared by every host of the entry
        line = _line(nodes["name"])
        for j, name in enumerate(names):
            if name in first_line:
                raise doc.error(nodes["name"], _join(path, "name"),
                                f"duplicate host {name!r} (first declared at line {first_line[name]})")
            first_line[name] = line
            address = addresses[j] if addresses is not None else None
            hosts.append(_make_host(name, address, conn, vars_, host_groups, line))
    # `workers:` defined, every host in `worker` (a role, so not a typo above): the settings reach no one.
    used = {g for h in hosts for g in h.groups}
    for gname in groups:
        near = sorted(g for g in used if g not in groups and _typo_of(g, gname, plurals=True))
        if gname not in used and near:
            raise doc.error(group_nodes[gname], _join("groups", gname),
                            f"no host is in group {gname!r}, so its settings apply to none; hosts list "
                            f"{near[0]!r} (did you mean that?)")
    _check_same_node_twice(doc, hosts)
    return tuple(hosts)


def _check_same_node_twice(doc: _Doc, hosts: list[Host]) -> None:
    """Two entries making the same login (address, port, jump host, ssh_config, user and key): the
    node would be checked, and counted in the cluster checks, twice.  A port left out is ssh_config's
    to choose, so it is not taken for 22; another user or key is another session, kept."""
    seen: dict[tuple, Host] = {}
    for host in hosts:
        if host.connection == "local":
            key: tuple = ("local",)
        else:
            jump = None
            if host.jump_host:
                _, jhost, jport = parse_jump_host(host.jump_host)
                jump = (jhost.lower(), jport or 22)
            key = (host.address.lower(), host.port, jump, host.ssh_config, host.user, host.identity_file)
        if key in seen:
            first = seen[key]
            raise InventoryError(doc.file, host.line, "hosts",
                                 f"hosts {first.name!r} (line {first.line}) and {host.name!r} are the same node: "
                                 + ("both run on this machine (connection: local)" if key == ("local",) else
                                    f"both reach {host.address}" + (f" port {host.port}" if host.port else "")
                                    + (f" through {host.jump_host}" if host.jump_host else "")
                                    + (f" as {host.user}" if host.user else ""))
                                 + "; list each node once")
        seen[key] = host


# -------------------------------------------------------------------------------- Ansible format

# variable -> (our key, priority: of two spellings set for a host, at any levels, the higher wins).
# Ansible's ssh and paramiko plugins read ansible_host, then ansible_ssh_host (the last one set
# wins), so the old ansible_ssh_* spelling beats the new one, even from a group for a host var.
_ANSIBLE_CONN_KEYS = {
    "ansible_host": ("address", 0), "ansible_ssh_host": ("address", 1),
    "ansible_user": ("user", 0), "ansible_ssh_user": ("user", 1),
    "ansible_port": ("port", 0), "ansible_ssh_port": ("port", 1),
    "ansible_private_key_file": ("identity_file", 0), "ansible_ssh_private_key_file": ("identity_file", 1),
    "ansible_connection": ("connection", 1),
    # ssh gets ansible_ssh_args, then _common_, then _extra_args, and keeps an option's first value
    "ansible_ssh_args": ("ssh_args", 2), "ansible_ssh_common_args": ("ssh_args", 1),
    "ansible_ssh_extra_args": ("ssh_args", 0),
    "ansible_become": ("sudo", 0),
}
_ANSIBLE_CONNECTIONS = {"local": "local", "ssh": "ssh", "paramiko": "ssh", "paramiko_ssh": "ssh",
                        "smart": "ssh"}


def _ssh_args(value: Any) -> dict[str, Any]:
    """Connection settings found in ansible_ssh_args / _common_args / _extra_args."""
    value = _want_str(value)
    try:
        words = shlex.split(value)
    except ValueError as e:
        raise _Invalid(f"cannot split {value!r}: {e}") from None
    options: list[str] = []
    found: dict[str, Any] = {}
    i = 0
    while i < len(words):
        w = words[i]
        if w[:2] in _SSH_FLAGS_ELSEWHERE:
            raise _Invalid(f"{w[:2]} is not read from SSH arguments; {_SSH_FLAGS_ELSEWHERE[w[:2]]}")
        if w in ("-o", "-J", "-F") and i + 1 < len(words):
            arg = words[i + 1]
            i += 2
        elif w.startswith(("-o", "-J", "-F")) and len(w) > 2:
            w, arg = w[:2], w[2:]
            i += 1
        else:
            i += 1
            continue
        if w == "-o":
            options.append(arg)
        elif w == "-J":
            options.append(f"ProxyJump={arg}")
        else:
            options.append(f"__config={arg}")
    for opt in options:
        name, sep, arg = opt.partition("=")
        if not sep:
            name, _, arg = opt.partition(" ")
        name, arg = name.strip().lower(), arg.strip()
        # ssh keeps the first value of an option (-o ProxyJump=a -o ProxyJump=b goes through a)
        if name == "proxyjump":
            if arg.lower() == "none":
                found.setdefault("jump_host", None)
            else:
                found.setdefault("jump_host", _jump(arg))
        elif name == "proxycommand":
            found.setdefault("jump_host", _proxy_command(arg))
        elif name == "userknownhostsfile":
            found.setdefault("known_hosts", _path(True)(arg.split()[0]) if arg else None)
        elif name == "__config":
            found["ssh_config"] = _path(True)(arg)
        elif name in _SSH_OPTIONS_ELSEWHERE:
            raise _Invalid(f"-o {opt} is not read from SSH arguments; {_SSH_OPTIONS_ELSEWHERE[name]}")
    return found


# Where the connection goes and as whom: silently ignored, these sent the run to port 22 as the
# default user and key. (Other options, e.g. ServerAliveInterval or StrictHostKeyChecking, do not
# change which node is checked and are left to the checker's own settings.)
_SSH_FLAGS_ELSEWHERE = {"-p": "set ansible_port", "-l": "set ansible_user",
                        "-i": "set ansible_ssh_private_key_file"}
_SSH_OPTIONS_ELSEWHERE = {"port": "set ansible_port", "user": "set ansible_user",
                          "identityfile": "set ansible_ssh_private_key_file", "hostname": "set ansible_host"}


def _proxy_command(arg: str) -> str | None:
    """Accept the classic ``ssh -W %h:%p [-p port] [-l user] [user@]bastion`` as a jump host."""
    if arg.lower() == "none":
        return None
    unsupported = _Invalid(f"ProxyCommand {arg!r} is not supported; use -o ProxyJump=[user@]host[:port]")
    try:
        words = shlex.split(arg)
    except ValueError:
        raise unsupported from None
    if not words or os.path.basename(words[0]) != "ssh":
        raise unsupported
    user = port = host = None
    forwards = False
    i = 1
    while i < len(words):
        w = words[i]
        nxt = words[i + 1] if i + 1 < len(words) else None
        if w == "-W" and nxt == "%h:%p":
            forwards = True
            i += 2
        elif w in ("-p", "-l", "-o") and nxt is not None:
            if w == "-p":
                port = nxt
            elif w == "-l":
                user = nxt
            i += 2
        elif w == "-q" or (w.startswith("-o") and len(w) > 2):
            i += 1
        elif not w.startswith("-") and host is None:
            host = w
            i += 1
        else:
            raise unsupported
    if not forwards or host is None:
        raise unsupported
    jump = host
    if user and "@" not in host:
        jump = f"{user}@{jump}"
    if port:
        jump = f"{jump}:{port}"
    return _jump(jump)


def _ansible_conn_value(key: str, value: Any) -> dict[str, Any]:
    target = _ANSIBLE_CONN_KEYS[key][0]
    if target == "ssh_args":
        return _ssh_args(value)
    if target == "connection":
        if value not in _ANSIBLE_CONNECTIONS:
            raise _Invalid(f"unsupported connection {value!r} (supported: local, ssh, paramiko, smart)")
        return {"connection": _ANSIBLE_CONNECTIONS[value]}
    if target == "address":
        value = _want_str(value)
        problem = _host_problem(value)
        if problem:
            raise _Invalid(f"{value!r} {problem}")
        return {"address": value}
    if target == "port" and isinstance(value, str) and _ascii_digits(value.strip()):
        value = int(value)
    if target == "sudo":
        if isinstance(value, str) and value.lower() in ("yes", "true", "no", "false"):
            value = value.lower() in ("yes", "true")
        return {"sudo": _bool(value)}
    return {target: KEYS[target].check(value)}


class _AnsibleVars:
    """Variables from one place: raw name -> (priority, conn contribution, vars contribution)."""

    def __init__(self) -> None:
        self.raw: dict[str, tuple[int, dict[str, Any], dict[str, Any]]] = {}


def _ansible_vars(doc: _Doc, node: yaml.Node | None, path: str) -> _AnsibleVars:
    out = _AnsibleVars()
    for key, knode, vnode in doc.items(node, path, "a mapping of variables"):
        kpath = _join(path, key)
        if key in _ANSIBLE_CONN_KEYS or key in KEYS:
            value = doc.value(vnode, kpath)
            items = value.items() if isinstance(value, dict) else [(None, value)]
            for sub, text in items:
                if isinstance(text, str) and ("{{" in text or "{%" in text):
                    # Ansible renders "{{ inventory_hostname }}.ib" when it connects; here it would be
                    # refused as a host name, or taken as written (env: {X: "{{ iface }}"})
                    raise doc.error(sub is not None and _find_subkey(vnode, sub) or vnode,
                                    kpath if sub is None else _join(kpath, sub),
                                    f"{_cut(text)} is a Jinja template, which preflight does not evaluate; "
                                    f"write the value itself")
        if key in _ANSIBLE_CONN_KEYS:
            value = doc.value(vnode, kpath)
            if value is None:
                out.raw[key] = (_ANSIBLE_CONN_KEYS[key][1], {}, {})
                continue
            try:
                contrib = _ansible_conn_value(key, value)
            except _Invalid as e:
                raise doc.error(vnode, kpath, e.message) from None
            if "sudo" in contrib:
                out.raw[key] = (0, {}, contrib)
            else:
                out.raw[key] = (_ANSIBLE_CONN_KEYS[key][1], contrib, {})
        elif key in KEYS and KEYS[key].kind == VAR:
            out.raw[key] = (2, {}, {key: _validate(doc, KEYS[key], key, vnode, kpath)})
        else:  # any other variable: kept as is (Ansible inventories carry arbitrary vars)
            close = [k for k, spec in KEYS.items() if spec.kind == VAR and _typo_of(key, k)]
            # ansible_hosts, ansible_usr: the host would be reached by its name, as the default user
            close += [k for k in _ANSIBLE_CONN_KEYS if _typo_of(key, k, plurals=True)]
            if close:  # a near miss of one of ours is a typo that would drop that setting
                raise doc.error(vnode, kpath, f"unknown variable {key!r} (did you mean {close[0]!r}?)")
            try:
                value = _bounded(doc.value(vnode, kpath))
            except _Invalid as e:
                raise doc.error(vnode, kpath, e.message) from None
            out.raw[key] = (2, {}, {key: value})
    return out


def _ansible_level(chain: list[_AnsibleVars]) -> _Level:
    """Merge raw Ansible variables by name (later in ``chain`` wins), then translate to one level."""
    merged: dict[str, tuple[int, dict[str, Any], dict[str, Any]]] = {}
    for av in chain:
        merged.update(av.raw)
    level = _Level()
    parts = sorted(merged.values(), key=lambda t: t[0])
    for _prio, conn, vars_ in parts:
        level.conn.update(conn)
    # vars: merge-kind keys merge across the chain, like the native format
    for av in chain:
        for _prio, _conn, vars_ in av.raw.values():
            for k, v in vars_.items():
                spec = KEYS.get(k)
                if spec is not None and spec.merge and isinstance(v, dict) and isinstance(level.vars.get(k), dict):
                    level.vars[k] = {**level.vars[k], **v}
                else:
                    level.vars[k] = v
    return level


class _AGroup:
    def __init__(self, name: str, order: int, node: yaml.Node | None, path: str):
        self.name = name
        self.path = path
        self.order = order
        self.node = node
        self.parents: set[str] = set()
        self.vars: list[_AnsibleVars] = []
        self.priority = 1  # ansible_group_priority: orders groups of one depth (default 1)


class _AHost:
    def __init__(self, name: str, line: int | None, order: int):
        self.name = name
        self.line = line
        self.order = order
        self.groups: list[str] = []
        self.vars: list[_AnsibleVars] = []


def _ascii_digits(text: str) -> bool:
    """0-9 only: str.isdigit() is true for "²", which int() refuses (a traceback, not a file:line error)."""
    return bool(re.fullmatch(r"[0-9]+", text))


def _split_host_port(key: str) -> tuple[str, int | None]:
    """Ansible host keys may be ``name:port`` (not for IPv6 addresses, which have several ':')."""
    outside = re.sub(r"\[[^\]]*\]", "", key)
    if outside.count(":") == 1:
        head, _, port = key.rpartition(":")
        if _ascii_digits(port) and head:
            if re.fullmatch(r"\[[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*\]", head):
                head = head[1:-1]  # [2001:db8::1]:2222, an IPv6 address with a port
            return head, int(port)
    return key, None


def _load_ansible(doc: _Doc, top: list[tuple[str, yaml.Node, yaml.Node]]) -> tuple[Host, ...]:
    groups: dict[str, _AGroup] = {}
    hosts: dict[str, _AHost] = {}

    def group(name: str, node: yaml.Node | None, path: str) -> _AGroup:
        if name not in groups:
            groups[name] = _AGroup(name, len(groups), node, path)
        return groups[name]

    def walk(name: str, node: yaml.Node, path: str, stack: tuple[str, ...]) -> None:
        g = group(name, node, path)
        sections = {}
        for key, knode, vnode in doc.items(node, path, "a group mapping (hosts, vars, children)"):
            if key not in _ANSIBLE_GROUP_KEYS:
                raise doc.error(knode, _join(path, key),
                                f"unknown group key {key!r}{_suggest(key, list(_ANSIBLE_GROUP_KEYS))}")
            sections[key] = vnode
        # In the order written: a host's vars given in two places are taken from the later one, as
        # ansible-inventory reads them (not hosts before children)
        for section in sections:
            if section == "vars":
                gv = _ansible_vars(doc, sections[section], _join(path, "vars"))
                if "ansible_group_priority" in gv.raw:  # not a variable: Ansible sets the group's priority
                    priority = gv.raw.pop("ansible_group_priority")[2].get("ansible_group_priority")
                    if isinstance(priority, str) and re.fullmatch(r"[-+]?[0-9]+", priority.strip()):
                        priority = int(priority)
                    if isinstance(priority, bool) or not isinstance(priority, int):
                        raise doc.error(_find_subkey(sections[section], "ansible_group_priority"),
                                        _join(path, "vars.ansible_group_priority"),
                                        f"must be an integer, not {_type_name(priority)} {priority!r}")
                    g.priority = priority
                g.vars.append(gv)
            elif section == "hosts":
                hpath = _join(path, "hosts")
                for hkey, hknode, hvnode in doc.items(sections[section], hpath,
                                                      "a mapping of host name to host vars"):
                    kpath = _join(hpath, hkey)
                    pattern, port = _split_host_port(hkey)
                    try:
                        names = _host_range(pattern)
                    except _Invalid as e:
                        raise doc.error(hknode, kpath, e.message) from None
                    hv = _ansible_vars(doc, hvnode, kpath)
                    if port is not None:
                        try:
                            port = _int(1, 65535)(port)
                        except _Invalid as e:
                            raise doc.error(hknode, kpath, f"port in the host key: {e.message}") from None
                        hv.raw.setdefault("ansible_port", (_ANSIBLE_CONN_KEYS["ansible_port"][1], {"port": port}, {}))
                    for n in names:
                        h = hosts.get(n)
                        if h is None:
                            h = hosts[n] = _AHost(n, _line(hknode), len(hosts))
                        if name != "all" and name not in h.groups:
                            h.groups.append(name)
                        h.vars.append(hv)
            elif section == "children":
                cpath = _join(path, "children")
                for cname, cknode, cvnode in doc.items(sections[section], cpath,
                                                       "a mapping of child group name to group"):
                    try:
                        _check_group_name(cname)
                    except _Invalid as e:
                        raise doc.error(cknode, _join(cpath, cname), e.message) from None
                    if cname == "all":
                        raise doc.error(cknode, _join(cpath, cname), "'all' cannot be a child group")
                    if cname in (*stack, name):
                        cycle = [*stack, name][[*stack, name].index(cname):]
                        raise doc.error(cknode, _join(cpath, cname),
                                        f"group cycle: {' -> '.join([*cycle, cname])}")
                    group(cname, cknode, _join(cpath, cname)).parents.add(name)
                    walk(cname, cvnode, _join(cpath, cname), (*stack, name))

    for gname, gknode, gvnode in top:
        try:
            _check_group_name(gname)
        except _Invalid as e:
            raise doc.error(gknode, gname, e.message) from None
        if gname != "all":
            group(gname, gknode, gname).parents.add("all")
        walk(gname, gvnode, gname, ())

    if not hosts:
        raise doc.error(top[0][1] if top else None, "all", "no hosts: no group lists any host")

    depth: dict[str, int] = {"all": 0}

    def depth_of(name: str, stack: tuple[str, ...] = ()) -> int:
        if name in depth:
            return depth[name]
        if name in stack:
            raise doc.error(groups[name].node, groups[name].path,
                            f"group cycle: {' -> '.join([*stack[stack.index(name):], name])}")
        parents = groups[name].parents or {"all"}
        depth[name] = 1 + max(depth_of(p, (*stack, name)) for p in parents)
        return depth[name]

    for gname in groups:
        depth_of(gname)

    def ancestors(name: str) -> set[str]:
        out: set[str] = set()
        todo = [name]
        while todo:
            g = todo.pop()
            for p in groups[g].parents if g in groups else ():
                if p not in out:
                    out.add(p)
                    todo.append(p)
        return out

    result = []
    all_vars = groups["all"].vars if "all" in groups else []
    for h in hosts.values():
        member = set(h.groups)
        for g in h.groups:
            member |= ancestors(g)
        member.discard("all")
        ordered = sorted(member, key=lambda g: groups[g].order)
        by_precedence = sorted(member, key=lambda g: (depth[g], groups[g].priority, g))
        chain = [*all_vars, *(v for g in by_precedence for v in groups[g].vars), *h.vars]
        level = _ansible_level(chain)
        conn = dict(level.conn)
        address = conn.pop("address", None)
        vars_ = _without_cleared(level.vars)
        result.append(_make_host(h.name, address, conn, vars_, tuple(ordered), h.line))
    _check_same_node_twice(doc, result)
    return tuple(result)


# ------------------------------------------------------------------------------------ entry point

def _is_ansible_group(doc: _Doc, node: yaml.Node) -> bool:
    if _is_null(node):
        return True
    if not isinstance(node, yaml.MappingNode):
        return False
    keys = [k.value for k, _ in node.value if isinstance(k, yaml.ScalarNode)]
    return bool(keys) and all(k in _ANSIBLE_GROUP_KEYS for k in keys)


_TOO_DEEP = "nested too deeply (hundreds of levels of lists or mappings): not an inventory"


def load_inventory(path: str | os.PathLike) -> Inventory:
    """Load a native or Ansible YAML inventory; raise :class:`InventoryError` when it is bad."""
    file = os.fspath(path)
    try:
        with open(file, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise InventoryError(file, None, None, "no such file") from None
    except IsADirectoryError:
        raise InventoryError(file, None, None, "is a directory, not an inventory file") from None
    except PermissionError:
        raise InventoryError(file, None, None, "permission denied") from None
    except OSError as e:
        raise InventoryError(file, None, None, f"cannot read: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise InventoryError(file, line, None, "not UTF-8 text") from None

    try:
        doc = _Doc(file, text)
    except RecursionError:
        raise InventoryError(file, None, None, _TOO_DEEP) from None
    try:
        root = doc.root
        if root is None:
            raise InventoryError(file, 1, None, "empty inventory: no hosts")
        if not isinstance(root, yaml.MappingNode):
            raise doc.error(root, None, f"top level must be a mapping (defaults/hosts/groups, or an "
                                        f"Ansible 'all:'), not {_node_kind(root)}")
        doc.check_duplicates()
        top = doc.items(root, "")
        keys = [k for k, _, _ in top]
        if "_meta" in keys:  # `ansible-inventory --list` prints JSON (which YAML reads) of another shape
            raise doc.error(next(kn for k, kn, _ in top if k == "_meta"), "_meta",
                            "an `ansible-inventory --list` JSON export is not read; export the YAML form instead: "
                            "ansible-inventory -i <your inventory> --list --yaml > hosts.yaml")
        native = [k for k in keys if k in _NATIVE_TOP]
        ansible = "all" in keys or (
            not native and bool(top) and all(_is_ansible_group(doc, v) for _, _, v in top)
        )
        if ansible:
            if native:
                kn = next(kn for k, kn, _ in top if k == native[0])
                raise doc.error(kn, native[0], f"mixes native key {native[0]!r} with an Ansible 'all:' group; "
                                               "use one format per file")
            hosts = _load_ansible(doc, top)
        else:
            for key, knode, _ in top:
                if key not in _NATIVE_TOP:
                    raise doc.error(knode, key, f"unknown top-level key {key!r}"
                                                f"{_suggest(key, [*_NATIVE_TOP, 'all'])}")
            hosts = _load_native(doc, {k: (kn, vn) for k, kn, vn in top})
    except RecursionError:
        raise InventoryError(file, None, None, _TOO_DEEP) from None
    finally:
        doc.close()
    return Inventory(path=file, hosts=hosts)
