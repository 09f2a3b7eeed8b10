"""Expert-parallel load balancing (EPLB): redundant experts and what vLLM requires of them.

With ``--enable-eplb`` vLLM adds ``num_redundant_experts`` replicas to the routed experts; the
MoE layer is built for the physical count (routed + redundant), and that is the expert count the
all2all kernels see, so every backend's expert rules apply to it. :data:`EPLB_RULES` holds the
checks vLLM itself makes, each with the releases and source lines; :data:`REDUNDANT_DEFAULTS`
what vLLM uses when the line names no redundant-expert count (0, or from 0.34.0 the smallest
count that divides over the EP size); :data:`ASYNC_EPLB` when EPLB is asynchronous and what vLLM
does to asynchronous EPLB next to an NCCL-based all2all backend.
"""

from __future__ import annotations

from typing import NamedTuple

from autoselect.rules.versions import version_in


class EplbRule(NamedTuple):
    """One condition vLLM enforces on EPLB, and what breaking it does, in a release range."""

    name: str
    since: str | None
    until: str | None
    consequence: str  # what vLLM does when the condition is broken
    source: str


EPLB_RULES = (
    EplbRule("even-distribution", None, "0.22.0",
             "AssertionError at model load: 'EPLB currently only supports even distribution of experts "
             "across ranks'",
             "0.10.0 fused_moe/layer.py:676-678 ... 0.21.0 (assert global_num_experts % ep_size == 0)"),
    EplbRule("even-distribution", "0.22.0", None,
             "ValueError at model load: 'EPLB currently only supports even distribution of experts across ranks'",
             "0.22.0 fused_moe/layer.py:205-210, 0.33.0 layer.py:274-279, 0.34.0 layer.py:278-283 (raise ValueError)"),
    EplbRule("redundant-needs-eplb", None, "0.10.2",
             "AssertionError at model load: 'Redundant experts are only supported with EPLB'",
             "0.10.0 fused_moe/layer.py:681-682"),
    # From 0.10.2 ParallelConfig refuses the count before the model loads (the assert in
    # fused_moe/layer.py stays behind it: 0.22.0 layer.py:214, 0.33.0 :282, 0.34.0 :286-288).
    EplbRule("redundant-needs-eplb", "0.10.2", None,
             "ValueError at start-up: 'num_redundant_experts is set to N but EPLB is not enabled'",
             "0.10.2 config/parallel.py:369-374, 0.11.1 parallel.py:307-312, 0.33.0 parallel.py:586-592, "
             "0.34.0 parallel.py:624-631"),
    EplbRule("needs-expert-parallel", None, None,
             "refuses to start: 'enable_expert_parallel must be True to use EPLB'",
             "0.10.0 vllm/config.py:2132, 0.11.0 config/parallel.py:433, 0.33.0 parallel.py:570, "
             "0.34.0 parallel.py:608"),
)


class RedundantDefault(NamedTuple):
    """What ``num_redundant_experts`` is when the line does not set it, in a release range."""

    since: str | None
    until: str | None
    minimum_that_divides: bool  # False: 0; True: the smallest count making routed + redundant divide by EP
    source: str


REDUNDANT_DEFAULTS = (
    RedundantDefault(None, "0.34.0", False, "EPLBConfig.num_redundant_experts = Field(default=0) (0.11.1 "
                                            "config/parallel.py, 0.33.0 parallel.py:77)"),
    RedundantDefault("0.34.0", None, True,
                     "0.34.0 config/parallel.py:78-84 (default None: 'the minimum valid value will be computed "
                     "automatically'), compute_eplb_num_redundant_experts parallel.py:652-684, called from "
                     "config/vllm.py:1493-1496"),
)


def redundant_experts(routed_experts: int, given: int | None, world_size: int, vllm_version: str, *,
                      enable_eplb: bool) -> int:
    """The redundant experts ``vllm_version`` runs with: ``given`` when the line sets it, else the
    release's default (:data:`REDUNDANT_DEFAULTS`; without EPLB always 0)."""
    if given is not None:
        return given
    row = next(r for r in REDUNDANT_DEFAULTS if version_in(vllm_version, r.since, r.until))
    if not (enable_eplb and row.minimum_that_divides):
        return 0
    return (world_size - routed_experts % world_size) % world_size


class AsyncEplb(NamedTuple):
    """Asynchronous EPLB in a release range: its default, and what vLLM does to it next to
    ``backends`` (the NCCL-based all2all backends: allgather_reducescatter and naive)."""

    since: str | None
    until: str | None
    exists: bool  # --eplb-config use_async is a field
    default: bool  # use_async when the line does not set it
    with_nccl_all2all: str  # "runs" | "forced-sync" | "gloo-communicator"
    source: str


ASYNC_NCCL_BACKENDS = frozenset({"allgather_reducescatter", "naive"})

