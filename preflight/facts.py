"""Facts: what the probe collects, how each output is parsed, and the per-host store.

A fact is a named read-only command plus a pure parser.  Checks name the facts they
need (``@check(needs=...)``); the plan turns the selected checks into the list of
commands of one probe script.  Parsing is lazy and cached, and a fact that cannot be
read (tool missing, timed out, garbage) becomes a precise :class:`FactUnavailable`
that the check reports as an ``error`` result.
"""

from __future__ import annotations

import re
import shlex
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from .parsers import ParseError
from .parsers import crossnode
from .parsers import hccn_tool as hccn
from .parsers import npu_smi
from .parsers import system
from .noderunner import SUDO_REFUSED_ERE
from .probe import CommandOutput, ProbeCommand
from .results import is_secret_name, redact_secrets, shortened, visible


class FactUnavailable(Exception):
    """A fact could not be read; the message says why, in an operator's words.
    ``tool_missing``: the command's tool is not on the host (exit 127), which for some checks
    means "does not apply here" rather than "could not be evaluated"."""

    def __init__(self, message: str, tool_missing: bool = False):
        super().__init__(message)
        self.tool_missing = tool_missing

    def __reduce__(self):  # kept across processes (sharded gathering) with its flag
        return type(self), (str(self), self.tool_missing)


@dataclass(frozen=True)
class FactSpec:
    name: str
    command: str
    parse: Callable[[str], Any]
    tool: str = ""
    per_device: bool = False
    ok_rc: tuple[int, ...] = (0,)  # exit codes whose stdout is meaningful
    # For a non-zero ok_rc: what the tool says on stderr when that exit is its answer (hccn_tool's
    # "no ip was preset"); other words with that exit code are a failure.  None: any stderr.
    ok_stderr: str | None = None
    display: str = ""  # the command as an operator would type it, for messages
    phase: int = 1  # 2: gathered by the cross-node phase (preflight.activeprobe), not by the probe script
    keep_locale: bool = False  # the session's own locale (facts reporting the session's environment)
    own_timeout: float | None = None  # seconds the command's own `timeout` allows, when below the probe's

    def probe_command(self) -> ProbeCommand:
        return ProbeCommand(self.name, self.command, tool=self.tool, per_device=self.per_device,
                            keep_locale=self.keep_locale)


def _optional_path(text: str) -> str | None:
    text = text.strip()
    return text.splitlines()[0] if text else None


