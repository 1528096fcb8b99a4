"""ROLL: its pipeline YAML (``actor_train``/``actor_infer``, or a distillation's
``student``/``teacher``, with ``device_mapping`` and ``strategy_args.strategy_name``).
``device_mapping`` is Python-ish text such as
``list(range(0, 4))``; it is read by walking its syntax tree (lists, ``range``, ``+``
of lists, integers), never evaluated."""

from __future__ import annotations

import ast

import yaml

from . import Arg, Job, JobError
from .yamlindex import compose, index_of, scalar

ACTORS = ("actor_train", "actor_infer", "reference", "critic", "reward")
DISTILL = ("student", "teacher")  # the distillation pipeline's roles (examples/*distill*)
MAX_DEVICES = 100_000


def parse_device_mapping(text: str) -> tuple[int, ...]:
    """``list(range(0, 8))``, ``[0, 1, 2]``, ``list(range(0,4)) + [6, 7]`` -> device indexes."""
    try:
        tree = ast.parse(str(text).strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"{text!r} is not a list of devices (expected e.g. list(range(0, 8)) or [0, 1, 2])") from None

    def ints(node) -> list[int]:
        if isinstance(node, ast.Expression):
            return ints(node.body)
        if isinstance(node, (ast.List, ast.Tuple)):
            return [n for e in node.elts for n in [num(e)]]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            if node.func.id in ("list", "tuple") and len(node.args) == 1:
                return ints(node.args[0])
            if node.func.id == "range" and 1 <= len(node.args) <= 3:
                bounds = [num(a) for a in node.args]
                r = range(*bounds)
                if len(r) > MAX_DEVICES:
                    raise ValueError(f"{text!r}: range too long")
                return list(r)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return ints(node.left) + ints(node.right)
        raise ValueError(f"{text!r}: only lists, range(...) and + are understood")

    def num(node) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -num(node.operand)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
            a, b = num(node.left), num(node.right)
            return a + b if isinstance(node.op, ast.Add) else a - b if isinstance(node.op, ast.Sub) else a * b
        raise ValueError(f"{text!r}: device indexes must be integers")

    return tuple(ints(tree))


def parse_roll(path: str, text: str) -> Job:
    root = compose(path, text.replace("\r\n", "\n"))
    if not isinstance(root, yaml.MappingNode):
        raise JobError(path, None, "a ROLL config is a YAML mapping (actor_train:, actor_infer:, ...)")
    index = index_of(root)
    job = Job(path=path, kind="roll", data_args=("train_data",))
    distill = "actor_train" not in index and "actor_infer" not in index
    if distill and not all(role in index for role in DISTILL):
        raise JobError(path, None, "no actor_train/actor_infer (nor student/teacher) section: not a ROLL "
                                   "pipeline config")
    for key, canon in (("pretrain", "model_path"), ("student_pretrain", "model_path"),
                       ("num_gpus_per_node", "nproc_per_node"),
                       ("actor_train.data_args.file_name", "train_data"),
                       ("student.data_args.file_name", "train_data")):
        if key in index and isinstance(index[key][0], yaml.SequenceNode):  # file_name: [- a.jsonl, - b.jsonl]
            items = [str(n.value) for n in index[key][0].value if isinstance(n, yaml.ScalarNode)]
            value = "[" + ", ".join(items) + "]" if items else None
        else:
            value = scalar(index, key)
        if value is not None and value not in ("null", "None"):
            # ${oc.env:NPUS,8} and other resolvers: OmegaConf fills them in when ROLL starts.
            unresolved = "is interpolated when ROLL starts" if "${" in value else None
            job.set_arg(canon, Arg(key, value, index[key][1], sep=": ", unresolved=unresolved))
    # Newer ROLL runs colocated roles on NPU with this exported for every process (its system_envs).
    for key in ("system_envs.HCCL_NPU_SOCKET_PORT_RANGE",
                *(f"{actor}.system_envs.HCCL_NPU_SOCKET_PORT_RANGE" for actor in ACTORS)):
        value = scalar(index, key) if key in index else None
        if value and "npu_port_range" not in job.args:
            job.args["npu_port_range"] = Arg(key, value, index[key][1], sep=": ")
    if job.arg("model_path") is None:
        value = scalar(index, "actor_train.model_args.model_name_or_path")
        if value:
            job.args["model_path"] = Arg("actor_train.model_args.model_name_or_path", value,
                                         index["actor_train.model_args.model_name_or_path"][1], sep=": ")
    for actor in DISTILL if distill else ACTORS:
        key = f"{actor}.device_mapping"
        if key in index:
            node, line = index[key]
            if isinstance(node, yaml.SequenceNode):
                # Newer ROLL takes a list as it is; older ones eval() a string only.
                raw = "[" + ", ".join(str(n.value) for n in node.value) + "]"
            else:
                raw = scalar(index, key) or ""
            if raw in ("", "null", "None", "~"):
                continue
            if "${" in raw:
                # OmegaConf fills it in when ROLL starts: not knowable here, and no reason to stop the run.
                job.notes.append(f"{key}: {raw} ({path}:{line}) is interpolated when ROLL starts; its devices are "
                                 f"not checked")
                continue
            try:
                devices = parse_device_mapping(raw)
            except ValueError as exc:
                raise JobError(path, line, f"{key}: {exc}") from None
            job.device_mappings[actor] = (Arg(key, raw, line, sep=": "), devices)
        skey = f"{actor}.strategy_args.strategy_name"
        value = scalar(index, skey)
        if value:
            job.strategies[actor] = Arg(skey, value, index[skey][1], sep=": ")
    return job
