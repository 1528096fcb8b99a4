"""MindSpeed-MM / MindSpeed-LLM launch scripts: the ``torchrun``/``msrun`` command and the
shell variables it is built from (``GPT_ARGS="--tensor-model-parallel-size ${TP} ..."``),
plus the pipeline layer split of the ``--mm-model`` json."""

from __future__ import annotations

import json
import os
import re

from . import (Arg, Job, JobError, LayerList, branch_reason, hidden_word, is_placeholder, passed_on_note,
               passes_script_args, single_quoted_reason, unresolved_reason)
from .shell import ShellError, broken_by, read_script
from .yamlindex import compose, index_of, scalar

# Switches (no value) a check reads: flag -> canonical name.
SWITCHES = {
    # MindSpeed-LLM converts the HuggingFace weights --load names while the job starts.
    "--enable-hf2mg-convert": "hf2mg_convert",
    # Megatron reads --num-query-groups only with it; without, each attention head has its own K/V.
    "--group-query-attention": "gqa",
    # A pipeline stage whose layers are all frozen gets a dummy optimizer (MindSpeed-MM, FAQ #10).
    "--enable-dummy-optimizer": "dummy_optimizer",
    # Megatron core rounds the global batch down to a multiple of micro batch x DP instead of asserting.
    "--decrease-batch-size-if-needed": "decrease_batch",
}

# flag -> canonical name; the ones whose value must be an integer are marked.
FLAGS = {
    "--tensor-model-parallel-size": ("tp", True),
    "--pipeline-model-parallel-size": ("pp", True),
    "--expert-model-parallel-size": ("ep", True),
    "--expert-tensor-parallel-size": ("etp", True),
    "--context-parallel-size": ("cp", True),
    "--micro-batch-size": ("mbs", True),
    "--global-batch-size": ("gbs", True),
    "--seq-length": ("seq_length", True),
    "--distributed-timeout-minutes": ("distributed_timeout", True),
    "--num-layers": ("num_layers", True),
    "--num-query-groups": ("num_query_groups", True),
    "--num-attention-heads": ("num_attention_heads", True),
    "--num-layer-list": ("num_layer_list", False),
    "--load": ("load", False),
    "--save": ("save", False),
    "--data-path": ("data_path", False),
    "--mm-data": ("mm_data", False),
    "--mm-model": ("mm_model", False),
    "--tokenizer-name-or-path": ("tokenizer", False),
    "--nproc_per_node": ("nproc_per_node", True),
    "--nproc-per-node": ("nproc_per_node", True),
    "--nnodes": ("nnodes", True),
    "--local_worker_num": ("nproc_per_node", True),
    "--worker_num": ("world_size", True),
    # MindSpeed-LLM's FSDP2 trainer (train_fsdp2.py config.yaml --model.model_name_or_path ...): a
    # dotted flag overrides that key of its YAML.
    "--model.model_name_or_path": ("hf_model", False),
    "--parallel.tp_size": ("tp", True),
    # torchrun / msrun rendezvous: cluster.rendezvous probes the master port the job will use.
    "--master_addr": ("master_addr", False),
    "--master-addr": ("master_addr", False),
    "--master_port": ("master_port", True),
    "--master-port": ("master_port", True),
}
# Flags that take every word up to the next flag (Megatron's nargs='*'): blended data prefixes.
MULTI_VALUE = frozenset({"--data-path", "--train-data-path", "--valid-data-path", "--test-data-path"})
LAUNCHERS = ("torchrun", "msrun")


def _is_launch(words) -> bool:
    names = [os.path.basename(w.text) for w in words[:4]]
    if any(n in LAUNCHERS for n in names):
        return True
    texts = [w.text for w in words]
    if any(t in ("torch.distributed.run", "torch.distributed.launch") for t in texts):
        return True
    return any(re.fullmatch(r"(pre|post)train_\w*\.py", os.path.basename(t)) for t in texts)