FACTS: dict[str, FactSpec] = {spec.name: spec for spec in [
    FactSpec("session.env", "env -0", system.parse_env0, keep_locale=True,
             display="env (non-interactive SSH session)"),
    FactSpec("session.nofile", 'printf "%s %s\\n" "$(ulimit -Sn)" "$(ulimit -Hn)"', system.parse_nofile,
             display="ulimit -Sn; ulimit -Hn"),
    # iproute2 before 4.14 (CentOS 7's 4.11) says `Option "-j" is unknown`: its text form then.
    FactSpec("net.interfaces", "ip -j addr show 2>/dev/null || { echo " + system.IP_TEXT_MARK + "; ip addr show; }",
             system.parse_ip_addr, tool="ip", display="ip -j addr show"),
    # The IPv6 table may be missing (IPv6 disabled on the node): then its part is empty.
    FactSpec("net.routes", "ip -4 -o route show table main && { echo " + system.ROUTES_V6_MARK + "; "
             "ip -6 -o route show table main 2>/dev/null; true; }",
             system.parse_ip_route, tool="ip", display="ip route show table main"),
    FactSpec("net.listening", "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null", system.parse_listening_ports,
             ok_rc=(0, 1), display="cat /proc/net/tcp /proc/net/tcp6"),
    FactSpec("dev.nodes",
             "cd /dev && stat -c '%n|%F|%t|%T|%U|%G|%a' -- davinci* vdavinci* davinci_manager devmm_svm hisi_hdc "
             "2>/dev/null; for f in davinci* davinci_manager devmm_svm hisi_hdc; do [ -c \"$f\" ] || continue; "
             "if [ -r \"$f\" ] && [ -w \"$f\" ]; then echo \"@@A|$f|rw\"; else echo \"@@A|$f|no\"; fi; done; true",
             system.parse_dev_listing, display="ls -l /dev/davinci* /dev/devmm_svm /dev/hisi_hdc"),
    # -V names the rcmd modules: yum's pdsh comes without ssh (package pdsh-rcmd-ssh).
    FactSpec("tools.pdsh", "p=$(command -v pdsh) && { printf '%s\\n' \"$p\"; \"$p\" -V 2>&1; "
             "f=" + system.RCMD_DEFAULT_FILE + "; [ -e \"$p.bin\" ] && [ -r $f ] && "
             "echo \"" + system.RCMD_DEFAULT_MARK + "$(head -c 64 $f)\"; true; }",
             system.parse_pdsh, ok_rc=(0, 1),
             display="command -v pdsh; pdsh -V"),
    FactSpec("tools.python3", "command -v python3", _optional_path, ok_rc=(0, 1), display="command -v python3"),
    FactSpec("npu_smi.info", '"$PF_NPUSMI" info', npu_smi.parse_npu_smi_info, tool="npu-smi",
             display="npu-smi info"),
    FactSpec("hccn.link", '"$PF_HCCN" -i "$PF_DEV" -link -g', hccn.parse_link, tool="hccn_tool",
             per_device=True, display="hccn_tool -i {dev} -link -g"),
    FactSpec("hccn.tls", '"$PF_HCCN" -i "$PF_DEV" -tls -g', hccn.parse_tls, tool="hccn_tool",
             per_device=True, display="hccn_tool -i {dev} -tls -g"),
    # An unconfigured port prints nothing on stdout and "Get ipconf failed, because no ip was preset
    # there!" on stderr, exit 13 (the driver's 0x400D; 1 where a driver says nothing more): parsed
    # as None, not an error.  Exit 1 with other words ("Command execute failed!") is a failure.
    FactSpec("hccn.ip", '"$PF_HCCN" -i "$PF_DEV" -ip -g', hccn.parse_ip, tool="hccn_tool", per_device=True,
             ok_rc=(0, 1, 13), ok_stderr=r"no ip was preset", display="hccn_tool -i {dev} -ip -g"),
    FactSpec("net.resolve",
             # One getent for every name (not one per name: that is N processes on each of N nodes).
             # Without a name, getent would list the whole hosts database instead.
             # The names come packed (preflight.probe.packed); unpacked here, never exported (an
             # environment string has the same 128 KiB cap).
             'names=; if [ -n "$PF_HOSTNAMES_GZ" ]; then '
             'names=$(printf %s "$PF_HOSTNAMES_GZ" | base64 -d | gzip -dc) && [ -n "$names" ] '
             '|| { echo "cannot unpack the inventory names (base64 -d | gzip -dc)" >&2; exit 3; }; fi; '
             # An address is not looked up (its reverse lookup could wait on DNS, and it resolves to
             # itself): it prints as a query line.  The other names: IPv4 first, as the job's
             # connections go (getent hosts asks for IPv6 first: an AAAA record in DNS hid a stale
             # IPv4 line in /etc/hosts); those with no IPv4 address again, any family, where the node
             # has IPv6.  The key 0.0.0.1 after each name splits getent's lines into one block per
             # name, in one process however many are missing; per name, the first address (what the
             # job connects to) and every address (crossnode.RESOLVE_BLOCKS).  printf and awk build
             # the lists, not a loop appending to a string (quadratic in bash: 10 s at 10 000 names).
             # Every step needs awk: without it, that is the error (not getent missing).
             'command -v awk >/dev/null || { echo "awk not found: name resolution is not read without it" >&2; '
             'exit 3; }; '
             'printf "%s\\n" $names | awk \'NF && ($1 ~ /:/ || $1 !~ /[^0-9.]/) {print "query", $1}\'; '
             'ask=$(printf "%s\\n" $names | awk \'$1 !~ /:/ && $1 ~ /[^0-9.]/\'); '
             # Without getent every name would read as unresolved: say it is missing instead.
             'if [ -n "$ask" ]; then command -v getent >/dev/null || exit 127; '
             'pf_blocks=' + shlex.quote(crossnode.RESOLVE_BLOCKS) + '; '
             # pf_res TAG DATABASE NAME...: one line per name.  Names getent stopped before are asked
             # again one by one, each closed by a key line of our own.  A getent answering nothing
             # for ahostsv4, not even the key, but answering ahosts is a node with no IPv4 address
             # (glibc's getent asks with AI_ADDRCONFIG, which does not count loopback): every name
             # is missing there, for the second pass.  One answering neither is an error, not every
             # name unresolved.
             'pf_key() { getent "$1" 0.0.0.1 2>/dev/null | awk \'$3 == "0.0.0.1" {f = 1} END {exit !f}\'; }; '
             'pf_res() { t=$1 db=$2; shift 2; k=$(printf "%s 0.0.0.1 " "$@"); '
             'o=$({ printf "name %s\\n" "$@"; getent "$db" $k 2>/dev/null; } | awk -v tag="$t" "$pf_blocks") '
             '&& [ -n "$o" ] || { echo "awk could not sort the answers of getent $db" >&2; return 3; }; '
             'u=$(printf "%s\\n" "$o" | awk \'$1 == "unreached" {print $2}\'); '
             'if [ -z "$u" ]; then printf "%s\\n" "$o"; return 0; fi; '
             'if ! pf_key "$db"; then pf_key ahosts || { echo "getent $db answers nothing, not even for 0.0.0.1" >&2; '
             'return 3; }; printf "%s\\n" "$o" | awk \'$1 == "unreached" {$1 = "miss"} {print}\'; return 0; fi; '
             'printf "%s\\n" "$o" | awk \'$1 != "unreached"\'; '
             '{ printf "name %s\\n" $u; for n in $u; do getent "$db" "$n" 2>/dev/null; echo "0.0.0.1 STREAM 0.0.0.1"; '
             'done; } | awk -v tag="$t" "$pf_blocks"; }; '
             'out=$(pf_res v4 ahostsv4 $ask) || exit 3; '
             'printf "%s\\n" "$out"; miss=$(printf "%s\\n" "$out" | awk \'$1 == "miss" {print $2}\'); '
             # A node without a global IPv6 address reaches no node over IPv6: no second pass (a
             # missing name costs a DNS lookup or two more).
             'if [ -n "$miss" ] && awk \'$4 == "00" && $1 != "00000000000000000000000000000001" {f = 1} END {exit !f}\' '
             '/proc/net/if_inet6 2>/dev/null; then pf_res any ahosts $miss || exit 3; fi; fi; '
             # The last line: output cut at the probe's cap has none (crossnode.parse_resolve).
             'printf "%s\\n" $names | awk \'NF && !seen[$1]++ {n++} END {print "end", n + 0}\'',
             crossnode.parse_resolve, display="getent ahostsv4 <every inventory name>"),
    # Phase two (preflight.activeprobe): probes between nodes, built from phase one's facts.
    FactSpec("tcp.ray", "", crossnode.parse_tcp_probes, phase=2,
             display="TCP connects to the Ray head's ports"),
    FactSpec("tcp.rendezvous", "", crossnode.parse_tcp_probes, phase=2,
             display="TCP connect to MASTER_ADDR:MASTER_PORT"),
    FactSpec("tcp.hccl", "", crossnode.parse_tcp_probes, phase=2,
             display="TCP connects to the next node's HCCL host ports"),
    FactSpec("ssh.launcher", "", crossnode.parse_launcher_ssh, phase=2,
             display="ssh -o BatchMode=yes from the launcher to every node"),
    FactSpec("clock.offset", "", crossnode.parse_clock_offset, phase=2, display="date +%s.%N"),
    FactSpec("storage.shared", "", crossnode.parse_storage, phase=2,
             display="marker file written on one node, looked for on the others"),
    FactSpec("hccn.ping", "", crossnode.parse_ping_matrix, phase=2,
             display="hccn_tool -i <N> -ping -g address <peer device IP>"),
]}


