"""What two nodes must be able to do to each other (phase two: probes between nodes)."""

import functools
import ipaddress
import re
import shlex
import statistics
from collections import Counter, defaultdict

from preflight import faq
from preflight.activeprobe import (device_ips, hccl_endpoint, hccl_port_settings_invalid, hccl_ports_of,
                                  is_loopback, launcher_hosts, launcher_targets, master_host, node_addresses, ray_plan,
                                  rendezvous_plan, shared_participants, shared_paths)
from preflight.check import check
from preflight.checks.hccl import not_applicable
from preflight.facts import FactUnavailable, remedy_for_unevaluated
from preflight.hostlist import fold
from preflight.outliers import split
from preflight.parsers.crossnode import address_order

NO_RECORD_REMEDY = ("The probe between the nodes left no record for this target (cut by the step's deadline or "
                    "the run interrupted): re-run the preflight, with a larger --command-timeout if the nodes are "
                    "slow.")
FIREWALL_REMEDY = ("Open the port between the nodes: stop firewalld on the target (sudo systemctl stop firewalld; "
                   "systemctl disable firewalld) or allow the port (firewall-cmd --permanent --add-port=<port>/tcp; "
                   "firewall-cmd --reload; on Ubuntu: sudo ufw allow from <source> to any port <port> proto tcp, "
                   "or ufw disable), and check security groups or switch ACLs in between; then test from the "
                   "source with nc -zv <target> <port>.")


# A port can be held by a socket that does not listen: mostly an outgoing connection given it as
# its local port (HCCL's 60000-60015 lie inside Linux's default ephemeral range 32768-60999), or
# one in TIME_WAIT; the service then cannot bind it. Reserving keeps the kernel from handing it out.
HELD_PORT_REMEDY = ("See what holds the port on the target: ss -tanp 'sport = :{port}'. If it is an outgoing "
                    "connection or one in TIME_WAIT (the port lies inside net.ipv4.ip_local_port_range), reserve "
                    "the service's ports on every node, adding to what is already reserved: "
                    "r=$(sysctl -n net.ipv4.ip_local_reserved_ports); "
                    "sysctl -w net.ipv4.ip_local_reserved_ports=\"${{r:+$r,}}{port}\" "
                    "(for HCCL the whole block from HCCL_IF_BASE_PORT, e.g. 60000-60015, 32 ports on CANN 8.5 and "
                    "later; persist it in /etc/sysctl.d/); then run the preflight again.")


def target_python(cluster, node) -> str | None:
    """The python3 phase one found on ``node`` (what opens the temporary listeners), if known."""
    facts = cluster.facts.get(node.name)
    return facts.optional("tools.python3") if facts is not None else None


def judge_tcp(verdict, probe, path: str, subject: str, severity=None, python: str | None = None,
              target: str | None = None, **kw) -> None:
    """One TCP probe -> one result: open, dropped, rejected, or undecidable.  ``python``: the
    target's python3, when phase one found one (then a listener that did not open is not for
    want of python3).  ``target``: the node probed, named as the outlier of a firewall finding,
    so that its matrix cell shows it (the finding is the source node's result)."""
    if target is not None and probe.state in ("timeout", "refused", "unreachable"):
        kw.setdefault("outliers", (target,))
    if probe.state == "open":
        how = "through a temporary listener" if probe.listener == "temporary" else "something listens there"
        verdict.passed(subject, message=f"{path}: TCP connect succeeded ({how})", **kw)
    elif probe.state == "timeout":
        verdict.failed(subject, severity=severity,
                       observed=f"{path}: no answer to a TCP connect within the timeout (packets dropped: a "
                                f"firewall on the target or in between)",
                       expected="the connection accepted", **kw)
    elif probe.state == "refused" and probe.listener in ("existing", "temporary"):
        verdict.failed(subject, severity=severity,
                       observed=f"{path}: connection refused although a listener is open on the target (a firewall "
                                f"REJECT rule, or the service listens on 127.0.0.1 only)",
                       expected="the connection accepted", **kw)
    elif probe.state == "refused" and probe.listener == "held":
        verdict.error(subject, message=f"{path}: connection refused; nothing listens on port {probe.port} there, and "
                                       f"a socket that is not listening holds it (an outgoing connection's local port, "
                                       f"one in TIME_WAIT, or one bound but not listening), so no "
                                       f"temporary listener could be opened and a firewall cannot be told from a "
                                       f"service not started",
                      remedy=HELD_PORT_REMEDY.format(port=probe.port), **kw)
    elif probe.state == "refused" and python:
        verdict.error(subject, message=f"{path}: connection refused and nothing listens there yet; the temporary "
                                       f"listener ({python} on the target) did not open port {probe.port}, so a "
                                       f"firewall cannot be told from a service not started",
                      remedy=f"On the target, see whether port {probe.port} can be bound: ss -tanp 'sport = "
                             f":{probe.port}' and {shlex.quote(python)} -c \"import socket; socket.socket().bind(('', "
                             f"{probe.port}))\" (a failure names the cause); or start the service that listens on "
                             f"{probe.port} there, and re-run the preflight.", **kw)
    elif probe.state == "refused":
        verdict.error(subject, message=f"{path}: connection refused and nothing listens there yet; no temporary "
                                       f"listener could be opened (python3 missing, or the port could not be "
                                       f"bound), so a firewall cannot be told from a service not started",
                      remedy=f"Install python3 on the target node (the preflight opens a listener on port {probe.port} "
                             f"with it), or start the service that listens on {probe.port} there, and re-run the "
                             f"preflight.", **kw)
    elif probe.state == "unresolved":
        # A name only the controller knows (~/.ssh/config's HostName): the ports are not the fault.
        verdict.failed(subject, severity=severity,
                       observed=f"{path}: the source node cannot resolve {probe.address} ({probe.detail})",
                       expected=f"{probe.address} resolving on every node (see cluster.hostnames)",
                       remedy=f"Make {probe.address} resolve on every node (the same /etc/hosts entry or DNS), or "
                              f"give the host's IP address as address: in the inventory; then re-run the preflight.",
                       **kw)
    elif probe.state == "unreachable":
        # EHOSTUNREACH is also what firewalld's REJECT (icmp-host-prohibited) gives: the check's own
        # firewall remedy stays, the words say both.
        verdict.failed(subject, severity=severity,
                       observed=f"{path}: no route to host ({probe.detail}): a firewall rejecting with "
                                f"host-prohibited (firewalld's default), or no route from the source node "
                                f"(ip route get {probe.address} there)",
                       expected="the connection accepted", **kw)
    else:
        verdict.failed(subject, severity=severity, observed=f"{path}: {probe.state} ({probe.detail})",
                       expected="the connection accepted", **kw)


def _probes(verdict, facts, name, where):
    try:
        return facts.get(name)
    except FactUnavailable as exc:
        verdict.error(message=f"{where}: {exc}")
        return None


# -- Ray ----------------------------------------------------------------------------------

# The dashboard and the client port serve people and `ray job submit`: a worker joins and the job
# runs without them.  GCS and the worker range carry the job itself (a blocked worker port hangs
# every call to an actor on that node): errors, as the catalog has them.
RAY_SEVERITY = {"GCS": None, "dashboard": "warning", "client": "warning", "worker range (first)": None,
                "worker range (last)": None}


@check("cluster.ray_ports", title="Ray ports reachable: the head's GCS, dashboard, client and worker range from every "
                                 "worker, each worker's range from another node",
       reference=faq.R_RAY_JOIN, needs=("tcp.ray", "net.listening?", "tools.python3?"),
       remedy=FIREWALL_REMEDY + " Ray's head uses 6379 (GCS; workers cannot join without it), 8265 "
                                "(dashboard, job submission), 10001 (client); every node uses 10002-19999 (worker "
                                "processes, reached by the other nodes).")
