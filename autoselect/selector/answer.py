"""The recommendation as data: these dataclasses ARE the ``recommend --format json`` document.

Each class's fields, in order, are its JSON object's keys (``to_dict`` walks them); a field's
metadata says how it is written: ``round`` (digits), ``omit_none`` (left out when None) or
``omit_default`` (left out while it has its default, so a key a newer kind of evidence needs
appears only where it says something). Values that are vocabulary types (``Deployment``,
``WorkloadSpec``, ``FlagValidation``) write themselves with their own ``to_dict``.
Bump :data:`SCHEMA_VERSION` on an incompatible change; docs/json.md documents the keys
(tests/docs/test_docs_pages.py holds it to these classes).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from autoselect import bridge
from autoselect.dataclass_methods import DataclassMethods
from autoselect.rules import StepConsequence, TokenBudget
from autoselect.workload import Deployment, WorkloadSpec

#: Version of the JSON ``recommend --format json`` prints; bump on incompatible changes
#: (2: the top-level ``dispatch_dtype`` is called ``activation_dtype``; 3: a candidate's
#: ``status`` is a verdict word of fixed meaning, ``not separable`` and ``not compared`` among
#: them, ``tie`` narrowed; docs/json.md).
SCHEMA_VERSION = 3

#: Where a bucket's numbers come from, strongest first: ``measured`` (this host class's
#: microbenchmarks, or the latency model fitted on them), ``published`` (NVIDIA's reference
#: tables, :mod:`autoselect.reference`), ``derived`` (computed from published NCCL timings: vLLM's
#: allgather_reducescatter), ``transferred`` (another shape's published rows, by bytes per token),
#: ``estimated`` (no measurement behind it at all), ``synthetic`` (made-up example data stored as if
#: measured, its run marked ``synthetic``: ``db.records.SYNTHETIC``; read as this host class's rows
#: are, never a measurement).
EVIDENCE_KINDS = ("measured", "published", "derived", "transferred", "estimated", "synthetic")
MEASURED, PUBLISHED, DERIVED, TRANSFERRED, ESTIMATED, SYNTHETIC = EVIDENCE_KINDS

#: How a bucket's value relates to its evidence's points (``BucketValue.source``): a point at this
#: token count (of whatever kind ``evidence`` says), an estimate inside or outside the points'
#: token range, or no value. Never an evidence kind, so the two keys cannot contradict.
BUCKET_SOURCES = ("point", "interpolated", "extrapolated", "missing")
POINT = BUCKET_SOURCES[0]


def _rounded(digits: int) -> dict:
    return {"round": digits}


OMIT_NONE = {"omit_none": True}
OMIT_DEFAULT = {"omit_default": True}


def _json(value: Any, digits: int | None = None) -> Any:
    if isinstance(value, _Document):
        return value.to_dict()
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_json(v, digits) for v in value]
    if isinstance(value, dict):
        return {k: _json(v, digits) for k, v in value.items()}
    if digits is not None and isinstance(value, float):
        return round(value, digits)
    return value


class _Document(DataclassMethods):
    """A dataclass whose fields, in order, are its JSON keys (see the module docstring).

    Its ``__repr__`` and ``__eq__`` are :class:`autoselect.dataclass_methods.DataclassMethods`'s,
    and a frozen one's ``__hash__`` is written here, each as ``@dataclass`` generates it for a
    class (the same text; equal only to an instance of the same class with equal fields; the hash
    of the same tuple): the classes below are declared ``repr=False`` (frozen ones ``eq=False``
    too). CPython 3.11 compiles each generated method on its own (~0.08 ms): these 28 were ~2 ms
    of every recommend start. A mutable one keeps its generated ``__eq__`` (and so no hash).
    tests/selector/test_answer_methods.py holds all three to what ``@dataclass`` generates.
    """

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self)
                          if (f.compare if f.hash is None else f.hash)))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: every field in order, as its metadata says."""
        out = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.metadata.get("omit_none") and value is None:
                continue
            if f.metadata.get("omit_default") and value == f.default:
                continue
            out[f.name] = _json(value, f.metadata.get("round"))
        return out


