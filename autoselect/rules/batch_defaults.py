"""vLLM's token budget per step (``--max-num-batched-tokens``) when the line does not set it, release by release.

``EngineArgs.get_batch_defaults`` picks the default by the GPU's memory and the usage context:
``vllm serve`` (``OPENAI_API_SERVER``) gets 16384 on GPUs with at least 160 GiB, 8192 on GPUs with
at least 70 GiB that are neither an A100 (by name) nor a GB10 (compute capability 12.1, from
0.33.0), and 2048 on everything else; the ``LLM`` class gets more. The same tiers set the default
``--max-num-seqs`` (1024, 1024, 256): the largest decode step, one token per running request. ``--performance-mode
throughput`` doubles the default, and the batched-DP backends (DeepEP low-latency, nixl_ep) get
256 instead (:func:`autoselect.rules.lowered_batch_default`). The budget is per engine (per DP
rank) and caps every step: a prefill longer than it is chunked. :data:`BATCH_DEFAULTS` holds one
row per release range with its source lines; :func:`token_budget` gives the budget a line runs
with and where it came from. ``scripts/read_release.py`` reads the tiers (``batch_defaults``) and
compares them with these rows.
"""

from __future__ import annotations

from typing import NamedTuple

from autoselect.rules.budgets import budget_row, lowered_batch_default
from autoselect.rules.versions import parse_version, version_in

#: The releases whose source the rows below were read from.
READ_IN = ("0.32.0", "0.33.0", "0.34.0")

FLAG = "--max-num-batched-tokens"
#: Where a budget came from (:attr:`TokenBudget.origin`).
ORIGIN_FLAG = "flag"  # the line (or --max-num-batched-tokens) sets it
ORIGIN_DEFAULT = "vLLM's default"  # vLLM's default for the GPU memory
ORIGIN_BACKEND = "the backend's default"  # vLLM lowers it for the backend
ORIGIN_WORKSPACE = "the workspace"  # autoselect lowers it so a workspace fits (vllm_flags.emit)

# get_batch_defaults' exclusions of the middle tier.
A100 = "a100"  # '"a100" not in device_name'
GB10 = "gb10"  # 'not is_gb10' (compute capability 12.1)


class Tier(NamedTuple):
    """GPUs with at least ``min_gib`` GiB (and none of ``excludes``) get these defaults."""

    min_gib: int
    excludes: frozenset
    serve: int  # vllm serve (UsageContext.OPENAI_API_SERVER)
    llm_class: int  # the LLM class (UsageContext.LLM_CLASS)
    max_num_seqs: int  # vllm serve's default --max-num-seqs: the largest decode step, one token per request


class BatchDefaults(NamedTuple):
    """vLLM's default token budget in a release range: its tiers, largest first (the last one,
    0 GiB, is everything else); the scheduler's own default; whether throughput mode doubles it."""

    since: str
    until: str | None
    tiers: tuple[Tier, ...]
    fallback: int  # SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS (a usage context without a value)
    throughput_doubles: bool
    source: str


_SOURCE = ("vllm/engine/arg_utils.py get_batch_defaults :2923-2952 (0.32.0), :2973-3006 (0.33.0), :3010-3043 "
           "(0.34.0) (default_max_num_batched_tokens and default_max_num_seqs per tier); "
           "_set_default_max_num_seqs_and_batched_tokens_args doubles it for --performance-mode throughput "
           "(:3130 0.32.0, :3184 0.33.0, :3221 0.34.0); config/scheduler.py:40 (0.34.0) "
           "DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048")

BATCH_DEFAULTS: tuple[BatchDefaults, ...] = (
    BatchDefaults("0.32.0", "0.33.0",
                  (Tier(160, frozenset(), 16384, 16384, 1024), Tier(70, frozenset({A100}), 8192, 16384, 1024),
                   Tier(0, frozenset(), 2048, 8192, 256)),
                  2048, True, _SOURCE),
    BatchDefaults("0.33.0", None,
                  (Tier(160, frozenset(), 16384, 16384, 1024), Tier(70, frozenset({A100, GB10}), 8192, 16384, 1024),
                   Tier(0, frozenset(), 2048, 8192, 256)),
                  2048, True, _SOURCE + "; the GB10 exclusion from 0.33.0 (arg_utils.py:2963, 0.34.0 :3000)"),
)

#: The smallest data-center GPU of each arch autoselect serves, for a host whose GPU memory is
#: unknown: (name, GiB). H100 SXM 80 GB (79.6 GiB as vLLM sees it); B200 180 GB.
ARCH_GPUS = {"sm90": ("H100", 79.6), "sm100": ("B200", 179.1)}


