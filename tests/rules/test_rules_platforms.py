"""vLLM's CPU platform: its communicator builds allgather_reducescatter only (rules/platforms.py)."""

from __future__ import annotations

import pytest

from support.paths import FIXTURES

from autoselect import rules
from autoselect.candidates import candidate_backends, legal_backends, resolve_target
from autoselect.model import load_profile

QWEN = load_profile(str(FIXTURES / "models" / "qwen3-30b-a3b"))
NVFP4 = load_profile(str(FIXTURES / "models" / "deepseek-r1-nvfp4"))


def test_the_cpu_row_names_its_source_and_only_allgather_reducescatter():
    row = rules.PLATFORMS["cpu"]
    assert row.backends == {"allgather_reducescatter"}
    assert "cpu_communicator.py:55-69" in row.source
    assert rules.platform_reason("cpu", "allgather_reducescatter") is None
    assert rules.platform_reason(rules.CUDA, "deepep_low_latency") is None


@pytest.mark.parametrize("version", ["0.19.1", "0.32.0", rules.NEWEST_VLLM])
def test_on_the_cpu_platform_only_allgather_reducescatter_is_legal_without_a_gpu_arch(version):
    target = resolve_target(QWEN, world_size=2, vllm_version=version, platform="cpu")
    assert legal_backends(target) == ["allgather_reducescatter"]
    verdict = candidate_backends(target, ["deepep_low_latency"])["deepep_low_latency"]
    assert not verdict.ok
    assert verdict.reasons[0].startswith("vLLM's CPU platform runs only allgather_reducescatter, not "
                                         "deepep_low_latency")
    assert "No Unquantized MoE backend supports the deployment configuration" in verdict.reasons[0]


def test_a_removed_backend_that_becomes_allgather_reducescatter_runs_on_the_cpu_platform():
    verdict = rules.legal("pplx", QWEN, None, 2, "0.32.0", platform="cpu")
    assert verdict.ok
    assert any("silently runs allgather_reducescatter" in w for w in verdict.warnings)


def test_the_cpu_platform_still_needs_an_expert_on_every_rank_and_a_value_the_release_knows():
    too_many = rules.legal("allgather_reducescatter", QWEN, None, 256, "0.32.0", platform="cpu")
    assert not too_many.ok and "would hold no expert" in too_many.reasons[0]
    unknown = rules.legal("flashinfer_nvlink_one_sided", NVFP4, None, 2, "0.17.0", platform="cpu")
    assert any("has no --all2all-backend value" in r for r in unknown.reasons)


def test_on_gpus_the_platform_changes_nothing():
    for backend in rules.recommendable_backends(rules.NEWEST_VLLM):
        assert rules.legal(backend, NVFP4, None, 8, None, gpu_arch="sm100", platform=rules.CUDA) == \
            rules.legal(backend, NVFP4, None, 8, None, gpu_arch="sm100")


def test_an_unknown_platform_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown vLLM platform 'tpu'"):
        rules.legal("allgather_reducescatter", QWEN, None, 2, None, platform="tpu")


def test_the_target_carries_redundant_experts_to_the_rules():
    # 128 routed + 4 redundant = 132 experts do not divide over EP 8 for a backend that needs it
    plain = resolve_target(QWEN, world_size=8, gpu_arch="sm90", vllm_version="0.33.0")
    eplb = resolve_target(QWEN, world_size=8, gpu_arch="sm90", vllm_version="0.33.0", redundant_experts=4)
    backend = "flashinfer_nvlink_two_sided"
    assert candidate_backends(plain, [backend])[backend].ok
    verdict = candidate_backends(eplb, [backend])[backend]
    assert not verdict.ok and "132 experts (128 routed + 4 redundant)" in " ".join(verdict.reasons)


def test_a_release_before_the_flag_is_judged_when_the_caller_does_not_need_the_flag():
    from autoselect.candidates import VllmWithoutBackendFlag

    with pytest.raises(VllmWithoutBackendFlag):
        resolve_target(QWEN, world_size=8, gpu_arch="sm90", vllm_version="0.11.0")
    target = resolve_target(QWEN, world_size=8, gpu_arch="sm90", vllm_version="0.11.0", require_flag=False)
    assert candidate_backends(target, ["deepep_low_latency"])["deepep_low_latency"].ok  # by VLLM_ALL2ALL_BACKEND