def _eval_expanded(value: str, variables: dict) -> str:
    """What ``eval`` makes of text it expands a second time (ARGS='--tp ${TP}'; eval torchrun $ARGS):
    the script's own variables filled in; the others left as written."""
    def sub(m):
        known = variables.get(m.group(1) or m.group(2))
        return known.text if known is not None else m.group(0)
    return re.sub(r"\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)", sub, value)


_UNSET_WORD = re.compile(r"\$\{?[A-Za-z_]\w*\}?")  # a variable the script does not set, left as written


def parse_mindspeed(path: str, text: str) -> Job:
    try:
        script = read_script(text)
    except ShellError as exc:
        raise JobError(path, exc.line, exc.message) from None
    launches = [c for c in script.commands if _is_launch(c.words)]
    launch = next((c for c in launches if any(w.text in FLAGS for w in c.words)), launches[0] if launches else None)
    if launch is None:
        raise JobError(path, None, "no torchrun/msrun (or pretrain_*.py) command found: not a MindSpeed launch "
                                   "script (give --job-kind if it is another framework's)")
    job = Job(path=path, kind="mindspeed", is_script=True, crlf_lines=script.crlf_lines,
              data_args=("data_path", "mm_data", "dataset_dir"))
    # `--pipeline-model-parallel-size 2 \` as a command of its own right after the launch's lines
    # (only comment lines between): the line continuation is broken there (a comment line, a space
    # after the \, a missing \), and the launch runs without these.  A `--tp)` case pattern or a
    # command elsewhere is not the launch's.
    end = max(w.line for w in launch.words)
    for cmd in script.commands:
        if cmd.line <= end or not cmd.words:
            continue
        between = script.text_lines[end:cmd.line - 1]
        if not cmd.words[0].text.startswith("--") or not all(not t.strip() or t.lstrip().startswith("#")
                                                             for t in between):
            break
        flags = [w.text.split("=", 1)[0] for w in cmd.words if w.text.startswith("--")]
        shown = ", ".join(flags[:6]) + (f" and {len(flags) - 6} more" if len(flags) > 6 else "")
        job.broken.append((cmd.line, f"{cmd.words[0].text} starts a command of its own ({broken_by(script, cmd.line)}): "
                                     f"bash runs it as a command ('command not found') and the launch never gets these "
                                     f"{len(flags)} flag(s): {shown}"))
        end = max(w.line for w in cmd.words)
    words = launch.words
    positional = []
    i = 0
    while i < len(words):
        w = words[i]
        if not w.text.startswith("--"):
            positional.append(w)
            if (note := passed_on_note(w.text, w.line, path, "flags")) is not None:
                job.notes.append(note)
            elif (hidden := hidden_word(w.text, w.line, path, script.conditional)) is not None:
                job.hidden.append(hidden)
                job.notes.append(f"{w.text} ({path}:{w.line}) {hidden.unresolved}; the flags in it are not checked")
            elif _UNSET_WORD.fullmatch(w.text):
                # $MEM_ARGS the script never sets: empty, or flags from the caller's environment.
                reason = unresolved_reason(w.text, path, script.conditional, script.sourced_before(launch.line))
                job.notes.append(f"{w.text} ({path}:{w.line}) {reason}; any flags in it are not checked")
            i += 1
            continue
        flag, eq, value = w.text.partition("=")
        vline = w.line
        if not eq:
            nxt = words[i + 1] if i + 1 < len(words) else None
            # A flag we do not know may be boolean (--use-mcore-models $GPT_ARGS): the word after it
            # is its value only when it cannot be a string of flags a branch hides.
            # An unset $MEM_ARGS after an unknown switch (--use-flash-attn $MEM_ARGS) is a string of
            # flags too, not the switch's value.
            if nxt is not None and not nxt.text.startswith("--") and (
                    flag in FLAGS or (hidden_word(nxt.text, nxt.line, path, script.conditional) is None
                                      and not passes_script_args(nxt.text)
                                      and not _UNSET_WORD.fullmatch(nxt.text))):
                value, vline = nxt.text, nxt.line
                i += 1
                if flag in MULTI_VALUE:
                    # Megatron's --data-path takes every word up to the next flag (nargs='*'):
                    # DATA_PATH="0.3 /a 0.7 /b" passed unquoted is four words, two prefixes.
                    # An unresolved $MODEL_ARGS after it (the whole word) is a string of flags, not
                    # a prefix; ${DATA_ROOT}/b_text_document is a prefix, unresolved.
                    while i + 1 < len(words) and not words[i + 1].text.startswith("--") \
                            and not _UNSET_WORD.fullmatch(words[i + 1].text) \
                            and hidden_word(words[i + 1].text, words[i + 1].line, path, script.conditional) is None:
                        i += 1
                        value += " " + words[i].text
                elif flag in FLAGS and is_placeholder(value):
                    # --load $CKPT_LOAD_DIR of "your model ckpt path": the words it splits into, whole,
                    # so the placeholder is named as the example wrote it (not "your").
                    while i + 1 < len(words) and not words[i + 1].text.startswith("--") \
                            and words[i + 1].line == vline != w.line:
                        i += 1
                        value += " " + words[i].text
            else:
                value = None
        i += 1
        if flag in SWITCHES:
            job.set_arg(SWITCHES[flag], Arg(flag, "", w.line))
            continue
        if flag not in FLAGS:
            continue
        key, numeric = FLAGS[flag]
        if value is None:
            raise JobError(path, w.line, f"{flag} has no value")
        if words[0].text == "eval":
            value = _eval_expanded(value, script.variables)
        quoted = single_quoted_reason(value, vline, path, script, words[0].text)
        if quoted and numeric:
            # torchrun hands the text on as it is: argparse stops the job at it.
            raise JobError(path, vline, f"{flag} {value} {quoted}: the job stops at it, as {value} is not an integer")
        reason = (quoted or unresolved_reason(value, path, script.conditional, script.sourced_before(launch.line),
                                            script.variables)
                  or branch_reason((w.line, vline), path, script.branch_lines))
        if reason is not None:
            # Given, so not its default: the checks that read it say they cannot tell.
            arg = Arg(flag, value, w.line, vline if vline != w.line else None, unresolved=reason)
            job.notes.append(f"{flag} {value} ({path}:{w.line}) {reason}; not checked")
            job.set_arg(key, arg)
            continue
        if flag == "--nnodes" and re.fullmatch(r"\d+:\d+", value):
            value = value.split(":")[1]
        arg = Arg(flag, value, w.line, vline if vline != w.line else None)
        if numeric:
            arg.int_value(path)
        job.set_arg(key, arg)  # the last one wins, as with argparse
    for w in positional:
        if re.search(r"\.ya?ml$", w.text, re.I):
            _trainer_config(job, w, script.conditional)
    _layer_lists(job)
    _data_json(job)
    return job


