"""Selector quality on NVIDIA's published reference: hold-out regret, with the default's truth perturbed per phase.

Every (reference class, EP size, model shape, activation dtype) the packaged reference data can
judge is a case (``autoselect.reference``). Every number is put on vLLM's footing first
(``autoselect.reference.footing``: one MoE layer's dispatch + combine as vLLM runs it, a CUDA graph
up to the largest captured step, eager above), as ``recommend`` puts it; a backend's truth is its
published rows in the dtype it really sends (``autoselect.rules.wire``: DeepEP sends an nvfp4 or
per-tensor fp8 model's activations as bf16), each at the central value of its footing correction.
vLLM's default (allgather_reducescatter) has no published row: its truth is its derived central
value on vLLM's footing (``autoselect.reference.derived`` + the framework's per-launch cost; a lower
bound on the GB200 NVL72 rack beyond a tray) **times a factor per phase**: ``f_graph`` on the steps
vLLM runs under a CUDA graph (decode-sized) and ``f_eager`` on the eager ones (prefill-sized), each
x0.75, x1.0, x1.25 or x1.5 (:data:`FACTORS`). The public evidence pulls the two phases apart
(in-framework launches cost more than nccl-tests' loop; a grouped gather less than its calls
alone), so the factor is not assumed to be 1 or above, nor the same in both. Since only ratios of
truths matter, a factor on the default stands for any error of the default relative to the
candidates, their corrections' included. A default that is only a lower bound is scored at x1.0 and
above (a bound is never undercut). The selector is never told the factors.

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
``--max-num-batched-tokens`` on the system's GPUs), the weights of ``WORKLOAD_TABLE``. Each workload
belongs to a **phase** by the default's buckets: ``decode`` (every bucket graph-captured), ``prefill``
(every bucket eager) or ``both``; a decode workload is scored at ``f_graph``, a prefill one at
``f_eager``, a both-phase one at every pair (:data:`PAIRS`). A workload is scored when at least two
backends the rules accept have a truth at every bucket; the selector sees the backends with a truth
(a backend without one, e.g. DeepEP low-latency beyond its published 256 tokens per rank, could be
neither scored nor excluded fairly), and every such workload is scored, whatever the pick.

    regret = true weighted latency of the pick / that of the best legal backend   (1.0 = the best)

beside two static policies: **always-default** (vLLM's default) and **fixed-priority**
(TensorRT-LLM's ``CommunicationFactory.create_strategy`` order: one-sided, two-sided, DeepEP
high-throughput, DeepEP low-latency, the default; the first legal one with a truth).

Goals, for both hold-outs and each phase, on the judged workloads (a derived default, every backend
seen): autoselect never worse than always-default (mean and p95) at any factor (a both-phase
workload: any pair), also on every scored workload; p95 <= 1.05 and max <= 1.30 at every factor
(p95 of a both-phase group: at the pairs of equal factors; max: at every pair) where the
certificate shows it reachable; autoselect's mean below fixed-priority's; the token-count estimate
error p50 <= 10 %.

A p95 or max goal is first checked for **feasibility**: could any policy that picks one backend per
workload without knowing the factors meet it, even one that knows every candidate's true value?
Per workload such a policy keeps the default or switches to the truly fastest candidate; each
option is over the threshold at some set of factors, and an exact count over the assignments
decides (:func:`feasibility`). An infeasible goal is printed as such with its certificate (how many
workloads are ambiguous, which classes, the least value any such policy can hold) and not judged;
a feasible one is judged. Every judged goal is a statistic over every case (``perf/goals.py``:
``dataset``): judged in the full run, printed but not judged by ``--quick`` and ``--systems``,
which read a subset. Exit status 1 when a judged goal is missed (the worst workloads are printed
with why, and two workloads no monotone tie rule can both get right where there are such), 0
otherwise. The run also prints the cross-system error the transfers across systems carry as their
band (``autoselect.reference.crosssystem``), measured on what both systems publish.

    python3 perf/regret_reference.py                    # every class (~30 s on 2 cores)
    python3 perf/regret_reference.py --quick            # GB200 node + rack and H200: what the suite runs
    python3 perf/regret_reference.py --policies         # + every tie rule and bound rule, ranked (~2 min)
    python3 perf/regret_reference.py --systems h200_sxm,gb200 --vllm-version 0.33.0
"""

from __future__ import annotations

import argparse
import dataclasses
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

from autoselect import rules  # noqa: E402
from autoselect.payload import all2all_bytes_per_token  # noqa: E402
from autoselect.reference import AGRS, CLASSES, default, transfer_points  # noqa: E402
from autoselect.reference.crosssystem import cross_system_error, same_generation  # noqa: E402
from autoselect.reference.footing import on_common_footing  # noqa: E402
from autoselect.reference.systems import SYSTEMS  # noqa: E402
from autoselect.rules.graph_capture import EAGER, capture  # noqa: E402
from autoselect.rules.wire import wire_of  # noqa: E402
from autoselect.selector import (  # noqa: E402
    BOUND_RULES,
    DEFAULT_POLICY,
    KEEPS_TIES,
    TIE_RULES,
    DecisionPolicy,
    decide_again,
    estimate_given,
    recommend_given,
)
from autoselect.selector.step import step_of  # noqa: E402
from autoselect.selector.target import resolve  # noqa: E402
from autoselect.workload import WORKLOAD_TABLE, Deployment, Shape, WorkloadSpec  # noqa: E402
from goals import DATASET, EXACT, Goals, add_quick  # noqa: E402

PRIORITY = ("flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided", "deepep_high_throughput",
            "deepep_low_latency", AGRS)
