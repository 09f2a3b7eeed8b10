"""A baseline exchange with torch's all_to_all_single; benchmark-only, never recommended."""

from __future__ import annotations

import torch
import torch.distributed as dist

from bench.backends import Backend, Received
from bench.backends._collectives import column_view, pack_rows


class ReferenceAllToAll(Backend):
    """Based on ``all_to_all_single`` with per-rank splits: only ranks owning a token's experts receive it.

    Dispatch computes, per token, the distinct ranks owning its experts, exchanges the
    per-rank counts, then sends each token's packed row (ids, weights, token index, values,
    scales) once to each of those ranks. Combine sends the expert outputs back along the
    reverse splits and sums them per source token. Runs on gloo (CPU) and NCCL (CUDA).
    """

    name = "reference_all_to_all"

    def unavailable_reason(self, ctx):
        """Always available: it needs only torch.distributed."""
        return None

    def setup(self, ctx, point):
        """Allocate the packed row buffer and the count tensors."""
        self.ctx, self.w = ctx, point
        t, k, dev = point.tokens_per_rank, point.top_k, ctx.torch_device
        self.xb, self.sfb = point.value_bytes, point.scale_bytes
        self.row = 8 * k + 4 + self.xb + self.sfb
        self.packed = torch.empty((t, self.row), dtype=torch.uint8, device=dev)
        self.recv_counts = torch.empty(ctx.world_size, dtype=torch.int64, device=dev)
        first = torch.tensor([point.expert_range(r)[0] for r in range(ctx.world_size)], device=dev)
        self.first_expert = first
        self.ranks = torch.arange(ctx.world_size, device=dev)

    def dispatch(self, batch):
        """Send each token's row once to every rank owning one of its experts."""
        ws, k = self.ctx.world_size, self.w.top_k
        owner = torch.searchsorted(self.first_expert, batch.topk_ids.to(torch.int64), right=True) - 1
        wanted = torch.zeros((batch.num_tokens, ws), dtype=torch.bool, device=owner.device)
        wanted.scatter_(1, owner, True)
        dest, token = wanted.t().nonzero(as_tuple=True)  # grouped by destination rank
        send_counts = wanted.sum(dim=0)
        dist.all_to_all_single(self.recv_counts, send_counts, group=self.ctx.group)
        self.send_splits = send_counts.tolist()
        self.recv_splits = self.recv_counts.tolist()
        self.send_token = token
        pack_rows(self.packed, (batch.topk_ids, batch.topk_weights, batch.token_index.view(-1, 1),
                                batch.x, batch.x_sf))
        send = self.packed.index_select(0, token)
        recv = torch.empty((sum(self.recv_splits), self.row), dtype=torch.uint8, device=send.device)
        dist.all_to_all_single(recv, send, output_split_sizes=self.recv_splits,
                               input_split_sizes=self.send_splits, group=self.ctx.group)
        x_at = 8 * k + 4
        return Received(
            x=recv[:, x_at : x_at + self.xb],
            x_sf=recv[:, x_at + self.xb :] if self.sfb else None,
            topk_ids=column_view(recv, 0, 4 * k, torch.int32),
            topk_weights=column_view(recv, 4 * k, 8 * k, torch.float32),
            token_index=column_view(recv, 8 * k, 8 * k + 4, torch.int32).reshape(-1),
        )

    def combine(self, expert_out):
        """Send the outputs back along the reverse splits and sum them per source token."""
        return self.sum_rows(self.return_rows(expert_out))

    def return_rows(self, expert_out):
        """The all_to_all_single that brings each received row's output back to its source rank."""
        back = torch.empty((sum(self.send_splits), expert_out.shape[1]), dtype=expert_out.dtype,
                           device=expert_out.device)
        dist.all_to_all_single(back, expert_out.contiguous(), output_split_sizes=self.send_splits,
                               input_split_sizes=self.recv_splits, group=self.ctx.group)
        return back

    def sum_rows(self, back):
        """Sum the returned rows per source token (fp32 accumulation), bf16 ``[T, H]``."""
        out = torch.zeros((self.w.tokens_per_rank, back.shape[1]), dtype=torch.float32, device=back.device)
        out.index_add_(0, self.send_token, back.to(torch.float32))
        return out.to(torch.bfloat16)

    def teardown(self):
        """Drop the buffers."""
        self.packed = None
