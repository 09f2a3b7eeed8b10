"""FlashInfer's two-sided NVLink all-to-all-v (vLLM ``flashinfer_nvlink_two_sided``)."""

from __future__ import annotations

import torch

from bench.backends import Backend, Received
from bench.backends import _flashinfer as fi


class FlashinferNvlinkTwoSided(Backend):
    """Based on FlashInfer's two-sided all-to-all-v: a prepare step exchanges routing, FIFO send/recv moves rows, combine sends them back.

    The calls follow the target vLLM release (``ctx.vllm_version``) as far as the installed
    FlashInfer allows (:func:`bench.backends._flashinfer.choose_api`):

    - up to vLLM 0.33 (``prepare_finalize/flashinfer_nvlink_two_sided.py``): the legacy
      ``MnnvlMoe`` calls ``mnnvl_moe_alltoallv_prepare_without_allgather`` (expert ids and
      weights), one ``mnnvl_moe_alltoallv`` for ``x`` and one for ``x_sf`` when the format has
      scales, ``mnnvl_moe_alltoallv_combine`` (sums over the token's ranks);
    - from vLLM 0.34 (``all2all.py:676-764``): ``flashinfer.moe_ep.create_communication`` with
      ``NVLinkTwoSidedConfig`` (``invalid_expert_id=num_experts``), then ``dispatch`` /
      ``combine``; FlashInfer 0.7.2 implements it with the same MnnvlMoe calls, 0.7.4 (which
      removed MnnvlMoe) with its own kernels, receive rows laid out rank-major.

    On one rank the legacy calls run when present (moe_ep refuses GPUs without NVLink peers).
    The 4-byte token index rides at the end of the last activation tensor
    (``bench/backends/_flashinfer.py``).
    """

    name = "flashinfer_nvlink_two_sided"

    def unavailable_reason(self, ctx):
        """No CUDA / FlashInfer / NVLink, or neither two-sided API in this FlashInfer."""
        reason = fi.common_unavailable_reason(ctx)
        if reason:
            return reason
        if fi.has_legacy_two_sided():
            return None
        if ctx.world_size == 1:
            return ("world size 1 needs flashinfer.comm.trtllm_alltoall.MnnvlMoe (FlashInfer 0.6.x-0.7.2; "
                    "flashinfer.moe_ep refuses a GPU without NVLink peers); this FlashInfer lacks it")
        missing = fi.missing_moe_ep_two_sided()
        if missing:
            return f"this FlashInfer has no flashinfer.comm.trtllm_alltoall.MnnvlMoe and {missing}"
        return None

    def setup(self, ctx, point):
        """Get the (process-wide) workspaces; check the kernel's routing limits."""
        # MnnvlMoe.compute_target_rank_id asserts experts % ep == 0; moe_prepare needs
        # experts % 4 == 0 and 1 <= top_k <= 32 (csrc/trtllm_alltoall_prepare.cu).
        if point.experts % ctx.world_size or point.experts % 4 or point.top_k > 32:
            raise ValueError("two-sided needs experts % world size == 0, experts % 4 == 0 and top_k <= 32")
        self.choice = fi.choose_api(self.name, ctx.vllm_version, ctx.world_size, fi.installed_api())
        self.ctx, self.w, self._staged = ctx, point, None
        self.comm = self.info = None
        self.use_moe_ep = self.choice.api == "moe_ep"
        if self.use_moe_ep:
            import flashinfer.moe_ep as ep

            # As vLLM 0.34's FlashInferNVLinkTwoSidedManager.get_communication builds it.
            device = torch.cuda.current_device() if ctx.device == "cuda" else ctx.local_rank
            bootstrap = ep.BootstrapConfig(world_size=ctx.world_size, rank=ctx.rank, device=device,
                                           process_group=ctx.cpu_group)
            params = ep.MoEEpCommParams(num_experts=point.experts, top_k=point.top_k,
                                        max_tokens_per_rank=point.tokens_per_rank, hidden_size=point.hidden,
                                        invalid_expert_id=point.experts)
            config = ep.NVLinkTwoSidedConfig(comm_backend=fi.mnnvl_config(ctx).comm_backend)
            with torch.device("cpu"):  # vLLM: bootstrap metadata stays on the CPU
                self.comm = ep.create_communication(bootstrap, params, backend=config)
            return
        import warnings

        from flashinfer.comm.trtllm_alltoall import MnnvlMoe

        self.moe = MnnvlMoe
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
        if self.use_moe_ep:
            res = self.comm.dispatch(s.x, batch.topk_ids, batch.topk_weights, hidden_states_scale=s.x_sf,
                                     **{self.choice.dispatch_keyword: w.tokens_per_rank})
            x, sf, token_index = s.split(res.hidden_states, res.hidden_states_scale)
            # Rows past a source rank's token count carry invalid_expert_id (= experts) in every
            # top-k id (the prepare kernel's slot count: nvlink_two_sided/communication.py, 0.7.2
            # :122-127, 0.7.4 :179-184), and so do the picks another rank owns; a received row
            # has at least one id of this rank.
            valid = (res.topk_ids != w.experts).any(dim=1)
            return Received(x=x, x_sf=sf, topk_ids=res.topk_ids, topk_weights=res.topk_weights,
                            token_index=token_index, valid=valid)
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
        if self.use_moe_ep:
            return self.comm.combine(expert_out)
        ctx = self.ctx
        return self.moe.mnnvl_moe_alltoallv_combine(expert_out, self.info, self.workspace, ctx.rank,
                                                    ctx.world_size, self.w.top_k, self.w.tokens_per_rank)

    def code_path(self):
        """The API generation this point ran and the vLLM calls it mirrors (``fi.ApiChoice.code_path``)."""
        choice = getattr(self, "choice", None)
        return choice.code_path() if choice is not None else {}

    def teardown(self):
        """Drop this shape's buffers (the workspaces are process-wide singletons in FlashInfer)."""
        comm = getattr(self, "comm", None)
        if comm is not None:
            comm.destroy()
        self.comm = self.info = self._staged = self.rows = None
