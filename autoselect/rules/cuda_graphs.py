"""Where vLLM runs a step from a CUDA graph and where eagerly, release by release.

vLLM captures CUDA graphs for a list of step sizes (tokens per engine, so per DP rank) and runs
a step from the smallest captured size that holds it; a step larger than the largest captured
size runs eagerly, and some backends turn graphs off for the whole model. What one MoE layer's
dispatch + combine costs therefore depends on the step size: graph-replayed up to the capture
size, eager above it (a launch cost per kernel, and for allgather_reducescatter unequal DP sizes,
since vLLM pads the DP ranks to one size only when the step runs a graph). Two tables hold it,
each row with the lines it was read from:

* :data:`CAPTURE_SIZES`: the largest step vLLM captures by default, per release range and GPU
  arch family (``sm100``: compute capability 10.x, vLLM's ``is_device_capability_family(100)``);
  then capped by the token budget (``--max-num-batched-tokens``), which a backend may lower
  (:func:`autoselect.rules.budgets.lowered_batch_default`: 256 for deepep_low_latency);
* :data:`EAGER_BACKENDS`: the backends with which vLLM turns CUDA graphs off, and the condition.

:func:`max_capture_tokens`, :func:`eager_backend` and :func:`step_footing` evaluate them; the
benchmark times each point on the footing :func:`step_footing` gives (``bench/measure/``), and
the step pricing reads the same rows. ``--enforce-eager`` (every step eager) and explicit
``--compilation-config`` capture sizes are the deployment's choice and not modelled here; the
defaults assume no speculative decoding (a decode query of one token) and vLLM's default
``max_num_seqs`` (256 or more on every GPU, so ``2 · max_num_seqs`` never lowers the cap).
"""

from __future__ import annotations

from typing import NamedTuple

from autoselect.rules.budgets import lowered_batch_default
from autoselect.rules.versions import parse_version, version_in

#: The releases whose source the rows were read from.
READ_IN = ("0.32.0", "0.33.0", "0.34.0")

#: The arch family vLLM gives the larger defaults (``is_device_capability_family(100)``: 10.x).
BLACKWELL_DC = "sm100"

_CFG = "vllm/config/vllm.py"
_COMP = "vllm/config/compilation.py"


class CaptureSize(NamedTuple):
    """The largest step (tokens per DP rank) vLLM captures by default in a release range on an arch
    family (``arch`` None: every other arch), before the token budget caps it."""

    since: str
    until: str | None
    arch: str | None
    max_tokens: int
    rule: str
    source: str
    cite: str  # the one source line a message quotes


CAPTURE_SIZES: tuple[CaptureSize, ...] = (
    CaptureSize(
        "0.32.0", "0.34.0", BLACKWELL_DC, 1024,
        "min(2 * max_num_seqs * decode query length, 1024 on compute capability 10.x), then at most "
        "--max-num-batched-tokens; sizes 1, 2, 4, every 8 to 248, every 16 from 256",
        f"{_CFG}:2357-2364, :2446 (0.32.0); :2463-2470, :2552 (0.33.0) _set_cudagraph_sizes: default_max_graph_size "
        "= 1024 if current_platform.is_device_capability_family(100) else 512; max_cudagraph_capture_size = "
        "min(max_num_tokens, max_cudagraph_capture_size)",
        f"{_CFG}:2463-2470 (0.33.0)"),
    CaptureSize(
        "0.32.0", "0.34.0", None, 512,
        "min(2 * max_num_seqs * decode query length, 512), then at most --max-num-batched-tokens; sizes 1, 2, 4, "
        "every 8 to 248, every 16 from 256",
        f"{_CFG}:2357-2364, :2446 (0.32.0); :2463-2470, :2552 (0.33.0) _set_cudagraph_sizes: default_max_graph_size "
        "= ... else 512",
        f"{_CFG}:2463-2470 (0.33.0)"),
    CaptureSize(
        "0.34.0", None, BLACKWELL_DC, 8192,
        "prefill graphs up to min(8192, --max-num-batched-tokens) and decode graphs within 8192 tokens on "
        "compute capability 10.x (the split prefill / decode sizes' wide defaults); the recorded maximum is "
        "the largest of them",
        f"{_CFG}:2601-2611 (wide_defaults = not legacy_sizes and is_device_capability_family(100); "
        "max_decode_cudagraph_capture_tokens = 8192), :2636-2643 (prefill_cudagraph_capture_grid(min(8192, "
        "max_num_tokens))), :2732 (max_cudagraph_capture_size = max(token_sizes)) (0.34.0)",
        f"{_CFG}:2601-2643 (0.34.0)"),
    CaptureSize(
        "0.34.0", None, None, 512,
        "min(2 * max_num_seqs * decode query length, 512), then at most --max-num-batched-tokens (the shared "
        "sizes, which prefill and decode graphs take off compute capability 10.x)",
        f"{_CFG}:2401-2408, :2451 (default_max_graph_size ... else 512), :2633-2634 (prefill_sizes = "
        "list(shared_sizes)), :2732 (0.34.0)",
        f"{_CFG}:2401-2408 (0.34.0)"),
)


