"""Parsers for the phase-two (cross-node) probe records and name resolution.
The record formats are fixed by preflight.activeprobe."""

from __future__ import annotations

import functools
import ipaddress
import math
import re
import sys
from dataclasses import dataclass, field

from . import ParseError
from .system import TcpProbe, parse_tcp_probe


def parse_tcp_probes(text: str) -> tuple[TcpProbe, ...]:
    probes = tuple(parse_tcp_probe(line) for line in text.splitlines() if line.strip())
    if not probes:
        raise ParseError("no TCP probe record")
    return probes


@dataclass(frozen=True)
class SshAttempt:
    name: str
    address: str
    ok: bool
    detail: str


def parse_launcher_ssh(text: str) -> tuple[SshAttempt, ...]:
    """``ok <name> <address>`` / ``fail <name> <address> rc=N <ssh's words>`` per target."""
    attempts = []
    for line in text.splitlines():
        parts = line.split(" ", 3)
        if len(parts) >= 3 and parts[0] in ("ok", "fail"):
            attempts.append(SshAttempt(parts[1], parts[2], parts[0] == "ok", parts[3] if len(parts) > 3 else ""))
    if not attempts:
        raise ParseError("no SSH attempt record")
    return tuple(attempts)


@dataclass(frozen=True)
class ClockOffset:
    offset_s: float  # node clock minus controller clock
    uncertainty_s: float  # half the round trip of the measurement


def parse_clock_offset(text: str) -> ClockOffset:
    parts = text.split()
    try:
        offset, uncertainty = float(parts[0]), float(parts[1])
    except (IndexError, ValueError):
        raise ParseError(f"unreadable clock record {text.strip()[:60]!r}") from None
    if not (math.isfinite(offset) and math.isfinite(uncertainty)):  # a NaN offset compared as within bounds
        raise ParseError(f"unreadable clock record {text.strip()[:60]!r}")
    return ClockOffset(offset, uncertainty)


@dataclass(frozen=True)
class StorageEntry:
    state: str  # writer: written | unwritable | absent; reader: seen | missing | absent
    path: str
    metadata: tuple[str, ...] = ()  # reader, when the marker is missing: checkpoint metadata present


@dataclass(frozen=True)
class StorageView:
    writer: str | None  # the node that wrote the markers (None on the writer itself)
    is_writer: bool
    entries: tuple[StorageEntry, ...]
    # path -> (filesystem type, source) where no marker could be written or seen ("nfs", "nas:/export")
    filesystems: dict = field(default_factory=dict)


def parse_storage(text: str) -> StorageView:
    writer, is_writer, entries, filesystems = None, False, [], {}
    for line in text.splitlines():
        if line.startswith("from "):
            writer = line[5:].strip()
            continue
        if line.startswith("writer "):
            is_writer = True
            line = line[len("writer "):]
        state, _, rest = line.partition(" ")
        if state == "fs":
            parts = rest.split(" ", 2)
            if len(parts) == 3:
                filesystems[parts[2]] = (parts[0], parts[1])
            continue
        if state in ("written", "unwritable", "absent", "seen"):
            entries.append(StorageEntry(state, rest))
        elif state == "missing":
            path, _, meta = rest.rpartition(" ")
            entries.append(StorageEntry(state, path, tuple(m for m in meta.split(",") if m and m != "-")))
    if not entries:
        raise ParseError("no shared-storage record")
    return StorageView(writer, is_writer, tuple(entries), filesystems)


@dataclass(frozen=True)
class PingPair:
    """One source NPU pinging one peer NPU; ``skipped`` when an earlier ping of the same
    source hung (the rest are not run)."""

    peer: str  # destination host
    peer_dev: int
    dev: int  # source NPU
    address: str
    rc: int | None
    transmitted: int | None
    received: int | None
    skipped: str | None = None

    @property
    def ok(self) -> bool:
        return self.rc == 0 and bool(self.transmitted) and self.received == self.transmitted


_PING = re.compile(r"^(\S+) (\d+) (\d+) (\S+) rc=(\d+) (?:(\d+) packets transmitted, (\d+) received|no summary)")
_PING_SKIPPED = re.compile(r"^(\S+) (\d+) (\d+) (\S+) skipped (.*)$")


@dataclass(frozen=True)
class PingMatrix:
    mode: str | None  # the --ping schedule: all, ring, none
    pairs: tuple[PingPair, ...]


def parse_ping_matrix(text: str) -> PingMatrix:
    mode, pairs = None, []
    for line in text.splitlines():
        if line.startswith("schedule"):
            words = line.split()
            if len(words) != 2:
                raise ParseError(f"unreadable ping schedule line {line[:80]!r}")
            mode = words[1]
            continue
        m = _PING.match(line)
        if m:
            pairs.append(PingPair(m[1], int(m[2]), int(m[3]), m[4], int(m[5]),
                                  int(m[6]) if m[6] else None, int(m[7]) if m[7] else None))
            continue
        m = _PING_SKIPPED.match(line)
        if m:
            pairs.append(PingPair(m[1], int(m[2]), int(m[3]), m[4], None, None, None, skipped=m[5]))
        elif line.strip():
            raise ParseError(f"unreadable ping record {line[:80]!r}")
    return PingMatrix(mode, tuple(pairs))


