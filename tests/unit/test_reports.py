"""preflight.report.matrix (the host x check matrix page / fragment) and preflight.report.json_report
(preflight.json, schema 1), from a preflight.json-shaped document written by hand."""

from __future__ import annotations

import html
import json
import dataclasses
import os
import re
from html.parser import HTMLParser

import pytest

from preflight.report import matrix
from preflight.report.json_report import write_json
from preflight.report.matrix import cells, fragment, page, write_matrix

EVIL = 'node said <script>alert(1)</script> &amp; "quotes" \x1b[31mred\x1b[0m'


def result(check, host, outcome, message, *, subject=None, severity="error", remedy="", reference="FAQ item",
           outliers=()):
    return {"check": check, "host": host, "subject": subject, "outcome": outcome, "severity": severity,
            "message": message, "remedy": remedy, "reference": reference, "observed": None, "expected": None,
            "outliers": list(outliers), "nodeid": None}


def make_document() -> dict:
    """Shaped like PreflightRun.document(): three hosts, node-03 unreachable."""
    results = [
        result("cluster.reachable", "node-01", "passed", "node-01 answered in 0.2s"),
        result("cluster.reachable", "node-02", "passed", "node-02 answered in 0.3s"),
        result("cluster.reachable", "node-03", "failed", "node-03: cannot log in (connection refused)",
               remedy="Check that sshd listens on node-03."),
        result("devices.davinci_nodes", "node-01", "passed", "8 device nodes", subject="npu0"),
        result("devices.davinci_nodes", "node-02", "passed", "ok", subject="npu0"),
        result("devices.davinci_nodes", "node-02", "failed", "node-02 npu1: /dev/davinci1 missing",
               subject="npu1", remedy="Pass --device /dev/davinci1 into the container."),
        result("devices.davinci_nodes", "node-03", "error", "not evaluated: node-03 is unreachable"),
        result("hccl.link_up", "node-01", "warning", "node-01 npu3: link DOWN", subject="npu3",
               severity="warning", remedy="hccn_tool -i 3 -link -g; check the optical module."),
        result("hccl.link_up", "node-01", "passed", "ok", subject="npu2", severity="warning"),
        result("hccl.link_up", "node-02", "skipped", "no NPU", severity="warning"),
        result("hccl.link_up", "node-03", "error", "not evaluated: node-03 is unreachable", severity="warning"),
        result("env.evil", "node-01", "failed", EVIL, remedy="export <b>X</b>=1 && echo 'done'"),
        result("env.evil", "node-02", "error", "`env -0` timed out after 10s (hung tool)",
               remedy="Run env -0 by hand on node-02."),
        result("limits.nofile", "node-01", "skipped", "not applicable"),
        result("limits.nofile", "node-02", "skipped", "not applicable"),
        result("limits.nofile", "node-02", "passed", "ulimit -n 65536"),
        result("cluster.ifname_agree", None, "failed", "HCCL_SOCKET_IFNAME differs on node-02",
               remedy="Set HCCL_SOCKET_IFNAME=eth0 on node-02.", outliers=["node-02"]),
    ]
    return {
        "schema": 1,
        "tool": {"name": "ascend-preflight", "version": "0.1.0"},
        "inventory": "hosts <prod>.yaml",
        "started_at": "2026-12-02T10:00:00Z",
        "duration_s": 4.2,
        "gather_s": 0.8,
        "ready": False,
        "strict": False,
        "exit_code": 1,
        "summary": {"passed": 7, "failed": 4, "warning": 1, "error": 3, "skipped": 4},
        "hosts": [
            {"name": "node-01", "address": "10.0.0.1", "reachable": True, "error": None, "gather_s": 0.8,
             "groups": ["head"]},
            {"name": "node-02", "address": "10.0.0.2", "reachable": True, "error": None, "gather_s": 0.7,
             "groups": ["worker"]},
            {"name": "node-03", "address": "10.0.0.3", "reachable": False, "error": "connection refused",
             "gather_s": 0.1, "groups": ["worker"]},
        ],
        "results": results,
    }