class TokenBudget(NamedTuple):
    """The token budget one line (or answer) runs with, per engine, and where it came from."""

    tokens: int
    origin: str  # ORIGIN_FLAG | ORIGIN_DEFAULT | ORIGIN_BACKEND | ORIGIN_WORKSPACE
    why: str  # in words: "vLLM 0.34.0's default for vllm serve on GPUs with >= 70 GiB (141 GiB: ...)"
    source: str
    read: bool = True  # the row was read for the release asked about

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return {"tokens": self.tokens, "origin": self.origin, "why": self.why, "source": self.source}


def defaults_for(vllm_version: str) -> tuple[BatchDefaults, bool]:
    """The :data:`BATCH_DEFAULTS` row for ``vllm_version`` and whether it was read for it (else the nearest)."""
    for row in BATCH_DEFAULTS:
        if version_in(vllm_version, row.since, row.until):
            return row, True
    older = parse_version(vllm_version)[:4] < parse_version(BATCH_DEFAULTS[0].since)[:4]
    return (BATCH_DEFAULTS[0] if older else BATCH_DEFAULTS[-1]), False


def tier(vllm_version: str, gpu_gib: float, *, gpu_name: str | None = None, gpu_arch: str | None = None) -> Tier:
    """The tier a GPU with ``gpu_gib`` GiB falls in on ``vllm_version`` (its name and arch decide the exclusions)."""
    row, _ = defaults_for(vllm_version)
    name = (gpu_name or "").lower()
    excluded = {A100} if "a100" in name else set()
    if gpu_arch in ("sm121", "gb10") or "gb10" in name:
        excluded.add(GB10)
    return next(t for t in row.tiers if gpu_gib >= t.min_gib and not (t.excludes & excluded))


def max_num_seqs(vllm_version: str, *, gpu_memory_mib: int | None, gpu_arch: str | None = None,
                 gpu_name: str | None = None) -> int:
    """``vllm serve``'s default ``--max-num-seqs`` on these GPUs (unknown memory: the arch's smallest
    data-center GPU, :data:`ARCH_GPUS`): the largest decode step, one token per running request."""
    gib = gpu_memory_mib / 1024 if gpu_memory_mib else ARCH_GPUS.get(gpu_arch or "", ARCH_GPUS["sm90"])[1]
    return tier(vllm_version, gib, gpu_name=gpu_name, gpu_arch=gpu_arch).max_num_seqs


def token_budget(backend: str | None, vllm_version: str, *, gpu_memory_mib: int | None, gpu_arch: str | None = None,
                 gpu_name: str | None = None, max_num_batched_tokens: int | None = None, data_parallel_size: int = 2,
                 expert_parallel: bool = True, performance_mode: str | None = None,
                 memory_from: str = "the host's GPUs") -> TokenBudget:
    """The ``--max-num-batched-tokens`` a ``vllm serve`` line runs with.

    The line's own value first; then the batched-DP backends' lowered default (EP and DP > 1);
    then vLLM's default for the GPU memory (``gpu_memory_mib``, from ``memory_from``; unknown:
    the smallest data-center GPU of ``gpu_arch``, :data:`ARCH_GPUS`, and the text says it was
    assumed). ``performance_mode`` ``throughput`` doubles a default.
    """
    row, read = defaults_for(vllm_version)
    if max_num_batched_tokens is not None:
        return TokenBudget(max_num_batched_tokens, ORIGIN_FLAG, f"{FLAG} {max_num_batched_tokens}", "", True)
    doubled = performance_mode == "throughput" and row.throughput_doubles
    times = " x 2 for --performance-mode throughput" if doubled else ""
    lowered = (lowered_batch_default(backend, vllm_version)
               if backend is not None and expert_parallel and data_parallel_size > 1 else None)
    if lowered is not None:
        return TokenBudget(lowered * (2 if doubled else 1), ORIGIN_BACKEND,
                           f"vLLM {vllm_version} lowers the default to {lowered} for {backend}{times}",
                           budget_row(backend, vllm_version).source, read)
    if gpu_memory_mib:
        gib, seen = gpu_memory_mib / 1024, f"{gpu_memory_mib / 1024:.0f} GiB GPUs ({memory_from})"
    else:
        gpu, gib = ARCH_GPUS.get(gpu_arch or "", ("H100", ARCH_GPUS["sm90"][1]))
        seen = f"GPU memory unknown: assumed {gpu} ({gib:.0f} GiB), the smallest {gpu_arch or 'sm90'} data-center GPU"
    t = tier(vllm_version, gib, gpu_name=gpu_name, gpu_arch=gpu_arch)
    bound = f">= {t.min_gib} GiB" if t.min_gib else "less than 70 GiB (or an A100 or GB10)"
    unread = "" if read else f" (read in vLLM {', '.join(READ_IN)}; {vllm_version} is judged by that reading)"
    return TokenBudget(t.serve * (2 if doubled else 1), ORIGIN_DEFAULT,
                       f"vLLM {vllm_version}'s default for vllm serve on GPUs with {bound}: {seen}{times}{unread}",
                       row.source, read)
