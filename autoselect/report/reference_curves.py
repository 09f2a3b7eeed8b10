"""NVIDIA's published reference measurements of the report's shape, as curves beside the local ones.

A report draws the reference (:mod:`autoselect.reference`) for the host class it reports when
that class is a reference system (``match_host``: same GPU model and count) or is one
(``--host-class ref-h200_sxm-x8``), at the report's shape, activation dtype and world size only
(exact rows: carrying a published number to another shape or dtype is the selector's
``transferred`` evidence, not a curve). Every curve says what its numbers are: ``published``
(a number of NVIDIA's tables) or ``derived`` (allgather_reducescatter priced from published NCCL
timings; never a measured all2all), with the source line of its table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autoselect.model.profile import shape_label
from autoselect.reference import AGRS, DERIVED, ReferenceClass, ReferencePoint, default


@dataclass(frozen=True)
class ReferenceCurve:
    """One backend's reference round trips at the report's shape, dtype and world size."""

    backend: str
    evidence: str  # "published" | "derived"
    points: tuple[ReferencePoint, ...]  # ascending tokens per rank
    illegal_reasons: tuple[str, ...] = ()  # the selector's, when the backend is illegal for the model

    @property
    def tokens(self) -> list[int]:
        """Token counts per rank of the points."""
        return [p.tokens_per_rank for p in self.points]

    @property
    def source_line(self) -> str:
        """The table's line, e.g. ``AIConfigurator 0.12.0, vLLM 0.24.0 DeepEP on 8×H200, collected 2026-08-31``."""
        return self.points[0].source_line

    @property
    def fidelity(self) -> str:
        """How close the timed code is to what vLLM runs (the reference's own wording)."""
        return self.points[0].fidelity

    def at(self, tokens: int) -> ReferencePoint | None:
        """The point at exactly ``tokens`` per rank (no interpolation)."""
        return next((p for p in self.points if p.tokens_per_rank == tokens), None)

    def label(self) -> str:
        """The legend text: backend, what kind of number, whose table.

        ``deepep_low_latency — published (AIConfigurator 0.12.0, vLLM 0.24.0 DeepEP on 8×H200)``,
        ``allgather_reducescatter — derived from NCCL (NCCL 2.29.2 timings, AIConfigurator 0.12.0);
        not a measured all2all``.
        """
        if self.evidence == DERIVED:
            src = self.points[0].sources[0]
            text = (f"{self.backend} — derived from NCCL ({src.framework} {src.framework_version} timings, "
                    f"AIConfigurator {src.package_version}); not a measured all2all")
        else:
            # the source line without its collection date (the page and the caption give it)
            text = f"{self.backend} — published ({self.source_line.rsplit(', ', 1)[0]})"
        if self.illegal_reasons:
            text += "; ILLEGAL here, never a candidate"
        return text


@dataclass
class ReferenceView:
    """The reference class a report draws from, the curves of its shape, and what it lacks."""

    ref_class: ReferenceClass
    world_size: int
    activation_dtype: str
    how: str  # why this class: "--host-class ref-..." or the measured host's GPU model and count
    curves: list[ReferenceCurve] = field(default_factory=list)
    caveats: tuple[str, ...] = ()
    absent: list[str] = field(default_factory=list)  # what the class has rows for that does not match

    def curve(self, backend: str) -> ReferenceCurve | None:
        return next((c for c in self.curves if c.backend == backend), None)


def reference_view(ref_class: ReferenceClass, *, hidden: int, top_k: int, experts: int, dtype: str,
                   world_size: int, how: str, caveats: tuple[str, ...] = (),
                   illegal: dict[str, tuple[str, ...]] | None = None,
                   tokens: tuple[int, int] | None = None) -> ReferenceView:
    """The reference curves of one shape and dtype at one world size of ``ref_class``.

    :param illegal: backend -> the selector's reasons it is illegal for the model (marked on the curve).
    :param tokens: (lowest, highest) tokens per rank to keep, e.g. the local measurements' range
        so the reference is drawn beside them; None keeps every published token count.
    """
    ref = default()
    illegal = illegal or {}
    view = ReferenceView(ref_class, world_size, dtype, how, caveats=tuple(caveats))
    shape = {"hidden": hidden, "top_k": top_k, "experts": experts}
    backends = []
    others = set()
    for row in ref.available(ref_class):
        if row["backend"] == AGRS:
            if row["world_size"] == world_size:
                backends.append(AGRS)
        elif (row["hidden"], row["top_k"], row["experts"], row["dtype"], row["world_size"]) == (
                hidden, top_k, experts, dtype, world_size):
            backends.append(row["backend"])
        else:
            others.add((row["backend"], row["hidden"], row["top_k"], row["experts"], row["dtype"], row["world_size"]))
    for backend in sorted(set(backends), key=backends.index):
        points = ref.query(ref_class, backend, dtype=dtype, world_size=world_size, **shape)
        if tokens is not None:
            points = [p for p in points if tokens[0] <= p.tokens_per_rank <= tokens[1]]
        if points:
            evidence = points[0].evidence
            view.curves.append(ReferenceCurve(backend, evidence, tuple(points), tuple(illegal.get(backend, ()))))
    if others and not any(c.evidence != DERIVED for c in view.curves):
        view.absent.append(_absent_text(ref_class, others, shape, dtype, world_size))
    return view


def _absent_text(ref_class: ReferenceClass, others, shape: dict, dtype: str, world_size: int) -> str:
    """One sentence: no published rows of this shape and dtype, and which the class has."""
    backends = ", ".join(sorted({o[0] for o in others}))
    shapes = ", ".join(f"H{h} top{k} E{e}" for h, k, e in sorted({o[1:4] for o in others}))
    dtypes = ", ".join(sorted({o[4] for o in others}))
    sizes = ", ".join(str(ws) for ws in sorted({o[5] for o in others}))
    return (f"{ref_class.name} has no published all2all rows for "
            f"{shape_label(shape['hidden'], shape['top_k'], shape['experts'], dtype)} dispatch at EP{world_size}; "
            f"it has {backends} at {shapes}, {dtypes} dispatch, EP {sizes} (a published number of another shape "
            "or dtype is not drawn as this one's)")
