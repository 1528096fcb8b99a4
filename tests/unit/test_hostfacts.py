"""HostFacts at fleet size: outputs dropped once parsed (compact), everything dropped at the end
(release), with the parsed values and the failure messages unchanged."""
from __future__ import annotations

import pytest

from preflight.facts import FactUnavailable
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
