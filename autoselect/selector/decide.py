"""Step 4: the pick. vLLM's default stays unless a candidate is faster beyond the noise.

Every candidate's workload-weighted latency ``L`` carries its band ``H``; a candidate beats the
default only when ``L_c + H_c < L_d - H_d`` (:func:`autoselect.noise.band_compare`: the bands do
not overlap). Of those that beat it the fastest is picked (a close call when another that
also beats the default ties with it). Without a measured default nothing can be compared and
the default stays; a single legal backend is the answer without comparison.

Two exceptions, for a default whose value is **derived** from NCCL timings (the reference
classes): a model of vLLM's collectives that leaves costs out (unequal DP sizes, the quantization
and memory passes around the collectives), so the real path is at or above its central value and
its error is one-sided. Both rules were chosen by measured regret over NVIDIA's published tables,
with the default's truth at x1.0, x1.25 and x1.5 of its central value
(``perf/regret_reference.py --policies``; docs/recommend.md "The tie rule" has the table):

* **the tie rule** (:data:`DecisionPolicy.tie_rule`, one of :data:`TIE_RULES`): a candidate with
  evidence of its own beats the derived default when its value is below 1.2 times the default's
  central value (``L_c < 1.2 L_d``; a transferred candidate's value counts with its band,
  ``L_c + H_c``, its transfer error; a value estimated between published token counts does not:
  counting its measured interpolation error moves regret from x1.0 to x1.5, ``margin-est-1.2``);
* **the bound rule** (:data:`DecisionPolicy.bound_rule`, one of :data:`BOUND_RULES`), where the
  default has only a lower bound (no NCCL rows at the EP size): a candidate that clears the bound
  beats the default; any other is ``undecided`` (the default may be slower still), and the pick
  is the fastest candidate with a number (``fastest-priced``), at confidence ``none``
  (``confidence.py``), with the comparison it could not make said in the decision.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

from autoselect.noise import FASTER, SLOWER, TIE, band_compare
from autoselect.rules import DEFAULT_BACKEND
from autoselect.selector.answer import DERIVED, MEASURED, TRANSFERRED, Candidate

#: A candidate above a default that is only a lower bound: it cannot be compared.
UNDECIDED = "undecided"


Rule = Callable[[Candidate, Candidate], bool]


def _estimated(c: Candidate) -> bool:
    """Some bucket of ``c`` is the latency model's estimate, not a point of its evidence."""
    return any(b.source in ("interpolated", "extrapolated") for b in c.buckets)


def _margin(m: float, transfers: bool = True, estimates: bool = False) -> Rule:
    """``c`` beats ``d`` when its value is below ``m`` times the default's central value; the
    candidate's band counts against it when it is transferred (``transfers``) or estimated at a
    token count its evidence lacks (``estimates``)."""
    def rule(c: Candidate, d: Candidate) -> bool:
        counted = (transfers and c.evidence == TRANSFERRED) or (estimates and _estimated(c))
        return c.weighted_us + (c.halfwidth_us if counted else 0.0) < m * d.weighted_us
    return rule


#: How a candidate with evidence of its own compares with a derived default: name -> the test that
#: makes candidate ``c`` faster than default ``d`` (``d.weighted_us`` the range's central value).
TIE_RULES: dict[str, Rule] = {
    # the bands must not overlap: the candidate clears the default's lower end (the measured-data rule)
    "default-stays": lambda c, d: c.weighted_us + c.halfwidth_us < d.weighted_us - d.halfwidth_us,
    # the candidate's band clears the default's central value
    "central": lambda c, d: c.weighted_us + c.halfwidth_us < d.weighted_us,
    # the candidate's band clears the default's upper end (every call at its own latency floor)
    "upper": lambda c, d: c.weighted_us + c.halfwidth_us < d.weighted_us + d.halfwidth_us,
    # the candidate's value (plus its band when transferred) is below the central value times a margin
    **{f"margin-{m:g}": _margin(m) for m in (1.0, 1.1, 1.15, 1.2, 1.25)},
    # the same with a transfer's band not counted against it
    "margin-1.2-bare": _margin(1.2, transfers=False),
    # the same with the band of a value estimated between published token counts counted too (its
    # band is the measured interpolation error where the evidence knows it: BackendEvidence.estimate_error)
    **{f"margin-est-{m:g}": _margin(m, estimates=True) for m in (1.2, 1.25, 1.3)},
}
#: What happens when no candidate clears a default that is only a lower bound.
BOUND_RULES = ("default-stays", "fastest-priced")


