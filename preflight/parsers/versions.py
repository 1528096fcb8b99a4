"""Parsers for the Ascend version and install-info files, ``npu-smi info -t board``, and the
node-level facts gathered with them (Python stack, login-shell environment, firewall,
checkpoint directory).

Formats (shared/reference/ascend-formats.md section 3): ``key=value`` files
(driver/firmware ``version.info``, ``ascend_toolkit_install.info``, ``/etc/ascend_install.info``),
``key : value`` files (ATB ``version.info``, ``npu-smi info -t board``) and ``version.cfg``
with ``#`` comments.  Both the classic ``ascend-toolkit/latest`` layout and the CANN 8.5
``cann-<version>`` layout are read.  Pure functions: text in, dataclasses out,
:class:`~preflight.parsers.ParseError` for text of any other shape.
"""

from __future__ import annotations

import dataclasses
import ipaddress

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field

from preflight.parsers import ParseError


def _excerpt(text: str) -> str:
    text = text.strip()
    return repr(text[:60] + ("..." if len(text) > 60 else ""))


def parse_kv(text: str) -> dict[str, str]:
    """``key=value`` or ``key : value`` lines -> {lower-case key: value}; the first occurrence wins.
    Split on the first ``=``, or failing that on the first ``:`` (as msprechecker does)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "=" in line:
            key, _, value = line.partition("=")
        elif ":" in line:
            key, _, value = line.partition(":")
        else:
            continue
        key = key.strip().lower()
        value = value.strip().strip('"').strip()
        if key and key not in out:
            out[key] = value
    return out


# -- driver / firmware ------------------------------------------------------------------


@dataclass(frozen=True)
class DriverInfo:
    version: str
    innerversion: str | None
    # compatible_version_fw=[min,max] or, on newer drivers, several: [6.4.0,6.4.99],[7.0.0,7.7.99]
    firmware_ranges: tuple[tuple[str, str], ...]
    firmware_compat: str | None = None  # the line as written ("" or None: the driver names no range)


@dataclass(frozen=True)
class FirmwareInfo:
    version: str
    driver_prefixes: tuple[str, ...]  # compatible_version_drv=[p,p.],... -> ("23.0.0", "24.1", ...)
    driver_compat: str | None = None  # the line as written (None: the firmware names no driver)


def parse_driver_version_info(text: str) -> DriverInfo:
    kv = parse_kv(text)
    version = kv.get("version") or kv.get("package_version")
    if not version:
        raise ParseError(f"no Version= line in driver version.info: {_excerpt(text)}")
    line = kv.get("compatible_version_fw", "").strip()
    ranges = []
    if re.fullmatch(r"(\[[^\[\]]*\]\s*,?\s*)+", line):
        for body in re.findall(r"\[([^\[\]]*)\]", line):
            m = re.fullmatch(r"\s*([^,\s]+)\s*,\s*([^,\s]+)\s*", body)
            if not m:
                ranges = []
                break
            ranges.append((m.group(1), m.group(2)))
    return DriverInfo(version=version, innerversion=kv.get("innerversion"), firmware_ranges=tuple(ranges),
                      firmware_compat=line or None)


def parse_firmware_version_info(text: str) -> FirmwareInfo:
    kv = parse_kv(text)
    version = kv.get("version")
    if not version:
        raise ParseError(f"no Version= line in firmware version.info: {_excerpt(text)}")
    line = kv.get("compatible_version_drv", "").strip()
    # The whole line a list of [version,version.] entries, or none of it read (as the driver's side):
    # a line read in part would check the driver against part of the list.
    entry = r"\[\s*([^,\]]+?)\s*,[^\]]*\]"
    whole = re.fullmatch(rf"(?:{entry}\s*,?\s*)+", line)
    prefixes = tuple(m.group(1).strip() for m in re.finditer(entry, line)) if whole else ()
    return FirmwareInfo(version=version, driver_prefixes=prefixes, driver_compat=line or None)


def driver_matches_prefix(driver: str, prefix: str) -> bool:
    """Firmware ``compatible_version_drv`` entries (case-insensitive):

    * ``[24.1,24.1.]``: the release line, every 24.1 driver;
    * ``[23.0.0,23.0.0.]``: the line's releases (a firmware shipped with driver 23.0.7 lists it),
      23.0.<n>, not its release candidates;
    * ``[23.0.rc3,23.0.rc3.]``: that release candidate and its patches (23.0.rc3, 23.0.rc3.1), which
      a firmware lists beside the line when it takes that candidate and not the earlier ones."""
    d = driver.lower().split(".")
    p = prefix.lower().rstrip(".").split(".")
    if len(p) < 2 or d[:2] != p[:2]:
        return False
    if len(p) == 2:
        return True
    if p[2] == "0":
        return len(d) > 2 and d[2].isdigit()
    return d[:len(p)] == p


# -- CANN -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CannInstall:
    root: str  # as found (an env value, .../ascend-toolkit/latest, .../cann-8.5.0)
    real: str  # readlink -f
    version: str | None  # install.info version= (marketing: 8.2.RC1, 8.5.0)
    package: str | None  # Ascend-cann-toolkit, Ascend-cann-nnae
    arch: str | None
    install_path: str | None  # path= in the install.info
    toolkit_version: str | None  # toolkit/version.info version_dir
    kernels_version: str | None  # opp_kernel/version.info version_dir (None: not installed)
    kernel_socs: tuple[str, ...]  # opp/built-in/op_impl/ai_core/tbe/kernel/<soc> directories
    unreadable: tuple[str, ...] = ()  # files that exist but could not be read


@dataclass(frozen=True)
class AscendFiles:
    """What the version-file probe found on a node."""

    driver: DriverInfo | None
    driver_error: str | None
    firmware: FirmwareInfo | None
    firmware_error: str | None
    install_info: dict | None  # /etc/ascend_install.info, None = absent
    cann: tuple[CannInstall, ...]  # in search order: $ASCEND_HOME_PATH, $ASCEND_TOOLKIT_HOME, latest, cann, cann-*
    atb_version: str | None
    atb_version_files: tuple[str, ...]
    libatb: tuple[str, ...]  # libatb.so paths that exist, as the probe named them
    paths: dict = field(default_factory=dict)  # path -> realpath, for the paths the probe asked about
    roots: dict = field(default_factory=dict)  # every CANN root found -> realpath (symlinks included)
    container: bool = False
    # Where the probe looked for the driver and the firmware first (Driver_Install_Path_Param's,
    # Firmware_Install_Path_Param's, else /usr/local/Ascend's).
    driver_dir: str = "/usr/local/Ascend/driver"
    firmware_dir: str = "/usr/local/Ascend/firmware"

    def version_of_root(self, root: str) -> str | None:
        """The CANN version installed at a root named in the environment (symlinks resolved)."""
        root = root.rstrip("/")
        real = self.roots.get(root, root)
        for c in self.cann:
            if root in (c.root, c.real) or real in (c.root, c.real):
                return c.version
        return None

    def active_cann(self) -> CannInstall | None:
        for c in self.cann:
            if c.version:
                return c
        return None


def _version_dir(text: str) -> str | None:
    kv = parse_kv(text)
    return kv.get("version_dir") or kv.get("version")


def parse_atb_version(text: str) -> str | None:
    """``    Ascend-cann-atb : 8.2.RC1`` (4-space indent is real) -> ``8.2.RC1``."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() in ("ascend-cann-atb", "version"):
            return value.strip() or None
    return None


