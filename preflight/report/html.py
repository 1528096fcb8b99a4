"""pytest-html 4 hooks: host, check id, severity and preflight-outcome columns, a
title, and the host x check matrix at the top of the summary.

Registered only when pytest-html is active (its hook names are unknown otherwise).
"""

from __future__ import annotations

from .matrix import fragment, text

_COLUMNS = (("host", "Host"), ("check", "Check"), ("severity", "Severity"), ("preflight_outcome", "Preflight"))


class HtmlHooks:
    def __init__(self, run):
        self.run = run

    def pytest_html_report_title(self, report):
        report.title = f"ascend-preflight: {self.run.inventory_path}"

    def pytest_html_results_table_header(self, cells):
        # class "sortable" + data-column-type, and cells with class col-<name>: what v4 sorts on.
        for offset, (key, label) in enumerate(_COLUMNS):
            cells.insert(2 + offset, f'<th class="sortable" data-column-type="{key}">{label}</th>')

    def pytest_html_results_table_row(self, report, cells):
        props = dict(report.user_properties)
        for offset, (key, _) in enumerate(_COLUMNS):
            cells.insert(2 + offset, f'<td class="col-{key}">{text(props.get(key, ""))}</td>')

    def pytest_html_results_summary(self, prefix, summary, postfix, session):
        prefix.append(fragment(self.run.document(session.exitstatus)))
