"""Which all2all backend is legal for which model, host and vLLM version: tables, not if-chains.

One module per table, each row with the upstream source that backs it:

* :mod:`~autoselect.rules.backends` — :data:`BACKENDS`, one :class:`Capability` row per
  ``--all2all-backend`` value: accepted activation dtypes, expert / top-k / hidden-size
  constraints, world-size limit, the DeepEP kernel limits, hardware and package requirements,
  ``--enable-dbo`` support, the vLLM versions that know the value and how it is spelled there.
* :mod:`~autoselect.rules.limits` — the DeepEP kernel limits (:class:`Limit` rows).
* :mod:`~autoselect.rules.one_sided` — :data:`ONE_SIDED_ERAS`, what upstream vLLM does with a
  non-nvfp4 model on ``flashinfer_nvlink_one_sided`` in each version range. autoselect keeps
  one-sided **nvfp4-only in every version**; the eras only decide how bad breaking it is.
* :mod:`~autoselect.rules.flags` — :data:`FLAG_HISTORY`, when ``--all2all-backend`` and
  ``VLLM_ALL2ALL_BACKEND`` came and went.
* :mod:`~autoselect.rules.versions` — version parsing and ranges.

:func:`legal` (:mod:`~autoselect.rules.legal`) evaluates every rule and returns every reason.
"""

from autoselect.rules.backends import (
    ALIASES,
    ALL_FLAG_VALUES,
    BACKENDS,
    BATCHED_BACKENDS,
    DBO_BACKENDS,
    DEFAULT_BACKEND,
    FLAG_SINCE,
    PARSER_CHOICES,
    BackendUnknownToVersion,
    Capability,
    Spelling,
    UnknownBackend,
    flag_value,
    known_to,
    parser_choices,
    recommendable_backends,
    resolve,
    value_known_to,
)
from autoselect.rules.flags import ENV_VAR_REMOVED_IN, FLAG_HISTORY, FlagEvent
from autoselect.rules.legal import (
    GpuArchRequired,
    InvalidTokensPerRank,
    InvalidWorldSize,
    Verdict,
    legal,
    legal_alternatives,
)
from autoselect.rules.limits import (
    DEEPEP_HT_MAX_LOCAL_EXPERTS,
    DEEPEP_HT_ROW_BYTES,
    DEEPEP_HT_WORLD_SIZES,
    DEEPEP_LL_SLOTS_MULTIPLE_OF,
    DEEPEP_LL_TOKENS_PER_RANK,
    DEEPEP_NVL_PEERS,
    DEEPEP_WORLD_SIZE_GROUPING,
    InvalidQueueDepth,
    Limit,
    QueueDepth,
    RowBytes,
)
from autoselect.rules.one_sided import (
    ONE_SIDED_ERAS,
    ONE_SIDED_POLICY,
    OneSidedEra,
    one_sided_consequence,
    one_sided_era,
)
from autoselect.rules.versions import NEWEST_VLLM, InvalidVllmVersion, parse_version, version_in

__all__ = [
    "ALIASES", "ALL_FLAG_VALUES", "BACKENDS", "BATCHED_BACKENDS", "DBO_BACKENDS", "DEEPEP_HT_MAX_LOCAL_EXPERTS",
    "DEEPEP_HT_ROW_BYTES", "DEEPEP_HT_WORLD_SIZES", "DEEPEP_LL_SLOTS_MULTIPLE_OF", "DEEPEP_LL_TOKENS_PER_RANK",
    "DEEPEP_NVL_PEERS", "DEEPEP_WORLD_SIZE_GROUPING", "DEFAULT_BACKEND", "ENV_VAR_REMOVED_IN", "FLAG_HISTORY",
    "FLAG_SINCE", "NEWEST_VLLM", "ONE_SIDED_ERAS", "ONE_SIDED_POLICY", "PARSER_CHOICES", "BackendUnknownToVersion",
    "Capability", "FlagEvent", "GpuArchRequired", "InvalidQueueDepth", "InvalidTokensPerRank", "InvalidVllmVersion",
    "InvalidWorldSize", "Limit", "OneSidedEra", "QueueDepth", "RowBytes", "Spelling", "UnknownBackend", "Verdict",
    "flag_value", "known_to", "legal", "legal_alternatives", "one_sided_consequence", "one_sided_era",
    "parse_version", "parser_choices", "recommendable_backends", "resolve", "value_known_to", "version_in",
]
