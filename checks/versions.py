"""Versions: driver, firmware, CANN, nnal and the Python stack form a published compatible set
(the table shipped in preflight/compat/compat.yaml, extended with --compat FILE), and every
node runs the same one."""

from __future__ import annotations

import functools
import re
from collections import defaultdict

import pytest

from preflight import compat as C
from preflight import faq
from preflight.check import check
from preflight.facts import FactUnavailable
from preflight.ifname import effective_env
from preflight.outliers import split
from preflight.parsers.versions import driver_matches_prefix, npu_smi_chip_family, soc_family

_CACHE: dict = {}


def load_compat(paths=()) -> C.Compat:
    key = tuple(paths or ())
    if key not in _CACHE:
        _CACHE[key] = C.load(key)
    return _CACHE[key]


@pytest.fixture
def compat(request):
    """The compatibility table: shipped data plus the user's --compat files."""
    try:
        paths = request.config.getoption("preflight_compat", None) or ()
    except ValueError:
        paths = ()
    try:
        return load_compat(paths)
    except C.CompatError as exc:
        pytest.fail(str(exc), pytrace=False)


STACK_REMEDY = ("Install one published set on every node: the CANN toolkit, its kernels (ops) package and "
                "nnal of the same release, an NPU driver/firmware (HDK) at least as new as that CANN needs, and "
                "the torch / torch_npu pair released for that CANN (Ascend/pytorch COMPATIBILITY table); "
                "pip install torch==<X> torch_npu==<X.postN> in the job's Python.")


# A driver and firmware that do not pair (both installed): the HDK's own upgrade order.
DRIVER_PAIR_REMEDY = ("Install the NPU firmware and driver of one HDK release: the firmware first, then the driver "
                      "(Ascend-hdk-*-npu-firmware_*.run, then Ascend-hdk-*-npu-driver_*.run, each with --upgrade over "
                      "an installed one), and reboot if the installer asks; npu-smi info -t board -i 0 then reports "
                      "Compatibility OK.")

DRIVER_INFO = "/usr/local/Ascend/driver/version.info"
FIRMWARE_INFO = "/usr/local/Ascend/firmware/version.info"
VERSION_FILES_MOUNT = ("mount the host's version files read-only into the container: "
                      f"-v {DRIVER_INFO}:{DRIVER_INFO}:ro -v {FIRMWARE_INFO}:{FIRMWARE_INFO}:ro")
DRIVER_FIRMWARE_REMEDY = (
    "On a host: install (or repair) the NPU driver and firmware packages of one HDK release "
    "(a first install: Ascend-hdk-*-npu-driver_*.run --full, then Ascend-hdk-*-npu-firmware_*.run --full; an "
    "upgrade or repair over an installed pair: the firmware first, then the driver); each writes its "
    "version.info under /usr/local/Ascend/driver and /usr/local/Ascend/firmware. If they were installed elsewhere, "
    "Driver_Install_Path_Param / Firmware_Install_Path_Param in /etc/ascend_install.info name the path. "
    "In a container, " + VERSION_FILES_MOUNT[0].lower() + VERSION_FILES_MOUNT[1:]
    + ", or run the preflight against the host itself, which owns the driver and firmware.")


def _cann_of(files):
    active = files.active_cann()
    return active.version if active else None


def _torch_npu_row(compat, version):
    for row in compat.rows("torch_npu"):
        if C.pip_equal(row["torch_npu"], version):
            return row
    return None


def _row(compat, table, key, version, cmp="pip"):
    for row in compat.rows(table):
        if cmp == "pip" and C.pip_equal(str(row[key]), version):
            return row
        if cmp == "cann" and C.norm_cann(str(row[key])).upper() == C.norm_cann(version).upper():
            return row
    return None


def _driver_min(row, facts) -> str:
    """The row's minimum driver for this node: some releases list a lower one for 310P cards."""
    if row.get("driver_min_310p"):
        if chip_family(facts.optional("npu_smi.info"), facts.optional("npu_smi.board"))[0] == "310P":
            return row["driver_min_310p"]
    return row["driver_min"]


def _driver_upgrade(need: str, driver: str) -> str:
    return (f"Upgrade the NPU driver to {need} or newer with its firmware (firmware first, then the driver, of one "
            f"HDK release), or install a CANN release that driver {driver} supports.")


def _judge_by_npu_smi(verdict, host, card, missing):
    """A container without the version files: npu-smi's card-level board info still names the
    driver and firmware and says whether they pair (what the files' ranges would tell)."""
    versions = f"driver {card.driver_version or '?'}, firmware {card.firmware_version or '?'}"
    where = card.card_command
    if card.compatibility.upper() == "NOK":
        verdict.failed("driver/firmware", observed=f"{where} on {host.name} reports Compatibility NOK ({versions})",
                       expected="a driver and firmware of the same HDK release (Compatibility OK)",
                       remedy="On the host (the container shares its driver and firmware): " + DRIVER_PAIR_REMEDY)
    elif card.compatibility.upper() == "OK":
        verdict.passed("driver/firmware", message=f"{versions}: Compatibility OK ({where}; {', '.join(missing)} "
                                                  f"not mounted in the container)")
    else:
        verdict.skipped("driver/firmware", message=(
            f"{host.name} is a container: {', '.join(missing)} not found, and {where} reports Compatibility "
            f"{card.compatibility} ({versions}); the preflight run against the host judges the pairing. To judge "
            f"it here, {VERSION_FILES_MOUNT}."))


def _cann_driver_unlisted(verdict, compat, facts, cann, driver):
    """A CANN release the table does not list: a driver's minimum never goes down from one CANN
    release to the next, so the listed releases around it bound its minimum."""
    rows = sorted(compat.rows("cann_driver"),
                  key=functools.cmp_to_key(lambda a, b: C.cmp_versions(C.norm_cann(str(a["cann"])),
                                                                       C.norm_cann(str(b["cann"])))))
    below = [r for r in rows if C.cmp_versions(C.norm_cann(str(r["cann"])), C.norm_cann(cann)) < 0]
    above = [r for r in rows if C.cmp_versions(C.norm_cann(str(r["cann"])), C.norm_cann(cann)) > 0]
    low = (below[-1], _driver_min(below[-1], facts)) if below else None
    high = (above[0], _driver_min(above[0], facts)) if above else None
    if low and C.cmp_versions(driver, low[1]) < 0:
        verdict.failed("cann/driver", observed=f"driver {driver} is older than CANN {cann} needs: CANN {cann} is not "
                                               f"in the table, and the older CANN {low[0]['cann']} already needs "
                                               f"driver {low[1]} ({compat.source(low[0])})",
                       expected=f"driver {low[1]} or newer",
                       remedy=_driver_upgrade(low[1], driver))
    elif high and C.cmp_versions(driver, high[1]) >= 0:
        verdict.passed("cann/driver", message=f"CANN {cann} with driver {driver}: not in the table, but driver "
                                              f"{high[1]} already serves the newer CANN {high[0]['cann']}")
    else:
        bound = f"; the table's nearest older release, CANN {low[0]['cann']}, needs driver {low[1]}" if low else ""
        verdict.failed("cann/driver", severity="warning",
                       observed=f"CANN {cann} with driver {driver} is not in the table{bound}",
                       expected="a CANN release listed in the compatibility table (extend it with --compat, "
                                "or check the CANN release notes' driver table)")


