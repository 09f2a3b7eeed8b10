"""The noise band every latency carries, and the one way two banded latencies are compared.

A measured median ``L`` stands for the interval ``[L - H, L + H]`` (:func:`point_rel_halfwidth`
gives ``H / L``). Two latencies differ only when their intervals do not overlap
(:func:`band_compare`); ``recommend`` compares workload-weighted latencies and bands this way, and
``tune`` prunes with the same floor (:data:`REL_FLOOR`) and the same ``Z``. Pure Python.
"""

from __future__ import annotations

import math
from typing import Any

#: Half-width of a measured median, in standard errors (about a 95 % interval).
Z = 2.0
#: Run-to-run reproducibility floor: two runs of the same point differ by about this much
#: even when each reached its 0.5 % noise target, so no band is narrower (relative).
REL_FLOOR = 0.01
#: The band of a measurement that says nothing about its noise (relative): wide enough that
#: such a measurement does not decide anything by itself.
UNKNOWN_NOISE_BAND = 0.10

#: The verdicts of :func:`band_compare`, from the first latency's point of view.
FASTER, SLOWER, TIE = "faster", "slower", "tie"


def point_rel_halfwidth(result: Any) -> float:
    """Relative half-width of one measured median: ``max(Z * stderr_rel, REL_FLOOR)``.

    ``result`` is a :class:`db.records.Result` (or a row with its fields). ``stderr_rel`` is the
    stored ``noise_stdrel`` (relative standard error of the median), else
    ``1.2533 * latency_stdrel / sqrt(samples)`` (the median's standard error under normal noise),
    else the p10..p90 spread / 2.56 / sqrt(samples); with none of these the band is
    :data:`UNKNOWN_NOISE_BAND`.
    """
    stderr = result.noise_stdrel
    if stderr is None:
        samples = result.samples or 0
        p10, p50, p90 = result.latency_us_p10, result.latency_us_p50, result.latency_us_p90
        if result.latency_stdrel is not None and samples > 0:
            stderr = 1.2533 * result.latency_stdrel / math.sqrt(samples)
        elif p10 is not None and p90 is not None and p50 and samples > 0:
            stderr = 1.2533 * ((p90 - p10) / 2.5631 / p50) / math.sqrt(samples)
        else:
            return UNKNOWN_NOISE_BAND
    return max(Z * stderr, REL_FLOOR)


def band_compare(latency_us: float, halfwidth_us: float, ref_latency_us: float, ref_halfwidth_us: float) -> str:
    """:data:`FASTER` / :data:`SLOWER` when the bands ``[L - H, L + H]`` do not overlap, else :data:`TIE`."""
    if latency_us + halfwidth_us < ref_latency_us - ref_halfwidth_us:
        return FASTER
    if latency_us - halfwidth_us > ref_latency_us + ref_halfwidth_us:
        return SLOWER
    return TIE
