"""Phase two: cross-node probes built from phase one's facts, over the same connections.

Ray's GCS port (``cluster.ray_ports``): every worker makes one bounded TCP connect to
the head.  A preflight usually runs before Ray is started, so when nothing listens on
the head's port yet, a short-lived listener is opened there for the duration of the
probe (python3, bound to the port, ended by closing its stdin, and by ``timeout``
whatever happens).  That is what tells "closed by a firewall" (no answer: dropped;
or refused although a listener is there: rejected) from "nothing listening".
"""

from __future__ import annotations

import shlex
import time

from .facts import FactUnavailable
from .pool import run_bounded
from .probe import CommandOutput
from .transport import TransportError

DEFAULT_RAY_PORT = 6379
CONNECT_TIMEOUT = 3  # seconds for one TCP connect between nodes

_LISTENER = r"""
import os, select, socket, sys, time
port = int(sys.argv[1])
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("0.0.0.0", port))
except OSError as e:
    print("BUSY", e.errno, flush=True)
    sys.exit(0)
s.listen(128)
print("READY", flush=True)
while True:
    ready, _, _ = select.select([s, 0], [], [], 1.0)
    if 0 in ready and not os.read(0, 1):
        break
    if s in ready:
        c, _ = s.accept()
        c.close()
"""

# Prints "<state> <address> <port> <listener> <detail>"; bash's /dev/tcp needs no extra tool.
_CONNECT = r"""
a=$1; p=$2; l=$3; t=$4
err=$(timeout "$t" bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$a" "$p" 2>&1 </dev/null); rc=$?
err=$(printf '%s' "$err" | tr '\n' ' ' | cut -c1-200)
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
"""


def run_phase_two(active: set[str], cluster, gatherer, settings, config=None) -> None:
    if "tcp.ray_gcs" in active:
        probe_ray_gcs(cluster, gatherer, settings)


def ray_target(cluster):
    """(head host, port) of the Ray cluster, or None when the inventory names no single head."""
    heads = cluster.with_role("head")
    if len(heads) != 1:
        return None
    head = heads[0]
    return head, int(head.vars.get("ray_port", DEFAULT_RAY_PORT))


def probe_ray_gcs(cluster, gatherer, settings) -> None:
    target = ray_target(cluster)
    if target is None:
        return
    head, port = target
    head_facts = cluster.facts.get(head.name)
    if head_facts is None or not head_facts.reachable:
        return
    workers = [h for h, _ in cluster.reachable() if h.name != head.name]
    if not workers:
        return
    listener, process = _ensure_listener(head, head_facts, port, gatherer, settings)
    try:
        def connect(worker):
            facts = cluster.facts[worker.name]
            command = "bash -c " + shlex.quote(_CONNECT) + " preflight " + " ".join(
                shlex.quote(str(v)) for v in (head.address, port, listener, CONNECT_TIMEOUT))
            t0 = time.monotonic()
            try:
                result = gatherer.transport(worker).run(command, CONNECT_TIMEOUT + settings.command_timeout,
                                                        1 << 16)
                facts.raw["tcp.ray_gcs"] = CommandOutput(
                    stdout=result.stdout.decode("utf-8", errors="replace"),
                    stderr=result.stderr.decode("utf-8", errors="replace"),
                    rc=result.exit_code, elapsed_s=time.monotonic() - t0)
            except (TransportError, OSError, EOFError) as exc:
                facts.raw["tcp.ray_gcs"] = CommandOutput(stdout="", stderr=str(exc), rc=None,
                                                         skipped=f"the probe could not run: {exc}")

        def abandon(worker, elapsed):
            cluster.facts[worker.name].raw["tcp.ray_gcs"] = CommandOutput(
                stdout="", stderr="", rc=None, skipped=f"no answer from the node within {elapsed:.0f}s")

        run_bounded(workers, connect, workers=settings.fanout, on_timeout=abandon, key=lambda h: h.name,
                    deadline=CONNECT_TIMEOUT + settings.command_timeout + settings.connect_timeout + 5)
    finally:
        if process is not None:
            process.close()


def _ensure_listener(head, head_facts, port, gatherer, settings):
    """Make sure something listens on the head's port while workers connect."""
    try:
        if port in head_facts.get("net.listening"):
            return "existing", None
    except FactUnavailable:
        pass
    try:
        python = head_facts.get("tools.python3")
    except FactUnavailable:
        python = None
    if not python:
        return "none", None
    lifetime = int(settings.command_timeout + CONNECT_TIMEOUT + 20)
    command = (f"exec timeout -k 2 {lifetime} {shlex.quote(python)} -c {shlex.quote(_LISTENER)} "
               f"{int(port)}")
    try:
        process = gatherer.transport(head).start(command)
    except (TransportError, OSError, EOFError):
        return "none", None
    line = process.readline(timeout=settings.command_timeout)
    if line == "READY":
        return "temporary", process
    process.close()
    if line and line.startswith("BUSY"):
        # Something bound the port between phase one and now: it listens, so connect to it.
        return "existing", None
    return "none", None