def _cann_in(version, values) -> bool:
    return C.norm_cann(version).upper() in {C.norm_cann(x).upper() for x in C.as_list(values)}


def _stack_values(files, stack) -> dict:
    """The versions a known_bad entry can name."""
    values = {"cann": _cann_of(files) if files else None,
              "driver": files.driver.version if files and files.driver else None}
    if stack is not None:
        for name in ("torch", "torch_npu", "vllm", "vllm_ascend", "mindspeed", "megatron_core", "triton_ascend"):
            values[name] = stack.version_of(name)
    return values


@check("versions.stack", title="Driver, firmware, CANN, kernels, nnal, torch_npu form a published compatible set",
       reference=faq.M1, needs=("ascend.files", "python.stack?", "npu_smi.info?", "npu_smi.board?"),
       remedy=STACK_REMEDY)
def test_stack(host, facts, verdict, compat):
    files = facts.get("ascend.files")
    try:
        stack = facts.get("python.stack")
        stack_error = None
    except FactUnavailable as exc:
        stack, stack_error = None, str(exc)
    # driver <-> firmware, from the machine-readable ranges in the files themselves
    drv, fw = files.driver, files.firmware
    board = facts.optional("npu_smi.board")
    card = board if board is not None and board.compatibility else None
    driver_version = drv.version if drv is not None else (card.driver_version if card else None)
    if driver_version and not driver_version[:1].isdigit():
        # "NA" (npu-smi in a container without the driver's files): compared, it read as a driver
        # older than any CANN needs.  In a container the host's own run judges it, as when the
        # version files are not mounted.
        if files.container and drv is None:
            verdict.skipped("cann/driver", message=f"{host.name} is a container and npu-smi reads the driver version "
                                                   f"as {driver_version!r}: the preflight run against the host judges "
                                                   f"the CANN minimum driver (or {VERSION_FILES_MOUNT})")
        else:
            verdict.error("cann/driver", message=f"{host.name}: the driver version reads {driver_version!r}, which is "
                                                 f"not a version: the CANN minimum driver cannot be checked",
                          remedy=DRIVER_FIRMWARE_REMEDY)
        driver_version = None
    if files.driver_error or files.firmware_error:
        verdict.error("driver/firmware", message=f"{host.name}: {files.driver_error or files.firmware_error}",
                      remedy=DRIVER_FIRMWARE_REMEDY)
    elif (drv is None or fw is None) and card is not None and files.container:
        _judge_by_npu_smi(verdict, host, card, [p for p, x in ((DRIVER_INFO, drv), (FIRMWARE_INFO, fw)) if x is None])
    elif drv is None or fw is None:
        # Where the probe looked: the install paths /etc/ascend_install.info names, else the defaults.
        looked = (f"{files.driver_dir}/version.info", f"{files.firmware_dir}/version.info")
        missing = [p for p, x in zip(looked, (drv, fw)) if x is None]
        if files.container:
            # The Ascend docker runtime mounts driver/lib64 but not the version files: the driver and
            # firmware belong to the host, and the preflight run against the host judges them.
            verdict.skipped("driver/firmware", message=(
                f"{host.name} is a container: {', '.join(missing)} not found (the Ascend docker runtime does "
                f"not mount {'them' if len(missing) > 1 else 'it'}), so the driver/firmware pairing"
                f"{' and the CANN minimum driver' if drv is None else ''} cannot be read here; the host owns the "
                f"driver and firmware, and the preflight run against the host judges them. To judge them here, "
                f"{VERSION_FILES_MOUNT}, or run the preflight against the host itself."))
        else:
            verdict.error("driver/firmware", message=(
                f"{host.name}: cannot tell the driver/firmware versions: {', '.join(missing)} not found; "
                f"expected both version files of the installed NPU driver and firmware"),
                observed=f"{', '.join(missing)} not found", expected="the driver's and the firmware's version.info",
                remedy=DRIVER_FIRMWARE_REMEDY)
    else:
        problems = []
        if drv.firmware_ranges:
            if not any(C.cmp_versions(fw.version, lo) >= 0 and C.cmp_versions(fw.version, hi) <= 0
                       for lo, hi in drv.firmware_ranges):
                problems.append(f"firmware {fw.version} is outside the range driver {drv.version} accepts "
                                f"(compatible_version_fw={drv.firmware_compat})")
        elif drv.firmware_compat:
            # A line we cannot read must not pass as "nothing to compare".
            problems.append(f"driver version.info's compatible_version_fw={drv.firmware_compat} is not a list of "
                            f"[min,max] ranges, so firmware {fw.version} could not be checked against it")
        if not drv.version[:1].isdigit():
            problems.append(f"driver version.info's Version={drv.version} is not a version, so it could not be "
                            f"checked against the drivers firmware {fw.version} accepts")
        elif fw.driver_prefixes and not any(driver_matches_prefix(drv.version, p) for p in fw.driver_prefixes):
            problems.append(f"driver {drv.version} is not among the drivers firmware {fw.version} accepts "
                            f"(compatible_version_drv: {', '.join(fw.driver_prefixes)})")
        elif not fw.driver_prefixes and fw.driver_compat:
            # As on the driver's side: a line we cannot read must not pass as "nothing to compare".
            problems.append(f"firmware version.info's compatible_version_drv={fw.driver_compat} is not a list of "
                            f"[version,version.] entries, so driver {drv.version} could not be checked against it")
        if card is not None and card.compatibility.upper() == "NOK":
            problems.append(f"{card.card_command} reports Compatibility NOK")
        if problems:
            verdict.failed("driver/firmware", observed="; ".join(problems),
                           expected="a driver and firmware of the same HDK release", remedy=DRIVER_PAIR_REMEDY)
        else:
            verdict.passed("driver/firmware", message=f"driver {drv.version}, firmware {fw.version}")
    expected_driver = host.vars.get("driver")
    if expected_driver and driver_version and C.cmp_versions(driver_version, str(expected_driver)) != 0:
        verdict.failed("driver", observed=f"driver {driver_version}",
                       expected=f"driver {expected_driver} (inventory `driver`)",
                       remedy=f"Install driver {expected_driver} (with its firmware: " + DRIVER_PAIR_REMEDY[0].lower()
                       + DRIVER_PAIR_REMEDY[1:-1] + f"), or correct `driver:` in the inventory if {driver_version} "
                                                    f"is what the cluster runs.")

    # CANN <-> driver (published minimum), kernels and nnal of the same release
    active = files.active_cann()
    cann = active.version if active else None
    if active is None:
        verdict.failed("cann", observed="no CANN toolkit found ($ASCEND_HOME_PATH, $ASCEND_TOOLKIT_HOME, "
                                        "/usr/local/Ascend/ascend-toolkit/latest, /usr/local/Ascend/cann-*, "
                                        "and the same in ~/Ascend)",
                       expected="a CANN toolkit with its ascend_toolkit_install.info")
    else:
        expected_cann = host.vars.get("cann")
        if expected_cann and C.norm_cann(cann).upper() != C.norm_cann(str(expected_cann)).upper():
            verdict.failed("cann", observed=f"CANN {cann} at {active.root}",
                           expected=f"CANN {expected_cann} (inventory `cann`)",
                           remedy=f"Install CANN {expected_cann} (toolkit, kernels and nnal) and source its set_env.sh "
                                  f"in the job's environment, or correct `cann:` in the inventory if {cann} is what the "
                                  f"cluster runs.")
        row = _row(compat, "cann_driver", "cann", cann, cmp="cann")
        if driver_version is None:
            pass  # reported above
        elif row is None:
            _cann_driver_unlisted(verdict, compat, facts, cann, driver_version)
        elif C.cmp_versions(driver_version, (need := _driver_min(row, facts))) < 0:
            verdict.failed("cann/driver", observed=f"driver {driver_version} is older than CANN {cann} needs",
                           expected=f"driver {need} or newer ({compat.source(row)})",
                           remedy=_driver_upgrade(need, driver_version))
        else:
            verdict.passed("cann/driver", message=f"CANN {cann} with driver {driver_version} (needs >= {need})")
        old_layout = C.cmp_versions(C.norm_cann(cann), "8.5.0") < 0
        if active.kernels_version:
            if C.norm_cann(active.kernels_version).upper() != C.norm_cann(cann).upper():
                verdict.failed("kernels", observed=f"kernels (opp_kernel) {active.kernels_version} beside toolkit "
                                                   f"{cann} in {active.root}",
                               expected="the kernels package of the toolkit's release")
            else:
                verdict.passed("kernels", message=f"kernels {active.kernels_version}")
        elif old_layout and (active.package or "").endswith("toolkit"):
            verdict.failed("kernels", observed=f"no kernels package: {active.root}/opp_kernel/version.info missing",
                           expected=f"the CANN {cann} kernels (ops) package installed beside the toolkit")
        if files.atb_version:
            if C.norm_cann(files.atb_version).upper() != C.norm_cann(cann).upper():
                verdict.failed("nnal", observed=f"nnal/atb {files.atb_version} with CANN {cann}",
                               expected="the nnal package of the toolkit's release")
            else:
                verdict.passed("nnal", message=f"nnal/atb {files.atb_version}")

    # torch_npu <-> CANN <-> Python (published table; off-table = warning)
    if stack is None:
        verdict.error("torch_npu/cann", message=f"{host.name}: {stack_error}")
    else:
        tnpu = stack.version_of("torch_npu")
        if tnpu and cann:
            row = _torch_npu_row(compat, tnpu)
            if row is None:
                verdict.failed("torch_npu/cann", severity="warning",
                               observed=f"torch_npu {tnpu} is not in the table",
                               expected="a torch_npu release listed in the compatibility table (extend it with --compat)")
            elif not _cann_in(cann, row.get("cann")):
                verdict.failed("torch_npu/cann", severity="warning",
                               observed=f"torch_npu {tnpu} with CANN {cann}: not a published pairing",
                               expected=f"CANN {', '.join(C.as_list(row.get('cann')))} for torch_npu {tnpu} "
                                        f"({compat.source(row)})")
            else:
                verdict.passed("torch_npu/cann", message=f"torch_npu {tnpu} with CANN {cann}")
            if row is not None and row.get("python") and C.in_range(stack.version, row["python"]) is False:
                verdict.failed("python", severity="warning",
                               observed=f"Python {stack.version} with torch_npu {tnpu}",
                               expected=f"Python {row['python']} ({compat.source(row)})")
    # known-bad combinations
    values = _stack_values(files, stack)
    for entry in compat.known_bad:
        when = entry.get("when") or {}
        if when and all(values.get(k) and C.matches(b, values[k], "cann" if k in ("cann", "driver") else "pip")
                        for k, b in when.items()):
            shown = ", ".join(f"{k} {values[k]}" for k in when)
            verdict.failed("known-bad", observed=f"{shown}: {entry.get('why', 'a combination known to fail')}",
                           expected="none of the combinations listed under known_bad")


