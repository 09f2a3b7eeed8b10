"""Which all2all backend is legal for which model, host and vLLM version: tables, not if-chains.

One module per table, each row with the upstream source that backs it:

* :mod:`~autoselect.rules.backends` — the backend registry: :data:`BACKENDS`, one
  :class:`Capability` row per ``--all2all-backend`` value (its benchmark adapter, accepted
  activation dtypes, expert / top-k / hidden-size constraints, world-size limit, the DeepEP
  kernel limits, hardware and package requirements, the vLLM versions that know the value and
  how it is spelled there), the benchmark-only :data:`BASELINES`, and :data:`ADAPTERS`, every
  built-in adapter (what ``bench.backends`` and the entry points register).
* :mod:`~autoselect.rules.limits` — the DeepEP kernel limits (:class:`Limit` rows).
* :mod:`~autoselect.rules.one_sided` — :data:`ONE_SIDED_ERAS`, what upstream vLLM does with a
  non-nvfp4 model on ``flashinfer_nvlink_one_sided`` in each version range. autoselect keeps
  one-sided **nvfp4-only in every version**; the eras only decide how bad breaking it is.
* :mod:`~autoselect.rules.selection` — :data:`SELECTION_ERAS`, how each release picks its
  backend from ``--all2all-backend``, ``VLLM_ALL2ALL_BACKEND`` and its default.
* :mod:`~autoselect.rules.budgets` — :data:`DISPATCH_BUDGETS`, what sizes a batched backend's
  per-rank dispatch buffer (``VLLM_MOE_DP_CHUNK_SIZE`` up to 0.19.x, ``--max-num-batched-tokens`` after).
* :mod:`~autoselect.rules.eplb` — :data:`EPLB_RULES`, what vLLM requires of redundant experts.
* :mod:`~autoselect.rules.serve_options` — :data:`SERVE_OPTIONS` (when the related ``vllm serve``
  options came and went) and :data:`DBO_SUPPORT` (the backends ``--enable-dbo`` takes).
* :mod:`~autoselect.rules.platforms` — :data:`PLATFORMS`, the backends a vLLM platform without
  GPUs builds at all (the CPU platform: allgather_reducescatter only).
* :mod:`~autoselect.rules.reports` — :data:`UPSTREAM_REPORTS`, upstream bug reports with the
  releases they affect and their status.
* :mod:`~autoselect.rules.wire` — :data:`WIRE_DTYPES`, the dtype each backend really sends for a
  model's activation dtype (vLLM's DeepEP sends nvfp4 / per-tensor fp8 models as bf16), per release.
* :mod:`~autoselect.rules.experts` — :data:`ORACLES` and :data:`EXPERT_KERNELS`, the expert kernel vLLM's
  MoE oracle chooses per arch, weight format, EP size and backend, and whether it takes the
  activation unquantized (then bf16 crosses: :mod:`~autoselect.rules.wire` asks it first).
* :mod:`~autoselect.rules.batch_defaults` — :data:`BATCH_DEFAULTS`, vLLM's default
  ``--max-num-batched-tokens`` per GPU memory and usage context, per release; :func:`token_budget`.
* :mod:`~autoselect.rules.consequences` — :func:`step_consequences`: what a backend does to vLLM's whole step
  beyond the all2all (CUDA graphs off, a lowered step budget), in one sentence each.
* :mod:`~autoselect.rules.agrs_collectives` — :data:`AGRS_COLLECTIVES`, the NCCL calls behind
  vLLM's default (one all_gather per gathered tensor in one group, per-rank broadcasts and reduces
  with unequal DP sizes), per release.
* :mod:`~autoselect.rules.cuda_graphs` — :data:`CAPTURE_SIZES` (the largest step vLLM captures in a
  CUDA graph, per release and arch) and :data:`EAGER_BACKENDS` (the backends with which vLLM turns
  graphs off): whether a step's dispatch + combine runs from a graph or eagerly.
* :mod:`~autoselect.rules.graph_capture` — whether vLLM runs a step's dispatch and combine from a
  CUDA graph (the largest captured step per release and arch; DeepEP high-throughput turns graphs off).
* :mod:`~autoselect.rules.moe_backends` — :data:`MOE_BACKENDS`, the ``--moe-backend`` values that
  dispatch and combine themselves (vLLM binds ``passthrough`` and refuses any other backend).
* :mod:`~autoselect.rules.flashinfer` — which FlashInfer each release pins, what each FlashInfer
  exports, and which FlashInfer API each release's FlashInfer backends call.
* :mod:`~autoselect.rules.sentences` — :class:`Sentence`: a refusal or warning in one sentence,
  and the same with its sources (what ``--explain`` and the JSON add).
* :mod:`~autoselect.rules.versions` — version parsing and ranges, :data:`RELEASES` (every release
  the tables know) and the warning for a newer one (:func:`newer_than_known`).

``scripts/read_release.py`` reads the facts these tables hold from a vLLM wheel, sdist or
installed tree and prints every difference (docs/development.md).

:func:`legal` (:mod:`~autoselect.rules.legal`) evaluates every rule and returns every reason, in
named steps; the rules on a model's shape and the EP size are its table :data:`SHAPE_RULES`. It
judges for the serving host: a machine that only plans an answer for other GPUs (``serving_host``
False) decides nothing by its packages and links; the verdict says what the serving host needs.
"""

