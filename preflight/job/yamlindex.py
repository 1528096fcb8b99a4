"""A YAML job file as {dotted key: (value node, line)}: ROLL pipelines and MindSpeed-MM's FSDP2
trainer configs are read key by key, each value cited with its line; nothing is constructed
beyond plain scalars (``yaml.compose``, safe loader), and ``${key}`` interpolations of other
keys are filled in as OmegaConf would."""

from __future__ import annotations

import re

import yaml

from . import JobError


def compose(path: str, text: str):
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise JobError(path, line, f"YAML syntax: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise JobError(path, None, f"YAML: {exc}") from None


_MERGE = "tag:yaml.org,2002:merge"


def index_of(node, prefix=(), out=None, depth=0):
    """{dotted key: (value node, line)} for every mapping entry.  ``<<: *anchor`` merge keys are
    followed as YAML (and OmegaConf) read them: the merged mapping's entries first (of several,
    the first listed wins), the mapping's own entries over them, each replacing a merged entry of
    the same key whole (the merge is shallow)."""
    out = {} if out is None else out
    if not isinstance(node, yaml.MappingNode) or depth > 32:  # 32: an alias to its own ancestor
        return out
    merged = []
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.tag == _MERGE:
            merged.extend(m for m in (v.value if isinstance(v, yaml.SequenceNode) else [v])
                          if isinstance(m, yaml.MappingNode))
    for source in reversed(merged):
        index_of(source, prefix, out, depth + 1)
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.tag != _MERGE:
            key = (*prefix, str(k.value))
            dotted = ".".join(key)
            if dotted in out:  # replacing a merged entry (or a lower-priority merge's): whole, sub-keys too
                for stale in [name for name in out if name.startswith(dotted + ".")]:
                    del out[stale]
            out[dotted] = (v, k.start_mark.line + 1)
            index_of(v, key, out, depth + 1)
    return out


_INTERP = re.compile(r"\$\{([A-Za-z_][\w.]*)\}")


def scalar(index, key, depth=0):
    entry = index.get(key)
    if entry is None or not isinstance(entry[0], yaml.ScalarNode):
        return None
    value = str(entry[0].value)

    def sub(m):
        inner = scalar(index, m.group(1), depth + 1) if depth < 8 else None
        return inner if inner is not None else m.group(0)
    return _INTERP.sub(sub, value)