def parse_ascend_files(text: str) -> AscendFiles:
    """The framed output of the ``ascend.files`` probe command (see preflight.nodefacts):
    ``@@F<TAB>label<TAB>path`` .. content .. ``@@E`` for a file, ``@@L<TAB>label<TAB>path<TAB>real``
    for an existing path, ``@@K<TAB>root<TAB>soc`` for a kernel directory, ``@@C`` in a container."""
    files: list[tuple[str, str, str]] = []
    links: list[tuple[str, str, str]] = []
    kernels: dict[str, list[str]] = {}
    container = False
    current: list[str] | None = None
    head: tuple[str, str] | None = None
    saw_marker = done = False
    for line in text.split("\n"):
        if current is not None:
            if line == "@@E":
                files.append((head[0], head[1], "\n".join(current)))
                current = head = None
            else:
                current.append(line)
            continue
        parts = line.split("\t")
        if parts[0] == "@@F" and len(parts) >= 3:
            head, current, saw_marker = (parts[1], parts[2]), [], True
        elif parts[0] == "@@L" and len(parts) >= 3:
            links.append((parts[1], parts[2], parts[3] if len(parts) > 3 and parts[3] else parts[2]))
            saw_marker = True
        elif parts[0] == "@@K" and len(parts) >= 3:
            kernels.setdefault(parts[1], []).append(parts[2])
        elif parts[0] == "@@C":
            container = True
        elif parts[0] == "@@DONE":
            saw_marker = done = True
    if not saw_marker:
        raise ParseError(f"no version-file records in the probe output: {_excerpt(text)}")
    # The links come last: output cut before @@DONE has lost some, and a driver or CANN folder
    # read as absent would be reported as not installed.
    if current is not None:
        raise ParseError(f"the probe output ends inside {head[1]} (no @@E after it): cut short")
    if not done:
        raise ParseError("the probe output ends before its @@DONE marker: cut short, some paths unread")

    def file_of(label: str):
        for lab, path, content in files:
            if lab == label:
                return path, content
        return None, None

    driver = firmware = None
    driver_error = firmware_error = None
    path, content = file_of("driver")
    if content is not None:
        try:
            driver = parse_driver_version_info(content)
        except ParseError as exc:
            driver_error = f"{path}: {exc}"
    path, content = file_of("firmware")
    if content is not None:
        try:
            firmware = parse_firmware_version_info(content)
        except ParseError as exc:
            firmware_error = f"{path}: {exc}"
    _, content = file_of("install")
    install_info = parse_kv(content) if content is not None else None

    cann: list[CannInstall] = []
    seen_real: set[str] = set()
    for label, root, real in links:
        if label != "root" or real in seen_real:
            continue
        seen_real.add(real)
        unreadable = []
        info = {}
        for lab, p, content in files:
            if lab == f"install_info:{root}":
                kv = parse_kv(content)
                if kv.get("version"):
                    info = kv
                    break
                unreadable.append(p)
        _, tv = file_of(f"toolkit_version:{root}")
        _, kv_text = file_of(f"kernels:{root}")
        kernels_version = _version_dir(kv_text) if kv_text is not None else None
        if kv_text is not None and not kernels_version:
            unreadable.append(f"{root}/opp_kernel/version.info")
        version = info.get("version") or (_version_dir(tv) if tv else None)
        cann.append(CannInstall(root=root, real=real, version=version, package=info.get("package_name"),
                                arch=info.get("arch"), install_path=info.get("path"),
                                toolkit_version=_version_dir(tv) if tv else None,
                                kernels_version=kernels_version,
                                kernel_socs=tuple(sorted(set(kernels.get(root, [])))),
                                unreadable=tuple(unreadable)))
    atb_version = None
    atb_files = []
    for lab, p, content in files:
        if lab == "atb":
            atb_files.append(p)
            atb_version = atb_version or parse_atb_version(content)
    libatb = tuple(sorted({p for lab, p, _ in links if lab == "libatb"}))
    roots = {p: real for lab, p, real in links if lab == "root"}
    paths = {p: real for lab, p, real in links if lab in ("path", "driver_dir")}
    # The driver folder found (linked), else where it would be.
    driver_dir = next((p for lab, p, _ in links if lab == "driver_dir"), None) or _installed_in(install_info, "driver")
    return AscendFiles(driver=driver, driver_error=driver_error, firmware=firmware, firmware_error=firmware_error,
                       install_info=install_info, cann=tuple(cann), atb_version=atb_version,
                       atb_version_files=tuple(atb_files), libatb=libatb, paths=paths, roots=roots, container=container,
                       driver_dir=driver_dir, firmware_dir=_installed_in(install_info, "firmware"))


