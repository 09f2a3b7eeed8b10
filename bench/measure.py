"""Measurement: the correctness gate, timing, the stopping rule and the statistics.

One point (backend x shape x tokens per rank) runs on every rank of the group:

1. **Gate.** One round trip with the workload's deterministic payloads. Every row a rank
   receives must be bit-exact (values, scales, expert ids, weights) for the token index it
   claims; every token must reach every rank owning one of its experts, once; combine must
   return exactly ``sum_k w_k · c_{e_k} · x`` (the synthetic experts make that exact in
   bf16, see ``bench/workload.py``). The first mismatch on the lowest rank is the error
   text; a failed gate means status ``incorrect`` and no timing.
2. **Timing.** CPU: ``time.perf_counter_ns`` around dispatch and combine of every round
   trip. CUDA: CUDA events around batches of round trips, replayed from a CUDA graph when
   the adapter allows capture and the graph passes its own check (:func:`_capture`); else
   eager, with the reason in :attr:`PointOutcome.timing_note`. Dispatch and combine are
   split in a separate eager pass with one event triple per iteration (which includes the
   event cost). The latency of an iteration is the **maximum over ranks**
   (``all_reduce(MAX)`` of each batch's per-rank times).
3. **Stopping.** :class:`StoppingRule` (nvbench's defaults, all in :data:`DEFAULTS`).
4. **Statistics.** :func:`summarize`: median, mean, min, p10, p90, p99, relative stdev,
   the noise (relative standard error of the median), plus bytes per rank and algbw/busbw.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

#: Stopping-rule defaults, in one place (nvbench's stdrel criterion).
DEFAULTS = {
    "min_samples": 10,  # at least this many samples
    "min_time_s": 0.5,  # at least this much accumulated sample time
    "max_noise": 0.005,  # stop once the relative standard error of the median is below 0.5 %
    "timeout_s": 15.0,  # wall-clock limit per point: stop, noise_target_met = False
    "stable_window": 8,  # noise estimates compared for the "noise is stable" stop
    "stable_rel_std": 0.05,  # ... stop when they vary by less than 5 % (relative stdev)
    "max_samples": 200_000,  # memory bound
}

#: Round trips run before timing starts (JIT, caches, lazy allocations).
WARMUP_ITERATIONS = 3
#: Round trips between two CUDA events (and in one captured graph).
CUDA_BATCH_ROUND_TRIPS = 10
#: Eager round trips of the CUDA dispatch/combine split pass.
SPLIT_PASS_ITERATIONS = 50

#: Why a CUDA point was timed eagerly, by cause (``{detail}``: the first line of the error).
EAGER_REASONS = {
    "not_allowed": "the adapter does not allow CUDA-graph capture",
    "host_sync": "a round trip synchronizes with the host ({detail}); capture not attempted",
    "capture_failed": "CUDA-graph capture failed ({detail}); the eager round trip passed the gate again",
    "failed_before": "CUDA-graph capture failed at an earlier point in this worker ({detail}); not tried again",
    "replay_mismatch": "a replay of the captured graph did not pass the gate ({detail})",
}
#: Target wall time of one CPU timing batch (one all_reduce per batch).
BATCH_TARGET_S = 0.02


class StoppingRule:
    """When to stop sampling one point: ``add(sample)`` each sample, ask ``done()``.

    Done when (a) at least ``min_samples`` samples and ``min_time_s`` of accumulated
    sample time were taken and the noise (relative standard error of the median) is at
    most ``max_noise``, or the last ``stable_window`` noise estimates vary by less than
    ``stable_rel_std`` (the noise has stopped shrinking); or (b) ``timeout_s`` of wall
    time passed since the first sample (then ``noise_target_met`` is False); or (c)
    ``max_samples`` were taken.
    """

    def __init__(self, *, max_noise=None, min_samples=None, min_time_s=None, timeout_s=None,
                 clock=time.monotonic):
        d = DEFAULTS
        self.max_noise = d["max_noise"] if max_noise is None else max_noise
        self.min_samples = d["min_samples"] if min_samples is None else min_samples
        self.min_time_s = d["min_time_s"] if min_time_s is None else min_time_s
        self.timeout_s = d["timeout_s"] if timeout_s is None else timeout_s
        self.clock = clock
        self.samples: list[float] = []
        self._array = None  # (values, scratch, count): float64 buffers for done(), see _as_arrays
        self.accumulated_s = 0.0
        self.started: float | None = None
        self.noise_history: list[float] = []
        self.noise: float | None = None
        self.noise_target_met = False
        self.timed_out = False

    def add(self, sample_us: float) -> None:
        """Record one sample (microseconds)."""
        if self.started is None:
            self.started = self.clock()
        self.samples.append(float(sample_us))
        self.accumulated_s += sample_us * 1e-6

    def done(self) -> bool:
        """Whether to stop now (updates ``noise`` and ``noise_target_met``)."""
        n = len(self.samples)
        if n >= 2:
            values, scratch = self._as_arrays()
            self.noise = relative_standard_error(values, scratch=scratch)
        else:
            self.noise = None
        if self.noise is not None:
            self.noise_history.append(self.noise)
        self.noise_target_met = self.noise is not None and self.noise <= self.max_noise
        if n >= DEFAULTS["max_samples"]:
            return True
        if self.started is not None and self.clock() - self.started >= self.timeout_s:
            self.timed_out = True
            return True
        if n < self.min_samples or self.accumulated_s < self.min_time_s:
            return False
        return self.noise_target_met or self.noise_is_stable()

    def _as_arrays(self):
        """``samples`` as a float64 array plus a scratch array of the same length, kept between calls.

        ``done()`` runs once per batch: converting the whole list and copying it for two
        medians each time cost more than the medians. The values array holds the samples in
        some order (the medians partition it in place, which a median does not notice); only
        samples added since the last call are copied in. Both buffers double when full.
        """
        import numpy as np

        n = len(self.samples)
        if self._array is None:
            self._array = (np.empty(max(64, n), np.float64), np.empty(max(64, n), np.float64), 0)
        values, scratch, have = self._array
        if n > len(values):
            size = max(n, 2 * len(values))
            grown = np.empty(size, np.float64)
            grown[:have] = values[:have]
            values, scratch = grown, np.empty(size, np.float64)
        if n > have:
            values[have:n] = self.samples[have:n]
        self._array = (values, scratch, n)
        return values[:n], scratch[:n]

    def noise_is_stable(self) -> bool:
        """The last ``stable_window`` noise estimates vary by less than ``stable_rel_std``."""
        window = self.noise_history[-DEFAULTS["stable_window"]:]
        if len(window) < DEFAULTS["stable_window"]:
            return False
        mean = sum(window) / len(window)
        if mean == 0:
            return True
        var = sum((x - mean) ** 2 for x in window) / (len(window) - 1)
        return math.sqrt(var) / mean < DEFAULTS["stable_rel_std"]


def relative_standard_error(samples, *, scratch=None) -> float:
    """Relative standard error of the median: ``1.2533 · 1.4826 · MAD / sqrt(n) / median``.

    The MAD-based spread ignores outliers (an OS hiccup on a shared CPU); 1.2533 is the
    asymptotic ratio of the median's standard error to the mean's for normal samples.

    :param scratch: a float64 array of ``len(samples)`` values to work in; when given,
        ``samples`` must be a float64 array too and is reordered in place (the medians
        need no copies; the result does not depend on the order).
    """
    import numpy as np

    if scratch is None:
        a = np.asarray(samples, dtype=np.float64)
        med = float(np.median(a))
        if med <= 0:
            return math.inf
        mad = float(np.median(np.abs(a - med)))
        return 1.2533 * 1.4826 * mad / math.sqrt(len(a)) / med
    a = samples
    med = float(np.median(a, overwrite_input=True))
    if med <= 0:
        return math.inf
    dev = np.abs(np.subtract(a, med, out=scratch), out=scratch)
    mad = float(np.median(dev, overwrite_input=True))
    return 1.2533 * 1.4826 * mad / math.sqrt(len(a)) / med


def summarize(samples_us, *, noise=None) -> dict:
    """Latency statistics of a sample list, as Result fields (``latency_us_*``, ``latency_stdrel``, ``noise_stdrel``)."""
    import numpy as np

    a = np.asarray(samples_us, dtype=np.float64)
    mean = float(a.mean())
    std = float(a.std(ddof=1)) if len(a) > 1 else 0.0
    p10, p50, p90, p99 = (float(v) for v in np.percentile(a, [10, 50, 90, 99]))
    return {
        "samples": int(len(a)),
        "latency_us_p50": p50,
        "latency_us_mean": mean,
        "latency_us_min": float(a.min()),
        "latency_us_p10": p10,
        "latency_us_p90": p90,
        "latency_us_p99": p99,
        "latency_stdrel": std / mean if mean > 0 else None,
        "noise_stdrel": relative_standard_error(a) if noise is None else noise,
    }


# --------------------------------------------------------------------------------------
# The correctness gate.


def _first_true(mask):
    """Index tuple of the first True element of a bool tensor (row-major), or None."""
    idx = mask.nonzero()
    return None if idx.shape[0] == 0 else tuple(int(v) for v in idx[0])


def check_dispatch(workload, rank: int, received) -> str | None:
    """The first way ``received`` differs from what ``rank`` must get, or None.

    Every valid row must carry, bit-exact, the payload of the token it names; every token
    routed to an expert of ``rank`` must arrive; no token may arrive twice.
    """
    import torch

    w = workload
    dev = received.x.device
    valid = received.valid
    idx = received.token_index.to(torch.int64).reshape(-1)
    if valid is not None:
        idx = idx[valid.to(dev)]
    n_total = w.total_tokens
    bad = (idx < 0) | (idx >= n_total)
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        return f"rank {rank}: received row {i} names token {int(idx[i])}, outside [0, {n_total})"

    def rows(t):
        return t if (t is None or valid is None) else t[valid.to(dev)]

    if received.expert is not None:
        problem = _check_slots(w, rank, idx, rows(received.expert).to(torch.int64).reshape(-1))
        if problem:
            return problem
    else:
        srt = idx.sort().values
        dup = srt[1:] == srt[:-1]
        if bool(dup.any()):
            g = int(srt[int(dup.nonzero()[0]) + 1])
            return f"rank {rank}: token {g} (from rank {g // w.tokens_per_rank}) arrived twice"
        need = w.destinations(dev)[:, rank]
        present = torch.zeros(n_total, dtype=torch.bool, device=dev)
        present[idx] = True
        missing = need & ~present
        if bool(missing.any()):
            g = int(missing.nonzero()[0])
            ids, _ = w.global_routing(dev)
            first, last = w.expert_range(rank)
            mine = [e for e in ids[g].tolist() if first <= e < last]
            return (f"rank {rank}: token {g} (from rank {g // w.tokens_per_rank}) never arrived, "
                    f"though rank {rank} owns its expert{'s' if len(mine) > 1 else ''} {', '.join(map(str, mine))}")

    exp_x, exp_sf = w.payload_rows(idx)
    ids, a = w.global_routing(dev)
    checks = [("activation byte", rows(received.x), exp_x)]
    if w.scale_bytes:
        checks.append(("scale byte", rows(received.x_sf), exp_sf))
    # Picks owned by other ranks may come back as an invalid id (outside [0, experts)) with
    # any weight (FlashInfer and DeepEP mark them so); this rank's own picks must be exact.
    # Per-slot layouts may return no routing at all (combine gets it from the caller).
    exp_ids = ids[idx]
    local = w.expert_owner(exp_ids) == rank
    slots = received.expert is not None
    if not (slots and received.topk_ids is None):
        got_ids = rows(received.topk_ids)
        got_ids = None if got_ids is None else got_ids.to(torch.int64)
        checks.append(("expert id", got_ids, exp_ids.to(torch.int64)))
    if not (slots and received.topk_weights is None):
        got_w = rows(received.topk_weights)
        checks.append(("routing weight", None if got_w is None else got_w.to(torch.float32),
                       a[idx].to(torch.float32) / 16.0))
    for what, got, expected in checks:
        if got is None or tuple(got.shape) != tuple(expected.shape):
            shape = None if got is None else list(got.shape)
            return f"rank {rank}: {what}s have shape {shape}, expected {list(expected.shape)}"
        wrong = got != expected
        if what == "expert id":
            wrong &= local | ((got >= 0) & (got < w.experts))
        elif what == "routing weight":
            wrong &= local
        pos = _first_true(wrong)
        if pos is not None:
            r, c = pos
            g = int(idx[r])
            gv, ev = got[r, c].item(), expected[r, c].item()
            if what.endswith("byte"):
                gv, ev = f"0x{int(gv):02x}", f"0x{int(ev):02x}"
            return (f"rank {rank}: token {g} (from rank {g // w.tokens_per_rank}) {what} {c}: "
                    f"got {gv}, expected {ev}")
    return None


def _check_slots(w, rank: int, idx, expert) -> str | None:
    """Per-slot layouts: every (token, local expert) pair routed here exactly once, nothing else."""
    import torch

    ids, _ = w.global_routing(idx.device)
    first, last = w.expert_range(rank)
    e_count = w.experts
    got = idx * e_count + expert
    srt = got.sort().values
    dup = srt[1:] == srt[:-1]
    if bool(dup.any()):
        k = int(srt[int(dup.nonzero()[0]) + 1])
        return f"rank {rank}: token {k // e_count} arrived twice for expert {k % e_count}"
    tokens = torch.arange(ids.shape[0], device=idx.device)[:, None].expand_as(ids).to(torch.int64)
    mine = (ids >= first) & (ids < last)
    need = (tokens[mine] * e_count + ids[mine].to(torch.int64)).sort().values
    extra = ~torch.isin(srt, need)
    if bool(extra.any()):
        k = int(srt[int(extra.nonzero()[0])])
        return f"rank {rank}: token {k // e_count} arrived for expert {k % e_count}, which it is not routed to here"
    missing = ~torch.isin(need, srt)
    if bool(missing.any()):
        k = int(need[int(missing.nonzero()[0])])
        g = k // e_count
        return (f"rank {rank}: token {g} (from rank {g // w.tokens_per_rank}) never arrived "
                f"for expert {k % e_count}")
    return None


def check_combine(workload, rank: int, out) -> str | None:
    """The first element where ``out`` differs from the exact ``sum_k w_k · expert_k(token)``, or None."""
    import torch

    expected = workload.expected_combine(rank, out.device)
    if tuple(out.shape) != tuple(expected.shape):
        return f"rank {rank}: combine returned shape {list(out.shape)}, expected {list(expected.shape)}"
    got = out.to(torch.bfloat16)
    pos = _first_true(got.view(torch.int16) != expected.view(torch.int16))
    if pos is None:
        return None
    t, h = pos
    g = rank * workload.tokens_per_rank + t
    gv, ev = float(got[t, h]), float(expected[t, h])
    ratio = f" ({gv / ev:.4g}x)" if ev else ""
    return (f"rank {rank}: combine of token {g} element {h}: got {gv:g}, expected {ev:g}{ratio} "
            f"= sum_k w_k * expert_k(token)")


# --------------------------------------------------------------------------------------
# One point.


@dataclass
class PointOutcome:
    """What one point produced on this rank (the Result fields, rank 0's are reported).

    ``timing`` says how an ``ok`` point was timed: ``graph`` (CUDA-graph replay), ``eager``
    (CUDA events around eager round trips; ``timing_note`` says why) or ``cpu``. Not a
    Result field: ``bench/launch.py`` reports it in the result event and the timing log.
    """

    status: str
    error: str | None = None
    fields: dict = field(default_factory=dict)
    timing: str | None = None
    timing_note: str | None = None


class GraphFallbackFailed(RuntimeError):
    """An eager round trip after a failed capture attempt no longer passes the gate."""


def eager_reason(cause: str, detail: str | None = None) -> str:
    """The timing note of a point timed eagerly for ``cause`` (a key of :data:`EAGER_REASONS`)."""
    return EAGER_REASONS[cause].format(detail=detail)


def _first_line(error: BaseException) -> str:
    """``Type: first line of the message`` (CUDA errors carry long multi-line hints)."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def _agree(ctx, message):
    """All ranks' messages (None = fine), gathered over the CPU group; returns the first non-None."""
    import torch.distributed as dist

    if ctx.world_size == 1:
        return message
    messages = [None] * ctx.world_size
    dist.all_gather_object(messages, message, group=ctx.cpu_group)
    return next((m for m in messages if m), None)


def run_point(adapter, ctx, workload, *, max_noise=None, min_samples=None, min_time_s=None,
              timeout_s=None, on_phase=None) -> PointOutcome:
    """Gate, then time, one point on this rank (collective: every rank calls it)."""
    dev = ctx.torch_device
    batch = workload.batch(ctx.rank, dev)
    if on_phase:
        on_phase("gate")
    problem, received, expert_out = _gate(adapter, ctx, workload, batch)
    if problem:
        return PointOutcome("incorrect", problem)
    if on_phase:
        on_phase("measure")
    rule = StoppingRule(max_noise=max_noise, min_samples=min_samples, min_time_s=min_time_s,
                        timeout_s=timeout_s)
    if ctx.device == "cuda":
        layout = layout_of(received)  # cloned: the adapter may reuse these buffers
        split, timing, note = _time_cuda(adapter, ctx, batch, expert_out, rule,
                                         workload=workload, gate_layout=layout)
    else:
        split = _time_cpu(adapter, ctx, batch, expert_out, rule)
        timing, note = "cpu", None
    fields = summarize(rule.samples, noise=rule.noise)
    fields.update(split)
    fields["noise_target_met"] = bool(rule.noise_target_met)
    fields["raw_samples_us"] = [float(s) for s in rule.samples]
    fields["bytes_per_rank"] = workload.bytes_per_rank()
    from bench.workload import algbw_gbps, busbw_gbps

    alg = algbw_gbps(fields["bytes_per_rank"], fields["latency_us_p50"])
    fields["algbw_gbps"] = alg
    fields["busbw_gbps"] = busbw_gbps(alg, ctx.world_size)
    return PointOutcome("ok", None, fields, timing=timing, timing_note=note)


def _gate(adapter, ctx, workload, batch):
    """One checked round trip (collective): ``(problem, received, expert_out)``, problem None when exact."""
    received = adapter.dispatch(batch)
    problem = _agree(ctx, check_dispatch(workload, ctx.rank, received))
    if problem:
        return "dispatch: " + problem, received, None
    expert_out = workload.expert_output(ctx.rank, received.x, received.topk_ids,
                                        received.topk_weights, received.valid, received.expert)
    out = adapter.combine(expert_out)
    problem = _agree(ctx, check_combine(workload, ctx.rank, out))
    if problem:
        return "combine: " + problem, received, expert_out
    return None, received, expert_out


def _max_over_ranks(ctx, rows):
    """``rows`` (list of per-iteration tuples) reduced with MAX over ranks, as a float64 tensor."""
    import torch
    import torch.distributed as dist

    t = torch.tensor(rows, dtype=torch.float64)
    if ctx.world_size > 1:
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ctx.cpu_group)
    return t


