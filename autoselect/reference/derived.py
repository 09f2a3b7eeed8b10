"""allgather_reducescatter derived from NCCL collective timings (pure Python).

vLLM's default backend is no all2all kernel: ``AgRsAll2AllManager`` all-gathers every rank's
tokens to every rank (dispatch) and reduce-scatters the MoE output back (combine). So its cost
on a reference system follows from NCCL all_gather and reduce_scatter timings of that system,
at the message sizes vLLM moves. What vLLM moves (vLLM 0.32.0 source):

* dispatch: ``prepare_finalize/naive_dp_ep.py:155-187`` quantizes first (``moe_kernel_quantize_
  input(..., is_scale_swizzled=False)``), then ``get_ep_group().dispatch(a1q, topk_weights,
  topk_ids, extra_tensors=[a1q_scale])``; ``device_communicators/all2all.py:128-161``
  (``AgRsAll2AllManager.dispatch``) all-gathers ``[hidden_states, topk_weights, topk_ids,
  *extra]`` along dim 0, and ``cuda_communicator.py:946-950`` issues one NCCL all_gather per
  tensor inside one ``group_start()/group_end()``. A per-tensor static scale (0-dim) is not
  gathered (``naive_dp_ep.py:50``). topk ids are int32 and weights fp32
  (``router/fused_topk_router.py:92-100``).
* combine: ``naive_dp_ep.py:233-245`` reduces over top-k first (``weight_and_reduce_impl``), then
  ``combine_into_output`` → ``all2all.py:193-208`` reduce-scatters the ``(world × T, H)`` output
  in the model dtype (bf16).

So, with T tokens per rank, N ranks, hidden H, top-k k and activation dtype d
(``autoselect.payload``: ``bf16 2H``, ``fp8 H``, ``fp8_block128 H + 4·ceil(H/128)``, ``nvfp4
ceil(H/2) + ceil(H/16)`` ...)::

    all_gather bytes     = N · T · (activation_bytes(d, H) + 4k + 4k)   # whole gathered output
    reduce_scatter bytes = N · T · 2H                                    # each rank's whole input
    round trip           = t_AG(all_gather bytes) + t_RS(reduce_scatter bytes)

in the units of nccl-tests, whose size is max(send, receive) bytes per rank (the gathered
output for all_gather, the full input for reduce_scatter) — the same quantities. The grouped
gathers are priced as one all_gather of their summed bytes (NCCL runs a group as one launch);
``t`` is read from the ``half`` rows at ``num_gpus = N``, linear in bytes between the two
neighbouring measured sizes. Below the smallest size (512 B) the smallest size's time is used
(latency floor); above the largest (512 MiB) the time grows at the largest size's bandwidth, up
to :data:`MAX_EXTRAPOLATION` times that size, and the row says so; further out there is no
number. The monolithic-kernel path (router logits gathered instead of ids and weights) and
NCCL symmetric-memory (NVLS) collectives, which vLLM uses when ``should_nccl_symm_mem_ag_rs()``,
are not what nccl-tests timed.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import NamedTuple

from autoselect.payload import COMBINE_DTYPE, activation_bytes, dispatch_bytes_per_token, quant_bytes

#: The vLLM source lines the formula follows (shown with every derived number).
VLLM_SOURCE = ("vLLM 0.32.0 vllm/model_executor/layers/fused_moe/prepare_finalize/naive_dp_ep.py:155-245, "
               "vllm/distributed/device_communicators/all2all.py:128-208, cuda_communicator.py:946-950")

FORMULA = ("all_gather bytes = N*T*(activation_bytes(dtype,H) + 8*top_k); reduce_scatter bytes = N*T*2*H; "
           "latency = t_all_gather + t_reduce_scatter (NCCL half rows at N GPUs, linear in bytes)")

#: How far past the largest measured message a time is extrapolated (at that size's bandwidth).
MAX_EXTRAPOLATION = 16.0


class AgrsMessages(NamedTuple):
    """The two collectives of one AGRS round trip, in nccl-tests' size convention (bytes)."""

    all_gather_bytes: int
    reduce_scatter_bytes: int
    all_gather_parts: dict  # {"hidden_states": bytes, "scales": ..., "topk_ids": ..., "topk_weights": ...}


