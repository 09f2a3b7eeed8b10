"""Step 6: what the answer must say about its own evidence (warnings), and whether it is stale.

In order: a close call; decisive measurements taken on CPU; decisive measurements taken under
other vllm / flashinfer / driver versions than the target (stale); every extrapolated or
refused bucket of a candidate; a target release whose pinned FlashInfer is not on PyPI
(:func:`autoselect.rules.install_hazard`). The flags step adds its own notes after these.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping, NamedTuple

from autoselect import rules
from autoselect.selector.answer import Candidate
from autoselect.selector.decide import Decision
from autoselect.selector.evidence import stale_keys
from autoselect.selector.target import RecommendTarget
from autoselect.selector.wording import close_call
from db.queries import StoredResult

CPU_MEASUREMENTS = ("these measurements were taken on CPU (gloo): they exercise the flow, not NVLink speed; "
                    "benchmark on the GPU host before serving")


class Caveats(NamedTuple):
    """The warnings of an answer (one sentence each; ``details``: those with sources, sentence -> the
    same with them) and the stale versions of its decisive measurements."""

    warnings: list[str]
    stale: dict[str, set[str]]  # version key -> the versions decisive rows were measured with
    details: Mapping[str, str] = MappingProxyType({})  # read only: one empty default for all


def caveats(target: RecommendTarget, decision: Decision, candidates: list[Candidate],
            rows: dict[int, StoredResult]) -> Caveats:
    """The :class:`Caveats` of ``decision``; ``rows``: result id -> the stored row behind a value."""
    decisive_rows = [rows[rid] for c in decision.decisive for b in c.buckets for rid in b.result_ids if rid in rows]
    stale: dict[str, set[str]] = {}
    for r in decisive_rows:
        for k in stale_keys(r, target.versions):
            stale.setdefault(k, set()).add(r.versions[k])
    warnings = [w for w in (close_call(decision),) if w]
    if any(r.device == "cpu" for r in decisive_rows):
        warnings.append(CPU_MEASUREMENTS)
    for k, versions in sorted(stale.items()):
        warnings.append(f"stale data: measured with {k} {', '.join(sorted(versions))}, target is "
                        f"{k} {target.versions[k]}; re-run autoselect bench to refresh")
    for c in candidates:
        for b in c.buckets:
            if b.source == "extrapolated":
                warnings.append(f"{c.backend} at {b.tokens_per_rank} tokens/rank is extrapolated: {b.note}")
            elif b.source == "missing" and c.status != "no data":
                warnings.append(f"{c.backend} at {b.tokens_per_rank} tokens/rank: {b.note}")
    details: dict[str, str] = {}
    hazard = rules.install_hazard(target.vllm_version)
    if hazard:
        warnings.append(hazard.text)
        details[hazard.text] = hazard.detail
    return Caveats(warnings=warnings, stale=stale, details=details)
