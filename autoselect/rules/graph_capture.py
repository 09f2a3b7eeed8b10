"""Whether vLLM runs one step's MoE dispatch and combine under a CUDA graph: the reference footing's view.

The facts are :mod:`autoselect.rules.cuda_graphs`'s (one table, each row with its 0.32 / 0.33 /
0.34 source lines): a step runs as a CUDA graph replay when vLLM captured graphs at all and the
step's token count per engine (per DP rank) fits the largest size it captured (512 tokens per rank;
1024 on compute capability 10.x up to 0.33, 8192 there from 0.34: prefill graphs up to
``min(8192, --max-num-batched-tokens)``); otherwise every kernel of the step is launched eagerly.
DeepEP high-throughput (and MoonEP) turn CUDA graphs off for the whole model with more than one
DP rank. In piecewise mode the MoE layer lies inside the captured pieces (the graph splits at
attention), so a mixed step within that size is captured too. A step larger than the token budget
does not exist, so the budget's cap on the size never moves a step from graph to eager.

This module keeps the small interface the reference footing asks (``autoselect.reference.footing``,
the selector's tie rule, ``perf/regret_reference.py``): :func:`capture` for a deployment of several
DP ranks (what the reference rows describe), :data:`MAX_CAPTURE` and :data:`EAGER_BACKENDS` for the
answer's account of its sources. ``--enforce-eager`` and explicit capture sizes are the
deployment's choice, not modelled.
"""

from __future__ import annotations

from typing import NamedTuple

from autoselect.rules.cuda_graphs import BLACKWELL_DC, CAPTURE_SIZES, capture_size, step_footing
from autoselect.rules.cuda_graphs import EAGER_BACKENDS as _EAGER_ROWS
from autoselect.rules.versions import NEWEST_VLLM

GRAPH, EAGER = "graph", "eager"

#: Backends vLLM runs without CUDA graphs (the whole model, DP > 1), and where it says so.
EAGER_BACKENDS = {row.backend: row.source for row in _EAGER_ROWS}


class MaxCapture(NamedTuple):
    """The largest step (tokens per DP rank) vLLM captures by default from a release on, per arch family."""

    since: str
    sm100: int
    other: int
    source: str


def _max_capture_rows() -> tuple[MaxCapture, ...]:
    out = []
    for since in dict.fromkeys(r.since for r in CAPTURE_SIZES):
        rows = {r.arch: r for r in CAPTURE_SIZES if r.since == since}
        out.append(MaxCapture(since, rows[BLACKWELL_DC].max_tokens, rows[None].max_tokens,
                              f"{rows[BLACKWELL_DC].source}; elsewhere {rows[None].cite}"))
    return tuple(out)


#: :data:`autoselect.rules.cuda_graphs.CAPTURE_SIZES` by release: the largest step on sm100 and elsewhere.
MAX_CAPTURE: tuple[MaxCapture, ...] = _max_capture_rows()


class Capture(NamedTuple):
    """How vLLM runs one backend's all2all at one step size, and why."""

    mode: str  # GRAPH | EAGER
    why: str


def capture(backend: str, tokens_per_rank: int, arch: str, vllm_version: str | None = None) -> Capture:
    """Whether vLLM runs ``backend``'s dispatch and combine for a step of ``tokens_per_rank``
    tokens per engine (tp 1, several DP ranks) under a CUDA graph on ``arch``
    (:func:`autoselect.rules.cuda_graphs.step_footing`)."""
    version = vllm_version or NEWEST_VLLM
    footing = step_footing(backend, tokens_per_rank, vllm_version=version, gpu_arch=arch, data_parallel_size=2)
    if footing.capture_max == 0:
        return Capture(EAGER, f"vLLM turns CUDA graphs off for {backend}")
    ceiling = capture_size(version, arch)[0].max_tokens  # the arch's; a step never exceeds its budget
    if footing.graph:
        return Capture(GRAPH, f"up to {ceiling} tokens per rank vLLM runs the step from a CUDA graph on {arch}")
    return Capture(EAGER, f"above {ceiling} tokens per rank vLLM runs the step eagerly on {arch}")
