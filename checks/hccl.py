"""The NPUs' RoCE ports as hccn_tool sees them: what HCCL needs between nodes."""

import ipaddress
import re
from collections import Counter

from preflight import faq
from preflight.activeprobe import machine_twins
from preflight.check import check, nothing_to_compare
from preflight.facts import FactUnavailable
from preflight.hostlist import fold
from preflight.ifname import effective_env
from preflight.parsers import hccn_tool as hccn
from preflight.parsers.versions import npu_smi_node_family

TLS_REMEDY = ("Make the TLS switch the same on every NPU of every node, preferably off: on each NPU whose "
              "switch differs, an operator runs hccn_tool -i <N> -tls -s enable 0 (or 1 everywhere if the "
              "cluster uses TLS), then re-run the preflight.")


def _tls_remedy(odd: dict, majority: bool) -> str:
    """The TLS remedy with the commands for the NPUs that differ (host -> hccn_tool device numbers)."""
    runs = [f"on {host}: " + "; ".join(f"hccn_tool -i {d} -tls -s enable {int(majority)}" for d in devs[:8])
            + ("; ..." if len(devs) > 8 else "") for host, devs in list(odd.items())[:5]]
    more = f"; and on {len(odd) - 5} more nodes alike" if len(odd) > 5 else ""
    other = ("or, as the FAQ advises (TLS off throughout), switch it off on all the other NPUs instead: "
             "hccn_tool -i <N> -tls -s enable 0" if majority else
             "or switch it on on all the other NPUs instead, if the cluster is meant to use TLS")
    return (f"Make the TLS switch the same everywhere ({on_off(majority)}, as on the rest): an operator runs "
            + " | ".join(runs) + more + f" ({other}), then re-run the preflight.")


def _no_devices(host, verdict):
    verdict.error(message=f"{host.name}: no /dev/davinciN device nodes, so there is no NPU to ask hccn_tool about")


HCCN_NEEDS = ("npu_smi.info?", "ascend.files?")  # what not_applicable reads


def not_applicable(facts, fact: str) -> str | None:
    """Why hccn_tool's RoCE facts do not apply to this node, or None:
    310P cards have no RoCE port (hccn_tool's network commands are not supported on them), and the
    Ascend docker runtime does not mount hccn_tool into a container, whose NPU ports belong to the host."""
    info = facts.optional("npu_smi.info")
    names = {c.name for c in info.chips} if info is not None else set()
    if npu_smi_node_family(names) == "310P":
        return (f"{'/'.join(sorted(names))} cards have no RoCE port (hccn_tool's network commands are not "
                f"supported on them): HCCL between these nodes uses the host network")
    files = facts.optional("ascend.files")
    values = facts.per_device(fact).values()
    if files is not None and files.container and values and all(
            isinstance(v, FactUnavailable) and v.tool_missing for v in values):
        return ("hccn_tool is not in this container (the Ascend docker runtime does not mount it): the NPUs' "
                "RoCE ports belong to the host, and the preflight run against the host judges them")
    return None


def _skip_if_not_applicable(host, facts, fact, verdict) -> bool:
    why = not_applicable(facts, fact)
    if why:
        verdict.skipped(message=f"{host.name}: {why}")
    return bool(why)


LINK_REMEDY = ("Check the NPU's cable, optical module and switch port (hccn_tool -i {dev} -optical -g, "
               "hccn_tool -i {dev} -link_stat -g); reseat or replace it, or have the operator reset the chip "
               "({reset}, with no job running on the node) if the port stays down.")


def npu_smi_chip(facts, dev):
    """(NPU id, chip id) that npu-smi uses for hccn_tool's device ``dev``, or None when unknown:
    hccn_tool -i takes the physical id (on A3 phy 13 is NPU 6 chip 1)."""
    info = facts.optional("npu_smi.info")
    chip = (info.by_device() or {}).get(dev) if info is not None else None
    return (chip.npu_id, chip.chip_id) if chip else None


