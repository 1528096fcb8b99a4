"""verl: a Hydra command line (or a script running one) with ``key=value`` overrides,
e.g. ``python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=$MODEL trainer.nnodes=2``."""

from __future__ import annotations

import re

from . import (Arg, Job, JobError, branch_reason, hidden_word, passed_on_note, single_quoted_reason,
                unresolved_reason)
from .shell import ShellError, broken_by, read_script

KEYS = {
    "actor_rollout_ref.model.path": ("model_path", False),
    "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes": ("bucket_mb", True),
    "actor_rollout_ref.rollout.update_weights_bucket_megabytes": ("bucket_mb", True),
    "trainer.nnodes": ("nnodes", True),
    "trainer.n_gpus_per_node": ("nproc_per_node", True),
    "actor_rollout_ref.rollout.tensor_model_parallel_size": ("rollout_tp", True),
    "actor_rollout_ref.actor.megatron.tensor_model_parallel_size": ("tp", True),
    "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size": ("pp", True),
    "actor_rollout_ref.actor.megatron.expert_model_parallel_size": ("ep", True),
    "actor_rollout_ref.actor.megatron.expert_tensor_parallel_size": ("etp", True),
    "actor_rollout_ref.actor.megatron.context_parallel_size": ("cp", True),
    "actor_rollout_ref.actor.strategy": ("strategy", False),
    "data.train_files": ("train_files", False),
    "data.val_files": ("val_files", False),
}
DEFAULT_BUCKET_MB = 2048  # verl's default update_weights_bucket_megabytes (verl NPU FAQ Q3)
# ${oc.env:MODEL_PATH}, ${actor_rollout_ref.actor.megatron.tensor_model_parallel_size}: written in
# single quotes on purpose, for Hydra to resolve when verl starts (bash would reject them).
# Bash's own ${X:-default}, ${X%.*}, ${X:0:3} are not Hydra's.
_HYDRA = re.compile(r"\$\{(?:oc\.\w+:[^}]*|\.*[A-Za-z_]\w*(?:\.\w+)+)\}")
_OVERRIDE = re.compile(r"^\+{0,2}([A-Za-z_][\w]*(?:\.[\w]+)+)=(.*)$", re.S)


def parse_verl(path: str, text: str) -> Job:
    try:
        script = read_script(text)
    except ShellError as exc:
        raise JobError(path, exc.line, exc.message) from None
    best, best_n = None, 0
    orphans = []  # commands that start with an override: a line continuation is missing before them
    for cmd in script.commands:
        n = sum(1 for w in cmd.words if _OVERRIDE.match(w.text))
        if n and _OVERRIDE.match(cmd.words[0].text):
            orphans.append(cmd)
        elif n > best_n:
            best, best_n = cmd, n
    if best is None and orphans:
        raise JobError(path, orphans[0].line, f"{orphans[0].words[0].text} starts a command of its own "
                                              f"({broken_by(script, orphans[0].line)}): bash runs the verl command "
                                              f"without any of these overrides")
    if best is None:
        raise JobError(path, None, "no key=value overrides found (e.g. trainer.nnodes=2): not a verl command line")
    job = Job(path=path, kind="verl", is_script=path.endswith(".sh") or text.startswith("#!"),
              crlf_lines=script.crlf_lines, data_args=("train_files", "val_files"))
    for cmd in orphans:
        keys = [m.group(1) for w in cmd.words if (m := _OVERRIDE.match(w.text))]
        shown = ", ".join(keys[:6]) + (f" and {len(keys) - 6} more" if len(keys) > 6 else "")
        job.broken.append((cmd.line, f"{cmd.words[0].text} starts a command of its own "
                                     f"({broken_by(script, cmd.line)}): bash runs it as a command ('command not "
                                     f"found') and verl never gets these {len(keys)} override(s): {shown}"))
    for w in best.words:
        if (note := passed_on_note(w.text, w.line, path, "overrides")) is not None:
            job.notes.append(note)
            continue
        m = _OVERRIDE.match(w.text)
        if not m and (hidden := hidden_word(w.text, w.line, path, script.conditional)) is not None:
            job.hidden.append(hidden)
            job.notes.append(f"{w.text} ({path}:{w.line}) {hidden.unresolved}; the overrides in it are not checked")
            continue
        if not m or m.group(1) not in KEYS:
            continue
        key, value = m.group(1), m.group(2)
        canon, numeric = KEYS[key]
        vline = w.line_at(len(w.text) - len(value))
        reason = ("is interpolated by Hydra (OmegaConf) when verl starts" if _HYDRA.search(value)
                  else single_quoted_reason(value, vline, path, script, best.words[0].text)
                  or unresolved_reason(value, path, script.conditional, script.sourced_before(best.line),
                                       script.variables)
                  or branch_reason((w.line, vline), path, script.branch_lines))
        if reason is not None:
            # Given, so not its default: the checks that read it say they cannot tell.
            job.notes.append(f"{key}={value} ({path}:{w.line}) {reason}; not checked")
            job.set_arg(canon, Arg(key, value, w.line, vline if vline != w.line else None, sep="=",
                                   unresolved=reason))
            continue
        if numeric and value.strip().strip("'\"") in ("null", "None", "~"):
            continue  # verl's own default for the key (expert_tensor_parallel_size=null: expert-TP = TP)
        arg = Arg(key, value, w.line, vline if vline != w.line else None, sep="=")
        if numeric:
            arg.int_value(path)
        job.set_arg(canon, arg)
    return job
