"""HostFacts at fleet size: outputs dropped once parsed (compact), everything dropped at the end
(release), equal outputs of many hosts kept and parsed once (SharedOutputs), with the parsed
values and the failure messages unchanged."""
from __future__ import annotations

import dataclasses
import gc
import weakref

import pytest

from preflight.facts import FACTS, FactUnavailable, HostFacts, SharedOutputs
from tests.factsets import make_facts, out


def test_compact_facts_drop_each_output_once_parsed_and_keep_the_answer():
    plain, compact = make_facts(), make_facts()
    compact.compact = True
    assert compact.get("session.nofile") == plain.get("session.nofile")
    assert compact.per_device("hccn.link") == plain.per_device("hccn.link")
    assert compact.raw["session.nofile"].stdout == "" and compact.raw["hccn.link/0"].stdout == ""
    assert plain.raw["session.nofile"].stdout != ""
    assert compact.raw["session.nofile"].rc == plain.raw["session.nofile"].rc
    # Asked again: the cached value, not a parse of the emptied output.
    assert compact.get("session.nofile") == plain.get("session.nofile")
    assert compact.devices() == plain.devices()  # the device list is not a parsed fact: kept


def test_compact_facts_keep_the_failure_message_of_an_unreadable_output():
    plain = make_facts(session_dot_nofile=out("garbage here"))
    compact = make_facts(session_dot_nofile=out("garbage here"))
    compact.compact = True
    with pytest.raises(FactUnavailable) as a:
        plain.get("session.nofile")
    with pytest.raises(FactUnavailable) as b:
        compact.get("session.nofile")
    with pytest.raises(FactUnavailable) as again:
        compact.get("session.nofile")
    assert str(a.value) == str(b.value) == str(again.value) and "garbage here" in str(b.value)


def test_release_keeps_reachability_and_timing_only():
    facts = make_facts()
    facts.gather_s = 1.5
    facts.get("session.nofile")
    facts.release()
    assert facts.raw == {} and facts.reachable and facts.gather_s == 1.5


# -- equal outputs of many hosts: kept once, parsed once (SharedOutputs) -------------------------

RESOLVE = "query node-01\nquery node-02\n10.0.0.1 node-01\n10.0.0.2 node-02\n"


class _Text(str):
    """A str that can be watched with a weak reference (to see whether anything still holds it)."""


def _fresh(text: str) -> str:
    return _Text("".join(list(text)))  # equal to text, but a separate object, as two hosts' outputs are


def _fleet(monkeypatch, outputs: dict[str, str]):
    """Hosts whose ``net.resolve`` printed the given texts, gathered through one SharedOutputs;
    returns (facts by host, the parse calls made)."""
    calls = []
    spec = FACTS["net.resolve"]

    def counting(text):
        calls.append(len(text))  # not the text itself: a test watches whether anything holds it
        return spec.parse(text)

    monkeypatch.setitem(FACTS, "net.resolve", dataclasses.replace(spec, parse=counting))
    shared = SharedOutputs()
    facts = {}
    for name, text in outputs.items():
        raw = shared.keep({"net.resolve": out(_fresh(text)), "session.nofile": out(_fresh("65536 1048576\n"))})
        facts[name] = HostFacts(host=name, address=name, raw=raw, shared=shared, command_timeout=10)
    shared.close_intake()
    for f in facts.values():
        f.compact = True
    return facts, calls


def test_hosts_that_printed_the_same_text_share_one_copy_and_one_parsed_value(monkeypatch):
    other = RESOLVE.replace("10.0.0.2", "10.0.9.9")
    facts, calls = _fleet(monkeypatch, {"a": RESOLVE, "b": RESOLVE, "c": other})
    a, b, c = facts["a"], facts["b"], facts["c"]
    assert a.raw["net.resolve"].stdout is b.raw["net.resolve"].stdout
    assert c.raw["net.resolve"].stdout is not a.raw["net.resolve"].stdout
    assert a.get("net.resolve") is b.get("net.resolve")
    assert a.get("net.resolve") == {"node-01": "10.0.0.1", "node-02": "10.0.0.2"}
    assert c.get("net.resolve") == {"node-01": "10.0.0.1", "node-02": "10.0.9.9"}
    assert len(calls) == 2  # one parse for a and b, one for c
    assert a.get("session.nofile") is c.get("session.nofile")  # one more text all three share


def test_an_unreadable_text_printed_by_many_hosts_is_an_error_on_each(monkeypatch):
    facts, calls = _fleet(monkeypatch, {"a": "garbage\n", "b": "garbage\n"})
    for f in facts.values():
        with pytest.raises(FactUnavailable, match="garbage"):
            f.get("net.resolve")
    assert len(calls) == 2  # a parse error is not remembered in place of a value


def test_a_text_printed_by_one_host_is_dropped_once_parsed_while_a_shared_one_is_kept(monkeypatch):
    other = RESOLVE.replace("10.0.0.2", "10.0.9.9")
    facts, _ = _fleet(monkeypatch, {"a": RESOLVE, "b": RESOLVE, "c": other})
    shared_text = weakref.ref(facts["a"].raw["net.resolve"].stdout)
    own_text = weakref.ref(facts["c"].raw["net.resolve"].stdout)
    for f in facts.values():
        f.get("net.resolve")
    gc.collect()
    assert own_text() is None  # compact, as without sharing: nothing else holds c's text
    assert shared_text() is not None  # the run's store keeps one copy for the hosts that share it


def test_outputs_arriving_after_gathering_are_not_shared():
    shared = SharedOutputs()
    shared.keep({"x": out(_fresh("same\n"))})
    shared.close_intake()
    late = {"x": out(_fresh("same\n"))}
    before = late["x"].stdout
    assert shared.keep(late)["x"].stdout is before


def test_facts_loaded_from_a_file_share_equal_outputs(monkeypatch):
    shared = SharedOutputs()
    doc = make_facts("a", net_dot_resolve=out(RESOLVE)).raw_json()
    a = HostFacts.from_json(doc, shared)
    b = HostFacts.from_json(dict(doc, host="b"), shared)
    shared.close_intake()
    assert a.get("net.resolve") is b.get("net.resolve")
