"""CPU timing: ``time.perf_counter_ns`` around dispatch and combine of every round trip.

The latency of an iteration is the maximum over ranks (one ``all_reduce(MAX)`` per batch of
round trips, batches sized to about :data:`BATCH_TARGET_S` of wall time).
"""

from __future__ import annotations

from time import perf_counter_ns

from bench.measure.agreement import max_over_ranks, rank0_says_done
from bench.measure.stats import split_medians
from bench.measure.sampling import WARMUP_ITERATIONS

#: Target wall time of one CPU timing batch (one all_reduce per batch). The ranks leave each batch's
#: all_reduce and broadcast out of step, and the first round trip after it is slower: with 20 ms
#: batches, the grouped default at 256 tokens on a loaded 2-core machine (~8 ms a round trip, ~2
#: per batch) had its first round trip 1.028x the others' and the harness 1.024x a bare loop of
#: its calls (perf/harness_overhead.py --pairs 300, 95 % interval up to 1.059); with 50 ms batches
#: (~4.4 round trips) 0.993x and 1.009x (interval up to 1.045).
BATCH_TARGET_S = 0.05


def first_batch(warmup_us: float) -> int:
    """Round trips in the first timing batch: about :data:`BATCH_TARGET_S` at the warm-up's pace.

    A fixed first batch (it was 8) cost 8 round trips however slow they were: 80 ms at 10 ms a
    round trip, most of a short stopping rule's budget before its first sample counted.
    """
    return int(min(1000, max(1, BATCH_TARGET_S / max(warmup_us * 1e-6, 1e-9))))


def time_cpu(adapter, ctx, batch, expert_out, rule) -> dict:
    """perf_counter_ns around dispatch and combine of every round trip; returns the split medians."""
    dispatch, combine = adapter.dispatch, adapter.combine
    t0 = perf_counter_ns()
    for _ in range(WARMUP_ITERATIONS):
        dispatch(batch)
        combine(expert_out)
    warm = max_over_ranks(ctx, [((perf_counter_ns() - t0) / 1e3 / WARMUP_ITERATIONS,)])  # every rank: one n
    n = first_batch(float(warm[0, 0]))
    rule.start()
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
        n = first_batch(float(maxed[:, 0].mean()))
    return split_medians(split)

