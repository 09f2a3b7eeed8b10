"""Deciding from reference points the caller gives: a hold-out's view of the published reference.

``perf/regret_reference.py`` scores the selector on NVIDIA's published tables by hiding points
(one token count, or a whole shape) and asking it to decide from the rest. :func:`recommend_given`
is that call: :func:`autoselect.selector.recommend` with one evidence source, the given points per
backend (published, derived or transferred :class:`autoselect.reference.ReferencePoint` rows, each
read as :class:`ReferenceEvidence` reads it, with its band); a backend with no points is held out
and says so. :func:`estimate_given` is the latency model over such points, as the selector fills a
bucket between them; :func:`decide_again` decides once more from the candidates an answer was
decided on, under another policy (the regret study's ranking of the tie rules). Every point is read
on vLLM's footing for the target release, as the reference evidence reads it. Nothing here reads a
database or the packaged reference file.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

from autoselect.reference import ReferencePoint
from autoselect.selector.answer import PUBLISHED, BucketValue, Candidate, Recommendation
from autoselect.selector.decide import DecisionPolicy, decide
from autoselect.selector.estimate import ESTIMATE_FLOOR, estimate_latency, weakest_kind
from autoselect.selector.evidence import BackendEvidence
from autoselect.selector.pipeline import recommend
from autoselect.selector.reference_evidence import reference_point

class GivenReference:
    """An evidence source over given reference points: backend -> its points (any order)."""

    kind = PUBLISHED

    def __init__(self, curves: Mapping[str, Sequence[ReferencePoint]],
                 estimate_errors: Mapping[str, float] | None = None, vllm_version: str | None = None):
        self.curves = curves
        self.estimate_errors = estimate_errors or {}  # backend -> the band of a value estimated between points
        self.vllm_version = vllm_version  # the release whose footing the points are read on

    @property
    def considered(self) -> int:
        """How many points the source holds."""
        return sum(len(c) for c in self.curves.values())

    def for_backend(self, backend: str) -> BackendEvidence:
        """The backend's points, ascending in tokens, as the weakest kind among them; none: held out."""
        curve = self.curves.get(backend)
        if not curve:
            return BackendEvidence(backend, kind=self.kind, missing="held out")
        points = tuple(reference_point(p, self.vllm_version) for p in sorted(curve, key=lambda p: p.tokens_per_rank))
        kind = weakest_kind(points)
        return BackendEvidence(backend, kind=kind, source=f"{kind} (hold-out)", points=points,
                               estimate_error=self.estimate_errors.get(backend, ESTIMATE_FLOOR))


def recommend_given(profile, curves: Mapping[str, Sequence[ReferencePoint]], *,
                    estimate_errors: Mapping[str, float] | None = None, **options) -> Recommendation:
    """:func:`autoselect.selector.recommend` deciding from ``curves`` (backend -> reference points) only.

    :param estimate_errors: backend -> the least band of a value estimated between its points
        (default :data:`autoselect.selector.estimate.ESTIMATE_FLOOR`).
    :param options: ``recommend``'s keywords (``deployment``, ``host_class``, ``vllm_version``,
        ``workload``, ``policy``, ...); no database is read.
    """
    source = GivenReference(curves, estimate_errors, options.get("vllm_version"))
    return recommend(profile, conn=None, evidence=lambda target: [source], **options)


def estimate_given(points: Sequence[ReferencePoint], tokens: int, bytes_per_token: int,
                   vllm_version: str | None = None) -> BucketValue:
    """The latency model's value at ``tokens`` from reference ``points`` of one backend and shape,
    on vLLM's footing for ``vllm_version`` (default: the newest known)."""
    return estimate_latency([reference_point(p, vllm_version) for p in points], tokens, bytes_per_token)


def decide_again(candidates: Sequence[Candidate], policy: DecisionPolicy, weights: Sequence[float]) -> str:
    """The backend :func:`autoselect.selector.decide.decide` picks under ``policy`` from copies of an
    answer's ``candidates`` (their statuses reset), with the workload's bucket ``weights``."""
    fresh = [dataclasses.replace(c, status="measured" if c.weighted_us is not None else c.status)
             for c in candidates]
    return decide(fresh, policy, weights).pick.backend