class EagerBackend(NamedTuple):
    """A backend with which vLLM turns CUDA graphs off for the whole model (``cudagraph_mode = NONE``)
    when ``min_data_parallel`` or more DP ranks run it."""

    backend: str
    since: str
    until: str | None
    min_data_parallel: int
    why: str
    source: str
    cite: str  # the one source line a message quotes
    #: the rule sits where vLLM only goes in its default compilation mode (VLLM_COMPILE); -O0 captures
    #: nothing anyway
    compiled_only: bool = False


EAGER_BACKENDS: tuple[EagerBackend, ...] = (
    EagerBackend(
        "deepep_high_throughput", "0.32.0", None, 2,
        "vLLM turns CUDA graphs off with DeepEP high-throughput and DP > 1 (its kernels wait on the host)",
        f"{_COMP}:1235-1251 (0.32.0), :1242-1258 (0.33.0), :1401-1417 (0.34.0) set_splitting_ops_for_v1: "
        'all2all_backend == "deepep_high_throughput" and data_parallel_size > 1 -> cudagraph_mode = NONE; '
        "set_splitting_ops_for_v1 returns first unless the mode is VLLM_COMPILE (:1160-1163 0.32.0)",
        f"{_COMP}:1401-1417 (0.34.0)", compiled_only=True),
    EagerBackend(
        "moonep", "0.32.0", None, 2,
        "vLLM turns CUDA graphs off with MoonEP whenever an all2all group exists (eager-only integration)",
        f"{_CFG}:2069-2077 (0.32.0), :2145-2153 (0.33.0), :2055-2063 (0.34.0): all2all_backend == \"moonep\" and "
        "parallel_config.use_all2all -> cudagraph_mode = NONE (use_all2all: data_parallel_size > 1, or "
        "sequence-parallel MoE)",
        f"{_CFG}:2055-2063 (0.34.0)"),
)

#: Where vLLM pads the DP ranks to one size: only when the step runs a graph (or micro-batches).
DP_PADDING_SOURCE = ("vllm/v1/worker/dp_utils.py:181 (0.32.0-0.34.0): should_dp_pad = synced_cudagraph_mode != 0 "
                     "or should_ubatch")


class StepFooting(NamedTuple):
    """How vLLM runs one MoE layer's dispatch + combine at a step size: from a CUDA graph or eagerly.

    ``capture_max``: the largest captured step for this backend (0: none); ``reason``: why eager
    (None when graph); ``read``: the rows were read for the release asked about.
    """

    graph: bool
    capture_max: int
    reason: str | None
    read: bool


def _read(vllm_version: str) -> bool:
    return any(version_in(vllm_version, r.since, r.until) for r in CAPTURE_SIZES)


