"""Evidence from NVIDIA's published reference measurements (:mod:`autoselect.reference`).

**When.** Local measurements of the target host class always win: the reference is read only
(a) for a reference class (``--host-class ref-h200_sxm-x8``: the answer is for a machine of that
system), or (b) when the target host's GPUs are a reference system (:func:`match_host`: this
machine's fingerprint, or the newest machine of a measured host class) **and** the host class
has no ``micro`` result at all for the shape at the EP size (:func:`choose_reference`).

**What, per backend** (:class:`ReferenceEvidence`), at the class's system and the deployment's
EP size, in the dtype the backend really sends for the model's activation dtype
(:func:`autoselect.rules.wire.wire_dtype`: vLLM's DeepEP sends an nvfp4 or per-tensor fp8 model's
activations as bf16, so DeepEP's published bf16 rows are that model's exact numbers):
``allgather_reducescatter`` derived from NCCL timings at the workload's token counts and the
class's token grid, as vLLM's release issues its collectives (kind ``derived``, a range; a lower
bound where the system has no NCCL rows at the EP size); any other backend's published rows of
the exact shape and wire dtype (``published``), else its other shapes' rows transferred by bytes
per token (``transferred``, refused far outside the published bytes); else nothing: the
candidate stays unmeasured and says why, and the ``autoselect bench`` command that would
measure it is the answer's. The rules still judge every backend first (one-sided: nvfp4 only,
always).

**Bands** match the evidence (:func:`reference_band`). A published point is a mean of 10 rounds
(DeepEP, TensorRT-LLM), published without its spread: it carries the run-to-run reproducibility
floor every measured median has (:data:`autoselect.noise.REL_FLOOR`). A transferred point carries
the transfer error measured by holding out published shapes (:data:`TRANSFER_ERROR`, p95 of
``|transferred / published - 1|``, ``perf/regret_reference.py``). A derived point carries its
range (the grouped all_gathers between one NCCL latency floor and the sum of their own times)
plus the NCCL rows' floor; a lower bound carries the floor and says it is a bound. What the
reference cannot know about the serving host (another harness, other versions) is the
confidence's business: the answer is capped at ``reference`` (``confidence.py``).

**Package requirements of a reference class** (:func:`autoselect.reference.host.reference_host`):
a reference class is a machine of the system as NVIDIA measured it, every NVLink up (an NVL72
rack with its MNNVL fabric), with the packages each backend needs (DeepEP, FlashInfer) present:
they are facts of the serving host, which the answer names (``ReferenceUsed.requirements``), not
of the machine running ``recommend``.
"""

from __future__ import annotations

from typing import NamedTuple

from autoselect import reference, rules
from autoselect.hardware import is_reference_class
from autoselect.noise import REL_FLOOR
from autoselect.rules.agrs_collectives import collectives_for
from autoselect.rules.agrs_collectives import not_read_note as collectives_not_read
from autoselect.rules.wire import not_read_note as wire_not_read
from autoselect.selector.answer import DERIVED, PUBLISHED, TRANSFERRED, Candidate, ReferenceSource, ReferenceUsed
from autoselect.selector.estimate import MeasuredPoint
from autoselect.selector.evidence import BackendEvidence
from autoselect.selector.target import RecommendTarget

#: Relative band of a published point, and the floor of every other kind (see the module docstring).
REFERENCE_BAND = REL_FLOOR

__all__ = ["REFERENCE_BAND", "ReferenceChoice", "ReferenceEvidence", "choose_reference",
           "reference_band", "reference_point"]


def reference_band(p: reference.ReferencePoint, footed: reference.Footed | None = None) -> float:
    """The relative half-width of one reference point on the common footing (see the module docstring)."""
    band = REFERENCE_BAND
    if p.evidence == TRANSFERRED:
        band = max(p.band if p.band is not None else reference.transfer_error(p.backend), REFERENCE_BAND)
    f = footed if footed is not None else reference.on_common_footing(p, p.arch)
    if not p.bound and f.latency_us and f.high_us > f.low_us:
        band += (f.high_us - f.low_us) / 2 / f.latency_us
    return band


