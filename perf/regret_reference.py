"""Selector quality on NVIDIA's published reference: hold-out regret and estimate error.

For every reference system, EP size, shape and dispatch dtype of the packaged reference data
(``autoselect.reference``), the truth is the published table itself (vLLM's
allgather_reducescatter: derived from the published NCCL timings, at any token count):

* **token hold-out**: hide one published token count ``h`` (every backend's point there), let
  ``autoselect.selector.recommend`` decide from the rest (the hidden count is then estimated by
  the latency model), and score the pick against the hidden truth; the hidden points' estimates
  give the relative estimate error;
* **shape hold-out**: hide a whole (shape, dtype) of the system and EP size; each backend's numbers
  come from its other shapes' rows, transferred by bytes per token
  (``autoselect.reference.transfer``), as a model of an unpublished shape gets them; the pick is
  scored against the hidden shape's truth, and the transfer gives the estimate error.

Workloads (each for every hold-out token count ``h`` whose buckets are published token counts):
decode ``{h: 50%, h/2: 30%, h/4: 20%}`` (h <= 1024), prefill ``{h: 70%, h/2: 20%, h/4: 10%}``
(h >= 1024), mixed ``{h: 40%, h/2: 25%, h/4: 15%, P: 20%}`` (h <= 1024, P = vLLM's default
``--max-num-batched-tokens`` on the system's GPUs), the weights of ``WORKLOAD_TABLE``.

    regret = true weighted latency of the pick / that of the best backend     (1.0 = the best)

side by side with two static policies: **always-AGRS** (vLLM's default, allgather_reducescatter)
and **fixed-priority** (TensorRT-LLM's ``CommunicationFactory.create_strategy`` order: one-sided,
two-sided, DeepEP high-throughput, DeepEP low-latency, AGRS; the first legal). Every policy picks
among the same backends: those the rules accept for the shape on the reference class and that
have a published (or derived) truth at every bucket of the workload. Goals: autoselect
p95 regret <= 2 % on token hold-outs, mean regret strictly below both static policies, estimate
error p50 <= 10 %.

    python3 perf/regret_reference.py
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
from autoselect.reference import AGRS, CLASSES, default, transfer_points  # noqa: E402
from autoselect.payload import all2all_bytes_per_token as bytes_per_token  # noqa: E402
from autoselect.selector import MeasuredPoint, estimate_latency, recommend  # noqa: E402
from autoselect.selector.answer import DERIVED, PUBLISHED, TRANSFERRED  # noqa: E402
from autoselect.selector.evidence import BackendEvidence  # noqa: E402
from autoselect.selector.reference_evidence import REFERENCE_BAND  # noqa: E402
from autoselect.workload import WORKLOAD_TABLE, Deployment, Shape, WorkloadSpec  # noqa: E402
from goals import EXACT, Goals, add_quick  # noqa: E402

PRIORITY = ("flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided", "deepep_high_throughput",
            "deepep_low_latency", AGRS)
POLICIES = ("autoselect", "always-AGRS", "fixed-priority")
KINDS = ("decode", "prefill", "mixed")


@dataclass
class Case:
    """One (class, world size, shape, dtype): the truth per backend and what the rules allow."""

    ref_class: str
    world_size: int
    shape: Shape
    truth: dict[str, dict[int, float]]  # backend -> tokens -> published / derived latency (us)
    kinds: dict[str, str]  # backend -> evidence kind of its truth
    budget: int  # vLLM's default --max-num-batched-tokens on the system's GPUs (the mixed prefill bucket)
    grid: tuple[int, ...]  # the token counts some published backend of the case has


@dataclass
class Tally:
    regrets: dict[tuple[str, str, str], list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: dict = field(default_factory=lambda: defaultdict(list))  # hold-out (, backend) -> relative errors
    skipped: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    worst: dict[str, tuple] = field(default_factory=dict)


class Given:
    """An evidence source over given curves (the hold-out's view of the reference)."""

    kind = PUBLISHED

    def __init__(self, curves: dict[str, dict[int, float]], kinds: dict[str, str]):
        self.curves, self.kinds = curves, kinds

    @property
    def considered(self) -> int:
        return sum(len(c) for c in self.curves.values())

    def for_backend(self, backend: str) -> BackendEvidence:
        curve = self.curves.get(backend)
        if not curve:
            return BackendEvidence(backend, kind=self.kind, missing="held out")
        kind = self.kinds[backend]
        points = tuple(MeasuredPoint(t, v, REFERENCE_BAND, None, kind) for t, v in sorted(curve.items()))
        return BackendEvidence(backend, kind=kind, source=f"{kind} (hold-out)", points=points)


def cases(systems: set[str] | None) -> list[Case]:
    """Every (class, world size, shape, dtype) with published rows, with its truth."""
    ref = default()
    out = []
    for cls in CLASSES.values():
        if systems and cls.system.key not in systems:
            continue
        budget = vllm_flags.vllm_default_max_num_batched_tokens(rules.DEFAULT_BACKEND, cls.system.memory_mib)
        grid = ref.token_grid(cls)  # where AGRS is derived (any count works)
        combos: dict[tuple, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
        for p in ref.published(cls):
            if cls.domain == "nvl72" and p.world_size <= cls.system.gpus_per_node:
                continue  # each world size once: in the node class up to a tray, in the rack class beyond
            combos[(p.world_size, p.hidden, p.top_k, p.experts, p.dispatch_dtype)][p.backend][p.tokens_per_rank] = \
                p.latency_us
        for (ws, h, k, e, dt), truth in sorted(combos.items()):
            kinds = {b: PUBLISHED for b in truth}
            tokens = sorted(set(grid) | {budget})
            agrs = ref.derived_agrs(cls, hidden=h, top_k=k, experts=e, dtype=dt, world_size=ws, tokens=tokens)
            published = tuple(sorted({t for curve in truth.values() for t in curve}))
            if agrs:
                truth[AGRS] = {p.tokens_per_rank: p.latency_us for p in agrs}
                kinds[AGRS] = DERIVED
            out.append(Case(cls.name, ws, Shape(hidden=h, top_k=k, experts=e, dtype=dt), dict(truth), kinds, budget,
                            published))
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


def weighted_truth(truth: dict[str, dict[int, float]], spec: WorkloadSpec) -> dict[str, float]:
    """Backend -> true weighted latency, for the backends with a truth at every bucket."""
    return {b: sum(w * curve[t] for t, w in spec.buckets) for b, curve in truth.items()
            if all(t in curve for t, _ in spec.buckets)}


def decide(case: Case, spec: WorkloadSpec, curves: dict[str, dict[int, float]], kinds: dict[str, str],
           vllm_version: str | None):
    """recommend() over ``curves`` for the case's reference class: the pick and the legal backends."""
    rec = recommend(case.shape.profile(), conn=None, deployment=Deployment(dp=case.world_size, tp=1),
                    host_class=case.ref_class, vllm_version=vllm_version, workload=spec,
                    evidence=lambda target: [Given(curves, kinds)])
    return rec.backend, {c.backend for c in rec.candidates}


def score(tally: Tally, holdout: str, kind: str, case: Case, spec: WorkloadSpec, pick: str, legal: set[str],
          hidden: str) -> None:
    """The regret of each policy at one held-out point."""
    truth = {b: v for b, v in weighted_truth(case.truth, spec).items() if b in legal}
    if len(truth) < 2:
        tally.skipped[f"{holdout}: fewer than two legal backends with a truth at every bucket"] += 1
        return
    best = min(truth.values())
    picks = {"autoselect": pick, "always-AGRS": AGRS,
             "fixed-priority": next((b for b in PRIORITY if b in truth), None)}
    for policy, backend in picks.items():
        if backend not in truth:
            why = " (vLLM's default has no derived number: no NCCL rows at this EP size)" if backend == AGRS else ""
            tally.skipped[f"{holdout}: {policy}'s pick ({backend}) has no truth here{why}"] += 1
            continue
        regret = truth[backend] / best
        for k in (kind, "all"):
            tally.regrets[(holdout, k, policy)].append(regret)
        if policy == "autoselect" and regret > tally.worst.get(holdout, (1.0,))[0]:
            tally.worst[holdout] = (regret, case.ref_class, case.world_size, case.shape.label(), spec.buckets, pick,
                                    min(truth, key=truth.get), hidden)


def token_holdout(case: Case, tally: Tally, vllm_version: str | None) -> None:
    """Hide one published token count at a time (derived AGRS stays: it exists at any count)."""
    for kind in KINDS:
        for h, spec in workloads(case, kind):
            universe = weighted_truth(case.truth, spec)
            curves = {b: {t: v for t, v in c.items() if t != h or case.kinds[b] == DERIVED}
                      for b, c in case.truth.items() if b in universe}
            pick, legal = decide(case, spec, curves, case.kinds, vllm_version)
            score(tally, "token counts", kind, case, spec, pick, legal, f"tokens {h}")
    nbytes = bytes_per_token(case.shape.dtype, case.shape.hidden, case.shape.top_k)
    for b, curve in case.truth.items():
        if case.kinds[b] == DERIVED:
            continue
        for h, v in curve.items():
            rest = [MeasuredPoint(t, x, REFERENCE_BAND) for t, x in sorted(curve.items()) if t != h]
            est = estimate_latency(rest, h, nbytes).latency_us
            if est is not None:
                tally.errors["token counts"].append(abs(est / v - 1))
                tally.errors[("token counts", b)].append(abs(est / v - 1))


def shape_holdout(case: Case, tally: Tally, vllm_version: str | None) -> None:
    """Hide the case's whole shape: every published backend is transferred from its other shapes."""
    ref = default()
    curves, kinds = {}, {}
    for b in case.truth:
        if case.kinds[b] == DERIVED:
            curves[b], kinds[b] = case.truth[b], DERIVED
            continue
        sources = [p for p in ref.published(case.ref_class, b, world_size=case.world_size)
                   if Shape(hidden=p.hidden, top_k=p.top_k, experts=p.experts, dtype=p.dispatch_dtype) != case.shape]
        s = case.shape
        moved = transfer_points(sources, hidden=s.hidden, top_k=s.top_k, experts=s.experts, dtype=s.dtype)
        if moved.points:
            curves[b] = {p.tokens_per_rank: p.latency_us for p in moved.points}
            kinds[b] = TRANSFERRED
            for p in moved.points:
                if p.tokens_per_rank in case.truth[b]:
                    error = abs(p.latency_us / case.truth[b][p.tokens_per_rank] - 1)
                    tally.errors["shapes"].append(error)
                    tally.errors[("shapes", b)].append(error)
        else:
            tally.skipped[f"shapes: {b} not transferable ({moved.refused})"] += 1
    for kind in KINDS:
        for h, spec in workloads(case, kind):
            universe = weighted_truth(case.truth, spec)
            view = {b: c for b, c in curves.items() if b in universe}
            pick, legal = decide(case, spec, view, kinds, vllm_version)
            score(tally, "shapes", kind, case, spec, pick, legal, f"shape {case.shape.label()}")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv=None) -> int:
    """Print the table and whether the goals are met."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", default=None, help="comma-separated reference systems (default: all)")
    ap.add_argument("--vllm-version", default=None, help="target vLLM (default: the newest known)")
    add_quick(ap, "one reference system (h200_sxm) unless --systems names others")
    args = ap.parse_args(argv)
    if args.quick and not args.systems:
        args.systems = "h200_sxm"
    version = args.vllm_version or rules.NEWEST_VLLM
    started = time.perf_counter()
    tally = Tally()
    all_cases = cases(set(args.systems.split(",")) if args.systems else None)
    for case in all_cases:
        token_holdout(case, tally, version)
        shape_holdout(case, tally, version)
    print(f"hold-out regret on NVIDIA's published reference (AIConfigurator 0.12.0), vLLM {version}: "
          f"{len(all_cases)} (class, EP, shape, dtype) cases, {time.perf_counter() - started:.0f} s")
    print("regret = true weighted latency of the pick / of the best legal backend with a truth; "
          "est.err = |estimate / truth - 1| of the hidden points")
    head = f"{'hold-out':<13} {'workload':<8} {'n':>5} {'est.err p50':>11} {'p95':>6} |"
    for p in POLICIES:
        head += f" {p + ' mean':>20} {'p95':>6} {'max':>6} |"
    print(head)
    for holdout in ("token counts", "shapes"):
        err = tally.errors[holdout]
        for kind in KINDS + ("all",):
            auto = tally.regrets[(holdout, kind, "autoselect")]
            if not auto:
                continue
            line = (f"{holdout:<13} {kind:<8} {len(auto):>5} "
                    + (f"{statistics.median(err):>10.1%} {pct(err, 0.95):>6.1%} |" if kind == "all" and err
                       else f"{'':>11} {'':>6} |"))
            for p in POLICIES:
                r = tally.regrets[(holdout, kind, p)]
                line += (f" {statistics.fmean(r):>20.4f} {pct(r, 0.95):>6.3f} {max(r):>6.3f} |" if r
                         else f" {'-':>20} {'-':>6} {'-':>6} |")
            print(line)
    for holdout in ("token counts", "shapes"):
        parts = [f"{b} {statistics.median(v):.1%} / {pct(v, 0.95):.1%}" for (h, b), v in sorted(
            (k, v) for k, v in tally.errors.items() if isinstance(k, tuple)) if h == holdout]
        print(f"est.err p50 / p95 by backend, {holdout}: " + ", ".join(parts))
    for holdout, w in tally.worst.items():
        regret, cls, ws, shape, buckets, pick, best, hidden = w
        print(f"worst {holdout}: regret {regret:.3f} on {cls} EP {ws} {shape}, {hidden}, buckets {list(buckets)}: "
              f"picked {pick}, best {best}")
    for why, n in sorted(tally.skipped.items()):
        print(f"skipped {n}: {why}")
    tok = tally.regrets[("token counts", "all", "autoselect")]
    mean = {p: statistics.fmean(tally.regrets[("token counts", "all", p)]) for p in POLICIES}
    goals = {
        "autoselect p95 regret <= 2 % (token hold-out)": pct(tok, 0.95) <= 1.02,
        "autoselect mean regret < always-AGRS and < fixed-priority (token hold-out)":
            mean["autoselect"] < mean["always-AGRS"] and mean["autoselect"] < mean["fixed-priority"],
        "estimate error p50 <= 10 % (token hold-out)": statistics.median(tally.errors["token counts"]) <= 0.10,
    }
    judged = Goals(args.quick)  # computed from the published tables: exact, judged in both modes
    for goal, ok in goals.items():
        judged.check(goal, "met" if ok else "not met", "as named", ok, EXACT)
    return judged.finish()


if __name__ == "__main__":
    raise SystemExit(main())
