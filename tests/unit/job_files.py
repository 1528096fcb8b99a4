"""Small real job files for the job tests: header-only safetensors, model folders, launch
scripts in each framework's published style, ROLL YAMLs."""

from __future__ import annotations

import json
import struct
from pathlib import Path

QWEN_EMBED = {"model.embed_tokens.weight": ("F32", [151936, 4096])}


def write_safetensors(path: Path, tensors: dict) -> Path:
    """A safetensors file with only its header (8-byte little-endian length + JSON); no tensor data."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    sizes = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I8": 1, "U8": 1}
    for name, (dtype, shape) in tensors.items():
        n = sizes[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob)
    return path


def hf_model(root: Path, *, kv_heads=8, layers=28, shards=None, index_extra=(), config=True) -> Path:
    """A HuggingFace model folder: config.json, shards (header-only), model.safetensors.index.json."""
    root.mkdir(parents=True, exist_ok=True)
    if config:
        (root / "config.json").write_text(json.dumps({
            "architectures": ["Qwen2ForCausalLM"], "num_key_value_heads": kv_heads, "num_attention_heads": 28,
            "num_hidden_layers": layers, "hidden_size": 4096, "vocab_size": 151936, "torch_dtype": "float32"}))
    shards = shards if shards is not None else {
        "model-00001-of-00002.safetensors": QWEN_EMBED,
        "model-00002-of-00002.safetensors": {"model.layers.0.mlp.up_proj.weight": ("BF16", [18944, 3584]),
                                             "lm_head.weight": ("BF16", [151936, 3584])},
    }
    weight_map = {}
    for fname, tensors in shards.items():
        write_safetensors(root / fname, tensors)
        weight_map.update({t: fname for t in tensors})
    for tensor, fname in index_extra:
        weight_map[tensor] = fname
    if len(shards) > 1 or index_extra:
        (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return root


def megatron_ckpt(root: Path, tp=1, pp=1, iteration="release", ep=1) -> Path:
    """Rank folders named as Megatron's get_checkpoint_name does: mp_rank_{tp:02d}, then _{pp:03d}
    when PP > 1, then _{ep:03d} when EP > 1."""
    it = "release" if iteration == "release" else f"iter_{int(iteration):07d}"
    for t in range(tp):
        for p in range(pp):
            for e in range(ep):
                name = f"mp_rank_{t:02d}" + (f"_{p:03d}" if pp > 1 else "") + (f"_{e:03d}" if ep > 1 else "")
                (root / it / name).mkdir(parents=True, exist_ok=True)
                (root / it / name / "model_optim_rng.pt").write_bytes(b"")
    (root / "latest_checkpointed_iteration.txt").write_text(str(iteration))
    return root


def mm_script(*, tp=1, pp=4, cp=1, nnodes=1, npus=8, load="ckpt/mm_path/Qwen2-VL-7B-Instruct",
              mm_model="./examples/qwen2vl/model_7b.json", data="./examples/qwen2vl/data_7b.json", timeout=None,
              crlf=False) -> str:
    """A launch script in the style of MindSpeed-MM's examples/qwen2vl/finetune_qwen2vl_7b.sh."""
    text = f"""#!/bin/bash

# ascend-toolkit path: adjust to the installation
source /usr/local/Ascend/ascend-toolkit/set_env.sh
export CUDA_DEVICE_MAX_CONNECTIONS=1
export ASCEND_SLOG_PRINT_TO_STDOUT=0
export HCCL_CONNECT_TIMEOUT=1200

NPUS_PER_NODE={npus}
MASTER_ADDR=localhost
MASTER_PORT=6000
NNODES={nnodes}
NODE_RANK=0
WORLD_SIZE=$(($NPUS_PER_NODE*$NNODES))

MM_DATA="{data}"
MM_MODEL="{mm_model}"
MM_TOOL="./mindspeed_mm/tools/tools.json"
LOAD_PATH="{load}"
SAVE_PATH="save_dir"

TP={tp}
PP={pp}
CP={cp}
MBS=1
GRAD_ACC_STEP=96
DP=$(($WORLD_SIZE/$TP/$PP/$CP))
GBS=$(($MBS*$GRAD_ACC_STEP*$DP))

DISTRIBUTED_ARGS="
    --nproc_per_node $NPUS_PER_NODE \\
    --nnodes $NNODES \\
    --node_rank $NODE_RANK \\
    --master_addr $MASTER_ADDR \\
    --master_port $MASTER_PORT
"

GPT_ARGS="
    --use-mcore-models \\
    --tensor-model-parallel-size ${{TP}} \\
    --pipeline-model-parallel-size ${{PP}} \\
    --context-parallel-size ${{CP}} \\
    --context-parallel-algo ulysses_cp_algo \\
    --micro-batch-size ${{MBS}} \\
    --global-batch-size ${{GBS}} \\
    --tokenizer-type NullTokenizer \\
    --seq-length 1024 \\
    --lr 1.0e-5 \\
    --bf16 \\
    --load $LOAD_PATH \\
    --use-distributed-optimizer \\
    --no-load-optim \\
    --no-load-rng \\
    {"--distributed-timeout-minutes " + str(timeout) + " " if timeout else ""}\\
"

MM_ARGS="
    --mm-data $MM_DATA \\
    --mm-model $MM_MODEL \\
    --mm-tool $MM_TOOL
"

OUTPUT_ARGS="
    --log-interval 1 \\
    --save-interval 10000 \\
    --save $SAVE_PATH \\
"
logfile=$(date +%Y%m%d)_$(date +%H%M%S)
mkdir -p logs
torchrun $DISTRIBUTED_ARGS pretrain_vlm.py \\
    $GPT_ARGS \\
    $MM_ARGS \\
    $OUTPUT_ARGS \\
    --distributed-backend nccl \\
    2>&1 | tee logs/train_${{logfile}}.log
chmod 440 logs/train_${{logfile}}.log
"""
    return text.replace("\n", "\r\n") if crlf else text