def reference_point(p: reference.ReferencePoint, vllm_version: str | None = None) -> MeasuredPoint:
    """One reference row as the selector's point, on the common footing of ``vllm_version``: its
    corrected value, band, kind, range, bound and how it was corrected (``autoselect.reference.footing``)."""
    f = reference.on_common_footing(p, p.arch, vllm_version)
    return MeasuredPoint(p.tokens_per_rank, f.latency_us, reference_band(p, f), None, p.evidence, range_us=f.range_us,
                         bound=p.bound, footing=f.footing, flat=bool((p.derivation or {}).get("flat")))


class ReferenceChoice(NamedTuple):
    """The reference class an answer reads, and why."""

    ref_class: reference.ReferenceClass
    why: str
    explicit: bool  # --host-class ref-...: the answer is for a machine of the system
    caveats: tuple[str, ...] = ()


def choose_reference(target: RecommendTarget, local_results: int) -> ReferenceChoice | None:
    """The reference class for ``target``, or None (see the module docstring).

    :param local_results: how many ``micro`` results the host class has for the shape at the EP
        size; any keeps the reference out (local measurements always win).
    """
    if is_reference_class(target.host_class):
        ref = reference.get_class(target.host_class)
        return ReferenceChoice(ref, f"--host-class {ref.name}: {ref.describe()}", explicit=True)
    host = target.host
    if local_results or host is None:
        return None
    match = reference.match_host(host, target.world_size)
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

    def __init__(self, target: RecommendTarget, choice: ReferenceChoice,
                 data: reference.ReferenceData | None = None):
        self.target = target
        self.choice = choice
        self.data = data if data is not None else reference.default()
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
        wire = t.wire(backend)  # behind the expert kernel vLLM runs (rules.experts)
        sent = wire.dtype if wire is not None else t.activation_dtype
        shape = dict(hidden=p.hidden_size, top_k=p.top_k, experts=p.num_experts, dtype=sent)
        if backend == reference.AGRS:
            tokens = sorted(set(self.data.token_grid(ref)) | set(t.workload.tokens))
            points, kind = self.data.derived_agrs(ref, **shape, world_size=ws, tokens=tokens,
                                                  vllm_version=t.vllm_version), DERIVED
            missing = f"no published NCCL timings at {ws} GPUs on {ref.system.label} to derive it from"
        else:
            found = self.data.for_shape(ref, backend, **shape, world_size=ws)
            points, kind, missing = found.points, found.evidence, found.refused
            if not points and not found.any_published:
                # the system has no rows of the backend at all: another system of its NVLink generation may
                across = self.data.across_systems(ref, backend, **shape, world_size=ws)
                points, kind = across.points, TRANSFERRED
                missing = across.refused if across.refused and "not carried across" not in across.refused else missing
        if not points:
            return BackendEvidence(backend, kind=kind, source="NVIDIA's published reference",
                                   missing=f"no reference evidence: {missing}")
        line = points[0].source_line
        if wire is not None and wire.converts:
            line += f"; {sent} rows: {wire.describe()}"
        return BackendEvidence(backend, kind=kind, source=line,
                               points=tuple(reference_point(r, t.vllm_version) for r in points))

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
            said = reference.REQUIREMENTS
            requirements = [said.get(pkg, reference.GENERIC_REQUIREMENT).format(package=pkg, hint=hints[pkg])
                            for pkg in needed]
        ref = self.choice.ref_class
        footings = [p.footing for c in candidates for p in self.for_backend(c.backend).points]
        derived = any(self.for_backend(c.backend).kind == DERIVED and self.for_backend(c.backend).points
                      for c in candidates)
        return ReferenceUsed(host_class=ref.name, system=ref.describe(), why=self.choice.why, backends=backends,
                             requirements=requirements, caveats=list(self.choice.caveats) + self._not_read(candidates),
                             points=self.considered, footing=reference.summary(footings, derived))

    def _not_read(self, candidates: list[Candidate]) -> list[str]:
        """What the answer says when the target release's wire dtypes or AGRS collectives were not read."""
        version, notes = self.target.vllm_version, []
        wires = [self.target.wire(c.backend) for c in candidates]
        if any(w is not None and not w.read for w in wires):
            notes.append(wire_not_read(version))
        agrs = self.answers.get(reference.AGRS)
        if agrs is not None and agrs.points and not collectives_for(version)[1]:
            notes.append(collectives_not_read(version))
        return notes
