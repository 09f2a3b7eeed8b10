"""allgather_reducescatter derived from NCCL collective timings (pure Python).

vLLM's default backend is no all2all kernel: ``AgRsAll2AllManager`` all-gathers every rank's
tokens to every rank (dispatch) and reduce-scatters the MoE output back (combine). Its cost on a
reference system follows from NCCL all_gather and reduce_scatter timings of that system, at the
message sizes vLLM moves, in the NCCL calls vLLM issues: both are per-release facts, read from
vLLM's source into :mod:`autoselect.rules.agrs_collectives` (which tensors, how many calls,
grouped or not) and :mod:`autoselect.rules.wire` (the activation dtype crosses quantized).

With T tokens per rank, N ranks, hidden H, top-k k and activation dtype d, dispatch gathers
``hidden_states`` (``N·T·values(d, H)`` bytes), ``scales`` (``N·T·scales(d, H)``, only when d has
them), ``topk_weights`` and ``topk_ids`` (``N·T·4k`` each), one ncclAllGather per tensor inside one
NCCL group; combine reduce-scatters ``N·T·2H`` bf16 bytes (``autoselect.payload``). Sizes are in
the units of nccl-tests, whose size is max(send, receive) bytes per rank (the gathered output for
all_gather, the full input for reduce_scatter). Each call is priced from the ``half`` rows at
``num_gpus = N``, linear in bytes between the two neighbouring measured sizes, each with its own
latency floor: below the smallest size (512 B) the smallest size's time is used; above the
largest (512 MiB) the time grows at the largest size's bandwidth, up to :data:`MAX_EXTRAPOLATION`
times that size; further out there is no number.

A grouped set of calls shares one launch (NCCL runs a group's calls in a single launch), so the
dispatch costs one fused all_gather of the summed bytes plus a per-tensor term for each gathered
tensor beyond the first: between nothing and what a separately launched small gather adds in vLLM
(:data:`autoselect.reference.footing.EXTRA_TENSOR`, in the all_gather's latency floor, its
smallest measured size's time). That range is the derived value on the nccl-tests footing:

    lower   = t_AG(sum of the gathered bytes) + t_RS                     # one launch per group
    upper   = lower + (tensors - 1) * EXTRA_TENSOR_high * t_AG(floor)      # each extra tensor at most
    central = (lower + upper) / 2

What vLLM's layer pays over nccl-tests' pipelined loop per NCCL launch (two: the dispatch's group
and the reduce_scatter) is the footing's correction (:mod:`autoselect.reference.footing`), not the
derivation's. Each call's own nccl-tests time is kept in the derivation (``calls``) as what it
would cost launched alone.

Not priced (said in every derivation): unequal token counts per rank (vLLM then issues one
ncclBroadcast / ncclReduce per rank, which the published tables do not time), NCCL
symmetric-memory collectives (``VLLM_USE_NCCL_SYMM_MEM=1``), the LoRA mapping tensor, the
quantization and the combine input's memory pass around the collectives.

**Bound.** Where the system has no NCCL rows at N GPUs (the GB200 NVL72 rack beyond one tray),
:func:`agrs_bound` gives a lower bound: the fused round trip read from the largest GPU count that
has rows (``n``), at the message that puts the same bytes on each rank
(``size · (N-1)/N · n/(n-1)``): moving as many bytes per rank through more ranks, across trays,
cannot be faster. It is labelled a bound; it can show that a published backend is faster than the
default, never that the default is faster.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import NamedTuple

from autoselect.payload import COMBINE_DTYPE, activation_bytes, dispatch_bytes_per_token, dispatch_tensor_bytes
from autoselect.reference.footing import EXTRA_TENSOR, EXTRA_TENSOR_EVIDENCE
from autoselect.rules.agrs_collectives import ALL_GATHER, AgrsCollectives, Call, agrs_calls

FORMULA = ("dispatch: one ncclAllGather per gathered tensor (hidden_states, scales, topk_weights, topk_ids: "
           "N*T*bytes per token each) in one NCCL group, one launch; combine: one ncclReduceScatter of N*T*2*H bytes; "
           "lower = t_AG(summed bytes) + t_RS, upper = lower + (tensors - 1) * {high:g} * t_AG(floor), "
           "central = (lower + upper) / 2 (NCCL half rows at N GPUs, linear in bytes; nccl-tests footing)"
           ).format(high=EXTRA_TENSOR[1])
BOUND_FORMULA = ("lower bound: t_AG(S_AG * (N-1)/N * n/(n-1)) + t_RS(S_RS * (N-1)/N * n/(n-1)) read from the NCCL "
                 "rows at n GPUs (the same bytes on each rank through fewer ranks); fused, one floor")
#: Why the range is a range (shown with every derived number).
RANGE_RULE = ("the group's calls run in one NCCL launch; each gathered tensor beyond the first adds between "
              "nothing and {high:g} of the all_gather's latency floor (what a separately launched small gather adds "
              "in vLLM); central = midpoint").format(high=EXTRA_TENSOR[1])

#: How far past the largest measured message a time is extrapolated (at that size's bandwidth).
MAX_EXTRAPOLATION = 16.0


class AgrsMessages(NamedTuple):
    """The two collectives of one AGRS round trip, in nccl-tests' size convention (bytes)."""

    all_gather_bytes: int
    reduce_scatter_bytes: int
    all_gather_parts: dict  # {"hidden_states": bytes, "scales": ..., "topk_weights": ..., "topk_ids": ...}