# MindSpeed-MM's FSDP2 trainer (torchrun ... mindspeed_mm/fsdp/base_trainer.py config.yaml) takes
# its model, data and parallel sizes from that YAML, not from flags: key -> (canonical name, integer).
TRAINER_KEYS = {
    "parallel.tensor_parallel_size": ("tp", True),
    "model.model_name_or_path": ("hf_model", False),
    "data.dataset_param.preprocess_parameters.model_name_or_path": ("tokenizer", False),
    "data.dataset_param.basic_parameters.dataset": ("data_path", False),
    "data.dataset_param.basic_parameters.dataset_dir": ("dataset_dir", False),
    # MindSpeed-LLM's FSDP2 trainer (train_fsdp2.py config.yaml).
    "parallel.tp_size": ("tp", True),
    "data.dataset.file_name": ("data_path", False),
}


def _trainer_config(job: Job, word, conditional: dict) -> None:
    """The FSDP2 trainer's YAML named on the launch command, found as --mm-model is."""
    shown = f"{word.text} ({job.path}:{word.line})"
    if (reason := unresolved_reason(word.text, job.path, conditional)) is not None:
        job.notes.append(f"{shown} {reason}: the trainer config is not read")
        return
    found = _beside(job.path, word.text, job)
    if found is None:
        job.notes.append(f"{shown}: the trainer config was not found next to the job (run the preflight from "
                         f"the launch directory); its model, data and parallel sizes are not checked")
        return
    try:
        with open(found, encoding="utf-8") as fh:
            text = fh.read(8 << 20)
    except (OSError, UnicodeDecodeError) as exc:
        raise JobError(found, None, f"cannot read the trainer config: {getattr(exc, 'strerror', None) or exc}") from None
    index = index_of(compose(found, text.replace("\r\n", "\n")))
    for key, (canon, numeric) in TRAINER_KEYS.items():
        value = scalar(index, key)
        if value is None or value in ("null", "None", "~", "") or canon in job.args or canon in job.unresolved:
            continue  # a flag on the command line wins
        arg = Arg(key, value, index[key][1], sep=": ", file=found,
                  unresolved="is interpolated when the trainer starts" if "${" in value else None)
        if numeric and not arg.unresolved:
            arg.int_value(found)
        job.set_arg(canon, arg)


