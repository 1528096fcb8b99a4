"""Every job check on real small files: one passing and one failing job each; every failure
names the argument and the value that is wrong."""

from __future__ import annotations

import json

import pytest

from preflight.check import Verdict, info_of
from preflight.checks import job as jc
from preflight.job import JobError, load_job
from preflight.job.facts import JobFacts, local_hostfacts
from tests.factsets import make_host
from tests.unit.job_files import (hf_model, llm_script, megatron_ckpt, mm_model_json, mm_script, roll_yaml,
                                  verl_script)


class _Item:
    def __init__(self, func):
        self.func = func

    def get_closest_marker(self, name):
        return next((m for m in getattr(self.func, "pytestmark", []) if m.name == name), None)


def run(func, job, hosts=()):
    verdict = Verdict(info_of(_Item(func)), None)
    kwargs = {"job": job, "verdict": verdict}
    if "job_facts" in func.__code__.co_varnames[:func.__code__.co_argcount]:
        kwargs["job_facts"] = JobFacts([("this machine", local_hostfacts([job]))], hosts, local=True)
    func(**kwargs)
    return verdict.results


def outcomes(results):
    return [r.outcome for r in results]


def explained(result, *needles):
    assert result.observed and result.expected and result.remedy and result.reference
    for n in needles:
        assert n in result.message, (n, result.message)


def write(tmp_path, name, text, newline=""):
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "w", encoding="utf-8", newline=newline) as fh:
        fh.write(text)
    return str(p)


def mm_job(tmp_path, *, llm=(1, 10, 10, 7), vit=(32, 0, 0, 0), **kw):
    write(tmp_path, "examples/qwen2vl/model_7b.json", mm_model_json(llm=llm, vit=vit))
    return load_job(write(tmp_path, "examples/qwen2vl/finetune_qwen2vl_7b.sh", mm_script(**kw)))


# -- job.script_line_endings ----------------------------------------------------------------

def test_crlf_script_fails_with_its_lines(tmp_path):
    [r] = run(jc.test_script_line_endings, mm_job(tmp_path, crlf=True))
    assert r.outcome == "failed"
    explained(r, "finetune_qwen2vl_7b.sh:1", "CRLF")
    assert "dos2unix" in r.remedy
    assert outcomes(run(jc.test_script_line_endings, mm_job(tmp_path))) == ["passed"]
    roll = load_job(write(tmp_path, "r.yaml", roll_yaml()))
    assert outcomes(run(jc.test_script_line_endings, roll)) == ["skipped"]


def test_a_script_parsing_its_own_options_is_no_broken_continuation(tmp_path):
    """`case "$1" in --tp) ...` failed twice as flags cut off the launch (found by review); so did
    a broken continuation in another command, blamed on the launch."""
    text = ('while [ $# -gt 0 ]; do\n  case "$1" in\n    --tp) TP=$2; shift 2;;\n    --help) echo usage; exit 0;;\n'
            '  esac\ndone\npython tools/preprocess_data.py --input x \\\n#  --workers 4 \\\n--output-prefix y\n'
            'torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 2\n')
    job = load_job(write(tmp_path, "opts.sh", text))
    assert job.broken == [] and outcomes(run(jc.test_script_line_endings, job)) == ["passed"]


@pytest.mark.parametrize("breaker, why", [
    ("    # --sequence-parallel \\\n", "the comment on line 3 ends the command before it"),
    ("    --tensor-model-parallel-size 4 \\ \n", "line 3 has a space after its \\"),
    ("\n", "line 3 is empty, which ends the command before it"),
    ("    # --sequence-parallel \\\n\n", "lines 3-4 (a comment and empty) end the command before it")])
def test_a_broken_line_continuation_in_a_megatron_launch_fails(tmp_path, breaker, why):
    """A commented-out flag (or a space after a \\) in the middle of torchrun's lines cut the command:
    PP and --load were never passed, and the run read READY (found by review)."""
    text = ("torchrun --nproc_per_node 8 pretrain_gpt.py \\\n"
            "    --tensor-model-parallel-size 4 \\\n" + breaker +
            "    --pipeline-model-parallel-size 2 \\\n    --load /tmp/x/ckpt\n")
    job = load_job(write(tmp_path, "run.sh", text))
    [r] = [r for r in run(jc.test_script_line_endings, job) if r.outcome == "failed"]
    line = 5 if breaker.count("\n") == 2 else 4
    assert r.message.startswith(f"{tmp_path / 'run.sh'}:{line}") and why in r.message, r.message
    assert "--pipeline-model-parallel-size starts a command of its own" in r.message
    assert "never gets these 2 flag(s): --pipeline-model-parallel-size, --load" in r.message
    assert r.message.count(str(tmp_path / "run.sh")) == 1, r.message  # the place once
    assert "Join the command again" in r.remedy
    # The same for verl's overrides: a failure, not a note.
    v = write(tmp_path, "v.sh", "python3 -m verl.trainer.main_ppo \\\n    actor_rollout_ref.model.path=/m \\\n"
                                "#    trainer.save_freq=1 \\\n    trainer.nnodes=1 \\\n    trainer.n_gpus_per_node=8\n")
    [r] = [r for r in run(jc.test_script_line_endings, load_job(str(v), kind="verl")) if r.outcome == "failed"]
    assert "verl never gets these 2 override(s): trainer.nnodes, trainer.n_gpus_per_node" in r.message


def test_a_lost_backslash_above_an_empty_line_is_named_with_it(tmp_path):
    """Deleting the empty line alone left the command cut: the line above lacks its \\ too."""
    for gap, why in (("\n", "line 3 is empty, which ends the command before it; delete that line; and line 2 "
                             "does not end in \\; add it"),
                     ("# --sp\n\n", "lines 3-4 (a comment and empty) end the command before it; delete them or "
                                     "move them out; and line 2 does not end in \\; add it")):
        text = ("torchrun --nproc_per_node 8 pretrain_gpt.py \\\n    --tensor-model-parallel-size 4\n" + gap +
                "    --pipeline-model-parallel-size 2 \\\n    --load /tmp/x/ckpt\n")
        job = load_job(write(tmp_path, "run.sh", text))
        [r] = [r for r in run(jc.test_script_line_endings, job) if r.outcome == "failed"]
        assert why in r.message, r.message


# -- job.tp_kv_heads ----------------------------------------------------------------------------

def test_tp_above_kv_heads_of_config_json(tmp_path):
    model = hf_model(tmp_path / "models" / "qwen", kv_heads=8)
    job = load_job(write(tmp_path, "p.sh", llm_script(tp=16, tokenizer=str(model), kv=None).replace(
        "    --num-query-groups None \\\n", "")))
    [r] = run(jc.test_tp_kv_heads, job)
    assert r.outcome == "failed"
    explained(r, "--tensor-model-parallel-size 16 > num_key_value_heads 8 in", f"{model}/config.json", "p.sh:")
    job = load_job(write(tmp_path, "q.sh", llm_script(tp=3, kv=4)))
    [r] = run(jc.test_tp_kv_heads, job)
    explained(r, "--tensor-model-parallel-size 3 does not divide --num-query-groups 4")
    assert outcomes(run(jc.test_tp_kv_heads, load_job(write(tmp_path, "ok.sh", llm_script(tp=4, kv=4))))) == ["passed"]


def test_tp_kv_heads_without_group_query_attention_are_the_attention_heads(tmp_path):
    """Megatron without --group-query-attention gives every attention head its own K/V: the job's
    --num-attention-heads is the count, whatever config.json says (it was: "KV heads unknown"
    without a readable config.json)."""
    def mha_script(tp):
        return llm_script(tp=tp, kv=None).replace("    --group-query-attention \\\n", "").replace(
            "    --num-query-groups None \\\n", "")

    mha = mha_script(8)
    assert "--group-query-attention" not in mha and "--num-query-groups" not in mha
    [r] = run(jc.test_tp_kv_heads, load_job(write(tmp_path, "mha.sh", mha)))
    assert r.outcome == "failed"
    explained(r, "--tensor-model-parallel-size 8 does not divide --num-attention-heads 28 (", "mha.sh:",
              "without --group-query-attention")
    assert outcomes(run(jc.test_tp_kv_heads, load_job(write(tmp_path, "ok.sh", mha_script(4))))) == ["passed"]
    # --num-query-groups without the switch is ignored by Megatron.
    ignored = mha_script(8).replace("    --num-attention-heads 28 \\\n",
                                    "    --num-attention-heads 28 \\\n    --num-query-groups 4 \\\n")
    [r] = run(jc.test_tp_kv_heads, load_job(write(tmp_path, "ign.sh", ignored)))
    explained(r, "does not divide --num-attention-heads 28", "--num-query-groups 4 is ignored without it")
    # MindSpeed-MM's placeholder --num-attention-heads 1 is not the model's (that is the --mm-model json).
    placeholders = mm_script(tp=2, mm_model="./absent/model.json").replace(
        "    --use-mcore-models \\\n",
        "    --use-mcore-models \\\n    --num-layers 1 \\\n    --hidden-size 1 \\\n    --num-attention-heads 1 \\\n")
    assert "--num-attention-heads 1" in placeholders
    [r] = run(jc.test_tp_kv_heads, load_job(write(tmp_path, "mm.sh", placeholders)))
    assert r.outcome == "error" and "KV heads are unknown" in r.message, r.message
    # With the switch and no --num-query-groups, the model's config.json says.
    model = hf_model(tmp_path / "models" / "qwen", kv_heads=4)
    gqa = llm_script(tp=8, tokenizer=str(model), kv=None).replace("    --num-query-groups None \\\n", "")
    [r] = run(jc.test_tp_kv_heads, load_job(write(tmp_path, "gqa.sh", gqa)))
    explained(r, "--tensor-model-parallel-size 8 > num_key_value_heads 4 in")


def test_tp_1_fits_any_kv_heads_without_reading_the_model(tmp_path):
    """TP 1 with the model's heads unknown (a DiT, a converted checkpoint) was an error: NOT READY
    for a job that cannot fail this check (found by review of upstream examples)."""
    script = mm_script(tp=1, mm_model="./absent/model.json")
    [r] = run(jc.test_tp_kv_heads, load_job(write(tmp_path, "dit.sh", script)))
    assert r.outcome == "passed" and "one rank holds every KV head" in r.message


