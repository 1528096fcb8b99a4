"""The NPUs as npu-smi sees them."""

from collections import Counter, defaultdict

from preflight import faq
from preflight.check import check, nothing_to_compare


def chip_subject(info, chip) -> str:
    multi = sum(1 for c in info.chips if c.npu_id == chip.npu_id) > 1
    return f"npu{chip.npu_id}" + (f".chip{chip.chip_id}" if multi else "")


@check("npu.health", title="Every chip reports Health OK in npu-smi info", reference=faq.V_Q1,
       needs=("npu_smi.info",),
       remedy=("Read the chip's error codes with npu-smi info -t health -i <NPU> -c <chip>, and the device log "
               "(/var/log/npu/); a Warning may clear by itself, Alarm or Critical needs the chip reset or "
               "replaced (npu-smi set -t reset -i <NPU> -c <chip> -m 1, by the operator, with no job running on "
               "the node) before a job uses it."))
def test_health(host, facts, verdict):
    info = facts.get("npu_smi.info")
    for chip in info.chips:
        subject = chip_subject(info, chip)
        observed = f"npu-smi info reports Health {chip.health} for NPU {chip.npu_id} chip {chip.chip_id}"
        if chip.health == "OK":
            verdict.passed(subject, message=observed)
        else:
            severity = "warning" if chip.health == "Warning" else "error"
            verdict.failed(subject, observed=observed, expected="Health OK", severity=severity)


# -- count, type, idle, driver install (issue 3) ------------------------------------------------

from preflight.facts import FactUnavailable  # noqa: E402
from preflight.hostlist import fold  # noqa: E402
from preflight.outliers import split  # noqa: E402

DEFAULT_HBM_IDLE_PCT = 20  # idle A2/A3 chips show 5-10 % HBM in use (firmware reservations)


def norm_chip(name: str) -> str:
    return str(name).strip().lower().replace(" ", "").removeprefix("ascend")


def npu_ids(info) -> list[int]:
    return sorted({c.npu_id for c in info.chips})


def chip_names(info, board=None) -> set[str]:
    names = {c.name for c in info.chips}
    if board is not None and board.soc:
        names.add(board.soc)
    return names


@check("npu.count_and_type", title="NPU count and chip name match the inventory", reference=faq.X_HARDWARE,
       needs=("npu_smi.info", "npu_smi.board?"),
       remedy=("Fix the node (a missing NPU is a hardware or driver fault: npu-smi info, dmesg) or correct "
               "npus_per_node / chip for its group in the inventory, so the job is placed on the hardware it expects."))
def test_count_and_type(host, facts, verdict):
    info = facts.get("npu_smi.info")
    board = facts.optional("npu_smi.board")
    ids = npu_ids(info)
    kinds = sorted({c.name for c in info.chips})
    want_n, want_chip = host.vars.get("npus_per_node"), host.vars.get("chip")
    if want_n is not None:
        if len(ids) != int(want_n):
            verdict.failed("count", observed=f"npu-smi info lists {len(ids)} NPU(s) ({fold(f'npu{i}' for i in ids) or 'none'})",
                           expected=f"{want_n} NPUs (inventory npus_per_node)")
        else:
            verdict.passed("count", message=f"{len(ids)} NPUs")
    # A3 lists 2 chips (dies) per NPU id, a 310P Duo card 2: a die the driver lost leaves its NPU
    # id standing with one chip, which the NPU count does not see.
    per_npu = Counter(c.npu_id for c in info.chips)
    usual = max(per_npu.values(), default=0)  # the most any NPU lists (a half-lost A3 node ties)
    short = sorted(i for i, n in per_npu.items() if n < usual)
    if short:
        verdict.failed("chips", observed=f"{fold(f'npu{i}' for i in short)} list{'s' if len(short) == 1 else ''} "
                                         f"{min(per_npu[i] for i in short)} chip(s) in npu-smi info, the other NPUs "
                                         f"{usual}",
                       expected=f"{usual} chips on every NPU",
                       remedy="A chip (die) of that NPU is missing: a hardware or driver fault. Check npu-smi info "
                              "-t health -i <id> and dmesg on the node, reset or replace the card, then re-run.")
    if len(kinds) > 1:
        verdict.failed("type", observed=f"mixed chips on one node: {', '.join(kinds)}", expected="one chip type")
    elif want_chip is not None:
        names = chip_names(info, board)
        table = {norm_chip(c.name) for c in info.chips}
        if (board is None or not board.soc) and any(norm_chip(want_chip).startswith(t + "_") for t in table):
            # A3's table says Ascend910 for every SoC; the SoC (910_9392) is only in `npu-smi info -t
            # board`, which could not be read: the family fits, the SoC is not known.
            verdict.error("type", message=f"not evaluated: npu-smi info names the family {' / '.join(sorted(names))} "
                                          f"only, and the board information that names the SoC could not be read "
                                          f"(npu-smi info -t board -i <id> -c 0); inventory chip {want_chip}",
                          remedy="Make npu-smi info -t board -i <id> -c 0 readable on the node (run the preflight as "
                                 "root, or with sudo: true), or set chip to the family in the inventory.")
        elif norm_chip(want_chip) not in {norm_chip(n) for n in names}:
            verdict.failed("type", observed=f"chip {' / '.join(sorted(names))}",
                           expected=f"chip {want_chip} (inventory chip)")
        else:
            verdict.passed("type", message=f"chip {' / '.join(sorted(names))}")
    elif want_n is None:
        verdict.passed(message=f"{len(ids)} x {', '.join(kinds) or 'no NPU'} (set npus_per_node and chip in the "
                               f"inventory to check them)")


