"""The plugin end to end through pytester, in a subprocess, so the installed plugin (pytest11 entry
point) loads the way users get it.  The inventory is this machine (``connection: local``); it has no
NPU, so checks fail or error: the assertions are on the reports, not on readiness."""

from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

pytest_plugins = ["pytester"]

LOCAL_INVENTORY = "hosts:\n  - {name: localhost, connection: local}\n"
TIMEOUT = 120


@pytest.fixture
def inv(pytester):
    path = pytester.path / "inv.yaml"
    path.write_text(LOCAL_INVENTORY)
    return path


def run(pytester, *args):
    return pytester.runpytest_subprocess(*args, timeout=TIMEOUT)


def output(result) -> str:
    return "\n".join(result.outlines + result.errlines)


def load(path) -> dict:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def outcome_set(doc) -> set[tuple]:
    return {(r["check"], r["host"], r["subject"], r["outcome"]) for r in doc["results"]}


def assert_report_contract(doc):
    assert doc["schema"] == 1
    assert doc["tool"]["name"] == "ascend-preflight"
    for r in doc["results"]:
        assert r["outcome"] in ("passed", "failed", "warning", "error", "skipped"), r
        assert r["severity"] in ("error", "warning"), r
        if r["outcome"] != "passed":
            assert r["message"].strip(), r
            assert r["reference"].strip(), r
        if r["outcome"] in ("failed", "warning"):
            assert r["remedy"].strip(), r


# ------------------------------------------------------------------------------ 1 + 9: a full run


def test_inventory_run_collects_builtin_checks_and_writes_reports(pytester, inv):
    result = run(pytester, "--inventory", "inv.yaml")
    text = output(result)
    assert result.ret == 1, text  # this machine is not an Ascend node
    assert "Traceback" not in text
    result.stdout.fnmatch_lines(["*devices.py*", "*limits.py*"])
    result.stdout.fnmatch_lines(["*ascend-preflight*", "*verdict: NOT READY*"])
    reports = pytester.path / "reports"
    for name in ("preflight.html", "matrix.html", "preflight.json"):
        assert (reports / name).is_file(), name
    # Each run has its own folder; the stable names point at the latest finished run.
    assert sorted(p.name for p in reports.iterdir()) == ["latest", "matrix.css", "matrix.html", "preflight.html",
                                                         "preflight.json", "runs"]
    [run_dir] = (reports / "runs").iterdir()
    assert sorted(p.name for p in run_dir.iterdir()) == ["matrix.css", "matrix.html", "preflight.html",
                                                         "preflight.json"]
    for name in ("matrix.css", "matrix.html", "preflight.html", "preflight.json"):
        assert (reports / name).resolve() == (run_dir / name).resolve()

    doc = load(reports / "preflight.json")
    assert_report_contract(doc)
    assert doc["inventory"] == "inv.yaml"
    assert doc["ready"] is False
    assert doc["exit_code"] == 1
    assert [h["name"] for h in doc["hosts"]] == ["localhost"]
    localhost = doc["hosts"][0]
    assert localhost["reachable"] is True and localhost["address"] == "localhost"
    checks = {r["check"] for r in doc["results"]}
    assert {"cluster.reachable", "devices.davinci_nodes", "limits.nofile"} <= checks
    reachable = [r for r in doc["results"] if r["check"] == "cluster.reachable"]
    assert [(r["host"], r["outcome"]) for r in reachable] == [("localhost", "passed")]
    davinci = [r for r in doc["results"] if r["check"] == "devices.davinci_nodes"]
    assert davinci and all(r["outcome"] == "failed" for r in davinci)  # no /dev/davinciN here
    # No npu-smi here either: its checks are not evaluated, and say what to do about it.
    health = [r for r in doc["results"] if r["check"] == "npu.health"]
    assert health and all(r["outcome"] == "error" and "npu-smi not found on the host" in r["message"]
                          and "non-interactive SSH session" in r["remedy"] for r in health), health
    assert "    remedy: Install the tool on that node" in text
    assert sum(doc["summary"].values()) == len(doc["results"])

    # 9: the pytest-html report has our columns, the matrix and the verdict.
    html = (reports / "preflight.html").read_text(encoding="utf-8")
    for column in ("Host", "Check", "Severity"):
        assert f">{column}</th>" in html, column
    assert "pf-matrix" in html
    assert "NOT READY" in html
    matrix = (reports / "matrix.html").read_text(encoding="utf-8")
    assert "<script" not in matrix.lower()
    assert "NOT READY" in matrix and "devices.davinci_nodes" in matrix


def test_report_dir_moves_the_reports_and_junit_has_properties(pytester, inv):
    result = run(pytester, "--inventory", "inv.yaml", "--report-dir", "out/X", "--junitxml", "j.xml")
    assert result.ret == 1, output(result)
    assert not (pytester.path / "reports").exists()
    for name in ("preflight.html", "matrix.html", "preflight.json"):
        assert (pytester.path / "out" / "X" / name).is_file(), name
    result.stdout.fnmatch_lines(["*report: out/X/preflight.json*"])
    assert load(pytester.path / "out" / "X" / "preflight.json")["schema"] == 1

    # 8: JUnit testcases carry the check id and the host as properties.
    root = ET.parse(pytester.path / "j.xml").getroot()
    cases = list(root.iter("testcase"))
    assert cases
    found = {}
    for case in cases:
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        if "check" in props:
            found[props["check"]] = props
    assert found["limits.nofile"]["host"] == "localhost"
    assert found["limits.nofile"]["severity"] == "error"
    assert found["cluster.reachable"]["host"] == "localhost"
    nofile_case = next(c for c in cases if c.get("name") == "test_nofile[localhost]")
    assert nofile_case.find("failure") is not None


# ------------------------------------------------------------------------------ 2: broken inventories


BROKEN = {
    "syntax": ("hosts:\n  - {name: localhost, connection: local\n", "YAML syntax", None),
    "unknown_key": ("hosts:\n  - name: localhost\n    conection: local\n", "conection", 3),
    "duplicate_host": ("hosts:\n  - {name: localhost, connection: local}\n  - {name: localhost, connection: local}\n",
                       "hosts[1].name", 3),
    "bad_range": ('hosts:\n  - {name: "node[5-1]"}\n', "hosts[0].name", 2),
    "no_hosts": ("hosts: []\n", "hosts", 1),
}


@pytest.mark.parametrize("case", [*BROKEN, "missing_file"])
def test_broken_inventory_is_one_clear_line_and_exit_4(pytester, case):
    if case == "missing_file":
        name, key, line = "nope.yaml", None, None
    else:
        content, key, line = BROKEN[case]
        name = f"{case}.yaml"
        (pytester.path / name).write_text(content)
    result = run(pytester, "--inventory", name)
    text = output(result)
    assert result.ret == 4, text
    assert "Traceback" not in text
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    msg = lines[0]
    assert name in msg
    if line is not None:
        assert f"{name}:{line}" in msg, msg
    if key is not None:
        assert key in msg, msg
    if case == "missing_file":
        assert "no such file" in msg
    assert not (pytester.path / "reports").exists()


