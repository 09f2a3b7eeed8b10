"""DeepEP's low-latency kernels, driven the way vLLM drives them (``deepep_low_latency``)."""

from __future__ import annotations

import os

from autoselect import rules
from bench.backends import Backend
from bench.backends import deepep_common as common


class DeepepLowLatency(Backend):
    """Based on DeepEP's ``low_latency_dispatch`` / ``low_latency_combine``: per-expert slots, weights applied in combine.

    As vLLM does (``DeepEPLLAll2AllManager`` and ``prepare_finalize/deepep_ll.py``): one
    ``Buffer(group, num_nvl_bytes=VLLM_DEEPEP_BUFFER_SIZE_MB MiB,
    num_rdma_bytes=Buffer.get_low_latency_rdma_size_hint(max_tokens, hidden, ranks, experts),
    low_latency_mode=True, num_qps_per_rank=local experts, allow_nvlink_for_low_latency_mode=True,
    allow_mnnvl=False, explicitly_destroy=True)`` per process, ``max_tokens`` being vLLM's 256
    (or the tokens per rank when larger); per call ``low_latency_dispatch(x bf16 [T, H],
    topk_idx int64, max_tokens, experts, use_fp8=, round_scale=, use_ue8m0=, async_finish=False,
    return_recv_hook=True)`` then the receive hook, and ``low_latency_combine(expert_x, topk_idx,
    topk_weights, handle, zero_copy=False, out=...)``. Hidden sizes are padded to the next
    compiled size.

    bf16 points send their bytes as bf16 (``use_fp8=False``). ``fp8_block128`` points
    send the batch's bf16 source rows (``batch.x_bf16``) with ``use_fp8=True``, as vLLM does
    for block-fp8 models: DeepEP casts them to fp8 e4m3 with one scale per 128 values inside
    the dispatch kernel, fp32 ``amax/448`` scales on SM90, power-of-two scales packed as UE8M0
    on SM100 (vLLM's DeepGEMM experts; :data:`deepep_common.LL_FP8_SCALE_FORMAT`). The
    point's fp8 rows are built so that cast returns exactly their bytes and scales, so the
    gate checks the received fp8 values and (unpacked) scales bit-exactly.

    Dispatch returns ``recv_x [local experts, ranks * max_tokens, H]``: each (token, local
    expert) pair lands in one slot; the handle's layout ranges and source info name each
    slot's token (:func:`deepep_common.ll_slot_tokens`), so no token-index payload travels.
    The harness's experts return one unweighted row per slot and the combine kernel applies
    the routing weights. No host synchronization: one dispatch + combine is captured in a
    CUDA graph (vLLM captures this backend too).
    """

    name = common.LOW_LATENCY
    supports_cuda_graph = True

    def unavailable_reason(self, ctx):
        """No CUDA, a rank count DeepEP's buffer refuses, or deep_ep missing or broken (in that order)."""
        if ctx.device == "cuda" and ctx.world_size >= 8 and ctx.world_size % 8:
            return (f"DeepEP buffers take fewer than 8 ranks or a multiple of 8, not {ctx.world_size} "
                    "(csrc/legacy/buffer.hpp asserts num_ranks < 8 or num_ranks % 8 == 0)")
        return common.deep_ep_unavailable_reason(ctx)

    def setup(self, ctx, point):
        """Plan the shape, reuse or build the process's low-latency buffer, allocate the output."""
        import deep_ep
        import torch

        w = point
        qp_depth = rules.DEEPEP_LL_TOKENS_PER_RANK.value.depth(os.environ)
        gpu_major = torch.cuda.get_device_capability(ctx.torch_device)[0]
        self.plan = common.ll_plan(w.dtype, w.hidden, w.top_k, w.experts, ctx.world_size,
                                   w.tokens_per_rank, qp_depth=qp_depth, gpu_major=gpu_major)
        hidden, max_tokens = self.plan.hidden, self.plan.max_tokens
        local = w.experts // ctx.world_size
        rdma = deep_ep.Buffer.get_low_latency_rdma_size_hint(max_tokens, hidden, ctx.world_size, w.experts)
        kwargs = dict(num_nvl_bytes=common.vllm_buffer_bytes(), num_rdma_bytes=rdma, low_latency_mode=True,
                      num_qps_per_rank=local, allow_nvlink_for_low_latency_mode=True, allow_mnnvl=False,
                      explicitly_destroy=True)
        self.buffer = common.shared_buffer(
            (self.name, ctx.world_size, hidden, max_tokens, w.experts, tuple(sorted(kwargs.items()))),
            lambda: deep_ep.Buffer(ctx.cpu_group, **kwargs))
        self.ctx, self.w, self.local = ctx, w, local
        self.first_expert = w.expert_range(ctx.rank)[0]
        self.index_dtype = common.topk_index_dtype(deep_ep)
        self.out = torch.empty((w.tokens_per_rank, hidden), dtype=torch.bfloat16, device=ctx.torch_device)
        self.cache = {}
        self.handle = None
        self.torch = torch

    def _inputs(self, batch):
        """``(x bf16 [T, padded H], topk_idx int64, topk_weights fp32)`` (built once per batch; fp8: the bf16 source rows)."""
        torch = self.torch

        def build():
            rows = batch.x_bf16 if self.plan.fp8 else batch.x.view(torch.bfloat16)
            x = common.widen(rows, self.plan.hidden)
            return x, batch.topk_ids.to(self.index_dtype).contiguous(), batch.topk_weights.contiguous()

        return common.per_source(self.cache, "inputs", batch, build)

    def dispatch(self, batch):
        """One low-latency dispatch and its receive hook."""
        x, self.topk_idx, self.topk_weights = self._inputs(batch)
        plan = self.plan
        recv_x, _count, handle, _event, hook = self.buffer.low_latency_dispatch(
            x, self.topk_idx, plan.max_tokens, self.w.experts, use_fp8=plan.fp8,
            round_scale=plan.round_scale, use_ue8m0=plan.ue8m0, async_finish=False, return_recv_hook=True)
        hook()
        self.handle = handle
        return common.LazyReceived(lambda: self._received(recv_x, handle))

    def _received(self, recv_x, handle):
        """The gate's view: one row per slot (values, fp8 scales as fp32 bytes), its token, its global expert, whether it is filled."""
        torch, w = self.torch, self.w
        src_info, layout_range = handle[0], handle[1]
        token, valid = common.ll_slot_tokens(layout_range, src_info, w.tokens_per_rank)
        values, x_sf = recv_x, None
        if self.plan.fp8:
            values = recv_x[0]
            x_sf = common.ll_received_scale_bytes(recv_x[1], self.plan)[:, : w.scale_bytes]
        local, slots, _ = values.shape
        expert = (self.first_expert + torch.arange(local, device=values.device))[:, None].expand(local, slots)
        x = values.reshape(local * slots, -1).view(torch.uint8)[:, : w.value_bytes]
        return {"x": x, "x_sf": x_sf, "token_index": token.reshape(-1), "valid": valid.reshape(-1),
                "expert": expert.reshape(-1)}

    def combine(self, expert_out):
        """One low-latency combine: the kernel weights each slot's row and sums it into its token."""

        def build():
            rows = common.widen(expert_out, self.plan.hidden)
            return rows.view(self.local, -1, self.plan.hidden)

        x = common.per_source(self.cache, "expert_out", expert_out, build)
        combined, _event, _hook = self.buffer.low_latency_combine(
            x, self.topk_idx, self.topk_weights, self.handle, zero_copy=False, async_finish=False,
            return_recv_hook=False, out=self.out)
        return combined[:, : self.w.hidden]

    def teardown(self):
        """Drop this point's tensors; the buffer stays for the next point (see ``shared_buffer``)."""
        self.cache = {}
        self.handle = self.out = None
