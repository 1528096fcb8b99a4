"""Phase two: cross-node probes built from phase one's facts, over the same connections.

Every probe here is something two nodes must be able to do to each other before a job
can start: a worker connecting to the Ray head, a rank connecting to the rendezvous
master, HCCL's host ports between neighbours, the launcher's non-interactive SSH, the
same file seen at the same path, NPU-to-NPU RoCE pings.  Their results are stored as
facts (``HostFacts.raw``) like phase one's, so ``--facts-out``/``--facts-in`` replay them.

A preflight usually runs before anything listens, so where a port is probed and nothing
listens on it yet, a short-lived listener is opened there for the duration of the probe
(python3, ended by closing its stdin, and by ``timeout`` whatever happens).  That is what
tells "closed by a firewall" (no answer: dropped; refused although a listener is there:
rejected) from "nothing listening".  Marker files for the shared-storage probe are
removed by the same mechanism.  Nothing else is started or written on a node.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import re
import shlex
import threading
import time
from dataclasses import dataclass, field

from .facts import SUDO_REFUSAL, FactUnavailable
from .pingplan import ping_rounds
from .pool import run_bounded
from .probe import C_LOCALE, FIND_HCCN, CommandOutput, expand_home, packed, whole_seconds
from .transport import TransportError

CONNECT_TIMEOUT = 3  # seconds for one TCP connect between nodes
# Ray's worker port range (--min/--max-worker-port), on every node: its two ends are sampled.
RAY_WORKER_PORTS = (("ray_min_worker_port", "worker range (first)", 10002),
                    ("ray_max_worker_port", "worker range (last)", 19999))
DEFAULT_RAY_PORTS = (("ray_port", "GCS", 6379), ("ray_dashboard_port", "dashboard", 8265),
                     ("ray_client_port", "client", 10001)) + RAY_WORKER_PORTS
DEFAULT_HCCL_BASE_PORT = 60000
HCCL_PORTS_PROBED = (0, 15)  # offsets from HCCL_IF_BASE_PORT: the first and the last of its 16-port block
HCCL_PORTS_PROBED_85 = (0, 31)  # CANN 8.5 and later reserve 32 ports from the base

# A port we cannot bind is BUSY when something listens on it (on any address), HELD when only a
# connection holds it as its local port (an outgoing connection's ephemeral port, or one in
# TIME_WAIT: 60000-60015 lie inside Linux's default ephemeral range 32768-60999); neither when
# the bind failed for another reason (a port below 1024 without root).
_LISTENER = r"""
import errno, os, select, socket, sys
def listens(port):
    read = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                lines = list(fh)[1:]
            read = True
            for line in lines:
                f = line.split()
                if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                    return True
        except (OSError, ValueError, IndexError):
            pass
    return not read  # the tables unreadable: assume a listener, as before this check existed
def bound(family, address, port):
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        if family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((address, port))
        s.listen(128)
        return s
    except BaseException:
        s.close()
        raise
def listener(port):
    # Dual stack, as the job's own listeners are: an IPv4-only one refused a peer reaching this node
    # by an IPv6 address, and the probe blamed a firewall.  IPv4 alone where the node has no IPv6.
    try:
        return bound(socket.AF_INET6, "::", port)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise
    return bound(socket.AF_INET, "0.0.0.0", port)
socks, ready, busy, held = [], [], [], []
for port in map(int, sys.argv[1:]):
    try:
        socks.append(listener(port)); ready.append(str(port))
    except (OSError, OverflowError) as e:  # OverflowError: a port above 65535
        if getattr(e, "errno", None) == errno.EADDRINUSE:
            (busy if listens(port) else held).append(str(port))
print("READY", ",".join(ready) or "-", "BUSY", ",".join(busy) or "-", "HELD", ",".join(held) or "-", flush=True)
while True:
    r, _, _ = select.select(socks + [0], [], [], 1.0)
    if 0 in r and not os.read(0, 1):
        break
    for s in r:
        if s != 0:
            c, _ = s.accept()
            c.close()
"""

# "<state> <address> <port> <listener> <detail>" per target; bash's /dev/tcp needs no extra tool.
_CONNECT = r"""
pf_connect() {
  local a=$1 p=$2 l=$3 t=$4 err rc
  err=$(timeout "$t" bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$a" "$p" 2>&1 </dev/null); rc=$?
  err=${err//$'\n'/ }; err=${err:0:200}  # expansions, not tr|cut: two processes less per target
  case $rc in
    0) echo "open $a $p $l" ;;
    124|137) echo "timeout $a $p $l no answer within ${t}s" ;;
    *) case $err in
         *refused*) echo "refused $a $p $l $err" ;;
         *"No route"*|*unreachable*) echo "unreachable $a $p $l $err" ;;
         *"not known"*|*resolve*|*"Name or service"*) echo "unresolved $a $p $l $err" ;;
         *) echo "error $a $p $l $err" ;;
       esac ;;
  esac
}
"""

# Up to LAUNCHER_PARALLEL ssh at a time from the launcher, pdsh's own default fan-out: the launch
# logs in this way, so a slow or silent node costs the check what it costs the launch (at 1000
# nodes that all drop SSH, 32 rounds of ConnectTimeout instead of 63 at 16).  One line per target,
# each written whole, so lines from parallel jobs never mix.
LAUNCHER_PARALLEL = 32
# How the launcher logs in: as pdsh would, with the launcher's own ssh_config (its
# StrictHostKeyChecking too: a cluster that sets it to no launches fine, and so must pass here),
# never prompting; ConnectTimeout, port, address and the known-hosts files are added per target.
# ControlMaster/ControlPersist no: a launcher whose ~/.ssh/config multiplexes would otherwise keep
# one master ssh (and its socket) per node running after the probe; an existing master is reused.
LAUNCHER_SSH_OPTIONS = ("-n -o BatchMode=yes -o UpdateHostKeys=no -o LogLevel=ERROR "
                        "-o ControlMaster=no -o ControlPersist=no")
_LAUNCHER_SSH = r"""
t=$1; n=$2
# The targets come packed (preflight.probe.packed): a thousand of them as arguments neared Linux's
# 128 KiB cap on the one argument the remote command is.
targets=$(printf %s "$3" | base64 -d | gzip -dc) && [ -n "$targets" ] \
  || { echo "cannot unpack the target list (base64 -d | gzip -dc)" >&2; exit 3; }