def _link_remedy(facts, dev):
    where = npu_smi_chip(facts, dev)
    reset = (f"npu-smi set -t reset -i {where[0]} -c {where[1]} -m 1" if where else
             f"npu-smi set -t reset -i <NPU id> -c <chip id> -m 1, the NPU and chip npu-smi info shows for device {dev}")
    return LINK_REMEDY.format(dev=dev, reset=reset)


@check("hccl.link_up", title="Every NPU's RoCE link is UP (and not flapping)", reference=faq.R_HCCL_LINK,
       needs=("hccn.link", "hccn.link_stat?", *HCCN_NEEDS),
       remedy=LINK_REMEDY.format(dev="<N>", reset="npu-smi set -t reset -i <NPU id> -c <chip id> -m 1"))
def test_link_up(host, facts, verdict):
    links = facts.per_device("hccn.link")
    if not links:
        return _no_devices(host, verdict)
    if _skip_if_not_applicable(host, facts, "hccn.link", verdict):
        return
    for dev, state in links.items():
        subject = f"npu{dev}"
        if isinstance(state, FactUnavailable):
            verdict.error(subject, message=f"{host.name} {subject}: {state}")
        elif state == "UP":
            flap = _flapping(facts, dev)
            if flap:
                verdict.failed(subject, severity="warning", observed=f"link UP, but {flap}",
                               expected=f"fewer than {FLAP_DOWNS} link-down events since boot (a stable link)",
                               where=_where(host, facts, dev), remedy=_link_remedy(facts, dev))
            else:
                verdict.passed(subject, message=f"hccn_tool -i {dev} -link -g: link status UP")
        else:
            verdict.failed(subject, observed=f"hccn_tool -i {dev} -link -g reports link status: {state}",
                           expected="link status: UP", where=_where(host, facts, dev),
                           remedy=_link_remedy(facts, dev))


def _npu_smi_aside(facts, dev) -> str:
    """" (npu-smi NPU 6 chip 1)" where npu-smi numbers hccn_tool's device otherwise, else ""."""
    where = npu_smi_chip(facts, dev)
    return f" (npu-smi NPU {where[0]} chip {where[1]})" if where and where != (dev, 0) else ""


def _where(host, facts, dev):
    """"node-01 npu13 (npu-smi NPU 6 chip 1)"."""
    return f"{host.name} npu{dev}{_npu_smi_aside(facts, dev)}"


def tls_states(facts) -> tuple[dict[int, bool], dict[int, FactUnavailable]]:
    known, unknown = {}, {}
    for dev, tls in facts.per_device("hccn.tls").items():
        if isinstance(tls, FactUnavailable):
            unknown[dev] = tls
        else:
            known[dev] = tls.enabled
    return known, unknown


def on_off(enabled: bool) -> str:
    return "tls switch[1] (on)" if enabled else "tls switch[0] (off)"


@check("hccl.tls_node", title="TLS switch identical on every NPU of a node", reference=faq.R_HCCL_TLS,
       needs=("hccn.tls", *HCCN_NEEDS), remedy=TLS_REMEDY)
def test_tls_node(host, facts, verdict):
    known, unknown = tls_states(facts)
    if not known and not unknown:
        return _no_devices(host, verdict)
    if _skip_if_not_applicable(host, facts, "hccn.tls", verdict):
        return
    for dev, why in unknown.items():
        verdict.error(f"npu{dev}", message=f"{host.name} npu{dev}: {why}")
    if not known:
        return
    counts = Counter(known.values())
    if len(counts) == 1:
        verdict.passed(message=f"{on_off(next(iter(counts)))} on all {len(known)} NPUs")
        return
    # The minority is the outlier; on a tie, the NPUs with TLS on (the advice is all off).
    majority = max(counts, key=lambda v: (counts[v], not v))
    odd = sorted(d for d, v in known.items() if v != majority)
    same = sorted(d for d, v in known.items() if v == majority)
    dies = "; ".join(f"npu{d}{aside}" for d in odd if (aside := _npu_smi_aside(facts, d)))
    verdict.failed(fold(f"npu{d}" for d in odd),
                   observed=f"{fold(f'npu{d}' for d in odd)} {on_off(not majority)} while "
                            f"{fold(f'npu{d}' for d in same)} {on_off(majority)}" + (f" ({dies})" if dies else ""),
                   expected="the same TLS switch on every NPU of the node", remedy=_tls_remedy({host.name: odd}, majority))


