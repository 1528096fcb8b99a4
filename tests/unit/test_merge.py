"""preflight-merge: shards' preflight.json joined into one (issue 6, several controllers)."""
from __future__ import annotations

import json

from preflight.cli import main as cli_main
from preflight.merge import main, merge


def shard(name, hosts, ready=True, failed=(), started="2026-12-02T10:00:00Z", duration=4.0):
    results = []
    for h in hosts:
        results.append({"check": "npu.health", "host": h, "subject": "npu0",
                        "outcome": "failed" if h in failed else "passed", "severity": "error",
                        "message": "m", "remedy": "", "reference": ""})
    results.append({"check": "cluster.versions_agree", "host": None, "subject": None, "outcome": "passed",
                    "severity": "error", "message": "all agree", "remedy": "", "reference": ""})
    return {"schema": 1, "tool": {"name": "ascend-preflight", "version": "0"}, "inventory": name,
            "started_at": started, "run_id": name + "-run", "interrupted": False, "duration_s": duration,
            "gather_s": duration - 1, "ready": ready, "strict": False, "exit_code": 0 if ready else 1,
            "summary": {}, "hosts": [{"name": h, "address": h, "reachable": True, "error": None, "gather_s": 1.0,
                                      "groups": []} for h in hosts],
            "results": results}


def write(tmp_path, name, doc):
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(doc))
    return str(p)


def test_merge_concatenates_and_recounts(tmp_path):
    a = write(tmp_path, "a", shard("a.yaml", ["n1", "n2"], started="2026-12-02T10:00:05Z", duration=3.0))
    b = write(tmp_path, "b", shard("b.yaml", ["n3"], ready=False, failed=("n3",), duration=7.5))
    out = tmp_path / "m.json"
    rc = main([a, b, "-o", str(out), "--matrix", str(tmp_path / "m.html")])
    doc = json.loads(out.read_text())
    assert rc == 1 and doc["ready"] is False and doc["exit_code"] == 1
    assert [h["name"] for h in doc["hosts"]] == ["n1", "n2", "n3"]
    assert doc["summary"]["passed"] == 4 and doc["summary"]["failed"] == 1
    assert doc["started_at"] == "2026-12-02T10:00:00Z" and doc["duration_s"] == 7.5
    cluster = [r for r in doc["results"] if r["host"] is None]
    assert [r["shard"] for r in cluster] == [a, b]
    assert [s["inventory"] for s in doc["merge"]["shards"]] == ["a.yaml", "b.yaml"]
    html = (tmp_path / "m.html").read_text()
    assert "n3" in html and "n1" in html


def test_all_ready_is_ready_and_duplicates_are_named(tmp_path):
    a, b = shard("a", ["n1"]), shard("b", ["n2"])
    assert merge([("a", a), ("b", b)])["ready"] is True
    doc = merge([("a", a), ("b", shard("b", ["n1", "n2"]))])
    assert doc["ready"] is False
    assert doc["merge"]["duplicates"] == [{"host": "n1", "kept_from": "a", "dropped_from": "b"}]
    assert [h["name"] for h in doc["hosts"]] == ["n1", "n2"]
    assert sum(1 for r in doc["results"] if r["host"] == "n1") == 1


def test_bad_input_is_one_line_and_exit_4(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": 2}')
    assert main([str(bad), "-o", str(tmp_path / "o.json")]) == 4
    assert "not a preflight.json" in capsys.readouterr().err
    assert main([str(tmp_path / "missing.json")]) == 4


def test_preflight_merge_subcommand(tmp_path):
    a = write(tmp_path, "a", shard("a", ["n1"]))
    out = tmp_path / "o.json"
    assert cli_main(["merge", a, "-o", str(out)]) == 0
    assert json.loads(out.read_text())["ready"] is True
