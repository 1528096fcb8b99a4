"""HostFacts at fleet size: outputs dropped once parsed (compact), everything dropped at the end
(release), equal outputs of many hosts kept and parsed once (SharedOutputs), with the parsed
values and the failure messages unchanged."""
from __future__ import annotations

import dataclasses
import gc
import weakref

import pytest

from preflight.facts import FACTS, FactUnavailable, HostFacts, SharedOutputs
from tests.factsets import healthy_raw, make_facts, out


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


# -- a fact that cannot be read: the message says why, the remedy what to do next -----------------

from preflight.check import CheckInfo, Verdict  # noqa: E402
from preflight.facts import remedy_for_unevaluated  # noqa: E402
from preflight.probe import CommandOutput  # noqa: E402


def test_a_command_with_a_shorter_timeout_of_its_own_says_that_one():
    facts = make_facts(python_dot_stack=CommandOutput("", "", 124))  # --command-timeout 10
    with pytest.raises(FactUnavailable, match=r"timed out after 8s \(its own limit\) \(hung tool\)") as exc:
        facts.get("python.stack")
    remedy = remedy_for_unevaluated(str(exc.value))
    assert "fixed limit of its own" in remedy and "larger --command-timeout" not in remedy


def test_a_failed_tools_excerpt_skips_its_table_border():
    """A valid table then exit 1: the excerpt was the table's top border, '+-----...'."""
    from tests.factsets import fixture
    table = fixture("npu-smi/info/a2-910b4-25.0.rc1.1-idle.txt")
    with pytest.raises(FactUnavailable) as exc:
        make_facts(npu_smi_dot_info=CommandOutput(table, "", 1)).get("npu_smi.info")
    assert "failed with exit code 1: | npu-smi 25.0.rc1.1" in str(exc.value), str(exc.value)


def test_a_result_lost_to_the_host_deadline_says_so():
    raw = healthy_raw()
    del raw["hccn.link/3"]
    facts = HostFacts(host="node-01", address="node-01", raw=raw, command_timeout=10, error_kind="deadline",
                      error="the probe did not finish within --host-timeout 60s")
    message = str(facts.per_device("hccn.link")[3])
    assert "was not gathered from node-01: its result had not come back when the host's --host-timeout ended" in message
    assert "--host-timeout" in remedy_for_unevaluated(message)


@pytest.mark.parametrize("output, why, step", [
    (CommandOutput("", "", 124), "timed out after 10s (hung tool)", "--command-timeout"),
    (CommandOutput("", "", None, skipped="hccn_tool timed out earlier on this host (hccn.link/3)"),
     "timed out earlier", "--command-timeout"),
    (CommandOutput("", "", None), "did not finish before the host's deadline", "--host-timeout"),
    (CommandOutput("", "bash: hccn_tool: command not found", 127), "not found on the host", "non-interactive"),
    (CommandOutput("", "", 126), "permission denied", "NOPASSWD"),
    (CommandOutput("", "sudo: a password is required", 1), "sudo -n needs a password", "NOPASSWD"),
    (CommandOutput("", "dcmi module initialize failed", 2), "failed with exit code 2", "whole error"),
    (CommandOutput("this is not a link state", "", 0), "unreadable output", "another layout"),
], ids=["hung", "hung-earlier", "host-deadline", "missing", "not-executable", "sudo", "exit-code", "garbage"])
def test_every_reason_a_fact_cannot_be_read_has_a_next_step(output, why, step):
    value = make_facts(hccn_dot_link__3=output).per_device("hccn.link")[3]
    assert isinstance(value, FactUnavailable)
    message = str(value)
    assert why in message
    assert step in remedy_for_unevaluated(message)


def test_a_call_skipped_after_its_tool_hung_names_that_call_as_a_command_and_is_not_called_hung():
    """"was not run: hccn_tool timed out earlier on this host (hccn.link/0)" named an internal fact id,
    and its remedy said this command "did not answer within --command-timeout"."""
    skipped = CommandOutput("", "", None, skipped="hccn_tool timed out earlier on this host (hccn.link/0)")
    message = str(make_facts(hccn_dot_tls__3=skipped).per_device("hccn.tls")[3])
    assert message.endswith("was not run: hccn_tool timed out earlier on this host (`hccn_tool -i 0 -link -g`)"), \
        message
    remedy = remedy_for_unevaluated(message)
    assert "its later calls were skipped" in remedy and "did not answer within" not in remedy
    # A name the node gives that is no fact (an older runner) is kept as it is.
    odd = CommandOutput("", "", None, skipped="hccn_tool timed out earlier on this host (link/0)")
    assert str(make_facts(hccn_dot_tls__3=odd).per_device("hccn.tls")[3]).endswith("(link/0)")


