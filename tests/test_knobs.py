"""The knob table: real knobs with sources, and legality as data (illegal settings never planned)."""

from __future__ import annotations

import pytest

from autoselect import knobs
from autoselect.knobs import UNSET, KnobContext, check_setting, knob_space, legal_settings
from autoselect.tune.knob_search import combine_settings, plan_knob_settings

HGX_H200 = KnobContext(device="cuda", gpu_arch="sm90", world_size=8, all_nvlinks_up=True,
                       max_num_batched_tokens=256)
PCIE_H200 = KnobContext(device="cuda", gpu_arch="sm90", world_size=8, all_nvlinks_up=False,
                        max_num_batched_tokens=256)
CPU = KnobContext(device="cpu", world_size=2, max_num_batched_tokens=64, cpus=2)


def test_every_knob_names_its_source_kind_and_known_conditions():
    for k in knobs.KNOBS:
        assert k.kind in knobs.KINDS
        assert k.source and k.effect and k.values
        assert all(c in knobs.CONDITIONS for c in k.legal_when)
        assert all(r in knobs.VALUE_RULES for rules in k.value_rules.values() for r in rules)
        assert set(k.value_rules) <= set(k.values)


def test_gpu_only_knobs_are_excluded_on_a_cpu_gloo_run_with_the_reason():
    choices, excluded = knob_space("allgather_reducescatter", CPU)
    assert [k.name for k, _ in excluded] == [
        "NCCL_PROTO", "NCCL_ALGO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"]
    assert all("gloo" in why for _, why in excluded)
    assert [(c.knob.name, c.legal, c.illegal) for c in choices] == [
        ("OMP_NUM_THREADS", ("default", "2"),
         (("4", "OMP_NUM_THREADS=4: more threads than this host has CPU cores"),
          ("8", "OMP_NUM_THREADS=8: more threads than this host has CPU cores")))]
    assert plan_knob_settings("allgather_reducescatter", CPU) == [{"OMP_NUM_THREADS": "2"}]


def test_the_cpu_thread_knob_is_illegal_on_gpus():
    _, excluded = knob_space("allgather_reducescatter", HGX_H200)
    assert ("OMP_NUM_THREADS", "only meaningful for CPU (gloo) workers") in [
        (k.name, why) for k, why in excluded]


def test_ll128_and_nvls_are_only_planned_with_nvlink_and_pat_never_on_one_node():
    with_nvlink = plan_knob_settings("allgather_reducescatter", HGX_H200)
    without = plan_knob_settings("allgather_reducescatter", PCIE_H200)
    assert {"NCCL_PROTO": "LL128"} in with_nvlink and {"NCCL_ALGO": "NVLS"} in with_nvlink
    assert {"NCCL_PROTO": "LL128"} not in without and {"NCCL_ALGO": "NVLS"} not in without
    assert {"NCCL_ALGO": "PAT"} not in with_nvlink
    assert {"NCCL_PROTO": "Simple"} in without


def test_every_planned_setting_is_legal():
    for backend in ("allgather_reducescatter", "flashinfer_nvlink_one_sided", "deepep_low_latency"):
        for ctx in (HGX_H200, PCIE_H200, CPU):
            for setting in plan_knob_settings(backend, ctx):
                assert check_setting(backend, setting, ctx) == []


def test_min_channels_above_max_channels_is_illegal_and_never_enumerated():
    reasons = check_setting("allgather_reducescatter",
                            {"NCCL_MIN_NCHANNELS": "32", "NCCL_MAX_NCHANNELS": "8"}, HGX_H200)
    assert reasons == ["NCCL_MIN_NCHANNELS=32 with NCCL_MAX_NCHANNELS=8: "
                       "NCCL_MIN_NCHANNELS above NCCL_MAX_NCHANNELS is contradictory"]
    for s in legal_settings("allgather_reducescatter", HGX_H200):
        lo, hi = s["NCCL_MIN_NCHANNELS"], s["NCCL_MAX_NCHANNELS"]
        if UNSET not in (lo, hi):
            assert int(lo) <= int(hi)