def _rank0_says_done(ctx, done: bool) -> bool:
    """Rank 0's stopping decision, broadcast (wall clocks differ between ranks)."""
    import torch
    import torch.distributed as dist

    if ctx.world_size == 1:
        return done
    flag = torch.tensor([1 if done else 0], dtype=torch.int32)
    dist.broadcast(flag, src=0, group=ctx.cpu_group)
    return bool(flag.item())


def split_medians(rows) -> dict:
    """Median dispatch and combine times of ``(dispatch_us, combine_us)`` rows (already max over ranks)."""
    import statistics

    return {"dispatch_us_p50": statistics.median(r[0] for r in rows),
            "combine_us_p50": statistics.median(r[1] for r in rows)}


def batch_sample_us(elapsed_ms: float, round_trips: int) -> float:
    """One round trip's time in µs from a CUDA-event interval (ms) around ``round_trips`` of them."""
    return elapsed_ms * 1e3 / round_trips


def _time_cpu(adapter, ctx, batch, expert_out, rule) -> dict:
    """perf_counter_ns around dispatch and combine of every round trip; returns the split medians."""
    from time import perf_counter_ns

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
        maxed = _max_over_ranks(ctx, rows)
        for rt, d, c in maxed.tolist():
            rule.add(rt)
            split.append((d, c))
        if _rank0_says_done(ctx, rule.done()):
            break
        mean_us = float(maxed[:, 0].mean())
        n = int(min(1000, max(1, BATCH_TARGET_S / max(mean_us * 1e-6, 1e-9))))
    return split_medians(split)


