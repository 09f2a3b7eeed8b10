"""What the ranks of one point agree on: a verdict, each iteration's time, when to stop.

Every exchange goes over the CPU (gloo) group: a verdict and the stopping decision are
host-side values, and the NCCL group may carry a capture in progress.
"""

from __future__ import annotations


def agree(ctx, message):
    """All ranks' messages (None = fine), gathered over the CPU group; returns the first non-None."""
    import torch.distributed as dist

    if ctx.world_size == 1:
        return message
    messages = [None] * ctx.world_size
    dist.all_gather_object(messages, message, group=ctx.cpu_group)
    return next((m for m in messages if m), None)


def max_over_ranks(ctx, rows):
    """``rows`` (list of per-iteration tuples) reduced with MAX over ranks, as a float64 tensor."""
    import torch
    import torch.distributed as dist

    t = torch.tensor(rows, dtype=torch.float64)
    if ctx.world_size > 1:
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ctx.cpu_group)
    return t


def rank0_says_done(ctx, done: bool) -> bool:
    """Rank 0's stopping decision, broadcast (wall clocks differ between ranks)."""
    import torch
    import torch.distributed as dist

    if ctx.world_size == 1:
        return done
    flag = torch.tensor([1 if done else 0], dtype=torch.int32)
    dist.broadcast(flag, src=0, group=ctx.cpu_group)
    return bool(flag.item())

