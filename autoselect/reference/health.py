"""Health check against the reference: local measurements divided by NVIDIA's published numbers.

For a host whose GPUs are a reference system (:func:`~autoselect.reference.systems.match_host`),
every ``ok`` measurement on CUDA with a reference number at the same system, EP size, shape,
dispatch dtype and tokens per rank gets the ratio ``measured / reference``: the published row of
that shape, else the backend's other shapes transferred by bytes per token
(:mod:`autoselect.reference.transfer`), else, for ``allgather_reducescatter``, the number derived
from NCCL timings. A ratio above :data:`SLOWER_LIMIT` on a published or transferred number flags
the row (:data:`SLOWER`): far more than another harness and other versions explain. A derived
number is shown but never flags: it leaves out vLLM's quantize and top-k reduction kernels around
the collectives, so a healthy host measures above it. Every reference number is put on vLLM's
footing first (:mod:`autoselect.reference.footing`: graph-captured where vLLM captures the step,
the framework's per-launch cost on the derived default), as ``bench`` measures vLLM's path.

Pure functions over results (``bench`` prints them, ``fleet drift`` uses them as a baseline);
stdlib only.
"""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple

from autoselect.reference.footing import on_common_footing
from autoselect.reference.query import AGRS, DERIVED, ReferenceData, default
from autoselect.reference.systems import ReferenceClass, ReferenceWorldSizeUnavailable, match_host

#: A row slower than this many times the reference is flagged.
SLOWER_LIMIT = 1.5
SLOWER = "slower than NVIDIA's published reference: check NVLink state, clocks, driver"


class Measured(NamedTuple):
    """One local measurement to compare: a backend at a shape, EP size and token count."""

    backend: str
    hidden: int
    top_k: int
    experts: int
    activation_dtype: str
    world_size: int
    tokens_per_rank: int
    latency_us: float


class Comparison(NamedTuple):
    """A measurement next to its reference number."""

    measured: Measured
    reference_us: float
    evidence: str  # published | transferred | derived
    source_line: str

    @property
    def ratio(self) -> float:
        """measured / reference."""
        return self.measured.latency_us / self.reference_us

    @property
    def slower(self) -> bool:
        """True when the measurement is more than :data:`SLOWER_LIMIT` times a published or
        transferred number (a derived one never flags: see the module docstring)."""
        return self.evidence != DERIVED and self.ratio > SLOWER_LIMIT

    def to_dict(self) -> dict[str, Any]:
        m = self.measured
        return {"backend": m.backend, "tokens_per_rank": m.tokens_per_rank, "world_size": m.world_size,
                "measured_us": round(m.latency_us, 3), "reference_us": round(self.reference_us, 3),
                "ratio": round(self.ratio, 4), "evidence": self.evidence, "source": self.source_line,
                "slower": self.slower}


class ReferenceCheck(NamedTuple):
    """Every comparison of one set of measurements with one reference class."""

    ref_class: str
    comparisons: list[Comparison]

    @property
    def slower(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.slower]

    def to_dict(self) -> dict[str, Any]:
        return {"host_class": self.ref_class, "slower_limit": SLOWER_LIMIT,
                "slower": len(self.slower), "comparisons": [c.to_dict() for c in self.comparisons]}

    def lines(self) -> list[str]:
        """The text ``bench`` prints (comment lines), one per comparison, flagged rows marked."""
        if not self.comparisons:
            return []
        out = [f"# vs NVIDIA's published reference {self.ref_class} (ratio = measured / reference; above "
               f"{SLOWER_LIMIT:g}x on a published or transferred number: flagged):"]
        for c in self.comparisons:
            m = c.measured
            out.append(f"#   {m.backend} @ {m.tokens_per_rank}: {m.latency_us:.1f} us / {c.reference_us:.1f} us "
                       f"{c.evidence} = {c.ratio:.2f}x" + (f"  <- {SLOWER}" if c.slower else ""))
        out += [f"#   [{c.evidence}] {line}" for line, c in
                {c.source_line: c for c in self.comparisons}.items()]
        return out


def compare(measured: Iterable[Measured], ref_class: ReferenceClass, data: ReferenceData | None = None
            ) -> list[Comparison]:
    """The comparisons of ``measured`` with ``ref_class``'s reference numbers (those that have one)."""
    data = data if data is not None else default()
    numbers: dict[tuple, dict[int, tuple[float, str, str]]] = {}
    out = []
    for m in measured:
        try:
            ref_class.check_world_size(m.world_size)
        except ReferenceWorldSizeUnavailable:
            continue
        key = (m.backend, m.hidden, m.top_k, m.experts, m.activation_dtype, m.world_size)
        if key not in numbers:
            numbers[key] = _numbers(data, ref_class, *key)
        hit = numbers[key].get(m.tokens_per_rank)
        if hit is None and m.backend == AGRS:  # derived at any token count
            points = data.derived_agrs(ref_class, hidden=m.hidden, top_k=m.top_k, experts=m.experts, dtype=m.activation_dtype,
                                       world_size=m.world_size, tokens=[m.tokens_per_rank])
            hit = (_footed(points[0]), DERIVED, points[0].source_line) if points else None
        if hit is not None and hit[0] > 0:
            out.append(Comparison(m, *hit))
    return out


def _numbers(data: ReferenceData, ref: ReferenceClass, backend: str, hidden: int, top_k: int, experts: int,
             dtype: str, world_size: int) -> dict[int, tuple[float, str, str]]:
    """tokens -> (latency, evidence, source line) of one backend's published or transferred rows."""
    if backend == AGRS:
        return {}
    rows = data.for_shape(ref, backend, hidden=hidden, top_k=top_k, experts=experts, dtype=dtype,
                          world_size=world_size)
    return {p.tokens_per_rank: (_footed(p), rows.evidence, p.source_line) for p in rows.points}


def _footed(p) -> float:
    """A reference number on vLLM's footing (``footing.py``): what a measurement of vLLM's path is compared with."""
    return on_common_footing(p, p.arch).latency_us


def check_results(results: Iterable[Any], host: Any, data: ReferenceData | None = None) -> ReferenceCheck | None:
    """:func:`compare` for stored or freshly measured results (``db.records.Result``-like rows) of
    ``host``: its ``ok`` CUDA rows, not illegal, with a median; None when the host is no reference
    system (or nothing was measured on CUDA)."""
    rows = [r for r in results if r.status == "ok" and getattr(r, "device", "cuda") == "cuda"
            and not getattr(r, "illegal", False) and r.latency_us_p50]
    if not rows or host is None:
        return None
    match = match_host(host, rows[0].world_size)
    if match is None:
        return None
    measured = [Measured(r.backend, r.hidden, r.top_k, r.experts, r.activation_dtype, r.world_size, r.tokens_per_rank,
                         float(r.latency_us_p50)) for r in rows]
    return ReferenceCheck(match.ref_class.name, compare(measured, match.ref_class, data))
