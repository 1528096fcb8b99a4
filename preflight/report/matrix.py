"""The host x check matrix: a static page (no JavaScript) and a fragment for pytest-html.

Built from the preflight.json document alone, so a saved report can be re-rendered.
Every string that came from a node is escaped, and control characters (ANSI escapes)
are shown as visible text rather than interpreted.
"""

from __future__ import annotations

import html
import os
import re
from collections import Counter
from dataclasses import dataclass, replace

from ..hostlist import fold
from ..results import visible, worst

# outcome -> (symbol, label, css class); symbols differ as well as colours.
STYLE = {
    "passed": ("✓", "passed", "ok"),
    "failed": ("✗", "failed", "fail"),
    "warning": ("!", "warning", "warn"),
    "error": ("?", "error: not evaluated", "err"),
    "skipped": ("–", "not applicable", "skip"),
    "unreachable": ("⊘", "host unreachable", "down"),
}

CSS = """
table.pf-matrix{border-collapse:collapse;font:13px/1.3 sans-serif;margin:8px 0}
.pf-matrix th,.pf-matrix td{border:1px solid #bbb;padding:3px 6px;text-align:center}
.pf-matrix th.pf-check{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap;font-weight:normal}
.pf-matrix th.pf-host{text-align:left;white-space:nowrap}
.pf-matrix thead th{position:sticky;top:0;background:#fff;z-index:2}
.pf-matrix tbody th.pf-host{position:sticky;left:0;background:#fff;z-index:1}
.pf-matrix thead th.pf-host{left:0;z-index:3}
.pf-matrix th,.pf-findings,.pf-legend,#pf-what-to-fix{color:#222}
.pf-legend a{color:#0645ad}
.pf-matrix td.ok{background:#d9f2d9;color:#185c18}
.pf-matrix td.fail{background:#f8d0d0;color:#8b0000;font-weight:bold}
.pf-matrix td.warn{background:#fff0c2;color:#7a5200;font-weight:bold}
.pf-matrix td.err{background:#e6dcf5;color:#4b2a85}
.pf-matrix td.skip{background:#f2f2f2;color:#888}
.pf-matrix td.down{background:#444;color:#fff}
.pf-matrix td.none{background:#fff}
.pf-legend span{display:inline-block;margin-right:12px;padding:1px 6px;border:1px solid #bbb}
.pf-findings{font:13px/1.4 sans-serif}
.pf-findings li{margin-bottom:6px}
.pf-findings code{background:#f4f4f4;padding:0 3px}
.pf-verdict-ready{color:#185c18}.pf-verdict-not{color:#8b0000}
"""



def text(value) -> str:
    """Untrusted text as HTML: control characters made visible, then escaped."""
    if value is None:
        return ""
    shown = visible(str(value))
    return html.escape(shown, quote=True)


# Columns read left to right like a bring-up: can we log in, are the devices there, are the NPUs
# and their links sane, the environment, the software, then what nodes do together, then the job.
_AREAS = ("cluster.reachable", "devices", "npu", "hccl", "env", "limits", "tools", "packages", "versions",
          "net", "storage", "cluster", "job")


def _checks_in_order(results) -> list[str]:
    seen: dict[str, int] = {}
    for r in results:
        seen.setdefault(r["check"], len(seen))

    def area(check: str) -> int:
        for i, prefix in enumerate(_AREAS):
            if check == prefix or check.startswith(prefix + "."):
                return i
        return len(_AREAS)

    return sorted(seen, key=lambda c: (area(c), seen[c]))


