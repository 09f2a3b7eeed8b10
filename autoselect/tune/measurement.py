"""One measured point of a tune, as a trial stores it: the race's record of what was measured."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autoselect import knobs as knobs_mod
from autoselect.noise import point_rel_halfwidth


@dataclass
class Measurement:
    """One measured point, as stored in a trial (a subset of :class:`db.records.Result`)."""

    backend: str
    tokens: int
    stage: str
    setting: dict[str, str]
    status: str
    latency_us: float | None = None
    rel_halfwidth: float | None = None  # noise.point_rel_halfwidth
    noise_stdrel: float | None = None
    samples: int = 0
    error: str | None = None
    elapsed_s: float = 0.0  # wall time since the previous point of the sweep call (start-ups included)
    measure_s: float = 0.0  # samples x mean latency: time inside the timed loop
    call: int = 0  # which sweep call (one job per backend: an independent run) measured it; 0: unknown


def setting_key(setting: dict[str, str] | None) -> str:
    """The text that identifies a knob setting (``untuned`` for none)."""
    return knobs_mod.describe(setting or {})


def measurement_from_result(r: Any, stage: str, setting: dict[str, str], elapsed_s: float,
                            call: int = 0) -> Measurement:
    """The :class:`Measurement` of one sweep result."""
    ok = r.status == "ok" and r.latency_us_p50 is not None
    mean = r.latency_us_mean or r.latency_us_p50 or 0.0
    return Measurement(
        backend=r.backend,
        tokens=r.tokens_per_rank,
        stage=stage,
        setting=dict(setting),
        status=r.status,
        latency_us=r.latency_us_p50 if ok else None,
        rel_halfwidth=point_rel_halfwidth(r) if ok else None,
        noise_stdrel=r.noise_stdrel,
        samples=r.samples or 0,
        error=r.error,
        elapsed_s=elapsed_s,
        measure_s=(r.samples or 0) * mean / 1e6,
        call=call,
    )
