"""One legality filter: every command judges a backend against the same target vLLM version."""

from __future__ import annotations


import pytest

from support.paths import FIXTURES

from autoselect.bridge import SOURCE_FLAG
from autoselect.bridge.version import SOURCE_INSTALLED, SOURCE_NEWEST
from autoselect.candidates import Target, candidate_backends, judge, legal_backends, resolve_target
from autoselect.hardware import fingerprint
from autoselect.model import load_profile

MODELS = FIXTURES / "models"
NVFP4 = str(MODELS / "deepseek-r1-nvfp4")
ONE_SIDED = "flashinfer_nvlink_one_sided"  # first in vLLM 0.18.0


@pytest.fixture
def vllm_0_15(tmp_path, monkeypatch):
    """This environment has vLLM 0.15.0 installed (its metadata only), older than the one-sided flag."""
    site = tmp_path / "site"
    (site / "vllm-0.15.0.dist-info").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(site))
    return "0.15.0"


def test_without_a_version_the_target_is_the_installed_vllm(vllm_0_15):
    target = resolve_target(load_profile(NVFP4), world_size=8, gpu_arch="sm100")
    assert (target.vllm_version, target.vllm_version_source) == ("0.15.0", SOURCE_INSTALLED)
    assert resolve_target(load_profile(NVFP4), world_size=8, gpu_arch="sm100", vllm_version="0.33.0"
                          ).vllm_version_source == SOURCE_FLAG


def test_without_vllm_the_target_is_the_newest_known():
    target = resolve_target(load_profile(NVFP4), world_size=8, gpu_arch="sm100")
    assert target.vllm_version_source == SOURCE_NEWEST


def test_tune_bench_and_recommend_judge_against_the_same_vllm_version(vllm_0_15, tmp_path):
    from autoselect.selector import recommend_for
    from autoselect.tune import prepare
    from bench.sweep import SweepSpec, legality

    # recommend: vLLM 0.15.0 has no value for one-sided, so it is not even a candidate
    rec = recommend_for(NVFP4, db_path=tmp_path / "none.db", dp=4, gpu_arch="sm100")
    assert (rec.vllm_version, rec.vllm_version_source) == ("0.15.0", SOURCE_INSTALLED)
    assert ONE_SIDED not in {c.backend for c in rec.candidates} | {r.backend for r in rec.rejected}
    why = "vLLM 0.15.0 has no --all2all-backend value for flashinfer_nvlink_one_sided (first in v0.18.0)"

    # tune races only what that vLLM can serve (it used to judge against the host's packages)
    spec, excluded = prepare(NVFP4, db_path=tmp_path / "r.db", device="cpu", world_size=4, gpu_arch="sm100",
                             backends=["allgather_reducescatter", ONE_SIDED], search_knobs=False)
    assert spec.vllm_version == rec.vllm_version
    assert excluded[ONE_SIDED] == f"illegal: {why}"
    assert spec.backends == ["allgather_reducescatter"]

    # bench skips it for the same reason
    verdicts = legality(SweepSpec(backends=[ONE_SIDED], tokens=[8], hidden=7168, top_k=8, experts=256,
                                  activation_dtype="nvfp4", world_size=4, device="cpu", gpu_arch="sm100"), fingerprint())
    assert verdicts[ONE_SIDED].reasons == (why,)


def test_candidates_are_the_versions_backends_in_table_order_each_with_its_verdict():
    target = Target(profile=load_profile(NVFP4), world_size=8, vllm_version="0.33.0", gpu_arch="sm100")
    verdicts = candidate_backends(target)
    assert list(verdicts)[0] == "allgather_reducescatter"
    assert verdicts[ONE_SIDED].ok
    assert legal_backends(target) == [b for b, v in verdicts.items() if v.ok]


def test_an_adapter_the_rules_do_not_know_is_not_judged():
    target = Target(profile=load_profile(NVFP4), world_size=8, vllm_version="0.33.0", gpu_arch="sm100")
    assert judge(target, "my_vendor_a2a") is None


def test_without_an_arch_a_backend_is_illegal_only_where_every_arch_refuses_it():
    bf16 = load_profile(str(MODELS / "qwen3-30b-a3b"))
    target = Target(profile=bf16, world_size=8, vllm_version="0.33.0")  # a CPU host, no --gpu-arch
    assert not judge(target, ONE_SIDED).ok  # bf16 is refused on every arch
    assert judge(target, "allgather_reducescatter").ok


def test_the_deployments_tensor_parallel_size_decides_reports_that_need_tp_above_one():
    # #41382 (vLLM 0.16.0-0.21.x) double-reduces FlashInfer's combine only with -tp > 1.
    profile = load_profile(NVFP4)
    base = dict(profile=profile, world_size=8, vllm_version="0.19.0", gpu_arch="sm100")

    def report(target):
        return [w for w in judge(target, ONE_SIDED).warnings if "#41382" in w]

    unknown, = report(Target(**base))
    assert "applies only with -tp >= 2" in unknown  # tp unknown: worded as a condition
    assert report(Target(**base, tensor_parallel_size=1)) == []  # judged: does not apply
    applies, = report(Target(**base, tensor_parallel_size=2))
    assert "applies only" not in applies
    assert resolve_target(profile, world_size=8, gpu_arch="sm100", tensor_parallel_size=2).tensor_parallel_size == 2


# --- judged for the serving host -----------------------------------------------------


def test_a_machine_planning_for_other_gpus_judges_nothing_by_its_own_packages_and_links():
    from autoselect.hardware import cpu_fingerprint

    # a CPU machine (no NVLink, no deep_ep) planning for Hopper: what it lacks is what the serving host needs
    target = resolve_target(load_profile(str(MODELS / "deepseek-v3")), world_size=8, gpu_arch="sm90",
                            host=cpu_fingerprint(), vllm_version="0.34.0")
    assert not target.serving_host
    two, ll = judge(target, "flashinfer_nvlink_two_sided"), judge(target, "deepep_low_latency")
    assert two.ok and two.requirements == (
        "needs flashinfer-python on the serving host (pip install flashinfer-python (vLLM pins it))",
        "needs every NVLink of each GPU up on the serving host")
    assert ll.ok and ll.requirements == ("needs deep_ep on the serving host (install DeepEP from "
                                         "github.com/deepseek-ai/DeepEP (not a vLLM dependency))",)
    assert not judge(target, ONE_SIDED).ok  # what the rules refuse stays refused: fp8 on one-sided


def test_the_serving_hosts_own_packages_and_links_decide_and_say_unavailable_not_illegal():
    from support.db import hgx_host

    host = hgx_host()  # an 8 x H200 node: every NVLink up; deep_ep is not installed there
    host.versions = {k: v for k, v in host.versions.items() if k != "deep_ep"}
    target = resolve_target(load_profile(str(MODELS / "deepseek-v3")), world_size=8, host=host, vllm_version="0.34.0")
    assert target.serving_host and target.gpu_arch == "sm90"
    ll = judge(target, "deepep_low_latency")
    assert not ll.ok and ll.unavailable and ll.requirements == ()
    assert ll.reasons == ("deep_ep is not installed on node-a: install DeepEP from github.com/deepseek-ai/DeepEP "
                          "(not a vLLM dependency)",)
    one = judge(target, ONE_SIDED)  # refused by the rules (fp8 on one-sided): illegal, not unavailable
    assert not one.ok and not one.unavailable
    # the same node asked for another arch only plans that answer
    assert not resolve_target(load_profile(NVFP4), world_size=8, host=host, gpu_arch="sm100").serving_host