@check("versions.torch_pair", title="torch and torch_npu versions match", reference=faq.R_TORCH_NPU,
       needs=("python.stack", "ascend.files?"),
       remedy=("Install the torch_npu built for the installed torch (same X.Y.Z): pip install torch==X.Y.Z "
               "torch_npu==X.Y.Z[.postN] in the job's Python (see the Ascend/pytorch compatibility table)."))
def test_torch_pair(host, facts, verdict, compat):
    stack = facts.get("python.stack")
    torch, tnpu = stack.version_of("torch"), stack.version_of("torch_npu")
    where = f"{stack.executable or 'python3'}"
    if not torch or not tnpu:
        missing = [n for n, val in (("torch", torch), ("torch_npu", tnpu)) if not val]
        verdict.failed(observed=f"{' and '.join(missing)} not installed for {where}",
                       expected="torch and torch_npu installed in the Python the job uses (inventory `python`)")
    elif C.base_release(torch) != C.base_release(tnpu):
        verdict.failed(observed=f"torch {torch} with torch_npu {tnpu} ({where})",
                       expected=f"torch_npu {C.base_release(torch)}[.postN] for torch {torch}",
                       remedy=_torch_pair_remedy(compat, where, torch, tnpu, facts.optional("ascend.files"),
                                                 stack.version))
    else:
        verdict.passed(message=f"torch {torch}, torch_npu {tnpu} ({where})")


