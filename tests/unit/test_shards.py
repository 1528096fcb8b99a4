"""Gathering spread over forked shards (preflight.shards), with local hosts: real forks, real
subprocesses, the same Gatherer in each shard."""

from __future__ import annotations

import os
import signal
import time

import pytest

from preflight.facts import FactSpec
from preflight.gather import GatherSettings
from preflight.inventory import Host
from preflight.shards import ShardedGatherer, shard_hosts
from preflight.transport import TransportError

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="shards are forked processes")


def _local(name: str) -> Host:
    return Host(name=name, address=name, connection="local")


def _spec(command: str) -> FactSpec:
    return FactSpec(name="t.out", command=command, parse=str)


def _children() -> set[int]:
    me = os.getpid()
    found = set()
    for task in os.listdir(f"/proc/{me}/task"):
        try:
            with open(f"/proc/{me}/task/{task}/children") as fh:
                found.update(int(p) for p in fh.read().split())
        except FileNotFoundError:  # the thread ended since listdir
            pass
    return found


@pytest.fixture
def gatherer():
    before = _children()
    g = ShardedGatherer(GatherSettings(fanout=4, host_timeout=30, command_timeout=10), processes=2)
    yield g
    g.close()
    assert _children() <= before, "a shard outlived close()"


# -- splitting -------------------------------------------------------------------------------------


def test_shards_are_even_and_keep_every_host_once():
    hosts = [Host(name=f"n{i:02d}", address=f"n{i:02d}") for i in range(10)]
    shards = shard_hosts(hosts, 3)
    assert sorted(len(s) for s in shards) == [3, 3, 4]
    assert sorted(h.name for s in shards for h in s) == [h.name for h in hosts]


def test_hosts_behind_one_jump_host_stay_in_one_shard():
    behind_a = [Host(name=f"a{i}", address=f"a{i}", jump_host="bastion-a") for i in range(5)]
    behind_b = [Host(name=f"b{i}", address=f"b{i}", jump_host="bastion-b") for i in range(3)]
    direct = [Host(name=f"d{i}", address=f"d{i}") for i in range(4)]
    shards = shard_hosts(behind_b + direct + behind_a, 3)
    by_host = {h.name: i for i, s in enumerate(shards) for h in s}
    assert len({by_host[h.name] for h in behind_a}) == 1
    assert len({by_host[h.name] for h in behind_b}) == 1
    assert by_host["a0"] != by_host["b0"]
    assert sorted(len(s) for s in shards) == [3, 4, 5]  # the bastion group of 5 cannot be split


def test_never_more_shards_than_hosts():
    assert len(shard_hosts([_local("one")], 4)) == 1
    assert shard_hosts([], 4) == []


# -- gathering -------------------------------------------------------------------------------------


def test_every_host_is_gathered_in_a_shard_other_than_this_process(gatherer):
    hosts = [_local(f"h{i}") for i in range(5)]
    facts = gatherer.gather(hosts, [_spec("echo $$ $PF_WHO")], params_for=lambda h: {"PF_WHO": h.name})
    assert sorted(facts) == [h.name for h in hosts]
    pids = set()
    for h in hosts:
        assert facts[h.name].reachable, facts[h.name].error
        pid, who = facts[h.name].raw["t.out"].stdout.split()
        assert who == h.name  # each host's own probe parameters
        pids.add(pid)
    # The probes' shells were started by the shards, not by this process.
    shard_pids = {s.pid for s in gatherer.shards}
    assert len(shard_pids) == 2 and os.getpid() not in shard_pids


def test_progress_is_reported_while_the_shards_work(gatherer):
    ticks = []
    hosts = [_local(f"h{i}") for i in range(4)]
    gatherer.gather(hosts, [_spec("sleep 1.2; echo done")], progress=lambda d, t, r: ticks.append((d, t, dict(r))))
    assert ticks and all(t == 4 for _, t, _ in ticks)
    assert any(running for _, _, running in ticks), "the slow hosts were never named while running"


def test_commands_and_processes_run_through_the_shard_that_holds_the_host(gatherer):
    hosts = [_local("a"), _local("b")]
    gatherer.gather(hosts, [_spec("true")])
    result = gatherer.transport(hosts[1]).run("echo out; echo err >&2; exit 3", 10, 1 << 20)
    assert (result.stdout, result.stderr, result.exit_code) == (b"out\n", b"err\n", 3)
    capped = gatherer.transport(hosts[0]).run("head -c 5000 /dev/zero", 10, 100)
    assert len(capped.stdout) == 100 and capped.truncated
    late = gatherer.transport(hosts[0]).run("sleep 5", 0.5, 100)
    assert late.exit_code is None and late.ended == "deadline"

    process = gatherer.transport(hosts[0]).start("echo READY; read -r _; echo never")
    assert process.readline(timeout=10) == "READY"
    assert process.readline(timeout=0.3) is None  # waiting on its stdin
    process.close()