def agrs_messages(*, hidden: int, top_k: int, dtype: str, world_size: int, tokens_per_rank: int) -> AgrsMessages:
    """The bytes vLLM's allgather_reducescatter moves for one MoE layer (see the module doc).

    :raises ValueError: an unknown dtype (``autoselect.payload``) or a non-positive count.
    """
    if min(hidden, top_k, world_size, tokens_per_rank) < 1:
        raise ValueError("hidden, top_k, world_size and tokens_per_rank must be positive")
    rows = world_size * tokens_per_rank
    parts = {name: rows * b for name, b in dispatch_tensor_bytes(dtype, hidden, top_k).items()}
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


class PricedCall(NamedTuple):
    """One NCCL call of the round trip, priced on its own (with its own latency floor)."""

    call: Call
    bytes: int
    reading: Reading

    def to_dict(self) -> dict:
        return {"phase": self.call.phase, "op": self.call.op, "tensor": self.call.tensor, "count": self.call.count,
                "bytes": self.bytes, "us": self.reading.time_us, "how": self.reading.how,
                "points": [list(p) for p in self.reading.neighbours]}


class AgrsEstimate(NamedTuple):
    """A derived AGRS round trip (a range, or a lower bound) and everything it was derived from.

    ``all_gather`` / ``reduce_scatter``: the fused readings (the lower end); ``floor``: the
    all_gather's latency floor (its smallest measured size), the unit of the per-tensor term;
    ``calls``: every call priced alone (empty for a bound); ``bound``: the NCCL rows are for
    ``rows_gpus`` GPUs, not the deployment's, and the value is a lower bound only.
    """

    messages: AgrsMessages
    all_gather: Reading
    reduce_scatter: Reading
    calls: tuple[PricedCall, ...]
    collectives: AgrsCollectives
    read: bool  # the collectives row was read for the target release
    rows_gpus: int
    bound: bool = False
    floor: Reading | None = None

    @property
    def extra_tensors(self) -> int:
        """Gathered tensors beyond the first (each adds the per-tensor term)."""
        return max(0, sum(p.call.count for p in self.calls if p.call.phase == "dispatch") - 1)

    @property
    def launches(self) -> int:
        """NCCL launches of the round trip: one for the dispatch's group, one per combine call."""
        if self.bound or not self.collectives.grouped:
            return 2 if self.bound else len(self.calls)
        return 1 + sum(p.call.count for p in self.calls if p.call.phase == "combine")

    @property
    def extra_us(self) -> tuple[float, float]:
        """The per-tensor term of the whole dispatch: (least, most)."""
        unit = self.floor.time_us if self.floor is not None else 0.0
        return (self.extra_tensors * EXTRA_TENSOR[0] * unit, self.extra_tensors * EXTRA_TENSOR[1] * unit)

    @property
    def lower_us(self) -> float:
        """One launch per group: one all_gather of the summed bytes, then the reduce_scatter."""
        return self.all_gather.time_us + self.reduce_scatter.time_us + (0.0 if self.bound else self.extra_us[0])

    @property
    def upper_us(self) -> float | None:
        """Each extra tensor at its most (None for a bound: it has no upper end)."""
        if self.bound:
            return None
        return self.all_gather.time_us + self.reduce_scatter.time_us + self.extra_us[1]

    @property
    def latency_us(self) -> float:
        """The central value: the middle of the range (a bound: the bound itself)."""
        upper = self.upper_us
        return self.lower_us if upper is None else (self.lower_us + upper) / 2

    @property
    def dispatch_us(self) -> float:
        """The dispatch's share of the central value."""
        if self.bound:
            return self.all_gather.time_us
        return self.latency_us - self.reduce_scatter.time_us  # the fused gather and the middle of the per-tensor term

    def derivation(self) -> dict:
        """JSON-ready account: formula, vLLM source lines, message sizes, the calls and the NCCL points read."""
        row = self.collectives
        out = {
            "formula": BOUND_FORMULA if self.bound else FORMULA,
            "vllm_source": "; ".join(f"{k}: {v}" for k, v in row.sources.items()),
            "collectives_read_for_release": self.read,
            "all_gather_bytes": self.messages.all_gather_bytes,
            "all_gather_parts": dict(self.messages.all_gather_parts),
            "reduce_scatter_bytes": self.messages.reduce_scatter_bytes,
            "all_gather_us": self.all_gather.time_us,
            "reduce_scatter_us": self.reduce_scatter.time_us,
            "all_gather_read": {"how": self.all_gather.how, "points": [list(p) for p in self.all_gather.neighbours]},
            "reduce_scatter_read": {"how": self.reduce_scatter.how,
                                    "points": [list(p) for p in self.reduce_scatter.neighbours]},
            "calls": [p.to_dict() for p in self.calls],
            "launches": self.launches,
            "extra_tensors": self.extra_tensors,
            "floor_us": self.floor.time_us if self.floor is not None else None,
            "extra_tensor_floors": list(EXTRA_TENSOR),
            "extra_tensor_evidence": list(EXTRA_TENSOR_EVIDENCE),
            "lower_us": self.lower_us,
            "upper_us": self.upper_us,
            "central_us": self.latency_us,
            "range_rule": RANGE_RULE,
            "footing": "nccl-tests",
            "not_priced": list(row.not_modelled),
        }
        if self.bound:
            out["bound"] = "lower"
            out["nccl_rows_gpus"] = self.rows_gpus
        return out