def cells(document: dict) -> tuple[list[str], list[str], dict]:
    """(host names, check ids, {(host, check): (outcome, [messages])}) for the matrix."""
    hosts = [h["name"] for h in document.get("hosts", [])]
    down = {h["name"] for h in document.get("hosts", []) if not h.get("reachable")}
    shard_of = {h["name"]: h.get("shard") for h in document.get("hosts", [])}  # merged reports only
    results = document.get("results", [])
    checks = _checks_in_order(results)
    known = set(hosts)
    grid: dict[tuple[str, str], list] = {}
    for r in results:
        if r["host"] is not None:
            grid.setdefault((r["host"], r["check"]), []).append(r)
            # A host's probe that blames another node (a firewall on the target of its connect):
            # that node's cell shows the finding too, not only the prober's.
            if r["outcome"] in ("failed", "warning", "error"):
                for name in r.get("outliers") or ():
                    if name != r["host"] and name in known:
                        grid.setdefault((name, r["check"]), []).append(r)
    # Cluster-wide results: the outliers' cells carry the finding; the other reachable hosts
    # agreed, so their cells show the pass.
    cluster_rows: list[str] = []
    for r in results:
        if r["host"] is None:
            # A merged report has one cluster per shard: its cluster-wide results get a row each.
            row = "(cluster)" if r.get("shard") is None else f"(cluster of {r['shard']})"
            if row not in cluster_rows:
                cluster_rows.append(row)
            grid.setdefault((row, r["check"]), []).append(r)
            outliers = set(r.get("outliers") or [])
            # One copy per result shared by every host cell it spreads to, not one per host: a
            # per-name cluster check (cluster.hostnames) spreads N results over N hosts.
            plain = r.to_json() if hasattr(r, "to_json") else r  # a Result of this run, or a dict from a file
            agreed, lost = {**plain, "outcome": "passed"}, {**plain, "outcome": "error"}
            # A finding that names hosts clears the others; one that names none (a loopback
            # MASTER_ADDR, clocks too imprecise to compare) is every host's: a pass beside it
            # would read as "this node is fine".
            spreads = r["outcome"] == "passed" or r["outcome"] in ("failed", "warning") and bool(outliers)
            everyone = r["outcome"] in ("failed", "warning") and not outliers
            shard = r.get("shard")  # a merged shard's cluster-wide result judged that shard's hosts only
            for name in hosts:
                if shard is not None and shard_of[name] != shard:
                    continue
                if name in outliers:
                    grid.setdefault((name, r["check"]), []).append(r)
                elif name in down:
                    grid.setdefault((name, r["check"]), []).append(lost)
                elif spreads:
                    grid.setdefault((name, r["check"]), []).append(agreed)
                elif everyone:
                    grid.setdefault((name, r["check"]), []).append(r)
    out = {}
    for (host, check), rs in grid.items():
        outcome = worst(x["outcome"] for x in rs)
        if host in down and outcome == "error":
            outcome = "unreachable"
        out[(host, check)] = (outcome, rs)
    return hosts + cluster_rows, checks, out


def _describe(r: dict) -> str:
    where = " ".join(p for p in (r.get("host"), r.get("subject")) if p)
    return f"{r['outcome']}: {r['message']}" if not where or where in r["message"] else \
        f"{r['outcome']} {where}: {r['message']}"


def fragment(document: dict) -> str:
    """The verdict, the matrix and the findings with their remedies, as an HTML fragment."""
    hosts, checks, grid = cells(document)
    parts = [f"<style>{CSS}</style>"]
    ready = document.get("ready") and not document.get("interrupted")
    verdict = "INTERRUPTED" if document.get("interrupted") else "READY" if ready else "NOT READY"
    results = document.get("results", [])
    if ready and results and all(r["outcome"] == "skipped" for r in results):
        verdict += " (no selected check applied: every one was skipped)"
    hosts_doc = document.get("hosts", [])
    tally = Counter(r["outcome"] for r in results)
    found = ", ".join(f"{tally[k]} {label}" for k, label in (("failed", "failed"), ("error", "not evaluated"),
                                                                ("warning", "warning(s)")) if tally[k])
    # The reachable count is one fact among others, not the reason for the verdict.
    fixes = findings(document)
    parts.append(f'<h2 class="{"pf-verdict-ready" if ready else "pf-verdict-not"}">'
                 f'{verdict} (' + (f'{found}; ' if found else '') +
                 f'{sum(1 for h in hosts_doc if h.get("reachable"))} of {len(hosts_doc)} hosts reachable)</h2>')
    if fixes:  # below a fleet's matrix, thousands of pixels down
        parts.append('<p class="pf-legend"><a href="#pf-what-to-fix">What to fix, below the matrix</a></p>')
    parts.append(_merge_notes(document.get("merge")))
    parts.append('<p class="pf-legend">' + "".join(
        f'<span class="{cls}">{sym} {label}</span>' for sym, label, cls in STYLE.values()) + "</p>")
    parts.append('<table class="pf-matrix"><thead><tr><th class="pf-host">host</th>')
    parts.extend(f'<th class="pf-check" title="{text(c)}">{text(c)}</th>' for c in checks)
    parts.append("</tr></thead><tbody>")
    shard_of = {h.get("name"): h.get("shard") for h in hosts_doc if h.get("shard")}
    for host in hosts:
        shard = f' <small>({text(shard_of[host])})</small>' if host in shard_of else ""
        parts.append(f'<tr><th class="pf-host">{text(host)}{shard}</th>')
        for check in checks:
            if (host, check) not in grid:
                parts.append('<td class="none"></td>')
                continue
            outcome, rs = grid[(host, check)]
            sym, label, cls = STYLE[outcome]
            parts.append(f'<td class="{cls}" title="{text(_tip(rs) or label)}">{sym}</td>')
        parts.append("</tr>")
    parts.append("</tbody></table>")
    parts.append(fixes)
    parts.append(_job_notes(document.get("jobs")))
    return "".join(parts)