# --------------------------------------------------------------------------------------
# CUDA graphs: when to replay, and the check a replay must pass.


def layout_of(received):
    """Which token (and, for per-slot layouts, which expert) sits in which received row, cloned.

    ``(token_index int64 [R], valid bool [R] | None, expert int64 [R] | None)``.
    """
    import torch

    def flat(t, dtype):
        return None if t is None else t.to(dtype).reshape(-1).clone()

    return (flat(received.token_index, torch.int64), flat(received.valid, torch.bool),
            flat(received.expert, torch.int64))


def same_layout(a, b) -> bool:
    """Whether two :func:`layout_of` results put the same (token, expert) in the same rows (invalid rows ignored)."""
    import torch

    (ia, va, ea), (ib, vb, eb) = a, b
    if ia.shape != ib.shape or (ea is None) != (eb is None):
        return False
    va = torch.ones_like(ia, dtype=torch.bool) if va is None else va.to(ia.device)
    vb = torch.ones_like(ib, dtype=torch.bool) if vb is None else vb.to(ia.device)
    if not torch.equal(va, vb) or not torch.equal(ia[va], ib.to(ia.device)[va]):
        return False
    return ea is None or bool(torch.equal(ea[va], eb.to(ia.device)[va]))


def _shares_storage(t, others) -> bool:
    """Whether tensor ``t`` lives in the same storage as any of ``others`` (None skipped)."""
    ptr = t.untyped_storage().data_ptr()
    return any(o is not None and o.untyped_storage().data_ptr() == ptr for o in others)