class Page(HTMLParser):
    """Collects tags, text, attribute values and the matrix as {(row header, column header): class}."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.texts: list[str] = []
        self.attrs: list[str] = []
        self.columns: list[str] = []
        self.rows: dict[str, list[tuple[str, str]]] = {}
        self._in_matrix = False
        self._section = None
        self._cell = None  # (tag, attrs) of the open th/td in the matrix
        self._cell_text = ""
        self._row: str | None = None
        self.findings: list[str] = []
        self._in_findings = False
        self._li = None

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        self.attrs.extend(v for v in a.values() if v is not None)
        cls = a.get("class") or ""
        if tag == "table" and "pf-matrix" in cls.split():
            self._in_matrix = True
        elif self._in_matrix and tag in ("thead", "tbody"):
            self._section = tag
        elif self._in_matrix and tag in ("th", "td"):
            self._cell = (tag, a)
            self._cell_text = ""
        if tag == "ol" and "pf-findings" in cls.split():
            self._in_findings = True
        if self._in_findings and tag == "li":
            self._li = ""

    def handle_endtag(self, tag):
        if tag == "table" and self._in_matrix:
            self._in_matrix = False
        elif self._in_matrix and tag in ("th", "td") and self._cell:
            ctag, a = self._cell
            if self._section == "thead":
                if "pf-check" in (a.get("class") or ""):
                    self.columns.append(self._cell_text)
            elif ctag == "th":
                self._row = self._cell_text
                self.rows[self._row] = []
            else:
                col = self.columns[len(self.rows[self._row])]
                self.rows[self._row].append((col, a.get("class"), a.get("title"), self._cell_text))
            self._cell = None
        if tag == "ol":
            self._in_findings = False
        if tag == "li" and self._li is not None:
            self.findings.append(self._li)
            self._li = None

    def handle_data(self, data):
        self.texts.append(data)
        if self._cell is not None:
            self._cell_text += data
        if self._li is not None:
            self._li += data

    def grid(self) -> dict[tuple[str, str], tuple[str, str, str]]:
        return {(row, col): (cls, title, txt) for row, cells_ in self.rows.items()
                for col, cls, title, txt in cells_}


@pytest.fixture
def doc():
    return make_document()


@pytest.fixture
def parsed(doc):
    p = Page()
    p.feed(page(doc))
    p.close()
    return p


# ------------------------------------------------------------------------------ no active content


def test_page_has_no_script(doc):
    html = page(doc)
    assert "<script" not in html.lower()
    assert "javascript:" not in html.lower()
    assert not any(attr.startswith("on") for attr in _all_attribute_names(html))  # no inline handlers


def _all_attribute_names(html: str) -> list[str]:
    names = []

    class P(HTMLParser):
        def handle_starttag(self, tag, attrs):
            names.extend(n for n, _ in attrs)

    P().feed(html)
    return names


def test_untrusted_text_is_escaped_and_shown_literally(doc, parsed):
    html = page(doc)
    assert "script" not in parsed.tags  # no element named script
    all_text = "".join(parsed.texts)
    shown = EVIL.replace("\x1b", "\\x1b")
    # The message appears as text in the findings, the tooltips carry it as an attribute value.
    assert shown in all_text
    assert "<script>alert(1)</script>" in all_text
    assert "&amp;" in all_text  # the literal five characters, not an ampersand
    assert '"quotes"' in all_text
    assert any(shown in a for a in parsed.attrs)  # in the cell's title, escaped too
    # The ESC byte is shown visibly, never raw.
    assert "\x1b" not in html
    assert "\\x1b[31m" in all_text
    # The inventory path came from the user: escaped in the title and the header.
    assert "hosts <prod>.yaml" in all_text and "<prod>" not in parsed.tags
    # The remedy's markup is text as well.
    assert "export <b>X</b>=1 && echo 'done'" in all_text


@pytest.mark.parametrize("value, expected", [
    ("<&>\"'", "&lt;&amp;&gt;&quot;&#x27;"),
    ("a\x1bb\x00c\x7fd\x9be", "a\\x1bb\\x00c\\x7fd\\x9be"),
    ("tab\tand\nnewline", "tab\tand\nnewline"),
    # A right-to-left override would turn the rest of the line, our words too, backwards.
    ("evil \u202egnp.exe \u2066x\u2069 \u200f", "evil \\u202egnp.exe \\u2066x\\u2069 \\u200f"),
    # A byte that was not UTF-8, as surrogateescape keeps it; another lone surrogate as \uXXXX.
    ("bad \udcff byte \ud800", "bad \\xff byte \\ud800"),
    (None, ""),
    (42, "42"),
])
def test_text_helper(value, expected):
    assert matrix.text(value) == expected


# ------------------------------------------------------------------------------ the matrix


def test_matrix_columns_and_rows(parsed):
    assert parsed.columns == ["cluster.reachable", "devices.davinci_nodes", "hccl.link_up", "env.evil",
                              "limits.nofile", "cluster.ifname_agree"]
    assert list(parsed.rows) == ["node-01", "node-02", "node-03", "(cluster)"]
    assert all(len(r) == len(parsed.columns) for r in parsed.rows.values())


def test_each_cell_has_the_class_of_its_worst_outcome(parsed):
    g = parsed.grid()
    expected = {
        ("node-01", "cluster.reachable"): "ok",
        ("node-01", "devices.davinci_nodes"): "ok",
        ("node-01", "hccl.link_up"): "warn",      # warning beats passed
        ("node-01", "env.evil"): "fail",
        ("node-01", "limits.nofile"): "skip",
        ("node-02", "cluster.reachable"): "ok",
        ("node-02", "devices.davinci_nodes"): "fail",  # npu1 failed, npu0 passed
        ("node-02", "hccl.link_up"): "skip",
        ("node-02", "env.evil"): "err",
        ("node-02", "limits.nofile"): "ok",        # passed beats skipped
        ("(cluster)", "cluster.ifname_agree"): "fail",
    }
    for key, cls in expected.items():
        assert g[key][0] == cls, (key, g[key])
    # Symbols differ as well as colours.
    assert g[("node-01", "env.evil")][2] == "✗"
    assert g[("node-01", "cluster.reachable")][2] == "✓"
    assert g[("node-01", "hccl.link_up")][2] == "!"
    # The tooltip names what went wrong, not the passes.
    assert "npu3" in g[("node-01", "hccl.link_up")][1] and "npu2" not in g[("node-01", "hccl.link_up")][1]


def test_unreachable_host_cells_show_down(parsed):
    g = parsed.grid()
    for check in ("devices.davinci_nodes", "hccl.link_up"):
        assert g[("node-03", check)][0] == "down"
        assert g[("node-03", check)][2] == "⊘"
    assert g[("node-03", "cluster.reachable")][0] == "fail"  # the reachability check itself failed
    assert g[("node-03", "env.evil")][0] == "none"  # no result at all


def test_outlier_of_a_cluster_wide_failure_gets_a_fail_cell(parsed):
    g = parsed.grid()
    assert g[("node-02", "cluster.ifname_agree")][0] == "fail"
    assert "HCCL_SOCKET_IFNAME differs on node-02" in g[("node-02", "cluster.ifname_agree")][1]
    assert g[("node-01", "cluster.ifname_agree")][0] == "ok"  # it agreed with the majority
    assert g[("node-03", "cluster.ifname_agree")][0] == "down"  # not evaluated: unreachable
    assert g[("(cluster)", "cluster.ifname_agree")][0] == "fail"
    assert g[("(cluster)", "cluster.reachable")][0] == "none"


def test_cluster_wide_error_is_not_spread_as_a_pass(doc):
    doc["results"] = [result("cluster.tls_agree", None, "error", "no node's TLS switch could be read")]
    _, _, grid = cells(doc)
    assert grid[("(cluster)", "cluster.tls_agree")][0] == "error"
    assert ("node-01", "cluster.tls_agree") not in grid or grid[("node-01", "cluster.tls_agree")][0] != "passed"


def test_cluster_wide_failure_naming_no_host_is_not_spread_as_a_pass(doc):
    """A loopback MASTER_ADDR fails cluster.rendezvous with no outlier: every node's cell showed a pass."""
    doc["results"] = [result("cluster.rendezvous", None, "failed", "MASTER_ADDR=127.0.0.1 is a loopback address")]
    _, _, grid = cells(doc)
    assert grid[("(cluster)", "cluster.rendezvous")][0] == "failed"
    assert grid[("node-01", "cluster.rendezvous")][0] == "failed"
    assert grid[("node-02", "cluster.rendezvous")][0] == "failed"
    assert grid[("node-03", "cluster.rendezvous")][0] == "unreachable"


