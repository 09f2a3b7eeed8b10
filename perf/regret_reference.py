"""Selector quality on NVIDIA's published reference: hold-out regret, with the default's truth perturbed.

Every (reference class, EP size, model shape, activation dtype) the packaged reference data can
judge is a case (``autoselect.reference``). Each backend's truth is what the tables say for the
dtype that backend really sends (``autoselect.rules.wire``: DeepEP sends an nvfp4 or per-tensor
fp8 model's activations as bf16, so its exact published bf16 rows are that model's truth). vLLM's
default (allgather_reducescatter) has no published row: its truth is the derived central value
(``autoselect.reference.derived``; a lower bound on the GB200 NVL72 rack beyond a tray, where no
NCCL rows exist) **times a factor** of x1.0, x1.25 and x1.5: the derivation models vLLM's
collectives from nccl-tests rows, and the real path may be slower (unequal DP sizes, the
quantization and memory passes around the collectives). The selector is never told the factor.

* **token hold-out**: hide one published token count ``h`` (every published backend's point
  there), let ``autoselect.selector.recommend`` decide from the rest, score the pick against
  the hidden truth;
* **shape hold-out**: hide the case's shape; each published backend's numbers come from its other
  shapes' rows, transferred by bytes per token (``autoselect.reference.transfer``), as an
  unpublished model's numbers do.

A backend's truth at a token count between two of its published ones is linear between them (the
tables' token grids differ: DeepEP low-latency has 12, 24, 48 where TensorRT-LLM has 16, 32, 48);
the output counts those truths. Workloads (each for every hold-out token count ``h`` whose
buckets are published token counts of some backend of the case):
decode ``{h: 50%, h/2: 30%, h/4: 20%}`` (h <= 1024), prefill ``{h: 70%, h/2: 20%, h/4: 10%}``
(h >= 1024), mixed ``{h: 40%, h/2: 25%, h/4: 15%, P: 20%}`` (h <= 1024, P = vLLM's default
``--max-num-batched-tokens`` on the system's GPUs), the weights of ``WORKLOAD_TABLE``. A workload
is scored when at least two backends the rules accept have a truth at every bucket; the selector
sees the backends with a truth (a backend without one, e.g. DeepEP low-latency beyond its
published 256 tokens per rank, could be neither scored nor excluded fairly), and every such
workload is scored, whatever the pick.

    regret = true weighted latency of the pick / that of the best legal backend   (1.0 = the best)

beside two static policies: **always-default** (vLLM's default) and **fixed-priority**
(TensorRT-LLM's ``CommunicationFactory.create_strategy`` order: one-sided, two-sided, DeepEP
high-throughput, DeepEP low-latency, the default; the first legal one with a truth).

Goals, for both hold-outs, on the judged workloads (a derived default, every backend seen): autoselect
p95 regret <= 1.05 and max <= 1.30 at x1.0, x1.25 and x1.5 at once; on the judged and on every
scored workload, autoselect never worse than always-default (mean, p95 and max, at every factor)
and its mean below fixed-priority's; the token-count estimate error p50 <= 10 %.

A p95 or max goal is first checked for **feasibility**: could any policy that picks one backend per
workload without knowing the factor meet it, even one that knows every candidate's true value?
Per workload such a policy keeps the default or switches to the truly fastest candidate; each
option is over the threshold at some set of factors, and an exact count over the assignments
decides (:func:`feasibility`). An infeasible goal is printed as such with its certificate (how many
workloads are ambiguous, which classes, the least value any such policy can hold) and not judged;
a feasible one is judged. Every judged goal is a statistic over every case (``perf/goals.py``:
``dataset``): judged in the full run, printed but not judged by ``--quick`` and ``--systems``,
which read a subset. Exit status 1 when a judged goal is missed (the worst workloads are printed
with why, and two workloads no monotone tie rule can both get right where there are such), 0
otherwise.

    python3 perf/regret_reference.py                    # every class (~15 s on 2 cores)
    python3 perf/regret_reference.py --quick            # GB200 node + rack and H200: what the suite runs
    python3 perf/regret_reference.py --policies         # + every tie rule and bound rule, ranked (~2 min)
    python3 perf/regret_reference.py --systems h200_sxm,gb200 --vllm-version 0.33.0
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "perf"))  # goals.py, also when a test imports this file

from autoselect import rules, vllm_flags  # noqa: E402
from autoselect.payload import all2all_bytes_per_token  # noqa: E402
from autoselect.reference import AGRS, CLASSES, default, transfer_points  # noqa: E402
from autoselect.rules.wire import wire_dtype  # noqa: E402
from autoselect.selector import (  # noqa: E402
    BOUND_RULES,
    DEFAULT_POLICY,
    TIE_RULES,
    DecisionPolicy,
    estimate_given,
    recommend_given,
)
from autoselect.workload import WORKLOAD_TABLE, Deployment, Shape, WorkloadSpec  # noqa: E402
from goals import DATASET, EXACT, Goals, add_quick  # noqa: E402

PRIORITY = ("flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided", "deepep_high_throughput",
            "deepep_low_latency", AGRS)
POLICIES = ("autoselect", "always-default", "fixed-priority")
KINDS = ("decode", "prefill", "mixed")
HOLDOUTS = ("token counts", "shapes")
FACTORS = (1.0, 1.25, 1.5)
#: Activation dtypes a model can dispatch on each arch (autoselect.model's formats).
ARCH_DTYPES = {"sm90": ("bf16", "fp8", "fp8_block128"),
               "sm100": ("bf16", "fp8", "fp8_block128", "nvfp4", "mxfp8")}
QUICK_SYSTEMS = ("gb200", "h200_sxm")
GOAL_P95, GOAL_MAX = 1.05, 1.30


@dataclass
class Case:
    """One (class, world size, shape with its activation dtype): every backend's points and truth."""

    ref_class: str
    world_size: int
    shape: Shape  # dtype = the model's activation dtype
    points: dict  # backend -> {tokens: ReferencePoint} (published at the backend's wire dtype, or derived)
    wire: dict  # backend -> the dtype it sends
    budget: int  # vLLM's default --max-num-batched-tokens on the system's GPUs (the mixed prefill bucket)
    grid: tuple[int, ...]  # the token counts some published backend of the case has

    @property
    def default_bound(self) -> bool:
        return any(p.bound for p in self.points.get(AGRS, {}).values())

    def truth(self, backend: str, tokens: int, factor: float) -> float | None:
        """The published (or derived x factor) latency at ``tokens``; between two published token
        counts of the backend, linear between them (:func:`interpolated_truths` counts those)."""
        curve = self.points.get(backend, {})
        p = curve.get(tokens)
        if p is not None:
            return p.latency_us * (factor if backend == AGRS else 1.0)
        below = [t for t in curve if t < tokens]
        above = [t for t in curve if t > tokens]
        if backend == AGRS or not below or not above:
            return None
        lo, hi = max(below), min(above)
        a, b = curve[lo].latency_us, curve[hi].latency_us
        return a + (b - a) * (tokens - lo) / (hi - lo)