# "name <name>" per name queried, then getent ahostsv4/ahosts's lines for "name 0.0.0.1 name 0.0.0.1 ..."
# -> one line per name: "<tag> <name> <first address> <canonical name, - when it is the name>
# [<every address, comma-separated, when there are several>]", or "miss <name>".  The key 0.0.0.1
# answers as itself (IPv4-mapped, ::ffff:0.0.0.1, from ahosts on a node with no IPv4 but loopback)
# and ends each name's block; only STREAM lines (DGRAM and RAW repeat them).  The names come
# through the pipe, not as `awk -v`: one argument holds at most 128 KiB, about 4 000 FQDNs.  Names
# whose block no key closed are "unreached": getent stopped before them (a getent that stops at the
# first missing name, as NetBSD's and musl-utils' do), and the probe asks for them again one by one.
RESOLVE_BLOCKS = r"""$1 == "name" && NF == 2 { N[++n] = $2; next }
$2 != "STREAM" { next }
($1 == "0.0.0.1" || $1 == "::ffff:0.0.0.1") && $3 == "0.0.0.1" {
  if (k < n) { k++; c = (c == "" || c == N[k]) ? "-" : c
    if (f == "") print "miss", N[k]; else if (s == f) print tag, N[k], f, c; else print tag, N[k], f, c, s }
  f = c = s = ""; next }
{ if (f == "") { f = $1; c = $3 } s = s (s == "" ? "" : ",") $1 }
END { for (k++; k <= n; k++) print "unreached", N[k] }"""


class Resolution(dict):
    """Each inventory name -> the address it resolves to first (None: it does not), as a dict;
    ``addresses``: every address of a name, sorted (DNS rotates a name's records, so two nodes
    agreeing on them can still differ in the first)."""

    def __init__(self, first=(), addresses=None):
        super().__init__(first)
        self.addresses: dict[str, tuple[str, ...]] = addresses or {}


def parse_resolve(text: str) -> Resolution:
    """The probe prints ``query <name>`` per name that is an address (it resolves to itself, not
    looked up), per other name ``v4 <name> <first> <canonical> [<all>]`` (``getent ahostsv4``) or
    ``miss <name>``, for the missing ones again ``any ...`` or ``miss ...`` (``getent ahosts``, IPv6
    too; see RESOLVE_BLOCKS), and last ``end <number of names>``: output cut at the probe's cap
    has no end line, and reading it would blame the names after the cut on their nodes.
    Saved facts files hold older forms: ``query`` lines for every name followed by those lines
    without an end line, or by one ``getent hosts``'s lines (matched by name, see _matched), and
    ``<name> <address or ->``."""
    rows = [line.split() for line in text.splitlines()]
    ends = [r for r in rows if len(r) == 2 and r[0] == "end" and r[1].isdigit()]
    if ends:
        return _answers(_present_names(rows, ends[-1][1]), rows)
    # Every node lists every name: interned, the N x N answers share one string per name/address.
    queries = [sys.intern(r[1]) for r in rows if len(r) == 2 and r[0] == "query"]
    # The present form without its end line: a looked-up name prints no query line.  (The oldest
    # form's "<name> <address or ->" rows can start with a tag, for a host named miss or v4.)
    if {r[1] for r in rows if len(r) >= 2 and r[0] in _TAGS
            and (len(r) > 2 or not (r[1] == "-" or _is_address(r[1])))} - set(queries):
        raise ParseError("the output ended before its end line (cut short)")
    if not queries:  # the oldest form
        legacy = {r[0]: None if r[1] == "-" else r[1] for r in rows if len(r) >= 2}
        if not legacy and text.strip():
            raise ParseError("unreadable name resolution records")
        return Resolution(legacy)
    names = Resolution({q: (q if _is_address(q) else None) for q in queries})
    blocks = [r for r in rows if len(r) >= 2 and r[0] in _TAGS]
    if blocks or not any(len(r) >= 2 and r[0] != "query" for r in rows):
        if blocks:
            _complete(queries, blocks)
        return _answers(names, rows)
    return _matched(queries, _blocks([r for r in rows if len(r) >= 2 and r[0] != "query"]), names)


_TAGS = ("v4", "any", "miss", "unreached")


def _present_names(rows: list[list[str]], count: str) -> Resolution:
    """The names of the present form, in the order printed: addresses first, as themselves."""
    names = Resolution()
    for r in rows:
        if len(r) == 2 and r[0] == "query":
            names[sys.intern(r[1])] = sys.intern(r[1])
        elif len(r) >= 2 and r[0] in _TAGS and r[1] not in names:
            names[sys.intern(r[1])] = None
    if not count.isdigit() or int(count) != len(names):
        raise ParseError(f"answers for {len(names)} names, but the probe asked for {count}")
    return names