def test_cells_function_directly(doc):
    hosts, checks, grid = cells(doc)
    assert hosts == ["node-01", "node-02", "node-03", "(cluster)"]
    assert grid[("node-03", "devices.davinci_nodes")][0] == "unreachable"
    assert grid[("node-02", "cluster.ifname_agree")][0] == "failed"
    assert len(grid[("node-02", "devices.davinci_nodes")][1]) == 2


def test_no_cluster_row_without_cluster_results(doc):
    doc["results"] = [r for r in doc["results"] if r["host"] is not None]
    hosts, _, _ = cells(doc)
    assert "(cluster)" not in hosts


def test_verdict_heading(doc):
    from collections import Counter

    tally = Counter(r["outcome"] for r in doc["results"])
    assert f"NOT READY ({tally['failed']} failed" in page(doc) and "2 of 3 hosts reachable)" in page(doc)
    doc["ready"] = True
    p = Page()
    p.feed(fragment(doc))
    assert "READY (" in "".join(p.texts) and "2 of 3 hosts reachable)" in "".join(p.texts)
    assert "NOT READY" not in "".join(p.texts)


def test_empty_document_renders(tmp_path):
    html = page({"schema": 1, "hosts": [], "results": []})
    assert "NOT READY (0 of 0 hosts reachable)" in html
    assert "What to fix" not in html


# ------------------------------------------------------------------------------ findings


