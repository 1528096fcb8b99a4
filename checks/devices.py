"""Device nodes: what a job inside the node (or its container) can open."""

from preflight import faq
from preflight.check import check
from preflight.facts import FactUnavailable
from preflight.hostlist import fold

MANAGEMENT_NODES = ("davinci_manager", "devmm_svm", "hisi_hdc")


def _expected_chips(host, facts):
    """(expected number of /dev/davinciN, how we know) from the inventory, else npu-smi."""
    chips_per_npu = 1
    try:
        info = facts.get("npu_smi.info")
        per_npu = {}
        for chip in info.chips:
            per_npu[chip.npu_id] = per_npu.get(chip.npu_id, 0) + 1
        chips_per_npu = max(per_npu.values(), default=1)
        listed = len(info.chips)
    except FactUnavailable:
        info, listed = None, None
    expected_npus = host.vars.get("npus_per_node")
    if expected_npus:
        count = int(expected_npus) * chips_per_npu
        how = f"npus_per_node={expected_npus}" + (f" x {chips_per_npu} chips per NPU" if chips_per_npu > 1 else "")
        return count, how
    if listed:
        return listed, f"npu-smi info lists {listed} chip(s)"
    return None, "no npus_per_node in the inventory and npu-smi info unavailable"


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
    expected, how = _expected_chips(host, facts)
    found = fold(f"davinci{i}" for i in sorted(present)) or "none"
    not_char = sorted(i for i, n in present.items() if n.kind != "char")
    for i in not_char:
        verdict.failed(f"davinci{i}", observed=f"/dev/davinci{i} is a {present[i].kind}, not a character device",
                       expected="a character device (major 236 on most drivers)")
    if expected is None:
        if present:
            verdict.passed(message=f"found /dev/{found} ({how}; set npus_per_node to check the count)")
        else:
            verdict.failed(observed="no /dev/davinciN device nodes", expected="one per NPU chip", where=host.name)
        return
    missing = [i for i in range(expected) if i not in present]
    if missing:
        verdict.failed(observed=f"/dev/{fold(f'davinci{i}' for i in missing)} missing "
                                f"({len(present)} present: {found})",
                       expected=f"{expected} device nodes davinci0..{expected - 1} ({how})")
    elif len(present) > expected:
        verdict.failed(observed=f"{len(present)} device nodes ({found})",
                       expected=f"{expected} ({how}); check npus_per_node in the inventory")
    elif not not_char:
        verdict.passed(message=f"{len(present)} device nodes present ({found}; {how})")


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
        else:
            verdict.passed(name, message=f"/dev/{name} present")


@check("devices.driver_mounts", title="Driver folders present (add-ons, /usr/local/dcmi in containers); npu-smi runs",
       reference=faq.R_NPU_VISIBLE, needs=("ascend.files", "npu_smi.info?"),
       remedy=("Mount the host's driver into the container: -v /usr/local/Ascend/driver:/usr/local/Ascend/driver "
               "-v /usr/local/Ascend/add-ons:/usr/local/Ascend/add-ons -v /usr/local/dcmi:/usr/local/dcmi "
               "-v /usr/local/bin/npu-smi:/usr/local/bin/npu-smi (the Ascend docker runtime does this); on a host, "
               "reinstall the driver package."))
def test_driver_mounts(host, facts, verdict):
    from preflight.facts import FactUnavailable as _Unavailable
    files = facts.get("ascend.files")
    driver = "/usr/local/Ascend/driver"
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
    except _Unavailable as exc:
        if "was not gathered" in str(exc) or "before the host's deadline" in str(exc):
            # The host deadline cut the probe first (its groups run side by side): not judged.
            verdict.error("npu-smi", message=f"not evaluated: {exc}")
            return
        # In a container, name the mounts that are missing: they are the usual reason npu-smi cannot run.
        missing = [p for p in ("/usr/local/dcmi", "/usr/local/Ascend/add-ons") if p not in files.paths]
        hint = (f" (in a container without {' and '.join(missing)} mounted)" if files.container and missing else "")
        verdict.failed("npu-smi", observed=f"npu-smi info does not run{hint}: {exc}",
                       expected="npu-smi info listing the NPUs")