def builds_fields_on_access(received) -> bool:
    """Whether ``received`` computes its fields when first read (``deepep_common.LazyReceived``).

    Such fields must not be read before a replay: they would be built from the graph's
    buffers before the replay has written them.
    """
    return "x" not in getattr(received, "__dict__", {"x": None})


def poison_outputs(received, out, batch, expert_out) -> list[str]:
    """Overwrite a captured round trip's outputs so that a replay must rewrite them to pass.

    ``received.x`` is filled with 0xFF bytes and ``out`` with NaN, except where a tensor
    shares storage with the inputs (``batch.x``/``x_sf``, ``expert_out``), which stay
    intact, and except the fields of a Received that builds them on access
    (:func:`builds_fields_on_access`: they are read only after the replay). Returns the
    names of the tensors poisoned.
    """
    import math

    inputs = (batch.x, batch.x_sf, expert_out)
    done = []
    if (not builds_fields_on_access(received) and received.x.numel()
            and not _shares_storage(received.x, inputs)):
        received.x.fill_(0xFF)
        done.append("x")
    if out.numel() and not _shares_storage(out, inputs):
        out.fill_(math.nan)
        done.append("out")
    return done


def check_replay(workload, rank: int, received, out, gate_layout) -> str | None:
    """The first way a graph replay's last round trip is wrong, or None.

    Dispatch must be bit-exact again (:func:`check_dispatch`, after :func:`poison_outputs`).
    Combine ran on the gate's expert outputs, whose rows match the replay's only when
    dispatch put the same tokens in the same rows (:func:`same_layout`): then combine must be
    exact; otherwise (kernels that place rows with atomics) it must at least have rewritten
    every poisoned element.
    """
    import torch

    problem = check_dispatch(workload, rank, received)
    if problem:
        return "dispatch: " + problem
    if same_layout(layout_of(received), gate_layout):
        problem = check_combine(workload, rank, out)
        return None if problem is None else "combine: " + problem
    left = torch.isnan(out.to(torch.float32))
    pos = _first_true(left)
    if pos is not None:
        return f"combine: rank {rank}: output element {list(pos)} was not written by the replay"
    return None


