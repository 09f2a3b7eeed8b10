"""DeepEP low-latency's in-kernel fp8 cast, written out in fp32 torch: a test oracle, not a stand-in.

What it follows, line by line (DeepEP 2.1.0, commit dd758ca; the V1 tree 567632d is identical):

- ``csrc/kernels/legacy/internode_ll.cu`` ``dispatch``: each 128 bf16 values of a row (16
  lanes x 8 values) are read as fp32; ``amax = kFP8Margin`` (1e-4f), then
  ``amax = fmaxf(amax, fabsf(v))`` over the block (``warp_reduce_max<16>``);
  ``calculate_fp8_scales(amax, scale, scale_inv, round_scale)``; the block's stored scale is
  ``scale_inv``; each value becomes ``__nv_cvt_float2_to_fp8x2(v * scale, __NV_SATFINITE, __NV_E4M3)``
  (round to nearest even, saturating to ±448, NaN stays NaN).
- ``csrc/kernels/legacy/utils.cuh`` ``calculate_fp8_scales``: without ``round_scale``,
  ``scale_inv = amax * kFinfoAmaxInvE4M3`` (``1 / 448.0f``) and ``scale = kFinfoAmaxE4M3 / amax``
  (``448.0f / amax``, an IEEE division: DeepEP builds without ``--use_fast_math``); with it,
  ``e = fast_log2_ceil(amax * kFinfoAmaxInvE4M3)`` (exponent field - 127, + 1 if any mantissa
  bit is set), ``scale = 2**-e``, ``scale_inv = 2**e``. ``extract_required_scale_format`` with
  UE8M0 keeps ``bits(scale_inv) >> 23``.

Used by the tests to show that the workload's ``fp8_block128`` rows survive that cast bit for bit;
whether DeepEP itself does so is what ``perf/deepep_gpu_check.sh`` checks on GPUs.
"""

from __future__ import annotations

import torch

K_FP8_MARGIN = torch.tensor(1e-4, dtype=torch.float32)
K_AMAX_E4M3 = torch.tensor(448.0, dtype=torch.float32)
K_AMAX_INV_E4M3 = torch.tensor(1.0, dtype=torch.float32) / K_AMAX_E4M3  # 1 / 448.0f, rounded once


def _pow2(e):
    """fp32 ``2**e`` from its bit pattern (utils.cuh ``fast_pow2``), ``e`` an int32 tensor."""
    return ((e + 127) << 23).to(torch.int32).view(torch.float32)


def _log2_ceil(x):
    """utils.cuh ``fast_log2_ceil``: exponent field - 127, plus 1 when any mantissa bit is set."""
    bits = x.contiguous().view(torch.int32)
    return ((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0).to(torch.int32)


def deepep_ll_cast(x_bf16, *, round_scale=False, use_ue8m0=False):
    """``(codes uint8 [N, H], scales)`` as DeepEP's low-latency dispatch casts bf16 rows ``[N, H]`` (H % 128 == 0).

    ``scales`` is fp32 ``[N, H/128]`` (``scale_inv`` per block), or with ``use_ue8m0`` the
    ``uint8 [N, H/128]`` exponent bytes DeepEP packs four to an int32.
    """
    n, hidden = x_bf16.shape
    assert hidden % 128 == 0, "DeepEP casts whole 128-value blocks"
    if use_ue8m0:
        assert round_scale, "UE8M0 SF requires `round_scale=True` (internode_ll.cu)"
    v = x_bf16.to(torch.float32).reshape(n, hidden // 128, 128)
    amax = torch.fmax(v.abs().amax(dim=2), K_FP8_MARGIN)
    if round_scale:
        e = _log2_ceil(amax * K_AMAX_INV_E4M3)
        scale, scale_inv = _pow2(-e), _pow2(e)
    else:
        scale_inv = amax * K_AMAX_INV_E4M3
        scale = K_AMAX_E4M3 / amax
    q = v * scale[:, :, None]
    q = torch.where(q.isnan(), q, q.clamp(-448.0, 448.0))  # __NV_SATFINITE
    codes = q.to(torch.float8_e4m3fn).view(torch.uint8).reshape(n, hidden)
    if use_ue8m0:
        return codes, (scale_inv.contiguous().view(torch.int32) >> 23).to(torch.uint8)
    return codes, scale_inv


def pad_columns(rows, width):
    """``rows`` with zero columns up to ``width`` (vLLM pads the hidden size; DeepEP sees zeros there)."""
    out = torch.zeros((rows.shape[0], width), dtype=rows.dtype)
    out[:, : rows.shape[1]] = rows
    return out
