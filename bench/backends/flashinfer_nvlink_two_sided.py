"""FlashInfer's two-sided NVLink all-to-all-v (vLLM ``flashinfer_nvlink_two_sided``)."""

from __future__ import annotations

import torch

from bench.backends import Backend, Received
from bench.backends import _flashinfer as fi


class FlashinferNvlinkTwoSided(Backend):
    """Based on FlashInfer's MnnvlMoe all-to-all-v: a prepare step exchanges routing, FIFO send/recv moves rows, combine sends them back.

    The calls vLLM 0.33 makes (``prepare_finalize/flashinfer_nvlink_two_sided.py``), at every
    world size: ``mnnvl_moe_alltoallv_prepare_without_allgather`` (expert ids and weights),
    one ``mnnvl_moe_alltoallv`` for ``x`` and one for ``x_sf`` when the format has scales,
    ``mnnvl_moe_alltoallv_combine`` (sums over the token's ranks). The 4-byte token index
    rides at the end of the last of those tensors (``bench/backends/_flashinfer.py``).
    FlashInfer 0.7.x also has ``flashinfer.moe_ep.NVLinkTwoSidedAlltoAll``, a wrapper making
    these same MnnvlMoe calls (``nvlink_two_sided/communication.py:76-182``); vLLM 0.33 does
    not use it, so neither does this adapter.
    """

    name = "flashinfer_nvlink_two_sided"

    def unavailable_reason(self, ctx):
        """No CUDA / FlashInfer / NVLink, or no MnnvlMoe in this FlashInfer."""
        reason = fi.common_unavailable_reason(ctx)
        if reason:
            return reason
        if not fi.has_legacy_two_sided():
            return ("this FlashInfer has no flashinfer.comm.trtllm_alltoall.MnnvlMoe, which vLLM's "
                    "flashinfer_nvlink_two_sided calls (present in 0.6.x-0.7.2)")
        return None

    def setup(self, ctx, point):
        """Get the (process-wide) workspaces; check the kernel's routing limits."""
        import warnings

        from flashinfer.comm.trtllm_alltoall import MnnvlMoe

        # MnnvlMoe.compute_target_rank_id asserts experts % ep == 0; moe_prepare needs
        # experts % 4 == 0 and 1 <= top_k <= 32 (csrc/trtllm_alltoall_prepare.cu).
        if point.experts % ctx.world_size or point.experts % 4 or point.top_k > 32:
            raise ValueError("two-sided needs experts % world size == 0, experts % 4 == 0 and top_k <= 32")
        self.ctx, self.w, self.moe, self._staged = ctx, point, MnnvlMoe, None
        mapping, config = fi.mapping(ctx), fi.mnnvl_config(ctx)
        with warnings.catch_warnings():  # 0.7.x deprecates the getters (the kernels stay)
            warnings.filterwarnings("ignore", "MnnvlMoe is deprecated", DeprecationWarning)
            self.workspace = MnnvlMoe.get_moe_workspaces(mapping, config)
            self.prepare_workspace = MnnvlMoe.get_moe_prepare_workspace(mapping, config)
        self.rows = torch.arange(point.tokens_per_rank * ctx.world_size, device=ctx.torch_device)

    def dispatch(self, batch):
        """Prepare (routing exchange) then one all-to-all-v per activation tensor, as vLLM does."""
        w, ctx = self.w, self.ctx
        s = fi.staged(self, batch)
        info, ids, weights, _ = self.moe.mnnvl_moe_alltoallv_prepare_without_allgather(
            batch.topk_ids, batch.topk_weights, None, self.prepare_workspace, w.tokens_per_rank,
            ctx.rank, ctx.world_size, w.experts, w.experts, w.top_k)
        self.info = info
        x_rows = self.moe.mnnvl_moe_alltoallv(s.x, info, self.workspace, ctx.rank, ctx.world_size)
        sf_rows = None
        if s.x_sf is not None:
            sf_rows = self.moe.mnnvl_moe_alltoallv(s.x_sf, info, self.workspace, ctx.rank, ctx.world_size)
        x, sf, token_index = s.split(x_rows, sf_rows)
        # The received rows are the first recv_rank_count_cumsum[-1] rows, source rank by source
        # rank: the prepare kernel sets recv_rank_local_indices[i] = i (moveIndiceDevice,
        # csrc/trtllm_alltoall_prepare.cu:272-278) and moe_comm writes received row i to output
        # row recv_rank_local_indices[i]. The rest of the torch.empty output is garbage, its ids
        # are set to slot_count (memsetExpertIdsDevice). Compared on the device: no host sync.
        valid = self.rows < info.recv_rank_count_cumsum[-1]
        return Received(x=x, x_sf=sf, topk_ids=ids, topk_weights=weights, token_index=token_index, valid=valid)

    def combine(self, expert_out):
        """Send the rows back and sum each token's partial results."""
        ctx = self.ctx
        return self.moe.mnnvl_moe_alltoallv_combine(expert_out, self.info, self.workspace, ctx.rank,
                                                    ctx.world_size, self.w.top_k, self.w.tokens_per_rank)

    def teardown(self):
        """Drop this shape's buffers (the workspaces are process-wide singletons in FlashInfer)."""
        self.info = self._staged = self.rows = None
