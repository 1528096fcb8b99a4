"""Model-directory facts: pure parsers of ``config.json``, safetensors headers, the
``model.safetensors.index.json`` shard list and the checkpoint layout (HF, or Megatron
``iter_XXXXXXX/mp_rank_TT[_PPP][_EEE]``).

The directory is read where the job will read it: on the nodes by the probe command
:data:`MODEL_COMMAND` (read-only; it lists two levels, reads config/index files capped,
and of each ``*.safetensors`` only the 8-byte length and the JSON header, never a tensor),
or on the controller by :func:`read_model_dirs_local`, which writes the very same bundle.
Both go through :func:`parse_model_bundle`.
"""

from __future__ import annotations

import base64
import json
import glob
import math
import os
import re
import struct
import zlib
from dataclasses import dataclass, field

HEADER_CAP = 100 << 20  # bytes of one safetensors header read at most
FILE_CAP = 4 << 20  # bytes of config.json / index json read at most
LIST_CAP = 5000  # directory entries listed at most
META_FILES = ("config.json", "model.safetensors.index.json", "pytorch_model.bin.index.json",
              "latest_checkpointed_iteration.txt")
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}
DTYPE_NAMES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
               "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
               "F8_E4M3": "float8_e4m3", "F8_E5M2": "float8_e5m2"}

# The probe command: model dirs come in $PF_JOB_MODEL_DIRS (one per line), exported and quoted.
MODEL_COMMAND = r"""
if command -v gzip >/dev/null 2>&1; then pf_z() { gzip -c; }; else pf_z() { cat; }; fi
{ printf '%s\n' "$PF_JOB_MODEL_DIRS" | while IFS= read -r d; do
  [ -n "$d" ] || continue
  printf 'D %s\n' "$(printf %s "$d" | base64 -w 0)"
  if [ ! -e "$d" ]; then echo 'X missing'; continue; fi
  if [ ! -d "$d" ]; then echo 'X notdir'; continue; fi
  if [ ! -r "$d" ] || [ ! -x "$d" ]; then echo 'X unreadable'; continue; fi
  find "$d/" -mindepth 1 -maxdepth 2 -printf 'L %y %s %P\n' 2>/dev/null | head -n 5000
  for f in config.json model.safetensors.index.json pytorch_model.bin.index.json latest_checkpointed_iteration.txt; do
    [ -f "$d/$f" ] && [ -r "$d/$f" ] && printf 'F %s %s\n' "$(head -c 4194304 -- "$d/$f" | base64 -w 0)" "$f"
  done
  for f in "$d"/*.safetensors; do
    [ -f "$f" ] || continue
    n=$(head -c 8 -- "$f" 2>/dev/null | od -An -t u8 | tr -d ' \n')
    case $n in ''|*[!0-9]*) printf 'S - - %s\n' "${f##*/}"; continue;; esac
    if [ "$n" -gt 104857600 ]; then printf 'S %s - %s\n' "$n" "${f##*/}"; continue; fi
    printf 'S %s ' "$n"
    head -c "$((8 + n))" -- "$f" | tail -c +9 | base64 -w 0
    printf ' %s\n' "${f##*/}"
  done
done; } | pf_z | base64 -w 0
"""

