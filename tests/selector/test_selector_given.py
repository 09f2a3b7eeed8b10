"""Deciding from given reference points (autoselect/selector/given.py): the regret study's hold-outs."""

from __future__ import annotations

import pytest

from autoselect.payload import all2all_bytes_per_token
from autoselect.reference import default
from autoselect.selector import DEFAULT_POLICY, estimate_given, recommend, recommend_given
from autoselect.workload import Deployment, Shape, WorkloadSpec

REF = "ref-h200_sxm-x8"
HT, LL, AGRS = "deepep_high_throughput", "deepep_low_latency", "allgather_reducescatter"
DSV3 = Shape(hidden=7168, top_k=8, experts=256, dtype="bf16")
OPTIONS = dict(deployment=Deployment(dp=8, tp=1), host_class=REF, vllm_version="0.34.0",
               workload=WorkloadSpec("decode", ((32, 0.5), (64, 0.3), (128, 0.2))))


def curves() -> dict:
    ref = default()
    shape = dict(hidden=DSV3.hidden, top_k=DSV3.top_k, experts=DSV3.experts, dtype="bf16", world_size=8)
    return {b: ref.query(REF, b, **shape) for b in (HT, LL, AGRS)}


def test_every_given_point_decides_as_the_reference_itself_decides():
    given = recommend_given(DSV3.profile(), curves(), **OPTIONS)
    whole = recommend(DSV3.profile(), conn=None, **OPTIONS)
    assert given.backend == whole.backend
    assert {c.backend: c.weighted_us for c in given.candidates} == {c.backend: c.weighted_us for c in whole.candidates}


def test_a_backend_without_points_is_held_out_and_a_held_out_count_is_estimated():
    points = curves()
    low_latency = [p for p in points[LL] if p.tokens_per_rank != 64]
    rec = recommend_given(DSV3.profile(), {AGRS: points[AGRS], LL: low_latency}, policy=DEFAULT_POLICY, **OPTIONS)
    assert {c.backend for c in rec.candidates if c.weighted_us is not None} == {AGRS, LL}
    two_sided = next(c for c in rec.candidates if c.backend == "flashinfer_nvlink_two_sided")
    assert two_sided.weighted_us is None  # held out: no number, and never the pick
    # high-throughput is no candidate of a decode workload at all: vLLM runs it without CUDA graphs
    assert next(r for r in rec.rejected if r.backend == HT).kind == "ineligible"
    bucket = next(b for b in next(c for c in rec.candidates if c.backend == LL).buckets if b.tokens_per_rank == 64)
    nbytes = all2all_bytes_per_token("bf16", DSV3.hidden, DSV3.top_k)
    assert bucket.latency_us == pytest.approx(estimate_given(low_latency, 64, nbytes).latency_us)
    published = next(p for p in points[LL] if p.tokens_per_rank == 64)
    # a given count is as given, on vLLM's footing (DeepEP low-latency graph-captured: x0.68..x1.00 of its row)
    assert estimate_given(points[LL], 64, nbytes).latency_us == pytest.approx(0.84 * published.latency_us)
