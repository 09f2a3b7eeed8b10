"""Step 3, continued: what each backend does to vLLM's whole step beyond its all2all, priced or ruled out.

Two facts of the rules change more than one all2all round trip (:mod:`autoselect.rules.consequences`):

* **CUDA graphs off** (:mod:`autoselect.rules.cuda_graphs`: DeepEP high-throughput with DP > 1).
  vLLM then runs every step eagerly, decode included. Such a backend is **ineligible** for a
  workload with a decode-sized bucket vLLM would otherwise run in a CUDA graph (tokens per engine
  at most vLLM's default ``--max-num-seqs``, one per running request, and at most the largest
  captured step), and the rejection says why. It is not priced with a penalty: no source
  gives the eager cost of a whole model's step on the answer's footing (one MoE layer's all2all in
  µs, CUDA-graph or eager per the reference row), and a number adding the two would compare
  numbers on different footings. On a workload whose every bucket is above the capture size it
  stays a candidate, and the answer says CUDA graphs are off.
* **The step budget**: each candidate runs under the ``--max-num-batched-tokens`` its flags give
  (the user's; vLLM's 256 for DeepEP low-latency; the budget emitted so the one-sided workspace
  fits; else vLLM's default for the GPU, :attr:`RecommendTarget.budget`). vLLM runs a bucket above
  it as several steps, full ones at the budget and one with the rest, and so it is **priced**: the
  sum of those steps' all2alls (:func:`stepped`). The rest of those extra steps (attention, the
  other layers, the scheduler) is not priced, and the candidate's ``step`` lines say so.

:func:`step_of` resolves a backend's step on the target; the judge (:mod:`autoselect.selector.judge`)
applies it.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

from autoselect import rules, vllm_flags
from autoselect.rules.batch_defaults import ORIGIN_WORKSPACE, TokenBudget, max_num_seqs
from autoselect.rules.consequences import STEP_BUDGET, StepConsequence, cuda_graphs_off, eager
from autoselect.rules.cuda_graphs import max_capture_tokens
from autoselect.selector.answer import BUCKET_SOURCES, EVIDENCE_KINDS, BucketValue
from autoselect.selector.target import RecommendTarget

class Step(NamedTuple):
    """One backend's step on the target: its budget, what it does beyond the all2all, whether it is out."""

    backend: str
    budget: TokenBudget  # tokens per engine per step
    cap: int  # the budget in tokens per rank (an engine's tokens split over its tp ranks)
    consequences: list[StepConsequence]  # what vLLM does to the step with this backend, in words
    ineligible: str | None  # why the backend is out for this workload (None: it is a candidate)


def step_of(target: RecommendTarget, backend: str) -> Step:
    """``backend``'s :class:`Step` on ``target`` (see the module docstring)."""
    version, dp, tp = target.vllm_version, target.deployment.dp, target.deployment.tp
    budget = _budget(target, backend)
    consequences = rules.step_consequences(backend, version, data_parallel_size=dp,
                                           max_num_batched_tokens=target.max_num_batched_tokens)
    if budget.origin == ORIGIN_WORKSPACE:
        consequences.append(StepConsequence(backend, STEP_BUDGET, budget.why, budget.source))
    capture = max_capture_tokens(version, target.gpu_arch, max_num_batched_tokens=budget.tokens)
    seqs = max_num_seqs(version, gpu_memory_mib=target.gpu_memory_mib, gpu_arch=target.gpu_arch)
    decode = min(capture, seqs)
    row, read = eager(backend, version, dp)
    captured = [t for t in target.workload.tokens if t * tp <= decode]
    ineligible = None
    if row is not None and captured:
        buckets = ", ".join(str(t) for t in captured)
        ineligible = (f"{cuda_graphs_off(row, version, read)}; this workload's {buckets} tokens/rank "
                      f"bucket{'s are decode-sized steps' if len(captured) > 1 else ' is a decode-sized step'} "
                      f"(at most {decode} tokens per engine: --max-num-seqs {seqs}, capture size {capture}) that "
                      "vLLM runs in a CUDA graph with any other backend, and the whole model's eager cost is not "
                      "priced")
    return Step(backend, budget, max(1, math.ceil(budget.tokens / tp)), consequences, ineligible)