def _torch_pair_remedy(compat, where: str, torch: str, tnpu: str, files, python: str | None) -> str:
    """The command with this node's versions: the newest torch_npu the table lists for this torch,
    the node's CANN and its Python (one for another CANN would trade this failure for
    versions.stack's; one for another Python would not install)."""
    cann = _cann_of(files) if files else None
    base = C.base_release(torch)

    def fits(row) -> bool:
        return ((cann is None or _cann_in(cann, row.get("cann")))
                and not (python and row.get("python") and C.in_range(python, str(row["python"])) is False))

    fitting = [r for r in compat.rows("torch_npu") if C.base_release(str(r["torch"])) == base and fits(r)]
    for_cann = f" and CANN {cann}" if cann else ""
    if fitting:
        pick = max((str(r["torch_npu"]) for r in fitting), key=C.pip_key)
        text = f"{where} -m pip install torch_npu=={pick} (built for torch {base}{for_cann}"
    else:
        # The torch nearest the installed one that has a torch_npu here: the newest below it, else
        # the oldest above.
        others = sorted({(str(r["torch"]), str(r["torch_npu"])) for r in compat.rows("torch_npu")
                         if cann and fits(r)}, key=lambda tr: (C.pip_key(tr[0]), C.pip_key(tr[1])))
        below = [tr for tr in others if C.pip_key(tr[0]) <= C.pip_key(base)]
        near = below[-1] if below else (others[0] if others else None)
        text = (f"The compatibility table lists no torch_npu for torch {base}{for_cann}"
                + (f" on Python {python}" if python else "") +
                (f": install a torch that has one, e.g. {where} -m pip install "
                 f"torch=={near[0]} torch_npu=={near[1]} ("
                 if near else f": install torch_npu {base}[.postN] for it (") + "see the Ascend/pytorch table")
    # Keeping torch_npu and changing torch instead: only where that torch_npu suits the CANN too.
    kept = _torch_npu_row(compat, tnpu)
    if cann is None or (kept is not None and fits(kept)):
        text += f"; or {where} -m pip install torch=={C.base_release(tnpu)} to keep torch_npu {tnpu}"
    return text + "), on this node and every other one alike."


def _mindspeed_row(compat, version: str):
    """The MindSpeed table row of a release (2.3.0_core_r0.12.1 is 2.3.0's); 1.0.RC3 is not 1.0.0's."""
    release = version.split("_core_r")[0].removeprefix("v")
    row = next((r for r in compat.rows("mindspeed") if str(r["mindspeed"]).lower() == release.lower()), None)
    if row is None and not re.search("rc", release, re.I):
        row = next((r for r in compat.rows("mindspeed") if C.base_release(r["mindspeed"]) == C.base_release(release)
                    and not re.search("rc", str(r["mindspeed"]), re.I)), None)
    return row


def _mindspeed_stack(verdict, compat, ms: str, ms_how: str, facts, stack) -> None:
    """The CANN and torch the MindSpeed release was made for (a warning: the table's columns)."""
    row = _mindspeed_row(compat, ms) if not ms.startswith("0.") else None
    if row is None:
        return
    files = facts.optional("ascend.files")
    cann, torch = (_cann_of(files) if files is not None else None), stack.version_of("torch")
    off = []
    if cann and row.get("cann") and not _cann_in(cann, row["cann"]):
        off.append(f"CANN {cann}")
    if torch and row.get("torch") and C.base_release(torch) not in {C.base_release(t) for t in C.as_list(row["torch"])}:
        off.append(f"torch {torch}")
    wanted = (f"CANN {' or '.join(C.as_list(row.get('cann')))} and torch {' or '.join(C.as_list(row.get('torch')))}, "
              f"what MindSpeed {row['mindspeed']} was released for ({compat.source(row)})")
    if off:
        verdict.failed("mindspeed-stack", severity="warning", observed=f"MindSpeed {ms} ({ms_how}) with {' and '.join(off)}",
                       expected=wanted,
                       remedy=f"Use the CANN and torch MindSpeed {row['mindspeed']} lists, or the MindSpeed release "
                              f"made for this CANN and torch (its branch README lists them).")
    elif cann or torch:
        verdict.passed("mindspeed-stack", message=f"MindSpeed {ms} with "
                                                  + " and ".join(x for x in (cann and f"CANN {cann}",
                                                                             torch and f"torch {torch}") if x))


def _mindspeed_mcore(compat, version: str):
    m = re.search(r"core_r(\d+\.\d+\.\d+)", version)
    if m:
        return [m.group(1)], f"MindSpeed {version} is the core_r{m.group(1)} branch"
    # The release itself first: 1.0.RC2 is not the 1.0.0 row (base_release reads both as 1.0.0).
    row = next((r for r in compat.rows("mindspeed") if str(r["mindspeed"]).lower() == version.lower()), None)
    if row is None and not re.search("rc", version, re.I):
        row = next((r for r in compat.rows("mindspeed") if C.base_release(r["mindspeed"]) == C.base_release(version)
                    and not re.search("rc", str(r["mindspeed"]), re.I)), None)
    if row is not None:
        return C.as_list(row["megatron_core"]), compat.source(row)
    if version.startswith("0."):
        return [C.base_release(version)], f"MindSpeed {version} follows Megatron core {C.base_release(version)}"
    return None, None


@check("versions.mindspeed_megatron", title="MindSpeed / MindSpeed-MM and Megatron core versions pair",
       reference=faq.M19, needs=("python.stack", "ascend.files?"),
       remedy=("Check out the Megatron-LM tag the MindSpeed branch names (core_rA.B.C -> git checkout core_vA.B.C, "
               "e.g. pip install git+https://github.com/NVIDIA/Megatron-LM.git@core_v0.12.1), and the MindSpeed "
               "release MindSpeed-MM's README lists; verl needs MindSpeed 2.3.0_core_r0.12.1 or newer."))
