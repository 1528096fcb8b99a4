"""The job's model directories and paths as facts: read on the nodes by the probe (the
commands read ``$PF_JOB_MODEL_DIRS`` / ``$PF_JOB_PATHS``, exported and quoted by the
probe), or on the controller with ``--job-local``; :class:`JobFacts` is what job checks see."""

from __future__ import annotations

import os

from ..facts import FactSpec, FactUnavailable, HostFacts, register
from ..probe import CommandOutput
from .model import (MODEL_COMMAND, PATHS_COMMAND, ModelDir, PathStat, parse_model_bundle, parse_paths,
                    read_model_dirs_local, read_paths_local)

register(
    FactSpec("job.model", MODEL_COMMAND, parse_model_bundle,
             display="list the job's model directories; read config.json, the index and safetensors headers"),
    FactSpec("job.paths", PATHS_COMMAND, parse_paths, display="test -e on the job's model and data paths"),
)

LOCAL = "this machine"


def remote_dirs(jobs) -> list[str]:
    return sorted({a.value for j in jobs for _, a in j.model_dirs() if os.path.isabs(a.value)})


def remote_paths(jobs) -> list[str]:
    return sorted({a.value for j in jobs for a in j.path_args() if os.path.isabs(a.value)})


def job_params(jobs) -> dict[str, str]:
    """``PF_JOB_*`` probe parameters: the absolute paths the nodes look up (one per line)."""
    params = {}
    dirs, paths = remote_dirs(jobs), remote_paths(jobs)
    if dirs:
        params["PF_JOB_MODEL_DIRS"] = "\n".join(d for d in dirs if "\n" not in d)
    if paths:
        params["PF_JOB_PATHS"] = "\n".join(p for p in paths if "\n" not in p)
    return params


def local_hostfacts(jobs) -> HostFacts:
    """The same facts, read on the controller: relative paths from the jobs' launch directory
    (Job.launch_dir, one for all the jobs given: PreflightRun reads each directory's jobs apart),
    else from the current directory."""
    base = jobs[0].launch_dir if jobs else None
    dirs = sorted({a.value for j in jobs for _, a in j.model_dirs()})
    paths = sorted({a.value for j in jobs for a in j.path_args()})
    raw = {}
    for name, reader, items in (("job.model", read_model_dirs_local, dirs), ("job.paths", read_paths_local, paths)):
        try:
            raw[name] = CommandOutput(stdout=reader(items, base), stderr="", rc=0)
        except OSError as exc:
            raw[name] = CommandOutput(stdout="", stderr=str(exc), rc=1)
    return HostFacts(host=LOCAL, address="localhost", raw=raw)


class JobFacts:
    """Where job checks read the model directory and the job's paths from."""

    def __init__(self, sources, hosts=(), local: bool = False, gathered=None):
        self.sources = list(sources)  # [(name, HostFacts)]: the controller, or the reachable nodes
        self.hosts = tuple(hosts)  # the inventory hosts (may be empty with --job-local)
        self.local = local
        self.gathered = dict(gathered or {})  # every host's facts (for NPU counts)

    def model(self, path: str) -> tuple[ModelDir | None, str | None, str | None]:
        """(the directory as read, where it was read, why it could not be) for a model dir."""
        if not self.local and not os.path.isabs(path):
            return None, None, (f"{path} is a relative path: the nodes cannot tell where the job runs from "
                                f"(use an absolute path, or --job-local from the launch directory)")
        problems = []
        for name, facts in self.sources:
            try:
                dirs = facts.get("job.model")
            except FactUnavailable as exc:
                problems.append(f"{name}: {exc}")
                continue
            d = dirs.get(path)
            if d is None:
                problems.append(f"{name}: not read")
            elif d.problem:
                problems.append(f"{name}: {_PROBLEMS.get(d.problem, d.problem)}")
            else:
                return d, name, None
        if not self.sources:
            return None, None, "no node could be read"
        return None, None, "; ".join(problems)

    def paths(self) -> dict[str, dict[str, PathStat] | FactUnavailable]:
        out = {}
        for name, facts in self.sources:
            try:
                out[name] = facts.get("job.paths")
            except FactUnavailable as exc:
                out[name] = exc
        return out

    def npus(self) -> dict[str, int | None]:
        """NPUs per inventory host: ``npus_per_node`` of the inventory, else the /dev/davinciN found."""
        gathered = self.gathered
        out = {}
        for h in self.hosts:
            n = h.vars.get("npus_per_node")
            if n is None and h.name in gathered:
                n = len(gathered[h.name].devices()) or None
            out[h.name] = int(n) if n is not None else None
        return out


_PROBLEMS = {"missing": "does not exist", "notdir": "is not a directory", "unreadable": "is not readable"}
