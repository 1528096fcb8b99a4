"""preflight-merge: shards' preflight.json joined into one (issue 6, several controllers)."""
from __future__ import annotations

import json

import pytest

from preflight.cli import main as cli_main
from preflight.merge import main, merge
from preflight.results import Result


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


def _set(key, value):  # the document's own key
    return lambda d: d.__setitem__(key, value)


def _replace(kind, i, value):  # hosts[i] or results[i] replaced by a non-object
    return lambda d: d[kind].__setitem__(i, value)


def _host(i, **fields):
    return lambda d: d["hosts"][i].update(fields)


def _result(i, **fields):
    return lambda d: d["results"][i].update(fields)


def _drop(kind, i, key):
    return lambda d: d[kind][i].pop(key)


# Each broke merge (or the matrix page, after the merged JSON was written) with a traceback and
# exit code 1, which CI reads as "not ready"; a bad input file is exit code 4. results[1] is the
# cluster-wide result of a one-host shard.
BAD = {
    "host is a string": (_replace("hosts", 0, "n2"), "hosts[0]: expected an object, got a string"),
    "host name is a list": (_host(0, name=["n2"]), "hosts[0].name: expected a string, got an array"),
    "host name missing": (_drop("hosts", 0, "name"), "hosts[0]: missing 'name'"),
    "reachable is a string": (_host(0, reachable="yes"), "hosts[0].reachable: expected a boolean"),
    "result is null": (_replace("results", 0, None), "results[0]: expected an object, got null"),
    "started_at is a number": (_set("started_at", 5), ": started_at: expected a string or null, got a number"),
    "outcome bogus": (_result(0, outcome="bogus"),
                      "results[0].outcome: 'bogus' is not one of passed, failed, warning, error, skipped"),
    "outcome null": (_result(0, outcome=None), "results[0].outcome: expected a string, got null"),
    "check missing": (_drop("results", 0, "check"), "results[0]: missing 'check'"),
    "message missing": (_drop("results", 0, "message"), "results[0]: missing 'message'"),
    "host key missing": (_drop("results", 1, "host"), "results[1]: missing 'host'"),
    "check null": (_result(0, check=None), "results[0].check: expected a string, got null"),
    "outliers a number": (_result(1, outliers=5), "results[1].outliers: expected an array, got a number"),
    "outlier a number": (_result(1, outliers=["n2", 5]), "results[1].outliers[1]: expected a string"),
    "subject a number": (_result(0, subject=5), "results[0].subject: expected a string or null, got a number"),
    "remedy a list": (_result(0, remedy=["x"]), "results[0].remedy: expected a string or null, got an array"),
    "reference an object": (_result(0, reference={}), "results[0].reference: expected a string or null"),
    "schema true": (_set("schema", True), ": not a preflight.json (schema 1) document"),
    "host shard a number": (_host(0, shard=3), "hosts[0].shard: expected a string or null, got a number"),
}


@pytest.mark.parametrize("break_it, place", BAD.values(), ids=BAD.keys())
def test_malformed_shard_is_exit_4_naming_file_and_place_and_writes_nothing(tmp_path, capsys, break_it, place):
    good = write(tmp_path, "shard-a", shard("a", ["n1"], failed=("n1",)))
    doc = shard("b", ["n2"], failed=("n2",))
    break_it(doc)
    bad = write(tmp_path, "shard-b", doc)
    out, page = tmp_path / "out" / "m.json", tmp_path / "out" / "m.html"
    assert main([good, bad, "-o", str(out), "--matrix", str(page)]) == 4
    err = capsys.readouterr().err
    assert err.startswith(f"preflight-merge: {bad}: ") and place in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_what_preflight_writes_is_accepted_and_a_merged_file_merges_again(tmp_path):
    # Results as the run writes them (Result.to_json: observed, expected, nodeid, outliers), and
    # a merged document (results with "shard", started_at null when no shard had one) as a shard.
    doc = shard("a", ["n1", "n2"], ready=False)
    doc["results"] = [Result("npu.health", "n1", "npu0", "failed", "error", "m", observed="x", expected="y",
                             nodeid="t.py::x").to_json(),
                      Result("cluster.versions_agree", None, None, "warning", "warning", "differs",
                             remedy="r", reference="ref", outliers=("n2",)).to_json()]
    a = write(tmp_path, "a", doc)
    once = tmp_path / "once.json"
    assert main([a, "-o", str(once), "--matrix", str(tmp_path / "once.html")]) == 1
    again = json.loads(once.read_text())
    again["started_at"] = None
    twice = tmp_path / "twice.json"
    assert main([write(tmp_path, "again", again), write(tmp_path, "b", shard("b", ["n3"])),
                 "-o", str(twice), "--matrix", str(tmp_path / "twice.html")]) == 1
    assert [h["name"] for h in json.loads(twice.read_text())["hosts"]] == ["n1", "n2", "n3"]


