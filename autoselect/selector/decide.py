"""Step 4: the pick. vLLM's default stays unless a candidate is faster beyond the noise.

Every candidate's workload-weighted latency ``L`` carries its band ``H``; a candidate beats the
default only when ``L_c + H_c < L_d - H_d`` (:func:`autoselect.noise.band_compare`: the bands do
not overlap). Without a measured default nothing can be compared and the default stays; a single
legal backend is the answer without comparison. The decision records how it was reached
(:data:`RULES`) and the tie it kept (:class:`Tie`); what the answer says about them, in words of fixed
meaning, is :mod:`autoselect.selector.wording`'.

**Ties keep what needs nothing extra.** Where bands overlap the numbers cannot say which backend
is faster, so the answer keeps the one that asks the least of the serving host (:data:`NEEDS`:
vLLM's default needs nothing, not even a flag; the FlashInfer backends need flashinfer-python,
which vLLM pins; DeepEP needs a source build), and records the tie (:class:`Tie`: every backend in
it, what each needs) so the answer can name them and the ``autoselect bench`` row that settles it.
That holds between a candidate and the default (the default stays) and between candidates that
both beat the default (the one needing less is kept; among equals, the faster).

**A derived default** (the reference classes: vLLM's collectives priced from NCCL timings and put
on vLLM's footing, ``autoselect.reference.footing``) is compared by the tie rule
(:data:`DecisionPolicy.tie_rule`, one of :data:`TIE_RULES`), chosen by measured regret over the
published tables with the default's truth between x0.75 and x1.5 of its central value in each
phase, decode-sized (CUDA-graph) steps and prefill-sized (eager) steps apart
(``perf/regret_reference.py --policies``; docs/recommend.md "The tie rule" has the table), among
the rules that keep a tie (:data:`KEEPS_TIES`). Recommend's, ``bands-1-0.85``: the candidate's band
must clear the default's lower end with the default's graph-captured buckets taken as they are and
its eager ones at 0.85 of their value (an eager prefill chunk's derived cost is a bandwidth reading
the regret over x0.75..x1.5 says not to leave on less than a 15 % lead). Where the default has only a
**lower bound** (no NCCL rows at the EP size: the bound rule, :data:`DecisionPolicy.bound_rule`), a
candidate that clears the bound beats the default; any other is ``undecided`` and the pick is the
fastest candidate with a number (``fastest-priced``), at confidence ``none``.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

from autoselect.noise import FASTER, SLOWER, TIE, band_compare
from autoselect.rules import BACKENDS, DEFAULT_BACKEND
from autoselect.rules.graph_capture import EAGER, GRAPH
from autoselect.selector.answer import DERIVED, MEASURED, TRANSFERRED, Candidate

#: A candidate above a default that is only a lower bound: it cannot be compared.
UNDECIDED = "undecided"

#: What a backend asks of the serving host beyond vLLM, by the package it needs
#: (``rules.BACKENDS[backend].package``): (rank, words); rank 0 needs nothing. The default needs no flag.
NEEDS = {
    DEFAULT_BACKEND: (0, "nothing: vLLM's default, no flag"),
    "flashinfer": (1, "flashinfer-python, which vLLM pins (installed with vLLM)"),
    "deep_ep": (2, "a source build of DeepEP (not a vLLM dependency)"),
}
_OTHER_NEED = (1, "its package")

#: How a decision was reached (:attr:`Decision.rule`); the words an answer says about each are
#: :mod:`autoselect.selector.wording`'.
SINGLE = "single"  # one legal backend: nothing to compare
UNCOMPARED = "uncompared"  # vLLM's default has no number: nothing could be compared with it
BANDS = "bands"  # a candidate's band clears the default's: faster beyond the noise
BELOW_BOUND = "below bound"  # a candidate's band clears the default's lower bound
BY_TIE_RULE = "tie rule"  # a candidate beats a derived default by the tie rule (DecisionPolicy.tie_rule)
FASTEST_PRICED = "fastest priced"  # the default has only a bound, no candidate clears it: the fastest with a number
BOUND_ONLY = "bound only"  # the default has only a bound and stays, unpriced
DEFAULT_STAYS = "default stays"  # no candidate beats the default
RULES = (SINGLE, UNCOMPARED, BANDS, BELOW_BOUND, BY_TIE_RULE, FASTEST_PRICED, BOUND_ONLY, DEFAULT_STAYS)


def needs(backend: str) -> tuple[int, str]:
    """``(rank, words)``: what ``backend`` needs on the serving host beyond vLLM (:data:`NEEDS`)."""
    if backend == DEFAULT_BACKEND:
        return NEEDS[DEFAULT_BACKEND]
    cap = BACKENDS.get(backend)
    package = cap.package if cap is not None else None
    return NEEDS.get(package, _OTHER_NEED) if package else _OTHER_NEED


Rule = Callable[[Candidate, Candidate, Sequence[float]], bool]


def phase_split(c: Candidate, weights: Sequence[float], band: bool = False) -> dict[str, float]:
    """``{GRAPH: sum of w_i * v_i over its graph-captured buckets, EAGER: ...}`` (``band``: of the
    bands ``w_i * h_i``); a value with no footing (a measurement of the host, already on vLLM's
    footing) counts as graph-captured, and so does a candidate with no buckets (its weighted value)."""
    if not c.buckets:
        return {GRAPH: (c.halfwidth_us if band else c.weighted_us) or 0.0, EAGER: 0.0}
    out = {GRAPH: 0.0, EAGER: 0.0}
    for w, b in zip(weights, c.buckets):
        mode = b.footing.capture if b.footing is not None else GRAPH
        out[EAGER if mode == EAGER else GRAPH] += w * ((b.halfwidth_us if band else b.latency_us) or 0.0)
    return out


def _rule(graph: float = 1.0, eager: float = 1.0, k_graph: float = 0.0, k_eager: float = 0.0,
          own_band: bool = True) -> Rule:
    """``c`` beats ``d`` when its value, plus its band (``own_band``; otherwise only when it is
    transferred), is below the default's value taken ``graph`` times on its graph-captured buckets and
    ``eager`` times on its eager ones, less ``k_graph`` / ``k_eager`` times its band there."""
    def rule(c: Candidate, d: Candidate, weights: Sequence[float]) -> bool:
        value, band = phase_split(d, weights), phase_split(d, weights, band=True)
        own = c.weighted_us + (c.halfwidth_us if own_band or c.evidence == TRANSFERRED else 0.0)
        return own < (graph * value[GRAPH] + eager * value[EAGER] - k_graph * band[GRAPH] - k_eager * band[EAGER])
    return rule


#: How a candidate with evidence of its own compares with a derived default: name -> the test that
#: makes candidate ``c`` faster than default ``d`` (its central value on vLLM's footing), given the
#: workload's weights. ``bands``: the bands do not overlap (the rule for measured data); ``central``:
#: the candidate's band clears the default's central value; ``margin-G-E``: the candidate's value
#: (with its band when transferred) is below G x the default on graph-captured buckets and E x on
#: eager ones; ``bands-G-E``: its band clears the default's lower end, the default taken G x / E x.
TIE_RULES: dict[str, Rule] = {
    "bands": _rule(k_graph=1.0, k_eager=1.0),
    "bands-0.5": _rule(k_graph=0.5, k_eager=0.5),
    "central": _rule(),
    **{f"margin-{g:g}-{e:g}": _rule(g, e, own_band=False) for g in (0.8, 0.9, 1.0, 1.1, 1.2)
       for e in (0.75, 0.9, 1.0, 1.1)},
    **{f"bands-{g:g}-{e:g}": _rule(g, e, 1.0, 1.0) for g in (0.9, 1.0, 1.1, 1.2)
       for e in (0.75, 0.8, 0.85, 0.9, 0.95, 1.0) if (g, e) != (1.0, 1.0)},
    **{f"central-{g:g}-{e:g}": _rule(g, e) for g in (1.0, 1.1, 1.2) for e in (0.75, 0.9, 1.0) if (g, e) != (1.0, 1.0)},
}
#: The rules that never let a candidate leave the default while their bands overlap (the default
#: weighed at most 1x, its whole band counted): the ones that keep a tie with what needs nothing extra.
KEEPS_TIES = frozenset(name for name in TIE_RULES
                       if name == "bands" or (name.startswith("bands-") and name.count("-") == 2
                                              and all(float(x) <= 1.0 for x in name.split("-")[1:])))
#: What happens when no candidate clears a default that is only a lower bound.
BOUND_RULES = ("default-stays", "fastest-priced")


class DecisionPolicy(NamedTuple):
    """How candidates are compared with a derived default (see the module docstring)."""

    tie_rule: str = "bands-1-0.85"
    bound_rule: str = "fastest-priced"


#: The policy recommend uses.
DEFAULT_POLICY = DecisionPolicy()


class Tie(NamedTuple):
    """Backends the bands cannot tell apart: the one kept first, then the others, and what each
    needs on the serving host beyond vLLM."""

    kept: str
    others: tuple[str, ...]
    needs: dict  # backend -> words (NEEDS)
    why: str  # why ``kept`` was kept

    @property
    def backends(self) -> list[str]:
        return [self.kept, *self.others]


class Decision(NamedTuple):
    """The pick and what it was compared with.

    ``runner_up``: the best other candidate a decisive comparison involved (the default when a
    candidate beat it); ``rule``: how the pick was reached (one of :data:`RULES`; ``tie_rule``
    names the policy's tie rule where it decided); ``compared``: the default was measured, so
    candidates were compared with it; ``close``: candidates that also beat the default and whose
    bands overlap the pick's; ``undecided``: the pick could not be compared with the default (a
    lower bound only); ``tie``: the backends the bands could not tell apart from the pick, and why
    the pick was kept.
    """

    pick: Candidate
    default: Candidate | None
    runner_up: Candidate | None
    rule: str
    single: bool
    compared: bool
    close: Sequence[Candidate] = ()
    undecided: bool = False
    tie: Tie | None = None
    tie_rule: str | None = None

    @property
    def decisive(self) -> list[Candidate]:
        """The candidates whose latencies decided: the pick, the default and the runner-up (measured ones)."""
        return [c for c in (self.pick, self.default, self.runner_up) if c is not None and c.weighted_us is not None]


def decide(candidates: list[Candidate], policy: DecisionPolicy = DEFAULT_POLICY,
           weights: Sequence[float] | None = None) -> Decision:
    """Pick among ``candidates`` (at least one) and set each one's status (pick, default, faster,
    tie, slower, undecided; unmeasured ones keep theirs). ``weights``: the workload's bucket weights
    (a per-phase tie rule splits the default's value with them; default: equal)."""
    if policy.tie_rule not in TIE_RULES or policy.bound_rule not in BOUND_RULES:
        raise ValueError(f"unknown decision policy {policy}")
    default = next((c for c in candidates if c.backend == DEFAULT_BACKEND), None)
    if len(candidates) == 1:
        pick = candidates[0]
        if pick.status == "measured":
            pick.status = "pick"
        return Decision(pick, default, None, SINGLE, single=True, compared=False)
    if default is None or default.weighted_us is None:
        pick = default if default is not None else candidates[0]
        return Decision(pick, default, None, UNCOMPARED, single=False, compared=False)
    if weights is None:
        weights = [1.0 / len(default.buckets)] * len(default.buckets) if default.buckets else []
    return _against_default(candidates, default, policy, weights)


def versus_default(c: Candidate, default: Candidate, tie_rule: str = DEFAULT_POLICY.tie_rule,
                   weights: Sequence[float] | None = None) -> str:
    """``c``'s verdict against the default: FASTER, SLOWER, TIE or UNDECIDED (see the module docstring)."""
    lc, hc, ld, hd = c.weighted_us, c.halfwidth_us, default.weighted_us, default.halfwidth_us
    if default.evidence != DERIVED or c.evidence in (DERIVED, MEASURED):
        return band_compare(lc, hc, ld, hd)
    if default.bound:
        return FASTER if lc + hc < ld - hd else UNDECIDED
    if weights is None:
        weights = [1.0 / len(default.buckets)] * len(default.buckets) if default.buckets else []
    if TIE_RULES[tie_rule](c, default, weights):
        return FASTER
    return SLOWER if lc - hc > ld + hd else TIE


def _tie(kept: Candidate, others: Sequence[Candidate], why: str) -> Tie:
    return Tie(kept.backend, tuple(c.backend for c in others),
               {c.backend: needs(c.backend)[1] for c in (kept, *others)}, why)


def _against_default(candidates: list[Candidate], default: Candidate, policy: DecisionPolicy,
                     weights: Sequence[float]) -> Decision:
    complete = [c for c in candidates if c.weighted_us is not None]
    for c in complete:
        if c is not default:
            c.status = versus_default(c, default, policy.tie_rule, weights)
    winners = sorted((c for c in complete if c.status == FASTER), key=lambda c: c.weighted_us)
    undecided = sorted((c for c in complete if c.status == UNDECIDED), key=lambda c: c.weighted_us)
    tie, tie_rule = None, None
    if winners:
        fastest = winners[0]
        tied = [c for c in winners
                if band_compare(fastest.weighted_us, fastest.halfwidth_us, c.weighted_us, c.halfwidth_us) == TIE]
        pick = min(tied, key=lambda c: (needs(c.backend)[0], c.weighted_us))
        close = [c for c in tied if c is not pick]
        if close:
            why = (f"{pick.backend} is the fastest of them" if pick is fastest else
                   f"{pick.backend} needs the least ({needs(pick.backend)[1]})")
            tie = _tie(pick, close, why)
        if default.bound:
            rule = BELOW_BOUND
        elif band_compare(pick.weighted_us, pick.halfwidth_us, default.weighted_us, default.halfwidth_us) == FASTER:
            rule = BANDS
        else:
            rule, tie_rule = BY_TIE_RULE, policy.tie_rule
        runner_up = default
    elif undecided and policy.bound_rule == "fastest-priced":
        pick = undecided[0]
        default.status, pick.status = "default", "pick"
        return Decision(pick, default, None, FASTEST_PRICED, single=False, compared=False, undecided=True)
    elif default.bound:
        default.status = "pick"
        return Decision(default, default, None, BOUND_ONLY, single=False, compared=False)
    else:
        pick, close, rule = default, [], DEFAULT_STAYS
        ties = sorted((c for c in complete if c.status == TIE), key=lambda c: c.weighted_us)
        if ties:
            tie = _tie(default, ties, f"{default.backend} needs nothing extra ({needs(default.backend)[1]})")
        # a candidate whose band clears the default's, held by the tie rule (a derived default): the rule decided
        if any(band_compare(c.weighted_us, c.halfwidth_us, default.weighted_us, default.halfwidth_us) == FASTER
               for c in ties):
            tie_rule = policy.tie_rule
        others = sorted((c for c in complete if c is not default), key=lambda c: c.weighted_us)
        runner_up = others[0] if others else None
    default.status = "default" if pick is not default else "pick"
    pick.status = "pick"
    return Decision(pick, default, runner_up, rule, single=False, compared=True, close=close, tie=tie,
                    tie_rule=tie_rule)
