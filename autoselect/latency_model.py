"""The latency model of one all2all backend: ``latency = a + bytes / bandwidth``.

``a`` is the fixed cost of a round trip (launches, synchronisation), ``bandwidth`` what the
bytes on the wire cost. The selector fits it on one backend's points over token counts to fill
the token counts nobody measured (``autoselect.selector.estimate``); the reference data fits it
across the published shapes at one token count to transfer a backend's numbers to another
shape (``autoselect.reference.transfer``). Pure Python.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence


class LatencyFit(NamedTuple):
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