def test_output_that_cannot_be_written_and_bad_usage_are_exit_4(tmp_path, capsys):
    """A directory given as -o or --matrix was a traceback with exit 1 ("not ready"), after the
    merged JSON had been written as READY; no input is argparse's exit 2."""
    a = write(tmp_path, "a", shard("a", ["n1"]))
    (tmp_path / "adir").mkdir()
    assert main([a, "-o", str(tmp_path / "adir")]) == 4
    assert "is a directory" in capsys.readouterr().err
    out = tmp_path / "m.json"
    assert main([a, "-o", str(out), "--matrix", str(tmp_path / "adir")]) == 4
    assert not out.exists()
    (tmp_path / "afile").write_text("x")
    assert main([a, "-o", str(tmp_path / "afile" / "m.json")]) == 4
    with pytest.raises(SystemExit) as exit_:
        main([])
    assert exit_.value.code == 4


def test_a_write_that_fails_past_the_checks_is_exit_4_and_leaves_no_merged_json(tmp_path, capsys, monkeypatch):
    """/proc/z.json passed the access() check (root) and its write was a traceback, exit 1; a full
    disk the same."""
    import preflight.report.matrix as matrix

    a = write(tmp_path, "a", shard("a", ["n1"]))
    assert main([a, "-o", "/proc/z.json"]) == 4
    assert "-o /proc/z.json: cannot write it" in capsys.readouterr().err

    def full(path, doc):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(matrix, "write_matrix", full)
    out = tmp_path / "m.json"
    assert main([a, "-o", str(out), "--matrix", str(tmp_path / "m.html")]) == 4
    assert "cannot write it: No space left on device (nothing written)" in capsys.readouterr().err
    assert not out.exists()


def test_a_result_for_a_host_the_file_does_not_list_is_refused(tmp_path, capsys):
    doc = shard("b", ["n2"])
    doc["results"][0]["host"] = "n9"  # it was dropped from the merge without a word
    assert main([write(tmp_path, "b", doc), "-o", str(tmp_path / "m.json")]) == 4
    assert "results[0].host: 'n9' is not in this file's hosts" in capsys.readouterr().err


def _cells(doc):
    from preflight.report.matrix import cells

    return cells(doc)[2]


def test_a_shards_cluster_wide_result_colours_only_its_own_hosts(tmp_path):
    """A's cluster check passed; B did not run it: B's hosts were painted green by A's pass."""
    a = shard("a", ["n1", "n2"])
    b = shard("b", ["n3"])
    b["results"] = [r for r in b["results"] if r["host"] is not None]
    b["results"].append({"check": "cluster.versions_agree", "host": None, "subject": None, "outcome": "failed",
                         "severity": "error", "message": "differs", "remedy": "", "reference": "",
                         "outliers": ["n3"]})
    c = shard("c", ["n4"])
    c["results"] = [r for r in c["results"] if r["host"] is not None]  # runs no cluster-wide check
    grid = _cells(merge([("a", a), ("b", b), ("c", c)]))
    assert grid[("n1", "cluster.versions_agree")][0] == "passed"
    assert grid[("n2", "cluster.versions_agree")][0] == "passed"
    assert grid[("n3", "cluster.versions_agree")][0] == "failed"
    assert ("n4", "cluster.versions_agree") not in grid
    # merged again, each host and result keeps the shard it came from
    twice = merge([("ab", merge([("a", a), ("b", b)])), ("c", c)])
    assert {h["name"]: h["shard"] for h in twice["hosts"]} == {"n1": "ab > a", "n2": "ab > a", "n3": "ab > b",
                                                               "n4": "c"}
    assert _cells(twice)[("n3", "cluster.versions_agree")][0] == "failed"