@dataclass
class Scored:
    """One workload's outcome under one hold-out: the picks, the truths and how the pick was seen."""

    holdout: str
    kind: str
    case: Case
    spec: WorkloadSpec
    picks: dict  # policy -> backend
    legal: set
    seen: dict  # backend -> the weighted latency the selector saw (None: no number)
    band: dict  # backend -> the weighted band it saw with it (None: no number)


@dataclass
class Tally:
    scored: list = field(default_factory=list)
    errors: dict = field(default_factory=lambda: defaultdict(dict))  # hold-out -> {key: relative error}
    excluded: dict = field(default_factory=lambda: defaultdict(int))


def cases(systems: set[str] | None, vllm_version: str) -> list[Case]:
    """Every (class, world size, shape, activation dtype) where a published backend has an exact truth."""
    ref = default()
    out = []
    for cls in CLASSES.values():
        if systems and cls.system.key not in systems:
            continue
        budget = vllm_flags.vllm_default_max_num_batched_tokens(rules.DEFAULT_BACKEND, cls.system.memory_mib)
        rows = defaultdict(lambda: defaultdict(dict))  # (ws, h, k, e) -> (backend, dtype) -> {tokens: point}
        for p in ref.published(cls):
            if cls.domain == "nvl72" and p.world_size <= cls.system.gpus_per_node:
                continue  # each world size once: in the node class up to a tray, in the rack class beyond
            rows[(p.world_size, p.hidden, p.top_k, p.experts)][(p.backend, p.wire_dtype)][p.tokens_per_rank] = p
        for (ws, h, k, e), published in sorted(rows.items()):
            grid = tuple(sorted({t for curve in published.values() for t in curve}))
            for dtype in ARCH_DTYPES[cls.system.arch]:
                points, wire = {}, {}
                for backend in PRIORITY:
                    w = wire_dtype(backend, dtype, vllm_version)
                    wire[backend] = w.dtype if w is not None else dtype
                    if backend != AGRS and (backend, wire[backend]) in published:
                        points[backend] = dict(published[(backend, wire[backend])])
                if not points:
                    continue
                tokens = sorted(set(ref.token_grid(cls)) | {budget})
                agrs = ref.derived_agrs(cls, hidden=h, top_k=k, experts=e, dtype=wire[AGRS], world_size=ws,
                                        tokens=tokens, vllm_version=vllm_version)
                if agrs:
                    points[AGRS] = {p.tokens_per_rank: p for p in agrs}
                out.append(Case(cls.name, ws, Shape(hidden=h, top_k=k, experts=e, dtype=dtype), points, wire, budget,
                                grid))
    return out


