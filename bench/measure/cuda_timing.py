"""CUDA timing: CUDA events around batches of round trips, replayed from a graph when allowed.

Batches of :data:`bench.measure.graphs.CUDA_BATCH_ROUND_TRIPS` round trips between two events,
replayed from a CUDA graph where vLLM replays the step (:mod:`bench.measure.capture_mode`: up to its
capture size, not for a backend it runs eagerly), the adapter allows capture and the graph passes
its own check (:func:`bench.measure.graphs.capture`); else eager, with the reason. Dispatch and
combine are split in a separate eager pass with one event triple per iteration (which
includes the event cost). The latency of an iteration is the maximum over ranks.
"""

from __future__ import annotations

from bench.measure.agreement import max_over_ranks, rank0_says_done
from bench.measure.capture_mode import vllm_runs_eagerly
from bench.measure.graphs import CAPTURE_FAILED, CUDA_BATCH_ROUND_TRIPS, capture, eager_reason
from bench.measure.stats import split_medians
from bench.measure.sampling import WARMUP_ITERATIONS

#: Eager round trips of the CUDA dispatch/combine split pass.
SPLIT_PASS_ITERATIONS = 50


def batch_sample_us(elapsed_ms: float, round_trips: int) -> float:
    """One round trip's time in µs from a CUDA-event interval (ms) around ``round_trips`` of them."""
    return elapsed_ms * 1e3 / round_trips


def time_cuda(adapter, ctx, batch, expert_out, rule, *, point, gate_layout):
    """CUDA events around batches (graph replay when :func:`~bench.measure.graphs.capture` allows it), then a split pass.

    Returns ``(split medians, "graph" | "eager", eager reason or None)``.
    """
    import torch

    stream = torch.cuda.current_stream()

    def round_trip():
        received = adapter.dispatch(batch)
        return received, adapter.combine(expert_out)

    for _ in range(WARMUP_ITERATIONS):
        round_trip()
    torch.cuda.synchronize()

    per_batch = CUDA_BATCH_ROUND_TRIPS
    vllm_eager = vllm_runs_eagerly(adapter, ctx, point)
    if vllm_eager:
        replay, note = None, eager_reason("vllm_eager", vllm_eager)
    elif not adapter.supports_cuda_graph:
        replay, note = None, eager_reason("not_allowed")
        if not adapter.name.startswith("reference_"):  # a vLLM backend: this point is off vLLM's footing
            note += "; vLLM replays this step from a CUDA graph"
    elif adapter.name in CAPTURE_FAILED:
        replay, note = None, eager_reason("failed_before", CAPTURE_FAILED[adapter.name])
    else:
        replay, note = capture(adapter, ctx, point, batch, expert_out, round_trip, stream, gate_layout)

    def run_batch():
        if replay is not None:
            replay()
        else:
            for _ in range(per_batch):
                round_trip()

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rule.start()
    while True:
        rows = []
        for _ in range(8):
            start.record(stream)
            run_batch()
            end.record(stream)
            end.synchronize()
            rows.append((batch_sample_us(start.elapsed_time(end), per_batch),))
        maxed = max_over_ranks(ctx, rows)
        for (rt,) in maxed.tolist():
            rule.add(rt)
        if rank0_says_done(ctx, rule.done()):
            break

    # Split pass: one event triple per eager iteration (includes the events' own cost).
    events = [[torch.cuda.Event(enable_timing=True) for _ in range(3)] for _ in range(SPLIT_PASS_ITERATIONS)]
    for e0, e1, e2 in events:
        e0.record(stream)
        adapter.dispatch(batch)
        e1.record(stream)
        adapter.combine(expert_out)
        e2.record(stream)
    torch.cuda.synchronize()
    rows = [(e0.elapsed_time(e1) * 1e3, e1.elapsed_time(e2) * 1e3) for e0, e1, e2 in events]
    split = split_medians(max_over_ranks(ctx, rows).tolist())
    return split, ("graph" if replay is not None else "eager"), note