@pytest.mark.parametrize("key", ["ssh_config", "identity_file"])
def test_a_controller_file_the_inventory_names_that_is_not_there_is_a_usage_error(pytester, key):
    """A missing ssh_config was every node failing cluster.reachable, exit 1, with a remedy about
    the nodes' sshd; the mistake is the inventory's."""
    (pytester.path / "inv.yaml").write_text(f"defaults: {{{key}: {pytester.path}/nope}}\n"
                                            "hosts:\n  - name: node-[01-03]\n")
    result = run(pytester, "--inventory", "inv.yaml")
    text = output(result)
    assert result.ret == 4, text
    # The line that sets it (defaults:), not the first host inheriting it.
    assert f"inv.yaml:1: {key}: {pytester.path}/nope does not exist on this machine (hosts node-[01-03])" in text
    assert not (pytester.path / "reports").exists()
    (pytester.path / "inv.yaml").write_text(f"# {key}: {pytester.path}/nope\nhosts:\n  - name: node-01\n"
                                            f"  - name: node-02\n    {key}: '{pytester.path}/nope'\n")
    text = output(run(pytester, "--inventory", "inv.yaml"))
    assert f"inv.yaml:5: {key}: {pytester.path}/nope does not exist on this machine (host node-02)" in text, text
    if key == "identity_file":  # an Ansible inventory names its own variable
        (pytester.path / "inv.yaml").write_text(f"all:\n  hosts:\n    n1:\n      ansible_host: 10.0.0.1\n"
                                                f"      ansible_ssh_private_key_file: {pytester.path}/nope\n")
        text = output(run(pytester, "--inventory", "inv.yaml"))
        assert f"inv.yaml:5: ansible_ssh_private_key_file: {pytester.path}/nope does not exist" in text, text
    if key == "ssh_config":  # ssh -F /dev/null: no configuration, a usual choice, not a mistake
        (pytester.path / "inv.yaml").write_text("defaults: {ssh_config: /dev/null}\nhosts:\n  - name: node-[01-03]\n")
        assert "does not exist" not in output(run(pytester, "--inventory", "inv.yaml", "--collect-only"))


# ------------------------------------------------------------------------------ 3: selection


def test_k_selects_only_the_reachability_check(pytester, inv):
    result = run(pytester, "--inventory", "inv.yaml", "-k", "reachable")
    assert result.ret == 0, output(result)  # the one selected check passes on localhost
    result.assert_outcomes(passed=1, deselected=result.parseoutcomes()["deselected"])
    doc = load(pytester.path / "reports" / "preflight.json")
    assert {r["check"] for r in doc["results"]} == {"cluster.reachable"}
    assert doc["ready"] is True


def test_k_selects_a_check_by_the_id_the_reports_show(pytester, inv):
    result = run(pytester, "--inventory", "inv.yaml", "-k", "hccl.link_up or limits.nofile")
    doc = load(pytester.path / "reports" / "preflight.json")
    assert {r["check"] for r in doc["results"]} == {"hccl.link_up", "limits.nofile"}, output(result)


def test_k_that_leaves_hosts_without_a_check_is_not_ready(pytester, inv):
    """-k naming one host's checks was READY (exit 0) for the whole fleet: the other hosts, reached
    but never checked, counted as ready."""
    run(pytester, "--inventory", "inv.yaml", "--facts-out", "f.json", "--report-dir", "r1", "-k", "reachable")
    facts = load(pytester.path / "f.json")
    twin = json.loads(json.dumps(facts["hosts"][0]))
    twin["host"] = "nodeb"
    facts["hosts"].append(twin)
    entry = json.loads(json.dumps(facts["inventory"]["hosts"][0]))
    entry["name"] = "nodeb"
    facts["inventory"]["hosts"].append(entry)
    (pytester.path / "f.json").write_text(json.dumps(facts), encoding="utf-8")
    result = run(pytester, "--facts-in", "f.json", "--report-dir", "r2", "-k", "localhost and reachable")
    text = output(result)
    assert result.ret == 1, text
    assert "verdict: NOT READY (1 reachable host(s) had no check selected: nodeb;" in text, text
    assert load(pytester.path / "r2" / "preflight.json")["ready"] is False
    # The same check on every host, or a cluster-wide check alone, speaks for all of them.
    result = run(pytester, "--facts-in", "f.json", "--report-dir", "r3", "-k", "reachable")
    assert result.ret == 0 and load(pytester.path / "r3" / "preflight.json")["ready"] is True, output(result)
    result = run(pytester, "--facts-in", "f.json", "--report-dir", "r4", "-k", "hardware_agree")
    assert "had no check selected" not in output(result), output(result)


# ------------------------------------------------------------------------------ 4: a user's own check


USER_CHECK = '''
from preflight.check import check


@check("mine.nofile_known", title="the open-file limit can be read", remedy="Ask the admin.",
       reference="our runbook, section 3", needs=("session.nofile",))
def test_mine(host, facts, verdict):
    limit = facts.get("session.nofile")
    verdict.passed(subject="nofile", message=f"{host.name}: soft {limit.soft}")


@check("mine.always_warns", title="a warning", remedy="Nothing to do.", reference="our runbook",
       severity="warning")
def test_warns(host, verdict):
    verdict.failed(observed="something odd", expected="nothing odd")
'''


def test_user_check_module_runs_alongside_the_builtin_ones(pytester, inv):
    pytester.makepyfile(test_mine=USER_CHECK)
    result = run(pytester, "--inventory", "inv.yaml", "test_mine.py")
    text = output(result)
    assert result.ret == 1, text
    result.stdout.fnmatch_lines(["*test_mine.py*", "*devices.py*"])
    doc = load(pytester.path / "reports" / "preflight.json")
    mine = [r for r in doc["results"] if r["check"] == "mine.nofile_known"]
    assert len(mine) == 1
    assert mine[0]["host"] == "localhost" and mine[0]["subject"] == "nofile"
    assert mine[0]["outcome"] == "passed" and mine[0]["message"].startswith("localhost: soft ")
    warns = [r for r in doc["results"] if r["check"] == "mine.always_warns"]
    assert [(r["outcome"], r["severity"], r["remedy"]) for r in warns] == [("warning", "warning", "Nothing to do.")]
    assert "devices.davinci_nodes" in {r["check"] for r in doc["results"]}
    assert_report_contract(doc)


def test_a_warning_is_printed_in_the_terminal_without_strict(pytester, inv):
    """A warning fails no test, so pytest printed nothing of it: the summary lists it, one line."""
    pytester.makepyfile(test_mine=USER_CHECK)
    result = run(pytester, "--inventory", "inv.yaml", "test_mine.py", "-k", "warns")
    assert result.ret == 0, output(result)
    result.stdout.fnmatch_lines(["What to fix (1 item(s), *; 1 warning(s) not blocking the verdict (--preflight-strict "
                                 "or --strict makes them so)):",
                                 "  1. WARNING (not blocking) [[]mine.always_warns[]] on localhost*: something odd; "
                                 "expected nothing odd",
                                 "*remedy: Nothing to do.",
                                 "verdict: READY"])
    result = run(pytester, "--inventory", "inv.yaml", "test_mine.py", "-k", "warns", "--strict")
    assert result.ret == 1 and "not blocking the verdict" not in output(result)


CRASHING_CHECKS = '''
from preflight.check import check


@check("mine.crashes", title="crashes", remedy="Nothing.", reference="our runbook")
def test_crashes(host, verdict):
    raise KeyError("token=abc123 \\x1b[31m\\nverdict: READY")


@check("mine.silent", title="says nothing", remedy="Nothing.", reference="our runbook")
def test_silent(host, verdict):
    pass
'''


def test_a_crashed_or_silent_check_is_one_redacted_line_with_a_remedy(pytester, inv):
    """A crash's message reached preflight.json unredacted, raw and with no remedy."""
    pytester.makepyfile(test_mine=CRASHING_CHECKS)
    result = run(pytester, "--inventory", "inv.yaml", "test_mine.py")
    assert result.ret == 1, output(result)
    doc = load(pytester.path / "reports" / "preflight.json")
    [crash] = [r for r in doc["results"] if r["check"] == "mine.crashes"]
    [silent] = [r for r in doc["results"] if r["check"] == "mine.silent"]
    assert crash["outcome"] == "error" and crash["message"].startswith("the check itself crashed: KeyError: ")
    assert "abc123" not in crash["message"] and "\n" not in crash["message"] and "\x1b" not in crash["message"]
    assert silent["message"] == "the check recorded no result"
    for r in (crash, silent):
        assert r["remedy"].startswith("A defect in the check, not a finding about the node"), r


SKIPPING_CHECKS = '''
import pytest
from preflight.check import check


@check("mine.skips", title="skips itself", remedy="Nothing.", reference="our runbook")
def test_skips(host, verdict):
    pytest.skip("not on this kind of node")


@pytest.mark.skip(reason="not applicable here")
@check("mine.marked", title="skipped by a marker", remedy="Nothing.", reference="our runbook")
def test_marked(host, verdict):
    verdict.passed()
'''