def test_not_ready_says_why_on_the_page_and_the_terminal(tmp_path, capsys):
    """A duplicate host made the merged page say NOT READY with no finding explaining it."""
    a = write(tmp_path, "a", shard("a", ["n1"]))
    b = write(tmp_path, "b", shard("b", ["n1", "n2"]))
    page = tmp_path / "m.html"
    assert main([a, b, "-o", str(tmp_path / "m.json"), "--matrix", str(page)]) == 1
    said = capsys.readouterr().out
    assert f"not ready: n1 is in {a} and {b}" in said
    shown = page.read_text()
    assert "Not ready because" in shown and f"n1 is in {a} and {b}" in shown


def test_a_shard_without_ready_is_judged_from_its_results():
    clean, failing = shard("a", ["n1"]), shard("b", ["n2"], failed=("n2",))
    for doc in (clean, failing):
        del doc["ready"]
    assert merge([("a", clean)])["ready"] is True
    doc = merge([("a", clean), ("b", failing)])
    assert doc["ready"] is False and doc["merge"]["not_ready"] == [
        "b: not ready (judged from its results: the file has no 'ready')"]
    down = shard("c", ["n3"])
    del down["ready"]
    down["hosts"][0]["reachable"] = False
    assert merge([("c", down)])["ready"] is False


def test_a_shard_saying_ready_beside_a_failure_or_an_unreachable_host_is_not_ready():
    """A file with ready: true (hand-edited, or an older version's) merged READY, exit 0, beside a
    failed check or an unreachable host it held."""
    failing = shard("b", ["n2"], failed=("n2",))
    assert failing["ready"] is True
    doc = merge([("a", shard("a", ["n1"])), ("b", failing)])
    assert doc["ready"] is False and doc["merge"]["not_ready"] == [
        "b: not ready (judged from its hosts and results, though the file says ready)"]
    for reachable in (False, "absent"):
        down = shard("c", ["n3"])
        if reachable == "absent":
            del down["hosts"][0]["reachable"]  # drawn unreachable on the page: not READY either
        else:
            down["hosts"][0]["reachable"] = False
        assert merge([("c", down)])["ready"] is False, reachable


def test_a_shard_that_ran_only_the_reachability_check_is_a_hole():
    """A shard from `-k reachable` logged into its hosts and checked nothing else: the merge was READY."""
    a, b = shard("a", ["n1"]), shard("b", ["n2"])
    b["results"] = [{"check": "cluster.reachable", "host": "n2", "subject": None, "outcome": "passed",
                     "severity": "error", "message": "reached", "remedy": "", "reference": ""}]
    doc = merge([("a", a), ("b", b)])
    assert doc["ready"] is False
    assert doc["merge"]["not_ready"] == [
        "b did not run 2 check(s) the other shards ran: cluster.versions_agree, npu.health"]


def test_shards_that_ran_other_checks_or_another_version_or_strict_are_named():
    a, b = shard("a", ["n1"]), shard("b", ["n2"])
    b["results"] = [r for r in b["results"] if r["host"] is not None]  # b ran no cluster.versions_agree
    b["tool"]["version"] = "9.9"
    b["strict"] = True
    doc = merge([("a", a), ("b", b)])
    assert doc["ready"] is False
    assert doc["merge"]["not_ready"] == ["b did not run 1 check(s) the other shards ran: cluster.versions_agree"]
    notes = doc["merge"]["notes"]
    assert "the shards were run by different preflight versions: 0 (a); 9.9 (b)" in notes
    assert "only b ran with --strict: warnings did not fail the other shards" in notes
    assert doc["strict"] is False  # it was true: a tool reading strict and ready took a's warnings as judged
    a["strict"] = True
    assert merge([("a", a), ("b", b)])["strict"] is True
    same = merge([("a", shard("a", ["n1"])), ("b", shard("b", ["n2"]))])
    assert same["ready"] is True and same["merge"]["not_ready"] == []
    assert [n for n in same["merge"]["notes"] if "nodes of each shard only" not in n] == []