def _job_notes(jobs) -> str:
    """What the job files' reader could not see, per file (values only the run knows ...)."""
    items = [(j.get("path"), n) for j in jobs or () if isinstance(j, dict) for n in j.get("notes") or ()]
    if not items:
        return ""
    return ('<h3>Not read from the job files</h3><ul class="pf-findings">'
            + "".join(f"<li><code>{text(path)}</code>: {text(note)}</li>" for path, note in items) + "</ul>")


def _merge_notes(merged) -> str:
    """A merged report says why it is not ready when no finding does (a host in two shards, a
    shard interrupted or without a verdict, a check some shard did not run), and what else
    differs between its shards."""
    if not isinstance(merged, dict):
        return ""
    why = [str(w) for w in merged.get("not_ready") or ()]
    notes = [str(n) for n in merged.get("notes") or ()]
    parts = []
    if why:
        parts.append("<p><b>Not ready because:</b></p><ul>" + "".join(f"<li>{text(w)}</li>" for w in why) + "</ul>")
    if notes:
        parts.append("<p><b>About the shards:</b></p><ul>" + "".join(f"<li>{text(n)}</li>" for n in notes) + "</ul>")
    return "".join(parts)


# A cell's tooltip names what went wrong there; a fleet-wide finding (one device IP on 1000 nodes)
# is in every outlier's cell, so the tooltip keeps it short: the full text is in "What to fix".
TIP_FINDINGS, TIP_CHARS = 3, 300


def _tip(rs) -> str:
    bad = [r for r in rs if r["outcome"] != "passed"]
    lines = [d if len(d) <= TIP_CHARS else d[:TIP_CHARS - 1] + "…" for d in map(_describe, bad[:TIP_FINDINGS])]
    if len(bad) > TIP_FINDINGS:
        lines.append(f"… and {len(bad) - TIP_FINDINGS} more below")
    return "\n".join(lines)


# What blocks the launch first (failures, then what could not be evaluated), advice last; within
# those, unreachable hosts first: their other findings are unknown.
_ORDER = {"failed": 0, "error": 1, "warning": 2}


@dataclass(frozen=True)
class FixItem:
    """One line of "What to fix": a finding and the hosts (as a node set) or cluster it is on."""

    outcome: str
    check: str
    where: str
    message: str
    remedy: str | None
    reference: str | None