def test_pytest_skip_inside_a_check_keeps_its_reference(pytester, inv):
    pytester.makepyfile(test_mine=SKIPPING_CHECKS)
    result = run(pytester, "--inventory", "inv.yaml", "test_mine.py", "-k", "skips")
    assert result.ret == 0, output(result)
    doc = load(pytester.path / "reports" / "preflight.json")
    [r] = [r for r in doc["results"] if r["check"] == "mine.skips"]
    assert (r["host"], r["outcome"], r["message"]) == ("localhost", "skipped", "not on this kind of node")
    assert r["reference"] == "our runbook"


def test_check_skipped_by_a_marker_is_a_skipped_result(pytester, inv):
    pytester.makepyfile(test_mine=SKIPPING_CHECKS)
    result = run(pytester, "--inventory", "inv.yaml", "test_mine.py", "-k", "marked")
    assert result.ret == 0, output(result)
    result.assert_outcomes(skipped=1, deselected=result.parseoutcomes()["deselected"])
    doc = load(pytester.path / "reports" / "preflight.json")
    assert [(r["check"], r["host"], r["outcome"]) for r in doc["results"]] == \
        [("mine.marked", "localhost", "skipped")]


# ------------------------------------------------------------------------------ 5: facts out / in


def test_facts_out_then_facts_in_gives_the_same_results(pytester, inv):
    first = run(pytester, "--inventory", "inv.yaml", "--facts-out", "f.json", "--report-dir", "r1")
    assert first.ret == 1, output(first)
    facts = load(pytester.path / "f.json")
    assert facts["schema"] == 1 and [h["host"] for h in facts["hosts"]] == ["localhost"]
    (pytester.path / "inv.yaml").unlink()  # the replay needs no inventory
    second = run(pytester, "--facts-in", "f.json", "--report-dir", "r2")
    assert second.ret == 1, output(second)
    one = load(pytester.path / "r1" / "preflight.json")
    two = load(pytester.path / "r2" / "preflight.json")
    assert outcome_set(one) == outcome_set(two)
    assert [h["name"] for h in two["hosts"]] == ["localhost"]


def test_a_byte_that_was_not_utf8_in_saved_facts_still_gives_every_report(pytester, inv):
    """A surrogate in a saved stderr (\\udcff, how json keeps a byte that was not UTF-8) raised
    UnicodeEncodeError while writing preflight.json: exit 1 with no report at all."""
    run(pytester, "--inventory", "inv.yaml", "--facts-out", "f.json", "--report-dir", "r1")
    facts = load(pytester.path / "f.json")
    host = facts["hosts"][0]
    host["error"] = "odd \udcfe"
    host["raw"]["npu_smi.info"].update(rc=1, stderr="npu-smi: bad \udcff byte")
    (pytester.path / "f.json").write_text(json.dumps(facts), encoding="utf-8")
    result = run(pytester, "--facts-in", "f.json", "--report-dir", "r2")
    text = output(result)
    assert result.ret == 1 and "Traceback" not in text and "INTERNALERROR" not in text, text
    doc = load(pytester.path / "r2" / "preflight.json")
    assert any("bad \\xff byte" in r["message"] for r in doc["results"])
    assert doc["hosts"][0]["error"] == "odd \\xfe"
    for name in ("matrix.html", "preflight.html"):
        assert (pytester.path / "r2" / name).read_text(encoding="utf-8")


def test_an_unreachable_hosts_error_reaches_the_terminal_as_one_short_escaped_line(pytester, inv):
    """The reason a host could not be reached can quote what its sshd sent: it was printed raw,
    whole and once per check (terminal escapes, a forged line, 5 kB 35 times)."""
    run(pytester, "--inventory", "inv.yaml", "--facts-out", "f.json", "--report-dir", "r1")
    facts = load(pytester.path / "f.json")
    facts["hosts"][0].update(reachable=False, error="banner \x1b]0;pwned\x07\u202eevil\nverdict: READY " + "A" * 5000,
                             error_kind="unreachable")
    (pytester.path / "f.json").write_text(json.dumps(facts), encoding="utf-8")
    result = run(pytester, "--facts-in", "f.json", "--report-dir", "r2", "-k", "nofile or reachable")
    text = output(result)
    assert result.ret == 1, text
    assert "\x1b" not in text and "\u202e" not in text and "A" * 2000 not in text, text
    assert not any(line.startswith("verdict: READY") for line in result.outlines), text
    doc = load(pytester.path / "r2" / "preflight.json")
    [nofile] = [r for r in doc["results"] if r["check"] == "limits.nofile"]
    assert nofile["outcome"] == "error" and "\\x1b]0;pwned\\x07\\u202eevil\\nverdict: READY" in nofile["message"]
    assert len(nofile["message"]) < 1200, nofile["message"]


def test_a_workers_hung_pdsh_does_not_block_the_launch(pytester, inv):
    """tools.pdsh matters on the launcher only: a worker whose `pdsh -V` hung was 'not evaluated'
    (the fact was required before the check could say the worker does not launch)."""
    run(pytester, "--inventory", "inv.yaml", "--facts-out", "f.json", "--report-dir", "r1", "-k", "pdsh")
    facts = load(pytester.path / "f.json")
    entry, host = facts["inventory"]["hosts"][0], facts["hosts"][0]
    facts["inventory"]["hosts"] = [dict(entry, name="head", groups=["head"]), dict(entry, name="worker", groups=["worker"])]
    pdsh = "/usr/bin/pdsh\npdsh-2.34 (+readline+debug)\nrcmd modules: ssh,rsh,exec (default: rsh)\n"
    head = dict(host, host="head", raw=dict(host["raw"], **{"tools.pdsh": dict(host["raw"]["tools.pdsh"], stdout=pdsh, rc=0)}))
    worker = dict(host, host="worker", raw=dict(host["raw"], **{"tools.pdsh": dict(host["raw"]["tools.pdsh"], rc=124)}))
    facts["hosts"] = [head, worker]
    (pytester.path / "f.json").write_text(json.dumps(facts), encoding="utf-8")
    result = run(pytester, "--facts-in", "f.json", "--report-dir", "r2", "-k", "pdsh")
    by = {r["host"]: r for r in load(pytester.path / "r2" / "preflight.json")["results"]}
    assert by["head"]["outcome"] == "passed" and by["worker"]["outcome"] == "skipped", output(result)
    assert result.ret == 0, output(result)
    # On the launcher, the same hang is not evaluated, saying why.
    facts["hosts"] = [dict(worker, host="head"), dict(head, host="worker")]
    (pytester.path / "f.json").write_text(json.dumps(facts), encoding="utf-8")
    result = run(pytester, "--facts-in", "f.json", "--report-dir", "r3", "-k", "pdsh")
    by = {r["host"]: r for r in load(pytester.path / "r3" / "preflight.json")["results"]}
    assert by["head"]["outcome"] == "error" and "timed out" in by["head"]["message"], output(result)
    assert result.ret == 1


@pytest.mark.parametrize("content", ["{not json", '{"schema": 2, "hosts": []}', "[]",
                                     '{"schema": 1, "hosts": [], "inventory": {"hosts": []}}'])
def test_corrupt_facts_file_is_a_usage_error(pytester, content):
    (pytester.path / "f.json").write_text(content)
    result = run(pytester, "--facts-in", "f.json")
    text = output(result)
    assert result.ret == 4, text
    assert "Traceback" not in text
    assert "f.json" in text


def test_facts_out_beside_facts_in_is_a_usage_error_not_a_file_never_written(pytester, inv):
    run(pytester, "--inventory", "inv.yaml", "--facts-out", "f.json", "--report-dir", "r1", "-k", "reachable")
    result = run(pytester, "--facts-in", "f.json", "--facts-out", "g.json", "--report-dir", "r2")
    assert result.ret == 4 and "--facts-out with --facts-in" in output(result), output(result)
    assert not (pytester.path / "g.json").exists() and not (pytester.path / "r2").exists()