def test_output_that_is_an_input_is_refused_and_left_alone(tmp_path, capsys):
    a = write(tmp_path, "a", shard("a", ["n1"]))
    before = open(a).read()
    assert main([a, "-o", a]) == 4
    assert "is one of the inputs" in capsys.readouterr().err
    assert main([a, "-o", str(tmp_path / "m.json"), "--matrix", a]) == 4
    assert open(a).read() == before and not (tmp_path / "m.json").exists()


def test_job_notes_of_every_shard_are_kept():
    a, b = shard("a", ["n1"]), shard("b", ["n2"])
    a["jobs"] = [{"path": "run.sh", "kind": "verl", "notes": ["$@ passes on ..."]}]
    doc = merge([("a", a), ("b", b)])
    assert doc["jobs"] == [{"path": "run.sh", "kind": "verl", "notes": ["$@ passes on ..."], "shard": "a"}]
    assert "jobs" not in merge([("b", b)])


# -- found by review: the page names the shards, outputs cannot collide, nothing checked is no verdict


def test_the_merged_page_names_each_hosts_shard_and_each_shards_cluster(tmp_path):
    """The page named no shard: one "(cluster)" row mixed every shard's cluster-wide results, and one
    finding stood for two shards' alike."""
    a, b = shard("a", ["a1"]), shard("b", ["b1"])
    for doc in (a, b):
        doc["results"].append({"check": "cluster.tls_agree", "host": None, "subject": None, "outcome": "error",
                               "severity": "error", "message": "no node's TLS switch could be read", "remedy": "",
                               "reference": ""})
        doc["ready"] = False
    page = tmp_path / "m.html"
    main([write(tmp_path, "a", a), write(tmp_path, "b", b), "-o", str(tmp_path / "m.json"), "--matrix", str(page)])
    shown = page.read_text()
    pa, pb = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    assert f"a1 <small>({pa})</small>" in shown and f"(cluster of {pa})" in shown and f"(cluster of {pb})" in shown
    findings = shown.split('id="pf-what-to-fix">What to fix', 1)[1]
    assert findings.count("TLS switch could be read") == 2  # one finding per shard, not one for both
    assert f"the cluster of {pa}" in findings and f"the cluster of {pb}" in findings


@pytest.mark.parametrize("how", ["matrix-is-output", "css-is-output", "css-is-input", "same-input-twice"])
def test_no_output_overwrites_another_or_an_input(tmp_path, how):
    a, b = write(tmp_path, "a", shard("a", ["n1"])), write(tmp_path, "b", shard("b", ["n2"]))
    css_input = tmp_path / "x.css"
    css_input.write_text(json.dumps(shard("c", ["n3"])))
    args = {"matrix-is-output": [a, b, "-o", str(tmp_path / "f.json"), "--matrix", str(tmp_path / "f.json")],
            "css-is-output": [a, b, "-o", str(tmp_path / "f.css"), "--matrix", str(tmp_path / "f.html")],
            "css-is-input": [a, str(css_input), "-o", str(tmp_path / "o.json"), "--matrix", str(tmp_path / "x.html")],
            "same-input-twice": [a, a, "-o", str(tmp_path / "o.json")]}[how]
    before = {p: p.read_bytes() for p in tmp_path.iterdir()}
    assert main(args) == 4
    assert {p: p.read_bytes() for p in tmp_path.iterdir()} == before  # nothing written, nothing changed


def test_a_shard_that_checked_nothing_is_not_ready():
    empty = shard("b", ["n2"])
    empty["results"] = []
    doc = merge([("a", shard("a", ["n1"])), ("b", empty)])
    assert doc["ready"] is False and "b: no check result (the shard checked nothing)" in doc["merge"]["not_ready"]


@pytest.mark.parametrize("change, words", [
    (lambda d: d["hosts"][0].update(address=5), "hosts[0].address: expected a string or null, got a number"),
    (lambda d: d.update(jobs=[{"path": "run.sh", "notes": 5}]), "jobs[0].notes: expected an array"),
    (lambda d: d.update(jobs=[{"path": "run.sh", "notes": [5]}]), "jobs[0].notes[0]: expected a string"),
    (lambda d: d.update(interrupted="false"), "interrupted: expected a boolean"),
])
def test_a_value_of_the_wrong_type_is_a_usage_error_before_anything_is_written(tmp_path, change, words, capsys):
    doc = shard("a", ["n1"])
    change(doc)
    out = tmp_path / "o.json"
    assert main([write(tmp_path, "a", doc), "-o", str(out), "--matrix", str(tmp_path / "o.html")]) == 4
    assert words in capsys.readouterr().err and not out.exists()


