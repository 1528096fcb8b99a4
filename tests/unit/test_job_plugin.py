"""--job end to end through pytester: job checks alone with --job-local, exit codes, bad job files."""

from __future__ import annotations

import json

import pytest

from tests.unit.job_files import hf_model, roll_yaml, verl_script

pytest_plugins = ["pytester"]
TIMEOUT = 120


def run(pytester, *args):
    return pytester.runpytest_subprocess(*args, timeout=TIMEOUT)


def text(result):
    return "\n".join(result.outlines + result.errlines)


def test_job_local_without_inventory_runs_only_job_checks(pytester):
    hf = hf_model(pytester.path / "Qwen2-7B")
    (pytester.path / "run.sh").write_text(verl_script(model=str(hf), bucket=512, train=str(hf / "config.json")))
    result = run(pytester, "--job", "run.sh", "--job-local")
    out = text(result)
    assert result.ret == 1, out
    assert "Traceback" not in out
    doc = json.loads((pytester.path / "reports" / "preflight.json").read_text())
    checks = {r["check"] for r in doc["results"]}
    assert checks and all(c.startswith("job.") for c in checks), checks
    bucket = [r for r in doc["results"] if r["check"] == "job.weight_bucket"]
    assert [r["outcome"] for r in bucket] == ["failed"]
    assert "suggest 4096 (next power of two ≥ 1.2 × 2374.0 = 2848.8)" in bucket[0]["message"]
    assert bucket[0]["remedy"] and bucket[0]["reference"].startswith("verl NPU FAQ Q3")
    assert doc["hosts"] == []


def test_what_the_job_reader_could_not_see_is_said_in_terminal_json_and_page(pytester):
    """Job notes ("$@" passes on the script's arguments, a value set outside the script) were
    collected and shown nowhere."""
    hf = hf_model(pytester.path / "Qwen2-7B")
    script = verl_script(model=str(hf), bucket=512, train=str(hf / "config.json"))
    (pytester.path / "run.sh").write_text(script.replace("trainer.nnodes=1", "trainer.nnodes=$NNODES"))
    result = run(pytester, "--job", "run.sh", "--job-local")
    out = text(result)
    assert "note: $@ (run.sh:19) passes on the script's own arguments" in out, out
    assert "note: trainer.nnodes=$NNODES (run.sh:18) is set from outside the script; not checked" in out
    doc = json.loads((pytester.path / "reports" / "preflight.json").read_text())
    [job] = doc["jobs"]
    assert job["path"] == "run.sh" and job["kind"] == "verl" and len(job["notes"]) == 3
    page = (pytester.path / "reports" / "matrix.html").read_text()
    assert "Not read from the job files" in page and "is set from outside the script" in page


def test_a_token_in_the_launch_script_reaches_no_report(pytester):
    """A note quotes the line a value comes from: a token or a URL password on it went into the
    terminal, preflight.json and both pages as written."""
    hf = hf_model(pytester.path / "Qwen2-7B")
    script = verl_script(model=str(hf), bucket=512, train=str(hf / "config.json"))
    script = script.replace("trainer.nnodes=1", "trainer.nnodes=$(curl -s -H 'Authorization: Bearer sk-LEAK10' "
                                                "https://ops:LEAK13@cfg.example/nnodes)")
    (pytester.path / "run.sh").write_text(script)
    result = run(pytester, "--job", "run.sh", "--job-local")
    assert "sk-LEAK10" not in text(result) and "LEAK13" not in text(result), text(result)
    assert "Bearer <redacted>" in text(result)
    for name in ("preflight.json", "matrix.html", "preflight.html"):
        page = (pytester.path / "reports" / name).read_text()
        assert "sk-LEAK10" not in page and "LEAK13" not in page, name


def test_good_job_is_ready(pytester):
    (pytester.path / "rlvr.yaml").write_text(roll_yaml())
    result = run(pytester, "--job", "rlvr.yaml", "--job-local", "-k", "roll")
    assert result.ret == 0, text(result)
    result.stdout.fnmatch_lines(["*verdict: READY*"])


def test_a_run_where_every_check_was_skipped_says_so(pytester):
    """READY with nothing applicable read like a clean bill of health."""
    (pytester.path / "rlvr.yaml").write_text(roll_yaml())
    result = run(pytester, "--job", "rlvr.yaml", "--job-local", "-k", "weights_format")
    assert result.ret == 0, text(result)
    result.stdout.fnmatch_lines(["*verdict: READY (but no selected check applied here: every one was skipped)*"])
    page = (pytester.path / "reports" / "matrix.html").read_text()
    assert "READY (no selected check applied: every one was skipped)" in page


