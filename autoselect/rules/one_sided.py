"""The one-sided constraint, era by era: what upstream does with a non-nvfp4 model on it."""

from __future__ import annotations

from typing import NamedTuple

from autoselect.rules.reports import reports_for
from autoselect.rules.versions import version_in


class OneSidedEra(NamedTuple):
    """What upstream vLLM does with one-sided and a given dispatch dtype in a version range."""

    since: str
    until: str | None
    upstream_accepts: frozenset  # dtypes upstream dispatches correctly
    consequence: str  # what happens to any other dtype: "silent_corruption" | "startup_error"
    source: str


#: Upstream history of ``flashinfer_nvlink_one_sided`` dtypes. autoselect ignores the relaxations.
ONE_SIDED_ERAS = (
    OneSidedEra("0.18.0", "0.20.0", frozenset({"nvfp4"}), "silent_corruption",
                "PR #36022 (v0.18.0): workspace sized for nvfp4 payloads, no dtype check"),
    OneSidedEra("0.20.0", "0.20.1", frozenset({"nvfp4"}), "startup_error",
                "PR #39717 (merged 2026-04-13; only in v0.20.0): ValueError for non-nvfp4 quant_dtype"),
    OneSidedEra("0.20.1", "0.29.0", frozenset({"nvfp4", "bf16", "fp16", "mxfp8"}), "startup_error",
                "PR #40960 (merged 2026-04-27; first in v0.20.1): bf16 and mxfp8 dispatch"),
    OneSidedEra("0.29.0", None, frozenset({"nvfp4", "bf16", "fp16", "mxfp8", "fp8_block128"}), "startup_error",
                "PR #51924 (merged 2026-08-12; first in v0.29.0): DeepSeek block-fp8 dispatch; the same five "
                "layouts in 0.34.0 fused_moe/all2all_utils.py:56-105 (flashinfer_one_sided_dispatch_layout; "
                "block fp8 needs hidden % 128 == 0)"),
)

#: Why autoselect keeps one-sided nvfp4-only although upstream relaxed it.
ONE_SIDED_POLICY = (
    "autoselect treats flashinfer_nvlink_one_sided as nvfp4-only in every vLLM version: it was built "
    "for nvfp4 payloads (PR #36022; a bf16 payload silently overran its workspace until PR #39717 made "
    "that a startup error), and the bf16/mxfp8/block-fp8 paths added since (PRs #40960, #51924) are "
    "not validated by autoselect; mxfp8 has an open wrong-output report (#42118)"
)


def one_sided_era(vllm_version: str) -> OneSidedEra | None:
    """The :data:`ONE_SIDED_ERAS` row for ``vllm_version`` (None before one-sided existed)."""
    for era in ONE_SIDED_ERAS:
        if version_in(vllm_version, era.since, era.until):
            return era
    return None


def one_sided_in_short(dtype: str, vllm_version: str) -> str:
    """:func:`one_sided_consequence` in one clause, without its sources (what a refusal says first)."""
    era = one_sided_era(vllm_version)
    if era is None:
        return f"vLLM {vllm_version} has no flashinfer_nvlink_one_sided"
    if dtype in era.upstream_accepts:
        return (f"vLLM {vllm_version} would run it, but autoselect keeps one-sided to the nvfp4 payloads it was "
                f"built for")
    if era.consequence == "silent_corruption":
        return f"on vLLM {vllm_version} this would SILENTLY CORRUPT output"
    return f"on vLLM {vllm_version} this would fail at startup"


def one_sided_consequence(dtype: str, vllm_version: str) -> str:
    """What putting a ``dtype`` model on one-sided does on ``vllm_version``, in words, with its sources."""
    era = one_sided_era(vllm_version)
    if era is None:
        return f"vLLM {vllm_version} has no flashinfer_nvlink_one_sided (added in v0.18.0, PR #36022)"
    if dtype in era.upstream_accepts:
        first = next(e for e in ONE_SIDED_ERAS if dtype in e.upstream_accepts)
        notes = [n.text for n in reports_for("flashinfer_nvlink_one_sided", vllm_version, dtype=dtype)
                 if n.report.dtypes is not None]
        reports = ("; " + "; ".join(notes)) if notes else (
            f"; no upstream report covers {dtype} one-sided, and autoselect has not validated it")
        return (f"vLLM {vllm_version} accepts this line ({first.source}; it dispatches "
                f"{', '.join(sorted(era.upstream_accepts))} on one-sided), but autoselect refuses it on purpose: one-sided was built for nvfp4 payloads (PR #36022; a "
                f"bf16 payload silently overran its workspace until PR #39717 made that an error){reports}")
    if era.consequence == "silent_corruption":
        return (f"on vLLM {vllm_version} this would SILENTLY CORRUPT output: the workspace is sized "
                f"for nvfp4 and nothing checks the dtype (fixed to an error by PR #39717, v0.20.0)")
    return (f"on vLLM {vllm_version} this would fail at startup ({era.source}): it dispatches only "
            f"{', '.join(sorted(era.upstream_accepts))} on one-sided")
