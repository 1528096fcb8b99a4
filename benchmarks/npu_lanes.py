"""How long a node's probe spends on hccn_tool, one NPU at a time or NPUs side by side.

    python -m benchmarks.npu_lanes [--npus 8] [--latency 0.05,0.1,0.3] [--repeat 3]

No NPU here, so hccn_tool's latency is modelled: every per-NPU hccn_tool fact of the catalog is a
command that sleeps for the given latency. The node runner (preflight/noderunner.py, as sent to
nodes) runs them for N NPUs twice in the same run: with its lanes (up to MAX_LANES NPUs at once)
and with one lane (every call one after another, as before lanes). Best of ``--repeat``.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.run import machine, machine_line, utc_stamp, write_results
from preflight.facts import FACTS
from preflight.probe import _node_runner_source, new_nonce, parse_probe_output


def per_npu_facts() -> list[str]:
    return [name for name, spec in FACTS.items() if spec.tool == "hccn_tool" and spec.per_device and spec.phase == 1]


def runner_source(lanes: int | None) -> str:
    src = _node_runner_source()
    if lanes is None:
        return src
    old = next(line for line in src.splitlines() if line.startswith("MAX_LANES = "))
    return src.replace(old, f"MAX_LANES = {lanes}", 1)


def probe_s(source: str, facts: list[str], latency: float, npus: int) -> float:
    plan = [[[name, "hccn_tool", f"sleep {latency}; echo ok", True] for name in facts]]
    nonce = new_nonce()
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", source, nonce, str(1 << 20), "30", json.dumps(plan),
                           " ".join(str(d) for d in range(npus)), "/bin/bash"],
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=600)
    wall = time.monotonic() - t0
    outputs = parse_probe_output(proc.stdout, nonce).outputs
    if proc.returncode != 0 or sum(o.stdout == "ok\n" for o in outputs.values()) != len(facts) * npus:
        raise SystemExit(f"runner failed: rc {proc.returncode}: {proc.stderr[-500:]!r}")
    return wall


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--npus", type=int, default=8)
    ap.add_argument("--latency", default="0.05,0.1,0.3", help="seconds per hccn_tool call, comma-separated")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args(argv)
    t_start = time.monotonic()
    facts = per_npu_facts()
    lanes_src, serial_src = runner_source(None), runner_source(1)
    rows = []
    for latency in (float(x) for x in args.latency.split(",")):
        lanes = min(probe_s(lanes_src, facts, latency, args.npus) for _ in range(args.repeat))
        serial = min(probe_s(serial_src, facts, latency, args.npus) for _ in range(args.repeat))
        rows.append({"latency_s": latency, "npus": args.npus, "calls": len(facts) * args.npus,
                     "one_at_a_time_s": serial, "side_by_side_s": lanes, "speedup": serial / lanes})
        print(f"{latency:.2f} s a call: one at a time {serial:.2f} s, side by side {lanes:.2f} s", flush=True)
    info = machine()
    stamp = utc_stamp()
    doc = {"machine": info, "facts": facts, "rows": rows, "total_s": time.monotonic() - t_start}
    md = [f"# hccn_tool one NPU at a time vs NPUs side by side ({stamp}; python -m benchmarks.npu_lanes)", "",
          machine_line(info), "",
          "| hccn_tool latency s (modelled) | NPUs | calls | one at a time s | side by side s | speedup |",
          "|---|---|---|---|---|---|"]
    md += [f"| {r['latency_s']:.2f} | {r['npus']} | {r['calls']} | {r['one_at_a_time_s']:.2f} | "
           f"{r['side_by_side_s']:.2f} | {r['speedup']:.1f}x |" for r in rows]
    md += ["", f"- Facts: {', '.join(facts)}, each a command sleeping for the latency (no NPU on this machine).",
           "- The node runner as sent to nodes; 'one at a time' is the same runner with one lane.",
           f"- Best of {args.repeat} runs each."]
    write_results(args.out, f"npu-lanes-{stamp}", doc, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
