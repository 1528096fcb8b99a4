"""The benchmark: N simulated nodes with real sshd, the full built-in catalog, and two ratios
measured in the same run.  Not part of the test suite.

    python -m benchmarks.run                      # N = 10, 30, 100 (namespaced), 300, 1000 (loopback)
    python -m benchmarks.run --sizes 10,30        # a quick look

Per N, five arms against the same hosts and the same fakes; the first four share the SSH layer
(preflight.transport.ssh); each runs in a process of its own (CPU and peak RSS from wait4):

* full      ``preflight --inventory INV`` (every built-in node check, phases one and two, all reports)
* floor     connect + ``true`` on every host, same pool and fan-out (benchmarks/arms.py floor)
* commands  connect + every phase-one command in one plain shell script per host, same pool and
            fan-out (benchmarks/arms.py commands): the floor for phase one with these commands
* percheck  the same phase-one commands, one exec each (the bare command) over one reused
            connection, host after host, as a testinfra-style suite would, then phase two's
            cross-node checks the same way (benchmarks/arms.py percheck); serial, so run on a
            sample of hosts and scaled linearly to N
* testinfra the same commands, phase two's too, from a real pytest-testinfra suite (benchmarks/arms.py testinfra;
            needs `pip install -e '.[bench]'`), sampled and scaled the same way

Writes benchmarks/results/bench-<time>.md and .json and prints the table.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
NAMESPACED_MAX = 100


def _proc_stat() -> list[int]:
    with open("/proc/stat") as fh:
        return [int(x) for x in fh.readline().split()[1:]]


def _box_cpu() -> float:
    """CPU seconds the whole machine spent busy so far (all cores), from /proc/stat: user, nice,
    system, irq, softirq; not idle, iowait or steal (time the hypervisor gave to other guests)."""
    f = _proc_stat()
    return (f[0] + f[1] + f[2] + f[5] + f[6]) / os.sysconf("SC_CLK_TCK")


def _steal() -> float:
    """CPU seconds other guests of this machine's host took from it so far (a noisy neighbour)."""
    f = _proc_stat()
    return (f[7] if len(f) > 7 else 0) / os.sysconf("SC_CLK_TCK")


class TreeMemory(threading.Thread):
    """The peak of the summed PSS of a process and all its descendants, sampled twice a second.

    wait4's peak RSS is that of the largest single process; a run that gathers in a forked child
    has two processes at once, and this is what they take together (PSS: pages the child still
    shares with the controller are counted once).  Sampled, so a peak shorter than the interval
    can be missed: read it next to wait4's exact per-process figure."""

    def __init__(self, pid: int, interval: float = 0.5):
        super().__init__(daemon=True, name="bench-tree-memory")
        self.pid, self.interval = pid, interval
        self.peak_pss_mb = 0.0
        self.peak_processes = 0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(self.interval):
            self.sample()

    def stop(self) -> None:
        self._done.set()
        self.join()

    def sample(self) -> None:
        tree = _descendants(self.pid) | {self.pid}
        total = sum(_pss_kb(pid) for pid in tree) / 1024
        if total > self.peak_pss_mb:
            self.peak_pss_mb, self.peak_processes = total, len(tree)


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def measure(cmd: list[str], log: Path) -> dict:
    """Run ``cmd``; wall, its own CPU (user+sys, children included), peak RSS of its largest
    process (exact, wait4) and peak PSS of all its processes together (sampled)."""
    box0, steal0, t0 = _box_cpu(), _steal(), time.monotonic()
    with open(log, "wb") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, cwd=ROOT)
        tree = TreeMemory(p.pid)
        tree.start()
        out = p.stdout.read()
        tree.sample()  # stdout closes when the run ends its reports: one last look before it exits
        tree.stop()
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - t0
    return {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "rss_mb": ru.ru_maxrss / 1024,
            "tree_pss_mb": tree.peak_pss_mb, "tree_processes": tree.peak_processes,
            "box_cpu_s": _box_cpu() - box0, "steal_s": _steal() - steal0, "rc": p.returncode,
            "stdout": out.decode(errors="replace")}


