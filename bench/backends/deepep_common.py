"""What the two DeepEP adapters share: availability, the per-dtype wire table, shape plans,
the process-wide buffer, and the decoding of DeepEP's handles into token indices.

Everything here was read from DeepEP 2.1.0 (github.com/deepseek-ai/DeepEP, commit dd758ca,
2026-07-14; the pre-V2 API lives in ``deep_ep/buffers/legacy.py`` and is still exported as
``deep_ep.Buffer``) and from vLLM's ``vllm/distributed/device_communicators/all2all.py``
(``DeepEPHTAll2AllManager`` / ``DeepEPLLAll2AllManager``) and
``vllm/model_executor/layers/fused_moe/prepare_finalize/deepep_{ht,ll}.py``. Source lines are
quoted next to each rule; the adapters only call what is written here.

No function in this module imports ``deep_ep`` or needs a GPU, except
:func:`deep_ep_unavailable_reason` (imports it when CUDA is there) and the buffer cache
(called from ``setup``). The plans and the handle decoders are plain arithmetic on
integers / tensors, so they are tested on CPU.
"""

from __future__ import annotations

import atexit
import math
import os
from dataclasses import dataclass

from autoselect import rules
from bench.backends import Received
from bench.backends._flashinfer import has_module as _has_module

HIGH_THROUGHPUT = "deepep_high_throughput"
LOW_LATENCY = "deepep_low_latency"

INSTALL_HINT = "build it from github.com/deepseek-ai/DeepEP; not a vLLM dependency"


class DeepepCannotRun(ValueError):
    "DeepEP (as vLLM drives it) cannot run this benchmark shape or dtype."


# --------------------------------------------------------------------------------------
# What the adapters can carry, per wire dtype (data, not branches). The sweep hands each backend
# the dtype vLLM sends through it (autoselect.rules.wire: an nvfp4 or per-tensor fp8 model crosses
# DeepEP as bf16), so a point arrives here in its wire dtype.

_NOT_DRIVEN = "vLLM sends {dtype} through {backend} only on a path this adapter does not drive ({where})"

#: wire dtype -> None (the adapter carries it as vLLM sends it) or why not.
WIRE = {
    HIGH_THROUGHPUT: {
        "bf16": None,
        # vLLM quantizes block-fp8 before the dispatch (deepep_ht.py prepare_async:
        # "DeepEP only supports fp8 block scales so quantize before the dispatch"), and DeepEP
        # takes (fp8 e4m3 [T, H], fp32 [T, H/128]) (legacy.py Buffer.dispatch docstring).
        "fp8_block128": None,
        "fp16": ("DeepEP high-throughput combine is bf16-only: vLLM asserts a bf16 expert output "
                 "before Buffer.combine (deepep_ht.py _finalize); fp16 models cannot use it"),
        "mxfp8": _NOT_DRIVEN.format(
            dtype="mxfp8", backend=HIGH_THROUGHPUT,
            where="quantized before the dispatch with one UE8M0 byte per 32 values, which DeepEP's legacy "
                  "dispatch, built for fp32 per-128 scales, is not known to carry"),
        **{d: f"vLLM never sends {d} through {HIGH_THROUGHPUT} (it quantizes after the dispatch)"
           for d in ("fp8", "nvfp4", "mxfp4")},
    },
    LOW_LATENCY: {
        "bf16": None,
        # vLLM turns use_fp8 on for block-128 fp8 models (all2all_utils.py use_fp8_dispatch):
        # DeepEP takes bf16 and casts it to fp8 e4m3 + fp32 per-128 scales inside the dispatch
        # kernel (internode_ll.cu dispatch, calculate_fp8_scales). The adapter sends the
        # point's bf16 source rows (DispatchBatch.x_bf16), which that cast turns back into
        # exactly the point's fp8 bytes and scales (bench/synthetic.py fp8_block128_rows).
        "fp8_block128": None,
        "fp16": ("DeepEP low_latency_dispatch takes bf16 only (csrc/legacy/buffer.hpp asserts "
                 "x.scalar_type() == kBFloat16)"),
        "nvfp4": _NOT_DRIVEN.format(
            dtype="nvfp4", backend=LOW_LATENCY,
            where="VLLM_DEEPEPLL_NVFP4_DISPATCH=1: DeepEP's use_nvfp4 dispatch on its hybrid-ep branch"),
        **{d: f"vLLM never sends {d} through {LOW_LATENCY} (it quantizes after the dispatch)"
           for d in ("fp8", "mxfp8", "mxfp4")},
    },
}