def test_remedies_appear_in_the_findings_list(parsed):
    findings = parsed.findings
    # failed, warning and error results; no passed or skipped; the unreachable host's two
    # "not evaluated" errors are summarised on its reachability failure instead of listed.
    assert len(findings) == 6, findings
    kinds = [f.split(" ", 1)[0] for f in findings]
    # What blocks the launch first: failures (an unreachable host's leading), what could not be
    # evaluated, then the warnings that do not block it.
    assert kinds == ["FAILED"] * 4 + ["ERROR", "WARNING"]
    assert "cluster.reachable" in findings[0]
    joined = "\n".join(findings)
    assert "Remedy: Pass --device /dev/davinci1 into the container." in joined
    assert "Remedy: hccn_tool -i 3 -link -g; check the optical module." in joined
    assert "Remedy: Set HCCL_SOCKET_IFNAME=eth0 on node-02." in joined
    assert "Remedy: Check that sshd listens on node-03." in joined
    # An error's remedy is the next step towards evaluating it (facts.remedy_for_unevaluated).
    assert "Remedy: Run env -0 by hand on node-02." in joined
    down = next(f for f in findings if "cluster.reachable" in f)
    assert "on node-03" in down and "(2 other checks not evaluated)" in down
    cluster = next(f for f in findings if "cluster.ifname_agree" in f)
    # A cluster-wide finding leads with the node at fault.
    assert "on node-02 (cluster-wide): HCCL_SOCKET_IFNAME differs on node-02" in cluster, cluster
    dev = next(f for f in findings if "davinci1" in f)
    assert dev.startswith("FAILED") and "on node-02 npu1" in dev and "Source: FAQ item" in dev
    assert not any("ulimit -n 65536" in f for f in findings)
    assert not any("not evaluated: node-03 is unreachable" in f for f in findings)


def test_hosts_down_alike_are_one_finding_though_each_error_names_its_address():
    """sshd down on three nodes: one item naming node-[01-03], where the address each error quotes
    made three; a node alone keeps its own text, address and port included."""
    from preflight.check import CheckInfo, Verdict
    from preflight.facts import HostFacts
    from preflight.reachable import DECLARATION, judge
    from tests.factsets import make_host

    info = CheckInfo(id="cluster.reachable", severity="error", **DECLARATION)
    hosts = [dataclasses.replace(make_host(f"node-0{i}", address=f"10.0.0.{i}"), port=2222) for i in (1, 2, 3)]
    hosts.append(make_host("node-04", address="10.0.0.14"))
    results = []
    for h in hosts:
        why = "connection refused (sshd not running, or the port is closed)" if h.name != "node-04" else \
            "no answer within 10s (connect timed out)"
        verdict = Verdict(info, h.name)
        judge(h, HostFacts(host=h.name, address=h.address, reachable=False, error=f"{h.name} ({h.address}): {why}",
                           error_kind="unreachable"), verdict)
        results += [r.to_json() if hasattr(r, "to_json") else r.__dict__ for r in verdict.results]
    document = {"schema": 1, "results": results,
                "hosts": [{"name": h.name, "address": h.address, "reachable": False} for h in hosts]}
    p = Page()
    p.feed(page(document))
    p.close()
    assert len(p.findings) == 2, p.findings
    many = next(f for f in p.findings if "node-[01-03] (3 hosts)" in f)
    assert "cannot log in (connection refused" in many and "an SSH login to its address port 2222" in many
    assert "10.0.0." not in many
    one = next(f for f in p.findings if "on node-04" in f)
    assert "cannot log in (node-04 (10.0.0.14): no answer within 10s" in one and "an SSH login to 10.0.0.14 within" in one
    # The remedy's login: the host's own for one host, a placeholder for the node set.
    assert "ssh -o BatchMode=yes -p 2222 root@<address> true" in many and "Check that <node> is up" in many
    assert "ssh -o BatchMode=yes root@10.0.0.14 true" in one


def test_not_evaluated_alike_on_several_hosts_is_one_finding_though_each_names_its_host():
    """"not evaluated on node-01: `npu-smi info`: npu-smi not found" on every node is one item."""
    results = [{"check": "npu.health", "host": f"node-0{i}", "subject": None, "outcome": "error",
                "severity": "error", "message": f"not evaluated on node-0{i}: `npu-smi info`: npu-smi not found",
                "remedy": "Install the NPU driver.", "reference": "verl NPU FAQ Q1", "observed": None,
                "expected": None, "outliers": []} for i in (1, 2, 3)]
    document = {"schema": 1, "results": results,
                "hosts": [{"name": f"node-0{i}", "address": f"10.0.0.{i}", "reachable": True} for i in (1, 2, 3)]}
    p = Page()
    p.feed(page(document))
    p.close()
    assert len(p.findings) == 1 and "node-[01-03] (3 hosts)" in p.findings[0], p.findings
    # A command missing from each host's facts names its host at the end of the message.
    for r in results:
        r["message"] = f"not evaluated on {r['host']}: `npu-smi info` was not gathered from {r['host']}"
    p = Page()
    p.feed(page(document))
    p.close()
    assert len(p.findings) == 1 and "was not gathered from the host" in p.findings[0], p.findings


# ------------------------------------------------------------------------------ files