def test_mindspeed_megatron(host, facts, verdict, compat):
    stack = facts.get("python.stack")
    ms_pkg = stack.version_of("mindspeed")
    mm_pkg = stack.version_of("mindspeed-mm") or stack.version_of("mindspeed_mm")
    if not ms_pkg and not mm_pkg:
        verdict.skipped(message="MindSpeed is not installed in the job's Python")
        return
    ms, ms_how = _mindspeed_release(stack, "mindspeed", ms_pkg)
    mm, mm_how = _mindspeed_release(stack, "mindspeed_mm", mm_pkg)
    if mm_pkg:
        row = _mindspeed_mm_row(compat, mm) if mm else None
        if not ms:
            verdict.failed("mindspeed-mm", observed=f"MindSpeed-MM {mm or mm_pkg} without MindSpeed",
                           expected=f"MindSpeed {row['mindspeed'] if row else ''} installed".replace("  ", " "))
        elif mm is None:
            verdict.skipped("mindspeed-mm", message=f"MindSpeed-MM's release cannot be read: {mm_how}")
        elif row is None:
            verdict.failed("mindspeed-mm", severity="warning", observed=f"MindSpeed-MM {mm} is not in the table",
                           expected="a MindSpeed-MM release listed in the compatibility table")
        elif ms.startswith("0."):
            # A 0.x MindSpeed is numbered after its Megatron core: it can only be told to follow
            # the core of the release MindSpeed-MM wants.
            cores, _ = _mindspeed_mcore(compat, str(row["mindspeed"]))
            if cores and C.base_release(ms) not in {C.base_release(c) for c in cores}:
                verdict.failed("mindspeed-mm", observed=f"MindSpeed-MM {mm} ({mm_how}) with MindSpeed {ms} ({ms_how}, "
                                                        f"which follows Megatron core {C.base_release(ms)})",
                               expected=f"MindSpeed {row['mindspeed']} (Megatron core {' or '.join(cores)}; "
                                        f"{compat.source(row)})")
            else:
                verdict.passed("mindspeed-mm", message=f"MindSpeed-MM {mm} with MindSpeed {ms} ({ms_how}): the Megatron "
                                                       f"core of MindSpeed {row['mindspeed']}; the release itself is "
                                                       f"not named")
        elif not _same_mindspeed(str(row["mindspeed"]), ms):
            verdict.failed("mindspeed-mm", observed=f"MindSpeed-MM {mm} ({mm_how}) with MindSpeed {ms} ({ms_how})",
                           expected=f"MindSpeed {row['mindspeed']} ({compat.source(row)})")
        else:
            verdict.passed("mindspeed-mm", message=f"MindSpeed-MM {mm} with MindSpeed {ms} ({ms_how})")
    if not ms:
        return
    mcore = stack.version_of("megatron-core") or stack.version_of("megatron_core")
    mcore_how = "pip package megatron-core"
    if not mcore and stack.megatron_core:
        mcore = stack.megatron_core.get("version")
        mcore_how = f"{stack.megatron_core.get('path')}/core/package_info.py"
    wanted, why = _mindspeed_mcore(compat, ms)
    if not mcore:
        found = stack.modules.get("megatron")
        verdict.failed("megatron", severity="warning",
                       observed=(f"Megatron-LM found at {found}, but its core/package_info.py gives no version"
                                 if found else
                                 f"MindSpeed {ms} installed, but Megatron-LM is neither a pip package nor importable "
                                 f"from the node's Python outside the job's folder"
                                 + (", nor copied into the MindSpeed-MM checkout at "
                                    f"{stack.checkouts['mindspeed_mm']['root']}/megatron"
                                    if "mindspeed_mm" in stack.checkouts else "")),
                       expected=f"Megatron core {' or '.join(wanted) if wanted else 'of the MindSpeed branch'} "
                                f"where the job imports it: pip install -e the Megatron-LM checkout, or copy its "
                                f"megatron/ folder into the MindSpeed-MM checkout (pip install -e MindSpeed-MM lets "
                                f"this check find it there)")
    elif wanted is None:
        verdict.failed("megatron", severity="warning", observed=f"MindSpeed {ms} is not in the table",
                       expected="a MindSpeed release listed in the compatibility table (extend it with --compat)")
    elif C.base_release(mcore) not in {C.base_release(w) for w in wanted}:
        tag = f"core_v{C.base_release(wanted[0])}"
        verdict.failed("megatron", observed=f"MindSpeed {ms} ({ms_how}) with Megatron core {mcore} ({mcore_how})",
                       expected=f"Megatron core {' or '.join(wanted)} ({why})",
                       remedy=f"Use the Megatron-LM MindSpeed {ms} is made for: in the Megatron-LM checkout the job "
                              f"uses, git checkout {tag}, then "
                              + ("copy its megatron/ folder into the MindSpeed-MM checkout"
                                 if "mindspeed_mm" in stack.checkouts else "pip install -e . there")
                              + " (MindSpeed needs megatron.training too, which the megatron-core wheel lacks), on "
                                "every node alike.")
    else:
        verdict.passed("megatron", message=f"MindSpeed {ms} with Megatron core {mcore} ({mcore_how})")
    _mindspeed_stack(verdict, compat, ms, ms_how, facts, stack)
    if stack.version_of("verl"):
        _verl_mindspeed(verdict, compat, stack.version_of("verl"), ms, ms_how)


def _mindspeed_mm_row(compat, mm: str):
    """MindSpeed-MM's row: the release itself, else its X.Y.Z (not for an RC: 1.0.RC3 is not 1.0.0)."""
    row = next((r for r in compat.rows("mindspeed_mm") if str(r["mindspeed_mm"]).lower() == mm.lower()), None)
    if row is None and not re.search("rc", mm, re.I):
        row = _row(compat, "mindspeed_mm", "mindspeed_mm", C.base_release(mm))
    return row


def _same_mindspeed(wanted: str, have: str) -> bool:
    """The same release and, where both name one, the same Megatron core: MindSpeed 2.1.0 has a
    core_r0.8.0 and a core_r0.12.1 branch, and MindSpeed-MM 2.1.0 runs on the first only."""
    release = [v.split("_core_r")[0].lower() for v in (wanted, have)]
    if "rc" in release[0] + release[1] and release[0] != release[1]:
        return False  # 1.0.RC3 is not 1.0.0, though both read as 1.0.0
    if C.base_release(wanted) != C.base_release(have):
        return False
    cores = [re.search(r"core_r(\d+\.\d+\.\d+)", v) for v in (wanted, have)]
    return not all(cores) or cores[0].group(1) == cores[1].group(1)


def _mindspeed_release(stack, module, package_version) -> tuple[str | None, str]:
    """(release, how we know): the git branch of the checkout it was installed from names the release
    (2.3.0_core_r0.12.1, MindSpeed-MM's 2.3.0); the package versions do not (MindSpeed's setup.py
    follows the Megatron core, 0.12.1, for every release on that core; MindSpeed-MM's is 0.1)."""
    if not package_version:
        return None, "not installed"
    branch = stack.release_branch(module)
    if branch and re.fullmatch(r"v?\d+\.\d+\.\w+(_core_r\d+\.\d+\.\d+)?", branch):
        return branch.removeprefix("v"), f"branch {branch} of {stack.checkouts[module]['root']}"
    if module == "mindspeed_mm" and C.base_release(package_version) == "0.1.0":
        where = (f"{stack.checkouts[module]['root']} is on {branch or 'a detached commit'}"
                 if module in stack.checkouts else "no git checkout found")
        return None, f"its package version {package_version} is a placeholder and {where}"
    return package_version, f"package version {package_version}"