# --------------------------------------------------------------------------------------
# Limits read from the source. The values are autoselect.rules' DeepEP rows (one table for
# `check` / `recommend` and the adapters; the source lines are cited there).

#: Intranode (NVLink) high-throughput kernels are instantiated for these rank counts only
#: (csrc/kernels/legacy/launch.cuh SWITCH_RANKS: 2, 4, 8; anything else asserts). More than 8
#: ranks use the internode RDMA path, which a single-node benchmark does not run.
HT_INTRANODE_WORLD_SIZES = tuple(sorted(n for n in rules.DEEPEP_HT_WORLD_SIZES.value
                                        if n <= rules.DEEPEP_NVL_PEERS))
#: notify_dispatch runs one thread per local expert (intranode.cu: num_experts / num_ranks <= 128).
HT_MAX_LOCAL_EXPERTS = rules.DEEPEP_HT_MAX_LOCAL_EXPERTS.value
#: intranode.cu / internode.cu dispatch and combine: EP_DEVICE_ASSERT(num_topk <= 32).
HT_MAX_TOP_K = rules.BACKENDS[HIGH_THROUGHPUT].top_k_max
#: vLLM pads the layer's hidden size so a bf16 row is a multiple of 32 int4 = 512 bytes
#: (deepep_ht.py maybe_roundup_layer_hidden_size, called with the activation dtype).
HT_ROW_ATOM_BYTES = rules.DEEPEP_HT_ROW_BYTES.value.pad_bf16_bytes
#: SM90 builds copy each received row through shared memory in two halves
#: (intranode.cu dispatch: half_hidden_bytes + 8 <= kNumTMABytesPerWarp = 8192).
HT_TMA_BYTES_PER_WARP = rules.DEEPEP_HT_ROW_BYTES.value.max_bytes["sm90"] // 2 + 8

#: Hidden sizes the low-latency kernels are compiled for (launch.cuh SWITCH_HIDDEN; vLLM's
#: deepep_ll.py SUPPORTED_HIDDEN_SIZES), in order: vLLM pads to the next one.
LL_HIDDEN_SIZES = rules.BACKENDS[LOW_LATENCY].hidden_sizes
#: internode_ll.cu dispatch and combine: kNumMaxTopK = 11.
LL_MAX_TOP_K = rules.BACKENDS[LOW_LATENCY].top_k_max
#: vLLM's num_max_dispatch_tokens_per_rank when nothing sets it: 256, from VLLM_MOE_DP_CHUNK_SIZE up
#: to 0.19.x and from the lowered --max-num-batched-tokens after (autoselect.rules.DISPATCH_BUDGETS).
LL_VLLM_MAX_TOKENS = rules.default_dispatch_tokens(LOW_LATENCY)
#: NVSHMEM_QP_DEPTH default set by Buffer.__init__; low_latency_dispatch asserts
#: nvshmem_qp_depth >= (num_max_dispatch_tokens_per_rank + 1) * 2 (legacy.py).
LL_DEFAULT_QP_DEPTH = rules.DEEPEP_LL_TOKENS_PER_RANK.value.default
#: How vLLM asks low-latency fp8 dispatch for its scales, by the GPU's compute-capability major:
#: ``(round_scale, use_ue8m0)``. deepep_ll.py passes ``round_scale=use_ue8m0=self.use_ue8m0_dispatch``,
#: which post_init_setup turns on when the experts ``supports_packed_ue8m0_act_scales()``: DeepGEMM's
#: batched experts return ``is_deep_gemm_e8m0_used() and is_device_capability_family(100)``, every
#: other LL expert False. So SM90 gets fp32 scales ``amax/448``; SM100 (with DeepGEMM, vLLM's choice
#: for block-fp8 there) power-of-two scales packed as UE8M0 bytes, four per int32
#: (buffer.hpp low_latency_dispatch; internode_ll.cu extract_required_scale_format). Other
#: architectures: fp32 scales.
LL_FP8_SCALE_FORMAT = {9: (False, False), 10: (True, True)}


