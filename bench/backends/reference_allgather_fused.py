"""vLLM's default backend: all-gather every token to every rank, reduce-scatter the outputs."""

from __future__ import annotations

import torch

from bench.backends import Backend, Received
from bench.backends._collectives import all_gather_single, column_view, pack_rows, reduce_scatter_single


class AllgatherReducescatter(Backend):
    """Based on all-gather (dispatch) and reduce-scatter (combine), as vLLM's AgRsAll2AllManager.

    Dispatch all-gathers each token's quantized activation row, scales, int32 expert ids and
    fp32 weights (packed side by side in one byte row, so one collective moves them, like
    vLLM's grouped ``all_gatherv``); every rank receives every token. Combine
    reduce-scatters the bf16 expert outputs: each rank gets the sum over ranks of its own
    tokens' rows. Runs on gloo (CPU) and NCCL (CUDA).
    """

    name = "allgather_reducescatter"
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