@check("cluster.tls_agree", title="TLS switch identical across all NPUs of all nodes", scope="cluster",
       reference=faq.R_HCCL_TLS, needs=("hccn.tls", *HCCN_NEEDS), remedy=TLS_REMEDY)
def test_tls_agree(cluster, verdict):
    if nothing_to_compare(cluster, verdict, "the TLS switch"):
        return
    per_host: dict[str, dict[int, bool]] = {}
    unreadable, outside = [], []
    for host, facts in cluster.reachable():
        if not_applicable(facts, "hccn.tls"):
            outside.append(host.name)
            continue
        known, unknown = tls_states(facts)
        if unknown:
            unreadable.append(host.name)
        if known:
            per_host[host.name] = known
    if not per_host and not unreadable and outside:
        verdict.skipped(message=f"no node with RoCE ports hccn_tool can read ({fold(outside)}: "
                                f"{not_applicable(cluster.facts[outside[0]], 'hccn.tls')})")
        return
    if not per_host:
        verdict.error(message="no node's TLS switch could be read"
                              + (f" (unreadable on {fold(unreadable)})" if unreadable else ""))
        return
    if unreadable:  # their own result, so that their matrix cells show it rather than the others' verdict
        verdict.error(fold(unreadable), outliers=tuple(unreadable),
                      message=f"not evaluated on {fold(unreadable)}: the TLS switch is unreadable on {fold(unreadable)} "
                              f"(see hccl.tls_node)")
    counts = Counter(v for states in per_host.values() for v in states.values())
    note = f"; not evaluated on {fold(unreadable)}" if unreadable else ""
    note += f"; not applicable on {fold(outside)}" if outside else ""
    down = [h.name for h in cluster.unreachable()]
    note += f"; {fold(down)} unreachable" if down else ""
    if len(counts) == 1:
        verdict.passed(message=f"{on_off(next(iter(counts)))} on all {sum(counts.values())} NPUs of "
                               f"{len(per_host)} nodes{note}", agreed={"TLS switch": on_off(next(iter(counts)))})
        return
    # The majority is counted by node, so that two 16-NPU nodes do not outvote three 8-NPU ones;
    # a node mixed within itself has no vote. On a tie, off (the advice is all off).
    votes = Counter(next(iter(s.values())) for s in per_host.values() if len(set(s.values())) == 1) or counts
    majority = max(votes, key=lambda v: (votes[v], not v))
    odd = {h: sorted(d for d, v in s.items() if v != majority) for h, s in per_host.items()}
    odd = {h: ds for h, ds in odd.items() if ds}
    described = "; ".join(f"{h} {fold(f'npu{d}' for d in ds)}" for h, ds in odd.items())
    agreeing = [h for h in per_host if h not in odd]
    verdict.failed(fold(odd), outliers=tuple(odd),
                   observed=f"{on_off(not majority)} on {described}, while the rest "
                            f"({fold(agreeing) or 'none'}) has {on_off(majority)}{note}",
                   expected="one TLS setting on every NPU of every node", remedy=_tls_remedy(odd, majority))


# -- device IPs, net health, port range (issue 3) ------------------------------------------------

FLAP_DOWNS = 3  # link-down events since boot that count as flapping
FLAP_RECENT_HOURS = 24  # a link whose last down is older than this (by the node's clock) has settled