def test_write_matrix_writes_the_page_and_its_stylesheet(doc, tmp_path):
    """Under a Content-Security-Policy without 'unsafe-inline' (Jenkins' default: style-src 'self')
    the inline <style> is dropped; the linked file beside the page is not, so the cells keep their
    colours. The inline copy stays for a page sent on its own."""
    from preflight.report.matrix import CSS

    path = tmp_path / "out" / "matrix.html"
    write_matrix(str(path), doc)
    text = path.read_text(encoding="utf-8")
    assert text == page(doc, stylesheet="matrix.css")
    assert '<link rel="stylesheet" href="matrix.css"></head>' in text and f"<style>{CSS}</style>" in text
    assert (path.parent / "matrix.css").read_text(encoding="utf-8") == CSS
    assert sorted(os.listdir(path.parent)) == ["matrix.css", "matrix.html"]  # no temp file left
    write_matrix(str(tmp_path / "fleet.html"), doc)  # a merged page: its own stylesheet name
    assert 'href="fleet.css"' in (tmp_path / "fleet.html").read_text(encoding="utf-8")
    assert (tmp_path / "fleet.css").exists()


def test_write_json_is_valid_and_atomic(doc, tmp_path):
    path = tmp_path / "new" / "dir" / "preflight.json"
    write_json(str(path), doc)
    assert os.listdir(path.parent) == ["preflight.json"]  # no temp file left behind
    text = path.read_text(encoding="utf-8")
    assert json.loads(text) == doc
    assert text.endswith("\n")
    doc["results"][0]["message"] = "昇腾 ok"
    write_json(str(path), doc)  # replaces the previous file
    assert json.loads(path.read_text(encoding="utf-8"))["results"][0]["message"] == "昇腾 ok"
    assert os.listdir(path.parent) == ["preflight.json"]


def test_write_json_puts_one_result_and_one_host_per_line(doc, tmp_path):
    # An operator greps preflight.json: every result (and host) is one whole line that parses alone.
    path = tmp_path / "preflight.json"
    write_json(str(path), doc)
    lines = path.read_text(encoding="utf-8").splitlines()
    results = [json.loads(line.strip().rstrip(",")) for line in lines if line.startswith('  {"check"')]
    hosts = [json.loads(line.strip().rstrip(",")) for line in lines if line.startswith('  {"name"')]
    assert results == json.loads(json.dumps(doc["results"], default=lambda r: r.to_json()))
    assert hosts == doc["hosts"]
    assert ' "summary": {' in lines  # small objects stay laid out a key per line


def test_write_json_failure_keeps_the_old_file_and_leaves_no_temp(doc, tmp_path):
    path = tmp_path / "preflight.json"
    write_json(str(path), doc)
    before = path.read_text(encoding="utf-8")
    broken = dict(doc, results=[object()])
    with pytest.raises(TypeError):
        write_json(str(path), broken)
    assert path.read_text(encoding="utf-8") == before
    assert os.listdir(tmp_path) == ["preflight.json"]


def test_write_json_round_trips_schema_1_keys(doc, tmp_path):
    path = tmp_path / "preflight.json"
    write_json(str(path), doc)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["schema"] == 1
    assert data["tool"]["name"] == "ascend-preflight"
    for h in data["hosts"]:
        assert {"name", "address", "reachable", "error", "gather_s"} <= set(h)
    for r in data["results"]:
        assert {"check", "host", "subject", "outcome", "severity", "message", "remedy", "reference"} <= set(r)
        assert r["outcome"] in ("passed", "failed", "warning", "error", "skipped")


def test_pytest_report_of_one_check_shows_its_first_findings_only():
    from preflight.results import Result
    from preflight.run import MAX_FINDINGS_SHOWN, render_failures

    many = [Result(check="hccl.ping", host=None, subject=f"node-{i:04d}", outcome="failed", severity="error",
                   message=f"node-{i:04d} npu0 -> peer: 0 of 3 replies", remedy="fix the link", reference="FAQ")
            for i in range(MAX_FINDINGS_SHOWN + 5)]
    text = render_failures(many)
    assert text.splitlines()[0] == (f"{MAX_FINDINGS_SHOWN + 5} findings; the first {MAX_FINDINGS_SHOWN} follow, "
                                    f"all are in preflight.json and matrix.html")
    assert text.count("FAILED [hccl.ping]") == MAX_FINDINGS_SHOWN
    assert f"node-{MAX_FINDINGS_SHOWN - 1:04d}" in text and f"node-{MAX_FINDINGS_SHOWN:04d}" not in text
    few = render_failures(many[:3])
    assert few.count("FAILED [hccl.ping]") == 3 and "findings;" not in few


