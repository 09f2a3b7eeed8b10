"""The reference systems NVIDIA measured and the host classes that name them.

A *reference system* is one GPU system of AIConfigurator's tables (``h200_sxm``, ``gb200``,
...): one GPU model, its NVLink generation, how many GPUs share one NVLink domain. A
*reference class* is the host class autoselect answers for from those tables, named
``ref-<system>-x<N>`` after the system and the GPU count of one machine of it
(``ref-h200_sxm-x8``: an HGX board of 8 H200 on NVSwitch; ``ref-gb200-x4``: one GB200 compute
tray). A class accepts every world size up to its GPU count for which the tables have rows.

GB200 has a second class, ``ref-gb200-nvl72``: the whole NVL72 rack as one multi-node NVLink
(MNNVL) domain of 72 GPUs in 18 trays. TensorRT-LLM's one-/two-sided rows were measured across
trays at EP 2 to 64 (one-sided to 32), so world sizes above 4 belong to this class; it has no
default world size (the caller names one). DeepEP rows (EP 4, one tray) and the NCCL rows
behind the derived AGRS numbers (2 and 4 GPUs) exist only inside one tray, so the rack class
has no AGRS evidence above 4 GPUs.

Nothing here reads the data file; :func:`match_host` only compares GPU model and count (and,
for the rack class, the MNNVL fabric state) with what a host fingerprint says.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from autoselect.errors import UserError
from autoselect.hardware import REFERENCE_CLASS_PREFIX  # the reserved namespace

#: Every reference class name starts with this; no measured host class may (autoselect.hardware).
PREFIX = REFERENCE_CLASS_PREFIX


class UnknownReferenceClass(UserError):
    "The --host-class value starts with ref- but names no reference class."


class ReferenceWorldSizeUnavailable(UserError):
    "The world size is outside what a reference class can describe."


class GpuArchNotOfReference(UserError):
    "--gpu-arch names another arch than the GPUs of the reference class."


class ReferenceSystem(NamedTuple):
    """One GPU system of the published tables."""

    key: str  # AIConfigurator's system folder: "h200_sxm"
    gpu_name: str  # the NVML device name the tables record ("NVIDIA H200")
    label: str  # short name for the source line ("H200")
    compute_capability: str  # "9.0"
    arch: str  # autoselect's arch family: "sm90" / "sm100"
    gpus_per_node: int  # GPUs of one machine on one NVSwitch (HGX board or GB tray)
    nvlink: str  # NVLink generation: "NVLink 4"
    nvlink_gbps: float  # peak NVLink bandwidth per GPU per direction, GB/s
    rack_gpus: int | None = None  # GPUs of one MNNVL rack (GB200 NVL72), None for HGX
    memory_mib: int = 0  # memory of one GPU (AIConfigurator's mem_capacity), MiB



class ReferenceClass(NamedTuple):
    """A host class answered from the published tables of one system."""

    name: str  # "ref-h200_sxm-x8"
    system: ReferenceSystem
    gpu_count: int  # GPUs the class describes (72 for the NVL72 rack)
    domain: str  # "node" (one NVSwitch board / tray) or "nvl72" (the MNNVL rack)
    default_world_size: int | None  # None: the caller must name a world size

    @property
    def max_world_size(self) -> int:
        return self.gpu_count

    def describe(self) -> str:
        """One line: ``8×H200 (sm90, NVLink 4, 450 GB/s per GPU per direction)``."""
        where = "NVL72 rack, MNNVL across trays" if self.domain == "nvl72" else "one NVSwitch domain"
        return (f"{self.gpu_count}×{self.system.label} ({self.system.arch}, {self.system.nvlink}, "
                f"{self.system.nvlink_gbps:g} GB/s per GPU per direction, {where})")

    def check_world_size(self, world_size: int | None) -> int:
        """The world size to answer for: ``world_size``, else the class default.

        :raises ReferenceWorldSizeUnavailable: no world size for the rack class, or one above
            the class's GPU count (a multi-node deployment of HGX boards has no reference rows).
        """
        if world_size is None:
            if self.default_world_size is None:
                raise ReferenceWorldSizeUnavailable(
                    f"{self.name} spans up to {self.gpu_count} GPUs in {self.gpu_count // self.system.gpus_per_node} "
                    f"trays: give the world size to answer for (--world-size N, N <= {self.gpu_count})")
            return self.default_world_size
        if world_size < 2 or world_size > self.gpu_count:
            hint = (f"; for more than {self.system.gpus_per_node} GPUs use {rack_class(self.system).name}"
                    if self.domain == "node" and self.system.rack_gpus else "")
            raise ReferenceWorldSizeUnavailable(
                f"{self.name} describes 2 to {self.gpu_count} GPUs, not a world size of {world_size}{hint}")
        return world_size

    def check_arch(self, gpu_arch: str | None) -> str:
        """The arch to answer for: the system's; ``gpu_arch`` (normalized) must be it.

        :raises GpuArchNotOfReference: another arch than the system's GPUs.
        """
        if gpu_arch is not None and gpu_arch != self.system.arch:
            raise GpuArchNotOfReference(
                f"--gpu-arch {gpu_arch}: {self.name} is {self.system.label} hardware ({self.system.arch}); "
                f"drop --gpu-arch or pass {self.system.arch}")
        return self.system.arch

    def to_dict(self) -> dict[str, Any]:
        s = self.system
        return {"name": self.name, "system": s.key, "gpu_name": s.gpu_name, "gpu_count": self.gpu_count,
                "gpu_arch": s.arch, "compute_capability": s.compute_capability, "nvlink": s.nvlink,
                "nvlink_gbps": s.nvlink_gbps, "domain": self.domain,
                "default_world_size": self.default_world_size}


def _system(key, gpu_name, label, cc, gpus_per_node, memory_mib, rack_gpus=None) -> ReferenceSystem:
    hopper = cc.startswith("9.")
    return ReferenceSystem(key, gpu_name, label, cc, "sm90" if hopper else "sm100", gpus_per_node,
                           "NVLink 4" if hopper else "NVLink 5", 450.0 if hopper else 900.0, rack_gpus, memory_mib)


#: The six systems with vLLM all2all tables in aiconfigurator-core 0.12.0. GPU names are the
#: ``device`` column of their tables (and ``gpu_name`` of collection_meta.yaml), compute
#: capabilities the metas' ``compute_capability`` / the systems' ``sm_version``, GPUs per
#: node and per rack the systems' ``num_gpus_per_node`` / ``num_gpus_per_rack``, NVLink
#: bandwidth the systems' ``intra_node_bw`` (450 GB/s Hopper, 900 GB/s Blackwell, per GPU per
#: direction; the same as autoselect.hardware's NVLink table for 18 links), GPU memory the
#: systems' ``mem_capacity`` in MiB (80, 141 and 180 GiB; 275040, 189471 and 284208 MiB "reported
#: by nvidia-smi" for B300, GB200, GB300): vLLM's default --max-num-batched-tokens and the
#: one-sided workspace depend on it.
SYSTEMS: dict[str, ReferenceSystem] = {
    s.key: s for s in (
        _system("h100_sxm", "NVIDIA H100 80GB HBM3", "H100", "9.0", 8, 80 * 1024),
        _system("h200_sxm", "NVIDIA H200", "H200", "9.0", 8, 141 * 1024),
        _system("b200_sxm", "NVIDIA B200", "B200", "10.0", 8, 180 * 1024),
        _system("b300_sxm", "NVIDIA B300 SXM6 AC", "B300", "10.3", 8, 275040),
        _system("gb200", "NVIDIA GB200", "GB200", "10.0", 4, 189471, rack_gpus=72),
        _system("gb300", "NVIDIA GB300", "GB300", "10.3", 4, 284208, rack_gpus=72),
    )
}

#: Systems whose tables have rows across trays of the rack (GB300 has none: no rack class).
RACK_SYSTEMS = ("gb200",)


def _node_class(s: ReferenceSystem) -> ReferenceClass:
    return ReferenceClass(f"{PREFIX}{s.key}-x{s.gpus_per_node}", s, s.gpus_per_node, "node", s.gpus_per_node)


def rack_class(s: ReferenceSystem) -> ReferenceClass:
    """The MNNVL rack class of a GB system (``ref-gb200-nvl72``)."""
    return ReferenceClass(f"{PREFIX}{s.key}-nvl{s.rack_gpus}", s, s.rack_gpus, "nvl72", None)


CLASSES: dict[str, ReferenceClass] = {
    c.name: c for c in [_node_class(s) for s in SYSTEMS.values()] + [rack_class(SYSTEMS[k]) for k in RACK_SYSTEMS]
}


def get_class(name: str | ReferenceClass) -> ReferenceClass:
    """The reference class called ``name`` (a class passes through as is).

    :raises UnknownReferenceClass: with the list of known classes.
    """
    if isinstance(name, ReferenceClass):
        return name
    try:
        return CLASSES[name]
    except KeyError:
        raise UnknownReferenceClass(
            f"unknown reference host class {name!r}; known: {', '.join(CLASSES)}") from None


class ReferenceMatch(NamedTuple):
    """A host recognised as a reference system, and what differs from the measured one."""

    ref_class: ReferenceClass
    caveats: tuple[str, ...] = ()


def _field(host: Any, name: str) -> Any:
    return host.get(name) if isinstance(host, dict) else getattr(host, name, None)


def _same_gpu(a: str | None, b: str) -> bool:
    return bool(a) and " ".join(a.split()).casefold() == b.casefold()


def match_host(host: Any, world_size: int | None = None) -> ReferenceMatch | None:
    """The reference class whose system is ``host``'s, or None.

    :param host: a :class:`autoselect.hardware.HostFingerprint`, or a dict with its fields (a
        ``hosts`` row of the results database): ``gpu_name``, ``gpu_count``, ``device``,
        ``all_nvlinks_up``, ``fabric`` are read.
    :param world_size: the deployment's world size, when known. Above the host's GPU count it
        asks for a multi-node deployment: only a GB200 tray whose MNNVL fabric is up matches
        (the rack class); HGX boards across nodes have no reference rows.

    The GPU model must be the system's exactly (NVML name; an H200 NVL or H100 PCIe is not an
    HGX H200 / H100 SXM) and the GPU count the system's per-node count (a 4-GPU HGX H100 board
    has no NVSwitch: the 8-GPU tables do not describe it).
    """
    if _field(host, "device") not in (None, "cuda"):
        return None
    gpu_name, gpu_count = _field(host, "gpu_name"), _field(host, "gpu_count") or 0
    system = next((s for s in SYSTEMS.values() if _same_gpu(gpu_name, s.gpu_name)), None)
    if system is None or gpu_count != system.gpus_per_node:
        return None
    caveats = []
    if _field(host, "all_nvlinks_up") is False or _field(host, "all_nvlinks_up") == 0:
        caveats.append("not every NVLink of this host is up; the reference was measured with all links up")
    if world_size is not None and world_size > gpu_count:
        if system.key not in RACK_SYSTEMS:
            return None
        fabric = _field(host, "fabric") or ""
        if not fabric.startswith("completed"):
            return None
        ref = rack_class(system)
        if world_size > ref.gpu_count:
            return None
        return ReferenceMatch(ref, tuple(caveats))
    return ReferenceMatch(_node_class(system), tuple(caveats))