def _budget(target: RecommendTarget, backend: str) -> TokenBudget:
    """The ``--max-num-batched-tokens`` the backend's flags run with (see the module docstring)."""
    if target.max_num_batched_tokens is None:
        lowered = rules.token_budget(backend, target.vllm_version, gpu_memory_mib=target.gpu_memory_mib,
                                     data_parallel_size=target.deployment.dp)
        if lowered.origin == rules.batch_defaults.ORIGIN_BACKEND:
            return lowered
    p = target.profile
    emitted, _ = vllm_flags.workspace_max_num_batched_tokens(
        backend, hidden=p.hidden_size, top_k=p.top_k, activation_dtype=target.activation_dtype,
        world_size=target.world_size, max_num_batched_tokens=target.max_num_batched_tokens,
        max_workspace_gib=target.max_workspace_gib, default_budget=target.budget.tokens)
    if emitted is not None and emitted < target.budget.tokens:
        allowance = target.max_workspace_gib or vllm_flags.DEFAULT_MAX_WORKSPACE_GIB
        return TokenBudget(emitted, ORIGIN_WORKSPACE,
                           f"the answer emits --max-num-batched-tokens {emitted} for {backend} so its workspace fits "
                           f"--max-workspace-gib {allowance:g}: every step carries at most {emitted} tokens per "
                           f"engine, not {target.budget.tokens}", "autoselect/vllm_flags/emit.py "
                           "workspace_max_num_batched_tokens")
    return target.budget


def stepped(value_at: Callable[[int], BucketValue], tokens: int, cap: int, backend: str) -> BucketValue:
    """The value of a ``tokens``-per-rank bucket that vLLM runs in steps of at most ``cap`` tokens per
    rank: ``tokens // cap`` full steps and one with the rest, each all2all from ``value_at``."""
    if tokens <= cap:
        return value_at(tokens)
    full, rest = divmod(tokens, cap)
    parts = [(full, value_at(cap))] + ([(1, value_at(rest))] if rest else [])
    steps = full + (1 if rest else 0)
    shape = f"{full} steps of {cap}" + (f" and one of {rest}" if rest else "")
    note = (f"vLLM runs {tokens} tokens/rank as {shape} ({backend}'s step budget): the sum of their all2alls; "
            "the rest of those steps is not priced")
    if any(v.latency_us is None for _, v in parts):
        missing = next(v for _, v in parts if v.latency_us is None)
        return BucketValue(tokens, None, None, "missing", note=f"{note}; {missing.note or 'no value'}", steps=steps)
    ranges = [v.range_us for _, v in parts]
    return BucketValue(
        tokens, sum(n * v.latency_us for n, v in parts), sum(n * v.halfwidth_us for n, v in parts),
        max((v.source for _, v in parts), key=BUCKET_SOURCES.index),  # weakest last: a sum is as weak as its weakest part
        tuple(dict.fromkeys(i for _, v in parts for i in v.result_ids)), note,
        evidence=max((v.evidence for _, v in parts), key=EVIDENCE_KINDS.index),
        reference=next((v.reference for _, v in parts if v.reference), None),
        range_us=(tuple(sum(n * r[i] for (n, _), r in zip(parts, ranges)) for i in (0, 1))
                  if all(r is not None for r in ranges) else None),
        bound=any(v.bound for _, v in parts), footing=_stepped_footing(parts), steps=steps,
        flat=all(v.flat for _, v in parts))


def _stepped_footing(parts: list[tuple[int, BucketValue]]):
    """The footing of a bucket run in steps: the full steps' (how vLLM launches them, their corrections),
    with the number on its own footing summed over every step like the value; None when a part has none
    (a measurement of the host, already on vLLM's footing)."""
    footings = [v.footing for _, v in parts]
    if any(f is None for f in footings):
        return None
    total = tuple(sum(n * f.as_source_us[i] for (n, _), f in zip(parts, footings)) for i in (0, 1))
    return footings[0]._replace(as_source_us=total)


def step_lines(step: Step, values: list[BucketValue]) -> tuple[str, ...]:
    """What a candidate's answer says about its step: the consequences, then each bucket run in several steps."""
    lines = [c.text for c in step.consequences]
    lines += [f"its {v.tokens_per_rank} tokens/rank run as {v.steps} steps of at most {step.cap} (priced as the sum of "
              "their all2alls; the rest of those steps is not priced)" for v in values if v.steps > 1]
    return tuple(lines)
