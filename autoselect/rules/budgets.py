"""What sizes a batched backend's per-rank dispatch buffer, release by release.

DeepEP low-latency (and nixl_ep) allocate their buffers for a fixed number of tokens per rank
(DeepEP's ``num_max_dispatch_tokens_per_rank``); DeepEP then asserts its NVSHMEM queue depth
holds that many (:data:`autoselect.rules.limits.DEEPEP_LL_TOKENS_PER_RANK`). Which setting gives
that number changed: up to 0.19.x it is ``VLLM_MOE_DP_CHUNK_SIZE`` and vLLM chunks a larger
batch; from 0.20.0 it is ``--max-num-batched-tokens``, which vLLM lowers to 256 for these
backends when the line does not set it. :data:`DISPATCH_BUDGETS` holds the rows, each with its
source lines; :func:`dispatch_budget` evaluates them for a command line, and
:func:`smallest_deployment` gives the settings of the smallest deployment that dispatches a
given number of tokens per rank at once (what the benchmark measures).
"""

from __future__ import annotations

from typing import NamedTuple

from autoselect.errors import UserError
from autoselect.rules.limits import env_positive_int
from autoselect.rules.versions import version_in

CHUNK_SIZE = "VLLM_MOE_DP_CHUNK_SIZE"
CHUNKING_SWITCH = "VLLM_ENABLE_MOE_DP_CHUNK"
BATCHED_TOKENS = "--max-num-batched-tokens"


class InvalidChunkSize(UserError):
    "VLLM_MOE_DP_CHUNK_SIZE is set to something other than a positive integer."


class DispatchBudget(NamedTuple):
    """What sizes ``backend``'s dispatch buffer (tokens per rank) in a release range."""

    backend: str
    since: str | None
    until: str | None
    setting: str  # CHUNK_SIZE (an environment variable) or BATCHED_TOKENS (a flag)
    default: int  # the buffer when the setting is absent
    chunked: bool  # vLLM splits a larger batch into buffer-sized chunks before dispatching
    chunking_switch_since: str | None  # from this release CHUNKING_SWITCH=0 turns the chunking off
    source: str
    cite: str = ""  # the one source line a message quotes


_CHUNK_SOURCE = ("fused_moe/layer.py builds FusedMoEConfig(max_num_tokens=envs.VLLM_MOE_DP_CHUNK_SIZE) "
                 "(0.10.0 layer.py:727, 0.19.1 layer.py:481; envs.py default 256) and all2all_utils.py sizes "
                 "the buffer from moe.max_num_tokens; the MoE runner chunks batches by it")
_FLAG_SOURCE = ("0.20.0 fused_moe/layer.py:503 max_num_tokens=scheduler_config.max_num_batched_tokens; "
                "engine/arg_utils.py:2354-2358 sets 256 (config/scheduler.py:43 "
                "DEFAULT_MAX_NUM_BATCHED_TOKENS_FOR_BATCHED_DP) when the flag is absent and "
                "parallel.py:627-636 use_batched_dp_moe; same in 0.33.0 (arg_utils.py:3167-3169) and 0.34.0 "
                "(arg_utils.py:3204-3206, parallel.py:888-896, scheduler.py:41)")

_CHUNK_CITE = "0.19.1 fused_moe/layer.py:481"
_FLAG_CITE = "0.20.0 fused_moe/layer.py:503, engine/arg_utils.py:2354-2358"

DISPATCH_BUDGETS = (
    DispatchBudget("deepep_low_latency", None, "0.20.0", CHUNK_SIZE, 256, True, "0.13.0", _CHUNK_SOURCE, _CHUNK_CITE),
    DispatchBudget("deepep_low_latency", "0.20.0", None, BATCHED_TOKENS, 256, False, None, _FLAG_SOURCE, _FLAG_CITE),
    DispatchBudget("nixl_ep", "0.18.0", "0.20.0", CHUNK_SIZE, 256, True, "0.18.0", _CHUNK_SOURCE, _CHUNK_CITE),
    DispatchBudget("nixl_ep", "0.20.0", None, BATCHED_TOKENS, 256, False, None, _FLAG_SOURCE, _FLAG_CITE),
)

#: Where the chunking switch and the chunk size's removal were read.
CHUNKING_SWITCH_SOURCE = ("0.13.0 vllm/envs.py:150 VLLM_ENABLE_MOE_DP_CHUNK (default 1; PR #29936); "
                          "0.19.1 fused_moe/runner/default_moe_runner.py:263-269")
CHUNK_SIZE_REMOVED_IN = "0.20.0"
CHUNK_SIZE_REMOVED_SOURCE = "PR #39107 removed MoE DP chunking; 0.20.0 vllm/envs.py has no VLLM_MOE_DP_CHUNK_SIZE"