def _installed_in(install_info: dict | None, part: str) -> str:
    """``<Driver|Firmware>_Install_Path_Param``/<part> from /etc/ascend_install.info, else under
    /usr/local/Ascend (parse_kv lower-cases the keys)."""
    base = (install_info or {}).get(f"{part}_install_path_param", "").strip().rstrip("/")
    return f"{base or '/usr/local/Ascend'}/{part}"


# -- npu-smi info -t board -i N -c C ----------------------------------------------------


@dataclass(frozen=True)
class BoardInfo:
    fields: dict  # the chip's (-c 0): Chip Type, Chip Name, NPU Name
    npu_id: int | None
    card: dict = field(default_factory=dict)  # the card's (no -c): Software Version, Firmware Version, Compatibility

    @property
    def compatibility(self) -> str | None:
        """npu-smi's own verdict on the driver/firmware pair: OK, NOK, UNKNOWN, NOT SUPPORT."""
        return self.card.get("compatibility")

    @property
    def driver_version(self) -> str | None:
        return self.card.get("software version") or None

    @property
    def card_command(self) -> str:
        """The command that printed the card level, for messages."""
        return f"npu-smi info -t board -i {self.card.get('npu id', '<first NPU>')}"

    @property
    def firmware_version(self) -> str | None:
        return self.card.get("firmware version") or self.fields.get("firmware version") or None

    @property
    def soc(self) -> str | None:
        """The SoC name as vllm-ascend derives it: A2 ``{Chip Type}{Chip Name}`` (ascend910b4),
        A3 ``{Chip Name}_{NPU Name}`` (ascend910_9392), 310P ``ascend310p3``."""
        f = self.fields
        chip_name = f.get("chip name", "")
        chip_type = f.get("chip type", "")
        npu_name = f.get("npu name", "")
        low = chip_name.lower()
        if "a2g3" in low:
            return "ascend910b1"
        if not chip_name:
            return None
        if npu_name and not chip_type:
            return f"{chip_name}_{npu_name}".lower()
        if chip_type:
            return f"{chip_type}{chip_name}".lower()
        return chip_name.lower()


BOARD_CARD_MARK = "@@CARD"