def _flapping(facts, dev) -> str | None:
    """'hccn_tool -i N -link_stat -g: link went down K times ...' when the link flaps, else None
    (also when link_stat was not gathered or is unreadable: hccl.link_up then judges -link alone)."""
    key = f"hccn.link_stat/{dev}"
    if key not in facts.raw:
        return None
    stat = facts.per_device("hccn.link_stat").get(dev)
    if stat is None or isinstance(stat, FactUnavailable):
        return None
    downs = _downs(stat)
    if downs < FLAP_DOWNS:
        return None
    # Downs at boot or weeks ago (counted since the driver loaded) are no flapping now: only a link
    # that went down within the last day is, where the records and the tool's clock say when.
    now = hccn.asctime(stat.current_time)
    last_down = next((hccn.asctime(r.timestamp) for r in stat.records if r.state == "DOWN"), None)
    if now is not None and last_down is not None and (now - last_down).total_seconds() > FLAP_RECENT_HOURS * 3600:
        return None
    last = f"; last change {stat.records[0].timestamp} LINK {stat.records[0].state}" if stat.records else ""
    return f"hccn_tool -i {dev} -link_stat -g: link went down {downs} times (up count {stat.up_count}){last}"


def _downs(stat) -> int:
    if stat.down_count is not None:
        return stat.down_count
    # Older drivers print no down count, and may keep only the latest records: every link-up after
    # the first (at boot) followed a down.
    recorded = sum(1 for r in stat.records if r.state == "DOWN")
    return max(recorded, (stat.up_count or 0) - 1)


def _unusable(address: str) -> str | None:
    """Why a device IP cannot carry HCCL traffic (0.0.0.0 is what a cleared port can show)."""
    ip = ipaddress.ip_address(address)
    for bad, why in ((ip.is_unspecified, "the unspecified address"), (ip.is_loopback, "a loopback address"),
                     (ip.is_multicast, "a multicast address")):
        if bad:
            return why
    return None


@check("hccl.device_ip", title="Every NPU has a device IP (-ip -g), unique on the node", reference=faq.R_HCCL_IP,
       needs=("hccn.ip", *HCCN_NEEDS),
       remedy=("Give every NPU its own RoCE address, as /etc/hccn.conf records them: an operator runs "
               "hccn_tool -i <N> -ip -s address <IP> netmask <MASK> for the NPU (and fixes the duplicate)."))
def test_device_ip(host, facts, verdict):
    ips = facts.per_device("hccn.ip")
    if not ips:
        return _no_devices(host, verdict)
    if _skip_if_not_applicable(host, facts, "hccn.ip", verdict):
        return
    owners: dict[str, list[int]] = {}
    for dev, ip in ips.items():
        if ip is not None and not isinstance(ip, FactUnavailable):
            owners.setdefault(ip.address, []).append(dev)
    for dev, ip in ips.items():
        subject = f"npu{dev}"
        if isinstance(ip, FactUnavailable):
            verdict.error(subject, message=f"{host.name} {subject}: {ip}")
        elif ip is None:
            verdict.failed(subject, observed=f"hccn_tool -i {dev} -ip -g: no device IP configured",
                           expected="an ipaddr/netmask for the NPU's RoCE port", where=_where(host, facts, dev),
                           remedy=_set_ip(host, dev, "Configure"))
        elif why := _unusable(ip.address):
            verdict.failed(subject, observed=f"hccn_tool -i {dev} -ip -g: ipaddr {ip.address}, {why}",
                           expected="a unicast ipaddr/netmask for the NPU's RoCE port", where=_where(host, facts, dev),
                           remedy=_set_ip(host, dev, f"Replace {ip.address} with"))
        elif len(owners[ip.address]) > 1:
            others = fold(f"npu{d}" for d in owners[ip.address] if d != dev)
            verdict.failed(subject, observed=f"device IP {ip.address} also on {others}",
                           expected="a device IP unique on the node", where=_where(host, facts, dev),
                           remedy=_set_ip(host, dev, f"Give npu{dev} (or {others}) its own address instead of "
                                                     f"{ip.address}:"))
        elif ip.netmask is None:
            verdict.failed(subject, observed=f"hccn_tool -i {dev} -ip -g: ipaddr {ip.address} without a netmask line",
                           expected="an ipaddr and its netmask, as hccn_tool prints them for a configured port",
                           where=_where(host, facts, dev),
                           remedy=f"On {host.name}, set npu{dev}'s address with its netmask: hccn_tool -i {dev} -ip -s "
                                  f"address {ip.address} netmask <MASK>.")
        else:
            verdict.passed(subject, message=f"device IP {ip.address}/{ip.netmask}")


