"""vLLM's own prepare / finalize objects for one backend (``bench --via vllm``), behind the adapter interface."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import torch

from bench.backends import VLLM_PATH_DTYPES, Backend, Received
from bench.backends._flashinfer import has_module
from db.records import VLLM

#: Bytes of a row's start that name its token (the payload bytes are hashes of the token id).
_KEY_BYTES = 8
#: vLLM's state in this process (its config, the token budget its all2all manager was sized for):
#: vLLM builds its distributed groups once per process.
_PROCESS: dict = {}


class VllmPath(Backend):
    """Based on vLLM's ``FusedMoEPrepareAndFinalize`` for the backend, built as vLLM's MoE layer builds it.

    In each worker process vLLM's distributed state is set up over the worker group's own
    torch.distributed group, the way vLLM's own MoE tests do (``tests/kernels/moe/
    modular_kernel_tools/parallel_utils.py``): a ``VllmConfig`` with one DP rank per process,
    expert parallelism on and ``all2all_backend`` set to the backend, made current;
    ``init_distributed_environment`` and ``initialize_model_parallel`` (which build the EP group and
    its all2all manager, as a vLLM worker does). Per point, ``FusedMoEConfig`` and the model's
    ``FusedMoEQuantConfig`` go to ``maybe_make_prepare_finalize``, the function vLLM's MoE layer
    calls; a round trip is its ``prepare`` (quantization where the model quantizes, dispatch) and
    ``finalize`` (combine) inside ``set_forward_context`` with every DP rank's token count, as a
    model step runs them. The expert outputs come from the harness's synthetic experts, handed
    to ``finalize`` already weighted and reduced per row (``TopKWeightAndReduceNoOP``), or
    unweighted per slot for the batched format (DeepEP low-latency), whose combine weights them.

    vLLM's received rows carry no token index: each row's token is found by its first bytes (the
    payload bytes are hashes of the token id) and the gate then checks the whole row, so every
    byte is checked where vLLM's quantization reproduces the synthetic payload
    (:data:`bench.backends.VLLM_PATH_DTYPES`); the sweep refuses other activation dtypes before it starts.
    """

    supports_cuda_graph = True

    def __init__(self, backend: str):
        self.name = backend

    def unavailable_reason(self, ctx):
        """CUDA, vLLM, two or more DP ranks and a vLLM backend are needed."""
        if ctx.device != "cuda":
            return "vLLM's prepare/finalize objects need CUDA (--via vllm runs on a GPU node)"
        if not has_module("vllm"):
            return "vllm not installed in the workers' Python"
        if ctx.world_size < 2:
            return "with one DP rank vLLM runs no all2all (maybe_make_prepare_finalize builds none): use 2+ ranks"
        if self.name.startswith("reference_"):
            return f"{self.name} is the benchmark's own baseline: vLLM has no prepare/finalize for it"
        return None

    def needs_fresh_process(self, ctx, point):
        """The all2all manager sizes its workspaces once per process, from the token budget of the first point."""
        built = _PROCESS.get("tokens")
        if built and point.tokens_per_rank > built:
            return (f"vLLM's all2all manager sized its workspace for {built} tokens per rank in this "
                    f"process; {point.tokens_per_rank} need a fresh one")
        return None

    def setup(self, ctx, point):
        """vLLM's distributed state (once per process), then the point's prepare/finalize object."""
        if point.dtype not in VLLM_PATH_DTYPES:
            raise ValueError(f"--via vllm takes {', '.join(VLLM_PATH_DTYPES)} activations (vLLM quantizes the bf16 input "
                             f"itself; the synthetic {point.dtype} payload is not quantization-stable, so the "
                             "gate could not check it)")
        from vllm.model_executor.layers.fused_moe.activation import MoEActivation
        from vllm.model_executor.layers.fused_moe.all2all_utils import maybe_make_prepare_finalize
        from vllm.model_executor.layers.fused_moe.config import (
            FusedMoEConfig,
            FusedMoEParallelConfig,
            FusedMoEQuantConfig,
            RoutingMethodType,
        )
        from vllm.distributed import get_dp_group, get_pcp_group, get_tensor_model_parallel_world_size
        from vllm.forward_context import set_forward_context

        self.ctx, self.w = ctx, point
        vllm_config = self._vllm_environment(ctx, point)
        n, t, dev = ctx.world_size, point.tokens_per_rank, ctx.torch_device
        in_dtype = torch.bfloat16
        self.quant_config = (FusedMoEQuantConfig.make(torch.float8_e4m3fn, block_shape=[128, 128])
                             if point.dtype == "fp8_block128" else FusedMoEQuantConfig.make(None))
        parallel = FusedMoEParallelConfig.make(
            tp_size_=get_tensor_model_parallel_world_size(), pcp_size_=get_pcp_group().world_size,
            dp_size_=get_dp_group().world_size, sp_size_=1, vllm_parallel_config=vllm_config.parallel_config)
        local = point.experts // n
        moe = FusedMoEConfig(
            num_experts=point.experts, experts_per_token=point.top_k, hidden_dim=point.hidden,
            intermediate_size=point.hidden, num_local_experts=local, num_logical_experts=point.experts,
            activation=MoEActivation.SILU, device=dev, routing_method=RoutingMethodType.TopK,
            moe_parallel_config=parallel, in_dtype=in_dtype, max_num_tokens=t)
        self.pf = maybe_make_prepare_finalize(moe=moe, quant_config=self.quant_config, allow_new_interface=True)
        if self.pf is None:
            raise RuntimeError(f"maybe_make_prepare_finalize built no prepare/finalize for {self.name} "
                               f"at {n} DP ranks")
        self._pf_class = type(self.pf).__name__
        self.batched = self.pf.activation_format.name == "BatchedExperts"  # FusedMoEActivationFormat
        self.ids_dtype = self.pf.topk_indices_dtype() or torch.int32
        self.offset = ctx.rank * local
        self.expert_map = torch.full((point.experts,), -1, dtype=torch.int32, device=dev)
        self.expert_map[self.offset : self.offset + local] = torch.arange(local, dtype=torch.int32, device=dev)
        self.out = torch.empty((t, point.hidden), dtype=in_dtype, device=dev)
        self.keys, self.key_tokens = _token_keys(point, dev)
        self._batch = None
        # a model step runs the MoE layer inside a forward context with every DP rank's token count
        self._forward = contextlib.ExitStack()
        self._forward.enter_context(set_forward_context(
            None, vllm_config, num_tokens=t, num_tokens_across_dp=torch.full((n,), t, dtype=torch.int32, device="cpu")))
        self.in_dtype = in_dtype

    def _vllm_environment(self, ctx, point):
        """vLLM's config and distributed state over this worker group's process group (once per process:
        vLLM builds its groups once)."""
        if "config" in _PROCESS:
            return _PROCESS["config"]
        from vllm.config import VllmConfig, set_current_vllm_config
        from vllm.distributed import init_distributed_environment, initialize_model_parallel

        vllm_config = VllmConfig()
        vllm_config.model_config = SimpleNamespace(enforce_eager=True, is_moe=True)  # as vLLM's MoE tests set it
        parallel = vllm_config.parallel_config
        parallel.data_parallel_size = ctx.world_size
        parallel.data_parallel_rank = ctx.rank
        parallel.enable_expert_parallel = True
        parallel.all2all_backend = self.name
        parallel.rank = 0
        vllm_config.scheduler_config.max_num_batched_tokens = point.tokens_per_rank
        # kept current for the process: the all2all managers read it whenever they build a handle
        set_current_vllm_config(vllm_config).__enter__()
        # torch.distributed is up (the worker group's): vLLM takes its ranks as the DP world and starts nothing
        init_distributed_environment(world_size=1, rank=0, distributed_init_method="env://",
                                     local_rank=ctx.local_rank, backend="nccl")
        initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)
        _PROCESS.update(config=vllm_config, tokens=point.tokens_per_rank)
        return vllm_config

    def _inputs(self, batch):
        """The MoE layer's input (bf16 activations, routing in the P/F's index dtype), staged once per batch."""
        if batch is not self._batch:
            if self.w.dtype == "fp8_block128":
                a1 = batch.x_bf16
            else:
                a1 = batch.x.view(self.in_dtype).reshape(batch.num_tokens, self.w.hidden)
            self._a1 = a1.contiguous()
            self._ids = batch.topk_ids.to(self.ids_dtype)
            self._weights = batch.topk_weights
            self._batch = batch
        return self._a1, self._weights, self._ids

    def dispatch(self, batch):
        """vLLM's ``prepare``: quantize where the model quantizes, then dispatch."""
        a1, weights, ids = self._inputs(batch)
        a1q, a1q_scale, meta, topk_ids, topk_weights = self.pf.prepare(
            a1, weights, ids, self.w.experts, self.expert_map, False, self.quant_config, False)
        self._prepared = (topk_weights, topk_ids)
        return _received(self, a1q, a1q_scale, meta, topk_ids, topk_weights)

    def combine(self, expert_out):
        """vLLM's ``finalize``: combine the expert outputs into this rank's tokens."""
        from vllm.model_executor.layers.fused_moe.topk_weight_and_reduce import TopKWeightAndReduceNoOP

        fused = expert_out.to(self.in_dtype)
        if self.batched:
            fused = fused.reshape(self._slots_shape)
        topk_weights, topk_ids = self._prepared
        self.pf.finalize(self.out, fused, topk_weights, topk_ids, False, TopKWeightAndReduceNoOP())
        return self.out

    def teardown(self):
        """Leave the forward context; the distributed state stays for the process's next point."""
        self._forward.close()
        self.pf = self.out = None

    def code_path(self):
        """vLLM's release and the prepare/finalize class it built."""
        import vllm

        return {"vllm": vllm.__version__, "vllm_prepare_finalize": self._pf_class}

    def footing(self):
        """vLLM's own objects."""
        return {"via": VLLM}