def budget_row(backend: str, vllm_version: str) -> DispatchBudget | None:
    """The :data:`DISPATCH_BUDGETS` row for ``backend`` on ``vllm_version`` (None: no fixed buffer)."""
    return next((b for b in DISPATCH_BUDGETS
                 if b.backend == backend and version_in(vllm_version, b.since, b.until)), None)


def lowered_batch_default(backend: str, vllm_version: str) -> int | None:
    """The ``--max-num-batched-tokens`` vLLM uses for ``backend`` when the line has none, if it
    lowers it (256 for deepep_low_latency and nixl_ep from 0.20.0), else None."""
    row = budget_row(backend, vllm_version)
    return row.default if row is not None and row.setting == BATCHED_TOKENS else None


class Budget(NamedTuple):
    """A line's dispatch buffer for one backend: how many tokens per rank, and what set it."""

    tokens: int  # the buffer: most tokens per rank in one dispatch
    setting: str  # the setting that sized it (CHUNK_SIZE or BATCHED_TOKENS)
    given: bool  # the line (or its environment) set it; False: vLLM's default
    per_call: int | None  # most tokens one dispatch carries; None: the batch, size unknown
    row: DispatchBudget

    @property
    def overruns(self) -> bool:
        """True when a dispatch can carry more tokens than the buffer holds (chunking turned off)."""
        return self.per_call is None or self.per_call > self.tokens

    def describe(self) -> str:
        """``VLLM_MOE_DP_CHUNK_SIZE=1024`` / ``vLLM's default --max-num-batched-tokens 256``: the buffer's origin."""
        sep = "=" if self.setting == CHUNK_SIZE else " "
        return ("" if self.given else "vLLM's default ") + f"{self.setting}{sep}{self.tokens}"


def dispatch_budget(backend: str, vllm_version: str, *, max_num_batched_tokens: int | None = None,
                    environ: dict | None = None) -> Budget | None:
    """``backend``'s dispatch buffer on ``vllm_version`` for a line's settings; None when the
    backend has no fixed per-rank buffer in that release.

    :raises InvalidChunkSize: ``VLLM_MOE_DP_CHUNK_SIZE`` set to a non-positive or non-integer value
        in a release that reads it.
    """
    row = budget_row(backend, vllm_version)
    if row is None:
        return None
    environ = environ or {}
    if row.setting == BATCHED_TOKENS:
        tokens = max_num_batched_tokens or row.default
        return Budget(tokens, row.setting, max_num_batched_tokens is not None, tokens, row)
    chunk = env_positive_int(environ, CHUNK_SIZE, InvalidChunkSize,
                             "vLLM reads it with int() and fails at startup: unset it (vLLM uses 256) or set a "
                             "number such as 256")
    tokens = chunk or row.default
    chunking_off = (row.chunking_switch_since is not None and version_in(vllm_version, row.chunking_switch_since, None)
                    and str(environ.get(CHUNKING_SWITCH, "1")).strip() == "0")
    per_call = max_num_batched_tokens if chunking_off else tokens
    return Budget(tokens, row.setting, chunk is not None, per_call, row)


def smallest_deployment(backend: str, vllm_version: str, tokens: int) -> tuple[int, dict]:
    """``(--max-num-batched-tokens, environment)`` of the smallest deployment of ``backend`` on
    ``vllm_version`` that dispatches ``tokens`` tokens per rank in one call.

    Backends without a fixed buffer: ``(tokens, {})``. Up to 0.19.x the buffer is the chunk size:
    ``(tokens, {"VLLM_MOE_DP_CHUNK_SIZE": str(max(256, tokens))})`` (set even at 256, so that an
    exported value does not change the deployment); from 0.20.0 the flag: ``(max(256, tokens), {})``.
    """
    row = budget_row(backend, vllm_version)
    if row is None:
        return tokens, {}
    buffer = max(row.default, tokens)
    if row.setting == BATCHED_TOKENS:
        return buffer, {}
    return tokens, {CHUNK_SIZE: str(buffer)}


def default_dispatch_tokens(backend: str) -> int | None:
    """The buffer ``backend`` gets when nothing sets it, the same in every release (256 for
    deepep_low_latency and nixl_ep); None for a backend without a fixed buffer."""
    defaults = {b.default for b in DISPATCH_BUDGETS if b.backend == backend}
    if len(defaults) > 1:  # the rows disagree: callers must ask per release (dispatch_budget)
        raise ValueError(f"{backend}'s default dispatch buffer differs between releases: {sorted(defaults)}")
    return defaults.pop() if defaults else None
