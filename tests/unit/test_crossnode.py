"""Cross-node planning and checks on fact sets: the ping schedule, record parsers, and each
cluster check on passing and failing probe records."""

import dataclasses
import itertools
import json
import os
import shlex
import shutil
import subprocess

import pytest

from preflight.activeprobe import hccl_port_settings_invalid, launcher_targets
from preflight.checks import network
from preflight.facts import HostFacts, SharedOutputs
from preflight.parsers import ParseError
from preflight.parsers.crossnode import (address_order, parse_clock_offset, parse_launcher_ssh, parse_ping_matrix,
                                         parse_resolve, parse_storage, parse_tcp_probes)
from preflight.pingplan import ping_rounds, tournament
from tests.factsets import cluster_of, healthy_raw, make_facts, make_host, out, run_check


# -- the ping schedule -------------------------------------------------------------------------

@pytest.mark.parametrize("n", range(2, 17))
def test_tournament_covers_every_pair_once_in_disjoint_rounds(n):
    names = [f"node{i:02d}" for i in range(n)]
    rounds = tournament(names)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    seen = [frozenset(p) for r in rounds for p in r]
    assert sorted(map(sorted, seen)) == sorted(map(sorted, map(frozenset, itertools.combinations(names, 2))))
    for r in rounds:
        members = [x for p in r for x in p]
        assert len(members) == len(set(members))  # nobody twice in a round


def test_ping_modes():
    names = ["a", "b", "c", "d"]
    assert ping_rounds(names, "none") == []
    assert ping_rounds(names, "ring") == [[("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")]]
    directed = [p for r in ping_rounds(names, "all") for p in r]
    assert sorted(directed) == sorted(itertools.permutations(names, 2))
    for r in ping_rounds(names, "all"):  # each node pings at most once per round
        assert len({s for s, _ in r}) == len(r)
    assert ping_rounds(["a"], "all") == []
    with pytest.raises(ValueError):
        ping_rounds(names, "star")


# -- record parsers ----------------------------------------------------------------------------

def test_resolve_one_getent_for_every_name():
    text = ("query node-01\nquery node-02\nquery node-03\nquery Node-04\nquery 10.0.0.9\n"
            "10.0.0.1      node-01.cluster node-01\n"  # canonical name first, the inventory name an alias
            "10.0.0.4      node-04\n"                   # node-02 and node-03 did not resolve; case is ignored
            "10.0.0.9      gateway\n")                  # a name that is an address: getent prints its reverse
    assert parse_resolve(text) == {"node-01": "10.0.0.1", "node-02": None, "node-03": None, "Node-04": "10.0.0.4",
                                   "10.0.0.9": "10.0.0.9"}


def test_resolve_a_dns_alias_answer_belongs_to_the_name_in_turn():
    text = "query a\nquery b\n10.0.0.1 real-a.example\n10.0.0.2 b\n"
    assert parse_resolve(text) == {"a": "10.0.0.1", "b": "10.0.0.2"}
    assert parse_resolve("query a\nquery b\n") == {"a": None, "b": None}


def test_resolve_search_domain_answers_and_address_names():
    """A search domain's answer lists only the full name; it is node-b's, not the unresolved name
    before it. An inventory name that is an address resolves to itself without a reverse entry."""
    text = "query node-a\nquery node-b\nquery 10.0.0.9\nquery node-c\n10.0.0.2 node-b.cluster.local\n"
    assert parse_resolve(text) == {"node-a": None, "node-b": "10.0.0.2", "10.0.0.9": "10.0.0.9", "node-c": None}
    text = "query 10.99.99.99\nquery fe80::1\nquery x\n10.0.0.5 real-x.example\n"
    assert parse_resolve(text) == {"10.99.99.99": "10.99.99.99", "fe80::1": "fe80::1", "x": "10.0.0.5"}


def test_resolve_a_name_with_several_addresses_is_one_answer():
    """The older form (one getent hosts) prints a line per address: the second line of node-a is not
    node-b's answer, nor an unresolved name's; two names of one host in a row print its lines twice,
    in whatever order DNS rotates them."""
    lines = "10.0.0.1 node-a\n10.0.0.2 node-a\n10.0.0.5 node-b\n"
    assert parse_resolve("query node-a\nquery node-b\n" + lines) == {"node-a": "10.0.0.1", "node-b": "10.0.0.5"}
    assert parse_resolve("query node-a\nquery node-x\n10.0.0.1 node-a\n10.0.0.2 node-a\n") == {
        "node-a": "10.0.0.1", "node-x": None}
    text = ("query b\nquery c\nquery d\n"
            "10.0.0.2 host-b b c\n10.0.0.3 host-b b c\n10.0.0.3 host-b b c\n10.0.0.2 host-b b c\n"
            "10.0.0.4 real-d.example\n")
    assert parse_resolve(text) == {"b": "10.0.0.2", "c": "10.0.0.3", "d": "10.0.0.4"}


def test_resolve_one_block_per_name_first_address_and_all():
    """One line per name, by name: the first address (what the job connects to) and every address;
    a missing name, and an IPv6-only one found on the second pass; an address is not looked up."""
    text = ("query a\nquery b\nquery c\nquery 10.0.0.9\nquery d\nquery e\n"
            "v4 a 10.0.0.1 real-a.example 10.0.0.1\nv4 b 10.0.0.3 host-b 10.0.0.3,10.0.0.2\n"
            "v4 c 10.0.0.2 host-b 10.0.0.2,10.0.0.3\nmiss d\nmiss e\nmiss d\nany e fd00::9 e fd00::9\n")
    answers = parse_resolve(text)
    assert answers == {"a": "10.0.0.1", "b": "10.0.0.3", "c": "10.0.0.2", "10.0.0.9": "10.0.0.9", "d": None,
                       "e": "fd00::9"}
    assert answers.addresses["b"] == answers.addresses["c"] == ("10.0.0.2", "10.0.0.3")
    assert parse_resolve("query a\nquery b\n") == {"a": None, "b": None}


def test_hostnames_dns_rotation_agrees_but_a_loopback_line_first_does_not():
    """Nodes whose first address differs only as DNS rotates a name's records agree; a node whose
    /etc/hosts puts 127.0.1.1 before the name's cluster address (Debian's default line) does not,
    though its lowest address matches the others' (the lowest-address choice hid it).  Rotation
    folds only among the host's own addresses: a stale record in the set, which every node gets
    first in turn, fails the node that got it; with the host's interfaces unknown nothing folds."""
    def views(first_on_01, set_on_01, everywhere="10.0.0.2,10.0.0.12", nics=("10.0.0.2", "10.0.0.12")):
        rec = {n: "query node-01\nquery node-02\nquery node-03\nv4 node-01 10.0.0.1 node-01 10.0.0.1\n"
                  f"v4 node-02 10.0.0.2 node-02 {everywhere}\nv4 node-03 10.0.0.3 node-03 10.0.0.3\n"
               for n in ("node-01", "node-02", "node-03")}
        rec["node-01"] = rec["node-01"].replace(f"v4 node-02 10.0.0.2 node-02 {everywhere}",
                                                f"v4 node-02 {first_on_01} node-02 {set_on_01}")
        cl = _cluster({n: {"net.resolve": t} for n, t in rec.items()})[1]
        if nics is None:
            del cl.facts["node-02"].raw["net.interfaces"]
        else:
            cl.facts["node-02"].raw["net.interfaces"] = out(json.dumps(
                [{"ifname": f"eth{i}", "flags": ["UP"], "operstate": "UP",
                  "addr_info": [{"family": "inet", "local": a, "prefixlen": 24}]} for i, a in enumerate(nics)]))
        return cl

    def node_02(cluster):
        [r] = [r for r in run_check(network.test_hostnames, cluster=cluster) if r.subject == "node-02"]
        return r

    assert node_02(views("10.0.0.12", "10.0.0.12,10.0.0.2")).outcome == "passed"
    r = node_02(views("127.0.1.1", "127.0.1.1,10.0.0.2,10.0.0.12"))
    assert r.outcome == "failed" and r.outliers == ("node-01",) and "node-02 -> 127.0.1.1" in r.message, r
    def results(cluster):
        return run_check(network.test_hostnames, cluster=cluster)

    # A record that is not node-02's: the node that got it first is the outlier, as any node
    # answering differently; the nodes holding it below node-02's own address get a warning (a
    # resolver may put it first next time), one for all the names they hold such records for.
    got = results(views("10.9.9.9", "10.9.9.9,10.0.0.2", everywhere="10.0.0.2,10.9.9.9"))
    [r] = [r for r in got if r.subject == "node-02"]
    assert r.outcome == "failed" and r.outliers == ("node-01",) and "on node-01: node-02 -> 10.9.9.9" in r.message
    [w] = [r for r in got if r.outcome == "warning"]
    assert w.outliers == ("node-02", "node-03") and w.severity == "warning", w
    assert w.message.startswith("node-[02-03]: also resolve node-02 -> 10.9.9.9 below the right first address: a "
                                "record that is not an address of the named node"), w.message
    assert "/etc/hosts on node-[02-03]" in w.remedy
    got = results(views("10.0.0.2", "10.9.9.9,10.0.0.2", everywhere="10.0.0.2"))  # only node-01 holds it
    assert [(r.subject, r.outcome) for r in got if r.outcome != "passed"] == [("records held on node-01", "warning")]
    assert [r.outcome for r in got if r.subject == "node-02"] == ["passed"]
    # Rotation among node-02's own addresses passes though node-02 itself sees only one of them.
    [r] = [r for r in results(views("10.0.0.12", "10.0.0.12,10.0.0.2", everywhere="10.0.0.2"))
           if r.subject == "node-02"]
    assert r.outcome == "passed", r
    assert "node-02 -> one of its own addresses (10.0.0.2, 10.0.0.12) on all 3 nodes" in r.message, r.message
    # Its interfaces unknown (unreached, no ip): rotation is not made a disagreement between nodes.
    assert node_02(views("10.0.0.12", "10.0.0.12,10.0.0.2", nics=None)).outcome == "passed"
    # An address on every node's interfaces (docker0) or link-local is not the host's to fold to.
    for shared in ("10.0.0.1", "fe80::2"):
        cl = views(shared, f"{shared},10.0.0.2", nics=("10.0.0.2", "10.0.0.12", "10.0.0.1", "fe80::2"))
        assert node_02(cl).outcome == "failed", shared
    # node-02's own view holds its 127.0.1.1 line below its address: rotation among the others folds.
    cl = views("10.0.0.12", "10.0.0.12,10.0.0.2")
    cl.facts["node-02"].raw["net.resolve"] = out(cl.facts["node-02"].raw["net.resolve"].stdout.replace(
        "v4 node-02 10.0.0.2 node-02 10.0.0.2,10.0.0.12", "v4 node-02 10.0.0.2 - 10.0.0.2,10.0.0.12,127.0.1.1"))
    assert node_02(cl).outcome == "passed"
    # Most nodes get the stale record first: the nodes with it are the outliers, not the one right.
    cl = views("10.9.9.9", "10.9.9.9,10.0.0.2", everywhere="10.0.0.2,10.9.9.9")
    cl.facts["node-02"].raw["net.resolve"] = cl.facts["node-01"].raw["net.resolve"]
    r = node_02(cl)
    assert r.outcome == "failed" and r.outliers == ("node-01", "node-02"), r
    for needle in ("on node-[01-02]: node-02 -> 10.9.9.9 (10.9.9.9 is not an address of node-02: inventory "
                   "address 10.0.0.2; its interfaces: 10.0.0.2, 10.0.0.12)",
                   "node-03 resolves it to its own address 10.0.0.2"):
        assert needle in r.message, r.message
    assert r.remedy.startswith("On node-[01-02], make node-02 resolve to its own address (10.0.0.2)")
    # Every node resolving node-02 to an address every node has (docker0's) fails: it is none's own.
    cl = views("10.0.0.1", "10.0.0.1", nics=("10.0.0.2", "10.0.0.1"))
    for node in ("node-02", "node-03"):
        cl.facts[node].raw["net.resolve"] = cl.facts["node-01"].raw["net.resolve"]
    r = node_02(cl)
    assert r.outcome == "failed" and "every node resolves node-02 to 10.0.0.1, which is not an address" in r.message
    # One node answering a stale address among rotating ones is the only outlier.
    cl = views("10.0.0.12", "10.0.0.12,10.0.0.2")
    cl.facts["node-03"].raw["net.resolve"] = out(cl.facts["node-03"].raw["net.resolve"].stdout.replace(
        "v4 node-02 10.0.0.2 node-02 10.0.0.2,10.0.0.12", "v4 node-02 10.9.9.9 -"))
    r = node_02(cl)
    assert r.outcome == "failed" and r.outliers == ("node-03",), r


def _fleet(n, answer, shared=None):
    """``n`` nodes at 10.0.0.<i>; ``answer(node, name)`` gives a node's ``(first, records)`` for a
    name (``first`` None: the name does not resolve there).  With ``shared``, equal outputs are parsed once, as in a run (facts.SharedOutputs)."""
    names = [f"node-{i:02d}" for i in range(1, n + 1)]
    pairs = []
    for i, node in enumerate(names, 1):
        text = "".join(f"v4 {name} {answer(node, name)[0]} - {','.join(answer(node, name)[1])}\n"
                       if answer(node, name)[0] else f"miss {name}\n" for name in names) + f"end {n}\n"
        facts = make_facts(node, raw=healthy_raw(interfaces=[
            {"ifname": "eth0", "flags": ["UP"], "operstate": "UP",
             "addr_info": [{"family": "inet", "local": f"10.0.0.{i}", "prefixlen": 24}]}]))
        facts.raw["net.resolve"] = out(text)
        if shared is not None:
            facts.raw, facts.shared = shared.keep(facts.raw), shared
        pairs.append((make_host(node, address=f"10.0.0.{i}"), facts))
    if shared is not None:
        shared.close_intake()
    return cluster_of(*pairs)


def _own(name):
    return f"10.0.0.{int(name[5:])}"


def _stale(name):
    return f"10.9.9.{int(name[5:])}"


def _rotating(node, name):
    """DNS handing out a stale record beside each right one: first on a third of the nodes, a
    different third for each name."""
    first = _stale(name) if (int(node[5:]) + int(name[5:])) % 3 == 0 else _own(name)
    return first, sorted([_own(name), _stale(name)], key=address_order)


def _problems(cluster):
    return [r for r in run_check(network.test_hostnames, cluster=cluster) if r.outcome != "passed"]


def test_hostnames_a_stale_record_dns_rotates_is_one_finding_for_every_name():
    """The records are the fault, not the nodes that got the stale one first this time: one finding
    for every such name (it was one failure and one warning per name, each naming about a third of
    the fleet: 6 MB of text at 1000 nodes)."""
    [r] = _problems(_fleet(12, _rotating))
    assert r.outcome == "failed" and r.subject == "node-[01-12]" and r.outliers == tuple(
        f"node-{i:02d}" for i in range(1, 13)), r
    assert r.message.startswith(
        "node-[01-12]: 12 names have records that are not their nodes' own addresses (10.9.9.1, 10.9.9.2, "
        "10.9.9.3, ...) beside the right ones; the nodes holding them get one first in turn, a different set of "
        "nodes for each name (DNS rotating the records), and connect to it: node-01 -> 10.9.9.1 first on "
        "node-[02,05,08,11]; node-02 -> 10.9.9.2 first on node-[01,04,07,10]; node-03 -> 10.9.9.3 first on "
        "node-[03,06,09,12]; and 9 more names"), r.message
    assert r.remedy.startswith("Remove the records that are not the named nodes' own addresses from DNS")
    # A third of a large fleet is counted, not listed.
    [r] = _problems(_fleet(30, _rotating))
    assert "node-01 -> 10.9.9.1 first on 10 of 30 nodes (e.g. node-02, node-05, node-08)" in r.message, r.message
    # Each node with its own name in /etc/hosts (one record) and DNS for the rest: still one finding.
    def own_line(node, name):
        return (_own(name), [_own(name)]) if node == name else _rotating(node, name)
    [r] = _problems(_fleet(12, own_line))
    assert r.subject == "node-[01-12]" and "12 names have records" in r.message, r
    # Four names: "and 1 more name".
    [r] = _problems(_fleet(4, _rotating))
    assert "; and 1 more name; expected" in r.message, r.message


