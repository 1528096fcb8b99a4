"""Job preflight: the job a cluster is about to run, read from the files its framework
already uses (MindSpeed launch scripts, verl Hydra overrides, ROLL YAML).

:func:`load_jobs` turns each ``--job FILE`` into a :class:`Job`: the arguments that
matter to the checks, each with the name and line it was written with, so a message
can say ``--tensor-model-parallel-size 16 (finetune.sh:35)``.  A file that cannot be
read is a :class:`JobError` naming the file and the line.
"""

from __future__ import annotations

import os
import re
import stat
from collections import Counter
from dataclasses import dataclass, field, replace

KINDS = ("mindspeed", "verl", "roll")
KIND_ALIASES = {"mindspeed": "mindspeed", "mindspeed-mm": "mindspeed", "mindspeed-llm": "mindspeed",
                "megatron": "mindspeed", "verl": "verl", "roll": "roll"}


class JobError(Exception):
    """A job file that cannot be read; ``str()`` is one line: ``file:line: what``."""

    def __init__(self, path: str, line: int | None, message: str):
        self.path, self.line, self.message = path, line, message
        super().__init__(f"{path}:{line}: {message}" if line else f"{path}: {message}")


@dataclass(frozen=True)
class Arg:
    """One argument of the job, as the job spells it."""

    name: str  # "--tensor-model-parallel-size", "trainer.nnodes", "actor_train.device_mapping"
    value: str
    line: int | None = None  # where the argument is written
    value_line: int | None = None  # where its value was set, when elsewhere (TP=16 above)
    sep: str = " "  # how name and value are joined when shown
    file: str | None = None  # the file it is written in, when not the job file (model json)
    # Why the value is known only when the script runs ("is set from outside the script"); None
    # when the script sets it.  Such an argument is given, so its default does not apply either.
    unresolved: str | None = None

    def shown(self) -> str:
        return f"{self.name}{self.sep}{self.value}"

    def int_value(self, path: str) -> int:
        if self.unresolved:  # a check that forgot to ask must not read it as a number (or a default)
            raise JobError(path, self.line, f"{self.shown()} {self.unresolved}: its value is not known")
        try:
            return int(self.value.strip().strip("'\""))
        except ValueError:
            raise JobError(path, self.line, f"{self.name}: {self.value!r} is not an integer") from None


@dataclass(frozen=True)
class LayerList:
    """A pipeline layer split: how many layers each stage holds."""

    part: str  # "llm" or "vit"
    arg: Arg  # the key it was read from (llm_pp_layers, text_decoder.pipeline_num_layers, --num-layer-list)
    stages: tuple[int, ...]
    num_layers: Arg | None = None  # the model's layer count, where the same file says it
    source: str = ""  # the file the list is in


