"""Job checks (``--job FILE``): the job meeting the cluster.  One result per job (and per
node for paths); every failure names the argument, its value and where it is written."""

from __future__ import annotations

import math
import os
import re

from preflight import faq
from preflight.check import check
from preflight.hostlist import fold
from preflight.job.model import DTYPE_NAMES
from preflight.job.verl import DEFAULT_BUCKET_MB

NEEDS = ("job.model?", "job.paths?")
MODEL_DIR_KEYS = ("load", "tokenizer", "hf_model", "model_path")  # Job.model_dirs' arguments
LARGE_DATASET = 10 << 30  # bytes: above this, Megatron's default 10-minute timeout is tight
MEGATRON_DEFAULT_TIMEOUT = 10


def _skip_unless(job, verdict, *kinds) -> bool:
    if job.kind in kinds:
        return False
    names = {"mindspeed": "MindSpeed (Megatron)", "verl": "verl", "roll": "ROLL"}
    verdict.skipped(job.name, message=f"{job.name}: only for {' / '.join(names[k] for k in kinds)} jobs "
                                      f"(this is a {names[job.kind]} job)")
    return True


def _fail(verdict, job, arg, observed, expected, **kw):
    verdict.failed(job.name, observed=observed, expected=expected, where=job.where(arg), **kw)


def _unknown(job, *keys):
    """The arguments among ``keys`` the job gives with a value known only when it runs (set from
    outside the script, or in a branch).  They are given, so their defaults do not apply either:
    a check that needs one says it cannot tell, never assumes the default."""
    return [a for a in (job.arg(k) for k in keys) if a is not None and a.unresolved]


def _not_checked(job, args) -> str:
    """``--tensor-model-parallel-size ${TP} (p.sh:2) is set from outside the script; not checked``."""
    # One hidden variable ($PAR_ARGS set in a branch) stands for several keys: say it once.
    return "; ".join(dict.fromkeys(f"{job.cite(a)} {a.unresolved}" for a in args)) + "; not checked"


def _model_source(job, job_facts, roles=("hf", "load")):
    """The first readable model directory of the job with a config.json, and its arg."""
    for role, arg in job.model_dirs():
        if role not in roles:
            continue
        d, where, _ = job_facts.model(arg.value)
        if d is not None and d.texts.get("config.json") is not None:
            return d, arg, where
    return None, None, None


def _read_on(where, job_facts) -> str:
    return "" if where is None or job_facts.local else f" (read on {where})"


# -- M14 ----------------------------------------------------------------------------------

@check("job.script_line_endings", title="Launch scripts have Unix (LF) line endings, each command whole",
       scope="cluster", reference=faq.M14, needs=NEEDS,
       remedy="Convert the script to Unix line endings: dos2unix SCRIPT (or in vim :set ff=unix, then :w).")
def test_script_line_endings(job, verdict):
    if not job.is_script:
        verdict.skipped(job.name, message=f"{job.name} is a config file, not a launch script")
        return
    for line, why in job.broken:
        # As bash reads the script, like its line endings: the launch runs, without these.
        verdict.failed(f"{job.name}:{line}", where=f"{job.path}:{line}", observed=why,
                       expected="the launch command whole: every line but its last ending in \\ with nothing "
                                "after it, and no comment line inside it",
                       remedy="Join the command again: end the line above with \\ (nothing after it), and move a "
                              "commented-out flag out of the command (or delete it); then re-run the preflight.")
    if not job.crlf_lines:
        if not job.broken:
            verdict.passed(job.name, message=f"{job.name}: LF line endings, every command whole")
        return
    lines = job.crlf_lines
    shown = ", ".join(str(n) for n in lines[:5]) + (", ..." if len(lines) > 5 else "")
    verdict.failed(job.name, where=f"{job.path}:{lines[0]}",
                   observed=f"{len(lines)} line(s) end in CRLF (\\r\\n), lines {shown}: bash reads the \\r as part "
                            f"of each command ('syntax error near unexpected token', '$'\\r': command not found')",
                   expected="LF (\\n) line endings only")


# -- M7 -----------------------------------------------------------------------------------

def _kv_heads(job, job_facts):
    """(value, described source) of the number of KV heads (query groups)."""
    a = job.arg("num_query_groups")
    gqa = "gqa" in job.args
    # Megatron reads the --num-query-groups flag only with --group-query-attention; MindSpeed-MM's
    # model json (text_decoder.num_query_groups) needs no switch.
    if a is not None and (gqa or a.name != "--num-query-groups"):
        return a.int_value(job.path), f"{a.shown()} ({job.where(a)})"
    heads = job.arg("num_attention_heads")
    # MindSpeed-MM scripts carry placeholder model flags (--num-attention-heads 1): its model is
    # the --mm-model json.
    if heads is not None and not heads.unresolved and not gqa and "mm_model" not in job.args:
        ignored = f"; {a.shown()} is ignored without it" if a is not None else ""
        return heads.int_value(job.path), (f"{heads.shown()} ({job.where(heads)}) without --group-query-attention "
                                           f"(one KV head per attention head{ignored})")
    d, arg, where = _model_source(job, job_facts)
    if d is None:
        return None, None
    for key in ("num_key_value_heads", "num_attention_heads"):
        v = d.config_value(key)
        if v:
            return v, f"{key} {v} in {d.file('config.json')}{_read_on(where, job_facts)}"
    return None, None


@check("job.tp_kv_heads", title="Tensor-parallel size fits the model's KV heads", scope="cluster",
       reference=faq.M7, needs=NEEDS,
       remedy=("Choose a tensor-parallel size that is at most num_key_value_heads and divides it (e.g. 1, 2, 4 or 8 "
               "for 8 KV heads); use pipeline or data parallelism for the rest, and re-convert the weights "
               "with the same TP."))