def _set_ip(host, dev: int, lead: str) -> str:
    verb = lead if lead.endswith(":") else f"{lead} npu{dev}'s RoCE address:"
    return (f"On {host.name}: {verb} hccn_tool -i {dev} -ip -s address <IP> netmask <MASK> "
            f"(/etc/hccn.conf's address_{dev} and netmask_{dev} lines record the plan).")


@check("hccl.net_health", title="hccn_tool -net_health -g is Success on every NPU", reference=faq.R_NET_HEALTH,
       needs=("hccn.net_health", "hccn.netdetect?", *HCCN_NEEDS),
       remedy=("Success means the NPU reaches its detect IP. Init: no detect IP set (an operator sets one with "
               "hccn_tool -i <N> -netdetect -s address <gateway IP>); other values: check the device IP, gateway, "
               "cabling and switch port of that NPU (hccn_tool -i <N> -ip -g / -gateway -g / -link -g)."))
def test_net_health(host, facts, verdict):
    health = facts.per_device("hccn.net_health")
    if not health:
        return _no_devices(host, verdict)
    if _skip_if_not_applicable(host, facts, "hccn.net_health", verdict):
        return
    detect = facts.per_device("hccn.netdetect") if any(k.startswith("hccn.netdetect/") for k in facts.raw) else {}
    for dev, status in health.items():
        subject = f"npu{dev}"
        if isinstance(status, FactUnavailable):
            verdict.error(subject, message=f"{host.name} {subject}: {status}")
            continue
        addr = detect.get(dev)
        target = f" (netdetect address {addr})" if isinstance(addr, str) else ""
        shown = f"hccn_tool -i {dev} -net_health -g: net health status: {status}{target}"
        if status == "Success":
            verdict.passed(subject, message=shown)
        elif status == "Detect ip set":  # the state right after an operator sets a detect IP: look again soon
            verdict.failed(subject, severity="warning",
                           observed=shown + " - a detect IP was just set and detection has not reported yet",
                           expected="net health status: Success",
                           remedy=f"Run hccn_tool -i {dev} -net_health -g again in a minute; it should say Success.",
                           where=_where(host, facts, dev))
        elif status == "Init":
            known = dev in detect  # the netdetect answer was read (None: no address set)
            verdict.failed(subject, severity="warning",
                           observed=shown + (" - no detect IP configured, so RoCE health is not being checked"
                                             if known and addr is None else " - detection not started"),
                           expected="net health status: Success", where=_where(host, facts, dev),
                           remedy=(f"On {host.name}, give npu{dev} a detect IP (usually its gateway): hccn_tool -i "
                                   f"{dev} -netdetect -s address <gateway IP>, then hccn_tool -i {dev} -net_health -g"
                                   if not isinstance(addr, str) else
                                   f"On {host.name}, npu{dev} has detect address {addr}: run hccn_tool -i {dev} "
                                   f"-net_health -g again in a minute; if it stays Init, set the address again "
                                   f"(hccn_tool -i {dev} -netdetect -s address {addr})") + ".")
        else:
            verdict.failed(subject, observed=shown, expected="net health status: Success",
                           where=_where(host, facts, dev),
                           remedy=f"On {host.name}, check npu{dev}'s device IP, gateway, cable and switch port: "
                                  f"hccn_tool -i {dev} -ip -g; hccn_tool -i {dev} -gateway -g; hccn_tool -i {dev} "
                                  f"-link -g (and the FAQ's link steps if the link is down).")


@check("cluster.device_ip_unique", title="No NPU device IP appears twice in the cluster", scope="cluster",
       reference=faq.R_HCCL_IP, needs=("hccn.ip", *HCCN_NEEDS, "net.interfaces?"),
       remedy=("Give every NPU in the cluster its own device IP (hccn_tool -i <N> -ip -s address ... on the "
               "duplicate, by an operator); copied /etc/hccn.conf files are the usual cause."))
