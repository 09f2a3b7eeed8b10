"""Step 3: each backend the rules know becomes a candidate (with its value per bucket) or a rejection.

A backend is rejected when the rules refuse it (``illegal``, or ``unavailable`` where the serving
host lacks its package or NVLinks), when its evidence holds an incorrect / error result
(``disqualified``), when every row says it cannot run here (``unavailable``; rows of a machine
that only plans for other GPUs leave it unmeasured instead), or when what it does to vLLM's step
is not priced for this workload (``ineligible``: CUDA graphs off, :mod:`autoselect.selector.step`).
Otherwise it is a :class:`~autoselect.selector.answer.Candidate`: the latency model fills the
buckets its evidence did not measure, a bucket above the backend's step budget is priced as the
steps vLLM runs it in, and the workload weights them into one latency and band. A value that rests
on the published reference names it (``reference``), and the candidate carries the weakest
evidence kind of its values, the weighted range of derived values, whether its value is only a
lower bound, the dtype the backend really sends where it is not the model's activation dtype
(``autoselect.rules.wire``, behind the expert kernel vLLM runs: the latency model's bytes per
token are that dtype's), what it does to the step, and what the serving host must have for it.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Mapping, NamedTuple

from autoselect.payload import all2all_bytes_per_token
from autoselect.rules import Verdict
from autoselect.selector.answer import MEASURED, BucketValue, Candidate, FitSummary, Rejection
from autoselect.selector.estimate import estimate_latency, fit_all, weakest_kind, weighted, weighted_range
from autoselect.selector.evidence import BackendEvidence
from autoselect.selector.step import Step, step_lines, step_of, stepped
from autoselect.selector.target import RecommendTarget
from db.queries import StoredResult


class Judged(NamedTuple):
    """One backend's outcome: a candidate (with the stored rows behind its values and its step) or a rejection."""

    candidate: Candidate | None = None
    rejection: Rejection | None = None
    rows: Mapping[int, StoredResult] = MappingProxyType({})  # read only: one empty default for all
    step: Step | None = None  # a candidate's step on the target (step.py)


def judge_backend(target: RecommendTarget, verdict: Verdict, evidence: BackendEvidence) -> Judged:
    """The candidate or rejection of ``verdict.backend`` for ``target`` on ``evidence``."""
    backend = verdict.backend
    if not verdict.ok:  # the reasons' sources go to the answer's details (pipeline.py)
        return Judged(rejection=Rejection(backend, "unavailable" if verdict.unavailable else "illegal",
                                          list(verdict.reasons)))
    if evidence.disqualified:
        return Judged(rejection=Rejection(backend, "disqualified", [evidence.disqualified]))
    if evidence.unavailable and target.legality.serving_host:
        return Judged(rejection=Rejection(backend, "unavailable", [evidence.unavailable]))
    step = step_of(target, backend)
    if step.ineligible:
        return Judged(rejection=Rejection(backend, "ineligible", [step.ineligible]))
    # rows that could not run on a machine that only plans for other GPUs say nothing of the serving host
    planner = [f"not measured: {evidence.unavailable} (not the serving host)"] if evidence.unavailable else []
    points = evidence.points
    wire = target.wire(backend)
    sent = wire.dtype if wire is not None else target.activation_dtype
    p = target.profile
    per_token = all2all_bytes_per_token(sent, p.hidden_size, p.top_k)

    def value_at(tokens: int) -> BucketValue:
        return _named(estimate_latency(points, tokens, per_token, evidence.estimate_error), evidence.source)

    values = [stepped(value_at, t, step.cap, backend) for t in target.workload.tokens]
    fit = fit_all(points, per_token)
    latency, halfwidth = weighted(values, target.workload)
    status = "no data" if not points else "incomplete" if latency is None else "measured"
    rows = {rid: evidence.rows[rid] for v in values for rid in v.result_ids if rid in evidence.rows}
    missing = [evidence.missing] if evidence.missing and not points else []
    candidate = Candidate(backend=backend, status=status, weighted_us=latency, halfwidth_us=halfwidth,
                          buckets=values, fit=_summary(fit),
                          warnings=list(verdict.warnings) + list(evidence.warnings) + missing + planner,
                          evidence=weakest_kind(points), range_us=weighted_range(values, target.workload),
                          bound=any(v.bound for v in values if v.latency_us is not None),
                          wire_dtype=sent if sent != target.activation_dtype else None,
                          expert_kernel=wire.expert.kernel if wire is not None and wire.expert else None,
                          step=step_lines(step, values),
                          requires=list(verdict.requirements) or None)
    return Judged(candidate=candidate, rows=rows, step=step)


def _named(value: BucketValue, source: str) -> BucketValue:
    """A value that rests on something else than this host class's measurements, naming it."""
    if value.latency_us is None or value.evidence == MEASURED:
        return value
    return dataclasses.replace(value, reference=source)


def _summary(fit) -> FitSummary | None:
    """The latency model as the JSON shows it: ``a`` and the bandwidth (None without points)."""
    if fit is None:
        return None
    return FitSummary(a_us=fit.a_us, bandwidth_gbps=fit.bandwidth_gbps, points=fit.n, rel_rms=fit.rel_rms)