ROLE_GROUPS = frozenset({"head", "worker"})
ALL_NODES = "(all nodes)"


@check("cluster.hardware_agree", title="Same NPU count and chip type within each group", scope="cluster",
       reference=faq.X_HARDWARE, needs=("npu_smi.info", "npu_smi.board?"),
       remedy=("Put only identical nodes in one group (a job's ranks assume the same NPUs everywhere), or fix the "
               "node whose NPU count dropped (driver or hardware fault)."))
def test_hardware_agree(cluster, verdict):
    if nothing_to_compare(cluster, verdict, "NPU count and chip"):
        return
    per_group: dict[str, dict[str, str]] = defaultdict(dict)
    unreadable = []
    # Role-only nodes the inventory declares differently (head: {npus_per_node: 4}, worker: {... 8})
    # are compared within each declaration.
    role_only = [h for h in cluster.hosts if not [g for g in h.groups if g not in ROLE_GROUPS]]
    declared = {h.vars.get("npus_per_node") for h in role_only} - {None}
    by_role: dict[str, Counter] = defaultdict(Counter)  # a node declaring nothing goes with its role's count
    for h in role_only:
        for role in h.groups:
            if h.vars.get("npus_per_node") is not None:
                by_role[role][h.vars["npus_per_node"]] += 1
    # A3's table names every SoC Ascend910: the board's SoC (910_9391, 910_9392) tells them apart,
    # compared only where every node's board was read (one unread would differ by that alone).
    boards = {host.name: facts.optional("npu_smi.board") for host, facts in cluster.reachable()}
    with_soc = all(b is not None and b.soc for b in boards.values())
    for host, facts in cluster.reachable():
        try:
            info = facts.get("npu_smi.info")
        except FactUnavailable:
            unreadable.append(host.name)
            continue
        shape = f"{len(npu_ids(info))} x {'/'.join(sorted({c.name for c in info.chips})) or 'no NPU'}"
        if with_soc and boards[host.name].soc.lower().removeprefix("ascend") not in shape.lower():
            shape += f" ({boards[host.name].soc})"
        # The roles (head, worker) are not hardware groups: a head and its workers run one job, so
        # they are compared together (split by role, a 1 head + 1 worker cluster could never fail).
        own = host.vars.get("npus_per_node")
        if own is None:
            seen = sum((by_role[r] for r in host.groups if r in by_role), Counter())
            own = seen.most_common(1)[0][0] if seen else None
        nodes = f"(npus_per_node {own})" if len(declared) > 1 and own is not None else ALL_NODES
        groups = [g for g in host.groups if g not in ROLE_GROUPS] or [nodes]
        for group in groups:
            per_group[group][host.name] = shape
    declared_by = {h.name: h.vars.get("npus_per_node") for h in cluster.hosts}
    for group, shapes in sorted(per_group.items()):
        named = (f"group {group}" if not group.startswith("(") else "the nodes outside any hardware group"
                 if group == ALL_NODES else f"the nodes declaring {group[1:-1]}")
        sides = split(shapes)
        if sides.unanimous:
            # For the merge of shards: a shard's role-only nodes declaring one count are compared
            # with another's declaring the same, as one run would split them (head 4, workers 8).
            counts = {declared_by[h] for h in shapes} if group == ALL_NODES else set()
            key = f"the nodes declaring npus_per_node {counts.pop()}" if len(counts) == 1 and None not in counts \
                else named
            # The SoC is compared where every node's board was read: a shard that read none is compared by
            # its shape alone, as one run with one board unread compares every node.
            shape, _, soc = sides.majority.partition(" (")
            verdict.passed(group, message=f"{named}: {sides.majority} on all {len(shapes)} node(s)",
                           agreed={key: shape, **({f"{key}: SoC": soc.removesuffix(")")} if soc else {})})
            continue
        verdict.failed(group, outliers=sides.outliers, where=named,
                       observed=sides.describe() + sides.versus(),
                       expected=f"the same NPU count and chip on every node of {named}")
    if unreadable:
        # Named as outliers, so that their matrix cells show this rather than their group's pass.
        verdict.error(fold(unreadable), outliers=tuple(unreadable),
                      message=f"not evaluated: npu-smi info unreadable on {fold(unreadable)} (see "
                              f"npu.count_and_type)")