def agrs_messages(*, hidden: int, top_k: int, dtype: str, world_size: int, tokens_per_rank: int) -> AgrsMessages:
    """The bytes vLLM's allgather_reducescatter moves for one MoE layer (see the module doc).

    :raises ValueError: an unknown dtype (``autoselect.payload``) or a non-positive count.
    """
    if min(hidden, top_k, world_size, tokens_per_rank) < 1:
        raise ValueError("hidden, top_k, world_size and tokens_per_rank must be positive")
    rows = world_size * tokens_per_rank
    values, scales = quant_bytes(dtype, hidden)
    parts = {"hidden_states": rows * values, "scales": rows * scales,
             "topk_ids": rows * 4 * top_k, "topk_weights": rows * 4 * top_k}
    gathered = rows * dispatch_bytes_per_token(dtype, hidden, top_k)
    assert gathered == sum(parts.values())
    return AgrsMessages(gathered, rows * activation_bytes(COMBINE_DTYPE, hidden), parts)


class Collective(NamedTuple):
    """Measured times of one NCCL collective on one system at one GPU count."""

    op: str
    num_gpus: int
    sizes: tuple[int, ...]  # message bytes, ascending
    times_us: tuple[float, ...]


class Reading(NamedTuple):
    """One time read off a :class:`Collective`."""

    time_us: float
    how: str  # "measured" | "interpolated" | "below smallest measured size" | "extrapolated ..."
    neighbours: tuple  # ((bytes, us), ...) the measured points used


def read_time(c: Collective, size: int) -> Reading | None:
    """The time of ``size`` bytes: linear between the neighbouring measured sizes.

    None when ``size`` is more than :data:`MAX_EXTRAPOLATION` times the largest measured size.
    """
    sizes, times = c.sizes, c.times_us
    i = bisect_left(sizes, size)
    if i < len(sizes) and sizes[i] == size:
        return Reading(times[i], "measured", ((sizes[i], times[i]),))
    if i == 0:
        return Reading(times[0], "below smallest measured size (its time used)", ((sizes[0], times[0]),))
    if i == len(sizes):
        top, t_top = sizes[-1], times[-1]
        if size > top * MAX_EXTRAPOLATION:
            return None
        return Reading(t_top * size / top, f"extrapolated beyond {top} B at that size's bandwidth",
                       ((top, t_top),))
    lo, hi = sizes[i - 1], sizes[i]
    t = times[i - 1] + (times[i] - times[i - 1]) * (size - lo) / (hi - lo)
    return Reading(t, "interpolated", ((lo, times[i - 1]), (hi, times[i])))


class AgrsEstimate(NamedTuple):
    """A derived AGRS round trip and everything it was derived from."""

    messages: AgrsMessages
    all_gather: Reading
    reduce_scatter: Reading

    @property
    def latency_us(self) -> float:
        return self.all_gather.time_us + self.reduce_scatter.time_us

    def derivation(self) -> dict:
        """JSON-ready account: formula, vLLM source lines, message sizes and NCCL points used."""
        return {
            "formula": FORMULA,
            "vllm_source": VLLM_SOURCE,
            "all_gather_bytes": self.messages.all_gather_bytes,
            "all_gather_parts": dict(self.messages.all_gather_parts),
            "reduce_scatter_bytes": self.messages.reduce_scatter_bytes,
            "all_gather_us": self.all_gather.time_us,
            "reduce_scatter_us": self.reduce_scatter.time_us,
            "all_gather_read": {"how": self.all_gather.how, "points": [list(p) for p in self.all_gather.neighbours]},
            "reduce_scatter_read": {"how": self.reduce_scatter.how,
                                    "points": [list(p) for p in self.reduce_scatter.neighbours]},
        }


def agrs_estimate(all_gather: Collective, reduce_scatter: Collective, *, hidden: int, top_k: int, dtype: str,
                  world_size: int, tokens_per_rank: int) -> AgrsEstimate | None:
    """The derived AGRS round trip, or None where a message lies too far past the measured sizes."""
    if all_gather.num_gpus != world_size or reduce_scatter.num_gpus != world_size:
        raise ValueError("the NCCL timings must be for world_size GPUs")
    m = agrs_messages(hidden=hidden, top_k=top_k, dtype=dtype, world_size=world_size,
                      tokens_per_rank=tokens_per_rank)
    ag = read_time(all_gather, m.all_gather_bytes)
    rs = read_time(reduce_scatter, m.reduce_scatter_bytes)
    if ag is None or rs is None:
        return None
    return AgrsEstimate(m, ag, rs)