def test_device_ip_unique(cluster, verdict):
    if nothing_to_compare(cluster, verdict, "device IPs"):
        return
    owners: dict[str, list[str]] = {}
    unreadable, outside = [], []
    for host, facts in cluster.reachable():
        if not_applicable(facts, "hccn.ip"):
            outside.append(host.name)
            continue
        for dev, ip in facts.per_device("hccn.ip").items():
            if isinstance(ip, FactUnavailable):
                unreadable.append(f"{host.name} npu{dev}")
            elif ip is not None:
                owners.setdefault(ip.address, []).append((host.name, f"npu{dev}"))
    dupes = {a: o for a, o in owners.items() if len(o) > 1}  # on two nodes, or twice on one
    # One machine listed twice (by name and by address): its device IPs repeat, but re-addressing
    # NPUs is not the fix.
    listed_twice = False
    for twins in machine_twins(cluster):
        mine = [a for a, where in dupes.items() if {h for h, _ in where} <= set(twins)]
        if not mine:
            continue
        listed_twice = True
        for address in mine:
            del dupes[address]
        verdict.failed(fold(twins), outliers=twins, where=fold(twins),
                       observed=f"{' and '.join(twins)} report the same interfaces and addresses and the same "
                                f"{len(mine)} device IP(s) ({', '.join(sorted(mine)[:3])}"
                                f"{', ...' if len(mine) > 3 else ''}): one machine listed "
                                f"{len(twins)} times in the inventory",
                       expected="each node listed once",
                       remedy=f"List the machine once in the inventory (one of {', '.join(twins)}: by its name or "
                              f"its address, not both); until then every cluster check counts it {len(twins)} "
                              f"times (WORLD_SIZE, ranks, device IPs).")
    for address, where in sorted(dupes.items()):
        hosts = tuple(sorted({h for h, _ in where}))
        # Per NPU, its hosts as a node set: a copied hccn.conf puts one address on npu0 of every node,
        # and "node-[0001-1000] npu0" reads better than a thousand pairs.
        by_npu: dict[str, list[str]] = {}
        for h, n in where:
            by_npu.setdefault(n, []).append(h)
        on = ", ".join(f"{fold(hs)} {n}" for n, hs in by_npu.items())
        verdict.failed(address, outliers=hosts, where=address,
                       observed=f"device IP {address} on {on}",
                       expected="each device IP on one NPU of one node")
    if not dupes and owners and not listed_twice:
        verdict.passed(message=f"{len(owners)} device IPs, all distinct",
                       agreed={f"device IP {a}": f"{h} {n}" for a, [(h, n)] in owners.items()})
    if unreadable:
        # Per node, its NPUs as a set: a hung hccn_tool listed "node-03 npu0, node-03 npu1, ...".
        per_node: dict[str, list[str]] = {}
        for entry in unreadable:
            name, npu = entry.rsplit(" npu", 1)
            per_node.setdefault(name, []).append(npu)
        shown = [f"{name} npu{fold(npus)}" for name, npus in per_node.items()]
        verdict.error(message=f"device IP unreadable on {', '.join(shown[:10])}"
                              + (f" and {len(shown) - 10} more node(s)" if len(shown) > 10 else ""),
                      outliers=tuple(per_node))
    elif not owners and not dupes and outside:
        verdict.skipped(message=f"no node with RoCE ports hccn_tool can read ({fold(outside)}: "
                                f"{not_applicable(cluster.facts[outside[0]], 'hccn.ip')})")
    elif not owners and not dupes:
        verdict.error(message="no device IP could be read on any node")


