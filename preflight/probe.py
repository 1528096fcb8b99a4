"""The probe: one generated, read-only bash script per host, and the reader of its output.

The commands are run by the node's python3 (:mod:`preflight.noderunner`, one process per
command) or, on a node without one, by the bash runner below (``timeout``, ``head -c`` and
``base64`` around each command); both print the same records.  Every command runs under its
own timeout, with stdin closed, its stdout and stderr capped and base64-encoded, so any bytes
a node prints come back intact and cannot be confused with the framing.  Framing lines start with a random nonce, so
login banners or ``echo`` lines in ``~/.bashrc`` around the script are ignored, and no
remote output can forge a record.  The script writes nothing on the node.

Record lines (one per line, nonce first)::

    <nonce> B <fact>          a command begins
    <nonce> O <base64>        its stdout
    <nonce> Z <base64>        its stdout, zlib-deflated first (the python runner, long outputs)
    <nonce> R <rc> <ms>       its exit status and run time in milliseconds
    <nonce> E <base64>        its stderr
    <nonce> S <fact> <why>    a command that was not run (its tool hung earlier)
    <nonce> I <fact>          a command is running (python runner, NPUs side by side: its B to E
                              lines come whole when it ends, so this opens no record)
    <nonce> END               the script finished
"""

from __future__ import annotations

import base64
import functools
import gzip
import json
import math
import re
import secrets
import shlex
import zlib
from dataclasses import dataclass
from pathlib import Path

# Parsers read the tools' English words ("character special file", "Status: active", "Connection
# refused"); a node set up in Chinese or German would otherwise answer in its language. LANGUAGE
# too: Python's gettext (ufw) reads it before LC_ALL. Python 3.6 under C would print ASCII only.
# The bash runner runs it as the commands' prefix, the python runner sets it in their environment.
from .noderunner import C_LOCALE, SUDO_REFUSED_ERE

DEFAULT_CAP = 1 << 20  # bytes of stdout (and of stderr) kept per command

# The install paths /etc/ascend_install.info records for the driver and the firmware
# (--install-path; CANN's set_env.sh reads them too), read as the parser (parse_kv) reads them:
# keys and values trimmed and unquoted, the first of each, a last line without its newline included.  Sets pf_drv and
# pf_fw (empty when not named) from the file "$pf_info"; read-only.
INSTALL_PATHS = r"""
pf_drv= pf_fw=
while IFS='=' read -r pf_k pf_v || [ -n "$pf_k" ]; do
  pf_k=${pf_k//[[:space:]]/}; pf_v=${pf_v%$'\r'}; pf_v=${pf_v#"${pf_v%%[![:space:]]*}"}; pf_v=${pf_v%"${pf_v##*[![:space:]]}"}
  pf_v=${pf_v#\"}; pf_v=${pf_v%\"}; pf_v=${pf_v%/}
  case ${pf_k,,} in  # the first of each counts, as in parse_kv
    driver_install_path_param) pf_drv=${pf_drv:-$pf_v};; firmware_install_path_param) pf_fw=${pf_fw:-$pf_v};;
  esac
done 2>/dev/null < "$pf_info"
""".strip()

# hccn_tool off PATH: in the driver's tools folder, /usr/local/Ascend's or the one
# /etc/ascend_install.info names.  Sets PF_HCCN when found; read-only.  Used by the probe and by
# phase two's pings.
FIND_HCCN = r"""
if [ -z "$PF_HCCN" ]; then
  pf_info=/etc/ascend_install.info
  @INSTALL_PATHS@
  for pf_d in /usr/local/Ascend "$pf_drv"; do
    [ -n "$pf_d" ] && [ -e "$pf_d/driver/tools/hccn_tool" ] && { PF_HCCN=$pf_d/driver/tools/hccn_tool; break; }
  done
fi
""".replace("@INSTALL_PATHS@", INSTALL_PATHS)