def test_the_one_shard_that_ran_an_extra_check_is_the_one_named():
    docs = [(f"s{i:02d}", shard(f"s{i}", [f"n{i}"])) for i in range(5)]
    docs[4][1]["results"].append({"check": "env.extra_probe", "host": "n4", "subject": None, "outcome": "passed",
                                  "severity": "error", "message": "m", "remedy": "", "reference": ""})
    assert merge(docs)["merge"]["not_ready"] == ["s04 ran 1 check(s) the other shards did not: env.extra_probe"]


def test_the_runs_own_reachability_record_is_no_check_set():
    """A shard with an unreachable host (its cluster.reachable failure recorded by the run under -k)
    made the others 'not run cluster.reachable'."""
    down = shard("c", ["c1"], ready=False)
    down["hosts"][0]["reachable"] = False
    down["results"].append({"check": "cluster.reachable", "host": "c1", "subject": None, "outcome": "failed",
                            "severity": "error", "message": "cannot log in", "remedy": "", "reference": ""})
    doc = merge([("a", shard("a", ["a1"])), ("c", down)])
    assert not [w for w in doc["merge"]["not_ready"] if "did not run" in w or "ran 1 check" in w], doc["merge"]


def test_a_shards_escapes_are_printed_as_text(tmp_path, capsys):
    doc = shard("a", ["n1"])
    doc["tool"]["version"] = "0.1.0\x1b[2J\x1b[32mALL READY\x1b[0m\n  note: forged"
    main([write(tmp_path, "a", doc), write(tmp_path, "b", shard("b", ["n2"])), "-o", str(tmp_path / "o.json")])
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\n  note: forged" not in out


def test_cluster_wide_checks_are_said_to_have_compared_each_shards_nodes_only(tmp_path, capsys):
    """Two shards each agreeing within (TLS off on all of a, on on all of b) merged as READY with no
    word that nothing compared a's nodes with b's: the fleet's HCCL would fail across them."""
    a, b = shard("a", ["a1", "a2"]), shard("b", ["b1", "b2"])
    for doc, switch in ((a, "tls switch[0] (off)"), (b, "tls switch[1] (on)")):
        doc["results"].append({"check": "cluster.tls_agree", "host": None, "subject": None, "outcome": "passed",
                               "severity": "error", "message": f"{switch} on all 16 NPUs of 2 nodes", "remedy": "",
                               "reference": ""})
    out, page = tmp_path / "m.json", tmp_path / "m.html"
    assert main([write(tmp_path, "a", a), write(tmp_path, "b", b), "-o", str(out), "--matrix", str(page)]) == 0
    [note] = json.loads(out.read_text())["merge"]["notes"]
    assert note.startswith("cluster-wide checks compared the nodes of each shard only, never nodes of different "
                           "shards: cluster.tls_agree, cluster.versions_agree")
    assert f"note: {note}" in capsys.readouterr().out
    assert "nodes of each shard only" in page.read_text()
    # One shard is the whole fleet: nothing to say.
    assert merge([("a", a)])["merge"]["notes"] == []


def _shard_of_real_checks(name, nodes, tls=0, ip_base=0):
    """A shard's preflight.json whose cluster-wide results come from the checks themselves, on
    ``nodes`` healthy 8-NPU nodes (TLS ``tls``; device IPs 29.<ip_base + node>.<npu>.9)."""
    from preflight.checks import env, hccl, npu
    from tests.factsets import cluster_of, fixture, healthy_raw, make_facts, make_host, out, tls_line

    pairs = []
    for i, host in enumerate(nodes):
        raw = healthy_raw()
        raw["net.routes"] = out("default via 10.0.0.254 dev eth0 proto static metric 100\n@@IPV6\n")
        for dev in range(8):
            raw[f"hccn.tls/{dev}"] = out(tls_line(dev, tls))
            raw[f"hccn.ip/{dev}"] = out(fixture("hccn_tool/ip/a2-dev3.txt").replace(
                "29.1.112.213", f"29.{ip_base + i}.{dev}.9"))
        pairs.append((make_host(host, address=f"10.{ip_base}.0.{i + 1}"), make_facts(host, raw=raw)))
    cluster = cluster_of(*pairs)
    results = [r.to_json() for func in (hccl.test_tls_agree, hccl.test_device_ip_unique, npu.test_hardware_agree,
                                        env.test_ifname_agree)
               for r in __import__("tests.factsets", fromlist=["run_check"]).run_check(func, cluster=cluster)]
    doc = shard(name, [])
    doc["hosts"] = [{"name": h, "address": h, "reachable": True, "error": None, "gather_s": 1.0, "groups": []}
                    for h in nodes]
    doc["results"] = results
    return doc


