"""DeepEP's normal (high-throughput) kernels, driven the way vLLM drives them (``deepep_high_throughput``)."""

from __future__ import annotations

from bench.backends import Backend
from bench.backends import deepep_common as common


class DeepepHighThroughput(Backend):
    """Based on DeepEP's intranode ``Buffer.get_dispatch_layout`` / ``dispatch`` / ``combine`` over NVLink.

    As vLLM does (``DeepEPHTAll2AllManager`` and ``prepare_finalize/deepep_ht.py``): one
    ``Buffer(group, num_nvl_bytes=VLLM_DEEPEP_BUFFER_SIZE_MB MiB, num_rdma_bytes=0,
    low_latency_mode=False, num_qps_per_rank=1, explicitly_destroy=True)`` per process; per
    call the layout, then ``dispatch(x, num_tokens_per_rank=, num_tokens_per_rdma_rank=,
    is_token_in_rank=, num_tokens_per_expert=, topk_idx=int64, topk_weights=fp32,
    expert_alignment=1, config=Buffer.get_dispatch_config(ranks))`` with ``x`` bf16 ``[T, H]``
    or block-fp8 ``(fp8 [T, H], fp32 [T, H/128])``, the hidden size padded to a 512-byte bf16
    row; combine sends the already-weighted bf16 rows back, ``combine(x, handle,
    topk_weights=None, config=Buffer.get_combine_config(ranks))``, an unweighted sum.

    Rows arrive grouped by source rank; the handle's rank prefix matrix and source indices
    name each row's token (:func:`deepep_common.ht_token_index`), so no token-index payload
    travels. DeepEP returns local expert ids (-1 for other ranks' experts, weight 0); they are
    shifted back to global ids. The dispatch waits on the host for the received count, so it
    cannot be captured in a CUDA graph (vLLM disables CUDA graphs with this backend).
    """

    name = common.HIGH_THROUGHPUT
    supports_cuda_graph = False

    def unavailable_reason(self, ctx):
        """No CUDA, a rank count without intranode kernels, NVLinks down, or deep_ep missing or broken (checked in that order)."""
        if ctx.device != "cuda":
            return common.deep_ep_unavailable_reason(ctx)
        if ctx.world_size not in common.HT_INTRANODE_WORLD_SIZES:
            sizes = ", ".join(map(str, common.HT_INTRANODE_WORLD_SIZES))
            return (f"DeepEP intranode kernels exist for {sizes} ranks only (launch.cuh SWITCH_RANKS), "
                    f"not {ctx.world_size}; beyond 8 ranks DeepEP needs its internode RDMA path")
        if ctx.nvlinks_all_up is False:
            return "DeepEP intranode kernels need every GPU pair connected by NVLink; links are down here"
        return common.deep_ep_unavailable_reason(ctx)

    def setup(self, ctx, point):
        """Plan the shape, reuse or build the process's buffer, pick vLLM's configs."""
        import deep_ep
        import torch

        w = point
        self.plan = common.ht_plan(w.dtype, w.hidden, w.top_k, w.experts, ctx.world_size,
                                   sm90_tma=bool(deep_ep.Buffer.is_sm90_compiled()))
        self.dispatch_config = deep_ep.Buffer.get_dispatch_config(ctx.world_size)
        self.combine_config = deep_ep.Buffer.get_combine_config(ctx.world_size)
        nvl_bytes = common.vllm_buffer_bytes()
        need = max(c.get_nvl_buffer_size_hint(2 * self.plan.hidden, ctx.world_size)
                   for c in (self.dispatch_config, self.combine_config))
        if need > nvl_bytes:
            raise common.DeepepCannotRun(
                f"DeepEP needs {need} NVLink buffer bytes for hidden {self.plan.hidden} at {ctx.world_size} "
                f"ranks (Config.get_nvl_buffer_size_hint); vLLM allocates {nvl_bytes}: raise "
                "VLLM_DEEPEP_BUFFER_SIZE_MB")
        kwargs = dict(num_nvl_bytes=nvl_bytes, num_rdma_bytes=0, low_latency_mode=False,
                      num_qps_per_rank=1, explicitly_destroy=True)
        self.buffer = common.shared_buffer(
            (self.name, ctx.world_size, tuple(sorted(kwargs.items()))),
            lambda: deep_ep.Buffer(ctx.cpu_group, **kwargs))
        self.ctx, self.w = ctx, w
        self.first_expert = w.expert_range(ctx.rank)[0]
        self.index_dtype = common.topk_index_dtype(deep_ep)
        self.cache = {}
        self.handle = None
        self.torch = torch

    def _inputs(self, batch):
        """``(x, topk_idx)`` as vLLM hands them to DeepEP: padded rows, int64 ids (built once per batch)."""
        torch, plan = self.torch, self.plan

        def build():
            idx = batch.topk_ids.to(self.index_dtype).contiguous()
            if not plan.fp8:
                return common.widen(batch.x.view(torch.bfloat16), plan.hidden), idx
            values = common.widen(batch.x, plan.hidden).view(torch.float8_e4m3fn)
            scales = common.widen(batch.x_sf.view(torch.float32), plan.scales)
            return (values, scales), idx

        return common.per_source(self.cache, "inputs", batch, build)

    def dispatch(self, batch):
        """Layout, then one intranode dispatch of activations, expert ids and weights."""
        x, topk_idx = self._inputs(batch)
        per_rank, per_rdma_rank, per_expert, in_rank, _event = self.buffer.get_dispatch_layout(
            topk_idx, self.w.experts)
        recv_x, recv_idx, recv_weights, _per_expert_list, handle, _event = self.buffer.dispatch(
            x, num_tokens_per_rank=per_rank, num_tokens_per_rdma_rank=per_rdma_rank,
            is_token_in_rank=in_rank, num_tokens_per_expert=per_expert, topk_idx=topk_idx,
            topk_weights=batch.topk_weights, expert_alignment=1, config=self.dispatch_config)
        self.handle = handle
        return common.LazyReceived(lambda: self._received(recv_x, recv_idx, recv_weights, handle))

    def _received(self, recv_x, recv_idx, recv_weights, handle):
        """The gate's view of one dispatch: unpadded bytes, global ids, token indices."""
        torch, w = self.torch, self.w
        if self.plan.fp8:
            x = recv_x[0].view(torch.uint8)[:, : w.value_bytes]
            x_sf = recv_x[1].contiguous().view(torch.uint8)[:, : w.scale_bytes]
        else:
            x, x_sf = recv_x.view(torch.uint8)[:, : w.value_bytes], None
        ids = torch.where(recv_idx >= 0, recv_idx.to(torch.int64) + self.first_expert, -1)
        rank_prefix_matrix, recv_src_idx = handle[0], handle[3]
        token_index = common.ht_token_index(rank_prefix_matrix, recv_src_idx, self.ctx.rank, w.tokens_per_rank)
        return {"x": x, "x_sf": x_sf, "topk_ids": ids, "topk_weights": recv_weights, "token_index": token_index}

    def combine(self, expert_out):
        """One intranode combine: each token's weighted rows summed over the ranks that got it."""
        x = common.per_source(self.cache, "expert_out", expert_out,
                              lambda: common.widen(expert_out, self.plan.hidden))
        combined, _weights, _event = self.buffer.combine(x, self.handle, topk_weights=None,
                                                         config=self.combine_config)
        return combined[:, : self.w.hidden]

    def teardown(self):
        """Drop this point's tensors; the buffer stays for the next point (see ``shared_buffer``)."""
        self.cache = {}
        self.handle = None
