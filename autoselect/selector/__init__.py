"""Pick the fastest legal all2all backend for a model, deployment and workload.

The decision is a pipeline of short steps over a frozen target (``pipeline.py`` runs them):

1. **Target** (``target.py``): the model's dispatch dtype on the target arch, the deployment,
   the host (class), the workload, and the legality target with its vLLM version
   (:func:`autoselect.candidates.resolve_target`, as every command resolves it).
2. **Evidence** (``evidence.py``): per backend, the measured points of this host class for the
   shape and EP size (newest up-to-date row per token count, band widened to the run-to-run
   spread), or what disqualifies it; evidence sources are pluggable, strongest kind first.
3. **Judge** (``judge.py``): every backend the rules know for that vLLM becomes a candidate or
   a rejection (illegal / disqualified / unavailable); the latency model ``latency = a + bytes /
   bandwidth`` (``estimate.py``) fills the buckets nobody measured, marked and banded wider.
4. **Decide** (``decide.py``): a candidate beats vLLM's default only when its workload-weighted
   band clears the default's (:func:`autoselect.noise.band_compare`); else the default stays.
5. **Confidence** (``confidence.py``): a rule table of caps.
6. **Caveats** (``caveats.py``): warnings (close call, CPU data, stale versions, extrapolation).
7. **Flags** (``flags.py``): tuned knobs, ``vllm serve`` flags, environment, the command line,
   and the ``autoselect bench`` command that would settle an open answer.
8. **Checks** (``e2e.py``): stored end-to-end results and, on request, vLLM's own parser.

``answer.py`` holds the dataclasses that are the JSON document; ``render.py`` the text forms.
Fast path: the standard library and autoselect's pure-Python modules only (no torch, numpy,
sqlite_utils or optuna); the database is read with stdlib ``sqlite3``.
"""

from autoselect.errors import GpuArchRequired, UnknownHostClass
from autoselect.noise import REL_FLOOR, Z, band_compare, point_rel_halfwidth
from autoselect.selector.confidence import CONFIDENCE_CAPS, CONFIDENCE_LEVELS
from autoselect.selector.decide import Decision, decide
from autoselect.selector.e2e import E2E_MARGIN, e2e_evidence
from autoselect.selector.estimate import (ESTIMATE_FLOOR, EXTRAPOLATION_LIMIT, FIT_POINTS, LatencyFit, MeasuredPoint,
                                          estimate_latency, fit_latency)
from autoselect.selector.evidence import DISQUALIFYING, BackendEvidence, EvidenceSource, MeasuredEvidence
from autoselect.selector.flags import settle_command
from autoselect.selector.pipeline import (BadWorkspaceAllowance, NoLegalBackend, recommend, recommend_for,
                                           target_host, target_vllm_version)
from autoselect.selector.render import render_args, render_env, render_explain, render_text
from autoselect.selector.answer import (EVIDENCE_KINDS, SCHEMA_VERSION, BucketValue, Candidate, DataUsed, E2eEvidence,
                                        Recommendation, Rejection)
from autoselect.selector.target import STALENESS_KEYS, RecommendTarget
from autoselect.workload import (DEFAULT_CONCURRENCY, DEFAULT_MAX_NUM_BATCHED_TOKENS, WORKLOAD_TABLE, BadDeployment,
                                 Deployment, NoAll2All, UnknownWorkload, WorkloadSpec, resolve_deployment,
                                 workload_from_kind)

__all__ = [
    # the entry points and the answer
    "recommend", "recommend_for", "target_host", "target_vllm_version", "Recommendation", "Candidate", "Rejection",
    "BucketValue", "DataUsed", "E2eEvidence", "SCHEMA_VERSION", "EVIDENCE_KINDS",
    "render_text", "render_explain", "render_env", "render_args", "settle_command",
    # the steps' public parts
    "RecommendTarget", "STALENESS_KEYS", "EvidenceSource", "BackendEvidence", "MeasuredEvidence", "DISQUALIFYING",
    "LatencyFit", "MeasuredPoint", "fit_latency", "estimate_latency", "ESTIMATE_FLOOR", "EXTRAPOLATION_LIMIT",
    "FIT_POINTS", "Decision", "decide", "CONFIDENCE_CAPS", "CONFIDENCE_LEVELS", "E2E_MARGIN", "e2e_evidence",
    "NoLegalBackend", "BadWorkspaceAllowance",
    # the shared vocabulary, re-exported for the selector's callers (defined in autoselect.workload,
    # autoselect.noise and autoselect.errors)
    "Deployment", "WorkloadSpec", "WORKLOAD_TABLE", "DEFAULT_CONCURRENCY", "DEFAULT_MAX_NUM_BATCHED_TOKENS",
    "resolve_deployment", "workload_from_kind", "BadDeployment", "NoAll2All", "UnknownWorkload",
    "GpuArchRequired", "UnknownHostClass", "Z", "REL_FLOOR", "band_compare", "point_rel_halfwidth",
]