def test_a_report_given_as_facts_file_says_which_file_to_give(pytester):
    """preflight.json has schema 1 and hosts too: --facts-in on it was an INTERNALERROR traceback."""
    (pytester.path / "f.json").write_text('{"schema": 1, "inventory": "hosts.yaml", "ready": false, '
                                          '"hosts": [{"host": "x"}], "results": []}')
    result = run(pytester, "--facts-in", "f.json")
    text = output(result)
    assert result.ret == 4 and "INTERNALERROR" not in text, text
    assert "a run's report (preflight.json), not a facts file" in text and "--facts-out" in text
    (pytester.path / "f.json").write_text('{"schema": 1, "inventory": "hosts.yaml", "hosts": []}')
    result = run(pytester, "--facts-in", "f.json")
    assert result.ret == 4 and "inventory is not a mapping" in output(result)


def test_html_elsewhere_is_the_page_the_terminal_names(pytester, inv):
    """--html mine.html: the terminal named reports/preflight.html, which was not written (or was an
    earlier run's, through the link that run left)."""
    first = run(pytester, "--inventory", "inv.yaml", "-k", "reachable")
    assert "report: reports/preflight.html" in output(first)
    assert (pytester.path / "reports" / "preflight.html").is_file()
    result = run(pytester, "--inventory", "inv.yaml", "-k", "reachable", "--html", "mine.html")
    text = output(result)
    assert "report: mine.html (--html)" in text and "reports/preflight.html" not in text, text
    assert (pytester.path / "mine.html").is_file()
    assert not os.path.lexists(pytester.path / "reports" / "preflight.html")  # the first run's page, no longer linked
    assert (pytester.path / "reports" / "matrix.html").is_file()
    # --html naming the link a default run leaves: this run's page replaces it, the earlier run's stays.
    third = run(pytester, "--inventory", "inv.yaml", "-k", "reachable")
    earlier = (pytester.path / "reports" / "preflight.html").resolve()
    before = earlier.read_bytes()
    result = run(pytester, "--inventory", "inv.yaml", "-k", "reachable", "--html", "reports/preflight.html")
    assert third.ret == 0 and result.ret == 0, output(result)
    page = pytester.path / "reports" / "preflight.html"
    assert page.is_file() and not page.is_symlink() and earlier.read_bytes() == before


def test_a_facts_file_beside_an_inventory_that_cannot_be_read_writes_no_report(pytester, inv):
    """With --inventory too, the facts file was read only when gathering: an empty report was
    written and reports/latest moved to it, then the error came."""
    result = run(pytester, "--inventory", "inv.yaml", "--facts-in", "missing.json")
    assert result.ret == 4 and "missing.json: cannot read facts file" in output(result), output(result)
    assert not (pytester.path / "reports").exists()


@pytest.mark.parametrize("content", [
    '{"schema": 1, "hosts": [{}], "inventory": {"hosts": [{"name": "x", "address": "x"}]}}',
    '{"schema": 1, "hosts": [], "inventory": {"hosts": [{"name": "x"}]}}',
    '{"schema": 1, "hosts": [], "inventory": {"hosts": [{"name": "<img src=x onerror=alert(1)>", "address": "x"}]}}',
    '{"schema": 1, "hosts": [{"host": "a b"}], "inventory": {"hosts": [{"name": "x", "address": "x"}]}}',
    '{"schema": 1, "hosts": [], "inventory": {"hosts": [{"name": "x", "address": "x", "groups": 5}]}}',
    '{"schema": 1, "hosts": [], "inventory": {"hosts": [{"name": "x", "address": "x", "vars": [1]}]}}',
    '{"schema": 1, "hosts": [{"host": "x", "raw": {"npu_smi.info": 5}}], '
    '"inventory": {"hosts": [{"name": "x", "address": "x"}]}}',
    '{"schema": 1, "hosts": [{"host": "x", "raw": {"npu_smi.info": {"stdout": 5}}}], '
    '"inventory": {"hosts": [{"name": "x", "address": "x"}]}}',
    # A host's own fields of the wrong type: a traceback after every check, with no report, or
    # every check of the host crashed; an unreachable host without its reason, likewise.
    '{"schema": 1, "hosts": [{"host": "x", "reachable": false, "error": 5}], '
    '"inventory": {"hosts": [{"name": "x", "address": "x"}]}}',
    '{"schema": 1, "hosts": [{"host": "x", "gather_s": "1"}], "inventory": {"hosts": [{"name": "x", "address": "x"}]}}',
    '{"schema": 1, "hosts": [{"host": "x", "command_timeout": "10"}], '
    '"inventory": {"hosts": [{"name": "x", "address": "x"}]}}',
    '{"schema": 1, "hosts": [{"host": "x", "reachable": false}], "inventory": {"hosts": [{"name": "x", "address": "x"}]}}',
    '{"schema": 1, "hosts": [], "inventory": {"hosts": [{"name": "x", "address": "x", "user": 5}]}}',
    '{"schema": 1, "hosts": [], "inventory": {"hosts": [{"name": "x", "address": "x", "connection": "telnet"}]}}',
], ids=["host-entry-without-host", "inventory-host-without-address", "markup-as-a-name", "space-in-a-name",
        "groups-a-number", "vars-a-list", "output-a-number", "stdout-a-number", "error-a-number",
        "gather_s-a-string", "command_timeout-a-string", "unreachable-without-error", "user-a-number",
        "unknown-connection"])
def test_malformed_facts_file_is_a_usage_error(pytester, content):
    (pytester.path / "f.json").write_text(content)
    result = run(pytester, "--facts-in", "f.json")
    text = output(result)
    assert "Traceback" not in text and "INTERNALERROR" not in text
    assert result.ret == 4, text
    assert "f.json: " in text, text  # the file and the place named


# ------------------------------------------------------------------------------ 6: out of the way


def test_without_inventory_the_plugin_stays_out_of_the_way(pytester):
    pytester.makepyfile(test_plain="def test_plain():\n    assert 1 + 1 == 2\n")
    result = run(pytester)
    assert result.ret == 0, output(result)
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "verdict:" not in out
    assert "ascend-preflight" not in "\n".join(ln for ln in result.outlines if not ln.startswith("plugins:"))
    assert not (pytester.path / "reports").exists()


# ------------------------------------------------------------------------------ 7: the console script


def _cli(pytester, *args):
    code = "import sys; from preflight.cli import main; sys.exit(main(sys.argv[1:]))"
    return pytester.run(sys.executable, "-c", code, *args, timeout=TIMEOUT)


def test_console_script_behaves_like_pytest(pytester, inv):
    result = _cli(pytester, "--inventory", "inv.yaml", "--report-dir", "d")
    text = output(result)
    assert result.ret == 1, text
    assert "Traceback" not in text
    for name in ("preflight.html", "matrix.html", "preflight.json"):
        assert (pytester.path / "d" / name).is_file(), name
    doc = load(pytester.path / "d" / "preflight.json")
    assert {"cluster.reachable", "devices.davinci_nodes", "limits.nofile"} <= {r["check"] for r in doc["results"]}
    assert not (pytester.path / ".pytest_cache").exists()  # runs without a cache directory


def test_console_script_leaves_the_current_directorys_conftest_alone(pytester, inv):
    """Run from a project's checkout, `preflight` loaded its conftest.py (which may import torch,
    or fail): the checker's run is its own."""
    pytester.makeconftest("raise RuntimeError('the project conftest was imported')\n")
    result = _cli(pytester, "--inventory", "inv.yaml", "--report-dir", "d")
    text = output(result)
    assert result.ret == 1 and "the project conftest was imported" not in text, text
    assert load(pytester.path / "d" / "preflight.json")["results"]


def test_console_script_without_arguments_prints_usage(pytester):
    result = _cli(pytester)
    assert result.ret == 4
    assert "usage: preflight --inventory" in output(result)
    assert not (pytester.path / "reports").exists()
    for typo, meant in (("--inventroy", "--inventory"), ("--facts_in=f.json", "--facts-in")):
        result = _cli(pytester, typo, "inv.yaml")
        assert result.ret == 4 and f"did you mean {meant}?" in output(result), output(result)
    # A real option of the plugin is never taken for a typo of a near one.
    result = _cli(pytester, "--facts-out", "f.json")
    assert result.ret == 4 and "did you mean" not in output(result) and "usage: preflight" in output(result)


