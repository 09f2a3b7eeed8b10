"""Measurement of one point: the correctness gate, timing, the stopping rule and the statistics.

One point (backend x shape x tokens per rank) runs on every rank of the group:

1. **Gate** (:mod:`~bench.measure.gate`). One round trip with the point's deterministic
   payloads, checked bit-exactly; a failed gate means status ``incorrect`` and no timing.
2. **Timing**. CPU (:mod:`~bench.measure.cpu_timing`): ``time.perf_counter_ns`` around
   dispatch and combine of every round trip. CUDA (:mod:`~bench.measure.cuda_timing`):
   CUDA events around batches of round trips, replayed from a CUDA graph when the adapter
   allows capture and the graph passes its own check (:mod:`~bench.measure.graphs`); else
   eager, with the reason in :attr:`PointOutcome.timing_note`. The latency of an iteration
   is the **maximum over ranks** (:mod:`~bench.measure.agreement`).
3. **Stopping** (:mod:`~bench.measure.stopping`): nvbench's rule, defaults in :data:`DEFAULTS`.
4. **Statistics** (:mod:`~bench.measure.stats`): median, mean, min, p10, p90, p99, relative
   stdev, the noise (relative standard error of the median), plus bytes per rank and
   algbw/busbw (:func:`run_point`).
"""

from bench.measure.agreement import agree, max_over_ranks, rank0_says_done
from bench.measure.cpu_timing import BATCH_TARGET_S, time_cpu
from bench.measure.cuda_timing import SPLIT_PASS_ITERATIONS, batch_sample_us, time_cuda
from bench.measure.gate import check_combine, check_dispatch, gate_round_trip
from bench.measure.graphs import (
    CUDA_BATCH_ROUND_TRIPS,
    EAGER_REASONS,
    GraphFallbackFailed,
    builds_fields_on_access,
    check_replay,
    eager_reason,
    first_line,
    layout_of,
    poison_outputs,
    same_layout,
)
from bench.measure.point import PointOutcome, run_point
from bench.measure.stats import relative_standard_error, split_medians, summarize
from bench.measure.stopping import DEFAULTS, WARMUP_ITERATIONS, Sampling

__all__ = [
    "BATCH_TARGET_S", "CUDA_BATCH_ROUND_TRIPS", "DEFAULTS", "EAGER_REASONS", "SPLIT_PASS_ITERATIONS",
    "WARMUP_ITERATIONS", "GraphFallbackFailed", "PointOutcome", "Sampling", "agree",
    "batch_sample_us", "builds_fields_on_access", "check_combine", "check_dispatch", "check_replay",
    "eager_reason", "first_line", "gate_round_trip", "layout_of", "max_over_ranks", "poison_outputs",
    "rank0_says_done", "relative_standard_error", "run_point", "same_layout", "split_medians",
    "summarize", "time_cpu", "time_cuda",
]
