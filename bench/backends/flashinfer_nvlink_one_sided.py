"""FlashInfer's one-sided NVLink all-to-all (vLLM ``flashinfer_nvlink_one_sided``)."""

from __future__ import annotations

import warnings

import torch

from bench.backends import Backend, Received
from bench.backends import _flashinfer as fi

#: top_k values the one-sided kernel is compiled for: ``SWITCH_TOP_K`` in
#: ``csrc/nv_internal/.../moeAlltoAllKernels.cu`` (0.6.18.post1 lines 61-120, 0.7.2.post1
#: lines 104-163) instantiates exactly these; any other value fails with "Unsupported top_k".
SUPPORTED_TOP_K = (1, 2, 4, 6, 8, 10, 12, 14, 16, 18, 22)


class FlashinferNvlinkOneSided(Backend):
    """Based on FlashInfer's MoeAlltoAll: dispatch puts each token's rows into the owning ranks' workspaces, combine pulls and sums.

    The calls follow the target vLLM release (``ctx.vllm_version``) as far as the installed
    FlashInfer allows (:func:`bench.backends._flashinfer.choose_api`): vLLM 0.18-0.32 call
    ``flashinfer.comm.MoeAlltoAll``, 0.33 ``flashinfer.moe_ep.NVLinkOneSidedAlltoAll``, 0.34 the
    same with ``cft=False, lamport=False`` (the fence transport: FlashInfer >= 0.7.3 would
    otherwise take counted writes or the Lamport transport where the platform has them) and
    ``dispatch(..., runtime_max_tokens_per_rank=)``. The fields are passed whenever this FlashInfer
    has them; on one rank the legacy class runs when present (moe_ep refuses GPUs without
    NVLink peers). Every path makes the same kernel call: payloads ``[x, x_sf, topk_ids,
    topk_weights]`` as vLLM sends them, the 4-byte token index riding at the end of the last
    activation tensor (``bench/backends/_flashinfer.py``), ``invalid_token_expert_id=-1``; the
    workspace is sized exactly as ``NVLinkOneSidedAlltoAll.__init__`` sizes it, from the payload
    actually sent (:meth:`dispatch_row_bytes`), never from a fixed nvfp4 formula.

    Not like vLLM: at EP 4/8/16, nvfp4, hidden <= 2048 and an even top_k > 4, FlashInfer
    0.7.2 takes a "phased" dispatch kernel only when the scale row is exactly 1/8 of the value
    row (``isPhasedNvfp4PayloadLayout``, ``moeAlltoAllKernels.cu:71-92``, used at 818-833);
    the index riding on the scales breaks that ratio, so those points time the generic
    dispatch kernel (0.6.18 has no phased kernel).
    """

    name = "flashinfer_nvlink_one_sided"
    supports_cuda_graph = True

    def unavailable_reason(self, ctx):
        """No CUDA / FlashInfer / NVLink, or no one-sided API this world size can use."""
        reason = fi.common_unavailable_reason(ctx)
        if reason:
            return reason
        if fi.has_legacy_one_sided():
            return None
        if ctx.world_size == 1:
            return ("world size 1 needs flashinfer.comm.MoeAlltoAll (FlashInfer 0.6.x-0.7.2; "
                    "flashinfer.moe_ep refuses a GPU without NVLink peers); this FlashInfer lacks it")
        missing = fi.missing_moe_ep_one_sided()
        if missing:
            return f"this FlashInfer has no flashinfer.comm.MoeAlltoAll and {missing}"
        return None

    def dispatch_row_bytes(self, point) -> int:
        """Dispatch bytes per token the legacy workspace is sized for: the payload actually sent.

        values + scales + token-index tail (:func:`bench.backends._flashinfer.index_tail`)
        + ids and weights (``8·top_k``) — the sum ``NVLinkOneSidedAlltoAll.__init__`` forms
        (``nvlink_one_sided/communication.py:99-104`` in 0.7.2) with the tail as its
        ``extra_payload_bytes_per_token``.
        """
        return point.value_bytes + point.scale_bytes + self.extra_payload_bytes(point) + 8 * point.top_k

    @staticmethod
    def extra_payload_bytes(point) -> int:
        """Bytes per token beyond the format's own (the token index tail)."""
        return fi.index_tail(point.scale_bytes or point.value_bytes)

    def setup(self, ctx, point):
        """Create the communicator for this shape (collective; first use JIT-builds the kernel)."""
        found = fi.installed_api()
        self.choice = fi.choose_api(self.name, ctx.vllm_version, ctx.world_size, found)
        # FlashInfer >= 0.7.3 checks top_k itself (and adds 3); older kernels fail only at launch
        if not found.transport_fields and point.top_k not in SUPPORTED_TOP_K:
            raise ValueError(f"top_k {point.top_k} is not compiled into the one-sided kernel "
                             f"({', '.join(map(str, SUPPORTED_TOP_K))})")
        self.ctx, self.w, self._staged = ctx, point, None
        self.comm = self.a2a = None
        self.use_moe_ep = self.choice.api == "moe_ep"
        t, h = point.tokens_per_rank, point.hidden
        if self.use_moe_ep:
            import flashinfer.moe_ep as ep

            # As vLLM's FlashInferNVLinkOneSidedManager.initialize builds it (0.33: all2all.py:
            # 804-857; 0.34: :860-868 adds the fence transport).
            params = ep.MoEEpCommParams(num_experts=point.experts, top_k=point.top_k,
                                        max_tokens_per_rank=t, hidden_size=h, dtype=torch.bfloat16,
                                        dispatch_format=fi.quant_format(point.dtype))
            transport = {"cft": False, "lamport": False} if self.choice.fence_flags else {}
            config = ep.NVLinkOneSidedConfig(extra_payload_bytes_per_token=self.extra_payload_bytes(point),
                                             comm_backend=fi.mnnvl_config(ctx).comm_backend, **transport)
            device = torch.cuda.current_device() if ctx.device == "cuda" else ctx.local_rank
            bootstrap = ep.BootstrapConfig(world_size=ctx.world_size, rank=ctx.rank,
                                           device=device, process_group=ctx.cpu_group)
            with torch.device("cpu"):  # vLLM: bootstrap metadata stays on the CPU
                self.comm = ep.create_communication(bootstrap, params, backend=config)
        else:
            from flashinfer.comm.trtllm_moe_alltoall import MoeAlltoAll, moe_a2a_get_workspace_size_per_rank

            # Per-token sizes in bytes (trtllm_moe_alltoall.py: "Sum (in bytes) of all per-token
            # payloads"); combine rows are bf16, 2·H, as NVLinkOneSidedAlltoAll sizes them.
            size = moe_a2a_get_workspace_size_per_rank(ctx.world_size, t, self.dispatch_row_bytes(point), 2 * h)
            with warnings.catch_warnings():  # 0.7.x deprecates the class it still builds on
                warnings.filterwarnings("ignore", "MoeAlltoAll is deprecated", DeprecationWarning)
                self.a2a = MoeAlltoAll(fi.mapping(ctx), max_num_tokens=t, top_k=point.top_k,
                                       num_experts=point.experts, workspace_size_per_rank=size,
                                       mnnvl_config=fi.mnnvl_config(ctx))
        self._poison_receive_rows()
        if ctx.world_size > 1:
            # Each rank memsets its own workspace slice (moe_a2a_initialize, synchronous) and
            # poisons it above. 0.6.18 has no barrier after the memset (trtllm_moe_alltoall.py:
            # 826-846), so a fast peer's first dispatch could be erased by a slow rank's; 0.7.2
            # added one (lines 985-992: "a late memset can erase the peer's first completion
            # epoch"). Either way no peer may dispatch before every rank has poisoned.
            import torch.distributed as dist

            if ctx.device == "cuda":
                torch.cuda.synchronize()
            dist.barrier(group=ctx.cpu_group)

    def _poison_receive_rows(self):
        """Fill this rank's payload region with 0xFF bytes before the first dispatch.

        FlashInfer caches the workspace per geometry for the process: without this, a point
        repeated in one worker would see the previous run's rows, and a dispatch that delivered
        nothing could pass the gate on them. Up to 0.7.2 (``MoeAlltoAll``, also under 0.7.2's
        ``moe_ep``) the region starts at the metainfo's ``PAYLOAD_DATA_OFFSET_INDEX`` and runs to
        the end of the rank's row (``calculateOffsets``, csrc/trtllm_moe_alltoall.cu); from 0.7.4
        ``NVLinkOneSidedAlltoAll`` keeps its own layout: ``DISPATCH_PAYLOAD_OFFSET_INDEX`` and
        ``DISPATCH_PAYLOAD_SIZE_INDEX`` (csrc/.../moeAlltoAllMeta.h). The counters and flags
        before it are left alone.
        """
        rank = self.ctx.rank
        owner = self.comm.alltoall if self.use_moe_ep and hasattr(self.comm, "alltoall") else (
            self.comm if self.use_moe_ep else self.a2a)
        index = getattr(owner, "_index", None)
        if index is not None and hasattr(index, "DISPATCH_PAYLOAD_OFFSET_INDEX"):
            start = int(owner.metainfo[index.DISPATCH_PAYLOAD_OFFSET_INDEX])
            end = start + int(owner.metainfo[index.DISPATCH_PAYLOAD_SIZE_INDEX])
        else:
            start = int(owner.metainfo[owner._METAINFO_INDEX["PAYLOAD_DATA_OFFSET_INDEX"]])
            end = owner.workspace.shape[1]
        owner.workspace[rank, start:end].fill_(0xFF)

    def dispatch(self, batch):
        """One one-sided dispatch of values, scales (index riding on the last), ids and weights."""
        t = self.w.tokens_per_rank
        s = fi.staged(self, batch)
        if self.use_moe_ep:
            # the step's token count: max_tokens_per_rank= up to 0.7.2, runtime_max_tokens_per_rank= from 0.7.3
            res = self.comm.dispatch(s.x, batch.topk_ids, batch.topk_weights,
                                     hidden_states_scale=s.x_sf, **{self.choice.dispatch_keyword: t})
            x_rows, sf_rows, ids, weights = res.hidden_states, res.hidden_states_scale, res.topk_ids, res.topk_weights
        else:
            # The call NVLinkOneSidedAlltoAll.dispatch makes (communication.py:184-202, 0.7.2).
            payloads = [s.x] + ([s.x_sf] if s.x_sf is not None else []) + [batch.topk_ids, batch.topk_weights]
            ids_at = len(payloads) - 2
            recv = self.a2a.dispatch(batch.topk_ids, payloads, t, invalid_token_expert_id=-1,
                                     expert_id_payload_index=ids_at)
            recv = [r.flatten(0, 1) for r in recv]  # [ep, t, *] -> [ep·t, *], rank-major
            x_rows, sf_rows = recv[0], recv[1] if s.x_sf is not None else None
            ids, weights = recv[ids_at], recv[ids_at + 1]
        x, sf, token_index = s.split(x_rows, sf_rows)
        # Rows past a source rank's count keep stale bytes; the sanitize kernel sets all their
        # ids to -1 and leaves received rows' global ids (all >= 0) alone
        # (moeA2ASanitizeExpertIdsKernel, moeAlltoAllKernels.cu:1650-1672 in 0.7.2, 1459-1480
        # in 0.6.18), so the first id tells.
        valid = ids[:, 0] >= 0
        return Received(x=x, x_sf=sf, topk_ids=ids, topk_weights=weights, token_index=token_index, valid=valid)

    def combine(self, expert_out):
        """One one-sided combine: each rank pulls its tokens' rows and sums them."""
        if self.use_moe_ep:
            return self.comm.combine(expert_out)
        t, ws, h = self.w.tokens_per_rank, self.ctx.world_size, self.w.hidden
        return self.a2a.combine(expert_out.view(ws, t, h), t)

    def code_path(self):
        """The API generation this point ran and the vLLM calls it mirrors (``fi.ApiChoice.code_path``)."""
        choice = getattr(self, "choice", None)
        return choice.code_path() if choice is not None else {}

    def teardown(self):
        """Release the communicator (FlashInfer caches the symmetric workspace per geometry)."""
        comm = getattr(self, "comm", None)
        if comm is not None:
            comm.destroy()
        self.comm = self.a2a = self._staged = None
