"""What each published table is, where it lies in the package, and what its columns mean.

The meanings below were read from the collectors in the public ``ai-dynamo/aiconfigurator``
repository (``docs/reference-data.md`` quotes the source lines); the converter copies them into
every provenance row of the reference data, so a user reading one number can see what it times.
"""

from __future__ import annotations

from typing import NamedTuple

PACKAGE = "aiconfigurator-core"
PACKAGE_VERSION = "0.12.0"
#: The import package inside the wheel (never imported: read as files).
PACKAGE_DIR = "aiconfigurator_core"
DATA_DIR = f"{PACKAGE_DIR}/systems/data"
#: The one NCCL collection present for every system, with ``provenance: collected`` and a
#: ``version`` column that agrees with its folder. The older folders (2.23, 2.26.2, 2.27 ...)
#: are ``provenance: legacy``: their ``version`` column says 2.29.2 and several hold every
#: (op, dtype, GPUs, size) key two to five times.
NCCL_VERSION = "2.29.2"

ROUTING_RANDOM = "random"  # seeded random router logits through vLLM 0.24's router
ROUTING_BALANCED = "balanced"  # round-robin expert ids: every rank gets the same load


class TableKind(NamedTuple):
    """One kind of published table."""

    kind: str
    path: str  # under DATA_DIR, {system} filled in
    systems: tuple[str, ...]
    collector: str  # which collector source produced it, as far as the repository shows
    how_measured: str
    columns: dict[str, str]
    note: str = ""


VLLM_MOE_A2A = TableKind(
    kind="vllm_moe_a2a",
    path="{system}/comm/vllm/0.24.0/moe_a2a_perf.parquet",
    systems=("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300"),
    collector="ai-dynamo/aiconfigurator collector/wideep/vllm/collect_moe_a2a.py at 65aab00d "
              "(the table's collector_ref), VllmBenchmarkAdapter",
    how_measured=(
        "vLLM 0.24.0's own DeepEP prepare/finalize classes (DeepEPHTPrepareAndFinalize, "
        "DeepEPLLPrepareAndFinalize) called directly, one process per GPU, no model weights. "
        "Dispatch = CUDA events around prepare(), combine = CUDA events around finalize(); "
        "eager (no CUDA graph); 3 warm-up rounds, then the mean of 10 rounds; only rank 0 writes "
        "rows, so each number is rank 0's own time (no max over ranks). Activations bf16 "
        "(FusedMoEQuantConfig.make(None): nothing quantized; LL use_fp8_dispatch=False), topk ids "
        "int64, weights fp32 = 1/top_k, combine bf16 (HT unweighted: TopKWeightAndReduceNoOP; LL "
        "weighted in the kernel: TopKWeightAndReduceDelegate). Routing: per-rank seeded random "
        "logits through vLLM 0.24's router semantics for the model family (softmax/sigmoid, "
        "grouped top-k for DeepSeek-style routing), unique experts per token. HT: DeepEP "
        "Buffer(num_nvl_bytes=1 GiB), set_num_sms(20). LL: max_tokens_per_rank = the measured "
        "token count (the tightest capacity; serving capacities are larger); the LL buffer is "
        "cleaned before each round, outside the timed region."),
    columns={
        "framework": "'vLLM'",
        "version": "vLLM version of the image (0.24.0, source commit ee0da84)",
        "device": "torch.cuda.get_device_name() on rank 0",
        "op_name": "'moe_a2a'",
        "kernel_source": "'deepep'",
        "comm_backend": "deepep_ht (DeepEP normal / high-throughput), deepep_ll (low latency), "
                        "deepep_v2_context / deepep_v2_generation (DeepEP v2 ElasticBuffer, eager / CUDA-graph)",
        "phase": "dispatch = vLLM prepare(), combine = vLLM finalize()",
        "comm_dtype": "'default': what vLLM sends with no quantization config, i.e. bf16 activations",
        "ep_size": "world size = expert-parallel size (one rank per GPU)",
        "node_num": "nodes (world size / GPUs per node)",
        "hidden_size": "hidden size of the model shape",
        "topk": "experts per token",
        "num_experts": "routed experts",
        "num_tokens": "tokens per rank (every rank dispatches this many)",
        "sms": "20 = HT's set_num_sms(20); 0 = LL (no SM budget); v2: DeepEP's theoretical SM count",
        "transmit_us": "the phase time, microseconds",
        "notify_us": "0 (no separate notify timing in this collector)",
        "latency": "transmit_us + notify_us, microseconds (mean of 10 rounds, rank 0)",
    },
)

