"""DeepEP's normal (high-throughput) kernels (vLLM ``deepep_high_throughput``)."""

from __future__ import annotations

import torch

from bench.backends import Backend, Received
from bench.backends._flashinfer import has_module


class DeepepHighThroughput(Backend):
    """Based on DeepEP's intranode ``Buffer.dispatch`` / ``Buffer.combine`` over NVLink buffers.

    Dispatch computes the layout (``get_dispatch_layout``), then sends each token once to
    each rank owning one of its experts; rows arrive grouped by source rank and the handle
    names each row's source token, which gives the global token index. Carries bf16 or
    fp8 block-128 activations (DeepEP's two formats); combine sums the bf16 outputs.
    """

    name = "deepep_high_throughput"

    def unavailable_reason(self, ctx):
        """No CUDA, or deep_ep not installed."""
        if ctx.device != "cuda":
            return "needs CUDA GPUs (DeepEP NVLink kernels); this run is on CPU"
        if not has_module("deep_ep"):
            return "deep_ep not installed (build it from github.com/deepseek-ai/DeepEP; not a vLLM dependency)"
        return None

    def setup(self, ctx, workload):
        """Create the NVLink buffer (1 GB, intranode: no RDMA bytes)."""
        import deep_ep

        if workload.dtype not in ("bf16", "fp8_block128"):
            raise ValueError(f"DeepEP dispatches bf16 or fp8 block-128 activations, not {workload.dtype}")
        if workload.experts % ctx.world_size:
            raise ValueError("DeepEP needs experts divisible by the world size")
        self.ctx, self.w = ctx, workload
        self.buffer = deep_ep.Buffer(ctx.group, int(1e9), 0)
        self.first_expert = workload.expert_range(ctx.rank)[0]

    def _activations(self, batch):
        if self.w.dtype == "bf16":
            return batch.x.view(torch.bfloat16)
        return (batch.x.view(torch.float8_e4m3fn), batch.x_sf.view(torch.float32))

    def dispatch(self, batch):
        """Layout, then one intranode dispatch of activations, ids and weights."""
        topk_idx = batch.topk_ids.to(torch.int64)
        per_rank, per_rdma_rank, per_expert, in_rank, _ = self.buffer.get_dispatch_layout(topk_idx, self.w.experts)
        recv_x, recv_idx, recv_w, _, handle, _ = self.buffer.dispatch(
            self._activations(batch), topk_idx=topk_idx, topk_weights=batch.topk_weights,
            num_tokens_per_rank=per_rank, num_tokens_per_rdma_rank=per_rdma_rank,
            is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
        self.handle = handle
        rank_prefix, recv_src_idx = handle[0], handle[3]
        if isinstance(recv_x, tuple):
            x, sf = recv_x[0].view(torch.uint8), recv_x[1].contiguous().view(torch.uint8)
        else:
            x, sf = recv_x.view(torch.uint8), None
        rows = x.shape[0]
        ends = rank_prefix[:, self.ctx.rank].to(torch.int64)  # cumulative rows per source rank
        src_rank = torch.searchsorted(ends, torch.arange(rows, device=x.device), right=True)
        token_index = src_rank * self.w.tokens_per_rank + recv_src_idx.to(torch.int64)
        ids = torch.where(recv_idx >= 0, recv_idx + self.first_expert, -1)  # DeepEP returns local ids
        return Received(x=x, x_sf=sf, topk_ids=ids, topk_weights=recv_w, token_index=token_index)

    def combine(self, expert_out):
        """One intranode combine: sums each token's rows from every rank."""
        combined, _, _ = self.buffer.combine(expert_out, self.handle)
        return combined

    def teardown(self):
        """Drop the buffer."""
        self.buffer = self.handle = None
