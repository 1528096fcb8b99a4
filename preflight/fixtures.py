"""The fixtures a check asks for: ``host``, ``facts``, ``cluster``, ``gathered``, ``verdict``,
``jobs``, ``job_facts``.

Not registered as plugin fixtures: :func:`preflight.plugin.pytest_sessionstart` registers them
so that they win over other plugins' fixtures of the same names (pytest-testinfra has a ``host``).
"""

from __future__ import annotations

import pytest

from .check import Verdict, info_of
from .facts import FACTS, FactUnavailable
from .results import one_line
from .run import RUN_KEY, PreflightRun

VERDICT_KEY = pytest.StashKey[Verdict]()


@pytest.fixture
def host(request):
    """The inventory host this check runs on (:class:`preflight.inventory.Host`)."""
    if not hasattr(request, "param"):
        pytest.fail("the `host` fixture needs --inventory", pytrace=False)
    return request.param


def _require_run(request) -> PreflightRun:
    run = request.config.stash.get(RUN_KEY, None)
    if run is None:
        pytest.fail("ascend-preflight fixtures need --inventory (or --facts-in)", pytrace=False)
    return run


@pytest.fixture
def facts(request, host):
    """This host's gathered facts; the check errors (not fails) when they cannot be read."""
    run = _require_run(request)
    host_facts = run.facts_for(host.name)
    if host_facts is None or not host_facts.reachable:
        why = host_facts.error if host_facts else "not gathered"
        # The reason can quote what the node's sshd said (cut short where facts are made): one line, escaped.
        pytest.fail(f"not evaluated: {host.name} is unreachable ({one_line(why)})", pytrace=False)
    info = info_of(request.node)
    problem = None
    for need in (info.needs if info else ()):
        spec = FACTS.get(need.rstrip("?"))
        if need.endswith("?") or spec is None or spec.per_device or spec.phase != 1:
            continue  # optional, per-device and phase-two facts are judged by the check itself
        try:
            host_facts.get(need)
        except FactUnavailable as exc:
            problem = str(exc)
            break
    if problem:
        pytest.fail(f"not evaluated on {host.name}: {one_line(problem)}", pytrace=False)
    return host_facts


@pytest.fixture
def cluster(request):
    """Every host's facts, for checks that compare nodes (:class:`preflight.run.Cluster`)."""
    return _require_run(request).cluster()


@pytest.fixture
def jobs(request):
    """The --job files, read (:class:`preflight.job.Job`)."""
    return list(_require_run(request).jobs)


@pytest.fixture
def job_facts(request):
    """Where job checks read the model directory and paths (:class:`preflight.job.facts.JobFacts`)."""
    job = request.getfixturevalue("job") if "job" in request.fixturenames else None
    return _require_run(request).job_facts(job)


@pytest.fixture
def gathered(request, host):
    """This host's gathering status, also for unreachable hosts (cluster.reachable)."""
    run = _require_run(request)
    return run.facts_for(host.name)


@pytest.fixture
def verdict(request):
    """Where a check records one result per subject."""
    info = info_of(request.node)
    if info is None:
        pytest.fail("the `verdict` fixture is for functions decorated with @check", pytrace=False)
    host = request.node.callspec.params.get("host") if hasattr(request.node, "callspec") else None
    v = Verdict(info, host.name if host is not None else None, nodeid=request.node.nodeid)
    request.node.stash[VERDICT_KEY] = v
    return v