def test_console_script_runs_a_local_job_check_and_says_its_version(pytester):
    """README: `preflight` is the same run as pytest; `--job F --job-local` was refused by it, and
    `--version` printed only pytest's."""
    from preflight import __version__
    from tests.unit.job_files import hf_model, verl_script

    hf = hf_model(pytester.path / "Qwen2-7B")
    (pytester.path / "run.sh").write_text(verl_script(model=str(hf), bucket=512, train=str(hf / "config.json")))
    result = _cli(pytester, "--job", "run.sh", "--job-local")
    assert result.ret == 1 and "usage: preflight" not in output(result), output(result)
    doc = load(pytester.path / "reports" / "preflight.json")
    assert {r["check"] for r in doc["results"]} and all(r["check"].startswith("job.") for r in doc["results"])
    version = _cli(pytester, "--version")
    assert version.ret == 0 and f"ascend-preflight {__version__}" in output(version)


def test_console_script_job_local_needs_a_job_and_no_html_plugin_is_fine(pytester, inv):
    """`preflight --job-local` alone ran the current directory's own tests; with pytest-html
    disabled, a run that judged nothing crashed looking for its page."""
    pytester.makepyfile(test_user="def test_user():\n    print('USER TEST RAN')\n")
    result = _cli(pytester, "--job-local")
    assert result.ret == 4 and "usage: preflight" in output(result) and "USER TEST RAN" not in output(result)
    for extra in (["--collect-only"], ["-k", "no_such_check"]):
        result = run(pytester, "-p", "no:html", "--inventory", str(inv), *extra)
        assert "INTERNALERROR" not in output(result) and "no report written" in output(result), output(result)


# ------------------------------------------------------------------------------ extra: a dead host


def _with_a_dead_host(pytester) -> None:
    """inv.yaml: this machine, and "dead" (nothing listens on 127.0.0.1:1)."""
    (pytester.path / "inv.yaml").write_text(
        "hosts:\n  - {name: localhost, connection: local}\n"
        "  - {name: dead, address: 127.0.0.1, port: 1, user: nobody, known_hosts: known_hosts}\n")
    (pytester.path / "known_hosts").write_text("")


def test_unreachable_host_is_one_clear_failure_and_its_checks_are_errors(pytester):
    _with_a_dead_host(pytester)
    result = run(pytester, "--inventory", "inv.yaml", "--connect-timeout", "3", "--host-timeout", "10",
                 "-k", "reachable or nofile")
    text = output(result)
    assert result.ret == 1, text
    assert "Traceback" not in text
    doc = load(pytester.path / "reports" / "preflight.json")
    hosts = {h["name"]: h for h in doc["hosts"]}
    assert hosts["dead"]["reachable"] is False and hosts["dead"]["error"]
    assert hosts["localhost"]["reachable"] is True
    by = {(r["check"], r["host"]): r for r in doc["results"]}
    assert by[("cluster.reachable", "dead")]["outcome"] == "failed"
    assert by[("cluster.reachable", "localhost")]["outcome"] == "passed"
    assert by[("limits.nofile", "dead")]["outcome"] == "error"
    assert "unreachable" in by[("limits.nofile", "dead")]["message"]
    # In the terminal the dead host's checks are skips, not one ERROR block each burying the findings.
    assert "ERROR at setup of test_nofile[dead]" not in text, text
    assert_report_contract(doc)
    matrix = (pytester.path / "reports" / "matrix.html").read_text(encoding="utf-8")

    classes = {}

    class P(HTMLParser):
        row = None

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            if tag == "td":
                classes.setdefault(self.row, []).append(a.get("class"))

        def handle_data(self, data):
            if self.lasttag == "th" and data in ("localhost", "dead"):
                self.row = data

    P().feed(matrix)
    assert "down" in classes["dead"] and "fail" in classes["dead"]
    assert "down" not in classes["localhost"]


# ------------------------------------------------------------------------------ fleet-size HTML


def _html_rows(path) -> list[str]:
    """The Preflight column of pytest-html 4's table (its rows live in a JSON blob in the page)."""
    import html as _html
    import re

    text = path.read_text(encoding="utf-8")
    blob = json.loads(_html.unescape(re.search(r'data-jsonblob="([^"]*)"', text).group(1)))
    return [re.sub(r"<[^>]+>", "", run["resultsTableRow"][5]) for runs in blob["tests"].values() for run in runs]


def _fleet_facts(pytester, one_host: str, many: str) -> int:
    """Write ``many``: the host of facts file ``one_host`` copied to one more host than FLEET_HOSTS."""
    from preflight.plugin import FLEET_HOSTS

    one = load(pytester.path / one_host)
    n = FLEET_HOSTS + 1
    inv_hosts = [dict(one["inventory"]["hosts"][0], name=f"host-{i:03d}") for i in range(n)]
    hosts = [dict(one["hosts"][0], host=f"host-{i:03d}") for i in range(n)]
    (pytester.path / many).write_text(json.dumps(dict(one, hosts=hosts, inventory={"hosts": inv_hosts})))
    (pytester.path / "inv.yaml").unlink(missing_ok=True)
    return n


def test_above_64_hosts_preflight_html_keeps_only_what_needs_attention(pytester, inv):
    # Records the keywords of every passed report (pytest keeps them all to the end of the session).
    pytester.makepyfile(kwprobe="""
        import json
        seen = []
        def pytest_runtest_logreport(report):
            if report.passed and report.when == "call":
                seen.append(sorted(report.keywords))
        def pytest_unconfigure(config):
            with open("keywords.json", "w") as fh:
                json.dump(seen, fh)
    """)
    assert run(pytester, "--inventory", "inv.yaml", "--facts-out", "one.json", "--report-dir", "r0",
               "-p", "kwprobe").ret == 1
    few = load(pytester.path / "keywords.json")
    assert few and all(few), "below fleet size a passed report keeps its item's keywords"
    n = _fleet_facts(pytester, "one.json", "many.json")

    brief = run(pytester, "--facts-in", "many.json", "--report-dir", "brief", "-p", "kwprobe")
    many = load(pytester.path / "keywords.json")
    assert len(many) > n and not any(many), "above it, passed reports share one empty keywords dict"
    full = run(pytester, "--facts-in", "many.json", "--report-dir", "full", "--html-all-rows")
    assert brief.ret == full.ret == 1, output(brief)
    brief_rows, full_rows = _html_rows(pytester.path / "brief" / "preflight.html"), \
        _html_rows(pytester.path / "full" / "preflight.html")
    assert {"passed", "skipped", "failed", "error", "warning"} <= set(full_rows)
    assert set(brief_rows) == {"failed", "error", "warning"}
    assert sorted(brief_rows) == sorted(r for r in full_rows if r not in ("passed", "skipped"))
    left_out = len(full_rows) - len(brief_rows)
    page = (pytester.path / "brief" / "preflight.html").read_text(encoding="utf-8")
    assert f"{n} hosts: the table below lists only the results that need attention; {left_out} passed" in page
    # The other reports keep every result.
    assert load(pytester.path / "brief" / "preflight.json")["results"] == \
        load(pytester.path / "full" / "preflight.json")["results"]


def test_reports_share_their_property_pairs(pytester, inv):
    # Every report of a run carries (check, host, severity, outcome) pairs; equal pairs are one tuple,
    # so 100 000 reports at 1000 hosts do not hold 400 000 tuples.
    pytester.makepyfile(propprobe="""
        import json
        ids = {}
        def pytest_runtest_logreport(report):
            for pair in report.user_properties:
                if pair[0] in ("check", "host", "severity", "preflight_outcome"):
                    ids.setdefault(repr(pair), set()).add(id(pair))
        def pytest_unconfigure(config):
            with open("props.json", "w") as fh:
                json.dump({k: len(v) for k, v in ids.items()}, fh)
    """)
    assert run(pytester, "--inventory", "inv.yaml", "--report-dir", "r", "-p", "propprobe").ret == 1
    props = load(pytester.path / "props.json")
    assert "('host', 'localhost')" in props and len(props) > 20
    assert set(props.values()) == {1}, props


