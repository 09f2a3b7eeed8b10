"""Measurement of one point: the correctness gate, timing, the stopping rule and the statistics.

One point (backend x shape x tokens per rank) runs on every rank of the group:

1. **Gate** (:mod:`~bench.measure.gate`). One round trip with the point's deterministic
   payloads, checked bit-exactly; a failed gate means status ``incorrect`` and no timing.
2. **Timing**. CPU (:mod:`~bench.measure.cpu_timing`): ``time.perf_counter_ns`` around
   dispatch and combine of every round trip. CUDA (:mod:`~bench.measure.cuda_timing`):
   CUDA events around batches of round trips, replayed from a CUDA graph where vLLM replays the
   step (:mod:`~bench.measure.capture_mode`: up to its capture size, not for a backend it runs
   eagerly), the adapter allows capture and the graph passes its own check
   (:mod:`~bench.measure.graphs`); else eager, with the reason in :attr:`PointOutcome.timing_note`. The latency of an iteration
   is the **maximum over ranks** (:mod:`~bench.measure.agreement`).
3. **Stopping** (:mod:`~bench.measure.sampling`): nvbench's rule, defined with its defaults in
   :mod:`autoselect.stopping`.
4. **Statistics** (:mod:`~bench.measure.stats`): median, mean, min, p10, p90, p99, relative
   stdev, the noise (relative standard error of the median), plus bytes per rank and
   algbw/busbw (:func:`run_point`).
"""

from bench.measure.agreement import agree
from bench.measure.cpu_timing import time_cpu
from bench.measure.gate import gate_round_trip
from bench.measure.graphs import first_line
from bench.measure.point import run_point
from bench.measure.sampling import WARMUP_ITERATIONS, Sampling

__all__ = [
    "WARMUP_ITERATIONS", "Sampling", "agree", "first_line", "gate_round_trip", "run_point", "time_cpu",
]
