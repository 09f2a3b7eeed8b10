"""Expert-parallel load balancing (EPLB): redundant experts and what vLLM requires of them.

With ``--enable-eplb`` vLLM adds ``num_redundant_experts`` replicas to the routed experts; the
MoE layer is built for the physical count (routed + redundant), and that is the expert count the
all2all kernels see, so every backend's expert rules apply to it. :data:`EPLB_RULES` holds the
checks vLLM itself makes, each with the releases and source lines.
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
             "0.22.0 fused_moe/layer.py:205-210, 0.33.0 layer.py:274-279 (raise ValueError)"),
    EplbRule("redundant-needs-eplb", None, None,
             "AssertionError at model load: 'Redundant experts are only supported with EPLB'",
             "0.10.0 fused_moe/layer.py:681-682, 0.22.0 layer.py:214, 0.33.0 layer.py:282"),
    EplbRule("needs-expert-parallel", None, None,
             "refuses to start: 'enable_expert_parallel must be True to use EPLB'",
             "0.10.0 vllm/config.py:2132, 0.11.0 config/parallel.py:433, 0.33.0 parallel.py:570"),
)

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