def register(*specs: FactSpec) -> None:
    """Add facts from another module (one module per area keeps this file small).

    Such modules are imported at the end of this file, so every fact is known before any
    check is planned."""
    for spec in specs:
        if spec.name in FACTS:
            raise ValueError(f"fact {spec.name!r} is defined twice")
        FACTS[spec.name] = spec


def resolve(names) -> list[FactSpec]:
    """The specs for fact names (an optional need is written ``name?``), in registry order."""
    wanted = {n.rstrip("?") for n in names if not n.endswith("?") or n.rstrip("?") in FACTS}
    unknown = wanted - FACTS.keys()
    if unknown:
        raise KeyError(f"unknown fact(s): {', '.join(sorted(unknown))}")
    return [spec for name, spec in FACTS.items() if name in wanted]


def _first_line(text: str) -> str:
    """The first line that says something: not blank, not a table's border (npu-smi's `+-----+`)."""
    for line in text.splitlines():
        if line.strip() and line.strip(" +-=|"):
            return line.strip()[:160]
    return ""


# Why a probe ended early, as gather.py records it (HostFacts.error_kind): the probe's unfinished
# and missing commands say this instead of the usual cause, the host's deadline.
_CONNECTION_LOST = "the SSH connection was lost in the middle of the probe"


def _command_named(text: str) -> str:
    """"hccn_tool timed out earlier on this host (hccn.link/0)": the fact id the node names is
    shown as its command (`hccn_tool -i 0 -link -g`), which an operator can run."""
    m = re.search(r"\(([a-z_]+\.[a-z_.]+)(?:/(\d+))?\)$", text)
    spec = FACTS.get(m.group(1)) if m else None
    if spec is None:
        return text
    command = (spec.display or spec.command).format(dev=m.group(2) or "N")
    return f"{text[:m.start()]}(`{command}`)"