#: Backends whose capture failed in this process: backend name -> the error. A failed capture
#: leaves PyTorch's allocator routing to the graph's pool (``CUDAGraph::capture_end`` throws at
#: ``cudaStreamEndCapture`` before ``endAllocateToPool``, aten/src/ATen/cuda/CUDAGraph.cpp), so
#: the worker does not capture that backend again; its next points are timed eagerly.
_CAPTURE_FAILED: dict[str, str] = {}


def _capture(adapter, ctx, workload, batch, expert_out, round_trip, stream, gate_layout):
    """Try to capture ``CUDA_BATCH_ROUND_TRIPS`` round trips in a CUDA graph (collective).

    Returns ``(replay, note)``: ``graph.replay`` and None, or None and the reason for eager
    timing. Every rank takes the same branch (each step's verdict is agreed over the CPU
    group). Steps:

    1. Host-sync probe: one eager round trip under ``torch.cuda.set_sync_debug_mode("error")``,
       which raises *before* an ``.item()``/``.tolist()``/``nonzero``/D2H copy synchronizes,
       so nothing is enqueued into a capture that would then be invalidated (an NCCL
       collective inside an invalidated capture can leave the communicator in error, and
       ProcessGroupNCCL's watchdog may then abort the process).
    2. Capture on a side stream warmed by one round trip, ``capture_error_mode=
       "thread_local"`` (background threads, e.g. the NCCL watchdog's event queries, cannot
       invalidate it). On failure the current stream is restored (``graph.__exit__`` leaves
       its stream current when ``capture_end`` raises), a capture left open is ended, the
       eager round trip must pass the gate again before it is timed, and this worker does
       not capture the backend again (:data:`_CAPTURE_FAILED`).
    3. Replay check: the last round trip's outputs are poisoned, the graph replayed once
       (this is also the warm-up replay: the first launch uploads the graph) and
       :func:`check_replay` must pass.
    """
    import torch

    def regate(note):
        try:
            problem = _gate(adapter, ctx, workload, batch)[0]
        except Exception as e:  # noqa: BLE001 - e.g. an adapter left mid round trip by the failure
            raise GraphFallbackFailed(f"{note}; the eager round trip afterwards raised {_first_line(e)}") from e
        if problem:
            raise GraphFallbackFailed(f"{note}; the eager round trip afterwards fails the gate: {problem}")
        return None, note

    problem = None
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        round_trip()
    except Exception as e:  # noqa: BLE001 - any failure here means "do not capture"
        problem = _first_line(e)
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    torch.cuda.synchronize()
    problem = _agree(ctx, problem)
    if problem:
        return regate(eager_reason("host_sync", problem))

    graph, side, last = torch.cuda.CUDAGraph(), torch.cuda.Stream(), None
    side.wait_stream(stream)
    with torch.cuda.stream(side):
        round_trip()
    stream.wait_stream(side)
    torch.cuda.synchronize()
    try:
        with torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local"):
            for _ in range(CUDA_BATCH_ROUND_TRIPS):
                last = round_trip()
    except Exception as e:  # noqa: BLE001 - reported, then the eager path is re-gated
        problem = _first_line(e)
        torch.cuda.set_stream(stream)
        with torch.cuda.stream(side):
            if torch.cuda.is_current_stream_capturing():
                try:
                    graph.capture_end()
                except Exception:  # noqa: BLE001 - the capture is abandoned either way
                    pass
    torch.cuda.synchronize()
    problem = _agree(ctx, problem)
    if problem:
        _CAPTURE_FAILED[adapter.name] = problem
        return regate(eager_reason("capture_failed", problem))

    received, out = last
    poison_outputs(received, out, batch, expert_out)
    graph.replay()
    torch.cuda.synchronize()
    problem = _agree(ctx, check_replay(workload, ctx.rank, received, out, gate_layout))
    if problem:
        return regate(eager_reason("replay_mismatch", problem))
    return graph.replay, None


def _time_cuda(adapter, ctx, batch, expert_out, rule, *, workload, gate_layout):
    """CUDA events around batches (graph replay when :func:`_capture` allows it), then a split pass.

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
    if not adapter.supports_cuda_graph:
        replay, note = None, eager_reason("not_allowed")
    elif adapter.name in _CAPTURE_FAILED:
        replay, note = None, eager_reason("failed_before", _CAPTURE_FAILED[adapter.name])
    else:
        replay, note = _capture(adapter, ctx, workload, batch, expert_out, round_trip, stream, gate_layout)

    def run_batch():
        if replay is not None:
            replay()
        else:
            for _ in range(per_batch):
                round_trip()

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    while True:
        rows = []
        for _ in range(8):
            start.record(stream)
            run_batch()
            end.record(stream)
            end.synchronize()
            rows.append((batch_sample_us(start.elapsed_time(end), per_batch),))
        maxed = _max_over_ranks(ctx, rows)
        for (rt,) in maxed.tolist():
            rule.add(rt)
        if _rank0_says_done(ctx, rule.done()):
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
    split = split_medians(_max_over_ranks(ctx, rows).tolist())
    return split, ("graph" if replay is not None else "eager"), note