set -- $targets
pf_one() {
  local name=${1%%=*} rest=${1#*=} addr port err rc
  addr=${rest%:*}; port=${rest##*:}
  # ssh learns a new host key into the first known-hosts file; /dev/null put first keeps the
  # launcher's own files unchanged (StrictHostKeyChecking no or accept-new would add to them)
  # while every key they hold is still checked.
  kh=$(ssh -G -p "$port" "$addr" 2>/dev/null </dev/null | sed -n 's/^userknownhostsfile //p')
  err=$(timeout $((t + 2)) ssh @OPTIONS@ -o "UserKnownHostsFile=/dev/null ${kh:-~/.ssh/known_hosts ~/.ssh/known_hosts2}" \
        -o ConnectTimeout="$t" -p "$port" "$addr" true 2>&1 </dev/null); rc=$?
  # timeout's 124 with ssh silent: the login did not finish in time (pdsh's own would not either).
  [ $rc = 124 ] && [ -z "$err" ] && err="no login within $((t + 2))s (ConnectTimeout=$t, then timeout)"
  if [ $rc = 0 ]; then echo "ok $name $addr:$port"
  else err=${err//$'\n'/ }; echo "fail $name $addr:$port rc=$rc ${err:0:240}"; fi
}
running=0
for target in "$@"; do
  if [ "$running" -ge "$n" ]; then wait -n 2>/dev/null || wait; running=$((running - 1)); fi
  pf_one "$target" &
  running=$((running + 1))
done
wait
""".replace("@OPTIONS@", LAUNCHER_SSH_OPTIONS)

# The filesystem a path is on: "fs <type> <source> <path>" (a read-only path cannot take a marker,
# but the same network filesystem on every node is as good a sign).
_FS_OF = r"""fs_of() { local t s; t=$(timeout 5 stat -f -c %T -- "$2" 2>/dev/null); t=${t// /_}; \
s=$(timeout 5 df -P -- "$2" 2>/dev/null | awk 'NR==2 {print $1}'); echo "fs ${t:--} ${s:--} $1"; }
"""

# Writes one marker per path, reports it with its filesystem (a share not mounted on the writer
# took the marker on the empty mount point), waits for stdin to close, then removes them.
_MARKER_WRITER = _FS_OF + r"""
m=$1; shift
made=()
cleanup() { for f in "${made[@]}"; do rm -f -- "$f"; done; }
trap cleanup EXIT HUP INT TERM
for d in "$@"; do
  p=$d; @HOME_P@
  if [ ! -d "$p" ]; then echo "absent $d"
  elif : > "$p/$m" 2>/dev/null; then made+=("$p/$m"); echo "written $d"; fs_of "$d" "$p"
  else echo "unwritable $d"; fs_of "$d" "$p"; fi
done
echo READY
read -r _ || true
""".replace("@HOME_P@", expand_home("p"))

_MARKER_READER = _FS_OF + r"""
m=$1; shift
for d in "$@"; do
  p=$d; @HOME_P@
  if [ ! -d "$p" ]; then echo "absent $d"
  elif [ -e "$p/$m" ]; then echo "seen $d"
  else
    meta=$(cd "$p" 2>/dev/null && ls -d common.pt .metadata metadata.json latest_checkpointed_iteration.txt 2>/dev/null | tr '\n' ',')
    echo "missing $d ${meta:--}"; fs_of "$d" "$p"
  fi
done
""".replace("@HOME_P@", expand_home("p"))


def node_addresses(facts) -> set[str]:
    """Every address on the node's own interfaces (empty when they could not be read)."""
    return {ip for iface in facts.optional("net.interfaces", {}).values() for ip in iface.ips()}


def machine_twins(cluster) -> list[tuple[str, ...]]:
    """Groups of reachable inventory hosts that are one machine: every interface with the same
    addresses, and the same NPU device IPs (the node listed by its name and by its address, or
    the controller's local entry beside its SSH entry).  Two machines never agree on all of these
    unless their addresses conflict, which is as wrong."""
    seen: dict[tuple, list[str]] = {}
    for host, facts in cluster.reachable():
        interfaces = facts.optional("net.interfaces")
        if not interfaces:
            continue
        nics = frozenset((name, frozenset(iface.ips())) for name, iface in interfaces.items()
                         if iface.ips() and not all(is_loopback(ip) for ip in iface.ips()))
        if not nics:
            continue
        try:
            devices = tuple(sorted(device_ips(facts).items()))
        except KeyError:
            devices = ()
        seen.setdefault((nics, devices), []).append(host.name)
    return [tuple(names) for names in seen.values() if len(names) > 1]


def device_ips(facts) -> dict[int, str]:
    """The device IPs hccn_tool read on a node, by device: the NPUs that take part in the pings."""
    return {dev: ip.address for dev, ip in facts.per_device("hccn.ip").items()
            if not isinstance(ip, FactUnavailable) and ip is not None}


# A clock reading is good to half its round trip; one worse than this is read again (at most
# CLOCK_READS times in all): a quarter of the default 1 s bound between two clocks, so a login
# whose ~/.bashrc takes a while (conda's init) is read once, and a stall is read again.
CLOCK_PRECISE_S = 0.25
CLOCK_READS = 3

PING_TIMEOUT = 10
PING_SLACK = 5  # seconds a ping run and its round may take beyond the pings' own limits
# "<src dev> <peer ip> rc=<rc> <sent> packets transmitted, <received> received" per pair.
_PING = r"""
PF_HCCN=$(command -v hccn_tool 2>/dev/null)
@FIND_HCCN@
[ -z "$PF_HCCN" ] && PF_HCCN=/usr/local/Ascend/driver/tools/hccn_tool
# sudo: true in the inventory: hccn_tool through `sudo -n`, as phase one ran it (never a prompt).
pre=(); [ -n "$PF_SUDO" ] && pre=(sudo -n --)
hung=
for pair in "$@"; do
  d=${pair%%=*}; ip=${pair#*=}
  if [ -n "$hung" ]; then echo "$d $ip skipped hccn_tool -ping hung earlier (npu$hung)"; continue; fi
  out=$(timeout 10 "${pre[@]}" "$PF_HCCN" -i "$d" -ping -g address "$ip" 2>&1 </dev/null); rc=$?
  case $rc:$out in 1:*"a password is required"*|1:*"a terminal is required"*)
    echo "$d $ip skipped sudo -n needs a password for hccn_tool on this host (inventory sudo: true)"; continue ;;
  esac
  # sudo's other refusals (requiretty, hccn_tool off secure_path, no sudoers rule): not a ping result.
  if [ -n "$PF_SUDO" ] && [ "$rc" = 1 ]; then
    why=$(printf '%s\n' "$out" | grep -m1 -E '@SUDO_REFUSAL@')
    if [ -n "$why" ]; then echo "$d $ip skipped sudo -n refused hccn_tool: $why"; continue; fi
  fi
  s=; [[ $out =~ [0-9]+\ packets\ transmitted,\ [0-9]+\ received ]] && s=${BASH_REMATCH[0]}
  echo "$d $ip rc=$rc ${s:-no summary}"
  case $rc in 124|137) hung=$d ;; esac
done
""".replace("@SUDO_REFUSAL@", SUDO_REFUSAL).replace("@FIND_HCCN@", FIND_HCCN.strip())


@dataclass
class Listening:
    states: dict[int, str] = field(default_factory=dict)  # port -> existing | temporary | held | none
    process: object | None = None

    def close(self) -> None:
        if self.process is not None:
            self.process.close()
            self.process = None


class PhaseTwo:
    def __init__(self, cluster, gatherer, settings, options=None):
        import secrets

        self.nonce = "PF2" + secrets.token_hex(8)
        self.cluster = cluster
        self.gatherer = gatherer
        self.settings = settings
        self.options = options or {}

    # -- building blocks ----------------------------------------------------------------
    def _each(self, hosts, work, deadline=None, key=lambda h: h.name, on_timeout=None, record=None,
              source=lambda h: h):
        """``work`` on every item, ``fanout`` at once, each within ``deadline``.  With ``record``,
        each item's output is kept as that fact of its ``source`` host: the first of its own result
        and the deadline's "no answer" wins, so a step abandoned at its deadline says so (not "not
        gathered"), and a late result cannot overwrite it after the listeners it probed are gone."""
        settled: set[str] = set()
        lock = threading.Lock()

        def keep(item, out):
            if record is not None and out is not None:
                with lock:
                    if key(item) in settled:
                        return
                    settled.add(key(item))
                    self.cluster.facts[source(item).name].raw[record] = out

        def attempt(item):
            try:
                out = work(item)
            except Exception as exc:  # noqa: BLE001 - one step's bug is that host's error, not a hung pool
                out = CommandOutput(stdout="", stderr="", rc=None,
                                    skipped=f"the probe step failed on the controller: {type(exc).__name__}: {exc}")
            keep(item, out)
            return out

        def abandon(item, elapsed):
            out = (on_timeout(item, elapsed) if on_timeout else
                   CommandOutput(stdout="", stderr="", rc=None,
                                 skipped=f"no answer from {source(item).name} within {elapsed:.0f}s"))
            keep(item, out)
            return out

        limit = deadline or (self.settings.command_timeout + self.settings.connect_timeout + 10)
        return run_bounded(hosts, attempt, workers=self.settings.fanout, deadline=limit, on_timeout=abandon, key=key)

    def run(self, host, command: str, timeout: float) -> CommandOutput:
        """Run one command; what a login banner printed before it is cut off at a nonce line."""
        t0 = time.monotonic()
        try:
            result = self.gatherer.transport(host).run(self._framed(command), timeout, 1 << 20)
        except (TransportError, OSError, EOFError) as exc:
            return CommandOutput(stdout="", stderr=str(exc), rc=None, skipped=f"the probe could not run: {exc}")
        stdout = result.stdout.decode("utf-8", errors="replace")
        marker = f"\n{self.nonce}\n"
        stdout = stdout.split(marker, 1)[1] if marker in stdout else ""
        return CommandOutput(stdout=stdout, stderr=result.stderr.decode("utf-8", errors="replace"),
                             rc=result.exit_code, elapsed_s=time.monotonic() - t0)

    def _framed(self, command: str) -> str:
        # Bash sources ~/.bashrc again for a `bash -c` started from an SSH session while
        # SSH_CLIENT is set; without it, banners from .bashrc all come before the nonce line.
        # The C locale: the probes' parsers read the tools' English words (see probe.C_LOCALE).
        return f"unset SSH_CLIENT SSH2_CLIENT; {C_LOCALE}printf '\\n%s\\n' {self.nonce}; {command}"

    def start(self, host, command: str):
        """Start a long-running command and skip what a login banner printed before it."""
        process = self.gatherer.transport(host).start(self._framed(command))
        deadline = time.monotonic() + self.settings.command_timeout
        while time.monotonic() < deadline:
            line = process.readline(timeout=max(0.1, deadline - time.monotonic()))
            if line is None or line == self.nonce:
                break
        return process

    def lifetime(self, clients: int, seconds_each: float) -> int:
        """How long something we leave on a node must outlive the probes it serves: ``clients``
        probes of up to ``seconds_each``, ``fanout`` at a time.  It is ended sooner, by us; this is
        the bound for when we cannot (a fixed bound ran out under 1000 workers probing one head
        whose ports a firewall drops: the last ones found the listener gone and saw "refused")."""
        waves = -(-max(1, clients) // max(1, self.settings.fanout))
        return int(self.settings.command_timeout + self.settings.connect_timeout + 30 + waves * seconds_each)

    def probe_seconds(self, ports: int) -> float:
        """The longest one connect_from over ``ports`` ports may take, its login included."""
        return CONNECT_TIMEOUT * ports + self.settings.command_timeout + self.settings.connect_timeout

    def listen(self, host, ports, clients: int = 1, seconds_each: float | None = None) -> Listening:
        """Make sure something listens on ``ports`` of ``host`` while ``clients`` probes of up to
        ``seconds_each`` (by default: one probe of ``ports``) connect."""
        facts = self.cluster.facts[host.name]
        listening = Listening()
        already = facts.optional("net.listening", frozenset())
        wanted = []
        for port in ports:
            if port in already:
                listening.states[port] = "existing"
            else:
                wanted.append(port)
        if not wanted:
            return listening
        python = facts.optional("tools.python3")
        if not python:
            listening.states.update(dict.fromkeys(wanted, "none"))
            return listening
        lifetime = self.lifetime(clients, seconds_each or self.probe_seconds(len(ports)))
        # -I -S -B: no site hooks (.pth, sitecustomize), nothing from $HOME or the cwd on sys.path,
        # no bytecode written.
        command = (f"exec timeout {lifetime} {shlex.quote(python)} -I -S -B -c {shlex.quote(_LISTENER)} "
                   + " ".join(str(int(p)) for p in wanted))
        try:
            process = self.start(host, command)
        except (TransportError, OSError, EOFError):
            listening.states.update(dict.fromkeys(wanted, "none"))
            return listening
        try:
            line = process.readline(timeout=self.settings.command_timeout) or ""
        except (TransportError, OSError, EOFError):
            line = ""  # the listener's word lost with its channel: closed below, probed without one
        parts = line.split()
        if len(parts) == 6 and parts[0] == "READY" and parts[2] == "BUSY" and parts[4] == "HELD":
            bound, busy, held = ({int(p) for p in parts[i].split(",") if p.isdigit()} for i in (1, 3, 5))
            for port in wanted:
                # Busy: something started listening there since phase one; connect to it.
                listening.states[port] = ("temporary" if port in bound else "existing" if port in busy
                                          else "held" if port in held else "none")
            listening.process = process if bound else None
            if not bound:
                process.close()
        else:
            process.close()
            listening.states.update(dict.fromkeys(wanted, "none"))
        return listening

    def connect_from(self, host, targets) -> CommandOutput:
        """TCP connects from ``host`` to ``targets`` [(address, port, listener state)], one after another."""
        lines = [_CONNECT]
        for address, port, state in targets:
            lines.append("pf_connect " + " ".join(shlex.quote(str(v)) for v in (address, port, state, CONNECT_TIMEOUT)))
        return self.run(host, "bash -c " + shlex.quote("\n".join(lines)),
                        CONNECT_TIMEOUT * len(targets) + self.settings.command_timeout)

    @contextlib.contextmanager
    def listening_on(self, wanted, clients: int, seconds_each: float | None = None):
        """``{host name: Listening}`` for ``wanted`` [(host, ports)], the listeners started at once
        (one after another, at ~0.1 s each, this was most of phase two at 100 hosts) and each
        up until ``clients`` probes have run; all closed on leaving, also when the run is stopped
        meanwhile (each is recorded as soon as it is up)."""
        listenings = {}
        lock = threading.Lock()
        closing = []  # set once the listeners are being closed

        def start(entry):
            host, ports = entry
            # No port (HCCL_HOST_SOCKET_PORT_RANGE=auto): nothing to listen on or probe.
            try:
                listening = (self.listen(host, ports, clients=clients, seconds_each=seconds_each)
                             if ports else Listening())
            except Exception:  # noqa: BLE001 - a bug here: its ports probed without a listener, as at the deadline
                logging.getLogger(__name__).exception("listener on %s", host.name)
                listening = Listening(dict.fromkeys(ports, "none"))
            with lock:
                late = bool(closing) or host.name in listenings  # abandoned at its deadline meanwhile
                if not late:
                    listenings[host.name] = listening
            if late:
                listening.close()  # its probes were judged without it: it does not stay up
                return None
            return listening

        def no_listener(entry, _elapsed):
            host, ports = entry
            with lock:
                return listenings.setdefault(host.name, Listening(dict.fromkeys(ports, "none")))

        try:
            self._each(wanted, start, key=lambda entry: entry[0].name, on_timeout=no_listener)
            yield listenings
        finally:
            with lock:
                closing.append(True)
                started = list(listenings.items())
            # Together too: closing one waits for its listener to exit (a round trip or more).
            self._each(started, lambda entry: entry[1].close(), key=lambda entry: entry[0],
                       on_timeout=lambda entry, _: None)

    # -- the probes ---------------------------------------------------------------------
    def ray(self) -> None:
        plan = ray_plan(self.cluster)
        if not plan:
            return
        wanted: dict[str, tuple] = {}  # node -> (host, its ports the others probe)
        for targets in plan.values():
            for node, _, port in targets:
                ports = wanted.setdefault(node.name, (node, []))[1]
                if port not in ports:
                    ports.append(port)
        sources = [h for h, _ in self.cluster.reachable() if h.name in plan]
        each = self.probe_seconds(max(len(targets) for targets in plan.values()))
        # The head's ports and every worker's range; each listener stays up until the last probe.
        with self.listening_on(list(wanted.values()), clients=len(sources), seconds_each=each) as listenings:
            def work(source):
                return self.connect_from(source, [(node.address, port, listenings[node.name].states[port])
                                                  for node, _, port in plan[source.name]])

            self._each(sources, work, deadline=each + 10, record="tcp.ray")

    def rendezvous(self) -> None:
        plan = rendezvous_plan(self.cluster)
        if plan is None or plan.master is None or not _reachable(self.cluster, plan.master):
            return  # an unreachable master is the check's finding, not a port probe's
        with self.listening_on([(plan.master, [plan.port])], clients=len(plan.sources)) as listenings:
            def work(host):
                state = listenings[plan.master.name].states[plan.port]
                return self.connect_from(host, [(plan.address, plan.port, state)])
            self._each([h for h in plan.sources], work, record="tcp.rendezvous")

    def hccl_ports(self) -> None:
        ring = hccl_ring(self.cluster)
        if len(ring) < 2:
            return
        # Every host listens; every listener waits for the whole ring of probes.
        with self.listening_on([(host, ports) for host, _, ports in ring], clients=len(ring)) as listenings:
            def work(pair):
                (src, _, _), (dst, _, ports) = pair
                if not ports:
                    return None
                address = hccl_address(dst, self.cluster.facts[dst.name])
                return self.connect_from(src, [(address, p, listenings[dst.name].states[p]) for p in ports])

            pairs = [(ring[i], ring[(i + 1) % len(ring)]) for i in range(len(ring))]
            self._each(pairs, work, key=lambda p: p[0][0].name, source=lambda p: p[0][0], record="tcp.hccl",
                       deadline=CONNECT_TIMEOUT * 4 + self.settings.command_timeout + 10)

    def launcher_ssh(self) -> None:
        launchers = [h for h in launcher_hosts(self.cluster) if _reachable(self.cluster, h)]

        def work(launcher):
            # name=[user@]address:port — the same login the inventory uses, as pdsh would.
            hosts = launcher_targets(self.cluster, launcher)
            if all(h.name == launcher.name for h in hosts):  # one node: no pdsh to launch with
                return None
            targets = [f"{h.name}={h.user + '@' if h.user else ''}{h.address}:{h.port or 22}" for h in hosts]
            timeout = whole_seconds(self.settings.connect_timeout)
            command = ("bash -c " + shlex.quote(_LAUNCHER_SSH) + f" preflight {timeout} {LAUNCHER_PARALLEL} "
                       + shlex.quote(packed(" ".join(targets))))
            rounds = -(-len(targets) // LAUNCHER_PARALLEL)
            return self.run(launcher, command, (timeout + 3) * rounds + 5)

        rounds = -(-len(self.cluster.reachable()) // LAUNCHER_PARALLEL)
        self._each(launchers, work, deadline=(self.settings.connect_timeout + 3) * rounds + 15, record="ssh.launcher")

    def clock(self) -> None:
        def read(host):
            t0 = time.time()
            out = self.run(host, "date +%s.%N", self.settings.command_timeout)
            t1 = time.time()
            if out.rc == 0 and out.stdout.strip():
                try:
                    # `date +%s.%N` prints digits and a dot; float() also takes nan, inf and 1_0.
                    if not re.fullmatch(r"-?[0-9]+(\.[0-9]*)?", out.stdout.strip()):
                        raise ValueError
                    remote = float(out.stdout.strip())
                    # The node read its clock somewhere between t0 and t1: assume the middle.
                    out = CommandOutput(stdout=f"{remote - (t0 + t1) / 2:.6f} {(t1 - t0) / 2:.6f}\n",
                                        stderr="", rc=0, elapsed_s=t1 - t0)
                except ValueError:
                    out = CommandOutput(stdout="", stderr=f"unreadable date output {out.stdout[:40]!r}", rc=1)
            return out

        def work(host):
            # A slow round trip (a busy controller, a stalled VM) leaves the reading uncertain by half
            # of it, and two such readings could not tell a skew from none: read again, up to
            # CLOCK_READS times, and keep the most precise.
            best = read(host)
            for _ in range(CLOCK_READS - 1):
                if best.rc != 0 or not best.stdout.strip() or best.elapsed_s / 2 <= CLOCK_PRECISE_S:
                    break
                again = read(host)
                if again.rc == 0 and again.stdout.strip() and again.elapsed_s < best.elapsed_s:
                    best = again
            return best

        # Each host may read CLOCK_READS times: its deadline allows for them all.
        self._each([h for h, _ in self.cluster.reachable()], work, record="clock.offset",
                   deadline=CLOCK_READS * self.settings.command_timeout + self.settings.connect_timeout + 10)

    def shared_storage(self) -> None:
        paths = shared_paths(self.cluster)
        reachable = shared_participants(self.cluster)
        if not paths or len(reachable) < 2:
            return
        writer = reachable[0]
        import secrets

        marker = f".preflight-shared-{secrets.token_hex(6)}"
        quoted = " ".join(shlex.quote(p) for p in paths)
        process = None
        try:
            try:
                process = self.start(writer,
                    # -k: bash traps TERM, and only KILL ends a wait on a hung hard NFS mount.
                    f"exec timeout -k 5 {self.lifetime(len(reachable) - 1, self.probe_seconds(0))} bash -c "
                    f"{shlex.quote(_MARKER_WRITER)} preflight {marker} {quoted}")
            except (TransportError, OSError, EOFError) as exc:
                self.cluster.facts[writer.name].raw["storage.shared"] = CommandOutput(
                    stdout="", stderr=str(exc), rc=None, skipped=f"could not write markers: {exc}")
                return
            written = []
            while True:
                line = process.readline(timeout=self.settings.command_timeout)
                if line is None or line == "READY":
                    break
                written.append(line)
            self.cluster.facts[writer.name].raw["storage.shared"] = CommandOutput(
                stdout="".join(f"writer {line}\n" for line in written), stderr="", rc=0)

            def work(host):
                # `timeout`: a hung mount must not leave the reader behind (sshd does not signal it).
                out = self.run(host, f"timeout -k 2 {whole_seconds(self.settings.command_timeout)} bash -c "
                               + shlex.quote(_MARKER_READER) + f" preflight {marker} {quoted}",
                               self.settings.command_timeout)
                out.stdout = f"from {writer.name}\n" + out.stdout
                return out

            self._each(reachable[1:], work, record="storage.shared")
        finally:
            if process is not None:
                process.close()

    def device_ping(self, mode: str) -> None:
        nodes, devices = [], {}
        for host, facts in self.cluster.reachable():
            try:
                ips = device_ips(facts)
            except KeyError:
                return
            if ips:
                nodes.append((host, ips))
                # Every NPU of the node, with a device IP or not: HCCL's local rank i is its i-th NPU.
                devices[host.name] = sorted(facts.devices())
        if len(nodes) < 2:
            return  # cluster.device_ping says why (checks.network.no_ping_reason)
        for (host, _) in nodes:
            self.cluster.facts[host.name].raw["hccn.ping"] = CommandOutput(stdout=f"schedule {mode}\n", stderr="",
                                                                           rc=0)
        by_name = dict((h.name, (h, ips)) for h, ips in nodes)
        # NPUs whose device IP hccn_tool could not read (hung, failed): neither end of a pair.
        unread = {h.name: {d for d, ip in self.cluster.facts[h.name].per_device("hccn.ip").items()
                           if isinstance(ip, FactUnavailable)} for h, _ in nodes}
        lock = threading.Lock()
        settled: set[tuple[str, str]] = set()

        def ranks(job):
            """[(source NPU, peer NPU)]: the i-th NPU of each node, as HCCL's local rank i pairs them
            (the same numbers on whole nodes; in order in containers given other devices)."""
            return list(zip(devices[job[0]], devices[job[1]]))

        def pairs_of(job):
            src_ips, dst_ips = by_name[job[0]][1], by_name[job[1]][1]
            return [(d, dd, dst_ips[dd]) for d, dd in ranks(job) if d in src_ips and dd in dst_ips]

        def unpaired(job):
            """Source NPUs with a device IP and no peer to ping: said (a skip: the peer's own results
            say why, hccl.device_ip or the peer's fewer NPUs), not silent."""
            src, dst = job
            src_ips, dst_ips = by_name[src][1], by_name[dst][1]
            peer = dict(ranks(job))
            lines = []
            for d in sorted(set(src_ips) | unread[src]):
                if d not in peer:
                    lines.append(f"{dst} {d} {d} - skipped no peer: {dst} has {len(devices[dst])} NPU(s), "
                                 f"none at this rank")
                elif d in unread[src]:
                    # Its own device IP unread: not pinged, not judged (an error on its own row).
                    lines.append(f"{dst} {peer[d]} {d} - skipped the device IP of {src} npu{d} could not be read "
                                 f"(see hccl.device_ip)")
                elif peer[d] in unread[dst]:
                    # The peer's: not "no device IP", and not this node's fault (a skip here; the peer's
                    # own rows say it).
                    lines.append(f"{dst} {peer[d]} {d} - skipped no peer: the device IP of {dst} npu{peer[d]} "
                                 f"could not be read (see hccl.device_ip)")
                elif peer[d] not in dst_ips:
                    lines.append(f"{dst} {peer[d]} {d} - skipped no peer: {dst} npu{peer[d]} has no device IP")
            return lines

        def record(job, lines, stderr=""):
            """Adds one job's lines to its source's record, once: an abandoned job's thread may
            still come back after its pairs were written off."""
            with lock:
                if job in settled:
                    return
                settled.add(job)
                facts = self.cluster.facts[job[0]]
                prev = facts.raw["hccn.ping"]
                # A record per pair tells each pair's fate: one run's exit status must not void the
                # pairs of the others (the merged record is read only if its status is 0).
                facts.raw["hccn.ping"] = CommandOutput(stdout=prev.stdout + "".join(f"{x}\n" for x in lines),
                                                       stderr=prev.stderr + stderr, rc=0)

        def left(job, pairs, why):
            return [f"{job[1]} {dd} {d} {ip} skipped {why}" for d, dd, ip in pairs]

        for jobs in ping_rounds([h.name for h, _ in nodes], mode):
            def work(job):
                src_host = by_name[job[0]][0]
                pairs = pairs_of(job)
                args = " ".join(shlex.quote(f"{d}={ip}") for d, _, ip in pairs)
                sudo = "PF_SUDO=1 " if src_host.vars.get("sudo") else ""
                out = self.run(src_host, sudo + "bash -c " + shlex.quote(_PING) + " preflight " + args,
                               _ping_run_timeout(len(pairs)))
                answered = out.stdout.splitlines()
                lines = [f"{job[1]} {dd} {line}" for (_, dd, _), line in zip(pairs, answered)]
                if len(answered) < len(pairs):
                    # The run ended early (a lost connection, its time up): every pair it left is
                    # named with the reason, and the pairs it did answer are kept.
                    why = (out.skipped or (out.stderr.strip().splitlines() or [""])[-1]
                           or f"exit status {out.rc}")[:200]
                    lines += left(job, pairs[len(answered):], f"the ping run ended early: {why}")
                record(job, lines + unpaired(job), out.stderr)
                return out

            def abandoned(job, elapsed):
                record(job, left(job, pairs_of(job), f"no answer from {job[0]} within {elapsed:.0f}s "
                                                     f"(the ping run was abandoned)") + unpaired(job))

            # One round at a time: the pairs of a round are disjoint, so no NPU pings twice at once.
            longest = max(len(pairs_of(job)) for job in jobs)
            run_bounded(jobs, work, workers=self.settings.fanout, key=lambda j: f"{j[0]}->{j[1]}",
                        deadline=_ping_run_timeout(longest) + self.settings.connect_timeout + PING_SLACK,
                        on_timeout=abandoned)


def _ping_run_timeout(pairs: int) -> float:
    """A ping run's limit: each pair's hccn_tool is cut at PING_TIMEOUT by ``timeout``."""
    return (PING_TIMEOUT + 1) * pairs + PING_SLACK


def _reachable(cluster, host) -> bool:
    facts = cluster.facts.get(host.name)
    return facts is not None and facts.reachable


def run_phase_two(active: set[str], cluster, gatherer, settings, options=None, timings=None) -> None:
    """The cross-node probes for the ``active`` phase-two facts; ``timings`` gets each step's seconds.

    The clock goes first and alone (its offsets are read off round-trip times, which load
    inflates).  The other steps then run at once, in lanes: steps that open listeners share one
    lane, so no two of our listeners compete for a port on one host."""
    phase = PhaseTwo(cluster, gatherer, settings, options)
    timings = {} if timings is None else timings
    mode = (options or {}).get("ping", "ring")

    def ping():
        if mode == "none":
            for _, facts in cluster.reachable():
                facts.raw["hccn.ping"] = CommandOutput(stdout="schedule none\n", stderr="", rc=0)
        else:
            phase.device_ping(mode)

    def lane(steps):
        for name, step in steps:
            if name in active:
                t0 = time.monotonic()
                step()
                timings[name] = time.monotonic() - t0

    t0 = time.monotonic()
    lane([("clock.offset", phase.clock)])
    lanes = [[("tcp.ray", phase.ray), ("tcp.rendezvous", phase.rendezvous), ("tcp.hccl", phase.hccl_ports)],
             [("ssh.launcher", phase.launcher_ssh)], [("hccn.ping", ping)], [("storage.shared", phase.shared_storage)]]
    _run_lanes([(lambda steps=steps: lane(steps)) for steps in lanes if any(n in active for n, _ in steps)])
    timings["phase_two"] = time.monotonic() - t0


def _run_lanes(lanes) -> None:
    """Run each callable in a thread of its own and wait for all; an exception in one is raised
    here once all are done.  The wait wakes up often, so Ctrl-C is not held up by it."""
    import threading

    errors: list[BaseException] = []

    def guarded(fn):
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread below
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(fn,), daemon=True, name="preflight-phase-two")
               for fn in lanes]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.2)
    if errors:
        raise errors[0]


# -- plans: pure functions of the inventory and phase one's facts -----------------------------


def ray_plan(cluster) -> dict[str, list[tuple]]:
    """{source node: [(target host, label, port)]}: who probes which Ray port; empty without a
    single reachable head or a reachable worker.

    Every worker probes the head's GCS, dashboard, client and worker-range ports (what a joining
    worker and its tasks need).  Each worker's own worker range is reached by the other nodes
    too (the driver on the head calling an actor there), so it is probed by the Ray node before
    it: the head probes the first worker's, each worker the next's.  Ports are the node's own
    inventory values (``ray_port``, ``ray_min_worker_port``, ...), else Ray's defaults.

    Kept on the cluster once made, for the same reachable nodes: cluster.ray_ports asks for it
    once per host (at 1000 hosts, rebuilding it each time was 6 s)."""
    key = tuple(h.name for h, _ in cluster.reachable())
    cached = getattr(cluster, "_ray_plan", None)
    if cached is not None and cached[0] == key:
        return cached[1]
    plan = _make_ray_plan(cluster)
    try:
        cluster._ray_plan = (key, plan)
    except AttributeError:  # a cluster object that takes no attributes: computed each time
        pass
    return plan


def _make_ray_plan(cluster) -> dict[str, list[tuple]]:
    heads = cluster.with_role("head")
    if len(heads) != 1 or not _reachable(cluster, heads[0]):
        return {}
    head = heads[0]
    workers = [h for h, _ in cluster.reachable() if h.name != head.name]
    # A head that is this controller listed as localhost cannot be probed from the workers
    # (cluster.ray_ports says so): they would reach themselves.
    reachable_head = not (head.connection == "local" and is_loopback(head.address))
    plan = {w.name: _ray_ports(head, DEFAULT_RAY_PORTS) for w in workers} if reachable_head else {}
    # The controller's own local entry is no Ray node another one reaches (its address may be
    # localhost: a probe there would reach the prober itself).
    ranged = [w for w in workers if w.connection != "local"]
    for before, worker in zip([head] + ranged, ranged):
        plan.setdefault(before.name, []).extend(_ray_ports(worker, RAY_WORKER_PORTS))
    return plan


def _ray_ports(node, ports) -> list[tuple]:
    return [(node, label, int(node.vars.get(key) or default)) for key, label, default in ports]


LAUNCHER_ROLES = frozenset({"head", "launcher"})


def launcher_hosts(cluster):
    """Hosts that launch jobs: group `head`, or `launcher: true` (none when nothing is marked);
    `launcher: false` takes a head out (a Ray head that never runs pdsh)."""
    return [h for h in cluster.hosts if LAUNCHER_ROLES & h.roles and h.vars.get("launcher") is not False]


def launcher_targets(cluster, launcher):
    """The nodes a launcher must log in to: every reachable SSH node, itself included, as pdsh
    (DeepSpeed's and MindSpeed's multi-node runners) is given every host of the hostfile and logs in
    to the launcher's own too.  The controller's own local entry has no SSH login to test; nodes the
    controller cannot reach are cluster.reachable's finding, not the launcher's."""
    return [h for h, _ in cluster.reachable() if h.connection != "local"]


def hccl_ring(cluster):
    """[(host, base port, ports probed)] for reachable hosts, in inventory order."""
    return [(host, *hccl_ports_of(host, facts)) for host, facts in cluster.reachable()]


def hccl_address(host, facts) -> str:
    """Where the other nodes reach this host's HCCL host sockets (see ``hccl_endpoint``)."""
    return hccl_endpoint(host, facts)[0]


def hccl_endpoint(host, facts) -> tuple[str, str]:
    """(address, why there): where HCCL binds its host sockets on this host, in HCCL's order:
    HCCL_IF_IP; else the NIC HCCL_SOCKET_IFNAME selects; else a NIC of HCCL's own choosing (the
    first by name other than docker and lo); the inventory address when that leaves no IPv4
    address (the probe's listener is IPv4) or the node's environment is unreadable."""
    from .ifname import effective_env, hccl_own_choice, select

    def ipv4_of(name):
        return next((ip for ip in interfaces[name].ips() if _is_ipv4(ip)), None) if name else None

    fallback = (host.address, "the inventory address")
    try:
        env = effective_env(host, facts.get("session.env"))
        if env.get("HCCL_IF_IP", "").strip():  # an IPv6 one is not probed there
            return (env["HCCL_IF_IP"].strip(), "HCCL_IF_IP") if _is_ipv4(env["HCCL_IF_IP"].strip()) else fallback
        interfaces = facts.get("net.interfaces")
    except FactUnavailable:
        return fallback
    if env.get("HCCL_SOCKET_IFNAME"):
        chosen = select("HCCL_SOCKET_IFNAME", env["HCCL_SOCKET_IFNAME"], interfaces).chosen
        why = f"HCCL_SOCKET_IFNAME={env['HCCL_SOCKET_IFNAME']} selects {chosen}"
    else:
        chosen = hccl_own_choice(interfaces)
        why = (f"HCCL_SOCKET_IFNAME unset: HCCL picks {chosen} itself, the first NIC by name other than "
               f"docker and lo")
    address = ipv4_of(chosen)
    return (address, why) if address else fallback


def is_loopback(address: str) -> bool:
    """localhost, 127.x or ::1 (a zone aside): each node's own, which no other node reaches it by."""
    try:
        return address.lower() == "localhost" or ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.split("%")[0])
        return True
    except ValueError:
        return False


def _is_ipv4(text: str) -> bool:
    try:
        return ipaddress.ip_address(text).version == 4
    except ValueError:
        return False


def hccl_ports_of(host, facts) -> tuple[int, list[int]]:
    """(base port, ports probed) on one host: the ends of the block HCCL binds there.

    HCCL_HOST_SOCKET_PORT_RANGE's ranges when it is set (it wins over HCCL_IF_BASE_PORT; ``auto``:
    the OS picks, nothing to probe, an empty list), else HCCL_IF_BASE_PORT's 16 ports, 32 from
    CANN 8.5 on."""
    from .ifname import effective_env

    env = effective_env(host, facts.optional("session.env", {}))
    base = hccl_base_port(env)
    ranges = hccl_host_port_ranges(env.get("HCCL_HOST_SOCKET_PORT_RANGE", ""))
    if ranges is not None:
        return base, sorted({p for first, last in (ranges[:1] + ranges[-1:]) for p in (first, last)})
    offsets = HCCL_PORTS_PROBED_85 if _cann_at_least(facts, "8.5.RC1") else HCCL_PORTS_PROBED
    return base, [base + off for off in offsets]


def _valid_base_port(value: str) -> bool:
    return value.isascii() and value.isdigit() and 1024 <= int(value) <= 65520


def hccl_base_port(env: dict) -> int:
    """HCCL_IF_BASE_PORT as HCCL takes it: the node's value when HCCL accepts it, else 60000."""
    value = env.get("HCCL_IF_BASE_PORT", "")
    return int(value) if _valid_base_port(value) else DEFAULT_HCCL_BASE_PORT


def hccl_port_settings_invalid(host, facts) -> list[tuple[str, str, str]]:
    """(variable, value, what HCCL accepts) for each of this host's HCCL port variables that is set
    to something HCCL rejects; phase two then probes the default block, which HCCL will not use."""
    from .ifname import effective_env

    env = effective_env(host, facts.optional("session.env", {}))
    bad = []
    base = env.get("HCCL_IF_BASE_PORT")
    if base is not None and not _valid_base_port(base):
        bad.append(("HCCL_IF_BASE_PORT", base, "a port number in [1024, 65520] (default 60000)"))
    ranges = env.get("HCCL_HOST_SOCKET_PORT_RANGE")
    if ranges is not None and ranges.strip() and hccl_host_port_ranges(ranges) is None:
        bad.append(("HCCL_HOST_SOCKET_PORT_RANGE", ranges,
                    "ports in [1, 65535] as a port, a range or a comma list (60000-60050,60100), or auto"))
    return bad


def hccl_host_port_ranges(value: str) -> list[tuple[int, int]] | None:
    """HCCL_HOST_SOCKET_PORT_RANGE (``60000-60050``, ``60000,60050-60100``, ``auto``) as
    [(first, last)]; [] for ``auto``; None when unset or not valid (HCCL then uses the base port)."""
    value = value.strip()
    if value.lower() == "auto":
        return []
    ranges = []
    for part in filter(None, (p.strip() for p in value.split(","))):
        first, _, last = part.partition("-")
        if not (first.isascii() and first.isdigit() and (not last or last.isascii() and last.isdigit())):
            return None
        first, last = int(first), int(last or first)
        if not 1 <= first <= last <= 65535:
            return None
        ranges.append((first, last))
    return ranges or None


def _cann_at_least(facts, release: str) -> bool:
    """Whether the host's active CANN is ``release`` or later (its pre-releases count); False when unknown."""
    from .compat import cmp_versions, norm_cann

    files = facts.optional("ascend.files")
    active = files.active_cann() if files is not None else None
    return active is not None and cmp_versions(norm_cann(active.version), release) >= 0


@dataclass
class RendezvousPlan:
    values: dict  # host -> {MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE} as set there
    address: str | None
    port: int | None
    master: object | None  # the inventory host MASTER_ADDR names, if any
    sources: list
    source: str = "environment"  # where address and port came from


def _job_master(cluster):
    """(address, port, where) from a --job launch script's --master_addr/--master_port, if any."""
    for job in getattr(cluster, "jobs", ()) or ():
        addr, port = job.args.get("master_addr"), job.args.get("master_port")
        if addr is not None and port is not None:
            where = f"{job.path}:{port.line}" if port.line else job.path
            return addr.value, port.value, where
    return None


def master_host(cluster, address: str):
    """The inventory host a MASTER_ADDR value names (its name, its address, an address on another
    of its NICs, or its name with a domain), or None; a loopback address is each node's own."""
    master = None
    if not is_loopback(address):
        for host in cluster.hosts:
            if address in (host.name, host.address):
                master = host
    if master is None:
        # MASTER_ADDR on another NIC of a node (the training network, not the one SSH uses).
        owners = [host for host, facts in cluster.reachable() if address in node_addresses(facts)]
        master = owners[0] if len(owners) == 1 else None
    if master is None and not _is_ip(address) and not is_loopback(address):
        # node-01.cluster.local for the inventory's node-01 (or the other way round): the same short name.
        short = address.split(".")[0].lower()
        same = [h for h in cluster.hosts if h.name.split(".")[0].lower() == short]
        master = same[0] if len(same) == 1 else None
    return master


def rendezvous_plan(cluster) -> RendezvousPlan | None:
    """Where ranks meet: MASTER_ADDR/MASTER_PORT from the nodes' environment (the value most
    nodes share), else from the job's launch script (--master_addr/--master_port)."""
    from .ifname import effective_env

    names = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")
    values = {}
    for host, facts in cluster.reachable():
        try:
            env = effective_env(host, facts.get("session.env"))
        except FactUnavailable:
            continue
        values[host.name] = {n: env[n] for n in names if env.get(n)}
    if not any(values.values()):
        values = {}
    job = _job_master(cluster)
    if not values and job is None:
        return None
    addrs = [v.get("MASTER_ADDR") for v in values.values() if v.get("MASTER_ADDR")]
    ports = [v.get("MASTER_PORT") for v in values.values() if v.get("MASTER_PORT")]
    # The value most nodes share; a tie goes to the first in sort order, the same in every run.
    address = max(sorted(set(addrs)), key=addrs.count) if addrs else None
    port_text = max(sorted(set(ports)), key=ports.count) if ports else None
    source = "environment"
    if address is None and port_text is None and job is not None:
        address, port_text, source = job[0], job[1], f"job {job[2]}"
    port = int(port_text) if port_text and port_text.isascii() and port_text.isdigit() and 0 < int(port_text) < 65536 \
        else None
    master = master_host(cluster, address) if address else None
    sources = [h for h, _ in cluster.reachable() if master is None or h.name != master.name]
    if address is None or port is None:
        master = None
    return RendezvousPlan(values, address, port, master, sources, source)


def _declared(host) -> list[str]:
    return [str(p) for p in list(host.vars.get("shared_paths") or []) + [host.vars.get("checkpoint_dir")] if p]


def shared_paths(cluster) -> list[str]:
    """Paths every node must see as one filesystem: inventory ``shared_paths`` and ``checkpoint_dir``."""
    seen: dict[str, None] = {}
    for host in cluster.hosts:
        for path in _declared(host):
            seen.setdefault(path, None)
    return list(seen)


def shared_participants(cluster) -> list:
    """The reachable hosts that share the paths: every node, but not the controller's own local
    entry unless it names one (listed first, it was the writer every node was compared with)."""
    return [h for h, _ in cluster.reachable() if h.connection != "local" or _declared(h)]