def test_hostnames_stale_records_that_do_not_rotate_are_judged_node_by_node():
    """What looks like rotation but is not: each is the per-node finding, naming the nodes at fault."""
    # One node's /etc/hosts puts the stale line first for every name: that node is the outlier.
    def node_05_first(node, name):
        return (_stale(name) if node == "node-05" else _own(name)), sorted([_own(name), _stale(name)],
                                                                            key=address_order)
    problems = _problems(_fleet(8, node_05_first))
    [r] = [r for r in problems if r.outcome == "failed"]
    assert r.outliers == ("node-05",) and "on node-05 the 8 names resolve to other addresses" in r.message, r
    # One name only: nothing to tell rotation from one set of nodes by.
    def one_name(node, name):
        return _rotating(node, name) if name == "node-03" else (_own(name), [_own(name)])
    [r] = [r for r in _problems(_fleet(4, one_name)) if r.outcome == "failed"]
    assert r.subject == "node-03" and r.outliers == ("node-03",) and "on node-03: node-03 -> 10.9.9.3" in r.message
    # A loopback line first (Debian's 127.0.1.1) is that node's /etc/hosts: not folded into rotation.
    def loopback_first(node, name):
        first, records = _rotating(node, name)
        if node == "node-01":
            first = "127.0.1.1"
        return first, sorted([*records, "127.0.1.1"], key=address_order)
    failed = [r for r in _problems(_fleet(6, loopback_first)) if r.outcome == "failed"]
    assert failed and all("node-01" in r.outliers and "-> 127.0.1.1 on node-01" in r.message and
                          "DNS rotating" not in r.message for r in failed), failed
    # Every node gets a stale record first (different ones): no node has it right, no rotation.
    def two_stale(node, name):
        other = f"10.8.8.{int(name[5:])}"
        return ((_stale(name) if int(node[5:]) % 2 else other),
                sorted([_own(name), _stale(name), other], key=address_order))
    problems = _problems(_fleet(4, two_stale))
    assert problems and not any("DNS rotating" in r.message for r in problems), problems
    # ... and beside names that rotate, such a name is said on its own.
    def one_all_wrong(node, name):
        if name != "node-01":
            return _rotating(node, name)
        return two_stale(node, name)
    problems = _problems(_fleet(6, one_all_wrong))
    assert [r.subject for r in problems if "DNS rotating" in r.message] == ["node-[02-06]"], problems
    [r] = [r for r in problems if r.subject == "node-01"]
    # No node gets node-01's own address: said so, with its addresses (fixing every node to one of
    # the answers would fix nothing).
    assert r.message.startswith("node-01: on node-[02,04,06]: node-01 -> 10.8.8.1; on node-[01,03,05]: node-01 -> "
                                "10.9.9.1 (10.8.8.1, 10.9.9.1 are not addresses of node-01: inventory address "
                                "10.0.0.1; its interfaces: 10.0.0.1); no node resolves node-01 to one of its own "
                                "addresses"), r.message
    assert r.outliers == tuple(f"node-{i:02d}" for i in range(1, 7)) and r.remedy.startswith(
        "Point node-01 at its own address (10.0.0.1, or one on its interfaces) in /etc/hosts on every node")
    # Half the nodes not resolving it and half resolving it elsewhere: the same.
    def half_unresolved(node, name):
        if name != "node-01":
            return _own(name), [_own(name)]
        return (None, []) if int(node[5:]) % 2 else (_stale(name), [_stale(name)])
    [r] = _problems(_fleet(4, half_unresolved))
    assert "no node resolves node-01 to one of its own addresses" in r.message, r.message
    # The nodes hold different stale records: not one set rotating.
    def differing(node, name):
        stale = _stale(name) if int(node[5:]) % 2 else f"10.8.8.{int(name[5:])}"
        first = stale if (int(node[5:]) + int(name[5:])) % 3 == 0 else _own(name)
        return first, sorted([_own(name), stale], key=address_order)
    problems = _problems(_fleet(6, differing))
    assert problems and not any("DNS rotating" in r.message for r in problems), problems
    # Likewise where only the nodes holding one of them get it first: the others' stale records
    # are not dropped from the report.
    def others_hold_another(node, name):
        if int(node[5:]) % 2:
            return _rotating(node, name)
        return _own(name), sorted([_own(name), f"10.8.8.{int(name[5:])}"], key=address_order)
    problems = _problems(_fleet(6, others_hold_another))
    assert any("10.8.8." in r.message for r in problems) and not any("DNS rotating" in r.message
                                                                     for r in problems), problems


def test_hostnames_the_same_with_answers_parsed_once_for_nodes_that_printed_alike(monkeypatch):
    """Nodes printing the same answers share one parsed value in a run, and the check reads each
    name once per distinct value and takes the agreeing names' short way: the results are those of
    every node's answers read apart, the long way."""
    def healthy(node, name):
        return _own(name), [_own(name)]

    def held_below(node, name):  # a stale record below the right one, on every node alike
        return _own(name), sorted([_own(name), "10.9.9.9"], key=address_order)

    def mixed(node, name):  # node-02 answers node-04 with its own stale line
        return ("10.9.9.4", ["10.9.9.4"]) if (node, name) == ("node-02", "node-04") else healthy(node, name)

    def multi_homed(node, name):  # two own addresses, in one order everywhere
        return _own(name), sorted([_own(name), _stale(name)], key=address_order)

    for answer in (healthy, held_below, mixed, _rotating, multi_homed):
        cluster = _fleet(5, answer, shared=SharedOutputs())
        if answer is multi_homed:  # the second address is on the node's interfaces
            for i, (host, facts) in enumerate(cluster.reachable(), 1):
                facts.raw["net.interfaces"] = out(json.dumps([
                    {"ifname": f"eth{k}", "flags": ["UP"], "operstate": "UP",
                     "addr_info": [{"family": "inet", "local": a, "prefixlen": 24}]}
                    for k, a in enumerate((f"10.0.0.{i}", f"10.9.9.{i}"))]))
                facts._cache.pop("net.interfaces", None)
        views = {h.name: f.get("net.resolve") for h, f in cluster.reachable()}
        assert len(network._Columns(views).distinct) == {"mixed": 2, "_rotating": 3}.get(answer.__name__, 1)
        short = run_check(network.test_hostnames, cluster=cluster)
        with monkeypatch.context() as patch:
            read = network._Columns.read
            patch.setattr(network._Columns, "read", lambda self, name: (*read(self, name)[:2], None))
            long = run_check(network.test_hostnames, cluster=cluster)
        assert short == long, answer.__name__
        assert {r.outcome for r in short} == {"healthy": {"passed"}, "held_below": {"passed", "warning"},
                                              "mixed": {"passed", "failed"}, "_rotating": {"failed"},
                                              "multi_homed": {"passed"}}[answer.__name__], (answer.__name__, short)


