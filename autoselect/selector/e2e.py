"""Step 8 (optional checks): the stored end-to-end results, and vLLM's own verdict on the flags.

``autoselect confirm`` stores ``vllm bench forward`` medians as results of kind ``e2e``;
:func:`e2e_evidence` reads those matching the answer's shape, host class and EP size and warns
where the fastest end-to-end backend beats the recommended one by more than
:data:`E2E_MARGIN`. :func:`validate_flags` (``recommend --validate``) parses the recommended
command line with vLLM's own ``vllm serve`` parser.
"""

from __future__ import annotations

import sqlite3

from autoselect import bridge
from autoselect.selector.answer import E2eEvidence, Recommendation
from db.queries import results_for

#: How much faster (relative) an e2e winner must be before recommend warns about it.
E2E_MARGIN = 0.01


def e2e_evidence(conn: sqlite3.Connection | None, rec: Recommendation) -> E2eEvidence | None:
    """The e2e medians of ``rec``'s shape, host class and EP size per token count and backend, with a
    warning per token count where another backend beats the recommended one end to end; None
    without a store or e2e rows."""
    if conn is None:
        return None
    p, backend = rec.profile, rec.backend
    rows = results_for(conn, hidden=p.hidden_size, top_k=p.top_k, experts=p.num_experts,
                       activation_dtype=rec.activation_dtype, world_size=rec.deployment.world_size,
                       host_class=rec.data_used.host_class, kind="e2e", statuses=("ok",))
    if not rows:
        return None
    latencies: dict[int, dict[str, float]] = {}
    for row in rows:  # oldest first: the newest measurement per (tokens, backend) wins
        latencies.setdefault(row.tokens_per_rank, {})[row.backend] = row.latency_us_p50
    warnings = []
    for tokens, by_backend in sorted(latencies.items()):
        best = min(by_backend, key=by_backend.get)
        ours = by_backend.get(backend)
        if best != backend and ours is not None and by_backend[best] < ours * (1 - E2E_MARGIN):
            warnings.append(
                f"end to end (vllm bench forward) at {tokens} tokens/rank {best} takes "
                f"{by_backend[best]:.1f} us and the recommended {backend} {ours:.1f} us: the "
                "microbenchmark and the model's forward pass disagree on the winner"
            )
    latencies = {t: dict(sorted(v.items())) for t, v in sorted(latencies.items())}
    return E2eEvidence(latencies=latencies, warnings=warnings)


def validate_flags(model: str, vllm_args: list[str]) -> tuple[bridge.FlagValidation, list[str]]:
    """vLLM's own parser on ``vllm serve MODEL ARGS``: the validation and its warnings.

    :raises autoselect.bridge.FlagsRejectedByVllm: the parser rejects the flags (its message quoted).
    :raises autoselect.bridge.VllmNotInstalled: no vLLM to ask.
    """
    validation = bridge.validate_serve_flags([["vllm", "serve", model, *vllm_args]],
                                             python=bridge.require_vllm())
    bridge.ensure_accepted(validation, what="the recommended command line")
    verdict = validation.verdicts[0]
    return validation, [f"{validation.vllm.label()}: {w}" for w in verdict.warnings]
