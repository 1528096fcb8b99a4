"""The state of one preflight run: inventory, settings, gathered facts, results."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from . import __version__, forked
from .activeprobe import run_phase_two
from .facts import REACHABLE_POINTER, HostFacts, SharedOutputs, is_secret_name, remedy_for_unevaluated, resolve
from .gather import Gatherer, GatherSettings, raise_open_files_limit
from .hostlist import fold
from .inventory import Host, Inventory, InventoryError, check_host, load_inventory
from .probe import packed
from .reachable import NOT_REPLAYED, unjudged_failures
from .report.json_report import unwritable, write_atomically
from .results import Result, ResultStore, one_line, redact_secrets, visible, worst
from .shards import ShardedGatherer

RUN_KEY = pytest.StashKey["PreflightRun"]()
# Above this many hosts, gathering runs in a forked child (--gather-process auto): the memory of
# the open connections goes with it, ~0.2 MB a host.
FORK_ABOVE_HOSTS = 64


def builtin_checks_dir() -> Path:
    """The shipped check catalog: ``checks/`` in a checkout, ``preflight/checks`` in a wheel."""
    import importlib.util

    spec = importlib.util.find_spec("preflight.checks")
    if spec is not None and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0]).resolve()
    return (Path(__file__).resolve().parent.parent / "checks").resolve()


# A check that crashed or said nothing judged nothing: the fault is in its code, not the node.
CRASH_REMEDY = ("A defect in the check, not a finding about the node: re-run with --facts-out facts.json and "
                "report this message with that file to the check's author; judge this item by hand meanwhile.")


@dataclass
class Cluster:
    """What a cluster-wide check sees: every host and its facts."""

    hosts: tuple[Host, ...]
    facts: dict[str, HostFacts]
    jobs: tuple = ()  # --job files (preflight.job.Job), for checks that need the job's ports

    def reachable(self) -> list[tuple[Host, HostFacts]]:
        return [(h, self.facts[h.name]) for h in self.hosts
                if h.name in self.facts and self.facts[h.name].reachable]

    def unreachable(self) -> list[Host]:
        return [h for h in self.hosts if h.name not in self.facts or not self.facts[h.name].reachable]

    def with_role(self, role: str) -> list[Host]:
        return [h for h in self.hosts if role in h.roles]


def probe_params(host, hosts=(), jobs=()) -> dict[str, str]:
    """Inventory values a host's probe commands read (as ``"$PF_NAME"``; quoted, never pasted)."""
    params = {"PF_PYTHON": str(host.vars.get("python") or "python3"),
              # Inventory names are validated hostnames: safe to split on blanks in the probe.
              "PF_HOSTNAMES_GZ": packed(" ".join(h.name for h in hosts if h.connection != "local"))}
    job_env = host.vars.get("env") or {}
    home = job_env.get("ASCEND_HOME_PATH") or job_env.get("ASCEND_TOOLKIT_HOME")
    if home:  # the job's CANN, as the inventory declares it: looked at first (ascend.files)
        params["PF_JOB_CANN_HOME"] = str(home)
    if host.vars.get("checkpoint_dir"):
        params["PF_CHECKPOINT_DIR"] = str(host.vars["checkpoint_dir"])
    if host.vars.get("python_modules"):  # validated module names: safe to join with commas
        params["PF_MODULES"] = ",".join(host.vars["python_modules"])
    if host.vars.get("sudo"):
        params["PF_SUDO"] = "1"  # vendor tools through `sudo -n` (never a password prompt)
    if jobs:  # the job's model directories and paths, looked up on the node (PF_JOB_MODEL_DIRS, PF_JOB_PATHS)
        from .job.facts import job_params
        params.update(job_params(jobs))
    return params


def gathering_mode(where: str, hosts: int, xdist_worker: bool, shards: int = 0) -> str:
    """--gather-process: "inline", "child", "shards", or "auto": shards when --gather-shards asks
    for two or more, else a child above FORK_ABOVE_HOSTS hosts.  Never a fork in a pytest-xdist
    worker (its execnet threads may hold locks a forked child would inherit)."""
    if xdist_worker or not forked.available():
        return "inline"
    if where == "auto":
        return "shards" if shards >= 2 else "child" if hosts > FORK_ABOVE_HOSTS else "inline"
    return where


# --gather-shards 0: one shard per this many hosts (the measured case: 2 shards for 1000 hosts
# halved gathering's CPU path), at least 2, at most the usable cores.  Each shard costs memory
# (2 at 1000 hosts: +177 MB over one gathering process), so not simply one per core.
HOSTS_PER_SHARD = 500