def test_a_frozen_vit_stage_with_the_dummy_optimizer_may_hold_no_llm_layer(tmp_path):
    """MindSpeed-MM's InternVL2.5-78B example: the frozen ViT on stage 0, no LLM layer there, and
    --enable-dummy-optimizer, which exists for that stage (FAQ #10's crash). It failed (found by
    running upstream examples); a stage with no layer at all still fails."""
    script = mm_script().replace("    --use-mcore-models \\\n", "    --use-mcore-models \\\n    --enable-dummy-optimizer \\\n")
    assert "--enable-dummy-optimizer" in script
    write(tmp_path, "examples/qwen2vl/model_7b.json", mm_model_json(llm=(0, 10, 10, 8), vit=(32, 0, 0, 0)))
    job = load_job(write(tmp_path, "examples/qwen2vl/finetune_qwen2vl_7b.sh", script))
    [r] = run(jc.test_pp_layers, job)
    assert r.outcome == "passed", r.message
    write(tmp_path, "examples/qwen2vl/model_7b.json", mm_model_json(llm=(0, 10, 10, 8), vit=(0, 32, 0, 0)))
    [r] = run(jc.test_pp_layers, load_job(write(tmp_path, "examples/qwen2vl/finetune_qwen2vl_7b.sh", script)))
    assert r.outcome == "failed" and "stage 0 has 0 LLM layers" in r.message
    # Without the switch, the frozen-ViT stage fails as before.
    [r] = run(jc.test_pp_layers, mm_job(tmp_path, llm=(0, 10, 10, 8)))
    assert r.outcome == "failed" and "--enable-dummy-optimizer" in r.remedy


def test_tp_kv_heads_unknown_says_what_was_ignored_and_what_is_unknown(tmp_path):
    p = write(tmp_path, "m8.sh", "torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 4 "
                                 "--num-query-groups 8 --num-attention-heads $HEADS --num-layers 28\n")
    [r] = run(jc.test_tp_kv_heads, load_job(p))
    assert r.outcome == "error"
    for said in ("--num-query-groups 8 is ignored without --group-query-attention",
                 "--num-attention-heads $HEADS is set from outside the script",
                 "no model directory in the job to read a config.json from"):
        assert said in r.message, r.message


def test_tp_kv_heads_from_the_mm_model_json(tmp_path):
    [r] = run(jc.test_tp_kv_heads, mm_job(tmp_path, tp=8))  # model_7b.json: num_query_groups 4
    assert r.outcome == "failed"
    explained(r, "--tensor-model-parallel-size 8 > text_decoder.num_query_groups: 4", "model_7b.json")


# -- job.parallel_fits --------------------------------------------------------------------------

def test_parallel_layout_must_divide_world_and_fit_inventory(tmp_path):
    [r] = run(jc.test_parallel_fits, mm_job(tmp_path, tp=4, pp=4, npus=8))
    assert r.outcome == "failed"
    explained(r, "--tensor-model-parallel-size 4 × --pipeline-model-parallel-size 4 × --context-parallel-size 1 = 16",
              "--nnodes 1 × --nproc_per_node 8 = 8")
    assert outcomes(run(jc.test_parallel_fits, mm_job(tmp_path, tp=1, pp=4))) == ["passed"]
    hosts = [make_host("node-01", npus_per_node=8), make_host("node-02", npus_per_node=8)]
    results = run(jc.test_parallel_fits, mm_job(tmp_path, tp=1, pp=4, nnodes=4, npus=16), hosts=hosts)
    messages = " | ".join(r.message for r in results)
    assert "--nproc_per_node 16 but node-[01-02] has 8 NPUs" in messages
    assert "--nnodes 4 but the inventory has 2 host(s)" in messages


@pytest.mark.parametrize("tp, pp, ep, outcome", [(2, 2, 8, "failed"), (2, 2, 2, "passed"), (1, 1, 8, "passed"),
                                                (8, 1, 1, "passed")])
def test_expert_parallel_size_must_divide_what_tp_and_pp_leave(tmp_path, tp, pp, ep, outcome):
    # 8 NPUs: TP 2 × PP 2 leave 2 data-parallel ranks, which EP 8 cannot be laid over.
    job = load_job(write(tmp_path, "p.sh", llm_script(tp=tp, pp=pp, ep=ep)))
    results = run(jc.test_parallel_fits, job)
    assert [r.outcome for r in results] == [outcome], [r.message for r in results]
    if outcome == "failed":
        explained(results[0], "--expert-model-parallel-size 8 does not divide the 2 ranks left by "
                              "--tensor-model-parallel-size 2 × --pipeline-model-parallel-size 2")


def test_an_explicit_expert_tensor_parallel_size_replaces_tp_in_the_expert_rule(tmp_path):
    """verl's examples/grpo_trainer/run_qwen3-235b_megatron_grpo_64card_npu.sh: TP 4, PP 16, EP 4 and
    expert-TP 1 on 8 x 8 NPUs: 64 % (1 x 4 x 16) = 0. Read with expert-TP = TP it failed (found by review)."""
    def verl(etp):
        return ("python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=Qwen/Qwen3-235B-A22B \\\n"
                "  actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=16 \\\n"
                "  actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4 \\\n"
                "  actor_rollout_ref.actor.megatron.expert_model_parallel_size=4 \\\n"
                + (f"  actor_rollout_ref.actor.megatron.expert_tensor_parallel_size={etp} \\\n" if etp else "")
                + "  trainer.nnodes=8 trainer.n_gpus_per_node=8\n")
    [r] = run(jc.test_parallel_fits, load_job(write(tmp_path, "etp.sh", verl(1))))
    assert r.outcome == "passed", r.message
    [r] = run(jc.test_parallel_fits, load_job(write(tmp_path, "tp.sh", verl(None))))
    assert r.outcome == "failed" and "world / (TP (expert-TP by default) × PP) = 1" in r.message, r.message
    # Expert-TP 8 × PP 16 = 128 does not divide 64 NPUs: Megatron stops at init (found by review).
    [r] = run(jc.test_parallel_fits, load_job(write(tmp_path, "e8.sh", verl(8))))
    assert r.outcome == "failed" and "= 128 does not divide the world size" in r.message, r.message
    # MindSpeed's flag alike.
    script = llm_script(tp=2, pp=2, ep=4).replace("--expert-model-parallel-size 4 \\\n",
                                                  "--expert-model-parallel-size 4 \\\n    --expert-tensor-parallel-size 1 \\\n")
    assert "--expert-tensor-parallel-size 1" in script
    [r] = run(jc.test_parallel_fits, load_job(write(tmp_path, "ms.sh", script)))
    assert r.outcome == "passed", r.message  # 8 % (1 x 4 x 2) = 0; with expert-TP = TP 2 it would not be


def test_torchrun_without_nnodes_is_one_node_whatever_the_inventory(tmp_path):
    script = llm_script(tp=4, pp=4).replace(" --nnodes $NNODES", "")
    assert "--nnodes" not in script
    hosts = [make_host(f"node-0{i}", npus_per_node=8) for i in (1, 2)]
    [r] = run(jc.test_parallel_fits, load_job(write(tmp_path, "p.sh", script)), hosts=hosts)
    assert r.outcome == "failed", r.message  # 16 NPUs in the inventory, but the job runs on 8
    explained(r, "does not divide the world size --nproc_per_node 8 on one node (torchrun's default "
                 "--nnodes 1) = 8")


def test_roll_device_mapping_beyond_the_cluster(tmp_path):
    job = load_job(write(tmp_path, "r.yaml", roll_yaml(train="list(range(0, 8))", infer="list(range(8, 16))")))
    [r] = run(jc.test_parallel_fits, job, hosts=[make_host("node-01", npus_per_node=8)])
    explained(r, "actor_train.device_mapping: list(range(0, 8))" if False else "actor_infer.device_mapping: "
              "list(range(8, 16)) uses NPU 15", "8 NPUs on 1 inventory host")


# -- job.pp_layers ------------------------------------------------------------------------------

def test_zero_llm_layer_stage_and_wrong_sum(tmp_path):
    results = run(jc.test_pp_layers, mm_job(tmp_path, llm=(0, 8, 10, 10)))
    msgs = [r.message for r in results]
    assert all(r.outcome == "failed" for r in results) and len(results) == 1
    explained(results[0], "text_decoder.pipeline_num_layers: [0, 8, 10, 10]", "stage 0 has 0 LLM layers",
              "model_7b.json:")
    results = run(jc.test_pp_layers, mm_job(tmp_path, llm=(1, 7, 10, 9), pp=4))
    explained(results[0], "sums to 27 but text_decoder.num_layers: 28")
    results = run(jc.test_pp_layers, mm_job(tmp_path, pp=2))
    assert any("has 4 stages but --pipeline-model-parallel-size 2" in r.message for r in results), msgs
    assert outcomes(run(jc.test_pp_layers, mm_job(tmp_path))) == ["passed"]  # vit [32, 0, 0, 0] is fine


def test_a_virtual_pipeline_split_is_judged_per_stage_over_its_chunks(tmp_path):
    # MindSpeed-MM's VPP doc, PP 4 and VPP 3: one row per chunk; stage 0 holds 0 + 4 + 4 layers.
    vpp = mm_job(tmp_path, llm=[[0, 0, 0, 1], [4, 4, 4, 4], [4, 3, 2, 2]],
                 vit=[[32, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]])
    assert outcomes(run(jc.test_pp_layers, vpp)) == ["passed"], [r.message for r in run(jc.test_pp_layers, vpp)]
    wrong = mm_job(tmp_path, llm=[[0, 0, 0, 1], [4, 4, 4, 4], [4, 3, 2, 1]],
                   vit=[[32, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]])
    [r] = run(jc.test_pp_layers, wrong)
    assert r.outcome == "failed" and "sums to 27 but text_decoder.num_layers: 28" in r.message, r.message


# -- job.weights_format / job.weights_parallel -------------------------------------------------

def test_hf_weights_given_to_megatron(tmp_path):
    hf = hf_model(tmp_path / "Qwen2-VL-7B-Instruct")
    [r] = run(jc.test_weights_format, mm_job(tmp_path, load=str(hf)))
    assert r.outcome == "failed"
    explained(r, f"--load {hf} holds HuggingFace weights (model-00001-of-00002.safetensors")
    mg = megatron_ckpt(tmp_path / "mm_path", tp=1, pp=4)
    assert outcomes(run(jc.test_weights_format, mm_job(tmp_path, load=str(mg)))) == ["passed"]
    [r] = run(jc.test_weights_format, mm_job(tmp_path, load=str(tmp_path / "missing")))
    assert r.outcome == "error" and "does not exist" in r.message