class DecisionPolicy(NamedTuple):
    """How candidates are compared with a derived default (see the module docstring)."""

    tie_rule: str = "margin-1.2"
    bound_rule: str = "fastest-priced"


#: The policy recommend uses.
DEFAULT_POLICY = DecisionPolicy()


class Decision(NamedTuple):
    """The pick and what it was compared with.

    ``runner_up``: the best other candidate a decisive comparison involved (the default when a
    candidate beat it); ``compared``: the default was measured, so candidates were compared
    with it; ``close``: candidates that also beat the default and tie with the pick;
    ``undecided``: the pick could not be compared with the default (a lower bound only).
    """

    pick: Candidate
    default: Candidate | None
    runner_up: Candidate | None
    text: str
    single: bool
    compared: bool
    close: Sequence[Candidate] = ()
    undecided: bool = False

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


def decide(candidates: list[Candidate], policy: DecisionPolicy = DEFAULT_POLICY) -> Decision:
    """Pick among ``candidates`` (at least one) and set each one's status (pick, default, faster,
    tie, slower, undecided; unmeasured ones keep theirs)."""
    if policy.tie_rule not in TIE_RULES or policy.bound_rule not in BOUND_RULES:
        raise ValueError(f"unknown decision policy {policy}")
    default = next((c for c in candidates if c.backend == DEFAULT_BACKEND), None)
    if len(candidates) == 1:
        pick = candidates[0]
        if pick.status == "measured":
            pick.status = "pick"
        return Decision(pick, default, None, "the only legal backend: nothing to compare", single=True, compared=False)
    if default is None or default.weighted_us is None:
        pick = default if default is not None else candidates[0]
        return Decision(pick, default, None, "no comparison possible: vLLM's default" + _fastest_other(candidates, pick),
                        single=False, compared=False)
    return _against_default(candidates, default, policy)


def versus_default(c: Candidate, default: Candidate, tie_rule: str = DEFAULT_POLICY.tie_rule) -> str:
    """``c``'s verdict against the default: FASTER, SLOWER, TIE or UNDECIDED (see the module docstring)."""
    lc, hc, ld, hd = c.weighted_us, c.halfwidth_us, default.weighted_us, default.halfwidth_us
    if default.evidence != DERIVED or c.evidence in (DERIVED, MEASURED):
        return band_compare(lc, hc, ld, hd)
    if default.bound:
        return FASTER if lc + hc < ld - hd else UNDECIDED
    if TIE_RULES[tie_rule](c, default):
        return FASTER
    return SLOWER if lc - hc > ld + hd else TIE


def _fastest_other(candidates: list[Candidate], pick: Candidate) -> str:
    """``; the fastest published backend is X (Y us)`` or ''."""
    others = sorted((c for c in candidates if c is not pick and c.weighted_us is not None and not c.bound),
                    key=lambda c: c.weighted_us)
    if not others:
        return ""
    best = others[0]
    return f"; the fastest {best.evidence} backend is {best.backend} ({best.weighted_us:.1f} us)"


def _against_default(candidates: list[Candidate], default: Candidate, policy: DecisionPolicy) -> Decision:
    complete = [c for c in candidates if c.weighted_us is not None]
    for c in complete:
        if c is not default:
            c.status = versus_default(c, default, policy.tie_rule)
    winners = sorted((c for c in complete if c.status == FASTER), key=lambda c: c.weighted_us)
    undecided = sorted((c for c in complete if c.status == UNDECIDED), key=lambda c: c.weighted_us)
    bound = f"vLLM's default has only a lower bound here ({default.weighted_us:.1f} us)"
    if winners:
        pick = winners[0]
        close = [c for c in winners[1:]
                 if band_compare(pick.weighted_us, pick.halfwidth_us, c.weighted_us, c.halfwidth_us) == TIE]
        if default.bound:
            text = "faster than the default's lower bound beyond the noise"
        elif band_compare(pick.weighted_us, pick.halfwidth_us, default.weighted_us, default.halfwidth_us) == FASTER:
            text = "faster than the default beyond the noise"
        else:
            text = (f"beats the derived default by the tie rule ({policy.tie_rule}: the derivation leaves costs out, "
                    "so vLLM's real default is at or above its central value)")
        runner_up = default
    elif undecided and policy.bound_rule == "fastest-priced":
        pick = undecided[0]
        default.status, pick.status = "default", "pick"
        return Decision(pick, default, None, f"{bound}: the fastest backend with a number, not compared with it",
                        single=False, compared=False, undecided=True)
    elif default.bound:
        default.status = "pick"
        return Decision(default, default, None, f"no comparison possible: {bound}" + _fastest_other(candidates, default),
                        single=False, compared=False)
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
