"""When ``--all2all-backend`` and ``VLLM_ALL2ALL_BACKEND`` came and went."""

from __future__ import annotations

from dataclasses import dataclass

from autoselect.rules.backends import FLAG_SINCE


@dataclass(frozen=True)
class FlagEvent:
    """One change to how vLLM is told its all2all backend."""

    what: str
    version: str
    source: str


FLAG_HISTORY = (
    FlagEvent("--all2all-backend added; VLLM_ALL2ALL_BACKEND deprecated", FLAG_SINCE,
              "PR #26732, merged 2025-10-13"),
    FlagEvent("VLLM_ALL2ALL_BACKEND removed (vLLM only warns it is unknown)", "0.16.0",
              "PR #33535, merged 2026-02-02"),
    FlagEvent("default briefly flashinfer_nvlink_one_sided on main, reverted; every release keeps "
              "allgather_reducescatter (checked 0.15.0-0.33.0)", "0.28.0",
              "PR #53311 merged 2026-08-21, reverted by PR #53952; PR #54268 (GB200/GB300 only) open"),
)
ENV_VAR_REMOVED_IN = "0.16.0"
