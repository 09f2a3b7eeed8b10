"""Helpers shared by the built-in torch.distributed adapters.

torch 2.13 renamed ``all_gather_into_tensor`` / ``reduce_scatter_tensor`` to
``all_gather_single`` / ``reduce_scatter_single`` (the old names warn); older torch has only
the old ones.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def pack_rows(out, parts) -> None:
    """Copy ``parts`` (2-D tensors with the same rows; None skipped) side by side, as bytes, into ``out``."""
    col = 0
    for part in parts:
        if part is None:
            continue
        b = part.view(torch.uint8).reshape(part.shape[0], -1)
        out[:, col : col + b.shape[1]].copy_(b)
        col += b.shape[1]


def column_view(rows, start: int, stop: int, dtype):
    """Columns ``[start, stop)`` of a uint8 row buffer as ``dtype``: a view when aligned, else a copy."""
    part = rows[:, start:stop]
    try:
        return part.view(dtype)
    except RuntimeError:
        return part.contiguous().view(dtype)