def test_the_token_capacity_flag_is_not_searched_while_the_harness_cannot_apply_it():
    ctx = KnobContext(device="cuda", gpu_arch="sm100", all_nvlinks_up=True, max_num_batched_tokens=2048)
    assert not any("--max-num-batched-tokens" in s for s in plan_knob_settings("flashinfer_nvlink_one_sided", ctx))
    _, excluded = knob_space("deepep_low_latency", ctx)
    assert [(k.name, why) for k, why in excluded] == [(
        "--max-num-batched-tokens", "the benchmark adapters size their workspace to the measured batch, "
        "so this serve flag cannot be measured by autoselect's harness yet")]


def test_a_token_capacity_below_the_workload_is_illegal():
    ctx = KnobContext(device="cuda", gpu_arch="sm100", all_nvlinks_up=True, max_num_batched_tokens=2048,
                      bench_applies_flags=True)
    planned = plan_knob_settings("flashinfer_nvlink_one_sided", ctx)
    capacities = [s["--max-num-batched-tokens"] for s in planned if "--max-num-batched-tokens" in s]
    assert capacities == ["2048", "4096", "8192", "16384"]
    assert check_setting("flashinfer_nvlink_one_sided", {"--max-num-batched-tokens": "1024"}, ctx) == [
        "--max-num-batched-tokens=1024: smaller than the workload's largest batch per rank"]


def test_a_knob_of_another_backend_is_illegal():
    assert check_setting("allgather_reducescatter", {"TLLM_MOE_A2A_DISPATCH_BLOCK_SIZE": "128"}, HGX_H200) == [
        "TLLM_MOE_A2A_DISPATCH_BLOCK_SIZE does not apply to allgather_reducescatter "
        "(only flashinfer_nvlink_one_sided)"]


def test_dbo_sm_count_is_only_legal_with_enable_dbo():
    assert plan_knob_settings("deepep_high_throughput", HGX_H200) == []
    dbo = KnobContext(device="cuda", gpu_arch="sm90", all_nvlinks_up=True, enable_dbo=True)
    assert plan_knob_settings("deepep_high_throughput", dbo) == [
        {"VLLM_DBO_COMM_SMS": "8"}, {"VLLM_DBO_COMM_SMS": "12"}, {"VLLM_DBO_COMM_SMS": "16"}]


def test_combining_winners_drops_the_smaller_gain_when_the_pair_is_illegal():
    merged = combine_settings("allgather_reducescatter",
                              [(0.05, {"NCCL_MAX_NCHANNELS": "8"}), (0.10, {"NCCL_MIN_NCHANNELS": "32"}),
                               (0.02, {"NCCL_PROTO": "LL"})], HGX_H200)
    assert merged == {"NCCL_MIN_NCHANNELS": "32", "NCCL_PROTO": "LL"}


def test_a_setting_splits_into_env_vars_and_serve_flags():
    env, flags, adapter = knobs.split_setting(
        {"NCCL_PROTO": "LL", "--max-num-batched-tokens": "2048", "NCCL_ALGO": UNSET})
    assert env == {"NCCL_PROTO": "LL"}
    assert flags == ["--max-num-batched-tokens", "2048"]
    assert adapter == {}


def test_require_legal_raises_one_line_with_every_reason():
    with pytest.raises(knobs.IllegalKnobSetting) as e:
        knobs.require_legal("allgather_reducescatter", {"NCCL_PROTO": "LL128"}, PCIE_H200)
    assert str(e.value) == (
        "illegal knobs for allgather_reducescatter: NCCL_PROTO=LL128: NCCL enables it only on "
        "SM90/SM100 with NVLink; forcing it elsewhere can corrupt data; drop them or pick values "
        "from `autoselect tune --list-knobs`")
