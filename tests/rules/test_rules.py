"""Legality rules: the capability table, the one-sided hard rule, versions and spellings."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.paths import FIXTURES

from autoselect import rules
from autoselect.errors import GpuArchRequired
from autoselect.hardware import GpuInfo, HostFingerprint
from autoselect.model import MoeProfile, load_profile
from autoselect.payload import ACTIVATION_DTYPES
from autoselect.rules.legal import InvalidTokensPerRank
from autoselect.rules.limits import InvalidQueueDepth
from autoselect.rules.one_sided import one_sided_consequence

MODELS = FIXTURES / "models"
ONE_SIDED = "flashinfer_nvlink_one_sided"
TWO_SIDED = "flashinfer_nvlink_two_sided"


def _host(*, links_up=True, versions=None, gpus=8, fabric=None):
    gpu_list = [GpuInfo(i, "NVIDIA B200", f"GPU-{i}", 183359, "sm100", "10.0", 18 if links_up else 0, 18)
                for i in range(gpus)]
    return HostFingerprint(
        hostname="node1", machine_id="m1", host_class="b200x8", device="cuda",
        gpu_name="NVIDIA B200", gpu_count=gpus, gpu_arch="sm100", gpus=gpu_list,
        nvlink_matrix=[], all_nvlinks_up=links_up, nvlink_peak_gbps=900.0 if links_up else None,
        fabric=fabric, driver_version="580.0", cuda_version="13.0",
        versions={"flashinfer": "0.7.2.post1", "deep_ep": "1.2.1"} if versions is None else versions,
    )


def test_one_sided_is_legal_for_nvfp4_on_blackwell():
    profile = load_profile(str(MODELS / "deepseek-r1-nvfp4"))
    verdict = rules.legal(ONE_SIDED, profile, _host(), 8, "0.33.0")
    assert verdict.ok and verdict.reasons == ()


def test_one_sided_is_illegal_for_the_same_nvfp4_checkpoint_on_hopper():
    profile = load_profile(str(MODELS / "deepseek-r1-nvfp4"))
    verdict = rules.legal(ONE_SIDED, profile, None, 8, "0.33.0", gpu_arch="sm90")
    assert not verdict.ok
    assert verdict.reasons[0].startswith("flashinfer_nvlink_one_sided needs nvfp4 activations; ")
    assert "deepseek-r1-nvfp4 dispatches bf16 on sm90" in verdict.reasons[0]


@pytest.mark.parametrize(
    "version, said, sources",
    [("0.18.0", "on vLLM 0.18.0 this would SILENTLY CORRUPT output", "the workspace is sized for nvfp4"),
     ("0.19.1", "on vLLM 0.19.1 this would SILENTLY CORRUPT output", "fixed to an error by PR #39717"),
     ("0.20.0", "on vLLM 0.20.0 this would fail at startup", "would fail at startup (PR #39717"),
     ("0.20.1", "vLLM 0.20.1 would run it, but autoselect keeps one-sided to the nvfp4 payloads it was built for",
      "vLLM 0.20.1 accepts this line (PR #40960"),
     ("0.33.0", "vLLM 0.33.0 would run it, but autoselect keeps one-sided to the nvfp4 payloads it was built for",
      "but autoselect refuses it on purpose: one-sided was built for nvfp4 payloads")],
)
def test_one_sided_consequence_for_bf16_depends_on_the_vllm_era(version, said, sources):
    # the refusal says its verdict in one sentence; the pull requests and dates are its detail
    profile = load_profile(str(MODELS / "qwen3-30b-a3b"))
    verdict = rules.legal(ONE_SIDED, profile, None, 8, version, gpu_arch="sm100")
    needs = f"{ONE_SIDED} needs nvfp4 activations; {MODELS / 'qwen3-30b-a3b'} dispatches bf16 on sm100: "
    assert not verdict.ok and verdict.reasons[0] == needs + said and "PR #" not in verdict.reasons[0]
    assert verdict.details[0].startswith(needs) and sources in verdict.details[0]


def test_legal_returns_every_reason_not_just_the_first():
    profile = MoeProfile.from_shape(4096, 30, 3, "bf16")
    host = _host(links_up=False, versions={})
    verdict = rules.legal(ONE_SIDED, profile, host, 128, "0.33.0")
    assert len(verdict.reasons) == 7
    assert verdict.reasons[0].startswith("EP size 128 is larger than the 30 experts: 98 ranks would hold no expert")
    assert [r.split(" ")[0] for r in verdict.reasons[1:6]] == [ONE_SIDED] * 5
    assert "top_k in {1, 2, 4, 6, 8, 10, 12, 14, 16, 18, 22}, not 3" in verdict.reasons[2]
    assert "at most 64 ranks, not 128" in verdict.reasons[3]
    assert "needs every NVLink of each GPU up" in verdict.reasons[4]
    assert "beyond one node (128 > 8 GPUs) needs an MNNVL fabric" in verdict.reasons[5]
    assert verdict.reasons[6].startswith("flashinfer is not installed on node1")


def test_two_sided_needs_experts_divisible_by_ep_and_by_4():
    profile = MoeProfile.from_shape(4096, 30, 2, "bf16")
    verdict = rules.legal(TWO_SIDED, profile, _host(), 8, "0.33.0")
    assert verdict.reasons == (
        "flashinfer_nvlink_two_sided needs the 30 experts to divide evenly over EP size 8",
        "flashinfer_nvlink_two_sided needs the number of experts (30) to be a multiple of 4",
    )


def test_two_sided_top_k_limit_is_32():
    verdict = rules.legal(TWO_SIDED, MoeProfile.from_shape(4096, 64, 33, "bf16"), _host(), 8, "0.33.0")
    assert verdict.reasons == ("flashinfer_nvlink_two_sided supports top_k <= 32, not 33",)


def test_deepep_low_latency_rejects_hidden_above_8192_and_pads_smaller_ones():
    too_big = rules.legal("deepep_low_latency", MoeProfile.from_shape(12288, 64, 8, "bf16"), _host(), 8, "0.33.0")
    assert too_big.reasons == ("deepep_low_latency supports hidden sizes up to 8192, not 12288",)
    padded = rules.legal("deepep_low_latency", load_profile(str(MODELS / "gpt-oss-120b")), _host(), 8, "0.33.0")
    assert padded.ok and "deepep_low_latency pads hidden size 2880 to 3072" in padded.warnings


def test_deepep_block_fp8_needs_hidden_multiple_of_128():
    verdict = rules.legal("deepep_high_throughput", MoeProfile.from_shape(2880, 64, 8, "fp8_block128"), _host(), 8, "0.33.0")
    assert verdict.reasons == ("deepep_high_throughput fp8 block dispatch needs hidden % 128 == 0, not 2880",)


def test_deepep_without_deep_ep_installed_is_illegal_with_an_install_pointer():
    verdict = rules.legal("deepep_high_throughput", load_profile(str(MODELS / "deepseek-v3")),
                          _host(versions={"flashinfer": "0.7.2"}), 8, "0.33.0")
    assert verdict.reasons == ("deep_ep is not installed on node1: install DeepEP from "
                               "github.com/deepseek-ai/DeepEP (not a vLLM dependency)",)


def test_flashinfer_across_nodes_needs_a_fabric():
    profile = load_profile(str(MODELS / "deepseek-r1-nvfp4"))
    assert not rules.legal(ONE_SIDED, profile, _host(), 16, "0.33.0").ok
    assert rules.legal(ONE_SIDED, profile, _host(fabric="completed"), 16, "0.33.0").ok


def test_without_host_hardware_rules_are_a_warning():
    profile = load_profile(str(MODELS / "deepseek-r1-nvfp4"))
    verdict = rules.legal(ONE_SIDED, profile, None, 8, "0.33.0", gpu_arch="sm100")
    assert verdict.ok
    assert "no host fingerprint: NVLink and package requirements of flashinfer_nvlink_one_sided unchecked" in verdict.warnings


def test_removed_backends_are_legal_but_say_what_vllm_runs_instead():
    verdict = rules.legal("pplx", load_profile(str(MODELS / "deepseek-v3")), None, 8, "0.33.0", gpu_arch="sm90")
    assert verdict.ok
    assert verdict.warnings[0].endswith("vLLM 0.33.0 silently runs allgather_reducescatter instead")


def test_gpu_arch_is_required_without_a_host():
    with pytest.raises(GpuArchRequired):
        rules.legal(DEFAULT := rules.DEFAULT_BACKEND, load_profile(str(MODELS / "deepseek-v3")), None, 8, "0.33.0")
    assert DEFAULT == "allgather_reducescatter"


def test_unknown_backend_is_refused_with_the_choices():
    with pytest.raises(rules.UnknownBackend, match=r"unknown all2all backend 'fast'; vLLM 0.34.0 accepts: allgather_reducescatter,"):
        rules.resolve("fast")


@pytest.mark.parametrize(
    "version, spelling",
    [("0.11.1", "flashinfer_all2allv"), ("0.17.1", "flashinfer_all2allv"), ("0.18.0", TWO_SIDED), ("0.33.0", TWO_SIDED)],
)
def test_flag_value_spells_two_sided_per_version(version, spelling):
    assert rules.flag_value(TWO_SIDED, version) == spelling


def test_flag_value_refuses_one_sided_before_it_existed():
    with pytest.raises(rules.BackendUnknownToVersion, match=r"vLLM 0.17.1 has no --all2all-backend value for flashinfer_nvlink_one_sided \(first in v0.18.0\)"):
        rules.flag_value(ONE_SIDED, "0.17.1")


def test_recommendable_backends_per_version():
    assert rules.recommendable_backends("0.11.0") == []
    assert rules.recommendable_backends("0.15.0") == [
        "allgather_reducescatter", TWO_SIDED, "deepep_high_throughput", "deepep_low_latency"]
    assert rules.recommendable_backends("0.33.0") == [
        "allgather_reducescatter", ONE_SIDED, TWO_SIDED, "deepep_high_throughput", "deepep_low_latency"]


@pytest.mark.parametrize(
    "a, b",
    [("0.11.1", "0.11.10"), ("0.19.1rc1", "0.19.1"), ("0.19.1.dev3+gabc", "0.19.1"), ("0.19.1", "0.19.1.post1"),
     ("v0.10.1", "0.10.1.1"), ("0.9", "0.10.0")],
)
def test_parse_version_orders_releases(a, b):
    assert rules.parse_version(a) < rules.parse_version(b)


def test_parse_version_refuses_garbage():
    with pytest.raises(rules.InvalidVllmVersion, match="cannot read vLLM version 'latest'"):
        rules.parse_version("latest")


def test_every_versioned_row_names_its_source():
    for cap in rules.BACKENDS.values():
        for s in cap.spellings:
            assert s.source, cap.backend
    for era in rules.ONE_SIDED_ERAS:
        assert era.source.startswith("PR #")


def test_pr_releases_recorded_in_the_tables():
    two_sided = rules.BACKENDS[TWO_SIDED].spellings
    assert [(s.value, s.since, s.until) for s in two_sided] == [
        ("flashinfer_all2allv", "0.11.1", "0.18.0"), (TWO_SIDED, "0.18.0", None)]
    assert [(e.since, e.consequence) for e in rules.ONE_SIDED_ERAS] == [
        ("0.18.0", "silent_corruption"), ("0.20.0", "startup_error"),
        ("0.20.1", "startup_error"), ("0.29.0", "startup_error")]
    assert rules.ENV_VAR_REMOVED_IN == "0.16.0" and rules.FLAG_SINCE == "0.11.1"
    assert (rules.BACKENDS["pplx"].removed_in, rules.BACKENDS["naive"].removed_in) == ("0.17.0", "0.19.0")


def test_fp8_block_is_accepted_upstream_only_from_51924():
    assert "would fail at startup (PR #40960" in one_sided_consequence("fp8_block128", "0.28.0")
    assert "accepts this line (PR #51924" in one_sided_consequence("fp8_block128", "0.29.0")


def test_parser_choices_follow_the_version():
    assert rules.parser_choices("0.17.1") == [
        "allgather_reducescatter", "deepep_high_throughput", "deepep_low_latency", "flashinfer_all2allv",
        "mori", "naive", "pplx"]
    assert rules.parser_choices("0.33.0") == [
        "allgather_reducescatter", "deepep_high_throughput", "deepep_low_latency", "deepep_v2",
        "flashinfer_all2allv", "flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided", "moonep",
        "mori_high_throughput", "mori_low_latency", "naive", "nixl_ep", "pplx"]
    assert rules.parser_choices("0.11.0") == []


def test_legal_judges_the_backend_not_its_spelling():
    verdict = rules.legal(TWO_SIDED, MoeProfile.from_shape(4096, 64, 8, "bf16"), None, 8, "0.15.0", gpu_arch="sm90")
    assert verdict.ok and rules.flag_value(TWO_SIDED, "0.15.0") == "flashinfer_all2allv"


_TABLE_VERSIONS = sorted({s.since for c in rules.BACKENDS.values() for s in c.spellings if s.since}
                         | {e.since for e in rules.ONE_SIDED_ERAS} | {rules.NEWEST_VLLM})
_versions = st.one_of(
    st.sampled_from(_TABLE_VERSIONS),
    st.builds(lambda a, b, c: f"0.{a}.{b}" + (f"rc{c}" if c else ""),
              st.integers(0, 60), st.integers(0, 5), st.integers(0, 3)),
)


@settings(max_examples=300, deadline=None)
@given(
    dtype=st.sampled_from([d for d in ACTIVATION_DTYPES if d != "nvfp4"]),
    arch=st.sampled_from(["sm90", "sm100"]),
    version=_versions,
    world_size=st.integers(1, 128),
    top_k=st.sampled_from([1, 2, 4, 8]),
)
def test_one_sided_is_never_legal_without_nvfp4_activations(dtype, arch, version, world_size, top_k):
    profile = MoeProfile.from_shape(7168, 256, top_k, dtype)
    for host in (None, _host()):
        verdict = rules.legal(ONE_SIDED, profile, host, world_size, version, gpu_arch=arch)
        assert not verdict.ok
        assert any("needs nvfp4 activations" in r for r in verdict.reasons)


@settings(max_examples=100, deadline=None)
@given(version=_versions, world_size=st.integers(1, 8))
def test_agrs_is_legal_for_every_model_whenever_vllm_knows_it(version, world_size):
    # allgather_reducescatter arrived in v0.11.0 as a VLLM_ALL2ALL_BACKEND value (PR #23964)
    profile = load_profile(str(MODELS / "mixtral-8x7b"))
    verdict = rules.legal(rules.DEFAULT_BACKEND, profile, None, world_size, version, gpu_arch="sm90")
    assert verdict.ok == rules.version_in(version, "0.11.0", None)


# ---- DeepEP kernel limits (rules.Limit rows) ------------------------------------------

HT = "deepep_high_throughput"
LL = "deepep_low_latency"
HT_SIZES_REASON = ("deepep_high_throughput runs at EP sizes 2, 4, 8 within a node or 16, 24, 32, 48, 64, 96, "
                   "128, 144, 160 across nodes, not {} (DeepEP 2.1 deep_ep/buffers/legacy.py:245-258 "
                   "get_dispatch_config: 'Unsupported number of EP ranks')")
GROUPING_REASON = ("{} needs fewer than 8 ranks or a multiple of 8, not {} (DeepEP 2.1 csrc/legacy/buffer.hpp:114: "
                   "num_ranks < 8 or num_ranks % 8 == 0)")


def _deepep(backend, profile, world_size, arch="sm90", **kw):
    return rules.legal(backend, profile, None, world_size, "0.33.0", gpu_arch=arch, **kw)


def test_deepep_high_throughput_refuses_an_ep_size_its_config_tables_lack():
    verdict = _deepep(HT, MoeProfile.from_shape(7168, 48, 8, "bf16"), 6)
    assert verdict.reasons == (HT_SIZES_REASON.format(6),)


def test_a_deepep_buffer_needs_fewer_than_8_ranks_or_whole_groups_of_8():
    profile = MoeProfile.from_shape(4096, 48, 8, "bf16")
    assert _deepep(LL, profile, 12).reasons == (GROUPING_REASON.format(LL, 12),)
    assert _deepep(HT, profile, 12).reasons == (HT_SIZES_REASON.format(12), GROUPING_REASON.format(HT, 12))
    assert _deepep(LL, profile, 6).ok and _deepep(LL, profile, 24).ok


@pytest.mark.parametrize("world_size", [2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 144, 160])
def test_deepep_high_throughput_accepts_every_ep_size_deepep_has_a_config_for(world_size):
    assert _deepep(HT, MoeProfile.from_shape(4096, 16 * world_size, 8, "bf16"), world_size).ok


def test_deepep_high_throughput_intranode_holds_at_most_128_experts_per_rank():
    kimi = load_profile(str(MODELS / "kimi-k2"))  # 384 experts
    assert _deepep(HT, kimi, 2).reasons == (
        "deepep_high_throughput intranode (EP <= 8) handles at most 128 experts per rank, not 192 (384 experts "
        "over EP 2); use more ranks (DeepEP 2.1 csrc/kernels/legacy/intranode.cu:167-168 notify_dispatch: "
        "num_experts / num_ranks <= 128)",)
    assert _deepep(HT, kimi, 4).ok  # 96 per rank


def test_the_experts_per_rank_limit_is_the_intranode_kernels_only():
    assert _deepep(HT, MoeProfile.from_shape(4096, 4096, 8, "bf16"), 16).ok  # 256 per rank, internode


@pytest.mark.parametrize("arch", ["sm90", "sm100"])
def test_deepep_high_throughput_intranode_rows_fit_two_8_kib_halves(arch):
    verdict = _deepep(HT, MoeProfile.from_shape(8192, 64, 8, "bf16"), 8, arch)
    assert verdict.reasons == (
        f"deepep_high_throughput intranode (EP <= 8) dispatches rows of at most 16368 bytes on {arch}: a bf16 "
        "row of hidden 8192 is 16384 bytes (DeepEP 2.1 csrc/kernels/legacy/intranode.cu:304, 577 dispatch: "
        "half_hidden_bytes + 8 <= 8192)",)


def test_row_bytes_follow_vllms_padding_and_the_wire_dtype():
    assert not _deepep(HT, MoeProfile.from_shape(8000, 64, 8, "bf16"), 8).ok  # padded to 8192
    assert _deepep(HT, MoeProfile.from_shape(7936, 64, 8, "bf16"), 8).ok  # 15872 bytes
    assert _deepep(HT, MoeProfile.from_shape(8192, 64, 8, "fp8_block128"), 8).ok  # fp8 row: 8192 bytes
    per_tensor = _deepep(HT, MoeProfile.from_shape(8192, 64, 8, "fp8"), 8)  # crosses as bf16
    assert "a bf16 row of hidden 8192 is 16384 bytes" in per_tensor.reasons[0]
    assert _deepep(HT, MoeProfile.from_shape(8192, 64, 8, "bf16"), 16).ok  # internode kernels


def test_deepep_low_latency_dispatches_at_most_511_tokens_per_rank_by_default():
    profile = MoeProfile.from_shape(4096, 64, 8, "bf16")
    assert _deepep(LL, profile, 4, max_num_batched_tokens=512).reasons == (
        "deepep_low_latency dispatches at most 511 tokens per rank with NVSHMEM_QP_DEPTH=1024, not 512 "
        "(--max-num-batched-tokens 512): "
        "lower --max-num-batched-tokens to 511 or set NVSHMEM_QP_DEPTH to at least 1026 (DeepEP 2.1 "
        "deep_ep/buffers/legacy.py:609: nvshmem_qp_depth >= (num_max_dispatch_tokens_per_rank + 1) * 2)",)
    assert _deepep(LL, profile, 4, max_num_batched_tokens=511).ok


def test_nvshmem_qp_depth_in_the_environment_moves_the_token_limit():
    profile = MoeProfile.from_shape(4096, 64, 8, "bf16")
    assert _deepep(LL, profile, 4, max_num_batched_tokens=1023, environ={"NVSHMEM_QP_DEPTH": "2048"}).ok
    deeper = _deepep(LL, profile, 4, max_num_batched_tokens=1024, environ={"NVSHMEM_QP_DEPTH": "2048"})
    assert deeper.reasons[0].startswith("deepep_low_latency dispatches at most 1023 tokens per rank with "
                                        "NVSHMEM_QP_DEPTH=2048, not 1024 (--max-num-batched-tokens 1024): "
                                        "lower --max-num-batched-tokens to "
                                        "1023 or set NVSHMEM_QP_DEPTH to at least 2050 (")


def test_deepep_low_latency_needs_ranks_times_tokens_a_multiple_of_4():
    profile = MoeProfile.from_shape(4096, 64, 8, "bf16")
    assert _deepep(LL, profile, 2, max_num_batched_tokens=255).reasons == (
        "deepep_low_latency needs EP size x tokens per rank to be a multiple of 4, not 2 x 255 = 510 "
        "(--max-num-batched-tokens 255): make "
        "--max-num-batched-tokens a multiple of 4 (DeepEP 2.1 csrc/legacy/buffer.hpp:1526: 'TMA requires the "
        "number of tokens to be multiple of 4')",)
    assert _deepep(LL, profile, 4, max_num_batched_tokens=255).ok


@pytest.mark.parametrize("world_size", [2, 3, 4, 5, 6, 7, 8, 16, 64])
def test_vllms_default_256_tokens_passes_every_low_latency_token_rule(world_size):
    profile = MoeProfile.from_shape(4096, 64 * world_size, 8, "bf16")
    assert _deepep(LL, profile, world_size, max_num_batched_tokens=256).ok
    assert _deepep(LL, profile, world_size).ok  # None: vLLM's default 256


def test_token_limits_bind_only_low_latency():
    profile = MoeProfile.from_shape(4096, 64, 8, "bf16")
    for backend in (HT, rules.DEFAULT_BACKEND, TWO_SIDED):
        assert _deepep(backend, profile, 2, max_num_batched_tokens=16383).ok, backend


@pytest.mark.parametrize("tokens", [0, -4, True, 8.0, "512"])
def test_tokens_per_rank_must_be_a_positive_integer(tokens):
    with pytest.raises(InvalidTokensPerRank, match="tokens per rank must be a positive integer"):
        _deepep(LL, MoeProfile.from_shape(4096, 64, 8, "bf16"), 8, max_num_batched_tokens=tokens)


@pytest.mark.parametrize("depth", ["abc", "0", "-8", ""])
def test_a_bad_nvshmem_qp_depth_is_refused_with_what_to_do(depth):
    with pytest.raises(InvalidQueueDepth, match=r"NVSHMEM_QP_DEPTH=.* is not a positive integer; unset it"):
        _deepep(LL, MoeProfile.from_shape(4096, 64, 8, "bf16"), 8, max_num_batched_tokens=256,
                environ={"NVSHMEM_QP_DEPTH": depth})


def test_every_kernel_limit_names_its_deepep_source_line():
    limits = [(cap.backend, f, getattr(cap, f)) for cap in rules.BACKENDS.values()
              for f in ("world_sizes", "world_size_grouping", "max_local_experts", "max_row_bytes",
                        "max_tokens_per_rank", "slots_multiple_of") if getattr(cap, f) is not None]
    assert sorted((b, f) for b, f, _ in limits) == [
        (HT, "max_local_experts"), (HT, "max_row_bytes"), (HT, "world_size_grouping"), (HT, "world_sizes"),
        (LL, "max_tokens_per_rank"), (LL, "slots_multiple_of"), (LL, "world_size_grouping")]
    for backend, name, limit in limits:
        assert re.match(r"DeepEP 2\.1 \S+:\d+", limit.source), (backend, name)


def test_the_adapters_and_the_rules_agree_on_every_shared_limit():
    from bench.backends import deepep_common as common

    assert rules.DEEPEP_HT_MAX_LOCAL_EXPERTS.value == common.HT_MAX_LOCAL_EXPERTS
    assert rules.DEEPEP_HT_ROW_BYTES.value.pad_bf16_bytes == common.HT_ROW_ATOM_BYTES
    assert rules.DEEPEP_HT_ROW_BYTES.value.max_bytes == {a: 2 * (common.HT_TMA_BYTES_PER_WARP - 8)
                                                         for a in ("sm90", "sm100")}
    assert rules.DEEPEP_LL_TOKENS_PER_RANK.value.default == common.LL_DEFAULT_QP_DEPTH
    assert rules.DEEPEP_HT_WORLD_SIZES.value >= set(common.HT_INTRANODE_WORLD_SIZES)


@settings(max_examples=200, deadline=None)
@given(world_size=st.integers(1, 200), experts_per_rank=st.sampled_from([8, 16, 128]))
def test_high_throughput_ep_sizes_are_exactly_deepeps_configs(world_size, experts_per_rank):
    profile = MoeProfile.from_shape(4096, experts_per_rank * world_size, 8, "bf16")
    verdict = _deepep(HT, profile, world_size)
    assert verdict.ok == (world_size == 1 or world_size in rules.DEEPEP_HT_WORLD_SIZES.value)


@settings(max_examples=150, deadline=None)
@given(hidden=st.integers(8, 96).map(lambda n: n * 128), fp8=st.booleans())
def test_the_row_rule_refuses_exactly_the_rows_the_adapter_plan_refuses(hidden, fp8):
    from bench.backends import deepep_common as common

    dtype = "fp8_block128" if fp8 else "bf16"
    rule = any("dispatches rows of at most" in r
               for r in _deepep(HT, MoeProfile.from_shape(hidden, 64, 8, dtype), 8).reasons)
    try:  # experts, top-k and EP size pass every other limit: only the row copy can refuse
        common.ht_plan(dtype, hidden, 8, 64, 8)
        plan = False
    except common.DeepepCannotRun:
        plan = True
    assert rule == plan


def test_recommend_rejects_low_latency_above_its_token_limit_with_the_reason():
    from autoselect.selector import recommend
    from autoselect.workload import Deployment

    profile = load_profile(str(MODELS / "deepseek-v3"))
    kw = dict(conn=None, deployment=Deployment(dp=8), gpu_arch="sm90", vllm_version="0.33.0")
    rejected = {r.backend: r for r in recommend(profile, max_num_batched_tokens=1024, **kw).rejected}
    assert rejected[LL].kind == "illegal"
    assert rejected[LL].reasons[0].startswith("deepep_low_latency dispatches at most 511 tokens per rank")
    assert LL not in {r.backend for r in recommend(profile, max_num_batched_tokens=256, **kw).rejected}
