"""The words of an answer: verdicts of fixed meaning, the decision and the confidence in one sentence.

:data:`VERDICTS` is the one table of verdict words (docs/recommend.md prints it, and a test holds
every command's words to it: recommend's text and JSON, ``explain``, the report, ``launch``,
``serve``). A verdict compares two workload-weighted latencies with their bands, ``L ± H``
(:func:`relate`), from the numbers alone, whatever rule decided the pick:

* ``faster`` / ``slower``: the bands do not overlap;
* ``tie``: each central value lies within the other's band;
* ``not separable``: the bands overlap, the central values lie apart: the central ratio, always
  shown beside it, says which way it leans, and the data cannot say more.

The decision (:class:`autoselect.selector.decide.Decision`) says how the pick was reached; here it
becomes one sentence (:func:`decision_sentence`) and data (:func:`comparison`: the pick, the backend
it was weighed against, their verdict and ratio, the expected end-to-end effect, and the
``autoselect bench`` row that would separate them). The confidence becomes one sentence
(:func:`confidence_sentence`): the level, the rule that set it, and the end-to-end effect, because
a whole step differs 3-10x less than its all2all (:data:`END_TO_END_SHRINK`). The sources behind
each follow in ``--explain`` and the JSON.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

from autoselect import rules
from autoselect.rules.flashinfer import FLASHINFER_PINS
from autoselect.selector.answer import MEASURED, Candidate, Comparison
from autoselect.selector.decide import (BANDS, BELOW_BOUND, BOUND_ONLY, BY_TIE_RULE, DEFAULT_STAYS, FASTEST_PRICED,
                                        SINGLE, UNCOMPARED, Decision, needs)
from autoselect.selector.ties import E2E_SHARE


class VerdictWord(NamedTuple):
    """One word of the table: as the text table shows it, as the JSON writes it, what it means."""

    shown: str
    word: str
    meaning: str


PICK, DEFAULT, FASTER, SLOWER, NOT_SEPARABLE, TIE = "pick", "default", "faster", "slower", "not separable", "tie"
UNDECIDED, NOT_COMPARED, INCOMPLETE, NO_DATA = "undecided", "not compared", "incomplete", "no data"

#: Every verdict word, in the order of the table (the candidates' ``status``; a rejection's ``kind``).
VERDICTS: tuple[VerdictWord, ...] = (
    VerdictWord("PICK", PICK, "the recommended backend"),
    VerdictWord("default", DEFAULT, "vLLM's default, not picked"),
    VerdictWord("faster", FASTER, "faster than vLLM's default beyond the noise: its band lies entirely below "
                "the default's"),
    VerdictWord("slower", SLOWER, "slower than vLLM's default beyond the noise: its band lies entirely above "
                "the default's"),
    VerdictWord("not separable", NOT_SEPARABLE, "the bands overlap but the central values lie apart: the "
                "central ratio says which way it leans; the data cannot say which is faster"),
    VerdictWord("tie", TIE, "each central value lies within the other's band: as fast as the default, as far as "
                "the data can tell"),
    VerdictWord("undecided", UNDECIDED, "above a default that has only a lower bound: it cannot be compared"),
    VerdictWord("not compared", NOT_COMPARED, "it has a number, vLLM's default has none to compare it with"),
    VerdictWord("incomplete", INCOMPLETE, "some token count of the workload has no value"),
    VerdictWord("no data", NO_DATA, "nothing measured or published for this shape"),
    VerdictWord("illegal", "illegal", "rejected: the rules refuse it for this model, GPUs, EP size or vLLM release"),
    VerdictWord("disqualified", "disqualified", "rejected: a result of this shape failed the correctness gate "
                "or erred"),
    VerdictWord("unavailable", "unavailable", "rejected: the serving host lacks its package or NVLinks, or every "
                "stored row says it could not run"),
    VerdictWord("ineligible", "ineligible", "rejected: legal, but vLLM runs it without CUDA graphs and the workload "
                "has decode-sized steps vLLM would otherwise capture; the whole model's eager cost is not priced"),
)
#: word (as the JSON writes it) -> as the text table shows it.
SHOWN = {v.word: v.shown for v in VERDICTS}
#: The words that relate two latencies (:func:`relate`).
RELATIONS = (FASTER, SLOWER, NOT_SEPARABLE, TIE)

#: A whole step's difference between two backends is 3-10x smaller than their all2all's: attention,
#: the experts and the wait for the slowest rank are common to both (one fact with its sources,
#: :data:`autoselect.selector.ties.E2E_SHARE` and ``E2E_BASIS``, which the JSON's ``expected_effect`` uses too).
END_TO_END_SHRINK = (1 / E2E_SHARE[1], 1 / E2E_SHARE[0])


class Relation(NamedTuple):
    """How latency ``a`` relates to ``b``: a verdict word and ``a``'s central value over ``b``'s."""

    word: str
    ratio: float


def relate(a: Candidate, b: Candidate) -> Relation | None:
    """``a`` against ``b`` (:data:`RELATIONS`, or ``undecided`` above a ``b`` that is only a lower bound);
    None when either has no number."""
    if a.weighted_us is None or b.weighted_us is None or not b.weighted_us:
        return None
    la, ha, lb, hb = a.weighted_us, a.halfwidth_us or 0.0, b.weighted_us, b.halfwidth_us or 0.0
    ratio = la / lb
    if la + ha < lb - hb:
        return Relation(FASTER, ratio)
    if b.bound:
        return Relation(UNDECIDED, ratio)
    if la - ha > lb + hb:
        return Relation(SLOWER, ratio)
    if abs(la - lb) <= min(ha, hb):
        return Relation(TIE, ratio)
    return Relation(NOT_SEPARABLE, ratio)


def assign(decision: Decision, candidates: Sequence[Candidate]) -> None:
    """Give every candidate its verdict word (``status``) and its ratio to vLLM's default: the pick
    ``pick``, the default ``default``, every other with a number its relation to the default."""
    default = decision.default
    for c in candidates:
        rel = relate(c, default) if default is not None and c is not default else None
        c.ratio_to_default = rel.ratio if rel is not None else None
        if c is decision.pick:
            c.status = c.status if c.status in (NO_DATA, INCOMPLETE) else PICK
        elif c is default:
            c.status = DEFAULT if c.weighted_us is not None else c.status
        elif rel is not None:
            c.status = rel.word
        elif c.weighted_us is not None:
            c.status = NOT_COMPARED


def _x(ratio: float) -> str:
    return f"{ratio:.2f}x"


def _us(x: float) -> str:
    return f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def _needs(backend: str, vllm_version: str) -> str | None:
    """The package ``backend`` needs that ``vllm_version`` does not install (None: nothing extra).
    FlashInfer is a dependency of vLLM since the first wheel read that pins it (every wheel read
    since does, :data:`autoselect.rules.flashinfer.FLASHINFER_PINS`); DeepEP of none."""
    cap = rules.BACKENDS.get(backend)
    package = cap.package if cap is not None else None
    if package == "flashinfer" and rules.version_in(vllm_version, FLASHINFER_PINS[0].vllm, None):
        return None
    return package


def _open(decision: Decision, candidates: Sequence[Candidate]) -> list[tuple[Candidate, Relation]]:
    """The candidates the default stayed against without the data separating them, nearest first,
    each with its relation to the default."""
    d = decision.default
    out = [(c, rel) for c in candidates if c is not d and d is not None
           and (rel := relate(c, d)) is not None and rel.word in (NOT_SEPARABLE, TIE)]
    return sorted(out, key=lambda cr: abs(cr[0].weighted_us - d.weighted_us))


def versus(decision: Decision, candidates: Sequence[Candidate]) -> Candidate | None:
    """The backend the pick was weighed against: the default when a candidate was picked over it;
    when the default stayed, the nearest one the data cannot separate from it, else the fastest other."""
    if decision.rule in (BANDS, BELOW_BOUND, BY_TIE_RULE, FASTEST_PRICED):
        return decision.default
    if decision.rule == DEFAULT_STAYS:
        return next((c for c, _ in _open(decision, candidates)), decision.runner_up)
    return None


def _fastest_other(candidates: Sequence[Candidate], pick: Candidate) -> str:
    """``; the fastest published backend is X (Y us)`` or ''."""
    others = sorted((c for c in candidates if c is not pick and c.weighted_us is not None and not c.bound),
                    key=lambda c: c.weighted_us)
    if not others:
        return ""
    best = others[0]
    return f"; the fastest {best.evidence} backend is {best.backend} ({_us(best.weighted_us)} us)"


def decision_sentence(decision: Decision, candidates: Sequence[Candidate], vllm_version: str) -> str:
    """How the pick was reached, in one sentence of :data:`VERDICTS` words (after :func:`assign`); a
    default kept against backends the data cannot separate from it says what they need that the
    target vLLM release does not install."""
    pick, d, rule = decision.pick, decision.default, decision.rule
    if rule == SINGLE:
        return "the only backend legal here: nothing to compare"
    if rule == UNCOMPARED:
        return "vLLM's default, which has no number here: nothing could be compared with it" + \
            _fastest_other(candidates, pick)
    if rule == BOUND_ONLY:
        return (f"vLLM's default, which has only a lower bound here ({_us(d.weighted_us)} us) that no backend "
                f"clears" + _fastest_other(candidates, pick))
    if rule == FASTEST_PRICED:
        return (f"the fastest backend with a number; vLLM's default has only a lower bound here "
                f"({_us(d.weighted_us)} us), so the two were not compared")
    rel = relate(pick, d) if d is not None else None
    if rule == BELOW_BOUND:
        return f"faster than vLLM's default: {_x(rel.ratio)} its lower bound, the bands apart"
    if rule == BANDS:
        return f"faster than vLLM's default: {_x(rel.ratio)} its latency, the bands apart"
    if rule == BY_TIE_RULE:
        return (f"picked over vLLM's derived default by the tie rule ({decision.tie_rule}): {rel.word}, "
                f"{_x(rel.ratio)} its central value (a rule chosen by measured regret over the default's range)")
    if rule != DEFAULT_STAYS:  # a rule of decide.RULES this table has no words for: a bug, not an answer
        raise ValueError(f"no words for the decision rule {rule!r}")
    open_ = _open(decision, candidates)
    held = sorted((c for c in candidates if c is not pick and c.status == FASTER), key=lambda c: c.weighted_us)
    if held:  # its band clears the default's, but not the derived default's range as the tie rule weighs it
        c = held[0]
        return (f"vLLM's default stays: {c.backend} is faster by the bands ({_x(relate(c, d).ratio)} at the central "
                f"values) but does not clear vLLM's derived default by the tie rule ({decision.tie_rule})"
                + (f"; the default needs nothing extra, {c.backend} needs {needs(c.backend)[1]}"
                   if _needs(c.backend, vllm_version) else ""))
    if not open_:
        nearest = relate(decision.runner_up, d) if decision.runner_up is not None else None
        return ("vLLM's default stays: every other backend with a number is slower"
                + (f" (the nearest, {decision.runner_up.backend}, {_x(nearest.ratio)})" if nearest is not None else ""))
    said = ", ".join(f"{c.backend} {'ties with it' if rel.word == TIE else 'is not separable from it'} "
                     f"({_x(rel.ratio)} at the central values)" for c, rel in open_)
    extra = sorted({f"{c.backend} needs {needs(c.backend)[1]}" for c, _ in open_ if _needs(c.backend, vllm_version)})
    return (f"vLLM's default stays: {said}"
            + (f"; the default needs nothing extra, {', '.join(extra)}" if extra else ""))


def _end_to_end(pick: Candidate, other: Candidate) -> tuple[float, float] | None:
    """The expected difference of a whole step between the two, in percent of the slower's (low, high)."""
    if pick.weighted_us is None or other.weighted_us is None or other.bound or pick.bound:
        return None
    slow, fast = max(pick.weighted_us, other.weighted_us), min(pick.weighted_us, other.weighted_us)
    if not slow:
        return None
    share = (slow - fast) / slow * 100
    return share / END_TO_END_SHRINK[1], share / END_TO_END_SHRINK[0]


