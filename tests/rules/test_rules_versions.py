"""The per-release facts in the rules tables: backend selection, dispatch budgets, EPLB, DBO, reports.

Each expected value was read from that release's source (see each row's ``source``); the tests
pin the tables to those readings and the functions to the tables.
"""

from __future__ import annotations

import pytest

from autoselect import rules
from autoselect.model import MoeProfile
from autoselect.rules.budgets import InvalidChunkSize
from autoselect.rules.reports import reports_for
from autoselect.rules.selection import default_backend
from autoselect.rules.serve_options import DBO_BACKENDS

LL, HT = "deepep_low_latency", "deepep_high_throughput"
ONE_SIDED, TWO_SIDED = "flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided"


# ---- backend selection: flag, VLLM_ALL2ALL_BACKEND, default ---------------------------------


@pytest.mark.parametrize(
    "version, default",
    [("0.10.0", "naive"), ("0.10.1.1", "naive"), ("0.10.2", "naive"), ("0.11.0", "allgather_reducescatter"),
     ("0.11.1", "allgather_reducescatter"), ("0.14.1", "allgather_reducescatter"),
     ("0.33.0", "allgather_reducescatter")],
)
def test_the_default_backend_by_release(version, default):
    assert default_backend(version) == default
    assert rules.effective_backend(version).backend == default
    assert rules.effective_backend(version).origin == "vLLM's default"


@pytest.mark.parametrize(
    "version, backend, origin",
    [("0.10.2", "deepep_low_latency", "VLLM_ALL2ALL_BACKEND"),  # only the variable
     ("0.11.0", "deepep_low_latency", "VLLM_ALL2ALL_BACKEND"),
     ("0.11.1", "deepep_high_throughput", "--all2all-backend"),  # the flag wins (PR #26732)
     ("0.13.0", "deepep_high_throughput", "--all2all-backend"),
     ("0.14.0", "deepep_low_latency", "VLLM_ALL2ALL_BACKEND"),  # a set variable overrides the flag
     ("0.15.1", "deepep_low_latency", "VLLM_ALL2ALL_BACKEND"),
     ("0.16.0", "deepep_high_throughput", "--all2all-backend"),  # not read any more (PR #33535)
     ("0.33.0", "deepep_high_throughput", "--all2all-backend")],
)
def test_which_of_flag_and_variable_wins_by_release(version, backend, origin):
    flag = None if version in ("0.10.2", "0.11.0") else HT
    e = rules.effective_backend(version, flag, LL)
    assert (e.backend, e.origin) == (backend, origin)


def test_the_losing_setting_is_named_with_the_release_range():
    assert rules.effective_backend("0.14.1", HT, LL).overridden == (
        "--all2all-backend deepep_high_throughput (VLLM_ALL2ALL_BACKEND wins in vLLM 0.14.0-0.15.x)")
    assert rules.effective_backend("0.12.0", HT, LL).overridden == (
        "VLLM_ALL2ALL_BACKEND=deepep_low_latency (the flag wins in vLLM 0.12.0-0.13.x)")
    assert rules.effective_backend("0.17.0", HT, LL).variable_ignored


def test_a_variable_value_the_release_does_not_take_is_refused_as_vllm_does():
    e = rules.effective_backend("0.10.2", None, "flashinfer_all2allv")  # arrived in 0.11.0
    assert e.backend is None and e.variable_refused.startswith("vLLM fails when it builds the all2all group")
    e = rules.effective_backend("0.15.0", HT, "bogus")
    assert e.backend is None and "Invalid value" in e.variable_refused
    # 0.11.1 reads the variable only when the flag is absent; 0.12.0-0.13.x validate it in compute_hash anyway
    assert rules.effective_backend("0.11.1", HT, "bogus").backend == HT
    assert rules.effective_backend("0.12.0", HT, "bogus").backend is None


def test_the_selection_eras_cover_every_release_without_gaps():
    eras = rules.SELECTION_ERAS
    assert eras[0].since is None and eras[-1].until is None
    assert all(a.until == b.since for a, b in zip(eras, eras[1:]))
    assert [e.since for e in eras if e.flag][0] == rules.FLAG_SINCE
    assert [e.since for e in eras if not e.variable_values][0] == rules.ENV_VAR_REMOVED_IN
    assert all(e.source and e.default_source for e in eras)


