"""What a tune found and why it stopped: the dataclass that is the ``tune --format json`` payload."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from autoselect.tune.knob_search import KnobSearch
from autoselect.tune.race import MAX_REFINE_ROUNDS, Race


def best_recommendable(race: Race) -> str | None:
    """The fastest fully measured backend vLLM has (``reference_*`` baselines are never recommended).

    A backend pruned for being slower still counts (it may be the best vLLM has when a
    reference baseline leads); one that failed a measurement does not.
    """
    scored = [(s.latency_us, b) for b in race.backends
              if not b.startswith("reference_") and not race.failure(b) and (s := race.score(b))]
    return min(scored)[1] if scored else None


def _stop_reason(stop: str, race: Race, winner: str | None, budget_s: float) -> str:
    if stop == "settled":
        return (f"settled: {winner} beats every other candidate beyond the noise" if len(race.backends) > 1
                else f"settled: {winner} is the only candidate that can be measured here")
    if stop == "tie":
        return (f"settled as a tie: {', '.join(race.alive)} stay within each other's noise "
                "and every contested point is at the reproducibility floor")
    if stop == "unresolved":
        challenger = race.challenger()
        others = [b for b in race.alive if b not in (winner, challenger)]
        return (f"unresolved: {winner} and {challenger} stay within this machine's run-to-run noise "
                f"({race.describe_noise()}) and the bands projected after the rest of the "
                f"{MAX_REFINE_ROUNDS} refine rounds could not separate them"
                + (f" (not pruned yet: {', '.join(others)})" if others else "") + f"; best so far: {winner}")
    return (f"budget ran out ({budget_s:g} s) before the decision was settled; "
            f"best so far: {winner}; rerun the same command to continue")


@dataclass
class TuneOutcome:
    """What a tune found, and why it stopped."""

    study: str
    stop: str  # "settled" | "tie" | "unresolved" | "budget"
    stop_reason: str
    winner: str | None
    recommendable: str | None
    scores: dict[str, dict[str, float]]
    pruned: dict[str, str]
    alive: list[str]
    trials_reused: int
    trials_new: int
    measure_s: float
    sweep_s: float
    elapsed_s: float
    knobs: KnobSearch | None
    #: Worker-group start-ups this invocation paid: per backend, ``[{"seconds", "reason"}]``
    #: (one per backend for the whole race unless a group crashed, hung, or a knob needed a restart).
    startups: dict[str, list[dict]] = field(default_factory=dict)
    study_path: str = ""  # the study's file (an Optuna journal, see autoselect.tune.storage)
    #: Per backend: its worker group's start-ups and jobs (points, seconds, start-ups each), as in ``bench``'s JSON.
    worker_groups: list[dict] = field(default_factory=list)

    @property
    def startup_count(self) -> int:
        """How many worker-group start-ups this invocation paid."""
        return sum(len(v) for v in self.startups.values())

    @classmethod
    def build(cls, tuner, stop: str, winner: str | None, recommendable: str | None,
              knobs: KnobSearch | None) -> "TuneOutcome":
        """Collect the outcome from a finished :class:`autoselect.tune.tuner.Tuner`."""
        race = tuner.race
        scores = {b: {"latency_us": s.latency_us, "halfwidth_us": s.halfwidth_us}
                  for b in race.backends if (s := race.score(b))}
        return cls(
            study=tuner.study.name, stop=stop, stop_reason=_stop_reason(stop, race, winner, tuner.spec.budget_s),
            winner=winner, recommendable=recommendable, scores=scores, pruned=dict(race.pruned),
            alive=race.alive, trials_reused=tuner.reused, trials_new=tuner.new_trials,
            measure_s=tuner.measure_s, sweep_s=tuner.sweep_s, elapsed_s=tuner.clock() - tuner.started,
            knobs=knobs, startups={g["backend"]: g["startups"] for g in tuner.worker_groups},
            study_path=str(tuner.study.path), worker_groups=list(tuner.worker_groups),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the ``tune --format json`` payload, without ``schema_version``)."""
        return {**asdict(self), "startup_count": self.startup_count}
