"""``--moe-backend`` values that dispatch and combine themselves, and what that does to ``--all2all-backend``.

From v0.32.0 vLLM's FlashInfer MoE-EP megakernels (``flashinfer_moe_ep_cutedsl``,
``flashinfer_moe_ep_mega_deep_gemm``) run the expert-parallel exchange inside the MoE kernel.
When ``--moe-backend`` names one, vLLM binds the hidden all2all value ``passthrough`` (no
all2all at all) if the backend is still ``allgather_reducescatter`` (the default, or that value
given explicitly: vLLM cannot tell them apart), and raises a ValueError at start-up for any other
backend (``bind_passthrough_all2all_backend``, ``vllm/config/kernel.py``). A removed value
(``pplx``, ``naive``) has become ``allgather_reducescatter`` before the binding runs, so it
binds too. :data:`MOE_BACKENDS` holds the rows; :func:`moe_backend_binding` applies them to a
command line; ``autoselect recommend`` and the launch path never emit ``--all2all-backend`` next
to such a ``--moe-backend`` (:func:`dispatching_moe_backend`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from autoselect.rules.versions import version_in

#: The hidden all2all value vLLM binds (0.34.0 vllm/config/kernel.py:161 PASSTHROUGH_ALL2ALL_BACKEND).
PASSTHROUGH = "passthrough"
#: The backend vLLM replaces by passthrough; any other explicit value is refused.
BINDS_FROM = "allgather_reducescatter"

_BIND = ("0.32.0 vllm/config/kernel.py:193-226 bind_passthrough_all2all_backend, called from "
         "KernelConfig.set_platform_defaults (kernel.py:446); 0.34.0 kernel.py:194-228, :496")


class MoeBackendRow(NamedTuple):
    """A ``--moe-backend`` value that dispatches and combines itself, in a release range."""

    moe_backend: str
    since: str
    until: str | None
    source: str
    architectures: frozenset | None = None  # model architectures vLLM accepts it for (None: any)


MOE_BACKENDS = (
    MoeBackendRow("flashinfer_moe_ep_cutedsl", "0.32.0", None,
                  f"0.32.0 vllm/config/kernel.py:148 FLASHINFER_MOE_EP_CUTEDSL in FLASHINFER_MOE_EP_BACKENDS; {_BIND}"),
    MoeBackendRow("flashinfer_moe_ep_mega_deep_gemm", "0.32.0", None,
                  f"0.32.0 vllm/config/kernel.py:149 FLASHINFER_MOE_EP_DEEP_GEMM; {_BIND}; DeepSeek-V4 models only "
                  "(validate_flashinfer_moe_ep_model, 0.34.0 kernel.py:185-242)",
                  frozenset({"DeepseekV4ForCausalLM", "DeepSeekV4MTPModel", "DeepseekV41ForCausalLM"})),
)
#: vLLM's parser normalizes --moe-backend before it checks the choice (lower case, '-' -> '_').
NORMALIZE_SOURCE = ("0.34.0 vllm/engine/arg_utils.py:1874-1876 (type=lambda s: s.lower().replace('-', '_')), "
                    "0.32.0 arg_utils.py:1805-1807")


def normalize(moe_backend: str) -> str:
    """``--moe-backend`` as vLLM reads it: lower case, dashes as underscores."""
    return moe_backend.lower().replace("-", "_")


def dispatching_moe_backend(moe_backend: str | None, vllm_version: str) -> MoeBackendRow | None:
    """The :data:`MOE_BACKENDS` row when ``moe_backend`` dispatches and combines itself on ``vllm_version``."""
    if not moe_backend:
        return None
    value = normalize(moe_backend)
    return next((r for r in MOE_BACKENDS if r.moe_backend == value and version_in(vllm_version, r.since, r.until)),
                None)


@dataclass(frozen=True)
class Binding:
    """What vLLM does with the all2all backend next to a self-dispatching ``--moe-backend``."""

    row: MoeBackendRow
    backend: str | None  # PASSTHROUGH when bound; None when vLLM refuses to start
    refused: str | None  # the start-up error, in words

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return {"moe_backend": self.row.moe_backend, "backend": self.backend, "refused": self.refused,
                "source": self.row.source}


def moe_backend_binding(moe_backend: str | None, backend: str | None, vllm_version: str) -> Binding | None:
    """What ``vllm_version`` makes of all2all backend ``backend`` (the value it would run without
    the MoE backend, after a removed value's replacement) next to ``--moe-backend moe_backend``.

    None when ``moe_backend`` does not dispatch itself on that release.
    """
    row = dispatching_moe_backend(moe_backend, vllm_version)
    if row is None:
        return None
    if backend in (BINDS_FROM, PASSTHROUGH):
        return Binding(row, PASSTHROUGH, None)
    return Binding(row, None, (
        f"vLLM {vllm_version} refuses to start: --moe-backend {row.moe_backend} dispatches and combines itself and "
        f"cannot be paired with --all2all-backend {backend} (ValueError: 'leave --all2all-backend unset'; "
        f"{row.source})"))