def _token_keys(point, device):
    """Every token's first :data:`_KEY_BYTES` payload bytes as one int64, sorted, with the token of each."""
    total = point.total_tokens
    x, _ = point.payload_rows(torch.arange(total, dtype=torch.int64, device=device))
    keys = _row_keys(x)
    order = keys.argsort()
    keys = keys[order]
    if bool((keys[1:] == keys[:-1]).any()):
        raise RuntimeError("two tokens' payloads start with the same bytes: rows cannot be told apart; change --seed")
    return keys, order


def _row_keys(rows_u8):
    """The first :data:`_KEY_BYTES` bytes of each uint8 row as one int64."""
    head = rows_u8.reshape(rows_u8.shape[0], -1)[:, :_KEY_BYTES].contiguous()
    return head.view(torch.int64).reshape(-1)


def _received(self, a1q, a1q_scale, meta, topk_ids, topk_weights) -> Received:
    """vLLM's prepared rows as the harness reads them: each row's token found by its first bytes."""
    x = a1q.view(torch.uint8)
    if self.batched:  # [local experts, max tokens, hidden]: one slot per (token, local expert)
        local, max_tokens = x.shape[0], x.shape[1]
        self._slots_shape = (local, max_tokens, self.w.hidden)
        x = x.reshape(local * max_tokens, -1)
        counts = meta.expert_num_tokens.to(torch.int64)
        slot = torch.arange(max_tokens, device=x.device)
        valid = (slot[None, :] < counts[:, None]).reshape(-1)
        expert = (torch.arange(local, device=x.device)[:, None] + self.offset).expand(local, max_tokens).reshape(-1)
    else:
        valid, expert = None, None
    keys = _row_keys(x)
    at = torch.searchsorted(self.keys, keys).clamp(max=self.keys.shape[0] - 1)
    found = self.keys[at] == keys
    valid = found if valid is None else valid & found
    token_index = torch.where(found, self.key_tokens[at], 0).to(torch.int32)
    x_sf = None
    if a1q_scale is not None and self.w.scale_bytes:
        x_sf = a1q_scale.reshape(x.shape[0], -1).contiguous().view(torch.uint8)
    ids = None
    if topk_ids is not None and not self.batched:
        ids = topk_ids.to(torch.int64)
        deferred = getattr(meta, "rank_expert_offset", None) if meta is not None else None
        if deferred is not None:  # globalization deferred to the experts: local ids + the rank's offset
            ids = torch.where(ids >= 0, ids + deferred, ids)
    return Received(x=x, x_sf=x_sf, topk_ids=ids, topk_weights=None if self.batched else topk_weights,
                    token_index=token_index, valid=valid, expert=expert)
