"""Adaptive sweeps and knob search on Optuna: spend benchmark time where the decision is made.

An exhaustive sweep measures every backend at every token bucket to 0.5 % noise. Most of that
time goes to backends that are clearly losing. ``tune`` runs a race instead:

1. **Screen**: every candidate backend at every bucket of the workload, with a short
   stopping rule (:data:`SCREEN`). A backend that fails the correctness gate, is unavailable
   or errors at any bucket is dropped on the spot, with the harness's reason.
2. **Refine rounds**: every alive backend is re-measured (short runs, :data:`REFINE`) at the
   (up to :data:`REFINE_BUCKETS_PER_ROUND`) buckets where the leader and its closest
   challenger are closest relative to their bands, weighted by the bucket's share of the
   workload, in alternating backend order; one sweep call per round: one job for each backend's
   worker group, which was started once for the whole race (screen to final check; a pruned
   backend's group is closed at once). Repeated runs of a point are
   pooled (inverse-variance). Each backend's **run-to-run noise** (e.g. load from other
   processes, which no single run shows) is the pooled standard deviation of ``ln(latency)``
   between repeated runs of the same point, each point centred on its own mean (buckets of
   different scale never mix, and the squared deviations are pooled with their degrees of
   freedom instead of a median of one-run spreads); it widens the bands to at least
   ``t x noise / sqrt(runs)``, ``t`` the Student-t 95 % quantile of the noise's degrees of
   freedom (4.3 with 2, 2.8 with 4, never below Z = 2), and never below the selector's
   reproducibility floor.
3. **Prune** after each round, bucket by bucket and relative: per bucket, the log ratio
   challenger / leader of the pooled points with the half-width ``sqrt(h_c^2 + h_l^2)`` of
   the two points' relative bands (x :data:`PRUNE_SAFETY`; both bands from the larger of the
   two backends' noise, as the load is the machine's); a backend is dropped, with the
   numbers, when its workload-weighted latency ratio to the leader stays above 1 even with
   every bucket at its band's most favourable end (bands combine linearly over buckets, as
   in the selector; :meth:`Race.compare`). No backend is pruned for dominance before every
   alive one has repeated runs (its own noise), and never on fewer than
   :data:`PRUNE_MIN_RUNS` (3) independent runs (jobs, one per sweep call) of both backends unless
   both noises are known and at most :data:`PRUNE_QUIET_NOISE` (a bimodal backend can land in its
   slow mode in two runs in a row; :meth:`Race.enough_evidence`).
4. **Stop** and say which: ``settled`` (one backend left), ``tie`` (every contested point is
   at the reproducibility floor and the bands still overlap), ``unresolved`` (even the
   remaining rounds could not separate the two at the current means: futility, judged with
   the bands those runs would give, the runs spread over all buckets, and only on as much
   evidence as a prune needs), or ``budget`` (``--budget`` ran out; rerun to continue).
5. **Knobs**: for the fastest backend vLLM has, each legal value of each legal knob
   (``autoselect/knobs.py``) is screened at every bucket, one knob at a time; the values that
   beat the untuned backend are combined (only if the combination is legal), and the best
   setting and the untuned backend are re-measured one after the other and compared as the
   race compares backends (:meth:`Race.compare`: bucket by bucket, relative, both bands from
   the larger run-to-run noise); a gain counts only beyond that. Illegal settings are
   never measured: :func:`plan_knob_settings` only produces settings
   :func:`knobs.check_setting` accepts.

Every measurement is one Optuna trial (params: backend, tokens, stage, and every knob of the
table), added to a study in an SQLite RDB storage next to the results database
(``results.db`` -> ``results.optuna.db``), named after the host class, the model shape, the
world size and the workload. A killed tune loses at most the sweep call in flight: rerun the
same command and the completed trials are reused (the race is rebuilt from them). Every
measurement is also a row of the results database (``bench.sweep.run_sweep`` writes it), and
the best configuration is stored in ``tuned_configs`` (``db/tuned.py``), which ``recommend``
reads to print the knobs and their measured gain.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from autoselect import knobs as knobs_mod
from autoselect.candidates import Target, candidate_backends, resolve_target
from autoselect.errors import GpuArchRequired, InvalidWorldSize, UserError
from autoselect.hardware import HostFingerprint, fingerprint
from autoselect.model import MoeProfile, load_profile, normalize_arch
from autoselect.noise import REL_FLOOR, Z, point_rel_halfwidth
from autoselect.options import parse_duration
from autoselect.workload import Deployment, Shape, WorkloadSpec, workload_from_kind, workload_from_tokens
from bench.backends import BenchContext, available, check_names, load
from bench.events import PointMeasured
from bench.launch import WorkerGroups
from bench.sweep import SweepSpec, group_config, run_sweep
from db.schema import check_path
from db.tuned import TunedConfig, save_tuned

#: Stopping rule of the screen stage (every backend, every bucket): a short look. The wall-clock
#: cap ends it even when a loaded machine keeps the noise above target; the band then comes
#: from the noise it did reach, so a noisy screen prunes less, never more.
SCREEN = {"min_samples": 10, "min_time_s": 0.05, "max_noise": 0.05, "timeout_s": 0.15}
#: Stopping rule of the refine stage and of the final knob check: short runs, repeated. The
#: noise target is the selector's reproducibility floor (1 %): chasing 0.5 % inside one run
#: buys nothing when two runs of the same point differ by more; precision comes from pooling
#: repeated, interleaved runs, which also averages out the machine's changing load. 0.05 s /
#: 0.15 s (was 0.1 s / 0.3 s): the band of a refine point is set by the run-to-run noise, not
#: by its own samples, so longer runs only cost time (perf/tune_vs_exhaustive.py: refine
#: measurement time halved, the same prunes). Each refine run is a separate job of the
#: backend's worker group, one per round, interleaved with the other backends' jobs: copies of
#: a point inside one job (which bench/launch supports) are not used for the noise, because on a
#: loaded machine back-to-back runs share one mode of the machine's load
#: (allgather_reducescatter at 64 tokens on the 2-core CI machine: 3278, 2817, 3311 µs in one
#: call, 858, 3444, 2637 µs in the next), which would make a bimodal backend look quiet.
REFINE = {"min_samples": 10, "min_time_s": 0.05, "max_noise": 0.01, "timeout_s": 0.15}
#: Pruning widens every bucket's ratio band by this factor (1 = 95 % bands, combined linearly
#: over buckets as the selector does).
PRUNE_SAFETY = 1.0
#: How many buckets one refine round re-measures: the (at most) 2 with the largest workload
#: weight x closeness (:meth:`Race.refine_targets`). They share the round's one job per backend. Was 4 (every contested bucket of the built-in workloads): on the 6-bucket perf
#: problem a round then measured ~12 points, many in light or clearly separated buckets.
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
#: Parameter names every trial of a study carries (besides the knobs).
STAGES = ("screen", "refine", "knob", "knob-final")

ProgressFn = Callable[[dict], None]


class NoCandidates(UserError):
    "Nothing to tune: no backend is legal and available for this model on this host."


def optuna_path(db_path: str | Path) -> Path:
    """The Optuna study file beside a results database: ``results.db`` -> ``results.optuna.db``."""
    p = Path(db_path)
    return p.with_name(p.stem + ".optuna.db")


# --------------------------------------------------------------------------------------
# The problem and the race state
# --------------------------------------------------------------------------------------


def study_name(host_class: str, shape: Shape, world_size: int, device: str, workload: WorkloadSpec) -> str:
    """host class + shape + EP size + device + workload: the same command on the same host
    resumes the same study (``cpu-abc|h2048-k4-e32-bf16-ws2-cpu|decode[...]``)."""
    buckets = ",".join(f"{t}:{w:.4g}" for t, w in workload.buckets)
    return f"{host_class}|{shape.key()}-ws{world_size}-{device}|{workload.kind}[{buckets}]"


@dataclass
class Measurement:
    """One measured point, as stored in a trial (a subset of :class:`db.records.Result`)."""

    backend: str
    tokens: int
    stage: str
    setting: dict[str, str]
    status: str
    latency_us: float | None = None
    rel_halfwidth: float | None = None  # selector.point_rel_halfwidth
    noise_stdrel: float | None = None
    samples: int = 0
    error: str | None = None
    elapsed_s: float = 0.0  # wall time since the previous point of the sweep call (start-ups included)
    measure_s: float = 0.0  # samples x mean latency: time inside the timed loop
    call: int = 0  # which sweep call (one job per backend: an independent run) measured it; 0: unknown


def _setting_key(setting: dict[str, str]) -> str:
    return knobs_mod.describe(setting)


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


def pool(measurements: Iterable[Measurement], noise: Noise | None = None,
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


class Race:
    """The state of an adaptive sweep, rebuilt from measurements (so it survives a restart)."""

    def __init__(self, backends: list[str], workload: WorkloadSpec):
        self.backends = list(backends)
        self.workload = workload
        self.measurements: list[Measurement] = []
        self.pruned: dict[str, str] = {}

    # ---- data ----
    def add(self, m: Measurement) -> None:
        """Record one measurement."""
        self.measurements.append(m)

    def noise(self, backend: str, setting: dict[str, str] | None = None) -> Noise | None:
        """This backend's (setting's) own run-to-run noise, from its repeated points (None without)."""
        key = _setting_key(setting or {})
        groups: dict[int, list[float]] = {}
        for m in self.measurements:
            if m.backend == backend and _setting_key(m.setting) == key and m.status == "ok" and m.latency_us:
                groups.setdefault(m.tokens, []).append(m.latency_us)
        return run_to_run_noise(groups.values())

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
        """Independent runs behind this (untuned) backend's ok measurements: distinct sweep calls
        (jobs), and never fewer than the most runs of one point (each run of a point is a
        separate call)."""
        ok = [m for m in self.measurements if m.backend == backend and not m.setting
              and m.status == "ok" and m.latency_us]
        runs: dict[int, int] = {}
        for m in ok:
            runs[m.tokens] = runs.get(m.tokens, 0) + 1
        calls = {m.call for m in ok if m.call}
        return max(len(calls), max(runs.values(), default=0))

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
        key = _setting_key(setting or {})
        noise = noise or self.noise_for(backend, setting)
        out = {}
        for t in self.workload.tokens:
            est = pool((m for m in self.measurements
                        if m.backend == backend and m.tokens == t and _setting_key(m.setting) == key),
                       noise, extra_runs, extra_dof)
            if est:
                out[t] = est
        return out

    def measured(self, backend: str, tokens: int, stage: str, setting: dict[str, str] | None = None) -> bool:
        """Whether this point already has a measurement of this stage."""
        key = _setting_key(setting or {})
        return any(m.backend == backend and m.tokens == tokens and m.stage == stage
                   and _setting_key(m.setting) == key for m in self.measurements)

    def count(self, backend: str, tokens: int, stage: str, setting: dict[str, str] | None = None) -> int:
        """How many measurements of this stage the point has."""
        key = _setting_key(setting or {})
        return sum(1 for m in self.measurements if m.backend == backend and m.tokens == tokens
                   and m.stage == stage and _setting_key(m.setting) == key)

    def failure(self, backend: str, setting: dict[str, str] | None = None) -> str | None:
        """The first non-ok measurement of a backend (setting), as a reason, or None."""
        key = _setting_key(setting or {})
        for m in self.measurements:
            if m.backend == backend and _setting_key(m.setting) == key and m.status != "ok":
                detail = f": {m.error}" if m.error else ""
                if m.status == "harness_error":  # the point does not fit the host: no verdict on the backend
                    return f"not measurable here, the harness failed at {m.tokens} tokens/rank{detail}"
                return f"{m.status} at {m.tokens} tokens/rank{detail}"
        return None

    def score(self, backend: str, setting: dict[str, str] | None = None) -> Score | None:
        """The workload-weighted latency ``sum(w * latency)`` and band ``sum(w * halfwidth)``.

        None until every bucket has an ok measurement.
        """
        pts = self.points(backend, setting)
        if len(pts) < len(self.workload.buckets):
            return None
        lat = sum(w * pts[t].latency_us for t, w in self.workload.buckets)
        band = sum(w * pts[t].latency_us * pts[t].rel_halfwidth for t, w in self.workload.buckets)
        return Score(lat, band)

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
        tokens = [t for t, _ in self.workload.buckets]
        if any(t not in pc or t not in pl for t in tokens):
            return None
        buckets, base, mid, low, high = {}, 0.0, 0.0, 0.0, 0.0
        for t, w in self.workload.buckets:
            d = math.log(pc[t].latency_us / pl[t].latency_us)
            half = safety * math.hypot(pc[t].rel_halfwidth, pl[t].rel_halfwidth)
            buckets[t] = (d, half)
            scale = w * pl[t].latency_us
            base += scale
            mid += scale * math.exp(d)
            low += scale * math.exp(d - half)
            high += scale * math.exp(d + half)
        return Comparison(challenger, leader, mid / base, low / base, high / base, buckets)

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


# --------------------------------------------------------------------------------------
# Knob search plan (pure: tested without a GPU)
# --------------------------------------------------------------------------------------


def plan_knob_settings(backend: str, ctx: knobs_mod.KnobContext) -> list[dict[str, str]]:
    """One-knob-at-a-time settings to screen for ``backend``: each legal value of each legal knob.

    Every returned setting is legal (:func:`knobs.check_setting` accepts it); knobs that are
    illegal in ``ctx`` (GPU-only knobs on a CPU run, DBO-only knobs without DBO, ...) and
    illegal values (LL128 without NVLink, token capacities below the workload) never appear.
    """
    choices, _ = knobs_mod.knob_space(backend, ctx)
    plan = []
    for c in choices:
        for v in c.legal:
            if v == knobs_mod.UNSET:
                continue
            setting = {c.knob.name: v}
            if not knobs_mod.check_setting(backend, setting, ctx):
                plan.append(setting)
    return plan


def combine_settings(backend: str, winners: list[tuple[float, dict[str, str]]],
                     ctx: knobs_mod.KnobContext) -> dict[str, str]:
    """Merge single-knob winners (``(gain, setting)``, best first) into one legal setting.

    A knob whose addition would make the combination illegal is skipped (the bigger gain wins).
    """
    merged: dict[str, str] = {}
    for _, setting in sorted(winners, key=lambda x: -x[0]):
        candidate = {**merged, **setting}
        if not knobs_mod.check_setting(backend, candidate, ctx):
            merged = candidate
    return merged


# --------------------------------------------------------------------------------------
# Optuna study: one trial per measurement
# --------------------------------------------------------------------------------------


class Study:
    """The Optuna study that stores every measurement of one tune problem."""

    def __init__(self, path: Path, name: str, backends: list[str], tokens: list[int]):
        import optuna  # heavy: only a tune that measures pays for it

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._optuna = optuna
        self.path = path
        self.name = name
        storage = optuna.storages.RDBStorage(
            f"sqlite:///{path}", engine_kwargs={"connect_args": {"timeout": 30}}
        )
        self.study = optuna.create_study(study_name=name, storage=storage, load_if_exists=True,
                                         direction="minimize")
        # The categorical choices must stay the same for the life of a study: store the union.
        known = self.study.user_attrs.get("backends", [])
        self.backends = sorted(set(known) | set(backends))
        self.tokens = sorted(set(tokens))
        if self.backends != known:
            self.study.set_user_attr("backends", self.backends)

    def _distributions(self) -> dict:
        D = self._optuna.distributions.CategoricalDistribution
        dists = {
            "backend": D(self.backends),
            "tokens": D(self.tokens),
            "stage": D(list(STAGES)),
        }
        for k in knobs_mod.KNOBS:
            dists[k.name] = D(list(k.choices()))
        return dists

    def add(self, m: Measurement) -> None:
        """Store one measurement as a finished trial (COMPLETE when ok, FAIL otherwise)."""
        params = {"backend": m.backend, "tokens": m.tokens, "stage": m.stage}
        for k in knobs_mod.KNOBS:
            params[k.name] = m.setting.get(k.name, knobs_mod.UNSET)
        attrs = asdict(m)
        state = self._optuna.trial.TrialState
        ok = m.status == "ok" and m.latency_us is not None
        trial = self._optuna.trial.create_trial(
            params=params,
            distributions=self._distributions(),
            value=m.latency_us if ok else None,
            state=state.COMPLETE if ok else state.FAIL,
            user_attrs={"measurement": attrs},
        )
        self.study.add_trial(trial)

    def measurements(self) -> list[Measurement]:
        """Every measurement stored so far (what a resumed tune starts from)."""
        out = []
        for t in self.study.get_trials(deepcopy=False):
            attrs = t.user_attrs.get("measurement")
            if attrs:
                out.append(Measurement(**attrs))
        return out

    def set(self, key: str, value: Any) -> None:
        """Store a study-level attribute (pruned backends, outcome)."""
        self.study.set_user_attr(key, value)


# --------------------------------------------------------------------------------------
# Measuring through the benchmark harness
# --------------------------------------------------------------------------------------


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
    screen: dict = field(default_factory=lambda: dict(SCREEN))
    refine: dict = field(default_factory=lambda: dict(REFINE))


def _measurement_from_result(r: Any, stage: str, setting: dict[str, str], elapsed_s: float,
                             call: int = 0) -> Measurement:
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
        self.groups = None
        self.startups: dict[str, list] = {}  # every group start-up of this invocation, per backend

    # ---- budget ----
    def remaining(self) -> float:
        """Seconds of budget left in this invocation."""
        return self.spec.budget_s - (self.clock() - self.started)

    def _estimate(self, n_points: int, rule: dict) -> float:
        """A conservative guess of a sweep's cost: per-point wall time seen so far, else the rule."""
        seen = [m.elapsed_s for m in self.race.measurements if m.elapsed_s and m.stage in
                (("screen", "knob") if rule is self.spec.screen else ("refine", "knob-final"))]
        per_point = (sum(seen) / len(seen)) if seen else rule["min_time_s"] * 2
        return n_points * per_point

    # ---- measuring ----
    def _sweep_spec(self, backends: list[str], tokens: list[int], rule: dict, setting: dict[str, str]):
        """The :class:`bench.sweep.SweepSpec` of one measuring call.

        Results measured with knobs carry them in ``Result.knobs`` (``env``, ``flags``,
        ``adapter``) so the selector never takes them for the untuned backend.
        """
        setting = setting or {}
        env, flags, adapter_args = knobs_mod.split_setting(setting)
        recorded = {"env": env, "flags": flags, "adapter": adapter_args} if setting else {}
        shape = self.spec.shape
        return SweepSpec(
            backends=list(backends), tokens=list(tokens), hidden=shape.hidden, top_k=shape.top_k,
            experts=shape.experts, dtype=shape.dtype, world_size=self.spec.world_size, device=self.spec.device,
            routing=self.spec.routing, max_noise=rule["max_noise"], min_samples=rule["min_samples"],
            min_time_s=rule["min_time_s"], timeout_s=rule["timeout_s"], env=env, knobs=recorded,
            gpu_arch=self.spec.gpu_arch, vllm_version=self.spec.vllm_version,
        )

    def _sweep(self, backends: list[str], tokens: list[int], stage: str, rule: dict,
               setting: dict[str, str] | None = None) -> list[Measurement]:
        """One ``bench.sweep.run_sweep`` call (one job per backend's worker group); each point
        becomes a trial the moment it arrives."""
        setting = setting or {}
        sweep = self._sweep_spec(backends, tokens, rule, setting)
        self.progress({"event": "measure", "stage": stage, "backends": list(backends),
                       "tokens": list(tokens), "setting": knobs_mod.describe(setting)})
        out: list[Measurement] = []
        self.calls += 1
        call = self.calls
        last = [self.clock()]
        t0 = last[0]

        def on_event(event) -> None:
            if not isinstance(event, PointMeasured):
                return
            now = self.clock()
            m = _measurement_from_result(event.result, stage, setting, now - last[0], call)
            last[0] = now
            self.study.add(m)
            self.race.add(m)
            self.new_trials += 1
            self.measure_s += m.measure_s
            out.append(m)
            self.progress({"event": "trial", "trials": self.reused + self.new_trials, **asdict(m),
                           "best": self.race.leader()})

        run_sweep(sweep, store=self.store, run_id=self.run_id, host=self.spec.host, progress=on_event,
                  groups=self.groups)
        self.sweep_s += self.clock() - t0
        return out

    def _start_groups(self, backends: list[str]) -> None:
        """Start the worker groups of ``backends`` side by side, before the screen measures them."""
        if self.groups is None or not backends:
            return
        sweep = self._sweep_spec(backends, self.spec.workload.tokens, self.spec.screen, {})
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
            self._sweep(backends, list(tokens), "screen", self.spec.screen)
        self._prune(failures_only=not self.race.noise_known(self.race.alive))

    def _prune(self, failures_only: bool = False) -> None:
        for b, why in self.race.prune(failures_only=failures_only):
            self.progress({"event": "prune", "backend": b, "reason": why})
            self._close_groups([b], "pruned")  # its processes and device memory, freed at once
        self.study.set("pruned", self.race.pruned)

    def refine(self) -> str:
        """Refine rounds until settled, tied or out of budget; returns the stop reason.

        A round re-measures every alive backend at the (up to :data:`REFINE_BUCKETS_PER_ROUND`)
        buckets where the leader and its closest challenger are closest, in ONE sweep call: each
        backend's workers start once per round and measure all its target buckets (worker
        start-up, not measuring, is most of a short point's wall time). Backends go in
        alternating order so a steady drift of the machine's load hits them alike; then prune.
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
            cost = self._estimate(len(alive) * len(targets), self.spec.refine)
            if cost > self.remaining():
                return "budget"
            self._sweep(alive, targets, "refine", self.spec.refine)
            self._prune()
        return "settled" if len(self.race.alive) <= 1 else "unresolved"

    def knob_search(self, backend: str) -> dict[str, Any]:
        """Screen every legal knob value of ``backend``, combine the winners, confirm with REFINE."""
        ctx = self.spec.knob_ctx
        _, excluded = knobs_mod.knob_space(backend, ctx)
        excluded_out = [{"knob": k.name, "reason": why} for k, why in excluded]
        plan = plan_knob_settings(backend, ctx)
        out: dict[str, Any] = {"backend": backend, "excluded": excluded_out, "screened": [],
                               "setting": {}, "gain": 0.0, "status": "not_searched"}
        if not plan:
            out["status"] = "no_legal_knobs"
            self.progress({"event": "knobs", "backend": backend, "message": "no legal knob here",
                           "excluded": excluded_out})
            return out
        base = self.race.score(backend)
        winners = []
        for setting in plan:
            todo = [t for t in self.spec.workload.tokens if not self.race.measured(backend, t, "knob", setting)]
            if todo:
                if self._estimate(len(todo), self.spec.screen) > self.remaining():
                    out["status"] = "budget"
                    break
                self._sweep([backend], todo, "knob", self.spec.screen, setting)
            s = self.race.score(backend, setting)
            failed = self.race.failure(backend, setting)
            entry = {"setting": setting, "latency_us": s.latency_us if s else None,
                     "halfwidth_us": s.halfwidth_us if s else None, "failure": failed}
            out["screened"].append(entry)
            if s and not failed and base and s.latency_us < base.latency_us:
                winners.append(((base.latency_us - s.latency_us) / base.latency_us, setting))
        best = combine_settings(backend, winners, ctx)
        if not best:
            out["status"] = out["status"] if out["status"] == "budget" else "no_gain"
            return out
        # Final: the best setting and the untuned backend, both with the full stopping rule.
        tokens = self.spec.workload.tokens
        if self._estimate(2 * len(tokens), self.spec.refine) > self.remaining():
            out.update(status="budget", setting=best)
            return out
        self._sweep([backend], tokens, "knob-final", self.spec.refine, best)
        self._sweep([backend], tokens, "knob-final", self.spec.refine, {})
        s, b = self.race.score(backend, best), self.race.score(backend)
        c = self.race.compare(backend, backend, challenger_setting=best)
        if s is None or b is None or c is None or self.race.failure(backend, best):
            out.update(status="no_gain", setting={})
            return out
        # The race's comparison: bucket by bucket, relative, both bands from the larger noise.
        # gain = 1 - tuned/untuned (workload-weighted); its band from the ratio's bounds.
        faster = c.verdict == "faster"
        out.update(setting=best if faster else {},
                   gain=1.0 - c.ratio,
                   gain_halfwidth=max(c.ratio - c.low, c.high - c.ratio),
                   tuned_latency_us=s.latency_us, untuned_latency_us=b.latency_us,
                   status="gain" if faster else "no_gain")
        return out

    def run(self) -> "TuneOutcome":
        """Screen, prune, refine, then search the winner's knobs; returns the outcome.

        One worker group per candidate backend lives from the screen to the final check
        (:class:`bench.launch.WorkerGroups`); a pruned backend's group is closed at once, and
        the race's other groups before the knob search, which measures one backend.
        """
        self.progress({"event": "start", "study": self.study.name, "reused": self.reused,
                       "backends": self.spec.backends, "budget_s": self.spec.budget_s})
        with WorkerGroups() as self.groups:
            self._prune()
            self._start_groups([b for b in self.race.alive if any(
                not self.race.measured(b, t, "screen") for t in self.spec.workload.tokens)])
            self.screen()
            if any(self.race.score(b) is None for b in self.race.alive):
                stop = "budget"
            else:
                stop = self.refine()
            winner = self.race.leader()
            knob_result: dict[str, Any] | None = None
            recommendable = _best_recommendable(self.race)
            self._close_groups([b for b in self.race.backends if b != recommendable], "the race is over")
            if self.spec.search_knobs and recommendable and stop != "budget" and self.remaining() > 0:
                knob_result = self.knob_search(recommendable)
            self.startups = self.groups.startups()
        outcome = TuneOutcome.build(self, stop, winner, recommendable, knob_result)
        self.study.set("outcome", outcome.to_dict())
        self.progress({"event": "done", **outcome.to_dict()})
        return outcome


def _best_recommendable(race: Race) -> str | None:
    """The fastest fully measured backend vLLM has (``reference_*`` baselines are never recommended).

    A backend pruned for being slower still counts (it may be the best vLLM has when a
    reference baseline leads); one that failed a measurement does not.
    """
    scored = [(s.latency_us, b) for b in race.backends
              if not b.startswith("reference_") and not race.failure(b) and (s := race.score(b))]
    return min(scored)[1] if scored else None


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
    knobs: dict[str, Any] | None
    #: Worker-group start-ups this invocation paid: per backend, ``[{"seconds", "reason"}]``
    #: (one per backend for the whole race unless a group crashed, hung, or a knob needed a restart).
    startups: dict[str, list[dict]] = field(default_factory=dict)

    @property
    def startup_count(self) -> int:
        """How many worker-group start-ups this invocation paid."""
        return sum(len(v) for v in self.startups.values())

    @classmethod
    def build(cls, tuner: Tuner, stop: str, winner: str | None, recommendable: str | None,
              knob_result: dict[str, Any] | None) -> "TuneOutcome":
        """Collect the outcome from a finished tuner."""
        race = tuner.race
        scores = {b: {"latency_us": s.latency_us, "halfwidth_us": s.halfwidth_us}
                  for b in race.backends if (s := race.score(b))}
        reasons = {
            "settled": (f"settled: {winner} beats every other candidate beyond the noise"
                        if len(race.backends) > 1 else
                        f"settled: {winner} is the only candidate that can be measured here"),
            "tie": (f"settled as a tie: {', '.join(race.alive)} stay within each other's noise "
                    "and every contested point is at the reproducibility floor"),
            "unresolved": (f"unresolved: {winner} and {race.challenger()} stay within this machine's "
                           f"run-to-run noise ({race.describe_noise()}) and the bands projected after "
                           f"the rest of the {MAX_REFINE_ROUNDS} refine rounds could not separate them"
                           + (f" (not pruned yet: {', '.join(others)})"
                              if (others := [b for b in race.alive if b not in (winner, race.challenger())])
                              else "") + f"; best so far: {winner}"),
            "budget": f"budget ran out ({tuner.spec.budget_s:g} s) before the decision was settled; "
                      f"best so far: {winner}; rerun the same command to continue",
        }
        return cls(
            study=tuner.study.name, stop=stop, stop_reason=reasons[stop], winner=winner,
            recommendable=recommendable, scores=scores, pruned=dict(race.pruned), alive=race.alive,
            trials_reused=tuner.reused, trials_new=tuner.new_trials, measure_s=tuner.measure_s,
            sweep_s=tuner.sweep_s, elapsed_s=tuner.clock() - tuner.started, knobs=knob_result,
            startups={b: [{"seconds": round(u.seconds, 4), "reason": u.reason} for u in ups]
                      for b, ups in tuner.startups.items()},
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the ``tune --format json`` payload, without ``schema_version``)."""
        return {**asdict(self), "startup_count": self.startup_count}


