"""One point on this rank: gate it, then time it (CPU or CUDA), then summarize the samples."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.measure.cpu_timing import time_cpu
from bench.measure.cuda_timing import time_cuda
from bench.measure.gate import gate_round_trip
from bench.measure.graphs import layout_of
from bench.measure.stats import summarize
from bench.measure.sampling import Sampling
from bench.synthetic import algbw_gbps, busbw_gbps


@dataclass
class PointOutcome:
    """What one point produced on this rank (the Result fields, rank 0's are reported).

    ``timing`` says how an ``ok`` point was timed: ``graph`` (CUDA-graph replay), ``eager``
    (CUDA events around eager round trips; ``timing_note`` says why) or ``cpu``. Not a
    Result field: the launcher reports it in the result event and the timing log.
    """

    status: str
    error: str | None = None
    fields: dict = field(default_factory=dict)
    timing: str | None = None
    timing_note: str | None = None


def run_point(adapter, ctx, point, *, max_noise=None, min_samples=None, min_time_s=None,
              timeout_s=None, on_phase=None, batch=None) -> PointOutcome:
    """Gate, then time, one point on this rank (collective: every rank calls it).

    ``point`` is a :class:`bench.synthetic.BenchPoint`; ``batch`` its dispatch input on this
    rank when the caller built it already (default: built here).
    """
    if batch is None:
        batch = point.batch(ctx.rank, ctx.torch_device)
    if on_phase:
        on_phase("gate")
    problem, received, expert_out = gate_round_trip(adapter, ctx, point, batch)
    if problem:
        return PointOutcome("incorrect", problem)
    if on_phase:
        on_phase("measure")
    rule = Sampling(max_noise=max_noise, min_samples=min_samples, min_time_s=min_time_s,
                        timeout_s=timeout_s)
    if ctx.device == "cuda":
        layout = layout_of(received)  # cloned: the adapter may reuse these buffers
        split, timing, note = time_cuda(adapter, ctx, batch, expert_out, rule,
                                        point=point, gate_layout=layout)
    else:
        split = time_cpu(adapter, ctx, batch, expert_out, rule)
        timing, note = "cpu", None
    fields = summarize(rule.samples, noise=rule.noise)
    fields.update(split)
    fields["noise_target_met"] = bool(rule.noise_target_met)
    fields["raw_samples_us"] = [float(s) for s in rule.samples]
    fields["bytes_per_rank"] = point.bytes_per_rank()
    alg = algbw_gbps(fields["bytes_per_rank"], fields["latency_us_p50"])
    fields["algbw_gbps"] = alg
    fields["busbw_gbps"] = busbw_gbps(alg, ctx.world_size)
    return PointOutcome("ok", None, fields, timing=timing, timing_note=note)
