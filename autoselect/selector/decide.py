"""Step 4: the pick. vLLM's default stays unless a candidate is faster beyond the noise.

Every candidate's workload-weighted latency ``L`` carries its band ``H``; a candidate beats the
default only when ``L_c + H_c < L_d - H_d`` (:func:`autoselect.noise.band_compare`: the bands do
not overlap). Of those that beat it the fastest is picked (a close call when another that
also beats the default ties with it). Without a measured default nothing can be compared and
the default stays; a single legal backend is the answer without comparison.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autoselect.noise import FASTER, TIE, band_compare
from autoselect.rules import DEFAULT_BACKEND
from autoselect.selector.answer import Candidate


@dataclass(frozen=True)
class Decision:
    """The pick and what it was compared with.

    ``runner_up``: the best other candidate a decisive comparison involved (the default when a
    candidate beat it); ``compared``: the default was measured, so candidates were compared
    with it; ``close``: candidates that also beat the default and tie with the pick.
    """

    pick: Candidate
    default: Candidate | None
    runner_up: Candidate | None
    text: str
    single: bool
    compared: bool
    close: list[Candidate] = field(default_factory=list)

    @property
    def decisive(self) -> list[Candidate]:
        """The candidates whose latencies decided: the pick, the default and the runner-up (measured ones)."""
        return [c for c in (self.pick, self.default, self.runner_up) if c is not None and c.weighted_us is not None]

    @property
    def close_call_warning(self) -> str | None:
        """The warning of a close call, None when the pick stood alone."""
        if not self.close:
            return None
        return (f"{self.pick.backend} and {', '.join(c.backend for c in self.close)} are tied within the noise; "
                f"{self.pick.backend} has the lowest expected latency")


def decide(candidates: list[Candidate]) -> Decision:
    """Pick among ``candidates`` (at least one) and set each one's status (pick, default, faster,
    tie, slower; unmeasured ones keep theirs)."""
    default = next((c for c in candidates if c.backend == DEFAULT_BACKEND), None)
    if len(candidates) == 1:
        pick = candidates[0]
        if pick.status == "measured":
            pick.status = "pick"
        return Decision(pick, default, None, "the only legal backend: nothing to compare", single=True, compared=False)
    if default is None or default.weighted_us is None:
        pick = default if default is not None else candidates[0]
        return Decision(pick, default, None, "no comparison possible: vLLM's default", single=False, compared=False)
    return _against_default(candidates, default)


def _against_default(candidates: list[Candidate], default: Candidate) -> Decision:
    complete = [c for c in candidates if c.weighted_us is not None]
    for c in complete:
        if c is not default:
            c.status = band_compare(c.weighted_us, c.halfwidth_us, default.weighted_us, default.halfwidth_us)
    winners = sorted((c for c in complete if c.status == FASTER), key=lambda c: c.weighted_us)
    if winners:
        pick = winners[0]
        close = [c for c in winners[1:]
                 if band_compare(pick.weighted_us, pick.halfwidth_us, c.weighted_us, c.halfwidth_us) == TIE]
        text, runner_up = "faster than the default beyond the noise", default
    else:
        pick, close = default, []
        ties = [c for c in complete if c.status == TIE]
        text = (f"tie within the noise with {', '.join(c.backend for c in ties)}: vLLM's default stays"
                if ties else "the default is fastest")
        others = sorted((c for c in complete if c is not default), key=lambda c: c.weighted_us)
        runner_up = others[0] if others else None
    default.status = "default" if pick is not default else "pick"
    pick.status = "pick"
    return Decision(pick, default, runner_up, text, single=False, compared=True, close=close)