def _log_size(paths) -> dict:
    return {p: (p.stat().st_size if p.exists() else 0) for p in paths}


def _count_sessions(before: dict) -> tuple[int, int]:
    """(connections accepted, exec sessions started) in the sshd logs since ``before``."""
    conns = sessions = 0
    for path, offset in before.items():
        with open(path, "rb") as fh:
            fh.seek(offset)
            text = fh.read().decode(errors="replace")
        conns += text.count("Accepted publickey")
        sessions += text.count("Starting session: command")
    return conns, sessions


def _phase_one_s(stdout: str) -> float | None:
    """Phase one's time, from the progress line `gathering facts: N/N hosts done in X s`."""
    import re

    m = re.search(r"gathering facts: \d+/\d+ hosts done in ([0-9.]+)s", stdout)
    return float(m.group(1)) if m else None


def one_host_inventory(inv: Path) -> Path:
    doc = yaml.safe_load(inv.read_text())
    doc["hosts"] = doc["hosts"][:1]
    out = inv.with_name(inv.stem + "_one.yaml")
    out.write_text(yaml.safe_dump(doc))
    return out


# pytest plugins some machines have installed that have nothing to do with the checker: left out,
# as where only ascend-preflight is installed (hypothesis's alone imports all of hypothesis at every
# session's end, 0.7 s of a 3 s run here).
UNRELATED_PLUGINS = ("-p", "no:randomly", "-p", "no:hypothesispytest", "-p", "no:benchmark")


def preflight_cmd(inv: Path, report_dir: Path, fanout: int) -> list[str]:
    return [sys.executable, "-m", "preflight.cli", "--inventory", str(inv), "--report-dir", str(report_dir),
            "--fanout", str(fanout), "-q", *UNRELATED_PLUGINS]