def _beside(path: str, value: str, job: Job | None = None) -> str | None:
    """The file a launch script names (--mm-model, a trainer YAML), looked for where the script
    would find it: the current directory, or the script's folder and up to four above it.  Found
    above the script, that folder is where the job is launched from: its relative paths are read
    from there (``job.launch_dir``), not from wherever the preflight was started."""
    found = next((c for c in _candidates(path, value) if os.path.isfile(c)), None)
    if found is not None and job is not None and not os.path.isabs(value) and found != os.path.abspath(value) \
            and job.launch_dir is None:
        job.launch_dir = found[:-(len(value) + 1)]
        job.notes.append(f"{value} was found under {job.launch_dir}, not under the current directory: the job's "
                         f"relative paths are read from {job.launch_dir}, taken as the directory it is launched from")
    return found


def _candidates(path: str, value: str):
    if os.path.isabs(value):
        return [value]
    base = os.path.dirname(os.path.abspath(path))
    out = [os.path.abspath(value)]
    for _ in range(4):
        out.append(os.path.join(base, value))
        base = os.path.dirname(base)
    return out


def _line_of(text: str, *keys: str) -> int | None:
    pos = 0
    for key in keys:
        m = re.compile(r'"' + re.escape(key) + r'"\s*:').search(text, pos)
        if not m:
            return None
        pos = m.end()
    return text.count("\n", 0, pos) + 1


def _stages(value) -> tuple[int, ...] | None:
    if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
        # [[1, 10, 10, 7]] (mm-convert), or one row per virtual-pipeline chunk ([[0,0,0,1],[4,4,4,4],
        # [4,3,2,2]] with VPP 3): a stage holds its layers of every chunk.
        if len({len(v) for v in value}) != 1:
            return None
        value = [sum(col) if all(isinstance(x, int) and not isinstance(x, bool) for x in col) else None
                 for col in zip(*value)]
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value) and value:
        return tuple(value)
    return None


def _find_key(doc, key):
    if isinstance(doc, dict):
        if key in doc:
            return doc[key]
        for v in doc.values():
            found = _find_key(v, key)
            if found is not None:
                return found
    elif isinstance(doc, list):
        for v in doc:
            found = _find_key(v, key)
            if found is not None:
                return found
    return None


# MindSpeed-MM's --mm-data json names the paths the job reads (data.json of every example):
# key path -> (canonical name, as the FSDP2 trainer YAML's keys map).
DATA_JSON_KEYS = {
    ("dataset_param", "preprocess_parameters", "model_name_or_path"): "tokenizer",
    ("dataset_param", "basic_parameters", "dataset"): "data_path",
    ("dataset_param", "basic_parameters", "dataset_dir"): "dataset_dir",
    ("dataset_param", "basic_parameters", "data_path"): "data_path",  # DiT and DanceGRPO data jsons
}