def vllm_buffer_bytes() -> int:
    """vLLM's NVLink buffer size for both DeepEP managers: ``VLLM_DEEPEP_BUFFER_SIZE_MB`` MiB (1024)."""
    return int(os.environ.get("VLLM_DEEPEP_BUFFER_SIZE_MB", "1024")) * 1024 * 1024


def _check_common(backend: str, dtype: str, top_k: int, experts: int, world_size: int, max_top_k: int) -> None:
    reason = WIRE[backend].get(dtype, f"unknown activation dtype {dtype!r}")
    if reason:
        raise DeepepCannotRun(f"{backend} cannot carry {dtype} payloads: {reason}")
    if experts % world_size:
        raise DeepepCannotRun(f"{backend} needs the {experts} experts to divide evenly over {world_size} "
                              "ranks (DeepEP asserts num_experts % num_ranks == 0)")
    if top_k > max_top_k:
        raise DeepepCannotRun(f"{backend} supports top_k <= {max_top_k}, not {top_k} "
                              "(DeepEP kernel limit)")


@dataclass(frozen=True)
class HtPlan:
    """How vLLM would drive DeepEP high-throughput for one shape.

    ``hidden``: the padded hidden size (a bf16 row a multiple of 512 bytes); ``fp8``: block-fp8
    payload ``(fp8 [T, hidden], fp32 [T, hidden/128])`` instead of bf16 ``[T, hidden]``.
    """

    hidden: int
    fp8: bool

    @property
    def row_bytes(self) -> int:
        """Bytes of one dispatched activation row (values only)."""
        return self.hidden if self.fp8 else 2 * self.hidden

    @property
    def scales(self) -> int:
        """fp32 scales per row (block-fp8 only)."""
        return self.hidden // 128 if self.fp8 else 0


def ht_plan(dtype: str, hidden: int, top_k: int, experts: int, world_size: int, *, sm90_tma: bool = True) -> HtPlan:
    """The :class:`HtPlan` for a shape, or :class:`DeepepCannotRun` with the source's reason.

    :param sm90_tma: the DeepEP build has SM90 features (``Buffer.is_sm90_compiled()``), whose
        dispatch copies each row in two shared-memory halves of at most 8184 bytes.
    """
    _check_common(HIGH_THROUGHPUT, dtype, top_k, experts, world_size, HT_MAX_TOP_K)
    local = experts // world_size
    if local > HT_MAX_LOCAL_EXPERTS:
        raise DeepepCannotRun(f"{HIGH_THROUGHPUT} intranode dispatch handles at most {HT_MAX_LOCAL_EXPERTS} "
                              f"experts per rank, not {local} (intranode.cu notify_dispatch asserts "
                              "num_experts / num_ranks <= 128); use more ranks")
    fp8 = dtype == "fp8_block128"
    if fp8 and hidden % 128:
        raise DeepepCannotRun(f"{HIGH_THROUGHPUT} fp8 dispatch takes one fp32 scale per 128 values: "
                              f"hidden {hidden} is not a multiple of 128")
    padded = math.ceil(2 * hidden / HT_ROW_ATOM_BYTES) * HT_ROW_ATOM_BYTES // 2
    plan = HtPlan(padded, fp8)
    if sm90_tma and plan.row_bytes // 2 + 8 > HT_TMA_BYTES_PER_WARP:
        raise DeepepCannotRun(
            f"{HIGH_THROUGHPUT} on an SM90 build copies each row in two halves of at most "
            f"{HT_TMA_BYTES_PER_WARP - 8} bytes (intranode.cu dispatch: half_hidden_bytes + 8 <= "
            f"kNumTMABytesPerWarp); a {dtype} row of hidden {padded} is {plan.row_bytes} bytes")
    return plan