def capture_size(vllm_version: str, gpu_arch: str | None) -> tuple[CaptureSize, bool]:
    """The :data:`CAPTURE_SIZES` row for ``vllm_version`` on ``gpu_arch`` and whether it was read for it.

    A release outside every row's range takes the nearest range's row (``False``: not read for it).
    """
    arch = BLACKWELL_DC if gpu_arch == BLACKWELL_DC else None
    rows = [r for r in CAPTURE_SIZES if r.arch == arch]
    for row in rows:
        if version_in(vllm_version, row.since, row.until):
            return row, True
    older = parse_version(vllm_version)[:4] < parse_version(rows[0].since)[:4]
    return (rows[0] if older else rows[-1]), False


def max_capture_tokens(vllm_version: str, gpu_arch: str | None, *, backend: str | None = None,
                       max_num_batched_tokens: int | None = None) -> int:
    """The largest step (tokens per DP rank) vLLM runs from a CUDA graph by default: the arch's
    default (:data:`CAPTURE_SIZES`), at most the token budget — ``max_num_batched_tokens`` when given,
    else the default ``backend`` lowers it to (256 for deepep_low_latency), else vLLM's own default,
    which is never below these sizes."""
    row, _ = capture_size(vllm_version, gpu_arch)
    budget = max_num_batched_tokens
    if budget is None and backend is not None:
        budget = lowered_batch_default(backend, vllm_version)
    return row.max_tokens if budget is None else min(row.max_tokens, budget)


def eager_backend(backend: str, vllm_version: str, data_parallel_size: int, *,
                  compiled: bool = True) -> EagerBackend | None:
    """The :data:`EAGER_BACKENDS` row that makes vLLM run ``backend`` eagerly at this DP size, or None.

    :param compiled: vLLM runs in its default compilation mode (False for ``-O0``).
    """
    for row in EAGER_BACKENDS:
        if row.backend == backend and version_in(vllm_version, row.since, row.until) \
                and data_parallel_size >= row.min_data_parallel and (compiled or not row.compiled_only):
            return row
    return None


def step_footing(backend: str, tokens_per_rank: int, *, vllm_version: str, gpu_arch: str | None,
                 data_parallel_size: int, max_num_batched_tokens: int | None = None) -> StepFooting:
    """Whether vLLM ``vllm_version`` runs ``backend``'s dispatch + combine for a step of
    ``tokens_per_rank`` tokens per DP rank from a CUDA graph (by default: no ``--enforce-eager``, no
    explicit capture sizes), and why not.

    Without ``max_num_batched_tokens`` the deployment is the smallest that runs such a step: a
    backend whose default budget is lower (256 for deepep_low_latency) has it raised to the step
    (``autoselect.rules.budgets.smallest_deployment``), so only the arch's capture size decides.
    """
    read = _read(vllm_version)
    off = eager_backend(backend, vllm_version, data_parallel_size)
    if off is not None:
        return StepFooting(False, 0, f"{off.why} ({off.cite})", read)
    budget = max_num_batched_tokens
    if budget is None:
        lowered = lowered_batch_default(backend, vllm_version)
        budget = None if lowered is None else max(lowered, tokens_per_rank)
    row, _ = capture_size(vllm_version, gpu_arch)
    cap = row.max_tokens if budget is None else min(row.max_tokens, budget)
    if tokens_per_rank <= cap:
        return StepFooting(True, cap, None, read)
    why = (f"{tokens_per_rank} tokens per rank is above vLLM {vllm_version}'s largest CUDA-graph capture size "
           f"on {gpu_arch or 'this GPU'} ({cap} tokens" + (", the token budget" if cap < row.max_tokens else "")
           + f"): vLLM runs that step eagerly ({row.cite})")
    return StepFooting(False, cap, why, read)


def not_read_note(vllm_version: str) -> str:
    """What is said when ``vllm_version`` is outside the releases the tables were read in."""
    return (f"vLLM's CUDA-graph capture sizes were read in vLLM {', '.join(READ_IN)}; "
            f"vLLM {vllm_version}'s were not, and are taken as the nearest release's")
