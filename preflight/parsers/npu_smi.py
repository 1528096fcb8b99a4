"""Parsers for `npu-smi info` (the main status table) and `npu-smi info -m` (the chip mapping).

The main table comes in several layouts (see the fixtures MANIFEST, "Parsing pitfalls"): A2 classic,
A3 classic, A3 wide (npu-smi 26.x), 310P and the source-only Ascend 950 form. Their column widths
differ, and published copies are sometimes one character off, so nothing here uses character
offsets. Every row is split on ``|`` into cells, cells on whitespace, and number pairs on ``/``
(a five-digit used value touches the slash: ``65099/ 65536``). The layout is read from the two
header rows, never guessed from the chip name or the line width.

Everything is pure: text in, frozen dataclasses out. Text that does not have the documented shape
raises :class:`~preflight.parsers.ParseError` and nothing else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Union

from preflight.parsers import ParseError

LAYOUT_A2 = "a2"
LAYOUT_A3 = "a3"
LAYOUT_A3_WIDE = "a3-wide"
LAYOUT_310P = "310p"
LAYOUT_950 = "950"

# Cell values that npu-smi prints when it has no number to show (A3 die 1 power, 310P power).
_MISSING = frozenset({"-", "NA"})

_VERSION_ROW = re.compile(r"^\|\s*npu-smi\s+(\S+)\s+Version:\s*([^\s|]*)")
_NO_PROCESSES = re.compile(r"^No running processes found in NPU\b")
_SEPARATOR = re.compile(r"^\+[-=+]+\+$")
# One value of a cell: either a "used / total" pair (blanks around "/" optional) or a single token.
_VALUE = re.compile(r"(\S+?)\s*/\s*(\S+)|(\S+)")
_DRIVER_WARNING = re.compile(r"^\[WARNING\]\s*The driver package may not be completely installed")

# In the classic header "Power(W)" and "Temp(C)" are 12 characters apart, in the wide one 21.
_WIDE_POWER_COLUMN = 16


@dataclass(frozen=True)
class NpuChip:
    """One chip (A2 NPU, A3 die, 310P Duo chip) as shown by the two lines of `npu-smi info`."""

    npu_id: int
    chip_id: int
    phy_id: int | None
    name: str
    health: str
    power_w: float | None
    temp_c: int | None
    bus_id: str
    aicore_pct: int | None
    memory_used_mb: int | None
    memory_total_mb: int | None
    hbm_used_mb: int | None
    hbm_total_mb: int | None


@dataclass(frozen=True)
class NpuProcess:
    """One row of the process section (the pid is the host pid)."""

    npu_id: int
    chip_id: int
    pid: int
    name: str
    memory_mb: int


@dataclass(frozen=True)
class NpuSmiInfo:
    """The whole `npu-smi info` output."""

    tool_version: str | None
    driver_version: str | None
    layout: str
    chips: tuple[NpuChip, ...]
    processes: tuple[NpuProcess, ...]
    driver_incomplete: bool
    # npu-smi always prints the process table (or "No running processes found"); without it
    # (output cut short after the chips) no process can be ruled out.
    process_table: bool = True

    @property
    def npu_ids(self) -> tuple[int, ...]:
        """Distinct NPU ids in table order (labels, not indexes: 310P hosts show 1,2 or 2,3)."""
        return tuple(dict.fromkeys(chip.npu_id for chip in self.chips))

    def by_device(self) -> dict[int, NpuChip] | None:
        """Each chip by its device number (``/dev/davinciN``, ``hccn_tool -i N``), or None when this
        output does not tell them: A3 prints each die's Phy-ID and 310P its Device id; with one chip
        per NPU (A2) the NPU id is the device number (a container given NPUs 3 and 4 lists NPU 3 and
        4 and has /dev/davinci3 and 4)."""
        if all(c.phy_id is not None for c in self.chips):
            chips = {c.phy_id: c for c in self.chips}
        elif len(self.npu_ids) == len(self.chips):
            chips = {c.npu_id: c for c in self.chips}
        else:
            return None
        return chips if len(chips) == len(self.chips) else None


@dataclass(frozen=True)
class NpuMapping:
    """One row of `npu-smi info -m`."""

    npu_id: int
    chip_id: int
    logic_id: int | None
    phy_id: int | None
    name: str


# ---------------------------------------------------------------------------------------------
# Small value helpers


_Value = Union[str, tuple[str, str]]


def _cells(row: str) -> list[str]:
    """The stripped cells between the outer pipes of a table row."""
    return [cell.strip() for cell in row[1:-1].split("|")]


def _values(cell: str) -> list[_Value]:
    """Tokens of a cell, with ``a / b`` (any blanks around the slash) kept together as a pair."""
    values: list[_Value] = []
    for match in _VALUE.finditer(cell):
        used, total, single = match.groups()
        values.append(single if single is not None else (used, total))
    return values


def _int(token: str, what: str) -> int:
    try:
        return int(token)
    except ValueError:
        raise ParseError(f"{what} is not an integer: {token!r}") from None


def _opt_int(token: str, what: str) -> int | None:
    """An integer, or None for the placeholders npu-smi prints instead of a number."""
    return None if token in _MISSING else _int(token, what)


def _opt_float(token: str, what: str) -> float | None:
    if token in _MISSING:
        return None
    try:
        return float(token)
    except ValueError:
        raise ParseError(f"{what} is not a number: {token!r}") from None


def _shape(values: list[_Value], pattern: str, what: str) -> None:
    """Check that ``values`` is singles/pairs in the order of ``pattern`` ("s" single, "p" pair).

    A wrong shape means the layout was misread or the row is damaged; failing loudly beats
    returning numbers taken from the wrong column.
    """
    actual = "".join("p" if isinstance(v, tuple) else "s" for v in values)
    if actual != pattern:
        raise ParseError(f"unexpected values in {what}: {values!r}")


# ---------------------------------------------------------------------------------------------
# `npu-smi info`


def parse_npu_smi_info(text: str) -> NpuSmiInfo:
    """Parse the main `npu-smi info` table.

    Lines before the table (login banners, the version row) are skipped while looking for the
    header row that has both ``NPU`` and ``Health``.
    """
    lines = [line.strip() for line in text.splitlines()]
    header = _find_header(lines)
    layout, has_hbm = _detect_layout(lines[header], lines[header + 1])
    tool_version, driver_version = _find_versions(lines[:header])

    chips: list[NpuChip] = []
    processes: list[NpuProcess] = []
    in_processes = process_table = False
    for block in _blocks(lines, header + 2):
        if _is_process_header(block[0]):
            in_processes = process_table = True
            block = block[1:]
        if in_processes:
            processes.extend(_parse_process_row(row) for row in block if not _is_no_process_row(row))
        else:
            chips.append(_parse_chip(block, layout, has_hbm, chips))
    if not chips:
        raise ParseError("npu-smi table lists no NPU")

    return NpuSmiInfo(
        tool_version=tool_version,
        driver_version=driver_version,
        layout=layout,
        chips=tuple(chips),
        processes=tuple(processes),
        driver_incomplete=any(_DRIVER_WARNING.match(line) for line in lines[header:]),
        process_table=process_table,
    )


def _find_header(lines: list[str]) -> int:
    """Index of the first header row; the second header row must follow it."""
    for index, line in enumerate(lines):
        if line.startswith("|") and "NPU" in line and "Health" in line:
            if index + 1 >= len(lines) or not lines[index + 1].startswith("|"):
                raise ParseError("npu-smi table header has no second row (Chip ... Bus-Id)")
            return index
    raise ParseError("no npu-smi table header (NPU ... Health) found")


def _detect_layout(row1: str, row2: str) -> tuple[str, bool]:
    """Layout name and whether chip rows carry an HBM pair, read from the two header rows.

    A3 classic and A3 wide print the same header words; only the padding of the value columns
    tells them apart, so the distance from ``Power(W)`` to ``Temp(C)`` is measured.
    """
    has_hbm = "HBM-Usage" in row2
    if _cells(row1)[0].split() == ["NPU", "ID"]:
        return LAYOUT_950, has_hbm
    first = _cells(row2)[0].split()
    if first == ["Chip"]:
        return LAYOUT_A2, has_hbm
    if first == ["Chip", "Device"]:
        return LAYOUT_310P, has_hbm
    if first == ["Chip", "Phy-ID"]:
        power, temp = row1.find("Power(W)"), row1.find("Temp(C)")
        wide = power >= 0 and temp - power >= _WIDE_POWER_COLUMN
        return (LAYOUT_A3_WIDE if wide else LAYOUT_A3), has_hbm
    raise ParseError(f"unknown npu-smi table layout: second header row starts with {' '.join(first)!r}")


def _find_versions(lines: list[str]) -> tuple[str | None, str | None]:
    """Tool version (after ``npu-smi``) and driver version (after ``Version:``); they can differ."""
    for line in lines:
        match = _VERSION_ROW.match(line)
        if match:
            return match.group(1), match.group(2) or None
    return None, None


def _blocks(lines: list[str], start: int) -> list[list[str]]:
    """Table rows grouped between separator lines, from ``start`` to the end of the table.

    The table ends at the first line that is neither a row nor a separator (the [WARNING]
    trailer, a blank line, a shell prompt). A row cut off before its closing ``|``, or rows
    left open at the end, mean the output was truncated.
    """
    blocks: list[list[str]] = []
    current: list[str] = []
    end = len(lines)
    for index in range(start, len(lines)):
        line = lines[index]
        if _SEPARATOR.match(line):
            if current:
                blocks.append(current)
                current = []
        elif line.startswith("|"):
            if len(line) < 2 or not line.endswith("|"):
                raise ParseError(f"truncated npu-smi table row: {line[:60]!r}")
            current.append(line)
        else:
            end = index
            break
    if current:
        raise ParseError(f"npu-smi table ends without a separator line after {current[-1][:60]!r}")
    # A stray line (a message, a separator cut short) inside the table would end it early and the
    # NPUs below it would vanish from a table that still looks healthy.
    for line in lines[end + 1:]:
        if line.startswith(("|", "+-", "+=")):
            raise ParseError(f"npu-smi table broken by {lines[end][:60]!r}: table lines follow it")
    return blocks


def _is_process_header(row: str) -> bool:
    return "Process id" in row and "Process name" in row


def _parse_chip(block: list[str], layout: str, has_hbm: bool, previous: list[NpuChip]) -> NpuChip:
    """Build a chip from its two lines (NPU id and name on line 1, chip id on line 2)."""
    if len(block) != 2:
        raise ParseError(f"expected 2 lines per chip, got {len(block)} starting with {block[0][:60]!r}")
    npu_id, name, health, power, temp = _parse_chip_line1(block[0])
    front, bus_id, values = _split_chip_line2(block[1])

    chip_id, phy_id = _chip_ids(front, layout, npu_id, previous)
    _shape(values, "spp" if has_hbm else "sp", f"second line of NPU {npu_id}")
    hbm_used, hbm_total = values[2] if has_hbm else (None, None)
    mem_used, mem_total = values[1]
    return NpuChip(
        npu_id=npu_id,
        chip_id=chip_id,
        phy_id=phy_id,
        name=name,
        health=health,
        power_w=power,
        temp_c=temp,
        bus_id=bus_id,
        aicore_pct=_opt_int(values[0], "AICore(%)"),
        memory_used_mb=_opt_int(mem_used, "Memory-Usage used"),
        memory_total_mb=_opt_int(mem_total, "Memory-Usage total"),
        hbm_used_mb=None if hbm_used is None else _opt_int(hbm_used, "HBM-Usage used"),
        hbm_total_mb=None if hbm_total is None else _opt_int(hbm_total, "HBM-Usage total"),
    )


def _parse_chip_line1(row: str) -> tuple[int, str, str, float | None, int | None]:
    """``| <npu> <name> | <health> | <power> <temp> <hp used> / <hp total> |``.

    The 950 layout puts the NPU id and the name in two cells; joining every cell before the
    health cell reads both forms the same way.
    """
    cells = _cells(row)
    if len(cells) < 3:
        raise ParseError(f"chip line has fewer than 3 cells: {row[:60]!r}")
    front = " ".join(cells[:-2]).split()
    if len(front) < 2:
        raise ParseError(f"chip line lacks NPU id or name: {row[:60]!r}")
    health = cells[-2]
    if not health:
        raise ParseError(f"chip line has an empty Health cell: {row[:60]!r}")
    npu_id = _int(front[0], "NPU id")
    values = _values(cells[-1])
    # npu-smi before 21.0.4 has no Hugepages-Usage column: power and temperature only.
    if len(values) != 2:
        _shape(values, "ssp", f"first line of NPU {npu_id}")
    power = _opt_float(values[0], "Power(W)")
    temp = _opt_int(values[1], "Temp(C)")
    return npu_id, " ".join(front[1:]), health, power, temp


def _split_chip_line2(row: str) -> tuple[list[str], str, list[_Value]]:
    """``| <chip> [<phy/device>] | <bus id> | <aicore> <mem pair> [<hbm pair>] |``."""
    cells = _cells(row)
    if len(cells) < 3:
        raise ParseError(f"chip line has fewer than 3 cells: {row[:60]!r}")
    return " ".join(cells[:-2]).split(), cells[-2], _values(cells[-1])


def _chip_ids(front: list[str], layout: str, npu_id: int, previous: list[NpuChip]) -> tuple[int, int | None]:
    """Chip id and phy id from the first cell of line 2, as the layout defines it.

    A2 prints only the chip id; A3 adds the Phy-ID and 310P the logic Device id. The 950 layout
    prints neither, so there (and only there) the chip id is the position inside the NPU.
    """
    if layout == LAYOUT_950:
        if front:
            raise ParseError(f"unexpected chip id cell on the 950 layout: {front!r}")
        return sum(1 for chip in previous if chip.npu_id == npu_id), None
    expected = 1 if layout == LAYOUT_A2 else 2
    if len(front) != expected:
        raise ParseError(f"chip cell of NPU {npu_id} should have {expected} value(s) on layout {layout}: {front!r}")
    chip_id = _int(front[0], "Chip id")
    phy_id = _int(front[1], "Phy-ID/Device") if expected == 2 else None
    return chip_id, phy_id


def _is_no_process_row(row: str) -> bool:
    return bool(_NO_PROCESSES.match(_cells(row)[0]))


def _parse_process_row(row: str) -> NpuProcess:
    """``| <npu> <chip> | <pid> | <name> | <MB> [| <pid in container>] |``.

    The 950 (NPU_SMI_V2) form has only the NPU id in the first cell; its chip is 0.
    """
    cells = _cells(row)
    if len(cells) < 4:
        raise ParseError(f"process row has fewer than 4 cells: {row[:60]!r}")
    ids = cells[0].split()
    if len(ids) not in (1, 2):
        raise ParseError(f"process row should start with NPU [Chip]: {row[:60]!r}")
    return NpuProcess(
        npu_id=_int(ids[0], "process NPU id"),
        chip_id=_int(ids[1], "process chip id") if len(ids) == 2 else 0,
        pid=_int(cells[1], "Process id"),
        name=cells[2],
        memory_mb=_int(cells[3], "Process memory(MB)"),
    )


# ---------------------------------------------------------------------------------------------
# `npu-smi info -m`

_MAPPING_FIELDS = {
    "NPU ID": "npu_id",
    "Chip ID": "chip_id",
    "Chip Logic ID": "logic_id",
    "Chip Phy-ID": "phy_id",
    "Slot ID": None,  # 950 only; not part of NpuMapping
    "Chip Name": "name",
}


def parse_npu_smi_mapping(text: str) -> tuple[NpuMapping, ...]:
    """Parse `npu-smi info -m`.

    Columns are 30 wide behind a TAB, but copies show 8 spaces, 4 spaces or nothing, and some
    rows carry trailing blanks. The header names the columns; every column but the last holds
    one token, and the name is the rest of the line (``Ascend 910B4`` contains a space).
    """
    lines = [line.strip() for line in text.splitlines()]
    header = next(
        (i for i, line in enumerate(lines) if line.startswith("NPU ID") and "Chip ID" in line),
        None,
    )
    if header is None:
        raise ParseError("no npu-smi -m header (NPU ID ... Chip ID) found")
    columns = re.split(r"\s{2,}", lines[header])
    unknown = [c for c in columns if c not in _MAPPING_FIELDS]
    if unknown or columns[-1] != "Chip Name":
        raise ParseError(f"unexpected npu-smi -m columns: {columns!r}")

    rows = tuple(_parse_mapping_row(line, columns) for line in lines[header + 1 :] if line)
    if not rows:
        raise ParseError("npu-smi -m table lists no chip")
    return rows


def _parse_mapping_row(line: str, columns: list[str]) -> NpuMapping:
    parts = line.split(None, len(columns) - 1)
    if len(parts) != len(columns):
        raise ParseError(f"npu-smi -m row has {len(parts)} of {len(columns)} columns: {line[:60]!r}")
    fields: dict[str, str] = {}
    for column, value in zip(columns, parts):
        if _MAPPING_FIELDS[column]:
            fields[_MAPPING_FIELDS[column]] = value

    def optional(key: str) -> int | None:
        value = fields.get(key)
        return None if value is None or value == "-" else _int(value, key)

    return NpuMapping(
        npu_id=_int(fields["npu_id"], "NPU ID"),
        chip_id=_int(fields["chip_id"], "Chip ID"),
        logic_id=optional("logic_id"),
        phy_id=optional("phy_id"),
        name=fields["name"],
    )