TRTLLM_ALLTOALL = TableKind(
    kind="trtllm_alltoall",
    path="{system}/comm/trtllm/1.3.0rc10/trtllm_alltoall_perf.parquet",
    systems=("gb200",),
    collector="ai-dynamo/aiconfigurator collector/slurm_comm_collector/collect_trtllm_alltoall.py "
              "(NVLinkTwoSided: as of bac66962b, 2026-03-11; NVLinkOneSided added in cef980f2b, "
              "2026-03-16); the table itself records no collector ref or date",
    how_measured=(
        "TensorRT-LLM 1.2.0rc6 on GB200 (srun, MPI, 4 GPUs per tray; EP > 4 spans trays of the "
        "NVL72 over MNNVL). Each op is timed alone by the collector's benchmark_with_power: 3 "
        "warm-ups, CUDA-graph capture (eager fallback), 3 warm replays, then CUDA events around "
        "10 replays: the mean; rank 0's number. Routing balanced (round-robin expert ids: every "
        "rank receives the same number of token-expert pairs). Payloads per token: nvfp4 = packed "
        "fp4 values (H/2 B) + uint8 scales (H/16 B), fp8 = e4m3 values (H B, no scales), bf16 = 2H "
        "B; plus int32 expert slots and fp32 weights (top_k each). NVLinkOneSided: "
        "torch.ops.trtllm.moe_a2a_dispatch / moe_a2a_combine called directly (no Python state "
        "machine), workspace sized for 65536 tokens per rank, combine of a bf16 payload already in "
        "the workspace (payload_in_workspace=True: no staging copy), no low-precision combine. "
        "NVLinkTwoSided: MnnvlMoe.mnnvl_moe_alltoallv_prepare_without_allgather (routing "
        "metadata), then one fused mnnvl_moe_alltoallv of [hidden, scales, slots, weights], then "
        "mnnvl_moe_alltoallv_combine of a bf16 expert output with do_reduce=False (no top-k "
        "reduction); for nvfp4 also the same combine with use_low_precision_combine=True."),
    columns={
        "framework": "'TRTLLM'",
        "version": "tensorrt_llm.__version__ (1.2.0rc6; the folder name 1.3.0rc10 is AIConfigurator's data slot)",
        "device": "torch.cuda.get_device_name()",
        "op_name": "alltoall_prepare (two-sided routing metadata), alltoall_dispatch, alltoall_combine (bf16), "
                   "alltoall_combine_low_precision (two-sided nvfp4 only: TensorRT-LLM's NVFP4 combine)",
        "kernel_source": "NVLinkOneSided (TensorRT-LLM MoeAlltoAll) or NVLinkTwoSided (TensorRT-LLM MnnvlMoe)",
        "moe_dtype": "dispatch payload format: bfloat16, fp8 (per-tensor e4m3, no scales), nvfp4 (values + scales)",
        "num_tokens": "tokens per rank (all ranks the same)",
        "hidden_size": "hidden size (7168 only)",
        "topk": "experts per token (8 only)",
        "num_experts": "routed experts (256 only)",
        "moe_ep_size": "world size = expert-parallel size",
        "distribution": "'balanced': round-robin expert ids",
        "latency": "milliseconds, mean of 10 CUDA-graph replays (eager if capture failed), rank 0",
    },
    note="collection date not recorded; the table was last changed in the repository on 2026-03-20 "
         "(commit f0be556f, 'update gb200 nvlinkonesided')",
)