@dataclass
class Job:
    path: str
    kind: str  # mindspeed, verl, roll
    args: dict[str, Arg] = field(default_factory=dict)  # canonical name -> Arg, values the script sets
    unresolved: dict[str, Arg] = field(default_factory=dict)  # given, but known only when it runs
    # Words of the launch command that expand to flags only a branch knows ($GPT_ARGS set in an
    # if/else): any flag the job does not give otherwise may be in there.
    hidden: list[Arg] = field(default_factory=list)
    is_script: bool = False
    crlf_lines: tuple[int, ...] = ()
    # (line, why) per command a broken line continuation split off the launch: words bash runs as
    # a command of their own ('command not found') while the launch runs without them.
    broken: list[tuple[int, str]] = field(default_factory=list)
    pp_layers: dict[str, LayerList] = field(default_factory=dict)
    model_json: str | None = None  # MindSpeed-MM --mm-model file, where it was found
    model_json_problem: str | None = None
    device_mappings: dict[str, tuple[Arg, tuple[int, ...]]] = field(default_factory=dict)  # ROLL
    strategies: dict[str, Arg] = field(default_factory=dict)  # ROLL: actor -> strategy_name
    data_args: tuple[str, ...] = ()  # canonical names of args that are paths to data
    notes: list[str] = field(default_factory=list)
    label: str | None = None  # the name when another --job file has the same file name (load_jobs)
    # Where the job's relative paths are read from with --job-local: the folder its config files
    # (--mm-model, --mm-data) were found under when that is not the current directory.
    launch_dir: str | None = None

    @property
    def name(self) -> str:
        return self.label or os.path.basename(self.path)

    def arg(self, key: str) -> Arg | None:
        """The argument as given, resolved or not (see :attr:`Arg.unresolved`); None when not given.
        Not given but maybe in a :attr:`hidden` word: that word, as unresolved."""
        return self.args.get(key) or self.unresolved.get(key) or (self.hidden[0] if self.hidden else None)

    def set_arg(self, key: str, arg: Arg) -> None:
        """The last one wins, as with argparse, whether or not the script sets its value."""
        if not arg.unresolved and key in self.path_keys() and is_placeholder(arg.value):
            arg = replace(arg, unresolved=PLACEHOLDER)  # no value to check: job.data_paths names it
        self.args.pop(key, None)
        self.unresolved.pop(key, None)
        (self.unresolved if arg.unresolved else self.args)[key] = arg

    def where(self, arg: Arg | None) -> str:
        path = (arg.file if arg is not None and arg.file else None) or self.path
        if arg is None or not arg.line:
            return path
        return f"{path}:{arg.line}"

    def cite(self, arg: Arg) -> str:
        """``--load /x (job.sh:12)``, with the line of the value when set elsewhere."""
        extra = f", value set at line {arg.value_line}" if arg.value_line and arg.value_line != arg.line else ""
        return f"{arg.shown()} ({self.where(arg)}{extra})"

    def int_arg(self, key: str) -> int | None:
        a = self.arg(key)
        return None if a is None else a.int_value(self.path)

    def model_dirs(self) -> list[tuple[str, Arg]]:
        """Directories holding weights or a model config: (role, arg)."""
        roles = {"mindspeed": (("load", "load"), ("hf", "tokenizer"), ("hf", "hf_model")),
                 "verl": (("hf", "model_path"),),
                 "roll": (("hf", "model_path"),)}[self.kind]
        out = []
        for role, key in roles:
            a = self.args.get(key)
            if a is not None and usable_path(a.value):
                out.append((role, a))
        return out

    def path_keys(self) -> tuple[str, ...]:
        return ("load", "tokenizer", "hf_model", "model_path", *self.data_args)

    def placeholder_paths(self) -> list[Arg]:
        """The path arguments still set to an example's placeholder (``your model ckpt path``)."""
        return [a for k in self.path_keys() if (a := self.unresolved.get(k)) is not None and a.unresolved == PLACEHOLDER]

    def unresolved_paths(self) -> list[Arg]:
        """The path arguments whose value is known only when the script runs."""
        return [a for k in self.path_keys() if (a := self.unresolved.get(k)) is not None and a.unresolved != PLACEHOLDER]

    def path_args(self) -> list[Arg]:
        """Every argument that names a path the job reads (model, data, tokenizer)."""
        seen, out = set(), []
        for key in self.path_keys():
            a = self.args.get(key)
            if a is None:
                continue
            # Data arguments may list several (Megatron's weighted prefixes, verl's and ROLL's file
            # lists) and are split; a model or tokenizer path is one, spaces and all
            # (--load "/data/my ckpt/llama").
            for p in (split_paths(a.value) if key in self.data_args else [a.value.strip().strip("'\"")]):
                if (a.name, p) not in seen and usable_path(p):
                    seen.add((a.name, p))
                    out.append(Arg(a.name, p, a.line, a.value_line, a.sep, a.file))
        return out


def _names(value: str) -> list[str]:
    names = re.findall(r"\$\{?([A-Za-z_]\w*)", value)
    for inner in re.findall(r"\$\(\((.*?)\)\)", value):  # $((TP * 2)): names without a $
        names += re.findall(r"[A-Za-z_]\w*", inner)
    return names