ASYNC_EPLB = (
    AsyncEplb(None, "0.12.0", False, False, "runs", "no use_async in EPLBConfig (0.10.2, 0.11.0, 0.11.1 "
                                                    "config/parallel.py)"),
    AsyncEplb("0.12.0", "0.17.0", True, False, "runs", "0.12.0 config/parallel.py:63 use_async: bool = False; "
                                                       "the EPLB thread exchanges weights over NCCL"),
    AsyncEplb("0.17.0", "0.20.0", True, False, "forced-sync",
              "PR #35212 (merged 2026-02-24): 0.17.0 config/parallel.py:777-786, 0.18.0 :820-829, 0.19.1 :763-772 "
              "('Async EPLB causes hangs with the '%s' all2all backend. Forcing synchronous EPLB.')"),
    AsyncEplb("0.20.0", "0.23.0", True, False, "gloo-communicator",
              "0.20.0 config/parallel.py:856-867: an unset communicator becomes torch_gloo for async EPLB ('avoids "
              "hangs due to NCCL multi-thread conflicts'); the forcing is gone"),
    AsyncEplb("0.23.0", None, True, True, "gloo-communicator",
              "0.23.0 config/parallel.py:81 use_async: bool = True; 0.34.0 parallel.py:95, communicator nixl or "
              "torch_gloo when unset (parallel.py:1212-1227)"),
)


def async_eplb(vllm_version: str) -> AsyncEplb:
    """The :data:`ASYNC_EPLB` row for ``vllm_version``."""
    return next(r for r in ASYNC_EPLB if version_in(vllm_version, r.since, r.until))


def eplb_is_async(vllm_version: str, eplb_config: dict | None, *, enable_eplb: bool) -> bool | None:
    """Whether EPLB runs asynchronously on ``vllm_version`` for a line's ``--eplb-config``
    (before vLLM's forcing, :func:`eplb_notes`); None when the value is not a boolean vLLM reads."""
    row = async_eplb(vllm_version)
    if not (enable_eplb and row.exists):
        return False
    value = (eplb_config or {}).get("use_async", row.default)
    if isinstance(value, str):
        value = {"true": True, "false": False, "1": True, "0": False}.get(value.strip().lower())
    return value if isinstance(value, bool) else None


def eplb_notes(backend: str | None, vllm_version: str, eplb_config: dict | None, *, enable_eplb: bool) -> list[str]:
    """What ``vllm_version`` does to asynchronous EPLB next to ``backend`` (info, not errors)."""
    if backend not in ASYNC_NCCL_BACKENDS or not eplb_is_async(vllm_version, eplb_config, enable_eplb=enable_eplb):
        return []
    row = async_eplb(vllm_version)
    if row.with_nccl_all2all == "forced-sync":
        return [f"vLLM {vllm_version} runs EPLB synchronously with {backend}: it warns 'Async EPLB causes hangs "
                f"with the '{backend}' all2all backend. Forcing synchronous EPLB.' ({row.source})"]
    return []


#: Where the physical expert count reaches the all2all kernels.
PHYSICAL_EXPERTS_SOURCE = ("FusedMoE's global_num_experts = routed + num_redundant_experts (0.33.0 "
                           "fused_moe/layer.py determine_expert_counts); all2all_utils.py passes "
                           "num_global_experts=moe.num_experts to the DeepEP buffers")


def eplb_rule(name: str, vllm_version: str) -> EplbRule:
    """The :data:`EPLB_RULES` row ``name`` that holds on ``vllm_version``."""
    return next(r for r in EPLB_RULES if r.name == name and version_in(vllm_version, r.since, r.until))


def eplb_reasons(routed_experts: int, redundant: int, world_size: int, vllm_version: str, *,
                 enable_eplb: bool, expert_parallel: bool) -> list[str]:
    """Every way the line's EPLB settings make ``vllm_version`` refuse to start."""
    out = []
    if redundant and not enable_eplb:
        rule = eplb_rule("redundant-needs-eplb", vllm_version)
        out.append(f"{redundant} redundant experts without --enable-eplb: {rule.consequence} ({rule.source})")
    if enable_eplb and not expert_parallel:
        rule = eplb_rule("needs-expert-parallel", vllm_version)
        out.append(f"--enable-eplb needs --enable-expert-parallel: vLLM {rule.consequence} ({rule.source})")
    physical = routed_experts + redundant
    if enable_eplb and expert_parallel and world_size > 1 and physical % world_size:
        rule = eplb_rule("even-distribution", vllm_version)
        fix = _nearest_redundant(routed_experts, redundant, world_size)
        out.append(f"EPLB spreads {physical} physical experts ({routed_experts} routed + {redundant} redundant) "
                   f"over EP size {world_size}, which does not divide them: {rule.consequence} ({rule.source}); "
                   f"use num_redundant_experts {fix}")
    return out


def _nearest_redundant(routed: int, redundant: int, world_size: int) -> str:
    """The redundant-expert counts nearest ``redundant`` that make the physical count divide evenly."""
    below = redundant - (routed + redundant) % world_size
    above = below + world_size
    return f"{below} or {above}" if below >= 0 else str(above)
