"""Progress events of a tune: what ``run_tune`` tells its caller (the live view) while it races.

Frozen dataclasses, one per kind; a caller dispatches on the type. Order: :class:`TuneStarted`;
then per sweep call :class:`Measuring` and one :class:`TrialAdded` per point; a
:class:`BackendPruned` whenever the race drops one; :class:`KnobsNote` from the knob search;
finally :class:`TuneFinished` with the outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autoselect.tune.measurement import Measurement


@dataclass(frozen=True)
class TuneStarted:
    """The race begins: the study, how many of its trials are reused, the candidates, the budget."""

    study: str
    reused: int
    backends: list[str]
    budget_s: float


@dataclass(frozen=True)
class Measuring:
    """One sweep call begins: ``stage`` (screen, refine, knob, knob-final) for these backends and buckets."""

    stage: str
    backends: list[str]
    tokens: list[int]
    setting: str  # the knob setting, as text ("untuned" for none)


@dataclass(frozen=True)
class TrialAdded:
    """A point was measured and stored as trial number ``trials``; ``best``: the leader so far."""

    trials: int
    measurement: Measurement
    best: str | None


@dataclass(frozen=True)
class BackendPruned:
    """The race dropped ``backend`` (its worker group is closed), with the numbers behind it."""

    backend: str
    reason: str


@dataclass(frozen=True)
class KnobsNote:
    """A note from the knob search of ``backend`` (e.g. no legal knob here)."""

    backend: str
    message: str


@dataclass(frozen=True)
class TuneFinished:
    """The tune is over; ``outcome`` is its :class:`autoselect.tune.outcome.TuneOutcome`."""

    outcome: Any


#: Every event type a tune emits.
TuneEvent = TuneStarted | Measuring | TrialAdded | BackendPruned | KnobsNote | TuneFinished
