"""Where each failure mode comes from: the FAQ items of ../shared/CATALOG.md, cited in
every result so an operator can read the original advice."""

M1 = "MindSpeed-MM FAQ #1: CANN, driver, torch and torch_npu versions out of step"
M4 = "MindSpeed-MM FAQ #4: multi-node launch script hangs silently without pdsh"
M12 = "MindSpeed-MM FAQ #12: wrong NIC name in HCCL/GLOO/TP_SOCKET_IFNAME causes communication timeouts"
V_Q1 = "verl NPU FAQ Q1: NPU device not visible (check npu-smi info and device visibility)"
R_NPU_VISIBLE = "ROLL Ascend NPU FAQ: NPU not visible inside the container (devices not mounted)"
R_HCCL_LINK = "ROLL Ascend NPU FAQ: HCCL communication timeout, step 1 (hccn_tool -link -g must be UP)"
R_HCCL_TLS = "ROLL Ascend NPU FAQ: HCCL communication timeout, step 3 (TLS switch consistent across nodes)"
R_CROSS_NODE_IFNAME = ("ROLL Ascend NPU FAQ: cross-node NPU communication timeout, step 1 "
                       "(HCCL_SOCKET_IFNAME correct and the same NIC name on every node)")
R_ULIMIT = "ROLL Ascend NPU FAQ: ulimit too low (OSError: [Errno 24] Too many open files)"
R_RAY_JOIN = "ROLL Ascend NPU FAQ: Ray worker nodes cannot join (head port 6379 reachable, firewall open)"
X_REACHABLE = "Standard multi-node failure (not in the FAQs): a node that cannot be reached over SSH"
R_RAY_JOIN_4 = "ROLL Ascend NPU FAQ: Ray worker nodes cannot join, step 4 (RANK, WORLD_SIZE, MASTER_ADDR set correctly)"
R_CROSS_NODE_PORT = ("ROLL Ascend NPU FAQ: cross-node NPU communication timeout, step 2 "
                     "(HCCL_IF_BASE_PORT not blocked by a firewall)")
R_HCCL_PING = "ROLL Ascend NPU FAQ: HCCL communication timeout, step 5 (hccn_tool -ping the peer node's device IP)"
R_SHARED_STORAGE = ("ROLL Ascend NPU FAQ: shared storage not accessible; verl NPU FAQ Q4: checkpoints on storage "
                    "that is not shared")
X_HOSTNAMES = "Standard multi-node failure (not in the FAQs): node names resolving differently on different nodes"
X_CLOCK = "Standard multi-node failure (not in the FAQs): node clocks out of step"
M5 = "MindSpeed-MM FAQ #5: HuggingFace weights (safetensors/bin) cannot be trained directly; convert them with mm-convert"
M6 = ("MindSpeed-MM FAQ #6: the TP/PP (and llm_pp_layers/vit_pp_layers) of the weight conversion must match "
      "the training script")
M7 = "MindSpeed-MM FAQ #7: tp_size above num_key_value_heads makes the tensor-parallel split fail"
M8 = ("MindSpeed-MM FAQ #8: after mg2hf the shard files differ from the original model; "
      "model.safetensors.index.json must be regenerated")
M9 = "MindSpeed-MM FAQ #9: NPU out of memory; TP x PP must fit the NPUs"
M10 = "MindSpeed-MM FAQ #10: a pipeline stage with 0 LLM layers crashes with learning_rate=None"
M11 = "MindSpeed-MM FAQ #11: data preprocessing timeout on large datasets; raise --distributed-timeout-minutes"
M14 = "MindSpeed-MM FAQ #14: 'syntax error near unexpected token' from a script with Windows (CRLF) line endings"
M17 = "MindSpeed-MM FAQ #17: loss does not converge; check that the data, image and weight paths are right"
V_Q3 = "verl NPU FAQ Q3: 'Weight ... is too large to fit in the bucket' (update_weights_bucket_megabytes)"
R_COLOCATED = ("ROLL Ascend NPU FAQ: colocated mode is not supported (actor_train and actor_infer on separate NPUs; "
               "newer ROLL runs it with HCCL_NPU_SOCKET_PORT_RANGE=auto)")
R_MEGATRON = ("ROLL Ascend NPU FAQ: the Megatron strategy is not supported on NPU (use deepspeed_train; newer ROLL "
              "runs it on validated A2/A3 setups with MindSpeed's MegatronAdaptor)")

# -- node catalog (issue 3) ------------------------------------------------------------------
M1_M15 = ("MindSpeed-MM FAQ #1 and #15: CANN, driver, torch and torch_npu versions out of step, or different "
          "CANN versions mixed")
M2 = "MindSpeed-MM FAQ #2: ModuleNotFoundError: No module named 'acl' (set_env.sh not sourced)"
M3 = "MindSpeed-MM FAQ #3: libatb.so not found (nnal installed before set_env.sh was sourced)"
M9_IDLE = ("Related to MindSpeed-MM FAQ #9: NPU out of memory (the FAQ's fixes are batch size, TP/PP and "
           "recomputation; HBM already held by a leftover process is a cause it does not list)")
M13 = "MindSpeed-MM FAQ #13: checkpoint save times out (disk I/O bandwidth, ~60 GB per node in 36 min)"
M15 = "MindSpeed-MM FAQ #15: environment variables of different CANN versions conflict"
M18 = "MindSpeed-MM FAQ #18: recommended environment variables (log level, task queue, affinity, HCCL timeout, allocator)"
M19 = "MindSpeed-MM FAQ #19: Megatron-LM version does not match MindSpeed-MM; verl NPU FAQ Q2"
M20 = "MindSpeed-MM FAQ #20: model-specific Python dependencies missing from the image"
R_VLLM_IMPORT = "ROLL Ascend NPU FAQ: vLLM-Ascend import error / torch_npu unusable (CANN environment not loaded)"
R_TORCH_NPU = "ROLL Ascend NPU FAQ: torch_npu unusable (torch and torch_npu versions must match)"
R_TRITON = "ROLL Ascend NPU FAQ: triton import error (use triton-ascend, not the standard triton)"
R_VLLM_VERSIONS = "ROLL Ascend NPU FAQ: slow vLLM inference, step 1 (CANN and vLLM-Ascend of matching releases)"
R_SOC = "ROLL Ascend NPU FAQ: SOC version mismatch (A2 image on A3 hardware or the reverse)"
R_NZ = "ROLL Ascend NPU FAQ: disable FRACTAL_NZ mode for RL (VLLM_ASCEND_ENABLE_NZ=0)"
R_HCCL_IP = "ROLL Ascend NPU FAQ: HCCL communication timeout, step 2 (every NPU has a device IP, no duplicates)"
R_NET_HEALTH = ("Related to ROLL Ascend NPU FAQ: HCCL communication timeout (the FAQ checks -link and -ping; "
                "hccn_tool -net_health -g, the NIC's own health verdict, is not in it)")
R_HCCL_TIMEOUT = "ROLL Ascend NPU FAQ: HCCL communication timeout (raise HCCL_CONNECT_TIMEOUT / HCCL_EXEC_TIMEOUT)"
R_PORT_BIND = "ROLL Ascend NPU FAQ: HCCL port bind failure when several processes share a device"
R_FIREWALL = "ROLL Ascend NPU FAQ: HCCL / Ray cross-node timeout (stop firewalld on multi-node hosts)"
X_HARDWARE = "Standard multi-node failure (not in the FAQs): NPU count or chip type differs from what the job expects"
X_DRIVER_INSTALL = "Standard failure (not in the FAQs): npu-smi warns the driver package is not completely installed"