def bench_size(n: int, fanout: int, sample: int, scratch: Path) -> dict:
    from benchmarks.fleet import LoopbackFleet, cache_fakes, namespaced

    kind = "namespaced" if n <= NAMESPACED_MAX else "loopback"
    t0 = time.monotonic()
    fleet = namespaced(n) if kind == "namespaced" else LoopbackFleet(n)
    try:
        cluster = fleet if kind == "namespaced" else fleet.cluster
        inv = Path(fleet.inventory_path)
        nodes = cluster.nodes
        logs = [nd.sshd_log for nd in nodes] if kind == "namespaced" else fleet.sshd_logs()
        up_s = time.monotonic() - t0
        one = one_host_inventory(inv)
        cached = cache_fakes(nodes, lambda: measure(preflight_cmd(one, scratch / "warm", fanout),
                                                    scratch / "warm.log"))
        row = {"n": n, "kind": kind, "fanout": fanout, "setup_s": round(up_s, 1), "fake_calls_cached": cached}

        before = _log_size(logs)
        full = measure(preflight_cmd(inv, scratch / f"full{n}", fanout), scratch / f"full{n}.log")
        conns, sessions = _count_sessions(before)
        doc = json.loads((scratch / f"full{n}" / "preflight.json").read_text())
        rep = scratch / f"full{n}" / "runs" / doc["run_id"]
        row.update(full_wall_s=full["wall_s"], full_cpu_s=full["cpu_s"], full_rss_mb=full["rss_mb"],
                   full_tree_pss_mb=full["tree_pss_mb"], full_tree_processes=full["tree_processes"],
                   full_box_cpu_s=full["box_cpu_s"], full_steal_s=full["steal_s"], full_rc=full["rc"],
                   gather_s=doc["gather_s"],
                   reachable=sum(h["reachable"] for h in doc["hosts"]), results=len(doc["results"]),
                   summary=doc["summary"], connections_per_host=conns / n, sessions_per_host=sessions / n,
                   html_mb=(rep / "preflight.html").stat().st_size / 2**20,
                   matrix_mb=(rep / "matrix.html").stat().st_size / 2**20,
                   phase_one_s=_phase_one_s(full["stdout"]), timings=doc.get("timings", {}))

        floor = measure([sys.executable, "-m", "benchmarks.arms", "floor", str(inv), str(fanout)],
                        scratch / f"floor{n}.log")
        fl = json.loads(floor["stdout"].strip().splitlines()[-1])
        row.update(floor_wall_s=floor["wall_s"], floor_cpu_s=floor["cpu_s"], floor_rss_mb=floor["rss_mb"],
                   floor_box_cpu_s=floor["box_cpu_s"], floor_ok=fl["ok"], floor_inner_wall_s=fl["wall_s"])

        cm = measure([sys.executable, "-m", "benchmarks.arms", "commands", str(inv), str(fanout)],
                     scratch / f"commands{n}.log")
        cmd_ = json.loads(cm["stdout"].strip().splitlines()[-1])
        row.update(commands_wall_s=cm["wall_s"], commands_inner_wall_s=cmd_["wall_s"], commands_ok=cmd_["ok"],
                   commands_box_cpu_s=cm["box_cpu_s"], commands_stdout_bytes_per_host=cmd_["stdout_bytes_per_host"])
        if row["phase_one_s"]:
            # Phase one against the same commands run bare: what the probe's framing, timeouts,
            # parallelism and the controller's parsing cost on top (both inner, process start excluded).
            row["phase_one_vs_commands"] = row["phase_one_s"] / cmd_["wall_s"]

        k = min(sample, n)
        pc = measure([sys.executable, "-m", "benchmarks.arms", "percheck", str(inv), str(k)],
                     scratch / f"percheck{n}.log")
        pcd = json.loads(pc["stdout"].strip().splitlines()[-1])
        # Serial, so linear: phase one's and phase two's execs per host times N, the launcher's
        # logins per target times its N - 1 targets, plus the arm's process start and connects.
        percheck_phase_two = pcd["phase_two_est_s"] + pcd["launcher_per_target_s"] * (n - 1) * pcd["launchers"]
        row.update(percheck_sampled=k, percheck_execs_per_host=pcd["execs"] / k, percheck_per_host_s=pcd["per_host_s"],
                   percheck_phase_two_execs_per_host=pcd["phase_two_execs"] / k,
                   percheck_launcher_per_target_s=pcd["launcher_per_target_s"],
                   percheck_phase_two_est_s=percheck_phase_two,
                   percheck_est_wall_s=pcd["per_host_s"] * n + percheck_phase_two + (pc["wall_s"] - pcd["inner_s"]))
        row["vs_floor"] = row["full_wall_s"] / row["floor_wall_s"]
        row["vs_percheck"] = row["percheck_est_wall_s"] / row["full_wall_s"]
        if row["phase_one_s"]:
            # Phase one alone on both sides (both without their process's start).
            row["phase_one_vs_percheck"] = pcd["per_host_s"] * n / row["phase_one_s"]
        row.update(testinfra_arm(inv, k, n, scratch, row["full_wall_s"], pcd["launcher_per_target_s"]))
        return row
    finally:
        fleet.close()


def testinfra_arm(inv: Path, k: int, n: int, scratch: Path, full_wall_s: float, percheck_per_target: float) -> dict:
    """The same commands as a real pytest-testinfra suite (benchmarks/arms.py testinfra), if
    pytest-testinfra is installed (`pip install -e '.[bench]'`); None in the table otherwise."""
    try:
        import testinfra  # noqa: F401
    except ImportError:
        return {"testinfra_est_wall_s": None, "vs_testinfra": None}
    ti = measure([sys.executable, "-m", "benchmarks.arms", "testinfra", str(inv), str(k)], scratch / f"testinfra{n}.log")
    tid = json.loads(ti["stdout"].strip().splitlines()[-1])
    # No launcher among the sampled hosts: its logins priced as the per-check arm measured them.
    per_target = tid["launcher_per_target_s"] if tid["launcher_per_target_s"] is not None else percheck_per_target
    est = tid["startup_s"] + tid["per_host_s"] * n + tid["phase_two_est_s"] + per_target * (n - 1) * tid["launchers"]
    return {"testinfra_sampled": k, "testinfra_execs_per_host": tid["execs"] / k, "testinfra_rc": tid["rc"],
            "testinfra_summary": tid["summary"], "testinfra_per_host_s": tid["per_host_s"],
            "testinfra_est_wall_s": est, "vs_testinfra": est / full_wall_s}