@dataclass(frozen=True, eq=False, repr=False)
class BucketValue(_Document):
    """The expected latency of one backend at one token count, with its band and origin.

    ``source`` (:data:`BUCKET_SOURCES`): ``point`` (a point of the evidence at this token count:
    measured, published, derived or transferred, as ``evidence`` says), ``interpolated`` (inside
    the points' token range), ``extrapolated`` (outside it, within the latency model's limit) or
    ``missing``. ``evidence``: the kind of evidence the value rests on (:data:`EVIDENCE_KINDS`);
    written to the JSON only when it is not ``measured``. ``reference``: for a value resting on the
    published reference, the line naming it (``AIConfigurator 0.12.0, vLLM 0.24.0 DeepEP on
    8×H200, collected 2026-08-31``; derived and transferred values say so in it). ``range_us``: a
    derived value's ``[lower, upper]`` (``latency_us`` is its central value; omitted otherwise);
    ``bound``: the value is only a lower bound (written only when true). ``footing``: for a value
    resting on the reference, how it was put on vLLM's footing (its harness's footing, whether vLLM
    runs this step under a CUDA graph, the number as published and each correction applied:
    ``autoselect.reference.footing``; an estimate carries its nearest point's); ``steps``: how many
    steps vLLM runs the bucket in when it is above the backend's step budget (the value is the sum
    of their all2alls; written only above 1, :mod:`autoselect.selector.step`).
    ``flat``: a transferred value the source shapes gave without regard to bytes (at this token count
    they cost no more for more bytes, so every shape gets their mean: written only when true).
    """

    tokens_per_rank: int
    latency_us: float | None = field(metadata=_rounded(3))
    halfwidth_us: float | None = field(metadata=_rounded(3))
    source: str
    result_ids: tuple[int, ...] = ()
    note: str | None = None
    evidence: str = field(default=MEASURED, metadata=OMIT_DEFAULT)
    reference: str | None = field(default=None, metadata=OMIT_NONE)
    range_us: tuple[float, float] | None = field(default=None, metadata={**OMIT_NONE, "round": 3})
    bound: bool = field(default=False, metadata=OMIT_DEFAULT)
    footing: Any = field(default=None, metadata=OMIT_NONE)
    steps: int = field(default=1, metadata=OMIT_DEFAULT)
    flat: bool = field(default=False, metadata=OMIT_DEFAULT)

    @property
    def estimated(self) -> bool:
        """True for interpolated and extrapolated values."""
        return self.source in ("interpolated", "extrapolated")


@dataclass(frozen=True, eq=False, repr=False)
class FitSummary(_Document):
    """The latency model of one backend as the JSON shows it: ``a`` and the bandwidth."""

    a_us: float = field(metadata=_rounded(3))
    bandwidth_gbps: float | None = field(metadata=_rounded(3))
    points: int
    rel_rms: float = field(metadata=_rounded(4))


@dataclass(repr=False)
class Candidate(_Document):
    """A legal backend with its expected latency per bucket and verdict against the default.

    ``status``: its verdict, a word of ``autoselect.selector.wording.VERDICTS`` (``pick``,
    ``default``, ``faster``, ``slower``, ``not separable``, ``tie``, ``undecided``, ``not
    compared``, ``incomplete``, ``no data``; ``measured`` only before the decision).
    ``ratio_to_default``: its weighted latency over the default's central value, shown beside
    every verdict (omitted where there is no comparison).
    ``evidence``: the weakest kind its values rest on (written when not ``measured``).
    ``range_us`` / ``bound``: the weighted range of a derived candidate, and whether its value is
    a lower bound only. ``wire_dtype``: what the backend sends when that is not the model's
    activation dtype (``autoselect.rules.wire``; omitted otherwise), and ``expert_kernel`` the
    kernel vLLM runs behind it where :mod:`autoselect.rules.experts` models the choice. ``step``:
    what the backend does to vLLM's step beyond its all2all, in words (CUDA graphs off, a lowered
    step budget, buckets run in several steps; :mod:`autoselect.selector.step`). ``requires``: what
    the serving host must have for it, when the answer is for other GPUs than the planning
    machine's (``autoselect.rules.Verdict.requirements``; omitted otherwise).
    """

    backend: str
    status: str
    weighted_us: float | None = field(metadata=_rounded(3))
    halfwidth_us: float | None = field(metadata=_rounded(3))
    buckets: list[BucketValue]
    fit: FitSummary | None
    warnings: list[str] = field(default_factory=list)
    evidence: str = field(default=MEASURED, metadata=OMIT_DEFAULT)
    range_us: tuple[float, float] | None = field(default=None, metadata={**OMIT_NONE, "round": 3})
    bound: bool = field(default=False, metadata=OMIT_DEFAULT)
    wire_dtype: str | None = field(default=None, metadata=OMIT_NONE)
    expert_kernel: str | None = field(default=None, metadata=OMIT_NONE)
    step: tuple[str, ...] = field(default=(), metadata=OMIT_DEFAULT)
    requires: list[str] | None = field(default=None, metadata=OMIT_NONE)
    ratio_to_default: float | None = field(default=None, metadata={**OMIT_NONE, "round": 3})

    @property
    def measured(self) -> bool:
        """True when any measurement stands behind it (it has a latency model)."""
        return self.fit is not None

    @property
    def missing_tokens(self) -> list[int]:
        """The token counts without a value."""
        return [b.tokens_per_rank for b in self.buckets if b.latency_us is None]


