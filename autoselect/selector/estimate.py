"""The latency model ``latency = a + bytes / bandwidth``: filling the token counts nobody measured.

A backend's expected latency at a token count is its measurement there when there is one;
otherwise the model is fitted on the :data:`FIT_POINTS` measured points nearest in log-tokens
(:func:`estimate_latency`). Estimates are marked (``interpolated`` / ``extrapolated``), carry
a wider band, and are refused beyond :data:`EXTRAPOLATION_LIMIT` times the measured range.
Pure Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from autoselect.noise import Z
from autoselect.selector.schema import EVIDENCE_KINDS, MEASURED, BucketValue, FitSummary
from autoselect.workload import WorkloadSpec

#: Extra relative band of an estimated (not measured) latency, on top of the model's residuals.
ESTIMATE_FLOOR = 0.03
#: Refuse to extrapolate beyond this factor outside the measured token range.
EXTRAPOLATION_LIMIT = 4.0
#: How many measured points, nearest in log-tokens, the local latency fit uses.
FIT_POINTS = 4


@dataclass(frozen=True)
class LatencyFit:
    """``latency_us = a_us + bytes * us_per_byte``, fitted on ``n`` points.

    ``rel_rms`` is the root-mean-square relative residual of the fit on its own points.
    """

    a_us: float
    us_per_byte: float
    n: int
    rel_rms: float

    @property
    def bandwidth_gbps(self) -> float | None:
        """The fitted bandwidth in GB/s (bytes / ns), None when the fit is flat."""
        return 1e-3 / self.us_per_byte if self.us_per_byte > 0 else None

    def predict(self, nbytes: float) -> float:
        """Expected latency in microseconds for ``nbytes`` bytes per rank."""
        return self.a_us + nbytes * self.us_per_byte

    def summary(self) -> FitSummary:
        """The fit as the JSON shows it."""
        return FitSummary(a_us=self.a_us, bandwidth_gbps=self.bandwidth_gbps, points=self.n, rel_rms=self.rel_rms)


def fit_latency(points: Sequence[tuple[float, float]]) -> LatencyFit:
    """Fit ``latency = a + bytes * b`` with ``a, b >= 0`` to ``(bytes, latency_us)`` points.

    Least squares on relative errors (each residual divided by its latency, i.e. weights
    ``1 / latency^2``), so a 10 µs point counts as much as a 10 ms one. Non-negativity is
    enforced exactly: the unconstrained optimum is used when it is feasible, else the better
    of the two one-parameter fits on the boundary (``a = 0`` or ``b = 0``). Pure Python.
    """
    if not points:
        raise ValueError("fit_latency needs at least one point")
    xs = [float(x) for x, _ in points]
    ys = [float(y) for _, y in points]
    ws = [1.0 / (y * y) if y > 0 else 1.0 for y in ys]

    def sse(a: float, b: float) -> float:
        return sum(w * (y - a - b * x) ** 2 for x, y, w in zip(xs, ys, ws))

    sw = sum(ws)
    swx = sum(w * x for w, x in zip(ws, xs))
    swy = sum(w * y for w, y in zip(ws, ys))
    swxx = sum(w * x * x for w, x in zip(ws, xs))
    swxy = sum(w * x * y for w, x, y in zip(ws, xs, ys))
    det = sw * swxx - swx * swx
    options = []
    if det > 1e-12 * max(sw * swxx, 1e-300):
        a = (swxx * swy - swx * swxy) / det
        b = (sw * swxy - swx * swy) / det
        if a >= 0 and b >= 0:
            options.append((a, b))
    if not options:
        options.append((swy / sw, 0.0))  # b = 0: weighted mean
        if swxx > 0:
            options.append((0.0, max(swxy / swxx, 0.0)))  # a = 0: through the origin
    a, b = min(options, key=lambda ab: sse(*ab))
    rel = [(y - a - b * x) / y for x, y in zip(xs, ys) if y > 0]
    rel_rms = math.sqrt(sum(r * r for r in rel) / len(rel)) if rel else 0.0
    return LatencyFit(a_us=a, us_per_byte=b, n=len(xs), rel_rms=rel_rms)


@dataclass(frozen=True)
class MeasuredPoint:
    """One chosen measurement of a backend: tokens, median, relative band, result id, and the
    kind of evidence it is (:data:`autoselect.selector.schema.EVIDENCE_KINDS`)."""

    tokens_per_rank: int
    latency_us: float
    rel_halfwidth: float
    result_id: int | None = None
    kind: str = MEASURED


def weakest_kind(points: Sequence[MeasuredPoint]) -> str:
    """The weakest evidence kind among ``points`` (a value is only as strong as what it rests on)."""
    return max((p.kind for p in points), key=EVIDENCE_KINDS.index, default=MEASURED)


def estimate_latency(points: Sequence[MeasuredPoint], tokens: int, bytes_per_token: int) -> BucketValue:
    """The expected latency at ``tokens`` per rank from one backend's measured points.

    A measured token count is returned as measured. Otherwise the latency model is fitted on
    the :data:`FIT_POINTS` measured points nearest in log-tokens; the band is the widest band
    of those points plus ``max(Z * rel_rms, ESTIMATE_FLOOR)``. Beyond
    :data:`EXTRAPOLATION_LIMIT` times the measured range the estimate is refused (``missing``).
    """
    by_tokens = {p.tokens_per_rank: p for p in points}
    if tokens in by_tokens:
        p = by_tokens[tokens]
        ids = (p.result_id,) if p.result_id is not None else ()
        return BucketValue(tokens, p.latency_us, p.latency_us * p.rel_halfwidth, "measured", ids, evidence=p.kind)
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
    rel = max(p.rel_halfwidth for p in used) + max(Z * fit.rel_rms, ESTIMATE_FLOOR)
    source = "interpolated" if lo < tokens < hi else "extrapolated"
    bw = fit.bandwidth_gbps
    used_tokens = ", ".join(str(p.tokens_per_rank) for p in sorted(used, key=lambda p: p.tokens_per_rank))
    note = f"a={fit.a_us:.3g}us" + (f" + bytes/{bw:.3g}GB/s" if bw else "") + f" fitted on {fit.n} points ({used_tokens} tokens)"
    ids = tuple(p.result_id for p in used if p.result_id is not None)
    return BucketValue(tokens, latency, latency * rel, source, ids, note, evidence=weakest_kind(used))


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
