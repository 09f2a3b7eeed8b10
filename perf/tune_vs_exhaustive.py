"""Adaptive tune vs exhaustive sweep on the same problem, side by side in one run (CPU, gloo).

Exhaustive: every backend at every token bucket with the harness's default stopping rule
(10 samples, 0.5 s, 0.5 % noise, 15 s timeout), winner = lowest workload-weighted median; one
worker group per backend (``bench``'s way: started once, closed after its points).
Adaptive: ``autoselect.tune`` (screen, prune, refine; knob search off, so both answer the same
question), one worker group per backend for the whole race, a pruned backend's closed at once.
Each writes its own temporary results database.

Runs alternate which method goes first (the shared machine's load drifts). Prints, per run,
whether both chose the same backend and the ratios adaptive / exhaustive:
- measurement time: time inside the timed loops (samples x mean latency, summed over points);
- wall time: the whole method, start-ups, gates, the store (and for tune the Optuna study) included
  (exhaustive: ``run_sweep``; adaptive: ``run_tune``), what an operator pays in node time;
- the worker-group start-ups each method paid (count and seconds, spawn to ready), and the
  load average of the machine before and after (the machine is shared).

The default problem is representative of a real node: several backends of which some clearly
lose in most buckets (allgather_reducescatter, reference_all_to_all and the deliberately slow
adapter of tests/fixtures/slow_backend, registered through its dist-info entry point and put
on the workers' PYTHONPATH as tests/tune/test_tune.py does) over a decode+prefill-like grid of 6
token counts. ``--small`` is the old tiny, contested problem (2 backends, 4 token counts), where
little can be pruned.

Usage: python3 perf/tune_vs_exhaustive.py [--runs 3] [--tokens 1,4,16,64,128,256]
       [--shape shape:1024x32x4:bf16] [--small] [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from goals import Goals, add_quick  # noqa: E402

#: the goals for the default problem (adaptive / exhaustive): measurement time, wall time
GOAL_MEASURE, GOAL_WALL = 0.3, 0.5


def exhaustive(spec, db_path):
    """Every backend x bucket with the full rule: ``(winner, weighted, measure_s, wall_s, startups)``."""
    from bench.events import GroupStarted
    from bench.sweep import SweepSpec, run_sweep
    from db.store import Store

    shape = spec.shape  # the stopping rule is the harness default: 10 samples, 0.5 s, 0.5 %, 15 s
    sweep = SweepSpec(backends=spec.backends, tokens=spec.workload.tokens, hidden=shape.hidden,
                      top_k=shape.top_k, experts=shape.experts, activation_dtype=shape.dtype,
                      world_size=spec.world_size, device=spec.device, gpu_arch=spec.gpu_arch)
    startups = []
    with Store(db_path) as store:
        t0 = time.monotonic()
        results = run_sweep(sweep, store=store, host=spec.host,
                            progress=lambda ev: isinstance(ev, GroupStarted) and startups.append(ev.seconds))
        wall = time.monotonic() - t0
    weights = dict(spec.workload.buckets)
    weighted = {}
    for b in spec.backends:
        mine = {r.tokens_per_rank: r for r in results if r.backend == b and r.status == "ok"}
        if len(mine) == len(weights):
            weighted[b] = sum(w * mine[t].latency_us_p50 for t, w in weights.items())
    measure = sum((r.samples or 0) * (r.latency_us_mean or 0) / 1e6 for r in results)
    return min(weighted, key=weighted.get), weighted, measure, wall, startups


def adaptive_spec(args, backends, db_path):
    """The tune spec of the problem (validated; nothing written)."""
    from autoselect.tune import prepare

    spec, _ = prepare(args.shape, db_path=db_path, tokens=args.tokens, device="cpu", world_size=2,
                      budget="30m", backends=backends, search_knobs=False)
    return spec


def adaptive(args, backends, db_path):
    """``autoselect.tune`` on the same problem: ``(spec, outcome, wall_s, measure_s by stage)``."""
    from autoselect.tune import TrialAdded, run_tune

    spec = adaptive_spec(args, backends, db_path)
    by_stage: dict[str, list[float]] = {}

    def on_event(event):
        if isinstance(event, TrialAdded):
            m = event.measurement
            by_stage.setdefault(m.stage, []).append(m.measure_s or 0.0)

    t0 = time.monotonic()
    outcome = run_tune(spec, progress=on_event)
    return spec, outcome, time.monotonic() - t0, by_stage


def one_run(args, backends, adaptive_first: bool) -> dict:
    """Both methods on fresh databases (in the given order); prints their table and returns the ratios."""
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        if adaptive_first:
            spec, outcome, ad_wall, by_stage = adaptive(args, backends, Path(tmp) / "adaptive.db")
            ex_winner, ex_scores, ex_measure, ex_wall, ex_startups = exhaustive(spec, Path(tmp) / "exhaustive.db")
        else:
            spec = adaptive_spec(args, backends, Path(tmp) / "adaptive.db")
            ex_winner, ex_scores, ex_measure, ex_wall, ex_startups = exhaustive(spec, Path(tmp) / "exhaustive.db")
            spec, outcome, ad_wall, by_stage = adaptive(args, backends, Path(tmp) / "adaptive.db")
    load_after = os.getloadavg()
    print(f"order: {'adaptive, then exhaustive' if adaptive_first else 'exhaustive, then adaptive'}")
    ad_startups = [u["seconds"] for ups in outcome.startups.values() for u in ups]
    print(f"{'':<12} {'winner':<28} {'points':>6} {'start-ups':>9} {'start-up s':>10} {'measure s':>10} {'wall s':>8}")
    n_ex = len(spec.backends) * len(spec.workload.tokens)
    print(f"{'exhaustive':<12} {ex_winner:<28} {n_ex:>6} {len(ex_startups):>9} {sum(ex_startups):>10.1f} "
          f"{ex_measure:>10.2f} {ex_wall:>8.1f}")
    print(f"{'adaptive':<12} {outcome.winner:<28} {outcome.trials_new:>6} {len(ad_startups):>9} "
          f"{sum(ad_startups):>10.1f} {outcome.measure_s:>10.2f} {ad_wall:>8.1f}")
    ranked = sorted(ex_scores.items(), key=lambda x: x[1])
    print("exhaustive weighted latency (us): " + ", ".join(f"{b} {v:.1f}" for b, v in ranked))
    print("adaptive start-ups per backend: " + ", ".join(f"{b} {len(v)}" for b, v in outcome.startups.items()))
    print("adaptive measurement time by stage: " + ", ".join(
        f"{st} {sum(v):.2f} s ({len(v)} points)" for st, v in by_stage.items()))
    print(f"adaptive stop: {outcome.stop_reason}")
    for b, why in outcome.pruned.items():
        print(f"adaptive pruned {b}: {why}")
    measure, wall = outcome.measure_s / ex_measure, ad_wall / ex_wall
    same = ex_winner == outcome.winner
    print(f"same backend chosen: {'yes' if same else 'NO'}")
    print(f"measurement time adaptive / exhaustive: {measure:.3f}")
    print(f"wall time adaptive / exhaustive: {wall:.3f} (sweep calls only: {outcome.sweep_s / ex_wall:.3f})")
    print(f"load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
          f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    return {"same": same, "measure": measure, "wall": wall, "load": (load_before[0], load_after[0]),
            "startups": (len(ex_startups), len(ad_startups))}


def main() -> int:
    """Run both on the same problem ``--runs`` times and print the comparison."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", default=None, help="default 1,4,16,64,128,256 (--small: 8,16,32,64)")
    ap.add_argument("--shape", default="shape:1024x32x4:bf16")
    ap.add_argument("--runs", type=int, default=1, help="independent repetitions of both methods")
    ap.add_argument("--small", action="store_true",
                    help="the old contested problem: 2 backends (no slow adapter), tokens 8,16,32,64; "
                         "the goals (for the default problem) are printed, not judged")
    add_quick(ap, "--small with tokens 8,16")
    args = ap.parse_args()
    if args.quick:
        args.small = True
        args.tokens = args.tokens or "8,16"
    if args.tokens is None:
        args.tokens = "8,16,32,64" if args.small else "1,4,16,64,128,256"
    backends = ["allgather_reducescatter", "reference_all_to_all"]
    if not args.small:
        slow = str(ROOT / "tests" / "fixtures" / "slow_backend")
        sys.path.insert(0, slow)
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [slow, os.environ.get("PYTHONPATH")]))
        backends.append("reference_slow_all_to_all")
    print(f"problem: {args.shape}, world 2 (gloo), tokens/rank {args.tokens}, backends {', '.join(backends)}")
    runs = []
    for n in range(args.runs):
        print(f"\n--- run {n + 1} of {args.runs}")
        runs.append(one_run(args, backends, adaptive_first=n % 2 == 1))  # alternate: the load drifts
    if len(runs) > 1:
        print("\nsummary: " + "; ".join(
            f"run {i + 1}: same {'yes' if r['same'] else 'NO'}, measure {r['measure']:.3f}, wall {r['wall']:.3f}, "
            f"start-ups exhaustive {r['startups'][0]} / adaptive {r['startups'][1]}, load {r['load'][0]:.2f}->{r['load'][1]:.2f}"
            for i, r in enumerate(runs)))
    # the goals are for the default problem: --small (the contested one, little to prune) reports them only
    goals = Goals(args.quick or args.small, why="quick" if args.quick else "--small")
    measure = statistics.median(r["measure"] for r in runs)
    wall = statistics.median(r["wall"] for r in runs)
    over = f" (median of {len(runs)} runs)" if len(runs) > 1 else ""
    goals.check("measurement time adaptive / exhaustive" + over, f"{measure:.3f}", f"<= {GOAL_MEASURE}",
                measure <= GOAL_MEASURE)
    goals.check("wall time adaptive / exhaustive" + over, f"{wall:.3f}", f"<= {GOAL_WALL}", wall <= GOAL_WALL)
    return goals.finish()


if __name__ == "__main__":
    sys.exit(main())
