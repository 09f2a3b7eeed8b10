"""Activation dtypes and the bytes one token carries over the all2all (pure Python).

The vocabulary is the one ``inspect`` prints and the database stores. The byte counts are
the per-format layouts of what one token dispatches (values, block scales, int32 expert ids, fp32
routing weights: :func:`quant_bytes`, :func:`dispatch_bytes_per_token`): they are shared by
the benchmark workload (``bench/synthetic.py``) and the selector's latency model, so they
live here, importable without torch.
"""

from __future__ import annotations

import math

#: Every activation dtype autoselect knows, in the order tables print them.
ACTIVATION_DTYPES = ("bf16", "fp16", "fp8", "fp8_block128", "nvfp4", "mxfp8", "mxfp4")

#: Combine always returns bf16 outputs in vLLM's prepare/finalize paths.
COMBINE_DTYPE = "bf16"


def quant_bytes(dtype: str, hidden: int) -> tuple[int, int]:
    """(value bytes, scale bytes) per token for one activation row of ``hidden`` elements.

    ``bf16``/``fp16``: ``(2H, 0)``; ``fp8``: ``(H, 0)``; ``fp8_block128``: ``(H, 4*ceil(H/128))``
    (one fp32 scale per 128 values); ``mxfp8``: ``(H, ceil(H/32))``; ``nvfp4``:
    ``(ceil(H/2), ceil(H/16))``; ``mxfp4``: ``(ceil(H/2), ceil(H/32))`` (one byte scale per
    16 or 32 values). The benchmark workload sizes its ``x`` / ``x_sf`` rows with it.

    :param dtype: an activation dtype of :data:`ACTIVATION_DTYPES`.
    :param hidden: elements in the row (the model's hidden size).
    :raises ValueError: for a dtype not in :data:`ACTIVATION_DTYPES`.
    """
    table = {
        "bf16": (2 * hidden, 0),
        "fp16": (2 * hidden, 0),
        "fp8": (hidden, 0),
        "fp8_block128": (hidden, 4 * math.ceil(hidden / 128)),
        "mxfp8": (hidden, math.ceil(hidden / 32)),
        "nvfp4": (math.ceil(hidden / 2), math.ceil(hidden / 16)),
        "mxfp4": (math.ceil(hidden / 2), math.ceil(hidden / 32)),
    }
    try:
        return table[dtype]
    except KeyError:
        raise ValueError(
            f"unknown activation dtype {dtype!r}; known: {', '.join(ACTIVATION_DTYPES)}"
        ) from None


def activation_bytes(dtype: str, hidden: int) -> int:
    """Bytes of one token's quantized activation row (values + scales), no routing metadata."""
    values, scales = quant_bytes(dtype, hidden)
    return values + scales


def dispatch_bytes_per_token(dtype: str, hidden: int, top_k: int) -> int:
    """Bytes one token sends in dispatch: activation row + int32 expert ids + fp32 weights.

    ``bf16: 2H``, ``fp8: H``, ``fp8_block128: H + 4*ceil(H/128)``, ``mxfp8: H + ceil(H/32)``,
    ``nvfp4: ceil(H/2) + ceil(H/16)``, ``mxfp4: ceil(H/2) + ceil(H/32)``, plus ``8*top_k``.
    """
    return activation_bytes(dtype, hidden) + 8 * top_k


def dispatch_tensor_bytes(dtype: str, hidden: int, top_k: int) -> dict[str, int]:
    """Bytes one token puts in each tensor a dispatch moves: ``hidden_states`` (the activation
    values), ``scales`` (0 when the dtype has none), ``topk_weights`` (fp32) and ``topk_ids``
    (int32); they sum to :func:`dispatch_bytes_per_token`."""
    values, scales = quant_bytes(dtype, hidden)
    return {"hidden_states": values, "scales": scales, "topk_weights": 4 * top_k, "topk_ids": 4 * top_k}


def combine_bytes_per_token(hidden: int) -> int:
    """Bytes one token's combined output carries back: ``2H`` (bf16)."""
    return 2 * hidden


def all2all_bytes_per_token(dtype: str, hidden: int, top_k: int) -> int:
    """Dispatch plus combine bytes one token puts on the all2all (the latency model's x axis)."""
    return dispatch_bytes_per_token(dtype, hidden, top_k) + combine_bytes_per_token(hidden)
