"""Adaptive tune vs exhaustive sweep on the same problem, side by side in one run (CPU, gloo).

Exhaustive: every backend at every token bucket with the harness's default stopping rule
(10 samples, 0.5 s, 0.5 % noise, 15 s timeout), winner = lowest workload-weighted median.
Adaptive: ``autoselect.tune`` (screen, prune, refine; knob search off, so both answer the same
question). Each writes its own temporary results database.

Prints whether both chose the same backend and two ratios adaptive / exhaustive:
- measurement time: time inside the timed loops (samples x mean latency, summed over points),
  the quantity the issue's goal (<= 0.4) is about;
- wall time of the sweep calls, which also counts worker start-up (gloo process spawn and the
  torch import in every rank), identical per call for both methods; ``starts`` counts the
  worker start-ups (one per backend per sweep call: exhaustive 1 per backend, adaptive 1 per
  backend for the screen plus 1 per alive backend per refine round).

The default problem is representative of a real node: several backends of which some clearly
lose in most buckets (allgather_reducescatter, reference_all_to_all and the deliberately slow
adapter of tests/fixtures/slow_backend, registered through its dist-info entry point and put
on the workers' PYTHONPATH as tests/test_tune.py does) over a decode+prefill-like grid of 6
token counts. ``--small`` is the old tiny, contested problem (2 backends, 4 token counts), where
little can be pruned.

Usage: python3 perf/tune_vs_exhaustive.py [--tokens 1,4,16,64,128,256] [--shape shape:1024x32x4:bf16]
       [--small]   (allgather_reducescatter vs reference_all_to_all over 8,16,32,64 only)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def exhaustive(spec, db_path):
    """Every backend x bucket with the full rule; returns (winner, weighted, measure_s, wall_s)."""
    from bench.sweep import SweepSpec, run_sweep
    from db.store import Store

    shape = spec.shape  # the stopping rule is the harness default: 10 samples, 0.5 s, 0.5 %, 15 s
    sweep = SweepSpec(backends=spec.backends, tokens=spec.workload.tokens, hidden=shape.hidden,
                      top_k=shape.top_k, experts=shape.experts, dtype=shape.dtype,
                      world_size=spec.world_size, device=spec.device, gpu_arch=spec.gpu_arch)
    with Store(db_path) as store:
        t0 = time.monotonic()
        results = run_sweep(sweep, store=store, host=spec.host)
        wall = time.monotonic() - t0
    weights = dict(spec.workload.buckets)
    weighted = {}
    for b in spec.backends:
        mine = {r.tokens_per_rank: r for r in results if r.backend == b and r.status == "ok"}
        if len(mine) == len(weights):
            weighted[b] = sum(w * mine[t].latency_us_p50 for t, w in weights.items())
    measure = sum((r.samples or 0) * (r.latency_us_mean or 0) / 1e6 for r in results)
    return min(weighted, key=weighted.get), weighted, measure, wall


def main() -> int:
    """Run both on the same problem and print the comparison."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", default=None, help="default 1,4,16,64,128,256 (--small: 8,16,32,64)")
    ap.add_argument("--shape", default="shape:1024x32x4:bf16")
    ap.add_argument("--small", action="store_true",
                    help="the old contested problem: 2 backends (no slow adapter), tokens 8,16,32,64")
    args = ap.parse_args()
    if args.tokens is None:
        args.tokens = "8,16,32,64" if args.small else "1,4,16,64,128,256"

    backends = ["allgather_reducescatter", "reference_all_to_all"]
    if not args.small:
        slow = str(ROOT / "tests" / "fixtures" / "slow_backend")
        sys.path.insert(0, slow)
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [slow, os.environ.get("PYTHONPATH")]))
        backends.append("reference_slow_all_to_all")

    from autoselect.tune import prepare, run_tune

    with tempfile.TemporaryDirectory() as tmp:
        spec, _ = prepare(args.shape, db_path=Path(tmp) / "adaptive.db", tokens=args.tokens, device="cpu",
                          world_size=2, budget="30m", backends=backends, search_knobs=False)
        print(f"problem: {args.shape}, world 2 (gloo), tokens/rank {args.tokens}, backends {', '.join(backends)}")
        ex_winner, ex_scores, ex_measure, ex_wall = exhaustive(spec, Path(tmp) / "exhaustive.db")
        starts = [0]
        by_stage: dict[str, list[float]] = {}

        def count_starts(event):
            if event.get("event") == "measure":
                starts[0] += len(event["backends"])
            elif event.get("event") == "trial":
                by_stage.setdefault(event["stage"], []).append(event["measure_s"] or 0.0)

        outcome = run_tune(spec, progress=count_starts)

    print("")
    print(f"{'':<12} {'winner':<28} {'points':>6} {'starts':>6} {'measure s':>10} {'wall s':>8}")
    n_ex = len(spec.backends) * len(spec.workload.tokens)
    print(f"{'exhaustive':<12} {ex_winner:<28} {n_ex:>6} {len(spec.backends):>6} {ex_measure:>10.2f} {ex_wall:>8.1f}")
    print(f"{'adaptive':<12} {outcome.winner:<28} {outcome.trials_new:>6} {starts[0]:>6} {outcome.measure_s:>10.2f} "
          f"{outcome.sweep_s:>8.1f}")
    print("")
    ranked = sorted(ex_scores.items(), key=lambda x: x[1])
    print("exhaustive weighted latency (us): " + ", ".join(f"{b} {v:.1f}" for b, v in ranked))
    if len(ranked) > 1:
        print(f"exhaustive runner-up {ranked[1][0]} at {ranked[1][1] / ranked[0][1]:.2f}x its winner "
              "(one run per point: run-to-run noise not measured)")
    print("adaptive measurement time by stage: " + ", ".join(
        f"{st} {sum(v):.2f} s ({len(v)} points)" for st, v in by_stage.items()))
    print(f"adaptive stop: {outcome.stop_reason}")
    for b, why in outcome.pruned.items():
        print(f"adaptive pruned {b}: {why}")
    print("")
    print(f"same backend chosen: {'yes' if ex_winner == outcome.winner else 'NO'}")
    ratio = outcome.measure_s / ex_measure
    print(f"measurement time adaptive / exhaustive: {ratio:.3f} (goal <= 0.4: {'met' if ratio <= 0.4 else 'NOT met'})")
    print(f"sweep wall time adaptive / exhaustive: {outcome.sweep_s / ex_wall:.3f} (includes worker start-up)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
