"""Across systems: a backend's published rows carried to another system of the same NVLink generation.

TensorRT-LLM's one- and two-sided rows exist for GB200 only, yet HGX B200 / B300 boards and
GB300 trays are NVLink 5 too (900 GB/s per GPU per direction, every GPU one hop from every other
through NVSwitch), and the kernels move the same bytes over the same links there. A system
without a backend's rows gets the rows of a system of its NVLink generation that has them, at
the same EP size (:func:`sources_for`), labelled ``transferred`` with the source system named.

**The band is measured, not assumed**: the cross-system error of the published family that stands
on the same footing (:data:`FAMILY`), on the rows both systems publish (:func:`cross_system_error`:
p95 of ``|t_target / t_source - 1|`` over every message size and GPU count both publish, both
ops). TensorRT-LLM's kernels were timed as CUDA-graph replays with no framework around them; the
NCCL rows are nccl-tests' kernel loops, the one published family on that footing that every
system has. DeepEP's rows are not used for it: they are eager inside vLLM (the host's CPU is in
the number), published at EP 4 on the trays and EP 8 on the boards (no common EP size), and
DeepEP's legacy kernels run a tray and a board differently (the collector's NVL4 patch).

**NVLink 4 gets nothing** (:func:`same_generation`): the NCCL rows of an NVLink-4 and an NVLink-5
system differ by a factor, not an error (half the bandwidth, another latency floor: p95
``|ratio - 1|`` ~0.75 between GB200 and H100/H200), so no band would leave a transferred number
meaningful; the candidate stays unmeasured and the bench command names it. Only the backends of
:data:`FAMILY` travel (DeepEP does not: its rows exist on every system at one tray's or board's EP
size). Pure Python over the packaged file.
"""

from __future__ import annotations

from typing import NamedTuple

from autoselect.reference.footing import EVIDENCE, ONE_SIDED, TWO_SIDED
from autoselect.reference.systems import SYSTEMS, ReferenceSystem

NCCL_FAMILY = "nccl"
_WHY = ("TensorRT-LLM's kernels were timed as CUDA-graph replays with no framework, as nccl-tests times NCCL's "
        "collectives: the NCCL all_gather / reduce_scatter rows are the published family on that footing both "
        "systems have")
#: backend -> (the published family whose cross-system error is its band, why).
FAMILY = {ONE_SIDED: (NCCL_FAMILY, _WHY), TWO_SIDED: (NCCL_FAMILY, _WHY)}
#: The public check that the same kernel runs alike on an HGX board and a GB200 rack.
SUPPORT = EVIDENCE["A3"]

QUANTILE = 0.95


def same_generation(a: ReferenceSystem, b: ReferenceSystem) -> bool:
    """Both systems' GPUs are on the same NVLink generation."""
    return a.nvlink == b.nvlink


class CrossError(NamedTuple):
    """The measured cross-system error of one family between two systems."""

    source: str
    target: str
    family: str
    error: float  # p95 of |t_target / t_source - 1|
    median_ratio: float  # t_target / t_source, the median
    n: int  # rows compared
    gpus: tuple[int, ...]  # the GPU counts both publish

    def describe(self) -> str:
        return (f"p95 |{SYSTEMS[self.target].label} / {SYSTEMS[self.source].label} - 1| = {self.error:.1%} over the "
                f"{self.n} NCCL all_gather and reduce_scatter rows both publish ({', '.join(map(str, self.gpus))} "
                f"GPUs; median ratio x{self.median_ratio:.3f})")


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cross_system_error(conn, source: str, target: str, family: str = NCCL_FAMILY) -> CrossError | None:
    """The cross-system error of ``family`` between two systems' rows in the reference file
    (``conn``), or None when they publish none in common."""
    if family != NCCL_FAMILY:
        raise ValueError(f"unknown cross-system family {family!r}")
    rows = conn.execute(
        "SELECT a.latency_us, b.latency_us, a.num_gpus FROM collectives a JOIN collectives b "
        "ON a.op = b.op AND a.nccl_dtype = b.nccl_dtype AND a.num_gpus = b.num_gpus AND a.message_bytes = b.message_bytes "
        "WHERE a.system = ? AND b.system = ? AND a.nccl_dtype = 'half' AND a.op IN ('all_gather', 'reduce_scatter')",
        (source, target)).fetchall()
    ratios = [t / s for s, t, _ in rows if s > 0]
    if not ratios:
        return None
    return CrossError(source, target, family, _quantile([abs(r - 1) for r in ratios], QUANTILE),
                      sorted(ratios)[len(ratios) // 2], len(ratios), tuple(sorted({g for _, _, g in rows})))


def sources_for(target: ReferenceSystem, systems_with_rows: list[str]) -> list[ReferenceSystem]:
    """The systems a target can take a backend's rows from: those of its NVLink generation that
    publish them, the same GPU first (a GB200 tray for a B200 board), then by name."""
    out = [SYSTEMS[k] for k in systems_with_rows if k in SYSTEMS and k != target.key
           and same_generation(SYSTEMS[k], target)]
    return sorted(out, key=lambda s: (s.compute_capability != target.compute_capability, s.key))