def fix_items(document: dict) -> list[FixItem]:
    """Failures first, then what could not be evaluated, then warnings, each with its remedy.

    The checks of an unreachable host are not listed one by one: its reachability failure
    says how many were not evaluated.  One finding on many hosts (``ulimit -n`` at 1024 on
    the whole fleet) is one item naming them as a node set, not one item per host: the
    operator reads each distinct problem once, and a host whose finding differs stands out.
    ``document`` is preflight.json's (its hosts and the results, as dicts)."""
    down = {h["name"] for h in document.get("hosts", []) if not h.get("reachable")}
    results = document.get("results", [])
    unevaluated: dict[str, int] = {}
    shown = []
    for r in results:
        if r["outcome"] not in _ORDER:
            continue
        if r["outcome"] == "error" and r.get("host") in down:
            unevaluated[r["host"]] = unevaluated.get(r["host"], 0) + 1
            continue
        shown.append(r)
    addresses = {h.get("name"): h.get("address") for h in document.get("hosts", [])}
    # (outcome, check, subject, message without its host or the host's address, remedy, reference)
    # -> (host, its own message) in first-seen order
    groups: dict[tuple, list[tuple[str | None, str]]] = {}
    for r in shown:
        host, subject = r.get("host"), r.get("subject")
        message = _without_where(r["message"], host, subject)
        if host in unevaluated and r["check"] == "cluster.reachable":
            message += f" ({unevaluated[host]} other checks not evaluated)"
        remedy = r.get("remedy")
        # A remedy naming the host's own login (cluster.reachable) is alike on hosts down alike.
        key = (r["outcome"], r["check"], subject, _without_address(message, host, addresses.get(host)),
               _as_any_host(remedy, host, addresses.get(host)) or None, r.get("reference") or None,
               r.get("shard") if host is None else None)
        groups.setdefault(key, []).append((host, message, remedy, tuple(r.get("outliers") or ())))
    # One cause on every NPU of the same nodes (hccn_tool missing) is one item naming the NPUs as a
    # set, not one per NPU: (outcome, check, nodes, text with the NPU's number as <N>, ...) -> NPUs.
    by_npu: dict[tuple, list[tuple[int, str, str | None]]] = {}
    items: list = []
    nodes: list[tuple[bool, tuple]] = []  # per item: (cluster-wide, the nodes it names), for _one_fix_once
    for (outcome, check, subject, generic, remedy, reference, shard), members in sorted(
            groups.items(), key=lambda kv: (_ORDER[kv[0][0]], kv[0][1] != "cluster.reachable")):
        hosts = [h for h, _, _, _ in members]
        named = list(dict.fromkeys(h for h in hosts if h is not None))
        # The nodes at fault when they are others than the ones reporting (a port probe's target,
        # the node resolving a name wrongly): the item leads with them.
        blamed = list(dict.fromkeys(o for *_, outliers in members for o in outliers if o not in named))
        message = members[0][1] if len(named) <= 1 else generic
        remedy = members[0][2] if len(named) <= 1 else remedy
        if named:
            on = fold(named) + (f" ({len(named)} hosts)" if len(named) > 1 else "")
            if None in hosts:  # the same text from a cluster-wide result too (rare)
                on = "the cluster and " + on
            npu = re.fullmatch(r"npu(\d+)", subject or "")
            if npu:
                key = (outcome, check, on, _any_npu(message, npu[1]), _any_npu(remedy, npu[1]), reference)
                if key not in by_npu:
                    items.append(key)  # its place: the first NPU's
                    nodes.append((False, tuple(sorted(named))))
                by_npu.setdefault(key, []).append((int(npu[1]), message, remedy))
                continue
            where = " ".join(p for p in (on, subject) if p)
            if blamed:
                where = f"{subject or fold(blamed)} (from {fold(named)}" + (
                    f", {len(named)} hosts)" if len(named) > 1 else ")")
        else:  # a cluster-wide check: its subject (a node, an address, a port) or the cluster itself
            where = f"{subject} (cluster-wide)" if subject else "the cluster"
            # A subject that already names them ("HCCL_SOCKET_IFNAME on node-03") is not named twice.
            if blamed and subject != fold(blamed) and not re.search(
                    rf"(?<![\w.-]){re.escape(fold(blamed))}(?![\w.-])", subject or ""):
                where = f"{fold(blamed)} ({subject + ', ' if subject else ''}cluster-wide)"
            if shard:  # a merged report: which shard's cluster
                where += f" of {shard}"
        items.append(FixItem(outcome, check, where, message, remedy, reference))
        nodes.append((not named, tuple(sorted(named or blamed))))
    return _one_fix_once([item if isinstance(item, FixItem) else _npu_item(item, by_npu[item]) for item in items],
                         nodes)


def _one_fix_once(items: list[FixItem], nodes: list[tuple[bool, tuple]]) -> list[FixItem]:
    """A cluster-wide finding whose remedy is word for word a node's finding's (TLS on for one NPU:
    hccl.tls_node on the node and cluster.tls_agree across the cluster, the same hccn_tool command
    on the same NPU) is one item naming both checks: one fix, listed once.  Only on the same nodes:
    a check's own remedy, shared by two checks (env.socket_ifname, cluster.ifname_agree), on other
    nodes is another finding.  ``nodes`` is per item (cluster-wide, the nodes it names)."""
    first: dict[tuple, int] = {}
    for i, item in enumerate(items):
        if item.remedy and not nodes[i][0]:
            first.setdefault((item.outcome, item.remedy, nodes[i][1]), i)
    kept, folded = [], {}
    for i, item in enumerate(items):
        twin = first.get((item.outcome, item.remedy, nodes[i][1]))
        if twin is not None and twin != i and item.check.startswith("cluster.") and nodes[i][0] and nodes[i][1]:
            folded.setdefault(twin, []).append(item.check)
            continue
        kept.append(i)
    return [replace(items[i], check=", ".join(dict.fromkeys([items[i].check, *folded[i]])))
            if i in folded else items[i] for i in kept]


def _any_npu(text: str | None, number: str) -> str | None:
    """The text with one NPU's number as <N> (its name npu3, its hccn_tool -i 3)."""
    if not text:
        return text
    text = re.sub(rf"(?<![\w-])npu{number}(?!\d)", "npu<N>", text)
    return re.sub(rf"(?<=-i ){number}(?!\d)", "<N>", text)