def test_a_diffusers_pipeline_is_not_taken_for_unconverted_or_unindexed_weights(tmp_path):
    """MindSpeed-MM's DanceGRPO loads FLUX.1-dev as downloaded (--load ckpt/flux): model_index.json,
    ae.safetensors and flux1-dev.safetensors, two models, not two shards. It failed twice (found
    by running upstream examples)."""
    from tests.unit.job_files import write_safetensors

    flux = tmp_path / "ckpt" / "flux"
    flux.mkdir(parents=True)
    (flux / "model_index.json").write_text('{"_class_name": "FluxPipeline"}')
    for name in ("ae.safetensors", "flux1-dev.safetensors"):
        write_safetensors(flux / name, {"w": ("BF16", [4, 4])})
    (flux / "transformer").mkdir()
    job = mm_job(tmp_path, load=str(flux))
    [r] = run(jc.test_weights_format, job)
    assert r.outcome == "skipped" and "a diffusers pipeline (model_index.json)" in r.message
    hf = load_job(write(tmp_path, "f.sh", mm_script(load=str(flux)).replace(
        "    --use-mcore-models \\\n", f"    --use-mcore-models \\\n    --tokenizer-name-or-path {flux} \\\n")))
    for r in run(jc.test_safetensors_index, hf):
        assert r.outcome in ("passed", "skipped"), r.message
    # Numbered shards without an index still fail, however the numbers are written (DeepSeek's
    # -of-000163, Kimi-K2's -1-of-61).
    for names in (("model-00001-of-000002.safetensors", "model-00002-of-000002.safetensors"),
                  ("model-1-of-2.safetensors", "model-2-of-2.safetensors")):
        d = tmp_path / names[0]
        d.mkdir()
        for n in names:
            write_safetensors(d / n, {"w": ("BF16", [4, 4])})
        job = load_job(write(tmp_path, "n.sh", llm_script(tokenizer=str(d))))
        [r] = [r for r in run(jc.test_safetensors_index, job) if r.outcome != "skipped"]
        assert r.outcome == "failed", (names, r.message)
    # Numbered shards without an index still fail.
    sharded = hf_model(tmp_path / "sharded")
    (sharded / "model.safetensors.index.json").unlink()
    job = load_job(write(tmp_path, "s.sh", llm_script(tokenizer=str(sharded))))
    [r] = [r for r in run(jc.test_safetensors_index, job) if r.outcome != "skipped"]
    assert r.outcome == "failed" and "has 2 safetensors shards but no model.safetensors.index.json" in r.message


@pytest.mark.parametrize("tracker, says", [
    (None, "no latest_checkpointed_iteration.txt: Megatron does not load the checkpoint and starts from random"),
    ("1000", "latest_checkpointed_iteration.txt names iter_0001000, which is not in the folder"),
    ("release", "names release, which is not in the folder")])
def test_a_megatron_checkpoint_its_tracker_does_not_point_at_fails(tmp_path, tracker, says):
    mg = megatron_ckpt(tmp_path / "mm_path", tp=1, pp=4, iteration=500)
    if tracker is None:
        (mg / "latest_checkpointed_iteration.txt").unlink()
    else:
        (mg / "latest_checkpointed_iteration.txt").write_text(tracker + "\n")
    [r] = run(jc.test_weights_format, mm_job(tmp_path, load=str(mg)))
    assert r.outcome == "failed", r.message
    explained(r, says)


def test_load_at_one_iteration_folder_says_to_point_at_its_parent(tmp_path):
    """--load .../iter_0000500 (its mp_rank_* right below) was a warning, "holds no checkpoint ... or no
    --load when training from scratch"; Megatron finds no tracker there and starts from random weights."""
    mg = megatron_ckpt(tmp_path / "mm_path", tp=1, pp=4, iteration=500)
    [r] = run(jc.test_weights_format, mm_job(tmp_path, load=str(mg / "iter_0000500")))
    assert r.outcome == "failed" and r.severity == "error", r
    explained(r, "holds the mp_rank_* shards themselves: it is one iteration's folder")
    assert r.remedy.startswith(f"Point --load at {mg}, the folder above it"), r.remedy


def test_hf_weights_converted_when_the_job_starts_pass(tmp_path):
    # MindSpeed-LLM's All-in-One training: --load <HF folder> --enable-hf2mg-convert --model-type-hf qwen3.
    hf = hf_model(tmp_path / "Qwen3-8B")
    script = llm_script(load=str(hf)).replace("    --load ${CKPT_LOAD_DIR} \\\n",
                                              "    --load ${CKPT_LOAD_DIR} \\\n    --enable-hf2mg-convert \\\n"
                                              "    --model-type-hf qwen3 \\\n", 1)
    assert "--enable-hf2mg-convert" in script
    job = load_job(write(tmp_path, "p.sh", script))
    [r] = run(jc.test_weights_format, job)
    assert r.outcome == "passed" and "converted when the job starts (--enable-hf2mg-convert" in r.message, r.message
    [r] = run(jc.test_weights_format, load_job(write(tmp_path, "q.sh", llm_script(load=str(hf)))))
    assert r.outcome == "failed"


def test_checkpoint_split_must_match_the_job(tmp_path):
    mg = megatron_ckpt(tmp_path / "mm_path", tp=2, pp=1, iteration=2000)
    results = run(jc.test_weights_parallel, mm_job(tmp_path, load=str(mg), tp=1, pp=4))
    assert outcomes(results) == ["failed", "failed"]
    explained(results[0], "is split TP 2, PP 1 (iter_0002000/mp_rank_00 .. mp_rank_01)",
              "the job sets --tensor-model-parallel-size 1")
    explained(results[1], "--pipeline-model-parallel-size 4")
    mg4 = megatron_ckpt(tmp_path / "pp4", tp=1, pp=4)
    assert outcomes(run(jc.test_weights_parallel, mm_job(tmp_path, load=str(mg4), tp=1, pp=4))) == ["passed"]


# -- job.safetensors_index ----------------------------------------------------------------------

def test_index_naming_a_missing_shard(tmp_path):
    hf = hf_model(tmp_path / "hf", index_extra=[("model.norm.weight", "model-00003-of-00003.safetensors")])
    job = load_job(write(tmp_path, "v.sh", verl_script(model=str(hf))))
    [r] = run(jc.test_safetensors_index, job)
    assert r.outcome == "failed"
    explained(r, "model-00003-of-00003.safetensors", "model.norm.weight", f"actor_rollout_ref.model.path={hf}")
    ok = hf_model(tmp_path / "ok")
    assert outcomes(run(jc.test_safetensors_index, load_job(write(tmp_path, "o.sh", verl_script(model=str(ok)))))) \
        == ["passed"]


# -- job.weight_bucket --------------------------------------------------------------------------

def test_bucket_too_small_shows_the_arithmetic(tmp_path):
    hf = hf_model(tmp_path / "Qwen2-7B")
    job = load_job(write(tmp_path, "run_grpo_npu.sh", verl_script(model=str(hf), bucket=512)))
    [r] = run(jc.test_weight_bucket, job)
    assert r.outcome == "failed"
    explained(r, "largest tensor model.embed_tokens.weight [151936, 4096] float32 = 2374.0 MB > "
                 "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=512",
              "suggest 4096 (next power of two ≥ 1.2 × 2374.0 = 2848.8)", "run_grpo_npu.sh:")


def test_bucket_default_and_large_enough(tmp_path):
    hf = hf_model(tmp_path / "Qwen2-7B")
    [r] = run(jc.test_weight_bucket, load_job(write(tmp_path, "a.sh", verl_script(model=str(hf)))))
    explained(r, "2374.0 MB > update_weights_bucket_megabytes=2048 (verl's default")
    [r] = run(jc.test_weight_bucket, load_job(write(tmp_path, "b.sh", verl_script(model=str(hf), bucket=4096))))
    assert r.outcome == "passed"


def test_bucket_from_config_when_there_are_no_headers(tmp_path):
    hf = hf_model(tmp_path / "cfgonly", shards={})
    [r] = run(jc.test_weight_bucket, load_job(write(tmp_path, "c.sh", verl_script(model=str(hf), bucket=1024))))
    explained(r, "embedding [151936, 4096] float32 (from config.json) = 2374.0 MB")


@pytest.mark.parametrize("shape, stored_mb, sent_mb, bucket, outcome, suggest", [
    ([152064, 5120], 1485.0, 2970.0, None, "failed", 4096),   # the FAQ's 14B: bf16 on disk fits 2048, float32 not
    ([152064, 8192], 2376.0, 4752.0, 4096, "failed", 8192),   # the FAQ's 72B: 8192, not the 4096 bf16 suggests
    ([151936, 3584], 1038.6, 2077.2, 4096, "passed", None),
])
def test_bucket_sizes_the_float32_copy_verl_sends_not_the_bf16_file(tmp_path, shape, stored_mb, sent_mb, bucket,
                                                                      outcome, suggest):
    hf = hf_model(tmp_path / "m", shards={"model.safetensors": {"model.embed_tokens.weight": ("BF16", shape),
                                                                "model.norm.weight": ("F32", [shape[1]])}})
    [r] = run(jc.test_weight_bucket, load_job(write(tmp_path, "a.sh", verl_script(model=str(hf), bucket=bucket))))
    assert r.outcome == outcome, r.message
    assert f"{shape} bfloat16 on disk, float32 as verl sends it = {sent_mb:.1f} MB" in r.message
    assert f"{stored_mb:.1f}" not in r.message
    if suggest:
        assert f"suggest {suggest} (next power of two" in r.message


@pytest.mark.parametrize("mb, want", [(2374.0, 4096), (100, 128), (3000, 4096), (3500, 8192), (0.5, 1)])
def test_next_power_of_two(mb, want):
    assert jc.next_power_of_two(1.2 * mb) == want


# -- ROLL -----------------------------------------------------------------------------------------

def test_roll_colocated_and_disjoint(tmp_path):
    job = load_job(write(tmp_path, "rlvr.yaml", roll_yaml(train="list(range(0,8))", infer="list(range(0, 8))")))
    [r] = run(jc.test_roll_device_mapping, job)
    assert r.outcome == "warning"  # ROLL's newer Ascend examples colocate (see the check's comment)
    explained(r, "actor_train.device_mapping: list(range(0,8))", "actor_infer.device_mapping: list(range(0, 8))",
              "npu[0-7]", "rlvr.yaml:", "no HCCL_NPU_SOCKET_PORT_RANGE")
    # ROLL's examples/ascend_examples colocate with the port range exported through system_envs.
    ported = roll_yaml(train="list(range(0,4))", infer="list(range(0,4))").replace(
        "seed: 42\n", "seed: 42\nsystem_envs:\n  HCCL_NPU_SOCKET_PORT_RANGE: auto\n")
    [r] = run(jc.test_roll_device_mapping, load_job(write(tmp_path, "ported.yaml", ported)))
    assert r.outcome == "passed" and "system_envs.HCCL_NPU_SOCKET_PORT_RANGE: auto" in r.message, r.message
    job = load_job(write(tmp_path, "ok.yaml", roll_yaml(train="[0, 1, 2, 3]", infer="list(range(4, 8))")))
    assert outcomes(run(jc.test_roll_device_mapping, job)) == ["passed"]
    overlap = load_job(write(tmp_path, "o.yaml", roll_yaml(train="list(range(0, 6))", infer="list(range(4, 8))")))
    assert "npu[4-5]" in run(jc.test_roll_device_mapping, overlap)[0].message