# --------------------------------------------------------------------------------------
# Entry point: validate, open the stores, run, save the best configuration
# --------------------------------------------------------------------------------------


def load_model(model: str) -> MoeProfile:
    """``--model``: a checkpoint (``autoselect.model.load_profile``) or ``shape:HxEXPERTSxTOPK:DTYPE``."""
    if model.startswith("shape:"):
        return Shape.parse(model).profile()
    return load_profile(model)


def _resolve_arch(profile: MoeProfile, host: HostFingerprint, gpu_arch: str | None) -> str | None:
    if gpu_arch:
        return normalize_arch(gpu_arch)
    if host.gpu_arch:
        return host.gpu_arch
    if len(set(profile.activation_dtypes.values())) == 1:
        return None
    raise GpuArchRequired(
        f"{profile.model} dispatches {', '.join(f'{v} on {a}' for a, v in sorted(profile.activation_dtypes.items()))}; "
        "on a CPU host pass --gpu-arch sm90 or sm100 to say which to benchmark"
    )


def _candidates(target: Target, backends: list[str] | None,
                include_reference: bool) -> tuple[list[str], dict[str, str]]:
    """Legal backends to race, and the excluded ones with the reason (never measured).

    Legality is :func:`autoselect.candidates.candidate_backends` for ``target`` (the vLLM version
    ``recommend`` would judge against; hardware rules only on a CUDA run, as ``bench.sweep``
    judges them); an adapter the rules table does not know is raced unjudged, like ``bench``
    measures it.
    """
    names = check_names(backends) if backends else list(available())
    chosen, excluded = [], {}
    for name, verdict in candidate_backends(target, names).items():
        if name.startswith("reference_") and not (include_reference or backends):
            excluded[name] = "benchmark-only baseline (pass --include-reference to race it)"
        elif verdict is None or verdict.ok:
            chosen.append(name)
        else:
            excluded[name] = "illegal: " + "; ".join(verdict.reasons)
    return chosen, excluded


