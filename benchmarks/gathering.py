"""Gathering in one process against gathering spread over forked shards, on the same simulated
fleet, back to back.  Not part of the test suite.

    python -m benchmarks.gathering --sizes 100,1000 --repeat 2

Per N, the full checker (`preflight --inventory INV`, every built-in check, phases one and two,
all reports) runs once per mode and repeat, the modes alternating so a busier minute of this
shared machine does not fall on one mode only:

* child   every connection in one forked gathering process (the default above 64 hosts)
* shards  the connections spread over K forked processes (--gather-process shards --gather-shards K)

Each run's results are compared with the first run's (check, host, outcome): the modes must agree.
Writes benchmarks/results/gathering-<time>.md and .json.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.run import (NAMESPACED_MAX, RESULTS, machine, machine_line, measure, one_host_inventory, preflight_cmd,
                            utc_stamp, write_results)


def _outcomes(report_dir: Path) -> list[tuple]:
    doc = json.loads((report_dir / "preflight.json").read_text())
    # Cluster-wide results have no host, per-host ones no subject.
    return sorted((r["check"], r.get("host") or "", r.get("subject") or "", r["outcome"]) for r in doc["results"]), doc


def _differs(first: list[tuple], outcomes: list[tuple]) -> dict[str, int]:
    """{check: how many of its (host, NPU) results differ from the first run's}."""
    a = {key[:3]: key[3] for key in first}
    b = {key[:3]: key[3] for key in outcomes}
    counts: dict[str, int] = {}
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            counts[key[0]] = counts.get(key[0], 0) + 1
    return counts


def _args(mode: str, shards: int) -> list[str]:
    return ["--gather-process", mode] + (["--gather-shards", str(shards)] if mode == "shards" else [])


def bench_size(n: int, modes: list[str], shards: int, repeat: int, fanout: int, scratch: Path) -> list[dict]:
    from benchmarks.fleet import LoopbackFleet, cache_fakes, namespaced

    kind = "namespaced" if n <= NAMESPACED_MAX else "loopback"
    fleet = namespaced(n) if kind == "namespaced" else LoopbackFleet(n)
    try:
        cluster = fleet if kind == "namespaced" else fleet.cluster
        inv = Path(fleet.inventory_path)
        one = one_host_inventory(inv)
        cache_fakes(cluster.nodes, lambda: measure(preflight_cmd(one, scratch / "warm", fanout), scratch / "warm.log"))
        rows, first = [], None
        for r in range(repeat):
            order = modes if r % 2 == 0 else list(reversed(modes))
            for mode in order:
                out = scratch / f"{mode}{r}"
                m = measure(preflight_cmd(inv, out, fanout) + _args(mode, shards), scratch / f"{mode}{r}.log")
                outcomes, doc = _outcomes(out)
                first = first or outcomes
                timings = doc.get("timings", {})
                rows.append({"n": n, "kind": kind, "mode": mode, "repeat": r,
                             "shards": shards if mode == "shards" else 1, "wall_s": m["wall_s"], "cpu_s": m["cpu_s"],
                             "tree_pss_mb": m["tree_pss_mb"], "rss_mb": m["rss_mb"], "box_cpu_s": m["box_cpu_s"],
                             "steal_s": m["steal_s"], "gather_s": doc["gather_s"],
                             "phase_one_s": timings.get("phase_one"), "phase_two_s": timings.get("phase_two"),
                             "gather_cpu_s": timings.get("gather_cpu_s"),
                             "gather_cpu_shards_s": timings.get("gather_cpu_shards_s"),
                             "gather_cpu_largest_shard_s": timings.get("gather_cpu_largest_shard_s"),
                             "reachable": sum(h["reachable"] for h in doc["hosts"]), "results": len(outcomes),
                             "same_results": outcomes == first, "differs": _differs(first, outcomes), "rc": m["rc"]})
                print(json.dumps({k: rows[-1][k] for k in ("n", "mode", "repeat", "wall_s", "cpu_s", "gather_s",
                                                            "phase_one_s", "reachable", "same_results")}), flush=True)
        return rows
    finally:
        fleet.close()


COLUMNS = [("N", "n", "{}"), ("nodes", "kind", "{}"), ("mode", "mode", "{}"), ("processes", "shards", "{}"),
           ("runs", "runs", "{}"), ("wall s (median)", "wall_s", "{:.1f}"), ("controller CPU s", "cpu_s", "{:.1f}"),
           ("phase one s", "phase_one_s", "{:.1f}"), ("phase two s", "phase_two_s", "{:.1f}"),
           ("gather s", "gather_s", "{:.1f}"),
           ("gathering CPU s, one process", "one_process_cpu_s", "{:.1f}"),
           ("of it in the controller", "gather_cpu_s", "{:.1f}"),
           ("in shards (all)", "gather_cpu_shards_s", "{:.1f}"),
           ("largest shard", "gather_cpu_largest_shard_s", "{:.1f}"),
           ("CPU critical path s", "critical_cpu_s", "{:.1f}"),
           ("peak MB, all processes", "tree_pss_mb", "{:.0f}"),
           ("box CPU s", "box_cpu_s", "{:.0f}"), ("hosts reached", "reachable", "{:.0f}"),
           ("same results", "same_results", "{}")]


def summarise(rows: list[dict]) -> list[dict]:
    out = []
    for key in dict.fromkeys((r["n"], r["mode"]) for r in rows):
        group = [r for r in rows if (r["n"], r["mode"]) == key]
        s = {"n": key[0], "kind": group[0]["kind"], "mode": key[1], "shards": group[0]["shards"], "runs": len(group),
             "same_results": all(r["same_results"] for r in group)}
        for k in ("wall_s", "cpu_s", "phase_one_s", "phase_two_s", "gather_s", "tree_pss_mb", "box_cpu_s", "reachable",
                  "gather_cpu_s", "gather_cpu_shards_s", "gather_cpu_largest_shard_s"):
            values = [r[k] for r in group if r.get(k) is not None]
            s[k] = statistics.median(values) if values else None
        if s["gather_cpu_s"] is not None:
            if s["gather_cpu_shards_s"] is None:  # one process did all of it
                s["one_process_cpu_s"], s["critical_cpu_s"] = s["gather_cpu_s"], s["gather_cpu_s"]
                s["gather_cpu_s"] = None
            else:  # the controller's part plus the largest shard: gathering's CPU with a core per shard
                s["critical_cpu_s"] = s["gather_cpu_s"] + s["gather_cpu_largest_shard_s"]
        out.append(s)
    return out


def table(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(c[0] for c in COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    for r in rows:
        lines.append("| " + " | ".join("–" if r.get(k) is None else f.format(r[k]) for _, k, f in COLUMNS) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,1000")
    ap.add_argument("--modes", default="child,shards")
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--fanout", type=int, default=32)
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    info = machine()
    modes = args.modes.split(",")
    rows: list[dict] = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="preflight-bench-gathering-") as tmp:
        for n in (int(s) for s in args.sizes.split(",")):
            scratch = Path(tmp) / str(n)
            scratch.mkdir()
            rows += bench_size(n, modes, args.shards, args.repeat, args.fanout, scratch)
    stamp = utc_stamp()
    summary = summarise(rows)
    doc = {"machine": info, "started": stamp, "total_s": round(time.monotonic() - t0, 1), "fanout": args.fanout,
           "runs": rows, "summary": summary}
    md = [f"# Gathering in one process vs in shards, {stamp}", "",
          f"{machine_line(info)} Fan-out {args.fanout} (shared between the shards). "
          f"Whole benchmark: {doc['total_s']:.0f} s.", "", table(summary), "",
          "- Every run is the full checker (`python -m benchmarks.gathering`); medians of the runs, the modes "
          "alternating. Controller CPU includes its children (the gathering processes).",
          "- same results: every run's (check, host, subject, outcome) list equals the first run's; where not, "
          "the checks whose results differ are listed below the table.",
          "- gathering CPU (preflight.json timings): in one process, all of phases one and two; with shards, "
          "the controller's part (phase two's plans and messages) and each shard's (handshakes, ciphers, "
          "framing). CPU critical path: the one process, or the controller's part plus the largest shard: "
          "what gathering's CPU costs in wall time when each shard has a core of its own. On this machine "
          "the simulated nodes share the same cores, so wall time does not show it.",
          "- box CPU: every core of this machine, the simulated nodes' sshd and probes included: they share "
          "the controller's cores here."]
    for r in rows:
        if r["differs"]:
            md.append(f"- N = {r['n']} {r['mode']} run {r['repeat'] + 1} vs the first run: "
                      + ", ".join(f"{check} {count}" for check, count in r["differs"].items()))
    print("\n" + table(summary))
    write_results(Path(args.out), f"gathering-{stamp}", doc, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