@dataclass(repr=False)
class Rejection(_Document):
    """A backend that is not a candidate: ``kind`` ``illegal`` (rules), ``disqualified``
    (an incorrect / error result for this shape), ``unavailable`` (the serving host lacks its
    package or NVLinks, or every stored row says it could not run) or ``ineligible`` (legal, but
    what it does to vLLM's step is not priced for this workload: CUDA graphs off on a workload
    with CUDA-graph steps, :mod:`autoselect.selector.step`). ``reasons`` are one sentence each;
    where one has sources to add, the answer's ``details`` hold them."""

    backend: str
    kind: str
    reasons: list[str]


@dataclass(frozen=True, eq=False, repr=False)
class Comparison(_Document):
    """The decision as data (JSON ``comparison``): how the pick was reached (``rule``, one of
    ``autoselect.selector.decide.RULES``), the backend it was weighed against (``versus``: the
    default when a candidate was picked over it; when the default stayed, the nearest backend the
    data cannot separate from it, else the fastest other; null when nothing was compared), their
    verdict (a word of ``VERDICTS``: the pick against ``versus``) and ``ratio`` (the pick's central
    value over ``versus``'s), the expected difference of a whole step in percent (``end_to_end_pct``,
    low and high: all2all differences shrink 3-10x end to end), and ``settle``: the ``autoselect
    bench`` command whose rows would separate the two, when the data cannot and a measurement on the
    serving host would (null otherwise)."""

    rule: str
    pick: str
    versus: str | None
    verdict: str | None
    ratio: float | None = field(metadata=_rounded(3))
    end_to_end_pct: tuple[float, float] | None = field(metadata=_rounded(1))
    settle: str | None


@dataclass(frozen=True, eq=False, repr=False)
class EstimatedValue(_Document):
    """One estimated (not measured) latency among the candidates (JSON ``estimated``)."""

    backend: str
    tokens_per_rank: int
    source: str
    note: str | None


@dataclass(frozen=True, eq=False, repr=False)
class ModelSummary(_Document):
    """The model's MoE shape as the answer states it (JSON ``profile``)."""

    hidden_size: int
    num_experts: int
    top_k: int
    weight_quant: str


@dataclass(repr=False)
class RunUsed(_Document):
    """One benchmark run the decision used results of."""

    run_id: int | None
    hostname: str | None
    started_at: str | None
    versions: dict[str, str]
    results: int = 0
    synthetic: str | None = field(default=None, metadata=OMIT_NONE)  # made-up example data: what made it


@dataclass(frozen=True, eq=False, repr=False)
class DataUsed(_Document):
    """Which measurements the answer rests on (JSON ``data_used``)."""

    host_class: str | None
    gpu_name: str | None
    gpu_arch: str
    machines: list[str]
    results: int
    results_considered: int
    runs: list[RunUsed]
    oldest: str | None
    newest: str | None
    target_versions: dict[str, str]
    stale_versions: dict[str, list[str]]


@dataclass(frozen=True, eq=False, repr=False)
class E2eEvidence(_Document):
    """The stored e2e (``vllm bench forward``) medians for the answer's shape, and where they
    disagree with it (JSON ``e2e``: ``{"latencies": {"32": {backend: us}}, "warnings": [...]}``)."""

    latencies: dict[int, dict[str, float]]  # tokens per rank -> backend -> newest e2e median (us)
    warnings: list[str]

    def to_dict(self) -> dict[str, Any]:
        """Token counts as string keys (JSON object keys)."""
        return {"latencies": {str(t): dict(v) for t, v in self.latencies.items()}, "warnings": list(self.warnings)}


@dataclass(frozen=True, eq=False, repr=False)
class ReferenceSource(_Document):
    """What the reference says about one legal backend: its kind and the line naming it, or why
    it has nothing (``evidence`` ``none``)."""

    backend: str
    evidence: str  # published | derived | transferred | none
    line: str


@dataclass(frozen=True, eq=False, repr=False)
class ReferenceUsed(_Document):
    """The published reference an answer rests on (JSON ``reference``; absent for local answers).

    ``why``: what made it the evidence (``--host-class ref-...``, or a host whose GPUs are the
    reference system and that has no local measurement of the shape); ``requirements``: how each
    package requirement was judged for a reference class (facts of the serving host).
    """

    host_class: str
    system: str
    why: str
    backends: list[ReferenceSource]
    requirements: list[str]
    caveats: list[str]
    points: int  # reference points read (published, derived and transferred)
    #: the footings and corrections the numbers were put on vLLM's footing with, each with its source
    #: (``autoselect.reference.footing``): {"common": ..., "footings": {...}, "corrections": {...}, "evidence": {...}}
    footing: dict = field(default_factory=dict)


