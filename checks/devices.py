"""Device nodes: what a job inside the node (or its container) can open."""

from __future__ import annotations

from dataclasses import dataclass

from preflight import faq
from preflight.check import check
from preflight.facts import FactUnavailable
from preflight.hostlist import fold
from preflight.parsers.versions import inventory_chip_family

MANAGEMENT_NODES = ("davinci_manager", "devmm_svm", "hisi_hdc")


# Chips (and /dev/davinciN nodes) per NPU by SoC family, when npu-smi cannot say: an A2 NPU is one chip,
# an A3 NPU two dies. Others are left unknown: 310P cards have one (300I Pro) or two (300I Duo) chips, and
# "Ascend910" is what npu-smi names both an A1 910A and an A3 die.
FAMILY_CHIPS_PER_NPU = {"A2": 1, "A3": 2}

SMI_REMEDY = ("Make npu-smi info readable on the node (in a container mount /usr/local/dcmi, /usr/local/bin/npu-smi "
              "and /usr/local/Ascend/driver/lib64 from the host, or start it with the Ascend docker runtime), or set "
              "`chip` in the inventory to the SoC (for example Ascend910_9392 on an A3 node, 2 chips per NPU; "
              "910B3 on an A2 node, 1 chip per NPU) so the number of /dev/davinciN nodes can be checked.")


@dataclass(frozen=True)
class _Expectation:
    count: int | None  # /dev/davinciN nodes expected (the minimum when chips per NPU are unknown)
    how: str
    ids: dict | None = None  # davinci number -> NPU id, as npu-smi info lists them (None: unknown)
    per_npu_known: bool = True
    why_unknown: str = ""


def _expected_chips(host, facts) -> _Expectation:
    """How many /dev/davinciN to expect, and how we know: from the inventory, else npu-smi."""
    chip = host.vars.get("chip")
    try:
        info = facts.get("npu_smi.info")
        smi_error = None
    except FactUnavailable as exc:
        info, smi_error = None, str(exc)
    ids, listed = None, None
    if info is not None and info.chips:
        per_npu = {}
        for c in info.chips:
            per_npu[c.npu_id] = per_npu.get(c.npu_id, 0) + 1
        chips_per_npu = max(per_npu.values())
        listed = len(info.chips)
        by_device = info.by_device()
        ids = {dev: c.npu_id for dev, c in by_device.items()} if by_device is not None else None
        source = "npu-smi info"
    elif FAMILY_CHIPS_PER_NPU.get(family := inventory_chip_family(chip)):
        chips_per_npu = FAMILY_CHIPS_PER_NPU[family]
        source = f"inventory chip {chip} ({family})"
    else:
        chips_per_npu = None
        reason = f"npu-smi info could not be read ({smi_error})" if smi_error else "npu-smi info lists no chip"
        source = reason + (f" and the inventory chip {chip} does not tell the SoC family" if chip
                           else " and the inventory sets no chip")
    expected_npus = host.vars.get("npus_per_node")
    if expected_npus:
        npus = int(expected_npus)
        if chips_per_npu is None:
            return _Expectation(npus, f"npus_per_node={expected_npus}", ids,
                                per_npu_known=False, why_unknown=source)
        how = f"npus_per_node={expected_npus}" + (f" x {chips_per_npu} chips per NPU from {source}"
                                                  if chips_per_npu > 1 else "")
        return _Expectation(npus * chips_per_npu, how, ids)
    if listed:
        return _Expectation(listed, f"npu-smi info lists {listed} chip(s)", ids)
    return _Expectation(None, "no npus_per_node in the inventory and npu-smi info unavailable")


def _missing(present, exp: _Expectation):
    """(the device numbers that are missing, on what basis), or (None, "") when numbers would be a guess:
    NPU ids are labels, not indexes (a container given NPUs 3 and 4 has /dev/davinci3 and 4)."""
    if not present:
        return None, ""
    if exp.ids and set(present) <= set(exp.ids) and set(exp.ids) - set(present):
        missing = sorted(set(exp.ids) - set(present))
        npus = fold(f"npu{n}" for n in sorted({exp.ids[i] for i in missing}))
        return missing, f"npu-smi info shows them as {npus}"
    if max(present) < exp.count:
        return [i for i in range(exp.count) if i not in present], f"numbered davinci0..{exp.count - 1}"
    return None, ""


