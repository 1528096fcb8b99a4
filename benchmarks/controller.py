"""The controller alone at fleet size: N hosts' facts replayed with ``--facts-in``.

    python -m benchmarks.controller --hosts 1000 [--browser chromium]

Two simulated nodes (real sshd, as in the e2e tests) are probed once with ``--facts-out``; their
facts are then copied to N hosts, each with its own name, address, device IPs and a name-resolution
view of all N names (N² entries, as a real run holds), and ``preflight --facts-in`` runs every
built-in check on them and writes the three reports.  That isolates what the controller pays per
host (pytest items, checks, reports, memory) from the nodes, which on this machine share its cores.
Phase-two records (TCP probes, launcher SSH, pings) are the two nodes' own, copied.

The same run also times pytest alone on as many items as the checker's run had: one trivial
test per item (an indirect ``host`` parameter and a fixture reading the item, as the checks have),
with pytest-html writing its page, so "vs pytest alone" is what the checks, facts and reports cost
on top of pytest's own per-item price.

With ``--browser``, the HTML reports are loaded by that headless browser (``--dump-dom``: parse,
scripts, layout) and timed, minus the browser's start-up on an empty page.

Writes benchmarks/results/controller-<time>.md and .json.
"""
from __future__ import annotations

import argparse
import copy
import datetime as _dt
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.run import RESULTS, UNRELATED_PLUGINS, machine, measure

_IP = re.compile(r"\b(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\b")


def capture(scratch: Path) -> dict:
    from benchmarks.fleet import namespaced

    cluster = namespaced(2)
    try:
        out = scratch / "captured.json"
        m = measure([sys.executable, "-m", "preflight.cli", "--inventory", str(cluster.inventory_path),
                     "--report-dir", str(scratch / "capture"), "--facts-out", str(out), "-q"], scratch / "capture.log")
        if not out.exists():
            raise RuntimeError(f"capture failed (rc {m['rc']}): see {scratch / 'capture.log'}")
        return json.loads(out.read_text())
    finally:
        cluster.close()


def replicate(doc: dict, n: int) -> dict:
    """N hosts from the first captured one: names node-00001..., addresses 10.a.b.c, device IPs
    29.a.b.c (distinct per host and NPU), every node resolving every name to its address, and the
    outputs that differ between real nodes different on each (:func:`_own`)."""
    src_inv = doc["inventory"]["hosts"][0]
    src = doc["hosts"][0]
    names = [f"node-{i:05d}" for i in range(1, n + 1)]
    address = {name: f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}" for i, name in enumerate(names, 1)}
    resolve = "".join(f"v4 {x} {address[x]} -\n" for x in names) + f"end {len(names)}\n"  # net.resolve's form
    hosts, inv = [], []
    for i, name in enumerate(names, 1):
        h = copy.deepcopy(src_inv)
        h.update(name=name, address=address[name], groups=["head"] if i == 1 else ["worker"])
        inv.append(h)
        facts = {"host": name, "address": address[name], "reachable": True, "error": None,
                 "error_kind": src.get("error_kind"), "gather_s": src.get("gather_s", 0.0),
                 "command_timeout": src.get("command_timeout", 10.0), "raw": {}}
        for key, out in src["raw"].items():
            out = dict(out)
            if key.startswith("hccn.ip/"):
                dev = int(key.split("/")[1])
                out["stdout"] = _IP.sub(lambda m, d=dev: f"29.{i // 256 % 256}.{i % 256}.{d}", out["stdout"], count=1)
            elif key == "net.resolve":
                out["stdout"] = resolve
            elif key == "tcp.ray":
                out["stdout"] = _ray_records(names, address, i)
            else:
                out["stdout"] = _own(key, out["stdout"], i, src["address"], address[name])
            facts["raw"][key] = out
        hosts.append(facts)
    return {"schema": 1, "tool": doc["tool"], "inventory": {"path": "replicated", "hosts": inv}, "hosts": hosts}


