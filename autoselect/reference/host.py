"""The host a reference class stands for, and how its package requirements are judged.

A reference class (``ref-h200_sxm-x8``) is a machine of the system as NVIDIA measured it: the
system's GPUs (model, arch, memory), every NVLink up, the rack's MNNVL fabric for the NVL72 class.
Package requirements (DeepEP, FlashInfer) are facts of the serving host, not of the machine
running ``recommend``: the reference tables were measured with those packages, so a reference
class's host has each package marked :data:`ON_SERVING_HOST` (the rules' package check passes),
and the answer says, per package a candidate needs, how it was judged and that the serving host
must have it (:data:`REQUIREMENTS`).
"""

from __future__ import annotations

from autoselect import rules
from autoselect.hardware import GpuInfo, HostFingerprint
from autoselect.reference.systems import ReferenceClass

#: What the package check reads on a reference class's host: the package is a fact of the serving host.
ON_SERVING_HOST = "required on the serving host"
#: How each package requirement is judged for a reference class, per package of the rules table.
REQUIREMENTS = {
    "deep_ep": "deep_ep: judged present (NVIDIA measured DeepEP inside vLLM 0.24.0's image); the serving host "
               "needs it: {hint}",
    "flashinfer": "flashinfer: judged present (the one-/two-sided rows are TensorRT-LLM's kernels, which FlashInfer "
                  "ships); the serving host needs it: {hint}",
}
GENERIC_REQUIREMENT = "{package}: judged present, as on the system NVIDIA measured; the serving host needs it: " \
    "{hint}"
#: NVLink links per GPU of every reference system (HGX H100/H200/B200/B300 boards, GB200/GB300 trays).
NVLINKS_PER_GPU = 18


def reference_host(ref: ReferenceClass) -> HostFingerprint:
    """The host a reference class stands for: the system's GPUs (model, arch, memory), every NVLink
    up, the rack's MNNVL fabric for the NVL72 class, and each backend's package marked
    :data:`ON_SERVING_HOST` (see the module docstring)."""
    s = ref.system
    gpus = [GpuInfo(index=i, name=s.gpu_name, uuid="", memory_total_mib=s.memory_mib, sm_arch=s.arch,
                    compute_capability=s.compute_capability, nvlinks_up=NVLINKS_PER_GPU,
                    nvlinks_total=NVLINKS_PER_GPU) for i in range(ref.gpu_count)]
    packages = sorted({cap.package for cap in rules.BACKENDS.values() if cap.package})
    return HostFingerprint(
        hostname=ref.name, machine_id="", host_class=ref.name, device="cuda", gpu_name=s.gpu_name,
        gpu_count=ref.gpu_count, gpu_arch=s.arch, gpus=gpus, all_nvlinks_up=True, nvlink_peak_gbps=s.nvlink_gbps,
        fabric="completed (the NVL72 rack's MNNVL fabric, as measured)" if ref.domain == "nvl72" else None,
        versions={p: ON_SERVING_HOST for p in packages})
