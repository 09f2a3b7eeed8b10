"""What the FlashInfer adapters share: API detection, availability, Mapping and communicator.

FlashInfer 0.6.x exposes the kernels as ``flashinfer.comm.MoeAlltoAll`` (one-sided) and
``flashinfer.comm.trtllm_alltoall.MnnvlMoe`` (two-sided); 0.7.x adds ``flashinfer.moe_ep``
(``NVLinkOneSidedAlltoAll``, the API vLLM 0.33 uses), which refuses GPUs whose NVLinks are
not all up — so on one GPU without NVLink peers only the legacy classes run (ep size 1).
"""

from __future__ import annotations

import importlib.util

#: QuantFormat member per activation dtype (FlashInfer's own per-format byte table).
QUANT_FORMAT = {
    "bf16": "BF16", "fp16": "FP16", "fp8": "FP8PerTensor", "fp8_block128": "DeepSeekFp8",
    "mxfp8": "MXFP8", "nvfp4": "NVFP4", "mxfp4": "MXFP4",
}


def has_module(name: str) -> bool:
    """Whether ``name`` can be imported (without importing it when its parent is missing)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def has_legacy_one_sided() -> bool:
    """``flashinfer.comm.trtllm_moe_alltoall`` (MoeAlltoAll) is present: 0.6.x and 0.7.2."""
    return has_module("flashinfer") and has_module("flashinfer.comm.trtllm_moe_alltoall")


def has_legacy_two_sided() -> bool:
    """``flashinfer.comm.trtllm_alltoall`` (MnnvlMoe) is present: 0.6.x and 0.7.2."""
    return has_module("flashinfer") and has_module("flashinfer.comm.trtllm_alltoall")


def has_moe_ep() -> bool:
    """``flashinfer.moe_ep`` (0.7.x) is present."""
    return has_module("flashinfer") and has_module("flashinfer.moe_ep")


def common_unavailable_reason(ctx) -> str | None:
    """No CUDA, no FlashInfer, or several ranks without every NVLink up."""
    if ctx.device != "cuda":
        return "needs CUDA GPUs (FlashInfer NVLink kernels); this run is on CPU"
    if not has_module("flashinfer"):
        return "flashinfer not installed (pip install flashinfer-python; vLLM 0.33 pins 0.7.2.post1)"
    if ctx.world_size > 1:
        up = ctx.nvlinks_all_up
        if up is None:
            try:
                from flashinfer.comm.mnnvl import MnnvlMemory

                up = bool(MnnvlMemory.supports_mnnvl())
            except Exception as e:  # NVML missing or failing: the kernels cannot be placed
                return f"cannot check NVLink state ({type(e).__name__}: {e})"
        if not up:
            return "needs every NVLink of each GPU up (P2P over NVLink); PCIe-only GPUs or links down"
    return None


def mapping(ctx):
    """A pure-EP ``flashinfer.comm.Mapping`` of this group (ep size = world size)."""
    from flashinfer.comm import Mapping

    ws = ctx.world_size
    return Mapping(world_size=ws, rank=ctx.rank, gpus_per_node=ws, tp_size=ws, moe_ep_size=ws)


def mnnvl_config(ctx):
    """``MnnvlConfig`` exchanging memory handles over torch.distributed's CPU group."""
    from flashinfer.comm.comm_backend import TorchDistBackend
    from flashinfer.comm.mnnvl import MnnvlConfig

    return MnnvlConfig(comm_backend=TorchDistBackend(ctx.cpu_group))


def quant_format(dtype: str):
    """The ``flashinfer.fused_moe.api.QuantFormat`` member of an activation dtype."""
    from flashinfer.fused_moe.api import QuantFormat

    return getattr(QuantFormat, QUANT_FORMAT[dtype])


def pad16(n: int) -> int:
    """``n`` rounded up to a multiple of 16 (row alignment the kernels require)."""
    return -(-n // 16) * 16