def test_a_probe_cut_off_by_a_lost_connection_says_so_not_the_deadline():
    # gather.py marks a probe whose SSH connection went away mid-run; its unfinished and
    # never-started commands name that cause (and its remedy), not --host-timeout.
    raw = healthy_raw()
    del raw["hccn.tls/3"]
    facts = make_facts(raw=raw, hccn_dot_link__3=CommandOutput("", "", None))
    facts.error_kind = "lost"
    link, tls = facts.per_device("hccn.link")[3], facts.per_device("hccn.tls")[3]
    for value in (link, tls):
        assert isinstance(value, FactUnavailable)
        assert "SSH connection was lost" in str(value) and "deadline" not in str(value)
        remedy = remedy_for_unevaluated(str(value))
        assert "sshd" in remedy and "--host-timeout" not in remedy
    assert str(link).startswith("`hccn_tool -i 3 -link -g` did not finish")
    assert "was not gathered from node-01" in str(tls)


def test_an_unreachable_host_points_at_cluster_reachable_and_unknown_reasons_get_no_remedy_here():
    # An empty remedy broke the promise that every error gives its next step (preflight.json's too).
    assert remedy_for_unevaluated("not evaluated: node-03 is unreachable (connect timed out)").startswith(
        "See cluster.reachable for the host")
    assert remedy_for_unevaluated("the check itself crashed: KeyError: 'x'") == ""


def test_verdict_error_carries_the_next_step_unless_the_check_gives_one():
    info = CheckInfo(id="hccl.link_up", severity="error", title="t", remedy="reseat the cable", reference="FAQ")
    verdict = Verdict(info, "node-01")
    verdict.error("npu3", message="node-01 npu3: `hccn_tool -i 3 -link -g` timed out after 10s (hung tool)")
    verdict.error("npu4", message="node-01 npu4: odd", remedy="ask the vendor")
    verdict.error("npu5", message="node-01 npu5: odd")
    hung, own, none = verdict.results
    assert "--command-timeout" in hung.remedy and "reseat" not in hung.remedy
    assert own.remedy == "ask the vendor" and none.remedy == ""


def test_a_tools_terminal_escapes_never_reach_the_operators_terminal():
    # A node's stderr quoted in a message: escape sequences are written out, not sent.
    hostile = "\x1b]0;PWNED\x07\x1b[2J\x1b[31mdcmi failed"
    with pytest.raises(FactUnavailable) as unreadable:
        make_facts(npu_smi_dot_info=CommandOutput("", hostile, 3)).get("npu_smi.info")
    info = CheckInfo(id="npu.health", severity="error", title="t", remedy="r", reference="FAQ")
    verdict = Verdict(info, "node-01")
    verdict.failed("npu0", observed=f"health {hostile}", expected="OK")
    verdict.error("npu1", message=f"odd: {hostile}")
    texts = [str(unreadable.value), verdict.results[0].message, verdict.results[0].observed,
             verdict.results[1].message]
    for text in texts:
        assert "\x1b" not in text and "\x07" not in text, text
        assert "\\x1b]0;PWNED\\x07\\x1b[2J" in text, text


def test_a_remedy_quoting_a_nodes_value_cannot_send_terminal_escapes():
    # env.socket_ifname's remedy quotes HCCL_SOCKET_IFNAME as the node set it; pytest's failure
    # section (render_failures) prints the remedy as it is.
    hostile = "==eth0\x1b]0;PWNED\x07\x1b[2J"
    info = CheckInfo(id="env.socket_ifname", severity="error", title="t", remedy="r", reference="FAQ")
    verdict = Verdict(info, "node-01")
    verdict.failed("HCCL_SOCKET_IFNAME", observed="odd", expected="=eth0", remedy=f"export X={hostile}")
    verdict.error("npu1", message="odd", remedy=f"run {hostile}")
    for result in verdict.results:
        assert "\x1b" not in result.remedy and "\x07" not in result.remedy, result.remedy
        assert "\\x1b]0;PWNED\\x07\\x1b[2J" in result.remedy, result.remedy