# Paths the job reads, one per line in $PF_JOB_PATHS: does each exist here, and how big is it.
PATHS_COMMAND = r"""
printf '%s\n' "$PF_JOB_PATHS" | while IFS= read -r p; do
  [ -n "$p" ] || continue
  b=$(printf %s "$p" | base64 -w 0)
  if [ -d "$p" ] && [ -e "$p.bin" ] && [ -e "$p.idx" ]; then
    # A folder beside a data prefix of its name: a prefix to Megatron's --data-path, a folder to the rest.
    printf 'P dirprefix %s %s\n' "$(stat -Lc %s -- "$p.bin" 2>/dev/null)" "$b"
  elif [ -d "$p" ]; then printf 'P dir - %s\n' "$b"
  elif [ -e "$p" ]; then printf 'P file %s %s\n' "$(stat -Lc %s -- "$p" 2>/dev/null)" "$b"
  elif [ -e "$p.bin" ]; then
    k=prefix; [ -e "$p.idx" ] || k=noidx
    printf 'P %s %s %s\n' "$k" "$(stat -Lc %s -- "$p.bin" 2>/dev/null)" "$b"
  elif [ -e "${p}_text_document.bin" ]; then
    # Megatron opens PREFIX.bin and PREFIX.idx exactly; preprocess_data named them PREFIX_text_document.
    printf 'P suffix %s %s\n' "$(stat -Lc %s -- "${p}_text_document.bin" 2>/dev/null)" "$b"
  elif pk=( "${p}"_packed_*_document.bin ) && [ -e "${pk[0]}" ]; then
    # An instruction / DPO dataset (MindSpeed-LLM --is-instruction-dataset): one file per field.
    printf 'P prefix %s %s\n' "$(stat -Lc %s -- "${pk[@]}" 2>/dev/null | awk '{s += $1} END {print s + 0}')" "$b"
  else printf 'P missing - %s\n' "$b"; fi
done
"""


# Megatron's get_checkpoint_name: mp_rank_{tp:02d}, then _{pp:03d} only when the pipeline-parallel
# size is > 1, then _{ep:03d} only when the expert-parallel size is > 1.
_MP_RANK = re.compile(r"mp_rank_(\d{2})((?:_\d{3}){0,2})")


@dataclass(frozen=True)
class MegatronSplit:
    """How a Megatron checkpoint is split, as its rank folder names say.

    Two 3-digit suffixes are PP then EP; one suffix is PP *or* EP (the names are the same),
    which only the job's own PP/EP can tell."""

    tp: int
    suffixes: tuple[int, ...]  # ranks per 3-digit suffix: () none, (PP or EP,), (PP, EP)

    def pp_ep(self) -> tuple[int, int] | None:
        """(PP, EP) when the names alone tell; None for a single suffix."""
        if not self.suffixes:
            return 1, 1
        if len(self.suffixes) == 2:
            return self.suffixes
        return None


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    file: str

    @property
    def mb(self) -> float:
        return self.nbytes / 2 ** 20

    def describe(self) -> str:
        return f"{self.name} {list(self.shape)} {DTYPE_NAMES.get(self.dtype, self.dtype)}"