def test_the_variable_is_known_to_legal_where_it_chooses_the_backend():
    profile = MoeProfile.from_shape(7168, 256, 8, "bf16")
    assert rules.legal(LL, profile, None, 8, "0.10.2", gpu_arch="sm90").ok
    assert not rules.legal(TWO_SIDED, profile, None, 8, "0.10.2", gpu_arch="sm90").ok  # all2allv: 0.11.0
    assert rules.legal("flashinfer_all2allv", profile, None, 8, "0.11.0", gpu_arch="sm90").ok


# ---- the low-latency dispatch budget --------------------------------------------------------


@pytest.mark.parametrize(
    "version, setting",
    [("0.10.0", "VLLM_MOE_DP_CHUNK_SIZE"), ("0.11.1", "VLLM_MOE_DP_CHUNK_SIZE"), ("0.19.1", "VLLM_MOE_DP_CHUNK_SIZE"),
     ("0.20.0", "--max-num-batched-tokens"), ("0.33.0", "--max-num-batched-tokens")],
)
def test_what_sizes_the_low_latency_buffer_by_release(version, setting):
    budget = rules.dispatch_budget(LL, version, max_num_batched_tokens=8192,
                                   environ={"VLLM_MOE_DP_CHUNK_SIZE": "1024"})
    assert budget.setting == setting
    assert budget.tokens == (1024 if setting == "VLLM_MOE_DP_CHUNK_SIZE" else 8192)
    default = rules.dispatch_budget(LL, version)
    assert (default.tokens, default.given) == (256, False)


def test_the_lowered_batch_default_arrived_with_the_flag_sized_buffer():
    assert rules.lowered_batch_default(LL, "0.19.1") is None
    assert rules.lowered_batch_default(LL, "0.20.0") == rules.lowered_batch_default("nixl_ep", "0.33.0") == 256
    assert rules.lowered_batch_default(HT, "0.33.0") is None
    assert rules.dispatch_budget(HT, "0.33.0") is None


def test_before_0_20_a_large_batch_is_chunked_and_only_the_chunk_size_can_break_the_queue_depth():
    profile = MoeProfile.from_shape(7168, 256, 8, "bf16")
    assert rules.legal(LL, profile, None, 8, "0.19.1", gpu_arch="sm90", max_num_batched_tokens=8192).ok
    too_deep = rules.legal(LL, profile, None, 8, "0.19.1", gpu_arch="sm90", environ={"VLLM_MOE_DP_CHUNK_SIZE": "1024"})
    assert too_deep.reasons[0].startswith(
        "deepep_low_latency dispatches at most 511 tokens per rank with NVSHMEM_QP_DEPTH=1024, not 1024 "
        "(VLLM_MOE_DP_CHUNK_SIZE=1024): lower VLLM_MOE_DP_CHUNK_SIZE to 511 or set NVSHMEM_QP_DEPTH to at least 2050")
    assert not rules.legal(LL, profile, None, 8, "0.20.0", gpu_arch="sm90", max_num_batched_tokens=8192).ok


def test_turning_vllms_chunking_off_lets_a_batch_overrun_the_chunk_sized_buffer():
    profile = MoeProfile.from_shape(7168, 256, 8, "bf16")
    off = {"VLLM_ENABLE_MOE_DP_CHUNK": "0"}
    verdict = rules.legal(LL, profile, None, 8, "0.19.1", gpu_arch="sm90", max_num_batched_tokens=2048, environ=off)
    assert verdict.reasons == (
        "VLLM_ENABLE_MOE_DP_CHUNK=0 turns off vLLM's MoE chunking: batches up to --max-num-batched-tokens 2048 "
        "reach a deepep_low_latency buffer sized for vLLM's default VLLM_MOE_DP_CHUNK_SIZE=256; set "
        "--max-num-batched-tokens to at most 256, raise VLLM_MOE_DP_CHUNK_SIZE, or drop VLLM_ENABLE_MOE_DP_CHUNK=0 "
        f"({rules.budgets.CHUNKING_SWITCH_SOURCE})",)
    assert rules.legal(LL, profile, None, 8, "0.19.1", gpu_arch="sm90", max_num_batched_tokens=256, environ=off).ok
    assert rules.legal(LL, profile, None, 8, "0.12.0", gpu_arch="sm90", max_num_batched_tokens=2048, environ=off).ok


