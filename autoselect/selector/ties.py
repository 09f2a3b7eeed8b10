"""Step 6b: what a pick is worth, and what a tie leaves open, as data for the answer.

:func:`expected_effect`: the pick's all2all latency against another backend's, as a kernel-level
change with the range both bands allow, and the end-to-end change that implies: the kernel change
divided by 10 to 3 (:data:`E2E_SHARE`: end-to-end differences between backends are 3-10x smaller
than their kernel differences, in every public comparison found: :data:`E2E_BASIS`). It decides
nothing.

:func:`tie_answer`: a :class:`~autoselect.selector.decide.Tie` with the ``autoselect bench`` row
that would decide it (every tied backend at the workload's token counts) and the effect of taking
the best other backend instead of the kept one.
"""

from __future__ import annotations

from autoselect.selector.answer import Candidate, ExpectedEffect, TieAnswer
from autoselect.selector.decide import Decision
from autoselect.selector.flags import settle_command
from autoselect.selector.target import RecommendTarget

#: The share of an all2all latency difference expected end to end: a kernel change divided by 10 to 3.
E2E_SHARE = (0.10, 1 / 3)
#: Where that comes from (public comparisons, none by this project; gathered 2026-12-05).
E2E_BASIS = ("end-to-end differences between backends are 3-10x smaller than their kernel differences: "
             "one-sided's kernel 1.4x faster than AG+RS gave no decode gain on GB300 DEP 8 (communication ~93 % "
             "of decode kernel time; vllm-project/vllm issue #41687, 2026-05-05); two-sided cut TPOT 4 % on 8xB300 "
             "GLM-5.2-NVFP4 decode (vLLM blog, 2026-07-23) and gained 5 % end to end on 8xB200 DeepSeek-R1-FP4 "
             "(sgl-project/sglang PR #9942, 2025-09-02); one-sided +8 % on GB200 Qwen3.5-NVFP4 "
             "(vllm-project/vllm PR #53311, 2026-08-21)")

def expected_effect(pick: Candidate, versus: Candidate) -> ExpectedEffect | None:
    """``pick`` against ``versus`` (both with a weighted value), kernel and end to end; None
    without two values to compare."""
    if pick.weighted_us is None or versus.weighted_us is None or versus.weighted_us <= 0:
        return None
    lp, hp, lv, hv = pick.weighted_us, pick.halfwidth_us or 0.0, versus.weighted_us, versus.halfwidth_us or 0.0
    change = lp / lv - 1
    low = (lp - hp) / (lv + hv) - 1
    high = (lp + hp) / max(lv - hv, 1e-9) - 1
    shares = E2E_SHARE
    e2e = (min(low * s for s in shares), max(high * s for s in shares))
    return ExpectedEffect(versus=versus.backend, kernel_change=change, kernel_change_range=(low, high),
                          e2e_change_range=e2e, basis=E2E_BASIS)


def tie_answer(target: RecommendTarget, decision: Decision, candidates: list[Candidate]) -> TieAnswer | None:
    """The decision's tie as the answer's data (None without one)."""
    tie = decision.tie
    if tie is None:
        return None
    by_backend = {c.backend: c for c in candidates}
    command = settle_command(target.profile.model, target.deployment, target.workload.tokens, tie.backends)
    others = sorted((by_backend[b] for b in tie.others if by_backend[b].weighted_us is not None),
                    key=lambda c: c.weighted_us)
    effect = expected_effect(others[0], by_backend[tie.kept]) if others else None
    return TieAnswer(backends=tie.backends, kept=tie.kept, why=tie.why, needs=dict(tie.needs),
                     settle_command=command, expected_effect=effect)
