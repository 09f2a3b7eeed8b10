"""The race's policy: who leads, who is pruned and why, where to measure next, when to stop.

:class:`Race` decides over a :class:`~autoselect.tune.index.MeasurementIndex` with the
statistics of :mod:`autoselect.tune.stats`; it holds no measurement itself beyond the index,
so it is rebuilt from a study's trials after a restart.
"""

from __future__ import annotations

from typing import Iterable

from autoselect.tune.index import MeasurementIndex
from autoselect.tune.measurement import Measurement
from autoselect.tune.stats import Comparison, Noise, PointEstimate, Score, compare_points, pool, score
from autoselect.workload import WorkloadSpec

#: Pruning widens every bucket's ratio band by this factor (1 = 95 % bands, combined linearly
#: over buckets as the selector does).
PRUNE_SAFETY = 1.0
#: How many buckets one refine round re-measures: the (at most) 2 with the largest workload
#: weight x closeness (:meth:`Race.refine_targets`). They share the round's one job per backend.
#: Was 4 (every contested bucket of the built-in workloads): on the 6-bucket perf problem a
#: round then measured ~12 points, many in light or clearly separated buckets.
REFINE_BUCKETS_PER_ROUND = 2
#: A dominance prune needs this many independent runs (jobs: the screen is one, each refine round
#: one more) of both backends unless both backends' run-to-run noise is known and at most
#: :data:`PRUNE_QUIET_NOISE`. A bimodal backend (allgather_reducescatter on gloo: 0.9 or 3.3 ms
#: for the same point) can land in its slow mode twice in a row and look 2.2x slower at
#: "13.7 % noise" while an exhaustive run measures it 1.01x behind.
PRUNE_MIN_RUNS = 3
#: Run-to-run noise (pooled log std) up to which two runs' worth of evidence may prune.
PRUNE_QUIET_NOISE = 0.10
#: Stop refining after this many rounds even with budget left: the rest is within the machine's noise.
MAX_REFINE_ROUNDS = 5