def test_ray_ports(host, facts, cluster, verdict):
    heads = cluster.with_role("head")
    if not heads:
        verdict.skipped(message="no host in group head: no Ray head to reach")
        return
    if len(heads) > 1:
        verdict.error(message=f"{len(heads)} hosts in group head ({', '.join(h.name for h in heads)}): "
                              f"Ray has one head")
        return
    [head] = heads
    head_facts = cluster.facts.get(head.name)
    if head.name != host.name and (head_facts is None or not head_facts.reachable):
        verdict.error(message=f"not evaluated: the Ray head {head.name} is unreachable")
        return
    if head.name != host.name and head.connection == "local" and is_loopback(head.address):
        # The head is this controller, listed as localhost: a worker probing there reaches itself.
        verdict.error(message=f"the Ray head {head.name} is this machine (connection: local) at {head.address}, "
                              f"which {host.name} cannot reach it by",
                      remedy=f"Give {head.name} the address the workers reach it by (its cluster-network IP) as "
                             f"address: in the inventory, keeping connection: local.")
        return
    targets = ray_plan(cluster).get(host.name)
    if not targets:
        local = [h.name for h, _ in cluster.reachable() if h.name != host.name and h.connection == "local"]
        verdict.skipped(message=f"{host.name} is the Ray head and no worker is reachable" if not local else
                                f"{host.name} is the Ray head; its only reachable worker, {fold(local)}, is this "
                                f"machine's local entry, whose worker ports no node probes (it probed the head's)")
        return
    probes = _probes(verdict, facts, "tcp.ray", f"{host.name} -> " + fold(sorted({n.name for n, _, _ in targets})))
    if probes is None:
        return
    by_target = {(p.address, p.port): p for p in probes}
    for node, label, port in targets:
        subject = f"{node.name}:{port}"
        probe = by_target.get((node.address, port))
        if probe is None:
            verdict.error(subject, message=f"{host.name} -> {subject}: no probe record",
                          remedy=NO_RECORD_REMEDY)
            continue
        judge_tcp(verdict, probe, f"{host.name} -> {node.name} Ray {label} port ({probe.address}:{port})", subject,
                  severity=RAY_SEVERITY[label], python=target_python(cluster, node), target=node.name)


# -- rendezvous ------------------------------------------------------------------------------


@check("cluster.rendezvous", title="MASTER_ADDR/PORT, RANK and WORLD_SIZE agree and the master port is reachable",
       scope="cluster", reference=faq.R_RAY_JOIN_4, needs=("session.env", "tcp.rendezvous", "net.listening?",
                                                           "tools.python3?", "net.interfaces?"),
       remedy=("Export the same MASTER_ADDR and MASTER_PORT on every node, a distinct RANK per node (0 on the "
               "master) and WORLD_SIZE equal to the number of nodes, in the launch script or the node's environment "
               "(echo \"RANK=$RANK WORLD_SIZE=$WORLD_SIZE MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT\"); "
               "open MASTER_PORT on the master."))
def test_rendezvous(cluster, verdict):
    plan = rendezvous_plan(cluster)
    if plan is None:
        verdict.skipped(message="MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE are not set on any node "
                                "(the launcher sets them)")
        return
    values = plan.values
    for name in ("MASTER_ADDR", "MASTER_PORT") if values else ():
        raw = {host: env.get(name, "unset") for host, env in values.items()}
        keyed = dict(raw)
        if name == "MASTER_ADDR":
            # node-01 on some nodes and its address on others name one master: compared as the host.
            masters = {v: master_host(cluster, v) for v in set(raw.values()) if v != "unset"}
            keyed = {h: masters[v].name if masters.get(v) is not None else v for h, v in raw.items()}

        def shown(hosts):
            return "/".join(sorted({raw[h] for h in hosts}))

        sides = split(keyed, missing="unset")
        if sides.unanimous:
            spelled = shown(raw)
            aside = f" (all naming {sides.majority})" if "/" in spelled else ""
            verdict.passed(name, message=f"{name}={spelled} on all {len(values)} nodes{aside}")
        else:
            verdict.failed(name, outliers=sides.outliers, where=name,
                           observed=sides.describe(lambda v, hs: f"{fold(hs)}: {name}={shown(hs)}")
                           + sides.versus(lambda hs, v: f"{fold(hs)} have {name}={shown(hs)}"),
                           expected=f"the same {name} on every node")
    ranks = {h: env.get("RANK") for h, env in values.items()}
    if any(ranks.values()):
        counts = Counter(r for r in ranks.values() if r is not None)
        dup = sorted(h for h, r in ranks.items() if r is not None and counts[r] > 1)
        unset = sorted(h for h, r in ranks.items() if r is None)
        if dup or unset:
            parts = [f"RANK {r} on {fold(h for h, x in ranks.items() if x == r)}" for r in counts if counts[r] > 1]
            parts += [f"RANK unset on {fold(unset)}"] if unset else []
            verdict.failed("RANK", outliers=tuple(dup + unset), where="RANK", observed="; ".join(parts),
                           expected="a distinct RANK on every node")
        else:
            _rank_zero_on_the_master(verdict, ranks, plan, [h.name for h in cluster.hosts])
    sizes = {h: env.get("WORLD_SIZE") for h, env in values.items() if env.get("WORLD_SIZE")}
    if sizes:
        wrong = sorted(h for h, v in sizes.items() if v != str(len(cluster.hosts)))
        if wrong:
            verdict.failed("WORLD_SIZE", outliers=tuple(wrong), where="WORLD_SIZE",
                           observed="; ".join(f"WORLD_SIZE={v} on {fold(hs)}"
                                              for v, hs in _group({h: sizes[h] for h in wrong}).items()),
                           expected=f"WORLD_SIZE={len(cluster.hosts)} (the number of nodes in the inventory)")
        else:
            verdict.passed("WORLD_SIZE", message=f"WORLD_SIZE={len(cluster.hosts)} on every node that sets it")
    if plan.address is None or plan.port is None:
        return
    subject = f"{plan.address}:{plan.port}"
    if plan.master is None:
        shared = [h.name for h, f in cluster.reachable() if plan.address in node_addresses(f)]
        if is_loopback(plan.address) and len(cluster.hosts) == 1:
            verdict.passed(subject, message=f"MASTER_ADDR={plan.address} ({plan.source}): a loopback address, "
                                            f"which serves a single-node inventory")
            return
        if is_loopback(plan.address):
            verdict.failed(subject, observed=f"MASTER_ADDR={plan.address} ({plan.source}) is a loopback address: each "
                                             f"node would wait for the others at its own address",
                           expected="MASTER_ADDR set to the rank-0 node's address the other nodes reach",
                           remedy="Set MASTER_ADDR to the rank-0 node's address (as the inventory lists it) on every "
                                  "node or in the launch script; a single-node script's localhost does not carry "
                                  "over to several nodes.")
            return
        verdict.error(subject, message=(f"MASTER_ADDR={plan.address} ({plan.source}) is an address of {fold(shared)} "
                                        f"alike (a bridge every node has), so no one node is the master: its port "
                                        f"cannot be probed" if len(shared) > 1 else
                                        f"MASTER_ADDR={plan.address} ({plan.source}) names no inventory host, nor an "
                                        f"address of one: its port cannot be probed"),
                      remedy="Set MASTER_ADDR to the address or name of the rank-0 node as the inventory lists it "
                             "(or one of that node's own interface addresses), on every node or in the launch script.")
        return
    master_facts = cluster.facts.get(plan.master.name)
    if master_facts is None or not master_facts.reachable:
        # Its port was not probed: the sources' "refused" or "timeout" would blame a firewall.
        verdict.error(subject, message=f"not evaluated: the rendezvous master {plan.master.name} "
                                       f"(MASTER_ADDR={plan.address}) is unreachable")
        return
    for host in plan.sources:
        try:
            probes = cluster.facts[host.name].get("tcp.rendezvous")
        except FactUnavailable as exc:
            verdict.error(subject, message=f"{host.name} -> {subject}: {exc}", host=host.name)
            continue
        judge_tcp(verdict, probes[0], f"{host.name} -> {plan.master.name} MASTER_PORT ({subject}, from the "
                                      f"{plan.source})", subject, host=host.name,
                  python=target_python(cluster, plan.master), target=plan.master.name)