def _verl_mindspeed(verdict, compat, verl, ms, ms_how):
    need = compat.verl_min_mindspeed.get("mindspeed", "2.3.0")
    core = compat.verl_min_mindspeed.get("megatron_core", "0.12.1")
    if ms.startswith("0."):
        # A 0.x version is the Megatron core MindSpeed follows; 2.1.0, 2.2.0 and 2.3.0 all follow 0.12.1.
        if C.cmp_versions(C.base_release(ms), core) < 0:
            verdict.failed("verl", observed=f"verl {verl} with MindSpeed {ms} ({ms_how})",
                           expected=f"MindSpeed {need}_core_r{core} or newer for verl")
        elif C.cmp_versions(C.base_release(ms), core) == 0:
            verdict.failed("verl", severity="warning",
                           observed=f"verl {verl} with MindSpeed {ms} ({ms_how}): releases 2.1.0 to {need} all follow "
                                    f"Megatron core {core}, and no git branch says which one this is",
                           expected=f"MindSpeed {need}_core_r{core} or newer for verl (install it from a git checkout "
                                    f"of that branch, which this check reads)")
        else:
            verdict.passed("verl", message=f"verl with MindSpeed {ms} (after Megatron core {core})")
    elif C.cmp_versions(C.base_release(ms), need) < 0:
        verdict.failed("verl", observed=f"verl {verl} with MindSpeed {ms} ({ms_how})",
                       expected=f"MindSpeed {need}_core_r{core} or newer for verl")
    else:
        verdict.passed("verl", message=f"verl with MindSpeed {ms} ({ms_how})")


def _vllm_row(compat, version):
    for row in compat.rows("vllm_ascend"):
        if C.pip_equal(str(row["vllm_ascend"]), version):
            return row
    return None


def _public(version: str) -> str:
    """``0.13.0+empty`` (vllm built from source for a plugin device) -> ``0.13.0``."""
    return str(version).split("+", 1)[0]


def _release_line(version: str) -> tuple[str, ...]:
    return tuple(C.base_release(version).split(".")[:2])


VLLM_REMEDY = ("Install the vllm release the vllm-ascend release was made for, from source without its CUDA parts: "
               "git clone --depth 1 --branch v<vllm> https://github.com/vllm-project/vllm && cd vllm && "
               "VLLM_TARGET_DEVICE=empty pip install -v -e . ; or install the vllm-ascend release made for the "
               "installed vllm (vllm-ascend's versioning policy lists the pairs).")


@check("versions.vllm", title="vllm-ascend pairs with the installed vllm, CANN and torch_npu",
       reference=faq.R_VLLM_VERSIONS, needs=("python.stack", "ascend.files?", "session.env?"), remedy=VLLM_REMEDY)
def test_vllm(host, facts, verdict, compat):
    stack = facts.get("python.stack")
    plugin = stack.version_of("vllm-ascend") or stack.version_of("vllm_ascend")
    vllm = shown = stack.version_of("vllm")
    if not plugin:
        verdict.skipped(message="vllm-ascend not installed in the job's Python"
                                + (f" (vllm {vllm} alone)" if vllm else ""))
        return
    row = _vllm_row(compat, plugin)
    wanted = [str(v) for v in C.as_list(row.get("vllm"))] if row is not None else []
    remedy = VLLM_REMEDY.replace("<vllm>", wanted[-1] if wanted else "<vllm>")
    if vllm and C.base_release(vllm) == "0.0.0":
        # A vllm built from a source tree without git metadata calls itself 0.0.0+empty; vllm-ascend
        # then takes vllm's release from VLLM_VERSION.
        declared = effective_env(host, facts.optional("session.env") or {}).get("VLLM_VERSION")
        if declared:
            shown = f"{declared} (VLLM_VERSION; the package says {vllm})"
        vllm = declared
    if not stack.version_of("vllm"):
        need = f"vllm {' or '.join(wanted)}" if wanted else "the vllm release of the same version"
        verdict.failed("vllm", observed=f"vllm-ascend {plugin} installed without vllm",
                       expected=f"{need} (vllm-ascend is a plugin that vllm loads)", remedy=remedy)
        return
    if not vllm:
        verdict.skipped("vllm", message=f"vllm {shown} does not know its own release (built without git metadata) "
                                        f"and VLLM_VERSION is not set, which vllm-ascend reads then: the pair is "
                                        f"not checked")
    elif not wanted:
        if _release_line(vllm) != _release_line(plugin):
            verdict.failed("vllm", severity="warning",
                           observed=f"vllm-ascend {plugin} with vllm {shown}: different release lines, and "
                                    f"vllm-ascend {plugin} is not in the table",
                           expected=f"vllm {'.'.join(_release_line(plugin))}.x, the release vllm-ascend follows "
                                    f"(extend the table with --compat for the exact pair)")
        else:
            verdict.passed("vllm", message=f"vllm-ascend {plugin} with vllm {shown} (same release line; "
                                           f"the pair is not in the table)")
    elif not any(C.pip_equal(_public(vllm), w) for w in wanted):
        verdict.failed("vllm", observed=f"vllm-ascend {plugin} with vllm {shown}",
                       expected=f"vllm {' or '.join(wanted)}, the release vllm-ascend {plugin} was made for "
                                f"({compat.source(row)})",
                       remedy=remedy)
    else:
        verdict.passed("vllm", message=f"vllm-ascend {plugin} with vllm {shown}")
    if row is None:
        return
    source = compat.source(row)
    files = facts.optional("ascend.files")
    cann = _cann_of(files) if files is not None else None
    if cann and row.get("cann"):
        wanted = ", ".join(C.as_list(row["cann"]))
        _against_row(verdict, "cann", f"vllm-ascend {plugin} with CANN {cann}", _cann_in(cann, row["cann"]),
                     f"CANN {wanted} ({source})", f"Use the CANN release vllm-ascend {plugin} names ({wanted}: the "
                     f"vllm-ascend image of that release has it), or the vllm-ascend release made for CANN {cann}.",
                     ": not the release it was tested with")
    tnpu = stack.version_of("torch_npu")
    if tnpu and row.get("torch_npu"):
        _against_row(verdict, "torch_npu", f"vllm-ascend {plugin} with torch_npu {tnpu}",
                     C.pip_equal(tnpu, str(row["torch_npu"])), f"torch_npu {row['torch_npu']} ({source})",
                     f"pip install torch_npu=={row['torch_npu']} (with torch {row.get('torch')}), as vllm-ascend "
                     f"{plugin} was built against it.")
    ta = stack.version_of("triton-ascend")
    if ta and row.get("triton_ascend"):
        _against_row(verdict, "triton-ascend", f"vllm-ascend {plugin} with triton-ascend {ta}",
                     C.pip_equal(ta, str(row["triton_ascend"])), f"triton-ascend {row['triton_ascend']} ({source})",
                     f"pip install triton-ascend=={row['triton_ascend']}, the release vllm-ascend {plugin} was "
                     f"tested with (its kernels compile against that CANN).")
    if stack.version and row.get("python") and C.in_range(stack.version, str(row["python"])) is False:
        verdict.failed("python", severity="warning",
                       observed=f"vllm-ascend {plugin} on Python {stack.version}",
                       expected=f"Python {row['python']} ({source})",
                       remedy=f"Run vllm-ascend {plugin} in a Python {row['python']} environment (its wheels and "
                              f"image are built for it), or use the vllm-ascend release made for this Python.")


