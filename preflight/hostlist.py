"""Node-set ranges: expand ``node[01-16,20]`` into names and fold names back.

A small, dependency-free take on ClusterShell's NodeSet (``expand``/``fold``) that also
understands the Ansible range syntax used in inventory host keys.

Syntax accepted by :func:`expand`:

* ``node[01-16,20]``      ClusterShell/Slurm: comma list of numbers and ``a-b`` ranges
* ``node[1-10/3]``        ClusterShell step: 1, 4, 7, 10
* ``node[01:16]``         Ansible: inclusive ``a:b``
* ``node[1:10:2]``        Ansible step: 1, 3, 5, 7, 9
* ``node[a:f]``           Ansible alphabetic range (single letters of the same case, step allowed)
* ``rack[1-2]-npu[0-1]``  several brackets: the cartesian product, first bracket outermost
* ``a,b,node[1-3]``       top-level commas separate independent patterns (what :func:`fold` emits)

Zero padding comes from the lower bound, as in ClusterShell: ``[01-16]`` pads to two digits,
``[08-10]`` gives ``08, 09, 10``, ``[1-10]`` is not padded, ``[001-10]`` pads to three.

Names are returned in pattern order with duplicates removed (first occurrence kept).
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable

__all__ = ["HostlistError", "MAX_NAMES", "expand", "fold", "natural_key", "natural_sorted"]

#: Upper bound on the number of names one pattern may expand to.
MAX_NAMES = 100_000


class HostlistError(ValueError):
    """A malformed node-set pattern; the message names the pattern and the problem."""


# ---------------------------------------------------------------------------------------- expand

_DIGITS = re.compile(r"[0-9]+")


def _split_top(pattern: str) -> list[str]:
    """Split on commas outside brackets, checking that brackets balance and do not nest."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(pattern):
        if ch == "[":
            if depth:
                raise HostlistError(f"{pattern!r}: nested '[' at position {i}")
            depth = 1
        elif ch == "]":
            if not depth:
                raise HostlistError(f"{pattern!r}: unbalanced brackets: ']' at position {i} has no '['")
            depth = 0
        elif ch == "," and not depth:
            parts.append(pattern[start:i])
            start = i + 1
    if depth:
        raise HostlistError(f"{pattern!r}: unbalanced brackets: '[' is never closed")
    parts.append(pattern[start:])
    return parts


def _step(pattern: str, item: str, text: str | None) -> int:
    if text is None:
        return 1
    text = text.strip()
    if not _DIGITS.fullmatch(text):
        raise HostlistError(f"{pattern!r}: step {text!r} in {item!r} is not a positive integer")
    step = int(text)
    if step == 0:
        raise HostlistError(f"{pattern!r}: zero step in {item!r}")
    return step


def _parse_item(pattern: str, item: str) -> tuple[int, list[str] | range, int]:
    """Parse one bracket item; return (count, values-or-range, pad)."""
    raw = item
    item = item.strip()
    if not item:
        raise HostlistError(f"{pattern!r}: empty range in brackets")
    step_text: str | None = None
    if ":" in item:  # Ansible: a:b or a:b:s
        fields = item.split(":")
        if len(fields) > 3:
            raise HostlistError(f"{pattern!r}: too many ':' in range {raw!r} (expected start:end[:step])")
        lo, hi = fields[0].strip(), fields[1].strip()
        if len(fields) == 3:
            step_text = fields[2]
    elif "-" in item:  # ClusterShell: a-b or a-b/s
        lo, _, rest = item.partition("-")
        hi, slash, step_part = rest.partition("/")
        if slash:
            step_text = step_part
        lo, hi = lo.strip(), hi.strip()
        if "-" in hi:
            raise HostlistError(f"{pattern!r}: too many '-' in range {raw!r} (negative numbers are not allowed)")
    else:
        if "/" in item:
            raise HostlistError(f"{pattern!r}: step without a range in {raw!r} (expected start-end/step)")
        lo = hi = item
    if not lo or not hi:
        raise HostlistError(f"{pattern!r}: empty range bound in {raw!r}")
    step = _step(pattern, raw, step_text)

    if _DIGITS.fullmatch(lo) and _DIGITS.fullmatch(hi):
        start, stop = int(lo), int(hi)
        if start > stop:
            raise HostlistError(f"{pattern!r}: reversed range {raw.strip()!r} (start {lo} > end {hi})")
        pad = len(lo) if len(lo) > 1 and lo[0] == "0" else 0
        seq = range(start, stop + 1, step)
        return len(seq), seq, pad
    if len(lo) == 1 and len(hi) == 1 and lo in string.ascii_letters and hi in string.ascii_letters:
        if lo.islower() != hi.islower():
            raise HostlistError(f"{pattern!r}: alphabetic range {raw.strip()!r} mixes upper and lower case")
        if lo > hi:
            raise HostlistError(f"{pattern!r}: reversed range {raw.strip()!r} (start {lo} > end {hi})")
        letters = [chr(c) for c in range(ord(lo), ord(hi) + 1, step)]
        return len(letters), letters, 0
    def kind(t: str) -> str:
        return "number" if _DIGITS.fullmatch(t) else "letter" if len(t) == 1 and t in string.ascii_letters else ""

    if kind(lo) and kind(hi):
        raise HostlistError(f"{pattern!r}: range {raw.strip()!r} mixes a {kind(lo)} and a {kind(hi)}")
    bad = hi if kind(lo) else lo
    raise HostlistError(
        f"{pattern!r}: non-numeric range bound {bad!r} in {raw.strip()!r} "
        "(use numbers, or single letters for an alphabetic range)"
    )


