"""``vllm bench forward --output-json``, read into e2e result rows.

The format was read from vLLM 0.33.0's source (``vllm/benchmarks/forward/main.py`` writes a list
with one entry per case: ``case``, ``requests``, ``median_us`` and ``ranks``, one result dict per
rank whose ``latency_us`` holds ``median``, ``sample_spread_pct``, ``mean``, ``std``, ``min``,
``p90``, ``count``, ``samples_us`` — every replay already the maximum over ranks);
tests/fixtures/vllm_bench_forward/make_outputs.py documents it field by field.
"""

from __future__ import annotations

import math
from typing import Any

from autoselect.confirm.plan import ConfirmPlan
from autoselect.errors import UserError
from db.records import Result

#: vLLM warns about unstable timing above this spread of per-sample medians (percent).
STABLE_SPREAD_PCT = 0.5


class BadForwardOutput(UserError):
    "A `vllm bench forward --output-json` file is not in the format this autoselect reads."


def shape_error(path: str, what: str) -> BadForwardOutput:
    """The error for a file at ``path`` that is not vLLM's format (``what`` says how)."""
    return BadForwardOutput(
        f"{path}: {what}; expected `vllm bench forward --output-json` output (vLLM 0.33: a list of "
        "cases with case, median_us and ranks)"
    )


def parse_forward_output(data: Any, plan: ConfirmPlan, backend: str, *, source: str = "output",
                         versions: dict | None = None) -> list:
    """One e2e :class:`~db.records.Result` per case in a ``vllm bench forward`` JSON document.

    Latency is rank 0's ``latency_us`` (every replay is already the maximum over ranks).
    A non-finite forward output marks the row ``incorrect``.

    :raises BadForwardOutput: when the document is not in that format.
    """
    if not isinstance(data, list):
        raise shape_error(source, "the top level is not a list")
    by_name = {c.name: c for c in plan.cases}
    results = []
    for entry in data:
        try:
            name, ranks = entry["case"], entry["ranks"]
            rank0 = ranks[0]
            latency = rank0["latency_us"]
            median = float(entry["median_us"])
            count = int(latency["count"])
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise shape_error(source, f"a case lacks {e}") from None
        case = by_name.get(name)
        tokens = int(rank0.get("num_tokens") or (case.tokens_per_rank if case else 0))
        mean, std = float(latency.get("mean", median)), float(latency.get("std", 0.0))
        spread = float(latency.get("sample_spread_pct", 0.0))
        finite = rank0.get("finite", True)
        results.append(Result(
            backend=backend,
            world_size=plan.deployment.world_size,
            tokens_per_rank=tokens,
            hidden=plan.profile.hidden_size,
            top_k=plan.profile.top_k,
            experts=plan.profile.num_experts,
            activation_dtype=plan.activation_dtype,
            routing=str(rank0.get("routing", "balanced")),
            status="ok" if finite else "incorrect",
            error=None if finite else f"{name}: vllm bench forward produced non-finite outputs",
            kind="e2e",
            device="cuda",
            knobs={"vllm_args": plan.serve_flags(backend), "case": case.spec if case else name,
                   "timing_scope": rank0.get("timing_scope")},
            samples=count,
            latency_us_p50=median,
            latency_us_mean=mean,
            latency_us_min=latency.get("min"),
            latency_us_p90=latency.get("p90"),
            latency_stdrel=(std / mean) if mean else None,
            noise_stdrel=(1.2533 * std / math.sqrt(count) / median) if count and median else None,
            noise_target_met=spread <= STABLE_SPREAD_PCT,
            versions=dict(versions or {}),
            raw_samples_us=[float(x) for x in latency.get("samples_us", [])],
        ))
    return results


def failed_rows(plan: ConfirmPlan, backend: str, status: str, error: str, *,
                versions: dict | None = None) -> list[Result]:
    """One ``error`` or ``timeout`` row per case for a backend whose run produced no output."""
    return [
        Result(backend=backend, world_size=plan.deployment.world_size, tokens_per_rank=c.tokens_per_rank,
               hidden=plan.profile.hidden_size, top_k=plan.profile.top_k, experts=plan.profile.num_experts,
               activation_dtype=plan.activation_dtype, routing="balanced", status=status, error=error,
               kind="e2e", device="cuda", knobs={"vllm_args": plan.serve_flags(backend), "case": c.spec},
               versions=dict(versions or {}))
        for c in plan.cases
    ]