def comparison(decision: Decision, candidates: Sequence[Candidate], settle: str | None) -> Comparison:
    """The decision as data (JSON ``comparison``); ``settle``: the bench command that would separate
    the pick from the backend it was weighed against (:func:`open_pair`), or None."""
    pick = decision.pick
    other = versus(decision, candidates)
    rel = relate(pick, other) if other is not None else None
    return Comparison(rule=decision.rule, pick=pick.backend, versus=other.backend if other is not None else None,
                      verdict=rel.word if rel is not None else None, ratio=rel.ratio if rel is not None else None,
                      end_to_end_pct=_end_to_end(pick, other) if rel is not None and other is not None else None,
                      settle=settle)


def open_pair(decision: Decision, candidates: Sequence[Candidate]) -> list[str]:
    """The two backends a measurement on the serving host would separate: the pick and the backend
    it was weighed against, when the data cannot separate them and rest on evidence other than this
    host class's own measurements (those are already as good as a bench run makes them); else []."""
    other = versus(decision, candidates)
    if other is None or other is decision.pick:
        return []
    rel = relate(decision.pick, other)
    if rel is None or rel.word not in (NOT_SEPARABLE, TIE):
        return []
    if decision.pick.evidence == MEASURED and other.evidence == MEASURED:
        return []
    return [decision.pick.backend, other.backend]