@pytest.mark.parametrize("raw", ["0", "-4", "many", ""])
def test_a_bad_chunk_size_is_refused_where_vllm_reads_it(raw):
    with pytest.raises(InvalidChunkSize, match="VLLM_MOE_DP_CHUNK_SIZE="):
        rules.dispatch_budget(LL, "0.19.1", environ={"VLLM_MOE_DP_CHUNK_SIZE": raw})
    assert rules.dispatch_budget(LL, "0.20.0", environ={"VLLM_MOE_DP_CHUNK_SIZE": raw}).tokens == 256


@pytest.mark.parametrize(
    "version, tokens, deployment",
    [("0.19.1", 64, (64, {"VLLM_MOE_DP_CHUNK_SIZE": "256"})), ("0.19.1", 1024, (1024, {"VLLM_MOE_DP_CHUNK_SIZE": "1024"})),
     ("0.33.0", 64, (256, {})), ("0.33.0", 1024, (1024, {}))],
)
def test_the_smallest_deployment_that_dispatches_a_token_count(version, tokens, deployment):
    assert rules.smallest_deployment(LL, version, tokens) == deployment
    assert rules.smallest_deployment(HT, version, tokens) == (tokens, {})


def test_the_bench_adapters_default_buffer_is_the_rules_one():
    from bench.backends import deepep_common

    assert deepep_common.LL_VLLM_MAX_TOKENS == rules.default_dispatch_tokens(LL) == 256


# ---- EPLB ------------------------------------------------------------------------------------


def test_eplb_redundant_experts_must_divide_over_the_ep_size_in_every_release():
    for version in ("0.10.2", "0.21.0", "0.22.0", "0.33.0"):
        [reason] = rules.eplb_reasons(256, 2, 8, version, enable_eplb=True, expert_parallel=True)
        assert reason.startswith("EPLB spreads 258 physical experts (256 routed + 2 redundant) over EP size 8")
        assert reason.endswith("use num_redundant_experts 0 or 8")
        assert ("AssertionError" if version < "0.22" else "ValueError") in reason
    assert rules.eplb_reasons(256, 32, 16, "0.33.0", enable_eplb=True, expert_parallel=True) == []
    assert rules.eplb_reasons(256, 2, 1, "0.33.0", enable_eplb=True, expert_parallel=True) == []


def test_redundant_experts_without_eplb_and_eplb_without_ep_are_refused():
    [no_eplb] = rules.eplb_reasons(256, 8, 8, "0.33.0", enable_eplb=False, expert_parallel=True)
    assert no_eplb.startswith("8 redundant experts without --enable-eplb")
    [no_ep] = rules.eplb_reasons(256, 0, 8, "0.33.0", enable_eplb=True, expert_parallel=False)
    assert "enable_expert_parallel must be True to use EPLB" in no_ep


def test_the_backend_rules_see_the_physical_experts():
    profile = MoeProfile.from_shape(7168, 256, 8, "bf16")
    verdict = rules.legal(HT, profile, None, 8, "0.33.0", gpu_arch="sm90", redundant_experts=2)
    assert verdict.reasons[0] == ("deepep_high_throughput needs the 258 experts (256 routed + 2 redundant) "
                                  "to divide evenly over EP size 8")
    assert rules.legal(HT, profile, None, 8, "0.33.0", gpu_arch="sm90", redundant_experts=8).ok


def test_every_rank_needs_an_expert():
    profile = MoeProfile.from_shape(7168, 256, 8, "bf16")
    for backend in rules.recommendable_backends("0.33.0"):
        verdict = rules.legal(backend, profile, None, 512, "0.33.0", gpu_arch="sm100")
        assert not verdict.ok and verdict.reasons[0].startswith(
            "EP size 512 is larger than the 256 experts: 256 ranks would hold no expert"), backend
    assert rules.legal_alternatives(profile, None, 512, "0.33.0", gpu_arch="sm90") == []


# ---- serve options and DBO ------------------------------------------------------------------