def _triton_for(compat, cann: str | None) -> str | None:
    """The newest triton-ascend the table lists for ``cann``."""
    made = [str(r["triton_ascend"]) for r in compat.rows("triton_ascend") if cann and _cann_in(cann, r.get("cann"))]
    return max(made, key=C.pip_key) if made else None


def _against_row(verdict, subject, pairing, ok, expected, remedy, why_not=""):
    """One column of the vllm-ascend row: a pass, or a warning (the release it was tested with)."""
    if ok:
        verdict.passed(subject, message=pairing)
    else:
        verdict.failed(subject, severity="warning", observed=pairing + why_not, expected=expected, remedy=remedy)


@check("versions.triton", title="triton-ascend (not the standard triton) beside vllm-ascend, made for the CANN",
       reference=faq.R_TRITON, needs=("python.stack", "ascend.files?"),
       remedy=("Remove the standard triton and install the triton-ascend release for the CANN in use: "
               "pip uninstall -y triton triton-ascend && pip install triton-ascend==<version> "
               "(see the triton-ascend README's table)."))
def test_triton(host, facts, verdict, compat):
    stack = facts.get("python.stack")
    triton, ta = stack.version_of("triton"), stack.version_of("triton-ascend")
    vllm_ascend = stack.version_of("vllm-ascend") or stack.version_of("vllm_ascend")
    files = facts.optional("ascend.files")
    cann = _cann_of(files) if files else None
    for_cann = _triton_for(compat, cann)
    install = (f"pip install triton-ascend=={for_cann} (the release for CANN {cann})" if for_cann else
               "pip install triton-ascend==<the release for the CANN in use>")
    if triton and ta:
        verdict.failed(observed=f"standard triton {triton} installed beside triton-ascend {ta}",
                       expected="triton-ascend only (the standard triton shadows it)",
                       remedy=f"pip uninstall -y triton triton-ascend && {install}.")
        return
    row = next((r for r in compat.rows("triton_ascend") if C.pip_equal(str(r["triton_ascend"]), ta)), None) \
        if ta else None
    if row is not None and cann and not _cann_in(cann, row.get("cann")):
        # Its kernels compile against the CANN it was released with (MindSpeed-MM uses it too,
        # without vllm-ascend).
        verdict.failed(severity="warning", observed=f"triton-ascend {ta} with CANN {cann}",
                       expected=f"triton-ascend made for CANN {cann}: {for_cann or 'none in the table'} "
                                f"({ta} is for CANN {', '.join(C.as_list(row.get('cann')))}; {compat.source(row)})",
                       remedy=f"{install}, on this node and every other one alike.")
        return
    required = None
    if vllm_ascend:
        row = _vllm_row(compat, vllm_ascend)
        if row is not None:
            required = ", ".join(C.as_list(row.get("triton_ascend"))) or None  # a site file may write 3.2 or a list
        elif C.cmp_versions(C.base_release(vllm_ascend), "0.13.0") >= 0:
            required = "a release matching the CANN"
    if required and not ta:
        found = f"the standard triton {triton}" if triton else "no triton-ascend"
        verdict.failed(observed=f"vllm-ascend {vllm_ascend} with {found}",
                       expected=f"triton-ascend {required}",
                       remedy=("pip uninstall -y triton && " if triton else "")
                       + (f"pip install triton-ascend=={required}." if required[:1].isdigit() and "," not in required
                          else f"{install}."))
    elif ta:
        verdict.passed(message=f"triton-ascend {ta}" + (f" with vllm-ascend {vllm_ascend}" if vllm_ascend else ""))
    elif triton:
        verdict.passed(message=f"triton {triton} (no vllm-ascend, no triton-ascend)")
    elif vllm_ascend:
        verdict.passed(message=f"vllm-ascend {vllm_ascend} does not use triton-ascend")
    else:
        verdict.skipped(message="neither vllm-ascend nor triton installed in the job's Python")


def chip_family(info, board) -> tuple[str | None, str]:
    """(A2 / A3 / 310P / A1, how we know) from npu-smi."""
    # An A3 board also says Chip Name Ascend910; its NPU Name (9392, ...) is what tells it from an A1.
    if (board is not None and not board.fields.get("npu name")
            and npu_smi_chip_family(board.fields.get("chip name")) == "A1"):
        return "A1", f"npu-smi board info: Chip Name {board.fields['chip name']} (an A1 910 variant)"
    if board is not None and board.soc and soc_family(board.soc):
        return soc_family(board.soc), f"npu-smi board info: SoC {board.soc}"
    if info is None or not info.chips:
        return None, "npu-smi info unavailable"
    if info.layout.startswith("a3"):
        return "A3", f"npu-smi info: {info.chips[0].name} in the A3 layout (Chip Phy-ID)"
    fam = npu_smi_chip_family(info.chips[0].name)
    return fam, f"npu-smi info: chip {info.chips[0].name}"


FAMILY_SOC = {"A2": "ascend910b*", "A3": "ascend910_93*", "310P": "ascend310p*", "A1": "ascend910", "A5": "ascend950*"}


@check("versions.soc_match", title="The image's SoC build matches the chip", reference=faq.R_SOC,
       needs=("npu_smi.info", "npu_smi.board?", "python.stack?", "ascend.files?", "session.env"),
       remedy=("Use the image or build made for this hardware (A2 -> ascend910b*, A3 -> ascend910_93*): rebuild "
               "vllm-ascend with SOC_VERSION set to the chip's SoC, install the kernels (ops) package for this "
               "chip, or pull the A2/A3 variant of the prebuilt image."))
