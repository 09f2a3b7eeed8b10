"""Harness overhead on CPU gloo: the harness's timed loop vs a bare loop of the same collectives.

Two gloo ranks, 256 tokens per rank (hidden 2048, top-8 of 64 experts, bf16). In the same
processes, alternating, each repetition runs

- bare: pack the batch into byte rows, ``all_gather_single``, ``reduce_scatter_single`` of
  the expert outputs, with ``perf_counter_ns`` around each iteration; then
- harness: ``bench.measure._time_cpu`` on the allgather_reducescatter adapter (adapter
  method calls, per-iteration dispatch/combine timestamps, batching, all_reduce MAX per
  batch, stopping-rule bookkeeping).

Both report the median of the per-iteration MAX over ranks. Prints both medians and the
ratio harness/bare (goal <= 1.05).

    python3 perf/harness_overhead.py [--tokens 256] [--reps 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def worker(rank, world, store_path, args, queue):
    import time

    import torch
    import torch.distributed as dist

    from bench.backends import BenchContext
    from bench.backends._collectives import all_gather_single, pack_rows, reduce_scatter_single
    from bench.backends.allgather_reducescatter import AllgatherReducescatter
    from bench.measure import StoppingRule, _time_cpu
    from bench.workload import Workload

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=world)
    g = dist.group.WORLD
    ctx = BenchContext(rank=rank, world_size=world, device="cpu", torch_device=torch.device("cpu"),
                       group=g, cpu_group=g)
    w = Workload(args.tokens, 2048, 8, 64, world, "bf16")
    batch = w.batch(rank)
    adapter = AllgatherReducescatter()
    adapter.setup(ctx, w)
    rec = adapter.dispatch(batch)
    expert_out = w.expert_output(rank, rec.x, rec.topk_ids, rec.topk_weights)
    adapter.combine(expert_out)

    row = 8 * w.top_k + w.value_bytes
    send = torch.empty((w.tokens_per_rank, row), dtype=torch.uint8)
    gathered = torch.empty((w.tokens_per_rank * world, row), dtype=torch.uint8)
    out = torch.empty((w.tokens_per_rank, w.hidden), dtype=torch.bfloat16)

    def bare(n):
        times = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            pack_rows(send, (batch.topk_ids, batch.topk_weights, batch.x, batch.x_sf))
            all_gather_single(gathered, send, group=g)
            reduce_scatter_single(out, expert_out, group=g)
            times.append((time.perf_counter_ns() - t0) / 1e3)
        t = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.tolist()

    results = {"bare": [], "harness": []}
    for _ in range(args.reps):
        results["bare"].append(statistics.median(bare(args.iters)))
        rule = StoppingRule(min_samples=args.iters, min_time_s=0.0, max_noise=1e-12, timeout_s=1e9)
        rule_done = rule.done

        def done():  # exactly args.iters samples, like the bare loop
            rule_done()
            return len(rule.samples) >= args.iters

        rule.done = done
        _time_cpu(adapter, ctx, batch, expert_out, rule)
        results["harness"].append(statistics.median(rule.samples))
    if rank == 0:
        queue.put(results)
    dist.destroy_process_group()


def main():
    import torch.multiprocessing as mp

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--iters", type=int, default=200)
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "store")
        procs = [ctx.Process(target=worker, args=(r, 2, store, args, queue)) for r in range(2)]
        for p in procs:
            p.start()
        res = queue.get(timeout=600)
        for p in procs:
            p.join(timeout=60)
    bare, harness = statistics.median(res["bare"]), statistics.median(res["harness"])
    print(f"world size 2 (gloo, CPU), {args.tokens} tokens/rank, hidden 2048, top-8/64, bf16; "
          f"{args.reps} alternating repetitions x {args.iters} iterations")
    print(f"bare loop (pack + all_gather + reduce_scatter): median {bare:10.1f} us  per-rep {[round(v, 1) for v in res['bare']]}")
    print(f"harness   (adapter + timing + stopping rule):   median {harness:10.1f} us  per-rep {[round(v, 1) for v in res['harness']]}")
    ratio = harness / bare
    print(f"ratio harness/bare: {ratio:.3f}  (goal <= 1.05: {'met' if ratio <= 1.05 else 'NOT met'})")


if __name__ == "__main__":
    main()