NCCL = TableKind(
    kind="nccl",
    path="{system}/comm/nccl/" + NCCL_VERSION + "/nccl_perf.parquet",
    systems=("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300"),
    collector="ai-dynamo/aiconfigurator collector/network/collect_nccl.py (nccl-tests binaries)",
    how_measured=(
        "nccl-tests (all_gather_perf, reduce_scatter_perf, ...) run as one process with one "
        "thread per GPU (-t N), -b = -e = the size in bytes, -w 40 warm-up iterations, -n 100 "
        "iterations (60 above 16 MiB), -c 0 (no check), -a 1 (average over ranks); the parsed "
        "value is the out-of-place time (us) of nccl-tests' result line, stored in ms. Sizes "
        "512 B to 512 MiB, doubling. The version column is torch.cuda.nccl.version() of the "
        "collecting environment, not necessarily the NCCL the nccl-tests binaries linked."),
    columns={
        "framework": "'TRTLLM' (the collector's fixed label)",
        "version": "torch.cuda.nccl.version() of the collecting environment",
        "device": "torch.cuda.get_device_name()",
        "op_name": "all_gather, reduce_scatter, alltoall, all_reduce",
        "kernel_source": "'NCCL'",
        "nccl_dtype": "half (2-byte elements) or int8",
        "num_gpus": "GPUs in the collective (one node)",
        "message_size": "ELEMENTS (nccl-tests size in bytes // bytes per element); nccl-tests' size is "
                        "max(send, receive) bytes per rank: all_gather = the whole gathered output, "
                        "reduce_scatter = each rank's whole input, alltoall = each rank's send buffer",
        "latency": "milliseconds, nccl-tests out-of-place time per iteration",
    },
)

KINDS = {k.kind: k for k in (VLLM_MOE_A2A, TRTLLM_ALLTOALL, NCCL)}

#: (table kind, the table's backend label) -> autoselect backend. deepep_v2_* is mapped only
#: when the rules can judge deepep_v2 (see convert.py); NVLink names are TensorRT-LLM's
#: kernel_source values, whose kernels FlashInfer ships to vLLM.
BACKEND_NAMES = {
    ("vllm_moe_a2a", "deepep_ht"): "deepep_high_throughput",
    ("vllm_moe_a2a", "deepep_ll"): "deepep_low_latency",
    ("vllm_moe_a2a", "deepep_v2_context"): "deepep_v2",
    ("vllm_moe_a2a", "deepep_v2_generation"): "deepep_v2",
    ("trtllm_alltoall", "NVLinkOneSided"): "flashinfer_nvlink_one_sided",
    ("trtllm_alltoall", "NVLinkTwoSided"): "flashinfer_nvlink_two_sided",
}

#: Table dtype labels -> autoselect activation dtypes (autoselect.payload.ACTIVATION_DTYPES).
DTYPE_NAMES = {"default": "bf16", "bfloat16": "bf16", "fp8": "fp8", "nvfp4": "nvfp4"}

#: What a point's round trip is, per backend: the phases vLLM runs every step.
ROUND_TRIP = {
    "deepep_high_throughput": ("dispatch", "combine"),
    "deepep_low_latency": ("dispatch", "combine"),
    "deepep_v2": ("dispatch", "combine"),
    "flashinfer_nvlink_one_sided": ("dispatch", "combine"),
    "flashinfer_nvlink_two_sided": ("prepare", "dispatch", "combine"),
}

#: How close each published backend's rows are to what vLLM runs: said next to every number.
FIDELITY = {
    "deepep_high_throughput": "vLLM 0.24.0's own DeepEP HT prepare/finalize (bf16 dispatch)",
    "deepep_low_latency": "vLLM 0.24.0's own DeepEP LL prepare/finalize (bf16 dispatch)",
    "deepep_v2": "vLLM 0.24.0's own DeepEP v2 prepare/finalize (bf16 dispatch)",
    "flashinfer_nvlink_one_sided": (
        "TensorRT-LLM 1.2.0rc6 NVLinkOneSided: the kernel FlashInfer ships (csrc/nv_internal/tensorrt_llm/"
        "kernels/communicationKernels/moeAlltoAll*); vLLM's call adds expert-id sanitizing in dispatch and a "
        "staging copy in combine (payload not in the workspace)"),
    "flashinfer_nvlink_two_sided": (
        "TensorRT-LLM 1.2.0rc6 NVLinkTwoSided: a close relative of vLLM's path, not the same one "
        "(TensorRT-LLM: one fused all-to-all of hidden+scales+slots+weights and a combine without the "
        "top-k reduction; FlashInfer/vLLM: routing ids+weights in prepare, separate all-to-alls for x "
        "and x_sf, and a combine that sums the top-k rows in PyTorch)"),
    "allgather_reducescatter": (
        "derived: NCCL all_gather + reduce_scatter (nccl-tests) at the message sizes vLLM's AGRS path "
        "moves; not a measured all2all"),
}