POLICIES = ("autoselect", "always-default", "fixed-priority")
KINDS = ("decode", "prefill", "mixed")
HOLDOUTS = ("token counts", "shapes")
#: The default's factor in each phase: its truth over its derived central value on vLLM's footing.
FACTORS = (0.75, 1.0, 1.25, 1.5)
#: (f_graph, f_eager): both phases at the same factor; every pair of factors.
DIAGONAL = tuple((f, f) for f in FACTORS)
PAIRS = tuple(itertools.product(FACTORS, FACTORS))
#: A workload's phase by the default's buckets: every one graph-captured, every one eager, or both.
PHASES = ("decode", "prefill", "both")
#: Activation dtypes a model can dispatch on each arch (autoselect.model's formats).
ARCH_DTYPES = {"sm90": ("bf16", "fp8", "fp8_block128"),
               "sm100": ("bf16", "fp8", "fp8_block128", "nvfp4", "mxfp8")}
QUICK_SYSTEMS = ("gb200", "h200_sxm")
GOAL_P95, GOAL_MAX = 1.05, 1.30


def scenarios_for(phase: str, goal: str = "max") -> tuple:
    """The (f_graph, f_eager) pairs a phase's goal is judged at: a one-phase workload depends on one
    factor (the diagonal covers it); a both-phase one at every pair for the max and for the
    comparison with always-default, at equal factors for p95 (the certificate is exact in one
    dimension: :func:`feasibility`)."""
    return PAIRS if phase == "both" and goal != "p95" else DIAGONAL


def _label(scenario: tuple, phase: str) -> str:
    g, e = scenario
    if phase == "decode":
        return f"x{g:.2f}"
    if phase == "prefill":
        return f"x{e:.2f}"
    return f"x{g:.2f}" if g == e else f"x{g:.2f}/{e:.2f}"


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
    arch: str = "sm100"
    values: dict | None = None  # backend -> {tokens: value on vLLM's footing}; default: from the points
    vllm_version: str | None = None
    caps: dict | None = None  # backend -> its step budget in tokens per rank (autoselect.selector.step); None: no cap

    def __post_init__(self) -> None:
        if self.values is None:
            self.values = {b: {t: on_common_footing(p, self.arch, self.vllm_version).latency_us
                               for t, p in curve.items()} for b, curve in self.points.items()}

    @property
    def default_bound(self) -> bool:
        return any(getattr(p, "bound", False) for p in self.points.get(AGRS, {}).values())

    def eager(self, tokens: int) -> bool:
        """vLLM runs the default's step of ``tokens`` per rank eagerly (above the captured sizes)."""
        known = self.__dict__.setdefault("_eager", {})
        if tokens not in known:
            known[tokens] = capture(AGRS, tokens, self.arch, self.vllm_version).mode == EAGER
        return known[tokens]

    def truth(self, backend: str, tokens: int, scenario: tuple) -> float | None:
        """The value on vLLM's footing at ``tokens`` (the default's x its phase's factor of
        ``scenario`` = (f_graph, f_eager)); between two published token counts of the backend,
        linear between them (:func:`interpolated_truths` counts those). Above the backend's step
        budget vLLM runs the bucket as several steps (full ones at the budget, one with the rest:
        ``autoselect.selector.step``), and its truth is theirs summed, each step at its own phase."""
        cap = (self.caps or {}).get(backend)
        if cap is not None and tokens > cap:
            full, rest = divmod(tokens, cap)
            parts = [self.truth(backend, cap, scenario)] * full + ([self.truth(backend, rest, scenario)] if rest else [])
            return None if any(v is None for v in parts) else sum(parts)
        curve = self.values.get(backend, {})
        v = curve.get(tokens)
        if v is not None and backend == AGRS:
            factor = scenario[1 if self.eager(tokens) else 0]
            return v * (max(factor, 1.0) if self.default_bound else factor)  # a lower bound is never undercut
        if v is not None:
            return v
        below = [t for t in curve if t < tokens]
        above = [t for t in curve if t > tokens]
        if backend == AGRS or not below or not above:
            return None
        lo, hi = max(below), min(above)
        a, b = curve[lo], curve[hi]
        return a + (b - a) * (tokens - lo) / (hi - lo)

    def phase(self, spec: WorkloadSpec) -> str:
        """``decode`` / ``prefill`` / ``both`` by how vLLM runs the default's buckets."""
        eager = {self.eager(t) for t, _ in spec.buckets}
        return "both" if len(eager) == 2 else ("prefill" if eager == {True} else "decode")


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
    candidates: list = field(default_factory=list)  # what the selector decided on (re-decided by --policies)

    @property
    def phase(self) -> str:
        return self.case.phase(self.spec)


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
        budget = rules.token_budget(rules.DEFAULT_BACKEND, vllm_version, gpu_memory_mib=cls.system.memory_mib).tokens
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
                    # the weight format that dispatches this dtype there (fp8_block128 weights: the expert kernel decides)
                    w = wire_of(backend, dtype, cls.system.arch, vllm_version, ep_size=ws)
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
                shape = Shape(hidden=h, top_k=k, experts=e, dtype=dtype)
                out.append(Case(cls.name, ws, shape, points, wire, budget, grid, cls.system.arch,
                                vllm_version=vllm_version, caps=step_caps(shape, cls.name, ws, points, vllm_version)))
    return out


