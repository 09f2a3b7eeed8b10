"""The statistics of a race: pooled points, run-to-run noise, Student-t bands, scores and comparisons.

Pure functions and small value types (no state): :mod:`autoselect.tune.index` feeds them the
measurements, :mod:`autoselect.tune.race` decides with what they return.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from autoselect.noise import REL_FLOOR, Z


@dataclass
class PointEstimate:
    """Pooled latency of one (backend, setting, tokens) point."""

    latency_us: float
    rel_halfwidth: float
    count: int

    @property
    def at_floor(self) -> bool:
        """More measurements cannot narrow this band (it is at the reproducibility floor)."""
        return self.rel_halfwidth <= REL_FLOOR * 1.0001


#: Student-t 97.5 % quantiles for 1..10 degrees of freedom (then 1.96 + 2.5 / dof, within 0.5 %).
_T975 = (12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23)


def t_quantile(dof: int) -> float:
    """The two-sided 95 % Student-t quantile for ``dof`` degrees of freedom, never below ``Z``.

    A noise estimated from few repeated runs is itself uncertain: with 2 degrees of freedom a
    band needs 4.3 standard deviations, not 2. ``dof`` 0 (no estimate) gives ``Z``.
    """
    if dof <= 0:
        return Z
    if dof <= len(_T975):
        return max(Z, _T975[dof - 1])
    return max(Z, 1.96 + 2.5 / dof)


@dataclass(frozen=True)
class Noise:
    """Run-to-run noise of one backend (setting): std of ln(latency) between repeated runs."""

    stdrel: float  # ~ relative standard deviation of one run's median
    dof: int  # degrees of freedom behind it: sum over buckets of (runs - 1)


def run_to_run_noise(groups: Iterable[list[float]]) -> Noise | None:
    """Pooled standard deviation of ``ln(latency)`` over repeated runs (None without repeats).

    ``groups`` holds the latencies of the repeated runs of each point of ONE backend (setting);
    each point is centred on its own mean, so buckets of different scale never mix, and the
    squared deviations are pooled with their degrees of freedom (not a median of one-run
    spreads, which a single slow run decides).
    """
    ss, dof = 0.0, 0
    for values in groups:
        logs = [math.log(v) for v in values if v and v > 0]
        if len(logs) >= 2:
            mu = sum(logs) / len(logs)
            ss += sum((x - mu) ** 2 for x in logs)
            dof += len(logs) - 1
    return Noise(math.sqrt(ss / dof), dof) if dof else None


def pool(measurements: Iterable, noise: Noise | None = None,
         extra_runs: int = 0, extra_dof: int = 0) -> PointEstimate | None:
    """Inverse-variance pooling of the ok measurements of one point.

    The band is the largest of: the pooled in-run band; ``t x noise / sqrt(runs)`` (the
    backend's run-to-run noise, which averages down over independent runs, with the Student-t
    quantile of its degrees of freedom); the selector's reproducibility floor ``REL_FLOOR``.
    ``extra_runs`` / ``extra_dof`` project the band after that many more runs (futility).
    """
    ok = [m for m in measurements if m.status == "ok" and m.latency_us]
    if not ok:
        return None
    weights = [1.0 / max(m.rel_halfwidth or 0.1, 1e-6) ** 2 for m in ok]
    total = sum(weights)
    lat = sum(w * m.latency_us for w, m in zip(weights, ok)) / total
    runs = len(ok) + extra_runs
    h = max(math.sqrt(len(ok) / runs) / math.sqrt(total), REL_FLOOR)
    if noise:
        h = max(h, t_quantile(noise.dof + extra_dof) * noise.stdrel / math.sqrt(runs))
    return PointEstimate(lat, h, len(ok))


@dataclass
class Score:
    """Workload-weighted latency of a backend (or setting) and its band, both in µs."""

    latency_us: float
    halfwidth_us: float


def score(points: dict[int, PointEstimate], buckets) -> Score | None:
    """``sum(w * latency)`` and ``sum(w * halfwidth)`` over the buckets; None unless every bucket has a point."""
    if any(t not in points for t, _ in buckets):
        return None
    lat = sum(w * points[t].latency_us for t, w in buckets)
    band = sum(w * points[t].latency_us * points[t].rel_halfwidth for t, w in buckets)
    return Score(lat, band)


@dataclass
class Comparison:
    """A challenger against the leader, bucket by bucket, relative.

    Per bucket: ``ln(challenger / leader)`` of the pooled points and its half-width
    ``sqrt(h_c^2 + h_l^2)`` (each point's band from its own backend's noise). The workload-
    weighted latency ratio and its bounds put every bucket at its band's end at once
    (``low``: every bucket as favourable to the challenger as its band allows).
    """

    challenger: str
    leader: str
    ratio: float  # sum(w * challenger) / sum(w * leader)
    low: float
    high: float
    buckets: dict[int, tuple[float, float]]  # tokens -> (log ratio, half-width)

    @property
    def verdict(self) -> str:
        """``slower`` / ``faster`` (the challenger, beyond the bands) or ``tie``."""
        return "slower" if self.low > 1.0 else "faster" if self.high < 1.0 else "tie"


def compare_points(challenger: str, leader: str, pc: dict[int, PointEstimate], pl: dict[int, PointEstimate],
                   buckets, safety: float) -> Comparison | None:
    """:class:`Comparison` of two backends' pooled points (None unless both have every bucket)."""
    if any(t not in pc or t not in pl for t, _ in buckets):
        return None
    per_bucket, base, mid, low, high = {}, 0.0, 0.0, 0.0, 0.0
    for t, w in buckets:
        d = math.log(pc[t].latency_us / pl[t].latency_us)
        half = safety * math.hypot(pc[t].rel_halfwidth, pl[t].rel_halfwidth)
        per_bucket[t] = (d, half)
        scale = w * pl[t].latency_us
        base += scale
        mid += scale * math.exp(d)
        low += scale * math.exp(d - half)
        high += scale * math.exp(d + half)
    return Comparison(challenger, leader, mid / base, low / base, high / base, per_bucket)