def mm_model_json(llm=(1, 10, 10, 7), vit=(32, 0, 0, 0), llm_layers=28, vit_layers=32, kv=4) -> str:
    """The --mm-model json of MindSpeed-MM (examples/qwen2vl/model_7b.json), the fields the checks read."""
    return json.dumps({
        "model_id": "qwen2vl",
        "img_context_token_id": 151655,
        "image_encoder": {"vision_encoder": {"model_id": "qwen2vit", "num_layers": vit_layers,
                                             "hidden_size": 1280, "pipeline_num_layers": list(vit)},
                          "vision_projector": {"model_id": "lnmlp"}},
        "text_decoder": {"model_id": "qwen2lm", "num_layers": llm_layers, "hidden_size": 3584,
                         "num_attention_heads": 28, "num_query_groups": kv,
                         "pipeline_num_layers": list(llm)},
    }, indent=4)


def llm_script(*, tp=8, pp=1, load="/models/ckpt", tokenizer="/models/Qwen2.5-7B", data="/data/alpaca_text_document",
               kv=4, num_layers=28, layer_list=None, ep=None) -> str:
    """A MindSpeed-LLM pretrain script (examples/mcore/qwen25/pretrain_qwen25_7b_32k_ptd.sh style;
    with ``ep``, the MoE flags of examples/mcore/mixtral)."""
    extra = f"    --num-layer-list {layer_list} \\\n" if layer_list else ""
    if ep is not None:
        extra += (f"    --num-experts 8 \\\n    --moe-router-topk 2 \\\n"
                  f"    --expert-model-parallel-size {ep} \\\n")
    return f"""#!/bin/bash
export CUDA_DEVICE_MAX_CONNECTIONS=1
NPUS_PER_NODE=8
MASTER_ADDR=localhost
MASTER_PORT=6000
NNODES=1
NODE_RANK=0

CKPT_LOAD_DIR="{load}"
CKPT_SAVE_DIR="/save"
DATA_PATH="{data}"
TOKENIZER_PATH="{tokenizer}"

TP={tp}
PP={pp}

DISTRIBUTED_ARGS="--nproc_per_node $NPUS_PER_NODE --nnodes $NNODES --node_rank $NODE_RANK --master_addr $MASTER_ADDR --master_port $MASTER_PORT"

GPT_ARGS="
    --use-mcore-models \\
    --tensor-model-parallel-size ${{TP}} \\
    --pipeline-model-parallel-size ${{PP}} \\
    --num-layers {num_layers} \\
{extra}    --hidden-size 3584 \\
    --num-attention-heads 28 \\
    --group-query-attention \\
    --num-query-groups {kv} \\
    --tokenizer-type PretrainedFromHF \\
    --tokenizer-name-or-path ${{TOKENIZER_PATH}} \\
    --seq-length 32768 \\
    --micro-batch-size 1 \\
"
DATA_ARGS="
    --data-path $DATA_PATH \\
    --split 100,0,0
"
torchrun $DISTRIBUTED_ARGS pretrain_gpt.py \\
    $GPT_ARGS \\
    $DATA_ARGS \\
    --distributed-backend nccl \\
    --load ${{CKPT_LOAD_DIR}} \\
    --save ${{CKPT_SAVE_DIR}} \\
    | tee logs/train_qwen25_7b.log
"""


