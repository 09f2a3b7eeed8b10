"""The points drift compares: one measured point across runs and nodes, its observations, and the
reference (a median with its noise) a newest value is compared with.

A point is *slow* only beyond the measured noise: the slowdown must exceed both ``min_slowdown``
(default 5 %) and ``noise_k`` (default 3) times the combined relative noise of the two sides, where
each side's noise is the larger of the stored standard error of the median (``noise_stdrel``) and
the run-to-run spread of the reference values (1.4826 x MAD, relative): :func:`slow_threshold`.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from typing import Any, Iterable

from autoselect.options import MIN_SLOWDOWN, NOISE_K
from autoselect.workload import Shape

#: scale of the median absolute deviation to a standard deviation (normal data)
MAD_SCALE = 1.4826

#: the fields besides the shape that identify one measured point across runs and nodes
POINT_FIELDS = ("backend", "world_size", "tokens_per_rank", "combine_dtype", "routing", "kind", "device")


@dataclass(frozen=True)
class Point:
    """One measured point, independent of node and run: a backend at a shape, EP size and tokens."""

    backend: str
    shape: Shape
    world_size: int
    tokens_per_rank: int
    combine_dtype: str
    routing: str
    kind: str
    device: str
    knobs: str = "{}"  # canonical JSON of the tuned knobs

    def label(self) -> str:
        """A short human label: ``H7168 top8 E256 fp8_block128 ws8 T64``."""
        return f"{self.shape.label()} ws{self.world_size} T{self.tokens_per_rank}"


def point_of(result: Any) -> Point:
    """The :class:`Point` a stored result (a :class:`db.queries.StoredResult`) measured."""
    shape = Shape(hidden=result.hidden, top_k=result.top_k, experts=result.experts, dtype=result.activation_dtype)
    return Point(shape=shape, knobs=json.dumps(result.knobs or {}, sort_keys=True),
                 **{f: getattr(result, f) for f in POINT_FIELDS})


@dataclass(frozen=True)
class Observation:
    """One ok, legal measurement of one point on one node in one run."""

    machine_id: str
    hostname: str
    host_class: str
    run_id: int
    run_started_at: str
    point: Point
    latency_us: float
    noise_stdrel: float  # relative standard error of the median (0 when unknown)
    versions: tuple = ()  # sorted (key, value) pairs


def observations(results: Iterable[Any]) -> list[Observation]:
    """The usable observations among stored results: status ok, not illegal, with a median."""
    out = []
    for r in results:
        if r.status != "ok" or r.illegal or not r.latency_us_p50 or r.latency_us_p50 <= 0:
            continue
        out.append(Observation(
            machine_id=r.machine_id, hostname=r.hostname, host_class=r.host_class,
            run_id=r.run_id, run_started_at=r.run_started_at, point=point_of(r),
            latency_us=float(r.latency_us_p50), noise_stdrel=float(r.noise_stdrel or 0.0),
            versions=tuple(sorted((r.versions or {}).items())),
        ))
    return out


@dataclass(frozen=True)
class Reference:
    """What a newest value is compared with: a median of other values and its relative noise."""

    latency_us: float
    noise_stdrel: float
    count: int


def reference(values: list[float], stderrs: list[float]) -> Reference:
    """The median of ``values`` with its relative noise: the larger of the typical stored standard
    error and the run-to-run spread (1.4826 x MAD / median; needs at least 3 values)."""
    med = statistics.median(values)
    stderr = statistics.median(stderrs) if stderrs else 0.0
    spread = 0.0
    if len(values) >= 3 and med > 0:
        spread = MAD_SCALE * statistics.median(abs(v - med) for v in values) / med
    return Reference(latency_us=med, noise_stdrel=max(stderr, spread), count=len(values))


def slow_threshold(new_noise: float, ref_noise: float, *, min_slowdown: float = MIN_SLOWDOWN,
                   noise_k: float = NOISE_K) -> float:
    """The slowdown (fraction) a point must exceed to be slow: max(min_slowdown, k x combined noise)."""
    return max(min_slowdown, noise_k * math.hypot(new_noise, ref_noise))