def _check(all_gather: Collective, reduce_scatter: Collective, num_gpus: int) -> None:
    if all_gather.num_gpus != num_gpus or reduce_scatter.num_gpus != num_gpus:
        raise ValueError(f"the NCCL timings must be for {num_gpus} GPUs")


def agrs_estimate(all_gather: Collective, reduce_scatter: Collective, *, hidden: int, top_k: int, dtype: str,
                  world_size: int, tokens_per_rank: int, collectives: AgrsCollectives,
                  read: bool = True) -> AgrsEstimate | None:
    """The derived AGRS round trip (a range, see the module doc), or None where a message lies
    too far past the measured sizes. ``collectives`` is the release's
    :data:`~autoselect.rules.agrs_collectives.AGRS_COLLECTIVES` row (equal token counts per rank)."""
    _check(all_gather, reduce_scatter, world_size)
    m = agrs_messages(hidden=hidden, top_k=top_k, dtype=dtype, world_size=world_size,
                      tokens_per_rank=tokens_per_rank)
    ag = read_time(all_gather, m.all_gather_bytes)
    rs = read_time(reduce_scatter, m.reduce_scatter_bytes)
    if ag is None or rs is None:
        return None
    priced = []
    for call in agrs_calls(collectives, scales=m.all_gather_parts["scales"] > 0, world_size=world_size):
        size = m.all_gather_parts[call.tensor] if call.phase == "dispatch" else m.reduce_scatter_bytes
        table = all_gather if call.op == ALL_GATHER else reduce_scatter
        reading = rs if call.phase == "combine" else read_time(table, size)
        if reading is None:
            return None
        priced.append(PricedCall(call, size, reading))
    floor = read_time(all_gather, all_gather.sizes[0])
    return AgrsEstimate(m, ag, rs, tuple(priced), collectives, read, world_size, floor=floor)


def agrs_bound(all_gather: Collective, reduce_scatter: Collective, *, hidden: int, top_k: int, dtype: str,
               world_size: int, tokens_per_rank: int, collectives: AgrsCollectives,
               read: bool = True) -> AgrsEstimate | None:
    """A lower bound of the AGRS round trip at ``world_size`` ranks from NCCL rows at fewer GPUs
    (see the module doc); None where a message lies too far past the measured sizes."""
    n = all_gather.num_gpus
    _check(all_gather, reduce_scatter, n)
    if not 2 <= n < world_size:
        raise ValueError(f"a bound needs rows at 2..{world_size - 1} GPUs, got {n}")
    m = agrs_messages(hidden=hidden, top_k=top_k, dtype=dtype, world_size=world_size,
                      tokens_per_rank=tokens_per_rank)
    scale = (world_size - 1) / world_size * n / (n - 1)
    ag = read_time(all_gather, round(m.all_gather_bytes * scale))
    rs = read_time(reduce_scatter, round(m.reduce_scatter_bytes * scale))
    if ag is None or rs is None:
        return None
    return AgrsEstimate(m, ag, rs, (), collectives, read, n, bound=True)
