"""preflight.json, schema 1 (DESIGN.md): other tools read it, so its shape is a contract."""

from __future__ import annotations

import json
import os
import tempfile


def write_json(path: str, document: dict) -> None:
    """Write atomically: a reader never sees half a report."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".preflight-", suffix=".json", dir=directory)
    try:
        os.chmod(tmp, 0o644)  # a report, readable like the HTML next to it
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            # Results (preflight.results.Result) become their JSON form one at a time as they are
            # written: no second copy of every result in memory.
            json.dump(document, fh, indent=1, ensure_ascii=False, default=_plain)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _plain(value):
    if hasattr(value, "to_json"):
        return value.to_json()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
