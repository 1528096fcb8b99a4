"""Reading jobs: MindSpeed-MM/LLM launch scripts, verl command lines, ROLL YAML, model folders."""

from __future__ import annotations

import os
import random
import subprocess

import pytest

from preflight.job import JobError, load_job
from preflight.job.model import (MODEL_COMMAND, PATHS_COMMAND, MegatronSplit, parse_model_bundle, parse_paths,
                                 parse_safetensors_header, read_model_dirs_local, read_paths_local,
                                 safetensors_header_of)
from preflight.job.roll import parse_device_mapping
from preflight.job.shell import ShellError, read_script
from tests.unit.job_files import (hf_model, llm_script, megatron_ckpt, mm_model_json, mm_script, roll_yaml,
                                  verl_script, write_safetensors)


def write(tmp_path, name, text, newline=""):
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "w", encoding="utf-8", newline=newline) as fh:
        fh.write(text)
    return p


# -- shell ------------------------------------------------------------------------------

def test_shell_expands_variables_arithmetic_defaults_and_keeps_lines():
    s = read_script('A=8\nB=${UNSET:-2}\nC=$(($A*$B))\nARGS="\n  --x ${C} \\\n  --y $D\n"\nrun $ARGS --z \'lit $A\'\n')
    cmd = s.commands[-1]
    assert [w.text for w in cmd.words] == ["run", "--x", "16", "--y", "$D", "--z", "lit $A"]
    assert [w.line for w in cmd.words] == [8, 5, 3, 6, 6, 8, 8]


@pytest.mark.parametrize("ending, words", [
    ("--seq-length 4096 > logs/train.log 2>&1 &", ["--seq-length", "4096"]),
    ("--seq-length 4096 >> logs/train.log 2>&1 &", ["--seq-length", "4096"]),
    ("--seq-length 4096 >logs/train.log", ["--seq-length", "4096"]),
    ('--seq-length 4096 > "$LOG" 2>&1', ["--seq-length", "4096"]),
    ("--seq-length 4096 2>err.log", ["--seq-length", "4096"]),  # 2 against > is an fd: 4096 stays
    ("--seq-length 4096 2>&1 | tee log", ["--seq-length", "4096"]),
    ("--num-layers 2>err.log", ["--num-layers"]),  # an fd written against the redirection
])
def test_a_number_before_a_redirection_is_an_argument_unless_written_against_it(ending, words):
    """`... --seq-length 4096 > logs/train.log 2>&1 &` lost its 4096 (read as an fd): "--seq-length
    has no value", and the whole run stopped with exit 4."""
    s = read_script(f"torchrun pretrain_gpt.py {ending}\n")
    [launch] = [c for c in s.commands if c.words[0].text == "torchrun"]
    assert [w.text for w in launch.words][2:] == words


def test_shell_never_runs_command_substitutions_and_skips_heredocs():
    s = read_script("X=$(rm -rf /)\ncat <<EOF\n--tensor-model-parallel-size 99\nEOF\necho `date` $X\n")
    assert s.variables["X"].text == "$(rm -rf /)"
    assert [[w.text for w in c.words] for c in s.commands][-1] == ["echo", "`date`", "$(rm -rf /)"]
    assert not any("--tensor-model-parallel-size" in w.text for c in s.commands for w in c.words)


@pytest.mark.parametrize("word", ['"$@"', "$*", '"${@}"'])
def test_the_scripts_own_arguments_are_a_note_and_no_flags_value(tmp_path, word):
    from preflight.job.mindspeed import parse_mindspeed
    from preflight.job.verl import parse_verl

    p = str(tmp_path / "run.sh")
    job = parse_mindspeed(p, f"torchrun pretrain_gpt.py --use-mcore-models {word} --tensor-model-parallel-size 2\n")
    assert job.arg("tp").value == "2"
    [note] = job.notes
    assert note.startswith(f"{word.strip(chr(34))} ({p}:1) passes on the script's own arguments: flags given")
    job = parse_verl(p, f"python3 -m verl.trainer.main_ppo trainer.nnodes=2 {word}\n")
    assert job.arg("nnodes").value == "2" and "overrides given when it is run" in job.notes[0]


def test_a_substitution_kept_in_a_variable_is_one_word_when_the_variable_is_split():
    """ARGS="--nnodes $(cat f)" then $ARGS: it read as --nnodes "$(cat" and a stray "f)", so
    the note quoted junk and the next word could be taken for a value."""
    s = read_script('N="$(cat /etc/n n)"\nR=$(hostname | cut -d- -f2)\nT=`echo 8`\nP=$(( $U + 1 ))\n'
                    'D=${Q:-a b}\nARGS="--nnodes $N --node_rank $R --tp $T --pp $P --d $D --e $(f "(x y)")"\n'
                    'run $ARGS --z end\n')
    assert [w.text for w in s.commands[-1].words] == [
        "run", "--nnodes", "$(cat /etc/n n)", "--node_rank", "$(hostname | cut -d- -f2)", "--tp", "`echo 8`",
        "--pp", "$(( $U + 1 ))", "--d", "a", "b", "--e", '$(f "(x y)")', "--z", "end"]
    # an unknown variable's ${...} text kept as written is one word too
    s = read_script('if [ "$1" ]; then K=1; fi\nARGS="--k ${K:-two words} --m 3"\nrun $ARGS\n')
    assert [w.text for w in s.commands[-1].words] == ["run", "--k", "${K:-two words}", "--m", "3"]


@pytest.mark.parametrize("text, line", [('A="abc\nB=1\n', 1), ("X=1\necho 'oops\n", 2), ("Y=$(echo (\n", 1)])
def test_unterminated_quotes_name_the_line(tmp_path, text, line):
    p = write(tmp_path, "bad.sh", "torchrun pretrain_gpt.py --tensor-model-parallel-size 2\n" + text)
    with pytest.raises(JobError) as exc:
        load_job(str(p))
    assert str(exc.value).startswith(f"{p}:{line + 1}: unterminated")


# -- MindSpeed ----------------------------------------------------------------------------