@check("devices.davinci_nodes", title="/dev/davinciN exists for every NPU", reference=faq.R_NPU_VISIBLE,
       needs=("dev.nodes", "npu_smi.info?"),
       remedy=("Expose every NPU to the job: for containers pass --device /dev/davinciN for each chip "
               "(or set ASCEND_VISIBLE_DEVICES with the Ascend docker runtime); on the host, check that the "
               "driver is loaded (lsmod | grep drv_pcie_host; npu-smi info) and reinstall it if not."))
def test_davinci_nodes(host, facts, verdict):
    nodes = facts.get("dev.nodes")
    present = {}
    for name, node in nodes.items():
        suffix = name[len("davinci"):]
        if name.startswith("davinci") and suffix.isdigit():
            present[int(suffix)] = node
    exp = _expected_chips(host, facts)
    expected, how = exp.count, exp.how
    found = fold(f"davinci{i}" for i in sorted(present)) or "none"
    not_char = sorted(i for i, n in present.items() if n.kind != "char")
    for i in not_char:
        verdict.failed(f"davinci{i}", observed=f"/dev/davinci{i} is a {present[i].kind}, not a character device",
                       expected="a character device (major 236 on most drivers)")
    denied = [present[i] for i in sorted(present) if present[i].usable is False]
    if denied:
        _denied(verdict, "access", denied)
    if expected is None:
        if present:
            verdict.passed(message=f"found /dev/{found} ({how}; set npus_per_node to check the count)")
        else:
            verdict.failed(observed="no /dev/davinciN device nodes", expected="one per NPU chip", where=host.name)
        return
    # NPU ids are labels, not indexes: the count is what must match, whatever the numbers.
    if len(present) < expected:
        missing, basis = _missing(present, exp)
        at_least = "" if exp.per_npu_known else "at least "
        if not exp.per_npu_known:
            how += f", 1 or more chips per NPU: {exp.why_unknown}"
        if missing:
            verdict.failed(observed=f"/dev/{fold(f'davinci{i}' for i in missing)} missing "
                                    f"({len(present)} present: {found})",
                           expected=f"{at_least}{expected} device nodes ({how}; {basis})")
        elif not present:
            verdict.failed(observed="no /dev/davinciN device nodes",
                           expected=f"{at_least}{expected} device nodes ({how})")
        else:
            verdict.failed(observed=f"{len(present)} device nodes ({found})",
                           expected=f"{at_least}{expected} device nodes ({how})")
    elif len(present) > expected and not exp.per_npu_known:
        fits = (f" ({len(present)} = {expected} x {len(present) // expected} would fit"
                f"{' an A3 node' if len(present) == 2 * expected else ''})" if len(present) % expected == 0 else "")
        verdict.error(message=(f"{host.name}: {len(present)} device nodes ({found}) for npus_per_node={expected}: "
                               f"cannot tell how many chips each NPU has (an A3 NPU has 2), because "
                               f"{exp.why_unknown}; expected {expected} x chips per NPU{fits}"),
                      observed=f"{len(present)} device nodes ({found})",
                      expected=f"npus_per_node={expected} x chips per NPU (unknown)", remedy=SMI_REMEDY)
    elif len(present) > expected:
        verdict.failed(observed=f"{len(present)} device nodes ({found})",
                       expected=f"{expected} ({how}); check npus_per_node in the inventory")
    elif not not_char:
        note = "" if exp.per_npu_known else f"; 1 chip per NPU assumed: {exp.why_unknown}"
        verdict.passed(message=f"{len(present)} device nodes present ({found}; {how}{note})")


@check("devices.management_nodes", title="/dev/davinci_manager, /dev/devmm_svm and /dev/hisi_hdc exist",
       reference=faq.R_NPU_VISIBLE, needs=("dev.nodes",),
       remedy=("Pass the management devices into the container as well: --device /dev/davinci_manager "
               "--device /dev/devmm_svm --device /dev/hisi_hdc (the Ascend docker runtime adds them itself); "
               "on the host, a missing node means the driver is not loaded."))