def _unavailable(names: list[str], device: str, world_size: int, host: HostFingerprint) -> dict[str, str]:
    """Ask each adapter in this process whether it can run here (saves spawning workers for nothing)."""
    out = {}
    ctx = BenchContext(rank=0, world_size=world_size, device=device, torch_device=None,
                       nvlinks_all_up=getattr(host, "all_nvlinks_up", None))
    for name in names:
        try:
            why = load(name).unavailable_reason(ctx)
        except Exception:  # cannot tell outside the workers: let the harness judge it there
            why = None
        if why:
            out[name] = f"unavailable: {why}"
    return out


def prepare(model: str, *, db_path: str | Path, workload: str = "decode", tokens: str | None = None,
            device: str | None = None, world_size: int = 2, budget: str = "10m",
            gpu_arch: str | None = None, backends: list[str] | None = None,
            include_reference: bool = False, search_knobs: bool = True, enable_dbo: bool = False,
            host: Any = None) -> tuple[TuneSpec, dict[str, str]]:
    """Validate every input and build the :class:`TuneSpec` (nothing is written).

    Returns the spec and the backends left out before measuring, each with its reason.
    """
    budget_s = parse_duration(budget, what="--budget")
    if world_size < 1:
        raise InvalidWorldSize(f"--world-size {world_size} must be at least 1 (2 or more for a real exchange)")
    if backends is not None and not backends:
        raise NoCandidates("--backends names no backend; pass e.g. allgather_reducescatter,deepep_low_latency "
                           "or leave it out for every legal one")
    check_path(db_path)  # a garbage or newer --db fails here, before the live view and any worker
    profile = load_model(model)
    host = host or fingerprint()
    device = device or host.device
    if device == "cuda" and host.device != "cuda":
        raise NoCandidates("--device cuda on a host without CUDA GPUs; use --device cpu (gloo)")
    if device == "cuda" and world_size > host.gpu_count:
        raise NoCandidates(f"--world-size {world_size} exceeds this host's {host.gpu_count} GPUs")
    arch = _resolve_arch(profile, host, gpu_arch)
    dtype = profile.activation_dtype(arch) if arch else next(iter(profile.activation_dtypes.values()))
    spec_workload = (workload_from_tokens(tokens) if tokens is not None else
                     workload_from_kind(workload, Deployment(dp=world_size, tp=1)))
    target = resolve_target(profile, world_size=world_size, gpu_arch=arch, host=host if device == "cuda" else None)
    chosen, excluded = _candidates(target, backends, include_reference)
    excluded.update(_unavailable(chosen, device, world_size, host))
    chosen = [b for b in chosen if b not in excluded]
    if not chosen:
        detail = "; ".join(f"{b}: {why}" for b, why in excluded.items())
        raise NoCandidates(f"no backend can be measured for {profile.model} on this host ({detail}); "
                           "check `autoselect check` or pass --backends")
    shape = Shape(hidden=profile.hidden_size, top_k=profile.top_k, experts=profile.num_experts, dtype=dtype)
    ctx = knobs_mod.KnobContext.from_host(
        host if device == "cuda" else None, world_size=world_size,
        max_tokens_per_rank=max(spec_workload.tokens), enable_dbo=enable_dbo)
    spec = TuneSpec(shape=shape, world_size=world_size, device=device, workload=spec_workload, backends=chosen,
                    db_path=Path(db_path), host=host, vllm_version=target.vllm_version, budget_s=budget_s,
                    model=profile.model, knob_ctx=ctx, search_knobs=search_knobs, gpu_arch=arch)
    return spec, excluded