class Race:
    """The state of an adaptive sweep, rebuilt from measurements (so it survives a restart)."""

    def __init__(self, backends: list[str], workload: WorkloadSpec):
        self.backends = list(backends)
        self.workload = workload
        self.index = MeasurementIndex()
        self.pruned: dict[str, str] = {}

    # ---- data ----
    def add(self, m: Measurement) -> None:
        """Record one measurement."""
        self.index.add(m)

    @property
    def measurements(self) -> list[Measurement]:
        """Every measurement, in arrival order."""
        return self.index.log

    def noise(self, backend: str, setting: dict[str, str] | None = None) -> Noise | None:
        """This backend's (setting's) own run-to-run noise, from its repeated points (None without)."""
        return self.index.noise(backend, setting)

    def noise_for(self, backend: str, setting: dict[str, str] | None = None) -> Noise | None:
        """The noise a point's band uses: its own; else the untuned backend's; else the noisiest
        backend measured here (a point without repeats is never trusted more than the others)."""
        own = self.noise(backend, setting)
        if own:
            return own
        if setting:
            untuned = self.noise(backend)
            if untuned:
                return untuned
        known = [n for b in self.backends if (n := self.noise(b))]
        return max(known, key=lambda n: n.stdrel) if known else None

    def noise_known(self, backends: Iterable[str]) -> bool:
        """Whether every one of ``backends`` has repeated runs (its own run-to-run noise)."""
        return all(self.noise(b) is not None for b in backends)

    def runs(self, backend: str) -> int:
        """Independent runs (jobs) behind this untuned backend's ok measurements."""
        return self.index.runs(backend)

    def enough_evidence(self, backend: str, lead: str) -> bool:
        """Whether a dominance prune of ``backend`` by ``lead`` may be made: both have
        :data:`PRUNE_MIN_RUNS` runs, or both noises are known and at most
        :data:`PRUNE_QUIET_NOISE`."""
        if min(self.runs(backend), self.runs(lead)) >= PRUNE_MIN_RUNS:
            return True
        noises = (self.noise(backend), self.noise(lead))
        return all(n is not None and n.stdrel <= PRUNE_QUIET_NOISE for n in noises)

    def describe_noise(self) -> str:
        """``a 3.1 % (4 dof), b 45 % (4 dof)``: each alive backend's run-to-run noise."""
        parts = []
        for b in self.alive:
            n = self.noise(b)
            parts.append(f"{b} {n.stdrel:.1%} ({n.dof} dof)" if n else f"{b} unknown")
        return ", ".join(parts)

    def points(self, backend: str, setting: dict[str, str] | None = None,
               extra_runs: int = 0, extra_dof: int = 0, noise: Noise | None = None) -> dict[int, PointEstimate]:
        """Pooled estimates per bucket for ``backend`` with ``setting`` (untuned by default);
        ``noise``: the run-to-run noise the bands use (default :meth:`noise_for`)."""
        noise = noise or self.noise_for(backend, setting)
        out = {}
        for t in self.workload.tokens:
            est = pool(self.index.point(backend, setting, t), noise, extra_runs, extra_dof)
            if est:
                out[t] = est
        return out

    def measured(self, backend: str, tokens: int, stage: str, setting: dict[str, str] | None = None) -> bool:
        """Whether this point already has a measurement of this stage."""
        return self.index.count(backend, tokens, stage, setting) > 0

    def count(self, backend: str, tokens: int, stage: str, setting: dict[str, str] | None = None) -> int:
        """How many measurements of this stage the point has."""
        return self.index.count(backend, tokens, stage, setting)

    def failure(self, backend: str, setting: dict[str, str] | None = None) -> str | None:
        """The first non-ok measurement of a backend (setting), as a reason, or None."""
        m = self.index.first_failure(backend, setting)
        if m is None:
            return None
        detail = f": {m.error}" if m.error else ""
        if m.status == "harness_error":  # the point does not fit the host: no verdict on the backend
            return f"not measurable here, the harness failed at {m.tokens} tokens/rank{detail}"
        return f"{m.status} at {m.tokens} tokens/rank{detail}"

    def score(self, backend: str, setting: dict[str, str] | None = None) -> Score | None:
        """The workload-weighted latency ``sum(w * latency)`` and band ``sum(w * halfwidth)``.

        None until every bucket has an ok measurement.
        """
        return score(self.points(backend, setting), self.workload.buckets)

    def compare(self, challenger: str, leader: str, safety: float = PRUNE_SAFETY,
                extra_runs: int = 0, extra_dof: int = 0, *, challenger_setting: dict[str, str] | None = None,
                leader_setting: dict[str, str] | None = None) -> Comparison | None:
        """The challenger against the leader, bucket by bucket (None until both are fully measured).

        Both points' bands use the larger of the two backends' run-to-run noise: the load that
        makes one backend's runs scatter is the machine's, and a backend that looked quiet over
        a few runs may just have been measured between bursts. ``challenger_setting`` /
        ``leader_setting``: compare knob settings (the knob search's final check: a setting of
        a backend against the untuned backend).
        """
        known = [n for n in (self.noise_for(challenger, challenger_setting),
                             self.noise_for(leader, leader_setting)) if n]
        noise = max(known, key=lambda n: n.stdrel) if known else None
        pc = self.points(challenger, challenger_setting, extra_runs=extra_runs, extra_dof=extra_dof, noise=noise)
        pl = self.points(leader, leader_setting, extra_runs=extra_runs, extra_dof=extra_dof, noise=noise)
        return compare_points(challenger, leader, pc, pl, self.workload.buckets, safety)

    # ---- decisions ----
    @property
    def alive(self) -> list[str]:
        """Backends not pruned, in candidate order."""
        return [b for b in self.backends if b not in self.pruned]

    def leader(self) -> str | None:
        """The alive backend with the lowest weighted latency (None until one is fully measured)."""
        scored = [(s.latency_us, b) for b in self.alive if (s := self.score(b))]
        return min(scored)[1] if scored else None

    def challenger(self) -> str | None:
        """The alive, fully measured backend closest to the leader (None with fewer than two)."""
        lead = self.leader()
        scored = [(s.latency_us, b) for b in self.alive if b != lead and (s := self.score(b))]
        return min(scored)[1] if scored else None

    def prune(self, safety: float = PRUNE_SAFETY, failures_only: bool = False) -> list[tuple[str, str]]:
        """Drop failed and clearly dominated backends; returns the newly pruned ``(backend, why)``.

        Dominated: the workload-weighted latency ratio to the leader stays above 1 with every
        bucket's relative band (x ``safety``) at its most favourable end, on enough evidence
        (:meth:`enough_evidence`: 3 runs of each, or two with both noises known and quiet).
        """
        newly = []
        for b in self.alive:
            why = self.failure(b)
            if why:
                self.pruned[b] = why
                newly.append((b, why))
        lead = None if failures_only else self.leader()
        if lead is None:
            return newly
        ls = self.score(lead)
        for b in self.alive:
            if b == lead:
                continue
            c = self.compare(b, lead, safety)
            if c is None or c.verdict != "slower" or not self.enough_evidence(b, lead):
                continue
            s = self.score(b)
            why = (f"slower than {lead}: {s.latency_us:.1f} ± {s.halfwidth_us:.1f} µs vs {ls.latency_us:.1f} "
                   f"± {ls.halfwidth_us:.1f} µs (workload-weighted); bucket by bucket {c.ratio:.2f}x, at "
                   f"least {c.low:.2f}x (bands x{safety:g}; run-to-run noise {b} {self._noise_text(b)}, "
                   f"{lead} {self._noise_text(lead)})")
            self.pruned[b] = why
            newly.append((b, why))
        return newly

    def _noise_text(self, backend: str) -> str:
        n = self.noise(backend)
        return f"{n.stdrel:.1%}" if n else "not measured"

    def futile(self, rounds_left: int, buckets_per_round: int | None = None) -> bool:
        """Whether even ``rounds_left`` more runs could not separate the leader from its closest
        challenger (means assumed fixed; bands shrink as 1/sqrt(runs), the t quantile with the
        degrees of freedom those runs add). A round re-measures ``buckets_per_round`` of the
        buckets, so the projection spreads the remaining runs over all of them (each bucket gets
        ``rounds_left x per_round / buckets`` more, rounded down): under high noise the
        projected bands stay wide and the race stops early as unresolved instead of measuring on.
        """
        lead, challenger = self.leader(), self.challenger()
        if lead is None or challenger is None or not self.enough_evidence(challenger, lead):
            return False  # the noise behind the projection needs as much evidence as a prune
        n = len(self.workload.buckets)
        per_round = min(buckets_per_round or n, n)
        c = self.compare(challenger, lead, extra_runs=rounds_left * per_round // n,
                         extra_dof=rounds_left * per_round)
        return c is not None and c.verdict == "tie"

    def refine_targets(self, k: int = REFINE_BUCKETS_PER_ROUND) -> list[int]:
        """The buckets where the leader and its closest challenger are closest, relative to noise.

        Priority of a bucket = weight x band / (|log ratio| + band); buckets where both points
        are already at the reproducibility floor are skipped once both backends' run-to-run noise
        is known (before that, a quiet single run says nothing about the next one). Empty when
        nothing can be refined.
        """
        lead, challenger = self.leader(), self.challenger()
        if lead is None or challenger is None:
            return []
        c = self.compare(challenger, lead)
        pl, pc = self.points(lead), self.points(challenger)  # own noise: is more running useless?
        repeated = self.noise_known((lead, challenger))
        ranked = []
        for t, w in self.workload.buckets:
            if repeated and pl[t].at_floor and pc[t].at_floor:
                continue
            d, half = c.buckets[t]
            ranked.append((w * half / (abs(d) + half), t))
        ranked.sort(reverse=True)
        return [t for _, t in ranked[:k]]