def _why_unusable(spec: FactSpec, out: CommandOutput, shown: str, timeout_hint: str,
                  lost: bool = False) -> str | None:
    if out.skipped:
        return f"`{shown}` was not run: {_command_named(out.skipped)}"
    if out.rc is None:
        if lost:
            return f"`{shown}` did not finish: {_CONNECTION_LOST}"
        return f"`{shown}` did not finish before the host's deadline"
    if out.rc in (124, 137):
        return f"`{shown}` timed out{timeout_hint} (hung tool)"
    if out.truncated and out.rc == 141:
        return None  # SIGPIPE from our own output cap: judge the part that was kept
    if out.rc == 127 and "error while loading shared libraries" in out.stderr:
        # The loader's exit is 127 too: the tool is there, its libraries are not.
        return f"`{shown}`: cannot start, error while loading shared libraries ({visible(_first_line(out.stderr))})"
    if out.rc == 127:
        tool = spec.tool or shown.split()[0]
        return f"`{shown}`: {tool} not found on the host (not installed, or not on PATH in a non-interactive session)"
    if out.rc == 126:
        return f"`{shown}`: permission denied"
    if out.rc != 0 and re.search(r"permission denied", out.stderr, re.I):  # hccn_tool's own: exit 12
        return f"`{shown}`: permission denied ({visible(_first_line(out.stderr))})"
    if out.rc != 0 and ("a password is required" in out.stderr or "a terminal is required" in out.stderr):
        return (f"`{shown}`: sudo -n needs a password on this host (inventory sudo: true); allow the preflight "
                f"user to run npu-smi and hccn_tool without one (NOPASSWD in sudoers)")
    refusal = _SUDO_REFUSED.search(out.stderr) if out.rc != 0 else None
    if refusal:
        # sudo's own failures exit 1, which some tools' facts accept (hccn_tool -ip -g on an NPU
        # without an address): read as the tool's answer, every NPU would have "no device IP".
        return f"`{shown}`: sudo -n refused to run it (inventory sudo: true): {visible(refusal.group(0).strip())}"
    # sudo's own harmless words ("sudo: unable to resolve host ...") are not the tool's.
    tool_words = "\n".join(line for line in out.stderr.splitlines() if not line.startswith("sudo: "))
    odd_words = (out.rc != 0 and spec.ok_stderr is not None and tool_words.strip()
                 and not re.search(spec.ok_stderr, tool_words))
    if out.rc not in spec.ok_rc or odd_words:
        # quoted as it is (not repr'd): a node's control characters written out, not sent to the terminal
        detail = visible(_first_line(out.stderr) or _first_line(out.stdout) or "no output")
        return f"`{shown}` failed with exit code {out.rc}: {detail}"
    return None