def test_roll_settings_merged_from_an_anchor_are_read(tmp_path):
    """`actor_train: {<<: *base, ...}` was indexed as actor_train.<<.device_mapping: "no
    actor_train.device_mapping", and the merged megatron_train strategy passed (found by review)."""
    text = ("base: &b\n  strategy_args:\n    strategy_name: megatron_train\n  device_mapping: list(range(0,8))\n"
            "num_gpus_per_node: 8\nactor_train:\n  <<: *b\n  name: train\n"
            "actor_infer:\n  strategy_args:\n    strategy_name: vllm\n  device_mapping: list(range(0,8))\n")
    job = load_job(write(tmp_path, "m.yaml", text), kind="roll")
    [r] = run(jc.test_roll_device_mapping, job)
    assert r.outcome == "warning" and "actor_train.device_mapping: list(range(0,8)) (" in r.message, r.message
    assert "m.yaml:4) and actor_infer" in r.message
    assert [r.outcome for r in run(jc.test_roll_strategy, job)] == ["warning"]
    # The mapping's own entry replaces the merged one whole.
    own = text.replace("  name: train\n", "  name: train\n  strategy_args:\n    strategy_name: deepspeed_train\n")
    job = load_job(write(tmp_path, "o.yaml", own), kind="roll")
    assert [r.outcome for r in run(jc.test_roll_strategy, job)] == ["passed"]


def test_of_several_merged_anchors_the_first_wins_whole():
    import yaml

    from preflight.job.yamlindex import index_of

    text = "A: &A {s: {p: 1}}\nB: &B {s: {q: 2}, t: 3}\nc: {<<: [*A, *B]}\n"
    keys = sorted(k for k in index_of(yaml.compose(text, Loader=yaml.SafeLoader)) if k.startswith("c"))
    assert keys == ["c", "c.s", "c.s.p", "c.t"], keys  # c.s is A's whole: no q from B (review)


def test_roll_megatron_strategy(tmp_path):
    [r] = run(jc.test_roll_strategy, load_job(write(tmp_path, "m.yaml", roll_yaml(strategy="megatron_train"))))
    assert r.outcome == "warning"  # newer ROLL runs it where MindSpeed's MegatronAdaptor is installed
    explained(r, "actor_train.strategy_args.strategy_name: megatron_train", "m.yaml:", "MegatronAdaptor")
    assert "import megatron_adaptor" in r.remedy and "fsdp2_train" in r.remedy
    assert outcomes(run(jc.test_roll_strategy, load_job(write(tmp_path, "d.yaml", roll_yaml())))) == ["passed"]
    # An inference role is not told to use a training backend.
    infer = roll_yaml().replace("    strategy_name: vllm\n", "    strategy_name: megatron_infer\n")
    [r] = run(jc.test_roll_strategy, load_job(write(tmp_path, "i.yaml", infer)))
    assert r.outcome == "warning" and "strategy_name: vllm (or hf_infer)" in r.expected and "vllm" in r.remedy


# -- job.data_paths / job.distributed_timeout ---------------------------------------------------

def test_missing_data_path_is_named(tmp_path):
    hf = hf_model(tmp_path / "tok")
    (tmp_path / "alpaca_text_document.bin").write_bytes(b"x")
    (tmp_path / "alpaca_text_document.idx").write_bytes(b"i")
    job = load_job(write(tmp_path, "p.sh", llm_script(tokenizer=str(hf), load=str(tmp_path / "nockpt"),
                                                      data=str(tmp_path / "alpaca_text_document"))))
    [r] = run(jc.test_data_paths, job)
    assert r.outcome == "failed"
    explained(r, f"--load {tmp_path / 'nockpt'} (", "p.sh:41, value set at line 9) does not exist")
    megatron_ckpt(tmp_path / "nockpt")
    assert outcomes(run(jc.test_data_paths, job)) == ["passed"]  # the data prefix's .bin and .idx exist


def test_a_job_run_from_another_directory_reads_its_relative_paths_from_its_launch_directory(tmp_path,
                                                                                             monkeypatch):
    """From above the launch directory, --mm-data ./examples/... was found (beside the script) and read,
    yet the same path, and every relative path in it, was reported missing: looked up from here."""
    mm = tmp_path / "mm"
    (mm / "examples" / "qwen2vl").mkdir(parents=True)
    (mm / "data").mkdir()
    (mm / "data" / "train.jsonl").write_text("{}\n")
    hf_model(mm / "ckpt" / "hf")
    (mm / "examples" / "qwen2vl" / "data.json").write_text(json.dumps({"dataset_param": {
        "basic_parameters": {"dataset": "./data/train.jsonl", "dataset_dir": "./data"},
        "preprocess_parameters": {"model_name_or_path": "./ckpt/hf"}}}))
    script = write(mm / "examples" / "qwen2vl", "finetune.sh",
                   "torchrun pretrain_vlm.py --mm-data ./examples/qwen2vl/data.json --tensor-model-parallel-size 1\n")
    monkeypatch.chdir(tmp_path)  # not the launch directory
    job = load_job(str(script))
    assert job.launch_dir == str(mm) and any("taken as the directory it is launched from" in n for n in job.notes)
    assert outcomes(run(jc.test_data_paths, job)) == ["passed"], [r.message for r in run(jc.test_data_paths, job)]
    monkeypatch.chdir(mm)  # from the launch directory itself: the same, with no note
    job = load_job(str(script))
    assert job.launch_dir is None and outcomes(run(jc.test_data_paths, job)) == ["passed"]


def test_a_model_path_with_a_space_is_one_path(tmp_path):
    """--tokenizer-name-or-path "/x/sp dir/tok" was split into "/x/sp" and "dir/tok", both failed as
    missing, and the model folder (there, config.json and all) was reported absent."""
    hf = hf_model(tmp_path / "sp dir" / "tok")
    megatron_ckpt(tmp_path / "my ckpt")
    for suffix in ("bin", "idx"):
        (tmp_path / f"alpaca_text_document.{suffix}").write_bytes(b"x")
    job = load_job(write(tmp_path, "p.sh", (
        f'torchrun pretrain_gpt.py --tensor-model-parallel-size 1 --tokenizer-name-or-path "{hf}" \\\n'
        f'    --load "{tmp_path / "my ckpt"}" --data-path {tmp_path / "alpaca_text_document"}\n')))
    assert job.arg("tokenizer").value == str(hf) and job.arg("load").value == str(tmp_path / "my ckpt")
    assert outcomes(run(jc.test_data_paths, job)) == ["passed"]


@pytest.mark.parametrize("local", [True, False], ids=["job-local", "node-probe"])
def test_a_data_prefix_beside_a_folder_of_its_name_is_the_prefix(tmp_path, local):
    """/data/enwiki/ and /data/enwiki.bin/.idx: Megatron opens enwiki.bin; the folder was reported first."""
    import subprocess

    from preflight.job.model import PATHS_COMMAND, parse_paths, read_paths_local

    (tmp_path / "enwiki").mkdir()
    for suffix in ("bin", "idx"):
        (tmp_path / f"enwiki.{suffix}").write_bytes(b"x")
    paths = [str(tmp_path / "enwiki")]
    if local:
        stats = parse_paths(read_paths_local(paths))
    else:
        env = {"PATH": "/usr/bin:/bin", "PF_JOB_PATHS": paths[0]}
        stats = parse_paths(subprocess.run(["bash", "-c", PATHS_COMMAND], env=env, capture_output=True, text=True,
                                           timeout=30).stdout)
    assert stats[paths[0]].status == "dirprefix"
    hf = hf_model(tmp_path / "tok")
    megatron_ckpt(tmp_path / "ckpt")
    job = load_job(write(tmp_path, "p.sh", llm_script(tokenizer=str(hf), load=str(tmp_path / "ckpt"),
                                                      data=paths[0])))
    assert outcomes(run(jc.test_data_paths, job)) == ["passed"]
    # A model folder beside a stray X.bin (no .idx) is a folder, as before (review).
    (hf.parent / "tok.bin").write_bytes(b"x")
    job = load_job(write(tmp_path, "q.sh", llm_script(tokenizer=str(hf), load=str(tmp_path / "ckpt"),
                                                      data=paths[0])))
    assert outcomes(run(jc.test_data_paths, job)) == ["passed"]


def test_a_data_path_naming_the_bin_file_or_its_folder_is_not_a_prefix(tmp_path):
    """--data-path .../alpaca_text_document.bin or .../data passed as "present"; Megatron opens
    PREFIX.bin and PREFIX.idx, so X.bin.bin and data.bin."""
    data = tmp_path / "data"
    data.mkdir()
    for suffix in ("bin", "idx"):
        (data / f"alpaca_text_document.{suffix}").write_bytes(b"x")
    hf = hf_model(tmp_path / "tok")
    megatron_ckpt(tmp_path / "ckpt")
    for given, words, remedy in ((data / "alpaca_text_document.bin", "names the .bin file itself",
                                  f"--data-path {data / 'alpaca_text_document'}."),
                                 (data, "is a folder: Megatron opens PREFIX.bin and PREFIX.idx",
                                  f"--data-path {data}/<name>_text_document")):
        job = load_job(write(tmp_path, "p.sh", llm_script(tokenizer=str(hf), load=str(tmp_path / "ckpt"),
                                                          data=str(given))))
        [r] = [x for x in run(jc.test_data_paths, job) if x.outcome != "passed"]
        assert r.outcome == "failed" and words in r.message and remedy in r.remedy, (r.message, r.remedy)
    job = load_job(write(tmp_path, "p.sh", llm_script(tokenizer=str(hf), load=str(tmp_path / "ckpt"),
                                                      data=str(data / "alpaca_text_document"))))
    assert outcomes(run(jc.test_data_paths, job)) == ["passed"]


