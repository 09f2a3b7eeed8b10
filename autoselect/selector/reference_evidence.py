"""Evidence from NVIDIA's published reference measurements (:mod:`autoselect.reference`).

**When.** Local measurements of the target host class always win: the reference is read only
(a) for a reference class (``--host-class ref-h200_sxm-x8``: the answer is for a machine of that
system), or (b) when the target host's GPUs are a reference system (:func:`match_host`: this
machine's fingerprint, or the newest machine of a measured host class) **and** the host class
has no ``micro`` result at all for the shape at the EP size (:func:`choose_reference`).

**What, per backend** (:class:`ReferenceEvidence`), at the class's system and the deployment's
EP size: ``allgather_reducescatter`` derived from NCCL timings at the workload's token counts and
the class's token grid (kind ``derived``); any other backend's published rows of the exact
shape and dispatch dtype (``published``), else its other shapes' rows transferred by bytes per
token (``transferred``, refused far outside the published bytes); else nothing: the candidate
stays unmeasured and says why, and the ``autoselect bench`` command that would measure it is
the answer's. The rules still judge every backend first (one-sided: nvfp4 only, always).

**Bands.** A published point is a mean of 10 rounds (DeepEP, TensorRT-LLM) and an NCCL row an
nccl-tests average, published without their spread; they carry the run-to-run reproducibility
floor every measured median has (:data:`autoselect.noise.REL_FLOOR`). What the reference cannot
know about the serving host (another harness, other versions) is the confidence's business: the
answer is capped at ``reference`` (``confidence.py``), not hidden in a wider band.

**Package requirements of a reference class** (:func:`autoselect.reference.host.reference_host`):
a reference class is a machine of the system as NVIDIA measured it, every NVLink up (an NVL72
rack with its MNNVL fabric), with the packages each backend needs (DeepEP, FlashInfer) present:
they are facts of the serving host, which the answer names (``ReferenceUsed.requirements``), not
of the machine running ``recommend``.
"""

from __future__ import annotations

from dataclasses import dataclass

from autoselect import rules
from autoselect.noise import REL_FLOOR
from autoselect.reference import (AGRS, ReferenceClass, ReferenceData, default, get_class, is_reference_class,
                                  match_host)
from autoselect.reference.host import GENERIC_REQUIREMENT, REQUIREMENTS
from autoselect.selector.answer import DERIVED, PUBLISHED, TRANSFERRED, Candidate, ReferenceSource, ReferenceUsed
from autoselect.selector.estimate import MeasuredPoint
from autoselect.selector.evidence import BackendEvidence
from autoselect.selector.target import RecommendTarget

#: Relative band of a published or derived point (see the module docstring).
REFERENCE_BAND = REL_FLOOR
@dataclass(frozen=True)
class ReferenceChoice:
    """The reference class an answer reads, and why."""

    ref_class: ReferenceClass
    why: str
    explicit: bool  # --host-class ref-...: the answer is for a machine of the system
    caveats: tuple[str, ...] = ()


def choose_reference(target: RecommendTarget, local_results: int) -> ReferenceChoice | None:
    """The reference class for ``target``, or None (see the module docstring).

    :param local_results: how many ``micro`` results the host class has for the shape at the EP
        size; any keeps the reference out (local measurements always win).
    """
    if is_reference_class(target.host_class):
        ref = get_class(target.host_class)
        return ReferenceChoice(ref, f"--host-class {ref.name}: {ref.describe()}", explicit=True)
    host = target.host
    if local_results or host is None:
        return None
    match = match_host(host, target.world_size)
    if match is None or match.ref_class.system.arch != target.gpu_arch:
        return None
    ref = match.ref_class
    who = f"host class {target.host_class}" if target.host_class else "this host"
    why = (f"{who} ({host.gpu_count}× {host.gpu_name}) has no local measurement of this shape at EP "
           f"{target.world_size}; its GPUs are the reference system {ref.name}: {ref.describe()}")
    return ReferenceChoice(ref, why, explicit=False, caveats=match.caveats)


class ReferenceEvidence:
    """The published reference of one class for the target's shape, dtype and EP size (kinds
    ``published``, ``derived``, ``transferred``; see the module docstring)."""

    kind = PUBLISHED

    def __init__(self, target: RecommendTarget, choice: ReferenceChoice, data: ReferenceData | None = None):
        self.target = target
        self.choice = choice
        self.data = data if data is not None else default()
        self.answers: dict[str, BackendEvidence] = {}

    @property
    def considered(self) -> int:
        """How many reference points the answers rest on."""
        return sum(len(a.points) for a in self.answers.values())

    def for_backend(self, backend: str) -> BackendEvidence:
        """The reference's points for ``backend`` (published, derived or transferred), or why none."""
        if backend not in self.answers:
            self.answers[backend] = self._answer(backend)
        return self.answers[backend]

    def _answer(self, backend: str) -> BackendEvidence:
        t, ref = self.target, self.choice.ref_class
        p, ws = t.profile, t.world_size
        shape = dict(hidden=p.hidden_size, top_k=p.top_k, experts=p.num_experts, dtype=t.dispatch_dtype)
        if backend == AGRS:
            tokens = sorted(set(self.data.token_grid(ref)) | set(t.workload.tokens))
            points, kind = self.data.derived_agrs(ref, **shape, world_size=ws, tokens=tokens), DERIVED
            missing = f"no published NCCL timings at {ws} GPUs on {ref.system.label} to derive it from"
        else:
            points, kind = self.data.published(ref, backend, **shape, world_size=ws), PUBLISHED
            missing = None
            if not points:
                moved = self.data.transferred(ref, backend, **shape, world_size=ws)
                points, kind, missing = moved.points, TRANSFERRED, moved.refused
        if not points:
            return BackendEvidence(backend, kind=kind, source="NVIDIA's published reference",
                                   missing=f"no reference evidence: {missing}")
        return BackendEvidence(
            backend, kind=kind, source=points[0].source_line,
            points=tuple(MeasuredPoint(r.tokens_per_rank, r.latency_us, REFERENCE_BAND, None, kind) for r in points))

    def used(self, candidates: list[Candidate]) -> ReferenceUsed:
        """What the answer took from the reference, per candidate backend (JSON ``reference``)."""
        backends = []
        for c in candidates:
            a = self.for_backend(c.backend)
            backends.append(ReferenceSource(c.backend, a.kind if a.points else "none",
                                            a.source if a.points else (a.missing or "no reference evidence")))
        requirements = []
        if self.choice.explicit:  # a matched host's packages were judged from its own fingerprint
            hints = {cap.package: cap.install_hint for cap in rules.BACKENDS.values() if cap.package}
            needed = sorted({rules.BACKENDS[c.backend].package for c in candidates
                             if c.backend in rules.BACKENDS and rules.BACKENDS[c.backend].package})
            requirements = [REQUIREMENTS.get(pkg, GENERIC_REQUIREMENT).format(package=pkg, hint=hints[pkg])
                            for pkg in needed]
        ref = self.choice.ref_class
        return ReferenceUsed(host_class=ref.name, system=ref.describe(), why=self.choice.why, backends=backends,
                             requirements=requirements, caveats=list(self.choice.caveats), points=self.considered)