SUDO_REFUSAL = SUDO_REFUSED_ERE  # sudo's own refusals, as the node reads them (preflight.noderunner)
_SUDO_REFUSED = re.compile(SUDO_REFUSAL + ".*$", re.M)


# What an operator does about a fact that could not be read, by the reason _why_unusable (or the
# parse step) gave: a check that cannot be evaluated still says what to do next.  First match wins;
# the reasons that quote a tool's own output (its first line) come first, so that text cannot pick.
REACHABLE_POINTER = ("See cluster.reachable for the host that was not reached: why, and what to do; this check "
                     "runs once it answers.")
_UNEVALUATED_REMEDIES = (
    ("the tool printed more", "The command printed more than the 1 MiB per command the probe keeps, and its "
     "output was cut. Run it on that node to see what it prints at such length (a tool repeating an error is the "
     "usual cause). For name resolution (getent ahostsv4 <every inventory name>) it is an inventory of about "
     "19 000 names or more: split it into groups run from separate controllers and merge their preflight.json "
     "files (README, Past one controller)."),
    ("unreadable output", "Run the command shown on that node and read what it prints: an error text instead "
     "of the usual table (driver not loaded, device in error) is the problem to fix; a driver release that "
     "prints another layout is a preflight bug to report with that output."),
    ("failed with exit code", "Run the command shown on that node to see its whole error, fix what it reports "
     "(driver not loaded, device in error, a missing library) and re-run the preflight."),
    # cluster.reachable says why and what to do, once per host: a pointer to it, not its text again.
    ("is unreachable", REACHABLE_POINTER),
    ("error while loading shared libraries", "The tool is there but its libraries are not: in a container, mount "
     "the host's /usr/local/Ascend/driver/lib64 (and /usr/local/dcmi); on a host, reinstall the NPU driver; make "
     "sure LD_LIBRARY_PATH includes the driver's lib64 in non-interactive sessions."),
    ("sudo -n needs a password", "Allow the preflight user to run npu-smi and hccn_tool without a password "
     "(NOPASSWD for those two in sudoers), or run the preflight as root."),
    ("sudo -n refused", "Let the preflight user run npu-smi and hccn_tool through sudo without a password or a "
     "terminal: a sudoers rule naming their full paths with NOPASSWD, no requiretty for that user, their "
     "folder in secure_path; or run the preflight as root."),
    ("(its own limit)", "The command has a fixed limit of its own, which --command-timeout does not change. Run "
     "it by hand on that node to see where it hangs: a shell start-up file, or a Python path or home directory on a "
     "network filesystem that does not answer, is the usual cause."),
    ("timed out earlier on this host", "The tool hung on the earlier call named, so its later calls were skipped "
     "and the run could end: these were not run, not found broken. Run that call by hand on the node: if it hangs "
     "there too, the NPU driver or device is stuck (read dmesg and npu-smi info; an operator may have to reset that "
     "NPU or reboot the node); if it is only slow, re-run with a larger --command-timeout."),
    ("timed out", "The command did not answer within --command-timeout. Run it by hand on that node: if it "
     "hangs there too, the NPU driver or device is stuck (read dmesg and npu-smi info; an operator may have "
     "to reset that NPU or reboot the node); if it is only slow, re-run with a larger --command-timeout."),
    (_CONNECTION_LOST, "The node's SSH connection dropped while the probe ran (sshd restarted or was killed, "
     "the node rebooted or ran out of memory, a network blip): check that the node is up and read its sshd "
     "log and dmesg, then re-run the preflight."),
    ("before the host's deadline", "The node's probe ran past --host-timeout: re-run with a larger "
     "--host-timeout, or run the command shown by hand on that node to see which one is slow."),
    ("not found on the host", "Install the tool on that node, or make it visible to a non-interactive SSH "
     "session (PATH exported before ~/.bashrc's interactive-only return, or in /etc/environment); in a "
     "container, mount /usr/local/Ascend/driver and the tools from the host."),
    ("permission denied", "Run the preflight as a user allowed to execute the tool (root, or sudo: true in the "
     "inventory with NOPASSWD for npu-smi and hccn_tool)."),
    ("is not in the facts file", "Capture the facts again with --facts-out from a run of every check (no -k), "
     "or select with -k only the checks that the file's facts cover."),
    ("was not gathered", "The probe ended before this command ran (the run was interrupted, or the host ran "
     "out of --host-timeout): re-run the preflight, with a larger --host-timeout if the host is slow."),
    ("was not reached", REACHABLE_POINTER),
    ("no /dev/davinciN device nodes", "Load the NPU driver on the node (npu-smi info must list its NPUs); in a "
     "container, pass the NPUs in: --device /dev/davinciN for each, with /dev/davinci_manager, /dev/devmm_svm and "
     "/dev/hisi_hdc, then re-run the preflight."),
    # A cluster-wide check over nodes whose own facts could not be read: each node's result says why.
    ("unreadable on", "Each node named has its own result (its row in the report) saying why its output could "
     "not be read: fix that there and re-run the preflight."),
    ("could be read", "Every node's own result (its row in the report) says why its output could not be read: "
     "fix that and re-run the preflight."),
)


