"""Which vLLM platform the line will run on here: GPUs (CUDA) or vLLM's CPU platform.

``launch`` replaces itself with the server on this machine, so this machine decides, unless
``--host-class`` or ``--gpu-arch`` name the GPUs the line is for (planning a line for another
machine, a ``--dry-run`` on a laptop). A host without GPUs, or a line that sets
``VLLM_TARGET_DEVICE=cpu``, runs vLLM's CPU platform, whose communicator builds one all2all manager
(:data:`autoselect.rules.PLATFORMS`): there is nothing to pick and no GPU arch to ask for.
"""

from __future__ import annotations

import os
from typing import Callable, Mapping, NamedTuple

from autoselect.hardware import HostFingerprint, fingerprint
from autoselect.rules import CUDA

CPU = "cpu"
#: The variable that names vLLM's target device (a CPU build reads ``cpu``).
TARGET_DEVICE = "VLLM_TARGET_DEVICE"
#: Files the NVIDIA driver creates: without any, NVML finds no GPU, so it is not even imported.
NVIDIA_DRIVER_FILES = ("/proc/driver/nvidia/version", "/dev/nvidiactl")


def local_host() -> HostFingerprint | None:
    """This machine's fingerprint from NVML where an NVIDIA driver is loaded; None without one
    (no GPU: neither pynvml nor the package metadata of a CPU fingerprint is worth its start-up time)."""
    if not any(os.path.exists(p) for p in NVIDIA_DRIVER_FILES):
        return None
    return fingerprint()


class PlatformChoice(NamedTuple):
    """The platform, why, and this machine's fingerprint when it was taken (None: not needed; a
    NamedTuple: see :class:`autoselect.launch.line.LaunchLine`)."""

    name: str  # CUDA or CPU
    why: str
    host: HostFingerprint | None = None


def line_platform(serving: Mapping[str, str], *, gpu_arch: str | None = None, host_class: str | None = None,
                  probe: Callable[[], HostFingerprint | None] | None = None) -> PlatformChoice:
    """The platform the line runs on: CUDA when ``--gpu-arch`` / ``--host-class`` name GPUs,
    else CPU when the line's environment sets ``VLLM_TARGET_DEVICE=cpu`` or ``probe`` (NVML)
    finds no GPU here, else CUDA with this machine's fingerprint (``probe`` default: :func:`local_host`)."""
    if host_class or gpu_arch:
        named = f"--host-class {host_class}" if host_class else f"--gpu-arch {gpu_arch}"
        return PlatformChoice(CUDA, f"{named} names the GPUs")
    if serving.get(TARGET_DEVICE, "").strip().lower() == CPU:
        return PlatformChoice(CPU, f"the line sets {TARGET_DEVICE}=cpu")
    host = (probe or local_host)()
    if host is None or not host.gpu_count:
        return PlatformChoice(CPU, "no GPU on this host", host)
    return PlatformChoice(CUDA, f"{host.gpu_count} x {host.gpu_name} here", host)
