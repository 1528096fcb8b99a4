"""Unit tests of preflight.parsers.hccn_tool on the captured fixtures (see tests/fixtures/ascend/MANIFEST.md)."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from preflight.parsers import ParseError
from preflight.parsers.hccn_tool import (
    HccnIp,
    LinkStat,
    LinkStatRecord,
    PingBlock,
    PingResult,
    TlsSwitch,
    parse_ip,
    parse_ip_lines,
    parse_link,
    parse_link_stat,
    parse_net_health,
    parse_netdetect,
    parse_ping,
    parse_ping_blocks,
    parse_tls,
    parse_tls_lines,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ascend" / "hccn_tool"


def read(relative: str) -> str:
    return (FIXTURES / relative).read_text(encoding="utf-8")


def _random_binary(seed: int, size: int = 2048) -> str:
    rng = random.Random(seed)
    return bytes(rng.randrange(256) for _ in range(size)).decode("utf-8", errors="replace")


# Text no single-answer parser may accept.
GARBAGE = {
    "empty": "",
    "blank": "  \n\t\n",
    "invalid-card": "Invalid card id.\n",
    "cmd-failed": "Cmd execute failed!\n",
    "binary": _random_binary(0),
}
NOT_EMPTY_GARBAGE = {k: v for k, v in GARBAGE.items() if v.strip()}


# ---------------------------------------------------------------------------------------------
# -link -g


@pytest.mark.parametrize("relative, state", [("link/up.txt", "UP"), ("link/down.txt", "DOWN")])
def test_link_fixtures(relative, state):
    assert parse_link(read(relative)) == state


@pytest.mark.parametrize("text, state", [("link status : UP\n", "UP"), ("link status:DOWN", "DOWN"), ("\nlink status: UP  \n\n", "UP")])
def test_link_variants(text, state):
    """The 950 driver prints a blank before the colon."""
    assert parse_link(text) == state


@pytest.mark.parametrize(
    "text",
    [*GARBAGE.values(), "link status: \n", "link status: UNKNOWN\n", "vnic link status: UP\n",
     "link status: UP\nlink status: DOWN\n", read("ip/a2-dev3.txt")],
    ids=[*GARBAGE, "no-value", "other-value", "vnic", "two-lines", "ip-output"],
)
def test_link_rejects(text):
    with pytest.raises(ParseError):
        parse_link(text)


# ---------------------------------------------------------------------------------------------
# -ip -g


def test_ip_single_device():
    assert parse_ip(read("ip/a2-dev3.txt")) == HccnIp(address="29.1.112.213", netmask="255.255.0.0")


@pytest.mark.parametrize("text", [read("ip/unconfigured-empty.txt"), "\n", "  \n"], ids=["fixture", "newline", "blanks"])
def test_ip_unconfigured_is_none(text):
    assert read("ip/unconfigured-empty.txt") == ""
    assert parse_ip(text) is None


def test_ip_without_netmask_and_ipv6():
    assert parse_ip("ipaddr:29.1.112.213\n") == HccnIp("29.1.112.213", None)
    assert parse_ip("ipaddr: fe80::1\nnetmask: ffff:ffff:ffff:ffff::\n") == HccnIp("fe80::1", "ffff:ffff:ffff:ffff::")


@pytest.mark.parametrize(
    "text",
    [*NOT_EMPTY_GARBAGE.values(), read("ip/unconfigured-stderr.txt"), "netmask:255.255.0.0\n", "ipaddr:29.1.112.999\n",
     "ipaddr:not-an-ip\n", read("ip/loop-8dev.txt")],
    ids=[*NOT_EMPTY_GARBAGE, "stderr-text", "netmask-only", "bad-octet", "not-an-ip", "loop-output"],
)
def test_ip_rejects(text):
    with pytest.raises(ParseError):
        parse_ip(text)


def test_ip_lines_loop_output():
    addresses = parse_ip_lines(read("ip/loop-8dev.txt"))
    assert addresses == tuple(HccnIp(f"11.12.165.{80 + n}", "255.255.255.0") for n in range(8))


def test_ip_lines_empty_and_garbage():
    assert parse_ip_lines("") == ()
    assert parse_ip_lines(read("ip/a2-dev3.txt")) == (HccnIp("29.1.112.213", "255.255.0.0"),)
    with pytest.raises(ParseError):
        parse_ip_lines(read("ip/unconfigured-stderr.txt"))


# ---------------------------------------------------------------------------------------------
# -tls -g


def test_tls_single_device():
    assert parse_tls(read("tls/dev0-grep-switch.txt")) == TlsSwitch(dev_id=0, enabled=False)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("dev_id:3, tls switch[1](0:disable, 1:enable)\n", TlsSwitch(3, True)),  # older drivers stop here
        ("device 2, tls switch[0](0:disable, 1:enable), tls preconfigured[1](0:non-preset, 1:preset)\n", TlsSwitch(2, False)),
        ("tls switch[1](0:disable, 1:enable)\n", TlsSwitch(None, True)),
        (
            "dev_id:0, tls switch[1](0:disable, 1:enable), tls preconfigured[1](0:non-preset, 1:preset), "
            "tls alarm time threshold[60]days\n"
            "[device cert info]\nissuer: CN=root\nend time: Jan  1 00:00:00 2030 GMT\n",
            TlsSwitch(0, True),
        ),
    ],
    ids=["old-driver", "950", "no-device", "full-output-with-certificate"],
)
def test_tls_variants(text, expected):
    assert parse_tls(text) == expected


@pytest.mark.parametrize(
    "text",
    [*GARBAGE.values(), read("tls/set-enable-0-success.txt"), "dev_id:0, tls switch[2](0:disable, 1:enable)\n",
     "dev_id:0, tls preconfigured[1](0:non-preset, 1:preset)\n", read("tls/loop-8dev-grep-switch-all-disabled.txt")],
    ids=[*GARBAGE, "set-success", "value-2", "no-switch", "loop-output"],
)
def test_tls_rejects(text):
    """A missing switch line is never read as "disabled"."""
    with pytest.raises(ParseError):
        parse_tls(text)


def test_tls_no_switch_message():
    with pytest.raises(ParseError, match=r"no 'tls switch\[N\]' line"):
        parse_tls("Cmd executed successfully!\n")


def test_tls_lines_all_disabled():
    switches = parse_tls_lines(read("tls/loop-8dev-grep-switch-all-disabled.txt"))
    assert switches == tuple(TlsSwitch(dev_id=n, enabled=False) for n in range(8))


def test_tls_lines_dev5_enabled():
    switches = parse_tls_lines(read("tls/loop-8dev-grep-switch-dev5-enabled.txt"))
    assert [s.dev_id for s in switches] == list(range(8))
    assert [s.dev_id for s in switches if s.enabled] == [5]


def test_tls_lines_single_and_empty():
    assert parse_tls_lines(read("tls/dev0-grep-switch.txt")) == (TlsSwitch(0, False),)
    with pytest.raises(ParseError):
        parse_tls_lines("")


# ---------------------------------------------------------------------------------------------
# -net_health -g


@pytest.mark.parametrize(
    "relative, status",
    [
        ("net_health/success.txt", "Success"),
        ("net_health/init.txt", "Init"),
        ("net_health/socket-fail.txt", "Socket fail"),
        ("net_health/receive-timeout.txt", "Receive timeout"),
        ("net_health/unreachable.txt", "Unreachable"),
        ("net_health/time-exceeded.txt", "Time exceeded"),
        ("net_health/fault.txt", "Fault"),
        ("net_health/thread-error.txt", "Thread error"),
        ("net_health/detect-ip-set.txt", "Detect ip set"),
        ("net_health/unknown.txt", "Unknown"),
    ],
)
def test_net_health_fixtures(relative, status):
    assert parse_net_health(read(relative)) == status


def test_every_net_health_fixture_is_tested():
    assert len(list((FIXTURES / "net_health").glob("*.txt"))) == 10


def test_net_health_unknown_spelling_is_returned_as_printed():
    assert parse_net_health("net health status: Socket failed  \n") == "Socket failed"


@pytest.mark.parametrize(
    "text",
    [*GARBAGE.values(), "net health status: \n", "net health status: Success\nnet health status: Init\n",
     read("link/up.txt")],
    ids=[*GARBAGE, "no-value", "two-lines", "link-output"],
)
def test_net_health_rejects(text):
    with pytest.raises(ParseError):
        parse_net_health(text)


# ---------------------------------------------------------------------------------------------
# -netdetect -g


@pytest.mark.parametrize("relative", ["netdetect/address-form.txt", "netdetect/addr-form.txt"])
def test_netdetect_both_wordings(relative):
    assert parse_netdetect(read(relative)) == "11.12.165.1"


@pytest.mark.parametrize("text", ["", "\n", "netdetect addr: \n"], ids=["empty", "newline", "no-value"])
def test_netdetect_unconfigured_is_none(text):
    assert parse_netdetect(text) is None


@pytest.mark.parametrize(
    "text",
    [*NOT_EMPTY_GARBAGE.values(), "netdetect address: 11.12.165\n", read("ip/a2-dev3.txt")],
    ids=[*NOT_EMPTY_GARBAGE, "bad-address", "ip-output"],
)
def test_netdetect_rejects(text):
    with pytest.raises(ParseError):
        parse_netdetect(text)


# ---------------------------------------------------------------------------------------------
# -ping -g


def test_ping_success():
    assert parse_ping(read("ping/a2-dev3-success.txt")) == PingResult(transmitted=3, received=3, loss_pct=0.0)


def test_ping_total_loss():
    assert parse_ping(read("ping/failed-100-loss.txt")) == PingResult(transmitted=3, received=0, loss_pct=100.0)


def test_ping_hccs_packets_loss_spelling():
    text = (
        "device 0 PING 192.168.1.11\n\nThis pkt ping success!\nrecv seq 0, time = 12.345us, L1 plane check result = 0x0\n\n"
        "3 packets transmitted, 2 received, 33.33% packets loss\nmax time 15.000us\nmin time 11.000us\n"
    )
    assert parse_ping(text) == PingResult(3, 2, 33.33)


def test_ping_blocks_loop_output():
    blocks = parse_ping_blocks(read("ping/loop-8dev-success.txt"))
    assert blocks == tuple(PingBlock(dev_id=n, address="11.12.165.80", result=PingResult(3, 3, 0.0)) for n in range(8))


def test_ping_blocks_single():
    assert parse_ping_blocks(read("ping/a2-dev3-success.txt")) == (PingBlock(3, "29.1.137.205", PingResult(3, 3, 0.0)),)
    assert parse_ping_blocks("3 packets transmitted, 3 received, 0.00% packet loss\n") == (
        PingBlock(None, None, PingResult(3, 3, 0.0)),
    )


@pytest.mark.parametrize(
    "text",
    [*GARBAGE.values(), "device 0 PING 10.0.0.2\nrecv time out seq=0\n", read("ping/loop-8dev-success.txt")],
    ids=[*GARBAGE, "no-summary", "loop-output"],
)
def test_ping_rejects(text):
    with pytest.raises(ParseError):
        parse_ping(text)


# ---------------------------------------------------------------------------------------------
# -link_stat -g


def test_link_stat_devid_healthy():
    stat = parse_link_stat(read("link_stat/devid-healthy.txt"))
    assert stat == LinkStat(
        up_count=2,
        down_count=None,  # older driver: no "link down count" line
        records=(
            LinkStatRecord("Tue Aug  1 14:43:40 2022", "UP"),
            LinkStatRecord("Tue Aug  1 14:43:40 2022", "DOWN"),
            LinkStatRecord("Tue Aug  1 14:43:26 2022", "UP"),
        ),
    )


def test_link_stat_device_prefix():
    stat = parse_link_stat(read("link_stat/device-prefix-doc.txt"))
    assert stat.up_count == 2
    assert stat.down_count is None
    assert [r.state for r in stat.records] == ["UP", "DOWN", "UP"]
    assert stat.records[0].timestamp == "Tue Jun  6 16:32:12 2023"


def test_link_stat_current_driver_with_down_count_and_no_records():
    text = (
        "[devid 4]current time        : Wed Aug  2 03:09:26 2022\n"
        "[devid 4]link up count       : 1\n"
        "[devid 4]link down count     : 0\n"
        "[devid 4]link change records : NA\n"
    )
    assert parse_link_stat(text) == LinkStat(up_count=1, down_count=0, records=())


@pytest.mark.parametrize(
    "text",
    [*GARBAGE.values(), "[devid 0]current time        : Wed Aug  2 03:09:26 2022\n",
     read("link_stat/devid-healthy.txt") + read("link_stat/devid-healthy.txt").replace("[devid 0]", "[devid 1]"),
     "link up count       : 2\n",
     read("link_stat/devid-healthy.txt").replace("    LINK DOWN", "    LINK_DOWN", 1)],
    ids=[*GARBAGE, "time-only", "two-devices", "no-prefix", "unreadable-record"],
)
def test_link_stat_rejects(text):
    with pytest.raises(ParseError):
        parse_link_stat(text)


def test_results_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        parse_tls(read("tls/dev0-grep-switch.txt")).enabled = True  # type: ignore[misc]
