"""The per-release facts in the rules tables: backend selection, dispatch budgets, EPLB, DBO, reports.

Each expected value was read from that release's source (see each row's ``source``); the tests
pin the tables to those readings and the functions to the tables.
"""

from __future__ import annotations

import pytest

from autoselect import rules
from autoselect.model import MoeProfile
from autoselect.rules.budgets import InvalidChunkSize
from autoselect.rules.one_sided import one_sided_consequence
from autoselect.rules.reports import reports_for
from autoselect.rules.selection import default_backend
from autoselect.rules.serve_options import DBO_BACKENDS
from autoselect.rules.versions import RELEASES

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


# ---- 0.34.0 and the releases after it ---------------------------------------------------------


def test_the_tables_know_0_34_0_as_the_newest_release():
    assert rules.NEWEST_VLLM == RELEASES[-1] == "0.34.0"
    assert [rules.parse_version(v) for v in RELEASES] == sorted(rules.parse_version(v) for v in RELEASES)
    assert default_backend("0.34.0") == "allgather_reducescatter"  # 0.34.0 config/parallel.py:229
    e = rules.effective_backend("0.34.0", None, LL)  # the variable: not read, warned (platforms/interface.py:1497)
    assert (e.backend, e.variable_ignored, e.era.variable) == ("allgather_reducescatter", True, "ignored-warned")


def test_a_release_newer_than_the_tables_gets_one_warning_naming_the_newest_read():
    assert rules.newer_than_known("0.34.0") is None and rules.newer_than_known("0.33.0") is None
    assert rules.newer_than_known("0.34.0+cu130") is None
    assert rules.newer_than_known("0.41.0") == (
        "vLLM 0.41.0 is newer than every release autoselect has read (newest: 0.34.0); it is judged by 0.34.0's "
        "rules, and anything that changed after 0.34.0 is unchecked")
    assert rules.newer_than_known("0.35.0rc1").startswith("vLLM 0.35.0rc1 is newer")
    # judged by the newest rows: every open-ended range covers it
    assert rules.parser_choices("0.41.0") == rules.parser_choices("0.34.0")


def test_0_34_accepts_mori_again_and_deprecates_the_split_names():
    # 0.34.0 config/parallel.py:45-61 (All2AllBackend: + "mori"); engine/arg_utils.py:1174-1176 removes passthrough
    assert rules.parser_choices("0.34.0") == [
        "allgather_reducescatter", "deepep_high_throughput", "deepep_low_latency", "deepep_v2",
        "flashinfer_all2allv", "flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided", "moonep", "mori",
        "mori_high_throughput", "mori_low_latency", "naive", "nixl_ep", "pplx"]
    assert [rules.value_known_to("mori", v) for v in ("0.15.0", "0.22.0", "0.23.0", "0.33.0", "0.34.0")] == [
        True, True, False, False, True]
    # cuda_communicator.py:236-247: "'%s' is deprecated ... Use 'mori'"
    assert rules.deprecation("mori_low_latency", "0.33.0") is None
    assert rules.deprecation("mori_high_throughput", "0.34.0").instead == "mori"
    assert "passthrough" not in rules.parser_choices("0.34.0")
    assert [h.value for h in rules.HIDDEN_VALUES] == ["passthrough"]


def test_mori_runs_on_rocm_only_and_says_so_on_a_cuda_arch():
    profile = MoeProfile.from_shape(4096, 128, 8, "bf16")
    verdict = rules.legal("mori", profile, None, 8, "0.34.0", gpu_arch="sm90")
    assert verdict.reasons == ("mori does not run on sm90 (only on gfx942, gfx950)",)
    warned = rules.legal("mori_low_latency", profile, None, 8, "0.34.0", gpu_arch="sm100")
    assert any(w.startswith("mori_low_latency is deprecated in vLLM 0.34.0: use mori") for w in warned.warnings)


def test_dbo_takes_allgather_reducescatter_on_rocm_from_0_33_only():
    # 0.33.0 config/vllm.py:2182-2190 (is_rocm: + allgather_reducescatter); 0.32.0 :2104-2117 has no such branch
    assert rules.dbo_backends("0.34.0") == (LL, HT, "nixl_ep")
    assert rules.dbo_backends("0.34.0", "rocm") == (LL, HT, "nixl_ep", "allgather_reducescatter")
    assert rules.dbo_backends("0.32.0", "rocm") == (LL, HT, "nixl_ep")


