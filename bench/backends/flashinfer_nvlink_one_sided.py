"""FlashInfer's one-sided NVLink all-to-all (vLLM ``flashinfer_nvlink_one_sided``)."""

from __future__ import annotations

import warnings

import torch

from bench.backends import Backend, Received
from bench.backends import _flashinfer as fi

#: top_k values the one-sided kernel is compiled for (0.7.x adds 3).
SUPPORTED_TOP_K = (1, 2, 3, 4, 6, 8, 10, 12, 14, 16, 18, 22)


class FlashinferNvlinkOneSided(Backend):
    """Based on FlashInfer's MoeAlltoAll: dispatch puts each token's rows into the owning ranks' workspaces, combine pulls and sums.

    Several ranks use ``flashinfer.moe_ep.NVLinkOneSidedAlltoAll`` (0.7.x) when present,
    else ``flashinfer.comm.MoeAlltoAll`` (0.6.x); one rank uses ``MoeAlltoAll`` (moe_ep
    refuses GPUs without NVLink peers). The workspace is sized from the payload actually
    sent (:meth:`dispatch_row_bytes`), never from a fixed nvfp4 formula. A 4-byte token index
    travels with every row because rows arrive in no particular order.
    """

    name = "flashinfer_nvlink_one_sided"
    supports_cuda_graph = True

    def unavailable_reason(self, ctx):
        """No CUDA / FlashInfer / NVLink, or no usable one-sided API in this FlashInfer."""
        reason = fi.common_unavailable_reason(ctx)
        if reason:
            return reason
        if ctx.world_size == 1 and not fi.has_legacy_one_sided():
            return "world size 1 needs flashinfer.comm.MoeAlltoAll (FlashInfer <= 0.7.2); this FlashInfer lacks it"
        if not (fi.has_legacy_one_sided() or fi.has_moe_ep()):
            return "this FlashInfer has neither flashinfer.moe_ep nor flashinfer.comm.MoeAlltoAll"
        return None

    def dispatch_row_bytes(self, workload) -> int:
        """Dispatch bytes per token the workspace is sized for: the payload actually sent.

        weights + ids (``8·top_k``) + token index (4) + values + scales.
        """
        return 8 * workload.top_k + 4 + workload.value_bytes + workload.scale_bytes

    def setup(self, ctx, workload):
        """Create the communicator for this shape (collective; first use JIT-builds the kernel)."""
        if workload.top_k not in SUPPORTED_TOP_K:
            raise ValueError(f"top_k {workload.top_k} is not compiled into the one-sided kernel "
                             f"({', '.join(map(str, SUPPORTED_TOP_K))})")
        self.ctx, self.w = ctx, workload
        self.use_moe_ep = ctx.world_size > 1 and fi.has_moe_ep() or not fi.has_legacy_one_sided()
        t, h = workload.tokens_per_rank, workload.hidden
        if self.use_moe_ep:
            import flashinfer.moe_ep as ep

            # hidden_states = values + 16-byte tail holding the token index (the extra payload)
            self.row = workload.value_bytes + 16
            self.packed = torch.zeros((t, self.row), dtype=torch.uint8, device=ctx.torch_device)
            params = ep.MoEEpCommParams(num_experts=workload.experts, top_k=workload.top_k,
                                        max_tokens_per_rank=t, hidden_size=h, dtype=torch.bfloat16,
                                        dispatch_format=fi.quant_format(workload.dtype))
            config = ep.NVLinkOneSidedConfig(extra_payload_bytes_per_token=16,
                                             comm_backend=fi.mnnvl_config(ctx).comm_backend)
            bootstrap = ep.BootstrapConfig(world_size=ctx.world_size, rank=ctx.rank,
                                           process_group=ctx.group, device=ctx.local_rank)
            self.comm = ep.create_communication(bootstrap, params, config)
        else:
            from flashinfer.comm import MoeAlltoAll
            from flashinfer.comm.trtllm_moe_alltoall import moe_a2a_get_workspace_size_per_rank

            size = moe_a2a_get_workspace_size_per_rank(ctx.world_size, t, self.dispatch_row_bytes(workload), 2 * h)
            with warnings.catch_warnings():  # 0.7.x deprecates the class it still builds on
                warnings.filterwarnings("ignore", "MoeAlltoAll is deprecated", DeprecationWarning)
                self.a2a = MoeAlltoAll(fi.mapping(ctx), max_num_tokens=t, top_k=workload.top_k,
                                       num_experts=workload.experts, workspace_size_per_rank=size,
                                       mnnvl_config=fi.mnnvl_config(ctx))

    def dispatch(self, batch):
        """One one-sided dispatch of values, scales, ids, weights and token index."""
        t, ws = self.w.tokens_per_rank, self.ctx.world_size
        if self.use_moe_ep:
            xb = self.w.value_bytes
            self.packed[:, :xb].copy_(batch.x)
            self.packed[:, xb : xb + 4].copy_(batch.token_index.view(-1, 1).view(torch.uint8))
            res = self.comm.dispatch(self.packed, batch.topk_ids, batch.topk_weights,
                                     hidden_states_scale=batch.x_sf, max_tokens_per_rank=t)
            rows = res.hidden_states
            token_index = rows[:, xb : xb + 4].contiguous().view(torch.int32).reshape(-1)
            x, sf, ids, weights = rows[:, :xb], res.hidden_states_scale, res.topk_ids, res.topk_weights
        else:
            payloads = [batch.topk_weights, batch.topk_ids, batch.token_index.view(-1, 1), batch.x]
            if batch.x_sf is not None:
                payloads.append(batch.x_sf)
            recv = self.a2a.dispatch(batch.topk_ids, payloads, t, invalid_token_expert_id=-1,
                                     expert_id_payload_index=1)
            recv = [r.reshape(ws * t, -1) for r in recv]
            weights, ids, token_index, x = recv[0], recv[1], recv[2].reshape(-1), recv[3]
            sf = recv[4] if batch.x_sf is not None else None
        valid = (ids >= 0).any(dim=1)
        return Received(x=x, x_sf=sf, topk_ids=ids, topk_weights=weights, token_index=token_index, valid=valid)

    def combine(self, expert_out):
        """One one-sided combine: each rank pulls its tokens' rows and sums them."""
        t, ws, h = self.w.tokens_per_rank, self.ctx.world_size, self.w.hidden
        if self.use_moe_ep:
            return self.comm.combine(expert_out)
        return self.a2a.combine(expert_out.view(ws, t, h), t)

    def teardown(self):
        """Release the communicator (FlashInfer caches the symmetric workspace per geometry)."""
        comm = getattr(self, "comm", None)
        if comm is not None:
            comm.destroy()
        self.comm = self.a2a = None