def test_options_by_release():
    o = rules.SERVE_OPTIONS
    assert not o["--enable-microbatching"].accepted_by("0.33.0") and not o["--enable-microbatching"].released
    assert (o["--enable-dbo"].accepted_by("0.10.2"), o["--enable-dbo"].accepted_by("0.11.0")) == (False, True)
    assert [o["--num-redundant-experts"].accepted_by(v) for v in ("0.10.0", "0.11.2", "0.12.0")] == [True, True, False]
    assert [o["--num-redundant-experts"].deprecated_in(v) for v in ("0.10.1.1", "0.10.2")] == [False, True]
    assert (o["--all2all-backend"].accepted_by("0.11.0"), o["--all2all-backend"].accepted_by("0.11.1")) == (False, True)


def test_dbo_backends_by_release():
    assert rules.dbo_backends("0.11.0") == (LL, HT)
    assert rules.dbo_backends("0.23.0") == (LL, HT)
    assert rules.dbo_backends("0.24.0") == DBO_BACKENDS == (LL, HT, "nixl_ep")


# ---- upstream reports -----------------------------------------------------------------------


def texts(backend, version, **kw):
    return [n.text for n in reports_for(backend, version, **kw)]


def test_the_double_reduce_applies_before_0_22_with_tp_above_1_only():
    full = dict(dtype="nvfp4", arch="sm100", role="decode")
    assert [t.split(" (")[0] for t in texts(TWO_SIDED, "0.21.0", tensor_parallel_size=2, **full)] == [
        "upstream report #41382", "upstream report #39722"]
    assert texts(TWO_SIDED, "0.22.0", tensor_parallel_size=2, **full)[0].startswith("upstream report #39722")
    assert all("#41382" not in t for t in texts(TWO_SIDED, "0.21.0", tensor_parallel_size=1, **full))
    [note] = reports_for(ONE_SIDED, "0.21.0", tensor_parallel_size=2, **full)
    assert note.certain and note.text == (
        "upstream report #41382 (fixed; affects vLLM 0.16.0-0.21.x, fixed in 0.22.0): vLLM reduced the FlashInfer "
        "combine output a second time over the TP group (accuracy drop), with -tp > 1 and data + expert "
        "parallelism (its test: -tp 2 -dp 2)")


def test_a_report_in_a_range_nobody_checked_says_its_status_is_unknown():
    [double, gibberish] = reports_for(TWO_SIDED, "0.14.1", dtype="bf16", arch="sm100", tensor_parallel_size=2)
    assert not double.certain and "whether vLLM 0.14.1 has it is unknown (first seen in 0.16.0, nobody checked " \
                                  "0.11.0-0.15.x)" in double.text
    assert not gibberish.certain
    assert reports_for(TWO_SIDED, "0.10.2") == []  # before the backend: no report


def test_reports_are_left_out_where_a_known_condition_rules_them_out():
    assert texts(TWO_SIDED, "0.33.0", arch="sm90", dtype="bf16") == []  # #39722 was seen on GB200 only
    [mxfp8] = reports_for(TWO_SIDED, "0.33.0", arch="sm90")
    assert mxfp8.report.ref == "#42118" and mxfp8.text.endswith("applies only to mxfp8 dispatch")
    assert texts(ONE_SIDED, "0.33.0", dtype="nvfp4", arch="sm100", role="decode", tensor_parallel_size=1) == []
    [prefill] = reports_for(ONE_SIDED, "0.33.0", dtype="nvfp4", arch="sm100", role="prefill",
                                  tensor_parallel_size=1)
    assert prefill.certain and prefill.text.startswith(
        "upstream report #40373 (open as of 2026-12-01; seen from vLLM 0.19.1, no fix known): DeepSeek-R1 NVFP4")
    [unknown_role] = reports_for(ONE_SIDED, "0.33.0", dtype="nvfp4", arch="sm100", tensor_parallel_size=1)
    assert not unknown_role.certain and unknown_role.text.endswith("applies where this instance runs prefill")


def test_every_report_row_is_complete():
    for r in rules.UPSTREAM_REPORTS:
        assert r.ref.startswith("#") and r.source and r.summary and r.status in ("open", "fixed")
        assert (r.status == "fixed") == (r.fixed_in is not None)
        assert r.backends <= set(rules.BACKENDS)