def _ray_records(names: list[str], address: dict, i: int) -> str:
    """Node i's Ray connects as the run plans them (preflight.activeprobe.ray_plan), all open:
    a worker reaches the head's ports, and every node the next worker's range.  The captured
    records name the two captured nodes' addresses: copied, every check read "no probe record"."""
    from preflight.activeprobe import DEFAULT_RAY_PORTS, RAY_WORKER_PORTS

    targets = [(names[0], DEFAULT_RAY_PORTS)] if i > 1 else []
    if i < len(names):
        targets.append((names[i], RAY_WORKER_PORTS))
    return "".join(f"open {address[node]} {port} temporary\n" for node, ports in targets for _, _, port in ports)


_NPU_ROW = re.compile(r"(\|\s+OK\s+\|\s+)(\d+\.\d)(\s+)(\d+)")
_CLOCK = re.compile(r"(current time\s+:.* )(\d\d:\d\d:\d\d)")


def _own(key: str, text: str, i: int, src_address: str, address: str) -> str:
    """What differs from node to node on a real fleet, made to differ here too: the node's own address
    (interfaces, SSH_CONNECTION), its NPUs' power and temperature, the time hccn_tool read the link
    counters.  Equal outputs are kept and parsed once, so copies of one node would flatter memory."""
    if key in ("net.interfaces", "net.routes", "session.env", "session.env_login"):
        return text.replace(src_address, address)
    if key == "npu_smi.info":
        rows = iter(range(1 << 16))
        return _NPU_ROW.sub(lambda m: f"{m[1]}{10 + (i * 7 + next(rows)) % 900 / 10:4.1f}{m[3]}{30 + i % 60}", text)
    if key.startswith("hccn.link_stat/"):
        return _CLOCK.sub(lambda m: f"{m[1]}{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}", text)
    return text


def browser_load(browser: str, page: Path, blank: Path) -> float:
    def once(p: Path) -> float:
        t0 = time.monotonic()
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", p.as_uri()],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600, check=True)
        return time.monotonic() - t0

    once(blank)  # warm the disk cache
    return min(once(page) for _ in range(2)) - min(once(blank) for _ in range(2))


_TRIVIAL = """import pytest


@pytest.fixture
def host(request):
    return request.param


@pytest.fixture
def verdict(request):
    return request.node.nodeid


@pytest.mark.parametrize("host", range({items}), ids=[f"node-{{i:05d}}" for i in range({items})], indirect=True)
def test_trivial(host, verdict):
    assert host >= 0 and verdict
"""


def item_count(pytest_stdout: str) -> int:
    """The items of a ``pytest -q`` run, from its last line ("3 failed, 7 passed, 2 errors in 1.0s")."""
    last = [line for line in pytest_stdout.splitlines() if " in " in line][-1]
    return sum(int(n) for n in re.findall(r"(\d+) (?:passed|failed|skipped|errors?|xfailed|xpassed)", last))