# Resolved once per script: the tools may be off PATH in a non-interactive session.
_PRELUDE = r"""
exec 3>&1
# A vendor tool crashing on a broken driver leaves no core file behind in the login's home.
ulimit -c 0 2>/dev/null
PF_NPUSMI=$(command -v npu-smi 2>/dev/null)
# -e, not -x: a tool that is there but not executable should say "permission denied", not "not found".
for p in /usr/local/bin/npu-smi /usr/local/sbin/npu-smi; do [ -z "$PF_NPUSMI" ] && [ -e "$p" ] && PF_NPUSMI=$p; done
PF_HCCN=$(command -v hccn_tool 2>/dev/null)
@FIND_HCCN@
: "${PF_NPUSMI:=npu-smi}" "${PF_HCCN:=hccn_tool}"
if [ -n "$PF_SUDO" ]; then
  # The inventory asked for sudo: the vendor tools (and only they) run through `sudo -n`, which
  # fails at once instead of prompting when a password would be needed. Commands keep calling
  # "$PF_NPUSMI" / "$PF_HCCN"; these names now resolve to exported functions.
  PF_NPUSMI_BIN=$PF_NPUSMI; PF_HCCN_BIN=$PF_HCCN
  pf_sudo_npusmi() { sudo -n -- "$PF_NPUSMI_BIN" "$@"; }
  pf_sudo_hccn() { sudo -n -- "$PF_HCCN_BIN" "$@"; }
  export -f pf_sudo_npusmi pf_sudo_hccn
  export PF_NPUSMI_BIN PF_HCCN_BIN
  PF_NPUSMI=pf_sudo_npusmi; PF_HCCN=pf_sudo_hccn
fi
export PF_NPUSMI PF_HCCN
PF_DEVS=$(cd /dev 2>/dev/null && for d in davinci[0-9]*; do case ${d#davinci} in *[!0-9]*|'') ;; *) echo "${d#davinci}";; esac; done | sort -n)
# Prefixed to every command: when its shell exits, what it left running in its process group
# (timeout's; a background child holding a pipe) is killed, as the python runner does. Not
# timeout itself ($PPID): it reports the exit status. Only when that group is timeout's own (GNU
# timeout makes one; busybox's does not, and the group would then be the whole probe's). Without
# pgrep (procps) nothing is reaped.
PF_REAP='trap '\''read -r _ _ _ _ pf_g _ </proc/$$/stat 2>/dev/null; [ "$pf_g" = "$PPID" ] && for p in $(pgrep -g 0 2>/dev/null); do [ "$p" = "$$" ] || [ "$p" = "$PPID" ] || kill -KILL "$p" 2>/dev/null; done'\'' EXIT; '
pf_run() {  # fact-name tool timeout-seconds command
  local v="PF_HUNG_${2//[!A-Za-z0-9]/_}" t0 e rc ms
  if [ -n "${!v}" ]; then printf '%s S %s %s\n' "$PF" "$1" "${!v}"; return; fi
  printf '%s B %s\n%s O ' "$PF" "$1" "$PF"
  # Microseconds, without forking a subshell; bash < 5 has no EPOCHREALTIME: whole seconds then,
  # enough for the hang breaker below.
  t0=${EPOCHREALTIME//[!0-9]/}; t0=${t0:-0}; local s0=$SECONDS
  # stdout: capped, base64'd straight to the channel (fd 3); stderr: capped, base64'd into $e,
  # together with the exit status written as ":<rc>:" (fd 5; ':' is not in base64's alphabet,
  # so wherever that small write lands it can be cut out again). The readers are bounded too,
  # so a background child that keeps a pipe open cannot hold the probe past the timeout; by 3 s
  # more than the command: killed with it, head would lose what it had read but not yet written.
  local rt=$(( $3 + 3 ))
  e=$( { { timeout -k 2 "$3" bash -c "$PF_REAP$4" </dev/null 2>&4 3>&- 4>&- 5>&- \
             | timeout -k 1 "$rt" head -c "$PF_READ" | base64 -w 0 >&3
           echo ":${PIPESTATUS[0]}:" >&5; } 4>&1 | timeout -k 1 "$rt" head -c "$PF_READ" | base64 -w 0; } 5>&1 )
  rc=${e#*:}; rc=${rc%%:*}
  e=${e/:$rc:/}; e=${e//$'\n'/}
  ms=${EPOCHREALTIME//[!0-9]/}; ms=$(( t0 ? (${ms:-0} - t0) / 1000 : (SECONDS - s0) * 1000 ))
  printf '\n%s R %s %s\n%s E %s\n' "$PF" "$rc" "$ms" "$PF" "$e"
  # A command killed by its timeout: later calls of the same tool are skipped, so one hung
  # tool costs one timeout, not one per NPU.
  case $rc in 124|137) [ "$ms" -ge "$(( $3 * 1000 - 500 ))" ] && printf -v "$v" '%s' "$2 timed out earlier on this host ($1)";;
    # One sudo refusal is the answer for every call of the tool (each more: an auth-log entry).
    0) ;; *) [ "$PF_NPUSMI" = pf_sudo_npusmi ] && printf %s "$e" | base64 -d 2>/dev/null | grep -qE "$PF_SUDO_REFUSED" \
         && printf -v "$v" '%s' "sudo -n refused $2 earlier on this host ($1)";; esac
}
""".replace("@FIND_HCCN@", FIND_HCCN.strip())


