"""Which vLLM platform the line will run on here: GPUs (CUDA) or vLLM's CPU platform.

``launch`` replaces itself with the server on this machine, so this machine decides, unless
``--host-class`` or ``--gpu-arch`` name the GPUs the line is for (planning a line for another
machine, a ``--dry-run`` on a laptop). A host without GPUs, or a line that sets
``VLLM_TARGET_DEVICE=cpu``, runs vLLM's CPU platform, whose communicator builds one all2all manager
(:data:`autoselect.rules.PLATFORMS`): there is nothing to pick and no GPU arch to ask for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from autoselect.hardware import HostFingerprint, fingerprint
from autoselect.rules import CUDA

CPU = "cpu"
#: The variable that names vLLM's target device (a CPU build reads ``cpu``).
TARGET_DEVICE = "VLLM_TARGET_DEVICE"


@dataclass(frozen=True)
class PlatformChoice:
    """The platform, why, and this machine's fingerprint when it was taken (None: not needed)."""

    name: str  # CUDA or CPU
    why: str
    host: HostFingerprint | None = None


def line_platform(serving: Mapping[str, str], *, gpu_arch: str | None = None, host_class: str | None = None,
                  probe: Callable[[], HostFingerprint] | None = None) -> PlatformChoice:
    """The platform the line runs on: CUDA when ``--gpu-arch`` / ``--host-class`` name GPUs,
    else CPU when the line's environment sets ``VLLM_TARGET_DEVICE=cpu`` or ``probe`` (NVML)
    finds no GPU here, else CUDA with this machine's fingerprint (``probe`` default:
    :func:`autoselect.hardware.fingerprint`, the one ``recommend`` takes too)."""
    if host_class or gpu_arch:
        named = f"--host-class {host_class}" if host_class else f"--gpu-arch {gpu_arch}"
        return PlatformChoice(CUDA, f"{named} names the GPUs")
    if serving.get(TARGET_DEVICE, "").strip().lower() == CPU:
        return PlatformChoice(CPU, f"the line sets {TARGET_DEVICE}=cpu")
    host = (probe or fingerprint)()
    if not host.gpu_count:
        return PlatformChoice(CPU, "no GPU on this host", host)
    return PlatformChoice(CUDA, f"{host.gpu_count} x {host.gpu_name} here", host)
