"""The pytest plugin: options, collection of the built-in checks, gathering before the
first test, fixtures, and turning each check's verdict into pytest outcomes and reports.

Hooks are thin; the work lives in :mod:`preflight.run` (the run's state), the
gatherer, and the report writers.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import math
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from . import fixtures
from .check import MARKER, info_of
from .fixtures import VERDICT_KEY
from .inventory import InventoryError
from .run import RUN_KEY, PreflightRun, builtin_checks_dir

# ---------------------------------------------------------------------- options


def _inventory_owned_elsewhere() -> bool:
    # pytest-ansible registers --inventory too; argparse would refuse a second owner.
    try:
        importlib.metadata.distribution("pytest-ansible")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def _option_taken(parser, name: str) -> bool:
    """Whether a plugin loaded before us registered ``name`` (argparse would refuse a second)."""
    groups = [*getattr(parser, "_groups", []), getattr(parser, "_anonymous", None)]
    return any(name in opt.names() for group in groups if group is not None for opt in group.options)


# Above this many hosts the reports take their fleet form (measured with benchmarks/controller.py):
# preflight.html lists only the results that need attention (pytest-html's page took 24 s to open
# with 300 hosts' rows, 72 s with 1000), and pytest's failure sections use --tb=line (its default
# layout scans every report once per failure: 13 of 31 CPU-seconds at 300 hosts).
FLEET_HOSTS = 64
PYTEST_REPORTCHARS = "fE"  # pytest's -r default: left as it is, it is not the user's choice



def _count(least: int):
    """An argparse type: a whole number, at least ``least`` (a bad value is a usage error, exit 4)."""
    def count(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"{value} is less than {least}")
        return value
    count.__name__ = "count"
    return count


def _seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above 0 (an infinite deadline never fires)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} seconds: give a finite number above 0")
    return value


def pytest_addoption(parser, pluginmanager):
    group = parser.getgroup("preflight", "ascend-preflight (Ascend NPU cluster preflight checks)")
    names = ["--preflight-inventory"]
    if not _inventory_owned_elsewhere() and not _option_taken(parser, "--inventory"):
        names.insert(0, "--inventory")
    group.addoption(*names, dest="preflight_inventory", metavar="FILE", default=None,
                    help="inventory of hosts to check (native or Ansible YAML); runs the built-in checks")
    group.addoption("--report-dir", dest="preflight_report_dir", metavar="DIR", default="reports",
                    help="where preflight.html, matrix.html and preflight.json go (default: reports)")
    group.addoption("--fanout", dest="preflight_fanout", type=_count(1), default=32, metavar="N",
                    help="hosts gathered at once (default: 32)")
    group.addoption("--host-timeout", dest="preflight_host_timeout", type=_seconds, default=60.0, metavar="S",
                    help="deadline for one host's whole probe, connect included (default: 60)")
    group.addoption("--command-timeout", dest="preflight_command_timeout", type=_seconds, default=10.0,
                    metavar="S",
                    help="deadline for each command of the probe (default: 10)")
    group.addoption("--connect-timeout", dest="preflight_connect_timeout", type=_seconds, default=10.0,
                    metavar="S",
                    help="SSH connect, banner and authentication timeout (default: 10)")
    group.addoption("--accept-new-host-keys", dest="preflight_accept_new", action="store_true",
                    help="accept and record host keys not yet in known_hosts (changed keys are always refused)")
    group.addoption("--gather-process", dest="preflight_gather_process",
                    choices=("auto", "child", "inline", "shards"), default="auto",
                    help="where SSH gathering runs: in a forked child process that hands the facts back "
                         "(its connections' memory goes with it), inline in this process, in several "
                         "forked shards that each hold a share of the connections (--gather-shards; "
                         "handshakes and ciphers on more than one core), or auto (default): a child "
                         "above 64 hosts.  Always inline in pytest-xdist workers")
    group.addoption("--gather-shards", dest="preflight_gather_shards", type=_count(0), default=0, metavar="K",
                    help="gather in K forked shards (2 or more: --gather-process shards, unless it says "
                         "otherwise; with shards and 0, the default: one per 500 hosts, at least 2, at most "
                         "the cores); --fanout is shared between them")
    group.addoption("--facts-out", dest="preflight_facts_out", metavar="FILE", default=None,
                    help="save the raw outputs and parsed facts of every host to FILE (JSON)")
    group.addoption("--facts-in", dest="preflight_facts_in", metavar="FILE", default=None,
                    help="run the checks on facts saved with --facts-out, without contacting any host")
    group.addoption("--ping", dest="preflight_ping", choices=("all", "ring", "none"), default="ring",
                    help="NPU-to-NPU RoCE pings between nodes: ring (each node to the next, default), all "
                         "(every pair, in rounds of disjoint pairs), none")
    group.addoption("--compat", dest="preflight_compat", metavar="FILE", action="append", default=[],
                    help="extra version-compatibility table (YAML, the layout of preflight/compat/compat.yaml); "
                         "its rows extend or replace the shipped ones (repeatable)")
    group.addoption("--preflight-strict", dest="preflight_strict", action="store_true",
                    help="failed warning-severity checks fail the run too (pytest's --strict does the same)")
    group.addoption("--html-all-rows", dest="preflight_html_all_rows", action="store_true",
                    help=f"keep passed and skipped rows in preflight.html also above {FLEET_HOSTS} hosts "
                         f"(they are left out there: a browser takes minutes over tens of thousands of rows; "
                         f"matrix.html and preflight.json always have every result)")
    group.addoption("--job", dest="preflight_jobs", action="append", default=[], metavar="FILE",
                    help="also check a job: a MindSpeed launch script, a verl command line/script or a ROLL "
                         "YAML (repeatable)")
    group.addoption("--job-kind", dest="preflight_job_kind", default=None, metavar="KIND",
                    choices=["mindspeed", "mindspeed-mm", "mindspeed-llm", "verl", "roll"],
                    help="the framework of the --job files (default: detected)")
    group.addoption("--job-local", dest="preflight_job_local", action="store_true",
                    help="read the job's model directory and paths on this machine, not on the nodes "
                         "(works without --inventory: only job checks run then)")


# ------------------------------------------------------------------ configuration


def _inventory_given_twice(config) -> str | None:
    """Why the command line names two inventories, or None.  A second --inventory replaced the first
    without a word (half the fleet went unchecked); one in a pytest.ini's addopts is a default the
    command line overrides, as every pytest option is."""
    given, args = [], list(config.invocation_params.args)
    for i, arg in enumerate(args):
        for name in ("--inventory", "--preflight-inventory"):
            if arg == name and i + 1 < len(args):
                given.append(args[i + 1])
            elif arg.startswith(name + "="):
                given.append(arg[len(name) + 1:])
    distinct = list(dict.fromkeys(os.path.realpath(g) for g in given))
    if len(distinct) < 2:
        return None
    return (f"--inventory given twice ({given[0]} and {given[-1]}): one inventory per run; to check several, list "
            f"their hosts in one file, or run one preflight per inventory and join the preflight.json files with "
            f"preflight-merge")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    config.addinivalue_line("markers", f"{MARKER}(info): an ascend-preflight check (set by @preflight.check.check)")
    inventory = config.getoption("preflight_inventory", None)
    facts_in = config.getoption("preflight_facts_in", None)
    if not inventory and not facts_in and not config.getoption("preflight_jobs", None):
        return
    twice = _inventory_given_twice(config)
    if twice:
        raise pytest.UsageError(twice)
    try:
        run = PreflightRun.from_config(config)
    except InventoryError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[RUN_KEY] = run
    run.catch_sigterm()  # until pytest_unconfigure (run.close)
    if config.option.maxfail:
        # -x (often from a project's addopts) stopped the session at the first failure and left a
        # report short of the other checks with no word of it; they only read facts already
        # gathered, so stopping early saves nothing.
        run.maxfail_ignored, config.option.maxfail = config.option.maxfail, 0
    if not run.is_xdist_worker:
        config.pluginmanager.register(_WorkerResults(run), "preflight-worker-results")

    if len(run.hosts) > FLEET_HOSTS:
        config.pluginmanager.register(_FleetReports(config), "preflight-fleet-reports")
        run.fleet = True
        if config.option.tbstyle == "auto":
            # A section per check and host (one finding on 1000 nodes is 1000 of them) gives way to
            # the run's "What to fix" (PreflightRun.terminal_summary); --tb=short brings them back.
            config.option.tbstyle = "no"

    # The built-in checks always run; path arguments add the user's own check modules.
    checks = str(builtin_checks_dir())
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        config.args = [checks, *config.args]
    else:
        config.args = [checks]

    # pytest-html writes preflight.html unless the user asked for another --html.
    if config.pluginmanager.hasplugin("html"):
        if not getattr(config.option, "htmlpath", None) and not config.option.collectonly:
            config.option.htmlpath = os.path.join(run.run_dir, "preflight.html")
            config.option.self_contained_html = True
        elif os.path.islink(config.option.htmlpath or ""):
            # --html reports/preflight.html, a link an earlier run left: writing through it would
            # overwrite that run's page; this run's page replaces the link instead.
            os.unlink(config.option.htmlpath)
        from .report.html import HtmlHooks

        brief = len(run.hosts) > FLEET_HOSTS and not config.getoption("preflight_html_all_rows")
        config.pluginmanager.register(HtmlHooks(run, brief=brief), "preflight-html")


class _WorkerResults:
    """Under pytest-xdist, workers run the checks and put their results on the test reports;
    the controller, which writes preflight.json and the HTML, collects them here."""

    def __init__(self, run):
        self.run = run
        self.share: str | None = None  # private folder where the first worker leaves the facts

    def pytest_runtest_logreport(self, report):
        if any(key in ("preflight_results", "preflight_hosts", "preflight_timings") for key, _ in report.user_properties):
            self.run.receive(report)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids):
        """pytest-xdist hook: the items in the order a serial run runs them (every worker collects
        the same), so the reports list results in that order, not as the workers happened to finish."""
        if not self.run.collection_order:
            self.run.collection_order = {nodeid: i for i, nodeid in enumerate(ids)}

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node):
        """pytest-xdist hook: every worker gets the same private folder, so one gathers for all."""
        if self.share is None:
            self.share = tempfile.mkdtemp(prefix="preflight-xdist-")  # 0700: facts may hold secrets
        node.workerinput["preflight_share"] = self.share

    def pytest_unconfigure(self, config):
        if self.share is not None:
            shutil.rmtree(self.share, ignore_errors=True)


class _FleetReports:
    """At fleet size, lets go of the reports nothing reads again once every plugin has seen them.

    pytest keeps every report to the end of the session.  A passed setup or teardown (two of each
    item's three reports: 70 000 at 1000 hosts) is kept in the terminal's statistics under the
    empty category, which pytest's summary skips; pytest-html keeps each test's reports in a dict it
    reads only when that test's teardown arrives.  Together ~50 MB at 1000 hosts, measured.
    (``--durations`` then lists the calls and any failed setup or teardown, not passed ones.)"""

    def __init__(self, config):
        self.config = config
        self._html_reports: dict | None = None
        self._looked_for_html = False

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logreport(self, report):
        result = yield
        if report.when in ("setup", "teardown") and report.passed:
            terminal = self.config.pluginmanager.get_plugin("terminalreporter")
            kept = terminal.stats.get("") if terminal is not None else None
            if kept and kept[-1] is report:
                kept.pop()
        if report.when == "teardown" and report.outcome != "rerun":
            held = self._pytest_html_reports()
            if held is not None:
                held.pop(report.nodeid, None)
        return result

    def _pytest_html_reports(self) -> dict | None:
        if not self._looked_for_html:  # pytest-html 4 registers its report object without a name
            self._looked_for_html = True
            for plugin in self.config.pluginmanager.get_plugins():
                held = getattr(plugin, "_reports", None)
                if type(plugin).__module__.startswith("pytest_html") and isinstance(held, dict):
                    self._html_reports = held
        return self._html_reports


def _run(config) -> PreflightRun | None:
    return config.stash.get(RUN_KEY, None)


def pytest_collect_file(file_path: Path, parent):
    """Check modules of the built-in catalog are named by area (devices.py, hccl.py)."""
    if _run(parent.config) is None or file_path.suffix != ".py" or file_path.name == "__init__.py":
        return None
    if file_path.parent == builtin_checks_dir():
        run = _run(parent.config)
        # Job checks only with --job; node checks only with hosts (--job --job-local alone: job checks only).
        wanted = bool(run.jobs) if file_path.name == "job.py" else bool(run.hosts)
        return pytest.Module.from_parent(parent, path=file_path) if wanted else None
    return None


def pytest_itemcollected(item):
    """A check's id is one of its keywords, so ``-k hccl.link_up`` selects it (the id is what the
    reports show; pytest's own keywords are the function and module names)."""
    info = info_of(item)
    if info is not None:
        item.extra_keyword_matches.add(info.id)


def pytest_generate_tests(metafunc):
    run = _run(metafunc.config)
    if run is not None and "job" in metafunc.fixturenames:
        ids = [j.name if [k.name for k in run.jobs].count(j.name) == 1 else f"{j.name}#{i}"
               for i, j in enumerate(run.jobs)]
        metafunc.parametrize("job", run.jobs, ids=ids)
    if run is None or "host" not in metafunc.fixturenames:
        return
    hosts = run.hosts
    metafunc.parametrize("host", hosts, ids=[h.name for h in hosts], indirect=True)


# --------------------------------------------------------------------- gathering


def pytest_collection_finish(session):
    """Nothing to check (--collect-only, or -k / -m selecting no check): no report is written, so
    pytest-html's page, which would only be removed after it said "Generated html report", is
    not made at all."""
    run = _run(session.config)
    if run is None or run.is_xdist_worker or (session.items and not session.config.option.collectonly):
        return
    if session.testsfailed:  # a collection error: the run is INTERRUPTED and writes its reports
        return
    ours = os.path.abspath(os.path.join(run.run_dir, "preflight.html"))
    pm = session.config.pluginmanager
    for plugin in pm.get_plugins():
        path = getattr(plugin, "_report_path", None)
        if type(plugin).__module__.startswith("pytest_html") and path and os.path.abspath(path) == ours:
            pm.unregister(plugin)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    """Gather every host once, before the first check runs (after -k/-m selection)."""
    run = _run(session.config)
    if run is None or session.config.option.collectonly or not session.items:
        return None
    needs = set()
    for item in session.items:
        info = info_of(item)
        if info:
            needs.update(info.needs)
    run.gather(needs)
    return None


# ---------------------------------------------------------------------- fixtures


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    """Register the check fixtures (host, facts, cluster, verdict, ...; preflight/fixtures.py)
    ahead of other plugins' fixtures of the same names.

    A plugin's fixtures are visible everywhere, and of two plugins' ``host`` the one registered
    last wins: with pytest-testinfra installed, every check got testinfra's ``host`` (its local
    machine) instead of the inventory host, and errored. Registered here for the whole session
    tree (node id ""), ours come after every plugin's."""
    session._fixturemanager.parsefactories(fixtures, nodeid="")


_NO_KEYWORDS: dict = {}


# ----------------------------------------------------------------- outcomes


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    run = _run(item.config)
    info = info_of(item)
    if run is None or info is None:
        return report
    host = item.callspec.params.get("host") if hasattr(item, "callspec") else None
    run.shape_report(item, info, host, report, call, item.stash.get(VERDICT_KEY, None))
    if report.passed and len(run.hosts) > FLEET_HOSTS:
        # pytest keeps every report to the end (three per item, 105 000 at 1000 hosts), each with a
        # copy of the item's keywords (~30 MB there). Nothing reads a passed report's keywords
        # (the terminal folds skips by them; -k selects on items), so at fleet size they share one.
        report.keywords = _NO_KEYWORDS
    if call.when == "teardown":
        # The verdict lives on in the run's results; items stay until the session ends (1000 hosts:
        # 35 000 of them), so it does not stay on the item too.
        try:
            del item.stash[VERDICT_KEY]
        except KeyError:
            pass
    return report


def pytest_report_teststatus(report, config):
    status = getattr(report, "preflight_status", None)
    if status == "warned":
        return "warned", "W", ("WARNED", {"yellow": True})
    if status == "error" and report.when == "call":
        return "error", "E", ("ERROR", {"red": True})
    return None


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    run = _run(config)
    if run is not None:
        run.terminal_summary(terminalreporter)
        if run.fleet and config.option.tbstyle == "no":
            _others_in_full(terminalreporter)
        if run.fleet and config.option.reportchars == PYTEST_REPORTCHARS and config.option.tbstyle == "no":
            # Nor a summary line per failed item after it (pytest prints it last, from -r's default).
            terminalreporter.reportchars = terminalreporter.reportchars.replace("f", "").replace("E", "")


def _others_in_full(tr) -> None:
    """At fleet size pytest's sections are off for the checks (What to fix lists them); what is no
    check's result (a user module that cannot be imported, a plain failing test) has no other place."""
    others = [rep for key in ("error", "failed") for rep in tr.stats.get(key, [])
              if not any(pair[0] == "check" for pair in getattr(rep, "user_properties", ()))]
    if not others:
        return
    tr.write_sep("=", f"{len(others)} failure(s) outside the preflight checks")
    for rep in others:
        collecting = not hasattr(rep, "when")
        tr.write_line(f"{'ERROR collecting' if collecting else rep.outcome.upper()} {rep.nodeid}", red=True)
        tr.write_line(rep.longreprtext)


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session, exitstatus):
    run = _run(session.config)
    if run is not None:
        run.finish(session, exitstatus)
    try:
        result = yield  # pytest-html writes preflight.html in here
    except OSError as exc:
        # A report another plugin writes here (pytest-html's page, --junitxml's file) could not be
        # written: a full disk, a path that does not exist.
        if run is None or run.is_xdist_worker:
            raise
        run.plugin_report_failed(session, exc)
        result = None
    if run is not None:
        run.point_latest()
        ours = os.path.join(run.run_dir, "preflight.html")
        if run.no_report and getattr(session.config.option, "htmlpath", None) == ours:
            shutil.rmtree(run.run_dir, ignore_errors=True)  # ours, of nothing: as for the other reports
    return result


def pytest_unconfigure(config):
    run = _run(config)
    if run is not None:
        run.close()