def _rank_zero_on_the_master(verdict, ranks: dict[str, str], plan, names: list[str]) -> None:
    """Distinct ranks: they are 0..N-1, and rank 0 (which hosts the store the others meet at) is
    the node MASTER_ADDR names; otherwise every rank waits at an address where no one listens."""
    numbers = {h: int(r) for h, r in ranks.items() if r.isascii() and r.isdigit()}
    nodes = len(names)  # every node of the inventory, also those whose environment was not read
    odd = sorted(h for h, r in ranks.items() if h not in numbers or numbers[h] >= nodes)
    if odd:
        verdict.failed("RANK", outliers=tuple(odd), where="RANK",
                       observed="; ".join(f"RANK={ranks[h]} on {h}" for h in odd),
                       expected=f"node ranks 0..{nodes - 1}, one per node")
        return
    counts = Counter(numbers.values())
    if len(counts) < len(numbers):  # 0 and 00 are one rank
        twice = sorted(h for h, n in numbers.items() if counts[n] > 1)
        verdict.failed("RANK", outliers=tuple(twice), where="RANK",
                       observed="; ".join(f"RANK={ranks[h]} on {h}" for h in twice) + ": the same rank",
                       expected="a distinct RANK on every node")
        return
    master_rank = numbers.get(plan.master.name) if plan.master is not None else None
    if master_rank not in (None, 0):
        zero = next((h for h, n in numbers.items() if n == 0), None)
        verdict.failed("RANK", outliers=tuple(h for h in (plan.master.name, zero) if h), where="RANK",
                       observed=f"MASTER_ADDR={plan.address} names {plan.master.name}, whose RANK is {master_rank}"
                                + (f"; RANK=0 is on {zero}" if zero else ""),
                       expected="RANK=0 on the node MASTER_ADDR names (rank 0 hosts the rendezvous)")
        return
    if 0 not in numbers.values():
        unread = [n for n in names if n not in ranks]
        if unread:
            verdict.error("RANK", message=f"RANK=0 is on none of the nodes read; not evaluated on {fold(unread)}, "
                                          f"whose environment was not read")
        else:
            verdict.failed("RANK", where="RANK", observed=f"no node has RANK=0 (ranks {', '.join(sorted(ranks.values()))})",
                           expected=f"node ranks 0..{nodes - 1}, one per node, 0 on the master")
        return
    zero = next(h for h, n in numbers.items() if n == 0)
    if plan.master is not None and plan.master.name != zero:
        verdict.failed("RANK", outliers=(zero, plan.master.name), where="RANK",
                       observed=f"RANK=0 is on {zero}, but MASTER_ADDR={plan.address} names {plan.master.name}",
                       expected="RANK=0 on the node MASTER_ADDR names (rank 0 hosts the rendezvous)")
        return
    read = "" if len(ranks) == nodes else f" read (of {nodes})"
    verdict.passed("RANK", message=f"distinct RANK within 0..{nodes - 1} on all {len(ranks)} nodes{read}"
                                   + (f", 0 on the master {zero}" if plan.master is not None else ""))


# Filesystems one node's files can be another's on, as `stat -f -c %T` names them (every FUSE
# filesystem is fuseblk: its df source names the backend); anything else is local.
NETWORK_FS = re.compile(r"nfs\d*|cifs|smb\d*|lustre|gpfs|ceph|glusterfs|fhgfs|beegfs|fuseblk|fuse|v9fs|9p|virtiofs|"
                        r"panfs|wekafs|ocfs2|gfs/gfs2|gfs2|afs")


def _read_only_but_shared(verdict, path, writer, views) -> bool:
    """A read-only path (a model folder mounted :ro) takes no marker: judged by its filesystem
    instead, the same network filesystem and source on every node.  False when that cannot be said
    (the usual "not writable" failure follows)."""
    seen = {host: view.filesystems.get(path) for host, view in views.items()}
    if not all(seen.values()):
        return False
    kinds = {fs for fs in seen.values()}
    fstype, source = seen[writer]
    if len(kinds) == 1 and _shared_kind(fstype, source):
        verdict.passed(path, message=f"{path} is read-only on {writer}, so no marker could be written; it is the "
                                     f"same {fstype} filesystem ({source}) on all {len(views)} nodes")
        return True
    described = "; ".join(f"{fold(hs)}: {t} {s}" for (t, s), hs in _group(seen).items())
    sides = split(seen)
    # The minority is the odd one only when what most nodes have is a shared filesystem.
    named = sides.outliers if not sides.unanimous and not sides.tied and _shared_kind(*sides.majority) \
        else tuple(sorted(views))
    verdict.failed(path, outliers=named, where=path,
                   observed=f"{path} is read-only on {writer} (no marker could be written), and its filesystem is "
                            f"not one network filesystem everywhere: {described}",
                   expected="one network filesystem, the same source on every node")
    return True


def _writer_off_the_share(verdict, path, writer, views, missing) -> bool:
    """No other node saw the writer's marker.  The nodes are compared by the filesystem each has at
    ``path`` (a local disk is each node's own): when most of them have one network share there, the
    nodes without it are the odd ones, the writer included (its share not mounted: the marker went
    to the empty mount point); when no node has a share there, every node is.  False otherwise (the
    usual failure naming the readers follows, with what they hold of a checkpoint's metadata)."""
    seen = {host: views[host].filesystems.get(path) for host in [writer, *missing]}
    if not all(seen.values()):
        return False
    keys = {host: fs if _shared_kind(*fs) else ("", host) for host, fs in seen.items()}
    if not any(key[0] for key in keys.values()):
        return False  # no share anywhere: the usual failure, the writer among those named (_no_share)
    sides = split(keys)
    readers = {keys[host] for host in missing}
    if sides.tied and len(readers) == 1 and next(iter(readers))[0] and not keys[writer][0]:
        # One reader on a share, the writer on its own disk (two nodes): the marker on the disk
        # makes the writer the odd one, as a majority would.
        agreeing, share, odd = tuple(missing), next(iter(readers)), (writer,)
    elif sides.tied or writer in sides.agreeing:
        # The writer on a network share of its own (another server) cannot be told from the
        # readers with one reader: only a majority on one share, without the writer, makes it odd.
        return False
    else:
        agreeing, share, odd = sides.agreeing, sides.majority, sides.outliers
    fstype, source = share
    verdict.failed(path, outliers=odd, where=path,
                   observed=f"the marker {writer} wrote to {path} is seen on no other node; "
                            f"{fold(agreeing)} {'have' if len(agreeing) > 1 else 'has'} the {fstype} "
                            f"share {source} there, while " + "; ".join(f"{h} has {' '.join(seen[h])}" for h in odd),
                   expected=f"{path} the same {fstype} share on every node",
                   remedy=f"Mount {source} at {path} on {fold(odd)} (most nodes have it there); until then what "
                          f"{'it writes' if len(odd) == 1 else 'they write'} to {path} stays on "
                          f"{'its own disk' if len(odd) == 1 else 'their own disks'}.")
    return True


def _no_share(path, writer, views, missing) -> bool:
    """Whether no node (the writer included) has a network share at ``path``, as far as each said."""
    seen = [views[host].filesystems.get(path) for host in [writer, *missing]]
    return all(seen) and not any(_shared_kind(*fs) for fs in seen)


def _shared_kind(fstype: str, source: str) -> bool:
    """A filesystem nodes can share: a network one, not mounted from the node itself, and for FUSE
    (fuseblk) one whose source is no local device or container layer."""
    if not NETWORK_FS.fullmatch(fstype):
        return False
    if re.match(r"(localhost\d*|ip6-localhost|localhost6|127\.[\d.]+|0\.0\.0\.0|\[?::1?\]?):", source):
        return False  # each node mounting its own server
    # A FUSE source that is a local path or device (ntfs-3g /dev/sdb1, bindfs /data) is the node's own.
    return not (fstype == "fuseblk" and (source.startswith("/") or source in LOCAL_FUSE))


LOCAL_FUSE = frozenset({"fuse-overlayfs", "squashfuse", "lxcfs", "gvfsd-fuse"})


def _group(per_host: dict) -> dict:
    out: dict = defaultdict(list)
    for host, value in per_host.items():
        out[value].append(host)
    return out


# -- HCCL host ports ---------------------------------------------------------------------------