@pytest.mark.parametrize("local", [True, False], ids=["job-local", "node-probe"])
def test_a_data_prefix_needs_its_own_bin_and_idx(tmp_path, local):
    """--data-path /data/alpaca beside alpaca_text_document.bin passed (Megatron opens alpaca.bin and
    crashes at start-up), and a prefix with its .bin but no .idx passed too."""
    import subprocess

    from preflight.job.model import PATHS_COMMAND, parse_paths, read_paths_local

    (tmp_path / "alpaca_text_document.bin").write_bytes(b"x")
    (tmp_path / "alpaca_text_document.idx").write_bytes(b"i")
    (tmp_path / "noidx.bin").write_bytes(b"x")
    paths = [str(tmp_path / n) for n in ("alpaca", "noidx", "alpaca_text_document")]
    if local:
        stats = parse_paths(read_paths_local(paths))
    else:
        env = {"PATH": "/usr/bin:/bin", "PF_JOB_PATHS": "\n".join(paths)}
        stats = parse_paths(subprocess.run(["bash", "-c", PATHS_COMMAND], env=env, capture_output=True,
                                           text=True, timeout=30).stdout)
    assert [stats[p].status for p in paths] == ["suffix", "noidx", "prefix"]
    hf = hf_model(tmp_path / "tok")
    megatron_ckpt(tmp_path / "ckpt")
    for prefix, words, remedy in (("alpaca", "but " + str(tmp_path / "alpaca_text_document.bin") + " does",
                                   f"--data-path {tmp_path / 'alpaca'}_text_document"),
                                  ("noidx", f"{tmp_path / 'noidx'}.idx is not", "Copy the .idx file")):
        job = load_job(write(tmp_path, "p.sh", llm_script(tokenizer=str(hf), load=str(tmp_path / "ckpt"),
                                                          data=str(tmp_path / prefix))))
        [r] = [x for x in run(jc.test_data_paths, job) if x.outcome != "passed"]
        assert r.outcome == "failed" and words in r.message and remedy in r.remedy, (r.message, r.remedy)


def test_a_path_left_as_the_examples_placeholder_is_named_whole(tmp_path):
    """MindSpeed-LLM ships CKPT_LOAD_DIR="your model ckpt path"; --load ${CKPT_LOAD_DIR} split it and
    the job read --load "your" (looked up on the nodes as a relative path)."""
    hf = hf_model(tmp_path / "tok")
    (tmp_path / "alpaca_text_document.bin").write_bytes(b"x")
    (tmp_path / "alpaca_text_document.idx").write_bytes(b"i")
    job = load_job(write(tmp_path, "p.sh", llm_script(tokenizer=str(hf), load="your model ckpt path",
                                                      data=str(tmp_path / "alpaca_text_document"))))
    assert job.arg("load").value == "your model ckpt path"
    assert job.arg("tokenizer").value == str(hf)  # the words after the placeholder are not lost
    r, ok = run(jc.test_data_paths, job)
    assert r.outcome == "failed" and ok.outcome == "passed", (r.message, ok.message)
    explained(r, "--load your model ckpt path (", "p.sh:41, value set at line 9) is still the example script's placeholder")
    assert "real path" in r.remedy


@pytest.mark.parametrize("value, placeholder", [
    ("your model ckpt path", True), ("Your data path", True), ("/path/to/ckpt", True), ("path/to/data", True),
    ("'your tokenizer'", True), ("/models/yourmodel", False), ("yourself", False), ("/data/your", False),
])
def test_is_placeholder(value, placeholder):
    from preflight.job import is_placeholder, usable_path

    assert is_placeholder(value) is placeholder
    assert not (placeholder and usable_path(value))


def test_large_dataset_with_default_timeout_warns(tmp_path):
    data = tmp_path / "big_text_document.bin"
    with open(data, "wb") as fh:  # sparse: 11 GiB of apparent size, no disk used
        fh.truncate(11 << 30)
    job = load_job(write(tmp_path, "p.sh", llm_script(data=str(tmp_path / "big_text_document"))))
    [r] = run(jc.test_distributed_timeout, job)
    assert r.outcome == "warning"
    explained(r, f"--data-path {tmp_path / 'big_text_document'}", "11.0 GiB",
              "--distributed-timeout-minutes not set (default 10)")
    job = load_job(write(tmp_path, "q.sh", llm_script(data=str(tmp_path / "big_text_document")).replace(
        "--split 100,0,0", "--split 100,0,0 --distributed-timeout-minutes 120")))
    assert outcomes(run(jc.test_distributed_timeout, job)) == ["passed"]


def _mm_data_json(model, dataset, dataset_dir) -> str:
    """MindSpeed-MM's examples/qwen2vl/data_7b.json, the fields a job reads paths from."""
    return json.dumps({"dataset_param": {
        "dataset_type": "huggingface",
        "preprocess_parameters": {"model_name_or_path": model, "image_max_pixels": 262144},
        "basic_parameters": {"template": "qwen2vl", "dataset_dir": dataset_dir, "dataset": dataset,
                             "cache_dir": "./data/cache_dir", "val_dataset": None}},
        "dataloader_param": {"dataloader_mode": "sampler", "shuffle": True, "num_workers": 8}}, indent=4)


def test_the_mm_data_json_paths_are_looked_up_and_its_dataset_sized(tmp_path):
    """--mm-data names a json; the model, dataset and image folder in it are what the job reads.
    Before, only the json itself was looked up, and its 1 KB sized the dataset."""
    hf = hf_model(tmp_path / "Qwen2-VL-7B-Instruct")
    dataset = tmp_path / "mllm_format_llava_instruct_data.json"
    with open(dataset, "wb") as fh:
        fh.truncate(11 << 30)  # sparse
    data_json = tmp_path / "data_7b.json"
    data_json.write_text(_mm_data_json(str(hf), str(dataset), str(tmp_path / "no-such-images")))
    job = load_job(write(tmp_path, "mm.sh", mm_script(data=str(data_json), load=str(hf))))
    assert job.arg("data_path").value == str(dataset) and job.arg("tokenizer").value == str(hf)
    [r] = run(jc.test_data_paths, job)
    assert r.outcome == "failed"
    explained(r, f"dataset_param.basic_parameters.dataset_dir: {tmp_path / 'no-such-images'} ({data_json}:10)",
              "does not exist")
    [r] = run(jc.test_distributed_timeout, job)
    assert r.outcome == "warning"
    explained(r, f"dataset_param.basic_parameters.dataset: {dataset} ({data_json}:11)", "11.0 GiB")
    (tmp_path / "no-such-images").mkdir()
    assert outcomes(run(jc.test_data_paths, job)) == ["passed"]


def test_the_data_path_key_of_dit_data_jsons_and_the_trainer_yamls_dataset_dir_are_read(tmp_path):
    data = tmp_path / "dance.json"
    data.write_text(json.dumps({"dataset_param": {"basic_parameters": {"data_path": "/data/prompts.txt"}}}))
    job = load_job(write(tmp_path, "d.sh", mm_script(data=str(data))))
    assert job.arg("data_path").value == "/data/prompts.txt"


def test_an_mm_data_json_not_found_is_said_and_a_flag_wins_over_it(tmp_path):
    job = load_job(write(tmp_path, "mm.sh", mm_script(data="./examples/qwen2vl/data_7b.json")))
    assert any("--mm-data ./examples/qwen2vl/data_7b.json" in n and "not checked" in n for n in job.notes), job.notes
    hf = hf_model(tmp_path / "tok")
    data_json = tmp_path / "data.json"
    data_json.write_text(_mm_data_json("/elsewhere/model", "/elsewhere/data.json", "/elsewhere"))
    script = mm_script(data=str(data_json)).replace("--mm-tool $MM_TOOL", f"--mm-tool $MM_TOOL --tokenizer-name-or-path {hf}")
    job = load_job(write(tmp_path, "mm2.sh", script))
    assert job.arg("tokenizer").value == str(hf) and job.arg("data_path").value == "/elsewhere/data.json"
    # Set from outside: the dataset size check says which argument it could not read.
    job = load_job(write(tmp_path, "ext.sh", mm_script(data="${DATA_JSON}")))
    [r] = run(jc.test_distributed_timeout, job)
    assert r.outcome == "skipped" and "--mm-data ${DATA_JSON}" in r.message and "set from outside" in r.message
    (tmp_path / "bad.json").write_text("{\n  \"dataset_param\": ,\n}")
    with pytest.raises(JobError) as err:
        load_job(write(tmp_path, "mm3.sh", mm_script(data=str(tmp_path / "bad.json"))))
    assert "bad.json" in str(err.value) and "not valid JSON" in str(err.value)


def test_checks_of_other_frameworks_are_skipped(tmp_path):
    roll = load_job(write(tmp_path, "r.yaml", roll_yaml()))
    for func in (jc.test_pp_layers, jc.test_weight_bucket, jc.test_weights_parallel, jc.test_distributed_timeout):
        assert outcomes(run(func, roll)) == ["skipped"], func.__name__


# -- expert parallel: mp_rank_TT[_PPP][_EEE] ------------------------------------------------------

def test_expert_parallel_checkpoint_is_not_read_as_pipeline(tmp_path):
    moe = megatron_ckpt(tmp_path / "moe", tp=1, pp=1, ep=8)  # release/mp_rank_00_000 .. mp_rank_00_007
    [r] = run(jc.test_weights_parallel, load_job(write(tmp_path, "ep8.sh", llm_script(tp=1, load=str(moe), ep=8))))
    assert r.outcome == "passed", r.message
    assert r.message == (f"--load {moe} is split TP 1, PP 1, EP 8 (release/mp_rank_00_000 .. mp_rank_00_007: one rank "
                         f"suffix, taken as EP as in the job): matches the job")
    # The same names, read for a PP 8 job, are a pipeline split.
    [r] = run(jc.test_weights_parallel, load_job(write(tmp_path, "pp8.sh", llm_script(tp=1, pp=8, load=str(moe)))))
    assert r.outcome == "passed" and "is split TP 1, PP 8 (release/" in r.message, r.message
    [r] = run(jc.test_weights_parallel, load_job(write(tmp_path, "ep4.sh", llm_script(tp=1, load=str(moe), ep=4))))
    assert r.outcome == "failed"
    explained(r, "is split TP 1, PP 1, EP 8", "but the job sets --expert-model-parallel-size 4", "ep4.sh:26")
    assert r.expected == "a checkpoint converted with EP 4"


def test_pipeline_and_expert_suffixes_are_both_compared(tmp_path):
    ck = megatron_ckpt(tmp_path / "ck", tp=2, pp=2, ep=4, iteration=500)  # mp_rank_TT_PPP_EEE
    [r] = run(jc.test_weights_parallel, load_job(write(tmp_path, "ok.sh", llm_script(tp=2, pp=2, load=str(ck), ep=4))))
    assert r.outcome == "passed", r.message
    assert "is split TP 2, PP 2, EP 4 (iter_0000500/mp_rank_00_000_000 .. mp_rank_01_001_003)" in r.message
    [r] = run(jc.test_weights_parallel, load_job(write(tmp_path, "e2.sh", llm_script(tp=2, pp=2, load=str(ck), ep=2))))
    assert r.outcome == "failed"
    explained(r, "is split TP 2, PP 2, EP 4", "but the job sets --expert-model-parallel-size 2", "e2.sh:26")
    [r] = run(jc.test_weights_parallel, load_job(write(tmp_path, "no.sh", llm_script(tp=2, pp=2, load=str(ck)))))
    explained(r, "but the job sets EP 1 (no --expert-model-parallel-size)")