@dataclass(frozen=True)
class ProbeCommand:
    """One command of the script. ``per_device`` commands run once per /dev/davinciN,
    with ``$PF_DEV`` set to N; their facts are named ``name/N``."""

    name: str
    command: str
    tool: str = ""  # commands of one tool share the hang breaker
    per_device: bool = False
    keep_locale: bool = False  # run in the session's own locale (a command reporting the session)


def packed(text: str) -> str:
    """``text`` gzipped and base64'd, for a node to unpack with ``base64 -d | gzip -dc``.

    The whole remote command reaches the node's shell as one argument, which Linux caps at
    128 KiB: the inventory's names as they are (31 bytes each for FQDNs) would pass that at
    about 2 800 hosts and every probe would fail with "Argument list too long"."""
    return base64.b64encode(gzip.compress(text.encode(), mtime=0)).decode() if text else ""


def expand_home(var: str) -> str:
    """A shell line that expands a leading ``~`` in ``$var`` as the job's shell would (HOME, or the
    account's home when unset): the probe quotes paths, so no shell did it."""
    return f'case ${var} in "~") {var}=~ ;; "~/"*) {var}=~/${{{var}#"~/"}} ;; esac'


def whole_seconds(seconds: float) -> int:
    """A limit for `timeout` or ConnectTimeout: whole seconds, never 0 (which means none)."""
    return max(1, math.ceil(seconds))


def new_nonce() -> str:
    return "PF" + secrets.token_hex(8)


_PARAM_NAME = re.compile(r"^PF_[A-Z][A-Z0-9_]*$")


