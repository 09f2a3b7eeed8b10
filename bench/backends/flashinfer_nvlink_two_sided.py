"""FlashInfer's two-sided NVLink all-to-all-v (vLLM ``flashinfer_nvlink_two_sided``)."""

from __future__ import annotations

import torch

from bench.backends import Backend, Received
from bench.backends import _flashinfer as fi


class FlashinferNvlinkTwoSided(Backend):
    """Based on FlashInfer's MnnvlMoe all-to-all-v: a prepare step exchanges routing, FIFO send/recv moves rows, combine sends them back.

    Dispatch = ``mnnvl_moe_alltoallv_prepare_without_allgather`` (expert ids and weights)
    plus one ``mnnvl_moe_alltoallv`` of a packed row (values, scales, 4-byte token index,
    padded to 16 bytes; vLLM moves values and scales in two calls). Combine =
    ``mnnvl_moe_alltoallv_combine``, which also sums over the token's ranks.
    """

    name = "flashinfer_nvlink_two_sided"

    def unavailable_reason(self, ctx):
        """No CUDA / FlashInfer / NVLink, or no MnnvlMoe in this FlashInfer."""
        reason = fi.common_unavailable_reason(ctx)
        if reason:
            return reason
        if not fi.has_legacy_two_sided():
            return "this FlashInfer has no flashinfer.comm.trtllm_alltoall.MnnvlMoe (FlashInfer <= 0.7.2)"
        return None

    def setup(self, ctx, workload):
        """Get the (process-wide) workspaces; check the kernel's routing limits."""
        from flashinfer.comm.trtllm_alltoall import MnnvlMoe

        if workload.experts % ctx.world_size or workload.experts % 4 or workload.top_k > 32:
            raise ValueError("two-sided needs experts % world size == 0, experts % 4 == 0 and top_k <= 32")
        self.ctx, self.w, self.moe = ctx, workload, MnnvlMoe
        mapping, config = fi.mapping(ctx), fi.mnnvl_config(ctx)
        self.workspace = MnnvlMoe.get_moe_workspaces(mapping, config)
        self.prepare_workspace = MnnvlMoe.get_moe_prepare_workspace(mapping, config)
        xb, sfb = workload.value_bytes, workload.scale_bytes
        self.row = fi.pad16(xb + sfb + 4)
        self.packed = torch.zeros((workload.tokens_per_rank, self.row), dtype=torch.uint8, device=ctx.torch_device)

    def dispatch(self, batch):
        """Prepare (routing exchange) then one all-to-all-v of the packed rows."""
        w, ctx = self.w, self.ctx
        xb, sfb = w.value_bytes, w.scale_bytes
        self.packed[:, :xb].copy_(batch.x)
        if sfb:
            self.packed[:, xb : xb + sfb].copy_(batch.x_sf)
        self.packed[:, xb + sfb : xb + sfb + 4].copy_(batch.token_index.view(-1, 1).view(torch.uint8))
        info, ids, weights, _ = self.moe.mnnvl_moe_alltoallv_prepare_without_allgather(
            batch.topk_ids, batch.topk_weights, None, self.prepare_workspace, w.tokens_per_rank,
            ctx.rank, ctx.world_size, w.experts, w.experts, w.top_k)
        self.info = info
        rows = self.moe.mnnvl_moe_alltoallv(self.packed, info, self.workspace, ctx.rank, ctx.world_size)
        total = int(info.recv_rank_count_cumsum[-1])
        valid = torch.zeros(rows.shape[0], dtype=torch.bool, device=rows.device)
        valid[info.recv_rank_local_indices[:total].to(torch.int64)] = True
        return Received(
            x=rows[:, :xb], x_sf=rows[:, xb : xb + sfb] if sfb else None,
            topk_ids=ids, topk_weights=weights,
            token_index=rows[:, xb + sfb : xb + sfb + 4].contiguous().view(torch.int32).reshape(-1),
            valid=valid,
        )

    def combine(self, expert_out):
        """Send the rows back and sum each token's partial results."""
        ctx = self.ctx
        return self.moe.mnnvl_moe_alltoallv_combine(expert_out, self.info, self.workspace, ctx.rank,
                                                    ctx.world_size, self.w.top_k, self.w.tokens_per_rank)

    def teardown(self):
        """Drop this shape's buffers (the workspaces are process-wide singletons in FlashInfer)."""
        self.packed = self.info = None