def test_an_unreachable_hosts_not_evaluated_item_points_at_cluster_reachable_not_its_faq():
    """Two hosts down printed 74 error blocks, each citing its check's FAQ item (checkpoint save
    times out, ...), which is not why (found by review)."""
    from preflight.results import Result
    from preflight.run import render_failures

    down = Result(check="storage.checkpoint_dir", host="n1", subject=None, outcome="error", severity="warning",
                  message="not evaluated: n1 is unreachable (n1 (10.0.0.1): connection refused)", remedy="",
                  reference="MindSpeed-MM FAQ #13: checkpoint save times out")
    text = render_failures([down])
    assert "FAQ #13" not in text and "see cluster.reachable" in text.lower()
    from preflight.facts import REACHABLE_POINTER
    text = render_failures([Result(**{**down.to_json(), "outliers": (), "remedy": REACHABLE_POINTER})])
    assert "FAQ #13" not in text and f"remedy: {REACHABLE_POINTER}" in text


def test_a_fleet_wide_finding_keeps_each_cell_tooltip_short():
    from preflight.report.matrix import TIP_CHARS, TIP_FINDINGS, cells, fragment

    hosts = [{"name": f"node-{i:04d}", "reachable": True} for i in range(50)]
    names = ", ".join(h["name"] for h in hosts)
    results = [{"check": "cluster.device_ip_unique", "host": None, "subject": f"29.0.0.{d}", "outcome": "failed",
                "severity": "error", "message": f"29.0.0.{d} is the device IP of npu{d} on {names}",
                "remedy": "give each NPU its own address", "reference": "FAQ",
                "outliers": [h["name"] for h in hosts]} for d in range(8)]
    doc = {"hosts": hosts, "results": results, "ready": False}
    _, _, grid = cells(doc)
    assert grid[("node-0007", "cluster.device_ip_unique")][0] == "failed"
    page = fragment(doc)
    tips = re.findall(r'<td class="fail" title="([^"]*)"', page)
    assert len(tips) == 51  # 50 hosts and the (cluster) row
    for tip in tips:
        lines = tip.split("\n")
        assert len(lines) == TIP_FINDINGS + 1 and lines[-1] == f"… and {8 - TIP_FINDINGS} more below"
        assert all(len(html.unescape(line)) <= TIP_CHARS for line in lines)
    # The full messages are in "What to fix", once each.
    assert page.count(html.escape(results[7]["message"], quote=False)) == 1


def test_a_document_of_result_objects_writes_and_renders_as_its_json_form(doc, tmp_path):
    """PreflightRun.document() carries the run's Result objects (no dict copy of every result);
    preflight.json, matrix.html and the fragment come out as from the same results as dicts."""
    from preflight.results import Result

    as_objects = dict(doc, results=[Result(**{**r, "outliers": tuple(r.get("outliers") or ())})
                                    for r in doc["results"]])
    write_json(str(tmp_path / "dicts.json"), doc)
    write_json(str(tmp_path / "objects.json"), as_objects)
    assert json.loads((tmp_path / "objects.json").read_text()) == json.loads((tmp_path / "dicts.json").read_text())
    assert page(as_objects) == page(doc) and fragment(as_objects) == fragment(doc)
    first = as_objects["results"][0]
    assert first["check"] == first.get("check") == "cluster.reachable" and first.get("nope", 7) == 7
    with pytest.raises(KeyError):
        first["nope"]


def test_one_finding_on_many_hosts_is_one_item_naming_them_as_a_node_set():
    hosts = [{"name": f"node-{i:04d}", "reachable": True} for i in range(50)]
    limit = "ulimit -n soft 1024, hard 1024; expected both at least 65536"
    results = [result("limits.nofile", h["name"], "failed", f"{h['name']}: {limit}", remedy="raise nofile")
               for h in hosts if h["name"] != "node-0007"]
    # node-0007's limit differs: its own item, so the odd one out stands out.
    results.append(result("limits.nofile", "node-0007", "failed", "node-0007: ulimit -n soft 4096, hard 4096; "
                          "expected both at least 65536", remedy="raise nofile"))
    # Same text on every NPU of two hosts: one item naming the hosts and the NPUs as sets (the NPU's
    # number in its text as <N>); an NPU whose text differs is its own item.
    results += [result("hccl.tls_switch", h, "failed", f"{h} npu{d}: TLS on (hccn_tool -i {d} -tls -g)",
                       subject=f"npu{d}", remedy="tls off") for h in ("node-0001", "node-0002") for d in (0, 1, 3)]
    results.append(result("hccl.tls_switch", "node-0001", "failed", "node-0001 npu2: TLS half on", subject="npu2",
                          remedy="tls off"))
    results.append(result("hccl.link_up", "node-0003", "error", "node-0003 npu1: hccn_tool timed out",
                          subject="npu1", remedy="run it by hand"))
    p = Page()
    p.feed(page({"hosts": hosts, "results": results, "ready": False}))
    p.close()
    assert p.findings == [
        f"FAILED limits.nofile on node-[0000-0006,0008-0049] (49 hosts): {limit}Remedy: raise nofileSource: FAQ item",
        "FAILED limits.nofile on node-0007: ulimit -n soft 4096, hard 4096; expected both at least 65536"
        "Remedy: raise nofileSource: FAQ item",
        "FAILED hccl.tls_switch on node-[0001-0002] (2 hosts) npu[0-1,3]: TLS on (hccn_tool -i <N> -tls -g)"
        "Remedy: tls offSource: FAQ item",
        "FAILED hccl.tls_switch on node-0001 npu2: TLS half onRemedy: tls offSource: FAQ item",
        "ERROR hccl.link_up on node-0003 npu1: hccn_tool timed outRemedy: run it by handSource: FAQ item",
    ]


