"""The version-compatibility table (``compat.yaml``, data shipped with the package) and the
version arithmetic the versions.* checks need.

``load(extra)`` returns the shipped table, extended by the user's ``--compat FILE`` tables:
rows of a user table are added, and a user row with the same key (e.g. the same
``torch_npu`` version) replaces the shipped one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

DATA = Path(__file__).with_name("compat.yaml")

TABLES = {"torch_npu": "torch_npu", "cann_driver": "cann", "mindspeed": "mindspeed",
          "mindspeed_mm": "mindspeed_mm", "vllm_ascend": "vllm_ascend", "triton_ascend": "triton_ascend"}


# Columns the checks read from every row of a table, beside its key (a site row without one
# raised KeyError in the checks, on every node).
REQUIRED = {"torch_npu": ("torch",), "cann_driver": ("driver_min",), "mindspeed": ("megatron_core",),
            "mindspeed_mm": ("mindspeed",), "triton_ascend": ("cann",)}


# What a known_bad entry's `when:` can name (checks/versions.py reads these values off a node).
KNOWN_BAD_KEYS = ("cann", "driver", "torch", "torch_npu", "vllm", "vllm_ascend", "mindspeed", "megatron_core",
                  "triton_ascend")


class CompatError(ValueError):
    """A compatibility file that cannot be used (message names the file)."""


@dataclass
class Compat:
    data_version: str = ""
    sources: dict = field(default_factory=dict)
    tables: dict = field(default_factory=dict)  # name -> list of row dicts
    known_bad: list = field(default_factory=list)
    verl_min_mindspeed: dict = field(default_factory=dict)
    files: tuple = ()

    def rows(self, table: str) -> list[dict]:
        return self.tables.get(table, [])

    def source(self, row: dict) -> str:
        src = row.get("source", "")
        return self.sources.get(src, src)


def _read(path: Path) -> dict:
    try:
        # libyaml's loader when PyYAML has it (its wheels do): 10x faster on the shipped table,
        # which every run reads.
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except OSError as exc:
        raise CompatError(f"{path}: cannot read compatibility file: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise CompatError(f"{path}: not valid YAML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise CompatError(f"{path}: not a UTF-8 text file (byte {exc.start}): a compatibility file is YAML") from None
    if not isinstance(doc, dict):
        raise CompatError(f"{path}: a compatibility file is a mapping (see preflight/compat/compat.yaml)")
    unknown = set(doc) - set(TABLES) - {"schema", "data_version", "sources", "known_bad", "verl_min_mindspeed"}
    if unknown:
        raise CompatError(f"{path}: unknown table(s) {', '.join(sorted(unknown))}; known: "
                          f"{', '.join(sorted(TABLES))}, known_bad")
    for table, key in TABLES.items():
        rows = doc.get(table) or []
        if not isinstance(rows, list) or not all(isinstance(r, dict) and r.get(key) for r in rows):
            raise CompatError(f"{path}: {table} must be a list of mappings, each with a {key!r} value")
        for row in rows:
            missing = [c for c in REQUIRED.get(table, ()) if not row.get(c)]
            if missing:
                raise CompatError(f"{path}: the {table} row for {row[key]!r} has no {', '.join(map(repr, missing))} "
                                  f"value (each {table} row needs {', '.join(REQUIRED[table])})")
    if not isinstance(doc.get("known_bad") or [], list):
        raise CompatError(f"{path}: known_bad must be a list")
    for i, entry in enumerate(doc.get("known_bad") or []):
        when = entry.get("when") if isinstance(entry, dict) else None
        if isinstance(when, dict):  # pip's spelling (torch-npu, vllm-ascend) names the same package
            entry["when"] = when = {k.replace("-", "_") if isinstance(k, str) else k: b for k, b in when.items()}
        if not isinstance(when, dict) or not when or not all(isinstance(k, str) and isinstance(b, str) and b.strip()
                                                              for k, b in when.items()):
            raise CompatError(f"{path}: known_bad[{i}] must be a mapping with a `when:` mapping of package to "
                              f"version bounds (e.g. when: {{cann: \"8.0.RC2\", torch_npu: \">=2.4\"}})")
        unknown = sorted(set(when) - set(KNOWN_BAD_KEYS))
        if unknown:
            # A misspelt key (torch-npu, firmware) matched nothing, silently.
            raise CompatError(f"{path}: known_bad[{i}] names {', '.join(unknown)}, which it cannot match; "
                              f"`when:` takes {', '.join(KNOWN_BAD_KEYS)}")
    return doc


def _row_key(table: str, value) -> str:
    """The release a row is for, spelt one way: a site row for 2.0.1rc1 replaces the shipped 2.0.1.rc1."""
    if table == "cann_driver":
        return norm_cann(str(value)).upper()
    from packaging.version import InvalidVersion, Version

    try:
        return str(Version(norm_pip(str(value)))).upper()
    except InvalidVersion:
        return norm_pip(str(value)).upper()


def load(extra=()) -> Compat:
    compat = Compat()
    paths = [DATA] + [Path(p) for p in extra or ()]
    for path in paths:
        doc = _read(path)
        if path == DATA:
            compat.data_version = str(doc.get("data_version", ""))
        compat.sources.update(doc.get("sources") or {})
        for table, key in TABLES.items():
            rows = compat.tables.setdefault(table, [])
            for row in doc.get(table) or []:
                row = dict(row)
                row.setdefault("source", str(path) if path != DATA else "")
                # A user row replaces the shipped one however it spells the release (8.2.rc1, 8.2.RC1).
                same = _row_key(table, row[key])
                rows[:] = [r for r in rows if _row_key(table, r[key]) != same]
                rows.append(row)
        compat.known_bad.extend(doc.get("known_bad") or [])
        if doc.get("verl_min_mindspeed"):
            compat.verl_min_mindspeed = doc["verl_min_mindspeed"]
    compat.files = tuple(str(p) for p in paths)
    return compat


# -- versions ---------------------------------------------------------------------------

def as_list(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [str(value)]


_TOKEN = re.compile(r"(\d+)|([A-Za-z]+)(\d*)")


_KEY_PARTS = 8  # keys are padded to this many parts, so that 8.2 and 8.2.0 sort alike


def version_key(text: str) -> tuple:
    """A sort key for Ascend-style versions: 8.2.RC1 < 8.2.0, 25.0.rc1 < 25.0.rc1.1 < 25.0.0,
    8.5.0.alpha001 < 8.5.0.B100 < 8.5.0 (letters mark pre-releases); 8.2 == 8.2.0.  Padded
    with zeros, not cut at them: cut, 8.2.0 sorted below 8.2.RC1 (a shorter tuple is less)."""
    parts = []
    for piece in re.split(r"[.\-_]", str(text).strip()):
        if not piece:
            continue
        if piece.isdigit():
            parts.append((3, int(piece)))
            continue
        m = re.fullmatch(r"([A-Za-z]+)(\d*)", piece)
        if m:
            word, num = m.group(1).lower(), int(m.group(2) or 0)
            rank = 2 if word == "rc" else 1
            parts.append((rank, num))
        else:
            m = re.match(r"(\d+)", piece)
            parts.append((3, int(m.group(1))) if m else (0, 0))
    while len(parts) > _KEY_PARTS and parts[-1] == (3, 0):
        parts.pop()
    return tuple(parts) + ((3, 0),) * (_KEY_PARTS - len(parts))


def cmp_versions(a: str, b: str) -> int:
    ka, kb = version_key(a), version_key(b)
    n = max(len(ka), len(kb))
    ka += ((3, 0),) * (n - len(ka))
    kb += ((3, 0),) * (n - len(kb))
    return (ka > kb) - (ka < kb)


def norm_cann(version: str) -> str:
    """``8.2.rc1`` -> ``8.2.RC1``; build tags (``8.5.0.B100``, ``8.5.0.alpha001``) dropped."""
    v = str(version).strip()
    v = re.sub(r"(?i)\.(?:alpha|beta|b|t)\d+$", "", v)
    return re.sub(r"(?i)rc(\d+)", lambda m: "RC" + m.group(1), v)


def norm_pip(version: str) -> str:
    """A pip version without its local tag and dev suffix: ``2.7.1.post1+git4c901a4`` -> ``2.7.1.post1``,
    ``2.5.1.post1.dev20250528`` -> ``2.5.1.post1``, ``2.9.0+cpu`` -> ``2.9.0``."""
    v = str(version).strip().split("+", 1)[0]
    v = re.sub(r"\.?dev\d*$", "", v)
    return v.lstrip("vV")


def base_release(version: str) -> str:
    """``2.1.0.post8`` -> ``2.1.0``; ``2.9.0+cpu`` -> ``2.9.0``; ``2.7.1rc1`` -> ``2.7.1``."""
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", str(version))
    if not m:
        return str(version)
    nums = m.group(1).split(".")[:3]
    while len(nums) < 3:
        nums.append("0")
    return ".".join(nums)


def pip_key(version: str):
    """A sort key for pip versions: 2.1.0.rc1 < 2.1.0 < 2.1.0.post3 < 2.1.0.post8 (version_key reads
    "post" as a pre-release tag); local tags and dev suffixes aside; unreadable versions first."""
    from packaging.version import InvalidVersion, Version

    try:
        return (1, Version(norm_pip(version)))
    except InvalidVersion:
        return (0, Version("0"))


def pip_equal(a: str, b: str) -> bool:
    try:
        from packaging.version import InvalidVersion, Version
        try:
            return Version(norm_pip(a)) == Version(norm_pip(b))
        except InvalidVersion:
            pass
    except ImportError:  # pragma: no cover
        pass
    return norm_pip(a).lower() == norm_pip(b).lower()


def in_range(version: str, spec: str) -> bool | None:
    """``3.10.12`` in ``>=3.10,<3.12``; None when the spec cannot be read."""
    try:
        from packaging.specifiers import SpecifierSet
        from packaging.version import Version
        return Version(base_release(version)) in SpecifierSet(spec)
    except Exception:  # noqa: BLE001
        return None


def matches(bound: str, version: str, kind: str) -> bool:
    """A known_bad value: exact version, or ``<X`` / ``<=X`` / ``>=X`` / ``>X``."""
    bound = str(bound).strip()
    m = re.match(r"^(<=|>=|<|>|==)?\s*(.+)$", bound)
    op, want = m.group(1) or "==", m.group(2)
    if kind == "pip":
        try:
            from packaging.version import Version
            c = (Version(norm_pip(version)) > Version(norm_pip(want))) - (Version(norm_pip(version)) < Version(norm_pip(want)))
        except Exception:  # noqa: BLE001
            c = cmp_versions(version, want)
    else:
        c = cmp_versions(norm_cann(version) if kind == "cann" else version, norm_cann(want) if kind == "cann" else want)
    return {"==": c == 0, "<": c < 0, "<=": c <= 0, ">": c > 0, ">=": c >= 0}[op]