@check("cluster.hccl_ports", title="HCCL host ports (HCCL_IF_BASE_PORT block) reachable between nodes",
       reference=faq.R_CROSS_NODE_PORT,
       needs=("tcp.hccl", "session.env?", "net.interfaces?", "net.listening?", "tools.python3?", "ascend.files?"),
       remedy=FIREWALL_REMEDY + " HCCL uses a block of 16 ports from HCCL_IF_BASE_PORT (default 60000-60015; "
                                "32 on CANN 8.5 and later), or the ranges in HCCL_HOST_SOCKET_PORT_RANGE when "
                                "that is set; reserve them (from HCCL_IF_BASE_PORT when it is set) in addition "
                                "to what is already reserved: r=$(sysctl -n net.ipv4.ip_local_reserved_ports); "
                                "sysctl -w net.ipv4.ip_local_reserved_ports=\"${r:+$r,}60000-60031\" (persist it "
                                "in /etc/sysctl.d/).")
def test_hccl_ports(host, facts, cluster, verdict):
    if len(cluster.reachable()) < 2:
        verdict.skipped(message="fewer than two reachable nodes: no pair to probe")
        return
    reachable = cluster.reachable()
    names = [h.name for h, _ in reachable]
    if host.name not in names:
        verdict.error(message=f"not evaluated: {host.name} was not reached")
        return
    for name, value, accepted in hccl_port_settings_invalid(host, facts):
        # HCCL refuses the value when the job starts; the probe below tries the default block instead.
        verdict.failed(name, observed=f"{name}={value!r} on {host.name}", expected=accepted,
                       remedy=f"Set {name} to {accepted.split(' (')[0]} in the launch script on every node, or "
                              f"unset it for HCCL's default (ports 60000-60015, 60000-60031 from CANN 8.5).")
    # Only this host's peer in the ring (the next reachable host): the whole ring per host is N x N.
    peer, peer_facts = reachable[(names.index(host.name) + 1) % len(reachable)]
    if not hccl_ports_of(peer, peer_facts)[1]:  # phase two connects to nothing there
        verdict.skipped(message=f"{peer.name} lets the OS pick HCCL's host ports "
                                f"(HCCL_HOST_SOCKET_PORT_RANGE=auto): no fixed port to probe")
        return
    probes = _probes(verdict, facts, "tcp.hccl", host.name)
    if probes is None:
        return
    address, why = hccl_endpoint(peer, peer_facts)
    why = "" if address == peer.address else f" ({why})"
    own = node_addresses(facts)
    # Each port expected at the peer has its record (a cut-short run or a replayed file could lack
    # one; a record for another port is not that port's answer).
    wanted = hccl_ports_of(peer, peer_facts)[1]
    by_port = {p.port: p for p in probes}
    for port in wanted:
        if port not in by_port:
            verdict.error(f"{peer.name}:{port}", message=f"{host.name} -> {peer.name} HCCL port {port} at {address}: "
                                                         f"no probe record", remedy=NO_RECORD_REMEDY)
    probes = [by_port[port] for port in wanted if port in by_port]
    for probe in probes:
        path = f"{host.name} -> {peer.name} HCCL port {probe.port} at {probe.address}{why}"
        if probe.address in own:
            # Both nodes' HCCL sockets on one address (a docker bridge's 172.18.0.1 on every
            # node, picked by HCCL itself): the connect reached this node's own listener.
            verdict.failed(f"{peer.name}:{probe.port}",
                           observed=f"{path}: {probe.address} is also an address of {host.name}, so the "
                                    f"connect reached {host.name} itself; HCCL on the two nodes binds the "
                                    f"same address and cannot reach the other there",
                           expected=f"an address of {peer.name}'s own, reachable from {host.name}",
                           remedy="Set HCCL_SOCKET_IFNAME (or HCCL_IF_IP) on every node to the NIC of the "
                                  "network the nodes share, e.g. HCCL_SOCKET_IFNAME==enp189s0f0 (a leading = "
                                  "means this exact name, not a prefix; declare it under env: in the inventory if "
                                  "the launch script sets it).")
            continue
        judge_tcp(verdict, probe, path, f"{peer.name}:{probe.port}", python=peer_facts.optional("tools.python3"),
                  target=peer.name)


# -- launcher SSH ----------------------------------------------------------------------------


OWN_LOGIN = " (its own login: pdsh logs in to the launcher too)"


def _ssh_line(address: str) -> str:
    """The record's ``[user@]address:port`` as the ssh command an operator can paste (ssh takes
    the port with -p, not after a colon)."""
    target, _, port = address.rpartition(":")
    if not target or not port.isdigit():
        return f"ssh -o BatchMode=yes {address} true"
    return f"ssh -o BatchMode=yes{'' if port == '22' else f' -p {port}'} {target} true"


@check("cluster.launcher_ssh", title="The launcher reaches every node with non-interactive SSH (what pdsh needs)",
       reference=faq.M4, needs=("ssh.launcher",),
       remedy=("On the launcher, create a key without a passphrase (ssh-keygen -t ed25519), copy it to every node "
               "(ssh-copy-id <node>), and accept each node's host key once (ssh <node> true), so that "
               "ssh -o BatchMode=yes <node> true succeeds without a prompt."))
def test_launcher_ssh(host, facts, cluster, verdict):
    launchers = launcher_hosts(cluster)
    if not launchers:
        verdict.skipped(message="no launcher in the inventory (group head or launcher: true)")
        return
    if host.name not in {h.name for h in launchers}:
        verdict.skipped(message=f"{host.name} is not a launcher")
        return
    targets = launcher_targets(cluster, host)
    if all(t.name == host.name for t in targets):  # one node: no pdsh to launch with
        local = [h.name for h, _ in cluster.reachable() if h.name != host.name and h.connection == "local"]
        verdict.skipped(message=f"no other reachable node for {host.name} to log in to" + (
            f" ({fold(local)} is this machine's local entry: no SSH login to test there)" if local else ""))
        return
    attempts = _probes(verdict, facts, "ssh.launcher", host.name)
    if attempts is None:
        return
    # A target with no attempt in the record (cut short, or facts read from a file taken before
    # the node joined the inventory) was not tested: not a pass by omission.
    tried = {a.name for a in attempts}
    untried = [t.name for t in targets if t.name not in tried]
    if untried == [host.name]:
        # Every other node tried, the launcher's own login not: a record from a preflight before it
        # was tested (--facts-in of an older capture).
        verdict.skipped(host.name, message=f"{host.name}'s login to itself is not in the record (facts gathered "
                                           f"by an earlier preflight, or the record cut short): not tested")
    else:
        for name in untried:
            verdict.error(name, message=f"{host.name} -> {name}: no probe record", remedy=NO_RECORD_REMEDY)
    # A launcher whose key is on no node fails every target with the same words: targets failing
    # alike are one finding naming them as a node set, not one per node.
    alike: dict[str, list] = {}
    for attempt in attempts:
        if attempt.ok:
            verdict.passed(attempt.name, message=f"{_ssh_line(attempt.address)} from {host.name} succeeded")
        else:
            why = attempt.detail.replace(attempt.address, "<node>").replace(attempt.name, "<node>")
            if attempt.name == host.name:
                why += OWN_LOGIN
            alike.setdefault(why, []).append(attempt)
    for why, failing in alike.items():
        if len(failing) == 1:
            [attempt] = failing
            own = OWN_LOGIN if attempt.name == host.name else ""
            verdict.failed(attempt.name, observed=f"{_ssh_line(attempt.address)} from {host.name} failed "
                                                  f"({attempt.detail}){own}",
                           expected="a login without password or host-key prompt")
            continue
        targets = fold([a.name for a in failing])
        verdict.failed(targets, observed=f"ssh -o BatchMode=yes <node> true from {host.name} failed for each of "
                                         f"these {len(failing)} nodes ({why})",
                       expected="a login without password or host-key prompt")


# -- names and clocks ------------------------------------------------------------------------


@check("cluster.hostnames", title="Every node resolves every inventory name to the same address", scope="cluster",
       reference=faq.X_HOSTNAMES, needs=("net.resolve", "net.interfaces?"),
       remedy=("Make name resolution identical on every node: the same /etc/hosts entries (or DNS) for every "
               "cluster node, with each name pointing at the address the other nodes use to reach it."))