@pytest.mark.parametrize("crlf", [False, True])
def test_mindspeed_mm_script_in_published_style(tmp_path, crlf):
    write(tmp_path, "examples/qwen2vl/model_7b.json", mm_model_json())
    p = write(tmp_path, "examples/qwen2vl/finetune_qwen2vl_7b.sh", mm_script(tp=2, pp=4, timeout=20, crlf=crlf))
    job = load_job(str(p))
    assert job.kind == "mindspeed" and job.is_script
    assert {k: job.args[k].value for k in ("tp", "pp", "cp", "mbs", "seq_length", "nnodes", "nproc_per_node",
                                           "distributed_timeout", "load", "save")} == {
        "tp": "2", "pp": "4", "cp": "1", "mbs": "1", "seq_length": "1024", "nnodes": "1", "nproc_per_node": "8",
        "distributed_timeout": "20", "load": "ckpt/mm_path/Qwen2-VL-7B-Instruct", "save": "save_dir"}
    tp = job.args["tp"]
    assert tp.name == "--tensor-model-parallel-size" and tp.line == 40 and tp.value_line == 22
    assert job.pp_layers["llm"].stages == (1, 10, 10, 7) and job.pp_layers["vit"].stages == (32, 0, 0, 0)
    assert job.pp_layers["llm"].arg.name == "text_decoder.pipeline_num_layers"
    assert job.pp_layers["llm"].num_layers.value == "28"
    assert job.args["num_query_groups"].value == "4"
    assert job.crlf_lines == (tuple(range(1, mm_script(crlf=True).count("\r\n") + 1)) if crlf else ())


def test_mindspeed_llm_script_and_flat_pp_layer_keys(tmp_path):
    p = write(tmp_path, "pretrain_qwen25_7b.sh", llm_script(tp=4, pp=2, layer_list="14,14"))
    job = load_job(str(p))
    assert job.args["tp"].value == "4" and job.args["num_query_groups"].value == "4"
    assert job.args["tokenizer"].value == "/models/Qwen2.5-7B"
    assert job.args["data_path"].value == "/data/alpaca_text_document"
    assert job.pp_layers["llm"].stages == (14, 14)
    write(tmp_path, "m.json", '{"llm_pp_layers": [[0, 8, 10, 10]], "vit_pp_layers": [[32, 0, 0, 0]]}')
    job = load_job(str(write(tmp_path, "x.sh", "torchrun pretrain_vlm.py --mm-model m.json --pipeline-model-parallel-size 4\n")))
    assert job.pp_layers["llm"].stages == (0, 8, 10, 10) and job.pp_layers["llm"].arg.name == "llm_pp_layers"


@pytest.mark.parametrize("quoted", [True, False])
def test_a_blended_data_path_keeps_every_prefix_quoted_or_not(tmp_path, quoted):
    """DATA_PATH="0.3 /a 0.7 /b" passed as --data-path $DATA_PATH (unquoted, as MindSpeed-LLM's
    examples do) kept 0.3 alone: both prefixes went unchecked and data_paths passed."""
    from preflight.job import split_paths

    ref = '"$DATA_PATH"' if quoted else "$DATA_PATH"
    p = write(tmp_path, "blend.sh", 'DATA_PATH="0.3 /data/a_text_document 0.7 /data/b_text_document"\n'
                                    f"torchrun pretrain_gpt.py --data-path {ref} --tensor-model-parallel-size 2\n")
    job = load_job(str(p))
    assert split_paths(job.args["data_path"].value) == ["/data/a_text_document", "/data/b_text_document"]
    assert job.args["tp"].value == "2"
    # An unresolved $MODEL_ARGS (set in a sourced file) after it is flags, not a prefix.
    p = write(tmp_path, "after.sh", f"DATA_PATH=/data/a_text_document\n"
                                    f"torchrun pretrain_gpt.py --data-path {ref} $MODEL_ARGS --tensor-model-parallel-size 2\n")
    assert load_job(str(p)).args["data_path"].value == "/data/a_text_document"
    # A prefix under a variable from outside is kept, the whole blend then unresolved (not half of it).
    p = write(tmp_path, "root.sh", 'DATA_PATH="0.3 /data/a_text_document 0.7 ${DATA_ROOT}/b_text_document"\n'
                                   f"torchrun pretrain_gpt.py --data-path {ref} --tensor-model-parallel-size 2\n")
    job = load_job(str(p))
    assert "data_path" not in job.args and "${DATA_ROOT}/b_text_document" in job.unresolved["data_path"].value


def test_msrun_launch(tmp_path):
    p = write(tmp_path, "ms.sh", "msrun --worker_num 16 --local_worker_num 8 --master_port 8110 pretrain_gpt.py "
                                 "--tensor-model-parallel-size 4 --pipeline-model-parallel-size 2\n")
    job = load_job(str(p))
    assert (job.args["world_size"].value, job.args["nproc_per_node"].value, job.args["tp"].value) == ("16", "8", "4")


@pytest.mark.parametrize("text, line, words", [
    ("TP=eight\ntorchrun pretrain_gpt.py --tensor-model-parallel-size $TP\n", 2, "'eight' is not an integer"),
    ("torchrun pretrain_gpt.py --tensor-model-parallel-size --pipeline-model-parallel-size 2\n", 1, "has no value"),
])
def test_bad_values_name_file_line_and_argument(tmp_path, text, line, words):
    p = write(tmp_path, "bad.sh", text)
    with pytest.raises(JobError) as exc:
        load_job(str(p))
    assert str(exc.value).startswith(f"{p}:{line}: --tensor-model-parallel-size") and words in str(exc.value)


def test_unknown_framework_and_bad_model_json(tmp_path):
    with pytest.raises(JobError, match="give --job-kind"):
        load_job(str(write(tmp_path, "x.sh", "echo hello\n")))
    write(tmp_path, "m.json", '{\n "text_decoder": {\n  "num_layers": 28,,\n}}')
    with pytest.raises(JobError) as exc:
        load_job(str(write(tmp_path, "y.sh", "torchrun pretrain_vlm.py --mm-model m.json\n")))
    assert str(exc.value).startswith(f"{tmp_path / 'm.json'}:3: not valid JSON")


# -- verl -------------------------------------------------------------------------------

