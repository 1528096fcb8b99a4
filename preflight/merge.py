"""``preflight-merge``: one report from the ``preflight.json`` of several controllers.

A fleet too big for one controller is split into inventory shards (groups, racks), each run
from its own controller; this joins their schema-1 documents into one, and optionally writes
its matrix page::

    preflight-merge -o fleet.json --matrix fleet.html shard-a/preflight.json shard-b/preflight.json ...
    preflight merge -o fleet.json shard-*/preflight.json        # the same

Hosts and their results are concatenated; a host found in two shards is kept from the first
and named in ``merge.duplicates`` (the merged run is then not ready).  Cluster-wide results
(``host: null``) judged each shard alone: they are kept, each with ``shard`` naming its file
(as each host is); what a passing agreement check found every node of its shard to agree on
(``agreed``) is compared across the shards, a difference being a failed result of the merge
(:func:`_across_shards`); the other cluster-wide checks never compared nodes of different shards
(``merge.notes`` names them).  ``ready`` is true only when
every shard is ready and complete and every shard ran the same checks; ``merge.not_ready``
says why not, ``merge.notes`` what else differs between the shards (preflight version,
``--strict``).  Exit code: 0 ready, 1 not ready, 4 a file that cannot be read or an output
that is one of the inputs.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter

from . import __version__
from .reachable import CHECK_ID
from .results import OUTCOMES, one_line


class MergeError(Exception):
    pass


# What merge() and the matrix page read, with the JSON types the current preflight writes there
# (run.py document()/hosts_json(), Result.to_json()). Checked on load, before anything is written:
# a bad shard is then one clear line and exit code 4, not a traceback (exit 1, "not ready" to CI)
# or a traceback after the merged JSON was already written. A key read as d[key] is required.
# null is allowed where the schema or a merged document (``started_at`` of no shard) writes it.
_STR, _STR_OR_NULL, _LIST = (str,), (str, type(None)), (list,)
_BOOL = (bool,)
_TOP = {"started_at": (False, _STR_OR_NULL), "jobs": (False, _LIST), "ready": (False, _BOOL),
        "interrupted": (False, _BOOL), "strict": (False, _BOOL)}
_HOST = {"name": (True, _STR), "reachable": (False, _BOOL), "shard": (False, _STR_OR_NULL),
         "address": (False, _STR_OR_NULL), "error": (False, _STR_OR_NULL)}
_JOB = {"path": (False, _STR_OR_NULL), "kind": (False, _STR_OR_NULL), "notes": (False, _LIST)}
_RESULT = {"check": (True, _STR), "outcome": (True, _STR), "message": (True, _STR),
           "host": (True, _STR_OR_NULL), "subject": (False, _STR_OR_NULL),
           "remedy": (False, _STR_OR_NULL), "reference": (False, _STR_OR_NULL),
           "outliers": (False, _LIST), "shard": (False, _STR_OR_NULL), "agreed": (False, (dict,))}


# JSON's names for the types, as the user editing the file sees them.
_KIND = {bool: "a boolean", str: "a string", int: "a number", float: "a number", list: "an array",
         dict: "an object", type(None): "null"}


def _json_kind(value) -> str:
    return _KIND[type(value)]  # type(), not isinstance: True is an int too


def _check(where: str, obj, fields: dict) -> None:
    """MergeError (its place, not yet its file) unless ``obj`` is an object with ``fields``;
    ``where`` is "" for the document itself, else e.g. "hosts[3]"."""
    if not isinstance(obj, dict):
        raise MergeError(f"{where}: expected an object, got {_json_kind(obj)}")
    prefix = where + "." if where else ""
    for key, (required, types) in fields.items():
        if key not in obj:
            if required:
                raise MergeError(f"{where}: missing {key!r}")
            continue
        if not isinstance(obj[key], types):
            wanted = " or ".join(_KIND[t] for t in types)
            raise MergeError(f"{prefix}{key}: expected {wanted}, got {_json_kind(obj[key])}")


def _validate(doc: dict) -> None:
    _check("", doc, _TOP)
    for i, h in enumerate(doc["hosts"]):
        _check(f"hosts[{i}]", h, _HOST)
    for i, j in enumerate(doc.get("jobs") or ()):
        _check(f"jobs[{i}]", j, _JOB)
        for k, note in enumerate(j.get("notes") or ()):
            if not isinstance(note, str):
                raise MergeError(f"jobs[{i}].notes[{k}]: expected a string, got {_json_kind(note)}")
    names = {h.get("name") for h in doc["hosts"]}
    for i, r in enumerate(doc["results"]):
        _check(f"results[{i}]", r, _RESULT)
        if r.get("host") is not None and r["host"] not in names:
            # It would be dropped from the merge without a word.
            raise MergeError(f"results[{i}].host: {r['host']!r} is not in this file's hosts")
        if r["outcome"] not in OUTCOMES:
            raise MergeError(f"results[{i}].outcome: {r['outcome']!r} is not one of {', '.join(OUTCOMES)}")
        for j, name in enumerate(r.get("outliers", ())):
            if not isinstance(name, str):
                raise MergeError(f"results[{i}].outliers[{j}]: expected a string, got {_json_kind(name)}")
        for key, value in (r.get("agreed") or {}).items():
            if not isinstance(value, str):
                raise MergeError(f"results[{i}].agreed.{key}: expected a string, got {_json_kind(value)}")


def _load(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except OSError as exc:
        raise MergeError(f"{path}: cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise MergeError(f"{path}: not JSON ({exc})") from None
    # type() is int: "schema": true (True == 1) or 1.0 is not schema 1.
    if not isinstance(doc, dict) or type(doc.get("schema")) is not int or doc["schema"] != 1 \
            or not isinstance(doc.get("hosts"), list) or not isinstance(doc.get("results"), list):
        raise MergeError(f"{path}: not a preflight.json (schema 1) document")
    try:
        _validate(doc)
    except MergeError as exc:
        raise MergeError(f"{path}: {exc}") from None
    return doc


def _shard_ready(doc: dict) -> bool:
    """A shard's own verdict where it has one, and what it holds judged as the run would judge
    it (every host reached, nothing failed or in error): a hand-edited or older file's
    ``ready: true`` beside a failure or an unreachable host is not READY."""
    return doc.get("ready") is not False and _judged_ready(doc)


def _judged_ready(doc: dict) -> bool:
    strict = doc.get("strict") is True
    return (not doc.get("interrupted") and all(h.get("reachable") is True for h in doc["hosts"])
            and not any(r["outcome"] in ("failed", "error") or (strict and r["outcome"] == "warning")
                        for r in doc["results"]))


def _differences(docs: list[tuple[str, dict]]) -> tuple[list[str], list[str]]:
    """What makes the shards' results not one run's, as (holes, notes): a check one shard did not
    run is a hole in the fleet's verdict (the merge is then not ready); another preflight version
    or --strict on some shards only is a note.  Both are named in the merged report."""
    holes, notes = [], []
    # cluster.reachable's failures are the run's own record when the check was not selected: no check set.
    checks = {path: {r["check"] for r in doc["results"] if r["check"] != CHECK_ID} for path, doc in docs}
    runs = Counter(c for ran in checks.values() for c in ran)
    half = len(docs) / 2

    def shown(names):
        return ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")

    # The shard that differs is named: most shards' checks are the fleet's, a check few ran is theirs.
    has_results = {path: bool(doc["results"]) for path, doc in docs}  # none: said once, by merge()
    for path, ran in checks.items():
        missing = sorted(c for c, n in runs.items() if n >= half and c not in ran)
        extra = sorted(c for c in ran if runs[c] < half)
        if missing and has_results[path]:
            holes.append(f"{path} did not run {len(missing)} check(s) the other shards ran: {shown(missing)}")
        if extra:
            holes.append(f"{path} ran {len(extra)} check(s) the other shards did not: {shown(extra)}")
    versions = {}
    for path, doc in docs:
        tool = doc.get("tool") if isinstance(doc.get("tool"), dict) else {}
        versions.setdefault(str(tool.get("version")), []).append(path)
    if len(versions) > 1:
        notes.append("the shards were run by different preflight versions: "
                     + "; ".join(f"{v} ({', '.join(paths)})" for v, paths in versions.items()))
    strict = [path for path, doc in docs if doc.get("strict") is True]
    if strict and len(strict) < len(docs):
        notes.append(f"only {', '.join(strict)} ran with --strict: warnings did not fail the other shards")
    # Each shard's cluster-wide and cross-node checks saw its own nodes only: two shards each agreeing
    # within (TLS off on one, on on the other; one device IP in both) merged as READY, said nowhere.
    # What the agreement checks agreed on is compared across the shards (_across_shards); the others
    # (reachability between nodes, name resolution, clocks) judged each shard's nodes alone.
    compared = {r["check"] for _, doc in docs for r in doc["results"] if r.get("agreed")}
    across = sorted({r["check"] for _, doc in docs for r in doc["results"] if r["check"] != CHECK_ID
                     and r["outcome"] != "skipped" and (r.get("host") is None or r["check"].startswith("cluster."))}
                    - compared)
    if across and sum(1 for _, doc in docs if doc["hosts"]) > 1:
        notes.append(f"cluster-wide checks compared the nodes of each shard only, never nodes of different "
                     f"shards: {shown(across)} (shards that each agree within may differ from each other); "
                     f"to judge the fleet, run them from one controller over every shard's hosts (-k cluster.)")
    return holes, notes


def _across_shards(docs: list[tuple[str, dict]], hosts: list[dict]) -> list[dict]:
    """One failed result per value the shards' agreement checks agree on within each shard but
    not between them (TLS off on one shard's nodes, on on another's; one device IP in two shards):
    what one run over every host would have found.  The nodes of the smaller side are its outliers."""
    # check -> key -> value -> the shards whose nodes all have it, in the order given
    seen: dict[str, dict[str, dict[str, list[str]]]] = {}
    first: dict[str, dict] = {}
    for path, doc in docs:
        for r in doc["results"]:
            if r.get("host") is None and r["outcome"] == "passed" and r.get("agreed"):
                first.setdefault(r["check"], r)
                for key, value in r["agreed"].items():
                    shards = seen.setdefault(r["check"], {}).setdefault(key, {}).setdefault(value, [])
                    shards.append(_label(path, r.get("shard")))
    nodes: dict[str, list[str]] = {}  # shard label -> its hosts reached (the others agreed to nothing)
    for h in hosts:
        if h.get("reachable") is not False:
            nodes.setdefault(h["shard"], []).append(h["name"])
    found = []
    catalog = _catalog()
    for check, keys in seen.items():
        info = catalog.get(check)
        severity = info.severity if info else "error"
        for key, values in keys.items():
            if len(values) < 2:
                continue
            # The value most nodes have is the fleet's; the shards with another hold the outliers.
            size = {v: sum(len(nodes.get(s, ())) for s in shards) for v, shards in values.items()}
            majority = max(values, key=lambda v: (size[v], -list(values).index(v)))
            odd = [name for v, shards in values.items() if v != majority for s in shards for name in nodes.get(s, ())]
            # A value naming its node first (a device IP's "node-03 npu0"): those nodes, on every side, as
            # one run names every node holding the address, not the whole of the smaller shard.
            owners = [v.split(" ", 1)[0] for v, shards in values.items()
                      if any(v.split(" ", 1)[0] in nodes.get(s, ()) for s in shards)]
            if len(owners) == len(values):
                odd = owners
            described = "; ".join(f"{v} on the nodes of {', '.join(shards)} ({size[v]} hosts)"
                                  for v, shards in values.items())
            observed = f"{key}: {described}"
            expected = "the same on every node of the fleet (each shard agrees within, not with the others)"
            found.append({"check": check, "host": None, "subject": key, "outcome":
                          "warning" if severity == "warning" else "failed", "severity": severity,
                          "message": f"{key} across the shards: {described}; expected {expected}",
                          "remedy": info.remedy if info else "", "reference": info.reference if info else
                          first[check].get("reference", ""), "observed": observed, "expected": expected,
                          "outliers": sorted(set(odd)), "nodeid": None, "across_shards": True})
    return found


def _catalog() -> dict:
    """The built-in checks' declarations by id (their remedy and severity for a finding the merge
    makes); empty where the catalog cannot be imported."""
    try:
        from .check import catalog

        return catalog()
    except Exception:  # noqa: BLE001 - the merge still says what differs, without the remedy
        return {}


def merge(docs: list[tuple[str, dict]]) -> dict:
    if not docs:
        raise MergeError("nothing to merge: give at least one preflight.json")
    hosts, results, shards, duplicates, why, jobs = [], [], [], [], [], []
    seen: dict[str, str] = {}
    for path, doc in docs:
        if not doc["results"]:
            why.append(f"{path}: no check result (the shard checked nothing)")
        keep = set()
        for h in doc["hosts"]:
            name = h.get("name")
            if name in seen:
                duplicates.append({"host": name, "kept_from": seen[name], "dropped_from": path})
                continue
            seen[name] = path
            keep.add(name)
            # The shard a host came from: a cluster-wide result speaks for its own shard's hosts only.
            # A merged file merged again names both (two regions' "ra/preflight.json" stay apart).
            hosts.append({**h, "shard": _label(path, h.get("shard"))})
        for r in doc["results"]:
            if r.get("across_shards") is True:
                continue  # a merged file merged again: made anew from its shards' agreed values
            if r.get("host") is None:
                results.append({**r, "shard": _label(path, r.get("shard"))})
            elif r["host"] in keep:
                results.append(r)
        jobs.extend({**j, "shard": _label(path, j.get("shard"))} for j in doc.get("jobs") or () if isinstance(j, dict))
        ready = _shard_ready(doc)
        shards.append({"file": path, "inventory": doc.get("inventory"), "run_id": doc.get("run_id"),
                       "started_at": doc.get("started_at"), "duration_s": doc.get("duration_s"),
                       "hosts": len(doc["hosts"]), "ready": ready,
                       "interrupted": bool(doc.get("interrupted")), "exit_code": doc.get("exit_code")})
        if doc.get("interrupted"):
            why.append(f"{path}: the run was interrupted")
        elif not ready:
            why.append(f"{path}: not ready" + ("" if doc.get("ready") is False else
                                               " (judged from its results: the file has no 'ready')"
                                               if not isinstance(doc.get("ready"), bool) else
                                               " (judged from its hosts and results, though the file says ready)"))
    for d in duplicates:
        why.append(f"{d['host']} is in {d['kept_from']} and {d['dropped_from']} (kept from the first)")
    holes, notes = _differences(docs)
    why.extend(holes)
    strict = all(d.get("strict") is True for _, d in docs)
    differ: dict[str, list[dict]] = {}
    for r in _across_shards(docs, hosts):
        results.append(r)
        if r["outcome"] == "failed" or strict:
            differ.setdefault(r["check"], []).append(r)
    for check, found in differ.items():  # one line a check: a copied hccn.conf repeats hundreds of IPs
        why.append(f"{check}: {found[0]['message']}" + (f" (and {len(found) - 1} more such)" if len(found) > 1 else ""))
    summary = dict.fromkeys(OUTCOMES, 0)
    for r in results:
        summary[r.get("outcome")] = summary.get(r.get("outcome"), 0) + 1
    ready = not why
    starts = [s["started_at"] for s in shards if s["started_at"]]
    durations = [s["duration_s"] for s in shards if isinstance(s["duration_s"], (int, float))]
    gathers = [d.get("gather_s") for _, d in docs if isinstance(d.get("gather_s"), (int, float))]
    return {
        "schema": 1,
        "tool": {"name": "ascend-preflight", "version": __version__},
        "inventory": ", ".join(str(s["inventory"]) for s in shards),
        "started_at": min(starts) if starts else None,
        "run_id": "merged-" + "+".join(str(s["run_id"]) for s in shards),
        "interrupted": any(s["interrupted"] for s in shards),
        "duration_s": max(durations) if durations else None,  # shards run side by side
        "gather_s": max(gathers) if gathers else None,
        "ready": ready,
        "strict": strict,  # every warning judged as a failure
        "exit_code": 0 if ready else 1,
        "summary": summary,
        "hosts": hosts,
        "results": results,
        **({"jobs": jobs} if jobs else {}),
        "merge": {"shards": shards, "duplicates": duplicates, "not_ready": why, "notes": notes},
    }


def _label(path: str, inner: str | None) -> str:
    return f"{path} > {inner}" if inner else path


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # a usage error is exit 4, as for preflight itself (argparse: 2)
        self.print_usage(sys.stderr)
        self.exit(4, f"{self.prog}: error: {message}\n")


def _writable(path: str, option: str, inputs: list[str]) -> None:
    """Checked before anything is written: a merged JSON saying READY must not be left behind by
    a --matrix that cannot be written, and no input is overwritten by the merge."""
    from .report.json_report import unwritable

    for given in inputs:
        if os.path.exists(path) and os.path.samefile(path, given):
            raise MergeError(f"{option} {path}: is one of the inputs; write the merge to another file")
    why = unwritable(path)
    if why:
        raise MergeError(f"{option} {path}: {why}")


def main(argv: list[str] | None = None) -> int:
    ap = _Parser(prog="preflight-merge", description="Merge the preflight.json of several "
                 "controllers (inventory shards) into one report.")
    ap.add_argument("inputs", nargs="+", metavar="preflight.json")
    ap.add_argument("-o", "--output", default="preflight-merged.json", help="merged JSON (default %(default)s)")
    ap.add_argument("--matrix", metavar="HTML", help="also write the host x check matrix page here")
    args = ap.parse_args(argv)
    try:
        if len({os.path.realpath(p) for p in args.inputs}) < len(args.inputs):
            raise MergeError("the same file is given twice")
        doc = merge([(p, _load(p)) for p in args.inputs])
        outputs = [(args.output, "-o")]
        if args.matrix:
            from .report.matrix import stylesheet_of
            outputs += [(args.matrix, "--matrix"), (stylesheet_of(args.matrix), "--matrix's stylesheet")]
        seen: dict[str, str] = {}
        for path, option in outputs:
            _writable(path, option, args.inputs)
            if os.path.realpath(path) in seen:
                raise MergeError(f"{option} {path}: is also {seen[os.path.realpath(path)]}'s file; give each its own")
            seen[os.path.realpath(path)] = option
    except MergeError as exc:
        print(f"preflight-merge: {exc}", file=sys.stderr)
        return 4
    from .report.json_report import write_json

    # The checks above miss what only the write shows (root passes access(); a full disk, /proc).
    try:
        write_json(args.output, doc)
    except OSError as exc:
        print(f"preflight-merge: -o {args.output}: cannot write it: {exc.strerror or exc}", file=sys.stderr)
        return 4
    if args.matrix:
        from .report.matrix import write_matrix

        try:
            write_matrix(args.matrix, doc)
        except OSError as exc:
            os.unlink(args.output)  # no merged JSON without the page asked for beside it
            print(f"preflight-merge: --matrix {args.matrix}: cannot write it: {exc.strerror or exc} (nothing "
                  f"written)", file=sys.stderr)
            return 4
    s = doc["summary"]
    print(f"{len(doc['hosts'])} hosts from {len(args.inputs)} shard(s): "
          + (", ".join(f"{n} {k}" for k, n in s.items() if n) or "no result")
          + f"; {'READY' if doc['ready'] else 'NOT READY'}"
          + (f"; {len(doc['merge']['duplicates'])} duplicate host(s)" if doc["merge"]["duplicates"] else "")
          + f" -> {one_line(args.output)}")
    # What a shard's file says is printed as text: its escapes cannot clear the screen or forge a line.
    for reason in doc["merge"]["not_ready"]:
        print(f"  not ready: {one_line(reason)}")
    for note in doc["merge"]["notes"]:
        print(f"  note: {one_line(note)}")
    return 0 if doc["ready"] else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