def test_hostnames(cluster, verdict):
    views: dict[str, dict[str, str | None]] = {}
    for host, facts in cluster.reachable():
        try:
            views[host.name] = facts.get("net.resolve")
        except FactUnavailable as exc:
            verdict.error(message=f"{host.name}: {exc}", host=host.name)
    hosts = {h.name: h for h in cluster.hosts if h.connection != "local"}
    if not views and hosts and verdict.results:
        # Every node's answers unreadable (errors above): not evaluated, not "nothing to compare".
        verdict.error(message="not evaluated: no reached node's name resolution could be read")
        return
    if not views or not hosts:
        verdict.skipped(message="no name to compare")
        return
    # One node with a broken /etc/hosts fails every name the same way: names failing alike are one
    # finding naming them as a node set, not N findings (1000 at 1000 nodes) that differ by name only.
    alike: dict[tuple, list[tuple[str, object]]] = {}
    labels = []
    # Addresses on more than one node's interfaces (docker0's 172.17.0.1 everywhere) are no one
    # node's own: a first answer among them does not fold as the host's.
    interfaces_of = {h.name: _interface_addresses(cluster, h) for h in cluster.hosts}
    on_nodes = Counter(a for found in interfaces_of.values() for a in (found or ()))
    stale: dict[tuple, list[tuple[str, list]]] = {}

    def judge(name, host, firsts, several, own, interfaces):
        if several and own is not None:
            _collect_foreign(stale, name, firsts, several, own)
        answers = _rotation_folded(firsts, several, own, host.address)
        sides = split(answers, missing=_UNRESOLVED)
        if sides.unanimous and sides.majority != _UNRESOLVED:
            _same_everywhere(verdict, host, sides.majority, firsts, own, interfaces, alone=len(hosts) == 1)
            return
        if own is not None and _elsewhere_than_its_own(verdict, host, firsts, own, interfaces, sides):
            return
        if sides.unanimous and host.address != name:
            labels.append(name)  # the inventory reaches it by address: the name is only a label
            return
        if sides.unanimous:
            how = "nowhere"
        else:
            how = "unresolved" if set(sides.others) == {_UNRESOLVED} else "elsewhere"
        alike.setdefault((how, sides.outliers or tuple(sorted(answers))), []).append((name, sides))

    rotating = []  # (name's state for judge(), its foreign records, {node: foreign first answer})
    columns = _Columns(views)
    for name, host in hosts.items():
        firsts, several, uniform = columns.read(name)
        interfaces = interfaces_of[host.name]
        # The host's own: its inventory address and what is on its interfaces alone, not link-local.
        own = None if interfaces is None else \
            {host.address} | {a for a in interfaces if on_nodes[a] == 1 and not _link_local(a)}
        if uniform is not None and uniform != _UNRESOLVED:  # what split() below would find, at once
            if several and own is not None:
                _collect_foreign(stale, name, firsts, several, own)
            _same_everywhere(verdict, host, uniform, firsts, own, interfaces, alone=len(hosts) == 1)
            continue
        state = (name, host, firsts, several, own, interfaces)
        found = _rotating_foreign(firsts, several, own)
        if found is not None:
            rotating.append((state, *found))
        else:
            judge(*state)
    # Records that come first on a different set of nodes for each name rotate (DNS): one finding
    # for them all.  The same nodes every time is those nodes' own order: judged node by node.
    if len({frozenset(first_foreign) for _, _, first_foreign in rotating}) > 1:
        _rotating_records(verdict, [(state[0], foreign, first_foreign) for state, foreign, first_foreign in rotating],
                          len(views))
    else:
        for state, _, _ in rotating:
            judge(*state)
    for holders, names in stale.items():
        _foreign_records(verdict, holders, names)
    for (how, outliers), failing in alike.items():
        if len(failing) == 1:
            _one_name_failing(verdict, *failing[0], outliers)
        else:
            _names_failing_alike(verdict, how, failing, outliers)
    if labels:
        verdict.skipped(fold(labels), message=f"{fold(labels)}: resolve on no node, and the inventory gives "
                                              f"{'its' if len(labels) == 1 else 'their'} address: inventory "
                                              f"labels, not names the nodes use")


class _Columns:
    """The reached nodes' answers (``views``: node -> parsed net.resolve), read name by name.
    Nodes that printed the same text share one parsed answer (facts.SharedOutputs), and a uniform
    fleet prints one: a name is looked up once per distinct answer, not once per node (N names on
    N nodes took 5.6 s at 2000 nodes)."""

    def __init__(self, views: dict):
        self.nodes = list(views)
        self.distinct = {id(view): view for view in views.values()}
        self.records = {key: getattr(view, "addresses", {}) for key, view in self.distinct.items()}
        self.of = {node: id(view) for node, view in views.items()}

    def read(self, name: str):
        """``(firsts, several, uniform)``: each node's first answer (or _UNRESOLVED); each node's
        several records where it has more than one (DNS rotating them, several /etc/hosts lines);
        and the first answer when every node has the same first answer and the same records, else
        None."""
        firsts = {key: view.get(name) or _UNRESOLVED for key, view in self.distinct.items()}
        several = {key: found for key, records in self.records.items()
                   if (found := records.get(name)) and len(found) > 1}
        answers = set(firsts.values())
        records = set(several.values())
        if len(answers) == 1 and (not several or (len(several) == len(firsts) and len(records) == 1)):
            answer = answers.pop()
            return (dict.fromkeys(self.nodes, answer), dict.fromkeys(self.nodes, records.pop()) if several else {},
                    answer)
        of = self.of
        return ({node: firsts[of[node]] for node in self.nodes},
                {node: several[of[node]] for node in self.nodes if of[node] in several}, None)


def _rotation_folded(firsts: dict, several: dict, own: set[str] | None, address: str) -> dict:
    """Where some node has several records for a name (DNS rotating them, a multi-homed host),
    first answers that are each one of the host's own addresses (``own``) agree: each is then the
    lowest of them.  With the host's interfaces unknown (``own`` None), the records every node has,
    the inventory ``address`` among them.  Other answers stay as they are, to be told apart."""
    seen = set(firsts.values())
    if len(seen) < 2 or not several:
        return firsts
    if own is None:
        if len(several) != len(firsts):
            return firsts
        own = set.intersection(*(set(found) for found in several.values()))
        if address not in own:
            return firsts
    same = {a for a in seen if a in own and not _loopback(a)}
    if len(same) < 2:
        return firsts
    lowest = min(same, key=address_order)
    return {node: lowest if first in same else first for node, first in firsts.items()}


def _elsewhere_than_its_own(verdict, host, firsts: dict, own: set[str], interfaces, sides) -> bool:
    """Some nodes get one of the host's own addresses first, others an address that is not (a stale
    record, docker0's): the latter are the outliers however many they are (the majority is no
    guide when DNS hands most nodes the stale record).  Where the majority's outliers are those
    nodes already, the usual finding (grouped with names failing alike) says it.  Where no node gets
    one of the host's own, answers that differ are said with that (fixing every node to the
    majority's answer would fix nothing).  True if reported."""
    right = {node for node, first in firsts.items() if first in own}
    wrong = {node: first for node, first in firsts.items() if first not in own}
    if not wrong or (right and set(sides.outliers) == set(wrong)):
        return False
    if not right and (sides.unanimous or set(wrong.values()) == {_UNRESOLVED}):
        return False
    by_answer: dict[str, list[str]] = defaultdict(list)
    for node, first in wrong.items():
        by_answer[first].append(node)
    foreign = sorted((a for a in by_answer if a != _UNRESOLVED), key=address_order)
    observed = "; ".join(f"on {fold(nodes)}: {host.name} -> {answer}" for answer, nodes in
                         sorted(by_answer.items(), key=lambda kv: address_order(kv[0])))
    if foreign:
        observed += (f" ({', '.join(foreign)} {'is not an address' if len(foreign) == 1 else 'are not addresses'} "
                     f"of {host.name}: {_whose(host, interfaces)})")
    outliers = tuple(sorted(wrong))
    if not right:
        verdict.failed(host.name, outliers=outliers, where=host.name,
                       observed=observed + f"; no node resolves {host.name} to one of its own addresses",
                       expected=f"{host.name} resolving to one of its own addresses on every node",
                       remedy=f"Point {host.name} at its own address ({host.address}, or one on its interfaces) in "
                              f"/etc/hosts on every node, or in DNS: none of the addresses the nodes get now is "
                              f"{host.name}'s.")
        return True
    answers = sorted({firsts[node] for node in right}, key=address_order)
    observed += (f"; {fold(sorted(right))} {'resolves' if len(right) == 1 else 'resolve'} it to "
                 f"{'its own address ' if len(answers) == 1 else 'its own addresses '}{', '.join(answers)}")
    verdict.failed(host.name, outliers=outliers, where=host.name, observed=observed,
                   expected=f"{host.name} resolving to one of its own addresses on every node",
                   remedy=f"On {fold(list(outliers))}, make {host.name} resolve to its own address "
                          f"({', '.join(answers)}): fix or remove its line in /etc/hosts there (or the record in "
                          f"DNS, if every node asks DNS), as on the nodes that resolve it right.")
    return True