def test_a_suffix_on_a_job_with_pp_1_and_ep_1_is_a_mismatch_whichever_it_counts(tmp_path):
    # Megatron reads mp_rank_TT (no suffix) when PP and EP are 1: PP-4 weights under a PP-1 script (FAQ #6).
    for ck in (megatron_ckpt(tmp_path / "pp4", tp=1, pp=4), megatron_ckpt(tmp_path / "moe", tp=1, ep=8)):
        [r] = run(jc.test_weights_parallel, load_job(write(tmp_path, "p.sh", llm_script(tp=1, load=str(ck)))))
        assert r.outcome == "failed", r.message
        n = 4 if ck.name == "pp4" else 8
        explained(r, f"PP {n} or EP {n}", "but the job sets --pipeline-model-parallel-size 1 and EP 1 "
                                          "(no --expert-model-parallel-size)")
        assert "mp_rank_TT folders without a suffix" in r.expected
    # PP 2 and EP 4 would be saved with two suffixes: one suffix cannot be this job's.
    moe = tmp_path / "moe"
    [r] = run(jc.test_weights_parallel, load_job(write(tmp_path, "q.sh", llm_script(tp=1, pp=2, load=str(moe), ep=4))))
    assert r.outcome == "failed"
    explained(r, "--pipeline-model-parallel-size 2 and --expert-model-parallel-size 4", "q.sh:26")
    assert "mp_rank_TT_PPP_EEE" in r.expected


# -- arguments the script sets only when it runs ----------------------------------------------------

OUTSIDE = [("source ./par.env\n", "${TP}", "",
            "may be set by the file the script sources, ./par.env ({p}:14), or from outside the script"),
           ("TP=$1\n", "$1", ", value set at line 14", "is set from outside the script"),
           ("TP=$(<conf/tp)\n", "$(<conf/tp)", ", value set at line 14", "is the output of a command the script runs")]


@pytest.mark.parametrize("setup, shown, extra, reason", OUTSIDE)
def test_unresolved_tp_is_not_taken_for_the_default(tmp_path, setup, shown, extra, reason):
    ck = megatron_ckpt(tmp_path / "tp8", tp=8)
    p = write(tmp_path, "p.sh", llm_script(load=str(ck)).replace("TP=8\n", setup))
    job = load_job(p)
    said = f"--tensor-model-parallel-size {shown} ({p}:21{extra}) {reason.format(p=p)}; not checked"
    [r] = run(jc.test_weights_parallel, job)  # was: failed, "the job sets TP 1"
    assert r.outcome == "skipped" and said in r.message, r.message
    [r] = run(jc.test_parallel_fits, job)  # was: passed with TP unknown
    assert r.outcome == "skipped" and r.message == said
    [r] = run(jc.test_tp_kv_heads, job)  # was: skipped as "TP 1"
    assert r.outcome == "skipped" and r.message == said


def test_unresolved_nnodes_is_not_replaced_by_the_inventory(tmp_path):
    p = write(tmp_path, "p.sh", llm_script(tp=4, pp=2).replace("NNODES=1\n", "NNODES=$1\n"))
    hosts = [make_host("node-01", npus_per_node=8), make_host("node-02", npus_per_node=8)]
    [r] = run(jc.test_parallel_fits, load_job(p), hosts=hosts)  # was: passed on the inventory's 16 NPUs
    assert r.outcome == "skipped"
    assert r.message == f"--nnodes $1 ({p}:17, value set at line 6) is set from outside the script; not checked"


def test_unresolved_pipeline_size_skips_the_stage_count(tmp_path):
    [r] = run(jc.test_pp_layers, mm_job(tmp_path, pp="${PP_SIZE}"))  # was: passed, 4 stages never compared
    assert r.outcome == "skipped"
    assert r.message.startswith("--pipeline-model-parallel-size ${PP_SIZE} (")
    assert r.message.endswith("finetune_qwen2vl_7b.sh:41, value set at line 23) is set from outside the script; "
                              "not checked")
    [r] = run(jc.test_pp_layers, mm_job(tmp_path, pp="${PP_SIZE}", llm=(0, 8, 10, 10)))
    assert r.outcome == "failed"  # what does not need PP is still checked


def test_unresolved_bucket_is_not_verls_default(tmp_path):
    hf = hf_model(tmp_path / "Qwen2-7B")
    p = write(tmp_path, "a.sh", verl_script(model=str(hf), bucket="$BUCKET_MB"))
    [r] = run(jc.test_weight_bucket, load_job(p))  # was: failed against the default 2048
    assert r.outcome == "skipped"
    explained_skip = (f"2374.0 MB needs a bucket of at least 2374.0 MB; actor_rollout_ref.rollout.checkpoint_engine."
                      f"update_weights_bucket_megabytes=$BUCKET_MB ({p}:14) is set from outside the script; "
                      f"not checked")
    assert r.message.endswith(explained_skip), r.message


def test_unresolved_timeout_is_not_the_default(tmp_path):
    data = tmp_path / "big_text_document.bin"
    with open(data, "wb") as fh:
        fh.truncate(11 << 30)
    p = write(tmp_path, "p.sh", llm_script(data=str(tmp_path / "big_text_document")).replace(
        "--split 100,0,0", "--split 100,0,0 --distributed-timeout-minutes ${TIMEOUT}"))
    [r] = run(jc.test_distributed_timeout, load_job(p))  # was: warning, "not set (default 10)"
    assert r.outcome == "skipped"
    assert r.message == (f"dataset 11.0 GiB; --distributed-timeout-minutes ${{TIMEOUT}} ({p}:35) is set from outside "
                         f"the script; not checked")


def test_unresolved_paths_are_named_as_not_checked(tmp_path):
    hf = hf_model(tmp_path / "tok")
    p = write(tmp_path, "p.sh", llm_script(tokenizer=str(hf), load=str(megatron_ckpt(tmp_path / "ck")),
                                           data="${DATA_ROOT}/alpaca_text_document"))
    [r] = run(jc.test_data_paths, load_job(p))
    assert r.outcome == "passed"
    assert r.message == (f"this machine: 2 path(s) present; not checked: --data-path "
                         f"${{DATA_ROOT}}/alpaca_text_document ({p}:34, is set from outside the script)")


# -- assignments in branches ------------------------------------------------------------------------

BRANCHES = [
    ('if [ "$MODEL_SIZE" = "70b" ]; then\n    TP=8\nelse\n    TP=4\nfi\n', "TP=8 at {p}:15; TP=4 at {p}:17"),
    ('case "$MODEL_SIZE" in\n    70b) TP=8 ;;\n    7b) TP=1 ;;\nesac\n', "TP=8 at {p}:15; TP=1 at {p}:16"),
    ('TP=4; if [ "$NNODES" -gt 1 ]; then TP=8; fi\n', "TP=8 at {p}:14"),
]


@pytest.mark.parametrize("branch, sets", BRANCHES)
def test_tp_set_in_a_branch_is_not_one_answer(tmp_path, branch, sets):
    ck = megatron_ckpt(tmp_path / "tp8", tp=8)
    p = write(tmp_path, "p.sh", llm_script(load=str(ck)).replace("TP=8\n", branch))
    job = load_job(p)
    line = 21 + branch.count("\n") - 1
    said = f"--tensor-model-parallel-size ${{TP}} ({p}:{line}) is set in a branch ({sets.format(p=p)}); not checked"
    [r] = run(jc.test_weights_parallel, job)  # was: the last assignment, and a failure against TP 8
    assert r.outcome == "skipped" and r.message.endswith(said), r.message
    [r] = run(jc.test_parallel_fits, job)
    assert r.outcome == "skipped" and r.message == said



# -- flag strings a branch adds to or replaces ------------------------------------------------------

def _with_branch(script: str, branch: str) -> str:
    """``branch`` inserted before the launch command."""
    return script.replace("torchrun $DISTRIBUTED_ARGS", branch + "torchrun $DISTRIBUTED_ARGS", 1)


def test_a_flag_string_a_branch_appends_to_keeps_its_flags(tmp_path):
    # MindSpeed-MM scripts: if [ "$PP" != "1" ]; then GPT_ARGS="$GPT_ARGS --variable-seq-lengths"; fi
    ck = megatron_ckpt(tmp_path / "tp8", tp=8)
    p = write(tmp_path, "p.sh", _with_branch(llm_script(load=str(ck)),
                                             'if [ "$USE_FA" = "1" ]; then GPT_ARGS="$GPT_ARGS --use-flash-attn"; fi\n'))
    [r] = run(jc.test_weights_parallel, load_job(p))
    assert r.outcome == "passed", r.message  # TP 8 and --load still read (they vanished with the branch)
    # A parallel size appended in a branch is there only when the branch runs: not known.
    p = write(tmp_path, "q.sh", _with_branch(llm_script(load=str(ck)),
                                             'if [ "$BIG" = 1 ]; then\n  GPT_ARGS="$GPT_ARGS '
                                             '--tensor-model-parallel-size 16"\nfi\n'))
    job = load_job(p)
    assert job.arg("tp").unresolved == f"is added to GPT_ARGS in a branch ({p}:38), so only when that branch runs"
    [r] = run(jc.test_weights_parallel, job)
    assert r.outcome == "skipped" and f"--tensor-model-parallel-size 16 ({p}:38)" in r.message, r.message


def test_a_flag_string_a_branch_replaces_hides_its_flags(tmp_path):
    ck = megatron_ckpt(tmp_path / "tp8", tp=8)
    script = llm_script(load=str(ck)).replace(
        'GPT_ARGS="\n', 'if [ "$SIZE" = 7b ]; then\nGPT_ARGS="--tensor-model-parallel-size 2"\nelse\nGPT_ARGS="\n', 1)
    script = script.replace('DATA_ARGS="', 'fi\nDATA_ARGS="', 1)
    p = write(tmp_path, "p.sh", script)
    job = load_job(p)
    assert any("$GPT_ARGS" in n and "the flags in it are not checked" in n for n in job.notes), job.notes
    [r] = run(jc.test_weights_parallel, job)  # was: failed, "the job sets TP 1 (no --tensor-model-parallel-size)"
    assert r.outcome == "skipped", r.message
    assert "$GPT_ARGS" in r.message and "is set in a branch" in r.message
    [r] = run(jc.test_parallel_fits, job)
    assert r.message.count("is set in a branch") == 1, r.message  # one hidden string, said once for all its keys
    [r] = run(jc.test_tp_kv_heads, job)
    assert r.outcome == "skipped" and "$GPT_ARGS" in r.message, r.message