@dataclass
class ModelDir:
    path: str
    problem: str | None = None  # missing, notdir, unreadable
    entries: dict[str, tuple[str, int]] = field(default_factory=dict)  # relpath -> (type f/d/l, size)
    texts: dict[str, str] = field(default_factory=dict)  # META_FILES that exist
    headers: dict[str, list[TensorInfo]] = field(default_factory=dict)
    header_errors: dict[str, str] = field(default_factory=dict)
    truncated: bool = False

    # -- config.json ---------------------------------------------------------------------
    def config(self) -> dict | None:
        """config.json, or None when absent; ValueError when unreadable."""
        text = self.texts.get("config.json")
        if text is None:
            return None
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{self.file('config.json')} is not valid JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise ValueError(f"{self.file('config.json')} is not a JSON object")
        return doc

    def config_value(self, *keys: str):
        """A config value, also from ``text_config``/``llm_config`` of multimodal configs."""
        try:
            doc = self.config()
        except ValueError:
            return None
        if doc is None:
            return None
        for section in (doc, doc.get("text_config"), doc.get("llm_config"), doc.get("language_config")):
            if isinstance(section, dict):
                for key in keys:
                    v = section.get(key)
                    if isinstance(v, int) and not isinstance(v, bool):
                        return v
        return None

    def file(self, name: str) -> str:
        return self.path.rstrip("/") + "/" + name

    # -- files -----------------------------------------------------------------------
    def top_files(self) -> list[str]:
        return sorted(p for p, (t, _) in self.entries.items() if "/" not in p and t != "d")

    def top_dirs(self) -> list[str]:
        return sorted(p for p, (t, _) in self.entries.items() if "/" not in p and t == "d")

    def hf_weight_files(self) -> list[str]:
        return [f for f in self.top_files()
                if f.endswith(".safetensors") or re.fullmatch(r"pytorch_model.*\.bin", f)]

    def layout(self) -> str:
        """``megatron`` (iter_*/release with mp_rank_*), ``hf`` (safetensors/bin weights), else ``other``."""
        if self.megatron_ranks() or "latest_checkpointed_iteration.txt" in self.entries:
            return "megatron"
        if self.hf_weight_files():
            return "hf"
        return "other"

    def megatron_iteration(self) -> str | None:
        dirs = [d for d in self.top_dirs() if re.fullmatch(r"iter_\d{7}|release", d)]
        latest = (self.texts.get("latest_checkpointed_iteration.txt") or "").strip()
        if latest == "release" and "release" in dirs:
            return "release"
        if latest.isdigit() and f"iter_{int(latest):07d}" in dirs:
            return f"iter_{int(latest):07d}"
        if not dirs:
            return None
        return sorted(dirs, key=lambda d: (d == "release", d))[-1]

    def tracker_problem(self) -> str | None:
        """Why Megatron would not load this checkpoint as it stands: no tracker file (it warns and
        starts from random weights), or one naming a folder that is not there (it fails)."""
        if "latest_checkpointed_iteration.txt" not in self.entries:
            return ("no latest_checkpointed_iteration.txt: Megatron does not load the checkpoint and starts from "
                    "random weights")
        latest = (self.texts.get("latest_checkpointed_iteration.txt") or "").strip()
        if latest == "release":
            wanted = "release"
        elif latest.isdigit():
            wanted = f"iter_{int(latest):07d}"
        else:
            return f"latest_checkpointed_iteration.txt holds {latest[:40]!r}, not an iteration or 'release'"
        if wanted not in self.top_dirs():
            return f"latest_checkpointed_iteration.txt names {wanted}, which is not in the folder"
        return None

    def megatron_ranks(self) -> list[str]:
        it = self.megatron_iteration()
        if it is None:
            return []
        return sorted(p.split("/", 1)[1] for p, (t, _) in self.entries.items()
                      if p.startswith(it + "/") and t == "d" and _MP_RANK.fullmatch(p.split("/", 1)[1]))

    def megatron_split(self) -> MegatronSplit | None:
        """TP and the suffix rank counts of the checkpoint, from its mp_rank_TT[_PPP][_EEE] folders."""
        ranks = self.megatron_ranks()
        if not ranks:
            return None
        tps, suffixes = set(), []
        for r in ranks:
            m = _MP_RANK.fullmatch(r)
            tps.add(int(m.group(1)))
            for i, rank in enumerate(m.group(2).split("_")[1:]):
                if i == len(suffixes):
                    suffixes.append(set())
                suffixes[i].add(int(rank))
        return MegatronSplit(max(tps) + 1, tuple(max(s) + 1 for s in suffixes))

    # -- index and headers ------------------------------------------------------------
    def index_shards(self) -> dict[str, list[str]] | None:
        """{shard file: [tensor names]} from model.safetensors.index.json; None when absent."""
        text = self.texts.get("model.safetensors.index.json")
        if text is None:
            return None
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{self.file('model.safetensors.index.json')} is not valid JSON ({exc})") from None
        wm = doc.get("weight_map") if isinstance(doc, dict) else None
        if not isinstance(wm, dict):
            raise ValueError(f"{self.file('model.safetensors.index.json')} has no weight_map")
        shards: dict[str, list[str]] = {}
        for tensor, shard in wm.items():
            shards.setdefault(str(shard), []).append(str(tensor))
        return shards

    def tensors(self) -> list[TensorInfo]:
        return [t for ts in self.headers.values() for t in ts]

    def largest_tensor(self) -> TensorInfo | None:
        """The tensor with the most elements: the largest once every weight is in one dtype."""
        ts = self.tensors()
        return max(ts, key=lambda t: (math.prod(t.shape), t.nbytes, t.name)) if ts else None