def step_caps(shape: Shape, ref_class: str, world_size: int, backends, vllm_version: str) -> dict:
    """Backend -> the step budget (tokens per rank) it runs with on this case, as the selector prices it
    (``autoselect.selector.step.step_of``: vLLM's default for the GPUs, 256 for DeepEP low-latency, the
    budget emitted so the one-sided workspace fits)."""
    target = resolve(shape.profile(), deployment=Deployment(dp=world_size, tp=1), host_class=ref_class,
                     vllm_version=vllm_version)
    return {b: step_of(target, b).cap for b in backends}


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


def weighted_truth(case: Case, spec: WorkloadSpec, scenario: tuple) -> dict[str, float]:
    """Backend -> true weighted latency at ``scenario`` (f_graph, f_eager), for the backends with a
    truth at every bucket (kept per case: every rule and table asks again)."""
    known = case.__dict__.setdefault("_truths", {})
    if (spec, scenario) in known:
        return known[(spec, scenario)]
    out = known[(spec, scenario)] = {}
    for b in case.points:
        values = [case.truth(b, t, scenario) for t, _ in spec.buckets]
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
            {c.backend: c.halfwidth_us for c in rec.candidates}, rec.candidates)


def judge(tally: Tally, holdout: str, kind: str, case: Case, spec: WorkloadSpec, curves: dict, version: str,
          policy: DecisionPolicy, estimate_errors: dict | None) -> None:
    """Decide one workload and keep its outcome for scoring at every factor."""
    truth = weighted_truth(case, spec, (1.0, 1.0))
    pick, legal, seen, band, candidates = decide(case, spec, curves, version, policy, estimate_errors)
    universe = [b for b in truth if b in legal]
    if len(universe) < 2:
        tally.excluded[f"{holdout}: fewer than two legal backends with a truth at every bucket"] += 1
        return
    fixed = next((b for b in PRIORITY if b in universe), None)
    tally.scored.append(Scored(holdout, kind, case, spec, {"autoselect": pick, "always-default": AGRS,
                                                           "fixed-priority": fixed}, set(universe), seen, band,
                               candidates))


def token_holdout(case: Case, tally: Tally, version: str, policy: DecisionPolicy,
                  estimate_errors: dict | None = None) -> None:
    """Hide one published token count at a time (the derived default stays: it exists at any count)."""
    for kind in KINDS:
        for h, spec in workloads(case, kind):
            scorable = weighted_truth(case, spec, (1.0, 1.0))
            curves = {b: [p for t, p in c.items() if t != h or b == AGRS] for b, c in case.points.items()
                      if b in scorable}
            judge(tally, "token counts", kind, case, spec, curves, version, policy, estimate_errors)
    shape = case.shape
    for b, curve in case.points.items():
        if b == AGRS:
            continue
        key = (case.ref_class, case.world_size, b, shape.hidden, shape.top_k, shape.experts, case.wire[b])
        nbytes = all2all_bytes_per_token(case.wire[b], shape.hidden, shape.top_k)
        for h in curve:
            rest = [q for t, q in sorted(curve.items()) if t != h]
            est = estimate_given(rest, h, nbytes, version).latency_us
            if est is not None:
                tally.errors["token counts"][key + (h,)] = (b, abs(est / case.values[b][h] - 1))


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
            scorable = weighted_truth(case, spec, (1.0, 1.0))
            judge(tally, "shapes", kind, case, spec, {b: c for b, c in curves.items() if b in scorable}, version,
                  policy, estimate_errors)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def regrets(scored: list[Scored], scenario: tuple) -> dict[str, list[tuple[float, Scored]]]:
    """Policy -> [(regret, workload)] with the default's truth at ``scenario`` (f_graph, f_eager)."""
    out = defaultdict(list)
    for s in scored:
        truth = weighted_truth(s.case, s.spec, scenario)
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
    """The printed table and ``{(subset, hold-out, phase, (f_graph, f_eager)): {policy: (mean, p95, max)}}``
    (every pair for a both-phase group; the table prints the equal factors and the worst pair)."""
    head = f"{'workloads':<13} {'hold-out':<13} {'phase':<7} {'factor':>11} {'n':>5} |"
    for p in POLICIES:
        head += f" {p + ' mean':>20} {'p95':>6} {'max':>6} |"
    lines, out = [head], {}
    for subset in subsets:
        for holdout in HOLDOUTS:
            for phase in PHASES:
                scored = [s for s in tally.scored if s.holdout == holdout and s.phase == phase and SUBSETS[subset](s)]
                if not scored:
                    continue
                for sc in scenarios_for(phase):
                    r = regrets(scored, sc)
                    out[(subset, holdout, phase, sc)] = {p: stats([x for x, _ in r[p]]) for p in POLICIES}
                rows = [(_label(sc, phase), out[(subset, holdout, phase, sc)]) for sc in DIAGONAL]
                if phase == "both":
                    cells = [out[(subset, holdout, phase, sc)] for sc in PAIRS]
                    rows.append(("worst pair", {p: tuple(max(c[p][i] for c in cells) for i in range(3))
                                                for p in POLICIES}))
                for label, row in rows:
                    line = f"{subset:<13} {holdout:<13} {phase:<7} {label:>11} {len(scored):>5} |"
                    for p in POLICIES:
                        mean, p95, mx = row[p]
                        line += f" {mean:>20.4f} {p95:>6.3f} {mx:>6.3f} |"
                    lines.append(line)
    return lines, out