def _answers(names: Resolution, rows: list[list[str]]) -> Resolution:
    unreached = [r[1] for r in rows if len(r) >= 2 and r[0] == "unreached"]
    if unreached:
        raise ParseError(f"getent never answered for {len(unreached)} names ({', '.join(unreached[:3])}"
                         f"{', ...' if len(unreached) > 3 else ''})")
    for r in rows:
        if len(r) >= 2 and r[0] in ("v4", "any") and names.get(r[1], "") is None:
            every = r[4].split(",") if len(r) >= 5 else [r[2]] if len(r) >= 3 else []
            if not every or not all(_is_address(a) for a in [r[2], *every]):
                raise ParseError(f"unreadable answer for {r[1]}: {' '.join(r[2:])[:80]!r}")
            names[r[1]] = first = sys.intern(_unmapped(r[2]))
            names.addresses[r[1]] = ((first,) if every == [r[2]] else
                                     tuple(sorted({sys.intern(_unmapped(a)) for a in every}, key=address_order)))
    return names


def _complete(queries: list[str], blocks: list[list[str]]) -> None:
    """The form with no end line: every name looked up has its line (what the output kept, when
    it was cut, may still end inside the second pass)."""
    answered = {r[1] for r in blocks}
    lacking = [q for q in queries if q not in answered and not _is_address(q)]
    if lacking:
        raise ParseError(f"no answer for {len(lacking)} of the {len(queries)} names ({', '.join(lacking[:3])}"
                         f"{', ...' if len(lacking) > 3 else ''}): the output ended early")


def _blocks(lines: list[list[str]]) -> list[list[list[str]]]:
    """The older form's ``getent hosts`` lines, one block per name it found.  A name with several
    addresses prints a line for each, all naming the same host; two names of one host in a row print
    the same lines twice (the addresses repeat, in any order when DNS rotates them), so a run of
    same-host lines is split into as many blocks as its addresses repeat."""
    blocks: list[list[list[str]]] = []
    run: list[list[str]] = []
    for row in lines + [None]:
        if run and (row is None or [p.lower() for p in row[1:]] != [p.lower() for p in run[0][1:]]):
            width = len({r[0] for r in run})
            if len(run) % width:
                blocks.append(run)
            else:
                blocks.extend(run[i:i + width] for i in range(0, len(run), width))
            run = []
        if row is not None:
            run.append(row)
    return blocks


def _matched(queries: list[str], blocks: list[list[list[str]]], names: dict[str, str | None]):
    """The older form's blocks to the names queried: a block belongs to the name it lists, also as
    the first labels of a longer name (node-b for node-b.cluster.local), or whose address it is, for
    a name that is an address; a block listing no queried name (a DNS alias) belongs to the name in
    turn, never to an address.  Best effort: an unresolved name just before a DNS alias's answer
    takes that answer (what the present form's blocks per name avoid)."""
    found = [(sys.intern(b[0][0]), set().union(*(_answer_keys(r) for r in b))) for b in blocks]
    positions: dict[str, list[int]] = {}
    for i, name in enumerate(queries):
        positions.setdefault(name.lower(), []).append(i)
    # The last query each block could answer (-1: none, a DNS alias).
    last_claim = [max((i for k in keys for i in positions.get(k, ())), default=-1) for _, keys in found]
    j = 0
    for i, name in enumerate(queries):
        literal = _is_address(name)
        if j < len(found) and (name.lower() in found[j][1] or (last_claim[j] < i and not literal)):
            names[name] = found[j][0]
            j += 1
    return names


def _unmapped(address: str) -> str:
    """An IPv4-mapped answer (::ffff:10.0.0.3, getent ahosts's on a node with no IPv4 address but
    loopback) as the IPv4 address it connects to, as the other nodes print it."""
    if address.startswith("::ffff:") or address.startswith("::FFFF:"):
        mapped = ipaddress.ip_address(address).ipv4_mapped
        if mapped is not None:
            return str(mapped)
    return address


# Cached: N nodes each answer for the same N names, so the same addresses come back N times
# (parsing them anew was 10 ms a node at 1000 names, 10 controller CPU-seconds at 1000 nodes).
@functools.lru_cache(maxsize=1 << 16)
def address_order(text: str):
    try:
        address = ipaddress.ip_address(text)
        return (address.version, address.packed, "")
    except ValueError:
        return (9, b"", text)


@functools.lru_cache(maxsize=1 << 16)
def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _answer_keys(row: list[str]) -> set[str]:
    """The names a getent line answers for: each name it lists and that name's leading labels (a
    search domain's answer lists only the full name, node-b.cluster.local for node-b)."""
    keys = set()
    for part in row:
        part = part.lower()
        keys.add(part)
        if not _is_address(part):
            labels = part.split(".")
            keys.update(".".join(labels[:n]) for n in range(1, len(labels)))
    return keys