def _parse_bracket(pattern: str, body: str) -> tuple[int, list[tuple[list[str] | range, int]]]:
    total = 0
    parts = []
    for item in body.split(","):
        count, values, pad = _parse_item(pattern, item)
        total += count
        parts.append((values, pad))
    return total, parts


def _bracket_values(parts: list[tuple[list[str] | range, int]]) -> list[str]:
    out: list[str] = []
    for values, pad in parts:
        if isinstance(values, range):
            out.extend(str(v).zfill(pad) for v in values)
        else:
            out.extend(values)
    return out


def _expand_one(pattern: str, text: str, budget: int) -> tuple[int, list[list[str] | str]]:
    """Parse one comma-free pattern into literal segments and bracket value lists."""
    segments: list[list | str] = []
    count = 1
    pos = 0
    while True:
        open_at = text.find("[", pos)
        if open_at < 0:
            if text[pos:]:
                segments.append(text[pos:])
            break
        if open_at > pos:
            segments.append(text[pos:open_at])
        close_at = text.index("]", open_at)  # balance already checked
        n, parts = _parse_bracket(pattern, text[open_at + 1 : close_at])
        count *= n
        if count > budget:
            raise HostlistError(f"{pattern!r}: expands to more than {MAX_NAMES} names")
        segments.append(parts)
        pos = close_at + 1
    return count, segments


def expand(pattern: str) -> list[str]:
    """Expand a node-set pattern into names (pattern order, duplicates removed)."""
    if not isinstance(pattern, str):
        raise HostlistError(f"{pattern!r}: a node-set pattern must be a string")
    if not pattern.strip():
        raise HostlistError(f"{pattern!r}: empty pattern")
    pieces = _split_top(pattern)
    parsed = []
    budget = MAX_NAMES
    for piece in pieces:
        piece = piece.strip()
        if not piece:
            raise HostlistError(f"{pattern!r}: empty name between commas")
        count, segments = _expand_one(pattern, piece, budget)
        budget -= count
        parsed.append(segments)

    seen: dict[str, None] = {}
    for segments in parsed:
        names = [""]
        for seg in segments:
            if isinstance(seg, str):
                names = [n + seg for n in names]
            else:
                values = _bracket_values(seg)
                names = [n + v for n in names for v in values]
        for n in names:
            seen.setdefault(n, None)
    return list(seen)


# ------------------------------------------------------------------------------------------ fold

_NUM_SPLIT = re.compile(r"([0-9]+)")


def natural_key(name: str) -> tuple:
    """Sort key that orders embedded numbers numerically: node2 < node10; 1 < 01 < 2."""
    parts = _NUM_SPLIT.split(name)
    # re.split with a capturing group alternates text (even index) and digits (odd index),
    # so every position compares like with like.
    return tuple((int(p), len(p)) if i % 2 else p for i, p in enumerate(parts))


def natural_sorted(names: Iterable[str]) -> list[str]:
    """Names sorted naturally (see :func:`natural_key`)."""
    return sorted(names, key=natural_key)


def _fold_numbers(nums: frozenset[str]) -> str:
    """Render a set of digit strings as a bracket body (or a bare value when there is one)."""
    if len(nums) == 1:
        return next(iter(nums))
    runs: list[list] = []  # [pad, first, last_value, last_text]
    for s in sorted(nums, key=lambda t: (int(t), len(t))):
        v = int(s)
        for run in runs:
            if run[2] == v - 1 and str(v).zfill(run[0]) == s:
                run[2], run[3] = v, s
                break
        else:
            runs.append([len(s), s, v, s])
    runs.sort(key=lambda r: (int(r[1]), len(r[1])))
    body = ",".join(r[1] if r[1] == r[3] else f"{r[1]}-{r[3]}" for r in runs)
    return f"[{body}]"


def fold(names: Iterable[str]) -> str:
    """Fold names into a compact node-set string, the inverse of :func:`expand` for display.

    ``["node01", "node02", "node03", "node07"]`` gives ``"node[01-03,07]"``. Names that share a
    shape (the same text around their numbers) fold together, over several numeric fields if
    need be (``rack[1-2]-npu[0-1]``); other names are kept as they are. The result is
    comma-separated, sorted naturally, without duplicates, and ``expand(fold(x))`` gives the
    same set of names as ``x``.
    """
    by_shape: dict[tuple[str, ...], set[tuple[str, ...]]] = {}
    for name in names:
        parts = _NUM_SPLIT.split(name)
        by_shape.setdefault(tuple(parts[0::2]), set()).add(tuple(parts[1::2]))

    items: list[tuple[tuple, str]] = []
    for shape, tuples in by_shape.items():
        dims = len(shape) - 1
        if dims == 0:
            items.append((natural_key(shape[0]), shape[0]))
            continue
        # Each element is a tuple of sets of digit strings; fold the last field first, then
        # each earlier one, merging elements that agree on every other field.
        elems: list[tuple[frozenset[str], ...]] = [tuple(frozenset([n]) for n in t) for t in tuples]
        for d in reversed(range(dims)):
            merged: dict[tuple, set[str]] = {}
            for e in elems:
                merged.setdefault(e[:d] + e[d + 1 :], set()).update(e[d])
            elems = [k[:d] + (frozenset(v),) + k[d:] for k, v in merged.items()]
        for e in elems:
            text = shape[0]
            first = shape[0]
            for d in range(dims):
                text += _fold_numbers(e[d]) + shape[d + 1]
                first += min(e[d], key=lambda t: (int(t), len(t))) + shape[d + 1]
            items.append((natural_key(first), text))
    items.sort(key=lambda it: it[0])
    return ",".join(text for _, text in items)