def test_two_jobs_and_a_bad_one(pytester):
    (pytester.path / "a.yaml").write_text(roll_yaml(infer="list(range(0, 4))"))
    (pytester.path / "b.yaml").write_text(roll_yaml(strategy="megatron_train"))
    result = run(pytester, "--job", "a.yaml", "--job", "b.yaml", "--job-local", "-k", "roll_")
    out = text(result)
    # Both are warnings (ROLL's newer Ascend examples do both): named, not blocking; --strict blocks.
    assert result.ret == 0, out
    assert "WARNING (not blocking) [job.roll_device_mapping] on a.yaml (cluster-wide): a.yaml:34" in out, out
    assert "WARNING (not blocking) [job.roll_strategy] on b.yaml (cluster-wide): b.yaml:23" in out, out
    result = run(pytester, "--job", "a.yaml", "--job", "b.yaml", "--job-local", "-k", "roll_", "--strict")
    assert result.ret == 1
    assert "test_roll_device_mapping[a.yaml]" in text(result) and "test_roll_strategy[b.yaml]" in text(result)


@pytest.mark.parametrize("content, where", [
    ("actor_train:\n  device_mapping: list(range(0, 4)\nactor_infer: {}\n", "bad.yaml:2:"),
    ("actor_train:\n  device_mapping: [0, 1\n", "bad.yaml:3:"),
])
def test_bad_job_file_is_one_line_and_exit_4(pytester, content, where):
    (pytester.path / "bad.yaml").write_text(content)
    result = run(pytester, "--job", "bad.yaml", "--job-local")
    lines = [ln for ln in text(result).splitlines() if ln.strip()]
    assert result.ret == 4, lines
    assert len(lines) == 1 and where in lines[0], lines


def test_job_without_inventory_or_job_local_is_a_usage_error(pytester):
    (pytester.path / "r.yaml").write_text(roll_yaml())
    result = run(pytester, "--job", "r.yaml")
    assert result.ret == 4
    assert "--job-local" in text(result)


def test_without_job_the_job_checks_are_not_collected(pytester):
    (pytester.path / "inv.yaml").write_text("hosts:\n  - {name: localhost, connection: local}\n")
    result = run(pytester, "--inventory", "inv.yaml", "--collect-only", "-q")
    assert "job.py" not in text(result)
    (pytester.path / "r.yaml").write_text(roll_yaml())
    result = run(pytester, "--inventory", "inv.yaml", "--job", "r.yaml", "--collect-only", "-q")
    out = text(result)
    assert "job.py::test_roll_strategy[r.yaml]" in out and "limits.py" in out


def test_job_with_inventory_reads_the_model_on_the_node(pytester):
    """connection: local is a node here: the model folder is read by the probe command."""
    hf = hf_model(pytester.path / "models" / "Qwen2-7B")
    (pytester.path / "inv.yaml").write_text("hosts:\n  - {name: localhost, connection: local}\n")
    (pytester.path / "run.sh").write_text(verl_script(model=str(hf), bucket=512))
    result = run(pytester, "--inventory", "inv.yaml", "--job", "run.sh", "-k", "weight_bucket or data_paths")
    doc = json.loads((pytester.path / "reports" / "preflight.json").read_text())
    bucket = [r for r in doc["results"] if r["check"] == "job.weight_bucket"]
    assert [r["outcome"] for r in bucket] == ["failed"], text(result)
    assert "2374.0 MB" in bucket[0]["message"] and "(read on localhost)" in bucket[0]["message"]
    paths = [r for r in doc["results"] if r["check"] == "job.data_paths"]
    assert {r["host"] for r in paths} == {"localhost"}
    assert any(r["outcome"] == "failed" and "/data/gsm8k/train.parquet" in r["message"] for r in paths)


def test_two_jobs_with_their_own_launch_directories_read_their_own_relative_paths(pytester):
    """Both jobs name ./data relative to their launch directory; one has it, one not: read together,
    the last directory's answer stood for both."""
    for name, has_data in (("p1", True), ("p2", False)):
        root = pytester.path / name
        (root / "examples").mkdir(parents=True)
        if has_data:
            (root / "data").mkdir()
            (root / "data" / "train.jsonl").write_text("{}\n")
        (root / "examples" / "data.json").write_text(json.dumps(
            {"dataset_param": {"basic_parameters": {"dataset": "./data/train.jsonl"}}}))
        (root / "examples" / "run.sh").write_text(
            "torchrun pretrain_vlm.py --mm-data ./examples/data.json --tensor-model-parallel-size 1\n")
    result = run(pytester, "--job", "p1/examples/run.sh", "--job", "p2/examples/run.sh", "--job-local")
    doc = json.loads((pytester.path / "reports" / "preflight.json").read_text())
    paths = {r["subject"]: r["outcome"] for r in doc["results"] if r["check"] == "job.data_paths"}
    assert paths == {"p1/examples/run.sh": "passed", "p2/examples/run.sh": "failed"}, text(result)
