"""CPU timing: ``time.perf_counter_ns`` around dispatch and combine of every round trip.

The latency of an iteration is the maximum over ranks (one ``all_reduce(MAX)`` per batch of
round trips, batches sized to about :data:`BATCH_TARGET_S` of wall time).
"""

from __future__ import annotations

from time import perf_counter_ns

from bench.measure.agreement import max_over_ranks, rank0_says_done
from bench.measure.stats import split_medians
from bench.measure.stopping import WARMUP_ITERATIONS

#: Target wall time of one CPU timing batch (one all_reduce per batch).
BATCH_TARGET_S = 0.02


def time_cpu(adapter, ctx, batch, expert_out, rule) -> dict:
    """perf_counter_ns around dispatch and combine of every round trip; returns the split medians."""
    dispatch, combine = adapter.dispatch, adapter.combine
    for _ in range(WARMUP_ITERATIONS):
        dispatch(batch)
        combine(expert_out)
    n = 8
    split = []
    while True:
        rows = []
        for _ in range(n):
            t0 = perf_counter_ns()
            dispatch(batch)
            t1 = perf_counter_ns()
            combine(expert_out)
            t2 = perf_counter_ns()
            rows.append(((t2 - t0) / 1e3, (t1 - t0) / 1e3, (t2 - t1) / 1e3))
        maxed = max_over_ranks(ctx, rows)
        for rt, d, c in maxed.tolist():
            rule.add(rt)
            split.append((d, c))
        if rank0_says_done(ctx, rule.done()):
            break
        mean_us = float(maxed[:, 0].mean())
        n = int(min(1000, max(1, BATCH_TARGET_S / max(mean_us * 1e-6, 1e-9))))
    return split_medians(split)