def shard_count(option: int, hosts: int, cores: int | None = None) -> int:
    """How many shards: --gather-shards when given, else by HOSTS_PER_SHARD."""
    if option > 0:
        return option
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(2, min(cores, -(-hosts // HOSTS_PER_SHARD)))


class PreflightRun:
    def __init__(self, config, hosts: tuple[Host, ...], inventory_path: str, settings: GatherSettings,
                 report_dir: str, facts_in: str | None, facts_out: str | None, strict: bool):
        self.config = config
        self.hosts = hosts
        self.inventory_path = inventory_path
        self.settings = settings
        self.report_dir = report_dir
        # Each run writes into a folder of its own, so overlapping runs (two nightly jobs) never
        # overwrite each other; report_dir/preflight.json etc. point at the latest finished run.
        self.run_id = f"{_dt.datetime.now(_dt.timezone.utc):%Y%m%dT%H%M%SZ}-{os.getpid()}"
        self.run_dir = os.path.join(report_dir, "runs", self.run_id)
        self.interrupted = False
        self.terminated = False  # the interruption was a SIGTERM (catch_sigterm)
        self._sigterm_previous = None  # the handler catch_sigterm replaced, put back by close()
        self._stopping = False  # a SIGTERM came, or the reports are being written: later ones wait
        self._pid = os.getpid()  # the controller's; forked children inherit the SIGTERM handler
        self.timings: dict[str, float] = {}  # seconds per gathering step, for preflight.json
        self.is_xdist_worker = hasattr(config, "workerinput")
        self.collection_order: dict[str, int] = {}  # xdist controller: nodeid -> its place in a serial run
        self._hosts_sent = False
        self.facts_in = facts_in
        self.facts_out = facts_out
        self.strict = strict
        self.facts: dict[str, HostFacts] = {}
        self.outputs = SharedOutputs()  # outputs many hosts printed alike, kept and parsed once
        self.store = ResultStore()
        self.started_at = _dt.datetime.now(_dt.timezone.utc)
        self._t0 = time.monotonic()
        self.gather_s = 0.0
        self.gatherer: Gatherer | None = None
        self._cluster: Cluster | None = None
        self.item_outcomes: dict[str, str] = {}
        self.jobs: list = []  # --job files (preflight.job.Job)
        self.job_local = False  # --job-local: read the job's model and paths on this machine
        self.local_job_facts: dict[str | None, HostFacts] = {}  # --job-local: by the jobs' launch directory
        self.final_document: dict | None = None  # what finish() wrote, for preflight.html's summary
        self.final_fragment: str | None = None  # its matrix and "What to fix", rendered once for both pages
        self.fleet = False  # above plugin.FLEET_HOSTS: "What to fix" in the terminal, not a section per item
        self.maxfail_ignored = 0  # the -x/--maxfail the plugin turned off (see plugin.pytest_configure)
        self.report_error: str | None = None  # "path: why" of a report that could not be written
        self.reports_incomplete = False  # preflight.json, matrix.html or preflight.html among them
        self.exitstatus = None  # pytest's, once the session has finished
        self.no_report: str | None = None  # why no report was written (--collect-only, nothing selected)
        # The (name, value) pairs put on reports, one tuple each: three reports per item carry the
        # same few pairs, and at 1000 hosts that is 100 000 reports (about 20 MB of equal tuples).
        self._properties: dict[tuple[str, str], tuple[str, str]] = {}

    # -- construction -----------------------------------------------------------------
    @classmethod
    def from_config(cls, config) -> "PreflightRun":
        opt = config.getoption
        settings = GatherSettings(
            fanout=max(1, opt("preflight_fanout")),
            host_timeout=opt("preflight_host_timeout"),
            command_timeout=opt("preflight_command_timeout"),
            connect_timeout=opt("preflight_connect_timeout"),
            accept_new_host_keys=opt("preflight_accept_new"),
        )
        facts_in = opt("preflight_facts_in")
        inventory_path = opt("preflight_inventory")
        job_local = bool(opt("preflight_job_local", False))
        jobs = _load_jobs(opt("preflight_jobs", None) or [], opt("preflight_job_kind", None), job_local,
                          bool(inventory_path or facts_in))
        if inventory_path:
            inventory: Inventory = load_inventory(inventory_path)
            hosts = inventory.hosts
            if facts_in:
                # Read now, as without --inventory: a facts file that cannot be read is a usage error
                # before any report is started (it wrote an empty one and moved reports/latest to it).
                _check_replay_hosts(facts_in, hosts)
            else:
                _check_controller_files(inventory_path, hosts)
        elif facts_in:
            hosts, inventory_path = _hosts_from_facts_file(facts_in)
        else:
            hosts, inventory_path = (), ""  # --job --job-local alone: only the job checks run
        strict = bool(opt("preflight_strict") or getattr(config.option, "strict", False))
        if facts_in and opt("preflight_facts_out"):
            # A replay gathers nothing: the file asked for was silently never written.
            raise pytest.UsageError(f"--facts-out with --facts-in: a replay gathers no facts to write; the facts "
                                    f"are those of {facts_in} (copy it instead)")
        _check_output_paths(opt("preflight_report_dir"), opt("preflight_facts_out"))
        _check_compat_files(opt("preflight_compat", None) or [])
        run = cls(config, tuple(hosts), str(inventory_path), settings, opt("preflight_report_dir"),
                  facts_in, opt("preflight_facts_out"), strict)
        run.jobs, run.job_local = jobs, job_local
        return run

    # -- stopping ---------------------------------------------------------------------
    def catch_sigterm(self) -> None:
        """SIGTERM stops the run as Ctrl-C does: the reports are written, marked INTERRUPTED, and
        the exit code is 2.

        CI's ``timeout``, Slurm's time limit, ``systemctl stop`` and Kubernetes stop a run with
        SIGTERM, whose default killed the controller outright (exit 143): an empty run folder,
        ``latest`` left on the run before.  The handler raises KeyboardInterrupt, so every path
        Ctrl-C takes is taken: the gathering child is passed a SIGINT and hands over, the shards
        are asked for what they have, pytest ends the session INTERRUPTED.  Only in the
        controller's main thread (where Python runs handlers; the controller of an xdist run writes
        the reports, its workers do not), and for this run only: close() puts the previous one back."""
        if self.is_xdist_worker or threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(signal.SIGTERM)
        if previous == signal.SIG_IGN:
            return  # whoever started the run chose to ignore it (Python leaves an ignored SIGINT so too)
        self._sigterm_previous = previous
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum, frame) -> None:
        # A forked gathering child or shard inherits this handler: there the controller decides
        # (it passes the child a SIGINT, asks the shards for their facts), as for a terminal's Ctrl-C.
        # One SIGTERM stops the run: a second one (`timeout` sends it to the process and again to
        # its group) or one while the reports are written must not cut the hand-over or the reports
        # short; the supervisor's SIGKILL, which follows, ends a run that does not stop.
        if os.getpid() != self._pid or self._stopping:
            return
        self._stopping = self.terminated = True
        raise KeyboardInterrupt

    def _restore_sigterm(self) -> None:
        if self._sigterm_previous is not None and signal.getsignal(signal.SIGTERM) == self._on_sigterm:
            signal.signal(signal.SIGTERM, self._sigterm_previous)
        self._sigterm_previous = None

    # -- gathering --------------------------------------------------------------------
    def gather(self, needs) -> None:
        share = self.config.workerinput.get("preflight_share") if self.is_xdist_worker else None
        if share and self.hosts and not self.facts_in:
            self._gather_once_for_all_workers(share, needs)
        else:
            self._gather(needs)
        # Saved where they had to go (--facts-out, the xdist share): from here on an output is
        # needed only until it is parsed (at 1000 hosts they are ~40 MB).
        for facts in self.facts.values():
            facts.compact = True
        self.outputs.close_intake()

    def _gather_once_for_all_workers(self, share: str, needs) -> None:
        """pytest-xdist: the first worker gathers (phases one and two) and leaves the facts in the
        controller's private folder; the others wait for it and read them.  Every worker collects
        the same checks, so they need the same facts; each node sees one probe, not one per worker."""
        import fcntl

        path = os.path.join(share, "facts.json")
        with open(os.path.join(share, "gather.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if os.path.exists(path):
                with open(path, encoding="utf-8") as fh:
                    doc = json.load(fh)
                self.facts = {d["host"]: HostFacts.from_json(d, self.outputs) for d in doc["hosts"]}
                self.timings, self.gather_s = doc["timings"], doc["gather_s"]
                return
            self._gather(needs)
            if self.interrupted:
                return
            tmp = path + ".tmp"
            with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as fh:
                json.dump({"hosts": [f.raw_json() for f in self.facts.values()], "timings": self.timings,
                           "gather_s": self.gather_s}, fh)
            os.replace(tmp, path)

    def _gather(self, needs) -> None:
        t0 = time.monotonic()
        try:
            if self.jobs and self.job_local:
                from .job.facts import local_hostfacts
                # One reading per launch directory: a relative path is each job's own.
                bases = dict.fromkeys(j.launch_dir for j in self.jobs)
                self.local_job_facts = {b: local_hostfacts([j for j in self.jobs if j.launch_dir == b]) for b in bases}
            if not self.hosts:
                pass  # --job --job-local without an inventory: nothing to gather from nodes
            elif self.facts_in:
                self.facts = _load_facts(self.facts_in, self.outputs)
                for h in self.hosts:
                    self.facts.setdefault(h.name, HostFacts(host=h.name, address=h.address, reachable=False,
                                                            error=f"not in {self.facts_in}",
                                                            error_kind=NOT_REPLAYED))
            elif (mode := self._gathering_mode()) == "child":
                self._gather_forked(needs)
            elif mode == "shards":
                self._gather_live(needs, shards=shard_count(self.config.getoption("preflight_gather_shards", 0),
                                                            len(self.hosts)))
            else:
                self._gather_live(needs)
        finally:
            self.gather_s = time.monotonic() - t0

    def _gathering_mode(self) -> str:
        return gathering_mode(self.config.getoption("preflight_gather_process", "auto"), len(self.hosts),
                               self.is_xdist_worker, self.config.getoption("preflight_gather_shards", 0))

    def _gather_forked(self, needs) -> None:
        """Phases one and two in a forked child, which hands the facts back (see :mod:`.forked`)."""

        def produce(write):
            try:
                self._gather_live(needs)
            except KeyboardInterrupt:
                self.interrupted = True  # what was gathered is handed over all the same
            finally:
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # the hand-over is not cut short
            for facts in self.facts.values():
                write({"host": facts.raw_json()})
            write({"timings": self.timings, "interrupted": self.interrupted})

        def consume(record):
            if "host" in record:
                facts = HostFacts.from_json(record["host"], self.outputs)
                self.facts[facts.host] = facts
            else:
                self.timings.update(record["timings"])
                self.interrupted = self.interrupted or record["interrupted"]

        try:
            forked.run_forked(produce, consume)
        except KeyboardInterrupt:
            self.interrupted = True
            raise
        if self.interrupted:
            raise KeyboardInterrupt

    def _gather_live(self, needs, shards: int = 0) -> None:
        """Phases one and two, over SSH (and local subprocesses): the connections in this process
        (``shards`` 0), or in ``shards`` forked processes that phase two reaches through (:mod:`.shards`)."""
        t0, cpu0 = time.monotonic(), time.process_time()
        specs = resolve(needs)
        short = raise_open_files_limit(len(self.hosts))
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if short and tr is not None:
            tr.write_line(f"warning: {short}", yellow=True)
        self.gatherer = (ShardedGatherer(self.settings, self.outputs, shards) if shards
                         else Gatherer(self.settings, self.outputs))
        reporter = _Progress(self.config, "gathering facts")
        try:
            self.facts = self.gatherer.gather(self.hosts, [s for s in specs if s.phase == 1], reporter,
                                              params_for=lambda h: probe_params(
                                                  h, self.hosts, () if self.job_local else self.jobs))
        except KeyboardInterrupt:
            # Keep what was gathered; the reports say which hosts were never reached.
            self.interrupted = True
            self.facts = dict(self.gatherer.partial)
            raise
        reporter.done(self.facts)
        self.timings["phase_one"] = time.monotonic() - t0
        active = {s.name for s in specs if s.phase == 2}
        if active:
            run_phase_two(active, self.cluster(), self.gatherer, self.settings,
                          {"ping": self.config.getoption("preflight_ping", "ring")}, timings=self.timings)
        # Checks never touch a node: the connections go now, not at the end of the session (at
        # fleet size they are most of the controller's memory: ~0.15-0.2 MB each, measured).
        self.gatherer.close()
        # CPU seconds of gathering in this process (all its threads); with shards, theirs apart:
        # what more cores can share (benchmarks/gathering.py).
        self.timings["gather_cpu_s"] = round(time.process_time() - cpu0, 3)
        if isinstance(self.gatherer, ShardedGatherer):
            self.timings["gather_cpu_shards_s"] = round(sum(self.gatherer.cpu_s), 3)
            self.timings["gather_cpu_largest_shard_s"] = round(max(self.gatherer.cpu_s, default=0.0), 3)
        if self.facts_out:
            _save_facts(self.facts_out, self.hosts, self.inventory_path, self.facts)

    def facts_for(self, name: str) -> HostFacts | None:
        return self.facts.get(name)

    def cluster(self) -> Cluster:
        # One Cluster per set of facts: checks ask for it once per host (fleet size: N x N otherwise).
        if self._cluster is None or self._cluster.facts is not self.facts:
            self._cluster = Cluster(self.hosts, self.facts, tuple(self.jobs))
        return self._cluster

    def job_facts(self, job=None):
        """What job checks read: this machine (--job-local; what ``job``'s launch directory holds),
        or every reachable node."""
        from .job.facts import LOCAL, JobFacts

        if self.job_local:
            local = self.local_job_facts.get(job.launch_dir if job is not None else None) \
                or next(iter(self.local_job_facts.values()), None)
            return JobFacts([(LOCAL, local)] if local else [], self.hosts, local=True, gathered=self.facts)
        return JobFacts([(h.name, f) for h, f in self.cluster().reachable()], self.hosts, gathered=self.facts)

    # -- outcomes ---------------------------------------------------------------------
    def shape_report(self, item, info, host, report, call, verdict) -> None:
        """Record this item's results and make the pytest outcome say the same thing.

        Under pytest-xdist a worker also puts them on the report (the controller, which
        writes the reports, sees only what comes back in test reports)."""
        before = len(self.store)
        self._shape_report(item, info, host, report, call, verdict)
        if self.is_xdist_worker:
            added = self.store.since(before)
            if added:
                report.user_properties.append(("preflight_results", json.dumps([r.to_json() for r in added])))
            if not self._hosts_sent:
                self._hosts_sent = True
                report.user_properties.append(("preflight_hosts", json.dumps(self.hosts_json())))
                report.user_properties.append(("preflight_timings", json.dumps(
                    {"timings": self.timings, "gather_s": self.gather_s})))

    def receive(self, report) -> None:
        """xdist controller: take the results and host states a worker put on a report."""
        props = dict(report.user_properties)
        for data in json.loads(props.get("preflight_results", "[]")):
            data["outliers"] = tuple(data.get("outliers") or ())
            data["agreed"] = tuple((data.get("agreed") or {}).items())
            self.store.add(Result(**data))
        if "preflight_timings" in props and not self.timings:  # the worker that gathered, or one that read its facts
            sent = json.loads(props["preflight_timings"])
            self.timings, self.gather_s = dict(sent["timings"]), float(sent["gather_s"])
        for h in json.loads(props.get("preflight_hosts", "[]")):
            if h["name"] not in self.facts and h.get("error") != "not gathered":
                self.facts[h["name"]] = HostFacts(host=h["name"], address=h["address"], reachable=h["reachable"],
                                                  error=h["error"], error_kind=h.get("error_kind"),
                                                  gather_s=h.get("gather_s") or 0.0)

    def _shape_report(self, item, info, host, report, call, verdict) -> None:
        host_name = host.name if host is not None else None
        report.user_properties.extend([self._property("check", info.id),
                                       self._property("host", host_name or "cluster"),
                                       self._property("severity", info.severity)])
        if report.when == "setup" and report.skipped:  # @pytest.mark.skip / skipif
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            self.store.add(Result(check=info.id, host=host_name, subject=None, outcome="skipped",
                                  severity=info.severity, message=reason.removeprefix("Skipped: "),
                                  reference=info.reference, nodeid=item.nodeid))
            self._note(item, report, "skipped")
            return
        if report.when == "setup" and report.failed:
            message = _exception_message(call)
            result = Result(check=info.id, host=host_name, subject=None, outcome="error",
                            severity=info.severity, message=message, reference=info.reference,
                            remedy=remedy_for_unevaluated(message), nodeid=item.nodeid)
            self.store.add(result)
            if host_name is not None and message.startswith(f"not evaluated: {host_name} is unreachable"):
                # One host down was 35 ERROR blocks that buried every finding in the terminal: its
                # checks did not run, which pytest calls a skip. The reports keep them as errors,
                # under the host's one cluster.reachable failure.
                report.outcome = "skipped"
                report.longrepr = (str(item.path), item.location[1] or 0,
                                   f"Skipped: {host_name} is unreachable (see cluster.reachable)")
                self._note(item, report, "error")
                return
            report.longrepr = render_failures([result])  # with its next step and source, as a check's own error
            report.preflight_status = "error"
            self._note(item, report, "error")
            return
        if report.when != "call":
            return
        if call.excinfo is not None and call.excinfo.errisinstance(pytest.skip.Exception):
            self.store.add(Result(check=info.id, host=host_name, subject=None, outcome="skipped",
                                  severity=info.severity, message=_exception_message(call),
                                  reference=info.reference, nodeid=item.nodeid))
            self._note(item, report, "skipped")
            return
        results = list(verdict.results) if verdict else []
        if call.excinfo is not None:
            results.append(Result(check=info.id, host=host_name, subject=None, outcome="error",
                                  severity=info.severity, reference=info.reference, nodeid=item.nodeid,
                                  message=one_line(f"the check itself crashed: {call.excinfo.typename}: "
                                                   f"{call.excinfo.value}"), remedy=CRASH_REMEDY))
        elif not results:
            results.append(Result(check=info.id, host=host_name, subject=None, outcome="error",
                                  severity=info.severity, reference=info.reference, nodeid=item.nodeid,
                                  message="the check recorded no result", remedy=CRASH_REMEDY))
        self.store.extend(results)
        blocking = [r for r in results if r.outcome in ("failed", "error")
                    or (r.outcome == "warning" and self.strict)]
        warned = [r for r in results if r.outcome == "warning"]
        text = render_failures([r for r in results if r.outcome not in ("passed", "skipped")])
        if blocking:
            report.outcome = "failed"
            report.longrepr = text
            report.preflight_status = "error" if all(r.outcome == "error" for r in blocking) else "failed"
        elif warned:
            report.preflight_status = "warned"
            report.sections.append(("preflight warning", text))
        elif all(r.outcome == "skipped" for r in results):
            report.outcome = "skipped"
            reason = "; ".join(sorted({r.message for r in results}))
            report.longrepr = (str(item.path), item.location[1], f"Skipped: {reason}")
        self._note(item, report, worst(r.outcome for r in results) or "passed")

    def _note(self, item, report, outcome: str) -> None:
        self.item_outcomes[item.nodeid] = outcome
        report.user_properties.append(self._property("preflight_outcome", outcome))

    def _property(self, name: str, value: str) -> tuple[str, str]:
        pair = (name, value)
        return self._properties.setdefault(pair, pair)

    # -- the end ----------------------------------------------------------------------
    def ready(self) -> bool:
        if self.interrupted or any(h.name not in self.facts for h in self.hosts):
            return False  # a host never checked is not ready
        if self.exitstatus not in (None, pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            return False  # an internal error or a usage error: the checks did not all run
        if (self.hosts or self.jobs) and not len(self.store):
            return False  # nothing was judged
        if self.unchecked_hosts():
            return False
        for r in self.store.all():
            if r.outcome in ("failed", "error") or (r.outcome == "warning" and self.strict):
                return False
        return True

    def unchecked_hosts(self) -> list[str]:
        """Reachable hosts the selection left without any check while others have some
        (``-k node-07``): the run says nothing about them, so the fleet is not READY.  A selection
        of cluster-wide checks only (``-k cluster.``) speaks for every host."""
        results = [r for r in self.store.all() if r.nodeid is not None]  # not the run's own records
        if any(r.host is None for r in results):
            return []
        own = {r.host for r in results}
        if not own:
            return []
        return [h.name for h in self.hosts
                if h.name not in own and self.facts.get(h.name) is not None and self.facts[h.name].reachable]

    def hosts_json(self) -> list[dict]:
        hosts = []
        for h in self.hosts:
            f = self.facts.get(h.name)
            hosts.append({
                "name": h.name, "address": h.address,
                "reachable": bool(f and f.reachable), "error": (visible(redact_secrets(f.error)) if f.error else f.error) if f
                else "not gathered",
                "error_kind": f.error_kind if f else None,  # hostkey, auth, timeout, lost ...
                "gather_s": round(f.gather_s, 3) if f else None,
                "groups": list(h.groups),
            })
        return hosts

    def document(self, exitstatus=None) -> dict:
        """preflight.json's content; ``results`` are Result objects, which write_json (and every
        report) reads as their JSON form."""
        hosts = self.hosts_json()
        results = self.store.all()
        return {
            "schema": 1,
            "tool": {"name": "ascend-preflight", "version": __version__},
            "inventory": self.inventory_path,
            "started_at": self.started_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "run_id": self.run_id,
            "interrupted": self.interrupted,
            "duration_s": round(time.monotonic() - self._t0, 3),
            "gather_s": round(self.gather_s, 3),
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
            "ready": self.ready(),
            "strict": self.strict,
            "exit_code": int(exitstatus) if exitstatus is not None else None,
            "summary": self.store.counts(),
            "hosts": hosts,
            "results": results,
            **({"jobs": self.jobs_json()} if self.jobs else {}),
        }

    def jobs_json(self) -> list[dict]:
        """The --job files and what their reader could not see (values only the run knows, flags a
        branch hides, "$@"): the checks that need such a value say so; these notes say it once."""
        return [{"path": j.path, "kind": j.kind, "notes": [visible(redact_secrets(n)) for n in j.notes]}
                for j in self.jobs]

    def finish(self, session, exitstatus) -> None:
        from .report.json_report import write_json
        from .report.matrix import fragment, write_matrix

        if self.is_xdist_worker:
            return  # the controller writes the reports from what the workers sent
        self._stopping = True  # a SIGTERM from here on lets the reports be written (_on_sigterm)
        self.exitstatus = exitstatus
        if session.config.option.collectonly or exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
            # Nothing was checked: no report, and the last real run's stays the latest.
            self.no_report = ("--collect-only" if session.config.option.collectonly
                              else "no check selected")
            return
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            self.interrupted = True
            for h in self.hosts:
                self.facts.setdefault(h.name, HostFacts(host=h.name, address=h.address, reachable=False,
                                                        error_kind="interrupted",
                                                        error="not reached: the run was interrupted"))
        if self.collection_order:
            # pytest-xdist: results came as the workers finished; "What to fix" (cut at 20 items in
            # the terminal), the matrix's columns and preflight.json follow the serial run's order.
            last = len(self.collection_order)
            self.store.sort(key=lambda r: self.collection_order.get(r.nodeid, last))
        if not self.interrupted:
            self.store.extend(unjudged_failures(self.hosts, self.facts, self.store.all()))
            if exitstatus == pytest.ExitCode.OK and not self.ready():
                # A finding recorded by the run itself, not by a test: the exit code follows the verdict.
                exitstatus = session.exitstatus = self.exitstatus = pytest.ExitCode.TESTS_FAILED
        doc = self.document(exitstatus)
        # pytest-html's page comes next and shows the same document and the same matrix: each is
        # built once, not twice (at 1000 hosts the document was ~50 MB, and rendering the matrix
        # briefly takes ~35 MB). Every check has run, so the gathered outputs and their parsed
        # forms go before that page is rendered.
        self.final_fragment = fragment(doc)
        self.final_document = doc
        path = self.run_dir
        try:
            os.makedirs(self.run_dir, exist_ok=True)
            path = os.path.join(self.run_dir, "preflight.json")
            write_json(path, doc)
            path = os.path.join(self.run_dir, "matrix.html")
            write_matrix(path, doc, self.final_fragment)
        except OSError as exc:
            self.report_failed(session, path, exc)
        for facts in self.facts.values():
            facts.release()

    def report_failed(self, session, path: str, exc: OSError, ours: bool = True) -> None:
        """A report that could not be written (a full disk): exit 3 and one line saying which, the
        verdict still printed; `latest` keeps pointing at the last complete run."""
        if self.report_error is None:
            self.report_error = f"{path}: {exc.strerror or exc}"
        self.reports_incomplete = self.reports_incomplete or ours  # one of the three: `latest` stays
        # The process's exit code only: the verdict (ready(), from self.exitstatus) stays what the
        # checks found.
        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR

    def plugin_report_failed(self, session, exc: OSError) -> None:
        """What another plugin failed to write at the session's end: pytest-html's page (a failed
        write names no file, ENOSPC) or another report (a failed open names it: --junitxml)."""
        html = getattr(session.config.option, "htmlpath", None)
        page = bool(html) and (exc.filename is None or os.path.abspath(exc.filename) == os.path.abspath(html))
        self.report_failed(session, str(html if page else exc.filename or "a report"), exc,
                           ours=page and html.startswith(self.run_dir))
        if page:
            with contextlib.suppress(OSError):
                if html.startswith(self.run_dir):
                    os.unlink(html)  # cut short: no half page left behind under this run's name
            # Nor its "Generated html report: ..." line below our "NOT WRITTEN".
            for plugin in session.config.pluginmanager.get_plugins():
                if type(plugin).__module__.startswith("pytest_html") and hasattr(plugin, "_report_path"):
                    session.config.pluginmanager.unregister(plugin)

    def point_latest(self) -> None:
        """report_dir/{preflight.json, matrix.html, matrix.css, preflight.html, latest} -> this run's files."""
        if self.is_xdist_worker or self.no_report or self.reports_incomplete:
            return
        for name in ("preflight.json", "matrix.html", "matrix.css", "preflight.html", "latest"):
            target = os.path.join("runs", self.run_id, name) if name != "latest" else os.path.join("runs", self.run_id)
            link = os.path.join(self.report_dir, name)
            if name != "latest" and not os.path.exists(os.path.join(self.report_dir, target)):
                # Not written this run (--html elsewhere): a link left by an earlier run would pass
                # that run's page off as this one's.
                html = getattr(self.config.option, "htmlpath", None)
                if os.path.islink(link) and not (html and os.path.abspath(html) == os.path.abspath(link)):
                    os.unlink(link)
                continue
            tmp = f"{link}.{os.getpid()}.tmp"
            try:
                if os.path.lexists(link) and not os.path.islink(link):
                    os.unlink(link)  # a plain file from an older layout
                os.symlink(target, tmp)
                os.replace(tmp, link)
            except OSError:
                if os.path.lexists(tmp):
                    os.unlink(tmp)

    def terminal_summary(self, tr) -> None:
        if self.no_report:
            tr.section("ascend-preflight")
            tr.write_line(f"no check ran ({self.no_report}): no report written; {self.report_dir} keeps the "
                          f"last run's")
            return
        counts = self.store.counts()
        down = [self.facts.get(h.name) for h in self.hosts if not (self.facts.get(h.name) and self.facts[h.name].reachable)]
        cut = sum(1 for f in down if f is not None and f.error_kind == "interrupted"
                  or f is None and self.interrupted)
        tr.section("ascend-preflight")
        if self.hosts or not self.jobs:
            # A host the interrupted run never tried is not "unreachable".
            tr.write_line(f"inventory {self.inventory_path}: {len(self.hosts)} host(s), "
                          f"{len(down) - cut} unreachable" + (f", {cut} not tried (interrupted)" if cut else "")
                          + f"; facts gathered in {self.gather_s:.1f}s")
        if self.jobs:
            where = "this machine (--job-local)" if self.job_local else "the nodes"
            tr.write_line(f"job(s): {', '.join(j.path for j in self.jobs)}; model and paths read on {where}")
            notes = [n for j in self.jobs for n in j.notes]
            for note in notes[:JOB_NOTES_SHOWN]:
                tr.write_line(f"  note: {one_line(note)}")
            if len(notes) > JOB_NOTES_SHOWN:
                tr.write_line(f"  ... and {len(notes) - JOB_NOTES_SHOWN} more notes in preflight.json (jobs)")
        if self.maxfail_ignored:
            tr.write_line(f"note: --maxfail {self.maxfail_ignored} (-x is 1; a pytest.ini's addopts may set it) was not "
                          f"applied: every check ran, as the report needs them all", yellow=True)
        # Every run ends with the findings grouped, each once for the nodes it is on, the node at
        # fault first: pytest's sections above are one per check and host (a small cluster's five
        # copies of one blocked port), and warnings, which fail no test, have no section at all.
        # It also holds the run's own findings (a host it could not reach while cluster.reachable
        # was not selected).
        self._what_to_fix(tr)
        # pytest's own line below counts test items (a check on a host); these are the findings in
        # the reports, one per check, host and subject (an NPU, a variable), which it cannot count.
        if any(counts.values()):
            tr.write_line("results: " + ", ".join(f"{n} {k}" for k, n in counts.items() if n)
                          + " (one per check, host and subject, as in the reports; pytest's line counts checks x hosts)")
        else:
            tr.write_line("results: none" + (" (interrupted before any check ran)" if self.interrupted else ""))
        verdict = "INTERRUPTED" if self.interrupted else "READY" if self.ready() else "NOT READY"
        if self.interrupted and self.terminated:
            verdict += " (SIGTERM)"
        if self.ready() and counts.get("skipped") == len(self.store):
            verdict += " (but no selected check applied here: every one was skipped)"
        unchecked = self.unchecked_hosts()
        if unchecked:
            verdict += (f" ({len(unchecked)} reachable host(s) had no check selected: {_cut(fold(unchecked))}; "
                        f"to check some hosts only, give an inventory of those hosts)")
        tr.write_line(f"verdict: {verdict}", bold=True, green=self.ready(), red=not self.ready())
        if self.report_error:
            tr.write_line(f"report: NOT WRITTEN, {self.report_error} (exit 3)" + (
                f"; the links in {self.report_dir} still point at the last complete run"
                if self.reports_incomplete else ""), red=True, bold=True)
            if self.reports_incomplete:
                return
        html = getattr(self.config.option, "htmlpath", None)
        for name in ("preflight.html", "matrix.html", "preflight.json"):
            if name == "preflight.html" and html != os.path.join(self.run_dir, name):
                if html:
                    tr.write_line(f"report: {html} (--html)")
                continue
            tr.write_line(f"report: {os.path.join(self.report_dir, name)} (this run: {self.run_dir})")

    def _what_to_fix(self, tr) -> None:
        """matrix.html's "What to fix", its first items: at fleet size pytest's section per check
        and host (thousands of them, one finding repeated per node) gives way to this list, one
        item per finding and node set."""
        from .report.matrix import fix_items

        items = fix_items({"hosts": self.hosts_json(), "results": self.store.all()})
        if not items:
            return
        warned = sum(1 for item in items if item.outcome == "warning")
        aside = (f"; {warned} warning(s) not blocking the verdict (--preflight-strict or --strict makes them so)"
                 if warned and not self.strict else "")
        tr.write_line(f"What to fix ({len(items)} item(s), failures first, each finding once for the nodes it is "
                      f"on; all of them in matrix.html{aside}):", bold=True)
        for n, item in enumerate(items[:MAX_FINDINGS_SHOWN], 1):
            label = item.outcome.upper() + (" (not blocking)" if item.outcome == "warning" and not self.strict else "")
            colour = {"warning": {"yellow": True}}.get(item.outcome, {"red": True})
            tr.write_line(f"{n:>3}. {label} [{item.check}] on {_cut(item.where)}: {_cut(item.message)}", **colour)
            if item.remedy:
                tr.write_line(f"     remedy: {_cut(item.remedy)}")
            if item.reference:
                tr.write_line(f"     source: {_cut(item.reference)}")
        if len(items) > MAX_FINDINGS_SHOWN:
            tr.write_line(f"  ... and {len(items) - MAX_FINDINGS_SHOWN} more in matrix.html and preflight.json")

    def close(self) -> None:
        self._restore_sigterm()
        if self.gatherer is not None:
            self.gatherer.close()


def _check_controller_files(inventory_path: str, hosts) -> None:
    """The inventory's identity_file and ssh_config are read on this machine: one that is not
    there is a mistake in the inventory (exit 4, its line and key), not every node failing to
    log in with a remedy about the nodes' sshd."""
    for key in ("identity_file", "ssh_config"):
        missing: dict[str, list] = {}
        for h in hosts:
            path = getattr(h, key)
            # ssh_config may be /dev/null (ssh -F /dev/null: no configuration at all).
            if not path or h.connection != "ssh":
                continue
            there = os.path.exists(path) and not os.path.isdir(path) if key == "ssh_config" else os.path.isfile(path)
            if not there:
                missing.setdefault(path, []).append(h)
        for path, which in missing.items():
            names = fold(h.name for h in which)
            why = "is not a file" if os.path.exists(path) else "does not exist on this machine"
            line, written = _where_set(inventory_path, key, path) or (which[0].line, key)
            raise InventoryError(inventory_path, line, written,
                                 f"{path} {why} (host{'s' if len(which) > 1 else ''} {names})")


_KEY_SPELLINGS = {"identity_file": ("identity_file", "ansible_ssh_private_key_file", "ansible_private_key_file"),
                  "ssh_config": ("ssh_config",)}


def _where_set(inventory_path: str, key: str, path: str) -> tuple[int, str] | None:
    """(line, key as written) where the inventory gives ``path`` for ``key``: a value set in
    `defaults:` or a group is named there, not at the first host that inherits it."""
    import re

    spellings = "|".join(_KEY_SPELLINGS[key])
    pattern = re.compile(rf"^\s*(?:-\s*)?(?:\{{\s*)?.*?\b({spellings})\s*[:=]\s*(['\"]?)([^'\",}}\s]+)\2")
    try:
        with open(inventory_path, encoding="utf-8", errors="replace") as fh:
            for number, text in enumerate(fh, 1):
                if text.lstrip().startswith(("#", ";")):
                    continue  # a commented-out line naming the same file
                m = pattern.match(text)
                if m and os.path.abspath(os.path.expanduser(m.group(3))) == os.path.abspath(path):
                    return number, m.group(1)
    except OSError:
        return None
    return None


def _check_compat_files(paths) -> None:
    """--compat files read now: a missing or broken table is a usage error, not an error on every
    host's versions.stack after the whole cluster was gathered."""
    if not paths:
        return
    from .compat import CompatError, load

    try:
        load(paths)
    except CompatError as exc:
        raise pytest.UsageError(f"--compat {exc}") from None


def _check_output_paths(report_dir: str, facts_out: str | None) -> None:
    """Where the run will write, checked before any host is contacted: a bad path is a usage
    error (exit 4) now, not a traceback after the whole cluster was gathered."""
    if os.path.exists(report_dir) and not os.path.isdir(report_dir):
        raise pytest.UsageError(f"--report-dir {report_dir}: exists and is not a directory")
    try:
        os.makedirs(report_dir, exist_ok=True)
    except OSError as exc:
        raise pytest.UsageError(f"--report-dir {report_dir}: cannot create it ({exc.strerror or exc})") from None
    if not os.access(report_dir, os.W_OK | os.X_OK):
        raise pytest.UsageError(f"--report-dir {report_dir}: not writable")
    why = unwritable(facts_out) if facts_out else None
    if why:
        raise pytest.UsageError(f"--facts-out {facts_out}: {why}")


def _load_jobs(paths, kind, local: bool, has_hosts: bool) -> list:
    """The --job files, read; a file that cannot be read is one usage-error line (file:line)."""
    if not paths:
        return []
    from .job import JobError, load_jobs

    if not has_hosts and not local:
        raise pytest.UsageError("--job reads the model directory on the nodes of --inventory; without an "
                                "inventory add --job-local to read it on this machine")
    try:
        return load_jobs(paths, kind)
    except JobError as exc:
        raise pytest.UsageError(str(exc)) from None


def _exception_message(call) -> str:
    if call.excinfo is None:
        return ""
    value = call.excinfo.value
    msg = getattr(value, "msg", None)
    return str(msg if msg is not None else value)


JOB_NOTES_SHOWN = 8  # in the terminal; all of them in preflight.json and matrix.html

# One check can find hundreds of problems at fleet size (a ping matrix, a name on every node):
# pytest's report of that item (terminal, preflight.html) shows the first ones; every result is
# in preflight.json and matrix.html.
MAX_FINDINGS_SHOWN = 20


def brief(results: list[Result], limit: int = MAX_FINDINGS_SHOWN, width: int = 240) -> list[str]:
    """One line per distinct finding, the hosts that share it folded into a node set
    (``WARNING [npu.idle] node-[02-05] (4 hosts) npu3: ...``); the rest are in the reports."""
    groups: dict[tuple, list[str]] = {}
    for r in results:
        message = r.message
        if r.host and message.startswith(f"{r.host}: "):
            message = message[len(r.host) + 2:]
        elif r.host and message.startswith(f"{r.host} "):
            message = message[len(r.host) + 1:]
        # "node-02 npu3: ..." keeps its subject after the hosts; "node-03: cannot log in" its colon.
        sep = " " if r.subject and message.startswith(f"{r.subject}: ") else ": "
        groups.setdefault((r.outcome, r.check, sep, message), []).append(r.host)
    lines = []
    for (outcome, check, sep, message), hosts in list(groups.items())[:limit]:
        named = list(dict.fromkeys(h for h in hosts if h))
        where = (fold(named) + (f" ({len(named)} hosts)" if len(named) > 1 else "")) if named else "cluster"
        line = f"{outcome.upper()} [{check}] {where}{sep}{message}"
        lines.append(line if len(line) <= width else line[:width - 3] + "...")
    if len(groups) > limit:
        lines.append(f"... and {len(groups) - limit} more, in matrix.html and preflight.json")
    return lines


def _cut(text: str, width: int = 400) -> str:
    """One line of remote text for the terminal, cut (the report has it whole)."""
    line = one_line(text)
    return line if len(line) <= width else line[:width - 1] + "…"


def render_failures(results: list[Result], limit: int = MAX_FINDINGS_SHOWN) -> str:
    lines = []
    if len(results) > limit:
        lines.append(f"{len(results)} findings; the first {limit} follow, all are in preflight.json and matrix.html")
        results = results[:limit]
    for r in results:
        label = {"failed": "FAILED", "warning": "WARNING", "error": "ERROR"}.get(r.outcome, r.outcome.upper())
        lines.append(f"{label} [{r.check}] {r.message}")
        if r.outcome == "error" and (r.remedy == REACHABLE_POINTER or not r.remedy and "is unreachable" in r.message):
            # The check's own FAQ item is not why: the host was not reached.
            lines.append(f"    remedy: {REACHABLE_POINTER}")
            continue
        if r.remedy:
            lines.append(f"    remedy: {r.remedy}")
        if r.reference:
            lines.append(f"    source: {r.reference}")
    return "\n".join(lines)


class _Progress:
    """Hosts done / total and the slowest still running, at most once a second."""

    def __init__(self, config, what: str):
        self.tr = config.pluginmanager.get_plugin("terminalreporter")
        self.what = what
        self.last = 0.0
        self.t0 = time.monotonic()

    def __call__(self, done: int, total: int, running: dict) -> None:
        now = time.monotonic()
        if self.tr is None or now - self.last < 1.0 or not running:
            return
        self.last = now
        slowest = sorted(running.items(), key=lambda kv: -kv[1])[:3]
        slow = ", ".join(f"{name} ({secs:.1f}s)" for name, secs in slowest)
        self.tr.write_line(f"{self.what}: {done}/{total} hosts done; slowest still running: {slow}")

    def done(self, facts: dict[str, HostFacts]) -> None:
        if self.tr is None:
            return
        down = sum(1 for f in facts.values() if not f.reachable)
        self.tr.write_line(f"{self.what}: {len(facts)}/{len(facts)} hosts done in "
                           f"{time.monotonic() - self.t0:.1f}s ({down} unreachable)")


# -- --facts-out / --facts-in ------------------------------------------------------------


def _host_to_json(h: Host) -> dict:
    # Every variable, as the node's own environment is saved: the job's env, tags, and an Ansible
    # inventory's own (ansible_ssh_pass, ansible_become_password) go to a file meant to be sent.
    host_vars = _redacted(_plain(h.vars))
    return {"name": h.name, "address": h.address, "connection": h.connection, "user": h.user, "port": h.port,
            "identity_file": h.identity_file, "jump_host": h.jump_host, "known_hosts": h.known_hosts,
            "ssh_config": h.ssh_config, "groups": list(h.groups), "vars": host_vars, "line": h.line}


def _redacted(value):
    if isinstance(value, dict):
        return {k: "<redacted>" if is_secret_name(str(k)) and v is not None else _redacted(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    return redact_secrets(value) if isinstance(value, str) else value


def _plain(value):
    if isinstance(value, dict) or hasattr(value, "items"):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _save_facts(path: str, hosts, inventory_path: str, facts: dict[str, HostFacts]) -> None:
    doc = {"schema": 1, "tool": {"name": "ascend-preflight", "version": __version__},
           "inventory": {"path": inventory_path, "hosts": [_host_to_json(h) for h in hosts]},
           "hosts": [facts[h.name].to_json() for h in hosts if h.name in facts]}
    # 0600: it holds every node's outputs; a YAML date in Ansible vars is written as text.
    write_atomically(path, lambda fh: json.dump(doc, fh, indent=1, default=str), 0o600)


def _read_facts_file(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except OSError as exc:
        raise pytest.UsageError(f"{path}: cannot read facts file: {exc.strerror}") from None
    except ValueError as exc:
        raise pytest.UsageError(f"{path}: not a facts file written by --facts-out ({exc})") from None
    if not isinstance(doc, dict) or doc.get("schema") != 1 or not isinstance(doc.get("hosts"), list):
        raise pytest.UsageError(f"{path}: not a facts file written by --facts-out (schema 1)")
    if "results" in doc and "ready" in doc:
        raise pytest.UsageError(f"{path}: this is a run's report (preflight.json), not a facts file: capture "
                                f"facts with --facts-out FILE, then replay them with --facts-in FILE")
    inventory = doc.get("inventory") or {}
    if not isinstance(inventory, dict):
        raise pytest.UsageError(f"{path}: inventory is not a mapping: not a facts file written by --facts-out")
    entries = [("hosts", i, d, ("host",)) for i, d in enumerate(doc["hosts"])]
    entries += [("inventory.hosts", i, d, ("name", "address")) for i, d in enumerate(inventory.get("hosts") or [])]
    for where, i, entry, keys in entries:
        missing = [k for k in keys if not isinstance(entry, dict) or not isinstance(entry.get(k), str)]
        if missing:
            raise pytest.UsageError(f"{path}: {where}[{i}] has no {', '.join(missing)}: not a facts file written "
                                    f"by --facts-out")
        # The names become pytest ids, report rows and shell arguments, as an inventory's do.
        for key in keys:
            try:
                check_host(entry[key])
            except ValueError as exc:
                raise pytest.UsageError(f"{path}: {where}[{i}].{key}: {exc}") from None
        problem = _facts_entry_problem(entry, where)
        if problem:
            raise pytest.UsageError(f"{path}: {where}[{i}].{problem}: not a facts file written by --facts-out")
    return doc


# The shapes the replay reads (HostFacts.from_json, _hosts_from_facts_file): a hand-edited file
# gets one usage error naming the place, not an INTERNALERROR or every check "crashed".
_OUTPUT_TYPES = {"stdout": (str,), "stderr": (str,), "rc": (int, type(None)), "truncated": (bool,),
                 "skipped": (str, type(None)), "elapsed_s": (int, float)}
# A host's own fields: a wrong type was a traceback once every check had run and no report
# ("error": 5, "gather_s": "1"), or every check of the host crashed ("command_timeout": "10").
_HOST_TYPES = {"address": (str,), "reachable": (bool,), "error": (str, type(None)),
               "error_kind": (str, type(None)), "gather_s": (int, float), "command_timeout": (int, float, type(None))}
_INVENTORY_TYPES = {"connection": (str,), "user": (str, type(None)), "port": (int, type(None)),
                    "identity_file": (str, type(None)), "jump_host": (str, type(None)),
                    "known_hosts": (str, type(None)), "ssh_config": (str, type(None)), "line": (int, type(None))}


def _facts_entry_problem(entry: dict, where: str) -> str | None:
    types = _HOST_TYPES if where == "hosts" else _INVENTORY_TYPES
    for field, wanted in types.items():
        if field in entry and not isinstance(entry[field], wanted):
            return f"{field} has the wrong type"
    if where == "hosts":
        if entry.get("reachable") is False and not entry.get("error"):
            return "error is empty: an unreachable host needs the reason it was not reached"
        raw = entry.get("raw", {})
        if not isinstance(raw, dict):
            return "raw is not a mapping"
        for key, output in raw.items():
            if not isinstance(output, dict):
                return f"raw[{key!r}] is not a mapping"
            for field, types in _OUTPUT_TYPES.items():
                if field in output and not isinstance(output[field], types):
                    return f"raw[{key!r}].{field} has the wrong type"
        return None
    groups, vars_ = entry.get("groups", []), entry.get("vars", {})
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        return "groups is not a list of names"
    if not isinstance(vars_, dict):
        return "vars is not a mapping"
    if entry.get("connection", "ssh") not in ("ssh", "local"):
        return "connection is not ssh or local"
    return None


def _load_facts(path: str, outputs: SharedOutputs | None = None) -> dict[str, HostFacts]:
    doc = _read_facts_file(path)
    facts = {d["host"]: HostFacts.from_json(d, outputs) for d in doc["hosts"]}
    for f in facts.values():
        f.replayed_from = path
    return facts


def _check_replay_hosts(path: str, hosts) -> None:
    """--inventory with --facts-in: an inventory none of whose hosts the file holds is the wrong
    pair of files, not a cluster of unreachable nodes."""
    doc = _read_facts_file(path)
    held = [d.get("host") for d in doc.get("hosts", [])]
    if hosts and not set(held) & {h.name for h in hosts}:
        raise pytest.UsageError(f"--facts-in {path} holds none of the inventory's {len(hosts)} host(s) "
                                f"({fold([h.name for h in hosts])}); it holds {fold([h for h in held if h]) or 'none'}. "
                                f"Give the inventory the facts were captured with, or no --inventory (the file "
                                f"holds its own).")


def _hosts_from_facts_file(path: str):
    doc = _read_facts_file(path)
    inv = doc.get("inventory") or {}
    hosts = []
    for d in inv.get("hosts", []):
        hosts.append(Host(name=d["name"], address=d["address"], connection=d.get("connection", "ssh"),
                          user=d.get("user"), port=d.get("port"), identity_file=d.get("identity_file"),
                          jump_host=d.get("jump_host"), known_hosts=d.get("known_hosts"),
                          ssh_config=d.get("ssh_config"), groups=tuple(d.get("groups", ())),
                          vars=d.get("vars", {}), line=d.get("line")))
    if not hosts:
        raise pytest.UsageError(f"{path}: the facts file lists no hosts")
    return hosts, inv.get("path", path)