@pytest.mark.parametrize("crlf", [False, True])
def test_verl_script(tmp_path, crlf):
    p = write(tmp_path, "run_qwen2_5_7b_grpo_npu.sh", verl_script(bucket=512, nnodes=2, crlf=crlf))
    job = load_job(str(p))
    assert job.kind == "verl"
    assert job.args["model_path"].value == "/models/Qwen2.5-7B-Instruct"
    assert job.args["model_path"].value_line == 3
    b = job.args["bucket_mb"]
    assert b.shown() == "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=512"
    assert (job.args["nnodes"].value, job.args["nproc_per_node"].value) == ("2", "8")
    assert "val_files" not in job.args  # $HOME is not set in the script
    assert bool(job.crlf_lines) == crlf


def test_verl_plain_command_line_and_kind_override(tmp_path):
    p = write(tmp_path, "cmd.txt", "python3 -m verl.trainer.main_ppo trainer.nnodes=abc\n")
    with pytest.raises(JobError, match=r"cmd.txt:1: trainer.nnodes: 'abc' is not an integer"):
        load_job(str(p))
    p = write(tmp_path, "cmd2.txt", "python3 my_entry.py trainer.nnodes=2 actor_rollout_ref.model.path=/m\n")
    assert load_job(str(p), "verl").args["nnodes"].value == "2"


# -- ROLL -------------------------------------------------------------------------------

def test_roll_yaml_device_mappings_and_strategy(tmp_path):
    job = load_job(str(write(tmp_path, "rlvr_config.yaml", roll_yaml(strategy="megatron_train"))))
    assert job.kind == "roll"
    train_arg, train = job.device_mappings["actor_train"]
    assert train == (0, 1, 2, 3) and train_arg.line == 25
    assert job.device_mappings["actor_infer"][1] == (4, 5, 6, 7)
    assert job.strategies["actor_train"].value == "megatron_train"
    assert job.args["model_path"].value == "Qwen/Qwen2.5-7B"


def test_device_mapping_is_parsed_never_evaluated():
    assert parse_device_mapping("list(range(0, 4))") == (0, 1, 2, 3)
    assert parse_device_mapping("[0, 1] + list(range(6, 8))") == (0, 1, 6, 7)
    assert parse_device_mapping("list(range(0,16,2))")[-1] == 14
    for bad in ('__import__("os").system("touch /tmp/pwned")', "list(range(10**9))", "open('x')"):
        with pytest.raises(ValueError):
            parse_device_mapping(bad)


@pytest.mark.parametrize("text, line", [("actor_train:\n  device_mapping: [0, 1\nactor_infer: {}\n", 3),
                                        ("actor_train:\n  device_mapping: os.system('x')\n", 2)])
def test_bad_roll_yaml_names_the_line(tmp_path, text, line):
    p = write(tmp_path, "r.yaml", text)
    with pytest.raises(JobError) as exc:
        load_job(str(p))
    assert str(exc.value).startswith(f"{p}:{line}:")


# -- model folders ------------------------------------------------------------------------

def test_safetensors_header_only_file_declares_real_shapes(tmp_path):
    f = write_safetensors(tmp_path / "m.safetensors", {"model.embed_tokens.weight": ("F32", [151936, 4096])})
    assert f.stat().st_size < 300  # header only: the checker never needs the tensors
    [t] = parse_safetensors_header("m.safetensors", safetensors_header_of(f.read_bytes()))
    assert t.nbytes == 151936 * 4096 * 4 and round(t.mb, 1) == 2374.0
    assert t.describe() == "model.embed_tokens.weight [151936, 4096] float32"
    with pytest.raises(ValueError):
        safetensors_header_of(b"\x00\x01")


def test_node_command_and_local_reader_agree(tmp_path):
    """The probe command (bash, on a node) and --job-local (Python) give the same facts."""
    hf = hf_model(tmp_path / "hf")
    mg = megatron_ckpt(tmp_path / "mg", tp=2, pp=2)
    dirs = [str(hf), str(mg), str(tmp_path / "nope"), str(hf / "config.json")]
    env = dict(os.environ, PF_JOB_MODEL_DIRS="\n".join(dirs),
               PF_JOB_PATHS="\n".join([str(hf), str(hf / "config.json"), str(tmp_path / "a b")]))
    node = subprocess.run(["bash", "-c", MODEL_COMMAND], env=env, capture_output=True, text=True, check=True)
    remote, local = parse_model_bundle(node.stdout), parse_model_bundle(read_model_dirs_local(dirs))
    for d in dirs:
        assert (remote[d].problem, remote[d].entries, remote[d].texts, remote[d].headers) == \
               (local[d].problem, local[d].entries, local[d].texts, local[d].headers)
    assert remote[str(hf)].layout() == "hf" and remote[str(hf)].largest_tensor().name == "model.embed_tokens.weight"
    assert remote[str(mg)].layout() == "megatron" and remote[str(mg)].megatron_split() == MegatronSplit(2, (2,))
    assert remote[dirs[2]].problem == "missing" and remote[dirs[3]].problem == "notdir"
    paths = subprocess.run(["bash", "-c", PATHS_COMMAND], env=env, capture_output=True, text=True, check=True)
    assert parse_paths(paths.stdout) == parse_paths(read_paths_local(env["PF_JOB_PATHS"].split("\n")))
    assert parse_paths(paths.stdout)[str(tmp_path / "a b")].status == "missing"


def test_an_instruction_dataset_prefix_is_found_by_its_packed_files(tmp_path):
    """MindSpeed-LLM's --is-instruction-dataset writes <prefix>_packed_<field>_document.bin/.idx:
    the prefix read as missing, an error on a correct job."""
    data = tmp_path / "alpaca"
    data.mkdir()
    for field, size in (("input_ids", 300), ("labels", 200), ("attention_mask", 100)):
        (data / f"alpaca_packed_{field}_document.bin").write_bytes(b"x" * size)
        (data / f"alpaca_packed_{field}_document.idx").write_bytes(b"i")
    wanted = [str(data / "alpaca"), str(data / "other")]
    env = dict(os.environ, PF_JOB_PATHS="\n".join(wanted))
    node = parse_paths(subprocess.run(["bash", "-c", PATHS_COMMAND], env=env, capture_output=True, text=True,
                                      check=True).stdout)
    assert node == parse_paths(read_paths_local(wanted))
    assert (node[wanted[0]].status, node[wanted[0]].size) == ("prefix", 600)
    assert node[wanted[1]].status == "missing"