@dataclass(frozen=True)
class LlPlan:
    """How vLLM would drive DeepEP low-latency for one shape.

    ``hidden``: padded to the next compiled size; ``max_tokens``: DeepEP's
    ``num_max_dispatch_tokens_per_rank`` (received slots per (local expert, source rank));
    ``fp8``: ``use_fp8=True`` (bf16 in, fp8 e4m3 + one scale per 128 values out);
    ``round_scale`` / ``ue8m0``: power-of-two scales, returned as packed UE8M0 bytes.
    """

    hidden: int
    max_tokens: int
    fp8: bool = False
    round_scale: bool = False
    ue8m0: bool = False

    @property
    def scales(self) -> int:
        """Scales per received row (fp8 only): one per 128 padded values."""
        return self.hidden // 128 if self.fp8 else 0


def ll_plan(dtype: str, hidden: int, top_k: int, experts: int, world_size: int, tokens_per_rank: int,
            *, qp_depth: int = LL_DEFAULT_QP_DEPTH, gpu_major: int = 9) -> LlPlan:
    """The :class:`LlPlan` for a shape, or :class:`DeepepCannotRun` with the source's reason.

    ``max_tokens`` is vLLM's 256, or the tokens per rank when larger (what
    ``--max-num-batched-tokens`` would have to be), rounded up only as far as the
    received-slot count ``ranks * max_tokens`` must be a multiple of 4 (buffer.hpp:1526
    low_latency_dispatch): unchanged at 4 or 8 ranks, even at 2, a multiple of 4 at odd sizes.
    ``fp8_block128`` dispatches with ``use_fp8=True`` and the scale format vLLM picks on a GPU
    of compute capability ``gpu_major`` (:data:`LL_FP8_SCALE_FORMAT`); every compiled hidden
    size is a multiple of 512, as buffer.hpp asserts for fp8.
    """
    _check_common(LOW_LATENCY, dtype, top_k, experts, world_size, LL_MAX_TOP_K)
    padded = next((s for s in LL_HIDDEN_SIZES if s >= hidden), None)
    if padded is None:
        raise DeepepCannotRun(f"{LOW_LATENCY} kernels are compiled for hidden sizes up to "
                              f"{LL_HIDDEN_SIZES[-1]}, not {hidden} (launch.cuh SWITCH_HIDDEN)")
    step = 4 // math.gcd(4, world_size)  # the smallest m with world_size * m % 4 == 0
    max_tokens = math.ceil(max(LL_VLLM_MAX_TOKENS, tokens_per_rank) / step) * step
    if (max_tokens + 1) * 2 > qp_depth:
        raise DeepepCannotRun(
            f"{LOW_LATENCY} dispatches at most {qp_depth // 2 - 1} tokens per rank with "
            f"NVSHMEM_QP_DEPTH={qp_depth} (legacy.py asserts qp_depth >= (max_tokens + 1) * 2), "
            f"not {tokens_per_rank}; set NVSHMEM_QP_DEPTH to at least {(max_tokens + 1) * 2}")
    fp8 = dtype == "fp8_block128"
    round_scale, ue8m0 = LL_FP8_SCALE_FORMAT.get(gpu_major, (False, False)) if fp8 else (False, False)
    return LlPlan(padded, max_tokens, fp8=fp8, round_scale=round_scale, ue8m0=ue8m0)