def workloads(case: Case, kind: str) -> list[tuple[int, WorkloadSpec]]:
    """``(hold-out token count, workload)`` pairs of one kind whose buckets are published token counts."""
    weights = [w for _, _, w in WORKLOAD_TABLE[kind]]
    out = []
    for h in case.grid:
        if (kind == "prefill") != (h >= 1024) and h != 1024:
            continue
        tokens = [h, h // 2, h // 4]
        if h % 4 or any(t not in case.grid for t in tokens):
            continue
        buckets = list(zip(tokens, weights[:3]))
        if kind == "mixed":
            if case.budget <= h:
                continue
            buckets.append((case.budget, weights[3]))
        out.append((h, WorkloadSpec(kind, tuple(sorted(buckets)))))
    return out


def weighted_truth(case: Case, spec: WorkloadSpec, factor: float) -> dict[str, float]:
    """Backend -> true weighted latency, for the backends with a truth at every bucket."""
    out = {}
    for b in case.points:
        values = [case.truth(b, t, factor) for t, _ in spec.buckets]
        if all(v is not None for v in values):
            out[b] = sum(w * v for (_, w), v in zip(spec.buckets, values))
    return out


def decide(case: Case, spec: WorkloadSpec, curves: dict, vllm_version: str, policy: DecisionPolicy,
           estimate_errors: dict | None = None):
    """recommend() over ``curves`` for the case's reference class: the pick, the legal backends, what it saw."""
    rec = recommend_given(case.shape.profile(), curves, estimate_errors=estimate_errors,
                          deployment=Deployment(dp=case.world_size, tp=1), host_class=case.ref_class,
                          vllm_version=vllm_version, workload=spec, policy=policy)
    return (rec.backend, {c.backend for c in rec.candidates}, {c.backend: c.weighted_us for c in rec.candidates},
            {c.backend: c.halfwidth_us for c in rec.candidates})


def judge(tally: Tally, holdout: str, kind: str, case: Case, spec: WorkloadSpec, curves: dict, version: str,
          policy: DecisionPolicy, estimate_errors: dict | None) -> None:
    """Decide one workload and keep its outcome for scoring at every factor."""
    truth = weighted_truth(case, spec, 1.0)
    pick, legal, seen, band = decide(case, spec, curves, version, policy, estimate_errors)
    universe = [b for b in truth if b in legal]
    if len(universe) < 2:
        tally.excluded[f"{holdout}: fewer than two legal backends with a truth at every bucket"] += 1
        return
    fixed = next((b for b in PRIORITY if b in universe), None)
    tally.scored.append(Scored(holdout, kind, case, spec, {"autoselect": pick, "always-default": AGRS,
                                                           "fixed-priority": fixed}, set(universe), seen, band))


def token_holdout(case: Case, tally: Tally, version: str, policy: DecisionPolicy,
                  estimate_errors: dict | None = None) -> None:
    """Hide one published token count at a time (the derived default stays: it exists at any count)."""
    for kind in KINDS:
        for h, spec in workloads(case, kind):
            scorable = weighted_truth(case, spec, 1.0)
            curves = {b: [p for t, p in c.items() if t != h or b == AGRS] for b, c in case.points.items()
                      if b in scorable}
            judge(tally, "token counts", kind, case, spec, curves, version, policy, estimate_errors)
    shape = case.shape
    for b, curve in case.points.items():
        if b == AGRS:
            continue
        key = (case.ref_class, case.world_size, b, shape.hidden, shape.top_k, shape.experts, case.wire[b])
        nbytes = all2all_bytes_per_token(case.wire[b], shape.hidden, shape.top_k)
        for h, p in curve.items():
            rest = [q for t, q in sorted(curve.items()) if t != h]
            est = estimate_given(rest, h, nbytes).latency_us
            if est is not None:
                tally.errors["token counts"][key + (h,)] = (b, abs(est / p.latency_us - 1))


def shape_holdout(case: Case, tally: Tally, version: str, policy: DecisionPolicy,
                  estimate_errors: dict | None = None) -> None:
    """Hide the case's shape: every published backend is transferred from its other shapes."""
    ref = default()
    s = case.shape
    curves = {}
    for b, curve in case.points.items():
        if b == AGRS:
            curves[b] = list(curve.values())
            continue
        hidden = (s.hidden, s.top_k, s.experts, case.wire[b])
        sources = [p for p in ref.published(case.ref_class, b, world_size=case.world_size)
                   if (p.hidden, p.top_k, p.experts, p.wire_dtype) != hidden]
        moved = transfer_points(sources, hidden=s.hidden, top_k=s.top_k, experts=s.experts, dtype=case.wire[b])
        if not moved.points:
            tally.excluded[f"shapes: {b} not transferable (its truth stays; the selector sees no number)"] += 1
            continue
        curves[b] = moved.points
        for p in moved.points:
            if p.tokens_per_rank in curve:
                key = (case.ref_class, case.world_size, b) + hidden + (p.tokens_per_rank,)
                tally.errors["shapes"][key] = (b, abs(p.latency_us / curve[p.tokens_per_rank].latency_us - 1))
    for kind in KINDS:
        for _, spec in workloads(case, kind):
            scorable = weighted_truth(case, spec, 1.0)
            judge(tally, "shapes", kind, case, spec, {b: c for b, c in curves.items() if b in scorable}, version,
                  policy, estimate_errors)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def regrets(scored: list[Scored], factor: float) -> dict[str, list[tuple[float, Scored]]]:
    """Policy -> [(regret, workload)] with the default's truth at ``factor`` x its central value."""
    out = defaultdict(list)
    for s in scored:
        truth = weighted_truth(s.case, s.spec, factor)
        best = min(truth[b] for b in s.legal)
        for policy, backend in s.picks.items():
            if backend in s.legal:
                out[policy].append((truth[backend] / best, s))
            else:  # a pick without a truth: scored as the worst other legal backend (and reported)
                out[policy].append((max(truth[b] for b in s.legal) / best, s))
                out[f"{policy} without truth"].append((1.0, s))
    return out


def stats(values: list[float]) -> tuple[float, float, float]:
    return statistics.fmean(values), pct(values, 0.95), max(values)


def blind(s: Scored) -> bool:
    """The selector saw no number for a legal backend that has a truth (one-sided under the shape
    hold-out: its one published shape leaves nothing to transfer from)."""
    return any(s.seen.get(b) is None for b in s.legal)


#: The workload sets the tables show: every scored one, those the goals judge, and the two kinds the
#: goals leave out (shown, never dropped): a default with only a lower bound (its truth is unknown:
#: the bound x factor stands for it, in the default's favour), and workloads the selector was blind in.
SUBSETS = {
    "all": lambda s: True,
    "judged": lambda s: not s.case.default_bound and not blind(s),
    "bound default": lambda s: s.case.default_bound,
    "blind": lambda s: not s.case.default_bound and blind(s),
}


def table(tally: Tally, subsets=tuple(SUBSETS)) -> tuple[list[str], dict]:
    """The printed table and ``{(subset, hold-out, factor): {policy: (mean, p95, max)}}``."""
    head = f"{'workloads':<13} {'hold-out':<13} {'factor':>6} {'n':>5} |"
    for p in POLICIES:
        head += f" {p + ' mean':>20} {'p95':>6} {'max':>6} |"
    lines, out = [head], {}
    for subset in subsets:
        for holdout in HOLDOUTS:
            scored = [s for s in tally.scored if s.holdout == holdout and SUBSETS[subset](s)]
            if not scored:
                continue
            for f in FACTORS:
                r = regrets(scored, f)
                row = {p: stats([x for x, _ in r[p]]) for p in POLICIES}
                out[(subset, holdout, f)] = row
                line = f"{subset:<13} {holdout:<13} {'x' + format(f, '.2f'):>6} {len(scored):>5} |"
                for p in POLICIES:
                    mean, p95, mx = row[p]
                    line += f" {mean:>20.4f} {p95:>6.3f} {mx:>6.3f} |"
                lines.append(line)
    return lines, out


def worst(tally: Tally, holdout: str, factor: float, n: int = 8, subset: str = "judged") -> list[str]:
    """The workloads that hold autoselect's regret up at ``factor``, each with what it saw and why."""
    scored = [s for s in tally.scored if s.holdout == holdout and SUBSETS[subset](s)]
    ranked = sorted(regrets(scored, factor)["autoselect"], key=lambda rs: -rs[0])
    lines = []
    for regret, s in ranked[:n]:
        if regret <= 1.0 + 1e-9:
            break
        truth = weighted_truth(s.case, s.spec, factor)
        pick, best = s.picks["autoselect"], min(s.legal, key=truth.get)
        c = s.case
        why = _why(s, pick, best)
        lines.append(f"  {regret:.3f}  {c.ref_class} EP {c.world_size} {c.shape.label()} {s.kind} "
                     f"{[t for t, _ in s.spec.buckets]}: picked {pick} (saw {_us(s.seen.get(pick))}, truth "
                     f"{_us(truth.get(pick))}), best {best} (saw {_us(s.seen.get(best))}, truth {truth[best]:.1f}); "
                     f"{why}")
    return lines


def _us(x) -> str:
    return "no number" if x is None else f"{x:.1f}"


def _why(s: Scored, pick: str, best: str) -> str:
    if pick not in s.legal:
        return "the pick has no truth at every bucket (scored as the worst legal backend)"
    if s.seen.get(best) is None:
        return "the best backend has no number under this hold-out (nothing to transfer from)"
    if pick == AGRS and s.case.default_bound:
        return "the default has only a lower bound here and the truth used is that bound x the factor"
    if pick == AGRS:
        return "the derived default looked faster; its truth here is the factor x its central value"
    if best == AGRS:
        return "a published candidate cleared the derived default, which is really faster at this factor"
    if s.holdout == "shapes":
        return "transferred numbers ordered the two backends wrongly"
    return "the hidden token count was estimated wrongly"


def error_lines(tally: Tally) -> list[str]:
    lines = []
    for holdout in HOLDOUTS:
        errs = tally.errors[holdout]
        if not errs:
            continue
        by_backend = defaultdict(list)
        for b, e in errs.values():
            by_backend[b].append(e)
        every = [e for _, e in errs.values()]
        parts = [f"{b} {statistics.median(v):.1%} / {pct(v, 0.95):.1%} (n {len(v)})"
                 for b, v in sorted(by_backend.items())]
        lines.append(f"est.err p50 / p95, {holdout}: all {statistics.median(every):.1%} / {pct(every, 0.95):.1%}; "
                     + ", ".join(parts))
    return lines


def run(systems: set[str] | None, version: str, policy: DecisionPolicy,
        estimate_errors: dict | None = None) -> tuple[Tally, list[Case]]:
    """Both hold-outs over every case; ``estimate_errors``: backend -> the band of a value the
    selector estimates between published token counts (default: the latency model's floor)."""
    tally = Tally()
    all_cases = cases(systems, version)
    for case in all_cases:
        token_holdout(case, tally, version, policy, estimate_errors)
        shape_holdout(case, tally, version, policy, estimate_errors)
    return tally, all_cases


def policy_rank(out: dict, subset: str) -> tuple:
    """How a rule is ranked, lower first: the (hold-out, factor) cells where autoselect's mean, p95
    or max is worse than always-default's; then, on the token hold-out of ``subset``, the factors
    whose p95 misses the goal, the worst p95 over the factors, the mean of the means over the factors."""
    worse = sum(any(x > y + 1e-9 for x, y in zip(row["autoselect"], row["always-default"]))
                for (sub, _, _), row in out.items() if sub in ("all", subset))
    token = [row["autoselect"] for (sub, holdout, _), row in out.items()
             if sub == subset and holdout == "token counts"]
    return (worse, sum(a[1] > GOAL_P95 for a in token), round(max(a[1] for a in token), 3),
            round(statistics.fmean(a[0] for a in token), 4))


def interpolation_errors(tally: Tally) -> dict[str, float]:
    """Backend -> p95 of its token-count estimate error (the token hold-out's est.err): the band a
    value estimated between published token counts would carry if it were measured, not floored."""
    by_backend = defaultdict(list)
    for b, e in tally.errors["token counts"].values():
        by_backend[b].append(e)
    return {b: pct(v, 0.95) for b, v in by_backend.items()}


def compare_policies(systems: set[str] | None, version: str, measured_bands: dict) -> bool:
    """Every tie rule (on the judged workloads, where a derived default is compared) and every bound
    rule (on the bound-default ones), each ranked with the other rule at recommend's; True when
    recommend's rules rank first. The ``margin-est`` rules count an estimated candidate's band;
    they are ranked with the bands ``measured_bands`` (:func:`interpolation_errors`), the band the
    latency model's floor would give them deciding nothing new."""
    print("decision rules ranked, lower first (" + " ".join(policy_rank.__doc__.split("lower first: ", 1)[1].split())
          + "); autoselect mean/p95/max:")
    bands = ", ".join(f"{b} {e:.1%}" for b, e in sorted(measured_bands.items()))
    firsts = []
    for rule, names, subset in (("tie_rule", list(TIE_RULES), "judged"),
                                 ("bound_rule", list(BOUND_RULES), "bound default")):
        ranked = []
        for name in names:
            policy = DEFAULT_POLICY._replace(**{rule: name})
            errors = measured_bands if name.startswith("margin-est-") else None
            tally, _ = run(systems, version, policy, errors)
            _, out = table(tally, ("all", subset))
            cells = " | ".join(f"{h[:5]} x{f:.2f} {a[0]:.4f}/{a[1]:.3f}/{a[2]:.3f}"
                               for (sub, h, f), row in out.items() if sub == subset for a in [row["autoselect"]])
            ranked.append((policy_rank(out, subset), name, cells))
        ranked.sort(key=lambda r: r[0])
        print(f"{rule.replace('_', ' ')} ({subset} workloads):")
        for rank, name, cells in ranked:
            mark = " <- recommend's" if name == getattr(DEFAULT_POLICY, rule) else ""
            print(f"  {name:<15} {rank}: {cells}{mark}")
        firsts.append(ranked[0][1] == getattr(DEFAULT_POLICY, rule)
                      or ranked[0][0] == next(r for r, n, _ in ranked if n == getattr(DEFAULT_POLICY, rule)))
    print(f"(margin-est rules: an estimated value's band is its backend's measured interpolation error: {bands})")
    return all(firsts)


# --- what any factor-blind policy can reach: the oracle's certificate ---------------------------------
#
# A policy that picks one backend per workload without knowing the factor (recommend is never told
# it) has, per judged workload, two sensible options even when it knows every candidate's true
# value: keep the default, or switch to the truly fastest other legal backend (any other switch is
# slower at every factor, the candidates' truths do not move with the factor). Each option misses a
# threshold at a set of factors. A goal "at most A_f workloads over the threshold at factor f, at
# every factor" is feasible when some assignment of options keeps every factor within its A_f:
# decided exactly by the counts of workloads per pair of miss sets (a Pareto frontier of the miss
# counts), never by sampling.


@dataclass
class Feasibility:
    """Whether a goal "at most ``allowed[f]`` judged workloads over ``threshold`` at each factor f"
    can be met by any factor-blind policy that knows the candidates' true values, and why."""

    threshold: float
    n: int
    allowed: dict  # factor -> how many may be over the threshold
    forced: dict  # factor -> workloads over at f whatever is picked (either option, or the only one)
    ambiguous: dict  # (keep's miss set, switch's miss set) -> [Scored]: each option misses somewhere
    least_excess: int  # min over assignments of max_f (over at f - allowed[f]); <= 0: feasible
    proof: str  # the shortest argument: a factor pair whose combined allowance the counts exceed

    @property
    def feasible(self) -> bool:
        return self.least_excess <= 0


def oracle_regrets(s: Scored) -> dict[str, dict[float, float]]:
    """Option -> its regret at each factor: ``keep`` (the default), ``switch`` (the truly fastest
    other legal backend); only the options that exist."""
    truth = {f: weighted_truth(s.case, s.spec, f) for f in FACTORS}
    others = [b for b in s.legal if b != AGRS]
    picks = {}
    if AGRS in s.legal:
        picks["keep"] = AGRS
    if others:
        picks["switch"] = min(others, key=lambda b: truth[1.0][b])
    return {name: {f: truth[f][b] / min(truth[f][x] for x in s.legal) for f in FACTORS}
            for name, b in picks.items()}


def allowed_over(n: int, q: float) -> int:
    """How many of ``n`` values may exceed a threshold while the ``q`` quantile (:func:`pct`) stays
    at or below it (``q = 1``: the max, none)."""
    return 0 if q >= 1 else n - 1 - min(n - 1, int(q * n))


def feasibility(scored: list[Scored], threshold: float, q: float, options: list | None = None) -> Feasibility:
    """Can any factor-blind policy hold the ``q`` quantile of the regret at or below ``threshold`` at
    every factor at once (see the section's comment)? ``options``: :func:`oracle_regrets` of each
    workload, when the caller has them."""
    n = len(scored)
    options = options if options is not None else [oracle_regrets(s) for s in scored]
    allowed = {f: allowed_over(n, q) for f in FACTORS}
    forced = {f: 0 for f in FACTORS}
    ambiguous = defaultdict(list)
    for s, opts in zip(scored, options):
        misses = {name: frozenset(f for f in FACTORS if r[f] > threshold) for name, r in opts.items()}
        best = [m for m in misses.values() if not any(o < m for o in misses.values())]  # not dominated
        if any(not m for m in best):
            continue
        if len(set(best)) == 1:
            for f in best[0]:
                forced[f] += 1
            continue
        ambiguous[(misses["keep"], misses["switch"])].append(s)
    limits = [allowed[f] for f in FACTORS]
    base = [forced[f] for f in FACTORS]
    groups = sorted(([[int(f in keep) for f in FACTORS], [int(f in switch) for f in FACTORS], len(group)]
                     for (keep, switch), group in ambiguous.items()), key=lambda g: g[2])
    lo, hi = -max(limits, default=0), n  # the least excess lies in [lo, hi]; hi always holds
    while lo < hi:
        mid = (lo + hi) // 2
        if _assignable(base, groups, [a + mid for a in limits]):
            hi = mid
        else:
            lo = mid + 1
    least = lo
    proof = ""
    for i, f in enumerate(FACTORS):
        for g in FACTORS[i + 1:]:
            pair = {f, g}
            floor = forced[f] + forced[g] + sum(len(group) * min(len(keep & pair), len(switch & pair))
                                                for (keep, switch), group in ambiguous.items())
            if floor > allowed[f] + allowed[g] and not proof:
                proof = (f"so at x{f:.2f} and x{g:.2f} together at least {floor} are over {threshold} whatever is "
                         f"picked, and at most {allowed[f]} + {allowed[g]} = {allowed[f] + allowed[g]} may be")
    if not proof and least > 0:
        proof = f"every assignment of the ambiguous workloads leaves a factor {least} over its allowance"
    return Feasibility(threshold, n, allowed, forced, dict(ambiguous), least, proof)


def _assignable(base: list[int], groups: list, limits: list[int]) -> bool:
    """Whether some number ``k`` of each group's workloads can keep (the rest switch) with every
    factor's miss count within ``limits``. Keep's misses grow with the factor and switch's shrink,
    so at most three (keep, switch) miss-set pairs are incomparable for a threshold above 1: the
    counts of all but the largest group are enumerated, the largest's follows from the limits."""
    *head, (a_last, b_last, n_last) = groups or [([0] * len(base), [0] * len(base), 0)]
    for ks in itertools.product(*(range(g[2] + 1) for g in head)):
        counts = list(base)
        for k, (a, b, m) in zip(ks, head):
            counts = [c + k * x + (m - k) * y for c, x, y in zip(counts, a, b)]
        k_lo, k_hi = 0, n_last
        for c, x, y, limit in zip(counts, a_last, b_last, limits):
            room = limit - c - n_last * y  # k * (x - y) <= room
            if x == y and room < 0:
                k_lo = n_last + 1
            elif x > y:
                k_hi = min(k_hi, room)
            elif x < y:
                k_lo = max(k_lo, -room)
        if k_lo <= k_hi:
            return True
    return False


def evidence(s: Scored, backend: str) -> tuple[float, float, float]:
    """What a pairwise tie rule sees of ``backend`` against the default, scale-free: the candidate's
    band ``(lower, upper)`` and the default's upper end, each over the default's lower end."""
    d_lo = s.seen[AGRS] - s.band[AGRS]
    c, h = s.seen[backend], s.band[backend]
    return (c - h) / d_lo, (c + h) / d_lo, (s.seen[AGRS] + s.band[AGRS]) / d_lo


def looks_no_worse(a: tuple, b: tuple) -> bool:
    """Candidate evidence ``a`` is at least as much in favour of leaving the default as ``b``: its
    band no higher at either end, against a default whose band reaches no lower."""
    return a[0] <= b[0] and a[1] <= b[1] and a[2] >= b[2]


def explain_pair(keep: Scored, switch: Scored) -> str:
    """The two workloads of :func:`evidence_pair`, each with what was seen and what is true."""
    def one(s: Scored) -> str:
        c, truth = s.case, weighted_truth(s.case, s.spec, 1.0)
        seen = ", ".join(f"{b} saw {s.seen[b]:.1f} +- {s.band[b]:.1f}, truth {truth[b]:.1f}"
                         for b in sorted(s.legal, key=lambda b: b != AGRS) if s.seen.get(b) is not None)
        return f"{c.ref_class} EP {c.world_size} {c.shape.label()} {s.kind} {[t for t, _ in s.spec.buckets]} ({seen})"
    return (f"{one(keep)} must keep the default (every candidate is over {GOAL_MAX} at x1.0), yet a candidate of it "
            f"looks no worse than the good candidates of {one(switch)}, which must leave it (keeping is over "
            f"{GOAL_MAX} at x1.5)")


def evidence_pair(scored: list[Scored], threshold: float) -> tuple[Scored, Scored] | None:
    """Two judged workloads that no pairwise monotone tie rule can both get within ``threshold`` at
    every factor, or None.

    recommend compares each candidate with the default on its own (``versus_default``) and picks
    the fastest that beats it. A rule of that form is *monotone* when it lets every candidate of a
    backend that :func:`looks_no_worse` than one of the same backend and evidence kind it lets beat
    the default beat the default too (every rule in ``TIE_RULES`` is; within one hold-out every
    candidate has the same kind: estimated at the hidden token count, or transferred). ``keep`` must keep the default (every candidate is over ``threshold`` at some
    factor, the default at none); ``switch`` must leave it for one of its *good* candidates (within
    the threshold at every factor; keeping is over at some factor). When each good candidate of
    ``switch`` is looked no worse than by some candidate of ``keep``, a monotone rule that lets a
    good one beat the default in ``switch`` lets one beat it in ``keep`` as well.
    """
    keeps, switches = [], []
    for s in scored:
        if AGRS not in s.legal or s.seen.get(AGRS) is None or s.seen[AGRS] <= s.band[AGRS]:
            continue
        truth = {f: weighted_truth(s.case, s.spec, f) for f in FACTORS}
        best = {f: min(truth[f][b] for b in s.legal) for f in FACTORS}
        ok = {b: all(truth[f][b] / best[f] <= threshold for f in FACTORS) for b in s.legal}
        others = [b for b in s.legal if b != AGRS and s.seen.get(b) is not None]
        if ok[AGRS] and not any(ok[b] for b in others):
            keeps.append((s, [(b, evidence(s, b)) for b in others]))
        elif not ok[AGRS] and any(ok[b] for b in others):
            switches.append((s, [(b, evidence(s, b)) for b in others if ok[b]]))
    for s_keep, mine in keeps:
        for s_switch, goods in switches:
            if all(any(b == g and looks_no_worse(a, e) for b, a in mine) for g, e in goods):
                return s_keep, s_switch
    return None


def least_quantile(scored: list[Scored], q: float, options: list | None = None) -> float:
    """The least threshold whose ``q`` quantile goal a factor-blind oracle can meet at every factor."""
    options = options if options is not None else [oracle_regrets(s) for s in scored]
    values = sorted({r for opts in options for opt in opts.values() for r in opt.values()})
    lo, hi = 0, len(values) - 1  # values[hi] is always reachable (every regret at or below it)
    while lo < hi:
        mid = (lo + hi) // 2
        if feasibility(scored, values[mid], q, options).feasible:
            hi = mid
        else:
            lo = mid + 1
    return values[lo]


def _x(factors) -> str:
    return "/".join(f"x{f:.2f}" for f in sorted(factors)) or "none"


def certificate(fz: Feasibility) -> str:
    """The infeasibility certificate in words: counts, the ambiguous classes and where they are."""
    parts = [f"of {fz.n} judged workloads at most {max(fz.allowed.values())} may be over {fz.threshold} at each factor",
             "over it whatever is picked: " + ", ".join(f"{c} at x{f:.2f}" for f, c in fz.forced.items())]
    ambiguous = sum(len(g) for g in fz.ambiguous.values())
    if ambiguous:
        parts.append(f"{ambiguous} ({ambiguous / fz.n:.1%}) ambiguous, over it at some factor whichever is picked")
    for (keep, switch), group in sorted(fz.ambiguous.items(), key=lambda kv: -len(kv[1])):
        where = defaultdict(int)
        for s in group:
            where[f"{s.case.ref_class} {s.kind}"] += 1
        top = ", ".join(f"{w} {c}" for w, c in sorted(where.items(), key=lambda kv: -kv[1])[:4])
        parts.append(f"{len(group)} over at {_x(keep)} if the default is kept and at {_x(switch)} if not ({top}"
                     + (", ..." if len(where) > 4 else "") + ")")
    parts.append(fz.proof)
    return "; ".join(parts)


class Goal(NamedTuple):
    """One goal's line: what it measured, the goal, whether it was met (None: proved infeasible,
    ``proof`` says why) and its kind (``perf/goals.py``)."""

    name: str
    value: str
    goal: str
    met: bool | None
    proof: str = ""
    kind: str = DATASET


def goals(tally: Tally, out: dict) -> list[Goal]:
    """Every goal of the module docstring, each judged exactly or proved infeasible (not judged)."""
    result = []
    for holdout in HOLDOUTS:
        scored = [s for s in tally.scored if s.holdout == holdout and SUBSETS["judged"](s)]
        if not scored:
            continue
        rows = {f: out[("judged", holdout, f)] for f in FACTORS}
        options = [oracle_regrets(s) for s in scored]
        for label, column, threshold, q in (("p95", 1, GOAL_P95, 0.95), ("max", 2, GOAL_MAX, 1.0)):
            auto = {f: rows[f]["autoselect"][column] for f in FACTORS}
            value = ", ".join(f"x{f:.2f} {v:.3f}" for f, v in auto.items())
            name = f"{holdout}: autoselect {label} at every factor (judged)"
            goal = f"<= {threshold} at x1.0, x1.25 and x1.5 at once"
            fz = feasibility(scored, threshold, q, options)
            least = least_quantile(scored, q, options)
            if fz.feasible:
                result.append(Goal(name, value, goal, all(v <= threshold for v in auto.values())))
            else:
                result.append(Goal(name, value, goal, None,
                                   f"no policy that picks without knowing the factor can, even one that knows every "
                                   f"candidate's true value: {certificate(fz)}; the least {label} such a policy can "
                                   f"hold at every factor is {least:.3f}"))
            # the certificate checked against the policies scored: none may do better than it says any can
            beaten = [p for p in POLICIES if max(rows[f][p][column] for f in FACTORS) < least - 1e-9]
            result.append(Goal(f"{holdout}: no policy's {label} at every factor below the certificate's least",
                               f"least {least:.3f}; worst over the factors: " + ", ".join(
                                   f"{p} {max(rows[f][p][column] for f in FACTORS):.3f}" for p in POLICIES),
                               "none below it", not beaten, kind=EXACT))
    for subset in ("all", "judged"):
        for holdout in HOLDOUTS:
            cells = [(f, out[(subset, holdout, f)]) for f in FACTORS if (subset, holdout, f) in out]
            if not cells:
                continue
            worse = [f for f, row in cells
                     if any(a > d + 1e-9 for a, d in zip(row["autoselect"], row["always-default"]))]
            value = "; ".join(f"x{f:.2f} {'/'.join(f'{a:.4f}' for a in row['autoselect'])} vs "
                              f"{'/'.join(f'{d:.4f}' for d in row['always-default'])}" for f, row in cells)
            result.append(Goal(f"{holdout}: autoselect never worse than always-default ({subset})", value,
                               "mean, p95 and max each <= always-default's at every factor", not worse))
    for holdout in HOLDOUTS:
        cells = [out[("all", holdout, f)] for f in FACTORS if ("all", holdout, f) in out]
        if cells:
            result.append(Goal(f"{holdout}: autoselect mean below fixed-priority's (all)",
                               ", ".join(f"x{f:.2f} {r['autoselect'][0]:.4f} vs {r['fixed-priority'][0]:.4f}"
                                         for f, r in zip(FACTORS, cells)),
                               "< at every factor", all(r["autoselect"][0] < r["fixed-priority"][0] for r in cells)))
    errors = [e for _, e in tally.errors["token counts"].values()]
    if errors:
        p50 = statistics.median(errors)
        result.append(Goal("token-count estimate error p50", f"{p50:.1%}", "<= 10 %", p50 <= 0.10))
    return result


def main(argv=None) -> int:
    """Print the tables and the goals; 1 when a judged goal is missed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", default=None, help="comma-separated reference systems (default: all); like --quick, "
                    "a subset of the cases, whose regret goals are printed, not judged")
    add_quick(ap, f"only {', '.join(QUICK_SYSTEMS)}; the regret goals are statistics over every case")
    ap.add_argument("--vllm-version", default=None, help="target vLLM (default: the newest known)")
    ap.add_argument("--policies", action="store_true",
                    help="also rank every tie rule and bound rule and check that recommend's rank first")
    args = ap.parse_args(argv)
    if args.quick and args.systems:
        ap.error("pass either --quick or --systems")
    version = args.vllm_version or rules.NEWEST_VLLM
    systems = set(QUICK_SYSTEMS) if args.quick else (set(args.systems.split(",")) if args.systems else None)
    if systems and systems - {c.system.key for c in CLASSES.values()}:
        ap.error(f"unknown reference systems: {', '.join(sorted(systems - {c.system.key for c in CLASSES.values()}))}")
    started = time.perf_counter()
    tally, all_cases = run(systems, version, DEFAULT_POLICY)
    lines, out = table(tally)
    print(f"hold-out regret on NVIDIA's published reference (AIConfigurator 0.12.0), vLLM {version}, decision "
          f"policy {DEFAULT_POLICY.tie_rule} / {DEFAULT_POLICY.bound_rule}: {len(all_cases)} (class, EP, shape, "
          "activation dtype) cases" + (f" of {', '.join(sorted(systems))}" if systems else "")
          + f", {time.perf_counter() - started:.0f} s")
    print("regret = true weighted latency of the pick / of the best legal backend with a truth; the default's "
          "truth = factor x its derived central value (selector unchanged)")
    print("\n".join(lines))
    for line in error_lines(tally):
        print(line)
    for why, n in sorted(tally.excluded.items()):
        print(f"not scored {n}: {why}")
    print("workloads: judged = the goals' (a derived default, every legal backend seen); bound default = the "
          "NVL72 rack beyond a tray, where the default has only a lower bound and the bound x factor stands for "
          "its unknown truth, in its favour; blind = the selector saw no number for a backend that has a truth "
          "(one-sided's single published shape under the shape hold-out)")
    verdicts = goals(tally, out)
    for holdout in HOLDOUTS:
        missed = [f for f in FACTORS if ("judged", holdout, f) in out
                  and out[("judged", holdout, f)]["autoselect"][2] > GOAL_MAX]
        for f in missed:
            print(f"worst judged workloads, {holdout} x{f:.2f}:")
            print("\n".join(worst(tally, holdout, f)))
        scored = [s for s in tally.scored if s.holdout == holdout and SUBSETS["judged"](s)]
        pair = evidence_pair(scored, GOAL_MAX) if missed else None
        if pair:
            print(f"why no tie rule of recommend's form holds max <= {GOAL_MAX} on the {holdout} hold-out: "
                  + explain_pair(*pair))
    judged = Goals(bool(systems), why="--systems: a subset of the cases" if args.systems else "quick")
    if systems:
        print(f"(a subset: {len(all_cases)} cases; the regret goals are statistics over every case, judged by the "
              "full run: python3 perf/regret_reference.py)")
    for g in verdicts:
        if g.met is None and not systems:
            judged.infeasible(g.name, g.value, g.goal, g.proof)
        elif g.met is None:
            judged.check(g.name, g.value + " (infeasible on these cases)", g.goal, False, g.kind)
        else:
            judged.check(g.name, g.value, g.goal, g.met, g.kind)
    if args.policies:
        print()
        ok = compare_policies(systems, version, interpolation_errors(tally))
        judged.check("recommend's tie rule and bound rule rank first", "yes" if ok else "no", "yes", ok,
                     DATASET)
    return judged.finish()


if __name__ == "__main__":
    raise SystemExit(main())
