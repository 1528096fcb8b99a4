"""Unit tests of preflight.parsers.npu_smi on the captured fixtures (see tests/fixtures/ascend/MANIFEST.md)."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from preflight.parsers import ParseError
from preflight.parsers.npu_smi import (
    NpuChip,
    NpuMapping,
    NpuProcess,
    parse_npu_smi_info,
    parse_npu_smi_mapping,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ascend"

A2_B4_IDLE = "npu-smi/info/a2-910b4-25.0.rc1.1-idle.txt"
A2_B1_NO_PROC = "npu-smi/info/a2-910b1-23.0.rc2-idle-no-proc-section.txt"
A2_B1_BUSY = "npu-smi/info/a2-910b1-23.0.rc3.3-busy-2npu-docstring.txt"
A2_B4_WARNING = "npu-smi/info/a2-910b4-25.0.rc1.1-driver-incomplete-warning.txt"
A3_CLASSIC = "npu-smi/info/a3-ascend910-24.1.rc3.7-classic-idle.txt"
A3_WIDE = "npu-smi/info/a3-ascend910-26.0.rc2-wide.txt"
P310_HOST = "npu-smi/info/310p3-24.1.rc2-host-npu1-2.txt"
P310_DUO = "npu-smi/info/310p3-25.2.0-duo-npu2-3.txt"
A1_NO_HUGEPAGES = "npu-smi/info/a1-910a-21.0.2-no-hugepages.txt"
P310_OLD = "npu-smi/info/310-21.0.3.1-200dk.txt"
HEALTH_VARIANTS = {
    "npu-smi/info/a2-910b4-25.0.rc1.1-health-alarm-npu5.txt": (5, "Alarm"),
    "npu-smi/info/a2-910b4-25.0.rc1.1-health-critical-npu0.txt": (0, "Critical"),
    "npu-smi/info/a2-910b4-25.0.rc1.1-health-unknown-npu7.txt": (7, "UNKNOWN"),
    "npu-smi/info/a2-910b4-25.0.rc1.1-health-warning-npu3.txt": (3, "Warning"),
}
ALL_INFO = sorted(str(p.relative_to(FIXTURES)) for p in (FIXTURES / "npu-smi" / "info").glob("*.txt"))


def read(relative: str) -> str:
    return (FIXTURES / relative).read_text(encoding="utf-8")


def chip(info, npu_id: int, chip_id: int = 0) -> NpuChip:
    (found,) = [c for c in info.chips if c.npu_id == npu_id and c.chip_id == chip_id]
    return found


# ---------------------------------------------------------------------------------------------
# Every layout: header facts


@pytest.mark.parametrize(
    "relative, layout, tool, driver, n_chips, npu_ids",
    [
        (A2_B4_IDLE, "a2", "25.0.rc1.1", "25.0.rc1.1", 8, tuple(range(8))),
        (A2_B1_NO_PROC, "a2", "23.0.rc2", "23.0.rc2", 8, tuple(range(8))),
        (A2_B1_BUSY, "a2", "23.0.rc3.3", "23.0.rc3.3", 2, (0, 1)),
        (A2_B4_WARNING, "a2", "25.0.rc1.1", "25.0.rc1.1", 8, tuple(range(8))),
        *[(rel, "a2", "25.0.rc1.1", "25.0.rc1.1", 8, tuple(range(8))) for rel in HEALTH_VARIANTS],
        (A3_CLASSIC, "a3", "24.1.rc3.7", "24.1.rc3.7", 16, tuple(range(8))),
        (A3_WIDE, "a3-wide", "26.0.rc2", "26.0.rc2", 16, tuple(range(8))),
        (P310_HOST, "310p", "24.1.rc2", "24.1.rc2", 4, (1, 2)),
        (P310_DUO, "310p", "25.2.0", "25.2.0", 4, (2, 3)),
        (A1_NO_HUGEPAGES, "a2", "21.0.2", "21.0.2", 2, (1, 4)),
        (P310_OLD, "310p", "21.0.3.1", "21.0.3.1", 1, (0,)),
    ],
)
def test_info_layout_versions_and_ids(relative, layout, tool, driver, n_chips, npu_ids):
    info = parse_npu_smi_info(read(relative))
    assert info.layout == layout
    assert info.tool_version == tool
    assert info.driver_version == driver
    assert len(info.chips) == n_chips
    assert info.npu_ids == npu_ids


def test_npu_smi_before_21_0_4_has_no_hugepages_column():
    """Its first chip line holds power and temperature only: every NPU check errored on such a node."""
    info = parse_npu_smi_info(read(A1_NO_HUGEPAGES))
    assert chip(info, 4) == NpuChip(npu_id=4, chip_id=0, phy_id=None, name="910A", health="OK", power_w=65.6,
                                    temp_c=58, bus_id="0000:86:00.0", aicore_pct=0, memory_used_mb=1809,
                                    memory_total_mb=15079, hbm_used_mb=0, hbm_total_mb=32768)
    small = chip(parse_npu_smi_info(read(P310_OLD)), 0)
    assert (small.name, small.power_w, small.temp_c, small.memory_used_mb, small.hbm_total_mb) == ("310", 12.8, 58, 5324, None)


def test_every_info_fixture_is_covered_by_the_layout_table():
    covered = {A2_B4_IDLE, A2_B1_NO_PROC, A2_B1_BUSY, A2_B4_WARNING, A3_CLASSIC, A3_WIDE, P310_HOST, P310_DUO,
               A1_NO_HUGEPAGES, P310_OLD}
    assert set(ALL_INFO) == covered | set(HEALTH_VARIANTS)


@pytest.mark.parametrize("relative", ALL_INFO)
def test_driver_incomplete_only_on_the_warning_fixture(relative):
    assert parse_npu_smi_info(read(relative)).driver_incomplete is (relative == A2_B4_WARNING)


# ---------------------------------------------------------------------------------------------
# L1: A2


def test_a2_910b4_idle_values():
    info = parse_npu_smi_info(read(A2_B4_IDLE))
    assert info.chips[0] == NpuChip(
        npu_id=0, chip_id=0, phy_id=None, name="910B4", health="OK", power_w=87.2, temp_c=33,
        bus_id="0000:C1:00.0", aicore_pct=0, memory_used_mb=0, memory_total_mb=0,
        hbm_used_mb=2654, hbm_total_mb=32768,
    )
    assert [c.bus_id[5:7] for c in info.chips] == ["C1", "C2", "81", "82", "01", "02", "41", "42"]
    assert [c.power_w for c in info.chips] == [87.2, 82.7, 82.7, 89.1, 84.5, 84.8, 87.1, 81.6]
    assert chip(info, 7).hbm_used_mb == 2653
    assert {c.health for c in info.chips} == {"OK"}
    assert all(c.chip_id == 0 and c.phy_id is None for c in info.chips)
    # The process section only has "No running processes found in NPU N" rows.
    assert info.processes == ()


def test_a2_910b1_without_process_section():
    info = parse_npu_smi_info(read(A2_B1_NO_PROC))
    assert info.processes == () and not info.process_table
    assert parse_npu_smi_info(read(A2_B4_IDLE)).process_table
    assert chip(info, 0).power_w == 88.4
    assert chip(info, 0).temp_c == 46
    assert [c.hbm_used_mb for c in info.chips] == [4175, 4175, 4175, 4175, 4174, 4175, 4175, 4174]
    assert {c.hbm_total_mb for c in info.chips} == {65536}
    assert chip(info, 7).bus_id == "0000:42:00.0"


def test_a2_busy_docstring_five_digit_hbm_and_processes():
    """The version row is one character short and the used HBM value touches the slash."""
    info = parse_npu_smi_info(read(A2_B1_BUSY))
    assert (chip(info, 0).hbm_used_mb, chip(info, 0).hbm_total_mb) == (65099, 65536)
    assert (chip(info, 1).hbm_used_mb, chip(info, 1).hbm_total_mb) == (65098, 65536)
    assert (chip(info, 0).aicore_pct, chip(info, 1).aicore_pct) == (55, 66)
    assert (chip(info, 0).power_w, chip(info, 1).power_w) == (271.1, 275.0)
    assert info.processes == (
        NpuProcess(npu_id=0, chip_id=0, pid=576489, name="python", memory_mb=60703),
        NpuProcess(npu_id=1, chip_id=0, pid=576491, name="python", memory_mb=60704),
    )


@pytest.mark.parametrize("relative", sorted(HEALTH_VARIANTS))
def test_health_is_returned_as_printed_for_the_changed_npu_only(relative):
    npu_id, health = HEALTH_VARIANTS[relative]
    info = parse_npu_smi_info(read(relative))
    assert chip(info, npu_id).health == health
    assert {c.health for c in info.chips if c.npu_id != npu_id} == {"OK"}
    # Everything but the health cell is the idle capture.
    idle = parse_npu_smi_info(read(A2_B4_IDLE))
    assert dataclasses.replace(chip(info, npu_id), health="OK") == chip(idle, npu_id)


def test_health_alarm_on_npu5():
    info = parse_npu_smi_info(read("npu-smi/info/a2-910b4-25.0.rc1.1-health-alarm-npu5.txt"))
    assert chip(info, 5).health == "Alarm"


def test_driver_warning_fixture_has_the_idle_table():
    warned = parse_npu_smi_info(read(A2_B4_WARNING))
    idle = parse_npu_smi_info(read(A2_B4_IDLE))
    assert warned.driver_incomplete is True
    assert dataclasses.replace(warned, driver_incomplete=False) == idle


# ---------------------------------------------------------------------------------------------
# L2 / L3: A3


@pytest.mark.parametrize("relative", [A3_CLASSIC, A3_WIDE])
def test_a3_dies_phy_ids_and_die1_power(relative):
    info = parse_npu_smi_info(read(relative))
    assert [c.phy_id for c in info.chips] == list(range(16))
    assert [c.chip_id for c in info.chips] == [0, 1] * 8
    assert [c.npu_id for c in info.chips] == [n for n in range(8) for _ in (0, 1)]
    assert {c.name for c in info.chips} == {"Ascend910"}
    # Die 1 reports no power ("-"), die 0 does.
    assert all(c.power_w is None for c in info.chips if c.chip_id == 1)
    assert all(isinstance(c.power_w, float) for c in info.chips if c.chip_id == 0)
    assert chip(info, 0, 0).bus_id == "0000:9D:00.0"
    assert chip(info, 7, 1).bus_id == "0000:83:00.0"
    assert {c.hbm_total_mb for c in info.chips} == {65536}


def test_a3_classic_values():
    info = parse_npu_smi_info(read(A3_CLASSIC))
    assert chip(info, 0, 0) == NpuChip(
        npu_id=0, chip_id=0, phy_id=0, name="Ascend910", health="OK", power_w=178.8, temp_c=36,
        bus_id="0000:9D:00.0", aicore_pct=0, memory_used_mb=0, memory_total_mb=0,
        hbm_used_mb=3397, hbm_total_mb=65536,
    )
    assert chip(info, 6, 1).hbm_used_mb == 3203
    assert chip(info, 6, 1).phy_id == 13
    assert info.processes == ()


def test_a3_wide_values_and_processes():
    info = parse_npu_smi_info(read(A3_WIDE))
    assert chip(info, 0, 0).power_w == 162.6
    assert chip(info, 0, 1).hbm_used_mb == 2874
    assert (chip(info, 7, 1).hbm_used_mb, chip(info, 7, 1).hbm_total_mb) == (31877, 65536)
    assert info.processes == (
        NpuProcess(npu_id=0, chip_id=0, pid=632268, name="python3.1", memory_mb=197),
        NpuProcess(npu_id=7, chip_id=1, pid=632301, name="python3.1", memory_mb=28402),
    )


# ---------------------------------------------------------------------------------------------
# L4: 310P


def test_310p_host_capture():
    info = parse_npu_smi_info(read(P310_HOST))
    assert info.npu_ids == (1, 2)
    assert chip(info, 1, 0) == NpuChip(
        npu_id=1, chip_id=0, phy_id=0, name="310P3", health="OK", power_w=None, temp_c=59,
        bus_id="0000:01:00.0", aicore_pct=0, memory_used_mb=1397, memory_total_mb=44280,
        hbm_used_mb=None, hbm_total_mb=None,
    )
    assert [(c.npu_id, c.chip_id, c.phy_id) for c in info.chips] == [(1, 0, 0), (1, 1, 1), (2, 0, 2), (2, 1, 3)]
    assert all(c.power_w is None and c.hbm_used_mb is None and c.hbm_total_mb is None for c in info.chips)
    assert chip(info, 2, 1).memory_used_mb == 1518
    assert info.processes == ()


def test_310p_duo_chips_share_a_bus_id():
    info = parse_npu_smi_info(read(P310_DUO))
    assert info.npu_ids == (2, 3)
    assert chip(info, 2, 0).bus_id == chip(info, 2, 1).bus_id == "0000:01:00.0"
    assert chip(info, 3, 0).bus_id == chip(info, 3, 1).bus_id == "0000:02:00.0"
    assert [c.temp_c for c in info.chips] == [70, 69, 68, 67]
    assert [(c.memory_used_mb, c.memory_total_mb) for c in info.chips] == [
        (1417, 44216), (1516, 43757), (1420, 44216), (1509, 43757),
    ]
    assert [c.phy_id for c in info.chips] == [0, 1, 2, 3]


# ---------------------------------------------------------------------------------------------
# L5: Ascend 950 (no public capture; rows rebuilt from the driver source's printf formats)

_950_LINE1 = "| %-7d| %-17s| %-13s | %-11.1f %-17d %-6d/ %-13d |"
_950_LINE2 = "|%-8s|%-18s| %s | %-11d %-5d/ %-10d %-6d/ %-13d |"
_950_PROC = "| %-26d | %-13d | %-24s | %-23d |"


def _build_950() -> str:
    sep = "+========+==================+===============+=====================================================+"
    lines = [
        "+-------------------------------------------------------------------------------------------------+",
        "| npu-smi %-40s Version: %-37s |" % ("25.7.rc1", "25.7.rc1"),
        "+--------+------------------+---------------+-----------------------------------------------------+",
        "| NPU ID | Name             | Health        | Power(W)    Temp(C)           Hugepages-Usage(page) |",
        "|        |                  | Bus-Id        | NPU Util(%) Memory-Usage(MB)  HBM-Usage(MB)         |",
        sep,
        _950_LINE1 % (0, "Ascend950PR", "OK", 120.5, 40, 0, 0),
        _950_LINE2 % ("", "", "0000:9D:00.0", 3, 0, 0, 123456, 131072),
        sep,
        _950_LINE1 % (1, "Ascend950PR", "Warning", 99.0, 41, 0, 0),
        _950_LINE2 % ("", "", "0000:9F:00.0", 0, 0, 0, 2048, 131072),
        sep,
        "+---------------------------+---------------+-----------------------------------------------------+",
        "| NPU ID                    | Process id    | Process name             | Process memory(MB)       |",
        "+===========================+===============+=====================================================+",
        _950_PROC % (0, 4242, "python", 120000),
        "+===========================+===============+=====================================================+",
        "| No running processes found in NPU 1                                                             |",
        "+===========================+===============+=====================================================+",
    ]
    return "\n".join(lines) + "\n"


def test_950_layout_from_source_format():
    info = parse_npu_smi_info(_build_950())
    assert info.layout == "950"
    assert (info.tool_version, info.driver_version) == ("25.7.rc1", "25.7.rc1")
    assert info.npu_ids == (0, 1)
    assert info.chips[0] == NpuChip(
        npu_id=0, chip_id=0, phy_id=None, name="Ascend950PR", health="OK", power_w=120.5, temp_c=40,
        bus_id="0000:9D:00.0", aicore_pct=3, memory_used_mb=0, memory_total_mb=0,
        hbm_used_mb=123456, hbm_total_mb=131072,
    )
    assert info.chips[1].health == "Warning"
    assert info.processes == (NpuProcess(npu_id=0, chip_id=0, pid=4242, name="python", memory_mb=120000),)


# ---------------------------------------------------------------------------------------------
# Robustness of the table reader


def test_banner_lines_before_the_table_are_ignored():
    banner = "Authorized users only.\nLast login: Tue Aug  1 14:43:40 2023 from 10.0.0.1\n\n"
    assert parse_npu_smi_info(banner + read(A3_WIDE)) == parse_npu_smi_info(read(A3_WIDE))


def test_indented_and_crlf_copies_parse_the_same():
    text = read(P310_HOST)
    indented = "".join("        " + line for line in text.splitlines(keepends=True))
    crlf = text.replace("\n", "\r\n")
    expected = parse_npu_smi_info(text)
    assert parse_npu_smi_info(indented) == expected
    assert parse_npu_smi_info(crlf) == expected


def test_tool_and_driver_version_can_differ():
    text = read(A2_B4_IDLE).replace(
        "| npu-smi 25.0.rc1.1               Version: 25.0.rc1.1  ",
        "| npu-smi 24.1.0                   Version: 23.0.6      ",
    )
    info = parse_npu_smi_info(text)
    assert (info.tool_version, info.driver_version) == ("24.1.0", "23.0.6")


def test_missing_version_row_gives_none():
    lines = read(A3_CLASSIC).splitlines(keepends=True)
    info = parse_npu_smi_info("".join(lines[2:]))  # drop the top border and the version row
    assert (info.tool_version, info.driver_version) == (None, None)
    assert len(info.chips) == 16


def test_frozen_dataclasses():
    info = parse_npu_smi_info(read(A2_B4_IDLE))
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.chips[0].health = "Alarm"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.layout = "a3"  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------
# Rejected inputs: always ParseError, never another exception


def _random_binary(seed: int, size: int = 4096) -> str:
    rng = random.Random(seed)
    return bytes(rng.randrange(256) for _ in range(size)).decode("utf-8", errors="replace")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n   \n",
        "Invalid card id.\n",
        "bash: npu-smi: command not found\n",
        "dcmi module initialize failed. ret is -8005\n",
        _random_binary(0),
        _random_binary(1),
        "|||||\n+-+\n| NPU |\n",
    ],
    ids=["empty", "blank", "invalid-card", "not-found", "dcmi-error", "binary0", "binary1", "pipes"],
)
def test_non_table_text_raises_parse_error(text):
    with pytest.raises(ParseError, match="no npu-smi table header"):
        parse_npu_smi_info(text)


def test_invalid_card_id_fixture_raises_parse_error():
    with pytest.raises(ParseError):
        parse_npu_smi_info(read("npu-smi/board/invalid-card-id.txt"))


def test_header_without_chip_rows_raises():
    header = "".join(read(A2_B4_IDLE).splitlines(keepends=True)[:6])
    with pytest.raises(ParseError, match="lists no NPU"):
        parse_npu_smi_info(header)


def test_header_without_second_row_raises():
    header = "".join(read(A2_B4_IDLE).splitlines(keepends=True)[:4])
    with pytest.raises(ParseError, match="second row"):
        parse_npu_smi_info(header)


def test_table_cut_after_the_first_chip_line_raises():
    lines = read(A2_B4_IDLE).splitlines(keepends=True)
    with pytest.raises(ParseError):
        parse_npu_smi_info("".join(lines[:7]))


def test_table_cut_inside_a_row_raises():
    """The shape of the cut-off 310P excerpt in the reference doc: a row that stops after its first cell."""
    lines = read(P310_DUO).splitlines(keepends=True)
    text = "".join(lines[:12]) + "| 3       310P3                 |\n"
    with pytest.raises(ParseError):
        parse_npu_smi_info(text)
    text = "".join(lines[:12]) + lines[12][:40]
    with pytest.raises(ParseError, match="truncated"):
        parse_npu_smi_info(text)


def test_table_cut_before_the_closing_separator_raises():
    lines = read(A3_CLASSIC).splitlines(keepends=True)
    with pytest.raises(ParseError, match="separator"):
        parse_npu_smi_info("".join(lines[:8]))


@pytest.mark.parametrize("relative", ALL_INFO)
def test_any_truncation_parses_or_raises_parse_error(relative):
    text = read(relative)
    for cut in range(0, len(text), 5):
        try:
            info = parse_npu_smi_info(text[:cut])
        except ParseError:
            continue
        assert info.chips, cut


def test_unknown_second_header_row_raises():
    text = read(A2_B4_IDLE).replace("| Chip                      | Bus-Id", "| Slot                      | Bus-Id")
    with pytest.raises(ParseError, match="unknown npu-smi table layout"):
        parse_npu_smi_info(text)


@pytest.mark.parametrize(
    "old, new",
    [
        ("| 0     910B4               | OK            | 87.2        33 ", "| 0     910B4               | OK            | 87.2        hot"),
        ("| 0     910B4               | OK            | 87.2 ", "| 0     910B4               | OK            | many "),
        ("| 0     910B4               | OK ", "| X     910B4               | OK "),
        ("| 0     910B4               | OK            |", "| 0     910B4               |               |"),
        ("| 0                         | 0000:C1:00.0  | 0           0    / 0          2654 / 32768 ",
         "| 0                         | 0000:C1:00.0  | 0           0    / 0          2654   32768 "),
        ("| 0                         | 0000:C1:00.0", "| 0     7                   | 0000:C1:00.0"),
        ("| No running processes found in NPU 0     ", "| 0       0 | 12x | python | 5        "),
    ],
    ids=["temp", "power", "npu-id", "health", "hbm-pair", "a2-phy", "process"],
)
def test_damaged_cells_raise_parse_error(old, new):
    text = read(A2_B4_IDLE)
    assert old in text
    with pytest.raises(ParseError):
        parse_npu_smi_info(text.replace(old, new, 1))


def test_process_row_with_too_few_cells_raises():
    text = read(A2_B1_BUSY).replace("| 576489        | python                   |", "| 576489        python                    |")
    with pytest.raises(ParseError, match="process row"):
        parse_npu_smi_info(text)


# ---------------------------------------------------------------------------------------------
# `npu-smi info -m`


def test_mapping_910a_tab_indented():
    rows = parse_npu_smi_mapping(read("npu-smi/info-m/a1-910a-8npu-tab.txt"))
    assert rows == tuple(NpuMapping(npu_id=n, chip_id=0, logic_id=n, phy_id=None, name="Ascend 910A") for n in range(8))


def test_mapping_910b4_with_mcu_rows():
    rows = parse_npu_smi_mapping(read("npu-smi/info-m/a2-910b4-8npu-mcu.txt"))
    assert len(rows) == 16
    chips = [r for r in rows if r.name == "Ascend 910B4"]
    mcus = [r for r in rows if r.name == "Mcu"]
    assert [(r.npu_id, r.chip_id, r.logic_id) for r in chips] == [(n, 0, n) for n in range(8)]
    assert [(r.npu_id, r.chip_id, r.logic_id) for r in mcus] == [(n, 1, None) for n in range(8)]
    assert all(r.phy_id is None for r in rows)


def test_mapping_container_npu_ids_are_labels():
    rows = parse_npu_smi_mapping(read("npu-smi/info-m/a2-910b3-npu3-4-docstring.txt"))
    assert rows == (
        NpuMapping(npu_id=3, chip_id=0, logic_id=0, phy_id=None, name="Ascend 910B3"),
        NpuMapping(npu_id=3, chip_id=1, logic_id=None, phy_id=None, name="Mcu"),
        NpuMapping(npu_id=4, chip_id=0, logic_id=1, phy_id=None, name="Ascend 910B3"),
        NpuMapping(npu_id=4, chip_id=1, logic_id=None, phy_id=None, name="Mcu"),
    )


def test_mapping_a3_has_phy_ids():
    rows = parse_npu_smi_mapping(read("npu-smi/info-m/a3-ascend910-partial-test-fixture.txt"))
    assert rows == (
        NpuMapping(npu_id=0, chip_id=0, logic_id=0, phy_id=0, name="Ascend910"),
        NpuMapping(npu_id=0, chip_id=1, logic_id=1, phy_id=1, name="Ascend910"),
        NpuMapping(npu_id=0, chip_id=2, logic_id=None, phy_id=None, name="Mcu"),
        NpuMapping(npu_id=1, chip_id=0, logic_id=2, phy_id=2, name="Ascend910"),
    )


def test_mapping_950_form_from_source():
    """`print_mapping_info_950`: Slot ID instead of Chip Logic ID."""
    header = "\t%-30s %-30s %-30s %-30s %-30s\n" % ("NPU ID", "Slot ID", "Chip ID", "Chip Phy-ID", "Chip Name")
    row = "\t%-30d %-30d %-30d %-30d %s\n" % (0, 1, 0, 0, "Ascend950PR")
    assert parse_npu_smi_mapping(header + row) == (
        NpuMapping(npu_id=0, chip_id=0, logic_id=None, phy_id=0, name="Ascend950PR"),
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "There is no NPU card on this server.\n",
        "Invalid card id.\n",
        _random_binary(2),
        read(A2_B4_IDLE),
    ],
    ids=["empty", "no-card", "invalid-card", "binary", "main-table"],
)
def test_mapping_without_header_raises(text):
    with pytest.raises(ParseError, match="no npu-smi -m header"):
        parse_npu_smi_mapping(text)


def test_mapping_header_without_rows_raises():
    header = read("npu-smi/info-m/a1-910a-8npu-tab.txt").splitlines()[0] + "\n"
    with pytest.raises(ParseError, match="lists no chip"):
        parse_npu_smi_mapping(header)


@pytest.mark.parametrize(
    "row",
    ["\t0                              0\n", "\tx                              0                              0                              Ascend 910A\n",
     "\t0                              0                              zero                           Ascend 910A\n"],
    ids=["short", "npu-id", "logic-id"],
)
def test_mapping_damaged_rows_raise(row):
    header = read("npu-smi/info-m/a1-910a-8npu-tab.txt").splitlines()[0] + "\n"
    with pytest.raises(ParseError):
        parse_npu_smi_mapping(header + row)


def test_mapping_unknown_column_raises():
    text = read("npu-smi/info-m/a1-910a-8npu-tab.txt").replace("Chip Logic ID ", "Chip Magic ID ")
    with pytest.raises(ParseError, match="columns"):
        parse_npu_smi_mapping(text)


def test_chips_by_device_number():
    # hccn_tool -i and /dev/davinciN take the device number: A3's Phy-ID (two dies per NPU), 310P's
    # Device id, else (one chip per NPU) the NPU id itself.
    a3 = parse_npu_smi_info(read(A3_CLASSIC)).by_device()
    assert sorted(a3) == list(range(16)) and (a3[13].npu_id, a3[13].chip_id) == (6, 1)
    a2 = parse_npu_smi_info(read(A2_B4_IDLE)).by_device()
    assert sorted(a2) == list(range(8)) and all(c.npu_id == d and c.chip_id == 0 for d, c in a2.items())
    duo = parse_npu_smi_info(read(P310_DUO))
    by_device = duo.by_device()
    assert by_device is not None and len(by_device) == len(duo.chips)
    assert {(c.npu_id, c.chip_id) for c in by_device.values()} == {(c.npu_id, c.chip_id) for c in duo.chips}


@pytest.mark.parametrize("stray", ["dcmi_get_device_info failed, ret = -8020", "", "+-------------------"])
def test_a_stray_line_inside_the_table_raises_instead_of_dropping_the_npus_below_it(stray):
    # Ended at the stray line, the table read as 3 healthy NPUs of 8.
    lines = read(A2_B4_IDLE).splitlines()
    seps = [i for i, line in enumerate(lines) if line.startswith("+")]
    cut = seps[4]  # after NPU 2's block
    broken = "\n".join(lines[:cut + 1] + [stray] + lines[cut + 1:]) + "\n"
    with pytest.raises(ParseError, match="table lines follow it"):
        parse_npu_smi_info(broken)