def test_above_64_hosts_passed_setup_and_teardown_reports_are_let_go(pytester, inv):
    # pytest would keep all three reports of every item to the end of the session (105 000 at
    # 1000 hosts); at fleet size the passed setups and teardowns go once every plugin has seen them.
    pytester.makepyfile(reportprobe="""
        import gc, json, weakref
        import pytest
        watched = {"setup": [], "call": []}
        def pytest_runtest_logreport(report):
            if report.passed and report.when in watched:
                watched[report.when].append(weakref.ref(report))
        @pytest.hookimpl(trylast=True)
        def pytest_sessionfinish(session):
            gc.collect()
            alive = {when: sum(r() is not None for r in refs) for when, refs in watched.items()}
            with open("alive.json", "w") as fh:
                json.dump({"seen": {w: len(r) for w, r in watched.items()}, "alive": alive}, fh)
    """)
    assert run(pytester, "--inventory", "inv.yaml", "--facts-out", "one.json", "--report-dir", "r0",
               "-p", "reportprobe").ret == 1
    few = load(pytester.path / "alive.json")
    assert few["alive"] == few["seen"], "below fleet size pytest keeps them all, as always"
    _fleet_facts(pytester, "one.json", "many.json")
    result = run(pytester, "--facts-in", "many.json", "--report-dir", "r1", "-p", "reportprobe")
    many = load(pytester.path / "alive.json")
    assert many["seen"]["setup"] > 1000 and many["alive"]["setup"] == 0, many
    assert many["alive"]["call"] == many["seen"]["call"], "call reports stay: the summary and pytest-html read them"
    counts = result.parseoutcomes()  # a warning is a passed pytest report in a category of its own
    assert counts["passed"] + counts.get("warned", 0) == many["seen"]["call"], "the summary still counts them"


def test_the_matrix_is_rendered_once_for_both_pages(pytester, inv):
    pytester.makepyfile(fragprobe="""
        import preflight.report.html as html_hooks
        import preflight.report.matrix as matrix
        calls = []
        def pytest_configure(config):
            original = matrix.fragment
            def counting(doc):
                calls.append(1)
                return original(doc)
            matrix.fragment = html_hooks.fragment = counting
        def pytest_unconfigure(config):
            with open("fragments.txt", "w") as fh:
                fh.write(str(len(calls)))
    """)
    assert run(pytester, "--inventory", "inv.yaml", "--report-dir", "r", "-p", "fragprobe").ret == 1
    assert (pytester.path / "fragments.txt").read_text() == "1"
    matrix_page = (pytester.path / "r" / "matrix.html").read_text(encoding="utf-8")
    body = matrix_page.split("</p>", 1)[1].rsplit("</body>", 1)[0]  # the fragment, after the title lines
    assert len(body) > 1000 and body in (pytester.path / "r" / "preflight.html").read_text(encoding="utf-8")


def test_another_plugins_host_fixture_does_not_replace_ours(pytester, inv):
    """pytest-testinfra (and any plugin) may define a `host` fixture too; of two plugins' fixtures
    the one registered last wins. A plugin registered after ours (here through a conftest) must not
    hand the checks its `host`: every check errored with testinfra installed."""
    assert run(pytester, "--inventory", "inv.yaml", "--report-dir", "alone").ret == 1
    alone = outcome_set(load(pytester.path / "alone" / "preflight.json"))
    pytester.makepyfile(otherhost="""
        import pytest

        @pytest.fixture
        def host():
            return "another plugin's host"

        @pytest.fixture
        def cluster():
            return "another plugin's cluster"
    """)
    pytester.makeconftest('pytest_plugins = ["otherhost"]')
    result = run(pytester, "--inventory", "inv.yaml", "--report-dir", "beside")
    assert result.ret == 1, output(result)
    assert outcome_set(load(pytester.path / "beside" / "preflight.json")) == alone
    assert "another plugin's" not in output(result)


# ------------------------------------------------------------------------------ bad options, runs that judged nothing


@pytest.mark.parametrize("option, value, words", [
    ("--fanout", "0", "0 is less than 1"), ("--fanout", "x", "'x' is not a whole number"),
    ("--connect-timeout", "0", "give a finite number above 0"), ("--connect-timeout", "inf", "finite"),
    ("--host-timeout", "nan", "finite"), ("--command-timeout", "-3", "finite"),
    ("--gather-shards", "-1", "-1 is less than 0"),
])
def test_a_bad_number_is_a_usage_error(pytester, inv, option, value, words):
    """An infinite deadline never fires, a fanout of 0 or a negative timeout was quietly clamped:
    each is a usage error before any host is contacted."""
    result = run(pytester, "--inventory", str(inv), option, value)
    assert result.ret == 4 and words in output(result), output(result)


def test_an_unusable_output_path_is_a_usage_error_before_gathering(pytester, inv):
    (pytester.path / "afile").write_text("x")
    ok = run(pytester, "--inventory", str(inv), "-k", "reachable", "--facts-out", "new/sub/facts.json")
    assert ok.ret == 0 and (pytester.path / "new" / "sub" / "facts.json").is_file()  # folders made, as before
    for args, words in ((["--report-dir", "afile"], "--report-dir afile: exists and is not a directory"),
                        (["--facts-out", "/dev/null"], "not a regular file"),
                        (["--facts-out", "afile/facts.json"], "is not a writable directory"),
                        (["--facts-out", str(pytester.path)], "is a directory")):
        result = run(pytester, "--inventory", str(inv), *args)
        assert result.ret == 4 and words in output(result), output(result)
        assert "INTERNALERROR" not in output(result)


def test_a_run_that_judged_nothing_writes_no_report_and_keeps_the_latest(pytester, inv):
    """--collect-only, or -k selecting no check: nothing was checked, so no report says "NOT READY"
    (nor READY), and reports/ still points at the last real run."""
    first = run(pytester, "--inventory", str(inv), "-k", "reachable")
    assert first.ret == 0 and "Generated html report" in output(first)
    latest = (pytester.path / "reports" / "latest").resolve()
    for extra in (["--collect-only"], ["-k", "no_such_check"]):
        result = run(pytester, "--inventory", str(inv), *extra)
        assert "no report written" in output(result) and "verdict" not in output(result)
        assert "Generated html report" not in output(result)  # pytest-html said so of a page then removed
        assert (pytester.path / "reports" / "latest").resolve() == latest
        assert len(list((pytester.path / "reports" / "runs").iterdir())) == 1


def test_an_internal_error_is_never_ready(pytester, inv):
    """A crash after the checks started (here: a plugin's hook) ends the run with exit 3; its report
    must not say READY on what was judged before (it said READY with zero results)."""
    pytester.makepyfile(pf_boom="def pytest_runtest_logfinish(nodeid, location):\n    raise RuntimeError('boom')\n")
    result = run(pytester, "-p", "pf_boom", "--inventory", str(inv), "-k", "reachable")
    assert result.ret == 3
    doc = load(pytester.path / "reports" / "preflight.json")
    assert doc["ready"] is False and doc["exit_code"] == 3


def test_facts_out_redacts_the_inventorys_job_environment_and_is_private(pytester, monkeypatch):
    """--facts-out redacted secrets of the node's environment but kept the inventory's own `env:`
    (the job's) as written, in a file anyone could read."""
    import os
    import stat

    inv = pytester.path / "inv.yaml"
    inv.write_text("hosts:\n  - name: localhost\n    connection: local\n"
                   "    env: {HF_TOKEN: hf_invsecret, GITHUB_PAT: ghp_invsecret, HCCL_CONNECT_TIMEOUT: '1200',\n"
                   "          PIP_EXTRA_INDEX_URL: 'https://invuser:invurlpass@pypi.example/simple'}\n"
                   "    tags: {secret_password: tagpass}\n")
    facts = pytester.path / "facts.json"
    # Secrets the node's own environment (here: this one's) holds under names that do not look
    # secret, or inline in a URL.
    monkeypatch.setenv("OBS_SK", "obs-sk-value")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxyuser:proxypass@proxy:3128")
    result = run(pytester, "--inventory", str(inv), "--facts-out", str(facts), "-k", "env")
    assert result.ret in (0, 1), output(result)
    text = facts.read_text()
    for secret in ("hf_invsecret", "ghp_invsecret", "invurlpass", "tagpass", "obs-sk-value", "proxypass"):
        assert secret not in text, secret
    env = load(facts)["inventory"]["hosts"][0]["vars"]["env"]
    assert env == {"HF_TOKEN": "<redacted>", "GITHUB_PAT": "<redacted>", "HCCL_CONNECT_TIMEOUT": "1200",
                   "PIP_EXTRA_INDEX_URL": "https://invuser:<redacted>@pypi.example/simple"}
    assert stat.S_IMODE(os.stat(facts).st_mode) == 0o600
    assert not [p for p in pytester.path.iterdir() if p.name.endswith(".tmp")]