def test_truncated_bundle_keeps_what_arrived():
    import base64
    import gzip
    text = "D " + base64.b64encode(b"/m").decode() + "\nL f 10 config.json\n" + "".join(f"L f {i} shard-{i * 7919 % 10007}\n" for i in range(5000))
    blob = base64.b64encode(gzip.compress(text.encode())).decode()
    dirs = parse_model_bundle(blob[: len(blob) // 2])
    assert dirs["/m"].truncated and "config.json" in dirs["/m"].entries


# -- values only the run knows: set outside the script, or in a branch ------------------------

IF_ELSE = """MODEL_SIZE=${1:-7b}
if [ "$MODEL_SIZE" = "70b" ]; then
    TP=8
else
    TP=4
fi
run --tensor-model-parallel-size ${TP}
"""
CASE = """case "$MODEL_SIZE" in
    70b) TP=8 ;;
    7b) TP=1 ;;
esac
run --tensor-model-parallel-size $TP
"""
ONE_LINE = 'TP=4; if [ "$NNODES" -gt 1 ]; then TP=8; fi\nrun --tensor-model-parallel-size $TP\n'
AND_OR = '[ "$BIG" = 1 ] && TP=8 || TP=2\nrun --tensor-model-parallel-size ${TP:-1}\n'
BRACES = 'TP=4\n[ -n "$BIG" ] && {\n    TP=8\n}\nrun --tensor-model-parallel-size $TP\n'
FUNCTION = 'arr=()\nset_tp() {\n    TP=8\n}\nrun --tensor-model-parallel-size $TP\n'  # runs only if called


@pytest.mark.parametrize("text, sets, shown", [
    (IF_ELSE, [(3, "8"), (5, "4")], "${TP}"),
    (CASE, [(2, "8"), (3, "1")], "$TP"),
    (ONE_LINE, [(1, "8")], "$TP"),
    (AND_OR, [(1, "8"), (1, "2")], "${TP:-1}"),  # nor does the default stand in for it
    (BRACES, [(3, "8")], "$TP"),
    (FUNCTION, [(3, "8")], "$TP"),
])
def test_shell_branch_assignments_stay_unresolved(text, sets, shown):
    s = read_script(text)
    assert s.conditional == {"TP": sets}
    assert "TP" not in s.variables
    assert [w.text for w in s.commands[-1].words] == ["run", "--tensor-model-parallel-size", shown]


def test_shell_straight_line_and_same_branch_values_are_known():
    s = read_script("TP=4\nTP=8\na $TP\n"
                    "if [ -n \"$X\" ]; then\n  PP=2\n  b $PP\nelse\n  c $PP\nfi\n"
                    "PP=4\nd $PP\n")
    assert [[w.text for w in c.words] for c in s.commands if c.words[0].text in "abcd"] == [
        ["a", "8"], ["b", "2"], ["c", "$PP"], ["d", "4"]]  # the else branch does not see PP=2
    assert s.conditional == {} and s.variables["PP"].text == "4"


@pytest.mark.parametrize("setup, shown, reason", [
    ("source ./par.env\n", "${TP}", "may be set by the file the script sources, ./par.env ({p}:1), or from outside "
                                     "the script"),
    # A default after a sourced file: that file may set it, so the default is not taken.
    ("source ./par.env\nTP=${TP:-8}\n", "${TP:-8}", "may be set by the file the script sources, ./par.env ({p}:1), "
                                                     "or from outside the script"),
    ("TP=$1\n", "$1", "is set from outside the script"),
    ("TP=$(<conf/tp)\n", "$(<conf/tp)", "is the output of a command the script runs"),
    ('if [ "$M" = 70b ]; then\n  TP=8\nelse\n  TP=4\nfi\n', "${TP}",
     "is set in a branch (TP=8 at {p}:2; TP=4 at {p}:4)"),
])
def test_mindspeed_keeps_an_unresolved_argument_as_given(tmp_path, setup, shown, reason):
    p = write(tmp_path, "p.sh", setup + 'ARGS="--tensor-model-parallel-size ${TP} --pipeline-model-parallel-size 2"\n'
                                          "torchrun pretrain_gpt.py $ARGS\n")
    job = load_job(str(p))
    tp = job.arg("tp")
    line = setup.count("\n") + 1
    assert (tp.name, tp.value, tp.line, tp.unresolved) == ("--tensor-model-parallel-size", shown, line,
                                                           reason.format(p=p))
    assert "tp" not in job.args and job.args["pp"].value == "2"  # only resolved values are in args
    assert f"--tensor-model-parallel-size {shown} ({p}:{line}) {reason.format(p=p)}; not checked" in job.notes
    with pytest.raises(JobError, match="its value is not known"):  # never read as a number, nor as 1
        tp.int_value(job.path)


def test_arithmetic_on_a_variable_built_from_a_command_names_the_command(tmp_path):
    """MindSpeed-MM examples/qwen2.5vl/finetune_qwen2_5_vl_72b.sh: NNODES=$(cat $HOSTFILE | wc -l),
    DP from WORLD_SIZE from NNODES, GBS=$(($MBS*$GRAD_ACC_STEP*$DP)). --global-batch-size was
    "set from outside the script"; the script sets every name in it, from a command's output."""
    p = write(tmp_path, "f.sh", "NPUS_PER_NODE=16\nNNODES=$(cat $HOSTFILE | wc -l)\n"
                                "WORLD_SIZE=$(($NPUS_PER_NODE*$NNODES))\nTP=2\nMBS=1\n"
                                "DP=$(($WORLD_SIZE/$TP))\nGBS=$(($MBS*96*$DP))\n"
                                "torchrun pretrain_vlm.py --micro-batch-size ${MBS} --global-batch-size ${GBS} "
                                "--seq-length $((SEQ*2))\n")
    job = load_job(str(p))
    assert job.arg("gbs").unresolved == "is the output of a command the script runs"
    assert job.arg("seq_length").unresolved == "is set from outside the script"  # SEQ: the script never sets it


def test_a_reference_in_single_quotes_is_the_literal_text_the_job_receives(tmp_path):
    """GPT_ARGS='--tensor-model-parallel-size ${TP}': bash does not expand inside single quotes, so
    the job gets the text ${TP}. It was reported as "set from outside the script"; a note now says
    what happens (not a usage error: something may expand it again)."""
    p = write(tmp_path, "p.sh", "TP=4\nGPT_ARGS='\n    --tensor-model-parallel-size ${TP}\n    --num-layers 28\n'\n"
                                "torchrun --nproc_per_node 8 pretrain_gpt.py $GPT_ARGS\n")
    # An integer flag: torchrun passes '${TP}' on and argparse stops the job (a clear usage error).
    with pytest.raises(JobError) as err:
        load_job(str(p))
    assert f"{p}:3: --tensor-model-parallel-size ${{TP}} is written inside single quotes" in str(err.value)
    assert "is not an integer" in str(err.value)
    # A path flag: a note, the argument not checked.
    p = write(tmp_path, "l.sh", "CKPT=/ckpt\nARGS='--load ${CKPT}'\ntorchrun pretrain_gpt.py $ARGS\n")
    load = load_job(str(p)).arg("load")
    assert load.unresolved.startswith(f"is written inside single quotes ({p}:2), which bash does not expand")
    assert "in double quotes it is the variable's value" in load.unresolved
    # srun runs torchrun with the words as they are: still the literal text.
    p = write(tmp_path, "s.sh", "TP=4\nARGS='--tensor-model-parallel-size ${TP}'\nsrun torchrun pretrain_gpt.py $ARGS\n")
    with pytest.raises(JobError, match="written inside single quotes"):
        load_job(str(p))
    # In double quotes it is TP's value; a '$' elsewhere on a line in single quotes is not this value's.
    p = write(tmp_path, "q.sh", "TP=4\nGPT_ARGS=\"--tensor-model-parallel-size ${TP}\"\n"
                                "echo '$HOME' >/dev/null; torchrun pretrain_gpt.py $GPT_ARGS --pipeline-model-parallel-size $PP\n")
    job = load_job(str(p))
    assert job.arg("tp").value == "4" and job.arg("pp").unresolved == "is set from outside the script"
    # The same text in and out of single quotes on one line: which one the job got cannot be told.
    p = write(tmp_path, "same.sh", "GPT_ARGS=\"--tensor-model-parallel-size ${TP}\"; echo 'TP from ${TP}'\n"
                                   "torchrun pretrain_gpt.py $GPT_ARGS\n")
    assert load_job(str(p)).arg("tp").unresolved == "is set from outside the script"
    # eval expands the text once more, with the script's TP; a remote shell with its own environment.
    p = write(tmp_path, "e.sh", "export TP=4\nARGS='--tensor-model-parallel-size ${TP}'\neval torchrun pretrain_gpt.py $ARGS\n")
    assert load_job(str(p)).arg("tp").value == "4"
    p = write(tmp_path, "r.sh", "export TP=4\nARGS='--tensor-model-parallel-size ${TP}'\nssh node2 torchrun pretrain_gpt.py $ARGS\n")
    assert load_job(str(p)).arg("tp").unresolved == "is set from outside the script"
    # verl's key=value overrides alike; Hydra's own ${...} in single quotes is meant for Hydra.
    p = write(tmp_path, "v.sh", "TP=4\npython3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=/m \\\n"
                                "  'actor_rollout_ref.actor.megatron.tensor_model_parallel_size=$TP'\n")
    assert "written inside single quotes" in load_job(str(p)).arg("tp").unresolved
    p = write(tmp_path, "h.sh", "python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path='${oc.env:MODEL_PATH}' \\\n"
                                "  trainer.nnodes=2 trainer.n_gpus_per_node=8\n")
    job = load_job(str(p))
    assert job.arg("model_path").unresolved == "is interpolated by Hydra (OmegaConf) when verl starts"
    assert job.arg("nnodes").value == "2"


def test_sourcing_set_env_sh_or_conda_leaves_defaults_known(tmp_path):
    """CANN's set_env.sh and conda's activate set the toolchain's environment, not TP: a
    ${TP:-8} after them is 8 (after a project's own env file it is not known)."""
    for setup in ("source /usr/local/Ascend/ascend-toolkit/set_env.sh\n", ". ~/miniconda3/bin/activate train\n",
                  "source /usr/local/Ascend/nnal/atb/set_env.sh\n", "source /usr/local/Ascend/driver/bin/setenv.bash\n",
                  "source /etc/profile\n", "source ~/.bashrc\n"):
        p = write(tmp_path, "p.sh", setup + "TP=${TP:-8}\ntorchrun pretrain_gpt.py --tensor-model-parallel-size $TP\n")
        assert load_job(str(p)).arg("tp").value == "8", setup
    # A project's own set_env.sh may export the job's sizes; a guarded default after it is not known either.
    p = write(tmp_path, "q.sh", "source ./set_env.sh\nTP=${TP:-8}\ntorchrun pretrain_gpt.py --tensor-model-parallel-size $TP\n")
    assert load_job(str(p)).arg("tp").unresolved.startswith("may be set by the file the script sources, ./set_env.sh")
    p = write(tmp_path, "g.sh", 'source ./cluster_env.sh\nif [ -z "$TP" ]; then TP=8; fi\n'
                                "torchrun pretrain_gpt.py --tensor-model-parallel-size $TP\n")
    assert load_job(str(p)).arg("tp").unresolved is not None


def test_a_verl_override_line_after_a_missing_backslash_is_named(tmp_path):
    """verl's examples/grpo_trainer/run_qwen3_vl-8b-fsdp2_npu.sh lacks a \\ after one override: bash runs
    the rest as a command of its own and verl never sees trainer.nnodes and the others (found by
    running upstream examples). The note names them; the real command is still the one read."""
    p = write(tmp_path, "v.sh", "python3 -m verl.trainer.main_ppo \\\n"
                                "    actor_rollout_ref.model.path=Qwen/Qwen3-VL-8B-Instruct \\\n"
                                "    actor_rollout_ref.rollout.max_num_batched_tokens=8192\n"
                                "    actor_rollout_ref.rollout.enable_chunked_prefill=True \\\n"
                                "    trainer.n_gpus_per_node=16 \\\n    trainer.nnodes=1 \\\n    trainer.save_freq=20\n")
    job = load_job(str(p))
    assert job.arg("model_path").value == "Qwen/Qwen3-VL-8B-Instruct" and job.arg("nnodes") is None
    [(_, note)] = job.broken
    assert job.broken[0][0] == 4 and note.startswith("actor_rollout_ref.rollout.enable_chunked_prefill=True")
    assert "trainer.n_gpus_per_node, trainer.nnodes" in note and "4 override(s)" in note
    assert "(line 3 does not end in \\; add it)" in note
    # A commented-out override inside the continuation ends the command there (found by review).
    p = write(tmp_path, "c.sh", "python3 -m verl.trainer.main_ppo \\\n    actor_rollout_ref.model.path=/m \\\n"
                                "#    trainer.save_freq=1 \\\n    trainer.nnodes=1 \\\n    trainer.n_gpus_per_node=8\n")
    [(_, note)] = load_job(str(p)).broken
    assert "the comment on line 3 ends the command before it" in note
    # Every override cut off: the verl command runs with none of them, a usage error saying why.
    p = write(tmp_path, "s.sh", "python3 -m verl.trainer.main_ppo \\ \n    actor_rollout_ref.model.path=/m \\\n"
                                "    trainer.nnodes=1\n")
    with pytest.raises(JobError, match="line 1 has a space after its"):
        load_job(str(p))


def test_a_stray_closing_brace_is_named(tmp_path):
    """verl's run_qwen3-8b_npu.sh has actor_rollout_ref.model.path=${MODEL_PATH}}: the job gets the
    brace as part of the path (found by running upstream examples)."""
    p = write(tmp_path, "v.sh", "python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=${MODEL_PATH}} "
                                "trainer.nnodes=1\n")
    assert load_job(str(p)).arg("model_path").unresolved.startswith("has a stray '}'")


def test_a_launch_word_the_script_never_sets_is_noted(tmp_path):
    """MindSpeed-LLM's glm5 script passes $MEM_ARGS, set nowhere: empty, or flags from the caller's
    environment; it was ignored without a word (found by running upstream examples)."""
    p = write(tmp_path, "p.sh", 'GPT_ARGS="--tensor-model-parallel-size 2"\n'
                                "torchrun --nproc_per_node 8 pretrain_gpt.py $GPT_ARGS $MEM_ARGS --num-layers 28\n")
    job = load_job(str(p))
    assert job.arg("tp").value == "2"
    assert f"$MEM_ARGS ({p}:2) is set from outside the script; any flags in it are not checked" in job.notes
    # After a switch the reader does not know, it is still a string of flags, not the switch's value.
    p = write(tmp_path, "q.sh", "torchrun --nproc_per_node 8 pretrain_gpt.py --use-flash-attn $MEM_ARGS --num-layers 28\n")
    assert f"$MEM_ARGS ({p}:1) is set from outside the script; any flags in it are not checked" in load_job(str(p)).notes


def test_bash_expansions_in_verl_overrides_are_not_taken_for_hydra(tmp_path):
    """Only Hydra's own ${oc.env:X} and ${a.b} are Hydra's; ${NNODES:-2} and ${DATA%.*} are bash's
    (found by review)."""
    p = write(tmp_path, "v.sh", 'if [ "$BIG" = 1 ]; then NNODES=4; fi\n'
                                "python3 -m verl.trainer.main_ppo trainer.nnodes=${NNODES:-2} \\\n"
                                "  actor_rollout_ref.model.path='${oc.env:MODEL_PATH}' \\\n"
                                "  actor_rollout_ref.actor.megatron.expert_tensor_parallel_size=null\n")
    job = load_job(str(p))
    assert job.arg("nnodes").unresolved.startswith("is set in a branch"), job.arg("nnodes").unresolved
    assert job.arg("model_path").unresolved == "is interpolated by Hydra (OmegaConf) when verl starts"
    assert job.arg("etp") is None  # null is verl's default (expert-TP = TP), not a usage error


def test_a_file_sourced_after_the_launch_is_not_blamed(tmp_path):
    p = write(tmp_path, "p.sh", "torchrun pretrain_gpt.py --tensor-model-parallel-size $TP\nsource ./collect_logs.sh\n")
    assert load_job(str(p)).arg("tp").unresolved == "is set from outside the script"


def test_expert_parallel_size_is_read_by_both_parsers(tmp_path):
    job = load_job(str(write(tmp_path, "moe.sh", llm_script(tp=1, ep=8))))
    assert job.arg("ep").value == "8" and job.arg("ep").line == 26
    p = write(tmp_path, "v.sh", "python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=/m \\\n"
                                "  actor_rollout_ref.actor.megatron.expert_model_parallel_size=4 \\\n"
                                "  actor_rollout_ref.actor.megatron.tensor_model_parallel_size=$TP\n")
    job = load_job(str(p))
    assert job.arg("ep").shown() == "actor_rollout_ref.actor.megatron.expert_model_parallel_size=4"
    assert job.arg("tp").unresolved == "is set from outside the script" and job.arg("tp").line == 3


@pytest.mark.parametrize("tp, pp, ep, split, pp_ep", [
    (1, 1, 8, MegatronSplit(1, (8,)), None),  # mp_rank_00_000..007: the suffix is the expert rank
    (1, 8, 1, MegatronSplit(1, (8,)), None),  # the very same names for PP 8
    (2, 2, 4, MegatronSplit(2, (2, 4)), (2, 4)),  # mp_rank_TT_PPP_EEE
    (4, 1, 1, MegatronSplit(4, ()), (1, 1)),
])
def test_megatron_rank_folders_tp_pp_ep(tmp_path, tp, pp, ep, split, pp_ep):
    ck = megatron_ckpt(tmp_path / "ck", tp=tp, pp=pp, ep=ep)
    d = parse_model_bundle(read_model_dirs_local([str(ck)]))[str(ck)]
    assert len(d.megatron_ranks()) == tp * pp * ep and d.layout() == "megatron"
    assert d.megatron_split() == split and split.pp_ep() == pp_ep


@pytest.mark.parametrize("text", ["echo a;", "echo a &&", "f()", "echo a |", "x=(", "echo a 2>&", '"\\', '"$x\\'])
def test_a_script_ending_mid_construct_reads_or_is_a_shell_error_never_a_crash(text):
    # A launch script cut off after a separator, a redirection or inside a quote (it used to raise IndexError).
    try:
        read_script(text)
    except ShellError as exc:
        assert exc.line >= 1 and "ends inside" in exc.message


def test_random_shell_text_never_crashes_the_reader():
    rng = random.Random(7)
    pieces = ["echo", " ", ";", "&", "|", "(", ")", "{", "}", "if", "then", "fi", "$", '"', "'", "\\", "\n", "x=",
              "$(", "`", "<", ">", "<<", "EOF", "#", "a", "${", ":-", "$((", "))", "case", "esac", ";;", "else", "+="]
    for _ in range(5000):
        try:
            read_script("".join(rng.choice(pieces) for _ in range(rng.randint(1, 14))))
        except ShellError:
            pass


@pytest.mark.parametrize("text, seen", [
    # A value the script knows decides the guard: the body never (or always) runs.
    ('TP=8\nif [ -z "$TP" ]; then TP=4; fi\necho $TP\n', "8"),
    ('X=\nif [ -z "$X" ]; then X=5; fi\necho $X\n', "5"),
    # On a variable the script does not set, a -z guard is a default, read as ${X:-v} is.
    ('if [ -z "$MASTER_ADDR" ]; then\n  MASTER_ADDR=localhost\nfi\necho $MASTER_ADDR\n', "localhost"),
    ('[ -z "$NNODES" ] && NNODES=2\necho $NNODES\n', "2"),
    ('[ -n "$NNODES" ] || NNODES=3\necho $NNODES\n', "3"),
    ('test -z "$NNODES" && NNODES=4\necho $NNODES\n', "4"),
    # Anything else a branch sets stays unknown.
    ('if [ -z "$A" ]; then A=1; else A=2; fi\necho $A\n', "$A"),
    ('if [ "$B" = 1 ]; then A=8; fi\necho $A\n', "$A"),
    ('if [ -n "$C" ]; then C=9; fi\necho $C\n', "$C"),
    ('[ -z "$D" ] && D=1 && E=2\necho $D\n', "$D"),
    ('if [ -z "$F" ]; then G=1; fi\necho $G\n', "$G"),
    # Only a plain one-command condition is such a guard (bash gives 4 for both).
    ('TP=8\nif [ -z "$TP" ] || [ 1 = 1 ]; then TP=4; fi\necho $TP\n', "$TP"),
    ('TP=8\nif ! [ -z "$TP" ]; then TP=4; fi\necho $TP\n', "$TP"),
    # Inside another construct (or a function never called) it decides nothing past it.
    ('if [ "$MODE" = multi ]; then if [ -z "$NNODES" ]; then NNODES=4; fi; fi\necho $NNODES\n', "$NNODES"),
    ('f() { [ -z "$TP" ] && TP=8; }\necho $TP\n', "$TP"),
])
def test_a_z_guard_reads_as_the_default_or_the_known_value(text, seen):
    script = read_script(text)
    assert script.commands[-1].words[1].text == seen
    assert (seen.startswith("$")) == bool(script.conditional)


def test_verl_scripts_built_from_bash_arrays(tmp_path):
    # volcengine/verl examples/gspo_trainer/run_qwen3_32b_gspo_npu.sh style: overrides grouped in
    # arrays, expanded with "${NAME[@]}"; recipe/dapo/*_npu.sh: defaults written ${X:-"..."}.
    text = """#!/usr/bin/env bash
set -xeuo pipefail
RAY_DATA_HOME=${RAY_DATA_HOME:-"${HOME}/verl"}
MODEL_PATH=${MODEL_PATH:-"/data/models/Qwen3-32B"}
TRAIN_FILE=${TRAIN_FILE:-"${RAY_DATA_HOME}/data/dapo-math-17k.parquet"}
DATA_CONFIG=(
    # data
    data.train_files="${TRAIN_FILE}"
    data.max_prompt_length=2048
)
MODEL_CONFIG=(
    actor_rollout_ref.model.path="${MODEL_PATH}"
)
TRAINER_CONFIG=(
    trainer.nnodes=4
)
TRAINER_CONFIG+=(trainer.n_gpus_per_node=16)
python3 -m verl.trainer.main_ppo \\
    "${DATA_CONFIG[@]}" \\
    "${MODEL_CONFIG[@]}" \\
    "${TRAINER_CONFIG[@]}" "$@"
"""
    p = tmp_path / "run_gspo_npu.sh"
    p.write_text(text)
    job = load_job(str(p), kind="verl")
    assert job.arg("model_path").value == "/data/models/Qwen3-32B" and job.arg("model_path").line == 12
    assert job.arg("train_files").value == "${HOME}/verl/data/dapo-math-17k.parquet"  # HOME: the node's
    assert (job.arg("nnodes").value, job.arg("nproc_per_node").value) == ("4", "16")
    assert job.arg("nproc_per_node").line == 17


def test_parameter_operations_on_known_values_are_evaluated():
    """LOAD_DIR=${CKPT_DIR%/} with CKPT_DIR set above read as "set from outside the script; not
    checked", and every check of the load path was skipped (found by review)."""
    script = read_script("CKPT_DIR=/data/ckpt/\nNPUS=(0 1 2 3)\nMODEL_NAME=qwen\n"
                         "torchrun --nproc_per_node ${#NPUS[@]} pretrain_gpt.py --load ${CKPT_DIR%/} "
                         "--a ${MODEL_NAME^^} --b ${CKPT_DIR##*/data/} --c ${MODEL_NAME:1:2} --d ${CKPT_DIR//ckpt/save} "
                         "--e ${#MODEL_NAME} --f ${CKPT_DIR%/*} --g ${UNSET%/} --h ${CKPT_DIR%$X}\n")
    words = [w.text for w in script.commands[-1].words]
    assert words[2] == "4" and words[4:] == [
        "--load", "/data/ckpt", "--a", "QWEN", "--b", "ckpt/", "--c", "we", "--d", "/data/save/", "--e", "4",
        "--f", "/data/ckpt", "--g", "${UNSET%/}", "--h", "${CKPT_DIR%$X}"], words
    # Values holding what the reader left as written are not operated on: NODES=($(cat hostfile)) has
    # as many elements as the file has lines, not 1 (review), and ${ROOT}/a/b is not 12 long.
    script = read_script("NODES=($(cat hostfile))\nX=${ROOT}/a/b\nA=abc\n"
                         "torchrun --nnodes ${#NODES[@]} p.py --a ${#X} --b ${X#*/} --c ${X:0:3} --d ${X^^} "
                         "--e ${A%[^c]} --f ${A%b?} --g ${A%%[[:space:]]*} --h ${A/b/[^x]} --i ${A%%[^[:alnum:]]*}\n")
    words = [w.text for w in script.commands[-1].words]
    assert words == ["torchrun", "--nnodes", "${#NODES[@]}", "p.py", "--a", "${#X}", "--b", "${X#*/}", "--c",
                     "${X:0:3}", "--d", "${X^^}", "--e", "abc", "--f", "a", "--g", "${A%%[[:space:]]*}",
                     "--h", "a[^x]c", "--i", "${A%%[^[:alnum:]]*}"], words


def test_array_elements_are_words_and_defaults_lose_their_quotes():
    s = read_script('A=( "x y" z )\nB=${B:-"/m n"}\nrun "${A[@]}" ${A[*]} "${A[0]}" "$B" ${A[1]}\n')
    assert [w.text for w in s.commands[-1].words] == ["run", "x y", "z", "x", "y", "z", "x y", "/m n", "z"]


def test_a_plain_variable_read_as_an_array_is_an_array_of_one():
    s = read_script('S="--x 1"\nrun ${S[@]} "${S[*]}" "${S[0]}" "${S[1]}" ${S}\n')
    assert [w.text for w in s.commands[-1].words] == ["run", "--x", "1", "--x 1", "--x 1", "", "--x", "1"]


def test_an_empty_array_quoted_is_no_word_and_joins_to_nothing():
    # EXTRA=(); torchrun ... "${EXTRA[@]}": bash passes no argument at all, not an empty one.
    s = read_script('E=()\nF=(a "b c")\nrun "${E[@]}" x "--y=${E[@]}" "${F[@]}" ${E[@]}\nZ="${E[@]}"\n'
                    ': ${W:="${E[@]}"}\nrun2 "$Z" "$W" "${E[@]}"\n')
    assert [w.text for w in s.commands[2].words] == ["run", "x", "--y=", "a", "b c"]
    assert [w.text for w in s.commands[3].words] == ["Z="]
    assert [w.text for w in s.commands[-1].words] == ["run2", "", ""]
    assert (s.variables["Z"].text, s.variables["W"].text) == ("", "")


def test_roll_data_files_as_a_yaml_list(tmp_path):
    # Every ROLL example lists its data (examples/ascend_examples/qwen3_8b_rlvr_deepspeed.yaml).
    text = roll_yaml().replace("  device_mapping: list(range(0, 4))\n", "  device_mapping: list(range(0, 4))\n"
                               "  data_args:\n    file_name:\n      - data/math_deepmath_deal.jsonl\n"
                               "      - /data/code.jsonl\n", 1)
    p = tmp_path / "rlvr.yaml"
    p.write_text(text)
    job = load_job(str(p))
    assert [a.value for a in job.path_args() if a.name == "actor_train.data_args.file_name"] == \
        ["data/math_deepmath_deal.jsonl", "/data/code.jsonl"]



def test_a_two_command_condition_keeps_what_its_body_appends_conditional():
    # if [ -n "$CKPT" ] && [ -d "$CKPT" ]; then GPT_ARGS="$GPT_ARGS --load ..."; fi: --load is not a given.
    s = read_script('CKPT=/ckpt\nARGS="--a 1"\nif [ -n "$CKPT" ] && [ -d "$CKPT" ]; then ARGS="$ARGS --load $CKPT"; '
                    'fi\nrun $ARGS\n')
    assert [w.text for w in s.commands[-1].words] == ["run", "--a", "1", "--load", "/ckpt"]
    assert s.branch_lines == {3: "ARGS"}


def test_an_array_a_branch_that_never_runs_set_keeps_its_value():
    # if [ -n "${DEBUG:-}" ]; then TRAINER=(... 1 x 2); fi never runs: bash passes 4 x 16.
    s = read_script('T=(trainer.nnodes=4 trainer.n_gpus_per_node=16)\nif [ -n "${DEBUG:-}" ]; then '
                    'T=(trainer.nnodes=1 trainer.n_gpus_per_node=2); fi\nrun "${T[@]}" $T\n')
    assert [w.text for w in s.commands[-1].words] == ["run", "trainer.nnodes=4", "trainer.n_gpus_per_node=16",
                                                      "trainer.nnodes=4"]


def test_expansions_nested_past_the_stack_are_a_shell_error():
    with pytest.raises(ShellError, match="nested too deeply"):
        read_script("X=" + "${X:-" * 3000 + "}" * 3000 + "\n")


def test_a_job_file_that_is_a_fifo_or_a_directory_is_refused_at_once(tmp_path):
    """--job fifo.sh (a FIFO nothing writes to) blocked the run for ever in open()."""
    fifo = tmp_path / "fifo.sh"
    os.mkfifo(fifo)
    for path in (fifo, tmp_path):
        with pytest.raises(JobError, match="not a regular file"):
            load_job(str(path))


def test_a_value_appended_to_thousands_of_times_is_refused_not_read_for_minutes(tmp_path):
    """ARGS="$ARGS --flagN N" 20 000 times (a generated script) ran past two minutes and 9.7 GB."""
    import time

    many = 'ARGS=""\n' + "".join(f'ARGS="$ARGS --flag{i} {i}"\n' for i in range(20000)) + "torchrun pretrain_gpt.py $ARGS\n"
    t0 = time.monotonic()
    with pytest.raises(JobError, match="too large to read"):
        load_job(str(write(tmp_path, "gen.sh", many)))
    assert time.monotonic() - t0 < 30
    # A few hundred appends, already more than any launch script has, are read as before.
    few = 'ARGS=""\n' + "".join(f'ARGS="$ARGS --flag{i} {i}"\n' for i in range(300)) + \
        "torchrun pretrain_gpt.py $ARGS --tensor-model-parallel-size 2\n"
    assert load_job(str(write(tmp_path, "few.sh", few))).args["tp"].value == "2"


def test_two_job_files_of_one_name_are_told_apart_by_their_paths(tmp_path):
    """--job a/run.sh --job b/run.sh: every result's subject was "run.sh", one matrix row mixed both."""
    from preflight.job import load_jobs

    text = "torchrun pretrain_gpt.py --tensor-model-parallel-size 2\n"
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    one, two = write(a, "run.sh", text), write(b, "run.sh", text)
    other = write(tmp_path, "other.sh", text)
    assert [j.name for j in load_jobs([str(one), str(two), str(other)])] == [str(one), str(two), "other.sh"]
    assert [j.name for j in load_jobs([str(one), str(one)])] == [f"{one}#1", f"{one}#2"]
