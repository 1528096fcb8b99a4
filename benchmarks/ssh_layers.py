"""The SSH layer alone: the checker's (fabric/paramiko, a thread per connection) against asyncssh
(one asyncio event loop), on the same simulated fleet, alternating.  Not part of the test suite.

    python -m benchmarks.ssh_layers --sizes 100,1000 --repeat 2

Issue #6 names asyncssh as an option for gathering "if it wins"; this is the measurement.  Each
arm is a process of its own (CPU and peak RSS from wait4, as in benchmarks.run) that does to every
host what phase one's transport does: open a TCP connection, verify the host key against the
inventory's known_hosts (parsed once), log in with the inventory's key, run ``true`` and then a
command printing 64 KiB (about what a node's deflated probe output is at most), all with the
same fan-out; every connection stays open until all hosts are done (phase two reuses them) and
then all are closed.

* paramiko          the checker's own SSH layer (preflight.transport.ssh through the Gatherer's pool)
* asyncssh          asyncssh as it ships (its preferred algorithms)
* asyncssh-pinned   asyncssh held to the algorithms paramiko negotiated (same key exchange,
                    cipher and MAC: the libraries compared, not the algorithms)

Writes benchmarks/results/ssh-layers-<time>.md and .json.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import json
import logging
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.run import NAMESPACED_MAX, RESULTS, machine, machine_line, measure, utc_stamp, write_results

PAYLOAD = "head -c 65536 /dev/zero"
PAYLOAD_BYTES = 65536
ARMS = ("paramiko", "asyncssh", "asyncssh-pinned")


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _idle_cpu(seconds: float) -> float | None:
    """CPU seconds per second this process spends while every connection sits open and idle
    (as they do between phase one and phase two's steps, and while slower hosts finish)."""
    if seconds <= 0:
        return None
    cpu0 = time.process_time()
    time.sleep(seconds)
    return (time.process_time() - cpu0) / seconds


def paramiko_arm(inventory: str, fanout: int, connect_timeout: float, idle_s: float) -> dict:
    from preflight.facts import HostFacts
    from preflight.gather import Gatherer, GatherSettings
    from preflight.inventory import load_inventory

    hosts = load_inventory(inventory).hosts
    base_mb, cpu0, t0 = _peak_rss_mb(), time.process_time(), time.monotonic()
    g = Gatherer(GatherSettings(fanout=fanout, connect_timeout=connect_timeout))

    def work(host, left):
        t = g.transport(host)
        t.connect()
        ok = t.run("true", left, 1 << 16).exit_code == 0
        ok = ok and len(t.run(PAYLOAD, left, 1 << 20).stdout) == PAYLOAD_BYTES
        return HostFacts(host=host.name, reachable=ok, error=None if ok else "failed")

    res = g.run_all(hosts, work)
    done_s, peak_mb, work_cpu = time.monotonic() - t0, _peak_rss_mb(), time.process_time() - cpu0
    idle_cpu = _idle_cpu(idle_s)
    algorithms = _paramiko_negotiated(hosts[0], g.ssh)
    g.close()
    errors = sorted({f.error for f in res.values() if f.error})[:3]
    return {"hosts": len(hosts), "ok": sum(1 for f in res.values() if f.reachable), "errors": errors,
            "all_done_s": done_s, "wall_s": time.monotonic() - t0, "work_cpu_s": work_cpu,
            "idle_cpu_s_per_s": idle_cpu, "base_rss_mb": base_mb, "peak_rss_mb": peak_mb, "algorithms": algorithms}


@contextlib.contextmanager
def _debug_log(name: str, prefix: str):
    """What follows ``prefix`` in the messages logger ``name`` logs at debug level meanwhile:
    both libraries name the negotiated key exchange only in their debug log."""
    found: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: found.append(record.getMessage())
    log = logging.getLogger(name)
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        yield found
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
        # asyncssh puts the connection's name in front ("[conn=0] ...").
        found[:] = [m.split(prefix, 1)[1].strip() for m in found if prefix in m]


def _paramiko_negotiated(host, context) -> dict:
    """The algorithms of one more connection, after the timed part."""
    from preflight.transport.ssh import SshTransport

    t = SshTransport(host, context)
    with _debug_log("paramiko.transport", "Kex:") as kex:
        t.connect()
    tr = t._conn.transport
    out = {"kex": kex[0] if kex else None, "cipher": tr.local_cipher, "mac": tr.local_mac}
    t.close()
    return out


# paramiko's negotiated algorithms in asyncssh's names (what the pinned arm asks for).
PINNED = {"kex_algs": ["curve25519-sha256@libssh.org", "curve25519-sha256"], "encryption_algs": ["aes128-ctr"],
          "mac_algs": ["hmac-sha2-256"], "server_host_key_algs": ["ssh-ed25519"], "compression_algs": ["none"]}


def asyncssh_arm(inventory: str, fanout: int, connect_timeout: float, pinned: bool, idle_s: float) -> dict:
    import asyncio

    import asyncssh

    from preflight.inventory import load_inventory

    hosts = load_inventory(inventory).hosts
    base_mb, cpu0, t0 = _peak_rss_mb(), time.process_time(), time.monotonic()
    # Parsed once and shared, as the checker's layer does (per connection it would be N x N).
    known = {p: asyncssh.read_known_hosts(p) for p in {h.known_hosts for h in hosts}}
    keys = {p: asyncssh.read_private_key(p) for p in {h.identity_file for h in hosts}}
    algorithms: dict = {}
    conns: list = []
    errors: dict[str, int] = {}

    async def one(host, sem) -> bool:
        async with sem:
            try:
                conn = await asyncio.wait_for(asyncssh.connect(
                    host.address, port=host.port or 22, username=host.user or "root",
                    known_hosts=known[host.known_hosts], client_keys=[keys[host.identity_file]],
                    agent_path=None, config=[], login_timeout=connect_timeout,
                    **(PINNED if pinned else {})), connect_timeout)
                conns.append(conn)
                ok = (await conn.run("true", check=False)).exit_status == 0
                out = await conn.run(PAYLOAD, check=False, encoding=None)
                ok = ok and len(out.stdout) == PAYLOAD_BYTES
                return ok
            except (OSError, asyncssh.Error, asyncio.TimeoutError) as exc:
                key = f"{type(exc).__name__}: {exc}"[:160]
                errors[key] = errors.get(key, 0) + 1
                return False

    async def negotiated(host) -> None:
        """The algorithms of one more connection, after the timed part."""
        asyncssh.set_debug_level(2)
        with _debug_log("asyncssh", "Key exchange alg:") as kex:
            conn = await asyncssh.connect(host.address, port=host.port or 22, username=host.user or "root",
                                          known_hosts=known[host.known_hosts], client_keys=[keys[host.identity_file]],
                                          agent_path=None, config=[], **(PINNED if pinned else {}))
        algorithms.update(kex=kex[0] if kex else None, cipher=conn.get_extra_info("send_cipher"),
                          mac=conn.get_extra_info("send_mac"))
        conn.close()

    async def main():
        sem = asyncio.Semaphore(fanout)
        results = await asyncio.gather(*(one(h, sem) for h in hosts))
        done, peak, cpu = time.monotonic() - t0, _peak_rss_mb(), time.process_time() - cpu0
        idle = None
        if idle_s > 0:
            idle0 = time.process_time()
            await asyncio.sleep(idle_s)
            idle = (time.process_time() - idle0) / idle_s
        await negotiated(hosts[0])
        for c in conns:
            c.close()
        await asyncio.gather(*(c.wait_closed() for c in conns), return_exceptions=True)
        return results, done, peak, cpu, idle

    results, done_s, peak_mb, work_cpu, idle_cpu = asyncio.run(main())
    return {"hosts": len(hosts), "ok": sum(results), "errors": sorted(errors)[:3], "all_done_s": done_s,
            "wall_s": time.monotonic() - t0, "work_cpu_s": work_cpu, "idle_cpu_s_per_s": idle_cpu,
            "base_rss_mb": base_mb, "peak_rss_mb": peak_mb, "algorithms": algorithms}


def arm_cmd(arm: str, inventory: Path, fanout: int, connect_timeout: float, idle_s: float) -> list[str]:
    return [sys.executable, "-m", "benchmarks.ssh_layers", "--arm", arm, "--inventory", str(inventory),
            "--fanout", str(fanout), "--connect-timeout", str(connect_timeout), "--idle", str(idle_s)]


def bench_size(n: int, arms: list[str], repeat: int, fanout: int, connect_timeout: float, idle_s: float,
               scratch: Path) -> list[dict]:
    from benchmarks.fleet import LoopbackFleet, namespaced

    kind = "namespaced" if n <= NAMESPACED_MAX else "loopback"
    fleet = namespaced(n) if kind == "namespaced" else LoopbackFleet(n)
    runs = []
    try:
        inv = Path(fleet.inventory_path)
        for r in range(repeat):
            for arm in arms:
                m = measure(arm_cmd(arm, inv, fanout, connect_timeout, idle_s), scratch / f"{arm}-{n}-{r}.log")
                if m["rc"] != 0:
                    tail = (scratch / f"{arm}-{n}-{r}.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"{arm} at N = {n} failed (rc {m['rc']}):\n{tail}")
                out = json.loads(m["stdout"].strip().splitlines()[-1])
                run = {"n": n, "kind": kind, "arm": arm, "repeat": r, "fanout": fanout,
                       "process_wall_s": round(m["wall_s"], 2), "process_cpu_s": round(m["cpu_s"], 2),
                       "box_cpu_s": round(m["box_cpu_s"], 1), **out}
                runs.append(run)
                print(f"  N={n} {arm:16s} #{r}: {out['ok']}/{n} ok, all done in {out['all_done_s']:.2f} s, "
                      f"{out['work_cpu_s']:.2f} CPU-s, peak {out['peak_rss_mb']:.0f} MB", flush=True)
    finally:
        fleet.close()
    return runs


def summarise(runs: list[dict]) -> list[dict]:
    rows = []
    for n in sorted({r["n"] for r in runs}):
        for arm in [a for a in ARMS if any(r["arm"] == a and r["n"] == n for r in runs)]:
            rs = [r for r in runs if r["n"] == n and r["arm"] == arm]
            med = lambda key: statistics.median(r[key] for r in rs)  # noqa: E731
            rows.append({"n": n, "kind": rs[0]["kind"], "arm": arm, "runs": len(rs), "ok": min(r["ok"] for r in rs),
                         "all_done_s": med("all_done_s"), "work_cpu_s": med("work_cpu_s"),
                         "cpu_ms_per_host": 1000 * med("work_cpu_s") / n, "peak_rss_mb": med("peak_rss_mb"),
                         "kb_per_open_connection": 1024 * (med("peak_rss_mb") - med("base_rss_mb")) / n,
                         "box_cpu_s": med("box_cpu_s"), "algorithms": rs[0]["algorithms"],
                         "idle_ms_per_connection_per_minute": (
                             None if rs[0].get("idle_cpu_s_per_s") is None
                             else 60_000 * med("idle_cpu_s_per_s") / n),
                         "errors": sorted({e for r in rs for e in r["errors"]})[:3]})
    return rows


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def markdown(rows: list[dict], runs: list[dict], mach: dict, args) -> list[str]:
    asyncssh = importlib.util.find_spec("asyncssh") and importlib.metadata.version("asyncssh")
    lines = ["# SSH layers: paramiko (the checker's) vs asyncssh", "",
             machine_line(mach) + f" asyncssh {asyncssh or 'not installed'}.", "",
             f"Per host: connect, verify the host key, log in, `true`, `{PAYLOAD}`; connections held open "
             f"until all hosts are done, then held open and idle for {args.idle:g} s (idle CPU). "
             f"Fan-out {args.fanout}; medians of {args.repeat} alternating runs.", "",
             "| N | nodes | arm | hosts ok | all done s | controller CPU s | CPU ms/host | peak RSS MB "
             "| KB per open connection | idle CPU ms per connection per minute | box CPU s "
             "| algorithms (kex, cipher, MAC) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        a = r["algorithms"]
        lines.append(f"| {r['n']} | {r['kind']} | {r['arm']} | {r['ok']}/{r['n']} | {r['all_done_s']:.2f} "
                     f"| {r['work_cpu_s']:.2f} | {r['cpu_ms_per_host']:.1f} | {r['peak_rss_mb']:.0f} "
                     f"| {r['kb_per_open_connection']:.0f} | {_fmt(r['idle_ms_per_connection_per_minute'])} "
                     f"| {r['box_cpu_s']:.1f} "
                     f"| {a.get('kex')}, {a.get('cipher')}, {a.get('mac')} |")
    errs = [(r["n"], r["arm"], e) for r in rows for e in r["errors"]]
    if errs:
        lines += ["", "Errors seen:", ""] + [f"- N = {n}, {arm}: {e}" for n, arm, e in errs]
    lines += ["", "Every run:", "", "| N | arm | # | ok | all done s | CPU s | peak RSS MB |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['n']} | {r['arm']} | {r['repeat']} | {r['ok']} | {r['all_done_s']:.2f} | {r['work_cpu_s']:.2f} "
              f"| {r['peak_rss_mb']:.0f} |" for r in runs]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100,1000")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--fanout", type=int, default=32)
    ap.add_argument("--connect-timeout", type=float, default=30.0)
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--idle", type=float, default=10.0, help="seconds to hold the connections open and idle")
    ap.add_argument("--arm", choices=ARMS, help="(internal) run one arm against --inventory and print JSON")
    ap.add_argument("--inventory")
    args = ap.parse_args(argv)
    if args.arm:
        out = (paramiko_arm(args.inventory, args.fanout, args.connect_timeout, args.idle) if args.arm == "paramiko"
               else asyncssh_arm(args.inventory, args.fanout, args.connect_timeout, args.arm == "asyncssh-pinned",
                                 args.idle))
        print(json.dumps(out), flush=True)
        return 0
    arms = args.arms.split(",")
    unknown = set(arms) - set(ARMS)
    if unknown:
        ap.error(f"unknown arm(s): {', '.join(sorted(unknown))}")
    if any(a.startswith("asyncssh") for a in arms) and importlib.util.find_spec("asyncssh") is None:
        ap.error("the asyncssh arms need asyncssh: pip install -e '.[bench]' (or --arms paramiko)")
    mach = machine()
    t0 = time.monotonic()
    runs = []
    with tempfile.TemporaryDirectory(prefix="preflight-bench-") as tmp:
        for n in [int(s) for s in args.sizes.split(",")]:
            runs += bench_size(n, arms, args.repeat, args.fanout, args.connect_timeout, args.idle, Path(tmp))
    rows = summarise(runs)
    md = markdown(rows, runs, mach, args)
    print("\n".join(md))
    write_results(RESULTS, f"ssh-layers-{utc_stamp()}",
                  {"machine": mach, "rows": rows, "runs": runs, "total_s": time.monotonic() - t0}, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