def test_facts_out_redacts_an_ansible_inventorys_own_secrets(pytester):
    """An Ansible inventory's ansible_ssh_pass, ansible_become_password and other secret-named vars
    were written to --facts-out as they stood."""
    inv = pytester.path / "inv.yaml"
    inv.write_text("all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
                   "      ansible_ssh_pass: hunter2\n      ansible_become_password: s3cr3tBecome\n"
                   "      db_pw: s3cretdb\n      mirror: 'https://u:urlpass@mirror.example/'\n"
                   "      secrets: {hf: hf_nestedsecret}\n      api_keys: [sk-listsecret]\n"
                   "      checkpoint_dir: /tmp\n")
    facts = pytester.path / "facts.json"
    result = run(pytester, "--inventory", str(inv), "--facts-out", str(facts), "-k", "reachable")
    assert result.ret == 0, output(result)
    text = facts.read_text()
    for secret in ("hunter2", "s3cr3tBecome", "s3cretdb", "urlpass", "hf_nestedsecret", "sk-listsecret"):
        assert secret not in text, secret
    host_vars = load(facts)["inventory"]["hosts"][0]["vars"]
    assert host_vars["ansible_ssh_pass"] == "<redacted>" and host_vars["checkpoint_dir"] == "/tmp", host_vars


@pytest.mark.parametrize("content, words", [
    (None, "cannot read compatibility file"),
    ("stack: [\n", "not valid YAML"),
    (b"stack: \xff\xfe\x00garbage", "not a UTF-8 text file"),
    ("stacks: []\n", "unknown table(s) stacks"),
    ("known_bad: [\"some text\"]\n", "known_bad[0] must be a mapping with a `when:` mapping"),
    ("known_bad: [{when: {cann: ''}}]\n", "known_bad[0] must be a mapping with a `when:` mapping"),
])
def test_a_bad_compat_file_is_a_usage_error_before_gathering(pytester, inv, content, words):
    path = pytester.path / "extra.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    result = run(pytester, "--inventory", str(inv), "--compat", str(path))
    assert result.ret == 4 and words in output(result) and str(path) in output(result), output(result)


def test_maxfail_from_a_projects_addopts_does_not_cut_the_report_short(pytester, inv):
    """addopts = -x in the current directory's pytest.ini stopped the run at the first failure: 3 of 45
    results in a report that did not say so."""
    full = run(pytester, "--inventory", str(inv), "-p", "no:cacheprovider")
    counts = load(pytester.path / "reports" / "preflight.json")["summary"]
    assert counts["failed"] + counts["error"] > 1, counts  # this machine has no NPU: several findings
    pytester.makeini("[pytest]\naddopts = -x\n")
    cut = run(pytester, "--inventory", str(inv), "-p", "no:cacheprovider")
    assert cut.ret == full.ret == 1, output(cut)
    assert load(pytester.path / "reports" / "preflight.json")["summary"] == counts
    assert "note: --maxfail 1 (-x is 1; a pytest.ini's addopts may set it) was not applied: every check ran" in \
        output(cut)
    assert "was not applied" not in output(full)


def test_a_check_file_that_does_not_import_is_a_collection_error_not_an_internal_error(pytester, inv):
    # pytest-html hands the collection error's report to the row hook too; it has no user_properties.
    pytester.makepyfile(test_mine="def test_x(:\n    pass\n")
    result = run(pytester, "--inventory", "inv.yaml", "test_mine.py")
    text = output(result)
    assert result.ret == 2 and "INTERNALERROR" not in text, text
    assert "SyntaxError" in text and "Interrupted: 1 error during collection" in text
    doc = load(pytester.path / "reports" / "preflight.json")
    assert doc["interrupted"] is True and doc["ready"] is False and doc["exit_code"] == 2
    # With no check selected as well, the reports it names are still written.
    result = run(pytester, "--inventory", "inv.yaml", "test_mine.py", "-k", "no_such_check")
    assert result.ret == 2 and "report: reports/preflight.html" in output(result)
    assert (pytester.path / "reports" / "latest" / "preflight.html").is_file()


def test_a_dead_host_fails_the_run_when_no_selected_check_looks_at_it(pytester):
    """With cluster.reachable deselected, the cluster-wide checks leave a dead host out: the run
    said READY (exit 0) without having looked at it, and matrix.html did not name it."""
    _with_a_dead_host(pytester)
    result = run(pytester, "--inventory", "inv.yaml", "--connect-timeout", "3", "--host-timeout", "10",
                 "-k", "versions_agree")
    text = output(result)
    assert result.ret == 1 and "verdict: NOT READY" in text, text
    # No test failed for it, so the summary says why the verdict is NOT READY.
    assert "FAILED [cluster.reachable] on dead: cannot log in" in text, text
    doc = load(pytester.path / "reports" / "preflight.json")
    assert doc["ready"] is False
    dead = next(h for h in doc["hosts"] if h["name"] == "dead")
    assert dead["reachable"] is False and isinstance(dead["error_kind"], str)  # xdist's controller needs it
    reach = [r for r in doc["results"] if r["check"] == "cluster.reachable"]
    assert [(r["host"], r["outcome"]) for r in reach] == [("dead", "failed")]
    assert "cannot log in" in reach[0]["message"] and "was not selected" in reach[0]["message"]
    assert reach[0]["remedy"] and reach[0]["reference"]
    assert_report_contract(doc)
    matrix = (pytester.path / "reports" / "matrix.html").read_text(encoding="utf-8")
    findings = matrix[matrix.index("What to fix"):]
    assert "cluster.reachable</code> on <b>dead</b>" in findings


def test_a_dead_host_is_judged_once_when_cluster_reachable_runs(pytester):
    _with_a_dead_host(pytester)
    run(pytester, "--inventory", "inv.yaml", "--connect-timeout", "3", "-k", "reachable or versions_agree")
    doc = load(pytester.path / "reports" / "preflight.json")
    reach = [r for r in doc["results"] if r["check"] == "cluster.reachable"]
    assert sorted((r["host"], r["outcome"]) for r in reach) == [("dead", "failed"), ("localhost", "passed")]
    assert "was not selected" not in reach[0]["message"] + reach[1]["message"]


def test_above_64_hosts_the_terminal_lists_what_to_fix_not_a_section_per_item(pytester, inv):
    """At fleet size pytest printed a section per failing check and host and a summary line per item
    (100 hosts: 12 900 lines, one finding repeated per node); the run's "What to fix" replaces them,
    one item per finding and node set, with its remedy.  --tb=short brings pytest's sections back."""
    assert run(pytester, "--inventory", "inv.yaml", "--facts-out", "one.json", "--report-dir", "r0").ret == 1
    n = _fleet_facts(pytester, "one.json", "many.json")
    result = run(pytester, "--facts-in", "many.json", "--report-dir", "r1")
    text = output(result)
    assert result.ret == 1, text
    assert "= FAILURES =" not in text and "= ERRORS =" not in text and "short test summary" not in text, text
    assert "What to fix (" in text, text
    nodes = f"host-[000-{n - 1:03d}] ({n} hosts)"
    items = [line for line in result.outlines if line.lstrip()[:1].isdigit() and ". " in line]
    # Every host alike: each item names them all (or is the cluster's own).
    assert items and all(nodes in line or "on the cluster" in line or "(cluster-wide)" in line for line in items), items
    assert any(line.lstrip().startswith("remedy: ") for line in result.outlines)
    assert len(result.outlines) < 150, len(result.outlines)
    short = run(pytester, "--facts-in", "many.json", "--report-dir", "r2", "--tb=short")
    assert "= FAILURES =" in output(short) or "= ERRORS =" in output(short)
    # What is no check's result keeps its traceback: a plain failing test, a module that cannot load.
    pytester.makepyfile(test_plain="def test_plain():\n    assert 1 == 2, 'user check failed'\n")
    text = output(run(pytester, "--facts-in", "many.json", "--report-dir", "r3", "test_plain.py"))
    assert "1 failure(s) outside the preflight checks" in text and "AssertionError: user check failed" in text, text
    pytester.makepyfile(test_broken="import nonexistent_module_xyz\n")
    text = output(run(pytester, "--facts-in", "many.json", "--report-dir", "r4", "test_broken.py"))
    assert "No module named 'nonexistent_module_xyz'" in text, text