def build_script(commands, nonce: str, timeout: float, cap: int = DEFAULT_CAP,
                 params: dict[str, str] | None = None, runner: str = "auto") -> str:
    """The probe for one host.  ``params`` (names ``PF_*``) are exported, quoted, before the
    commands run: commands read inventory or job values as ``"$PF_NAME"``, never by having
    them pasted into their text.

    ``runner``: ``"auto"`` runs the commands with the node's python3 (preflight/noderunner.py)
    when it has one and falls back to bash; ``"bash"`` always uses bash.  Both print the same
    records."""
    if runner not in ("auto", "bash"):
        raise ValueError(f"runner must be 'auto' or 'bash', not {runner!r}")
    use_python = runner == "auto"
    # One byte over the cap is read, so that exactly `cap` bytes are not flagged as truncated.
    lines = ["set +e", f"PF={nonce}", f"PF_READ={int(cap) + 1}"]
    for name, value in sorted((params or {}).items()):
        if not _PARAM_NAME.match(name):
            raise ValueError(f"probe parameter name {name!r} must match {_PARAM_NAME.pattern}")
        if "\0" in str(value):
            raise ValueError(f"probe parameter {name} contains a NUL byte")
        lines.append(f"export {name}={shlex.quote(str(value))}")
    lines.append(f"PF_SUDO_REFUSED={shlex.quote(SUDO_REFUSED_ERE)}")
    lines.append(_PRELUDE)
    # The leading newline ends whatever a login banner printed without one.
    lines.append('printf \'\\n%s B probe.devices\\n%s O %s\\n%s R 0 0\\n%s E \\n\' "$PF" "$PF" '
                 '"$(echo $PF_DEVS | base64 -w 0)" "$PF" "$PF"')
    t = f"{whole_seconds(timeout)}"

    def text(cmd) -> str:
        return cmd.command if cmd.keep_locale else C_LOCALE + cmd.command

    def call(cmd) -> str:
        tool = shlex.quote(cmd.tool or cmd.name)
        body = shlex.quote(text(cmd))
        if cmd.per_device:
            return f'for PF_DEV in $PF_DEVS; do export PF_DEV; pf_run "{cmd.name}/$PF_DEV" {tool} {t} {body}; done'
        return f"pf_run {shlex.quote(cmd.name)} {tool} {t} {body}"

    groups = command_groups(commands)
    bash_runner = []
    # Groups after the first run at the same time as it, as background jobs: each one's records are
    # buffered in a variable (no temp files) and printed whole after the first group, in order, so
    # records never interleave.  Within a group, commands stay sequential: every call of one tool
    # is in one group, so the hang breaker (PF_HUNG_*) still sees them all.  (The python runner
    # goes further: a tool asked only about NPUs is asked about them side by side, one call per
    # NPU at a time; see noderunner.Group._run_lanes.)
    for i, group in enumerate(groups[1:], 1):
        bash_runner.append(f"pf_g{i}() {{\n" + "\n".join(call(c) for c in group) + "\n}")
        # Process substitution needs /dev/fd; without it (a bare /dev) the group runs after the first.
        bash_runner.append(f'pf_o{i}=; [ -e /dev/fd/0 ] && '
                           f'exec {{pf_o{i}}}< <(pf_b=$(pf_g{i} 3>&1); printf \'%s\\n\' "$pf_b")')
    bash_runner.extend(call(c) for c in (groups[0] if groups else ()))
    for i in range(1, len(groups)):
        bash_runner.append(f'if [ -n "$pf_o{i}" ]; then cat <&"$pf_o{i}"; exec {{pf_o{i}}}<&-; else pf_g{i}; fi')
    if not use_python:
        lines.extend(bash_runner)
    else:
        # The same records from preflight/noderunner.py, one process per command instead of about
        # ten; the bash runner stays for nodes without a usable python3 (or if the runner fails).
        plan = [[[c.name, c.tool, text(c), c.per_device] for c in g] for g in groups]
        lines.append("pf_bash_runner() {\n" + "\n".join(bash_runner or [":"]) + "\n}")
        lines.append(f"PF_PYRUN={shlex.quote(_node_runner_source())}")
        lines.append(f"PF_PLAN={shlex.quote(json.dumps(plan))}")
        lines.append('PF_PY3=; for p in /usr/bin/python3 "$(command -v python3 2>/dev/null)"; do '
                     '[ -z "$PF_PY3" ] && [ -x "$p" ] && PF_PY3=$p; done')
        # A runner stopped by a signal (the SSH channel gone: 141, or the run stopped) is not one
        # that failed: the bash runner would run every command again with no one reading.
        lines.append(f'if [ -z "$PF_PY3" ]; then pf_bash_runner; else "$PF_PY3" -I -S -B -c "$PF_PYRUN" "$PF" '
                     f'"$PF_READ" {t} "$PF_PLAN" "$PF_DEVS" "${{BASH:-bash}}" 3>&- </dev/null; pf_rc=$?; '
                     'if [ "$pf_rc" -ge 128 ]; then exit "$pf_rc"; elif [ "$pf_rc" -ne 0 ]; then pf_bash_runner; fi; fi')
    lines.append('printf \'%s END\\n\' "$PF"')
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=1)
def _node_runner_source() -> str:
    # Comment lines are not sent: they are for readers of noderunner.py, not for the node.
    text = Path(__file__).with_name("noderunner.py").read_text()
    return "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("#")) + "\n"