from autoselect.lazy import lazy_exports
from autoselect.rules.backends import (
    ADAPTERS,
    ALIASES,
    ALL_FLAG_VALUES,
    BACKENDS,
    BASELINES,
    DEFAULT_BACKEND,
    HIDDEN_VALUES,
    BackendUnknownToVersion,
    UnknownBackend,
    acted_on,
    deprecation,
    flag_value,
    parser_choices,
    recommendable_backends,
    resolve,
    value_known_to,
)
from autoselect.rules.budgets import (
    DISPATCH_BUDGETS,
    default_dispatch_tokens,
    dispatch_budget,
    lowered_batch_default,
    smallest_deployment,
)
from autoselect.rules.eplb import (
    EPLB_RULES,
    REDUNDANT_DEFAULTS,
    eplb_is_async,
    eplb_notes,
    eplb_reasons,
    redundant_experts,
)
from autoselect.rules.experts import EXPERT_KERNELS, ORACLES, Expert, expert_kernel
from autoselect.rules.flashinfer import install_hazard
from autoselect.rules.legal import Verdict, legal, legal_alternatives, serving_host_requirements
from autoselect.rules.limits import (
    DEEPEP_HT_MAX_LOCAL_EXPERTS,
    DEEPEP_HT_ROW_BYTES,
    DEEPEP_HT_WORLD_SIZES,
    DEEPEP_LL_TOKENS_PER_RANK,
    DEEPEP_NVL_PEERS,
)
from autoselect.rules.one_sided import ONE_SIDED_ERAS, ONE_SIDED_POLICY
from autoselect.rules.platforms import CUDA, PLATFORMS, platform_reason
from autoselect.rules.reports import UPSTREAM_REPORTS
from autoselect.rules.selection import (
    OLDEST_CHECKED,
    ORIGIN_DEFAULT,
    ORIGIN_FLAG,
    SELECTION_ERAS,
    VARIABLE,
    EffectiveBackend,
    effective_backend,
    selection_era,
)
from autoselect.rules.sentences import Sentence, detail_of, text_of
from autoselect.rules.serve_options import DBO_SUPPORT, ENV_VAR_REMOVED_IN, FLAG_SINCE, SERVE_OPTIONS, dbo_backends
from autoselect.rules.consequences import StepConsequence, step_consequences
from autoselect.rules.batch_defaults import BATCH_DEFAULTS, TokenBudget, token_budget
from autoselect.rules.versions import NEWEST_VLLM, InvalidVllmVersion, newer_than_known, parse_version, version_in

#: Re-exports loaded on first use (:mod:`autoselect.lazy`): the ``--moe-backend`` table serves
#: ``check`` and serve flags whose tuned extras name a ``--moe-backend``; a plain ``recommend``
#: never reads it, and building it (a table and a dataclass) would cost every start.
_LAZY = {"moe_backends": ("MOE_BACKENDS", "Binding", "dispatching_moe_backend", "moe_backend_binding")}
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "BATCH_DEFAULTS", "EXPERT_KERNELS", "ORACLES", "Expert", "StepConsequence", "TokenBudget", "expert_kernel",
    "step_consequences", "token_budget",
    "ADAPTERS", "ALIASES", "ALL_FLAG_VALUES", "BACKENDS", "BASELINES", "CUDA", "DBO_SUPPORT", "DEEPEP_HT_MAX_LOCAL_EXPERTS",
    "DEEPEP_HT_ROW_BYTES", "DEEPEP_HT_WORLD_SIZES", "DEEPEP_LL_TOKENS_PER_RANK", "DEEPEP_NVL_PEERS",
    "DEFAULT_BACKEND", "DISPATCH_BUDGETS", "ENV_VAR_REMOVED_IN", "EPLB_RULES", "FLAG_SINCE", "HIDDEN_VALUES",
    "MOE_BACKENDS", "NEWEST_VLLM", "OLDEST_CHECKED", "ONE_SIDED_ERAS", "ONE_SIDED_POLICY", "ORIGIN_DEFAULT",
    "ORIGIN_FLAG", "PLATFORMS", "REDUNDANT_DEFAULTS", "SELECTION_ERAS", "SERVE_OPTIONS", "UPSTREAM_REPORTS",
    "VARIABLE", "BackendUnknownToVersion", "Binding", "EffectiveBackend", "InvalidVllmVersion", "Sentence",
    "UnknownBackend", "Verdict", "acted_on", "dbo_backends", "default_dispatch_tokens", "deprecation",
    "detail_of", "dispatch_budget", "dispatching_moe_backend", "effective_backend", "eplb_is_async", "eplb_notes",
    "eplb_reasons", "flag_value", "install_hazard", "legal", "legal_alternatives", "lowered_batch_default",
    "moe_backend_binding", "newer_than_known", "parse_version", "parser_choices", "platform_reason",
    "recommendable_backends", "redundant_experts", "resolve", "selection_era", "serving_host_requirements",
    "smallest_deployment", "text_of", "value_known_to", "version_in",
]