def worst(tally: Tally, holdout: str, phase: str, scenario: tuple, n: int = 6, subset: str = "judged") -> list[str]:
    """The workloads that hold autoselect's regret up at ``scenario``, each with what it saw and why."""
    scored = [s for s in tally.scored if s.holdout == holdout and s.phase == phase and SUBSETS[subset](s)]
    ranked = sorted(regrets(scored, scenario)["autoselect"], key=lambda rs: -rs[0])
    lines = []
    for regret, s in ranked[:n]:
        if regret <= 1.0 + 1e-9:
            break
        truth = weighted_truth(s.case, s.spec, scenario)
        pick, best = s.picks["autoselect"], min(s.legal, key=truth.get)
        c = s.case
        lines.append(f"  {regret:.3f}  {c.ref_class} EP {c.world_size} {c.shape.label()} {s.kind} "
                     f"{[t for t, _ in s.spec.buckets]}: picked {pick} (saw {_us(s.seen.get(pick))}, truth "
                     f"{_us(truth.get(pick))}), best {best} (saw {_us(s.seen.get(best))}, truth {truth[best]:.1f}); "
                     f"{_why(s, pick, best)}")
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
        return "the derived default looked no slower; its truth here is the factor x its central value"
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


def cross_system_lines(systems: set[str] | None) -> list[str]:
    """The cross-system error (p95 |target / source - 1|) of what two systems both publish: NCCL
    all_gather + reduce_scatter (the band of a transfer across systems), and DeepEP where both
    publish it at one EP size (shown: not used as a band, autoselect.reference.crosssystem)."""
    conn = default().conn
    keys = [k for k in SYSTEMS if not systems or k in systems]
    source = "gb200"
    nccl = []
    for k in keys:
        e = cross_system_error(conn, source, k) if k != source else None
        if e is not None:
            kind = "one NVLink generation" if same_generation(SYSTEMS[source], SYSTEMS[k]) else "another generation"
            nccl.append(f"{SYSTEMS[k].label} {e.error:.1%} (x{e.median_ratio:.3f}, {kind})")
    lines = [f"cross-system error from GB200, NCCL all_gather + reduce_scatter (p95 |target / GB200 - 1|, median "
             f"ratio): {', '.join(nccl) or 'none in this subset'}"]
    deepep = []
    for a, b in (("b200_sxm", "b300_sxm"), ("gb200", "gb300"), ("h100_sxm", "h200_sxm")):
        if systems and not {a, b} <= systems:
            continue
        for backend, short in (("deepep_high_throughput", "HT"), ("deepep_low_latency", "LL")):
            rows = conn.execute(
                "SELECT a.latency_us, b.latency_us FROM points a JOIN points b ON a.backend = b.backend AND "
                "a.world_size = b.world_size AND a.hidden = b.hidden AND a.top_k = b.top_k AND a.experts = b.experts "
                "AND a.wire_dtype = b.wire_dtype AND a.tokens_per_rank = b.tokens_per_rank "
                "WHERE a.system = ? AND b.system = ? AND a.backend = ?", (a, b, backend)).fetchall()
            errors = [abs(y / x - 1) for x, y in rows if x > 0]
            if errors:
                deepep.append(f"{SYSTEMS[a].label}->{SYSTEMS[b].label} {short} {pct(errors, 0.95):.1%}")
    if deepep:
        lines.append("cross-system error of DeepEP at a common EP size (shown, not a band: eager rows, no common EP "
                     "across trays and boards): " + ", ".join(deepep))
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


def _worse(row: dict) -> bool:
    """autoselect's mean or p95 above always-default's."""
    return any(a > d + 1e-9 for a, d in zip(row["autoselect"][:2], row["always-default"][:2]))


def policy_rank(out: dict, subset: str, keeps_ties: bool = True) -> tuple:
    """How a rule is ranked, lower first: the (phase, hold-out, factor) cells where autoselect's mean
    or p95 is worse than always-default's; whether the rule lets a candidate leave the default
    inside overlapping bands (a tie keeps what needs nothing extra: such a rule ranks after those that
    keep it); then, on the token hold-out of ``subset``, the (phase, factor) cells whose p95 misses
    the goal and those whose max misses it, the worst p95 over them, the mean of the means."""
    worse = sum(_worse(row) for (sub, _, _, _), row in out.items() if sub in ("all", subset))
    token = [row["autoselect"] for (sub, holdout, _, _), row in out.items()
             if sub == subset and holdout == "token counts"]
    return (worse, int(not keeps_ties), sum(a[1] > GOAL_P95 for a in token), sum(a[2] > GOAL_MAX for a in token),
            round(max(a[1] for a in token), 3), round(statistics.fmean(a[0] for a in token), 4))


def redecide(tally: Tally, policy: DecisionPolicy) -> Tally:
    """The same workloads decided again under ``policy``, from the candidates the selector saw: the
    decision step alone (``autoselect.selector.decide_again``), on copies of the candidates, so every
    rule is judged on exactly what recommend would see."""
    out = Tally(errors=tally.errors, excluded=tally.excluded)
    for s in tally.scored:
        pick = decide_again(s.candidates, policy, [w for _, w in s.spec.buckets])
        out.scored.append(dataclasses.replace(s, picks={**s.picks, "autoselect": pick}))
    return out


def worse_cells(out: dict, subset: str = "judged") -> list[str]:
    """The (subset, hold-out, phase, factor) cells where autoselect's mean or p95 is above always-default's."""
    return [f"{sub} {h[:5]} {phase} {_label(sc, phase)}" for (sub, h, phase, sc), row in out.items()
            if sub in ("all", subset) and _worse(row)]