def parse_safetensors_header(name: str, header: bytes) -> list[TensorInfo]:
    """The tensors a safetensors JSON header declares (``dtype``, ``shape``, ``data_offsets``)."""
    try:
        doc = json.loads(header.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"header is not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ValueError("header is not a JSON object")
    out = []
    for tname, spec in doc.items():
        if tname == "__metadata__":
            continue
        if not isinstance(spec, dict) or not isinstance(spec.get("shape"), list) or "dtype" not in spec:
            raise ValueError(f"tensor {tname!r} has no dtype/shape")
        shape = tuple(int(d) for d in spec["shape"])
        dtype = str(spec["dtype"])
        size = DTYPE_BYTES.get(dtype)
        if size is not None:
            nbytes = math.prod(shape) * size
        else:
            offs = spec.get("data_offsets") or [0, 0]
            nbytes = int(offs[1]) - int(offs[0])
        out.append(TensorInfo(tname, dtype, shape, nbytes, name))
    return out


def safetensors_header_of(blob: bytes) -> bytes:
    """The JSON header of a safetensors file, given its first bytes (8-byte length + header)."""
    if len(blob) < 8:
        raise ValueError("shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > HEADER_CAP:
        raise ValueError(f"header length {n} is over {HEADER_CAP} bytes")
    if len(blob) < 8 + n:
        raise ValueError(f"header declares {n} bytes, file has {len(blob) - 8}")
    return blob[8:8 + n]


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text.strip(), validate=False)
    except (ValueError, TypeError):
        return b""


def _unpack(stdout: str) -> tuple[str, bool]:
    """The bundle text: base64 of gzip (from a node) or plain (controller); truncation noted."""
    s = stdout.strip()
    if not s or s.startswith(("D ", "P ")):
        return stdout, False
    raw = _b64(s)
    if raw[:2] == b"\x1f\x8b":
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            data = d.decompress(raw, 64 << 20)
        except zlib.error:
            return "", True
        return data.decode("utf-8", errors="replace"), not d.eof
    return raw.decode("utf-8", errors="replace"), False


def parse_model_bundle(stdout: str) -> dict[str, ModelDir]:
    """{model dir: ModelDir} from the output of :data:`MODEL_COMMAND` (or the local reader)."""
    text, truncated = _unpack(stdout)
    dirs: dict[str, ModelDir] = {}
    cur: ModelDir | None = None
    lines = text.split("\n")
    for n, line in enumerate(lines):
        kind, _, rest = line.partition(" ")
        if kind == "D":
            path = _b64(rest).decode("utf-8", errors="replace")
            cur = dirs[path] = ModelDir(path=path)
        elif cur is None:
            continue
        elif kind == "X":
            cur.problem = rest.strip()
        elif kind == "L":
            parts = rest.split(" ", 2)
            if len(parts) == 3 and parts[1].isdigit():
                cur.entries[parts[2]] = (parts[0], int(parts[1]))
        elif kind == "F":
            blob, _, name = rest.partition(" ")
            cur.texts[name] = _b64(blob).decode("utf-8", errors="replace")
        elif kind == "S":
            parts = rest.split(" ", 2)
            if len(parts) < 3:
                continue
            size, blob, name = parts
            if blob == "-":
                cur.header_errors[name] = ("cannot read the 8-byte header length" if size == "-"
                                           else f"header of {size} bytes is over the {HEADER_CAP >> 20} MB cap")
                continue
            try:
                cur.headers[name] = parse_safetensors_header(name, _b64(blob))
            except ValueError as exc:
                cur.header_errors[name] = str(exc)
    if truncated:
        for d in dirs.values():
            d.truncated = True
    return dirs


@dataclass(frozen=True)
class PathStat:
    path: str
    # file, dir, prefix (a Megatron data prefix: PATH.bin and PATH.idx exist), noidx (PATH.bin
    # without PATH.idx), suffix (only PATH_text_document.bin: the prefix lacks preprocess_data's
    # suffix), dirprefix (a folder PATH beside PATH.bin and PATH.idx: a prefix to --data-path, a
    # folder to the rest), missing
    status: str
    size: int | None


def parse_paths(stdout: str) -> dict[str, PathStat]:
    out = {}
    for line in stdout.splitlines():
        parts = line.split(" ")
        if len(parts) != 4 or parts[0] != "P":
            continue
        path = _b64(parts[3]).decode("utf-8", errors="replace")
        out[path] = PathStat(path, parts[1], int(parts[2]) if parts[2].isdigit() else None)
    return out


# -- the same, read on the controller (--job-local) ----------------------------------------


def _enc(text: str | bytes) -> str:
    data = text.encode() if isinstance(text, str) else text
    return base64.b64encode(data).decode()


def _at(base: str | None, path: str) -> str:
    return os.path.join(base, path) if base and not os.path.isabs(path) else path


def read_model_dirs_local(paths, base: str | None = None) -> str:
    """The bundle :data:`MODEL_COMMAND` would print, read here (plain, not compressed); relative
    paths from ``base`` (the current directory when None), named as given."""
    out = []
    for given in paths:
        out.append(f"D {_enc(given)}")
        d = _at(base, given)
        if not os.path.lexists(d):
            out.append("X missing")
            continue
        if not os.path.isdir(d):
            out.append("X notdir")
            continue
        if not os.access(d, os.R_OK | os.X_OK):
            out.append("X unreadable")
            continue
        listed = 0
        for top in sorted(os.scandir(d), key=lambda e: e.name):
            for entry, rel in [(top, top.name)] + (
                    [(e, f"{top.name}/{e.name}") for e in sorted(os.scandir(top.path), key=lambda e: e.name)]
                    if top.is_dir(follow_symlinks=False) and os.access(top.path, os.R_OK | os.X_OK) else []):
                if listed >= LIST_CAP:
                    break
                kind = "l" if entry.is_symlink() else "d" if entry.is_dir() else "f"
                size = entry.stat(follow_symlinks=False).st_size
                out.append(f"L {kind} {size} {rel}")
                listed += 1
        for name in META_FILES:
            p = os.path.join(d, name)
            if os.path.isfile(p) and os.access(p, os.R_OK):
                with open(p, "rb") as fh:
                    out.append(f"F {_enc(fh.read(FILE_CAP))} {name}")
        for name in sorted(os.listdir(d)):
            p = os.path.join(d, name)
            if not name.endswith(".safetensors") or not os.path.isfile(p):
                continue
            try:
                with open(p, "rb") as fh:
                    head = fh.read(8)
                    if len(head) < 8:
                        out.append(f"S - - {name}")
                        continue
                    (n,) = struct.unpack("<Q", head)
                    if n > HEADER_CAP:
                        out.append(f"S {n} - {name}")
                        continue
                    out.append(f"S {n} {_enc(fh.read(n))} {name}")
            except OSError:
                out.append(f"S - - {name}")
    return "\n".join(out) + "\n"


def read_paths_local(paths, base: str | None = None) -> str:
    out = []
    for given in paths:
        b = _enc(given)
        p = _at(base, given)
        if os.path.isdir(p) and os.path.exists(p + ".bin") and os.path.exists(p + ".idx"):
            # A folder beside a data prefix of its name: a prefix to --data-path, a folder to the rest.
            out.append(f"P dirprefix {os.path.getsize(p + '.bin')} {b}")
        elif os.path.isdir(p):
            out.append(f"P dir - {b}")
        elif os.path.exists(p):
            out.append(f"P file {os.path.getsize(p)} {b}")
        elif os.path.exists(p + ".bin"):
            kind = "prefix" if os.path.exists(p + ".idx") else "noidx"
            out.append(f"P {kind} {os.path.getsize(p + '.bin')} {b}")
        elif os.path.exists(p + "_text_document.bin"):
            out.append(f"P suffix {os.path.getsize(p + '_text_document.bin')} {b}")
        elif packed := glob.glob(glob.escape(p) + "_packed_*_document.bin"):
            out.append(f"P prefix {sum(os.path.getsize(f) for f in packed)} {b}")
        else:
            out.append(f"P missing - {b}")
    return "\n".join(out) + "\n"
