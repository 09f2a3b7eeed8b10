"""vLLM's default backend: all-gather every token to every rank, reduce-scatter the outputs, in vLLM's calls."""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist

from autoselect.rules.agrs_collectives import agrs_calls, collectives_for
from autoselect.rules.versions import NEWEST_VLLM
from bench.backends import Backend, Received
from bench.backends._collectives import all_gather_single, reduce_scatter_single
from db.records import GROUPED, UNEQUAL

#: vLLM's names of the gathered tensors (rules/agrs_collectives.py) -> the batch's fields.
_BATCH_FIELDS = {"hidden_states": "x", "topk_weights": "topk_weights", "topk_ids": "topk_ids", "scales": "x_sf"}


class AllgatherReducescatter(Backend):
    """Based on all-gather (dispatch) and reduce-scatter (combine), as vLLM's AgRsAll2AllManager calls them.

    The calls are the target release's row of ``autoselect.rules.agrs_collectives`` (one source
    with the derived default): dispatch gathers ``hidden_states`` (the quantized values),
    ``topk_weights`` (fp32), ``topk_ids`` (int32) and, for an activation with block scales, the
    ``scales``, each in its own collective, in that order. With equal token counts per DP rank
    that is one all_gather per tensor, and combine one reduce_scatter of the bf16 outputs; with
    unequal counts (``ctx.dp_sizes == "unequal"``, vLLM's path when the DP sizes differ and the
    step is not padded) one broadcast per tensor and root rank, and one reduce per root rank.

    vLLM wraps the dispatch's calls in pynccl's ``group_start()`` / ``group_end()``
    (ncclGroupStart/End: NCCL launches them as one). On NCCL the adapter does the same through
    torch's coalescing manager (``torch.distributed.distributed_c10d._coalescing_manager``): equal
    sizes take its fast path, ``all_gather_into_tensor_coalesced``, which ProcessGroupNCCL runs as
    one ncclAllGather per tensor between ncclGroupStart and ncclGroupEnd; the per-root broadcasts
    and reduces run between its ``_start_coalescing`` / ``_end_coalescing``, the same group calls.
    On gloo, which has no groups, the same calls run one after another. Where torch lacks the
    manager the calls run in sequence and :meth:`code_path` says so.

    Two departures, both local copies: torch's broadcast and reduce work in place where pynccl
    passes separate send and receive buffers, so each rank first copies its own rows into the
    gathered tensors (and, before the reduces, its own output rows into the output); gloo's
    reduce also writes into the non-root ranks' buffers, so on gloo the whole combine input is
    staged in a scratch buffer first (NCCL leaves a non-root's buffer as it is).
    """

    name = "allgather_reducescatter"
    supports_cuda_graph = True

    def unavailable_reason(self, ctx):
        """Always available: it needs only torch.distributed."""
        return None

    def setup(self, ctx, point):
        """Read the target release's calls and allocate one gathered tensor per gathered tensor."""
        self.ctx, self.w = ctx, point
        self.row, self.read = collectives_for(ctx.vllm_version or NEWEST_VLLM)
        self.even = ctx.dp_sizes != UNEQUAL
        self.calls = agrs_calls(self.row, scales=bool(point.scale_bytes), world_size=ctx.world_size, even=self.even)
        n, t, k, dev = ctx.world_size, point.tokens_per_rank, point.top_k, ctx.torch_device
        shapes = {"hidden_states": (point.value_bytes, torch.uint8), "topk_weights": (k, torch.float32),
                  "topk_ids": (k, torch.int32), "scales": (point.scale_bytes, torch.uint8)}
        self.tensors = [c.tensor for c in self.calls if c.phase == "dispatch"]
        self.gathered = {name: torch.empty((n * t, shapes[name][0]), dtype=shapes[name][1], device=dev)
                         for name in self.tensors}
        self.out = torch.empty((t, point.hidden), dtype=torch.bfloat16, device=dev)
        # gloo's reduce writes into every rank's buffer: stage the combine input (see the class docstring)
        self.staged = (torch.empty((n * t, point.hidden), dtype=torch.bfloat16, device=dev)
                       if not self.even and ctx.device == "cpu" else None)
        self.token_index = torch.arange(n * t, dtype=torch.int32, device=dev)
        self.rows = [slice(r * t, (r + 1) * t) for r in range(n)]
        self.coalesce = getattr(dist.distributed_c10d, "_coalescing_manager", None) if ctx.device == "cuda" else None

    def _group(self):
        """One NCCL group around the calls inside it (CUDA); nothing on gloo."""
        if self.coalesce is None:
            return contextlib.nullcontext()
        # all_gathers take the fast path (no device); broadcasts and reduces the start/end coalescing
        device = None if self.even else self.ctx.torch_device
        return self.coalesce(group=self.ctx.group, device=device)

    def dispatch(self, batch):
        """Gather vLLM's tensors, one collective per tensor (per tensor and root with unequal sizes)."""
        g, me = self.ctx.group, self.ctx.rank
        inputs = [(self.gathered[name], getattr(batch, _BATCH_FIELDS[name])) for name in self.tensors]
        if self.even:
            with self._group():
                for out, inp in inputs:
                    all_gather_single(out, inp, group=g)
        else:
            for out, inp in inputs:
                out[self.rows[me]].copy_(inp)
            with self._group():
                for out, _ in inputs:
                    for root, rows in enumerate(self.rows):
                        dist.broadcast(out[rows], src=root, group=g)
        got = self.gathered
        return Received(x=got["hidden_states"], x_sf=got.get("scales"), topk_ids=got["topk_ids"],
                        topk_weights=got["topk_weights"], token_index=self.token_index)

    def combine(self, expert_out):
        """Sum the bf16 expert outputs back to the tokens' ranks: one reduce_scatter, or one reduce per root."""
        g, me = self.ctx.group, self.ctx.rank
        if self.even:
            reduce_scatter_single(self.out, expert_out, group=g)
            return self.out
        if self.staged is not None:
            self.staged.copy_(expert_out)
            with self._group():
                for root, rows in enumerate(self.rows):
                    dist.reduce(self.staged[rows], dst=root, group=g)
            return self.staged[self.rows[me]]
        self.out.copy_(expert_out[self.rows[me]])
        with self._group():
            for root, rows in enumerate(self.rows):
                dist.reduce(self.out if root == me else expert_out[rows], dst=root, group=g)
        return self.out

    def teardown(self):
        """Drop the buffers."""
        self.gathered = self.out = self.staged = None

    def code_path(self):
        """The release range whose calls were made, and how they were grouped."""
        dispatch = [c for c in self.calls if c.phase == "dispatch"]
        combine = next(c for c in self.calls if c.phase == "combine")
        per = "per tensor" if self.even else "per tensor and root rank"
        grouped = ("in one NCCL group" if self.coalesce is not None
                   else "in sequence (no torch coalescing manager)" if self.ctx.device == "cuda"
                   else "in sequence (gloo has no groups)")
        path = {"vllm_calls": (f"vLLM {self.row.since}{'-' + self.row.until if self.row.until else '+'} "
                               f"(rules/agrs_collectives.py): {len(dispatch)} {dispatch[0].op} {per} {grouped}, "
                               f"{combine.op}" + ("" if self.even else " per root rank"))}
        if not self.read:
            path["vllm_calls_note"] = (f"vLLM {self.ctx.vllm_version}'s calls were not read; "
                                       f"the nearest release's were made")
        return path

    def footing(self):
        """vLLM's calls, one per tensor; the DP-size path taken."""
        return {"calls": GROUPED, "dp_sizes": self.ctx.dp_sizes}