def test_a_replay_says_what_the_facts_file_lacks(pytester, inv):
    """Facts captured with -k, replayed whole: the missing commands read "not gathered" with the
    --host-timeout remedy; an inventory whose hosts the file does not hold read as SSH failures."""
    assert run(pytester, "--inventory", "inv.yaml", "-k", "nofile", "--facts-out", "f.json",
               "--report-dir", "r0").ret in (0, 1)
    result = run(pytester, "--facts-in", "f.json", "--report-dir", "r1", "-k", "davinci_nodes or nofile")
    [nodes] = [r for r in load(pytester.path / "r1" / "preflight.json")["results"]
               if r["check"] == "devices.davinci_nodes"]
    assert nodes["outcome"] == "error" and "is not in the facts file f.json (the run that" in nodes["message"], nodes
    assert "Capture the facts again with --facts-out" in nodes["remedy"] and "host-timeout" not in nodes["remedy"]
    # An inventory none of whose hosts the file holds: the wrong pair of files, said before any report.
    (pytester.path / "other.yaml").write_text("hosts:\n  - {name: node-9, address: 10.9.9.9}\n")
    result = run(pytester, "--inventory", "other.yaml", "--facts-in", "f.json", "--report-dir", "r2")
    assert result.ret == 4 and "holds none of the inventory's 1 host(s) (node-9); it holds localhost" in output(result)
    assert not (pytester.path / "r2").exists()
    # One of two missing: that host's finding is about the file, not its sshd.
    (pytester.path / "two.yaml").write_text("hosts:\n  - {name: localhost, connection: local}\n"
                                            "  - {name: node-9, address: 10.9.9.9}\n")
    result = run(pytester, "--inventory", "two.yaml", "--facts-in", "f.json", "--report-dir", "r3", "-k", "reachable")
    [down] = [r for r in load(pytester.path / "r3" / "preflight.json")["results"]
              if r["check"] == "cluster.reachable" and r["host"] == "node-9"]
    assert down["outcome"] == "failed" and "no facts: not in f.json" in down["message"], down
    assert "cannot log in" not in down["message"] and "sshd" not in down["remedy"], down


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/bin/mount"), reason="needs root to mount a tmpfs")
@pytest.mark.parametrize("free_kb, failing", [(24, "preflight.html"), (4, "matrix.html"), (0, "preflight.json")])
def test_a_full_disk_is_exit_3_naming_the_report_with_the_verdict_printed(pytester, inv, free_kb, failing):
    """A traceback with exit 1 ("not ready") for a run that was ready, a truncated page, no verdict
    line; `latest` must stay on the last complete run."""
    import subprocess

    reports = pytester.path / "full"
    reports.mkdir()
    first = run(pytester, "--inventory", str(inv), "-k", "limits", "--report-dir", str(reports))
    assert first.ret in (0, 1), output(first)
    before = os.readlink(reports / "latest")
    disk = reports / "runs"  # where every run's files go
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={free_kb + 8}k", "tmpfs", str(disk)], check=True)
    try:
        (disk / "filler").write_bytes(b"x" * 8192)
        result = run(pytester, "--inventory", str(inv), "-k", "limits", "--report-dir", str(reports))
        left = [p.name for p in disk.glob("*/*") if p.name.endswith(".tmp") or p.name.startswith(".preflight-")]
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
    text = output(result)
    assert result.ret == 3, text
    assert "Traceback" not in text and "INTERNALERROR" not in text, text
    assert "verdict: " in text and f"{failing}: No space left on device (exit 3)" in text, text
    assert "report: NOT WRITTEN" in text and "Generated html report" not in text
    assert os.readlink(reports / "latest") == before
    assert left == [], left  # no half-written file beside the reports
    # The verdict is what the checks found (the same as the complete run's), not the write's failure.
    assert first.ret in (0, 1) and f"verdict: {'READY' if first.ret == 0 else 'NOT READY'}\n" in text + "\n", text


def test_a_junit_file_that_cannot_be_written_is_named_as_itself(pytester, inv):
    result = run(pytester, "--inventory", str(inv), "-k", "reachable", "--junitxml=/proc/nope/x.xml")
    text = output(result)
    assert result.ret == 3 and "report: NOT WRITTEN, /proc/nope: No such file or directory (exit 3)\n" in text, text
    assert "verdict: READY" in text and "Generated html report" in text  # preflight.html was written
    # The three reports are complete: they are listed, and latest points at them.
    assert "report: reports/preflight.json" in text and os.path.exists(pytester.path / "reports" / "latest")


def test_a_second_inventory_is_a_usage_error_not_silently_the_only_one(pytester, inv):
    other = pytester.path / "other.yaml"
    other.write_text(LOCAL_INVENTORY.replace("localhost", "here"))
    result = run(pytester, "--inventory", str(inv), "--inventory", str(other))
    text = output(result)
    assert result.ret == 4 and "given twice" in text and "preflight-merge" in text, text
    assert not (pytester.path / "reports").exists()
    # The same file twice (an alias in a wrapper script) is still one inventory.
    assert run(pytester, "--inventory", str(inv), "--inventory", "./inv.yaml", "-k", "limits").ret in (0, 1)
    # One in a pytest.ini's addopts is a default the command line overrides, as for any pytest option.
    pytester.makeini("[pytest]\naddopts = --inventory inv.yaml\n")
    result = run(pytester, "--inventory", str(other), "-k", "limits")
    assert result.ret in (0, 1) and "inventory " + str(other) in output(result), output(result)


def test_the_plugin_configures_before_pytest_html():
    """Its configure sets preflight.html's path; after pytest-html's own, no page is written (a class
    put between the decorator and the function had taken the tryfirst)."""
    from preflight import plugin

    assert plugin.pytest_configure.pytest_impl["tryfirst"] is True


def test_xdist_lists_results_and_what_to_fix_in_the_serial_runs_order(pytester, inv):
    """Under -n 2 the results came in as the workers finished: preflight.json, the matrix's columns
    and "What to fix" (cut at 20 items in the terminal) were in another order than a serial run's
    on the same facts, so the terminal could name other findings."""
    pytest.importorskip("xdist")
    assert run(pytester, "--inventory", "inv.yaml", "--facts-out", "one.json", "--report-dir", "r0").ret == 1
    one = load(pytester.path / "one.json")
    names = [f"host-{i}" for i in range(6)]
    (pytester.path / "six.json").write_text(json.dumps(dict(
        one, hosts=[dict(one["hosts"][0], host=n) for n in names],
        inventory={"hosts": [dict(one["inventory"]["hosts"][0], name=n) for n in names]})))
    serial = run(pytester, "--facts-in", "six.json", "--report-dir", "serial")
    spread = run(pytester, "--facts-in", "six.json", "--report-dir", "spread", "-p", "xdist", "-n", "2")
    assert serial.ret == spread.ret == 1, output(spread)

    def order(folder):
        return [(r["check"], r["host"], r["subject"], r["message"])
                for r in load(pytester.path / folder / "preflight.json")["results"]]

    def what_to_fix(result):
        text = "\n".join(result.outlines)
        return text[text.index("What to fix"):text.index("\nresults: ")]

    assert order("serial") == order("spread")
    assert what_to_fix(serial) == what_to_fix(spread)