def test_tp_kv_heads(job, job_facts, verdict):
    if _skip_unless(job, verdict, "mindspeed", "verl"):
        return
    rollout = job.kind == "verl" and _rollout_tp_fits(job, job_facts, verdict)
    tp_arg = job.arg("tp")
    if tp_arg is None:
        if not rollout:
            verdict.skipped(job.name, message=f"{job.name}: no tensor-model-parallel size set (TP 1)")
        return
    unknown = _unknown(job, "tp", "num_query_groups")
    if unknown:
        verdict.skipped(job.name, message=_not_checked(job, unknown))
        return
    tp = tp_arg.int_value(job.path)
    if tp < 1:
        verdict.skipped(job.name, message=f"{tp_arg.shown()}: not a size (job.parallel_fits says so)")
        return
    if tp == 1:
        verdict.passed(job.name, message=f"{tp_arg.shown()}: one rank holds every KV head")
        return
    kv, source = _kv_heads(job, job_facts)
    mp = job.arg("model_path") if job.kind == "verl" else None
    if (kv is None and mp is not None and not mp.unresolved and _hub_id(mp.value)
            and job_facts.model(mp.value)[0] is None):
        # verl downloads a Hub id when the job starts (as for the rollout TP and job.weight_bucket).
        verdict.skipped(job.name, message=f"{job.name}: {tp_arg.shown()} set, but {job.cite(mp)} is not a directory "
                                          f"on the nodes, so verl takes it for a Hub model id and downloads it when "
                                          f"the job starts: its KV heads cannot be read before; not checked")
        return
    if kv is None:
        dirs = ", ".join(f"{a.name} {a.value}" for _, a in job.model_dirs())
        config = (f"no readable config.json in {dirs}" if dirs
                  else "no model directory in the job to read a config.json from")
        said = []
        if job.kind == "mindspeed":
            groups, heads = job.arg("num_query_groups"), job.arg("num_attention_heads")
            said.append(f"{groups.shown()} is ignored without --group-query-attention" if groups is not None
                        else "no --num-query-groups")
            if heads is not None and heads.unresolved:
                said.append(f"{heads.shown()} {heads.unresolved}")
        verdict.error(job.name, message=f"{job.name}: {tp_arg.shown()} set, but the model's KV heads are unknown "
                                        f"({'; '.join(said + [config])})")
        return
    if tp > kv:
        _fail(verdict, job, tp_arg, observed=f"{tp_arg.shown()} > {source}",
              expected=f"a tensor-parallel size ≤ {kv} that divides {kv}")
    elif kv % tp:
        _fail(verdict, job, tp_arg, observed=f"{tp_arg.shown()} does not divide {source} ({kv} % {tp} = {kv % tp})",
              expected=f"a tensor-parallel size that divides {kv}")
    else:
        verdict.passed(job.name, message=f"{tp_arg.shown()} divides {source}")


def _rollout_tp_fits(job, job_facts, verdict) -> bool:
    """verl's rollout TP against the model's heads, as vLLM refuses it at start-up: the attention
    heads divisible by TP, and the KV heads divisible by TP or TP by them (replicated).  False
    when the job sets no rollout TP."""
    rtp = job.arg("rollout_tp")
    if rtp is None:
        return False
    subject = f"{job.name} rollout"
    if rtp.unresolved:
        verdict.skipped(subject, message=_not_checked(job, [rtp]))
        return True
    tp = rtp.int_value(job.path)
    if tp < 1:
        verdict.skipped(subject, message=f"{rtp.shown()}: not a size (job.parallel_fits says so)")
        return True
    if tp == 1:
        verdict.passed(subject, message=f"{rtp.shown()}: one rank holds every head")
        return True
    d, _, where = _model_source(job, job_facts)
    heads = d.config_value("num_attention_heads") if d is not None else None
    if not heads:
        # A Hub id or a model not on this machine: nothing to hold it against (no fault of the job).
        verdict.skipped(subject, message=f"{job.name}: {rtp.shown()} set, but the model's attention heads are "
                                         f"unknown (no readable config.json with num_attention_heads): not checked")
        return True
    kv = d.config_value("num_key_value_heads") or heads
    source = f"num_attention_heads {heads}, num_key_value_heads {kv} in {d.file('config.json')}{_read_on(where, job_facts)}"
    if heads % tp:
        verdict.failed(subject, where=job.where(rtp), observed=f"{rtp.shown()} does not divide {source} "
                                                               f"({heads} % {tp} = {heads % tp}): vLLM refuses to start",
                       expected=f"a rollout tensor-parallel size that divides {heads}")
    elif kv % tp and tp % kv:
        verdict.failed(subject, where=job.where(rtp), observed=f"{rtp.shown()} and {source}: neither divides the "
                                                               f"other, and vLLM cannot split or replicate the KV heads",
                       expected=f"a rollout tensor-parallel size that divides {kv}, or a multiple of it")
    else:
        verdict.passed(subject, message=f"{rtp.shown()} fits {source}")
    return True


# -- M9 -----------------------------------------------------------------------------------

def _world(job):
    """(world size, how it is written) from the job itself; (None, None) when it does not say,
    or says only when it runs (see :func:`_world_unknown`)."""
    ws = job.arg("world_size")
    if ws is not None:
        return (None, None) if ws.unresolved else (ws.int_value(job.path), ws.shown())
    nn, npn = job.arg("nnodes"), job.arg("nproc_per_node")
    if job.kind == "verl" and (nn is not None or npn is not None) and not any(
            a is not None and a.unresolved for a in (nn, npn)):
        # verl's ppo_trainer.yaml: trainer.nnodes 1 and trainer.n_gpus_per_node 8 when not overridden.
        sizes = [(a.int_value(job.path), a.shown()) if a is not None else (default, f"{default} (verl's default {key})")
                 for a, key, default in ((nn, "trainer.nnodes", VERL_NNODES), (npn, "trainer.n_gpus_per_node",
                                                                              VERL_GPUS_PER_NODE))]
        n = sizes[0][0] * sizes[1][0]
        return n, f"{sizes[0][1]} × {sizes[1][1]} = {n}"
    if nn is not None and npn is not None and not (nn.unresolved or npn.unresolved):
        n = nn.int_value(job.path) * npn.int_value(job.path)
        return n, f"{nn.shown()} × {npn.shown()} = {n}"
    if job.kind == "mindspeed" and nn is None and npn is not None and not npn.unresolved:
        # torchrun without --nnodes runs one node, however many the inventory lists.
        n = npn.int_value(job.path)
        return n, f"{npn.shown()} on one node (torchrun's default --nnodes 1) = {n}"
    return None, None


VERL_NNODES, VERL_GPUS_PER_NODE = 1, 8  # verl/trainer/config/ppo_trainer.yaml


def _world_unknown(job) -> list:
    """The world-size arguments known only when the job runs: then the inventory's NPU count is
    no stand-in for the world size (the job may use fewer nodes)."""
    if job.arg("world_size") is not None:
        return _unknown(job, "world_size")
    return _unknown(job, "nnodes", "nproc_per_node")


@check("job.parallel_fits", title="TP × PP × CP divides the world size and fits the NPUs", scope="cluster",
       reference=faq.M9, needs=NEEDS,
       remedy=("Make TP × PP × CP divide the number of NPUs the job uses (nodes × NPUs per node), and ask for no "
               "more nodes or NPUs per node than the cluster has; the rest of the NPUs become data parallelism."))