def test_what_each_shard_agrees_on_is_compared_across_the_shards(tmp_path, capsys):
    """Two racks, each agreeing within, merged as READY: TLS off on one and on on the other, or one
    copied hccn.conf giving both racks the same device IPs, fail HCCL across them, as one run over
    every node would have said.  The nodes of the smaller side are named."""
    a = _shard_of_real_checks("a", ["a1", "a2", "a3"])
    same = merge([("a.json", a), ("b.json", _shard_of_real_checks("b", ["b1", "b2"], ip_base=50))])
    assert same["ready"] is True and same["merge"]["not_ready"] == [], same["merge"]
    assert not [n for n in same["merge"]["notes"] if "tls_agree" in n or "device_ip_unique" in n]
    # TLS on in rack b: the fleet is not ready, b's nodes are the outliers.
    on = _shard_of_real_checks("b", ["b1", "b2"], tls=1, ip_base=50)
    doc = merge([("a.json", a), ("b.json", on)])
    assert doc["ready"] is False
    [why] = [w for w in doc["merge"]["not_ready"] if w.startswith("cluster.tls_agree")]
    assert "tls switch[0] (off) on the nodes of a.json (3 hosts); tls switch[1] (on) on the nodes of b.json " \
           "(2 hosts)" in why, why
    [r] = [r for r in doc["results"] if r["check"] == "cluster.tls_agree" and r["outcome"] == "failed"]
    assert r["outliers"] == ["b1", "b2"] and "hccn_tool -i <N> -tls -s enable 0" in r["remedy"]
    assert r["reference"].startswith("ROLL Ascend NPU FAQ")
    # One device IP range in both racks (a copied hccn.conf): each IP is named with its two NPUs.
    copied = _shard_of_real_checks("b", ["b1", "b2"])
    doc = merge([("a.json", a), ("b.json", copied)])
    dupes = [r for r in doc["results"] if r["check"] == "cluster.device_ip_unique" and r["outcome"] == "failed"]
    assert len(dupes) == 16 and dupes[0]["subject"] == "device IP 29.0.0.9", dupes[0]
    assert "a1 npu0 on the nodes of a.json" in dupes[0]["message"] and "b1 npu0 on the nodes of b.json" \
        in dupes[0]["message"]
    [why] = [w for w in doc["merge"]["not_ready"] if w.startswith("cluster.device_ip_unique")]
    assert why.endswith("(and 15 more such)"), why  # one line a check, not one an address
    # The merged page and "What to fix" name them; the same file merged again says the same.
    out, page = tmp_path / "m.json", tmp_path / "m.html"
    assert main([write(tmp_path, "a", a), write(tmp_path, "b", on), "-o", str(out), "--matrix", str(page)]) == 1
    assert "cluster.tls_agree" in capsys.readouterr().out
    assert "b[1-2] (TLS switch, cluster-wide)" in page.read_text()
    again = merge([("m.json", json.loads(out.read_text()))])
    assert any(w.startswith("cluster.tls_agree") for w in again["merge"]["not_ready"])
    # ... once: the finding the first merge made is made anew, not copied beside the new one.
    assert sum(1 for r in again["results"] if r["check"] == "cluster.tls_agree" and r["outcome"] == "failed") == 1


def test_a_shards_agreed_values_must_be_strings():
    doc = shard("a", ["n1"])
    doc["results"][-1]["agreed"] = {"TLS switch": 0}
    with pytest.raises(Exception, match=r"results\[1\]\.agreed\.TLS switch: expected a string, got a number"):
        from preflight.merge import _validate
        _validate(doc)


