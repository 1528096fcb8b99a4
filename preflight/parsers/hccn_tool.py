"""Parsers for the `hccn_tool -i <phy_id> -<cmd> -g` outputs a preflight reads.

Each command prints a line or a few lines on stdout (errors go to stderr with a non-zero exit
code, so the caller decides what an empty stdout means). The formats differ between driver
versions in small ways that are accepted here on purpose:

- ``link status: UP`` vs the 950 form ``link status : UP``;
- ``netdetect address:`` (older drivers) vs ``netdetect addr:`` (current source);
- ``dev_id:N, tls switch[...]`` vs the 950 form ``device N, tls switch[...]``, with or without
  the ``tls preconfigured`` / alarm parts after the switch;
- ``packet loss`` (RoCE ping) vs ``packets loss`` (HCCS ping, newer printers);
- ``[devid N]`` vs ``[device N]`` in ``-link_stat``, with or without ``link down count``.

Loop outputs (``for i in {0..7}; do hccn_tool -i $i ...; done``) hold several answers; the
single-answer parsers reject them rather than silently keep one, and the ``*_lines`` /
``*_blocks`` variants return them all in order.

Everything is pure: text in, frozen dataclasses out, :class:`~preflight.parsers.ParseError`
on text of any other shape.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from preflight.parsers import ParseError


def _excerpt(text: str) -> str:
    """A short quote of unexpected output for error messages."""
    text = text.strip()
    return repr(text[:60] + ("..." if len(text) > 60 else ""))


def _single(matches: list[re.Match[str]], what: str, text: str) -> re.Match[str]:
    """The one match of a single-answer command; none or several is an error."""
    if not matches:
        raise ParseError(f"no {what} line in hccn_tool output: {_excerpt(text)}")
    if len(matches) > 1:
        raise ParseError(f"{len(matches)} {what} lines in hccn_tool output, expected one")
    return matches[0]


def _find_all(pattern: re.Pattern[str], text: str) -> list[re.Match[str]]:
    return [m for m in map(pattern.match, text.splitlines()) if m]


def _ip(value: str, what: str) -> str:
    """The address as printed, after checking it is a real IPv4 or IPv6 address."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ParseError(f"{what} is not an IP address: {value!r}") from None
    return value


# ---------------------------------------------------------------------------------------------
# -link -g

_LINK = re.compile(r"^\s*link status\s*:\s*(\S*)\s*$")


def parse_link(text: str) -> str:
    """``link status: UP`` -> ``"UP"``; ``"DOWN"`` likewise. Any other value is an error."""
    state = _single(_find_all(_LINK, text), "'link status'", text).group(1)
    if state not in ("UP", "DOWN"):
        raise ParseError(f"link status is neither UP nor DOWN: {state!r}")
    return state


# ---------------------------------------------------------------------------------------------
# -ip -g


@dataclass(frozen=True)
class HccnIp:
    address: str
    netmask: str | None


_IPADDR = re.compile(r"^\s*ipaddr\s*:\s*(\S+)\s*$")
_NETMASK = re.compile(r"^\s*netmask\s*:\s*(\S+)\s*$")


def parse_ip(text: str) -> HccnIp | None:
    """``ipaddr:A`` / ``netmask:M`` -> HccnIp; an empty stdout (no IP configured) -> None.

    An unconfigured port prints nothing on stdout (the reason goes to stderr), so empty means
    "not configured". Any other text without exactly one ``ipaddr`` line is an error.
    """
    if not text.strip():
        return None
    addresses = parse_ip_lines(text)
    if len(addresses) > 1:
        raise ParseError(f"{len(addresses)} 'ipaddr' lines in hccn_tool -ip output (loop output? use parse_ip_lines)")
    return addresses[0]


