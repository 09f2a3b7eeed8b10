"""What the FlashInfer adapters share: API detection, the code path to mirror, availability, payload staging.

Three API generations (:data:`autoselect.rules.flashinfer.FLASHINFER_APIS`), checked against the sources
of flashinfer-python 0.6.18.post1, 0.7.2.post1 (vLLM 0.33.0's pin) and 0.7.4 (0.7.3, vLLM
0.34.0's pin, is not on PyPI):

- ``flashinfer.comm.MoeAlltoAll`` (one-sided, ``comm/trtllm_moe_alltoall.py``) and
  ``flashinfer.comm.trtllm_alltoall.MnnvlMoe`` (two-sided): 0.6.x and 0.7.2, same signatures
  (0.7.2 adds only a keyword-only ``backend="trtllm"``), deprecated in 0.7.x, removed in 0.7.4.
- ``flashinfer.moe_ep`` exists in every one, but only 0.7.x has the NVLink communication API
  (``NVLinkOneSidedAlltoAll``, ``NVLinkTwoSidedAlltoAll``, ``create_communication``,
  ``MoEEpCommParams.dispatch_format``); 0.6.18's ``moe_ep`` has only the NCCL-EP/NIXL-EP
  fleets. So "``flashinfer.moe_ep`` imports" is not the test: :func:`has_moe_ep` checks the
  names vLLM checks (``vllm/utils/flashinfer.py::has_flashinfer_nvlink_one_sided``).
  0.7.4 adds the one-sided transports (``NVLinkOneSidedConfig.cft`` / ``lamport``, on by default
  where the platform supports them) and renames ``dispatch``'s ``max_tokens_per_rank`` to
  ``runtime_max_tokens_per_rank``: :func:`installed_api` reads both from what is installed.
- ``moe_ep``'s NVLink backends refuse a GPU whose NVLinks are not all up
  (``moe_ep/backends/split/comm/nvlink_common.py:17-48``); the legacy classes have no such
  check, so on one GPU without NVLink peers only they run (at ep size 1; FlashInfer <= 0.7.2).

Which calls an adapter makes follows the target vLLM release (``ctx.vllm_version``,
:data:`autoselect.rules.flashinfer.VLLM_CALLS`) as far as the installed FlashInfer allows
(:func:`choose_api`); the adapter records the path it took (``code_path``: ``flashinfer_api``
and ``vllm_calls`` in the result's versions), so a measurement says which vLLM code it stands for.

Token index. The gate needs each received row's global token id, but vLLM sends only
``[x, x_sf, topk_ids, topk_weights]`` and no kernel argument takes an extra payload
(``MoEEpCommunication.dispatch``: ``moe_ep/core/comm/communication.py:203-212``;
``NVLinkOneSidedConfig.extra_payload_bytes_per_token`` only *reserves* workspace for bytes
riding inside those tensors, as vLLM does for padded MXFP8 scales). So the 4-byte index rides
at the end of the last activation tensor vLLM sends (``x_sf`` when the format has scales,
else ``x``), padded so the row stays a multiple of 16 bytes (:func:`index_tail`), and the
tensor is staged once per batch (:class:`Staged`), not in every timed dispatch.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from dataclasses import dataclass

from autoselect import rules

#: QuantFormat member per activation dtype (FlashInfer's own per-format byte table,
#: ``moe_ep/core/comm/communication.py:60-68`` in 0.7.2, equals autoselect/payload.py's).
QUANT_FORMAT = {
    "bf16": "BF16", "fp16": "FP16", "fp8": "FP8PerTensor", "fp8_block128": "DeepSeekFp8",
    "mxfp8": "MXFP8", "nvfp4": "NVFP4", "mxfp4": "MXFP4",
}

#: What ``flashinfer.moe_ep`` must export for the 0.7 one-sided path (vLLM 0.33's check).
MOE_EP_ONE_SIDED_NAMES = ("BootstrapConfig", "MoEEpCommParams", "NVLinkOneSidedAlltoAll",
                          "NVLinkOneSidedConfig", "create_communication")
#: ... and for the two-sided path (vLLM 0.34's check, ``vllm/utils/flashinfer.py:407-421``).
MOE_EP_TWO_SIDED_NAMES = ("BootstrapConfig", "MoEEpCommParams", "NVLinkTwoSidedAlltoAll",
                          "NVLinkTwoSidedConfig", "create_communication")

#: Bytes of the global token index that ride with each row (int32).
TOKEN_INDEX_BYTES = 4


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


def _moe_ep():
    """(``flashinfer.moe_ep``, None), or (None, why it cannot be had here)."""
    if not (has_module("flashinfer") and has_module("flashinfer.moe_ep")):
        return None, "no flashinfer.moe_ep (FlashInfer < 0.6.18)"
    try:
        return importlib.import_module("flashinfer.moe_ep"), None
    except Exception as e:  # a broken install: report, do not crash the chooser
        return None, f"flashinfer.moe_ep does not import ({type(e).__name__}: {e})"


def missing_moe_ep_one_sided() -> str | None:
    """What the 0.7 ``flashinfer.moe_ep`` one-sided API lacks here, or None when it is complete."""
    ep, why = _moe_ep()
    if ep is None:
        return why
    absent = [name for name in MOE_EP_ONE_SIDED_NAMES if not hasattr(ep, name)]
    if absent:
        return f"flashinfer.moe_ep has no {', '.join(absent)} (FlashInfer 0.6.x; the NVLink API came in 0.7)"
    fields = getattr(ep.MoEEpCommParams, "__dataclass_fields__", {})
    if "dispatch_format" not in fields:
        return "flashinfer.moe_ep.MoEEpCommParams has no dispatch_format (FlashInfer < 0.7.2)"
    return None


def has_moe_ep() -> bool:
    """The 0.7 ``flashinfer.moe_ep`` one-sided API (``NVLinkOneSidedAlltoAll`` & co.) is complete."""
    return missing_moe_ep_one_sided() is None


def missing_moe_ep_two_sided() -> str | None:
    """What the 0.7 ``flashinfer.moe_ep`` two-sided API lacks here, or None when it is complete."""
    ep, why = _moe_ep()
    if ep is None:
        return why
    absent = [name for name in MOE_EP_TWO_SIDED_NAMES if not hasattr(ep, name)]
    return f"flashinfer.moe_ep has no {', '.join(absent)} (FlashInfer 0.6.x)" if absent else None


@dataclass(frozen=True)
class InstalledApi:
    """What the installed FlashInfer offers the adapters (read from the package, never from its version)."""

    legacy_one_sided: bool
    legacy_two_sided: bool
    moe_ep_one_sided: bool
    moe_ep_two_sided: bool
    transport_fields: bool  # NVLinkOneSidedConfig has cft and lamport (0.7.3+)
    dispatch_keyword: str | None  # moe_ep dispatch's token-count keyword


def installed_api() -> InstalledApi:
    """Read :class:`InstalledApi` off the installed FlashInfer (imports ``flashinfer.moe_ep`` when present)."""
    one, two = has_moe_ep(), missing_moe_ep_two_sided() is None
    fields, keyword = False, None
    if one or two:
        ep = importlib.import_module("flashinfer.moe_ep")
        if one:
            fields = {"cft", "lamport"} <= set(getattr(ep.NVLinkOneSidedConfig, "__dataclass_fields__", {}))
        cls = ep.NVLinkOneSidedAlltoAll if one else ep.NVLinkTwoSidedAlltoAll
        names = inspect.signature(cls.dispatch).parameters
        keyword = next((k for k in ("runtime_max_tokens_per_rank", "max_tokens_per_rank") if k in names), None)
    return InstalledApi(has_legacy_one_sided(), has_legacy_two_sided(), one, two, fields, keyword)


@dataclass(frozen=True)
class ApiChoice:
    """The calls an adapter makes for one point, and the vLLM code path they stand for."""

    api: str  # "legacy" | "moe_ep"
    fence_flags: bool  # pass cft=False, lamport=False (the fields exist and vLLM's path runs the fence transport)
    dispatch_keyword: str | None
    target: rules.flashinfer.VllmCalls | None  # the target release's calls (None: a release without the backend)
    mirrors: rules.flashinfer.VllmCalls | None  # the calls actually made, as a release's row
    why: str  # why the calls differ from the target's ('' when they do not)

    def code_path(self) -> dict[str, str]:
        """``versions`` entries of a result: the API generation used and the vLLM calls it mirrors."""
        api = ("flashinfer.moe_ep" + (" (cft=False, lamport=False)" if self.fence_flags else "")
               if self.api == "moe_ep" else "flashinfer.comm legacy classes")
        path = {"flashinfer_api": api, "vllm_calls": self.mirrors.label if self.mirrors else "none"}
        if self.why:
            path["vllm_calls_note"] = self.why
        return path


def choose_api(backend: str, vllm_version: str | None, world_size: int, found: InstalledApi) -> ApiChoice | None:
    """The API ``backend``'s adapter uses for a target release, or None when this FlashInfer has neither.

    The target release's API when it is installed and usable; at world size 1 the legacy
    classes first (``moe_ep`` refuses a GPU without NVLink peers); otherwise the other
    generation, with the reason. One-sided passes ``cft=False, lamport=False`` whenever the
    installed FlashInfer has the fields: every vLLM release runs the fence transport (0.34
    sets it explicitly; older ones pin a FlashInfer that has no other).
    """
    version = vllm_version or rules.NEWEST_VLLM
    one_sided = backend == rules.flashinfer.ONE_SIDED
    legacy = found.legacy_one_sided if one_sided else found.legacy_two_sided
    moe_ep = found.moe_ep_one_sided if one_sided else found.moe_ep_two_sided
    target = rules.flashinfer.vllm_calls(backend, version)
    wanted = target.api if target is not None else "moe_ep"
    if world_size == 1 and legacy:
        api, why = "legacy", ("" if wanted == "legacy" else
                              "world size 1: flashinfer.moe_ep refuses a GPU without NVLink peers, so the legacy "
                              "classes make the calls")
    elif wanted == "moe_ep" and moe_ep or wanted == "legacy" and legacy:
        api, why = wanted, ""
    elif moe_ep or legacy:
        api = "moe_ep" if moe_ep else "legacy"
        why = f"this FlashInfer has no {'flashinfer.moe_ep NVLink API' if wanted == 'moe_ep' else 'legacy classes'}"
    else:
        return None
    fence = one_sided and api == "moe_ep" and found.transport_fields
    keyword = found.dispatch_keyword if api == "moe_ep" else None
    mirrors = next((c for c in rules.flashinfer.VLLM_CALLS if c.backend == backend and c.api == api
                    and (not one_sided or api == "legacy" or c.fence_only == fence)), None)
    if target is not None and mirrors is not None and mirrors != target and not why:
        why = f"this FlashInfer cannot make the calls of {target.label}"
    return ApiChoice(api, fence, keyword, target, mirrors, why)


def common_unavailable_reason(ctx) -> str | None:
    """No CUDA, no FlashInfer, or several ranks without every NVLink up."""
    if ctx.device != "cuda":
        return "needs CUDA GPUs (FlashInfer NVLink kernels); this run is on CPU"
    if not has_module("flashinfer"):
        pin = rules.flashinfer.pin(ctx.vllm_version or rules.NEWEST_VLLM)
        return ("flashinfer not installed (pip install flashinfer-python"
                + (f"; vLLM {pin.vllm} pins {pin.pin}" if pin else "") + ")")
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


def index_tail(row_bytes: int) -> int:
    """Bytes appended to a ``row_bytes`` row to carry the 4-byte token index.

    The smallest tail of at least 4 bytes that keeps a row that was a multiple of 16 bytes a
    multiple of 16: the one-sided kernel's 0.6.18 dispatch picks 16-byte stores from the row
    size alone (``moeAlltoAllKernels.cu:334-338`` there; 0.7.2 also checks the addresses,
    lines 377-395, and falls back to narrower stores), and the two-sided ``moe_comm`` refuses
    rows that are not (``csrc/trtllm_alltoall.cu:192-194``: "input.size(1) must be aligned to
    16 bytes").
    """
    return pad16(row_bytes + TOKEN_INDEX_BYTES) - row_bytes


class Staged:
    """The tensors one batch is dispatched from: ``x``, ``x_sf`` and the token index riding on the last.

    ``carrier`` is ``x`` or ``x_sf`` widened by :func:`index_tail` bytes whose first four
    hold the token index; ``x``/``x_sf`` are the batch's own tensors for the other one.
    Built once per batch object, so timed dispatches copy nothing.
    """

    def __init__(self, batch, value_bytes: int, scale_bytes: int):
        import torch

        self.batch = batch
        self.on_scales = scale_bytes > 0
        width = scale_bytes if self.on_scales else value_bytes
        self.width, self.tail = width, index_tail(width)
        source = batch.x_sf if self.on_scales else batch.x
        carrier = torch.zeros((source.shape[0], width + self.tail), dtype=torch.uint8, device=source.device)
        carrier[:, :width].copy_(source)
        carrier[:, width : width + TOKEN_INDEX_BYTES].copy_(batch.token_index.reshape(-1, 1).view(torch.uint8))
        self.carrier = carrier
        self.x = batch.x if self.on_scales else carrier
        self.x_sf = carrier if self.on_scales else None

    def split(self, x_rows, sf_rows):
        """``(x, x_sf, token_index)`` views of received rows laid out like this staging."""
        import torch

        carrier = sf_rows if self.on_scales else x_rows
        w = self.width
        index_bytes = carrier[:, w : w + TOKEN_INDEX_BYTES]
        try:  # a view (no kernel in timed dispatches) when the rows keep 4-byte alignment
            token_index = index_bytes.view(torch.int32).reshape(-1)
        except RuntimeError:
            token_index = index_bytes.contiguous().view(torch.int32).reshape(-1)
        if self.on_scales:
            return x_rows, carrier[:, :w], token_index
        return carrier[:, :w], None, token_index


def staged(adapter, batch):
    """``adapter``'s :class:`Staged` for ``batch``, rebuilt only when the batch object changes."""
    current = getattr(adapter, "_staged", None)
    if current is None or current.batch is not batch:
        current = Staged(batch, adapter.w.value_bytes, adapter.w.scale_bytes)
        adapter._staged = current
    return current