@dataclass(frozen=True, eq=False, repr=False)
class ExpectedEffect(_Document):
    """What the pick's all2all difference is expected to be end to end (JSON ``expected_effect``).

    ``kernel_change``: the pick's weighted all2all latency over ``versus``'s, minus one (negative:
    the pick is faster), central and ``[low, high]`` from both bands; ``e2e_change``: the expected
    change of end-to-end step time, that change divided by 10 to 3 (end-to-end differences are 3-10x
    smaller than kernel differences: ``basis``).
    """

    versus: str
    kernel_change: float = field(metadata=_rounded(4))
    kernel_change_range: tuple[float, float] = field(metadata=_rounded(4))
    e2e_change_range: tuple[float, float] = field(metadata=_rounded(4))
    basis: str


@dataclass(frozen=True, eq=False, repr=False)
class TieAnswer(_Document):
    """Backends the answer's numbers cannot tell apart (JSON ``tie``): ``kept`` (first in
    ``backends``) is the one that needs the least beyond vLLM (``needs``: backend -> what it needs;
    ``why``), and ``settle_command`` the ``autoselect bench`` row that would decide between them;
    ``expected_effect``: what choosing the best other one instead would change, kernel and end to end."""

    backends: list[str]
    kept: str
    why: str
    needs: dict[str, str]
    settle_command: str
    expected_effect: ExpectedEffect | None = field(default=None, metadata=OMIT_NONE)


@dataclass(kw_only=True, repr=False)
class Recommendation(_Document):
    """The answer: the backend, its ``vllm serve`` flags, the evidence and the confidence.

    ``knobs`` are the tuned settings found for the pick (``autoselect tune``):
    ``{"env": {...}, "flags": [...], "settings", "gain", "gain_halfwidth", "tuned_at"}`` or ``{}``;
    its env vars are merged into ``env`` and its flags into ``vllm_args``. ``bench_command`` is the
    ``autoselect bench`` command line that would settle an answer the data cannot (or None).
    ``e2e`` (stored end-to-end results) and ``vllm_validation`` (``--validate``) are left out of
    the JSON when absent, as is ``reference`` (the published reference the answer rests on).
    ``decision`` and every warning, rejection reason and confidence reason are one sentence;
    ``details`` maps each of those that has sources to the same sentence with them (omitted when
    none has). ``confidence_codes`` name the rules behind ``confidence_reasons``, in the same order.
    """

    schema_version: int = SCHEMA_VERSION
    model: str
    profile: ModelSummary
    deployment: Deployment
    gpu_arch: str
    activation_dtype: str  # the model's on gpu_arch (a candidate's wire_dtype: what its backend sends)
    vllm_version: str
    #: where vllm_version came from: "--vllm-version", "vllm at AUTOSELECT_VLLM_PYTHON",
    #: "installed vllm" or "newest known" (as check's; autoselect.bridge.target_version)
    vllm_version_source: str = ""
    #: set when vllm_version is newer than every release the rules know (judged by the newest's rows)
    vllm_version_warning: str | None = field(default=None, metadata=OMIT_NONE)
    workload: WorkloadSpec
    #: the token budget per engine the answer assumes, and where it came from (``--max-num-batched-tokens``,
    #: or vLLM's default for the GPU memory: of the host, of the reference class, or assumed for the arch)
    token_budget: TokenBudget
    backend: str
    decision: str
    #: what the pick does to vLLM's step beyond its all2all (CUDA graphs off, a lowered step budget)
    step_consequences: list[StepConsequence]
    vllm_args: list[str]
    command: str
    env: dict[str, str]
    knobs: dict[str, Any]
    confidence: str
    confidence_reasons: list[str]
    confidence_codes: list[str]
    comparison: Comparison
    candidates: list[Candidate]
    rejected: list[Rejection]
    estimated: list[EstimatedValue] = field(init=False)
    warnings: list[str]
    data_used: DataUsed
    bench_command: str | None
    reference: ReferenceUsed | None = field(default=None, metadata=OMIT_NONE)
    tie: TieAnswer | None = field(default=None, metadata=OMIT_NONE)
    expected_effect: ExpectedEffect | None = field(default=None, metadata=OMIT_NONE)
    details: dict[str, str] | None = field(default=None, metadata=OMIT_NONE)
    e2e: E2eEvidence | None = field(default=None, metadata=OMIT_NONE)
    vllm_validation: bridge.FlagValidation | None = field(default=None, metadata=OMIT_NONE)

    def __post_init__(self) -> None:
        self.estimated = [EstimatedValue(c.backend, b.tokens_per_rank, b.source, b.note)
                          for c in self.candidates for b in c.buckets if b.estimated]