def test_a_hidden_flag_string_after_an_unknown_boolean_flag_is_still_seen(tmp_path):
    """`--use-mcore-models $GPT_ARGS`: the unknown flag took $GPT_ARGS as its value, so the flags
    a branch hides in it went unnoticed and TP read as its default, 1."""
    ck = megatron_ckpt(tmp_path / "tp8", tp=8)
    script = llm_script(load=str(ck)).replace(
        'GPT_ARGS="\n', 'if [ "$SIZE" = 7b ]; then\nGPT_ARGS="--tensor-model-parallel-size 2"\nelse\nGPT_ARGS="\n', 1)
    script = script.replace('DATA_ARGS="', 'fi\nDATA_ARGS="', 1)
    script = script.replace("pretrain_gpt.py \\\n    $GPT_ARGS", "pretrain_gpt.py \\\n    --use-mcore-models $GPT_ARGS", 1)
    assert "--use-mcore-models $GPT_ARGS" in script
    job = load_job(write(tmp_path, "p.sh", script))
    assert any("$GPT_ARGS" in n and "the flags in it are not checked" in n for n in job.notes), job.notes
    [r] = run(jc.test_weights_parallel, job)
    assert r.outcome == "skipped" and "$GPT_ARGS" in r.message, r.message


def test_pp_layers_with_an_unknown_pp_and_no_layer_split_is_skipped(tmp_path):
    p = write(tmp_path, "p.sh", llm_script().replace("PP=1\n", "PP=$1\n"))
    [r] = run(jc.test_pp_layers, load_job(p))  # was: TypeError comparing None with 1
    assert r.outcome == "skipped", r.message


def test_a_verl_job_written_with_bash_arrays_is_judged(tmp_path):
    # examples/gspo_trainer/run_qwen3_32b_gspo_npu.sh style: its 4 x 16 NPUs were not read, and the
    # job "fit" any inventory.
    p = write(tmp_path, "run_npu.sh", "TRAINER=(\n    trainer.nnodes=4\n    trainer.n_gpus_per_node=16\n)\n"
                                      "python3 -m verl.trainer.main_ppo data.train_batch_size=64 \"${TRAINER[@]}\"\n")
    hosts = [make_host(f"node-0{i}", npus_per_node=16) for i in (1, 2)]
    [r] = run(jc.test_parallel_fits, load_job(p, kind="verl"), hosts=hosts)
    assert r.outcome == "failed", r.message
    assert "trainer.nnodes=4" in r.message and f"{p}:2" in r.message


def test_weight_bucket_on_a_hub_model_id_is_not_checked(tmp_path):
    # examples/grpo_trainer/run_qwen3_32b_npu.sh: actor_rollout_ref.model.path=Qwen/Qwen3-32B (verl downloads it).
    job = load_job(write(tmp_path, "run_npu.sh", verl_script(model="Qwen/Qwen3-32B")))
    [r] = run(jc.test_weight_bucket, job)
    assert r.outcome == "skipped" and "takes it for a Hub model id" in r.message, r.message


def test_data_paths_with_nothing_to_look_up_is_skipped(tmp_path):
    # A Hub model id and no data files: nothing was looked up, so nothing "present".
    job = load_job(write(tmp_path, "run_npu.sh", verl_script(model="Qwen/Qwen3-32B", train="$DATA")))
    results = run(jc.test_data_paths, job)
    assert results and {r.outcome for r in results} == {"skipped"}, [r.message for r in results]


def test_a_hub_model_id_under_any_of_rolls_model_keys_is_not_a_missing_path(tmp_path, monkeypatch):
    """student_pretrain (distillation) and actor_train.model_args.model_name_or_path name the model
    as pretrain does; only pretrain's Hub id was exempt, so a distillation job read "does not exist"."""
    from tests.unit.job_files import roll_distill_yaml

    monkeypatch.chdir(tmp_path)  # relative paths are looked up from here
    data = tmp_path / "gsm8k_zh.json"
    data.write_text("[]")
    job = load_job(write(tmp_path, "distill.yaml", roll_distill_yaml(data=str(data))))
    [r] = run(jc.test_data_paths, job)
    assert r.outcome == "passed" and "student_pretrain: Qwen/Qwen2.5-7B-Instruct (a Hub model id)" in r.message
    text = roll_yaml().replace("\npretrain: Qwen/Qwen2.5-7B\n", "\n").replace(
        "model_name_or_path: ${pretrain}", "model_name_or_path: Qwen/Qwen2.5-7B", 1)
    job = load_job(write(tmp_path, "rlvr.yaml", text))
    assert job.arg("model_path").name == "actor_train.model_args.model_name_or_path"
    assert all("does not exist" not in r.message for r in run(jc.test_data_paths, job))
    # A path that only looks like one (no such directory here, and it names a data file) still fails.
    job = load_job(write(tmp_path, "d2.yaml", roll_distill_yaml(data="data/gsm8k_zh.json")))
    [r] = [r for r in run(jc.test_data_paths, job) if r.outcome == "failed"]
    assert "data/gsm8k_zh.json" in r.message and "does not exist" in r.message


def test_a_roll_device_mapping_omegaconf_fills_in_is_a_note_not_a_usage_error(tmp_path):
    text = roll_yaml(train="list(range(0, ${oc.env:NPUS}))")
    job = load_job(write(tmp_path, "r.yaml", text))  # raised JobError: no check ran on any host
    assert "actor_train" not in job.device_mappings and "actor_infer" in job.device_mappings
    assert any("actor_train.device_mapping" in n and "interpolated when ROLL starts" in n for n in job.notes), job.notes


def test_roll_values_omegaconf_fills_in_are_not_checked(tmp_path):
    text = roll_yaml().replace("num_gpus_per_node: 8", "num_gpus_per_node: ${oc.env:NPUS_PER_NODE,8}")
    job = load_job(write(tmp_path, "r.yaml", text))
    assert job.arg("nproc_per_node").unresolved == "is interpolated when ROLL starts"
    results = run(jc.test_parallel_fits, job, hosts=[make_host("node-01", npus_per_node=8)])  # raised JobError
    assert results and all(r.outcome in ("passed", "skipped") for r in results), [r.message for r in results]


def test_roll_sizes_nodes_by_their_npus_not_by_num_gpus_per_node(tmp_path):
    # ROLL replaces the YAML's num_gpus_per_node with each node's device count
    # (examples/ascend_examples/qwen3_8b_rlvr_deepspeed.yaml says 16, devices 0-15: two 8-NPU nodes run it).
    text = roll_yaml(train="list(range(0, 8))", infer="list(range(8, 16))").replace(
        "num_gpus_per_node: 8", "num_gpus_per_node: 16")
    job = load_job(write(tmp_path, "r.yaml", text))
    [r] = run(jc.test_parallel_fits, job, hosts=[make_host(f"node-0{i}", npus_per_node=8) for i in (1, 2)])
    assert r.outcome == "passed" and "16 NPUs on 2 inventory host(s)" in r.message, r.message
    [r] = run(jc.test_parallel_fits, job, hosts=[make_host("node-01", npus_per_node=8)])
    assert r.outcome == "failed" and "uses NPU 15" in r.message


def test_a_multi_node_roll_mapping_checked_without_an_inventory_is_not_failed_as_one_node(tmp_path):
    """num_gpus_per_node: 8 with devices 0-15 and 16-23 is three 8-NPU nodes; --job-local (no
    inventory) failed it as "expected device indexes below 8 (one node)"."""
    text = roll_yaml(train="list(range(0, 16))", infer="list(range(16, 24))")
    [r] = run(jc.test_parallel_fits, load_job(write(tmp_path, "r.yaml", text)))
    assert r.outcome == "skipped", r.message
    assert "the device mappings span 3 node(s) of 8 NPUs" in r.message and "give --inventory" in r.message
    # Within one node: judged as before.
    [r] = run(jc.test_parallel_fits, load_job(write(tmp_path, "s.yaml", roll_yaml(train="list(range(0, 4))",
                                                                                  infer="list(range(4, 8))"))))
    assert r.outcome == "passed", r.message


def test_a_size_of_zero_is_named_not_a_crash(tmp_path):
    p = write(tmp_path, "z.sh", "torchrun --nnodes 1 --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 0 "
                                "--micro-batch-size 0 --global-batch-size 8\n")
    results = run(jc.test_parallel_fits, load_job(p))
    assert [r.outcome for r in results] == ["failed"], [r.message for r in results]
    assert "--tensor-model-parallel-size 0; expected a size of 1 or more" in results[0].message
    p = write(tmp_path, "m.sh", "torchrun --nnodes 1 --nproc_per_node 8 pretrain_gpt.py --micro-batch-size 0 "
                                "--global-batch-size 8\n")
    [r] = run(jc.test_parallel_fits, load_job(p))
    assert r.outcome == "failed" and "--micro-batch-size 0; expected a batch size of 1 or more" in r.message
    assert run(jc.test_tp_kv_heads, load_job(p))[0].outcome == "skipped"


def test_the_global_batch_is_not_judged_on_the_inventorys_npus_nor_when_megatron_rounds_it(tmp_path):
    """3 x 8 NPUs in the inventory for a job that gives no world size of its own: DP is not known
    from the job (review); --decrease-batch-size-if-needed rounds the batch down instead of asserting."""
    p = write(tmp_path, "g.sh", "torchrun pretrain_gpt.py --tensor-model-parallel-size 2 --global-batch-size 64\n")
    hosts = [make_host(f"node-0{i}", npus_per_node=8) for i in (1, 2, 3)]
    assert [r.outcome for r in run(jc.test_parallel_fits, load_job(p), hosts=hosts)] == ["passed"]
    p = write(tmp_path, "d.sh", "torchrun --nnodes 1 --nproc_per_node 8 pretrain_gpt.py --global-batch-size 6 "
                                "--decrease-batch-size-if-needed\n")
    assert [r.outcome for r in run(jc.test_parallel_fits, load_job(p))] == ["passed"]


@pytest.mark.parametrize("gbs, mbs, outcome", [(64, 2, "passed"), (60, 2, "failed"), (10, None, "failed"),
                                                (16, None, "passed")])
def test_the_global_batch_is_a_multiple_of_micro_batch_times_data_parallel(tmp_path, gbs, mbs, outcome):
    """Megatron asserts it at start-up; 2 nodes x 8 with TP 2 x PP 2 leave DP 4."""
    micro = f"--micro-batch-size {mbs} " if mbs else ""
    p = write(tmp_path, "g.sh", "torchrun --nnodes 2 --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 2 "
                                f"--pipeline-model-parallel-size 2 {micro}--global-batch-size {gbs}\n")
    [r] = run(jc.test_parallel_fits, load_job(p))
    assert r.outcome == outcome, r.message
    if outcome == "failed":
        want = 2 * 4 if mbs else 4
        assert f"--global-batch-size {gbs} is not a multiple of" in r.message and f"divisible by {want}" in r.message