@pytest.mark.parametrize("text, shown", [
    ('TP=$(curl -s -H "Authorization: Bearer sk-LEAK10" http://cfg/tp)',
     'TP=$(curl -s -H "Authorization: Bearer <redacted>" http://cfg/tp)'),
    ("PP=4 --hf-token LEAK11 at job.sh:3", "PP=4 --hf-token <redacted> at job.sh:3"),
    ("--load https://user:LEAK13@host/models", "--load https://user:<redacted>@host/models"),
    ("--data-path /data/x?token=LEAK15&y=1", "--data-path /data/x?token=<redacted>&y=1"),
    ("data.train_files=hdfs://u:LEAK21@nn/x.parquet", "data.train_files=hdfs://u:<redacted>@nn/x.parquet"),
    ("HF_TOKEN=abc OBS_SK=xyz HCCL_CONNECT_TIMEOUT=600", "HF_TOKEN=<redacted> OBS_SK=<redacted> HCCL_CONNECT_TIMEOUT=600"),
    ("tokenizer at /models/llama --load /ckpt", "tokenizer at /models/llama --load /ckpt"),
    ("export HF_TOKEN='hf_abc'; --hf-token \"abc123\"", "export HF_TOKEN=<redacted>; --hf-token <redacted>"),
    ('token: abc123, "api_key": "sk-1", curl -u ops:hunter2', 'token: <redacted>, "api_key": <redacted>, curl -u ops:<redacted>'),
    ("https://ghp_abcdef123@github.com/x redis://:hunter2@h", "https://<redacted>@github.com/x redis://:<redacted>@h"),
    # What only looks like one stays readable: a job check must name the folder it means.
    ("s.sh:29: --tokenizer-name-or-path /models/qwen has 2 shards", "s.sh:29: --tokenizer-name-or-path /models/qwen has 2 shards"),
    ("--tokenizer-not-use-fast --load /ckpt --max-tokens 4096", "--tokenizer-not-use-fast --load /ckpt --max-tokens 4096"),
    ("TOKENIZER_PATH=/m max_num_batched_tokens=8192 PASSTHROUGH=1 HCCL_AUTH_ENABLE=1 PasswordAuthentication=no",
     "TOKENIZER_PATH=/m max_num_batched_tokens=8192 PASSTHROUGH=1 HCCL_AUTH_ENABLE=1 PasswordAuthentication=no"),
    ("Basic authentication fails; ?page_key=3", "Basic authentication fails; ?page_key=3"),
    ("export PGPASSWORD=x DB_PASS=x SSH_PRIVATE_KEY=x REDIS_AUTH=x MYSQL_PWD=x HF_TOKEN=abc,def",
     "export PGPASSWORD=<redacted> DB_PASS=<redacted> SSH_PRIVATE_KEY=<redacted> REDIS_AUTH=<redacted> "
     "MYSQL_PWD=<redacted> HF_TOKEN=<redacted>"),
    ("https://maps.example/api?key=AIza123 ?X-Amz-Signature=abc&x=1", "https://maps.example/api?key=<redacted> "
                                                                     "?X-Amz-Signature=<redacted>&x=1"),
    ("PWD=/home/alice/job; docker run -u 1000:1000; the script passes a token: set HF_TOKEN instead",
     "PWD=/home/alice/job; docker run -u 1000:1000; the script passes a token: set HF_TOKEN instead"),
    ("image registry.example.com:5000/v2/ascend/mindie@sha256:0123abcd https://registry.example.com:5000/v2/x@sha256:1",
     "image registry.example.com:5000/v2/ascend/mindie@sha256:0123abcd https://registry.example.com:5000/v2/x@sha256:1"),
    ("HF_TOKEN=abc\x1fdef", "HF_TOKEN=<redacted>"),
])
def test_secrets_a_message_quotes_are_redacted(text, shown):
    """Job notes quoted launch-script lines as written, tokens and URL passwords included, into every report."""
    info = CheckInfo(id="job.tp", severity="error", title="t", remedy="r", reference="FAQ")
    verdict = Verdict(info, "node-01")
    verdict.failed(observed=text, expected="x")
    assert verdict.results[0].observed == shown


def test_a_nodes_value_with_a_newline_cannot_print_a_line_of_its_own():
    info = CheckInfo(id="env.socket_ifname", severity="error", title="t", remedy="r", reference="FAQ")
    verdict = Verdict(info, "node-01")
    value = "eth0\nverdict: READY"
    verdict.failed("HCCL_SOCKET_IFNAME", observed=f"HCCL_SOCKET_IFNAME={value} matches no interface", expected="x")
    verdict.error("npu1", message=f"odd: {value}")
    verdict.passed("npu2", message=f"fine: {value}")
    for r in verdict.results:
        text = r.observed or r.message
        assert "\n" not in text and "eth0\\nverdict: READY" in text, text


def test_a_replayed_host_whose_capture_ended_early_says_so_not_that_the_file_lacks_it():
    """A replay blamed the capture's -k selection for a fact the host's deadline had cut off."""
    from preflight.facts import FactUnavailable, HostFacts

    done = HostFacts(host="n1", address="10.0.0.1")
    done.replayed_from = "f.json"
    with pytest.raises(FactUnavailable, match="is not in the facts file f.json"):
        done.get("session.nofile")
    late = HostFacts(host="n2", address="10.0.0.2", error="the probe did not finish within --host-timeout 60s",
                     error_kind="deadline")
    late.replayed_from = "f.json"
    with pytest.raises(FactUnavailable, match="--host-timeout ended the probe"):
        late.get("session.nofile")


def test_name_resolution_cut_at_the_cap_is_an_error_with_its_next_step():
    """Output cut at the probe's cap: an error saying so, and what to do (past ~19 000 names, the
    inventory split over controllers), not the names after the cut unresolved on that node."""
    text = "".join(f"v4 node-{i:05d}.cluster.example.com 10.{i // 250}.{i % 250}.9 -\n" for i in range(300))
    facts = HostFacts(host="node-01", raw={"net.resolve": dataclasses.replace(out(text[:-20]), truncated=True)})
    with pytest.raises(FactUnavailable) as caught:
        facts.get("net.resolve")
    message = str(caught.value)
    assert "ended before its end line" in message and "the tool printed more" in message, message
    assert "Past one controller" in remedy_for_unevaluated(message)