def _read_json(path: str, what: str):
    """(text, document) of a json file the job names; unreadable or invalid: a JobError at its line."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read(8 << 20)
        return text, json.loads(text)
    except OSError as exc:
        raise JobError(path, None, f"cannot read {what}: {exc.strerror}") from None
    except ValueError as exc:
        raise JobError(path, getattr(exc, "lineno", None), f"not valid JSON: {getattr(exc, 'msg', exc)}") from None


def _data_json(job: Job) -> None:
    """The model and dataset paths in the --mm-data json, found as --mm-model is; a flag on the
    command line wins."""
    mm = job.args.get("mm_data")
    if mm is None:
        return
    found = _beside(job.path, mm.value, job)
    if found is None:
        job.notes.append(f"--mm-data {mm.value} ({job.where(mm)}) was not found next to the job (run the preflight "
                         f"from the launch directory): the model and dataset paths in it are not checked")
        return
    text, doc = _read_json(found, "data json")
    for keys, canon in DATA_JSON_KEYS.items():
        value = doc
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        if not isinstance(value, str) or not value.strip() or canon in job.args or canon in job.unresolved:
            continue
        job.set_arg(canon, Arg(".".join(keys), value, _line_of(text, *keys), sep=": ", file=found))


def _layer_lists(job: Job) -> None:
    lst = job.args.get("num_layer_list")
    if lst is not None:  # MindSpeed-LLM --num-layer-list 6,8,8,6
        try:
            stages = tuple(int(x) for x in lst.value.split(","))
        except ValueError:
            raise JobError(job.path, lst.line, f"--num-layer-list {lst.value!r}: expected integers separated "
                                               f"by commas") from None
        job.pp_layers["llm"] = LayerList("llm", lst, stages, job.args.get("num_layers"), job.path)
    mm = job.args.get("mm_model")
    if mm is None:
        return
    found = _beside(job.path, mm.value, job)
    if found is None:
        job.model_json_problem = (f"--mm-model {mm.value} ({job.where(mm)}) was not found next to the job "
                                  f"(run the preflight from the launch directory)")
        return
    text, doc = _read_json(found, "model json")
    job.model_json = found
    decoder = doc.get("text_decoder") if isinstance(doc, dict) else None
    vision = None
    if isinstance(doc, dict) and isinstance(doc.get("image_encoder"), dict):
        vision = doc["image_encoder"].get("vision_encoder")
    parts = (("llm", "llm_pp_layers", decoder, ("text_decoder",)),
             ("vit", "vit_pp_layers", vision, ("image_encoder", "vision_encoder")))
    for part, flat_key, section, keys in parts:
        num = None
        if isinstance(section, dict) and isinstance(section.get("num_layers"), int):
            num = Arg(".".join((*keys, "num_layers")), str(section["num_layers"]),
                      _line_of(text, *keys, "num_layers"), sep=": ", file=found)
        stages = _stages(_find_key(doc, flat_key))
        if stages is not None:
            arg = Arg(flat_key, json.dumps(list(stages)), _line_of(text, flat_key), sep=": ", file=found)
        elif isinstance(section, dict) and _stages(section.get("pipeline_num_layers")) is not None:
            stages = _stages(section["pipeline_num_layers"])
            arg = Arg(".".join((*keys, "pipeline_num_layers")), json.dumps(list(stages)),
                      _line_of(text, *keys, "pipeline_num_layers"), sep=": ", file=found)
        else:
            continue
        job.pp_layers[part] = LayerList(part, arg, stages, num, found)
    if isinstance(decoder, dict) and isinstance(decoder.get("num_query_groups"), int) \
            and job.arg("num_query_groups") is None:
        job.args["num_query_groups"] = Arg("text_decoder.num_query_groups", str(decoder["num_query_groups"]),
                                           _line_of(text, "text_decoder", "num_query_groups"), sep=": ",
                                           file=found)
        job.notes.append(f"num_query_groups from {found}")
