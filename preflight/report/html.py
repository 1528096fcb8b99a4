"""pytest-html 4 hooks: host, check id, severity and preflight-outcome columns, a
title, and the host x check matrix at the top of the summary.

Registered only when pytest-html is active (its hook names are unknown otherwise).
"""

from __future__ import annotations

import html

from .matrix import fragment, text

_TEST_ID_CELL = '<td class="col-testId">'

_COLUMNS = (("host", "Host"), ("check", "Check"), ("severity", "Severity"), ("preflight_outcome", "Preflight"))


class HtmlHooks:
    def __init__(self, run, brief: bool = False):
        self.run = run
        self.brief = brief  # leave passed and skipped rows out (fleet size)
        self.left_out = 0

    def pytest_html_report_title(self, report):
        report.title = f"ascend-preflight: {self.run.inventory_path}"

    def pytest_html_results_table_header(self, cells):
        # class "sortable" + data-column-type, and cells with class col-<name>: what v4 sorts on.
        for offset, (key, label) in enumerate(_COLUMNS):
            cells.insert(2 + offset, f'<th class="sortable" data-column-type="{key}">{label}</th>')

    def pytest_html_results_table_row(self, report, cells):
        props = dict(getattr(report, "user_properties", ()))  # a CollectReport (a file that failed to import) has none
        if self.brief and report.when == "call" and props.get("preflight_outcome") in ("passed", "skipped"):
            self.left_out += 1
            del cells[:]  # pytest-html 4 drops a row whose cells were all removed
            return
        # pytest-html 4 puts the node id into its cell raw and its page inserts cells as HTML: a
        # host name from a --facts-in file or a user's check file name must not become markup.
        for i, cell in enumerate(cells):
            if cell.startswith(_TEST_ID_CELL) and cell.endswith("</td>"):
                cells[i] = _TEST_ID_CELL + html.escape(cell[len(_TEST_ID_CELL):-len("</td>")], quote=False) + "</td>"
        for offset, (key, _) in enumerate(_COLUMNS):
            cells.insert(2 + offset, f'<td class="col-{key}">{text(props.get(key, ""))}</td>')

    def pytest_html_results_summary(self, prefix, summary, postfix, session):
        if self.brief:
            prefix.append(f'<p class="preflight-brief"><strong>{len(self.run.hosts)} hosts: the table below lists '
                          f'only the results that need attention; {self.left_out} passed or skipped rows are left out '
                          f'(and not in its counters). Every result is in matrix.html and preflight.json; '
                          f'<code>--html-all-rows</code> keeps them all here.</strong></p>')
        rendered, self.run.final_fragment = self.run.final_fragment, None
        if rendered is None:  # finish() did not run first (another plugin's page): render it here
            rendered = fragment(self.run.final_document or self.run.document(session.exitstatus))
        self.run.final_document = None
        prefix.append(rendered)
