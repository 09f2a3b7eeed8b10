"""What a backend does to vLLM's whole step beyond the all2all, in one sentence each.

Two facts of the tables change every step of a server, not just its all2all: a backend vLLM runs
without CUDA graphs (:mod:`autoselect.rules.cuda_graphs`: every decode step eager) and a backend
for which vLLM lowers the token budget (:func:`autoselect.rules.lowered_batch_default`: every step
at most 256 tokens per engine, a longer prefill chunked). :func:`step_consequences` states the ones
that hold for a deployment; ``check`` reports them as findings, ``launch`` on its stderr, and the
selector prices them (:mod:`autoselect.selector.step`).
"""

from __future__ import annotations

from typing import NamedTuple

from autoselect.rules.budgets import budget_row, lowered_batch_default
from autoselect.rules.cuda_graphs import READ_IN, EagerBackend, eager_backend
from autoselect.rules.versions import parse_version

#: :attr:`StepConsequence.kind` values.
CUDA_GRAPHS_OFF = "cuda_graphs_off"
STEP_BUDGET = "step_budget"


class StepConsequence(NamedTuple):
    """One thing a backend does to vLLM's step, in words, with its source."""

    backend: str
    kind: str  # CUDA_GRAPHS_OFF | STEP_BUDGET
    text: str
    source: str
    read: bool = True  # the row was read for the release asked about

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return {"backend": self.backend, "kind": self.kind, "text": self.text, "source": self.source}


def eager(backend: str, vllm_version: str, data_parallel_size: int, *,
          compiled: bool = True) -> tuple[EagerBackend | None, bool]:
    """The :data:`autoselect.rules.cuda_graphs.EAGER_BACKENDS` row that turns CUDA graphs off for
    ``backend`` on this deployment (None: none does) and whether it was read for ``vllm_version``:
    a release older than the rows is judged by the oldest one read."""
    row = eager_backend(backend, vllm_version, data_parallel_size, compiled=compiled)
    if row is None and parse_version(vllm_version)[:4] < parse_version(READ_IN[0])[:4]:
        return eager_backend(backend, READ_IN[0], data_parallel_size, compiled=compiled), False
    return row, True


def cuda_graphs_off(row: EagerBackend, vllm_version: str, read: bool = True) -> str:
    """``vLLM 0.34.0 turns CUDA graphs off for the whole model with deepep_high_throughput (...)``."""
    unread = "" if read else f"; read in vLLM {', '.join(READ_IN)}, and {vllm_version} is judged by that reading"
    return (f"vLLM {vllm_version} turns CUDA graphs off for the whole model with {row.backend} at DP >= "
            f"{row.min_data_parallel} ({row.cite}{unread}): every decode step runs eagerly")


def step_consequences(backend: str, vllm_version: str, *, data_parallel_size: int, expert_parallel: bool = True,
                      max_num_batched_tokens: int | None = None,
                      enforce_eager: bool = False) -> list[StepConsequence]:
    """What ``backend`` does to vLLM ``vllm_version``'s step on this deployment (empty: nothing beyond the all2all).

    :param max_num_batched_tokens: the line's own budget (None: vLLM's default, which it lowers for
        the batched-DP backends).
    :param enforce_eager: the line runs eagerly anyway (``--enforce-eager``): losing CUDA graphs costs nothing more.
    """
    out: list[StepConsequence] = []
    row, read = (None, True) if enforce_eager else eager(backend, vllm_version, data_parallel_size)
    if row is not None:
        out.append(StepConsequence(backend, CUDA_GRAPHS_OFF, cuda_graphs_off(row, vllm_version, read), row.source, read))
    lowered = (lowered_batch_default(backend, vllm_version)
               if expert_parallel and data_parallel_size > 1 and max_num_batched_tokens is None else None)
    if lowered is not None:
        out.append(StepConsequence(
            backend, STEP_BUDGET,
            f"vLLM {vllm_version} lowers --max-num-batched-tokens to {lowered} for {backend}: every step carries at "
            f"most {lowered} tokens per engine, so a longer prefill is chunked into {lowered}-token steps",
            budget_row(backend, vllm_version).cite))
    return out
