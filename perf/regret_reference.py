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

Goals, for both hold-outs at every factor: autoselect p95 regret <= 1.05 and max <= 1.30, and
autoselect never worse than always-default (mean, p95 and max). Exit status 1 when one is missed
(the worst workloads are printed with why), 0 otherwise.

    python3 perf/regret_reference.py                    # every class (~1-2 min on 2 cores)
    python3 perf/regret_reference.py --quick            # GB200 node + rack and H200: what the suite runs
    python3 perf/regret_reference.py --policies         # + every tie rule and bound rule, ranked
    python3 perf/regret_reference.py --systems h200_sxm,gb200 --vllm-version 0.33.0
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autoselect import rules, vllm_flags  # noqa: E402
from autoselect.payload import all2all_bytes_per_token  # noqa: E402
from autoselect.reference import AGRS, CLASSES, default, transfer_points  # noqa: E402
from autoselect.rules.wire import wire_dtype  # noqa: E402
from autoselect.selector import estimate_latency, recommend  # noqa: E402
from autoselect.selector.decide import BOUND_RULES, DEFAULT_POLICY, TIE_RULES, DecisionPolicy  # noqa: E402
from autoselect.selector.evidence import BackendEvidence  # noqa: E402
from autoselect.selector.reference_evidence import reference_point  # noqa: E402
from autoselect.selector.answer import DERIVED, PUBLISHED, TRANSFERRED  # noqa: E402
from autoselect.workload import WORKLOAD_TABLE, Deployment, Shape, WorkloadSpec  # noqa: E402

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


@dataclass
class Tally:
    scored: list = field(default_factory=list)
    errors: dict = field(default_factory=lambda: defaultdict(dict))  # hold-out -> {key: relative error}
    excluded: dict = field(default_factory=lambda: defaultdict(int))


class Given:
    """An evidence source over given reference points (the hold-out's view of the reference)."""

    kind = PUBLISHED

    def __init__(self, curves: dict):
        self.curves = curves  # backend -> [ReferencePoint]

    @property
    def considered(self) -> int:
        return sum(len(c) for c in self.curves.values())

    def for_backend(self, backend: str) -> BackendEvidence:
        curve = self.curves.get(backend)
        if not curve:
            return BackendEvidence(backend, kind=self.kind, missing="held out")
        points = tuple(reference_point(p) for p in sorted(curve, key=lambda p: p.tokens_per_rank))
        kind = max((p.kind for p in points), key=[PUBLISHED, DERIVED, TRANSFERRED].index)
        return BackendEvidence(backend, kind=kind, source=f"{kind} (hold-out)", points=points)


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
            rows[(p.world_size, p.hidden, p.top_k, p.experts)][(p.backend, p.dispatch_dtype)][p.tokens_per_rank] = p
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


def decide(case: Case, spec: WorkloadSpec, curves: dict, vllm_version: str, policy: DecisionPolicy):
    """recommend() over ``curves`` for the case's reference class: the pick, the legal backends, what it saw."""
    rec = recommend(case.shape.profile(), conn=None, deployment=Deployment(dp=case.world_size, tp=1),
                    host_class=case.ref_class, vllm_version=vllm_version, workload=spec,
                    evidence=lambda target: [Given(curves)], policy=policy)
    return rec.backend, {c.backend for c in rec.candidates}, {c.backend: c.weighted_us for c in rec.candidates}


def judge(tally: Tally, holdout: str, kind: str, case: Case, spec: WorkloadSpec, curves: dict, version: str,
          policy: DecisionPolicy) -> None:
    """Decide one workload and keep its outcome for scoring at every factor."""
    truth = weighted_truth(case, spec, 1.0)
    pick, legal, seen = decide(case, spec, curves, version, policy)
    universe = [b for b in truth if b in legal]
    if len(universe) < 2:
        tally.excluded[f"{holdout}: fewer than two legal backends with a truth at every bucket"] += 1
        return
    fixed = next((b for b in PRIORITY if b in universe), None)
    tally.scored.append(Scored(holdout, kind, case, spec, {"autoselect": pick, "always-default": AGRS,
                                                           "fixed-priority": fixed}, set(universe), seen))


def token_holdout(case: Case, tally: Tally, version: str, policy: DecisionPolicy) -> None:
    """Hide one published token count at a time (the derived default stays: it exists at any count)."""
    for kind in KINDS:
        for h, spec in workloads(case, kind):
            scorable = weighted_truth(case, spec, 1.0)
            curves = {b: [p for t, p in c.items() if t != h or b == AGRS] for b, c in case.points.items()
                      if b in scorable}
            judge(tally, "token counts", kind, case, spec, curves, version, policy)
    shape = case.shape
    for b, curve in case.points.items():
        if b == AGRS:
            continue
        key = (case.ref_class, case.world_size, b, shape.hidden, shape.top_k, shape.experts, case.wire[b])
        nbytes = all2all_bytes_per_token(case.wire[b], shape.hidden, shape.top_k)
        for h, p in curve.items():
            rest = [reference_point(q) for t, q in sorted(curve.items()) if t != h]
            est = estimate_latency(rest, h, nbytes).latency_us
            if est is not None:
                tally.errors["token counts"][key + (h,)] = (b, abs(est / p.latency_us - 1))