def compare_policies(tally: Tally) -> bool:
    """Every tie rule (on the judged workloads, where a derived default is compared) and every bound
    rule (on the bound-default ones), each ranked with the other rule at recommend's, each deciding
    the same workloads again from what the selector saw (:func:`redecide`); True when recommend's
    rules rank first."""
    print("decision rules ranked, lower first (" + " ".join(policy_rank.__doc__.split("lower first: ", 1)[1].split())
          + "); autoselect mean/p95/max on the token hold-out at x0.75 / x1.5 per phase; the cells worse than "
          "always-default:")
    firsts = []
    for rule, names, subset in (("tie_rule", list(TIE_RULES), "judged"),
                                 ("bound_rule", list(BOUND_RULES), "bound default")):
        ranked = []
        for name in names:
            _, out = table(redecide(tally, DEFAULT_POLICY._replace(**{rule: name})), ("all", subset))
            cells = " | ".join(f"{phase[:3]} {_label(sc, phase)} {a[0]:.4f}/{a[1]:.3f}/{a[2]:.3f}"
                               for (sub, h, phase, sc), row in out.items()
                               if sub == subset and h == "token counts" and sc in (DIAGONAL[0], DIAGONAL[-1])
                               for a in [row["autoselect"]])
            ranked.append((policy_rank(out, subset, rule == "bound_rule" or name in KEEPS_TIES), name, cells + "; worse: " + (", ".join(worse_cells(out, subset))
                                                                                  or "none")))
        ranked.sort(key=lambda r: r[0])
        print(f"{rule.replace('_', ' ')} ({subset} workloads):")
        for rank, name, cells in ranked:
            mark = " <- recommend's" if name == getattr(DEFAULT_POLICY, rule) else ""
            print(f"  {name:<15} {rank}: {cells}{mark}")
        firsts.append(ranked[0][1] == getattr(DEFAULT_POLICY, rule)
                      or ranked[0][0] == next(r for r, n, _ in ranked if n == getattr(DEFAULT_POLICY, rule)))
    return all(firsts)


# --- what any factor-blind policy can reach: the oracle's certificate ---------------------------------
#
# A policy that picks one backend per workload without knowing the factors (recommend is never told
# them) has, per judged workload, two sensible options even when it knows every candidate's true
# value: keep the default, or switch to the truly fastest other legal backend (any other switch is
# slower in every scenario, the candidates' truths do not move with the factors). Each option misses
# a threshold at a set of scenarios (f_graph, f_eager). A goal "at most A_s workloads over the
# threshold in scenario s, in every scenario" is feasible when some assignment of options keeps every
# scenario within its A_s: decided exactly by the counts of workloads per pair of miss sets (a Pareto
# frontier of the miss counts), never by sampling.


@dataclass
class Feasibility:
    """Whether a goal "at most ``allowed[s]`` judged workloads over ``threshold`` in each scenario s"
    can be met by any factor-blind policy that knows the candidates' true values, and why."""

    threshold: float
    n: int
    allowed: dict  # scenario -> how many may be over the threshold
    forced: dict  # scenario -> workloads over at s whatever is picked (either option, or the only one)
    ambiguous: dict  # (keep's miss set, switch's miss set) -> [Scored]: each option misses somewhere
    least_excess: int  # min over assignments of max_s (over at s - allowed[s]); <= 0: feasible
    proof: str  # the shortest argument: a scenario pair whose combined allowance the counts exceed
    scenarios: tuple = DIAGONAL

    @property
    def feasible(self) -> bool:
        return self.least_excess <= 0


def oracle_regrets(s: Scored, scenarios: tuple = DIAGONAL) -> dict[str, dict[tuple, float]]:
    """Option -> its regret in each scenario: ``keep`` (the default), ``switch`` (the truly fastest
    other legal backend); only the options that exist."""
    truth = {sc: weighted_truth(s.case, s.spec, sc) for sc in scenarios}
    others = [b for b in s.legal if b != AGRS]
    picks = {}
    if AGRS in s.legal:
        picks["keep"] = AGRS
    if others:
        first = truth[scenarios[0]]
        picks["switch"] = min(others, key=lambda b: first[b])
    return {name: {sc: truth[sc][b] / min(truth[sc][x] for x in s.legal) for sc in scenarios}
            for name, b in picks.items()}


def allowed_over(n: int, q: float) -> int:
    """How many of ``n`` values may exceed a threshold while the ``q`` quantile (:func:`pct`) stays
    at or below it (``q = 1``: the max, none)."""
    return 0 if q >= 1 else n - 1 - min(n - 1, int(q * n))