def machine() -> dict:
    mem = 0
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    if not os.path.exists("/usr/sbin/sshd"):  # before anything starts: the nodes are real sshd
        raise SystemExit("benchmarks.run needs OpenSSH's server (/usr/sbin/sshd) and root: run `bash .ci/run` "
                         "once on this machine, or apt-get install openssh-server")
    sshd = subprocess.run(["/usr/sbin/sshd", "-V"], capture_output=True, text=True).stderr.strip()
    import paramiko
    return {"cores": os.cpu_count(), "memory_gib": round(mem / 2**30, 1), "python": platform.python_version(),
            "kernel": platform.release(), "sshd": sshd, "paramiko": paramiko.__version__,
            "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")}


COLUMNS = [("N", "n", "{}"), ("nodes", "kind", "{}"), ("wall s", "full_wall_s", "{:.1f}"),
           ("controller CPU s", "full_cpu_s", "{:.1f}"), ("peak RSS MB", "full_rss_mb", "{:.0f}"),
           ("peak MB, all processes", "full_tree_pss_mb", "{:.0f}"),
           ("SSH conns/host", "connections_per_host", "{:.2f}"), ("sessions/host", "sessions_per_host", "{:.2f}"),
           ("floor wall s", "floor_wall_s", "{:.1f}"), ("vs floor", "vs_floor", "{:.1f}×"),
           ("commands wall s", "commands_inner_wall_s", "{:.1f}"), ("phase one vs commands", "phase_one_vs_commands", "{:.2f}×"),
           ("per-check wall s (est.)", "percheck_est_wall_s", "{:.0f}"),
           ("of which phase two s", "percheck_phase_two_est_s", "{:.0f}"), ("vs per-check", "vs_percheck", "{:.1f}×"),
           ("phase one vs per-check", "phase_one_vs_percheck", "{:.1f}×"),
           ("testinfra wall s (est.)", "testinfra_est_wall_s", "{:.0f}"), ("vs testinfra", "vs_testinfra", "{:.1f}×"),
           ("box CPU s (all nodes + controller)", "full_box_cpu_s", "{:.0f}"), ("steal s", "full_steal_s", "{:.0f}"),
           ("phase one s", "phase_one_s", "{:.1f}"), ("gather s (1+2)", "gather_s", "{:.1f}"), ("HTML MB", "html_mb", "{:.1f}")]