def test_soc_match(host, facts, verdict):
    info = facts.get("npu_smi.info")
    family, how = chip_family(info, facts.optional("npu_smi.board"))
    if family is None:
        verdict.error(message=f"{host.name}: cannot tell the chip family ({how})")
        return
    evidence = []
    try:
        stack = facts.get("python.stack")
        for key in ("__soc_version__", "__device_type__"):
            val = stack.build_info.get(key)
            if val and soc_family(val):
                evidence.append((f"vllm-ascend built for {key.strip('_')}={val}", soc_family(val)))
                break
    except FactUnavailable:
        pass
    env = facts.get("session.env")
    if env.get("SOC_VERSION") and soc_family(env["SOC_VERSION"]):
        evidence.append((f"SOC_VERSION={env['SOC_VERSION']}", soc_family(env["SOC_VERSION"])))
    try:
        files = facts.get("ascend.files")
        active = files.active_cann()
        socs = [s for s in (active.kernel_socs if active else ()) if soc_family(s)]
        if socs:
            fams = {soc_family(s) for s in socs}
            evidence.append((f"CANN kernels for {', '.join(socs)} in {active.root}",
                             family if family in fams else sorted(fams)[0]))
    except FactUnavailable:
        pass
    if not evidence:
        verdict.skipped(message="no SoC-specific build found (no vllm-ascend build info, SOC_VERSION or CANN kernels)")
        return
    bad = [(what, fam) for what, fam in evidence if fam != family]
    if bad:
        verdict.failed(observed="; ".join(f"{what} ({fam})" for what, fam in bad) + f", but the chip is {family} ({how})",
                       expected=f"builds for {FAMILY_SOC.get(family, family)}")
    else:
        verdict.passed(message=f"{'; '.join(w for w, _ in evidence)} match the {family} chip ({how})")


AGREE_ITEMS = (("driver", "files"), ("firmware", "files"), ("cann", "files"), ("kernels", "files"),
               ("nnal", "files"), ("python", "stack"), ("torch", "stack"), ("torch_npu", "stack"),
               ("mindspeed", "stack"), ("megatron-core", "stack"), ("vllm", "stack"), ("vllm-ascend", "stack"),
               ("triton-ascend", "stack"))


def _item_value(item, files, stack):
    if item == "driver":
        return files.driver.version if files.driver else None
    if item == "firmware":
        return files.firmware.version if files.firmware else None
    active = files.active_cann()
    if item == "cann":
        return active.version if active else None
    if item == "kernels":
        return active.kernels_version if active else None
    if item == "nnal":
        return files.atb_version
    if item == "python":
        return stack.version
    if item == "megatron-core":
        # MindSpeed-MM's guide copies megatron/ into its checkout rather than pip-installing it.
        return stack.version_of(item) or (stack.megatron_core or {}).get("version")
    return stack.version_of(item)


def _agreed(item: str, value: str, pip_mindspeed: dict) -> dict:
    """What preflight-merge compares across shards, as coarse as one run's failure: Python by its
    minor release and the others by their public version (a patch or a '+' label apart is a warning
    in one run), MindSpeed by its pip version, which a branch and a tag share, and by its release
    where every node's is a branch."""
    if item == "python":
        return {item: value.rsplit(".", 1)[0] if value.count(".") == 2 else value}
    if item == "mindspeed" and set(pip_mindspeed.values()) != {value}:
        return {item: next(iter(pip_mindspeed.values())), "mindspeed release": value}
    return {item: value if item in ("driver", "firmware") else value.split("+", 1)[0]}


def _mindspeed_values(per_host: dict, stacks: dict) -> dict:
    """MindSpeed by its release where every node's comes from a git branch (its pip version follows
    the Megatron core: 0.12.1 for 2.1.0 to 26.x); else by the pip version, which a branch and a
    tag or wheel of the same code share."""
    releases = {}
    for h, v in per_host.items():
        if v != "not installed":
            release, how = _mindspeed_release(stacks[h], "mindspeed", v)
            releases[h] = release if how.startswith("branch ") else None
    if releases and all(releases.values()):
        return {h: releases.get(h, v) for h, v in per_host.items()}
    return per_host


@check("cluster.versions_agree", title="Driver, firmware, CANN and the Python stack identical on all nodes",
       scope="cluster", reference=faq.M1_M15, needs=("ascend.files", "python.stack"),
       remedy=("Install the same driver, firmware, CANN (toolkit, kernels, nnal) and Python packages on every node "
               "(one image or one install script for all), then re-run the preflight."))
def test_versions_agree(cluster, verdict):
    values: dict[str, dict[str, str]] = defaultdict(dict)
    stacks = {}
    unreadable = []
    for host, facts in cluster.reachable():
        try:
            files = facts.get("ascend.files")
            stack = facts.get("python.stack")
        except FactUnavailable as exc:
            # One result per node, as the other cross-node checks give: at fleet size one message
            # naming every node's reason ran to 30 kB; "What to fix" folds alike reasons.
            verdict.error(message=f"{host.name}: versions unreadable: {exc}", host=host.name)
            unreadable.append(host.name)
            continue
        stacks[host.name] = stack
        for item, _ in AGREE_ITEMS:
            values[item][host.name] = _item_value(item, files, stack) or "not installed"
    pip_mindspeed = dict(values.get("mindspeed") or {})
    if values.get("mindspeed"):
        values["mindspeed"] = _mindspeed_values(values["mindspeed"], stacks)
    for item, _ in AGREE_ITEMS:
        per_host = values.get(item) or {}
        if not per_host or all(v == "not installed" for v in per_host.values()):
            continue
        sides = split(per_host, missing="not installed")
        if sides.unanimous:
            read = len(per_host)
            verdict.passed(item, message=f"{item} {sides.majority} on all {read} nodes" if read == len(cluster.hosts)
                           else f"{item} {sides.majority} on the {read} of {len(cluster.hosts)} nodes read",
                           agreed=_agreed(item, sides.majority, pip_mindspeed))
            continue
        # Python 3.10.12 next to 3.10.14 runs the same wheels and the same job: a patch release
        # apart is worth a warning, not a NOT READY.
        minor = {v.rsplit(".", 1)[0] if v.count(".") == 2 else v for v in per_host.values()}
        patch_only = item == "python" and len(minor) == 1 and "not installed" not in minor
        # torch 2.6.0+cpu next to 2.6.0: one release from two wheel indexes (PyTorch's CPU index
        # labels its builds, PyPI's aarch64 wheel is the same CPU build unlabelled).  The nodes run
        # the same code; the label is worth a look, not a NOT READY.
        public = {v.split("+", 1)[0] for v in per_host.values()}
        label_only = item not in ("python", "driver", "firmware") and len(public) == 1 and "not installed" not in public
        note = (" (patch releases of one Python, which run the same wheels)" if patch_only else
                f" (builds of one release, {public.pop()}, that differ only in the local label after '+')"
                if label_only else "")
        verdict.failed(item, outliers=sides.outliers, where=item,
                       severity="warning" if patch_only or label_only else None,
                       observed=f"{item} differs: {sides.describe()}{sides.versus()}" + note,
                       expected=f"the same {item} on every node")
    if not values and not unreadable:
        verdict.error(message="no node's versions could be read")