@pytest.mark.parametrize("tp, kv, outcome, words", [
    (8, 4, "failed", "does not divide num_attention_heads 28"), (4, 4, "passed", "fits"),
    (2, 4, "passed", "fits"), (7, 4, "failed", "neither divides the other")])
def test_verl_rollout_tp_is_held_against_the_models_heads(tmp_path, tp, kv, outcome, words):
    """rollout.tensor_model_parallel_size=8 on a 28-head model read "no tensor-model-parallel size set
    (TP 1)"; vLLM refuses it at start-up (found by review)."""
    model = hf_model(tmp_path / "Qwen2.5-7B", kv_heads=kv)
    p = write(tmp_path, "v.sh", f"python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path={model} "
                                f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp} trainer.nnodes=1\n")
    results = run(jc.test_tp_kv_heads, load_job(p, kind="verl"))
    [r] = [r for r in results if r.subject == "v.sh rollout"]
    assert r.outcome == outcome and words in r.message, r.message
    assert not [r for r in results if "no tensor-model-parallel size set" in r.message]


@pytest.mark.parametrize("model, tp, outcome", [("Qwen/Qwen2.5-7B-Instruct", 4, "skipped"),
                                                ("Qwen/Qwen2.5-7B-Instruct", 1, "passed"), ("/nowhere/m", 0, "skipped")])
def test_verl_rollout_tp_without_a_readable_model_is_not_an_error(tmp_path, model, tp, outcome):
    """A Hub id made the run NOT READY, even with rollout TP 1 (review); TP 0 crashed."""
    p = write(tmp_path, "v.sh", f"python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path={model} "
                                f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp} trainer.nnodes=1\n")
    [r] = [r for r in run(jc.test_tp_kv_heads, load_job(p, kind="verl")) if r.subject == "v.sh rollout"]
    assert r.outcome == outcome, r.message


@pytest.mark.parametrize("model, outcome", [("Qwen/Qwen2-7B-Instruct", "skipped"), ("/nowhere/m", "error")])
def test_verl_megatron_tp_on_a_hub_model_id_is_not_an_error(tmp_path, model, outcome):
    """verl examples/grpo_trainer/run_qwen2-7b_math_megatron.sh: actor_rollout_ref.model.path=Qwen/Qwen2-7B-Instruct
    with actor megatron TP 2 was an ERROR (KV heads unknown), though verl downloads the model when it starts;
    the rollout TP beside it was skipped. A local path that is missing stays an error."""
    p = write(tmp_path, "v.sh", f"python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path={model} "
                                f"actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2 trainer.nnodes=1\n")
    [r] = [r for r in run(jc.test_tp_kv_heads, load_job(p, kind="verl")) if r.subject == "v.sh"]
    assert r.outcome == outcome, r.message
    if outcome == "skipped":
        assert "Hub model id" in r.message and f"{p}:1" in r.message, r.message


def test_verl_world_size_takes_verls_defaults_for_what_the_job_leaves_out(tmp_path):
    # trainer.nnodes=2 without trainer.n_gpus_per_node: verl runs 2 x 8, whatever the inventory has.
    p = write(tmp_path, "v.sh", "python3 -m verl.trainer.main_ppo trainer.nnodes=2 "
                                "actor_rollout_ref.rollout.tensor_model_parallel_size=32 data.train_batch_size=8\n")
    hosts = [make_host(f"node-0{i}", npus_per_node=16) for i in (1, 2)]
    [r] = run(jc.test_parallel_fits, load_job(p, kind="verl"), hosts=hosts)  # passed on the inventory's 32
    assert r.outcome == "failed", r.message
    assert "does not divide the world size trainer.nnodes=2 × 8 (verl's default trainer.n_gpus_per_node) = 16" \
        in r.message


def test_a_roll_distillation_config_is_read_and_its_megatron_student_flagged(tmp_path):
    """student/teacher configs were refused: 'no actor_train/actor_infer section: not a ROLL pipeline'."""
    from tests.unit.job_files import roll_distill_yaml

    job = load_job(write(tmp_path, "distill_megatron.yaml", roll_distill_yaml(student="megatron_train",
                                                                               teacher="megatron_infer")))
    assert job.kind == "roll" and job.arg("model_path").value == "Qwen/Qwen2.5-7B-Instruct"
    assert job.arg("train_data").value == "[data/gsm8k_zh.json]"
    assert set(job.device_mappings) == {"student", "teacher"} and job.device_mappings["student"][1] == tuple(range(8))
    bad = run(jc.test_roll_strategy, job)
    assert sorted((r.outcome, r.subject) for r in bad) == [("warning", job.name)] * 2
    assert any("student.strategy_args.strategy_name: megatron_train" in r.message for r in bad)
    # A teacher supplies logits: hf_infer, not vllm (found by running ROLL's distill_megatron.yaml).
    [teacher] = [r for r in bad if "teacher.strategy_args.strategy_name: megatron_infer" in r.message]
    assert "strategy_name: hf_infer" in teacher.expected and "vllm" not in teacher.expected + teacher.remedy
    [r] = run(jc.test_roll_device_mapping, job)
    assert r.outcome == "skipped" and "distillation" in r.message
    good = load_job(write(tmp_path, "distill.yaml", roll_distill_yaml()))
    [r] = run(jc.test_roll_strategy, good)
    assert r.outcome == "passed", r.message


def test_a_yaml_with_only_a_student_is_not_a_roll_config(tmp_path):
    from preflight.job import JobError

    with pytest.raises(JobError, match="not a ROLL pipeline config"):
        load_job(write(tmp_path, "x.yaml", "student:\n  device_mapping: '[0]'\n"), "roll")


def test_a_mindspeed_mm_fsdp2_trainer_config_is_read(tmp_path, monkeypatch):
    """torchrun .../base_trainer.py config.yaml: the model, data and TP live in the YAML; the job
    read none of them (no path checked, TP taken as 1)."""
    from tests.unit.job_files import fsdp2_job

    hf = hf_model(tmp_path / "Qwen3-VL", kv_heads=4)
    script = fsdp2_job(tmp_path, model=str(hf), tp=8)
    job = load_job(str(script))
    cfg = str(tmp_path / "examples" / "fsdp2" / "qwen3vl" / "qwen3vl_config.yaml")
    assert job.kind == "mindspeed" and job.arg("nnodes").value == "2"
    tp = job.arg("tp")
    assert (tp.value, tp.file, tp.line) == ("8", cfg, 3)
    assert job.arg("hf_model").value == str(hf) and job.arg("hf_model").line == 14
    assert job.arg("data_path").value == "LLaMA-Factory/data/llava.json"
    assert job.arg("dataset_dir").value == "LLaMA-Factory/data" and job.arg("dataset_dir").file == cfg
    [r] = run(jc.test_tp_kv_heads, job)
    assert r.outcome == "failed" and f"{cfg}:3: parallel.tensor_parallel_size: 8 > num_key_value_heads 4" \
        in r.message, r.message
    monkeypatch.chdir(tmp_path)  # --job-local: relative paths from the launch directory
    results = run(jc.test_data_paths, job)
    assert {r.outcome for r in results} == {"failed"} and len(results) == 2
    assert any(f"basic_parameters.dataset: LLaMA-Factory/data/llava.json ({cfg}:11) does not exist" in r.message
               for r in results), [r.message for r in results]
    assert any(f"basic_parameters.dataset_dir: LLaMA-Factory/data ({cfg}:10) does not exist" in r.message
               for r in results), [r.message for r in results]
    (tmp_path / "LLaMA-Factory" / "data").mkdir(parents=True)
    (tmp_path / "LLaMA-Factory" / "data" / "llava.json").write_text("[]")
    [r] = run(jc.test_data_paths, job)
    assert r.outcome == "passed", r.message
    [r] = run(jc.test_weights_format, job)
    assert r.outcome == "skipped"  # training.load is the FSDP trainer's own format, not read


def test_a_mindspeed_llm_fsdp2_trainer_reads_its_dotted_flags_and_yaml(tmp_path, monkeypatch):
    """MindSpeed-LLM examples/fsdp2/qwen3/pretrain_qwen3_8b_4k_fsdp2_A3.sh: train_fsdp2.py CONFIG.yaml
    --model.model_name_or_path /home/data/Qwen3-8B/ (the flag overrides the YAML key), and the YAML's
    data.dataset.file_name left as "your origin data path..." and parallel.tp_size. None was read: READY."""
    cfg = write(tmp_path, "examples/fsdp2/qwen3/p.yaml",
                'model:\n  trust_remote_code: False\n  model_name_or_path: /yaml/model\ndata:\n  dataset:\n'
                '    file_name: "your origin data path.example: /home/train-0.parquet"\n  template: qwen3\n'
                'parallel:\n  tp_size: 2\n')
    script = write(tmp_path, "examples/fsdp2/qwen3/p.sh",
                   "torchrun --nproc_per_node 16 train_fsdp2.py examples/fsdp2/qwen3/p.yaml \\\n"
                   "    --model.model_name_or_path /home/data/Qwen3-8B/ \\\n    --parallel.fsdp_size 16\n")
    monkeypatch.chdir(tmp_path)
    job = load_job(script)
    assert (job.arg("hf_model").value, job.arg("hf_model").line) == ("/home/data/Qwen3-8B/", 2)  # the flag wins
    assert (job.arg("tp").value, job.arg("tp").file, job.arg("tp").line) == ("2", cfg, 9)
    results = run(jc.test_data_paths, job)
    assert {r.outcome for r in results} == {"failed"}, [r.message for r in results]
    assert any("data.dataset.file_name: your origin data path" in r.message and "placeholder" in r.message
               for r in results), [r.message for r in results]
    assert any("--model.model_name_or_path /home/data/Qwen3-8B/" in r.message and "does not exist" in r.message
               for r in results), [r.message for r in results]


def test_a_fsdp2_trainer_config_that_is_not_there_is_a_note(tmp_path):
    from tests.unit.job_files import fsdp2_job

    script = fsdp2_job(tmp_path, model="/m", config_arg="examples/other.yaml")
    job = load_job(str(script))
    assert job.arg("tp") is None and job.arg("hf_model") is None
    assert any("examples/other.yaml" in n and "not found next to the job" in n for n in job.notes), job.notes
    script = fsdp2_job(tmp_path, model="/m", config_arg="$CFG_DIR/qwen3vl_config.yaml")
    assert any("$CFG_DIR/qwen3vl_config.yaml" in n and "is set from outside the script" in n
               for n in load_job(str(script)).notes)
