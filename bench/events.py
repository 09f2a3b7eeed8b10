"""Progress events of a sweep: what ``run_sweep`` tells its caller while it measures.

Frozen dataclasses, one per kind, delivered in this order: :class:`BackendSkipped` (one per
skipped backend or token range), :class:`WireConverted` (one per backend that sends another
dtype than the model's), :class:`SweepStarted`, then per backend
:class:`GroupStarted` (its worker group became ready: spawn to ready, in seconds),
:class:`PointPhase` and :class:`PointMeasured` per point, :class:`JobFinished`; finally
:class:`SweepFinished`. A caller dispatches on the type (``isinstance``), never on a key.
"""

from __future__ import annotations

from dataclasses import dataclass

from db.records import Result


@dataclass(frozen=True)
class BackendSkipped:
    """A backend (``label``: its name, or ``name @ t1,t2`` for some token counts) the rules reject here."""

    label: str
    reason: str


@dataclass(frozen=True)
class WireConverted:
    """A backend sends another dtype than the model's activation dtype, as vLLM's prepare step does
    (``autoselect.rules.wire``): its points move ``wire`` payloads (``why`` says where vLLM does so)."""

    backend: str
    activation: str
    wire: str
    why: str


@dataclass(frozen=True)
class SweepStarted:
    """Measuring begins: ``total`` points in all."""

    total: int


@dataclass(frozen=True)
class GroupStarted:
    """A backend's worker group is ready (spawned, joined, backend loaded): ``seconds`` from spawn to ready.

    ``reason`` says why it (re)started: ``first use``, a start-up knob that changed, the
    previous group crashed or hung, the adapter asked for a fresh process.
    """

    backend: str
    seconds: float
    reason: str


@dataclass(frozen=True)
class PointPhase:
    """A point entered a phase: ``setup``, ``gate`` or ``measure``."""

    backend: str
    tokens_per_rank: int
    phase: str


@dataclass(frozen=True)
class PointMeasured:
    """A point's outcome, as the row written to the store (a ``harness_error`` goes to the run's meta instead)."""

    result: Result


@dataclass(frozen=True)
class JobFinished:
    """One backend's points of this sweep are done: ``points`` of them in ``seconds`` (start-ups included)."""

    backend: str
    points: int
    seconds: float
    startups: int


@dataclass(frozen=True)
class SweepFinished:
    """Every point has its outcome."""


#: Every event type a sweep emits.
SweepEvent = BackendSkipped | WireConverted | SweepStarted | GroupStarted | PointPhase | PointMeasured | JobFinished | SweepFinished
