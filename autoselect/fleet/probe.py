"""The probe: the first task on each node (inside a Ray worker), before anything is measured.

It reports the node's Ray node id, its host fingerprint, and its GPUs' load from NVML, with the
verdict ``--only-idle`` acts on (:func:`busy_reasons`).
"""

from __future__ import annotations

from dataclasses import dataclass

from autoselect.fleet.spec import NodeSettings
from autoselect.hardware import fingerprint


@dataclass(frozen=True)
class Probe:
    """What a node's probe found: ``host`` is a :class:`~autoselect.hardware.HostFingerprint` dict;
    ``gpu_load`` one ``{"index", "utilization", "memory_used"}`` (fractions) per GPU; ``busy``
    the reasons the node is busy (empty when idle)."""

    ray_node_id: str
    host: dict
    gpu_load: tuple[dict, ...] = ()
    busy: tuple[str, ...] = ()


def probe_node(settings: NodeSettings) -> Probe:
    """On a node: its Ray node id, host fingerprint, GPU load and busy verdict."""
    import ray

    host = fingerprint()
    indices = None
    try:
        indices = [int(i) for i in ray.get_gpu_ids()]
    except Exception:  # not inside a task with GPUs: every GPU of the node counts
        pass
    load = gpu_load(indices) if host.device == "cuda" else []
    busy = busy_reasons(load, utilization=settings.busy_utilization, memory_used=settings.busy_memory)
    return Probe(ray_node_id=ray.get_runtime_context().get_node_id(), host=host.to_dict(),
                 gpu_load=tuple(load), busy=tuple(busy))


def busy_reasons(gpus: list[dict], *, utilization: float, memory_used: float) -> list[str]:
    """Why a node is busy: every GPU above a threshold (``gpus``: index, utilization, memory_used
    as fractions). Empty when idle; a node without GPUs is never busy."""
    out = []
    for g in gpus:
        if g["utilization"] > utilization:
            out.append(f"GPU {g['index']} at {g['utilization']:.0%} utilisation (limit {utilization:.0%})")
        if g["memory_used"] > memory_used:
            out.append(f"GPU {g['index']} has {g['memory_used']:.0%} of its memory in use (limit {memory_used:.0%})")
    return out


def gpu_load(indices: list[int] | None = None) -> list[dict]:
    """Utilisation and memory in use (fractions) of this node's GPUs from NVML; [] without NVML."""
    nvml = _nvml()
    if nvml is None:
        return []
    try:
        return [_load_of(nvml, i) for i in range(nvml.nvmlDeviceGetCount()) if indices is None or i in indices]
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # a failing shutdown changes nothing that was read
            pass


def _nvml():
    """The initialised ``pynvml`` module, or None without the package, a driver or a GPU."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver / no GPU: nothing can be busy
        return None
    return pynvml


def _load_of(nvml, index: int) -> dict:
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    util = nvml.nvmlDeviceGetUtilizationRates(h)
    mem = nvml.nvmlDeviceGetMemoryInfo(h)
    return {"index": index, "utilization": util.gpu / 100.0, "memory_used": mem.used / mem.total if mem.total else 0.0}