def _npu_item(key: tuple, npus: list[tuple[int, str, str | None]]) -> FixItem:
    outcome, check, on, message, remedy, reference = key
    if len(npus) == 1:
        [(number, message, remedy)] = npus
        return FixItem(outcome, check, f"{on} npu{number}", message, remedy, reference)
    return FixItem(outcome, check, f"{on} {fold([f'npu{n}' for n, _, _ in sorted(npus)])}", message, remedy,
                   reference)


def findings(document: dict) -> str:
    """"What to fix" (:func:`fix_items`) as HTML."""
    items = fix_items(document)
    if not items:
        return ""
    parts = ['<h3 id="pf-what-to-fix">What to fix</h3><ol class="pf-findings">']
    for item in items:
        line = [f'<li><b>{text(item.outcome.upper())}</b> <code>{text(item.check)}</code> '
                f'on <b>{text(item.where)}</b>: {text(item.message)}']
        if item.remedy:
            line.append(f"<br>Remedy: {text(item.remedy)}")
        if item.reference:
            line.append(f"<br><i>Source: {text(item.reference)}</i>")
        line.append("</li>")
        parts.append("".join(line))
    parts.append("</ol>")
    return "".join(parts)


def _as_any_host(remedy, host, address):
    """The remedy with the host's own name and address as placeholders, for one item on many hosts."""
    if not remedy or not host:
        return remedy
    if address and address != host:
        remedy = re.sub(rf"(?<![\w.:]){re.escape(address)}(?!\.?\w)", "<address>", remedy)
    return re.sub(rf"(?<![\w.-]){re.escape(host)}(?![\w-])", "<node>", remedy)


def _without_address(message: str, host, address) -> str:
    """The message with the host's own address said as "its address": ten nodes whose sshd is down
    are one finding, not ten that differ only in the address each names."""
    if not host:
        return message
    message = message.replace(f"({host}: ", "(")  # an SSH error names the host it was for
    message = message.replace(f" on {host}: ", ": ")  # "not evaluated on node-07: ..."
    message = re.sub(rf" from {re.escape(host)}$", " from the host", message)  # "... was not gathered from node-07"
    # A probe from this host ("node-07 -> node-01 Ray GCS port ..."): a head's firewall is one finding
    # from every node, not one per node.
    message = re.sub(rf"^{re.escape(host)} -> ", "<node> -> ", message)
    if not address or address == host:
        return message
    message = message.replace(f"{host} ({address}): ", "").replace(f"{host} ({address})", host)
    return re.sub(rf"(?<![\w.:]){re.escape(address)}(?!\.?\w)", "its address", message)


def _without_where(message: str, host, subject) -> str:
    """The message without the "<host> <subject>: " it starts with (the item names where)."""
    where = " ".join(p for p in (host or "cluster", subject) if p)
    for prefix in (f"{where}: ", f"{host}: ", f"{subject}: "):
        if message.startswith(prefix):
            return message[len(prefix):]
    return message


def stylesheet_of(path: str) -> str:
    """The stylesheet written beside a page: matrix.html -> matrix.css."""
    return os.path.splitext(path)[0] + ".css"


def page(document: dict, body: str | None = None, stylesheet: str | None = None) -> str:
    """matrix.html; ``body`` is :func:`fragment` of the same document when the caller has it.

    ``stylesheet``: a file name beside the page with the same rules as the inline <style>. A
    Content-Security-Policy such as Jenkins' default (``style-src 'self'``) drops inline styles,
    and the page would lose its colours there; the inline copy keeps a page sent alone styled."""
    tool = document.get("tool", {})
    link = f'<link rel="stylesheet" href="{html.escape(stylesheet, quote=True)}">' if stylesheet else ""
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
            f"<title>ascend-preflight: {text(document.get('inventory'))}</title>{link}</head><body>"
            f"<h1>ascend-preflight {text(tool.get('version'))}</h1>"
            f"<p>Inventory <code>{text(document.get('inventory'))}</code>, started "
            f"{text(document.get('started_at'))}, {text(document.get('duration_s'))} s.</p>"
            f"{fragment(document) if body is None else body}</body></html>\n")


def write_matrix(path: str, document: dict, body: str | None = None) -> None:
    """The page at ``path`` and its stylesheet beside it (:func:`stylesheet_of`)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    css = stylesheet_of(path)
    for target, content in ((css, CSS), (path, page(document, body, os.path.basename(css)))):
        tmp = target + ".tmp"
        try:
            with open(tmp, "w", encoding="utf-8", errors="backslashreplace") as fh:  # see write_atomically
                fh.write(content)
            os.replace(tmp, target)
        except BaseException:
            if os.path.exists(tmp):  # a full disk: no half file left beside the report
                os.unlink(tmp)
            raise