def test_parallel_fits(job, job_facts, verdict):
    npus = job_facts.npus()
    problems = []  # (arg, observed, expected)
    # A parallel size of 0 (or below) is refused by the framework, and would divide by zero below.
    sizes = [a for a in (job.arg(k) for k in ("tp", "pp", "cp", "ep", "etp", "rollout_tp", "nnodes",
                                              "nproc_per_node", "world_size"))
             if a is not None and not a.unresolved and a.int_value(job.path) < 1]
    if sizes:
        for arg in sizes:
            _fail(verdict, job, arg, observed=f"{arg.shown()}", expected="a size of 1 or more")
        return
    world, world_text = _world(job)
    if job.kind == "roll":
        # ROLL sizes its nodes by the NPUs each has (current_platform.device_count() replaces the
        # YAML's num_gpus_per_node in BaseConfig.__post_init__), device d on node d // that count.
        npn = job.arg("nproc_per_node")
        total = sum(npus.values()) if npus and all(npus.values()) else None
        if total is not None:
            world_text = f"{total} NPUs on {len(npus)} inventory host(s)"
        elif npn is not None and not npn.unresolved:
            # num_gpus_per_node is one node's size; the mappings say how many nodes (devices 0-15 on
            # 8-NPU nodes are two), and only an inventory says whether the cluster has them.
            per_node = npn.int_value(job.path)
            used = [max(devices) for _, (_, devices) in job.device_mappings.items() if devices]
            if used and per_node > 0 and max(used) >= per_node:
                needed = max(used) // per_node + 1
                verdict.skipped(job.name, message=f"{job.name}: the device mappings span {needed} node(s) of "
                                                  f"{per_node} NPUs ({npn.shown()}); no inventory to hold them "
                                                  f"against (give --inventory to check)")
                return
            total = per_node
            world_text = f"{npn.shown()} (one node)"
        else:
            verdict.skipped(job.name, message=_not_checked(job, [npn]) if npn is not None else
                            f"{job.name}: the number of NPUs is unknown (no inventory, no num_gpus_per_node)")
            return
        for actor, (arg, devices) in job.device_mappings.items():
            if devices and max(devices) >= total:
                problems.append((arg, f"{arg.shown()} uses NPU {max(devices)}",
                                 f"device indexes below {total} ({world_text})"))
    else:
        # What the job sets only when it runs is not checked, and never read as its default.
        unknown = _unknown(job, "tp", "pp", "cp") + _world_unknown(job) + _unknown(job, "rollout_tp")
        parts = [a for a in (job.arg(k) for k in ("tp", "pp", "cp")) if a is not None]
        product = None if any(a.unresolved for a in parts) else (
            math.prod(a.int_value(job.path) for a in parts) if parts else 1)
        product_text = " × ".join(a.shown() for a in parts) + f" = {product}" if parts else "1"
        nn, npn = job.arg("nnodes"), job.arg("nproc_per_node")
        job_world = world is not None  # from the job itself, before the inventory's NPUs stand in
        if npus and all(npus.values()):
            per_node = min(npus.values())
            if npn is not None and not npn.unresolved and npn.int_value(job.path) > per_node:
                small = [h for h, n in npus.items() if n < npn.int_value(job.path)]
                problems.append((npn, f"{npn.shown()} but {fold(small)} has {per_node} NPUs",
                                 f"at most {per_node} processes per node"))
            if nn is not None and not nn.unresolved and nn.int_value(job.path) > len(npus):
                problems.append((nn, f"{nn.shown()} but the inventory has {len(npus)} host(s)",
                                 f"at most {len(npus)} nodes"))
            if world is None and not _world_unknown(job):
                world = sum(npus.values())
                world_text = f"{world} NPUs on {len(npus)} inventory host(s)"
        layout_problem = world is not None and product is not None and bool(world % product)
        if layout_problem:
            problems.append((parts[0] if parts else None,
                             f"{product_text} does not divide the world size {world_text}",
                             f"TP × PP × CP a divisor of {world}"))
        # Megatron lays the experts over the ranks (core 0.12: the world a multiple of expert-TP × EP × PP,
        # expert-TP being TP unless --expert-tensor-parallel-size says otherwise; core 0.8: DP × CP a
        # multiple of EP, the same rule with expert-TP = TP).
        ep, given_etp = job.arg("ep"), job.arg("etp")
        etp = given_etp or job.arg("tp")
        sizes = [a for a in (etp, job.arg("pp")) if a is not None]
        if world is not None and (ep is not None or given_etp is not None) and \
                not any(a is not None and a.unresolved for a in (*sizes, ep)):
            rest = math.prod(a.int_value(job.path) for a in sizes) if sizes else 1
            epn = ep.int_value(job.path) if ep is not None else 1
            named = " × ".join(a.shown() for a in sizes) or "TP 1 × PP 1"
            kind = "expert-TP" if given_etp is not None else "TP (expert-TP by default)"
            if world % rest and given_etp is not None:
                problems.append((given_etp, f"{named} = {rest} does not divide the world size {world_text}",
                                 f"expert-TP × EP × PP a divisor of {world}"))
            elif epn > 1 and not world % rest and (world // rest) % epn:
                problems.append((ep, f"{ep.shown()} does not divide the {world // rest} ranks left by {named} in "
                                     f"the world size {world_text}",
                                 f"an expert-parallel size that divides world / ({kind} × PP) = {world // rest}"))
        # Megatron asserts the global batch a multiple of micro batch × data parallel size, DP being
        # what TP × PP × CP leave of the world.
        gbs, mbs = job.arg("gbs"), job.arg("mbs")
        batches = [a for a in (gbs, mbs) if a is not None and not a.unresolved and a.int_value(job.path) < 1]
        if batches and not layout_problem:
            # (GBS=$((MBS*ACC*DP)) is 0 when TP x PP leave no DP: that finding, above, is the cause.)
            problems.extend((a, f"{a.shown()}", "a batch size of 1 or more") for a in batches)
        # Only on the job's own world size: the inventory's NPUs may be more than the job uses.
        if world is not None and product and not world % product and gbs is not None and job_world and not batches \
                and "decrease_batch" not in job.args and not any(a is not None and a.unresolved for a in (gbs, mbs)):
            dp, micro = world // product, mbs.int_value(job.path) if mbs is not None else 1
            if gbs.int_value(job.path) % (micro * dp):
                problems.append((gbs, f"{gbs.shown()} is not a multiple of "
                                      f"{mbs.shown() if mbs is not None else 'the micro batch size 1'} × data-parallel "
                                      f"size {dp} (world size {world_text} / {product_text})",
                                 f"a global batch size divisible by {micro * dp}"))
        rtp = job.arg("rollout_tp")
        if world is not None and rtp is not None and not rtp.unresolved and world % rtp.int_value(job.path):
            problems.append((rtp, f"{rtp.shown()} does not divide the world size {world_text}",
                             f"a rollout tensor-parallel size that divides {world}"))
        if not problems and unknown:
            verdict.skipped(job.name, message=_not_checked(job, unknown))
            return
        if not problems and world is None:
            verdict.skipped(job.name, message=f"{job.name}: the world size is unknown (no --nnodes/--nproc_per_node "
                                              f"in the job and no inventory)")
            return
    if not problems:
        verdict.passed(job.name, message=f"{job.name}: parallel layout fits {world_text}")
        return
    for arg, observed, expected in problems:
        _fail(verdict, job, arg, observed=observed, expected=expected)


# -- M10 ----------------------------------------------------------------------------------

@check("job.pp_layers", title="Every pipeline stage has LLM layers and the split adds up", scope="cluster",
       reference=faq.M10, needs=NEEDS,
       remedy=("Give every pipeline stage at least one LLM layer (e.g. [1, 7, 10, 10] instead of [0, 8, 10, 10]), "
               "or, for a stage holding only frozen ViT layers, pass --enable-dummy-optimizer (MindSpeed-MM); "
               "make each list as long as --pipeline-model-parallel-size and its sum equal to the model's layers, "
               "and convert the weights with the same split."))
def test_pp_layers(job, job_facts, verdict):
    if _skip_unless(job, verdict, "mindspeed"):
        return
    pp_arg = job.arg("pp")
    unknown = _unknown(job, "pp")
    pp = 1 if pp_arg is None else None if pp_arg.unresolved else pp_arg.int_value(job.path)
    if not job.pp_layers:
        split_unknown = _unknown(job, "num_layer_list", "mm_model")
        if split_unknown or (unknown and job.model_json_problem):
            verdict.skipped(job.name, message=_not_checked(job, split_unknown or unknown))
        elif pp is not None and pp > 1 and job.model_json_problem:
            verdict.error(job.name, message=f"{job.name}: {pp_arg.shown()}, but the layer split is unknown: "
                                            f"{job.model_json_problem}")
        else:
            verdict.skipped(job.name, message=f"{job.name}: no pipeline layer split in the job"
                                              + (f" ({pp_arg.shown()})" if pp_arg else ""))
        return
    problems = []
    for part, layers in sorted(job.pp_layers.items()):
        shown = f"{layers.arg.shown()} ({job.where(layers.arg)})"
        if pp is not None and pp_arg is not None and len(layers.stages) != pp:
            problems.append((layers.arg, f"{shown} has {len(layers.stages)} stages but {pp_arg.shown()} "
                                         f"({job.where(pp_arg)})", f"{pp} stages"))
        if part == "llm":
            zeros = [i for i, n in enumerate(layers.stages) if n == 0]
            vit = job.pp_layers.get("vit")
            if zeros and "dummy_optimizer" in job.args:
                # --enable-dummy-optimizer is MindSpeed-MM's answer to FAQ #10: a stage whose layers are
                # all frozen (the ViT) gets a dummy optimizer. Only a stage with no layer at all is left.
                zeros = [i for i in zeros if vit is None or i >= len(vit.stages) or vit.stages[i] == 0]
            if zeros:
                problems.append((layers.arg, f"{shown}: stage {', '.join(map(str, zeros))} has 0 LLM layers",
                                 "at least one LLM layer on every stage"))
        total = None
        source = None
        if layers.num_layers is not None:
            total, source = int(layers.num_layers.value), f"{layers.num_layers.shown()} ({job.where(layers.num_layers)})"
        elif part == "llm" and _unknown(job, "num_layers"):
            unknown += _unknown(job, "num_layers")  # the job's own layer count, not config.json's
        elif part == "llm":
            d, _, where = _model_source(job, job_facts)
            v = d.config_value("num_hidden_layers") if d is not None else None
            if v:
                total, source = v, f"num_hidden_layers {v} in {d.file('config.json')}{_read_on(where, job_facts)}"
        if total is not None and sum(layers.stages) != total:
            problems.append((layers.arg, f"{shown} sums to {sum(layers.stages)} but {source}",
                             f"stages summing to {total}"))
    if problems:
        for arg, observed, expected in problems:
            _fail(verdict, job, arg, observed=observed, expected=expected)
    elif unknown:
        verdict.skipped(job.name, message=_not_checked(job, unknown))
    else:
        verdict.passed(job.name, message="; ".join(f"{l.arg.shown()}" for l in job.pp_layers.values()))


# -- M5 / M6 ------------------------------------------------------------------------------

@check("job.weights_format", title="A Megatron job loads converted weights, not raw HuggingFace ones",
       scope="cluster", reference=faq.M5, needs=NEEDS,
       remedy=("Convert the HuggingFace weights to the MindSpeed (Megatron) format first (mm-convert ... hf_to_mm for "
               "MindSpeed-MM, convert_ckpt.py for MindSpeed-LLM) with the job's TP/PP, and point --load at the "
               "converted folder."))
def test_weights_format(job, job_facts, verdict):
    if job.kind != "mindspeed":
        verdict.skipped(job.name, message=f"{job.name}: {job.kind} loads HuggingFace weights directly")
        return
    load = job.arg("load")
    if load is None:
        verdict.skipped(job.name, message=f"{job.name}: no --load (training from scratch)")
        return
    if load.unresolved:
        verdict.skipped(job.name, message=_not_checked(job, [load]))
        return
    d, where, why = job_facts.model(load.value)
    if d is None:
        verdict.error(job.name, message=f"{job.cite(load)}: not evaluated: {why}")
        return
    layout = d.layout()
    convert = job.arg("hf2mg_convert")
    if "model_index.json" in d.top_files():
        # A diffusers pipeline (FLUX.1-dev for MindSpeed-MM's DanceGRPO): its trainer loads it as it is.
        verdict.skipped(job.name, message=f"{load.shown()}: a diffusers pipeline (model_index.json), loaded as "
                                          f"it is; not a Megatron checkpoint to convert")
        return
    if layout == "hf" and convert is not None:
        verdict.passed(job.name, message=f"{load.shown()}: HuggingFace weights, converted when the job starts "
                                         f"({convert.name}, {job.where(convert)})")
    elif layout == "hf":
        files = d.hf_weight_files()
        shown = ", ".join(files[:3]) + (", ..." if len(files) > 3 else "")
        _fail(verdict, job, load, observed=f"{load.shown()} holds HuggingFace weights ({shown}){_read_on(where, job_facts)}",
              expected="a converted Megatron checkpoint (latest_checkpointed_iteration.txt, iter_*/ or release/ "
                       "with mp_rank_* folders)")
    elif layout == "megatron" and d.tracker_problem():
        _fail(verdict, job, load, observed=f"{load.shown()}: {d.tracker_problem()}{_read_on(where, job_facts)}",
              expected="latest_checkpointed_iteration.txt naming an iter_*/ (or release/) folder of the checkpoint",
              remedy="Point --load at the folder the conversion or the last run wrote whole: its "
                     "latest_checkpointed_iteration.txt names the iteration (or 'release') whose folder holds the "
                     "mp_rank_* shards; re-run the conversion if it is missing.")
    elif layout == "megatron":
        verdict.passed(job.name, message=f"{load.shown()}: Megatron checkpoint {d.megatron_iteration() or ''}")
    elif any(re.fullmatch(r"mp_rank_\d+(_\d+)*", name) for name in d.top_dirs()):
        # --load at iter_0000001 itself: Megatron looks for the tracker file there, finds none and
        # starts from random weights (FAQ 17), though the shards are right below.
        parent = os.path.dirname(load.value.rstrip("/")) or ("/" if load.value.startswith("/") else ".")
        _fail(verdict, job, load, observed=f"{load.shown()} holds the mp_rank_* shards themselves: it is one "
                                           f"iteration's folder, not the checkpoint{_read_on(where, job_facts)}",
              expected="--load naming the checkpoint folder (the one holding latest_checkpointed_iteration.txt and "
                       "the iter_*/ or release/ folders)",
              remedy=f"Point --load at {parent}, the folder above it (with its latest_checkpointed_iteration.txt); "
                     f"Megatron picks the iteration from that file.")
    else:
        _fail(verdict, job, load, severity="warning",
              observed=f"{load.shown()} holds no checkpoint (no iter_*/release folder, no weights){_read_on(where, job_facts)}",
              expected="a converted checkpoint to start from (or no --load when training from scratch)")


PARALLEL_FLAGS = {"tp": "--tensor-model-parallel-size", "pp": "--pipeline-model-parallel-size",
                  "ep": "--expert-model-parallel-size"}


def _job_size(job, key) -> int | None:
    """The job's TP/PP/EP: 1 when not given (Megatron's default), None when given but known only at run time."""
    a = job.arg(key)
    return 1 if a is None else None if a.unresolved else a.int_value(job.path)


@check("job.weights_parallel", title="The converted checkpoint's TP/PP/EP match the job's", scope="cluster",
       reference=faq.M6, needs=NEEDS,
       remedy=("Re-convert (or re-shard) the weights with the TP/PP/EP the training script uses, with the same "
               "llm_pp_layers/vit_pp_layers, or change the script to the checkpoint's TP/PP/EP."))
def test_weights_parallel(job, job_facts, verdict):
    if _skip_unless(job, verdict, "mindspeed"):
        return
    load = job.arg("load")
    if load is None:
        verdict.skipped(job.name, message=f"{job.name}: no --load")
        return
    if load.unresolved:
        verdict.skipped(job.name, message=_not_checked(job, [load]))
        return
    d, where, why = job_facts.model(load.value)
    if d is None:
        verdict.error(job.name, message=f"{job.cite(load)}: not evaluated: {why}")
        return
    split = d.megatron_split()
    if split is None:
        verdict.skipped(job.name, message=f"{load.shown()}: no Megatron mp_rank_* folders to compare "
                                          f"(see job.weights_format)")
        return
    ranks = d.megatron_ranks()
    folders = f"{d.megatron_iteration()}/{ranks[0]} .. {ranks[-1]}"
    unknown = _unknown(job, "tp", "pp", "ep")
    have = {"tp": split.tp}
    if split.pp_ep() is not None:
        have["pp"], have["ep"] = split.pp_ep()
        shown = f"{load.shown()} is split TP {split.tp}, PP {have['pp']}" + (
            f", EP {have['ep']}" if have["ep"] != 1 or job.arg("ep") is not None else "") + f" ({folders})"
    else:
        # mp_rank_TT_XXX: Megatron writes the suffix for PP > 1 or for EP > 1, the same way.
        n = split.suffixes[0]
        shown = f"{load.shown()} is split TP {split.tp}, PP {n} or EP {n} (one rank suffix: {folders})"
        pp, ep = _job_size(job, "pp"), _job_size(job, "ep")
        if pp is None or ep is None:
            pass  # the unresolved flag is in `unknown`, which says why
        elif pp > 1 and ep <= 1:
            have["pp"], have["ep"] = n, 1
            shown = (f"{load.shown()} is split TP {split.tp}, PP {n} ({folders}: one rank suffix, taken as PP "
                     f"as in the job)")
        elif ep > 1 and pp <= 1:
            have["pp"], have["ep"] = 1, n
            shown = (f"{load.shown()} is split TP {split.tp}, PP 1, EP {n} ({folders}: one rank suffix, taken as EP "
                     f"as in the job)")
        elif pp > 1 and ep > 1:  # Megatron would have written mp_rank_TT_PPP_EEE
            pp_a, ep_a = job.arg("pp"), job.arg("ep")
            _fail(verdict, job, ep_a, observed=f"{shown}{_read_on(where, job_facts)}, but the job sets {pp_a.shown()} "
                                               f"and {ep_a.shown()} ({job.where(ep_a)})",
                  expected=f"a checkpoint converted with PP {pp} and EP {ep} (mp_rank_TT_PPP_EEE folders)")
            return
        else:
            # PP 1 and EP 1: Megatron reads mp_rank_TT folders without a suffix, whichever size the
            # suffix counts.
            pp_a, ep_a = job.arg("pp"), job.arg("ep")
            sizes = " and ".join(a.shown() if a is not None else f"{k} 1 (no {PARALLEL_FLAGS[k.lower()]})"
                                 for k, a in (("PP", pp_a), ("EP", ep_a)))
            _fail(verdict, job, pp_a or ep_a or load,
                  observed=f"{shown}{_read_on(where, job_facts)}, but the job sets {sizes}",
                  expected=f"a checkpoint converted with PP 1 and EP 1 (mp_rank_TT folders without a suffix), "
                           f"or the job's --pipeline-model-parallel-size (or --expert-model-parallel-size) {n}")
            return
    bad = False
    for key, flag in PARALLEL_FLAGS.items():
        a, want = job.arg(key), _job_size(job, key)
        if key not in have or want is None:
            continue
        if want != have[key]:
            bad = True
            name = a.shown() if a is not None else f"{key.upper()} 1 (no {flag})"
            _fail(verdict, job, a or load, observed=f"{shown}{_read_on(where, job_facts)}, but the job sets {name}",
                  expected=f"a checkpoint converted with {key.upper()} {want}")
    if bad:
        return
    if unknown:
        verdict.skipped(job.name, message=f"{shown}; {_not_checked(job, unknown)}")
    else:
        verdict.passed(job.name, message=f"{shown}: matches the job")


# -- M8 -----------------------------------------------------------------------------------

_SHARD_NAME = re.compile(r".+-\d+-of-\d+\.safetensors")  # -00001-of-00004, -00001-of-000163, -1-of-61


@check("job.safetensors_index", title="model.safetensors.index.json names only shards that exist", scope="cluster",
       reference=faq.M8, needs=NEEDS,
       remedy=("Regenerate model.safetensors.index.json from the shard files actually in the folder (e.g. load and "
               "save_pretrained the model, or rerun mg2hf), or copy the missing shards."))
def test_safetensors_index(job, job_facts, verdict):
    checked = 0
    for role, arg in job.model_dirs():
        d, where, why = job_facts.model(arg.value)
        if d is None or d.layout() != "hf":
            continue
        checked += 1
        try:
            shards = d.index_shards()
        except ValueError as exc:
            _fail(verdict, job, arg, observed=f"{arg.shown()}: {exc}", expected="a readable index")
            continue
        files = set(d.top_files())
        st = sorted(f for f in files if f.endswith(".safetensors"))
        # Shards are named model-00001-of-00004.safetensors; separate models side by side
        # (ae.safetensors and flux1-dev.safetensors in FLUX.1-dev) need no index.
        numbered = [f for f in st if _SHARD_NAME.fullmatch(f)]
        if shards is None:
            if len(numbered) > 1:
                _fail(verdict, job, arg, observed=f"{arg.shown()} has {len(numbered)} safetensors shards but no "
                                                  f"model.safetensors.index.json{_read_on(where, job_facts)}",
                      expected="an index naming every shard")
            else:
                verdict.passed(job.name, message=f"{arg.shown()}: no sharded weights "
                                                 f"({', '.join(st[:3]) or 'no safetensors'}), no index needed")
            continue
        missing = sorted(s for s in shards if s not in files)
        unused = sorted(set(st) - set(shards))
        if missing:
            m = missing[0]
            _fail(verdict, job, arg,
                  observed=f"{d.file('model.safetensors.index.json')} references {len(missing)} shard(s) not in "
                           f"{arg.shown()}: {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''} "
                           f"(e.g. {shards[m][0]}){_read_on(where, job_facts)}",
                  expected="every shard of the weight_map present")
        elif unused:
            _fail(verdict, job, arg, severity="warning",
                  observed=f"{arg.shown()} has shard(s) the index does not name: {', '.join(unused[:3])}",
                  expected="an index that matches the shard files")
        else:
            verdict.passed(job.name, message=f"{arg.shown()}: index names {len(shards)} shard(s), all present")
    if not checked:
        unknown = _unknown(job, *MODEL_DIR_KEYS)
        verdict.skipped(job.name, message=_not_checked(job, unknown) if unknown
                        else f"{job.name}: no HuggingFace weight folder read")


# -- verl Q3 ------------------------------------------------------------------------------

def next_power_of_two(x: float) -> int:
    return 1 if x <= 1 else 2 ** math.ceil(math.log2(x))


# verl sends the actor's weights in float32 whatever the checkpoint holds: the FAQ's error names a
# torch.float32 embedding of a bf16 Qwen2 checkpoint, and its table sizes every model in float32.
SENT_BYTES = 4


@check("job.weight_bucket", title="The largest weight fits verl's weight-transfer bucket", scope="cluster",
       reference=faq.V_Q3, needs=NEEDS,
       remedy=("Raise actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes to the suggested "
               "power of two (at least 1.2 × the largest tensor); larger buckets cost worker memory, so do not "
               "go far beyond it."))
def test_weight_bucket(job, job_facts, verdict):
    if _skip_unless(job, verdict, "verl"):
        return
    mp = job.arg("model_path")
    if mp is None:
        verdict.skipped(job.name, message=f"{job.name}: no actor_rollout_ref.model.path")
        return
    if mp.unresolved:
        verdict.skipped(job.name, message=_not_checked(job, [mp]))
        return
    d, where, why = job_facts.model(mp.value)
    if d is None and _hub_id(mp.value):
        # verl downloads a Hub id (copy_to_local) when the job starts: nothing on disk to read yet.
        verdict.skipped(job.name, message=f"{job.cite(mp)} is not a directory on the nodes, so verl takes it for a "
                                          f"Hub model id and downloads it when the job starts: its tensors cannot "
                                          f"be read before; not checked (if it is meant as a local path, it does "
                                          f"not exist: see job.data_paths)")
        return
    if d is None:
        verdict.error(job.name, message=f"{job.cite(mp)}: not evaluated: {why}")
        return
    t = d.largest_tensor()
    if t is not None:
        stored = DTYPE_NAMES.get(t.dtype, t.dtype)
        what = f"largest tensor {t.name} {list(t.shape)} " + (
            "float32" if stored == "float32" else f"{stored} on disk, float32 as verl sends it")
        mb = math.prod(t.shape) * SENT_BYTES / 2 ** 20
    else:
        vocab, hidden = d.config_value("vocab_size"), d.config_value("hidden_size")
        if not vocab or not hidden:
            verdict.error(job.name, message=f"{mp.shown()}: no safetensors headers and no vocab_size/hidden_size "
                                            f"in config.json to size the largest tensor")
            return
        what, mb = f"embedding [{vocab}, {hidden}] float32 (from config.json)", vocab * hidden * SENT_BYTES / 2 ** 20
    bucket = job.arg("bucket_mb")
    if bucket is not None and bucket.unresolved:  # set, so verl's default is not the one it uses
        verdict.skipped(job.name, message=f"{what} = {mb:.1f} MB needs a bucket of at least {mb:.1f} MB; "
                                          + _not_checked(job, [bucket]))
        return
    if bucket is not None:
        bucket_mb, bshown = bucket.int_value(job.path), f"{bucket.shown()} ({job.where(bucket)})"
    else:
        bucket_mb = DEFAULT_BUCKET_MB
        bshown = f"update_weights_bucket_megabytes={DEFAULT_BUCKET_MB} (verl's default; not set in {job.name})"
    suggest = next_power_of_two(1.2 * mb)
    arithmetic = f"suggest {suggest} (next power of two ≥ 1.2 × {mb:.1f} = {1.2 * mb:.1f})"
    if bucket_mb < mb:
        verdict.failed(job.name, where=job.where(bucket) if bucket else job.path,
                       observed=f"{what} = {mb:.1f} MB > {bshown}{_read_on(where, job_facts)}; {arithmetic}",
                       expected=f"update_weights_bucket_megabytes ≥ {mb:.1f}")
    else:
        verdict.passed(job.name, message=f"{what} = {mb:.1f} MB ≤ {bshown}")


# -- ROLL ---------------------------------------------------------------------------------

# ROLL's Ascend FAQ, which these two checks follow, says neither colocated roles nor Megatron run on
# NPU; ROLL's own newer Ascend examples do both (with HCCL_NPU_SOCKET_PORT_RANGE=auto, and MindSpeed's
# MegatronAdaptor on validated A2/A3 setups). A warning then, not NOT READY for an upstream example.
@check("job.roll_device_mapping", title="ROLL actor_train and actor_infer use different NPUs, or colocate "
                                        "with HCCL_NPU_SOCKET_PORT_RANGE", severity="warning", scope="cluster",
       reference=faq.R_COLOCATED, needs=NEEDS,
       remedy=("Give actor_train and actor_infer disjoint device_mapping lists, e.g. actor_train: list(range(0, 4)) "
               "and actor_infer: list(range(4, 8)), as ROLL's Ascend FAQ asks; or, with a ROLL release that "
               "colocates on NPU, export HCCL_NPU_SOCKET_PORT_RANGE=auto for every process (system_envs in the "
               "YAML, or the launch script) so that the processes sharing an NPU do not all bind port 16666."))
def test_roll_device_mapping(job, verdict):
    if _skip_unless(job, verdict, "roll"):
        return
    train, infer = job.device_mappings.get("actor_train"), job.device_mappings.get("actor_infer")
    if any(role in ("student", "teacher") for role in (*job.device_mappings, *job.strategies)):
        verdict.skipped(job.name, message=f"{job.name}: a distillation (student/teacher); the FAQ's rule is for "
                                          f"actor_train and actor_infer")
        return
    if train is None or infer is None:
        missing = "actor_train" if train is None else "actor_infer"
        verdict.skipped(job.name, message=f"{job.name}: no {missing}.device_mapping")
        return
    shared = sorted(set(train[1]) & set(infer[1]))
    ports = job.args.get("npu_port_range")
    if shared and ports is not None:
        verdict.passed(job.name, message=f"{train[0].shown()} and {infer[0].shown()} share NPU(s) "
                                         f"{fold(f'npu{d}' for d in shared)} (colocated), with {ports.shown()} "
                                         f"({job.where(ports)})")
    elif shared:
        _fail(verdict, job, infer[0],
              observed=f"{train[0].shown()} ({job.where(train[0])}) and {infer[0].shown()} ({job.where(infer[0])}) "
                       f"share NPU(s) {fold(f'npu{d}' for d in shared)} (colocated), and the YAML's system_envs "
                       f"set no HCCL_NPU_SOCKET_PORT_RANGE",
              expected="disjoint NPUs for training and inference, or HCCL_NPU_SOCKET_PORT_RANGE=auto for every "
                       "process (if the launch script exports it, this warning does not apply)")
    else:
        verdict.passed(job.name, message=f"{train[0].shown()} and {infer[0].shown()} are disjoint")


@check("job.roll_strategy", title="ROLL's Megatron strategy on NPU only where MindSpeed's adaptor runs it",
       severity="warning", scope="cluster", reference=faq.R_MEGATRON, needs=NEEDS,
       remedy=("Use a backend ROLL runs on every NPU setup: strategy_args: {strategy_name: deepspeed_train} (with a "
               "deepspeed strategy_config such as ${deepspeed_zero3}) or fsdp2_train; keep megatron_train only on a "
               "validated A2/A3 setup where `python -c 'import megatron_adaptor'` works on every node (ROLL's "
               "newer Ascend FAQ)."))
def test_roll_strategy(job, verdict):
    if _skip_unless(job, verdict, "roll"):
        return
    bad = [(actor, a) for actor, a in job.strategies.items() if a.value.strip().lower().startswith("megatron")]
    if not job.strategies:
        verdict.skipped(job.name, message=f"{job.name}: no strategy_args.strategy_name")
        return
    for actor, a in bad:
        infer = "infer" in a.value.lower() or actor.endswith("infer")
        # A teacher or reference model supplies logits, not rollouts: hf_infer, not vllm.
        logits = actor in ("teacher", "reference")
        backend = "hf_infer" if logits else "vllm (or hf_infer)" if infer else "deepspeed_train or fsdp2_train"
        _fail(verdict, job, a, observed=f"{a.shown()}: ROLL's Ascend FAQ does not support the Megatron-LM backend on "
                                        f"NPU; newer ROLL runs it only where MindSpeed's MegatronAdaptor is installed",
              expected=f"strategy_name: {backend}, or megatron with `import megatron_adaptor` working on every node",
              **({"remedy": f"Use an inference backend that runs on NPU for this role: strategy_args: "
                            f"{{strategy_name: {backend.split(' ')[0]}}}; or keep megatron where MindSpeed's "
                            f"MegatronAdaptor is installed (python -c 'import megatron_adaptor')."}
                 if infer else {}))
    if not bad:
        verdict.passed(job.name, message=", ".join(a.shown() for a in job.strategies.values()))


# -- M17 / M11 ----------------------------------------------------------------------------

def _hub_id(value: str) -> bool:
    return bool(re.fullmatch(r"[\w.-]+/[\w.-]+", value))


@check("job.data_paths", title="The job's model and data paths exist on every node", scope="cluster",
       reference=faq.M17, needs=NEEDS,
       remedy=("Create or mount the missing path on that node (the same path on every node, e.g. shared storage), "
               "or correct the argument in the job."))
def test_data_paths(job, job_facts, verdict):
    args = job.path_args()
    unknown = job.unresolved_paths()
    placeholders = job.placeholder_paths()
    for a in placeholders:
        verdict.failed(job.name, where=job.name, observed=f"{job.cite(a)} {a.unresolved}",
                       expected="the real path on the nodes",
                       remedy="Set the variable the example left as a placeholder to the real path (the same on every "
                              "node, e.g. shared storage) before launching.")
    if not args and placeholders:
        return
    if not args:
        verdict.skipped(job.name, message=_not_checked(job, unknown) if unknown
                        else f"{job.name}: no model or data path in the job")
        return
    model_keys = {job.args["model_path"].name} if "model_path" in job.args else set()
    per_source = job_facts.paths()
    for name, stats in per_source.items():
        host = None if job_facts.local else name
        place = "this machine" if job_facts.local else name
        if not isinstance(stats, dict):
            verdict.error(job.name, message=f"{place}: {stats}", host=host)
            continue
        missing, ok, notes = [], 0, [f"{a.shown()} ({job.where(a)}, {a.unresolved})" for a in unknown]
        for a in args:
            st = stats.get(a.value)
            if st is None:
                if job.kind in ("roll", "verl") and _hub_id(a.value):
                    notes.append(f"{a.shown()} (a Hub model id)")
                else:
                    notes.append(f"{a.shown()} (relative path, not looked up on the nodes)")
                continue
            if a.name == "--data-path" and (st.status == "dir" or st.status == "file"
                                            and a.value.endswith((".bin", ".idx"))):
                # Megatron appends .bin and .idx to the prefix it is given: X.bin.bin, or DIR.bin.
                missing.append(a)
                continue
            if st.status in ("missing", "suffix", "noidx"):
                # ROLL and verl download a model named by its Hub id (Qwen/Qwen2.5-7B-Instruct).
                if job.kind in ("roll", "verl") and a.name in model_keys and _hub_id(a.value) and job_facts.local:
                    notes.append(f"{a.shown()} (a Hub model id)")
                    continue
                missing.append(a)
            else:
                ok += 1
        for a in missing:
            st = stats[a.value]
            if st.status == "suffix":
                verdict.failed(job.name, host=host, where=f"{place}",
                               observed=f"{job.cite(a)} does not exist as a data prefix ({a.value}.bin), but "
                                        f"{a.value}_text_document.bin does",
                               expected="PREFIX.bin and PREFIX.idx: Megatron opens exactly those",
                               remedy=f"Pass the prefix preprocess_data wrote: {a.name} {a.value}_text_document.")
            elif st.status == "file":
                prefix = a.value[:-4]
                verdict.failed(job.name, host=host, where=f"{place}",
                               observed=f"{job.cite(a)} names the {a.value[-4:]} file itself: Megatron adds .bin and "
                                        f".idx to the prefix it is given, and would open {a.value}.bin",
                               expected="the data prefix: PREFIX, for PREFIX.bin and PREFIX.idx",
                               remedy=f"Pass the prefix without the suffix: {a.name} {prefix}.")
            elif st.status == "dir":
                verdict.failed(job.name, host=host, where=f"{place}",
                               observed=f"{job.cite(a)} is a folder: Megatron opens PREFIX.bin and PREFIX.idx, and "
                                        f"would look for {a.value.rstrip('/')}.bin",
                               expected="the data prefix: PREFIX, for PREFIX.bin and PREFIX.idx",
                               remedy=f"Pass the prefix of a .bin/.idx pair in that folder, e.g. {a.name} "
                                      f"{a.value.rstrip('/')}/<name>_text_document (ls {a.value.rstrip('/')}/*.idx).")
            elif st.status == "noidx":
                verdict.failed(job.name, host=host, where=f"{place}",
                               observed=f"{job.cite(a)}: {a.value}.bin is there but {a.value}.idx is not",
                               expected="PREFIX.bin and PREFIX.idx: Megatron opens both",
                               remedy="Copy the .idx file beside the .bin (preprocess_data writes both), or run "
                                      "preprocess_data again.")
            else:
                verdict.failed(job.name, host=host, where=f"{place}",
                               observed=f"{job.cite(a)} does not exist", expected="the path present")
        if not missing and not ok:
            verdict.skipped(job.name, host=host, message=f"{place}: no path to look up"
                                                         + (f" ({', '.join(notes)})" if notes else ""))
        elif not missing:
            extra = f"; not checked: {', '.join(notes)}" if notes else ""
            verdict.passed(job.name, host=host, message=f"{place}: {ok} path(s) present{extra}")


# The dataset files a MindSpeed job loads (the --mm-data json only names them).
SIZED_DATA = ("--data-path", "dataset_param.basic_parameters.dataset", "data.dataset_param.basic_parameters.dataset")


@check("job.distributed_timeout", title="Large datasets come with a raised --distributed-timeout-minutes",
       severity="warning", scope="cluster", reference=faq.M11, needs=NEEDS,
       remedy=("Raise --distributed-timeout-minutes (e.g. to 60 or more) for large datasets, or preprocess the data "
               "in batches ahead of the run."))
def test_distributed_timeout(job, job_facts, verdict):
    if _skip_unless(job, verdict, "mindspeed"):
        return
    sizes = {}
    for name, stats in job_facts.paths().items():
        if isinstance(stats, dict):
            for a in job.path_args():
                if a.name in SIZED_DATA and a.value in stats and stats[a.value].size:
                    sizes[a] = max(sizes.get(a, 0), stats[a.value].size)
    if not sizes:
        unknown = _unknown(job, "data_path", "mm_data")
        verdict.skipped(job.name, message=_not_checked(job, unknown) if unknown
                        else f"{job.name}: dataset size unknown")
        return
    total = sum(sizes.values())
    t = job.arg("distributed_timeout")
    if t is not None and t.unresolved:  # set, so the 10-minute default is not the one it uses
        if total >= LARGE_DATASET:
            verdict.skipped(job.name, message=f"dataset {total / 2**30:.1f} GiB; " + _not_checked(job, [t]))
        else:
            verdict.passed(job.name, message=f"dataset {total / 2**30:.1f} GiB: any timeout will do")
        return
    minutes = t.int_value(job.path) if t is not None else MEGATRON_DEFAULT_TIMEOUT
    tshown = t.shown() if t is not None else f"--distributed-timeout-minutes not set (default {MEGATRON_DEFAULT_TIMEOUT})"
    biggest = max(sizes, key=sizes.get)
    if total >= LARGE_DATASET and minutes <= MEGATRON_DEFAULT_TIMEOUT:
        _fail(verdict, job, t or biggest,
              observed=f"{job.cite(biggest)} is {total / 2**30:.1f} GiB with {tshown}",
              expected=f"--distributed-timeout-minutes above {MEGATRON_DEFAULT_TIMEOUT} for datasets over "
                       f"{LARGE_DATASET >> 30} GiB")
    else:
        verdict.passed(job.name, message=f"dataset {total / 2**30:.1f} GiB, {tshown}")