def ll_received_scale_bytes(scales, plan: LlPlan):
    """DeepEP's low-latency fp8 scales as fp32 bytes per slot: ``uint8 [local * slots, 4 * hidden/128]``.

    DeepEP returns ``[local experts, slots, hidden/128]`` fp32 (or, with UE8M0,
    ``[local experts, slots, hidden/512]`` int32 packing four exponent bytes, scale ``j`` in byte
    ``j % 4`` of int ``j // 4``), both transposed views of column-major storage (buffer.hpp: the
    tensor is allocated ``[local, packs, slots]`` and ``transpose(1, 2)``-ed for TMA). A UE8M0 byte
    ``e`` is the exponent field of the fp32 scale ``2**(e - 127)`` (internode_ll.cu
    extract_required_scale_format: ``bits >> 23``), so ``e << 23`` is that scale's fp32 bit pattern.
    """
    import torch

    local, slots = scales.shape[0], scales.shape[1]
    raw = scales.contiguous().view(torch.uint8).reshape(local * slots, -1)
    if not plan.ue8m0:
        return raw
    return (raw.to(torch.int32) << 23).view(torch.uint8).reshape(local * slots, -1)


# --------------------------------------------------------------------------------------
# Availability.


def deep_ep_unavailable_reason(ctx) -> str | None:
    """No CUDA, deep_ep missing, or deep_ep failing to import (its import JIT-initializes).

    Importing ``deep_ep`` checks the NCCL library and sets up its JIT compiler
    (``deep_ep/__init__.py``); a failure there is a reason, not a crash.
    """
    if ctx.device != "cuda":
        return "needs CUDA GPUs (DeepEP kernels); this run is on CPU"
    if not _has_module("deep_ep"):
        return f"deep_ep not installed ({INSTALL_HINT})"
    try:
        import deep_ep  # noqa: F401
    except Exception as e:  # an install that cannot load is unavailable, with what it said
        return f"deep_ep failed to import: {type(e).__name__}: {e}".strip()
    return None


def topk_index_dtype(deep_ep):
    """The build's top-k index dtype (``deep_ep.topk_idx_t``, int64 unless built with 32 bits)."""
    import torch

    return getattr(deep_ep, "topk_idx_t", torch.int64)


# --------------------------------------------------------------------------------------
# One buffer per process, like vLLM's handle cache.

_CACHE: dict = {"key": None, "buffer": None, "hooked": False}


def shared_buffer(key, make):
    """The process's DeepEP ``Buffer`` for ``key``: reused while the key is the same.

    vLLM keeps one Buffer per set of constructor arguments for the life of the process
    (``all2all.py``: ``handle_cache.get_or_create(buffer_kwargs, deep_ep.Buffer)``); the adapters do
    the same, so a token sweep builds the buffer (and, in low-latency mode, NVSHMEM) once. A
    different key destroys the old buffer first (collective: every rank sets up the same
    points); the last one is destroyed at interpreter exit.
    """
    if _CACHE["key"] == key and _CACHE["buffer"] is not None:
        return _CACHE["buffer"]
    release_buffer()
    buffer = make()
    _CACHE.update(key=key, buffer=buffer)
    if not _CACHE["hooked"]:
        atexit.register(release_buffer)
        _CACHE["hooked"] = True
    return buffer


def release_buffer() -> None:
    """Destroy the cached buffer (``explicitly_destroy=True`` buffers need ``destroy()``)."""
    buffer = _CACHE["buffer"]
    _CACHE.update(key=None, buffer=None)
    if buffer is not None and getattr(buffer, "explicitly_destroy", False) and getattr(buffer, "runtime", None) is not None:
        buffer.destroy()


# --------------------------------------------------------------------------------------
# Handles -> token indices (plain tensor arithmetic, verified against DeepEP's own tests).