def _whose(host, interfaces) -> str:
    return (f"inventory address {host.address}; its interfaces: "
            f"{', '.join(sorted(interfaces or (), key=address_order)) or 'none'}")


@functools.lru_cache(maxsize=65536)
def _loopback(address: str) -> bool:
    return is_loopback(address)  # once per address: N nodes x N names look the same few up


@functools.lru_cache(maxsize=65536)
def _link_local(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_link_local
    except ValueError:
        return False


def _collect_foreign(stale: dict, name: str, firsts: dict, several: dict, own: set[str]) -> None:
    """Records of a name that are not its host's addresses, held beside the first answer by nodes
    whose first answer is the host's (a stale /etc/hosts line below the right one, a DNS record left
    behind): nothing fails today, but a resolver may put one first.  A node that got one first
    answers differently from the others and is failed as such.  Collected by the nodes holding
    them, so one node's stale block for every name is one finding."""
    extra = {}
    foreign_in: dict[tuple, tuple] = {}  # most nodes hold the same records: each set is read once
    for node, found in several.items():
        if firsts[node] not in own:
            continue
        foreign = foreign_in.get(found)
        if foreign is None:
            foreign = foreign_in[found] = tuple(a for a in found if a not in own and not _loopback(a))
        if foreign:
            extra[node] = foreign
    if extra:
        stale.setdefault(tuple(sorted(extra)), []).append((name, sorted({a for f in extra.values() for a in f},
                                                                         key=address_order)))


def _rotating_foreign(firsts: dict, several: dict, own: set[str] | None):
    """A name some nodes resolve first to a record that is not the host's own, while others get
    the host's own first, every node holding the same records (or only the host's own): a record
    handed out first in turn, as DNS rotates them.  ``(foreign records, {node: its foreign first
    answer})``, else None.  Whether the nodes that got it first change from name to name, which
    tells DNS from a few nodes' own /etc/hosts order, is decided over all names (test_hostnames)."""
    if own is None or not several:
        return None
    # Records of the host's own only are right, whatever their order; the rest must be one set.
    kinds = {found for found in set(several.values()) if not own.issuperset(found)}
    if len(kinds) != 1 or not own.issuperset(firsts[node] for node in firsts.keys() - several.keys()):
        return None
    kind = kinds.pop()
    foreign = sorted((a for a in kind if a not in own and not _loopback(a)), key=address_order)
    first_foreign = {node: first for node, first in firsts.items() if first not in own}
    # A loopback line first is that node's /etc/hosts, not rotation; every node wrong is no rotation.
    if not first_foreign or len(first_foreign) == len(firsts) or not set(first_foreign.values()) <= set(foreign):
        return None
    return foreign, first_foreign


def _more_names(count: int) -> str:
    """"; and N more names" past the _EXAMPLES shown."""
    left = count - _EXAMPLES
    return f"; and {left} more name{'s' if left > 1 else ''}" if left > 0 else ""


def _rotating_records(verdict, rotating: list, count: int) -> None:
    names = [name for name, _, _ in rotating]
    subject = fold(names)

    def example(name, foreign, first_foreign):
        by_answer: dict[str, list[str]] = defaultdict(list)
        for node, first in first_foreign.items():
            by_answer[first].append(node)
        # Which nodes changes with every lookup: a long list of them would be noise.
        return "; ".join(f"{name} -> {answer} first on "
                         + (fold(nodes) if len(nodes) <= 2 * _EXAMPLES else
                            f"{len(nodes)} of {count} nodes (e.g. {', '.join(sorted(nodes)[:_EXAMPLES])})")
                         for answer, nodes in sorted(by_answer.items(), key=lambda kv: address_order(kv[0])))

    shown = "; ".join(example(*entry) for entry in rotating[:_EXAMPLES])
    more = _more_names(len(rotating))
    records = sorted({a for _, foreign, _ in rotating for a in foreign}, key=address_order)
    listed = f"{', '.join(records[:_EXAMPLES])}{', ...' if len(records) > _EXAMPLES else ''}"
    what = f"{len(rotating)} names have records that are not their nodes' own addresses ({listed})"
    verdict.failed(subject, outliers=tuple(names), where=subject,
                   observed=f"{what} beside the right ones; the nodes holding them get one first in turn, a different "
                            f"set of nodes for each name (DNS rotating the records), and connect to it: {shown}{more}",
                   expected="every record of a node's name one of its own addresses",
                   remedy="Remove the records that are not the named nodes' own addresses from DNS (different nodes "
                          "get them first for each name, as DNS rotates records), or from /etc/hosts on the nodes "
                          "that hold them if they come from there; then re-run the preflight.")


def _foreign_records(verdict, holders: tuple, names: list) -> None:
    where = fold(list(holders))
    shown = "; ".join(f"{name} -> {', '.join(foreign)}" for name, foreign in names[:_EXAMPLES])
    more = _more_names(len(names))
    many = len(names) > 1 or len(names[0][1]) > 1
    verdict.failed(f"records held on {where}", severity="warning", outliers=holders, where=where,
                   observed=f"also {'resolves' if len(holders) == 1 else 'resolve'} {shown}{more} below the right "
                            f"first address: "
                            f"{'records that are not addresses' if many else 'a record that is not an address'} "
                            f"of the named {'nodes' if len(names) > 1 else 'node'} (a resolver may return "
                            f"{'them' if many else 'it'} first: DNS rotates records, and /etc/hosts order can change)",
                   expected="every record of a node's name one of its own addresses",
                   remedy=f"Remove the records that are not the named node's addresses from /etc/hosts on {where} "
                          f"(or from DNS, if they come from there), so that every node reaches each node at its "
                          f"own address.")


def _interface_addresses(cluster, host) -> set[str] | None:
    """Loopback left out: a name resolving to 127.0.0.1 on every node is not the host's address to
    them (an /etc/hosts copied from it with its name on the loopback line)."""
    facts = cluster.facts.get(host.name)
    interfaces = facts.optional("net.interfaces") if facts is not None and facts.reachable else None
    if interfaces is None:
        return None
    return {ip for iface in interfaces.values() for ip in iface.ips(link_local=True) if not _loopback(ip)}


def _same_everywhere(verdict, host, address, firsts: dict, own: set[str] | None, interfaces, alone: bool):
    """A name every node resolves alike can still be wrong everywhere (one stale /etc/hosts copied
    to every node): the address must be the host's own (see test_hostnames).  In a one-node
    inventory (``alone``) its own name on loopback is no fault."""
    count = len(firsts)
    everywhere = (f"on all {count} nodes" if count > 1 else
                  "on the one node reached" if not alone else "on its only node")
    if own is None and address != host.address and not (alone and _loopback(address)):
        # Its interfaces were not read: whether the address is another of its own cannot be told.
        try:
            ipaddress.ip_address(host.address)
            other = f", not its inventory address {host.address},"
        except ValueError:  # the inventory gives a name: nothing to set the answer against
            other = ""
        verdict.error(host.name, outliers=(host.name,),
                      message=f"not evaluated: {host.name} resolves to {address} {everywhere}{other} and "
                              f"{host.name}'s interfaces were not read (it was not reached, or `ip -o addr` failed "
                              f"there), so whether {address} is its own cannot be told")
        return
    if address == host.address or own is None or address in own or (alone and _loopback(address)):
        got = sorted(set(firsts.values()), key=address_order)
        if len(got) > 1:
            kind = "its own addresses" if own is not None else "the records every node has for it"
            message = f"{host.name} -> one of {kind} ({', '.join(got)}) {everywhere}"
        else:
            message = f"{host.name} -> {address} {everywhere}"
        verdict.passed(host.name, message=message)
        return
    who = "every node resolves" if count > 1 else f"{next(iter(firsts))} (the one node reached) resolves"
    verdict.failed(host.name, outliers=(host.name,), where=host.name,
                   observed=f"{who} {host.name} to {address}, which is not an address of {host.name} "
                            f"({_whose(host, interfaces)})",
                   expected=f"{host.name} resolving to one of its own addresses",
                   remedy=f"Point {host.name} at its own address ({host.address}, or one on its interfaces) in "
                          f"/etc/hosts on every node, or in DNS.")


_UNRESOLVED = "does not resolve"
_EXAMPLES = 3


def _one_name_failing(verdict, name, sides, outliers):
    if sides.unanimous:
        verdict.failed(name, outliers=outliers, where=name,
                       observed=f"{name} does not resolve on any node", expected="one address everywhere")
        return
    verdict.failed(name, outliers=outliers, where=name,
                   observed=sides.describe(lambda v, ns: f"on {fold(ns)}: {name} -> {v}")
                   + sides.versus(lambda ns, v: f"{fold(ns)} resolve it to {v}"),
                   expected=f"{name} resolving to the same address on every node")


def _names_failing_alike(verdict, how, failing, outliers):
    names = [name for name, _ in failing]
    subject = fold(names)
    count = f"{len(names)} names"
    if how == "nowhere":
        verdict.failed(subject, outliers=outliers, where=subject,
                       observed=f"none of the {count} resolves on any node", expected="one address everywhere")
        return
    examples = "; ".join(sides.describe(lambda v, ns, n=name: f"{n} -> {v} on {fold(ns)}")
                         + sides.versus(lambda ns, v: f"{v} elsewhere", lead=" but ")
                         for name, sides in failing[:_EXAMPLES])
    more = f"; and {len(failing) - _EXAMPLES} more" if len(failing) > _EXAMPLES else ""
    if how == "unresolved":
        observed = f"none of the {count} resolves on {fold(outliers)}, while the other nodes resolve each of them"
    else:
        observed = f"on {fold(outliers)} the {count} resolve to other addresses than on the other nodes"
    verdict.failed(subject, outliers=outliers, where=subject,
                   observed=f"{observed} (e.g. {examples}{more})",
                   expected="every name resolving to the same address on every node")


@check("cluster.clock_skew", title="Node clocks agree", scope="cluster", severity="warning",
       reference=faq.X_CLOCK, needs=("clock.offset",),
       remedy=("Synchronise the clocks: run chrony or ntpd against the same time source on every node "
               "(chronyc tracking shows the offset); skewed clocks break log correlation, certificates and timeouts."))
def test_clock_skew(cluster, verdict):
    offsets = {}
    for host, facts in cluster.reachable():
        try:
            offsets[host.name] = facts.get("clock.offset")
        except FactUnavailable as exc:
            verdict.error(message=f"{host.name}: {exc}", host=host.name)
    if len(offsets) < 2 and verdict.results:
        # Clocks unreadable: those errors say so; "fewer than two clocks read" read as not applicable.
        verdict.error(message=f"not evaluated: {len(offsets)} of {len(cluster.reachable())} reached nodes' clocks read",
                      remedy="Fix what the errors above say for each node (its clock is read with date +%s.%N "
                             "over SSH), then re-run the preflight.")
        return
    if len(offsets) < 2:
        verdict.skipped(message="fewer than two clocks read")
        return
    bound = max(float(1.0 if h.vars.get("max_clock_skew_s") is None else h.vars["max_clock_skew_s"])
                for h in cluster.hosts)
    ordered = sorted(offsets.values(), key=lambda o: o.offset_s)
    low, high = ordered[0], ordered[-1]
    # The true median: with an even count, the upper middle blamed the lower half (of two nodes, always
    # the one whose clock agreed with the controller's); a tie names both sides.
    median = statistics.median(o.offset_s for o in ordered)
    spread = high.offset_s - low.offset_s
    # The bound is between any two clocks: the fleet fails when its two extremes are further apart
    # than it, beyond what their own readings are uncertain by; the nodes named are those further
    # than half the bound from the median (one at least, then).
    slack = low.uncertainty_s + high.uncertainty_s
    if spread <= bound and slack <= bound:
        verdict.passed(message=f"clocks within {spread:.2f}s of each other (bound {bound:g}s)")
        return
    if spread <= bound + slack and slack <= bound:
        verdict.passed(message=f"clocks {spread:.2f}s apart as read, within the bound {bound:g}s given the readings' "
                               f"own ±{low.uncertainty_s:.2f}s and ±{high.uncertainty_s:.2f}s")
        return
    if spread <= bound + slack:
        # Readings less precise than the bound (slow round trips) cannot tell a real skew from none:
        # this passed, saying "within 6.00s of each other (bound 1s)".
        name = {id(o): h for h, o in offsets.items()}
        verdict.failed(observed=f"the clocks of {name[id(low)]} and {name[id(high)]} read {spread:.2f}s apart, but "
                                f"those readings are only good to ±{low.uncertainty_s:.2f}s and "
                                f"±{high.uncertainty_s:.2f}s (slow SSH round trips): the skew cannot be told "
                                f"from the bound",
                       expected=f"every clock within {bound:g}s of the others, read precisely enough to tell",
                       remedy="Read the offsets on the nodes themselves: chronyc tracking (or timedatectl) on each; "
                              "if they disagree, synchronise every node to the same time source with chrony or ntpd.")
        return
    odd = sorted(h for h, o in offsets.items() if abs(o.offset_s - median) > bound / 2 + o.uncertainty_s)
    verdict.failed(fold(odd), outliers=tuple(odd),
                   observed=f"the clocks span {spread:.2f}s: " + "; ".join(
                       f"{h} is {offsets[h].offset_s - median:+.2f}s from the median" for h in odd),
                   expected=f"every clock within {bound:g}s of the others (each reading to "
                            f"±{max(o.uncertainty_s for o in ordered):.2f}s or better)")


# -- shared storage --------------------------------------------------------------------------

CHECKPOINT_METADATA = ("common.pt", ".metadata", "metadata.json")


@check("cluster.shared_storage", title="Model, data and checkpoint paths are one shared filesystem", scope="cluster",
       reference=faq.R_SHARED_STORAGE, needs=("storage.shared",),
       remedy=("Mount the same shared filesystem (NFS, Lustre, ...) at the same path on every node, or, without "
               "shared storage, copy the checkpoint's metadata files (common.pt, .metadata, metadata.json) to every "
               "node before resuming."))
def test_shared_storage(cluster, verdict):
    paths = shared_paths(cluster)
    if not paths:
        verdict.skipped(message="no shared_paths or checkpoint_dir in the inventory")
        return
    if not cluster.reachable():
        verdict.error(message="not evaluated: no node was reached")
        return
    sharing = {h.name for h in shared_participants(cluster)}
    reachable = [(h, f) for h, f in cluster.reachable() if h.name in sharing]
    if len(reachable) < 2:
        # Phase two writes no marker then (activeprobe.shared_storage): there is no other node to look.
        verdict.skipped(message=f"only {reachable[0][0].name} was reached: no other node to share "
                                f"{', '.join(paths)} with" if reachable else
                                f"no node was reached to share {', '.join(paths)}")
        return
    views = {}
    for host, facts in reachable:
        try:
            views[host.name] = facts.get("storage.shared")
        except FactUnavailable as exc:
            verdict.error(message=f"{host.name}: {exc}", host=host.name)
    if not views:
        verdict.error(message="not evaluated: the marker probe left no record on any reached node")
        return
    writer = next((h for h, v in views.items() if v.is_writer), None)
    if writer is None:
        verdict.error(message="no node could write the marker files",
                      remedy="Make the shared paths writable by the preflight's login user on at least one node "
                             "(or run the preflight as root there): one node writes a marker file and the others "
                             "look for it.")
        return
    for path in paths:
        wrote = {e.path: e.state for e in views[writer].entries}.get(path)
        if wrote == "unwritable" and _read_only_but_shared(verdict, path, writer, views):
            continue
        if wrote != "written":
            reason = {"absent": "does not exist", "unwritable": "is not writable"}.get(wrote, "was not probed")
            verdict.failed(path, outliers=(writer,), where=path,
                           observed=f"{path} {reason} on {writer}", expected="an existing, writable directory")
            continue
        missing, absent, metadata_ok = [], [], []
        lacking: dict[str, list[str]] = defaultdict(list)  # the metadata files it lacks -> hosts, partial copies
        for host, view in views.items():
            if host == writer:
                continue
            entry = {e.path: e for e in view.entries}.get(path)
            if entry is None or entry.state == "absent":
                absent.append(host)
            elif entry.state == "missing":
                missing.append(host)
                # Loading needs all three (verl FAQ Q4): one copied file is not enough.
                gone = [m for m in CHECKPOINT_METADATA if m not in entry.metadata]
                if not gone:
                    metadata_ok.append(host)
                elif len(gone) < len(CHECKPOINT_METADATA):
                    lacking[", ".join(gone)].append(host)
        if absent:
            verdict.failed(path, outliers=tuple(absent), where=path,
                           observed=f"{path} does not exist on {fold(absent)}", expected="the same path on every node")
        if missing and not absent and len(missing) == len(views) - 1 and _writer_off_the_share(
                verdict, path, writer, views, missing):
            continue
        if missing:
            parts = ([f"checkpoint metadata present on {fold(metadata_ok)}"] if metadata_ok else []) + [
                f"{fold(hosts)} lack{'s' if len(hosts) == 1 else ''} checkpoint metadata {gone}"
                for gone, hosts in sorted(lacking.items())]
            note = ("; " + "; ".join(parts) if parts else
                    "; and no checkpoint metadata (common.pt, .metadata, metadata.json) there either")
            severity = "warning" if set(metadata_ok) == set(missing) else None
            # Nobody saw it and nobody has a share there: the writer's disk is no more the share
            # than theirs (it had shown a pass).
            alone = len(missing) == len(views) - 1 and not absent and _no_share(path, writer, views, missing)
            verdict.failed(path, outliers=tuple(sorted([*missing, writer] if alone else missing)), where=path,
                           severity=severity,
                           observed=f"a file written to {path} on {writer} is not seen on {fold(missing)}: not a "
                                    f"shared filesystem{' on any node' if alone else ''}{note}",
                           expected="one filesystem shared by every node")
        if not absent and not missing:
            verdict.passed(path, message=f"{path} is shared by all {len(views)} nodes")


# -- NPU-to-NPU ping -------------------------------------------------------------------------


def _link_down_note(cluster, source: str, pair) -> str:
    """A ping over a port hccl.link_up already found DOWN says so: that is the fault to fix, not
    this pair's path (the healthy end of the pair otherwise looked to blame)."""
    down = []
    for node, dev in ((source, pair.dev), (pair.peer, pair.peer_dev)):
        facts = cluster.facts.get(node)
        if facts is None or f"hccn.link/{dev}" not in facts.raw:
            continue
        if facts.per_device("hccn.link").get(dev) == "DOWN":
            down.append(f"{node} npu{dev}")
    return f" - the link of {' and '.join(down)} is DOWN (see hccl.link_up)" if down else ""


def no_ping_reason(host, facts, cluster) -> str | None:
    """Why no NPU ping ran from ``host`` where that is a fact of the cluster, not a failure of the
    run: the pings go only between nodes whose device IPs hccn_tool read (as the activeprobe picks them)."""
    why = not_applicable(facts, "hccn.ip")
    if why:
        return f"{host.name}: {why}"
    try:
        if not device_ips(facts):
            return None  # the check says so itself
        peers = [h.name for h, f in cluster.reachable() if h.name != host.name and device_ips(f)]
    except KeyError:
        return None
    if not peers:
        return f"{host.name} is the only node whose device IPs were read: no peer NPU to ping"
    return None


@check("cluster.device_ping", title="NPUs reach the other nodes' NPUs over RoCE (hccn_tool -ping)",
       reference=faq.R_HCCL_PING, needs=("hccn.ping", "hccn.ip", "hccn.link?", "npu_smi.info?", "ascend.files?"),
       remedy=("Check the failing NPU's port and the path to the peer: hccn_tool -i <N> -link -g, -net_health -g, "
               "the switch port and VLAN; a whole row (one source NPU failing everywhere) points at that NPU, a "
               "column (one peer unreachable from all) at the peer; the device IPs must be in routable subnets "
               "(hccn_tool -i <N> -ip -g)."))
def test_device_ping(host, facts, cluster, verdict):
    if len(cluster.reachable()) < 2:
        verdict.skipped(message="fewer than two reachable nodes: no peer to ping")
        return
    if "hccn.ping" not in facts.raw:
        why = no_ping_reason(host, facts, cluster)
        if why:
            verdict.skipped(message=why)
            return
        try:
            ips = facts.per_device("hccn.ip")
        except KeyError:
            ips = {}
        if not ips and "probe.devices" in facts.raw and not facts.devices():
            # It read as "hccn_tool -ping was not gathered", a fault of the run, on a node with no NPU.
            # Worded alike on every node (the result names the host): one finding for a node set.
            verdict.error(message="not evaluated: no NPU to ping from on this node: no /dev/davinciN device "
                                  "nodes (see npu.count_and_type)",
                          remedy=remedy_for_unevaluated("no /dev/davinciN device nodes"))
            return
        if ips and not device_ips(facts):
            # Not a skip: with hccl.device_ip deselected nothing else would say this node cannot ping.
            unread = [d for d, v in ips.items() if isinstance(v, FactUnavailable)]
            if unread:
                verdict.error(message=f"{host.name}: device IPs unreadable on npu{fold(map(str, unread))}: "
                                      f"{ips[unread[0]]}", remedy=remedy_for_unevaluated(str(ips[unread[0]])))
            else:
                verdict.failed(observed=f"none of the {len(ips)} NPUs has a device IP (hccn_tool -i N -ip -g), so "
                                        f"no NPU of {host.name} can be pinged or reach a peer over RoCE",
                               expected="a device IP on every NPU",
                               remedy="Give every NPU its RoCE address: hccn_tool -i <N> -ip -s address <IP> "
                                      "netmask <MASK> (as /etc/hccn.conf records them), then re-run the preflight.")
            return
    matrix = _probes(verdict, facts, "hccn.ping", host.name)
    if matrix is None:
        return
    if matrix.mode == "none":
        verdict.skipped(message="NPU pings not run (--ping none)")
        return
    if not matrix.pairs:
        verdict.skipped(message=f"{host.name} had no peer in the --ping {matrix.mode} schedule")
        return
    for pair in matrix.pairs:
        subject = f"npu{pair.dev}->{pair.peer}:npu{pair.peer_dev}"
        shown = f"hccn_tool -i {pair.dev} -ping -g address {pair.address} ({pair.peer} npu{pair.peer_dev})"
        if pair.skipped and pair.skipped.startswith("no peer: "):
            verdict.skipped(subject, message=f"{host.name} npu{pair.dev}: {pair.skipped}")
        elif pair.skipped:
            verdict.error(subject, message=f"{host.name} {subject}: not pinged: {pair.skipped}",
                          remedy=remedy_for_unevaluated(pair.skipped)
                          or f"Run hccn_tool -i {pair.dev} -ping -g address {pair.address} by hand on {host.name}: if "
                             f"it hangs there too, that NPU's port or driver is stuck (hccn_tool -i {pair.dev} -link "
                             f"-g, -net_health -g; dmesg); if the node's SSH session dropped, check its sshd and "
                             f"re-run the preflight.")
        elif pair.ok:
            verdict.passed(subject, message=f"{shown}: {pair.received}/{pair.transmitted} received")
        else:
            what = (f"{shown} did not finish within {10}s (hung)" if pair.rc in (124, 137) else
                    f"{shown} failed (exit code {pair.rc}, no summary)" if pair.transmitted is None else
                    f"{shown}: {pair.received}/{pair.transmitted} received")
            verdict.failed(subject, observed=what + _link_down_note(cluster, host.name, pair),
                           expected="every packet received")
