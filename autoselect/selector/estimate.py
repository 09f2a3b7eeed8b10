"""Filling the token counts nobody measured with the latency model ``latency = a + bytes / bandwidth``.

A backend's expected latency at a token count is its measurement there when there is one;
otherwise the model is fitted on the :data:`FIT_POINTS` measured points nearest in log-tokens
(:func:`estimate_latency`). Estimates are marked (``interpolated`` / ``extrapolated``), carry
a wider band, and are refused beyond :data:`EXTRAPOLATION_LIMIT` times the measured range.
The model and its fit are :mod:`autoselect.latency_model` (the reference data's shape transfer
fits the same model). Pure Python.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Sequence

from autoselect.latency_model import LatencyFit, fit_latency
from autoselect.noise import Z
from autoselect.selector.answer import EVIDENCE_KINDS, MEASURED, POINT, BucketValue
from autoselect.workload import WorkloadSpec

__all__ = ["ESTIMATE_FLOOR", "EXTRAPOLATION_LIMIT", "FIT_POINTS", "LatencyFit", "MeasuredPoint", "estimate_latency",
           "fit_all", "fit_latency", "weakest_kind", "weighted", "weighted_range"]

#: Extra relative band of an estimated (not measured) latency, on top of the model's residuals.
ESTIMATE_FLOOR = 0.03
#: Refuse to extrapolate beyond this factor outside the measured token range.
EXTRAPOLATION_LIMIT = 4.0
#: How many measured points, nearest in log-tokens, the local latency fit uses.
FIT_POINTS = 4


class MeasuredPoint(NamedTuple):
    """One chosen measurement of a backend: tokens, median, relative band, result id, and the
    kind of evidence it is (:data:`autoselect.selector.answer.EVIDENCE_KINDS`)."""

    tokens_per_rank: int
    latency_us: float
    rel_halfwidth: float
    result_id: int | None = None
    kind: str = MEASURED
    range_us: tuple[float, float] | None = None  # a derived value's (lower, upper); latency_us is central
    bound: bool = False  # latency_us is only a lower bound
    footing: Any = None  # a reference point's autoselect.reference.footing.PointFooting: how it was put on vLLM's
    flat: bool = False  # a transfer that gives every shape the same value here (reference.transfer)


def weakest_kind(points: Sequence[MeasuredPoint]) -> str:
    """The weakest evidence kind among ``points`` (a value is only as strong as what it rests on)."""
    return max((p.kind for p in points), key=EVIDENCE_KINDS.index, default=MEASURED)


def estimate_latency(points: Sequence[MeasuredPoint], tokens: int, bytes_per_token: int,
                     estimate_error: float = ESTIMATE_FLOOR) -> BucketValue:
    """The expected latency at ``tokens`` per rank from one backend's measured points.

    A token count the evidence has a point at is returned as that point (source ``point``, its
    evidence kind beside it). Otherwise the latency model is fitted on
    the :data:`FIT_POINTS` measured points nearest in log-tokens; the band is the widest band
    of those points plus ``max(Z * rel_rms, estimate_error)``: :data:`ESTIMATE_FLOOR` unless the
    evidence knows its own interpolation error (the published reference does). Beyond
    :data:`EXTRAPOLATION_LIMIT` times the measured range the estimate is refused (``missing``).
    """
    by_tokens = {p.tokens_per_rank: p for p in points}
    if tokens in by_tokens:
        p = by_tokens[tokens]
        ids = (p.result_id,) if p.result_id is not None else ()
        return BucketValue(tokens, p.latency_us, p.latency_us * p.rel_halfwidth, POINT, ids, evidence=p.kind,
                           range_us=p.range_us, bound=p.bound, footing=p.footing,
                           flat=p.flat)
    if not points:
        return BucketValue(tokens, None, None, "missing", note="no measurement")
    lo = min(by_tokens)
    hi = max(by_tokens)
    if tokens > hi * EXTRAPOLATION_LIMIT or tokens * EXTRAPOLATION_LIMIT < lo:
        return BucketValue(
            tokens, None, None, "missing",
            note=f"refused: {tokens} tokens/rank is more than {EXTRAPOLATION_LIMIT:g}x outside "
            f"the measured range {lo}..{hi}",
        )
    nearest = sorted(points, key=lambda p: (abs(math.log(p.tokens_per_rank / tokens)), p.tokens_per_rank))
    used = nearest[:FIT_POINTS]
    fit = fit_latency([(p.tokens_per_rank * bytes_per_token, p.latency_us) for p in used])
    latency = fit.predict(tokens * bytes_per_token)
    rel = max(p.rel_halfwidth for p in used) + max(Z * fit.rel_rms, estimate_error)
    source = "interpolated" if lo < tokens < hi else "extrapolated"
    bw = fit.bandwidth_gbps
    used_tokens = ", ".join(str(p.tokens_per_rank) for p in sorted(used, key=lambda p: p.tokens_per_rank))
    note = f"a={fit.a_us:.3g}us" + (f" + bytes/{bw:.3g}GB/s" if bw else "") + f" fitted on {fit.n} points ({used_tokens} tokens)"
    ids = tuple(p.result_id for p in used if p.result_id is not None)
    return BucketValue(tokens, latency, latency * rel, source, ids, note, evidence=weakest_kind(used),
                       bound=any(p.bound for p in used), footing=used[0].footing,
                       flat=all(p.flat for p in used))


def fit_all(points: Sequence[MeasuredPoint], bytes_per_token: int) -> LatencyFit | None:
    """The latency model over every measured point of a backend (None without points)."""
    if not points:
        return None
    return fit_latency([(p.tokens_per_rank * bytes_per_token, p.latency_us) for p in points])


def weighted(values: Sequence[BucketValue], workload: WorkloadSpec) -> tuple[float | None, float | None]:
    """``(L, H)``: the workload-weighted latency ``sum(w_i * latency_i)`` and band ``sum(w_i * H_i)``;
    ``(None, None)`` when a bucket has no value."""
    if any(v.latency_us is None for v in values):
        return None, None
    weights = [w for _, w in workload.buckets]
    latency = sum(w * v.latency_us for w, v in zip(weights, values))
    halfwidth = sum(w * v.halfwidth_us for w, v in zip(weights, values))
    return latency, halfwidth


def weighted_range(values: Sequence[BucketValue], workload: WorkloadSpec) -> tuple[float, float] | None:
    """The workload-weighted ``(lower, upper)`` of values that all carry a range, else None."""
    if not values or any(v.range_us is None for v in values):
        return None
    weights = [w for _, w in workload.buckets]
    return (sum(w * v.range_us[0] for w, v in zip(weights, values)),
            sum(w * v.range_us[1] for w, v in zip(weights, values)))
