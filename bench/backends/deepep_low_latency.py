"""DeepEP's low-latency kernels (vLLM ``deepep_low_latency``)."""

from __future__ import annotations

import torch

from bench.backends import Backend, Received
from bench.backends._flashinfer import has_module

#: Hidden sizes DeepEP's low-latency kernels are compiled for (vLLM rounds others up).
SUPPORTED_HIDDEN = (2048, 2560, 3072, 4096, 5120, 6144, 7168, 8192)


class DeepepLowLatency(Backend):
    """Based on DeepEP's ``low_latency_dispatch`` / ``low_latency_combine``: a per-expert (batched) layout, weights applied in combine.

    Dispatch lands each (token, local expert) pair in slot rows ``[local experts, ranks·T]``;
    the handle's source info and per-rank layout ranges name each slot's token. The harness's
    experts return one unweighted row per slot and combine applies the routing weights.
    bf16 activations only (with ``use_fp8`` DeepEP quantizes inside the kernel, so the bytes
    it sends are not the workload's).
    """

    name = "deepep_low_latency"

    def unavailable_reason(self, ctx):
        """No CUDA, or deep_ep not installed."""
        if ctx.device != "cuda":
            return "needs CUDA GPUs (DeepEP kernels); this run is on CPU"
        if not has_module("deep_ep"):
            return "deep_ep not installed (build it from github.com/deepseek-ai/DeepEP; not a vLLM dependency)"
        return None

    def setup(self, ctx, workload):
        """Create the low-latency buffer sized by DeepEP's own hint for this shape."""
        import deep_ep

        if workload.dtype != "bf16":
            raise ValueError(f"the low-latency adapter dispatches bf16 only, not {workload.dtype}")
        if workload.hidden not in SUPPORTED_HIDDEN:
            raise ValueError(f"DeepEP low-latency supports hidden sizes {SUPPORTED_HIDDEN}, not {workload.hidden}")
        if workload.experts % ctx.world_size:
            raise ValueError("DeepEP needs experts divisible by the world size")
        self.ctx, self.w = ctx, workload
        t, ws, e = workload.tokens_per_rank, ctx.world_size, workload.experts
        rdma = deep_ep.Buffer.get_low_latency_rdma_size_hint(t, workload.hidden, ws, e)
        self.buffer = deep_ep.Buffer(ctx.group, num_nvl_bytes=0, num_rdma_bytes=rdma,
                                     low_latency_mode=True, num_qps_per_rank=e // ws)
        self.first_expert = workload.expert_range(ctx.rank)[0]

    def dispatch(self, batch):
        """One low-latency dispatch; slots are mapped back to global token ids from the handle."""
        t = self.w.tokens_per_rank
        self.topk_idx = batch.topk_ids.to(torch.int64)
        self.topk_weights = batch.topk_weights
        recv_x, _count, handle, _event, _hook = self.buffer.low_latency_dispatch(
            batch.x.view(torch.bfloat16), self.topk_idx, t, self.w.experts, use_fp8=False)
        self.handle = handle
        src_info, layout_range = handle[0], handle[1]
        local, slots, _ = recv_x.shape
        begin = (layout_range >> 32).to(torch.int64)  # [local experts, ranks]
        count = (layout_range & 0xFFFFFFFF).to(torch.int64)
        s = torch.arange(slots, device=recv_x.device)
        inside = (s >= begin[:, :, None]) & (s < (begin + count)[:, :, None])  # [local, ranks, slots]
        valid = inside.any(dim=1)
        src_rank = inside.to(torch.int8).argmax(dim=1)
        token_index = src_rank * t + src_info.to(torch.int64)
        expert = (self.first_expert + torch.arange(local, device=recv_x.device))[:, None].expand(local, slots)
        return Received(x=recv_x.reshape(local * slots, -1).view(torch.uint8), x_sf=None, topk_ids=None,
                        topk_weights=None, token_index=token_index.reshape(-1), valid=valid.reshape(-1),
                        expert=expert.reshape(-1))

    def combine(self, expert_out):
        """One low-latency combine: weights applied and summed per source token by the kernel."""
        local = self.w.experts // self.ctx.world_size
        x = expert_out.view(local, -1, expert_out.shape[-1])
        combined, _event, _hook = self.buffer.low_latency_combine(x, self.topk_idx, self.topk_weights, self.handle)
        return combined

    def teardown(self):
        """Drop the buffer."""
        self.buffer = self.handle = None