def unresolved_reason(value: str, path: str, conditional: dict, sourced=(), variables=None) -> str | None:
    """Why a value the launch script builds is known only when it runs; None when it is known.

    ``conditional`` is :attr:`preflight.job.shell.Script.conditional`: the variables each
    branch of an if/case/&& sets differently, with where. ``variables`` (the script's, as the
    reader left them) lets a value like ``$(($MBS*$DP))`` be traced through ``DP`` to the
    ``$(cat hostfile)`` it was built from: the script sets DP, the command's output is unknown."""
    if "$" not in value and "`" not in value:
        return None
    names = _names(value)
    texts = [value]
    for name in names:  # grows as the script's own variables name others
        held = (variables or {}).get(name)
        if held is not None and held.text not in texts and len(names) < 1000:
            texts.append(held.text)
            names += _names(held.text)
    branchy = [n for n in dict.fromkeys(names) if n in conditional]
    if branchy:
        sets = "; ".join(f"{n}={text} at {path}:{line}" for n in branchy for line, text in conditional[n])
        return f"is set in a branch ({sets})"
    if any(re.search(r"\$\((?!\()|`", text) for text in texts):
        return "is the output of a command the script runs"
    if value.count("}") > value.count("{"):
        # ${MODEL_PATH}}: the extra brace is text the job receives as part of the value.
        return "has a stray '}' (a typo: the job receives it as part of the value), and is set from outside the script"
    if sourced:
        files = ", ".join(f"{name} ({path}:{line})" for line, name in sourced)
        return f"may be set by the file the script sources, {files}, or from outside the script"
    return "is set from outside the script"


# Launchers that hand the words to another shell, which may expand '${TP}' itself (srun and mpirun
# run the program with its arguments as they are).
RELAUNCHERS = frozenset({"eval", "ssh", "pdsh", "clush"})


def single_quoted_reason(value: str, line: int, path: str, script, launcher: str) -> str | None:
    """Why a value like ``${TP}`` is not the variable's value: it was written inside single
    quotes (GPT_ARGS='... --tp ${TP}'), which bash does not expand, so the job receives the text
    itself; None when it was not, or when it cannot be told (the same text also appears outside
    single quotes on that line, or ``launcher`` is one that expands the words again)."""
    if os.path.basename(launcher) in RELAUNCHERS:
        return None
    refs = re.findall(r"\$\{[^}]*\}|\$[A-Za-z_]\w*|\$\(", value)
    pieces = script.single_quoted.get(line, ())
    raw = script.text_lines[line - 1] if 0 < line <= len(script.text_lines) else ""
    inside = {r: sum(piece.count(r) for piece in pieces) for r in refs}
    quoted = [r for r in refs if inside[r] and inside[r] == raw.count(r)]
    if not quoted:
        return None
    return (f"is written inside single quotes ({path}:{line}), which bash does not expand: the job receives the "
            f"text {quoted[0]} itself unless something expands it again; in double quotes it is the variable's "
            f"value")


def branch_reason(lines, path: str, branch_lines: dict) -> str | None:
    """Why a flag written on one of ``lines`` is given only when a branch runs (the script appends
    it to a variable in an if/case: :attr:`preflight.job.shell.Script.branch_lines`); None if not."""
    for line in lines:
        if line in branch_lines:
            return f"is added to {branch_lines[line]} in a branch ({path}:{line}), so only when that branch runs"
    return None


def passes_script_args(text: str) -> bool:
    """Whether a launch-command word is ``"$@"`` (or ``$*``): the script's own arguments."""
    return text in ("$@", "${@}", "$*", "${*}")


def passed_on_note(text: str, line: int, path: str, what: str) -> str | None:
    """A note for ``"$@"`` in the launch command: whoever runs the script may add ``what`` there
    (with verl's Hydra a later override wins).  Almost every upstream script ends with it and is
    run without arguments, so the checks still read the script as written, defaults included."""
    if not passes_script_args(text):
        return None
    return (f"{text} ({path}:{line}) passes on the script's own arguments: {what} given when it is run "
            f"are not seen here, and the checks read the script as written")


def hidden_word(text: str, line: int, path: str, conditional: dict) -> Arg | None:
    """A launch-command word like ``$GPT_ARGS`` whose variable a branch sets: the flags it expands
    to are not known, so an argument the job does not give otherwise may be among them."""
    if not re.search(r"\$\{?[A-Za-z_]", text) or text.startswith("--"):
        return None
    reason = unresolved_reason(text, path, conditional)
    if reason is None or not reason.startswith("is set in a branch"):
        return None
    return Arg(text, "", line, sep="", unresolved=f"{reason}, and the launch command takes flags from it")