def test_a_cluster_wide_finding_names_its_subject_not_a_cluster_host():
    from preflight.report.matrix import fragment

    hosts = [{"name": f"node-0{i}", "reachable": True} for i in (1, 2, 3)]
    results = [{"check": "cluster.tls_agree", "host": None, "subject": "node-03", "outcome": "failed",
                "severity": "error", "message": "node-03: tls switch[1] (on) on node-03 npu5",
                "remedy": "make the TLS switch the same", "reference": "FAQ", "outliers": ["node-03"]}]
    page = fragment({"hosts": hosts, "results": results, "ready": False})
    assert "on <b>node-03 (cluster-wide)</b>: tls switch[1] (on) on node-03 npu5" in page
    assert "on <b>cluster" not in page


def test_the_html_row_escapes_pytest_htmls_raw_test_id_cell():
    # pytest-html 4 writes the node id into its cell unescaped and inserts cells as HTML.
    from types import SimpleNamespace

    from preflight.report.html import HtmlHooks

    cells = ['<td class="col-result">Failed</td>',
             '<td class="col-testId">checks/my<b>.py::test_x[<img src=x onerror=alert(1)>]</td>',
             '<td class="col-duration">1 ms</td>']
    report = SimpleNamespace(user_properties=[("host", "node-01")], when="call")
    HtmlHooks(run=None).pytest_html_results_table_row(report, cells)
    assert cells[1] == ('<td class="col-testId">checks/my&lt;b&gt;.py::test_x[&lt;img src=x onerror=alert(1)&gt;]'
                        '</td>')
    assert cells[0] == '<td class="col-result">Failed</td>' and '<td class="col-host">node-01</td>' in cells


def test_a_lone_surrogate_anywhere_in_the_document_is_written_not_fatal(tmp_path):
    """A surrogate in saved facts' stderr raised UnicodeEncodeError in write_json: no report at all."""
    doc = {"schema": 1, "inventory": "inv\udcff.yaml", "ready": False,
           "hosts": [{"name": "n1", "reachable": False, "error": "sshd said \udcfe"}],
           "results": [{"check": "x.y", "host": "n1", "subject": None, "outcome": "error",
                        "message": "stderr: \udcff\udc80", "remedy": "", "reference": ""}]}
    write_json(str(tmp_path / "p.json"), doc)
    assert json.loads((tmp_path / "p.json").read_text(encoding="utf-8")) == doc  # \udcXX escapes read back as themselves
    write_matrix(str(tmp_path / "m.html"), doc)
    shown = (tmp_path / "m.html").read_text(encoding="utf-8")
    assert "inv\\xff.yaml" in shown and "stderr: \\xff\\x80" in shown


def test_a_long_matrix_links_to_what_to_fix_and_keeps_its_headers_in_view(doc):
    """At fleet size "What to fix" is thousands of pixels below the verdict, under a matrix whose
    check names scroll away; in preflight.html pytest-html's grey body text (#999) made the findings
    and host names hard to read."""
    from preflight.report.matrix import CSS

    text = fragment(doc)
    assert text.index('href="#pf-what-to-fix"') < text.index('<table class="pf-matrix"') < \
        text.index('<h3 id="pf-what-to-fix">What to fix</h3>')
    assert "thead th{position:sticky;top:0" in CSS and "th.pf-host{position:sticky;left:0" in CSS
    assert ".pf-matrix th,.pf-findings,.pf-legend,#pf-what-to-fix{color:#222}" in CSS
    assert "white-space:nowrap" in CSS.split("th.pf-host{")[1].split("}")[0]
    passed = fragment(dict(doc, results=[dict(r, outcome="passed") for r in doc["results"]]))
    assert 'href="#pf-what-to-fix"' not in passed  # nothing to fix, no link


def test_one_port_dropped_from_every_node_is_one_item():
    """A firewall on the Ray head: every worker's probe fails alike, and each was its own item (the
    message starts with its source node), filling the terminal's twenty."""
    from preflight.report.matrix import fix_items

    hosts = [{"name": f"node-{i:03d}", "reachable": True} for i in range(1, 41)]
    results = [result("cluster.ray_ports", h["name"], "failed",
                      f"{h['name']} -> node-001 Ray GCS port (10.0.0.1:6379): no answer within 3s",
                      subject="node-001:6379", remedy="open 6379") for h in hosts[1:]]
    [item] = fix_items({"hosts": hosts, "results": results})
    assert item.where == "node-[002-040] (39 hosts) node-001:6379"
    assert item.message == "<node> -> node-001 Ray GCS port (10.0.0.1:6379): no answer within 3s"


