"""vllm_flags emit side: version-correct `vllm serve` argv and one-sided workspace sizing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoselect.payload import combine_bytes_per_token, dispatch_bytes_per_token
from autoselect.vllm_flags import (
    parse_serve_argv,
    serve_flags,
    vllm_default_max_num_batched_tokens,
    workspace_max_num_batched_tokens,
)
from autoselect.vllm_flags.emit import one_sided_workspace_bytes, serve_argv
from autoselect.workload import Deployment

DS = {"hidden": 7168, "top_k": 8}


def test_serve_argv_spells_the_deployment_and_backend():
    assert serve_argv("deepseek-ai/DeepSeek-R1", "flashinfer_nvlink_one_sided", Deployment(dp=8), "0.33.0") == [
        "vllm", "serve", "deepseek-ai/DeepSeek-R1", "--data-parallel-size", "8", "--enable-expert-parallel",
        "--all2all-backend", "flashinfer_nvlink_one_sided",
    ]


def test_tensor_parallel_size_is_emitted_only_above_one():
    assert serve_flags("allgather_reducescatter", Deployment(dp=4, tp=2), "0.33.0")[:4] == [
        "--tensor-parallel-size", "2", "--data-parallel-size", "4",
    ]


def test_two_sided_is_spelled_flashinfer_all2allv_before_the_rename():
    assert serve_flags("flashinfer_nvlink_two_sided", Deployment(dp=8), "0.17.0")[-1] == "flashinfer_all2allv"
    assert serve_flags("flashinfer_nvlink_two_sided", Deployment(dp=8), "0.18.0")[-1] == "flashinfer_nvlink_two_sided"


def test_emitted_flags_round_trip_through_the_parse_side():
    argv = serve_argv("m", "flashinfer_nvlink_two_sided", Deployment(dp=4, tp=2), "0.33.0",
                      max_num_batched_tokens=4096, extra=["--enable-eplb"])
    parsed = parse_serve_argv(argv)
    assert (parsed.model, parsed.all2all_backend, parsed.data_parallel_size, parsed.tensor_parallel_size) == (
        "m", "flashinfer_nvlink_two_sided", 4, 2,
    )
    assert parsed.enable_expert_parallel is True
    assert parsed.max_num_batched_tokens == 4096
    assert argv[-1] == "--enable-eplb"


def test_one_sided_workspace_matches_the_published_deepseek_numbers():
    # The published estimate: DeepSeek-V3 shape at EP8 and 8192 tokens ~ 1.12 GiB nvfp4, 1.75 GiB bf16 (aux omitted there).
    c = combine_bytes_per_token(7168)
    nvfp4 = one_sided_workspace_bytes(8, 8192, dispatch_bytes_per_token("nvfp4", **DS), c)
    bf16 = one_sided_workspace_bytes(8, 8192, dispatch_bytes_per_token("bf16", **DS), c)
    # 8 ranks x 8192 tokens x (4096 + 14336) B = 1.125 GiB, plus 2 x 8192 x 22 x 4 B routing tables
    assert nvfp4 == 8 * 8192 * 18432 + 2 * 8192 * 88 + 512  # + flags and counters, 128-aligned
    assert nvfp4 / 2**30 == pytest.approx(1.1263, abs=1e-4)
    assert bf16 / 2**30 == pytest.approx(1.7553, abs=1e-4)
    assert nvfp4 % 128 == 0


def test_vllm_default_token_budget_depends_on_gpu_memory_and_backend():
    assert vllm_default_max_num_batched_tokens("allgather_reducescatter", 143771) == 8192  # H200
    assert vllm_default_max_num_batched_tokens("allgather_reducescatter", 183359) == 16384  # B200
    assert vllm_default_max_num_batched_tokens("deepep_low_latency", 183359) == 256
    # below 70 GiB vllm serve takes 2048 (0.34.0 engine/arg_utils.py:3034-3043), not the LLM class's 8192
    assert vllm_default_max_num_batched_tokens("allgather_reducescatter", 65536) == 2048
    # unknown memory: the smallest data-center GPU of the arch
    assert vllm_default_max_num_batched_tokens("allgather_reducescatter", None, gpu_arch="sm100") == 16384
    assert vllm_default_max_num_batched_tokens("allgather_reducescatter", None, gpu_arch="sm90") == 8192


def test_workspace_that_fits_leaves_vllms_token_budget_alone():
    tokens, notes = workspace_max_num_batched_tokens(
        "flashinfer_nvlink_one_sided", activation_dtype="nvfp4", world_size=8, gpu_memory_mib=143771, **DS
    )
    assert (tokens, notes) == (None, [])


def test_workspace_too_big_lowers_the_token_budget_to_a_multiple_of_256():
    tokens, notes = workspace_max_num_batched_tokens(
        "flashinfer_nvlink_one_sided", activation_dtype="nvfp4", world_size=8, max_num_batched_tokens=8192,
        max_workspace_gib=0.5, **DS
    )
    assert tokens == 3584
    c = combine_bytes_per_token(7168)
    d = dispatch_bytes_per_token("nvfp4", **DS)
    assert one_sided_workspace_bytes(8, 3584, d, c) <= 0.5 * 2**30 < one_sided_workspace_bytes(8, 3840, d, c)
    assert notes == [
        "flashinfer_nvlink_one_sided: --max-num-batched-tokens lowered from 8192 to 3584 so the workspace "
        "(1.13 -> 0.49 GiB per GPU at EP8) fits --max-workspace-gib 0.5"
    ]


def test_other_backends_keep_the_users_token_budget():
    assert workspace_max_num_batched_tokens(
        "allgather_reducescatter", activation_dtype="bf16", world_size=8, max_num_batched_tokens=4096,
        max_workspace_gib=0.01, **DS
    ) == (4096, [])


@settings(max_examples=200, deadline=None, database=None)
@given(wanted=st.integers(1, 1 << 20), gib=st.floats(1e-300, 4096), world=st.sampled_from([2, 8, 64, 256]))
def test_the_lowered_budget_is_the_largest_multiple_of_256_that_fits(wanted, gib, world):
    c, d = combine_bytes_per_token(7168), dispatch_bytes_per_token("nvfp4", **DS)
    tokens, _ = workspace_max_num_batched_tokens("flashinfer_nvlink_one_sided", activation_dtype="nvfp4",
                                                 world_size=world, max_num_batched_tokens=wanted,
                                                 max_workspace_gib=gib, **DS)
    limit = gib * 2**30
    if one_sided_workspace_bytes(world, wanted, d, c) <= limit:
        assert tokens == wanted
    elif one_sided_workspace_bytes(world, 256, d, c) > limit:
        assert tokens == 256  # nothing fits: the smallest budget, with a note to raise the allowance
    else:
        assert tokens % 256 == 0 and tokens <= wanted
        assert one_sided_workspace_bytes(world, tokens, d, c) <= limit
        assert tokens + 256 > wanted or one_sided_workspace_bytes(world, tokens + 256, d, c) > limit


def test_a_huge_token_budget_with_a_tiny_allowance_is_lowered_at_once():
    # 2**31 tokens stepped down by 256 would be millions of workspace sizes; a bisection is ~23
    tokens, notes = workspace_max_num_batched_tokens(
        "flashinfer_nvlink_one_sided", activation_dtype="nvfp4", world_size=8, max_num_batched_tokens=2**31 - 1,
        max_workspace_gib=0.5, **DS)
    assert tokens == 3584 and "lowered from 2147483647 to 3584" in notes[0]


# ---- how each release is told the backend: the flag, or VLLM_ALL2ALL_BACKEND before it ------------


def test_a_release_with_the_flag_gets_the_flag_spelled_for_it():
    from autoselect.vllm_flags import backend_setting

    assert backend_setting("deepep_low_latency", "0.33.0").flags == ("--all2all-backend", "deepep_low_latency")
    assert backend_setting("flashinfer_nvlink_two_sided", "0.17.0").flags == ("--all2all-backend",
                                                                              "flashinfer_all2allv")
    assert backend_setting("deepep_low_latency", "0.33.0").env == {}


def test_a_release_before_the_flag_gets_the_variable_with_a_value_it_accepts():
    from autoselect.vllm_flags import backend_setting

    s = backend_setting("flashinfer_nvlink_two_sided", "0.11.0")
    assert (s.flags, dict(s.env)) == ((), {"VLLM_ALL2ALL_BACKEND": "flashinfer_all2allv"})
    assert dict(backend_setting("deepep_high_throughput", "0.10.1.1").env) == {
        "VLLM_ALL2ALL_BACKEND": "deepep_high_throughput"}


def test_a_backend_a_release_cannot_be_told_is_refused():
    from autoselect.rules import BackendUnknownToVersion
    from autoselect.vllm_flags import backend_setting

    with pytest.raises(BackendUnknownToVersion, match="takes deepep_high_throughput, deepep_low_latency, naive, pplx"):
        backend_setting("allgather_reducescatter", "0.10.1")
    with pytest.raises(BackendUnknownToVersion, match="first in v0.18.0"):
        backend_setting("flashinfer_nvlink_one_sided", "0.17.0")


def test_where_the_variable_overrides_the_flag_a_set_variable_is_unset():
    from autoselect.vllm_flags import backend_setting

    env = {"VLLM_ALL2ALL_BACKEND": "pplx"}
    assert backend_setting("deepep_low_latency", "0.14.0", env).unset == ("VLLM_ALL2ALL_BACKEND",)
    assert backend_setting("deepep_low_latency", "0.14.0", {}).unset == ()
    assert backend_setting("deepep_low_latency", "0.13.0", env).unset == ()  # the flag wins there
    assert backend_setting("deepep_low_latency", "0.33.0", env).unset == ()  # not read at all


def test_no_all2all_backend_is_emitted_next_to_a_moe_backend_that_dispatches_itself():
    # vLLM 0.32.0+ binds passthrough for these and refuses any other backend (0.34.0 config/kernel.py:194-228)
    for extra in (["--moe-backend", "flashinfer_moe_ep_cutedsl"], ["--moe-backend=flashinfer-moe-ep-mega-deep-gemm"]):
        flags = serve_flags("deepep_low_latency", Deployment(dp=8), "0.34.0", extra=extra)
        assert "--all2all-backend" not in flags and flags[-len(extra):] == extra
    # an ordinary MoE backend, or a release before the megakernels, keeps the flag
    assert "--all2all-backend" in serve_flags("deepep_low_latency", Deployment(dp=8), "0.34.0",
                                              extra=["--moe-backend", "flashinfer_cutlass"])
    assert "--all2all-backend" in serve_flags("deepep_low_latency", Deployment(dp=8), "0.31.0",
                                              extra=["--moe-backend", "flashinfer_moe_ep_cutedsl"])


def test_the_parse_side_reads_moe_backend_and_enforce_eager_as_vllm_does():
    a = parse_serve_argv(["vllm", "serve", "m", "--moe-backend", "FlashInfer-MoE-EP-CuteDSL", "--enforce-eager"])
    assert (a.moe_backend, a.enforce_eager) == ("flashinfer_moe_ep_cutedsl", True)
    assert parse_serve_argv(["vllm", "serve", "m", "--enforce-eager", "--no-enforce-eager"]).enforce_eager is False
    assert parse_serve_argv(["vllm", "serve", "m"]).redundant_given is None
    assert parse_serve_argv(["vllm", "serve", "m", "--eplb-config.num_redundant_experts", "0"]).redundant_given == 0