def table(rows: list[dict]) -> str:
    head = "| " + " | ".join(c[0] for c in COLUMNS) + " |"
    sep = "|" + "|".join("---" for _ in COLUMNS) + "|"
    lines = [head, sep]
    for r in rows:
        lines.append("| " + " | ".join("–" if r.get(key) is None else fmt.format(r[key]) for _, key, fmt in COLUMNS)
                     + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10,30,100,300,1000")
    ap.add_argument("--fanout", type=int, default=32)
    ap.add_argument("--sample", type=int, default=2, help="hosts the serial per-check arm really runs on")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    info = machine()
    print("machine: %(cores)s cores, %(memory_gib)s GiB, %(cpu)s, %(sshd)s, paramiko %(paramiko)s" % info, flush=True)
    rows = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="preflight-bench-") as tmp:
        for n in sizes:
            scratch = Path(tmp) / str(n)
            scratch.mkdir()
            row = bench_size(n, args.fanout, args.sample, scratch)
            rows.append(row)
            (Path(tmp) / "rows.json").write_text(json.dumps(rows))  # kept if a later size is stopped
            print(table([row]).splitlines()[-1] if len(rows) > 1 else table([row]), flush=True)
    stamp = utc_stamp()
    doc = {"machine": info, "started": stamp, "total_s": round(time.monotonic() - t0, 1),
           "fanout": args.fanout, "percheck_sample": args.sample, "rows": rows}
    md = [f"# ascend-preflight benchmark, {stamp}", "",
          f"{machine_line(info)} Fan-out {args.fanout}. Whole benchmark: {doc['total_s']:.0f} s.", "", table(rows), "",
          "- wall / controller CPU / peak RSS: the whole `preflight --inventory` process (pytest, gather, checks, "
          "three reports). Controller CPU includes its children. Peak RSS is the largest process's (wait4); "
          "above 64 hosts gathering runs in a forked child, so \"peak MB, all processes\" is the one to read: "
          "the controller and its gathering child together (summed PSS, sampled every 0.5 s).",
          "- vs floor: full wall ÷ wall of connect + `true` on the same hosts, same SSH layer, same fan-out.",
          "- commands: connect, then one exec per host running every phase-one command as one plain shell "
          "script (in order, no framing, timeouts, caps or parallelism; benchmarks/arms.py commands), same "
          "SSH layer and fan-out: the least any tool could do to run these commands on these nodes. "
          "phase one vs commands: the checker's phase one (its progress line) ÷ that.",
          "- vs per-check: the same phase-one commands, one exec each (the bare command, as testinfra's "
          "`host.run` sends it) over a reused connection, host after host; "
          "then phase two's cross-node checks the same way, one exec per thing checked: the clock, a TCP "
          "connect per Ray port on the head (workers) and per probed HCCL port on the ring's next host, one "
          "`hccn_tool -ping` per NPU to the next host's NPU, and the launcher's `ssh target true` per target; "
          f"measured on {args.sample} host(s) (and as many launcher targets) and scaled linearly to N (the arm "
          "is serial; the launcher's logins to its N - 1 targets). 'vs per-check' sets the whole run against "
          "it (reports included on our side only); 'phase one vs per-check' phase one against phase one "
          "(process starts excluded on both sides).",
          "- vs testinfra: the same commands as a real pytest-testinfra suite (one test per check, one "
          "`host.run` per command, phase two's as in the per-check arm; `ssh://` backend: OpenSSH, one control "
          "connection per host reused through a ControlPath), host after host; pytest's start timed apart, the "
          "launcher's logins timed per target (JUnit XML) and scaled to N - 1, the rest scaled linearly from the "
          "sampled hosts. Without a ControlPath (testinfra's default) every `host.run` is a new login.",
          "- box CPU: every core of this machine during the full run: all simulated nodes' sshd, bash and "
          "fakes plus the controller. All nodes share these cores; on a real cluster each node has its own.",
          "- steal: CPU time the hypervisor gave to other guests during the full run (not counted in box CPU); "
          "when it is high, this machine was shared and every time in the row is inflated.",
          "- Fakes: npu-smi/hccn_tool are bash scripts printing the bytes the Python fakes printed "
          "(captured once per run; each node's own device IPs; HCCN pings replay one healthy reply), in all "
          "three arms; other commands are the real ones (ip, getent, python3, ssh, ...). The probe runs "
          "them with the node's python3 (preflight/noderunner.py).",
          "- loopback rows: N addresses of one simulated node (198.19.0.0/22 local in its namespace) served by "
          "4 sshd on ports 2201-2204; they share one filesystem and host key."]
    write_results(Path(args.out), f"bench-{stamp}", doc, md)
    return 0


def utc_stamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def machine_line(info: dict) -> str:
    return (f"Machine: {info['cores']} cores, {info['memory_gib']} GiB RAM, {info['cpu']}; {info['sshd']}; "
            f"Python {info['python']}, paramiko {info['paramiko']}.")


def write_results(out: Path, name: str, doc: dict, md: list[str]) -> None:
    """``out/name.json`` and ``out/name.md``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / f"{name}.md").write_text("\n".join(md) + "\n")
    print(f"\nwritten: {out}/{name}.md and .json ({doc['total_s']:.0f} s)")


if __name__ == "__main__":
    sys.exit(main())