def verl_script(model="/models/Qwen2.5-7B-Instruct", bucket=None, nnodes=1, gpus=8, rollout_tp=4,
                train="/data/gsm8k/train.parquet", crlf=False) -> str:
    """A verl NPU GRPO script (examples/grpo_trainer/run_qwen2_5_7b_grpo_npu.sh style)."""
    b = f"    actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes={bucket} \\\n" if bucket else ""
    text = f"""set -x
export VLLM_ATTENTION_BACKEND=XFORMERS
MODEL_PATH={model}

python3 -m verl.trainer.main_ppo \\
    algorithm.adv_estimator=grpo \\
    data.train_files={train} \\
    data.val_files=$HOME/data/gsm8k/test.parquet \\
    data.train_batch_size=1024 \\
    actor_rollout_ref.model.path=$MODEL_PATH \\
    actor_rollout_ref.actor.optim.lr=1e-6 \\
    actor_rollout_ref.rollout.tensor_model_parallel_size={rollout_tp} \\
    actor_rollout_ref.rollout.name=vllm \\
{b}    trainer.critic_warmup=0 \\
    trainer.logger=console \\
    trainer.n_gpus_per_node={gpus} \\
    trainer.nnodes={nnodes} \\
    trainer.device=npu $@
"""
    return text.replace("\n", "\r\n") if crlf else text


def roll_yaml(train="list(range(0, 4))", infer="list(range(4, 8))", strategy="deepspeed_train",
              pretrain="Qwen/Qwen2.5-7B") -> str:
    """A ROLL RLVR pipeline config (examples/qwen2.5-7B-rlvr_megatron/rlvr_config.yaml style)."""
    return f"""defaults:
  - ../config/deepspeed_zero@_here_
  - ../config/deepspeed_zero3@_here_

hydra:
  run:
    dir: .
  output_subdir: null

exp_name: "qwen2.5-7B-rlvr-config"
seed: 42
num_gpus_per_node: 8
pretrain: {pretrain}
reward_pretrain: {pretrain}

actor_train:
  model_args:
    dtype: bf16
    model_name_or_path: ${{pretrain}}
  training_args:
    learning_rate: 1.0e-6
  strategy_args:
    strategy_name: {strategy}
    strategy_config: ${{deepspeed_zero3}}
  device_mapping: {train}

actor_infer:
  model_args:
    model_name_or_path: ${{pretrain}}
  strategy_args:
    strategy_name: vllm
    strategy_config:
      gpu_memory_utilization: 0.6
  device_mapping: {infer}
"""


def roll_distill_yaml(student="deepspeed_train", teacher="hf_infer", devices="list(range(0,8))",
                      data="data/gsm8k_zh.json") -> str:
    """A ROLL distillation config (examples/qwen2.5-7B-distill_megatron/distill_megatron.yaml style:
    student/teacher roles, no actor_train/actor_infer)."""
    return f"""exp_name: "distill"
student_pretrain: Qwen/Qwen2.5-7B-Instruct
teacher_pretrain: Qwen/Qwen2.5-14B-Instruct
logits_topk: 64
student:
  model_args:
    dtype: bf16
  data_args:
    template: qwen2_5
    file_name:
      - {data}
  strategy_args:
    strategy_name: {student}
  device_mapping: {devices}
teacher:
  strategy_args:
    strategy_name: {teacher}
  device_mapping: {devices}
"""


def fsdp2_job(root: Path, *, model: str, tp=1, dataset="LLaMA-Factory/data/llava.json", config_arg=None) -> Path:
    """A MindSpeed-MM FSDP2 launch (examples/fsdp2/qwen3vl style): torchrun .../base_trainer.py with
    a trainer YAML holding the parallel sizes, model and data. Returns the script's path."""
    cfg = root / "examples" / "fsdp2" / "qwen3vl" / "qwen3vl_config.yaml"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text(f"""# parallel strategy
parallel:
  tensor_parallel_size: {tp}
  fully_shard_parallel_size: auto
data:
  dataset_param:
    preprocess_parameters:
      model_name_or_path: &HF_MODEL_LOAD_PATH {model}
    basic_parameters:
      dataset_dir: LLaMA-Factory/data
      dataset: {dataset}
model:
  model_id: qwen3_vl_moe
  model_name_or_path: *HF_MODEL_LOAD_PATH
training:
  micro_batch_size: 1
  load: load_path
""")
    script = cfg.parent / "finetune_qwen3vl.sh"
    script.write_text(f"""export NON_MEGATRON=true
NPUS_PER_NODE=8
NNODES=2
DISTRIBUTED_ARGS="
    --nproc_per_node $NPUS_PER_NODE \\
    --nnodes $NNODES
"
torchrun $DISTRIBUTED_ARGS mindspeed_mm/fsdp/base_trainer.py \\
    {config_arg or 'examples/fsdp2/qwen3vl/qwen3vl_config.yaml'}
""")
    return script