@pytest.mark.parametrize(
    "moe_backend, backend, version, bound, refused",
    [("flashinfer_moe_ep_cutedsl", "allgather_reducescatter", "0.34.0", "passthrough", False),
     ("FLASHINFER-MOE-EP-CUTEDSL", "allgather_reducescatter", "0.32.0", "passthrough", False),  # the parser normalizes
     ("flashinfer_moe_ep_mega_deep_gemm", LL, "0.34.0", None, True),
     ("flashinfer_moe_ep_cutedsl", "flashinfer_nvlink_one_sided", "0.33.0", None, True),
     ("flashinfer_cutlass", LL, "0.34.0", "none", False),  # an ordinary MoE backend: no binding
     ("flashinfer_moe_ep_cutedsl", LL, "0.31.0", "none", False)],  # before 0.32.0: no such value
)
def test_a_self_dispatching_moe_backend_binds_passthrough_or_refuses_the_backend(moe_backend, backend, version, bound,
                                                                                  refused):
    # 0.34.0 vllm/config/kernel.py:194-228 bind_passthrough_all2all_backend
    binding = rules.moe_backend_binding(moe_backend, backend, version)
    if bound == "none":
        assert binding is None
        return
    assert binding.backend == bound and bool(binding.refused) == refused
    if refused:
        assert binding.refused.startswith(f"vLLM {version} refuses to start: --moe-backend ")
        assert "cannot be paired with --all2all-backend" in binding.refused and "kernel.py:194-228" in binding.refused


def test_0_34_picks_the_fewest_redundant_experts_that_divide_when_the_line_names_none():
    # 0.34.0 config/parallel.py:78-84, :652-684; 0.33.0 parallel.py:77 (default 0)
    assert rules.redundant_experts(256, None, 6, "0.34.0", enable_eplb=True) == 2
    assert rules.redundant_experts(256, None, 6, "0.33.0", enable_eplb=True) == 0
    assert rules.redundant_experts(256, 4, 6, "0.34.0", enable_eplb=True) == 4
    assert rules.redundant_experts(256, None, 6, "0.34.0", enable_eplb=False) == 0
    assert rules.eplb_reasons(256, rules.redundant_experts(256, None, 6, "0.34.0", enable_eplb=True), 6, "0.34.0",
                              enable_eplb=True, expert_parallel=True) == []


def test_async_eplb_by_release():
    # no use_async before 0.12.0; default True from 0.23.0 (config/parallel.py:81); forced synchronous next to
    # allgather_reducescatter in 0.17.0-0.19.x (PR #35212; 0.17.0 parallel.py:777-786)
    assert rules.eplb_is_async("0.11.1", {"use_async": True}, enable_eplb=True) is False
    assert rules.eplb_is_async("0.22.0", None, enable_eplb=True) is False
    assert rules.eplb_is_async("0.23.0", None, enable_eplb=True) is True
    assert rules.eplb_is_async("0.34.0", {"use_async": "false"}, enable_eplb=True) is False
    assert rules.eplb_is_async("0.34.0", None, enable_eplb=False) is False
    [note] = rules.eplb_notes("allgather_reducescatter", "0.18.0", {"use_async": True}, enable_eplb=True)
    assert note.startswith("vLLM 0.18.0 runs EPLB synchronously with allgather_reducescatter")
    assert rules.eplb_notes("allgather_reducescatter", "0.20.0", {"use_async": True}, enable_eplb=True) == []
    assert rules.eplb_notes(LL, "0.18.0", {"use_async": True}, enable_eplb=True) == []