def effect_sentence(c: Comparison) -> str | None:
    """The expected end-to-end effect of the comparison, in one clause (None without one)."""
    if c.end_to_end_pct is None or c.versus is None or c.verdict not in RELATIONS:
        return None
    low, high = c.end_to_end_pct
    theirs = f"{c.versus} takes {_x(1 / c.ratio)} the pick's all2all time"
    if c.verdict in (NOT_SEPARABLE, TIE):
        return f"end to end, at most about {_pct(high)} % between the pick and {c.versus} ({theirs}, {c.verdict})"
    return f"end to end, about {_pct(low)}-{_pct(high)} % between the pick and {c.versus} ({theirs})"


def _pct(x: float) -> str:
    return f"{x:.1f}" if x < 1 else f"{x:.0f}"


def confidence_sentence(level: str, reasons: Sequence[str], caps: Sequence[str], c: Comparison | None) -> str:
    """The confidence in one sentence: the level, the reason that set it (the others counted, for
    ``--explain``), and the expected end-to-end effect."""
    from_levels = [r for r, cap in zip(reasons, caps) if cap == level]
    head = from_levels[0] if from_levels else (reasons[0] if reasons else "")
    more = len(reasons) - 1 if head else 0
    out = level + (f": {head}" if head else "")
    if more:
        out += f" ({more} more reason{'s' if more > 1 else ''}: --explain)"
    effect = effect_sentence(c) if c is not None else None
    return out + (f"; {effect}" if effect else "")


def close_call(decision: Decision) -> str | None:
    """The warning of a pick whose band overlaps another candidate's that also beats the default, with
    why the pick was kept (the tie's: the one needing least beyond vLLM, among equals the fastest)."""
    if not decision.close:
        return None
    pick = decision.pick
    said = ", ".join(f"{c.backend} ({rel.word}, {_x(c.weighted_us / pick.weighted_us)} the pick's central value)"
                     for c in decision.close if (rel := relate(c, pick)) is not None)
    why = decision.tie.why if decision.tie is not None else f"{pick.backend} has the lowest central value"
    return f"{pick.backend} is not separated from {said}: {why}"