def test_hostnames_a_name_every_node_resolves_to_loopback_fails():
    """An /etc/hosts copied from node-02 with its name on the loopback line: every node agrees on
    127.0.0.1, which is node-02's lo but to every other node itself."""
    rec = "query node-01\nquery node-02\nv4 node-01 10.0.0.1 -\nv4 node-02 127.0.0.1 localhost\n"
    cl = _cluster({n: {"net.resolve": rec} for n in ("node-01", "node-02", "node-03")})[1]
    cl.facts["node-02"].raw["net.interfaces"] = out(json.dumps(
        [{"ifname": "lo", "flags": ["UP", "LOOPBACK"], "operstate": "UNKNOWN",
          "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}]},
         {"ifname": "eth0", "flags": ["UP"], "operstate": "UP",
          "addr_info": [{"family": "inet", "local": "10.0.0.2", "prefixlen": 24}]}]))
    [r] = [r for r in run_check(network.test_hostnames, cluster=cl) if r.subject == "node-02"]
    assert r.outcome == "failed" and "every node resolves node-02 to 127.0.0.1" in r.message, r


def test_hostnames_one_node_resolving_its_own_name_to_loopback_passes():
    """A one-node inventory (SSH, not local) whose /etc/hosts has 127.0.0.1 localhost node-01: no
    other node connects to it by that name."""
    host = make_host("node-01", address="10.0.0.1")
    facts = make_facts("node-01")
    facts.raw["net.resolve"] = out("v4 node-01 127.0.0.1 localhost\nend 1\n")
    [r] = run_check(network.test_hostnames, cluster=cluster_of((host, facts)))
    assert r.outcome == "passed" and r.message.startswith("node-01 -> 127.0.0.1 on its only node"), r
    # In a larger inventory where only this node was reached, loopback is still a fault.
    other = make_host("node-02", address="10.0.0.2")
    down = HostFacts(host="node-02", address="10.0.0.2", reachable=False, error="node-02: refused")
    [r] = [r for r in run_check(network.test_hostnames, cluster=cluster_of((host, facts), (other, down)))
           if r.subject == "node-01"]
    assert r.outcome == "failed", r


def test_hostnames_cannot_judge_an_address_of_a_node_whose_interfaces_were_not_read():
    """Every node resolving node-03 to a stale 10.9.9.9 passed when node-03's interfaces were
    unknown (unreachable, or `ip` failing there)."""
    rec = ("query node-01\nquery node-02\nquery node-03\nv4 node-01 10.0.0.1 -\nv4 node-02 10.0.0.2 -\n"
           "v4 node-03 10.9.9.9 -\n")
    hosts, cl = _cluster({n: {"net.resolve": rec} for n in ("node-01", "node-02", "node-03")})
    cl.facts["node-03"].raw["net.interfaces"] = out("", rc=127, stderr="ip: command not found")
    [r] = [r for r in run_check(network.test_hostnames, cluster=cl) if r.subject == "node-03"]
    assert r.outcome == "error" and r.outliers == ("node-03",), r
    assert r.message.startswith("not evaluated: node-03 resolves to 10.9.9.9 on all 3 nodes, not its inventory "
                                "address 10.0.0.3"), r.message
    down = HostFacts(host="node-03", address="10.0.0.3", reachable=False, error="node-03: refused")
    cl = cluster_of(*[(h, cl.facts[h.name]) for h in hosts[:2]], (hosts[2], down))
    [r] = [r for r in run_check(network.test_hostnames, cluster=cl) if r.subject == "node-03"]
    assert r.outcome == "error" and "10.9.9.9 on all 2 nodes" in r.message, r
    # Its inventory address needs no interfaces to be judged.
    cl = _cluster({n: {"net.resolve": rec.replace("10.9.9.9", "10.0.0.3")} for n in ("node-01", "node-02")})[1]
    cl = cluster_of(*[(h, cl.facts[h.name]) for h in hosts[:2]], (hosts[2], down))
    [r] = [r for r in run_check(network.test_hostnames, cluster=cl) if r.subject == "node-03"]
    assert r.outcome == "passed", r


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0, reason="needs root and unshare")
def test_resolve_command_against_a_hosts_file(tmp_path):
    """The command itself, against an /etc/hosts of our own (bind-mounted in a private mount
    namespace): IPv4 before IPv6 (getent hosts gave fd00::3, hiding 10.0.0.3), the first address as
    the job gets it (Debian's 127.0.1.1 line first), two names of one host, missing and IPv6-only
    names, in two getent processes however many names there are."""
    import subprocess

    from preflight.facts import FACTS
    from preflight.probe import packed

    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.1.1 node-01\n10.0.0.1 node-01\n10.0.0.3 node-c alias-c\nfd00::3 node-c\n"
                     "fd00::9 v6-only\n")
    spec = FACTS["net.resolve"]
    script = f"mount --bind {hosts} /etc/hosts && exec bash -c {shlex.quote(spec.command)}"

    def run(names):
        env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "PF_HOSTNAMES_GZ": packed(names)}
        done = subprocess.run(["unshare", "-m", "bash", "-c", script], capture_output=True, text=True, env=env,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout, spec.parse(done.stdout)

    text, answers = run("node-01 node-c alias-c 10.0.0.7 missing-b v6-only")
    assert answers == {"node-01": "127.0.1.1", "node-c": "10.0.0.3", "alias-c": "10.0.0.3", "10.0.0.7": "10.0.0.7",
                       "missing-b": None, "v6-only": "fd00::9"}, text
    assert answers.addresses["node-01"] == ("10.0.0.1", "127.0.1.1")
    # Names that resolve nowhere (inventory labels) stay one getent process a pass: name by name,
    # a thousand took 14 s, past --command-timeout.
    text, answers = run(" ".join(f"label-{i}.invalid" for i in range(20)))
    assert list(answers.values()) == [None] * 20 and text.count("miss label-0.invalid") in (1, 2), text


def test_resolve_reads_the_older_per_name_records():
    assert parse_resolve("node-01 10.0.0.1\nnode-02 -\n") == {"node-01": "10.0.0.1", "node-02": None}
    # Hosts named like the present form's tags and end line.
    assert parse_resolve("node-a 10.0.0.1\nend 10.0.0.2\nmiss 10.0.0.3\nv4 -\n") == {
        "node-a": "10.0.0.1", "end": "10.0.0.2", "miss": "10.0.0.3", "v4": None}
    assert parse_resolve("") == {}
    with pytest.raises(ParseError):
        parse_resolve("garbage\n")


def test_resolve_command_on_this_machine():
    import subprocess

    from preflight.facts import FACTS
    from preflight.probe import packed

    spec = FACTS["net.resolve"]
    env = {"PATH": "/usr/bin:/bin", "PF_HOSTNAMES_GZ": packed("localhost no-such-host.invalid")}
    text = subprocess.run(["bash", "-c", spec.command], capture_output=True, text=True, env=env, timeout=30).stdout
    answers = spec.parse(text)
    assert answers["no-such-host.invalid"] is None and answers["localhost"] in ("127.0.0.1", "::1")
    env["PF_HOSTNAMES_GZ"] = packed("localhost 10.0.0.9")
    text = subprocess.run(["bash", "-c", spec.command], capture_output=True, text=True, env=env, timeout=30).stdout
    assert "10.0.0.9" not in text.replace("query 10.0.0.9", "")  # an address is not looked up
    assert spec.parse(text)["10.0.0.9"] == "10.0.0.9"
    env["PF_HOSTNAMES_GZ"] = packed("")  # no names: nothing, not the whole hosts database
    assert spec.parse(subprocess.run(["bash", "-c", spec.command], capture_output=True, text=True, env=env,
                                     timeout=30).stdout) == {}


def test_resolve_command_without_getent_says_so(tmp_path):
    """Without getent every name would read as unresolved on that node: the command exits 127,
    which the probe reports as getent not found."""
    import shutil
    import subprocess

    from preflight.facts import FACTS
    from preflight.probe import packed

    for tool in ("bash", "base64", "gzip"):
        (tmp_path / tool).symlink_to(shutil.which(tool))
    env = {"PATH": str(tmp_path), "PF_HOSTNAMES_GZ": packed("node-a 10.0.0.9")}

    def run():
        return subprocess.run([str(tmp_path / "bash"), "-c", FACTS["net.resolve"].command], capture_output=True,
                              text=True, env=env, timeout=30)

    done = run()  # no awk either: that is said first (it is not getent that is missing)
    assert done.returncode == 3 and "awk not found" in done.stderr, done.stderr
    (tmp_path / "awk").symlink_to(shutil.which("awk"))
    done = run()
    assert done.returncode == 127 and done.stdout == "query 10.0.0.9\n"


def test_record_parsers():
    probes = parse_tcp_probes("open 10.0.0.1 6379 temporary\ntimeout 10.0.0.1 8265 existing no answer within 3s\n")
    assert [(p.state, p.port, p.listener) for p in probes] == [("open", 6379, "temporary"),
                                                                ("timeout", 8265, "existing")]
    attempts = parse_launcher_ssh("ok node-02 10.0.0.2\nfail node-03 10.0.0.3 rc=255 Host key verification failed.\n")
    assert [(a.name, a.ok) for a in attempts] == [("node-02", True), ("node-03", False)]
    assert "Host key" in attempts[1].detail
    assert parse_clock_offset("0.250000 0.010000\n").offset_s == 0.25
    view = parse_storage("from node-01\nseen /shared\nmissing /ckpt common.pt,metadata.json,\nabsent /data\n")
    assert view.writer == "node-01" and not view.is_writer
    assert [(e.state, e.path, e.metadata) for e in view.entries] == [
        ("seen", "/shared", ()), ("missing", "/ckpt", ("common.pt", "metadata.json")), ("absent", "/data", ())]
    assert parse_storage("writer written /shared\n").is_writer
    matrix = parse_ping_matrix("schedule all\nnode-02 3 3 29.1.0.13 rc=0 3 packets transmitted, 3 received\n"
                               "node-02 4 4 29.1.0.14 rc=1 3 packets transmitted, 0 received\n"
                               "node-02 5 5 29.1.0.15 skipped hccn_tool -ping hung earlier (npu4)\n")
    assert matrix.mode == "all" and [p.ok for p in matrix.pairs] == [True, False, False]
    assert matrix.pairs[2].skipped
    assert parse_resolve("node-01 10.0.0.1\nnode-02 -\n") == {"node-01": "10.0.0.1", "node-02": None}
    # A NaN offset compared as within every bound: node-02's clock was ignored and the check passed.
    for garbage in ("nan 0.01", "0.1 nan", "-inf 0.01", "1e400 0.01"):
        with pytest.raises(ParseError):
            parse_clock_offset(garbage)
    for parser, text in ((parse_tcp_probes, "bogus"), (parse_launcher_ssh, ""), (parse_clock_offset, "x"),
                         (parse_storage, "???"), (parse_ping_matrix, "garbage line"),
                         (parse_ping_matrix, "schedule \n"), (parse_ping_matrix, "schedule all ring\n")):
        with pytest.raises(ParseError):
            parser(text)


# -- checks on records -------------------------------------------------------------------------

def _cluster(records: dict, groups=None, **vars_):
    hosts = [make_host(f"node-0{i}", groups=(groups or {}).get(f"node-0{i}", ["worker"] if i > 1 else ["head"]),
                       address=f"10.0.0.{i}", **vars_) for i in (1, 2, 3)]
    facts = {}
    for h in hosts:
        f = make_facts(h.name)
        for key, text in records.get(h.name, {}).items():
            f.raw[key] = out(text)
        facts[h.name] = f
    return hosts, cluster_of(*[(h, facts[h.name]) for h in hosts])


def test_a_head_whose_only_worker_is_the_local_entry_says_so():
    """"no worker is reachable" and "no other reachable node" read as faults of a worker that was
    reached (the controller's own local entry, which probed the head's ports)."""
    import dataclasses

    head = make_host("node-01", groups=["head"], address="10.0.0.1")
    local = dataclasses.replace(make_host("ctl", groups=["worker"], address="10.0.0.9"), connection="local")
    cl = cluster_of((head, make_facts("node-01")), (local, make_facts("ctl")))
    [r] = run_check(network.test_ray_ports, host=head, facts=cl.facts["node-01"], cluster=cl)
    assert r.outcome == "skipped" and "its only reachable worker, ctl, is this machine's local entry" in r.message, r
    [r] = run_check(network.test_launcher_ssh, host=head, facts=cl.facts["node-01"], cluster=cl)
    assert r.outcome == "skipped" and r.message == ("no other reachable node for node-01 to log in to (ctl is this "
                                                    "machine's local entry: no SSH login to test there)"), r.message


def test_a_blocked_port_shows_in_the_cell_of_the_node_probed_too():
    """node-03 dropping its worker range turned node-02's row red and left node-03's green."""
    from preflight.report.matrix import cells

    rec = ("open 10.0.0.1 6379 temporary\nopen 10.0.0.1 8265 temporary\nopen 10.0.0.1 10001 temporary\n"
           "open 10.0.0.1 10002 temporary\nopen 10.0.0.1 19999 temporary\n"
           "timeout 10.0.0.3 10002 temporary no answer\ntimeout 10.0.0.3 19999 temporary no answer\n")
    hosts, cl = _cluster({"node-02": {"tcp.ray": rec}})
    results = run_check(network.test_ray_ports, host=hosts[1], facts=cl.facts["node-02"], cluster=cl)
    blocked = [r for r in results if r.outcome == "failed"]
    assert {r.subject for r in blocked} == {"node-03:10002", "node-03:19999"}
    assert all(r.host == "node-02" and r.outliers == ("node-03",) for r in blocked), blocked
    assert all(r.outliers == () for r in results if r.outcome == "passed")
    doc = {"hosts": [{"name": h.name, "reachable": True} for h in hosts], "results": [r.to_json() for r in results]}
    _, _, grid = cells(doc)
    assert grid[("node-03", "cluster.ray_ports")][0] == "failed"
    assert grid[("node-02", "cluster.ray_ports")][0] == "failed"  # its own result, naming node-03
    # "What to fix" leads with the node probed, not the healthy prober.
    from preflight.report.matrix import fix_items

    wheres = [item.where for item in fix_items(doc)]
    assert wheres == ["node-03:10002 (from node-02)", "node-03:19999 (from node-02)"], wheres
    # The source node's own fault (it cannot resolve the name) blames no one else.
    hosts, cl = _cluster({"node-02": {"tcp.hccl": "unresolved 10.0.0.3 60000 temporary Name or service not known\n"
                                                  "open 10.0.0.3 60015 temporary\n"}})
    [unresolved] = [r for r in run_check(network.test_hccl_ports, host=hosts[1], facts=cl.facts["node-02"],
                                         cluster=cl) if r.outcome == "failed"]
    assert unresolved.outliers == ()


def test_ray_ports_the_heads_and_the_next_workers_range_with_warning_severity_for_dashboard_only():
    rec = ("open 10.0.0.1 6379 temporary\ntimeout 10.0.0.1 8265 temporary no answer\nopen 10.0.0.1 10001 temporary\n"
           "open 10.0.0.1 10002 temporary\ntimeout 10.0.0.1 19999 temporary no answer\n"
           "open 10.0.0.3 10002 temporary\nrefused 10.0.0.3 19999 temporary Connection refused\n")
    hosts, cl = _cluster({"node-02": {"tcp.ray": rec}})
    results = run_check(network.test_ray_ports, host=hosts[1], facts=cl.facts["node-02"], cluster=cl)
    assert [(r.subject, r.outcome) for r in results] == [
        ("node-01:6379", "passed"), ("node-01:8265", "warning"), ("node-01:10001", "passed"),
        ("node-01:10002", "passed"), ("node-01:19999", "failed"), ("node-03:10002", "passed"),
        ("node-03:19999", "failed")]  # a blocked worker port hangs the job's calls to that node: an error
    assert "node-02 -> node-03 Ray worker range (last) port (10.0.0.3:19999): connection refused" in results[-1].message
    # The last worker probes the head only.
    cl.facts["node-03"].raw["tcp.ray"] = out(rec.split("open 10.0.0.3")[0])
    results = run_check(network.test_ray_ports, host=hosts[2], facts=cl.facts["node-03"], cluster=cl)
    assert [r.subject for r in results] == ["node-01:6379", "node-01:8265", "node-01:10001", "node-01:10002",
                                            "node-01:19999"]


def test_a_ray_head_that_is_this_controller_as_localhost_is_not_probed_from_the_workers():
    """The workers probed localhost:6379 and reached themselves: 'refused although a listener is open
    on the target (a firewall REJECT rule...)', wrong twice."""
    from preflight.activeprobe import ray_plan
    from tests.factsets import healthy_raw
    ctl = make_host("ctl", address="localhost", groups=["head"])
    ctl = dataclasses.replace(ctl, connection="local")
    worker = make_host("node-02", address="10.0.0.2", groups=["worker"])
    cl = cluster_of((ctl, make_facts("ctl", raw=healthy_raw())), (worker, make_facts("node-02", raw=healthy_raw())))
    assert "node-02" not in ray_plan(cl)
    [r] = run_check(network.test_ray_ports, host=worker, facts=cl.facts["node-02"], cluster=cl)
    assert r.outcome == "error" and "is this machine (connection: local) at localhost" in r.message
    assert "address the workers reach it by" in r.remedy


def test_ray_plan_every_worker_probes_the_head_and_each_range_is_probed_once():
    """The head's five ports from every worker; each worker's range from the Ray node before it, with
    that worker's own inventory ports; nothing when the head is unreachable."""
    from preflight.activeprobe import ray_plan

    hosts, cl = _cluster({})
    hosts[2] = dataclasses.replace(hosts[2], vars={"ray_min_worker_port": 20000, "ray_max_worker_port": 20999})
    cl = cluster_of(*[(h, cl.facts[h.name]) for h in hosts])
    plan = {src: [(node.name, port) for node, _, port in targets] for src, targets in ray_plan(cl).items()}
    head_ports = [("node-01", p) for p in (6379, 8265, 10001, 10002, 19999)]
    assert plan == {"node-01": [("node-02", 10002), ("node-02", 19999)],
                    "node-02": head_ports + [("node-03", 20000), ("node-03", 20999)],
                    "node-03": head_ports}
    cl.facts["node-01"].reachable = False
    assert ray_plan(cl) == {}


def test_the_ray_probe_listens_on_every_target_and_connects_from_every_source():
    from preflight.activeprobe import Listening, PhaseTwo
    from preflight.gather import GatherSettings

    hosts, cl = _cluster({})
    phase = PhaseTwo(cl, _LocalGatherer(), GatherSettings(command_timeout=10, connect_timeout=5))
    listened, connected = {}, {}

    def listen(host, ports, clients=1, seconds_each=None):
        listened[host.name] = (sorted(ports), clients)
        return Listening(dict.fromkeys(ports, "temporary"))

    def connect_from(host, targets):
        connected[host.name] = targets
        return out("".join(f"open {a} {p} {s}\n" for a, p, s in targets))

    phase.listen, phase.connect_from = listen, connect_from
    phase.ray()
    assert listened == {"node-01": ([6379, 8265, 10001, 10002, 19999], 3), "node-02": ([10002, 19999], 3),
                        "node-03": ([10002, 19999], 3)}
    assert connected["node-01"] == [("10.0.0.2", 10002, "temporary"), ("10.0.0.2", 19999, "temporary")]
    assert [t[:2] for t in connected["node-02"]] == [("10.0.0.1", p) for p in (6379, 8265, 10001, 10002, 19999)] + [
        ("10.0.0.3", 10002), ("10.0.0.3", 19999)]
    for host in hosts:
        results = run_check(network.test_ray_ports, host=host, facts=cl.facts[host.name], cluster=cl)
        assert results and {r.outcome for r in results} == {"passed"}


def test_hccl_ports_without_a_record_for_a_port_say_so():
    """A record with port 60000 only passed: 60015 was never mentioned."""
    hosts, cl = _cluster({"node-01": {"tcp.hccl": "open 10.0.0.2 60000 temporary\n"}})
    results = {r.subject: r for r in run_check(network.test_hccl_ports, host=hosts[0], facts=cl.facts["node-01"],
                                               cluster=cl)}
    assert results["node-02:60000"].outcome == "passed"
    assert results["node-02:60015"].outcome == "error" and "no probe record" in results["node-02:60015"].message


def test_hccl_ports_name_the_peer():
    hosts, cl = _cluster({"node-01": {"tcp.hccl": "timeout 10.0.0.2 60000 temporary x\nopen 10.0.0.2 60015 temporary\n"}})
    results = run_check(network.test_hccl_ports, host=hosts[0], facts=cl.facts["node-01"], cluster=cl)
    assert {(r.subject, r.outcome) for r in results} == {("node-02:60000", "failed"), ("node-02:60015", "passed")}


@pytest.mark.parametrize("name, value", [("HCCL_IF_BASE_PORT", "70000"), ("HCCL_IF_BASE_PORT", "60000-60015"),
                                         ("HCCL_IF_BASE_PORT", "80"), ("HCCL_HOST_SOCKET_PORT_RANGE", "60050-60000"),
                                         ("HCCL_HOST_SOCKET_PORT_RANGE", "60000:60050")])
def test_hccl_ports_fail_a_port_setting_hccl_refuses(name, value):
    """A value HCCL rejects at start-up had the default block probed instead, and passed."""
    rec = "open 10.0.0.2 60000 temporary\nopen 10.0.0.2 60015 temporary\n"
    hosts, cl = _cluster({"node-01": {"tcp.hccl": rec}}, env={name: value})
    results = {r.subject: r for r in run_check(network.test_hccl_ports, host=hosts[0], facts=cl.facts["node-01"],
                                               cluster=cl)}
    bad = results[name]
    assert bad.outcome == "failed" and f"{name}={value!r} on node-01" in bad.observed
    assert ("[1024, 65520]" if name == "HCCL_IF_BASE_PORT" else "or auto") in bad.expected
    assert f"Set {name} to " in bad.remedy
    assert results["node-02:60000"].outcome == "passed"  # the probe is still judged


@pytest.mark.parametrize("env", [{"HCCL_IF_BASE_PORT": "61000"}, {"HCCL_HOST_SOCKET_PORT_RANGE": "auto"},
                                 {"HCCL_HOST_SOCKET_PORT_RANGE": "60000,60050-60100"}, {}])
def test_hccl_ports_accept_the_port_settings_hccl_takes(env):
    hosts, cl = _cluster({}, env=env)
    assert not hccl_port_settings_invalid(hosts[0], cl.facts["node-01"])


def test_launcher_ssh_names_the_login_as_a_pasteable_ssh_command():
    """`ssh root@10.0.0.3:2222 true` is not how ssh takes a port: pasted, it fails differently."""
    hosts, cl = _cluster({"node-01": {"ssh.launcher": "ok node-01 root@10.0.0.1:22\nok node-02 10.0.0.2:2222\n"
                                                      "fail node-03 root@10.0.0.3:2222 rc=255 Permission denied\n"}})
    results = {r.subject: r for r in run_check(network.test_launcher_ssh, host=hosts[0], facts=cl.facts["node-01"],
                                               cluster=cl)}
    assert results["node-01"].message.startswith("ssh -o BatchMode=yes root@10.0.0.1 true from node-01 succeeded")
    assert results["node-02"].message.startswith("ssh -o BatchMode=yes -p 2222 10.0.0.2 true from node-01")
    assert results["node-03"].observed.startswith("ssh -o BatchMode=yes -p 2222 root@10.0.0.3 true from node-01 "
                                                  "failed (rc=255 Permission denied)"), results["node-03"].observed


def test_launcher_ssh_only_on_launchers():
    hosts, cl = _cluster({"node-01": {"ssh.launcher": "ok node-01 10.0.0.1\nok node-02 10.0.0.2\n"
                                                      "fail node-03 10.0.0.3 rc=255 denied\n"}})
    results = run_check(network.test_launcher_ssh, host=hosts[0], facts=cl.facts["node-01"], cluster=cl)
    assert {(r.subject, r.outcome) for r in results} == {("node-01", "passed"), ("node-02", "passed"),
                                                         ("node-03", "failed")}
    [skip] = run_check(network.test_launcher_ssh, host=hosts[1], facts=cl.facts["node-02"], cluster=cl)
    assert skip.outcome == "skipped"


def test_launcher_ssh_tests_the_launchers_own_login_and_names_a_target_left_out_of_the_record():
    """pdsh logs in to the launcher itself too: a launcher whose own key is not in its own
    authorized_keys passed.  A target with no attempt in the record (facts taken before the node
    joined) got no result at all, and the run was READY."""
    hosts, cl = _cluster({"node-01": {"ssh.launcher": "fail node-01 10.0.0.1 rc=255 Permission denied (publickey)\n"
                                                      "ok node-02 10.0.0.2\n"}})
    assert [h.name for h in launcher_targets(cl, hosts[0])] == ["node-01", "node-02", "node-03"]
    results = {r.subject: r for r in run_check(network.test_launcher_ssh, host=hosts[0], facts=cl.facts["node-01"],
                                               cluster=cl)}
    assert results["node-01"].outcome == "failed" and "its own login" in results["node-01"].message
    assert results["node-02"].outcome == "passed"
    assert results["node-03"].outcome == "error" and "node-01 -> node-03: no probe record" in results["node-03"].message
    # A record from before the launcher's own login was tested (--facts-in of an older capture): not
    # an error that would make every replayed launcher NOT READY.
    hosts, cl = _cluster({"node-01": {"ssh.launcher": "ok node-02 10.0.0.2\nok node-03 10.0.0.3\n"}})
    results = {r.subject: r for r in run_check(network.test_launcher_ssh, host=hosts[0], facts=cl.facts["node-01"],
                                               cluster=cl)}
    assert results["node-01"].outcome == "skipped" and "earlier preflight" in results["node-01"].message
    assert results["node-02"].outcome == results["node-03"].outcome == "passed"


def test_launcher_ssh_with_no_other_node_to_log_in_to_is_skipped():
    """A one-node inventory whose node is the head (or whose other nodes are the controller's own
    local entry) gives the launcher nobody to log in to: skipped, not an error "not gathered"."""
    head = make_host("node-01", groups=["head"], address="10.0.0.1")
    alone = cluster_of((head, make_facts("node-01")))
    [result] = run_check(network.test_launcher_ssh, host=head, facts=alone.facts["node-01"], cluster=alone)
    assert (result.outcome, result.message) == ("skipped", "no other reachable node for node-01 to log in to")
    local = dataclasses.replace(make_host("here"), connection="local")
    with_local = cluster_of((head, make_facts("node-01")), (local, make_facts("here")))
    [result] = run_check(network.test_launcher_ssh, host=head, facts=with_local.facts["node-01"], cluster=with_local)
    assert result.outcome == "skipped"
    # A second SSH node is a target: its record missing is the error it was.
    two = cluster_of((head, make_facts("node-01")), (make_host("node-02"), make_facts("node-02")))
    [result] = run_check(network.test_launcher_ssh, host=head, facts=two.facts["node-01"], cluster=two)
    assert result.outcome == "error"


def test_launcher_ssh_targets_failing_alike_are_one_finding():
    records = ("ok node-02 10.0.0.2\n"
               + "".join(f"fail node-{i:04d} 10.1.0.{i} rc=255 root@10.1.0.{i}: Permission denied (publickey).\n"
                         for i in range(1, 41))
               + "fail node-0099 10.1.0.99 rc=255 ssh: connect to host 10.1.0.99 port 22: Connection refused\n")
    hosts, cl = _cluster({"node-01": {"ssh.launcher": records}})
    results = run_check(network.test_launcher_ssh, host=hosts[0], facts=cl.facts["node-01"], cluster=cl)
    failed = {r.subject: r.message for r in results if r.outcome == "failed"}
    assert set(failed) == {"node-[0001-0040]", "node-0099"}
    assert failed["node-[0001-0040]"].startswith(
        "node-01 node-[0001-0040]: ssh -o BatchMode=yes <node> true from node-01 failed for each of these 40 nodes "
        "(rc=255 root@<node>: Permission denied (publickey).)")
    assert "10.1.0.99 port 22: Connection refused" in failed["node-0099"]  # alone: its own words, as before
    assert [r.subject for r in results if r.outcome == "passed"] == ["node-02"]


def test_hostnames_outlier_and_unresolvable():
    good = "node-01 10.0.0.1\nnode-02 10.0.0.2\nnode-03 10.0.0.3\n"
    hosts, cl = _cluster({"node-01": {"net.resolve": good}, "node-02": {"net.resolve": good},
                          "node-03": {"net.resolve": good.replace("10.0.0.2", "10.9.9.9").replace("10.0.0.1", "-")}})
    results = run_check(network.test_hostnames, cluster=cl)
    assert {(r.subject, r.outcome, r.outliers) for r in results} == {
        ("node-01", "failed", ("node-03",)), ("node-02", "failed", ("node-03",)), ("node-03", "passed", ())}


def _resolving(n: int, broken: dict[str, dict[str, str]], by_name=()):
    """n nodes node-0001...; each resolves every name to 10.0.x.y unless ``broken[node][name]``
    says otherwise ("-": does not resolve). The inventory gives each node's address, but for the
    nodes in ``by_name``, which SSH reaches by their name."""
    names = [f"node-{i:04d}" for i in range(1, n + 1)]
    address = {name: f"10.0.{i // 256}.{i % 256}" for i, name in enumerate(names, 1)}
    hosts = [make_host(name, address=name if name in by_name else address[name]) for name in names]
    pairs = []
    for h in hosts:
        f = make_facts(h.name)
        mine = broken.get(h.name, {})
        f.raw["net.resolve"] = out("".join(f"{x} {mine.get(x, address[x])}\n" for x in names))
        pairs.append((h, f))
    return names, cluster_of(*pairs)


def test_hostnames_one_node_without_entries_is_one_finding_at_fleet_size():
    names, cl = _resolving(1000, {"node-0007": {x: "-" for x in [f"node-{i:04d}" for i in range(1, 1001)]}})
    results = run_check(network.test_hostnames, cluster=cl)
    [bad] = [r for r in results if r.outcome == "failed"]
    assert bad.subject == "node-[0001-1000]" and bad.outliers == ("node-0007",)
    assert bad.message.startswith("node-[0001-1000]: none of the 1000 names resolves on node-0007, "
                                  "while the other nodes resolve each of them (e.g. node-0001 -> does not resolve "
                                  "on node-0007 but 10.0.0.1 elsewhere;"), bad.message
    assert "and 997 more" in bad.message and len(bad.message) < 600
    assert sum(r.outcome == "passed" for r in results) == 0


def test_hostnames_group_names_failing_alike_and_keep_a_lone_one_as_before():
    broken = {"node-0003": {"node-0001": "10.9.9.1", "node-0002": "10.9.9.2"}, "node-0004": {"node-0005": "-"}}
    names, cl = _resolving(5, broken)
    results = run_check(network.test_hostnames, cluster=cl)
    failed = {r.subject: r for r in results if r.outcome == "failed"}
    assert set(failed) == {"node-[0001-0002]", "node-0005"}
    pair = failed["node-[0001-0002]"]
    assert pair.outliers == ("node-0003",)
    assert "on node-0003 the 2 names resolve to other addresses than on the other nodes" in pair.message
    assert "node-0001 -> 10.9.9.1 on node-0003 but 10.0.0.1 elsewhere" in pair.message
    assert "node-0002 -> 10.9.9.2 on node-0003 but 10.0.0.2 elsewhere" in pair.message
    lone = failed["node-0005"]  # one name: the per-name message, as before
    assert lone.outliers == ("node-0004",) and lone.message.startswith(
        "node-0005: on node-0004: node-0005 -> does not resolve, while node-[0001-0003,0005] resolve it to 10.0.0.5")
    assert {r.subject for r in results if r.outcome == "passed"} == {"node-0003", "node-0004"}


def test_hostnames_that_resolve_nowhere_are_one_finding():
    nowhere = {n: {"node-0002": "-", "node-0003": "-"} for n in ("node-0001", "node-0002", "node-0003", "node-0004")}
    names, cl = _resolving(4, nowhere, by_name=("node-0002", "node-0003"))
    results = run_check(network.test_hostnames, cluster=cl)
    [bad] = [r for r in results if r.outcome == "failed"]
    assert bad.subject == "node-[0002-0003]" and bad.outliers == tuple(names)
    assert "none of the 2 names resolves on any node" in bad.message


def test_inventory_labels_with_an_address_that_resolve_nowhere_are_not_a_failure():
    # {name: node-01, address: 10.0.0.1}: SSH goes to the address; no node needs the label.
    nowhere = {n: {"node-0002": "-", "node-0003": "-"} for n in ("node-0001", "node-0002", "node-0003", "node-0004")}
    names, cl = _resolving(4, nowhere)
    results = run_check(network.test_hostnames, cluster=cl)
    assert not [r for r in results if r.outcome in ("failed", "error")]
    [skip] = [r for r in results if r.outcome == "skipped"]
    assert skip.subject == "node-[0002-0003]" and "inventory labels" in skip.message
    # Resolving on some nodes and not others is still a failure, label or not.
    names, cl = _resolving(4, {"node-0004": {"node-0002": "-"}})
    [bad] = [r for r in run_check(network.test_hostnames, cluster=cl) if r.outcome == "failed"]
    assert bad.subject == "node-0002" and bad.outliers == ("node-0004",)


def test_a_name_every_node_resolves_to_an_address_that_is_not_the_nodes():
    # One stale /etc/hosts copied everywhere: node-0002 -> 10.9.9.9 on every node.
    def stale_cluster(second_nic=None):
        names, cl = _resolving(3, {n: {"node-0002": "10.9.9.9"} for n in ("node-0001", "node-0002", "node-0003")})
        for name, ip in (("node-0001", "10.0.0.1"), ("node-0002", "10.0.0.2"), ("node-0003", "10.0.0.3")):
            nics = [(name == "node-0002" and second_nic) or None, ip]
            cl.facts[name].raw["net.interfaces"] = out(json.dumps(
                [{"ifname": f"eth{i}", "flags": ["UP"], "operstate": "UP",
                  "addr_info": [{"family": "inet", "local": a, "prefixlen": 24}]} for i, a in enumerate(nics) if a]))
        return cl

    results = run_check(network.test_hostnames, cluster=stale_cluster())
    [bad] = [r for r in results if r.outcome == "failed"]
    assert bad.subject == "node-0002" and bad.outliers == ("node-0002",)
    assert bad.observed and bad.expected and bad.remedy and bad.reference
    for needle in ("every node resolves node-0002 to 10.9.9.9, which is not an address of node-0002",
                   "inventory address 10.0.0.2", "its interfaces: 10.0.0.2"):
        assert needle in bad.message, bad.message
    # The address SSH reaches, or one of the node's own, passes (a second NIC, the name's data network).
    assert not [r for r in run_check(network.test_hostnames, cluster=stale_cluster("10.9.9.9"))
                if r.outcome == "failed"]


def test_clock_skew_bound_and_outlier():
    hosts, cl = _cluster({"node-01": {"clock.offset": "0.01 0.005"}, "node-02": {"clock.offset": "0.02 0.005"},
                          "node-03": {"clock.offset": "5.0 0.005"}})
    [r] = run_check(network.test_clock_skew, cluster=cl)
    assert (r.outcome, r.outliers, r.severity) == ("warning", ("node-03",), "warning")
    hosts, cl = _cluster({n: {"clock.offset": "0.1 0.01"} for n in ("node-01", "node-02", "node-03")})
    assert run_check(network.test_clock_skew, cluster=cl)[0].outcome == "passed"
    # The bound is between any two clocks, not each against the median: -0.9 and +0.9 are 1.8 s apart.
    hosts, cl = _cluster({"node-01": {"clock.offset": "-0.9 0.01"}, "node-02": {"clock.offset": "0 0.01"},
                          "node-03": {"clock.offset": "0.9 0.01"}})
    [r] = run_check(network.test_clock_skew, cluster=cl)
    assert (r.outcome, r.outliers) == ("warning", ("node-01", "node-03")) and "span 1.80s" in r.message
    # One node answering slowly (uncertain to 3 s) does not widen the others' bound.
    hosts, cl = _cluster({"node-01": {"clock.offset": "0 0.01"}, "node-02": {"clock.offset": "0.1 3.0"},
                          "node-03": {"clock.offset": "3.5 0.01"}})
    [r] = run_check(network.test_clock_skew, cluster=cl)
    assert r.outcome == "warning" and r.outliers == ("node-03",), r.message
    # Within the bound once each reading's own uncertainty is allowed for.
    hosts, cl = _cluster({"node-01": {"clock.offset": "0 0.2"}, "node-02": {"clock.offset": "1.3 0.2"},
                          "node-03": {"clock.offset": "0.65 0.01"}})
    [r] = run_check(network.test_clock_skew, cluster=cl)
    assert r.outcome == "passed" and "1.30s apart as read, within the bound 1s" in r.message, r.message
    # Readings too uncertain to tell (slow SSH): a warning saying so, not "within 6.00s (bound 1s)".
    hosts, cl = _cluster({"node-01": {"clock.offset": "0 3"}, "node-02": {"clock.offset": "6 3"},
                          "node-03": {"clock.offset": "0.1 0.01"}})
    [r] = run_check(network.test_clock_skew, cluster=cl)
    assert r.outcome == "warning" and r.outliers == (), r
    assert "node-01 and node-02 read 6.00s apart" in r.message and "cannot be told" in r.message
    assert "chronyc tracking" in r.remedy
    # Two clocks apart, or an even split: the order does not pick the culprit (node-01, agreeing with
    # the controller, was blamed as the lower half); both sides are named.
    hosts, cl = _cluster({"node-01": {"clock.offset": "0 0.01"}, "node-02": {"clock.offset": "5 0.01"}})
    del cl.facts["node-03"]  # _cluster's third node, not read here
    cl.hosts = [h for h in cl.hosts if h.name != "node-03"]
    [r] = run_check(network.test_clock_skew, cluster=cl)
    assert r.outcome == "warning" and r.outliers == ("node-01", "node-02"), r
    assert "node-01 is -2.50s from the median; node-02 is +2.50s" in r.message
    four = []
    for i, offset in enumerate((0, 0, 0, 5), 1):
        f = make_facts(f"node-0{i}")
        f.raw["clock.offset"] = out(f"{offset} 0.01")
        four.append((make_host(f"node-0{i}"), f))
    [r] = run_check(network.test_clock_skew, cluster=cluster_of(*four))
    assert r.outliers == ("node-04",), r
    # Close as read, but with readings that uncertain the truth could be past the bound too.
    hosts, cl = _cluster({"node-01": {"clock.offset": "0 3"}, "node-02": {"clock.offset": "0.5 3"},
                          "node-03": {"clock.offset": "0.1 0.01"}})
    [r] = run_check(network.test_clock_skew, cluster=cl)
    assert r.outcome == "warning" and "cannot be told" in r.message, r


def test_shared_storage_the_writer_without_the_share_is_the_odd_node():
    """The first reached node writes the markers: with its NFS mount gone (the empty mount point
    took the marker), every healthy reader was named instead of it."""
    writer = "writer written /shared\nwriter fs ext2/ext3 /dev/sda1 /shared\n"
    reader = "from node-01\nmissing /shared -\nfs nfs nas:/export /shared\n"
    hosts, cl = _cluster({"node-01": {"storage.shared": writer}, "node-02": {"storage.shared": reader},
                          "node-03": {"storage.shared": reader}}, shared_paths=("/shared",))
    [r] = run_check(network.test_shared_storage, cluster=cl)
    assert (r.outcome, r.outliers) == ("failed", ("node-01",)), r
    assert "node-[02-03] have the nfs share nas:/export there, while node-01 has ext2/ext3 /dev/sda1" in r.message
    assert r.remedy.startswith("Mount nas:/export at /shared on node-01 (most nodes have it there)")
    # A reader off the share too: the writer and that reader are the odd ones (node-04 failed alone,
    # while node-01, the writer, showed a pass).
    hosts, cl = _cluster({"node-01": {"storage.shared": writer}, "node-02": {"storage.shared": reader},
                          "node-03": {"storage.shared": reader}}, shared_paths=("/shared",))
    four = make_host("node-04", address="10.0.0.4", shared_paths=("/shared",))
    f4 = make_facts("node-04")
    f4.raw["storage.shared"] = out(reader.replace("nfs nas:/export", "ext2/ext3 /dev/sda1"))
    cl = cluster_of(*[(h, cl.facts[h.name]) for h in hosts], (four, f4))
    [r] = run_check(network.test_shared_storage, cluster=cl)
    assert (r.outcome, r.outliers) == ("failed", ("node-01", "node-04")), r
    assert "node-01 has ext2/ext3 /dev/sda1; node-04 has ext2/ext3 /dev/sda1" in r.message
    assert r.remedy.startswith("Mount nas:/export at /shared on node-[01,04] (most nodes have it there)"), r.remedy
    # Two nodes: the writer on its own disk, the reader on the share: the writer is the odd one.
    hosts, cl = _cluster({"node-01": {"storage.shared": writer}, "node-02": {"storage.shared": reader}},
                         shared_paths=("/shared",))
    cl.hosts = [h for h in cl.hosts if h.name != "node-03"]
    del cl.facts["node-03"]
    [r] = run_check(network.test_shared_storage, cluster=cl)
    assert (r.outcome, r.outliers) == ("failed", ("node-01",)), r
    assert "node-02 has the nfs share nas:/export there, while node-01 has ext2/ext3 /dev/sda1" in r.message
    # No node on a share: every node is named, the writer too.
    local_writer = writer
    hosts, cl = _cluster({"node-01": {"storage.shared": local_writer},
                          "node-02": {"storage.shared": reader.replace("nfs nas:/export", "xfs /dev/sdb1")}},
                         shared_paths=("/shared",))
    cl.hosts = [h for h in cl.hosts if h.name != "node-03"]
    del cl.facts["node-03"]
    [r] = run_check(network.test_shared_storage, cluster=cl)
    assert (r.outcome, r.outliers) == ("failed", ("node-01", "node-02")), r
    assert "is not seen on node-02: not a shared filesystem on any node" in r.message, r.message
    # The readers on their own disks: they are the ones without the share, as before.
    local = reader.replace("nfs nas:/export", "ext2/ext3 /dev/sdb1")
    hosts, cl = _cluster({"node-01": {"storage.shared": writer.replace("ext2/ext3 /dev/sda1", "nfs nas:/export")},
                          "node-02": {"storage.shared": local}, "node-03": {"storage.shared": local}},
                         shared_paths=("/shared",))
    [r] = run_check(network.test_shared_storage, cluster=cl)
    assert (r.outcome, r.outliers) == ("failed", ("node-02", "node-03")), r
    # One reader sees it: the other reader is the odd one, whatever the filesystems say.
    hosts, cl = _cluster({"node-01": {"storage.shared": writer}, "node-02": {"storage.shared": reader},
                          "node-03": {"storage.shared": "from node-01\nseen /shared\n"}}, shared_paths=("/shared",))
    [r] = run_check(network.test_shared_storage, cluster=cl)
    assert (r.outcome, r.outliers) == ("failed", ("node-02",)), r
    # The writer on another server's share: with one reader, which is odd cannot be told (the readers,
    # as before); its marker is not on its own disk either.
    other = writer.replace("ext2/ext3 /dev/sda1", "nfs nas-b:/export")
    hosts, cl = _cluster({"node-01": {"storage.shared": other}, "node-02": {"storage.shared": reader}},
                         shared_paths=("/shared",))
    cl.hosts = [h for h in cl.hosts if h.name != "node-03"]
    del cl.facts["node-03"]
    [r] = run_check(network.test_shared_storage, cluster=cl)
    assert (r.outcome, r.outliers) == ("failed", ("node-02",)) and "at /shared on node-01" not in r.remedy, r


def test_shared_storage_views():
    records = {"node-01": {"storage.shared": "writer written /shared\nwriter written /ckpt\n"},
               "node-02": {"storage.shared": "from node-01\nseen /shared\nmissing /ckpt -\n"},
               "node-03": {"storage.shared": "from node-01\nseen /shared\nmissing /ckpt common.pt,\n"}}
    hosts, cl = _cluster(records, shared_paths=("/shared",), checkpoint_dir="/ckpt")
    results = run_check(network.test_shared_storage, cluster=cl)
    assert {(r.subject, r.outcome) for r in results} == {("/shared", "passed"), ("/ckpt", "failed")}
    [bad] = [r for r in results if r.outcome == "failed"]
    assert set(bad.outliers) == {"node-02", "node-03"} and "node-03 lacks checkpoint metadata .metadata, " \
        "metadata.json" in bad.message and bad.severity == "error"
    # All three copied everywhere: a warning (resuming works, later checkpoints will not be shared).
    records["node-02"] = records["node-03"] = {"storage.shared": "from node-01\nseen /shared\n"
                                                                  "missing /ckpt common.pt,.metadata,metadata.json,\n"}
    hosts, cl = _cluster(records, shared_paths=("/shared",), checkpoint_dir="/ckpt")
    [bad] = [r for r in run_check(network.test_shared_storage, cluster=cl) if r.outcome != "passed"]
    assert bad.outcome == "warning" and "checkpoint metadata present on node-[02-03]" in bad.message


def test_a_read_only_shared_path_is_judged_by_its_filesystem():
    """A model folder mounted read-only takes no marker: it was an error, "not writable on node-01",
    with the remedy to mount a shared filesystem it already was."""
    fs = "fs nfs4 nas:/export/models /models\n"
    records = {"node-01": {"storage.shared": "writer unwritable /models\nwriter " + fs},
               "node-02": {"storage.shared": "from node-01\nmissing /models -\n" + fs},
               "node-03": {"storage.shared": "from node-01\nmissing /models -\n" + fs}}
    hosts, cl = _cluster(records, shared_paths=("/models",))
    [r] = run_check(network.test_shared_storage, cluster=cl)
    assert r.outcome == "passed" and "same nfs4 filesystem (nas:/export/models) on all 3 nodes" in r.message, r.message
    records["node-03"] = {"storage.shared": "from node-01\nmissing /models -\nfs ext2/ext3 /dev/sda2 /models\n"}
    hosts, cl = _cluster(records, shared_paths=("/models",))
    [r] = run_check(network.test_shared_storage, cluster=cl)
    assert r.outcome == "failed" and "node-03: ext2/ext3 /dev/sda2" in r.message, r.message
    assert r.outliers == ("node-03",)
    # FUSE filesystems read as fuseblk (JuiceFS, s3fs, GlusterFS): their df source names the backend.
    juice = {n: {"storage.shared": rec["storage.shared"].replace("nfs4 nas:/export/models", "fuseblk JuiceFS:vol")}
             for n, rec in {"node-01": {"storage.shared": "writer unwritable /models\nwriter " + fs},
                            "node-02": {"storage.shared": "from node-01\nmissing /models -\n" + fs},
                            "node-03": {"storage.shared": "from node-01\nmissing /models -\n" + fs}}.items()}
    hosts, cl = _cluster(juice, shared_paths=("/models",))
    assert run_check(network.test_shared_storage, cluster=cl)[0].outcome == "passed"
    # Every node mounting its own export is not one filesystem.
    own = {n: {"storage.shared": r["storage.shared"].replace("fuseblk JuiceFS:vol", "nfs localhost:/export")}
           for n, r in juice.items()}
    hosts, cl = _cluster(own, shared_paths=("/models",))
    assert run_check(network.test_shared_storage, cluster=cl)[0].outcome == "failed"
    # FUSE over a local disk or a container layer is each node's own.
    for local in ("fuseblk /dev/sdb1", "fuseblk fuse-overlayfs", "nfs ip6-localhost:/export"):
        alike = {n: {"storage.shared": r["storage.shared"].replace("fuseblk JuiceFS:vol", local)} for n, r in juice.items()}
        hosts, cl = _cluster(alike, shared_paths=("/models",))
        assert run_check(network.test_shared_storage, cluster=cl)[0].outcome == "failed", local
    # Two nodes on local disks and one on the NFS server: the local ones are not "the majority that is right".
    mixed = {"node-01": {"storage.shared": "writer unwritable /models\nwriter fs xfs /dev/nvme0n1p1 /models\n"},
             "node-02": {"storage.shared": "from node-01\nmissing /models -\nfs xfs /dev/nvme0n1p1 /models\n"},
             "node-03": {"storage.shared": "from node-01\nmissing /models -\n" + fs}}
    hosts, cl = _cluster(mixed, shared_paths=("/models",))
    [r] = run_check(network.test_shared_storage, cluster=cl)
    assert r.outcome == "failed" and r.outliers == ("node-01", "node-02", "node-03"), r.outliers
    # Without the filesystem lines (an older record): the plain "not writable" failure.
    records = {"node-01": {"storage.shared": "writer unwritable /models\n"},
               "node-02": {"storage.shared": "from node-01\nmissing /models -\n"}}
    hosts, cl = _cluster(records, shared_paths=("/models",))
    [r] = [r for r in run_check(network.test_shared_storage, cluster=cl) if r.subject == "/models"]
    assert r.outcome == "failed" and "/models is not writable on node-01" in r.message


def test_the_filesystem_line_of_the_marker_scripts(tmp_path):
    from preflight.activeprobe import _FS_OF
    out = subprocess.run(["bash", "-c", _FS_OF + 'fs_of "/with space" "$1"', "x", str(tmp_path)],
                         capture_output=True, text=True, timeout=30).stdout
    kind, source, path = out.strip().split(" ", 3)[1:]
    assert path == "/with space" and kind not in ("", "-") and source not in ("", "-"), out


def test_shared_storage_is_between_the_nodes_that_name_the_path():
    """DESIGN's inventory lists the controller's own local entry first: it became the writer, naming
    no checkpoint_dir, and every node was compared with it ("/ckpt does not exist on localhost")."""
    from preflight.activeprobe import shared_participants

    local = dataclasses.replace(make_host("localhost"), connection="local")
    nodes = [make_host(f"node-0{i}", checkpoint_dir="/ckpt") for i in (1, 2)]
    cl = cluster_of((local, make_facts("localhost")), *[(h, make_facts(h.name)) for h in nodes])
    assert [h.name for h in shared_participants(cl)] == ["node-01", "node-02"]
    cl.facts["node-01"].raw["storage.shared"] = out("writer written /ckpt\n")
    cl.facts["node-02"].raw["storage.shared"] = out("from node-01\nseen /ckpt\n")
    results = run_check(network.test_shared_storage, cluster=cl)
    assert [(r.subject, r.outcome) for r in results] == [("/ckpt", "passed")], results


def test_shared_storage_with_fewer_than_two_reached_nodes_says_so():
    """Phase two writes no marker with one node reached; the check read that as "not gathered" and
    "no node could write the marker files", both untrue, and the run was NOT READY (found by review)."""
    from preflight.facts import HostFacts

    one = make_host("node-01", checkpoint_dir="/ckpt")
    [r] = run_check(network.test_shared_storage, cluster=cluster_of((one, make_facts("node-01"))))
    assert r.outcome == "skipped" and "only node-01 was reached" in r.message and "/ckpt" in r.message
    hosts = [make_host(f"node-0{i}", checkpoint_dir="/ckpt") for i in (1, 2)]
    down = [HostFacts(host=h.name, address=h.address, reachable=False, error=f"{h.name}: connection refused",
                      error_kind="unreachable") for h in hosts]
    [r] = run_check(network.test_shared_storage, cluster=cluster_of(*zip(hosts, down)))
    assert r.outcome == "error" and "no node was reached" in r.message
    # Both reached but the marker probe left no record: not "no node could write".
    both = [make_facts(h.name) for h in hosts]
    for f in both:
        f.raw["storage.shared"] = out("", rc=None)
    [r, *_] = [r for r in run_check(network.test_shared_storage, cluster=cluster_of(*zip(hosts, both)))
               if r.host is None]
    assert r.outcome == "error" and "marker probe left no record" in r.message, r.message
    # One of two reached: skipped, naming it.
    [r] = run_check(network.test_shared_storage, cluster=cluster_of((hosts[0], make_facts("node-01")),
                                                                      (hosts[1], down[1])))
    assert r.outcome == "skipped" and "only node-01 was reached" in r.message


def test_rendezvous_agreement():
    def env(addr, port, rank, size):
        return {"MASTER_ADDR": addr, "MASTER_PORT": port, "RANK": rank, "WORLD_SIZE": size}

    from tests.factsets import healthy_raw
    hosts = [make_host(f"node-0{i}", address=f"10.0.0.{i}") for i in (1, 2, 3)]
    envs = [env("10.0.0.1", "29500", "0", "3"), env("10.0.0.1", "29501", "1", "3"), env("10.0.0.1", "29500", "1", "2")]
    facts = [make_facts(h.name, raw=healthy_raw(env=e)) for h, e in zip(hosts, envs)]
    for f in facts[1:]:
        f.raw["tcp.rendezvous"] = out("open 10.0.0.1 29500 temporary\n")
    cl = cluster_of(*zip(hosts, facts))
    results = run_check(network.test_rendezvous, cluster=cl)
    outcome = {(r.subject, r.outcome) for r in results}
    assert ("MASTER_ADDR", "passed") in outcome
    assert ("MASTER_PORT", "failed") in outcome and ("RANK", "failed") in outcome and ("WORLD_SIZE", "failed") in outcome
    port = next(r for r in results if r.subject == "MASTER_PORT")
    assert port.outliers == ("node-02",) and "MASTER_PORT=29501" in port.message
    reach = [r for r in results if r.subject == "10.0.0.1:29500"]
    assert {(r.host, r.outcome) for r in reach} == {("node-02", "passed"), ("node-03", "passed")}


def _rdzv_cluster(envs, probe_to=None):
    from tests.factsets import healthy_raw
    hosts = [make_host(f"node-0{i}", address=f"10.0.0.{i}") for i in range(1, len(envs) + 1)]
    facts = [make_facts(h.name, raw=healthy_raw(env=e)) for h, e in zip(hosts, envs)]
    for f in facts:
        f.raw["tcp.rendezvous"] = out(f"open {probe_to or '10.0.0.1'} 29500 temporary\n")
    return cluster_of(*zip(hosts, facts))


def test_rendezvous_master_addr_spelled_two_ways_for_one_master_agrees():
    """MASTER_ADDR=10.0.0.1 on node-01 and =node-01 on the others failed as a disagreement, though
    the same run found rank 0 and the port on that one master (NOT READY for nothing)."""
    def env(addr, rank):
        return {"MASTER_ADDR": addr, "MASTER_PORT": "29500", "RANK": rank, "WORLD_SIZE": "3"}

    cl = _rdzv_cluster([env("10.0.0.1", "0"), env("node-01", "1"), env("node-01.cluster.local", "2")])
    results = {r.subject: r for r in run_check(network.test_rendezvous, cluster=cl) if r.host is None}
    addr = results["MASTER_ADDR"]
    assert addr.outcome == "passed", addr
    assert addr.message == "MASTER_ADDR=10.0.0.1/node-01/node-01.cluster.local on all 3 nodes (all naming node-01)"
    # Two different masters still fail, each side shown as it is spelled.
    cl = _rdzv_cluster([env("10.0.0.1", "0"), env("node-01", "1"), env("10.0.0.2", "2")])
    addr = {r.subject: r for r in run_check(network.test_rendezvous, cluster=cl) if r.host is None}["MASTER_ADDR"]
    assert addr.outcome == "failed" and addr.outliers == ("node-03",), addr
    assert "node-03: MASTER_ADDR=10.0.0.2, while node-[01-02] have MASTER_ADDR=10.0.0.1/node-01" in addr.observed


def test_rendezvous_rank_zero_is_on_the_master():
    """Distinct ranks passed with rank 0 on another node than MASTER_ADDR's, or with no rank 0 at all:
    every rank then waits at an address where no store listens."""
    def env(rank, addr="10.0.0.1"):
        return {"MASTER_ADDR": addr, "MASTER_PORT": "29500", "RANK": rank, "WORLD_SIZE": "3"}

    def rank_result(envs, **kw):
        [r] = [r for r in run_check(network.test_rendezvous, cluster=_rdzv_cluster(envs, **kw)) if r.subject == "RANK"]
        return r

    r = rank_result([env("0"), env("1"), env("2")])
    assert r.outcome == "passed" and "0 on the master node-01" in r.message
    r = rank_result([env("1"), env("0"), env("2")])
    assert r.outcome == "failed" and "MASTER_ADDR=10.0.0.1 names node-01, whose RANK is 1; RANK=0 is on node-02" in r.message
    r = rank_result([env("1"), env("2"), env("3")])
    assert r.outcome == "failed" and "RANK=3 on node-03" in r.message and r.outliers == ("node-03",)
    r = rank_result([env("2"), env("1"), env("3"), env("4")][:3])
    assert r.outcome == "failed" and r.outliers == ("node-03",)
    # MASTER_ADDR as a fully qualified name of the inventory's node-01: node-01 is the master, its port probed.
    r = rank_result([env("0", "node-01.cluster.local"), env("1", "node-01.cluster.local"), env("2", "node-01.cluster.local")],
                    probe_to="node-01.cluster.local")
    assert r.outcome == "passed" and "the master node-01" in r.message


def test_rendezvous_ranks_count_the_nodes_not_read_too():
    """A node unreachable: the ranks of the others were judged against the nodes read (0..2 of 4),
    and a healthy node-04 with RANK=3 was blamed."""
    from preflight.facts import HostFacts
    envs = [{"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "RANK": str(i), "WORLD_SIZE": "4"} for i in range(4)]
    cl = _rdzv_cluster(envs)
    cl.facts["node-03"] = HostFacts(host="node-03", address="10.0.0.3", reachable=False, error="refused")
    [r] = [r for r in run_check(network.test_rendezvous, cluster=cl) if r.subject == "RANK"]
    assert r.outcome == "passed", r.message
    # Rank 0 (the master) not read: not evaluated, no one blamed.
    cl = _rdzv_cluster(envs)
    cl.facts["node-01"] = HostFacts(host="node-01", address="10.0.0.1", reachable=False, error="refused")
    [r] = [r for r in run_check(network.test_rendezvous, cluster=cl) if r.subject == "RANK"]
    assert r.outcome == "error" and "not evaluated on node-01" in r.message, r.message


@pytest.mark.parametrize("record", ["refused 10.0.0.1 29500 none connection refused",
                                    "timeout 10.0.0.1 29500 none no answer within 3s"])
def test_rendezvous_an_unreachable_master_is_not_a_firewall(record):
    """The master unreachable, its port was not probed: the others' refused or timed-out connects
    blamed a missing python3 or a firewall.  Phase two does not probe it; the check names the master."""
    from preflight.activeprobe import PhaseTwo
    from preflight.facts import HostFacts

    envs = [{"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "RANK": str(i), "WORLD_SIZE": "3"} for i in range(3)]
    cl = _rdzv_cluster(envs)
    for f in cl.facts.values():
        f.raw["tcp.rendezvous"] = out(record + "\n")
    cl.facts["node-01"] = HostFacts(host="node-01", address="10.0.0.1", reachable=False, error="auth failed")
    reach = [r for r in run_check(network.test_rendezvous, cluster=cl) if r.subject == "10.0.0.1:29500"]
    assert [(r.outcome, r.message) for r in reach] == [
        ("error", "not evaluated: the rendezvous master node-01 (MASTER_ADDR=10.0.0.1) is unreachable")]
    PhaseTwo(cl, gatherer=None, settings=None).rendezvous()  # nothing to listen on, nothing run


def test_rendezvous_ranks_alike_as_numbers_are_the_same_rank():
    envs = [{"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "RANK": r, "WORLD_SIZE": "3"} for r in ("0", "1", "01")]
    [r] = [r for r in run_check(network.test_rendezvous, cluster=_rdzv_cluster(envs)) if r.subject == "RANK"]
    assert r.outcome == "failed" and r.outliers == ("node-02", "node-03"), r.message


def test_rendezvous_a_master_read_without_rank_zero_fails_though_a_node_is_unread():
    from preflight.facts import HostFacts
    envs = [{"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "RANK": r, "WORLD_SIZE": "3"} for r in ("1", "2", "0")]
    cl = _rdzv_cluster(envs)
    cl.facts["node-03"] = HostFacts(host="node-03", address="10.0.0.3", reachable=False, error="refused")
    [r] = [r for r in run_check(network.test_rendezvous, cluster=cl) if r.subject == "RANK"]
    assert r.outcome == "failed" and "names node-01, whose RANK is 1" in r.message, r.message


def test_rendezvous_world_size_on_many_nodes_is_one_line():
    envs = [{"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "RANK": str(i), "WORLD_SIZE": "32"} for i in range(4)]
    [r] = [r for r in run_check(network.test_rendezvous, cluster=_rdzv_cluster(envs)) if r.subject == "WORLD_SIZE"]
    assert r.outcome == "failed" and "WORLD_SIZE=32 on node-[01-04]; expected WORLD_SIZE=4" in r.message, r.message


def test_rendezvous_loopback_master_is_a_failure_even_when_a_local_entry_is_named_so():
    from preflight.activeprobe import rendezvous_plan
    from tests.factsets import healthy_raw
    env = {"MASTER_ADDR": "localhost", "MASTER_PORT": "29500"}
    hosts = [make_host("localhost", address="localhost"), make_host("node-02", address="10.0.0.2")]
    cl = cluster_of(*[(h, make_facts(h.name, raw=healthy_raw(env=env))) for h in hosts])
    assert rendezvous_plan(cl).master is None
    [r] = [r for r in run_check(network.test_rendezvous, cluster=cl) if r.subject == "localhost:29500"]
    assert r.outcome == "failed" and "is a loopback address" in r.message
    single = cluster_of((hosts[0], make_facts("localhost", raw=healthy_raw(env=env))))
    [r] = [r for r in run_check(network.test_rendezvous, cluster=single) if r.subject == "localhost:29500"]
    assert r.outcome == "passed" and "single-node" in r.message


def test_rendezvous_master_on_another_nic_of_a_node():
    """MASTER_ADDR on node-01's training NIC (not the address SSH uses): node-01 is the master and
    its port is probed there; an address every node has (a bridge) names no one master."""
    from preflight.activeprobe import rendezvous_plan
    from tests.factsets import IFACES, healthy_raw

    def nics(i, extra):
        return [*IFACES[:1], {**IFACES[1], "addr_info": [{"family": "inet", "local": f"10.0.0.{i}", "prefixlen": 24}]},
                {"ifname": "enp189s0f0", "flags": ["UP", "LOWER_UP"], "operstate": "UP",
                 "addr_info": [{"family": "inet", "local": a, "prefixlen": 24} for a in (f"192.168.9.{i}", *extra)]}]

    hosts = [make_host(f"node-0{i}", address=f"10.0.0.{i}") for i in (1, 2, 3)]
    env = {"MASTER_ADDR": "192.168.9.1", "MASTER_PORT": "29500"}
    facts = [make_facts(h.name, raw=healthy_raw(env=env, interfaces=nics(i, ()))) for i, h in zip((1, 2, 3), hosts)]
    for f in facts[1:]:
        f.raw["tcp.rendezvous"] = out("open 192.168.9.1 29500 temporary\n")
    cl = cluster_of(*zip(hosts, facts))
    plan = rendezvous_plan(cl)
    assert plan.master.name == "node-01" and [h.name for h in plan.sources] == ["node-02", "node-03"]
    reach = [r for r in run_check(network.test_rendezvous, cluster=cl) if r.subject == "192.168.9.1:29500"]
    assert {(r.host, r.outcome) for r in reach} == {("node-02", "passed"), ("node-03", "passed")}
    env = {"MASTER_ADDR": "172.18.0.1", "MASTER_PORT": "29500"}
    facts = [make_facts(h.name, raw=healthy_raw(env=env, interfaces=nics(i, ("172.18.0.1",))))
             for i, h in zip((1, 2, 3), hosts)]
    cl = cluster_of(*zip(hosts, facts))
    assert rendezvous_plan(cl).master is None
    [r] = [r for r in run_check(network.test_rendezvous, cluster=cl) if r.subject == "172.18.0.1:29500"]
    assert r.outcome == "error" and "is an address of node-[01-03] alike" in r.message and "rank-0" in r.remedy
    # A single-node script's MASTER_ADDR=127.0.0.1: a failure saying so, not "a bridge every node has".
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    cl = cluster_of(*zip(hosts, [make_facts(h.name, raw=healthy_raw(env=env, interfaces=nics(i, ())))
                                 for i, h in zip((1, 2, 3), hosts)]))
    [r] = [r for r in run_check(network.test_rendezvous, cluster=cl) if r.subject == "127.0.0.1:29500"]
    assert r.outcome == "failed" and "is a loopback address" in r.message and "bridge" not in r.message


def test_device_ping_rows():
    rec = ("schedule ring\nnode-02 0 0 29.1.0.20 rc=0 3 packets transmitted, 3 received\n"
           "node-02 1 1 29.1.0.21 rc=1 3 packets transmitted, 0 received\n")
    hosts, cl = _cluster({"node-01": {"hccn.ping": rec}})
    results = run_check(network.test_device_ping, host=hosts[0], facts=cl.facts["node-01"], cluster=cl)
    assert {(r.subject, r.outcome) for r in results} == {("npu0->node-02:npu0", "passed"),
                                                         ("npu1->node-02:npu1", "failed")}
    hosts, cl = _cluster({"node-01": {"hccn.ping": "schedule none\n"}})
    [r] = run_check(network.test_device_ping, host=hosts[0], facts=cl.facts["node-01"], cluster=cl)
    assert r.outcome == "skipped"
    # A ping into a port already found DOWN names it: the healthy source is not the fault.
    hosts, cl = _cluster({"node-01": {"hccn.ping": rec}, "node-02": {"hccn.link/1": "link status: DOWN\n"}})
    [bad] = [r for r in run_check(network.test_device_ping, host=hosts[0], facts=cl.facts["node-01"], cluster=cl)
             if r.outcome == "failed"]
    assert "the link of node-02 npu1 is DOWN (see hccl.link_up)" in bad.message, bad.message


def test_device_ping_not_run_says_why_where_the_cluster_explains_it():
    """No ping record: an error only when the run failed to ping; where hccl.* themselves skip
    (310P, no device IP, no peer with one) it is a skip saying so, not an error with a --host-timeout remedy."""
    from tests.factsets import fixture

    def no_ips(cl, name):
        for key in [k for k in cl.facts[name].raw if k.startswith("hccn.ip/")]:
            cl.facts[name].raw[key] = out("", rc=13, stderr="")
            cl.facts[name]._cache.pop(key, None)

    ips = {f"node-0{n}": {f"hccn.ip/{d}": f"ipaddr:29.1.{n}.{d}\nnetmask:255.255.0.0\n" for d in range(8)}
           for n in (1, 2, 3)}
    hosts, cl = _cluster(ips)
    [r] = run_check(network.test_device_ping, host=hosts[0], facts=cl.facts["node-01"], cluster=cl)
    assert r.outcome == "error"  # every node has device IPs: the pings should have run
    no_ips(cl, "node-02"), no_ips(cl, "node-03")
    [r] = run_check(network.test_device_ping, host=hosts[0], facts=cl.facts["node-01"], cluster=cl)
    assert r.outcome == "skipped" and "node-01 is the only node whose device IPs were read" in r.message
    [r] = run_check(network.test_device_ping, host=hosts[1], facts=cl.facts["node-02"], cluster=cl)
    assert r.outcome == "failed" and "none of the 8 NPUs has a device IP" in r.message, r.message
    hosts, cl = _cluster({h: {**ips[h], "npu_smi.info": fixture("npu-smi/info/310p3-25.2.0-duo-npu2-3.txt")}
                          for h in ("node-01", "node-02", "node-03")})
    [r] = run_check(network.test_device_ping, host=hosts[0], facts=cl.facts["node-01"], cluster=cl)
    assert r.outcome == "skipped" and "cards have no RoCE port" in r.message
    # A node with no NPU at all: said so, not "hccn_tool -ping was not gathered" (a fault of the run).
    hosts, cl = _cluster({"node-01": {"probe.devices": ""}})
    [r] = run_check(network.test_device_ping, host=hosts[0], facts=cl.facts["node-01"], cluster=cl)
    assert r.outcome == "error" and r.host == "node-01" and r.message == (
        "not evaluated: no NPU to ping from on this node: no /dev/davinciN device nodes (see npu.count_and_type)"), r
    assert "--device /dev/davinciN" in r.remedy and "not gathered" not in r.message


def test_rendezvous_master_from_the_job_when_the_nodes_do_not_set_it(tmp_path):
    from preflight.activeprobe import rendezvous_plan
    from preflight.job import load_jobs
    from preflight.run import Cluster

    script = tmp_path / "train.sh"
    script.write_text('MASTER_PORT=6000\nDISTRIBUTED_ARGS="--nproc_per_node 8 --nnodes 3 --node_rank 0 '
                      '--master_addr 10.0.0.1 --master_port $MASTER_PORT"\n'
                      'torchrun $DISTRIBUTED_ARGS pretrain_gpt.py --tensor-model-parallel-size 2 --load /m\n')
    hosts = [make_host(f"node-0{i}", address=f"10.0.0.{i}") for i in (1, 2, 3)]
    facts = {h.name: make_facts(h.name) for h in hosts}
    for name in ("node-02", "node-03"):
        facts[name].raw["tcp.rendezvous"] = out("timeout 10.0.0.1 6000 temporary no answer within 3s\n")
    cl = Cluster(tuple(hosts), facts, tuple(load_jobs([str(script)], None)))
    plan = rendezvous_plan(cl)
    assert (plan.address, plan.port, plan.master.name) == ("10.0.0.1", 6000, "node-01")
    assert plan.source.startswith(f"job {script}")
    results = run_check(network.test_rendezvous, cluster=cl)
    assert {(r.host, r.subject, r.outcome) for r in results} == {
        ("node-02", "10.0.0.1:6000", "failed"), ("node-03", "10.0.0.1:6000", "failed")}
    assert all("from the job" in r.message for r in results)


# -- the temporary listener --------------------------------------------------------------------

def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Facts:
    def __init__(self, values):
        self.values = values

    def get(self, name):
        return self.values[name]

    def optional(self, name, default=None):
        return HostFacts.optional(self, name, default)


class _LocalGatherer:
    def __init__(self):
        from preflight.transport.local import LocalTransport

        self.local = LocalTransport()

    def transport(self, host):
        return self.local


def test_listener_tells_a_listener_from_a_port_held_by_a_connection():
    """A port in use is "existing" only when something listens on it; one held by a connection as
    its local port (an outgoing connection, or one in TIME_WAIT: HCCL's 60000-60015 lie inside
    Linux's default ephemeral range) is "held": no listener there, so a refused connect is no
    firewall finding."""
    import socket
    import sys
    from types import SimpleNamespace

    from preflight.activeprobe import PhaseTwo
    from preflight.gather import GatherSettings

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    listened = server.getsockname()[1]  # something listens, on 127.0.0.1 only: bind 0.0.0.0 fails
    client = socket.socket()
    client.bind(("127.0.0.1", 0))
    held = client.getsockname()[1]
    client.connect(("127.0.0.1", listened))  # an established connection with local port `held`
    accepted, _ = server.accept()
    free = _free_port()
    host = make_host("local")
    cluster = SimpleNamespace(facts={"local": _Facts({"net.listening": frozenset(),
                                                      "tools.python3": sys.executable})})
    phase = PhaseTwo(cluster, _LocalGatherer(), GatherSettings(command_timeout=10, connect_timeout=5))
    try:
        listening = phase.listen(host, [free, listened, held])
        try:
            assert listening.states == {free: "temporary", listened: "existing", held: "held"}
            with socket.create_connection(("127.0.0.1", free), timeout=5):
                pass  # ours accepts
        finally:
            listening.close()
        # The same once the connection is closed from our side: its port stays in TIME_WAIT.
        client.close()
        accepted.close()
        listening = phase.listen(host, [held])
        listening.close()
        assert listening.states == {held: "held"}
    finally:
        for s in (client, accepted, server):
            s.close()


@pytest.mark.parametrize("printed", ["nan", "inf", "1_700_000_000", "Sun Dec  6 06:00:00 UTC 2026"])
def test_a_clock_reading_that_is_not_a_number_of_seconds_is_unreadable_not_a_pass(printed):
    """float() took `nan`, `inf` and `1_0` from a `date` shim: a NaN offset passed clock_skew."""
    from preflight.activeprobe import PhaseTwo
    from preflight.gather import GatherSettings
    from preflight.probe import CommandOutput

    hosts, cl = _cluster({})
    phase = PhaseTwo(cl, _LocalGatherer(), GatherSettings(command_timeout=10, connect_timeout=5))
    phase.run = lambda host, command, timeout: CommandOutput(
        stdout=(printed if host.name == "node-02" else f"{__import__('time').time():.6f}") + "\n", stderr="", rc=0)
    phase.clock()
    raw = cl.facts["node-02"].raw["clock.offset"]
    assert raw.rc == 1 and "unreadable date output" in raw.stderr, raw
    results = run_check(network.test_clock_skew, cluster=cl)
    assert not any(r.outcome == "passed" and "node-02" in (r.subject or "") for r in results)
    assert any("node-02" in r.message and r.outcome == "error" for r in results), results


def test_a_clock_read_over_a_slow_round_trip_is_read_again_and_the_most_precise_kept():
    """A stall during the clock read (a busy controller, a paused VM) leaves the reading uncertain by
    half the round trip: two such readings fail cluster.clock_skew as "cannot be told from the
    bound" on a synchronised fleet.  It is read again, at most three times in all, and the most
    precise reading kept; a fast first read is read once."""
    import time

    from preflight.activeprobe import CLOCK_READS, PhaseTwo
    from preflight.gather import GatherSettings
    from preflight.probe import CommandOutput

    hosts, cl = _cluster({})
    phase = PhaseTwo(cl, _LocalGatherer(), GatherSettings(command_timeout=10, connect_timeout=5))
    # Stalls far from CLOCK_PRECISE_S (0.25 s of half round trip) either way: a loaded machine's
    # own delays do not change which reads are taken.
    stalls = {"node-01": [0.0], "node-02": [1.2, 0.0, 0.0], "node-03": [1.4, 1.6, 1.0]}
    sent = []

    def run(host, command, timeout):
        sent.append(host.name)
        time.sleep(stalls[host.name][sum(1 for n in sent if n == host.name) - 1])
        return CommandOutput(stdout=f"{time.time():.6f}\n", stderr="", rc=0)

    phase.run = run
    phase.clock()
    assert [sent.count(n) for n in ("node-01", "node-02", "node-03")] == [1, 2, CLOCK_READS] == [1, 2, 3]
    offsets = {h.name: cl.facts[h.name].get("clock.offset") for h in hosts}
    assert offsets["node-01"].uncertainty_s < 0.25 and offsets["node-02"].uncertainty_s < 0.25
    assert 0.5 <= offsets["node-03"].uncertainty_s < 0.7  # the best of 1.4, 1.6, 1.0 s
    assert all(abs(o.offset_s) <= o.uncertainty_s + 0.05 for o in offsets.values()), offsets
    # A re-read that printed nothing (its output lost) does not replace a reading.
    sent.clear()
    stalls["node-03"] = [1.0, 0.0, 0.0]

    def run_losing(host, command, timeout):
        sent.append(host.name)
        time.sleep(stalls[host.name][sum(1 for n in sent if n == host.name) - 1])
        first = sum(1 for n in sent if n == host.name) == 1
        return CommandOutput(stdout=f"{time.time():.6f}\n" if first or host.name != "node-03" else "", stderr="",
                             rc=0)

    phase.run = run_losing
    phase.clock()
    cl.facts["node-03"]._cache.clear()
    assert sent.count("node-03") == 3
    assert 0.5 <= cl.facts["node-03"].get("clock.offset").uncertainty_s < 0.7
    # A node whose date fails is not asked again.
    sent.clear()
    phase.run = lambda host, command, timeout: sent.append(host.name) or CommandOutput(stdout="", stderr="x", rc=1)
    phase.clock()
    assert sorted(sent) == ["node-01", "node-02", "node-03"]


def test_a_ping_run_cut_short_names_every_pair_it_left():
    """One node's ping run ends early (its connection lost): the pings it answered are kept, every
    pair it left is an error saying why, and no pair reads as "no peer in the schedule"."""
    from preflight.activeprobe import PhaseTwo
    from preflight.gather import GatherSettings
    from preflight.probe import CommandOutput

    hosts, cl = _cluster({f"node-0{n}": {f"hccn.ip/{d}": f"ipaddr:29.0.{n}.{d}\nnetmask:255.255.0.0\n"
                                         for d in range(8)} for n in (1, 2, 3)})
    phase = PhaseTwo(cl, _LocalGatherer(), GatherSettings(command_timeout=10, connect_timeout=5))
    sent = []

    def run(host, command, timeout):
        sent.append(host.name)
        if host.name == "node-02":
            return CommandOutput(stdout="0 29.0.0.0 rc=0 3 packets transmitted, 3 received\n",
                                 stderr="Connection reset by peer\n", rc=None)
        return CommandOutput(stdout="".join(f"{d} 29.0.0.{d} rc=0 3 packets transmitted, 3 received\n"
                                            for d in range(8)), stderr="", rc=0)

    phase.run = run
    phase.device_ping("ring")
    assert sorted(sent) == ["node-01", "node-02", "node-03"]
    results = run_check(network.test_device_ping, host=hosts[1], facts=cl.facts["node-02"], cluster=cl)
    outcomes = {r.subject: r.outcome for r in results}
    assert len(outcomes) == 8 and outcomes.pop("npu0->node-03:npu0") == "passed"
    assert set(outcomes.values()) == {"error"}
    assert all("the ping run ended early: Connection reset by peer" in r.message
               for r in results if r.outcome == "error")
    healthy = run_check(network.test_device_ping, host=hosts[0], facts=cl.facts["node-01"], cluster=cl)
    assert {r.outcome for r in healthy} == {"passed"} and len(healthy) == 8


def test_npu_i_pings_npu_i_and_an_npu_left_without_a_peer_is_said():
    """Pairs were zipped in order: node-02's npu3 without a device IP shifted every later pair
    (npu3 -> npu4 ...) and left node-01's npu7 pinging nobody, silently."""
    from preflight.activeprobe import PhaseTwo
    from preflight.gather import GatherSettings
    from preflight.probe import CommandOutput

    records = {f"node-0{n}": {f"hccn.ip/{d}": "" if (n, d) == (2, 3) else f"ipaddr:29.0.{n}.{d}\nnetmask:255.255.0.0\n"
                              for d in range(8)} for n in (1, 2)}
    hosts, cl = _cluster(records)
    phase = PhaseTwo(cl, _LocalGatherer(), GatherSettings(command_timeout=10, connect_timeout=5))
    asked = {}

    def run(host, command, timeout):
        pairs = [a.split("=") for a in shlex.split(command.split(" preflight ", 1)[1])]
        asked[host.name] = pairs
        return CommandOutput(stdout="".join(f"{d} {ip} rc=0 3 packets transmitted, 3 received\n" for d, ip in pairs),
                             stderr="", rc=0)

    phase.run = run
    phase.device_ping("ring")
    assert asked["node-01"] == [[str(d), f"29.0.2.{d}"] for d in range(8) if d != 3]
    results = {r.subject: r for r in run_check(network.test_device_ping, host=hosts[0], facts=cl.facts["node-01"],
                                               cluster=cl)}
    assert results["npu4->node-02:npu4"].outcome == "passed"
    unpaired = results["npu3->node-02:npu3"]
    assert unpaired.outcome == "skipped" and "no peer: node-02 npu3 has no device IP" in unpaired.message
    # Nodes sharing most NPU numbers are not paired across numbers (npu6 -> npu7 is a rail HCCL never uses).
    records = {"node-01": {f"hccn.ip/{d}": f"ipaddr:29.0.1.{d}\n" for d in range(8) if d != 7},
               "node-02": {f"hccn.ip/{d}": f"ipaddr:29.0.2.{d}\n" for d in range(8) if d != 6}}
    hosts, cl = _cluster(records)
    phase = PhaseTwo(cl, _LocalGatherer(), GatherSettings(command_timeout=10, connect_timeout=5))
    phase.run = run
    phase.device_ping("ring")
    assert asked["node-01"] == [[str(d), f"29.0.2.{d}"] for d in range(6)]
    # Containers given other devices (npu4-7 on one node, npu0-3 on the other) are paired in order.
    hosts, cl = _cluster({"node-01": {"probe.devices": "4 5 6 7", **{f"hccn.ip/{d}": f"ipaddr:29.0.1.{d}\n"
                                                                    for d in range(4, 8)}},
                          "node-02": {"probe.devices": "0 1 2 3", **{f"hccn.ip/{d}": f"ipaddr:29.0.2.{d}\n"
                                                                    for d in range(4)}}})
    phase = PhaseTwo(cl, _LocalGatherer(), GatherSettings(command_timeout=10, connect_timeout=5))
    phase.run = run
    phase.device_ping("ring")
    assert asked["node-01"] == [["4", "29.0.2.0"], ["5", "29.0.2.1"], ["6", "29.0.2.2"], ["7", "29.0.2.3"]]
    # Containers given overlapping devices (0-3 and 2-5): local rank i to local rank i, none left out.
    hosts, cl = _cluster({"node-01": {"probe.devices": "0 1 2 3", **{f"hccn.ip/{d}": f"ipaddr:29.0.1.{d}\n"
                                                                    for d in range(4)}},
                          "node-02": {"probe.devices": "2 3 4 5", **{f"hccn.ip/{d}": f"ipaddr:29.0.2.{d}\n"
                                                                    for d in range(2, 6)}}})
    phase = PhaseTwo(cl, _LocalGatherer(), GatherSettings(command_timeout=10, connect_timeout=5))
    phase.run = run
    phase.device_ping("ring")
    assert asked["node-01"] == [["0", "29.0.2.2"], ["1", "29.0.2.3"], ["2", "29.0.2.4"], ["3", "29.0.2.5"]]


def test_a_device_ip_that_could_not_be_read_is_not_called_missing_nor_left_out():
    """node-06 npu4's hccn_tool hung: its pair from node-05 read "no peer: node-06 npu4 has no device
    IP", and its own pair to the next node had no result at all (its cell a pass)."""
    from preflight.activeprobe import PhaseTwo
    from preflight.gather import GatherSettings
    from preflight.probe import CommandOutput

    def ips(n, hung=()):
        return {"probe.devices": "0 1 2", **{f"hccn.ip/{d}": f"ipaddr:29.0.{n}.{d}\n" for d in range(3) if d not in hung}}

    hosts, cl = _cluster({"node-01": ips(1), "node-02": ips(2), "node-03": ips(3)})
    cl.facts["node-02"].raw["hccn.ip/1"] = CommandOutput(stdout="", stderr="", rc=124)
    phase = PhaseTwo(cl, _LocalGatherer(), GatherSettings(command_timeout=10, connect_timeout=5))

    def run(host, command, timeout):
        pairs = [a.split("=") for a in shlex.split(command.split(" preflight ", 1)[1])]
        return CommandOutput(stdout="".join(f"{d} {ip} rc=0 3 packets transmitted, 3 received\n" for d, ip in pairs),
                             stderr="", rc=0)

    phase.run = run
    phase.device_ping("ring")
    into = {r.subject: r for r in run_check(network.test_device_ping, host=hosts[0], facts=cl.facts["node-01"],
                                            cluster=cl)}
    assert into["npu1->node-02:npu1"].outcome == "skipped"  # not node-01's fault: node-02's rows say it
    assert "the device IP of node-02 npu1 could not be read (see hccl.device_ip)" in into["npu1->node-02:npu1"].message
    out_of = {r.subject: r for r in run_check(network.test_device_ping, host=hosts[1], facts=cl.facts["node-02"],
                                              cluster=cl)}
    assert out_of["npu1->node-03:npu1"].outcome == "error", out_of  # its own pair is there, not judged
    assert out_of["npu0->node-03:npu0"].outcome == "passed"


def test_an_abandoned_ping_run_names_every_pair_and_its_late_answer_is_ignored(monkeypatch):
    """A ping run stuck past its round's deadline (a connection that never answers) is abandoned:
    each of its pairs is an error saying so, and when the stuck call comes back later its lines are
    not added a second time."""
    import threading

    from preflight import activeprobe
    from preflight.activeprobe import PhaseTwo
    from preflight.gather import GatherSettings
    from preflight.probe import CommandOutput

    monkeypatch.setattr(activeprobe, "PING_TIMEOUT", 0)
    monkeypatch.setattr(activeprobe, "PING_SLACK", 0)
    hosts, cl = _cluster({f"node-0{n}": {"probe.devices": "0 1",
                                         **{f"hccn.ip/{d}": f"ipaddr:29.0.{n}.{d}\nnetmask:255.255.0.0\n"
                                            for d in range(2)}} for n in (1, 2, 3)})
    phase = PhaseTwo(cl, _LocalGatherer(), GatherSettings(command_timeout=10, connect_timeout=0.5))
    release, came_back = threading.Event(), threading.Event()

    def run(host, command, timeout):
        if host.name == "node-02":
            release.wait(30)
            try:
                return CommandOutput(stdout="0 29.0.3.0 rc=0 3 packets transmitted, 3 received\n"
                                            "1 29.0.3.1 rc=0 3 packets transmitted, 3 received\n", stderr="", rc=0)
            finally:
                came_back.set()
        return CommandOutput(stdout="".join(f"{d} 29.0.0.{d} rc=0 3 packets transmitted, 3 received\n"
                                            for d in range(2)), stderr="", rc=0)

    phase.run = run
    phase.device_ping("ring")
    release.set()
    assert came_back.wait(10)
    results = run_check(network.test_device_ping, host=hosts[1], facts=cl.facts["node-02"], cluster=cl)
    assert [(r.subject, r.outcome) for r in results] == [("npu0->node-03:npu0", "error"),
                                                         ("npu1->node-03:npu1", "error")]
    assert all("no answer from node-02 within" in r.message and "abandoned" in r.message for r in results)
    for healthy in (0, 2):
        outcomes = [r.outcome for r in run_check(network.test_device_ping, host=hosts[healthy],
                                                 facts=cl.facts[hosts[healthy].name], cluster=cl)]
        assert outcomes == ["passed", "passed"]


def test_what_we_leave_on_a_node_outlives_every_probe_it_serves():
    """The head's temporary Ray listener serves every worker, ``fanout`` at a time, each probe up to
    a few connect timeouts when a firewall drops ports: its bound grows with the waves of workers
    (a fixed 74 s ran out under 1000 workers, and the last ones saw "refused"). The same bound for
    the HCCL ring's listeners and the shared-storage markers."""
    import re
    from types import SimpleNamespace

    from preflight.activeprobe import CONNECT_TIMEOUT, PhaseTwo
    from preflight.gather import GatherSettings

    settings = GatherSettings(command_timeout=10, connect_timeout=10, fanout=32)
    phase = PhaseTwo(SimpleNamespace(facts={}), _LocalGatherer(), settings)
    one_probe = CONNECT_TIMEOUT * 5 + 10 + 10
    assert phase.probe_seconds(5) == one_probe
    assert phase.lifetime(1, one_probe) == 10 + 10 + 30 + one_probe
    assert phase.lifetime(999, one_probe) == 10 + 10 + 30 + 32 * one_probe  # ceil(999 / 32) waves
    assert phase.lifetime(999, one_probe) > 999 / 32 * one_probe

    started = []

    class Started:
        def readline(self, timeout):
            return "READY 6379 BUSY - HELD -"

        def close(self):
            pass

    def start(host, command):
        started.append(command)
        return Started()

    phase.start = start
    host = make_host("node-01")
    phase.cluster.facts["node-01"] = _Facts({"net.listening": frozenset(), "tools.python3": "/usr/bin/python3"})
    for clients in (1, 999):
        phase.listen(host, [6379], clients=clients)
    bounds = [int(re.match(r"exec timeout (\d+) ", c).group(1)) for c in started]
    assert bounds == [phase.lifetime(1, phase.probe_seconds(1)), phase.lifetime(999, phase.probe_seconds(1))]


def test_the_shared_storage_marker_writer_is_killed_at_its_bound():
    """The writer's bash traps TERM, and a wait on a hung hard NFS mount ends only with KILL: a
    plain `timeout` left it on the node."""
    from preflight.activeprobe import PhaseTwo
    from preflight.gather import GatherSettings

    hosts, cl = _cluster({}, shared_paths=("/shared",))
    phase = PhaseTwo(cl, _LocalGatherer(), GatherSettings(command_timeout=10, connect_timeout=10, fanout=32))
    started = []

    def start(host, command):
        started.append((host.name, command))
        raise OSError("stop here")

    phase.start = start
    phase.shared_storage()
    [(writer, command)] = started
    assert writer == "node-01" and command.startswith("exec timeout -k 5 "), command
    assert "could not write markers" in cl.facts["node-01"].raw["storage.shared"].skipped


def test_hccl_ports_are_probed_where_hccl_listens():
    """HCCL binds its host sockets to HCCL_IF_IP, else to the NIC HCCL_SOCKET_IFNAME selects: a
    data network apart from the SSH address is probed there, and results still name the node."""
    from preflight.activeprobe import hccl_address
    from tests.factsets import IFACES, healthy_raw

    two_nics = IFACES + [{"ifname": "ens1", "flags": ["UP", "LOWER_UP"], "operstate": "UP",
                          "addr_info": [{"family": "inet6", "local": "fd00::2", "prefixlen": 64},
                                        {"family": "inet", "local": "192.168.9.2", "prefixlen": 24}]}]
    host = make_host("node-02", address="10.0.0.2")
    cases = [({"HCCL_IF_IP": "192.168.9.7", "HCCL_SOCKET_IFNAME": "ens1"}, "192.168.9.7"),
             ({"HCCL_SOCKET_IFNAME": "=ens1"}, "192.168.9.2"),
             ({"HCCL_SOCKET_IFNAME": "ib"}, "10.0.0.2"),      # selects nothing: the inventory address
             ({"HCCL_SOCKET_IFNAME": None, "HCCL_IF_IP": "fd00::2"}, "10.0.0.2"),  # IPv6: not probed there
             # Neither set: HCCL's own pick, the first NIC by name other than docker and lo.
             ({"HCCL_SOCKET_IFNAME": None}, "192.168.9.2")]
    for env, want in cases:
        facts = make_facts("node-02", raw=healthy_raw(env=env, interfaces=two_nics))
        assert hccl_address(host, facts) == want, env
    hosts, cl = _cluster({"node-01": {"tcp.hccl": "timeout 192.168.9.7 60000 temporary x\n"
                                                  "open 192.168.9.7 60015 temporary\n"}})
    cl.facts["node-02"].raw["session.env"] = make_facts("node-02", raw=healthy_raw(
        env={"HCCL_IF_IP": "192.168.9.7"})).raw["session.env"]
    results = run_check(network.test_hccl_ports, host=hosts[0], facts=cl.facts["node-01"], cluster=cl)
    assert {(r.subject, r.outcome) for r in results} == {("node-02:60000", "failed"), ("node-02:60015", "passed")}


def test_hccls_own_nic_choice_without_hccl_socket_ifname():
    """CANN: with neither HCCL_IF_IP nor HCCL_SOCKET_IFNAME, HCCL takes the first NIC by name other
    than docker and lo (then docker, then lo), of those up with an address; the HCCL port probe
    goes there, and a failure says why that address."""
    from preflight.activeprobe import hccl_endpoint
    from preflight.ifname import hccl_own_choice
    from preflight.parsers.system import parse_ip_addr_json
    from tests.factsets import healthy_raw

    def nics(*specs):
        return [{"ifname": name, "flags": ["UP", "LOWER_UP"] if up else ["BROADCAST"],
                 "operstate": "UP" if up else "DOWN", "addr_info": [{"family": "inet", "local": addr, "prefixlen": 24}]}
                for name, up, addr in specs]

    def choice(*specs):
        import json
        return hccl_own_choice(parse_ip_addr_json(json.dumps(nics(*specs))))

    assert choice(("lo", True, "127.0.0.1"), ("docker0", True, "172.17.0.1"), ("enp2s0", True, "10.0.0.2"),
                  ("br-1a2b", True, "172.18.0.1")) == "br-1a2b"  # a bridge sorts first: HCCL's trap
    assert choice(("lo", True, "127.0.0.1"), ("docker0", True, "172.17.0.1"), ("aaa0", False, "10.9.0.1")) == "docker0"
    assert choice(("lo", True, "127.0.0.1")) == "lo"
    assert choice() is None
    host = make_host("node-02", address="10.0.0.2")
    facts = make_facts("node-02", raw=healthy_raw(env={"HCCL_SOCKET_IFNAME": None}, interfaces=nics(
        ("lo", True, "127.0.0.1"), ("enp2s0", True, "10.0.0.2"), ("br-1a2b", True, "172.18.0.1"))))
    address, why = hccl_endpoint(host, facts)
    assert (address, why) == ("172.18.0.1", "HCCL_SOCKET_IFNAME unset: HCCL picks br-1a2b itself, the first NIC "
                                            "by name other than docker and lo")
    hosts, cl = _cluster({"node-01": {"tcp.hccl": "timeout 172.18.0.1 60000 temporary x\n"}})
    cl.facts["node-02"] = facts
    [result] = [r for r in run_check(network.test_hccl_ports, host=hosts[0], facts=cl.facts["node-01"], cluster=cl)
                if r.subject == "node-02:60000"]
    assert result.outcome == "failed"
    assert "node-01 -> node-02 HCCL port 60000 at 172.18.0.1 (HCCL_SOCKET_IFNAME unset: HCCL picks br-1a2b" in \
        result.observed


def test_refused_on_a_held_port_is_not_a_firewall_finding():
    hosts, cl = _cluster({"node-01": {"tcp.hccl": "refused 10.0.0.2 60000 held Connection refused\n"
                                                  "refused 10.0.0.2 60015 temporary Connection refused\n"}})
    results = {r.subject: r for r in run_check(network.test_hccl_ports, host=hosts[0], facts=cl.facts["node-01"],
                                               cluster=cl)}
    held, rejected = results["node-02:60000"], results["node-02:60015"]
    assert rejected.outcome == "failed" and "listener is open" in rejected.observed
    assert held.outcome == "error"
    assert "a socket that is not listening holds it" in held.message and "firewall" in held.message
    # Added to what the node already reserves, never replacing it.
    assert 'ip_local_reserved_ports="${r:+$r,}60000"' in held.remedy
    assert "sport = :60000" in held.remedy
    assert held.remedy != rejected.remedy


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"), reason="needs root and iproute2 for a netns")
def test_the_reserved_ports_remedies_run_as_given():
    """The sysctl lines the remedies give work on a node that reserves nothing yet (the default: a
    leading comma is refused) and add to what a node already reserves."""
    import re
    import subprocess

    hosts, cl = _cluster({"node-01": {"tcp.hccl": "refused 10.0.0.2 60000 held Connection refused\n"}})
    held = {r.subject: r for r in run_check(network.test_hccl_ports, host=hosts[0], facts=cl.facts["node-01"],
                                            cluster=cl)}["node-02:60000"]
    commands = [re.search(r"r=\$\(sysctl -n net.ipv4.ip_local_reserved_ports\); sysctl -w \S+", text).group(0)
                for text in (held.remedy, network.test_hccl_ports.pytestmark[0].args[0].remedy)]
    ns = f"pf-remedy-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        for command in commands:
            subprocess.run(["ip", "netns", "exec", ns, "sh", "-c", command], check=True, capture_output=True)
        now = subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-n", "net.ipv4.ip_local_reserved_ports"],
                             check=True, capture_output=True, text=True).stdout.strip()
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
    assert now == "60000-60031"


def test_listener_reads_ipv6_listeners_survives_a_port_out_of_range_and_is_python_3_6():
    import ast
    import socket
    import subprocess
    import sys

    from preflight.activeprobe import _LISTENER

    ast.parse(_LISTENER, feature_version=(3, 6))  # it runs on the node's python3
    server = socket.socket(socket.AF_INET6)
    server.bind(("::", 0))  # dual-stack: 0.0.0.0 of the same port cannot be bound
    server.listen(4)
    v6 = server.getsockname()[1]
    try:
        proc = subprocess.Popen([sys.executable, "-c", _LISTENER, str(v6), "65545"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        line = proc.stdout.readline().split()
        proc.stdin.close()
        proc.wait(timeout=30)
    finally:
        server.close()
    # The listener on [::] is seen in /proc/net/tcp6; 65545 is neither bound nor in use.
    assert line == ["READY", "-", "BUSY", str(v6), "HELD", "-"]


def socket_has_ipv6() -> bool:
    import socket
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not socket_has_ipv6(), reason="needs IPv6 on loopback")
def test_the_temporary_listener_answers_over_ipv4_and_ipv6():
    """It listened on 0.0.0.0 only: a peer probing an IPv6 inventory address (or MASTER_ADDR) was
    refused, and cluster.ray_ports blamed a firewall REJECT rule that did not exist."""
    import socket
    import subprocess
    import sys

    from preflight.activeprobe import _LISTENER

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    proc = subprocess.Popen([sys.executable, "-c", _LISTENER, str(port)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().split() == ["READY", str(port), "BUSY", "-", "HELD", "-"]
        for address in ("127.0.0.1", "::1"):
            socket.create_connection((address, port), timeout=5).close()
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


# -- which HCCL host ports are probed: the block HCCL really binds --------------------------------

class _RingFacts:
    """Just what hccl_ring reads: the session's environment and the active CANN."""

    def __init__(self, env, cann=None):
        self.env, self.cann = env, cann

    def optional(self, name, default=None):
        return HostFacts.optional(self, name, default)

    def get(self, name):
        from types import SimpleNamespace

        from preflight.facts import FactUnavailable
        if name == "session.env":
            return dict(self.env)
        if name == "ascend.files" and self.cann:
            return SimpleNamespace(active_cann=lambda: SimpleNamespace(version=self.cann))
        raise FactUnavailable(f"{name} not gathered")


@pytest.mark.parametrize("env, cann, ports", [
    ({}, "8.2.RC1", [60000, 60015]),
    ({}, None, [60000, 60015]),  # CANN unknown: the 16 ports every release reserves
    ({}, "8.5.0", [60000, 60031]),
    ({}, "9.0.0.B100", [60000, 60031]),
    ({"HCCL_IF_BASE_PORT": "50000"}, "8.5.0", [50000, 50031]),
    ({"HCCL_HOST_SOCKET_PORT_RANGE": "61000-61050"}, "8.5.0", [61000, 61050]),
    ({"HCCL_HOST_SOCKET_PORT_RANGE": "61000,61050-61100,61200-61210", "HCCL_IF_BASE_PORT": "50000"}, "8.2.RC1",
     [61000, 61200, 61210]),
    ({"HCCL_HOST_SOCKET_PORT_RANGE": "auto"}, "8.5.0", []),
    ({"HCCL_HOST_SOCKET_PORT_RANGE": "61050-61000"}, "8.2.RC1", [60000, 60015]),  # invalid: the base port
])
def test_hccl_ports_probed_are_the_ends_of_the_block_hccl_binds(env, cann, ports):
    from types import SimpleNamespace

    from preflight.activeprobe import hccl_ring

    host = make_host("node-01")
    cluster = SimpleNamespace(reachable=lambda: [(host, _RingFacts(env, cann))])
    [(_, _, probed)] = hccl_ring(cluster)
    assert probed == ports


def test_a_peer_letting_the_os_pick_hccl_ports_is_skipped_not_silent():
    hosts, cl = _cluster({"node-01": {"tcp.hccl": ""}})
    cl.facts["node-02"].raw["session.env"] = out("HCCL_HOST_SOCKET_PORT_RANGE=auto\0PATH=/bin\0")
    [result] = run_check(network.test_hccl_ports, host=hosts[0], facts=cl.facts["node-01"], cluster=cl)
    assert result.outcome == "skipped" and "node-02" in result.message and "auto" in result.message


def test_commands_stay_under_the_one_argument_cap_at_thousands_of_hosts(tmp_path):
    """The remote command reaches the node's shell as one argument, capped at 128 KiB by Linux:
    the inventory's names (for net.resolve) and the launcher's targets travel packed, so 10 000
    FQDN-named hosts fit; the launcher's script unpacks and logs in to every target."""
    import subprocess

    from preflight.activeprobe import _LAUNCHER_SSH, LAUNCHER_PARALLEL
    from preflight.facts import FACTS
    from preflight.gather import _quote
    from preflight.probe import build_script, new_nonce, packed
    from preflight.run import probe_params

    cap = 128 * 1024
    hosts = [make_host(f"gpu-r{i // 40:03d}-n{i % 40:02d}.train.cluster.example.com",
                       address=f"10.{i // 250}.{i % 250}.9") for i in range(10_000)]
    commands = [spec.probe_command() for spec in FACTS.values() if spec.phase == 1]
    script = build_script(commands, new_nonce(), 10, params=probe_params(hosts[0], hosts))
    assert len(("bash -c " + _quote(script)).encode()) < cap
    targets = " ".join(f"{h.name}=root@{h.address}:22" for h in hosts)
    launcher = ("bash -c " + shlex.quote(_LAUNCHER_SSH) + f" preflight 5 {LAUNCHER_PARALLEL} "
                + shlex.quote(packed(targets)))
    assert len(launcher.encode()) < cap < len(targets.encode())  # unpacked, it would not fit

    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ssh").write_text("#!/bin/sh\nexit 0\n")
    (bindir / "ssh").chmod(0o755)
    some = " ".join(f"{h.name}=root@{h.address}:22" for h in hosts[:300])
    done = subprocess.run(["bash", "-c", _LAUNCHER_SSH, "preflight", "5", "16", packed(some)], capture_output=True,
                          text=True, timeout=120, env={"PATH": f"{bindir}:/usr/bin:/bin"})
    assert sorted(line.split()[1] for line in done.stdout.splitlines()) == sorted(h.name for h in hosts[:300])
    assert {line.split()[0] for line in done.stdout.splitlines()} == {"ok"}


def test_a_home_relative_path_is_expanded_as_the_jobs_shell_would(tmp_path):
    """checkpoint_dir: ~/ckpt read as "does not exist" (the probe quotes paths, so no shell
    expanded the tilde); the shared-storage markers likewise. Reports keep the path as written."""
    import subprocess

    from preflight.activeprobe import _MARKER_READER, _MARKER_WRITER
    from preflight.nodefacts import CHECKPOINT
    from preflight.parsers.versions import parse_checkpoint

    (tmp_path / "ckpt").mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PF_CHECKPOINT_DIR": "~/ckpt"}
    state = parse_checkpoint(subprocess.run(["bash", "-c", CHECKPOINT], env=env, capture_output=True, text=True,
                                            timeout=30).stdout)
    assert (state.path, state.exists, state.is_dir, state.writable) == ("~/ckpt", True, True, True)
    writer = subprocess.Popen(["bash", "-c", _MARKER_WRITER, "x", "pf-mark", "~/ckpt", "~/none"], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        lines = [writer.stdout.readline() for _ in range(4)]
        assert lines[0] == "written ~/ckpt\n" and lines[1].startswith("fs ") and lines[1].endswith(" ~/ckpt\n")
        assert lines[2:] == ["absent ~/none\n", "READY\n"]
        assert (tmp_path / "ckpt" / "pf-mark").exists()
        read = subprocess.run(["bash", "-c", _MARKER_READER, "x", "pf-mark", "~/ckpt"], env=env, capture_output=True,
                              text=True, timeout=30).stdout
        assert read == "seen ~/ckpt\n"
    finally:
        writer.stdin.close()
        writer.wait(30)
    assert not (tmp_path / "ckpt" / "pf-mark").exists()
    # $HOME unset: the home directory from the passwd entry, as bash's own ~ does.
    home = os.path.expanduser("~")
    del env["HOME"]
    env["PF_CHECKPOINT_DIR"] = "~"
    state = parse_checkpoint(subprocess.run(["bash", "-c", CHECKPOINT], env=env, capture_output=True, text=True,
                                            timeout=30).stdout)
    assert state.exists == os.path.isdir(home) and state.path == "~"


def test_an_hccl_address_every_node_shares_is_a_failure_not_a_connect_to_itself():
    """A docker bridge (172.18.0.1 on every node) that HCCL picks itself: node-01's probe of
    node-02 there reached node-01's own listener and passed, naming node-01 as the peer."""
    import json

    from tests.factsets import IFACES, healthy_raw

    bridge = [{"ifname": "br-1a2b", "flags": ["UP", "LOWER_UP"], "operstate": "UP",
               "addr_info": [{"family": "inet", "local": "172.18.0.1", "prefixlen": 16}]}]
    hosts, cl = _cluster({})
    for h in hosts:
        raw = healthy_raw(env={"HCCL_SOCKET_IFNAME": None}, interfaces=IFACES + bridge)
        cl.facts[h.name] = make_facts(h.name, raw=raw)
    cl.facts["node-01"].raw["tcp.hccl"] = out("open 172.18.0.1 60000 temporary\nopen 172.18.0.1 60015 temporary\n")
    assert json.loads(cl.facts["node-01"].raw["net.interfaces"].stdout)[-1]["ifname"] == "br-1a2b"
    results = run_check(network.test_hccl_ports, host=hosts[0], facts=cl.facts["node-01"], cluster=cl)
    assert [(r.subject, r.outcome) for r in results] == [("node-02:60000", "failed"), ("node-02:60015", "failed")]
    assert "172.18.0.1 is also an address of node-01, so the connect reached node-01 itself" in results[0].observed
    assert "HCCL_SOCKET_IFNAME" in results[0].remedy


def test_sub_second_limits_round_up_never_to_zero():
    """--connect-timeout 0.5 passes the option check; `timeout 0` and ConnectTimeout=0 mean no
    limit at all."""
    from preflight.activeprobe import whole_seconds
    from preflight.probe import build_script, new_nonce, ProbeCommand

    assert [whole_seconds(s) for s in (0.2, 1, 1.5, 10)] == [1, 1, 2, 10]
    assert "pf_run x x 1 " in build_script([ProbeCommand("x", "true")], new_nonce(), 0.5, runner="bash")


def test_a_launcher_login_that_does_not_finish_says_so(tmp_path):
    """ssh silent until timeout kills it (rc 124): the record says the login did not finish in
    time, where it read "rc=124" and nothing else."""
    import subprocess

    from preflight.activeprobe import _LAUNCHER_SSH
    from preflight.probe import packed

    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ssh").write_text("#!/bin/sh\nexec sleep 30\n")
    (bindir / "ssh").chmod(0o755)
    done = subprocess.run(["bash", "-c", _LAUNCHER_SSH, "preflight", "1", "4", packed("node-02=root@10.0.0.2:22")],
                          capture_output=True, text=True, timeout=60, env={"PATH": f"{bindir}:/usr/bin:/bin"})
    [attempt] = parse_launcher_ssh(done.stdout)
    assert not attempt.ok and attempt.detail == "rc=124 no login within 3s (ConnectTimeout=1, then timeout)"


def test_checks_that_cannot_be_evaluated_still_say_what_to_do():
    """Errors raised by the checks themselves (not a fact's own reason) carry a next step."""
    from preflight.checks import hccl, npu
    from tests.factsets import healthy_raw

    hosts, cl = _cluster({"node-02": {"tcp.ray": "refused 10.0.0.1 6379 none Connection refused\n"},
                          "node-01": {"hccn.ping": "schedule ring\nnode-02 0 0 29.1.0.20 skipped no answer from "
                                                   "node-01 within 30s (the ping run was abandoned)\n"}})
    [gcs] = [r for r in run_check(network.test_ray_ports, host=hosts[1], facts=cl.facts["node-02"], cluster=cl)
             if r.subject == "node-01:6379"]
    # node-01 has python3 (phase one found it): the listener failed for another reason.
    assert gcs.outcome == "error" and "Install python3" not in gcs.remedy
    assert "/usr/bin/python3 did" not in gcs.message and "(/usr/bin/python3 on the target) did not open" in gcs.message
    assert "ss -tanp 'sport = :6379'" in gcs.remedy
    cl.facts["node-01"] = make_facts("node-01", raw={**cl.facts["node-01"].raw, "tools.python3": out("", rc=1)})
    [gcs] = [r for r in run_check(network.test_ray_ports, host=hosts[1], facts=cl.facts["node-02"], cluster=cl)
             if r.subject == "node-01:6379"]
    assert gcs.outcome == "error" and "Install python3 on the target node" in gcs.remedy
    cl.facts["node-01"].raw.update({f"hccn.ip/{d}": out(f"ipaddr:29.1.1.{d}\nnetmask:255.255.0.0\n") for d in range(8)})
    [ping] = run_check(network.test_device_ping, host=hosts[0], facts=cl.facts["node-01"], cluster=cl)
    assert ping.outcome == "error" and "hccn_tool -i 0 -ping -g address 29.1.0.20 by hand on node-01" in ping.remedy
    bare = healthy_raw()
    bare["probe.devices"] = out("")
    facts = make_facts("node-01", raw=bare)
    [r] = run_check(hccl.test_link_up, host=hosts[0], facts=facts)
    assert r.outcome == "error" and "--device /dev/davinciN" in r.remedy, r
    cl.facts["node-02"].raw["npu_smi.info"] = out("dcmi module initialize failed. ret is -8005\n")
    errors = [r for r in run_check(npu.test_hardware_agree, cluster=cl) if r.outcome == "error"]
    assert errors and all("its row in the report" in r.remedy for r in errors), errors


def test_names_and_clocks_unreadable_everywhere_are_not_evaluated_not_inapplicable():
    """Every node's reading errored: the cluster row said "–" (not applicable: "no name to compare",
    "fewer than two clocks read") beside the errors."""
    hosts, cl = _cluster({n: {"net.resolve": "", "clock.offset": ""} for n in ("node-01", "node-02", "node-03")})
    for f in cl.facts.values():
        f.raw["net.resolve"] = out("", rc=127)
        f.raw["clock.offset"] = out("", rc=127)
    for check in (network.test_hostnames, network.test_clock_skew):
        results = run_check(check, cluster=cl)
        cluster_wide = [r for r in results if r.host is None]
        assert [r.outcome for r in cluster_wide] == ["error"] and cluster_wide[0].remedy, results
        assert cluster_wide[0].message.startswith("not evaluated: "), cluster_wide[0].message
        assert {r.host for r in results if r.host} == {"node-01", "node-02", "node-03"}


def test_a_target_name_the_source_cannot_resolve_is_not_a_firewall_and_no_route_says_both():
    """An inventory address only the controller resolves (~/.ssh/config's HostName): the Ray probe's
    "unresolved" failure carried the open-the-port firewall remedy."""
    rec = ("unresolved gpu-head 6379 temporary bash: gpu-head: Name or service not known\n"
           "unreachable gpu-head 8265 temporary No route to host\n")
    hosts = [make_host("node-01", groups=["head"], address="gpu-head"),
             make_host("node-02", groups=["worker"], address="10.0.0.2")]
    facts = [make_facts("node-01"), make_facts("node-02")]
    facts[1].raw["tcp.ray"] = out(rec)
    cl = cluster_of(*zip(hosts, facts))
    results = run_check(network.test_ray_ports, host=hosts[1], facts=facts[1], cluster=cl)
    by = {r.subject: r for r in results}
    gcs, dash = by["node-01:6379"], by["node-01:8265"]
    assert gcs.outcome == "failed" and "cannot resolve gpu-head" in gcs.message
    assert gcs.remedy.startswith("Make gpu-head resolve on every node") and "firewall" not in gcs.remedy
    assert "host-prohibited" in dash.message and "ip route get gpu-head" in dash.message
    assert "firewall" in dash.remedy.lower()  # the check's own remedy: a REJECT rule is the likely cause


def test_resolve_blocks_end_at_the_ipv4_mapped_key_too():
    """On a node whose only IPv4 address is loopback, getent ahosts answers the key 0.0.0.1 as
    ::ffff:0.0.0.1: no block ended, and every IPv6-only name read as unresolved."""
    import subprocess

    from preflight.parsers.crossnode import RESOLVE_BLOCKS

    lines = ("name node-a\nname node-b\n2001:db8::1     STREAM node-a\n2001:db8::1     DGRAM\n"
             "::ffff:0.0.0.1  STREAM 0.0.0.1\n::ffff:0.0.0.1  STREAM 0.0.0.1\n")
    out = subprocess.run(["awk", "-v", "tag=any", RESOLVE_BLOCKS], input=lines,
                         capture_output=True, text=True, timeout=30).stdout
    assert out == "any node-a 2001:db8::1 -\nmiss node-b\n"


def test_resolve_blocks_not_closed_are_unreached_not_missing():
    """A getent that stops at the first name it cannot find (NetBSD's, musl-utils') closes no block
    after it: those names are unreached (asked again), not read as missing."""
    import subprocess

    from preflight.parsers.crossnode import RESOLVE_BLOCKS

    lines = "name a\nname b\nname c\n10.0.0.1 STREAM a\n0.0.0.1 STREAM 0.0.0.1\n"
    out = subprocess.run(["awk", "-v", "tag=v4", RESOLVE_BLOCKS], input=lines, capture_output=True, text=True,
                         timeout=30).stdout
    assert out == "v4 a 10.0.0.1 -\nunreached b\nunreached c\n"
    with pytest.raises(ParseError, match="getent never answered for 2 names \\(b, c\\)"):
        parse_resolve(out + "end 3\n")


def test_resolve_present_form_ends_with_the_count_of_names():
    """Addresses print as query lines, looked-up names as their answer lines only (about 55 bytes
    a name: 10 000 FQDNs stay far under the 1 MiB cap), and an end line with the number of names:
    output cut anywhere, in the second pass too, is an error, not names unresolved."""
    text = "query 10.0.0.9\nv4 a 10.0.0.1 -\nv4 b 10.0.0.3 host-b 10.0.0.3,10.0.0.2\nmiss c\nmiss c\nany c fd00::9 -\n"
    answers = parse_resolve(text + "end 4\n")
    assert answers == {"10.0.0.9": "10.0.0.9", "a": "10.0.0.1", "b": "10.0.0.3", "c": "fd00::9"}
    assert answers.addresses["b"] == ("10.0.0.2", "10.0.0.3") and answers.addresses["a"] == ("10.0.0.1",)
    assert parse_resolve("end 0\n") == {}
    for cut in (text, text[:text.index("any c")], text[:text.index("v4 b")]):
        with pytest.raises(ParseError, match="ended before its end line"):
            parse_resolve(cut)
    with pytest.raises(ParseError, match="answers for 4 names, but the probe asked for 5"):
        parse_resolve(text + "end 5\n")
    # A node with no IPv4 address but loopback gets an A record's address IPv4-mapped from ahosts:
    # the address it connects to, as the dual-stack nodes print it.
    mapped = parse_resolve("miss d\nany d ::ffff:10.0.0.4 - ::ffff:10.0.0.4,fd00::4\nend 1\n")
    assert mapped == {"d": "10.0.0.4"} and mapped.addresses["d"] == ("10.0.0.4", "fd00::4")


def test_resolve_output_cut_short_is_unreadable_not_unresolved():
    """Output cut at the probe's cap: the names after the cut, or a cut address, would otherwise
    read as unresolved (or as a wrong address) and blame their nodes."""
    text = "query a\nquery b\nquery 10.0.0.9\nquery c\nv4 a 10.0.0.1 a 10.0.0.1\nv4 b 10.0.0.2 b 10.0.0.2\n"
    with pytest.raises(ParseError, match="no answer for 1 of the 4 names \\(c\\)"):
        parse_resolve(text)
    with pytest.raises(ParseError, match="unreadable answer for c"):
        parse_resolve(text + "v4 c 10.0.0.3 c 10.0.0.3,10.0.")
    assert parse_resolve(text + "miss c\n")["c"] is None


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0, reason="needs root and unshare")
def test_resolve_command_with_more_names_than_one_argument_holds(tmp_path):
    """4 500 FQDNs are 190 KB, past the 128 KiB one argument holds: passed to awk with -v, awk did
    not start and every name read as unresolved, silently.  The names go through the pipe."""
    import subprocess

    from preflight.facts import FACTS
    from preflight.probe import packed

    names = [f"gpu-r{i // 40:03d}-n{i % 40:02d}.train.cluster.example.com" for i in range(4500)]
    hosts = tmp_path / "hosts"
    hosts.write_text("".join(f"10.{i // 250}.{i % 250}.9 {n}\n" for i, n in enumerate(names)))
    assert len(" ".join(names)) > 128 * 1024
    spec = FACTS["net.resolve"]
    script = f"mount --bind {hosts} /etc/hosts && exec bash -c {shlex.quote(spec.command)}"
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "PF_HOSTNAMES_GZ": packed(" ".join(names))}
    done = subprocess.run(["unshare", "-m", "bash", "-c", script], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    answers = spec.parse(done.stdout)
    assert answers == {n: f"10.{i // 250}.{i % 250}.9" for i, n in enumerate(names)}


def _getent_shim(tmp_path, body):
    """A getent of our own in front of the real one (and bash, awk, ... from this machine)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    real = shutil.which("getent")
    (bindir / "getent").write_text("#!/bin/bash\n" + body.replace("REAL", real))
    (bindir / "getent").chmod(0o755)
    for tool in ("bash", "base64", "gzip", "awk", "cat"):
        (bindir / tool).symlink_to(shutil.which(tool))
    return {"PATH": str(bindir)}


def test_resolve_command_with_a_getent_that_stops_at_the_first_missing_name(tmp_path):
    """NetBSD's getent (musl-utils', on Alpine) stops at the first name it cannot find: the names
    after it are asked again one by one, not read as unresolved."""
    import subprocess

    from preflight.facts import FACTS
    from preflight.probe import packed

    env = _getent_shim(tmp_path, 'db=$1; shift; for n; do REAL "$db" "$n" || exit 2; done\n')
    env["PF_HOSTNAMES_GZ"] = packed("localhost no-such-host.invalid localhost 10.0.0.9 ip6-localhost")
    spec = FACTS["net.resolve"]
    done = subprocess.run([env["PATH"] + "/bash", "-c", spec.command], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    answers = spec.parse(done.stdout)
    assert answers["no-such-host.invalid"] is None and answers["10.0.0.9"] == "10.0.0.9"
    assert answers["localhost"] == "127.0.0.1", done.stdout  # the second localhost, after the stop, too
    assert done.stdout.count("v4 localhost 127.0.0.1") == 2, done.stdout


def test_resolve_command_with_a_getent_that_answers_nothing_fails_loudly(tmp_path):
    """A getent without the ahostsv4 database prints nothing for any name: an error naming it, not
    every inventory name unresolved on that node."""
    import subprocess

    from preflight.facts import FACTS
    from preflight.probe import packed

    env = _getent_shim(tmp_path, 'echo "Unknown database: $1" >&2; exit 1\n')
    env["PF_HOSTNAMES_GZ"] = packed("localhost node-b")
    done = subprocess.run([env["PATH"] + "/bash", "-c", FACTS["net.resolve"].command], capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode == 3 and "getent ahostsv4 answers nothing" in done.stderr, (done.stdout, done.stderr)


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0, reason="needs root and unshare")
def test_resolve_command_on_a_node_with_no_ipv4_address(tmp_path):
    """glibc's getent asks with AI_ADDRCONFIG, which does not count loopback: on a node whose only
    IPv4 address is 127.0.0.1, getent ahostsv4 answers nothing, not even the key.  That is a node
    with no IPv4, whose names the second pass (ahosts) resolves, not a getent that cannot answer."""
    import subprocess

    from preflight.facts import FACTS
    from preflight.probe import packed

    hosts = tmp_path / "hosts"
    hosts.write_text("2001:db8::5 node-a\n2001:db8::7 node-b\n")
    spec = FACTS["net.resolve"]
    script = (f"ip link set lo up && ip -6 addr add 2001:db8::5/64 dev lo && mount --bind {hosts} /etc/hosts "
              f"&& exec bash -c {shlex.quote(spec.command)}")
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "PF_HOSTNAMES_GZ": packed("node-a node-b node-x")}
    done = subprocess.run(["unshare", "-n", "-m", "bash", "-c", script], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert spec.parse(done.stdout) == {"node-a": "2001:db8::5", "node-b": "2001:db8::7", "node-x": None}, done.stdout


def test_a_phase_two_step_abandoned_at_its_deadline_says_so_and_a_late_result_does_not_replace_it():
    """A stalled probe's "no answer from node-03 within Ns" went nowhere: the check said only "not
    gathered".  The stalled thread's late result then overwrote the record after the listeners it
    had probed were closed (a 'refused' that read as a firewall REJECT).  A step that raised killed
    its pool thread silently, and was reported only at the deadline, as a timeout."""
    import threading
    import time

    from preflight.activeprobe import PhaseTwo
    from preflight.gather import GatherSettings
    from preflight.probe import CommandOutput

    hosts, cl = _cluster({})
    phase = PhaseTwo(cl, _LocalGatherer(), GatherSettings(command_timeout=10, connect_timeout=5))
    release = threading.Event()

    def work(host):
        if host.name == "node-03":
            release.wait(10)
            return CommandOutput(stdout="refused 10.0.0.1 6379 temporary late\n", stderr="", rc=0)
        if host.name == "node-02":
            raise RuntimeError("a bug in the step")
        return CommandOutput(stdout="open 10.0.0.2 6379 temporary\n", stderr="", rc=0)

    t0 = time.monotonic()
    phase._each(hosts, work, deadline=0.5, record="tcp.ray")
    assert time.monotonic() - t0 < 5  # the raising step did not wait for the deadline of the others
    release.set()
    time.sleep(0.3)  # the stalled thread comes back now: too late to count
    assert cl.facts["node-01"].raw["tcp.ray"].stdout.startswith("open")
    late = cl.facts["node-03"].raw["tcp.ray"]
    assert late.skipped and late.skipped.startswith("no answer from node-03 within"), late
    assert "a bug in the step" in cl.facts["node-02"].raw["tcp.ray"].skipped
    with pytest.raises(Exception) as exc:
        cl.facts["node-03"].get("tcp.ray")
    assert "no answer from node-03 within" in str(exc.value)


def test_a_listener_that_fails_to_start_leaves_its_ports_probed_without_one():
    """listen() raising (a controller-side failure) left no entry for the host: every probe towards it
    failed on the source's record with "KeyError: 'node-01'", blaming the wrong node."""
    from preflight.activeprobe import Listening, PhaseTwo
    from preflight.gather import GatherSettings

    hosts, cl = _cluster({})
    phase = PhaseTwo(cl, _LocalGatherer(), GatherSettings(command_timeout=2, connect_timeout=1))

    def listen(host, ports, clients=1, seconds_each=None):
        if host.name == "node-01":
            raise ValueError("the listener said something unexpected")
        return Listening(dict.fromkeys(ports, "existing"))

    phase.listen = listen
    with phase.listening_on([(hosts[0], [29500]), (hosts[1], [29500])], clients=2) as listenings:
        assert listenings["node-01"].states == {29500: "none"}
        assert listenings["node-02"].states == {29500: "existing"}