@check("npu.idle", title="No leftover process or HBM use on the NPUs before a launch", severity="warning",
       reference=faq.M9_IDLE, needs=("npu_smi.info",),
       remedy=("Stop the leftover job before launching (npu-smi info lists its pid; kill it or wait for it), "
               "so the new job gets all of the NPU's HBM."))
def test_idle(host, facts, verdict):
    info = facts.get("npu_smi.info")
    limit_mb = host.vars.get("hbm_idle_mb")
    if not info.process_table:
        # The chips are still judged on HBM use, but a small leftover job can stay under the limit;
        # only the process table would show it.
        verdict.failed("processes", severity="warning",
                       observed="npu-smi info printed its NPU rows but no process table (the output was cut short "
                                "after the chips), so a leftover process holding little HBM cannot be ruled out",
                       expected="npu-smi info's process table (\"No running processes found\" per NPU): re-run the "
                                "preflight, and if it recurs run npu-smi info on the node")
    for chip in info.chips:
        subject = chip_subject(info, chip)
        procs = [p for p in info.processes if p.npu_id == chip.npu_id and p.chip_id == chip.chip_id]
        used, total = chip.hbm_used_mb, chip.hbm_total_mb
        if used is None:
            used, total = chip.memory_used_mb, chip.memory_total_mb
        if limit_mb is not None:
            limit, how = int(limit_mb), f"hbm_idle_mb={limit_mb}"
        elif total:
            limit, how = total * DEFAULT_HBM_IDLE_PCT // 100, f"{DEFAULT_HBM_IDLE_PCT}% of {total} MB"
        else:
            limit, how = None, ""
        problems = []
        if procs:
            # Some drivers leave the process name column empty.
            problems.append(", ".join(f"process {p.pid}{f' ({p.name})' if p.name else ''} holds {p.memory_mb} MB"
                                      for p in procs))
        if used is not None and limit is not None and used > limit:
            problems.append(f"{used} MB of {total} MB in use")
        if problems:
            verdict.failed(subject, observed=f"NPU {chip.npu_id} chip {chip.chip_id}: {'; '.join(problems)}",
                           expected=f"no process and at most {limit} MB in use ({how})" if limit is not None
                           else "no process on the NPU")
        else:
            verdict.passed(subject, message=f"idle ({used if used is not None else '?'} MB in use)")


@check("npu.driver_install_complete", title="npu-smi does not warn that the driver install is incomplete",
       reference=faq.X_DRIVER_INSTALL, needs=("npu_smi.info", "ascend.files?"),
       remedy=("Reinstall the NPU driver package (Ascend-hdk-*-npu-driver_*.run --full) so that it finishes and "
               "records Driver_Install_Status=complete in /etc/ascend_install.info; then reboot if asked."))
def test_driver_install_complete(host, facts, verdict):
    info = facts.get("npu_smi.info")
    status = None
    try:
        install = facts.get("ascend.files").install_info
        if install:
            status = install.get("driver_install_status")
    except FactUnavailable:
        pass
    if info.driver_incomplete:
        verdict.failed(observed="npu-smi info warns: the driver package may not be completely installed",
                       expected="no install warning (Driver_Install_Status=complete in /etc/ascend_install.info)")
    elif status is not None and status.lower() != "complete":
        verdict.failed(observed=f"/etc/ascend_install.info: Driver_Install_Status={status}",
                       expected="Driver_Install_Status=complete")
    else:
        verdict.passed(message="no driver install warning" + (f" (Driver_Install_Status={status})" if status else ""))