def parse_ip_lines(text: str) -> tuple[HccnIp, ...]:
    """All ``ipaddr``/``netmask`` pairs in order (a device loop prints them without a device id).

    A netmask belongs to the nearest ``ipaddr`` line above it. Empty output -> (); other text
    without any ``ipaddr`` line is an error.
    """
    result: list[HccnIp] = []
    for line in text.splitlines():
        address = _IPADDR.match(line)
        netmask = _NETMASK.match(line)
        if address:
            result.append(HccnIp(_ip(address.group(1), "ipaddr"), None))
        elif netmask and result and result[-1].netmask is None:
            result[-1] = HccnIp(result[-1].address, netmask.group(1))
    if text.strip() and not result:
        raise ParseError(f"no 'ipaddr' line in hccn_tool -ip output: {_excerpt(text)}")
    return tuple(result)


# ---------------------------------------------------------------------------------------------
# -tls -g


@dataclass(frozen=True)
class TlsSwitch:
    dev_id: int | None
    enabled: bool


# Only the part up to "tls switch[N]" is read: older drivers may stop there, and the full
# output continues with certificate lines that do not matter for the switch.
_TLS = re.compile(r"^\s*(?:(?:dev_id\s*:\s*|device\s+)(\d+)\s*,\s*)?tls switch\[(\d+)\]")


def parse_tls(text: str) -> TlsSwitch:
    """The TLS switch of one device. No switch line is an error, never "disabled"."""
    switches = parse_tls_lines(text)
    if len(switches) > 1:
        raise ParseError(f"{len(switches)} 'tls switch[N]' lines, expected one (loop output? use parse_tls_lines)")
    return switches[0]


def parse_tls_lines(text: str) -> tuple[TlsSwitch, ...]:
    """One TlsSwitch per ``tls switch[N]`` line, in order (for ``-tls -g | grep switch`` loops)."""
    switches = tuple(_tls_switch(m) for m in _find_all(_TLS, text))
    if not switches:
        raise ParseError("no 'tls switch[N]' line")
    return switches


def _tls_switch(match: re.Match[str]) -> TlsSwitch:
    dev_id, value = match.groups()
    if value not in ("0", "1"):
        raise ParseError(f"tls switch value is neither 0 nor 1: {value!r}")
    return TlsSwitch(dev_id=None if dev_id is None else int(dev_id), enabled=value == "1")


# ---------------------------------------------------------------------------------------------
# -net_health -g and -netdetect -g

_NET_HEALTH = re.compile(r"^\s*net health status\s*:\s*(.*?)\s*$")
_NETDETECT = re.compile(r"^\s*netdetect (?:address|addr)\s*:\s*(\S*)\s*$")


def parse_net_health(text: str) -> str:
    """The status words after ``net health status:`` (one to three words, e.g. ``Receive timeout``).

    Returned as printed: builds spell some values differently, so the caller should treat any
    value it does not know as a failure.
    """
    status = _single(_find_all(_NET_HEALTH, text), "'net health status'", text).group(1)
    if not status:
        raise ParseError("empty net health status")
    return status


def parse_netdetect(text: str) -> str | None:
    """The netdetect address; None when nothing is configured (empty output or value, or the
    0.0.0.0 the driver prints for an unset address)."""
    if not text.strip():
        return None
    address = _single(_find_all(_NETDETECT, text), "'netdetect address'", text).group(1)
    address = _ip(address, "netdetect address") if address else None
    return None if address == "0.0.0.0" else address


# ---------------------------------------------------------------------------------------------
# -ping -g address <ip>


@dataclass(frozen=True)
class PingResult:
    transmitted: int
    received: int
    loss_pct: float


@dataclass(frozen=True)
class PingBlock:
    """One device's ping in a loop output: ``device N PING <address>`` ... summary."""

    dev_id: int | None
    address: str | None
    result: PingResult


_PING_SUMMARY = re.compile(
    r"^\s*(\d+) packets transmitted,\s*(\d+) received,\s*(\d+(?:\.\d+)?)% packets? loss\b"
)
_PING_HEADER = re.compile(r"^\s*device (\d+) PING (\S+)")


def parse_ping(text: str) -> PingResult:
    """The summary line of one ping (``packet loss`` or ``packets loss``)."""
    blocks = parse_ping_blocks(text)
    if len(blocks) > 1:
        raise ParseError(f"{len(blocks)} ping summaries, expected one (loop output? use parse_ping_blocks)")
    return blocks[0].result


