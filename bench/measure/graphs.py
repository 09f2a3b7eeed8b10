"""CUDA-graph capture of a point's round trips, and the check a replay must pass.

:func:`capture` tries to record :data:`CUDA_BATCH_ROUND_TRIPS` round trips in one graph
(after a host-sync probe); a replay is trusted only after :func:`check_replay` passed on
outputs :func:`poison_outputs` overwrote. Otherwise the point is timed eagerly, with the
reason (:data:`EAGER_REASONS`) in its timing note.
"""

from __future__ import annotations

from bench.measure.agreement import agree
from bench.measure.gate import check_combine, check_dispatch, first_true, gate_round_trip

#: Round trips between two CUDA events (and in one captured graph).
CUDA_BATCH_ROUND_TRIPS = 10

#: Why a CUDA point was timed eagerly, by cause (``{detail}``: the first line of the error).
EAGER_REASONS = {
    "vllm_eager": "as vLLM runs it: {detail}",
    "not_allowed": "the adapter does not allow CUDA-graph capture",
    "host_sync": "a round trip synchronizes with the host ({detail}); capture not attempted",
    "capture_failed": "CUDA-graph capture failed ({detail}); the eager round trip passed the gate again",
    "failed_before": "CUDA-graph capture failed at an earlier point in this worker ({detail}); not tried again",
    "replay_mismatch": "a replay of the captured graph did not pass the gate ({detail})",
}


class GraphFallbackFailed(RuntimeError):
    """An eager round trip after a failed capture attempt no longer passes the gate."""


def eager_reason(cause: str, detail: str | None = None) -> str:
    """The timing note of a point timed eagerly for ``cause`` (a key of :data:`EAGER_REASONS`)."""
    return EAGER_REASONS[cause].format(detail=detail)


def first_line(error: BaseException) -> str:
    """``Type: first line of the message`` (CUDA errors carry long multi-line hints)."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


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


def shares_storage(t, others) -> bool:
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
            and not shares_storage(received.x, inputs)):
        received.x.fill_(0xFF)
        done.append("x")
    if out.numel() and not shares_storage(out, inputs):
        out.fill_(math.nan)
        done.append("out")
    return done


def check_replay(point, rank: int, received, out, gate_layout) -> str | None:
    """The first way a graph replay's last round trip is wrong, or None.

    Dispatch must be bit-exact again (:func:`check_dispatch`, after :func:`poison_outputs`).
    Combine ran on the gate's expert outputs, whose rows match the replay's only when
    dispatch put the same tokens in the same rows (:func:`same_layout`): then combine must be
    exact; otherwise (kernels that place rows with atomics) it must at least have rewritten
    every poisoned element.
    """
    import torch

    problem = check_dispatch(point, rank, received)
    if problem:
        return "dispatch: " + problem
    if same_layout(layout_of(received), gate_layout):
        problem = check_combine(point, rank, out)
        return None if problem is None else "combine: " + problem
    left = torch.isnan(out.to(torch.float32))
    pos = first_true(left)
    if pos is not None:
        return f"combine: rank {rank}: output element {list(pos)} was not written by the replay"
    return None


#: Backends whose capture failed in this process: backend name -> the error. A failed capture
#: leaves PyTorch's allocator routing to the graph's pool (``CUDAGraph::capture_end`` throws at
#: ``cudaStreamEndCapture`` before ``endAllocateToPool``, aten/src/ATen/cuda/CUDAGraph.cpp), so
#: the worker process does not capture that backend again; its next points, in this job and in
#: every later job of its worker group, are timed eagerly (a restarted group tries again).
CAPTURE_FAILED: dict[str, str] = {}


def capture(adapter, ctx, point, batch, expert_out, round_trip, stream, gate_layout):
    """Try to capture ``CUDA_BATCH_ROUND_TRIPS`` round trips in a CUDA graph (collective).

    Returns ``(replay, note)``: ``graph.replay`` and None, or None and the reason for eager
    timing. Every rank takes the same branch (each step's verdict is agreed over the CPU
    group). Steps:

    1. Host-sync probe (:func:`probe_host_sync`).
    2. Capture on a side stream (:func:`record_graph`). On failure this worker does not
       capture the backend again (:data:`CAPTURE_FAILED`) and the eager round trip must pass
       the gate again before it is timed.
    3. Replay check: the last round trip's outputs are poisoned, the graph replayed once
       (this is also the warm-up replay: the first launch uploads the graph) and
       :func:`check_replay` must pass.
    """
    import torch

    def regate(note):
        try:
            problem = gate_round_trip(adapter, ctx, point, batch)[0]
        except Exception as e:  # noqa: BLE001 - e.g. an adapter left mid round trip by the failure
            raise GraphFallbackFailed(f"{note}; the eager round trip afterwards raised {first_line(e)}") from e
        if problem:
            raise GraphFallbackFailed(f"{note}; the eager round trip afterwards fails the gate: {problem}")
        return None, note

    problem = agree(ctx, probe_host_sync(round_trip))
    if problem:
        return regate(eager_reason("host_sync", problem))
    graph, last, problem = record_graph(round_trip, stream)
    problem = agree(ctx, problem)
    if problem:
        CAPTURE_FAILED[adapter.name] = problem
        return regate(eager_reason("capture_failed", problem))
    received, out = last
    poison_outputs(received, out, batch, expert_out)
    graph.replay()
    torch.cuda.synchronize()
    problem = agree(ctx, check_replay(point, ctx.rank, received, out, gate_layout))
    if problem:
        return regate(eager_reason("replay_mismatch", problem))
    return graph.replay, None


def probe_host_sync(round_trip) -> str | None:
    """One eager round trip under ``torch.cuda.set_sync_debug_mode("error")``: why not to capture, or None.

    The debug mode raises *before* an ``.item()``/``.tolist()``/``nonzero``/D2H copy
    synchronizes, so nothing is enqueued into a capture that would then be invalidated (an
    NCCL collective inside an invalidated capture can leave the communicator in error, and
    ProcessGroupNCCL's watchdog may then abort the process).
    """
    import torch

    problem = None
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        round_trip()
    except Exception as e:  # noqa: BLE001 - any failure here means "do not capture"
        problem = first_line(e)
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    torch.cuda.synchronize()
    return problem


def record_graph(round_trip, stream):
    """Capture ``CUDA_BATCH_ROUND_TRIPS`` round trips: ``(graph, last round trip's outputs, problem)``.

    On a side stream warmed by one round trip, ``capture_error_mode="thread_local"``
    (background threads, e.g. the NCCL watchdog's event queries, cannot invalidate it). On
    failure the current stream is restored (``graph.__exit__`` leaves its stream current
    when ``capture_end`` raises) and a capture left open is ended; ``problem`` says why.
    """
    import torch

    graph, side, last, problem = torch.cuda.CUDAGraph(), torch.cuda.Stream(), None, None
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
        problem = first_line(e)
        torch.cuda.set_stream(stream)
        with torch.cuda.stream(side):
            if torch.cuda.is_current_stream_capturing():
                try:
                    graph.capture_end()
                except Exception:  # noqa: BLE001 - the capture is abandoned either way
                    pass
    torch.cuda.synchronize()
    return graph, last, problem