def command_groups(commands) -> list[list[ProbeCommand]]:
    """Commands that may run at the same time on the node, as groups run one after another.

    A tool called more than once (per device, or by several facts: npu-smi, hccn_tool) gets a
    group of its own; all other commands share the first group.  The python runner streams every
    group's records as its commands end (so they survive a later hang and the host deadline); the
    bash runner the first group's.  Order within a group is the order given."""
    commands = list(commands)
    uses: dict[str, int] = {}
    for c in commands:
        if c.tool:
            uses[c.tool] = uses.get(c.tool, 0) + (2 if c.per_device else 1)
    groups: dict[str, list[ProbeCommand]] = {"": []}
    for c in commands:
        key = c.tool if c.tool and uses[c.tool] > 1 else ""
        groups.setdefault(key, []).append(c)
    return [g for g in groups.values() if g]


@dataclass
class CommandOutput:
    stdout: str
    stderr: str
    rc: int | None  # None: the command never finished (the script was cut off)
    elapsed_s: float = 0.0
    truncated: bool = False
    skipped: str | None = None  # why the command was not run

    def to_json(self) -> dict:
        return {"stdout": self.stdout, "stderr": self.stderr, "rc": self.rc,
                "elapsed_s": self.elapsed_s, "truncated": self.truncated, "skipped": self.skipped}

    @classmethod
    def from_json(cls, data: dict) -> "CommandOutput":
        return cls(stdout=data.get("stdout", ""), stderr=data.get("stderr", ""), rc=data.get("rc"),
                   elapsed_s=data.get("elapsed_s", 0.0), truncated=data.get("truncated", False),
                   skipped=data.get("skipped"))


@dataclass
class ProbeOutput:
    outputs: dict[str, CommandOutput]
    complete: bool  # the END record arrived


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text.strip(), validate=False)
    except (ValueError, TypeError):
        return b""


def _inflate(data: bytes, cap: int) -> bytes:
    """A Z record's stdout, never more than ``cap + 1`` bytes (enough to tell it was cut)."""
    try:
        return zlib.decompressobj().decompress(data, cap + 1)
    except zlib.error:
        return b"<a compressed output that does not inflate>"


def parse_probe_output(data: bytes | str, nonce: str, cap: int = DEFAULT_CAP) -> ProbeOutput:
    """Read the records of one probe run; lines without the nonce are ignored."""
    if isinstance(data, bytes):
        data = data.decode("utf-8", errors="replace")
    outputs: dict[str, CommandOutput] = {}
    current: CommandOutput | None = None
    complete = False
    prefix = nonce + " "
    for line in data.splitlines():
        if not line.startswith(prefix):
            if line.strip() == nonce + " END" or line == nonce + " END":
                complete = True
            continue
        kind, _, rest = line[len(prefix):].partition(" ")
        if kind == "B":
            current = CommandOutput(stdout="", stderr="", rc=None)
            outputs[rest.strip()] = current
        elif kind in ("O", "Z") and current is not None:
            raw = _b64(rest) if kind == "O" else _inflate(_b64(rest), cap)
            current.truncated = len(raw) > cap
            current.stdout = raw[:cap].decode("utf-8", errors="replace")
        elif kind == "R" and current is not None:
            parts = rest.split()
            try:
                current.rc = int(parts[0])
                current.elapsed_s = int(parts[1]) / 1000 if len(parts) > 1 else 0.0
            except (ValueError, IndexError):
                current.rc = None
        elif kind == "E" and current is not None:
            raw = _b64(rest)
            current.truncated |= len(raw) > cap
            current.stderr = raw[:cap].decode("utf-8", errors="replace")
            current = None
        elif kind == "I":
            # A call that started (its records come whole when it ends): without them it is one
            # the probe's end cut off, not one never run.
            outputs.setdefault(rest.strip(), CommandOutput(stdout="", stderr="", rc=None))
        elif kind == "S":
            name, _, why = rest.partition(" ")
            outputs[name] = CommandOutput(stdout="", stderr="", rc=None, skipped=why or "not run")
        elif kind == "END":
            complete = True
    return ProbeOutput(outputs=outputs, complete=complete)