def parse_board(text: str) -> BoardInfo:
    """``npu-smi info -t board -i N -c C`` (``key : value`` lines, TAB or space indented), then,
    after a ``@@CARD`` line, the card level ``npu-smi info -t board -i N`` (older captures lack it)."""
    chip_text, _, card_text = text.partition(f"\n{BOARD_CARD_MARK}\n")
    if chip_text.startswith(BOARD_CARD_MARK + "\n"):
        chip_text, card_text = "", chip_text[len(BOARD_CARD_MARK) + 1:]
    fields, card = _board_fields(chip_text), _board_fields(card_text)
    if "npu id" not in card:
        card = {}  # "Invalid card id." or nothing: the card level says nothing
    if "chip name" not in fields and "npu id" not in fields:
        if not card:
            raise ParseError(f"no 'NPU ID' / 'Chip Name' line in npu-smi info -t board output: {_excerpt(text)}")
        fields = {}
    try:
        npu = int(fields.get("npu id", card.get("npu id", "")))
    except ValueError:
        npu = None
    return BoardInfo(fields=fields, npu_id=npu, card=card)


def _board_fields(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            fields.setdefault(key.strip().lower(), value.strip())
    return fields


def soc_family(name: str | None) -> str | None:
    """A SoC, chip or kernel-directory name -> A1 / A2 / A3 / 310P / A5 (None when unknown)."""
    if not name:
        return None
    n = name.strip().lower().replace(" ", "")
    n = n.removeprefix("ascend")
    if n.startswith("950"):
        return "A5"
    if n.startswith("910_93") or n.startswith("910c") or n in ("a3",):
        return "A3"
    if n.startswith("910b") or n.startswith("a2g") or n in ("a2",):
        return "A2"
    if n.startswith("310p") or n.startswith("i2"):
        return "310P"
    if n.startswith("910"):
        return "A1"
    return None


def npu_smi_chip_family(name: str | None) -> str | None:
    """The family of a chip as npu-smi names it (``Name`` in ``npu-smi info``, ``Chip Name`` in the
    board info).  A bare ``910B`` is an A1 variant there (torch_npu's SocVersion puts Ascend910B
    among 910A/ProA/ProB/PremiumA, 100-104); A2 chips are named ``910B1`` .. ``910B4``, while the
    A2 kernel directory and build targets are spelled ``ascend910b`` (soc_family)."""
    if name and name.strip().lower().replace(" ", "").removeprefix("ascend") == "910b":
        return "A1"
    return soc_family(name)


def npu_smi_node_family(names) -> str | None:
    """The family all the chip names npu-smi lists on a node tell, or None: no names, mixed ones,
    or "Ascend910", which an A3 die and an A1 chip share."""
    families = {npu_smi_chip_family(n) if inventory_chip_family(n) else None for n in names}
    return families.pop() if len(families) == 1 else None


def inventory_chip_family(chip) -> str | None:
    """The family an inventory ``chip`` value names.  The bare ``910`` / ``Ascend910`` names none:
    it is A1's SoC name, and also what npu-smi prints for every A3 die, so operators copy it from
    A3 nodes."""
    if chip is None:
        return None
    if str(chip).strip().lower().replace(" ", "").removeprefix("ascend") == "910":
        return None
    return soc_family(str(chip))


# -- the Python stack -------------------------------------------------------------------


@dataclass(frozen=True)
class PythonStack:
    executable: str
    version: str
    packages: dict  # normalised distribution name -> version
    modules: dict  # module -> origin path or None (not found)
    sys_path: tuple[str, ...]
    build_info: dict  # vllm_ascend/_build_info.py values (__soc_version__, __device_type__)
    error: str | None = None
    checkouts: dict = field(default_factory=dict)  # mindspeed / mindspeed_mm -> {"root", "head": .git/HEAD}
    megatron_core: dict | None = None  # {"path", "version"} from megatron/core/package_info.py

    def release_branch(self, module: str) -> str | None:
        """The branch the module's git checkout is on (``2.3.0_core_r0.12.1``), None when detached or unknown."""
        head = (self.checkouts.get(module) or {}).get("head") or ""
        return head.removeprefix("ref: refs/heads/") if head.startswith("ref: refs/heads/") else None

    def version_of(self, name: str) -> str | None:
        return self.packages.get(norm_dist(name))


def norm_dist(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_python_stack(text: str) -> PythonStack:
    """The JSON line the Python probe prints (after a ``@@PY`` marker, so anything a
    sitecustomize prints before it is ignored)."""
    _, sep, rest = text.partition("@@PY ")
    if not sep:
        raise ParseError(f"no Python stack record in the output: {_excerpt(text)}")
    try:
        doc = json.loads(rest.splitlines()[0])
    except (ValueError, IndexError) as exc:
        raise ParseError(f"Python stack record is not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("packages"), dict):
        raise ParseError("Python stack record without packages")
    packages = {norm_dist(str(k)): str(v) for k, v in doc["packages"].items()}
    return PythonStack(executable=str(doc.get("executable", "")), version=str(doc.get("version", "")),
                       packages=packages, modules=dict(doc.get("modules") or {}),
                       sys_path=tuple(str(p) for p in doc.get("path") or ()),
                       build_info=dict(doc.get("build_info") or {}), error=doc.get("error"),
                       checkouts={str(k): dict(v) for k, v in (doc.get("checkouts") or {}).items() if isinstance(v, dict)},
                       megatron_core=doc["megatron_core"] if isinstance(doc.get("megatron_core"), dict) else None)


# -- login-shell environment ------------------------------------------------------------

LOGIN_MARKER = "@@PF_ENV@@"


def parse_login_env(text: str) -> dict[str, str]:
    """``env -0`` printed by ``bash -lic`` after a marker line (banners and echo lines in
    ~/.bashrc come before it and are ignored)."""
    _, sep, rest = text.partition(LOGIN_MARKER + "\n")
    if not sep:
        raise ParseError(f"the interactive login shell did not reach the env dump: {_excerpt(text)}")
    env: dict[str, str] = {}
    for record in rest.split("\0"):
        name, eq, value = record.partition("=")
        if eq and name and "\n" not in name:
            env[name] = value
    return env


# -- firewall ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FirewallState:
    firewalld: str | None  # "running" / "active" / "not running" / "inactive" / None (tool absent)
    ufw: str | None  # "active" / "inactive" / None
    input_policy: str | None  # iptables INPUT chain policy (ACCEPT/DROP), None when unreadable
    blanket_rules: tuple[str, ...]  # INPUT rules that DROP/REJECT without a port or source match
    unreadable: tuple[str, ...] = ()  # "iptables -S INPUT: Permission denied (you must be root)", ...
    nft_findings: tuple[str, ...] = ()  # nftables input-hook chains that drop: a policy, a blanket rule
    nft_input_chains: int = 0  # nftables input-hook chains read (0: nft absent, or no such chain)
    # Source networks an INPUT (or a chain it jumps to) rule ACCEPTs before any blanket drop
    # (`-A INPUT -s 10.0.0.0/24 -j ACCEPT`): the drop does not reach the nodes in them.
    accepted_sources: tuple[str, ...] = ()
    # iptables-legacy's INPUT, read where iptables (the nft variant) said legacy tables are loaded
    # too: its drops, as "iptables-legacy ..." findings (a packet passes both sets of tables).
    legacy_findings: tuple[str, ...] = ()
    # Drops of some TCP ports only (`-A INPUT -p tcp --dport 6379 -j DROP`, nft `tcp dport 6379
    # drop`): no blanket firewall, but a fault when a port is one the cluster uses.
    port_rules: tuple[str, ...] = ()
    # Per iptables port rule (in order; nft's have none): the sources INPUT accepted ahead of it.
    port_rule_accepts: tuple[tuple[str, ...], ...] = ()

    def dropped_ports(self, rule: str) -> list[tuple[int, int]]:
        """The TCP port ranges a port rule drops (``--dport 6379``, ``--dports 60000:60031,8265``,
        nft ``tcp dport { 6379, 10002-19999 }``)."""
        m = re.search(r"--dports? (\S+)|tcp dport (?:!= )?(\{[^}]*\}|\S+)", rule)
        spans = []
        for part in re.split(r"[,\s]+", (m.group(1) or m.group(2)).strip("{} ") if m else ""):
            low, _, high = part.replace(":", "-").partition("-")
            if low.isdigit() and (not high or high.isdigit()):
                spans.append((int(low), int(high or low)))
        if re.search(r"!\s+--dports?\b|tcp dport != ", rule):  # every port but these
            rest, start = [], 1
            for low, high in sorted(spans):
                if low > start:
                    rest.append((start, low - 1))
                start = max(start, high + 1)
            if start <= 65535:
                rest.append((start, 65535))
            return rest
        return spans

    @property
    def accepted_networks(self) -> list:
        """accepted_sources as ipaddress networks (a source that is none, e.g. a name, left out)."""
        return networks_of(self.accepted_sources)

    @staticmethod
    def excepts_ports(rule: str) -> bool:
        """Whether a drop rule (or a finding quoting one) drops every port but those it names
        (``! --dport 22``, nft ``tcp dport != 22``)."""
        return bool(re.search(r"!\s+--dports?\b|tcp dport != ", rule))

    @staticmethod
    def destinations(rule: str) -> list | None:
        """The networks an iptables rule's ``-d`` limits it to, or None for a rule without one."""
        m = re.search(r"\s-d (\S+)", rule)
        return networks_of(m.group(1).split(",")) if m else None

    @property
    def active(self) -> list[str]:
        found = []
        if self.firewalld and self.firewalld.strip().lower() in ("running", "active"):
            found.append(f"firewalld is {self.firewalld.strip()}")
        if self.ufw and self.ufw.strip().lower() == "active":
            found.append("ufw is active")
        if self.input_policy in ("DROP", "REJECT"):
            found.append(f"iptables INPUT policy is {self.input_policy}")
        for rule in self.blanket_rules:
            body, _, via = rule.partition(" (INPUT jumps to ")
            found.append(f"iptables rule `{body}`" + (f" (INPUT jumps to {via}" if via else ""))
        found.extend(self.nft_findings)
        found.extend(self.legacy_findings)
        return found


def networks_of(sources) -> list:
    """Addresses and subnets as ipaddress networks (one that is none, e.g. a name, left out)."""
    found = []
    for source in sources:
        try:
            found.append(ipaddress.ip_network(source, strict=False))
        except ValueError:
            continue
    return found


def parse_firewall(text: str) -> FirewallState:
    """``firewalld=<state>``, ``ufw=<Status: ...>``, ``iptables=<iptables -S INPUT line>`` lines;
    ``iptables_legacy...`` lines are iptables-legacy's, read as iptables' are and judged with them."""
    lines = text.splitlines()
    legacy = [line for line in lines if line.startswith("iptables_legacy")]
    state = _parse_firewall("\n".join(line for line in lines if not line.startswith("iptables_legacy")))
    if not legacy:
        return state
    old = _parse_firewall("\n".join("iptables" + line[len("iptables_legacy"):] for line in legacy))
    findings = tuple(f.replace("iptables", "iptables-legacy", 1) for f in old.active)
    # A packet passes both: nodes are let through where every side that drops accepts them first.
    drops_here = state.input_policy in ("DROP", "REJECT") or bool(state.blanket_rules)
    accepted = (_both_accept(state.accepted_sources, old.accepted_sources) if drops_here
                else old.accepted_sources) if findings else state.accepted_sources
    # iptables-legacy's port rules after ours and nft's, each with the sources legacy's INPUT
    # accepted ahead of it (nft's rules have none: the accepts are padded up to them).
    accepts = state.port_rule_accepts + ((),) * (len(state.port_rules) - len(state.port_rule_accepts))
    return dataclasses.replace(state, legacy_findings=findings, accepted_sources=accepted,
                               unreadable=state.unreadable + tuple(u.replace("iptables", "iptables-legacy", 1)
                                                                   for u in old.unreadable),
                               port_rules=state.port_rules + tuple(f"iptables-legacy: {rule}"
                                                                   for rule in old.port_rules),
                               port_rule_accepts=accepts + old.port_rule_accepts)


def _both_accept(ours: tuple[str, ...], theirs: tuple[str, ...]) -> tuple[str, ...]:
    """The source networks two sets of tables both accept: two CIDR networks either nest or are
    disjoint, so what both let through is the smaller of each overlapping pair (10.0.0.0/24 of
    10.0.0.0/16).  A source that is no network counts only where both list it as is."""
    both = []
    for a in ours:
        for b in theirs:
            try:
                na, nb = ipaddress.ip_network(a, strict=False), ipaddress.ip_network(b, strict=False)
            except ValueError:
                if a == b:
                    both.append(a)
                continue
            if na.version == nb.version and na.overlaps(nb):
                both.append(a if na.prefixlen >= nb.prefixlen else b)
    return tuple(dict.fromkeys(both))


def _parse_firewall(text: str) -> FirewallState:
    firewalld = ufw = policy = None
    rules, unreadable, nft = [], [], []
    found_ports: list[str] = []  # port drop rules as read; each is a ("port", index) step of its chain
    # In order, per chain: ("accept", sources) for `-s NET -j ACCEPT`, ("drop",) for a blanket drop,
    # ("jump", chain) for INPUT's unconditional `-j CHAIN`; walked from INPUT after all are read
    # (iptables -S lists a chain INPUT jumps to after INPUT's own rules, though it comes first).
    steps: dict[str, list] = defaultdict(list)
    ended: set[str] = set()  # chains an unconditional ACCEPT or RETURN leaves
    seen = False
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        value = value.strip()
        if key == "firewalld":
            seen = True
            if value:
                firewalld = value.splitlines()[0]
        elif key == "ufw":
            seen = True
            m = re.search(r"Status:\s*(\w+)", value)
            if m:
                ufw = m.group(1).lower()
            elif value:  # "ERROR: You need to be root to run this script"
                unreadable.append(f"ufw status: {value}")
        elif key == "iptables_unreadable":
            seen = True
            unreadable.append(f"iptables -S INPUT: {value or 'failed'}")
        elif key in ("iptables", "iptables_chain"):
            seen = True
            m = re.match(r"^-P INPUT (\w+)", value)
            chain = re.match(r"^-A (\S+)", value)
            if m and key == "iptables":
                policy = m.group(1)
            elif chain and chain.group(1) not in ended:
                name = chain.group(1)
                accept = re.fullmatch(r'-A \S+ -s (\S+)(?: -p (?:tcp|all))?(?: -m comment --comment (?:"[^"]*"|\S+))?'
                                      r' -j ACCEPT', value)
                jump = re.fullmatch(r"-A INPUT -j (\S+)", value) if key == "iptables" else None
                if re.fullmatch(r"-A \S+ -j (ACCEPT|RETURN)", value):
                    ended.add(name)  # every packet leaves the chain here: what follows is not reached
                elif accept:
                    steps[name].append(("accept", accept.group(1).split(",")))
                elif jump and jump.group(1) not in ("DROP", "REJECT", "LOG"):
                    steps[name].append(("jump", jump.group(1)))
                elif re.search(r"-j (DROP|REJECT)\b", value) and (name == "INPUT") == (key == "iptables") \
                        and re.search(r"--dports?\b", value) and not re.search(_NARROWED, value):
                    via = "" if name == "INPUT" else f" (INPUT jumps to {name})"
                    if re.search(r"!\s+--dports?\b", value):
                        # `! --dport 22`: every port but those, the cluster's among them: judged as a
                        # blanket drop (accepts ahead of it, jumps and the legacy tables included).
                        rules.append(value + via)
                        steps[name].append(("drop",))
                    else:
                        # Kept with the sources accepted before it (walked once all chains are read):
                        # a drop of the ports for everyone else.
                        steps[name].append(("port", len(found_ports)))
                        found_ports.append(value + via)
                elif re.search(r"-j (DROP|REJECT)\b", value) and (name == "INPUT") == (key == "iptables") \
                        and not re.search(r"--dports?\b|--sports?\b|\s-s\s|\s-i\s|INVALID|-p icmp|--icmp|"
                                          r"-m mark\b|-m set\b|-m recent\b|-m limit\b|-m hashlimit\b", value):
                    rules.append(value if name == "INPUT" else f"{value} (INPUT jumps to {name})")
                    steps[name].append(("drop",))
        elif key == "nft_unreadable":
            seen = True
            unreadable.append(f"nft list ruleset: {value or 'failed'}")
        elif key == "nft_read":
            seen = True
        elif key == "nft":
            seen = True
            nft.append(value.split(" ", 4))
        elif key == "none":
            seen = True
    if not seen:
        raise ParseError(f"no firewall state lines: {_excerpt(text)}")
    running = (firewalld or "").strip().lower() in ("running", "active")
    # Per port rule a packet reaches (in the order it does): the sources accepted ahead of it.
    port_accepts = _accepted_before_ports(steps)
    port_rules = [found_ports[index] for index in port_accepts]
    return FirewallState(firewalld=firewalld, ufw=ufw, input_policy=policy, blanket_rules=tuple(rules),
                         unreadable=tuple(unreadable), accepted_sources=tuple(_accepted_first(steps)),
                         nft_findings=_nft_findings(nft, iptables_read=policy is not None or bool(rules),
                                                    firewalld_running=running),
                         nft_input_chains=sum(1 for entry in nft if len(entry) == 5 and entry[3] == "policy"),
                         port_rules=tuple(port_rules) + _nft_port_rules(nft, iptables_read=policy is not None),
                         port_rule_accepts=tuple(port_accepts.values()))


# What makes a port drop selective beyond its ports (a source, a destination, an interface, a set,
# a rate, a mark, a connection state other than new): not a drop of the port for the cluster.
# (A destination, -d, is judged by net.firewall: on INPUT it is mostly the node's own address;
# `! -d` spares one.)
_NARROWED = (r"\s-s\s|\s-i\s|!\s+-d\s|-p udp|--sports?\b|INVALID|-m mark\b|-m set\b|-m recent\b|-m limit\b|"
             r"-m hashlimit\b|-m iprange\b|--match-set\b|--src-range\b|--dst-range\b|-m owner\b")


def _nft_port_rules(entries, iptables_read: bool) -> tuple[str, ...]:
    """nft input rules that drop some TCP ports (and match nothing else that narrows them)."""
    found = []
    for entry in entries:
        if len(entry) != 5 or entry[3] != "rule" or entry[0] == "ip6":
            continue
        family, table, chain, _, rest = entry
        if (family, table, chain) == ("ip", "filter", "INPUT") and iptables_read:
            continue  # iptables-nft's INPUT: read from iptables -S already
        body = " ".join(_NFT_DECORATION.sub("", rest).split())
        qualifier = r"(?:ct state (?:\{[^}]*\}|\S+)|meta l4proto tcp|ip protocol tcp|meta nfproto ipv4) "
        if re.fullmatch(rf"(?:{qualifier})*tcp dport (?:\{{[^}}]*\}}|\d\S*) (?:{qualifier})*(?:drop|reject(?: with .*)?)",
                        body):
            found.append(f"nftables chain {family} {table} {chain} rule `{rest}`")
    return tuple(found)


def _accepted_first(steps: dict) -> list[str]:
    """The source networks accepted before any blanket drop is reached, walking INPUT and the chains
    it jumps to unconditionally in the order a packet does."""
    sources: list[str] = []

    def walk(chain: str, seen: frozenset) -> bool:  # False once a drop is reached
        for step in steps.get(chain, ()):
            if step[0] == "accept":
                sources.extend(step[1])
            elif step[0] == "drop":
                return False
            elif step[0] == "jump" and step[1] not in seen and not walk(step[1], seen | {step[1]}):
                return False
        return True

    walk("INPUT", frozenset({"INPUT"}))
    return sources


def _accepted_before_ports(steps: dict) -> dict[int, tuple[str, ...]]:
    """Per port rule (its index) that a packet reaches, walking INPUT and the chains it jumps to
    in the order a packet does: the source networks accepted ahead of it (identical rules may
    differ here).  A rule in a chain INPUT does not jump to is not reached."""
    accepted: list[str] = []
    found: dict[int, tuple[str, ...]] = {}

    def walk(chain: str, seen: frozenset) -> None:
        for step in steps.get(chain, ()):
            if step[0] == "accept":
                accepted.extend(step[1])
            elif step[0] == "port":
                found.setdefault(step[1], tuple(accepted))  # a chain jumped to twice: the first time drops
            elif step[0] == "jump" and step[1] not in seen:
                walk(step[1], seen | {step[1]})

    walk("INPUT", frozenset({"INPUT"}))
    return found


# An nft rule that matches nothing before its verdict: what is left once counters, logging and
# comments are taken away is the verdict alone.
_NFT_DECORATION = re.compile(r'\bcounter(?: packets \d+ bytes \d+)?|\blog(?: (?:prefix "[^"]*"|level \w+|'
                             r'flags [\w,]+|group \d+))*|\bcomment "[^"]*"')


# A rule that drops every new connection (or every TCP one), as iptables' `-m conntrack --ctstate
# NEW -j DROP` and `-p tcp -j DROP` do: matches on the connection state or the protocol alone.  A
# port, address, interface or set match makes it selective, as on the iptables side.
_NFT_BLANKET = re.compile(r"(?:(?:ct state (?:new|\{ ?new ?\})|meta l4proto (?:tcp|\{ ?tcp, udp ?\})|"
                          r"ip protocol (?:tcp|\{ ?tcp, udp ?\})|meta nfproto ipv4|"
                          # every port but these (SSH's): the cluster's among them
                          r"tcp dport != (?:\{[^}]*\}|\S+)) )*(?:drop|reject(?: with .*)?)")


def _nft_findings(entries, iptables_read: bool, firewalld_running: bool) -> tuple[str, ...]:
    found = []
    for entry in entries:
        if len(entry) != 5:
            continue
        family, table, chain, kind, rest = entry
        if table == "firewalld" and firewalld_running:
            continue  # firewalld's own table: firewalld is reported running
        if (family, table, chain) == ("ip", "filter", "INPUT") and iptables_read:
            continue  # iptables-nft's INPUT chain: iptables -S INPUT has it already
        if family == "ip6":
            continue  # IPv6 only (ip6tables' hardening): every probe and HCCL/Ray link here is IPv4
        where = f"nftables chain {family} {table} {chain}"
        if kind == "policy" and rest in ("drop", "reject"):
            found.append(f"{where} policy is {rest}")
        elif kind == "rule" and _NFT_BLANKET.fullmatch(" ".join(_NFT_DECORATION.sub("", rest).split())):
            found.append(f"{where} rule `{rest}`")
    return tuple(found)


# -- checkpoint directory ---------------------------------------------------------------


@dataclass(frozen=True)
class CheckpointDir:
    path: str | None  # None: no checkpoint_dir in the inventory
    exists: bool
    is_dir: bool
    writable: bool
    avail_kb: int | None
    filesystem: str | None
    mount: str | None


def parse_checkpoint(text: str) -> CheckpointDir:
    kv = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            kv[key.strip()] = value.strip()
    if "unset" in text.split() and "path" not in kv:
        return CheckpointDir(None, False, False, False, None, None, None)
    if "path" not in kv:
        raise ParseError(f"no checkpoint directory record: {_excerpt(text)}")
    try:
        avail = int(kv["avail_kb"]) if kv.get("avail_kb") else None
    except ValueError:
        avail = None
    return CheckpointDir(path=kv["path"], exists=kv.get("exists") == "1", is_dir=kv.get("dir") == "1",
                         writable=kv.get("writable") == "1", avail_kb=avail, filesystem=kv.get("fs") or None,
                         mount=kv.get("mount") or None)
