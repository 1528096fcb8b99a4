"""Where the CPU goes, step by step, on a few simulated nodes: the nodes' share (everything this
machine spent minus the controller) and the controller's, per host.

    python -m benchmarks.steps [--nodes 4]

The steps are run one at a time, in-process, with the run's own code (preflight.gather,
preflight.activeprobe), on namespaced nodes with the benchmark's fakes (benchmarks/fleet.py):
connect + ``true`` (the floor), phase one (twice: the second has warm caches), then each
phase-two step.  Prints a table and writes benchmarks/results/steps-<time>.md.  Node CPU is read
off /proc/stat, so the machine should be otherwise idle.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import resource
import sys
import time
from pathlib import Path

from benchmarks.arms import catalog_needs
from benchmarks.run import RESULTS, _box_cpu, machine, measure, one_host_inventory, preflight_cmd


def _own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main(argv=None) -> int:
    from benchmarks.fleet import cache_fakes, namespaced
    from preflight.activeprobe import PhaseTwo
    from preflight.facts import resolve
    from preflight.gather import Gatherer, GatherSettings
    from preflight.inventory import load_inventory
    from preflight.run import Cluster, probe_params

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    n = args.nodes
    rows = []
    fleet = namespaced(n)
    try:
        inv = Path(fleet.inventory_path)
        scratch = inv.parent / "steps"
        scratch.mkdir(exist_ok=True)
        one = one_host_inventory(inv)
        cache_fakes(fleet.nodes, lambda: measure(preflight_cmd(one, scratch / "warm", 32), scratch / "warm.log"))
        hosts = load_inventory(str(inv)).hosts

        def step(name, fn):
            time.sleep(0.3)  # let the previous step's processes finish
            box0, own0, t0 = _box_cpu(), _own_cpu(), time.monotonic()
            fn()
            wall = time.monotonic() - t0
            time.sleep(0.5)
            own = _own_cpu() - own0
            # Clock ticks are 10 ms: a step with nothing to do can read a little below zero.
            rows.append((name, max(0.0, _box_cpu() - box0 - own) / n * 1000, own / n * 1000, wall))
            print("%-22s nodes %7.1f ms/host  controller %6.1f ms/host  wall %5.2f s" % rows[-1], flush=True)

        def floor():
            g = Gatherer(GatherSettings())
            for h in hosts:
                t = g.transport(h)
                t.connect()
                t.run("true", 10, 1000)
            g.close()

        step("connect + true", floor)
        gatherer = Gatherer(GatherSettings())
        specs = resolve(catalog_needs())
        facts = {}

        def phase_one():
            facts.update(gatherer.gather(hosts, [s for s in specs if s.phase == 1],
                                         params_for=lambda h: probe_params(h, hosts)))

        step("phase one (connect + probe)", phase_one)
        step("phase one again", phase_one)
        phase = PhaseTwo(Cluster(hosts, facts), gatherer, gatherer.settings, {})
        for name, fn in (("clock", phase.clock), ("Ray ports", phase.ray), ("rendezvous", phase.rendezvous),
                         ("HCCL ports", phase.hccl_ports), ("launcher SSH", phase.launcher_ssh),
                         ("shared storage", phase.shared_storage), ("HCCN ping (ring)", lambda: phase.device_ping("ring"))):
            step(name, fn)
        gatherer.close()
    finally:
        fleet.close()
    info = machine()
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    lines = [f"# CPU per step ({stamp}; python -m benchmarks.steps --nodes {n})", "",
             f"Machine: {info['cores']} cores, {info['cpu']}; {info['sshd']}; paramiko {info['paramiko']}.", "",
             "| step | nodes' CPU ms/host | controller CPU ms/host | wall s |", "|---|---|---|---|"]
    lines += ["| %s | %.1f | %.1f | %.2f |" % r for r in rows]
    lines += ["", "- nodes' CPU: this machine's busy time (/proc/stat) minus the controller's, per host: sshd, the "
              "shells, the probe's commands and the fakes (bash scripts printing captured outputs).",
              "- Phase one includes the connection (handshake) of each host; phase two reuses it. The launcher "
              "step is the head node's `ssh` to every other node (both ends counted)."]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"steps-{stamp}.md").write_text("\n".join(lines) + "\n")
    print(f"written: {out}/steps-{stamp}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
