"""The tuner: one :class:`TuneSpec` raced through the benchmark harness, with a budget.

:class:`Tuner` turns the race's decisions (:mod:`autoselect.tune.race`) into sweep calls
(``bench.sweep.run_sweep``), one job per alive backend each, on worker groups that live from
the screen to the final check (:class:`bench.launch.WorkerGroups`): the groups of every
candidate are started side by side before the screen, a pruned backend's group is closed at
once, the others when the race is over (the knob search measures one backend). Each measured
point becomes a trial of the study and a :class:`~autoselect.tune.events.TrialAdded` event.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from autoselect import knobs as knobs_mod
from autoselect.hardware import HostFingerprint
from autoselect.stopping import StoppingRule
from autoselect.tune import knob_search
from autoselect.tune.events import BackendPruned, Measuring, TrialAdded, TuneFinished, TuneStarted
from autoselect.tune.measurement import Measurement, measurement_from_result
from autoselect.tune.outcome import TuneOutcome, best_recommendable
from autoselect.tune.race import MAX_REFINE_ROUNDS, Race
from autoselect.tune.storage import Study
from autoselect.workload import Shape, WorkloadSpec
from bench.events import PointMeasured
from bench.launch import WorkerGroups
from bench.sweep import SweepSpec, group_config, run_sweep

#: Stopping rule of the screen stage (every backend, every bucket): a short look. The wall-clock
#: cap ends it even when a loaded machine keeps the noise above target; the band then comes
#: from the noise it did reach, so a noisy screen prunes less, never more. 0.1 s (was 0.15 s):
#: the cap now counts from the first timed batch (bench/measure/cpu_timing.py), and a screen
#: point's band is the run-to-run noise's anyway (perf/tune_vs_exhaustive.py under load 14:
#: measurement time 2.7 s instead of 3.7 s for the same 30 points).
SCREEN = StoppingRule(max_noise=0.05, min_samples=10, min_time_s=0.05, timeout_s=0.1)
#: Stopping rule of the refine stage and of the final knob check: short runs, repeated. The
#: noise target is the selector's reproducibility floor (1 %): chasing 0.5 % inside one run
#: buys nothing when two runs of the same point differ by more; precision comes from pooling
#: repeated, interleaved runs, which also averages out the machine's changing load. 0.05 s /
#: 0.1 s (was 0.1 s / 0.3 s, then 0.15 s): the band of a refine point is set by the run-to-run
#: noise, not by its own samples, so longer runs only cost time (perf/tune_vs_exhaustive.py:
#: refine measurement time halved at 0.15 s, the same prunes). Each refine run is a separate job of the
#: backend's worker group, one per round, interleaved with the other backends' jobs: copies of
#: a point inside one job (which bench/launch supports) are not used for the noise, because on a
#: loaded machine back-to-back runs share one mode of the machine's load
#: (allgather_reducescatter at 64 tokens on the 2-core CI machine: 3278, 2817, 3311 µs in one
#: call, 858, 3444, 2637 µs in the next), which would make a bimodal backend look quiet.
REFINE = StoppingRule(max_noise=0.01, min_samples=10, min_time_s=0.05, timeout_s=0.1)

ProgressFn = Callable[[Any], None]


@dataclass
class TuneSpec:
    """Everything a tune needs, validated before anything is written."""

    shape: Shape
    world_size: int
    device: str
    workload: WorkloadSpec
    backends: list[str]
    db_path: Path
    host: HostFingerprint
    vllm_version: str  # the target vLLM legality is judged for (candidates.resolve_target)
    budget_s: float = 600.0
    model: str = ""
    knob_ctx: knobs_mod.KnobContext = field(default_factory=knobs_mod.KnobContext)
    search_knobs: bool = True
    gpu_arch: str | None = None  # the arch legality and the activation dtype are judged for
    routing: str = "uniform"
    screen: StoppingRule = SCREEN
    refine: StoppingRule = REFINE


class Tuner:
    """Runs the race and the knob search for one :class:`TuneSpec`."""

    def __init__(self, spec: TuneSpec, *, store: Any, run_id: int, study: Study,
                 progress: ProgressFn | None = None, clock: Callable[[], float] = time.monotonic):
        self.spec = spec
        self.store = store
        self.run_id = run_id
        self.study = study
        self.progress = progress or (lambda event: None)
        self.clock = clock
        self.started = clock()
        self.race = Race(spec.backends, spec.workload)
        self.reused = 0
        for m in study.measurements():
            if m.backend in spec.backends:
                self.race.add(m)
                self.reused += 1
        self.calls = max((m.call for m in self.race.measurements), default=0)
        self.new_trials = 0
        self.measure_s = 0.0
        self.sweep_s = 0.0
        #: The race's worker groups, one per backend (set by :meth:`run`; None: each sweep call
        #: starts and closes its own).
        self.groups: WorkerGroups | None = None
        self.worker_groups: list[dict] = []  # WorkerGroups.summary(): start-ups and jobs per backend

    # ---- budget ----
    def remaining(self) -> float:
        """Seconds of budget left in this invocation."""
        return self.spec.budget_s - (self.clock() - self.started)

    def estimate(self, n_points: int, rule: StoppingRule) -> float:
        """A conservative guess of a sweep's cost: per-point wall time seen so far, else the rule."""
        seen = [m.elapsed_s for m in self.race.measurements if m.elapsed_s and m.stage in
                (("screen", "knob") if rule is self.spec.screen else ("refine", "knob-final"))]
        per_point = (sum(seen) / len(seen)) if seen else rule.min_time_s * 2
        return n_points * per_point

    # ---- measuring ----
    def sweep_spec(self, backends: list[str], tokens: list[int], rule: StoppingRule,
                   setting: dict[str, str]) -> SweepSpec:
        """The :class:`bench.sweep.SweepSpec` of one measuring call.

        Results measured with knobs carry them in ``Result.knobs`` (``env``, ``flags``,
        ``adapter``) so the selector never takes them for the untuned backend.
        """
        env, flags, adapter_args = knobs_mod.split_setting(setting)
        recorded = {"env": env, "flags": flags, "adapter": adapter_args} if setting else {}
        shape = self.spec.shape
        return SweepSpec(
            backends=list(backends), tokens=list(tokens), hidden=shape.hidden, top_k=shape.top_k,
            experts=shape.experts, activation_dtype=shape.dtype, world_size=self.spec.world_size, device=self.spec.device,
            routing=self.spec.routing, max_noise=rule.max_noise, min_samples=rule.min_samples,
            min_time_s=rule.min_time_s, timeout_s=rule.timeout_s, env=env, knobs=recorded,
            gpu_arch=self.spec.gpu_arch, vllm_version=self.spec.vllm_version,
        )

    def measure(self, backends: list[str], tokens: list[int], stage: str, rule: StoppingRule,
                setting: dict[str, str] | None = None) -> list[Measurement]:
        """One ``bench.sweep.run_sweep`` call (one job per backend's worker group); each point
        becomes a trial the moment it arrives."""
        setting = setting or {}
        sweep = self.sweep_spec(backends, tokens, rule, setting)
        self.progress(Measuring(stage, list(backends), list(tokens), knobs_mod.describe(setting)))
        out: list[Measurement] = []
        self.calls += 1
        call, last = self.calls, [self.clock()]
        t0 = last[0]

        def on_event(event) -> None:
            if not isinstance(event, PointMeasured):
                return
            now = self.clock()
            m = measurement_from_result(event.result, stage, setting, now - last[0], call)
            last[0] = now
            self.study.add(m)
            self.race.add(m)
            self.new_trials += 1
            self.measure_s += m.measure_s
            out.append(m)
            self.progress(TrialAdded(self.reused + self.new_trials, m, self.race.leader()))

        run_sweep(sweep, store=self.store, run_id=self.run_id, host=self.spec.host, progress=on_event,
                  groups=self.groups)
        self.sweep_s += self.clock() - t0
        return out

    def _start_groups(self, backends: list[str]) -> None:
        """Start the worker groups of ``backends`` side by side, before the screen measures them."""
        if self.groups is None or not backends:
            return
        sweep = self.sweep_spec(backends, self.spec.workload.tokens, self.spec.screen, {})
        self.groups.start([group_config(sweep, b, self.spec.host) for b in backends])

    def _close_groups(self, backends, reason: str) -> None:
        if self.groups is not None:
            for b in backends:
                self.groups.close(b, reason)

    # ---- phases ----
    def screen(self) -> None:
        """Measure every alive backend at every bucket not screened yet (one sweep call).

        Only failures are pruned here: dominance waits for the first refine round, whose
        repeated runs measure each backend's run-to-run noise.
        """
        todo = {b: [t for t in self.spec.workload.tokens if not self.race.measured(b, t, "screen")]
                for b in self.race.alive}
        by_tokens: dict[tuple, list[str]] = {}
        for b, ts in todo.items():
            if ts:
                by_tokens.setdefault(tuple(ts), []).append(b)
        for tokens, backends in by_tokens.items():
            if self.remaining() <= 0:
                return
            self.measure(backends, list(tokens), "screen", self.spec.screen)
        self._prune(failures_only=not self.race.noise_known(self.race.alive))

    def _prune(self, failures_only: bool = False) -> None:
        for b, why in self.race.prune(failures_only=failures_only):
            self.progress(BackendPruned(b, why))
            self._close_groups([b], "pruned")  # its processes and device memory, freed at once
        self.study.set("pruned", self.race.pruned)

    def refine(self) -> str:
        """Refine rounds until settled, tied or out of budget; returns the stop reason.

        A round re-measures every alive backend at the (up to
        :data:`~autoselect.tune.race.REFINE_BUCKETS_PER_ROUND`) buckets where the leader and its
        closest challenger are closest, in ONE sweep call: one job per backend's worker group.
        Backends go in alternating order so a steady drift of the machine's load hits them
        alike; then prune.
        """
        for n in range(MAX_REFINE_ROUNDS):
            if len(self.race.alive) <= 1:
                return "settled"
            targets = self.race.refine_targets()
            if not targets:
                return "tie"
            if n >= 1 and self.race.futile(MAX_REFINE_ROUNDS - n, len(targets)):  # after one round: noise known
                return "unresolved"
            alive = [b for b in self.race.alive if self.race.score(b)]
            if n % 2:
                alive.reverse()
            if self.estimate(len(alive) * len(targets), self.spec.refine) > self.remaining():
                return "budget"
            self.measure(alive, targets, "refine", self.spec.refine)
            self._prune()
        return "settled" if len(self.race.alive) <= 1 else "unresolved"

    def run(self, groups: WorkerGroups | None = None) -> TuneOutcome:
        """Screen, prune, refine, then search the winner's knobs; returns the outcome.

        ``groups``: the caller's (already warm) worker groups; default: a pool of the run's own.
        """
        self.progress(TuneStarted(self.study.name, self.reused, list(self.spec.backends), self.spec.budget_s))
        with groups or WorkerGroups() as self.groups:
            self._prune()
            self._start_groups([b for b in self.race.alive if any(
                not self.race.measured(b, t, "screen") for t in self.spec.workload.tokens)])
            self.screen()
            if any(self.race.score(b) is None for b in self.race.alive):
                stop = "budget"
            else:
                stop = self.refine()
            winner = self.race.leader()
            knobs = None
            recommendable = best_recommendable(self.race)
            self._close_groups([b for b in self.race.backends if b != recommendable], "the race is over")
            if self.spec.search_knobs and recommendable and stop != "budget" and self.remaining() > 0:
                knobs = knob_search.search(self, recommendable)
            self.worker_groups = self.groups.summary()
        outcome = TuneOutcome.build(self, stop, winner, recommendable, knobs)
        self.study.set("outcome", outcome.to_dict())
        self.progress(TuneFinished(outcome))
        return outcome