def remedy_for_unevaluated(message: str) -> str:
    """The next step for a check that could not be evaluated because of ``message`` ("" if none fits)."""
    for phrase, remedy in _UNEVALUATED_REMEDIES:
        if phrase in message:
            return remedy
    return ""


class SharedOutputs:
    """The outputs several hosts of one run printed alike: each text kept once and parsed once.

    A fleet is meant to be uniform, so most of its outputs repeat: the same ``hccn_tool -link``
    on every NPU, the same CANN file list, and the same ``getent hosts`` answer for every
    inventory name on every node (N names on N nodes: at 1000 hosts ~40 MB of text, and ~25 MB
    of parsed dictionaries, held once per host).  Parsers are pure functions of the text and
    checks only read facts, so one parsed value serves every host that printed that text.

    While gathering, :meth:`keep` remembers every text; :meth:`close_intake` then forgets the
    texts seen once (a text printed by one host is dropped once parsed, as before)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # probes finish on the gathering pool's threads
        self._seen: dict[str, str] | None = {}
        self._repeated: set[str] = set()
        self._parsed: dict[tuple[str, str], Any] = {}

    def keep(self, outputs: dict[str, CommandOutput]) -> dict[str, CommandOutput]:
        """One host's outputs, each stdout replaced by the run's first equal text."""
        with self._lock:
            if self._seen is None:
                return outputs
            for out in outputs.values():
                if out.stdout:
                    first = self._seen.get(out.stdout)
                    if first is None:
                        self._seen[out.stdout] = out.stdout
                    else:
                        self._repeated.add(first)
                        out.stdout = first
        return outputs

    def close_intake(self) -> None:
        self._seen = None

    def parse(self, spec: "FactSpec", text: str):
        if text not in self._repeated:
            return spec.parse(text)
        key = (spec.name, text)
        if key not in self._parsed:
            self._parsed[key] = spec.parse(text)  # a parse error is not kept: each host says it
        return self._parsed[key]


@dataclass
class HostFacts:
    """Everything gathered from one host: raw outputs, and parsed facts on demand."""

    host: str
    address: str = ""
    reachable: bool = True
    error: str | None = None
    error_kind: str | None = None  # unreachable, auth, hostkey, timeout, config (see TransportError)
    gather_s: float = 0.0
    raw: dict[str, CommandOutput] = field(default_factory=dict)
    command_timeout: float | None = None
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)
    # Compact: an output's text is dropped once parsed (its parsed value is cached), so
    # raw_json() no longer has it.  The run sets this after saving the facts it must keep.
    compact: bool = field(default=False, repr=False)
    shared: SharedOutputs | None = field(default=None, repr=False, compare=False)
    replayed_from: str | None = field(default=None, repr=False, compare=False)  # the --facts-in file

    def release(self) -> None:
        """Drop the outputs and parsed facts; reachability, error and timing stay (what the
        reports read once every check has run)."""
        self.raw = {}
        self._cache = {}

    def _parse(self, key: str, spec: FactSpec, dev: int | None):
        shown = (spec.display or spec.command).format(dev=dev)
        lost = self.error_kind == "lost"
        if key not in self.raw and self.replayed_from and not self.error:
            # (A host whose capture ended early, at its deadline or a lost connection, says that below.)
            # A file captured by a narrower run (-k) or an older preflight: no probe ended early.
            raise FactUnavailable(f"`{shown}` is not in the facts file {self.replayed_from} (the run that captured "
                                  f"it did not gather it)")
        if key not in self.raw:
            why = (f": {_CONNECTION_LOST} before it ran" if lost else
                   ": its result had not come back when the host's --host-timeout ended the probe"
                   if self.error_kind == "deadline" else "")
            raise FactUnavailable(f"`{shown}` was not gathered from {self.host}{why}")
        out = self.raw[key]
        own = spec.own_timeout is not None and (not self.command_timeout or spec.own_timeout < self.command_timeout)
        limit = spec.own_timeout if own else self.command_timeout
        hint = (f" after {limit:g}s" + (" (its own limit)" if own else "")) if limit else ""
        why = _why_unusable(spec, out, shown, hint, lost)
        if why:
            raise FactUnavailable(why, tool_missing=out.rc == 127 and not out.skipped
                                  and "error while loading shared libraries" not in out.stderr)
        try:
            return self.shared.parse(spec, out.stdout) if self.shared else spec.parse(out.stdout)
        except Exception as exc:  # noqa: BLE001 - garbage from a node must never stop the run
            sample = _first_line(out.stdout)
            got = f"; output starts {sample!r}" if sample else "; output was empty"
            if out.truncated:
                got += f" (cut at {len(out.stdout.encode('utf-8', 'replace')) // 1024} KiB: the tool printed more)"
            why = str(exc) if isinstance(exc, ParseError) else f"{type(exc).__name__}: {exc}"
            raise FactUnavailable(f"unreadable output of `{shown}`: {why}{got}") from None
        finally:
            if self.compact:
                self.raw[key] = replace(out, stdout="")

    def get(self, name: str):
        """The parsed value of a host-level fact, or :class:`FactUnavailable`."""
        if name in self._cache:
            value = self._cache[name]
        else:
            try:
                value = self._parse(name, FACTS[name], None)
            except FactUnavailable as exc:
                value = exc
            self._cache[name] = value
        if isinstance(value, FactUnavailable):
            raise value
        return value

    def optional(self, name: str, default=None):
        """The parsed value of a fact a check only consults (``needs=("name?",)``), or ``default``
        where it is unavailable."""
        try:
            return self.get(name)
        except FactUnavailable:
            return default

    def devices(self) -> list[int]:
        """The NPU device indexes the probe found (``/dev/davinciN``)."""
        out = self.raw.get("probe.devices")
        if out is None:
            return []
        return [int(t) for t in out.stdout.split() if t.isdigit()]

    def per_device(self, name: str) -> dict[int, Any]:
        """``{device: parsed value or FactUnavailable}`` for a per-device fact."""
        spec = FACTS[name]
        result = {}
        for dev in self.devices():
            key = f"{name}/{dev}"
            if key not in self._cache:
                try:
                    self._cache[key] = self._parse(key, spec, dev)
                except FactUnavailable as exc:
                    self._cache[key] = exc
            result[dev] = self._cache[key]
        return result

    def to_json(self) -> dict:
        parsed = {}
        for name in sorted({k.split("/")[0] for k in self.raw if k in FACTS or k.split("/")[0] in FACTS}):
            spec = FACTS[name]
            if spec.per_device:
                values = self.per_device(name)
                parsed[name] = {str(d): _jsonable(v) for d, v in values.items()}
            else:
                try:
                    value = self.get(name)
                    if name in ENV_FACTS:
                        value = {k: "<redacted>" if is_secret_name(k) else redact_secrets(v) for k, v in value.items()}
                    parsed[name] = _jsonable(value)
                except FactUnavailable as exc:
                    parsed[name] = {"unavailable": str(exc)}
        data = self.raw_json(redact=True)
        data["gather_s"] = round(self.gather_s, 3)
        data["parsed"] = parsed
        return data

    def raw_json(self, redact: bool = False) -> dict:
        """What :meth:`from_json` needs.  Unredacted only for handing facts to another process of
        the same run (pytest-xdist workers), never for a file a user keeps."""
        return {"host": self.host, "address": self.address, "reachable": self.reachable, "error": self.error,
                "error_kind": self.error_kind, "gather_s": self.gather_s, "command_timeout": self.command_timeout,
                "raw": {k: (_redacted(k, v) if redact else v).to_json() for k, v in self.raw.items()}}

    @classmethod
    def from_json(cls, data: dict, shared: SharedOutputs | None = None) -> "HostFacts":
        raw = {k: CommandOutput.from_json(v) for k, v in (data.get("raw") or {}).items()}
        # Cut as gathering cuts it (a replayed file may be older, or edited).
        error = shortened(data["error"]) if isinstance(data.get("error"), str) else data.get("error")
        return cls(host=data["host"], address=data.get("address", ""), reachable=data.get("reachable", True),
                   error=error, error_kind=data.get("error_kind"),
                   gather_s=data.get("gather_s", 0.0),
                   command_timeout=data.get("command_timeout"),
                   raw=shared.keep(raw) if shared else raw, shared=shared)


ENV_FACTS = ("session.env", "session.env_login")  # outputs of `env -0`


def redact_env_text(text: str) -> str:
    """``env -0`` output with the values of secret-looking variables replaced."""
    records = []
    for record in text.split("\0"):
        head, eq, _ = record.partition("=")
        name = head.rsplit("\n", 1)[-1]  # a marker line may precede the first variable
        # Other values lose what a URL carries inline (PIP_INDEX_URL=https://user:pass@...).
        records.append(f"{head}=<redacted>" if eq and is_secret_name(name) else redact_secrets(record))
    return "\0".join(records)


def _redacted(key: str, out: CommandOutput) -> CommandOutput:
    """Environment values whose names look like secrets never leave the controller."""
    if key not in ENV_FACTS:
        return out
    return CommandOutput(stdout=redact_env_text(out.stdout), stderr=out.stderr, rc=out.rc, elapsed_s=out.elapsed_s,
                         truncated=out.truncated, skipped=out.skipped)


def _jsonable(value):
    """Parsed facts as JSON for --facts-out (informational; --facts-in re-parses the raw outputs)."""
    import dataclasses

    if isinstance(value, FactUnavailable):
        return {"unavailable": str(value)}
    if dataclasses.is_dataclass(value):
        return _jsonable(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value) if isinstance(value, (set, frozenset)) else value
        return [_jsonable(v) for v in items]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)  # an address or network (net.routes), a path: its usual spelling




from . import nodefacts  # noqa: E402,F401 - registers its facts
from .job import facts as _job_facts  # noqa: E402,F401  (job.model, job.paths)
