"""vLLM's default backend's bytes in one packed all-gather: the fused lower end of its calls (benchmark only)."""

from __future__ import annotations

import torch

from bench.backends import Backend, Received
from bench.backends._collectives import all_gather_single, column_view, pack_rows, reduce_scatter_single
from db.records import FUSED


class ReferenceAllgatherFused(Backend):
    """Based on one packed all-gather (dispatch) and a reduce-scatter (combine): vLLM's default, fused.

    Dispatch packs each token's quantized activation row, scales, int32 expert ids and fp32
    weights side by side in one byte row and all-gathers the rows in one collective; every rank
    receives every token. Combine reduce-scatters the bf16 expert outputs, as vLLM does. vLLM
    gathers the tensors in separate calls (``allgather_reducescatter``); this variant is the lower
    end of the range the derived default prices (one latency floor for the whole dispatch,
    ``autoselect.reference.derived``), measured beside it, and never vLLM's number. Runs on gloo
    (CPU) and NCCL (CUDA).
    """

    name = "reference_allgather_fused"
    supports_cuda_graph = True

    def unavailable_reason(self, ctx):
        """Always available: it needs only torch.distributed."""
        return None

    def setup(self, ctx, point):
        """Allocate the packed send row buffer, the gathered buffer and the combine output."""

        self.ctx, self.w = ctx, point
        t, k, dev = point.tokens_per_rank, point.top_k, ctx.torch_device
        self.xb, self.sfb = point.value_bytes, point.scale_bytes
        self.row = self.xb + self.sfb + 8 * k
        self.send = torch.empty((t, self.row), dtype=torch.uint8, device=dev)
        self.gathered = torch.empty((t * ctx.world_size, self.row), dtype=torch.uint8, device=dev)
        self.out = torch.empty((t, point.hidden), dtype=torch.bfloat16, device=dev)
        self.token_index = torch.arange(t * ctx.world_size, dtype=torch.int32, device=dev)

    def dispatch(self, batch):
        """Pack the batch into byte rows and all-gather them; rank r's rows land in block r."""
        pack_rows(self.send, (batch.topk_ids, batch.topk_weights, batch.x, batch.x_sf))
        all_gather_single(self.gathered, self.send, group=self.ctx.group)
        g, xb, sfb, k = self.gathered, self.xb, self.sfb, self.w.top_k
        x_at = 8 * k
        return Received(
            x=g[:, x_at : x_at + xb],
            x_sf=g[:, x_at + xb :] if sfb else None,
            topk_ids=column_view(g, 0, 4 * k, torch.int32),
            topk_weights=column_view(g, 4 * k, 8 * k, torch.float32),
            token_index=self.token_index,
        )

    def combine(self, expert_out):
        """Reduce-scatter (sum) the bf16 expert outputs back to the tokens' ranks."""
        reduce_scatter_single(self.out, expert_out, group=self.ctx.group)
        return self.out

    def teardown(self):
        """Drop the buffers."""
        self.send = self.gathered = self.out = None

    def footing(self):
        """One packed collective for the dispatch: the fused calls."""
        return {"calls": FUSED}