def test_the_reports_that_need_a_line_setting_apply_only_with_it():
    on = {"enforce_eager": True, "enable_dbo": False, "eplb_async": False}
    # #51824: deepep_v2 + --enforce-eager + TRT-LLM BF16 experts (trtllm_bf16_moe.py:182 in 0.26.0, fixed :211 in 0.29.0)
    [crash] = reports_for("deepep_v2", "0.28.0", dtype="bf16", arch="sm100", settings=on)
    assert crash.certain and crash.text.startswith(
        "upstream report #51824 (fixed; affects vLLM 0.26.0-0.28.x, fixed in 0.29.0): vLLM crashed at start-up")
    assert reports_for("deepep_v2", "0.29.0", dtype="bf16", arch="sm100", settings=on) == []
    assert reports_for("deepep_v2", "0.28.0", dtype="bf16", arch="sm100", settings={**on, "enforce_eager": False}) == []
    assert reports_for("deepep_v2", "0.28.0", dtype="bf16", arch="sm100") == []  # recommend's deployments
    [unknown] = reports_for("deepep_v2", "0.28.0", dtype="bf16", arch="sm100", settings={"enforce_eager": None})
    assert not unknown.certain and unknown.text.endswith("applies only with --enforce-eager")
    # #35212 / #32860: async EPLB hangs, fixed in 0.17.0 (forced sync; NCCL_MAX_CTAS, eplb_utils.py:15-52)
    hang = {"eplb_async": True, "enable_dbo": False}
    assert [n.report.ref for n in reports_for("allgather_reducescatter", "0.16.0", settings=hang)] == ["#35212"]
    assert [n.report.ref for n in reports_for(LL, "0.16.0", settings=hang)] == ["#32860"]
    assert reports_for(LL, "0.17.0", settings=hang) == []
    # #29670 (open): deepep_low_latency + --enable-dbo on one node of H20s
    [dbo] = reports_for(LL, "0.34.0", arch="sm90", settings={"enable_dbo": True})
    assert dbo.text.startswith("upstream report #29670 (open as of 2026-12-03; seen from vLLM 0.11.2, no fix known)")
    assert reports_for(LL, "0.34.0", arch="sm100", settings={"enable_dbo": True}) == []


def test_one_sided_names_what_the_release_dispatches():
    # 0.34.0 fused_moe/all2all_utils.py:56-105: nvfp4, mxfp8, DeepSeek block fp8, bf16/fp16
    words = one_sided_consequence("bf16", "0.34.0")
    assert "it dispatches bf16, fp16, fp8_block128, mxfp8, nvfp4 on one-sided" in words
    assert "but autoselect refuses it on purpose" in words
    assert one_sided_consequence("fp8", "0.34.0").endswith(
        "it dispatches only bf16, fp16, fp8_block128, mxfp8, nvfp4 on one-sided")


def test_flashinfer_pins_and_the_0_7_3_install_hazard():
    from autoselect.rules import flashinfer as fi

    assert (fi.pin("0.34.0").pin, fi.pin("0.33.0").pin, fi.pin("0.31.0").pin) == ("0.7.3", "0.7.2.post1", "0.7.0.post1")
    assert fi.pin("0.32.0") is None and fi.pin("0.41.0") is None  # not read: not known
    assert fi.install_hazard("0.33.0") is None and fi.install_hazard("0.41.0") is None
    hazard = fi.install_hazard("0.34.0")  # one sentence; its sources in the detail
    assert hazard.text == ("vLLM 0.34.0 pins flashinfer-python==0.7.3, which is not on PyPI: install it from "
                           "FlashInfer's own wheel index or use the vllm/vllm-openai image")
    assert hazard.detail.startswith(hazard.text + " (vllm 0.34.0 wheel METADATA:90")


def test_which_flashinfer_api_each_release_calls_and_which_flashinfer_can_make_the_calls():
    from autoselect.rules import flashinfer as fi

    assert [(c.api, c.fence_only) for c in (fi.vllm_calls(ONE_SIDED, v) for v in ("0.32.0", "0.33.0", "0.34.0"))] == [
        ("legacy", False), ("moe_ep", False), ("moe_ep", True)]
    assert [fi.vllm_calls(TWO_SIDED, v).api for v in ("0.11.0", "0.33.0", "0.34.0", "0.41.0")] == [
        "legacy", "legacy", "moe_ep", "moe_ep"]
    assert fi.vllm_calls(ONE_SIDED, "0.17.0") is None
    v034_one, v033_two = fi.vllm_calls(ONE_SIDED, "0.34.0"), fi.vllm_calls(TWO_SIDED, "0.33.0")
    assert fi.calls_supported(v034_one, fi.api("0.7.4")) is None
    assert "has no cft / lamport" in fi.calls_supported(v034_one, fi.api("0.7.2.post1"))
    assert fi.calls_supported(v033_two, fi.api("0.7.2.post1")) is None
    assert fi.calls_supported(v033_two, fi.api("0.7.4")).startswith("FlashInfer 0.7.4 removed the legacy classes")
    assert "runtime_max_tokens_per_rank=" in fi.calls_supported(fi.vllm_calls(TWO_SIDED, "0.34.0"), fi.api("0.7.2.post1"))
    assert 3 in fi.api("0.7.4").one_sided_top_k and 3 not in fi.api("0.7.2.post1").one_sided_top_k