def test_management_nodes(host, facts, verdict):
    nodes = facts.get("dev.nodes")
    for name in MANAGEMENT_NODES:
        node = nodes.get(name)
        if node is None:
            verdict.failed(name, observed=f"/dev/{name} missing", expected="a character device")
        elif node.kind != "char":
            verdict.failed(name, observed=f"/dev/{name} is a {node.kind}", expected="a character device")
        elif node.usable is False:
            _denied(verdict, name, [node])
        else:
            verdict.passed(name, message=f"/dev/{name} present")


ACCESS_REMEDY = ("Run the job as a user that may open the NPU devices: root, or a member of their group (the driver "
                 "installs them root:HwHiAiUser or HwHiAiUser:HwHiAiUser, mode 660): usermod -aG HwHiAiUser <user>, "
                 "then log in again; in a container, run it as root or with that group (--group-add).")


def _denied(verdict, subject, nodes):
    shown = ", ".join(f"/dev/{n.name} ({n.owner}:{n.group} {n.mode})" for n in nodes[:4]) + \
        (f" and {len(nodes) - 4} more" if len(nodes) > 4 else "")
    verdict.failed(subject, observed=f"{shown}: not readable and writable by the login user, whom the job runs as",
                   expected="the device nodes open to that user (root, or a member of their group)",
                   remedy=ACCESS_REMEDY)


@check("devices.driver_mounts", title="Driver folders present (add-ons, /usr/local/dcmi in containers); npu-smi runs",
       reference=faq.R_NPU_VISIBLE, needs=("ascend.files", "npu_smi.info?"),
       remedy=("In a container, mount the host's driver: -v /usr/local/Ascend/driver:/usr/local/Ascend/driver "
               "-v /usr/local/dcmi:/usr/local/dcmi -v /usr/local/bin/npu-smi:/usr/local/bin/npu-smi, and "
               "-v /usr/local/Ascend/add-ons:/usr/local/Ascend/add-ons where the host has it (the Ascend docker "
               "runtime mounts driver/lib64, driver/include, /usr/local/dcmi and npu-smi, not the rest of the "
               "driver folder). On a host, install (or reinstall) the NPU driver package; npu-smi comes with it."))
def test_driver_mounts(host, facts, verdict):
    files = facts.get("ascend.files")
    driver = files.driver_dir  # where /etc/ascend_install.info says the driver went, else /usr/local/Ascend
    inside = [p for p in ("lib64", "version.info", "tools") if f"{driver}/{p}" in files.paths]
    if driver not in files.paths:
        verdict.failed("driver", observed=f"{driver} missing", expected="the NPU driver folder")
    elif not inside:
        verdict.failed("driver", observed=f"{driver} is empty (no lib64, version.info or tools)",
                       expected="the driver's lib64 and version.info")
    else:
        verdict.passed("driver", message=f"{driver} present ({', '.join(inside)})")
    try:
        info = facts.get("npu_smi.info")
        verdict.passed("npu-smi", message=f"npu-smi info lists {len(info.chips)} chip(s)")
    except FactUnavailable as exc:
        if "was not gathered" in str(exc) or "before the host's deadline" in str(exc):
            # The host deadline cut the probe first (its groups run side by side): not judged.
            verdict.error("npu-smi", message=f"not evaluated: {exc}")
            return
        # In a container, name the mounts that are missing: they are the usual reason npu-smi cannot run.
        missing = [p for p in ("/usr/local/dcmi", "/usr/local/Ascend/add-ons") if p not in files.paths]
        if "error while loading shared libraries" in str(exc):
            hint = (f" (its libraries are missing: mount or install {driver}/lib64, and add it to "
                    f"LD_LIBRARY_PATH)")
        elif exc.tool_missing:  # exit 127; "not found" also ends device errors ("the Ascend device was not found")
            hint = (" (not mounted into the container)" if files.container else
                    " (the NPU driver is not installed)" if driver not in files.paths else
                    " (npu-smi is not on this session's PATH, though the driver folder is there)")
        else:
            hint = f" (in a container without {' and '.join(missing)} mounted)" if files.container and missing else ""
        verdict.failed("npu-smi", observed=f"npu-smi info does not run{hint}: {exc}",
                       expected="npu-smi info listing the NPUs")