def test_a_transport_error_in_a_shard_is_raised_here_with_its_kind(gatherer):
    hosts = [_local("a"), Host(name="nowhere.invalid", address="nowhere.invalid", port=22)]
    facts = gatherer.gather(hosts, [_spec("true")])
    assert not facts["nowhere.invalid"].reachable
    with pytest.raises(TransportError) as caught:
        gatherer.transport(hosts[1]).run("true", 5, 100)
    assert caught.value.kind == facts["nowhere.invalid"].error_kind == "unreachable"


def test_a_shard_that_dies_costs_its_hosts_one_precise_error_and_nothing_else(gatherer):
    hosts = [_local(f"h{i}") for i in range(4)]
    # h1's and h3's probes (one shard's) wait long enough for that shard to be killed.
    command = 'case $PF_WHO in h1|h3) sleep 30;; esac; echo done'
    victim = {}

    def progress(done, total, running):
        if not victim and {"h1", "h3"} <= set(running):
            shard = next(s for s in gatherer.shards if "h1" in {h.name for h in s.hosts})
            victim["pid"] = shard.pid
            victim["hosts"] = {h.name for h in shard.hosts}
            os.kill(shard.pid, signal.SIGKILL)

    t0 = time.monotonic()
    facts = gatherer.gather(hosts, [_spec(command)], progress=progress,
                            params_for=lambda h: {"PF_WHO": h.name})
    assert time.monotonic() - t0 < 25, "waited for the dead shard's probes"
    assert sorted(facts) == [h.name for h in hosts]
    for name, one in facts.items():
        if name in victim["hosts"]:
            assert not one.reachable and one.error_kind == "lost"
            assert "gathering process" in one.error and "ended unexpectedly" in one.error
        else:
            assert one.reachable and "t.out" in one.raw
    dead = next(h for h in hosts if h.name in victim["hosts"])
    with pytest.raises(TransportError) as caught:
        gatherer.transport(dead).run("true", 5, 100)
    assert caught.value.kind == "lost"
    alive = next(h for h in hosts if h.name not in victim["hosts"])
    assert gatherer.transport(alive).run("echo ok", 5, 100).stdout == b"ok\n"


def test_ctrl_c_keeps_what_the_shards_finished(gatherer):
    hosts = [_local(f"h{i}") for i in range(4)]

    def progress(done, total, running):
        if done >= 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        gatherer.gather(hosts, [_spec('case $PF_WHO in h0|h1) echo quick;; *) sleep 30;; esac')],
                        progress=progress, params_for=lambda h: {"PF_WHO": h.name})
    assert set(gatherer.partial) == {"h0", "h1"}
    assert all(f.raw["t.out"].stdout == "quick\n" for f in gatherer.partial.values())


def test_a_probe_whose_output_passes_the_stream_bound_says_so():
    """Five commands printing ~0.9 MB each passed the stream's 5 MiB bound: the host read "the probe
    script stopped early (exit code 0)" and the last command "did not finish before the deadline"."""
    from preflight.facts import FactSpec
    from preflight.gather import Gatherer

    specs = [FactSpec(f"big{i}", "head -c 900000 /dev/urandom", lambda text: text) for i in range(5)]
    g = Gatherer(GatherSettings(fanout=1, host_timeout=60, command_timeout=20))
    try:
        facts = g.gather([Host(name="here", address="localhost", connection="local")], specs)["here"]
    finally:
        g.close()
    assert facts.error.startswith("the probe's output passed its 5 MiB bound"), facts.error
    assert facts.raw["big0"].rc == 0 and len(facts.raw["big0"].stdout) > 800000  # what came before is kept


def test_a_shard_whose_gathering_raises_names_the_error_for_its_hosts_and_does_not_hang(gatherer):
    """An exception other than a lost link in a shard's phase one ended its thread without a word:
    the controller waited for that shard for ever."""
    class Broken(FactSpec):
        def probe_command(self):
            raise RuntimeError("a bug in building the probe")

    hosts = [_local(f"n{i}") for i in range(4)]
    t0 = time.monotonic()
    facts = gatherer.gather(hosts, [Broken(name="t.out", command="true", parse=str)])
    assert time.monotonic() - t0 < 20
    for one in facts.values():
        assert not one.reachable and "failed: RuntimeError: a bug in building the probe" in one.error, one.error