def run_tune(spec: TuneSpec, *, progress: ProgressFn | None = None, command: str | None = None) -> TuneOutcome:
    """Run (or resume) the study for ``spec``; stores results, the study and the best configuration."""
    from db.store import Store  # heavy (sqlite_utils): only a tune that writes pays for it

    store = Store(spec.db_path)
    try:
        with store.run(spec.host, trigger="tune", command=command,
                       meta={"model": spec.model, "workload": spec.workload.to_dict()}) as run:
            run_id = run.id
            study = Study(optuna_path(spec.db_path), study_name(spec.host.host_class, spec.shape, spec.world_size, spec.device,
                                     spec.workload),
                          spec.backends, spec.workload.tokens)
            tuner = Tuner(spec, store=store, run_id=run_id, study=study, progress=progress)
            outcome = tuner.run()
        if outcome.recommendable:
            k = outcome.knobs or {"status": "not_searched", "setting": {}}
            setting = k.get("setting") or {}
            env, flags, _ = knobs_mod.split_setting(setting)
            shape = spec.shape
            save_tuned(store, TunedConfig(
                host_class=spec.host.host_class, machine_id=spec.host.machine_id, hidden=shape.hidden,
                top_k=shape.top_k, experts=shape.experts, dispatch_dtype=shape.dtype,
                world_size=spec.world_size, device=spec.device, backend=outcome.recommendable,
                status=k["status"], stop=outcome.stop, study=outcome.study,
                workload=spec.workload.to_dict(), knobs=setting, env=env, flags=flags,
                gain=k.get("gain"), gain_halfwidth=k.get("gain_halfwidth"),
                tuned_latency_us=k.get("tuned_latency_us"), untuned_latency_us=k.get("untuned_latency_us"),
                versions=dict(getattr(spec.host, "versions", {}) or {}), run_id=run_id,
            ))
        return outcome
    finally:
        store.close()