def feasibility(scored: list[Scored], threshold: float, q: float, options: list | None = None,
                scenarios: tuple = DIAGONAL) -> Feasibility:
    """Can any factor-blind policy hold the ``q`` quantile of the regret at or below ``threshold`` in
    every scenario at once (see the section's comment)? ``options``: :func:`oracle_regrets` of each
    workload, when the caller has them. A max (``q = 1``) over more scenarios than the diagonal is
    decided workload by workload (none may be over anywhere: each must have an option over nowhere)."""
    n = len(scored)
    options = options if options is not None else [oracle_regrets(s, scenarios) for s in scored]
    allowed = {sc: allowed_over(n, q) for sc in scenarios}
    forced = {sc: 0 for sc in scenarios}
    ambiguous = defaultdict(list)
    for s, opts in zip(scored, options):
        misses = {name: frozenset(sc for sc in scenarios if r[sc] > threshold) for name, r in opts.items()}
        best = [m for m in misses.values() if not any(o < m for o in misses.values())]  # not dominated
        if any(not m for m in best):
            continue
        if len(set(best)) == 1:
            for sc in best[0]:
                forced[sc] += 1
            continue
        ambiguous[(misses["keep"], misses["switch"])].append(s)
    limits = [allowed[sc] for sc in scenarios]
    base = [forced[sc] for sc in scenarios]
    if q >= 1 and len(scenarios) > len(DIAGONAL):
        least = 0 if not any(base) and not ambiguous else 1  # some workload is over somewhere whatever is picked
    else:
        groups = sorted(([[int(sc in keep) for sc in scenarios], [int(sc in switch) for sc in scenarios], len(group)]
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
    for i, f in enumerate(scenarios):
        for g in scenarios[i + 1:]:
            pair = {f, g}
            floor = forced[f] + forced[g] + sum(len(group) * min(len(keep & pair), len(switch & pair))
                                                for (keep, switch), group in ambiguous.items())
            if floor > allowed[f] + allowed[g] and not proof:
                proof = (f"so at {_x([f])} and {_x([g])} together at least {floor} are over {threshold} whatever is "
                         f"picked, and at most {allowed[f]} + {allowed[g]} = {allowed[f] + allowed[g]} may be")
    if not proof and least > 0:
        proof = f"every assignment of the ambiguous workloads leaves a factor {least} over its allowance"
    return Feasibility(threshold, n, allowed, forced, dict(ambiguous), least, proof, scenarios)


def _assignable(base: list[int], groups: list, limits: list[int]) -> bool:
    """Whether some number ``k`` of each group's workloads can keep (the rest switch) with every
    scenario's miss count within ``limits``; a group is ``[keep's misses, switch's misses, size]``
    (0/1 per scenario).

    Exact, and fast: a scenario's count is ``base + sum(size * switch) + sum(k * (keep - switch))``,
    so groups with the same ``keep - switch`` pattern merge into one, and patterns that are ordered
    (componentwise ``<=``) form a chain over which keeping the lowest patterns first is best for any
    total kept (:func:`_chain_fits`). The patterns off the longest chain are enumerated (along the
    diagonal of factors there is one: keep's misses are an upper set of the factors, switch's a lower
    one, which leaves six patterns for four factors, five of them on one chain)."""
    room = [limit - b for limit, b in zip(limits, base)]
    sizes: dict[tuple, int] = defaultdict(int)
    for keep, switch, n in groups:
        room = [r - n * y for r, y in zip(room, switch)]
        sizes[tuple(x - y for x, y in zip(keep, switch))] += n
    patterns = sorted(p for p in sizes if sizes[p])
    chain = _longest_chain(patterns)
    rest = [p for p in patterns if p not in chain]
    for ks in itertools.product(*(range(sizes[p] + 1) for p in rest)):
        left = list(room)
        for k, p in zip(ks, rest):
            left = [r - k * c for r, c in zip(left, p)]
        if _chain_fits([(p, sizes[p]) for p in chain], left):
            return True
    return False


def _longest_chain(patterns: list[tuple]) -> list[tuple]:
    """The longest run of ``patterns`` ordered componentwise (ascending)."""
    le = lambda a, b: all(x <= y for x, y in zip(a, b))  # noqa: E731
    ordered = sorted(patterns, key=sum)
    best: dict[tuple, list] = {}
    for p in ordered:
        prev = max((best[q] for q in best if le(q, p)), key=len, default=[])
        best[p] = prev + [p]
    return max(best.values(), key=len, default=[])


def _chain_fits(chain: list[tuple], room: list[int]) -> bool:
    """Whether some amounts ``0 <= k_j <= n_j`` of chain patterns ``c_1 <= c_2 <= ...`` (entries -1, 0,
    1) keep ``sum(k_j * c_j) <= room`` in every scenario. For a given total kept, filling the lowest
    patterns first is componentwise least; a scenario's sum then falls by one per unit over its -1
    patterns (``down`` units), stays over its 0s (``flat``) and rises over its 1s, so the totals it
    allows are one interval, ``[-r, r + 2 * down + flat]`` within ``[0, total]``; they must meet."""
    total = sum(n for _, n in chain)
    lo, hi = 0, total
    for s, r in enumerate(room):
        down = sum(n for c, n in chain if c[s] < 0)
        flat = sum(n for c, n in chain if c[s] == 0)
        if r < -down:
            return False
        lo, hi = max(lo, -r), min(hi, r + 2 * down + flat)
        if lo > hi:
            return False
    return True


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
        c, truth = s.case, weighted_truth(s.case, s.spec, (1.0, 1.0))
        seen = ", ".join(f"{b} saw {s.seen[b]:.1f} +- {s.band[b]:.1f}, truth {truth[b]:.1f}"
                         for b in sorted(s.legal, key=lambda b: b != AGRS) if s.seen.get(b) is not None)
        return f"{c.ref_class} EP {c.world_size} {c.shape.label()} {s.kind} {[t for t, _ in s.spec.buckets]} ({seen})"
    return (f"{one(keep)} must keep the default (every candidate is over {GOAL_MAX} at some factor), yet a candidate "
            f"of it looks no worse than the good candidates of {one(switch)}, which must leave it (keeping is over "
            f"{GOAL_MAX} at some factor)")


def evidence_pair(scored: list[Scored], threshold: float, scenarios: tuple = DIAGONAL) -> tuple[Scored, Scored] | None:
    """Two judged workloads that no pairwise monotone tie rule can both get within ``threshold`` in
    every scenario, or None.

    recommend compares each candidate with the default on its own (``versus_default``) and picks
    the fastest that beats it. A rule of that form is *monotone* when it lets every candidate of a
    backend that :func:`looks_no_worse` than one of the same backend and evidence kind it lets beat
    the default beat the default too (every rule in ``TIE_RULES`` is; within one hold-out every
    candidate has the same kind: estimated at the hidden token count, or transferred). ``keep`` must
    keep the default (every candidate is over ``threshold`` in some scenario, the default in none);
    ``switch`` must leave it for one of its *good* candidates (within the threshold in every
    scenario; keeping is over in some). When each good candidate of ``switch`` is looked no worse
    than by some candidate of ``keep``, a monotone rule that lets a good one beat the default in
    ``switch`` lets one beat it in ``keep`` as well.
    """
    keeps, switches = [], []
    for s in scored:
        if AGRS not in s.legal or s.seen.get(AGRS) is None or s.seen[AGRS] <= s.band[AGRS]:
            continue
        truth = {sc: weighted_truth(s.case, s.spec, sc) for sc in scenarios}
        best = {sc: min(truth[sc][b] for b in s.legal) for sc in scenarios}
        ok = {b: all(truth[sc][b] / best[sc] <= threshold for sc in scenarios) for b in s.legal}
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


def least_quantile(scored: list[Scored], q: float, options: list | None = None, scenarios: tuple = DIAGONAL) -> float:
    """The least threshold whose ``q`` quantile goal a factor-blind oracle can meet in every scenario."""
    options = options if options is not None else [oracle_regrets(s, scenarios) for s in scored]
    if q >= 1:  # the max: each workload's best option at its worst scenario
        return max(min(max(r.values()) for r in opts.values()) for opts in options)
    values = sorted({r for opts in options for opt in opts.values() for r in opt.values()})
    lo, hi = 0, len(values) - 1  # values[hi] is always reachable (every regret at or below it)
    while lo < hi:
        mid = (lo + hi) // 2
        if feasibility(scored, values[mid], q, options, scenarios).feasible:
            hi = mid
        else:
            lo = mid + 1
    return values[lo]


def _x(scenarios) -> str:
    return "/".join(f"x{g:.2f}" if g == e else f"x{g:.2f}|{e:.2f}" for g, e in sorted(scenarios)) or "none"


def certificate(fz: Feasibility) -> str:
    """The infeasibility certificate in words: counts, the ambiguous classes and where they are."""
    parts = [f"of {fz.n} judged workloads at most {max(fz.allowed.values())} may be over {fz.threshold} at each factor",
             "over it whatever is picked: " + ", ".join(f"{c} at {_x([sc])}" for sc, c in fz.forced.items() if c)]
    ambiguous = sum(len(g) for g in fz.ambiguous.values())
    if ambiguous:
        parts.append(f"{ambiguous} ({ambiguous / fz.n:.1%}) ambiguous, over it at some factor whichever is picked")
    for (keep, switch), group in sorted(fz.ambiguous.items(), key=lambda kv: -len(kv[1]))[:4]:
        where = defaultdict(int)
        for s in group:
            where[f"{s.case.ref_class} {s.kind}"] += 1
        top = ", ".join(f"{w} {c}" for w, c in sorted(where.items(), key=lambda kv: -kv[1])[:4])
        parts.append(f"{len(group)} over at {_x(keep)} if the default is kept and at {_x(switch)} if not ({top}"
                     + (", ..." if len(where) > 4 else "") + ")")
    parts.append(fz.proof)
    return "; ".join(p for p in parts if p)


def _inside(scenario: tuple, window: tuple) -> bool:
    return scenario[0] in window and scenario[1] in window


def _span(window: tuple) -> str:
    return f"x{window[0]:.2f}" if len(window) == 1 else f"x{window[0]:.2f}..x{window[-1]:.2f}"


def reachable_windows(scored: list[Scored], threshold: float, q: float, phase: str, goal: str) -> list[tuple]:
    """The widest runs of consecutive factors around x1.0 over which a factor-blind oracle can hold
    the goal (:func:`feasibility`): every run that is reachable and lies in no wider reachable run.
    x1.0 alone always is (the oracle picks the fastest there)."""
    one = FACTORS.index(1.0)
    runs = [FACTORS[i:j + 1] for i in range(one + 1) for j in range(one, len(FACTORS))]
    ok = []
    for run in runs:
        scenarios = tuple(sc for sc in scenarios_for(phase, goal) if _inside(sc, run))
        if feasibility(scored, threshold, q, None, scenarios).feasible:
            ok.append(run)
    return [r for r in ok if not any(set(r) < set(o) for o in ok)]


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
        for phase in PHASES:
            scored = [s for s in tally.scored if s.holdout == holdout and s.phase == phase and SUBSETS["judged"](s)]
            if not scored:
                continue
            for label, column, threshold, q in (("p95", 1, GOAL_P95, 0.95), ("max", 2, GOAL_MAX, 1.0)):
                scenarios = scenarios_for(phase, label)
                auto = {sc: out[("judged", holdout, phase, sc)]["autoselect"][column] for sc in scenarios}
                shown = {sc: v for sc, v in auto.items() if sc in DIAGONAL}
                value = ", ".join(f"{_label(sc, phase)} {v:.3f}" for sc, v in shown.items())
                if len(scenarios) > len(DIAGONAL):
                    value += f", worst pair {max(auto.values()):.3f}"
                options = [oracle_regrets(s, scenarios) for s in scored]
                fz = feasibility(scored, threshold, q, options, scenarios)
                least = least_quantile(scored, q, options, scenarios)
                reach = reachable_windows(scored, threshold, q, phase, label)
                met_in = [w for w in reach if max(v for sc, v in auto.items() if _inside(sc, w)) <= threshold]
                where = "; ".join(f"reachable over {_span(w)}: autoselect's worst there "
                                  f"{max(v for sc, v in auto.items() if _inside(sc, w)):.3f}" for w in reach)
                whole = ("the whole range is reachable" if fz.feasible else
                         f"the whole range is not (no policy that picks without knowing the factors can hold it, even "
                         f"one that knows every candidate's true value: {certificate(fz)}; the least {label} such a "
                         f"policy can hold at every factor is {least:.3f})")
                result.append(Goal(f"{holdout}, {phase}: autoselect {label} at every factor where it is reachable "
                                   "(judged)", f"{value}; {where}; {whole}",
                                   f"<= {threshold} at every factor of a widest run of factors around x1.0 that the "
                                   "certificate shows reachable", bool(met_in)))
                # the certificate checked against the policies scored: none may do better than it says any can
                worst_of = {p: max(out[("judged", holdout, phase, sc)][p][column] for sc in scenarios)
                            for p in POLICIES}
                beaten = [p for p in POLICIES if worst_of[p] < least - 1e-9]
                result.append(Goal(f"{holdout}, {phase}: no policy's {label} at every factor below the certificate's "
                                   "least", f"least {least:.3f}; worst over the factors: "
                                   + ", ".join(f"{p} {v:.3f}" for p, v in worst_of.items()),
                                   "none below it", not beaten, kind=EXACT))
    for subset in ("all", "judged"):
        for holdout in HOLDOUTS:
            cells = [(phase, sc, out[(subset, holdout, phase, sc)]) for phase in PHASES
                     for sc in scenarios_for(phase) if (subset, holdout, phase, sc) in out]
            if not cells:
                continue
            worse = [(phase, sc, row) for phase, sc, row in cells if _worse(row)]
            shown = worse or [(phase, sc, row) for phase, sc, row in cells if sc in (DIAGONAL[0], DIAGONAL[-1])]
            value = (f"{len(worse)} of {len(cells)} (phase, factor) cells worse" + (": " if worse else "; e.g. ")
                     + "; ".join(f"{phase} {_label(sc, phase)} {row['autoselect'][0]:.4f}/{row['autoselect'][1]:.3f} vs "
                                 f"{row['always-default'][0]:.4f}/{row['always-default'][1]:.3f}"
                                 for phase, sc, row in shown[:6]))
            result.append(Goal(f"{holdout}: autoselect never worse than always-default ({subset})", value,
                               "mean and p95 each <= always-default's at every factor, each phase (both: every pair)",
                               not worse))
    for holdout in HOLDOUTS:
        cells = [(phase, sc, out[("all", holdout, phase, sc)]) for phase in PHASES for sc in DIAGONAL
                 if ("all", holdout, phase, sc) in out]
        if cells:
            above = [(phase, sc) for phase, sc, r in cells if r["autoselect"][0] >= r["fixed-priority"][0]]
            result.append(Goal(f"{holdout}: autoselect mean below fixed-priority's (all)",
                               f"{len(cells) - len(above)} of {len(cells)} (phase, factor) cells below"
                               + ("; above: " + ", ".join(f"{p} {_label(sc, p)}" for p, sc in above) if above else ""),
                               "< at every factor", not above))
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
    print(f"hold-out regret on NVIDIA's published reference (AIConfigurator 0.12.0) on vLLM's footing, vLLM {version}, "
          f"decision policy {DEFAULT_POLICY.tie_rule} / {DEFAULT_POLICY.bound_rule}: {len(all_cases)} (class, EP, shape, "
          "activation dtype) cases" + (f" of {', '.join(sorted(systems))}" if systems else "")
          + f", {time.perf_counter() - started:.0f} s")
    print("regret = true weighted latency of the pick / of the best legal backend with a truth; the default's "
          "truth = its phase's factor x its derived central value (selector unchanged); phase: decode = every bucket "
          "of the default under a CUDA graph, prefill = every bucket eager, both = some of each (factor: both "
          "phases at it; worst pair: the worst over the 16 (graph, eager) pairs)")
    print("\n".join(lines))
    for line in error_lines(tally) + cross_system_lines(systems):
        print(line)
    for why, n in sorted(tally.excluded.items()):
        print(f"not scored {n}: {why}")
    print("workloads: judged = the goals' (a derived default, every legal backend seen); bound default = the "
          "NVL72 rack beyond a tray, where the default has only a lower bound and the bound x factor stands for "
          "its unknown truth, in its favour; blind = the selector saw no number for a backend that has a truth "
          "(one-sided's single published shape under the shape hold-out)")
    verdicts = goals(tally, out)
    for holdout in HOLDOUTS:
        for phase in PHASES:
            scenarios = scenarios_for(phase)
            missed = [sc for sc in scenarios if ("judged", holdout, phase, sc) in out
                      and out[("judged", holdout, phase, sc)]["autoselect"][2] > GOAL_MAX]
            for sc in missed[:2]:
                print(f"worst judged workloads, {holdout}, {phase} {_label(sc, phase)}:")
                print("\n".join(worst(tally, holdout, phase, sc)))
            scored = [s for s in tally.scored if s.holdout == holdout and s.phase == phase and SUBSETS["judged"](s)]
            pair = evidence_pair(scored, GOAL_MAX, scenarios) if missed else None
            if pair:
                print(f"why no tie rule of recommend's form holds max <= {GOAL_MAX} on the {holdout} hold-out, {phase}: "
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
        same = sum(a.picks["autoselect"] == b.picks["autoselect"]
                   for a, b in zip(tally.scored, redecide(tally, DEFAULT_POLICY).scored))
        judged.check("deciding again from the candidates reproduces recommend's picks", f"{same} of {len(tally.scored)}",
                     "all", same == len(tally.scored), EXACT)
        ok = compare_policies(tally)
        judged.check("recommend's tie rule and bound rule rank first", "yes" if ok else "no", "yes", ok,
                     DATASET)
    return judged.finish()


if __name__ == "__main__":
    raise SystemExit(main())
