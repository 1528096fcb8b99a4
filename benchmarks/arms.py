"""The two comparison arms of the benchmark, each run as its own process so that its
controller CPU and peak RSS are measured alone (``os.wait4`` in :mod:`benchmarks.run`).

    python -m benchmarks.arms floor    INVENTORY FANOUT        # connect + `true`, same pool, same SSH layer
    python -m benchmarks.arms percheck INVENTORY SAMPLE        # one exec per command, host after host

Both print one JSON line on stdout.  ``percheck`` runs on the first SAMPLE hosts only (it is
serial, so its time is linear in the number of hosts); run.py scales it to N.
"""
from __future__ import annotations

import importlib
import json
import pkgutil
import shlex
import sys
import time

from preflight.facts import resolve
from preflight.gather import Gatherer, GatherSettings
from preflight.inventory import load_inventory
from preflight.probe import ProbeCommand
from preflight.run import probe_params


def catalog_needs() -> set[str]:
    """Every fact the built-in node catalog needs (what a plain `pytest --inventory` gathers)."""
    import preflight.checks as pkg
    from preflight.check import MARKER

    needs: set[str] = set()
    for mod in pkgutil.iter_modules(pkg.__path__):
        if mod.name == "job":
            continue
        module = importlib.import_module(f"preflight.checks.{mod.name}")
        for obj in vars(module).values():
            for mark in getattr(obj, "pytestmark", []):
                if mark.name == MARKER:
                    needs.update(mark.args[0].needs)
    return needs


def phase_one_commands() -> list[ProbeCommand]:
    return [s.probe_command() for s in resolve(catalog_needs()) if s.phase == 1]


def floor(inventory: str, fanout: int) -> dict:
    hosts = load_inventory(inventory).hosts
    g = Gatherer(GatherSettings(fanout=fanout))
    from preflight.facts import HostFacts

    def work(host, left):
        t = g.transport(host)
        t.connect()
        r = t.run("true", left, 1 << 16)
        return HostFacts(host=host.name, reachable=r.exit_code == 0, error=None if r.exit_code == 0 else "rc")

    t0 = time.monotonic()
    res = g.run_all(hosts, work)
    wall = time.monotonic() - t0
    g.close()
    return {"wall_s": wall, "ok": sum(1 for f in res.values() if f.reachable), "hosts": len(hosts)}


def percheck(inventory: str, sample: int) -> dict:
    """testinfra-style: one connection per host, reused; one exec per command (per device for the
    per-NPU ones), each the bare command as ``host.run(...)`` would send it (the probe's ``PF_*``
    values and tool paths exported in front, no timeout, cap or framing); host after host."""
    hosts = load_inventory(inventory).hosts
    sample_hosts = hosts[:sample]
    commands = phase_one_commands()
    g = Gatherer(GatherSettings(fanout=1))
    execs = 0
    ok = 0
    t0 = time.monotonic()
    for host in sample_hosts:
        t = g.transport(host)
        t.connect()
        prefix = "".join(f"export {k}={shlex.quote(v)}; " for k, v in sorted(probe_params(host, hosts).items()))
        prefix += "export PF_NPUSMI=npu-smi PF_HCCN=/usr/local/Ascend/driver/tools/hccn_tool; "
        # The device list first (one exec), as a per-check suite would ask for it.
        devs = t.run("ls /dev | sed -n 's/^davinci\\([0-9][0-9]*\\)$/\\1/p'", 30, 1 << 20).stdout.split()
        execs += 1
        for cmd in commands:
            for dev in (devs if cmd.per_device else [None]):
                body = prefix + (f"export PF_DEV={int(dev)}; " if dev is not None else "") + cmd.command
                # As host.run sends it: the login shell (bash here) runs it, no second shell.
                r = t.run(body, 30, 8 << 20)
                execs += 1
                ok += r.exit_code is not None
    wall = time.monotonic() - t0
    g.close()
    return {"wall_s": wall, "hosts_sampled": len(sample_hosts), "execs": execs, "commands_ok": ok,
            "per_host_s": wall / max(1, len(sample_hosts))}


def main(argv: list[str]) -> int:
    arm, inventory, arg = argv[0], argv[1], int(argv[2])
    out = floor(inventory, arg) if arm == "floor" else percheck(inventory, arg)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