PLACEHOLDER = "is still the example script's placeholder"


def is_placeholder(value: str) -> bool:
    """The example scripts' stand-ins for a path (MindSpeed-LLM: ``CKPT_LOAD_DIR="your model ckpt
    path"``), left as shipped."""
    return bool(re.fullmatch(r"(your|path/to|/path/to)\b.*", value.strip().strip("'\""), re.I | re.S))


def usable_path(value: str) -> bool:
    """A path we can look up: resolved (no ``$VAR`` left) and not a placeholder."""
    v = value.strip()
    return bool(v) and "$" not in v and "`" not in v and not is_placeholder(v)


def split_paths(value: str) -> list[str]:
    """``[a, b]`` / ``a,b`` lists (verl data files) and Megatron ``weight prefix`` pairs."""
    v = value.strip().strip("'\"")
    if v.startswith("[") and v.endswith("]"):
        v = v[1:-1]
    parts = [p.strip().strip("'\"") for p in re.split(r"[,\s]+", v) if p.strip().strip("'\"")]
    return [p for p in parts if not re.fullmatch(r"[0-9.eE+-]+", p)]  # drop blend weights


def detect_kind(path: str, text: str) -> str | None:
    ext = os.path.splitext(path)[1].lower()
    if ext in (".yaml", ".yml"):
        if re.search(r"^(actor_train|actor_infer)\s*:", text, re.M) or (
                re.search(r"^student\s*:", text, re.M) and re.search(r"^teacher\s*:", text, re.M)):
            return "roll"
        return None
    if re.search(r"verl\.trainer|\bactor_rollout_ref\.|\btrainer\.n_gpus_per_node\s*=", text):
        return "verl"
    if re.search(r"--tensor-model-parallel-size|--pipeline-model-parallel-size|\b(torchrun|msrun)\b|"
                 r"pretrain_\w+\.py|posttrain_\w+\.py", text):
        return "mindspeed"
    if re.search(r"^(actor_train|actor_infer)\s*:", text, re.M):
        return "roll"
    return None


def load_job(path: str, kind: str | None = None) -> Job:
    try:
        # A FIFO (or a device) would block open() or read for ever: only a regular file is read.
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise JobError(path, None, "not a regular file (a directory, FIFO or device): give the launch "
                                       "script or config file itself")
        with open(path, "rb") as fh:
            data = fh.read(8 << 20)
    except OSError as exc:
        raise JobError(path, None, f"cannot read job file: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise JobError(path, line, "not a text file (invalid UTF-8)") from None
    if kind:
        kind = KIND_ALIASES.get(kind.lower())
        if kind is None:
            raise JobError(path, None, f"--job-kind must be one of {', '.join(KINDS)}")
    else:
        kind = detect_kind(path, text)
        if kind is None:
            raise JobError(path, None, "cannot tell which framework this job is for (no torchrun/msrun "
                                       "launch, no verl key=value overrides, no ROLL actor_train/actor_infer); "
                                       "give --job-kind mindspeed|verl|roll")
    if kind == "mindspeed":
        from .mindspeed import parse_mindspeed
        return parse_mindspeed(path, text)
    if kind == "verl":
        from .verl import parse_verl
        return parse_verl(path, text)
    from .roll import parse_roll
    return parse_roll(path, text)


def load_jobs(paths, kind: str | None = None) -> list[Job]:
    """The --job files; two with one file name (a/run.sh, b/run.sh) are named by their paths as
    given, so that every result names the job it is about."""
    jobs = [load_job(str(p), kind) for p in paths]
    names = Counter(os.path.basename(j.path) for j in jobs)
    paths_seen = Counter(j.path for j in jobs)
    for i, job in enumerate(jobs):
        if names[os.path.basename(job.path)] > 1:
            job.label = job.path if paths_seen[job.path] == 1 else f"{job.path}#{i + 1}"
    return jobs