def parse_ping_blocks(text: str) -> tuple[PingBlock, ...]:
    """Every summary line, each with the device and target of the ``device N PING`` line above it."""
    blocks: list[PingBlock] = []
    dev_id: int | None = None
    address: str | None = None
    for line in text.splitlines():
        header = _PING_HEADER.match(line)
        summary = _PING_SUMMARY.match(line)
        if header:
            dev_id, address = int(header.group(1)), header.group(2)
        elif summary:
            blocks.append(PingBlock(dev_id, address, _ping_result(summary)))
            dev_id = address = None
    if not blocks:
        raise ParseError(f"no ping summary ('N packets transmitted, M received, X% packet loss'): {_excerpt(text)}")
    return tuple(blocks)


def _ping_result(match: re.Match[str]) -> PingResult:
    transmitted, received, loss = match.groups()
    return PingResult(transmitted=int(transmitted), received=int(received), loss_pct=float(loss))


# ---------------------------------------------------------------------------------------------
# -link_stat -g


@dataclass(frozen=True)
class LinkStatRecord:
    timestamp: str
    state: str


@dataclass(frozen=True)
class LinkStat:
    up_count: int | None
    down_count: int | None
    records: tuple[LinkStatRecord, ...]
    # The node's clock as the tool printed it (asctime): when, not what, so not compared.
    current_time: str | None = field(default=None, compare=False)


def asctime(text: str | None):
    """``Tue Aug  1 14:43:40 2022`` as a naive datetime (the node's local time), or None."""
    import datetime as _dt

    try:
        return _dt.datetime.strptime(" ".join((text or "").split()), "%a %b %d %H:%M:%S %Y")
    except ValueError:
        return None


_LINK_STAT_PREFIX = re.compile(r"^\s*\[(?:devid|device)\s+(\d+)\](.*)$")
_LINK_UP_COUNT = re.compile(r"^link up count\s*:\s*(\d+)\s*$")
_LINK_DOWN_COUNT = re.compile(r"^link down count\s*:\s*(\d+)\s*$")
_LINK_RECORDS = re.compile(r"^link change records\s*:")
_LINK_NOW = re.compile(r"^current time\s*:\s*(\S.*?)\s*$")
_LINK_RECORD = re.compile(r"^\s+(\S.*?)\s+LINK (UP|DOWN)\s*$")


def parse_link_stat(text: str) -> LinkStat:
    """Link flap history of one device. Records stay newest first, as printed.

    Timestamps are kept as printed (asctime pads a one-digit day with a second blank).
    Output naming more than one device is rejected: the counts would be mixed up.
    """
    devices: set[str] = set()
    up = down = now = None
    records: list[LinkStatRecord] = []
    seen_known_line = False
    for line in text.splitlines():
        prefixed = _LINK_STAT_PREFIX.match(line)
        if not prefixed:
            continue
        devices.add(prefixed.group(1))
        body = prefixed.group(2)
        if m := _LINK_UP_COUNT.match(body):
            up, seen_known_line = int(m.group(1)), True
        elif m := _LINK_DOWN_COUNT.match(body):
            down, seen_known_line = int(m.group(1)), True
        elif _LINK_RECORDS.match(body):
            seen_known_line = True
        elif m := _LINK_NOW.match(body):
            now = m.group(1)
        elif m := _LINK_RECORD.match(body):
            records.append(LinkStatRecord(timestamp=m.group(1), state=m.group(2)))
        elif body[:1].isspace() and body.strip():
            # An indented line is a change record: one skipped would undercount the flaps.
            raise ParseError(f"unreadable link change record: {body.strip()[:80]!r}")
    if len(devices) > 1:
        raise ParseError(f"link_stat output names several devices: {sorted(devices, key=int)}")
    if not seen_known_line:
        raise ParseError(f"no '[devid N]link up count' or 'link change records' line: {_excerpt(text)}")
    return LinkStat(up_count=up, down_count=down, records=tuple(records), current_time=now)