def _port_count(value: str) -> tuple[int | None, str | None]:
    """``(ports, None)`` for a readable HCCL_*_SOCKET_PORT_RANGE (``auto``: None ports), else
    ``(None, why not)``: ports or ``A-B`` ranges, comma-separated, within 1..65535, not overlapping."""
    value = value.strip()
    if value.lower() == "auto":
        return None, None
    spans = []
    for item in value.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", item)
        if not m:
            return None, f"{item.strip() or 'an empty item'!r} is neither a port nor a range"
        low, high = int(m.group(1)), int(m.group(2) or m.group(1))
        if not 1 <= low <= 65535 or not 1 <= high <= 65535:
            return None, f"{item.strip()} is outside 1..65535"
        if low > high:
            return None, f"{item.strip()} runs backwards"
        spans.append((low, high))
    spans.sort()
    for (_, high), (low, _) in zip(spans, spans[1:]):
        if low <= high:
            return None, "its ranges overlap"
    return sum(high - low + 1 for low, high in spans), None


@check("hccl.port_range", title="HCCL_NPU_SOCKET_PORT_RANGE set when several processes share an NPU, and on "
                                "every node if on one",
       severity="warning", reference=faq.R_PORT_BIND, needs=("session.env", "npu_smi.info?"),
       remedy=("Several processes on one NPU all bind its default HCCL port 16666: export "
               "HCCL_NPU_SOCKET_PORT_RANGE=auto (or a range such as 61000-61050) on every node of the job."))
def test_port_range(host, facts, verdict, cluster):
    env = effective_env(host, facts.get("session.env"))
    per_npu = int(host.vars.get("processes_per_npu") or 1)
    # Every card of a communicator must set it if one does (CANN's HCCL docs), however many
    # processes share an NPU: a node left without it while others have it breaks the link set-up.
    if not env.get("HCCL_NPU_SOCKET_PORT_RANGE"):
        setting = sorted(h.name for h, f in cluster.reachable() if h.name != host.name
                         and effective_env(h, f.optional("session.env", {})).get("HCCL_NPU_SOCKET_PORT_RANGE"))
        if setting:
            verdict.failed(observed=f"HCCL_NPU_SOCKET_PORT_RANGE is not set on {host.name}, but {fold(setting)} "
                                    f"set{'s' if len(setting) == 1 else ''} it",
                           expected="HCCL_NPU_SOCKET_PORT_RANGE set on every node of the job, or on none",
                           remedy="Export the same HCCL_NPU_SOCKET_PORT_RANGE (auto, or a range) on every node of the "
                                  "job, or unset it everywhere: all cards of a communicator must set it if one does.")
            return
    if per_npu < 2:
        # Processes on an NPU before a launch are leftovers (npu.idle says so), not the job's
        # colocation: the inventory says how the job shares its NPUs.
        seen = ""
        info = facts.optional("npu_smi.info")
        if info is not None:
            counts = Counter((p.npu_id, p.chip_id) for p in info.processes)
            shared = sorted(k for k, n in counts.items() if n > 1)
            if shared:
                seen = (f"; npu-smi info shows {counts[shared[0]]} processes on NPU {shared[0][0]} now (leftovers, "
                        f"see npu.idle, or a colocated job already running)")
        verdict.skipped(message=f"one process per NPU (set processes_per_npu in the inventory for colocated "
                                f"jobs){seen}")
        return
    reason = f"processes_per_npu={per_npu} in the inventory"
    value = env.get("HCCL_NPU_SOCKET_PORT_RANGE")
    ports, why = _port_count(value) if value else (None, None)
    if value and why:
        verdict.failed(observed=f"HCCL_NPU_SOCKET_PORT_RANGE={value}: {why}",
                       expected="auto, or ports and ascending ranges within 1..65535 that do not overlap, e.g. "
                                "61000-61050 or 61000,61050-61100")
    elif value and ports is not None and ports < per_npu:
        verdict.failed(observed=f"HCCL_NPU_SOCKET_PORT_RANGE={value} gives {ports} port{'s' if ports > 1 else ''} "
                                f"for {reason}",
                       expected=f"at least {per_npu} ports per NPU (one for each of its processes), or auto")
    elif value:
        verdict.passed(message=f"HCCL_NPU_SOCKET_PORT_RANGE={value} ({reason})")
    else:
        verdict.failed(observed=f"{reason}, but HCCL_NPU_SOCKET_PORT_RANGE is not set (all bind port 16666)",
                       expected="HCCL_NPU_SOCKET_PORT_RANGE=auto or a port range")
