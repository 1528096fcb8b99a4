"""preflight.json, schema 1 (DESIGN.md): other tools read it, so its shape is a contract."""

from __future__ import annotations

import json
import os
import tempfile


def write_json(path: str, document: dict) -> None:
    """Write atomically: a reader never sees half a report."""
    def write(fh):
        _write(fh, document, 0)
        fh.write("\n")

    write_atomically(path, write, 0o644)  # a report, readable like the HTML next to it


def write_atomically(path: str, write, mode: int) -> None:
    """``write(fh)`` into a temporary file beside ``path`` (permissions ``mode``), then moved
    into place: whole or not at all, and no temporary file left when writing fails."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".preflight-", suffix=".json", dir=directory)
    try:
        os.chmod(tmp, mode)
        # backslashreplace: a lone surrogate (a byte that was not UTF-8, kept by surrogateescape or
        # read back from saved facts) is written as the JSON escape \udcXX, which reads back as itself,
        # instead of aborting the whole report.
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def unwritable(path: str) -> str | None:
    """Why ``path`` cannot be written as a file, or None: checked before a run or a merge writes
    anything.  Folders still to be made are fine: the first one that exists decides."""
    if os.path.isdir(path):
        return "is a directory; give a file name"
    if os.path.exists(path) and not os.path.isfile(path):
        return "not a regular file (it is replaced, not written into)"
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        return f"{parent} is not a writable directory"
    return None


# The outer two levels are laid out a key or an element per line, and everything below that is
# one compact line written by json's C encoder: one result or host per line (grep-able), and at
# 1000 hosts half the time of json.dump(indent=...), which only the pure-Python encoder can do.
# Results (preflight.results.Result) become their JSON form one at a time as they are written: no
# second copy of every result in memory.
_LAID_OUT = 2


def _write(fh, value, depth: int) -> None:
    pad = " " * (depth + 1)
    if depth < _LAID_OUT and isinstance(value, dict) and value:
        fh.write("{\n")
        for i, (key, item) in enumerate(value.items()):
            fh.write(("," if i else "") + ("\n" if i else "") + pad + json.dumps(str(key), ensure_ascii=False) + ": ")
            _write(fh, item, depth + 1)
        fh.write("\n" + " " * depth + "}")
    elif depth < _LAID_OUT and isinstance(value, (list, tuple)) and value:
        fh.write("[\n")
        for i, item in enumerate(value):
            fh.write((",\n" if i else "") + pad)
            _write(fh, item, _LAID_OUT)
        fh.write("\n" + " " * depth + "]")
    else:
        fh.write(json.dumps(value, ensure_ascii=False, default=_plain))


def _plain(value):
    if hasattr(value, "to_json"):
        return value.to_json()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