def pytest_alone(scratch: Path, items: int) -> dict:
    """Wall, CPU and peak RSS of pytest running ``items`` trivial tests and writing pytest-html's page."""
    suite = scratch / f"trivial{items}"
    suite.mkdir()
    (suite / "test_trivial.py").write_text(_TRIVIAL.format(items=items))
    m = measure([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *UNRELATED_PLUGINS,
                 "--rootdir", str(suite), "-c", "/dev/null", f"--html={suite / 'report.html'}",
                 "--self-contained-html", str(suite / "test_trivial.py")], scratch / f"trivial{items}.log")
    ran = item_count(m["stdout"])
    if ran != items:
        raise RuntimeError(f"pytest alone ran {ran} items, not {items}: see {scratch / f'trivial{items}.log'}")
    return m


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", default="1000", help="comma-separated sizes")
    ap.add_argument("--browser", default=None, help="a headless-capable browser to time the HTML reports with")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.hosts.split(",")]
    info = machine()
    rows = []
    with tempfile.TemporaryDirectory(prefix="preflight-ctl-") as tmp:
        scratch = Path(tmp)
        captured = capture(scratch)
        blank = scratch / "blank.html"
        blank.write_text("<!doctype html><title>blank</title>")
        for n in sizes:
            facts = scratch / f"facts{n}.json"
            facts.write_text(json.dumps(replicate(captured, n)))
            reports = scratch / f"reports{n}"
            m = measure([sys.executable, "-m", "preflight.cli", "--facts-in", str(facts), "--report-dir", str(reports),
                         "-q", *UNRELATED_PLUGINS], scratch / f"run{n}.log")
            doc = json.loads((reports / "preflight.json").read_text())
            run_dir = reports / "runs" / doc["run_id"]
            items = item_count(m["stdout"])
            alone = pytest_alone(scratch, items)
            row = {"hosts": n, "wall_s": m["wall_s"], "cpu_s": m["cpu_s"], "rss_mb": m["rss_mb"], "rc": m["rc"],
                   "results": len(doc["results"]), "summary": doc["summary"], "items": items,
                   "pytest_alone_wall_s": alone["wall_s"], "pytest_alone_cpu_s": alone["cpu_s"],
                   "pytest_alone_rss_mb": alone["rss_mb"],
                   "facts_file_mb": facts.stat().st_size / 2**20,
                   "html_mb": (run_dir / "preflight.html").stat().st_size / 2**20,
                   "matrix_mb": (run_dir / "matrix.html").stat().st_size / 2**20,
                   "json_mb": (run_dir / "preflight.json").stat().st_size / 2**20}
            if args.browser:
                row["html_load_s"] = browser_load(args.browser, run_dir / "preflight.html", blank)
                row["matrix_load_s"] = browser_load(args.browser, run_dir / "matrix.html", blank)
            rows.append(row)
            print(json.dumps(row), flush=True)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"controller-{stamp}.json").write_text(json.dumps({"machine": info, "rows": rows}, indent=1) + "\n")
    head = ("| hosts | pytest items | results | wall s | CPU s | peak RSS MB | pytest alone wall s | vs pytest alone "
            "| facts file MB | preflight.html MB | matrix.html MB "
            "| preflight.json MB |" + (" preflight.html load s | matrix.html load s |" if args.browser else ""))
    lines = [f"# Controller at fleet size ({stamp}; python -m benchmarks.controller --hosts {args.hosts}"
             + (f" --browser {args.browser}" if args.browser else "") + ")", "",
             f"Machine: {info['cores']} cores, {info['memory_gib']} GiB RAM, {info['cpu']}; Python {info['python']}.",
             "", head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        cells = [r["hosts"], r["items"], r["results"], f"{r['wall_s']:.1f}", f"{r['cpu_s']:.1f}", f"{r['rss_mb']:.0f}",
                 f"{r['pytest_alone_wall_s']:.1f}", f"{r['wall_s'] / r['pytest_alone_wall_s']:.2f}×",
                 f"{r['facts_file_mb']:.0f}", f"{r['html_mb']:.1f}", f"{r['matrix_mb']:.1f}", f"{r['json_mb']:.1f}"]
        if args.browser:
            cells += [f"{r['html_load_s']:.1f}", f"{r['matrix_load_s']:.1f}"]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    lines += ["", "- One `preflight --facts-in` process per row: pytest collection, every built-in check, the three "
              "reports. No SSH: the gathering side is measured by benchmarks.run.",
              "- pytest alone: the same number of items as trivial tests (an indirect `host` parameter, a fixture "
              "reading the item, one assert), same pytest options, pytest-html writing its self-contained page; "
              "vs pytest alone = wall ÷ its wall: what the checks, facts and the three reports add to pytest's "
              "own price per item.",
              "- Load: headless browser `--dump-dom` of the file, minus the same on an empty page." if args.browser
              else "- HTML load not timed (no --browser)."]
    (out / f"controller-{stamp}.md").write_text("\n".join(lines) + "\n")
    print(f"written: {out}/controller-{stamp}.md and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
