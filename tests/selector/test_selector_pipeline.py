"""The selector's steps and its seam for a second kind of evidence."""

from __future__ import annotations

import dataclasses

from autoselect.model import MoeProfile
from autoselect.selector import MeasuredPoint, recommend
from autoselect.selector.answer import Recommendation
from autoselect.selector.confidence import CONFIDENCE_CAPS
from autoselect.selector.confidence import Facts, confidence
from autoselect.selector.evidence import BackendEvidence, MeasuredEvidence
from autoselect.workload import Deployment, WorkloadSpec
from db.queries import StoredResult

AGRS, TWO_SIDED = "allgather_reducescatter", "flashinfer_nvlink_two_sided"
PROFILE = MoeProfile.from_shape(hidden_size=2048, num_experts=128, top_k=8, activation_dtype="bf16")
ASK = dict(conn=None, deployment=Deployment(dp=8), gpu_arch="sm90", vllm_version="0.33.0",
           workload=WorkloadSpec("explicit", ((64, 1.0),)))


def _row(backend, p50, rid):
    return StoredResult(backend=backend, world_size=8, tokens_per_rank=64, hidden=2048, top_k=8, experts=128,
                        activation_dtype="bf16", samples=200, latency_us_p50=p50, noise_stdrel=0.002,
                        versions={"vllm": "0.33.0"}, created_at="2026-11-20T00:00:00+00:00", id=rid)


class Published:
    """A stand-in for published reference measurements: a second evidence source."""

    kind = "published"
    considered = 1

    def __init__(self, latencies: dict[str, float]):
        self.latencies = latencies

    def for_backend(self, backend: str) -> BackendEvidence:
        if backend not in self.latencies:
            return BackendEvidence(backend, kind=self.kind)
        point = MeasuredPoint(64, self.latencies[backend], 0.05, kind=self.kind)
        return BackendEvidence(backend, kind=self.kind, source="a published table", points=(point,))


def test_a_second_evidence_source_fills_what_this_host_class_did_not_measure_and_says_so():
    rows = [_row(AGRS, 100.0, 1)]
    published = Published({TWO_SIDED: 50.0, AGRS: 1.0})  # its AGRS value never counts: measured is stronger
    rec = recommend(PROFILE, **ASK, rows=rows, evidence=lambda t: [published, MeasuredEvidence(t, rows)])
    by_backend = {c.backend: c for c in rec.candidates}
    assert by_backend[AGRS].buckets[0].evidence == "measured"
    assert by_backend[AGRS].weighted_us == 100.0
    assert by_backend[TWO_SIDED].buckets[0].evidence == "published"
    assert rec.backend == TWO_SIDED
    doc = {c["backend"]: c for c in rec.to_dict()["candidates"]}
    assert "evidence" not in doc[AGRS]["buckets"][0]  # the schema-1 document is unchanged for measured data
    assert doc[TWO_SIDED]["buckets"][0]["evidence"] == "published"
    assert rec.data_used.results_considered == 2  # one stored row + one published row


def test_without_other_sources_the_answer_is_the_measured_one():
    rows = [_row(AGRS, 100.0, 1), _row(TWO_SIDED, 90.0, 2)]
    default = recommend(PROFILE, **ASK, rows=rows)
    explicit = recommend(PROFILE, **ASK, rows=rows, evidence=lambda t: [MeasuredEvidence(t, rows)])
    assert default.to_dict() == explicit.to_dict()
    assert default.backend == TWO_SIDED


def test_the_json_keys_are_the_recommendation_fields_in_order():
    rec = recommend(PROFILE, **ASK, rows=[_row(AGRS, 100.0, 1)])
    fields = [f.name for f in dataclasses.fields(Recommendation)]
    assert list(rec.to_dict()) == [f for f in fields if f not in ("reference", "e2e", "vllm_validation",
                                                                   "vllm_version_warning", "tie", "expected_effect")]


def test_confidence_is_the_lowest_cap_of_the_rules_that_apply_and_no_data_stands_alone():
    base = Facts(single=False, compared=True, any_measured=True, unmeasured=False, close_call=False,
                 decisive_sources=frozenset({"point"}), stale=False)
    assert confidence(base) == ("high", [])
    level, reasons = confidence(base._replace(close_call=True, decisive_sources=frozenset({"extrapolated"})))
    assert level == "low" and len(reasons) == 2
    nothing = base._replace(compared=False, any_measured=False, unmeasured=True)
    assert confidence(nothing) == ("none", [CONFIDENCE_CAPS[0].text])