def test_role_only_nodes_declaring_other_npu_counts_in_two_shards_are_not_compared():
    """One run splits a 4-NPU head from 8-NPU workers by what they declare; shards holding one
    each must not be compared as one group by the merge."""
    from preflight.checks import npu
    from tests.factsets import cluster_of, fixture, healthy_raw, make_facts, make_host, out, run_check

    a3 = "npu-smi/info/a3-ascend910-24.1.rc3.7-classic-idle.txt"

    def one(name, declared, info="npu-smi/info/a2-910b4-25.0.rc1.1-idle.txt"):
        pairs = []
        for node in (name, name + "b"):
            raw = healthy_raw()
            raw["npu_smi.info"] = out(fixture(info))
            pairs.append((make_host(node, groups=["worker"], npus_per_node=declared), make_facts(node, raw=raw)))
        [r] = run_check(npu.test_hardware_agree, cluster=cluster_of(*pairs))
        doc = shard(name, [name, name + "b"])
        doc["results"] = [r.to_json()]
        return doc

    eight = one("w", 8)
    assert list(eight["results"][0]["agreed"]) == ["the nodes declaring npus_per_node 8"]
    assert merge([("a", eight), ("b", one("x", 16, a3))])["ready"] is True
    assert merge([("a", eight), ("b", one("y", 8, a3))])["ready"] is False  # both declare 8: compared
    assert merge([("a", one("u", None)), ("b", one("v", None, a3))])["ready"] is False  # neither declares


def _versions_shard(name, nodes, raw):
    from preflight.checks import versions
    from tests.factsets import cluster_of, make_facts, make_host, run_check

    doc = shard(name, nodes)
    doc["results"] = [r.to_json() for r in run_check(versions.test_versions_agree, cluster=cluster_of(
        *[(make_host(h), make_facts(h, raw=raw())) for h in nodes]))]
    return doc


def test_versions_one_run_would_pass_or_only_warn_about_are_not_a_failure_across_shards():
    """Python 3.10.12 on one shard and 3.10.14 on another (one run: a warning), torch 2.6.0+cpu beside
    2.6.0 (a warning), MindSpeed from its branch on one shard and a tag of it on another (one run: the
    same pip version, a pass) failed the merge."""
    from tests.factsets import out
    from tests.unit.test_node_catalog import PACKAGES, mindspeed_mm_stack, node_raw, stack_output

    def merged(one, other):
        return merge([("a", _versions_shard("a", ["a1", "a2"], one)), ("b", _versions_shard("b", ["b1"], other))])

    patch = merged(node_raw, lambda: node_raw(python_dot_stack=out(stack_output(version="3.10.14"))))
    assert patch["ready"] is True, patch["merge"]["not_ready"]
    minor = merged(node_raw, lambda: node_raw(python_dot_stack=out(stack_output(version="3.11.9"))))
    assert [w[:40] for w in minor["merge"]["not_ready"]] == ["cluster.versions_agree: python across th"]
    label = merged(lambda: node_raw(python_dot_stack=out(stack_output(packages={**PACKAGES, "torch": "2.6.0+cpu"}))),
                   lambda: node_raw(python_dot_stack=out(stack_output(packages={**PACKAGES, "torch": "2.6.0"}))))
    assert label["ready"] is True, label["merge"]["not_ready"]
    tag = merged(lambda: node_raw(python_dot_stack=out(mindspeed_mm_stack())),
                 lambda: node_raw(python_dot_stack=out(mindspeed_mm_stack(ms_head="3f2c9a1d0b7e"))))
    assert tag["ready"] is True, tag["merge"]["not_ready"]
    # Two branches of one pip version: two releases, as one run says.
    other = merged(lambda: node_raw(python_dot_stack=out(mindspeed_mm_stack())),
                   lambda: node_raw(python_dot_stack=out(mindspeed_mm_stack(ms_head="ref: refs/heads/2.1.0_core_r0.12.1"))))
    assert [w[:50] for w in other["merge"]["not_ready"]] == ["cluster.versions_agree: mindspeed release across t"]