def shape_holdout(case: Case, tally: Tally, version: str, policy: DecisionPolicy) -> None:
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
                   if (p.hidden, p.top_k, p.experts, p.dispatch_dtype) != hidden]
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
        for h, spec in workloads(case, kind):
            scorable = weighted_truth(case, spec, 1.0)
            judge(tally, "shapes", kind, case, spec, {b: c for b, c in curves.items() if b in scorable}, version,
                  policy)


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


def run(systems: set[str] | None, version: str, policy: DecisionPolicy) -> tuple[Tally, list[Case]]:
    tally = Tally()
    all_cases = cases(systems, version)
    for case in all_cases:
        token_holdout(case, tally, version, policy)
        shape_holdout(case, tally, version, policy)
    return tally, all_cases


def policy_rank(out: dict, subset: str) -> tuple:
    """How a rule is ranked, lower first: the (hold-out, factor) cells where autoselect's mean or p95
    is worse than always-default's; then, on the token hold-out of ``subset``, the factors whose p95
    misses the goal, the worst p95 over the factors, the mean of the means over the factors."""
    worse = sum(a[0] > d[0] + 1e-9 or a[1] > d[1] + 1e-9
                for (sub, _, _), row in out.items() if sub in ("all", subset)
                for a, d in [(row["autoselect"], row["always-default"])])
    token = [row["autoselect"] for (sub, holdout, _), row in out.items()
             if sub == subset and holdout == "token counts"]
    return (worse, sum(a[1] > GOAL_P95 for a in token), round(max(a[1] for a in token), 3),
            round(statistics.fmean(a[0] for a in token), 4))


def compare_policies(systems: set[str] | None, version: str) -> bool:
    """Every tie rule (on the judged workloads, where a derived default is compared) and every bound
    rule (on the bound-default ones), each ranked with the other rule at recommend's; True when
    recommend's rules rank first."""
    print("decision rules ranked, lower first (" + " ".join(policy_rank.__doc__.split("lower first: ", 1)[1].split())
          + "); autoselect mean/p95/max:")
    firsts = []
    for field, names, subset in (("tie_rule", list(TIE_RULES), "judged"),
                                 ("bound_rule", list(BOUND_RULES), "bound default")):
        ranked = []
        for name in names:
            policy = DEFAULT_POLICY._replace(**{field: name})
            tally, _ = run(systems, version, policy)
            _, out = table(tally, ("all", subset))
            cells = " | ".join(f"{h[:5]} x{f:.2f} {a[0]:.4f}/{a[1]:.3f}/{a[2]:.3f}"
                               for (sub, h, f), row in out.items() if sub == subset for a in [row["autoselect"]])
            ranked.append((policy_rank(out, subset), name, cells))
        ranked.sort(key=lambda r: r[0])
        print(f"{field.replace('_', ' ')} ({subset} workloads):")
        for rank, name, cells in ranked:
            mark = " <- recommend's" if name == getattr(DEFAULT_POLICY, field) else ""
            print(f"  {name:<15} {rank}: {cells}{mark}")
        firsts.append(ranked[0][1] == getattr(DEFAULT_POLICY, field)
                      or ranked[0][0] == next(r for r, n, _ in ranked if n == getattr(DEFAULT_POLICY, field)))
    return all(firsts)


def goals(out: dict) -> dict[str, bool]:
    """Each goal of the module docstring, per hold-out and factor: on the judged workloads, and
    never worse than always-default on every scored one."""
    result = {}
    for (subset, holdout, f), row in out.items():
        a, d = row["autoselect"], row["always-default"]
        tag = f"{holdout} x{f:.2f}"
        if subset == "judged":
            result[f"{tag}: autoselect p95 <= {GOAL_P95} (judged)"] = a[1] <= GOAL_P95
            result[f"{tag}: autoselect max <= {GOAL_MAX} (judged)"] = a[2] <= GOAL_MAX
        if subset in ("judged", "all"):
            result[f"{tag}: autoselect mean, p95, max <= always-default's ({subset})"] = all(
                x <= y + 1e-9 for x, y in zip(a, d))
    return result


def main(argv=None) -> int:
    """Print the tables and whether the goals are met."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", default=None, help="comma-separated reference systems (default: all)")
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK_SYSTEMS)} (what the suite runs)")
    ap.add_argument("--vllm-version", default=None, help="target vLLM (default: the newest known)")
    ap.add_argument("--policies", action="store_true",
                    help="also rank every tie rule and bound rule and check that recommend's rank first")
    args = ap.parse_args(argv)
    if args.quick and args.systems:
        ap.error("pass either --quick or --systems")
    version = args.vllm_version or rules.NEWEST_VLLM
    systems = set(QUICK_SYSTEMS) if args.quick else (set(args.systems.split(",")) if args.systems else None)
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
    verdicts = goals(out)
    for (subset, holdout, f) in out:
        missed = [g for g, ok in verdicts.items() if g.startswith(f"{holdout} x{f:.2f}") and not ok]
        if subset == "judged" and missed:
            print(f"worst judged workloads, {holdout} x{f:.2f}:")
            print("\n".join(worst(tally, holdout, f)))
    if args.policies:
        print()
        verdicts["recommend's tie rule and bound rule rank first"] = compare_policies(systems, version)
    for goal, ok in verdicts.items():
        print(f"goal {goal}: {'OK' if ok else 'MISSED'}")
    return 0 if all(verdicts.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
