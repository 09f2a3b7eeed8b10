"""``bench`` wall time for 1, 4 and 16 token counts next to its worker start-up time (CPU, gloo).

Each backend runs in one worker group started once for all its points, so a bench of N token
counts costs one start-up plus N points: this prints, side by side in one run, the wall time of
``bench.run.run_bench`` (what ``autoselect bench`` calls: validation, the store, every point)
for N = 1, 4 and 16 token counts, the start-up time it paid (spawn to ready, summed over its
backends), and the per-point cost ``(wall - start-up) / points``. With the old launcher every
``bench`` paid the start-up too, but a tune refine round paid it again per backend per round.

Usage: python3 perf/bench_points.py [--backends reference_all_to_all] [--min-time 0.05]
       [--counts 1,4,16] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from goals import Goals, add_quick  # noqa: E402

#: Token counts per rank the N points are drawn from (N <= 16 distinct values).
GRID = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)


def main() -> int:
    """One ``run_bench`` per count, printed as a table."""
    from bench.run import run_bench

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="reference_all_to_all")
    ap.add_argument("--counts", default=None, help="numbers of token counts per bench (each <= 16; default 1,4,16)")
    ap.add_argument("--min-time", type=float, default=None, help="--min-time of every point (s; default 0.05)")
    ap.add_argument("--timeout", type=float, default=1.0, help="--timeout of every point (s)")
    add_quick(ap, "benches of 1 and 2 token counts, --min-time 0.01")
    args = ap.parse_args()
    args.counts = args.counts or ("1,2" if args.quick else "1,4,16")
    args.min_time = args.min_time if args.min_time is not None else (0.01 if args.quick else 0.05)
    counts = [int(c) for c in args.counts.split(",")]
    print(f"bench --device cpu --world-size 2 --hidden 1024 --top-k 4 --experts 32 --dtype bf16 "
          f"--backends {args.backends} --min-time {args.min_time:g} --timeout {args.timeout:g}")
    print(f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'points':>6} {'wall s':>8} {'start-ups':>9} {'start-up s':>10} {'per point s':>11} {'start-up / wall':>15}")
    for n in counts:
        tokens = ",".join(map(str, GRID[:n]))
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.monotonic()
            report = run_bench(hidden=1024, top_k=4, experts=32, dtype="bf16", backends=args.backends,
                               tokens=tokens, world_size=2, device="cpu", min_time_s=args.min_time,
                               timeout_s=args.timeout, db_path=str(Path(tmp) / "bench.db"))
            wall = time.monotonic() - t0
        startup = sum(s["seconds"] for g in report.groups for s in g["startups"])
        points = len(report.results)
        print(f"{points:>6} {wall:>8.2f} {report.startups:>9} {startup:>10.2f} "
              f"{(wall - startup) / points:>11.3f} {startup / wall:>15.2f}")
    print(f"load average {os.getloadavg()[0]:.2f}")
    return Goals(args.quick).finish()  # a table to read (start-up vs per-point cost), no goal


if __name__ == "__main__":
    sys.exit(main())
