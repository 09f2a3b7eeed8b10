"""Step 5: how sure the answer is, as a rule table.

Confidence starts at ``high`` and every rule of :data:`CONFIDENCE_CAPS` that applies caps it;
the answer's confidence is the lowest cap of all that apply, and their texts are its reasons
(in table order). ``none`` means no usable measurement at all (even when the rules leave one backend legal: the
confidence speaks of the evidence, not of the legality): that rule, when it applies, is the only
reason given. "Decisive" latencies are those of the pick, the default and the best
other candidate.

``reference``: the decisive latencies rest on NVIDIA's published reference tables
(:mod:`autoselect.reference`), not on measurements of the host; it ranks below every answer
measured on the host class (a published table is another machine of the same GPU model, run by
another harness under other versions) and above ``none``. Every kind weaker than ``measured``
that decided caps the answer there, each with its own reason (resting on the reference at all,
derived from NCCL, transferred from another shape), so the reasons name the weakest kind.

``synthetic`` example data (made up, stored as if measured: ``db.records.SYNTHETIC``) caps the
answer at ``low``: never ``high`` on numbers no machine measured.

``none`` also when the pick has no number of its own (vLLM's default kept because nothing
could be compared with it, or with only a lower bound to stand on): such an answer is a fallback,
not a decision, whatever the other candidates' evidence.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from autoselect.selector.answer import DERIVED, PUBLISHED, SYNTHETIC, TRANSFERRED, Candidate
from autoselect.selector.decide import Decision

#: Confidence levels, best first.
CONFIDENCE_LEVELS = ("high", "medium", "low", "reference", "none")
#: The evidence kinds that rest on the published reference.
REFERENCE_KINDS = frozenset({PUBLISHED, DERIVED, TRANSFERRED})


class Facts(NamedTuple):
    """What the confidence rules look at, gathered from the decision."""

    single: bool  # one legal backend: nothing to compare
    compared: bool  # the default was measured, so candidates were compared with it
    any_measured: bool  # some candidate has a measurement
    unmeasured: bool  # some candidate lacks data for some bucket of the workload
    close_call: bool
    decisive_sources: frozenset[str]  # the bucket sources of the decisive latencies
    stale: bool  # some decisive measurement is from other vllm / flashinfer / driver versions
    decisive_kinds: frozenset[str] = frozenset()  # the evidence kinds of the decisive latencies
    candidate_kinds: frozenset[str] = frozenset()  # the evidence kinds of every candidate with data
    pick_unpriced: bool = False  # the pick has no number of its own (none, or only a lower bound)
    undecided: bool = False  # the pick could not be compared with the default (a lower bound only)
    decisive_bound: bool = False  # a decisive latency is only a lower bound


class ConfidenceCap(NamedTuple):
    """One rule: its name, the level it caps the confidence at, the reason, when it applies."""

    name: str
    cap: str
    text: str
    applies: Callable[[Facts], bool]
    alone: bool = False  # when it applies, it is the only reason given


CONFIDENCE_CAPS: tuple[ConfidenceCap, ...] = (
    # nothing measured and nothing published: none, whatever is legal (one legal backend included)
    ConfidenceCap("no_data", "none", "no measurement of any legal backend for this host class, shape and world size",
                  lambda f: not f.any_measured, alone=True),
    ConfidenceCap("pick_unpriced", "none", "the pick has no number of its own for this workload (a bucket without "
                  "a value, or only a lower bound): it is the fallback, not a decision",
                  lambda f: f.pick_unpriced and not f.single),
    ConfidenceCap("undecided", "none", "the pick could not be compared with vLLM's default, which has only a "
                  "lower bound here: it is the fastest backend with a number, not a decision against the default",
                  lambda f: f.undecided),
    ConfidenceCap("published", "reference", "the answer rests on NVIDIA's published reference measurements "
                  "(AIConfigurator), not on measurements of this host class",
                  lambda f: bool((f.decisive_kinds | f.candidate_kinds) & REFERENCE_KINDS)),
    ConfidenceCap("derived", "reference", "a decisive latency is derived from NVIDIA's published NCCL timings "
                  "(allgather_reducescatter), not a measured all2all", lambda f: DERIVED in f.decisive_kinds),
    ConfidenceCap("bound", "reference", "a decisive latency is only a lower bound of vLLM's default (no NCCL "
                  "timings at this EP size)", lambda f: f.decisive_bound),
    ConfidenceCap("transferred", "reference", "a decisive latency is transferred from another shape's (by bytes "
                  "per token) or another system's published rows", lambda f: TRANSFERRED in f.decisive_kinds),
    ConfidenceCap("synthetic", "low", "the answer rests on synthetic example data (made up, not measured on any "
                  "machine)", lambda f: SYNTHETIC in (f.decisive_kinds | f.candidate_kinds)),
    ConfidenceCap("default_unmeasured", "low", "vLLM's default has no data for every bucket of this workload, "
                  "so nothing could be compared with it",
                  lambda f: not f.single and not f.compared and not f.pick_unpriced and not f.undecided),
    ConfidenceCap("unmeasured_candidates", "low", "some legal backends have no data for this workload",
                  lambda f: f.unmeasured and not f.single),
    ConfidenceCap("extrapolated", "low", "a decisive latency is extrapolated beyond the measured token range",
                  lambda f: "extrapolated" in f.decisive_sources),
    ConfidenceCap("stale", "low", "some decisive measurements were taken under other vllm / flashinfer / driver "
                  "versions", lambda f: f.stale),
    ConfidenceCap("interpolated", "medium", "some decisive latencies are estimated between measured token counts",
                  lambda f: "interpolated" in f.decisive_sources),
    ConfidenceCap("close_call", "medium", "the pick ties with another backend that also beats the default",
                  lambda f: f.close_call),
)


def facts(decision: Decision, candidates: list[Candidate], stale: bool) -> Facts:
    """The :class:`Facts` of a decision over ``candidates``."""
    return Facts(
        single=decision.single,
        compared=decision.compared,
        any_measured=any(c.measured for c in candidates),
        unmeasured=any(not c.measured or c.weighted_us is None for c in candidates),
        close_call=bool(decision.close),
        decisive_sources=frozenset(b.source for c in decision.decisive for b in c.buckets),
        stale=stale,
        decisive_kinds=frozenset(b.evidence for c in decision.decisive for b in c.buckets if b.latency_us is not None),
        candidate_kinds=frozenset(c.evidence for c in candidates if c.measured),
        pick_unpriced=decision.pick.weighted_us is None or decision.pick.bound,
        undecided=decision.undecided,
        decisive_bound=any(c.bound for c in decision.decisive),
    )


def capping(f: Facts) -> list[ConfidenceCap]:
    """The rules of :data:`CONFIDENCE_CAPS` that apply, in table order (one that applies alone: it alone)."""
    applies = [cap for cap in CONFIDENCE_CAPS if cap.applies(f)]
    alone = [cap for cap in applies if cap.alone]
    return alone[:1] or applies


def level_of(caps: list[ConfidenceCap]) -> str:
    """The lowest cap of ``caps`` (``high`` when none applies)."""
    return max((cap.cap for cap in caps), key=CONFIDENCE_LEVELS.index, default="high")


def confidence(f: Facts) -> tuple[str, list[str]]:
    """``(level, reasons)``: the lowest cap of the rules that apply, and their texts."""
    applies = capping(f)
    return level_of(applies), [cap.text for cap in applies]