def ht_token_index(rank_prefix_matrix, recv_src_idx, rank: int, tokens_per_rank: int):
    """Global token ids of the rows a high-throughput dispatch delivered to ``rank``.

    Rows arrive grouped by source rank: ``rank_prefix_matrix[i][rank]`` is the end row of
    source ``i`` (tests/legacy/test_intranode.py ``check_data``), and ``recv_src_idx[row]``
    is the row's token index on its source rank (intranode.cu dispatch stores ``token_idx``
    per slot). Global id = source rank x tokens per rank + source index.
    """
    import torch

    ends = rank_prefix_matrix[:, rank].to(torch.int64)
    rows = torch.arange(recv_src_idx.shape[0], device=recv_src_idx.device)
    src_rank = torch.searchsorted(ends, rows, right=True)
    return src_rank * tokens_per_rank + recv_src_idx.to(torch.int64)


def ll_slot_tokens(layout_range, src_info, tokens_per_rank: int):
    """``(token_index, valid)`` per received slot of a low-latency dispatch, ``[local, slots]`` each.

    ``layout_range[e][j]`` packs (count, begin) of the slots local expert ``e`` got from
    source rank ``j``: count in the low 32 bits, begin in the high 32 bits (internode_ll.cu
    ``pack2<int, int64_t>(num_recv_tokens, recv_token_begin_idx)``; test_low_latency.py
    unpacks ``begin = range >> 32``, ``count = range & 0xFFFFFFFF``). ``src_info[e][s]`` is
    the slot's token index on its source rank (the message header, ``token_idx``). Slots
    outside every range carry nothing.
    """
    import torch

    begin = (layout_range >> 32).to(torch.int64)
    count = (layout_range & 0xFFFFFFFF).to(torch.int64)
    slots = src_info.shape[1]
    s = torch.arange(slots, device=src_info.device)
    inside = (s >= begin[:, :, None]) & (s < (begin + count)[:, :, None])  # [local, ranks, slots]
    valid = inside.any(dim=1)
    src_rank = inside.to(torch.int8).argmax(dim=1)
    token = torch.where(valid, src_rank * tokens_per_rank + src_info.to(torch.int64), -1)
    return token, valid


class LazyReceived(Received):
    """A :class:`Received` whose fields are built from the dispatch's handle on first access.

    Mapping DeepEP's rows back to token ids is the harness's bookkeeping, not the backend's
    work (vLLM never does it): built eagerly it would add several small kernels to every timed
    dispatch. The gate reads the fields right after the dispatch that made them; the timed
    loop never does, so the timing covers DeepEP's own calls only. The tensors the builder
    reads are fresh per dispatch (DeepEP allocates them per call), so a later dispatch does
    not change them.
    """

    def __init__(self, build):  # noqa: D107 - fields come from build()
        self._build = build
        self._fields = None

    def _field(self, name):
        if self._fields is None:
            self._fields = self._build()
            self._build = None
        return self._fields.get(name)

    x = property(lambda self: self._field("x"))
    x_sf = property(lambda self: self._field("x_sf"))
    topk_ids = property(lambda self: self._field("topk_ids"))
    topk_weights = property(lambda self: self._field("topk_weights"))
    token_index = property(lambda self: self._field("token_index"))
    valid = property(lambda self: self._field("valid"))
    expert = property(lambda self: self._field("expert"))


def per_source(cache: dict, key: str, source, build):
    """``build()`` once per ``source`` object: the harness's layout adaptations, kept out of the timing.

    vLLM's activations already have the padded hidden size and int64 top-k ids; the
    harness's batch does not. The adapters convert the batch (and the expert outputs) the
    first time they see a given tensor and reuse the result while the harness passes the same
    tensor again, which it does for every timed call of a point.
    """
    hit = cache.get(key)
    if hit is not None and hit[0] is source:
        return hit[1]
    value = build()
    cache[key] = (source, value)
    return value


def widen(rows, width: int):
    """``rows`` with zero columns appended up to ``width`` (itself when already that wide)."""
    import torch

    if rows.shape[1] == width:
        return rows
    out = torch.zeros((rows.shape[0], width), dtype=rows.dtype, device=rows.device)
    out[:, : rows.shape[1]] = rows
    return out