def _hardware_shard(name, nodes):
    """``nodes``: (name, groups, npus_per_node, npu-smi info fixture, board read)."""
    from preflight.checks import npu
    from tests.factsets import cluster_of, fixture, healthy_raw, make_facts, make_host, out, run_check

    pairs = []
    for node, groups, declared, info, board in nodes:
        raw = healthy_raw()
        raw["npu_smi.info"] = out(fixture(info))
        raw["npu_smi.board"] = out(fixture("npu-smi/board/a3-9392-chip-npu0-c0-head.txt")) if board else \
            out("", rc=1, stderr="permission denied")
        pairs.append((make_host(node, groups=groups, **({"npus_per_node": declared} if declared else {})),
                      make_facts(node, raw=raw)))
    doc = shard(name, [n for n, *_ in nodes])
    doc["results"] = [r.to_json() for r in run_check(npu.test_hardware_agree, cluster=cluster_of(*pairs))]
    return doc


def test_a3_nodes_whose_board_one_shard_could_not_read_are_compared_by_their_shape():
    """A3 nodes read as 8 x Ascend910 (ascend910_9392) on one shard and 8 x Ascend910 on a shard
    that could not read the board (not root) failed the merge: one run compares the shape alone."""
    a3 = "npu-smi/info/a3-ascend910-24.1.rc3.7-classic-idle.txt"
    read = _hardware_shard("a", [("a1", [], None, a3, True), ("a2", [], None, a3, True)])
    unread = _hardware_shard("b", [("b1", [], None, a3, False), ("b2", [], None, a3, False)])
    doc = merge([("a", read), ("b", unread)])
    assert doc["ready"] is True, doc["merge"]["not_ready"]
    other = _hardware_shard("b", [("b1", [], None, "npu-smi/info/a2-910b4-25.0.rc1.1-idle.txt", False)] * 2)
    assert merge([("a", read), ("b", other)])["ready"] is False


def test_workers_declaring_8_npus_are_compared_with_another_shards_beside_a_4_npu_head():
    """Rack a: a head declaring 4 NPUs and workers declaring 8; rack b: workers declaring 8. One run
    compares all the 8-NPU workers; the merge keyed them apart and never compared them."""
    b4, a3 = "npu-smi/info/a2-910b4-25.0.rc1.1-idle.txt", "npu-smi/info/a3-ascend910-24.1.rc3.7-classic-idle.txt"
    rack_a = _hardware_shard("a", [("h", ["head"], 4, b4, True), ("a1", ["worker"], 8, b4, True),
                                   ("a2", ["worker"], 8, b4, True)])
    rack_b = _hardware_shard("b", [("b1", ["worker"], 8, a3, True), ("b2", ["worker"], 8, a3, True)])
    doc = merge([("a", rack_a), ("b", rack_b)])
    assert [w[:70] for w in doc["merge"]["not_ready"]] == [
        "cluster.hardware_agree: the nodes declaring npus_per_node 8 across the"], doc["merge"]["not_ready"]


def test_a_device_ip_in_two_shards_blames_the_two_nodes_holding_it_not_a_whole_shard():
    """One device IP on a1 npu0 and on b2 npu0: one run names a1 and b2; the merge named every node
    of the smaller shard (b1 too, whose IPs are its own).  An unreachable node agreed to nothing."""
    a = _shard_of_real_checks("a", ["a1", "a2", "a3"])
    b = _shard_of_real_checks("b", ["b1", "b2"], ip_base=50)
    [r] = [r for r in b["results"] if r["check"] == "cluster.device_ip_unique" and r.get("agreed")]
    r["agreed"]["device IP 29.0.0.9"] = r["agreed"].pop("device IP 29.51.0.9")
    [dupe] = [r for r in merge([("a", a), ("b", b)])["results"] if r["outcome"] == "failed"]
    assert dupe["subject"] == "device IP 29.0.0.9" and dupe["outliers"] == ["a1", "b2"], dupe
    on = _shard_of_real_checks("b", ["b1", "b2"], tls=1, ip_base=50)
    on["hosts"].append({"name": "b3", "address": "b3", "reachable": False, "error": "refused", "groups": []})
    [tls] = [r for r in merge([("a", a), ("b", on)])["results"] if r["outcome"] == "failed"]
    assert tls["outliers"] == ["b1", "b2"], tls