def test_a_cluster_wide_subject_naming_its_outliers_does_not_name_them_twice():
    """cluster.ifname_agree on a node whose interfaces were not read: the subject names the node."""
    from preflight.report.matrix import fix_items

    hosts = [{"name": f"node-0{i}", "reachable": True} for i in range(1, 5)]
    once = result("cluster.ifname_agree", None, "error", "interfaces unreadable",
                  subject="HCCL_SOCKET_IFNAME on node-[03-04]", outliers=("node-03", "node-04"))
    [item] = fix_items({"hosts": hosts, "results": [once]})
    assert item.where == "HCCL_SOCKET_IFNAME on node-[03-04] (cluster-wide)"
    # A subject naming another node than the one at fault still leads with the node at fault.
    other = dict(once, subject="HCCL_SOCKET_IFNAME on node-03", outliers=["node-04"])
    [item] = fix_items({"hosts": hosts, "results": [other]})
    assert item.where == "node-04 (HCCL_SOCKET_IFNAME on node-03, cluster-wide)"
    # node-1 is not named by a subject naming node-10.
    hosts = [{"name": "node-1", "reachable": True}, {"name": "node-10", "reachable": True}]
    near = dict(once, subject="HCCL_SOCKET_IFNAME on node-10", outliers=["node-1"])
    [item] = fix_items({"hosts": hosts, "results": [near]})
    assert item.where == "node-1 (HCCL_SOCKET_IFNAME on node-10, cluster-wide)"


def test_one_fix_for_a_node_and_the_cluster_is_one_item():
    """TLS on for npu5 of node-01: hccl.tls_node and cluster.tls_agree gave two items with one
    remedy, word for word; a cluster finding with its own remedy stays its own item."""
    from preflight.report.matrix import fix_items

    hosts = [{"name": f"node-0{i}", "reachable": True} for i in (1, 2, 3)]
    fix = "Make the TLS switch the same: on node-01: hccn_tool -i 5 -tls -s enable 0"
    results = [result("hccl.tls_node", "node-01", "failed", "node-01 npu5: on", subject="npu5", remedy=fix),
               result("cluster.tls_agree", None, "failed", "on on node-01 npu5", subject="node-01",
                      outliers=("node-01",), remedy=fix),
               result("cluster.ifname_agree", None, "failed", "eth1 on node-02", subject="HCCL_SOCKET_IFNAME",
                      outliers=("node-02",), remedy="Set it alike")]
    items = fix_items({"hosts": hosts, "results": results})
    assert [(i.check, i.where) for i in items] == [
        ("hccl.tls_node, cluster.tls_agree", "node-01 npu5"),
        ("cluster.ifname_agree", "node-02 (HCCL_SOCKET_IFNAME, cluster-wide)")], items
    # Remedies that differ (node-01's own majority is on, the cluster's off): two items.
    other = dict(results[1], remedy=fix.replace("enable 0", "enable 1"))
    assert len(fix_items({"hosts": hosts, "results": [results[0], other]})) == 2


def test_a_cluster_finding_sharing_a_checks_own_remedy_with_another_nodes_finding_is_kept():
    """env.socket_ifname on node-03 and cluster.ifname_agree blaming node-02 have one remedy, the
    checks' shared default: the cluster finding was folded into node-03's item and node-02 was
    named nowhere in "What to fix"."""
    from preflight.report.matrix import fix_items

    hosts = [{"name": f"node-0{i}", "reachable": True} for i in (1, 2, 3)]
    fix = "List the node's interfaces (ip -br addr) and set the variable to the NIC ..."
    results = [result("env.socket_ifname", "node-03", "failed", "eth2 is down", subject="HCCL_SOCKET_IFNAME",
                      remedy=fix),
               result("cluster.ifname_agree", None, "failed", "node-02 uses eth1", subject="HCCL_SOCKET_IFNAME",
                      outliers=("node-02",), remedy=fix),
               result("cluster.ifname_agree", None, "failed", "no node's interfaces read", remedy=fix)]
    items = fix_items({"hosts": hosts, "results": results})
    assert [(i.check, i.where) for i in items] == [
        ("env.socket_ifname", "node-03 HCCL_SOCKET_IFNAME"),
        ("cluster.ifname_agree", "node-02 (HCCL_SOCKET_IFNAME, cluster-wide)"),
        ("cluster.ifname_agree", "the cluster")], items
    # The same node: one fix, listed once.
    same = dict(results[1], outliers=["node-03"])
    [item] = fix_items({"hosts": hosts, "results": [results[0], same]})
    assert item.check == "env.socket_ifname, cluster.ifname_agree"
