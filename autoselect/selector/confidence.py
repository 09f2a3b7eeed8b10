"""Step 5: how sure the answer is, as a rule table.

Confidence starts at ``high`` and every rule of :data:`CONFIDENCE_CAPS` that applies caps it;
the answer's confidence is the lowest cap of all that apply, and their texts are its reasons
(in table order). ``none`` means no usable measurement at all: that rule, when it applies, is
the only reason given. "Decisive" latencies are those of the pick, the default and the best
other candidate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from autoselect.selector.decide import Decision
from autoselect.selector.schema import Candidate

#: Confidence levels, best first.
CONFIDENCE_LEVELS = ("high", "medium", "low", "none")


@dataclass(frozen=True)
class Facts:
    """What the confidence rules look at, gathered from the decision."""

    single: bool  # one legal backend: nothing to compare
    compared: bool  # the default was measured, so candidates were compared with it
    any_measured: bool  # some candidate has a measurement
    unmeasured: bool  # some candidate lacks data for some bucket of the workload
    close_call: bool
    decisive_sources: frozenset[str]  # the bucket sources of the decisive latencies
    stale: bool  # some decisive measurement is from other vllm / flashinfer / driver versions


@dataclass(frozen=True)
class ConfidenceCap:
    """One rule: its name, the level it caps the confidence at, the reason, when it applies."""

    name: str
    cap: str
    text: str
    applies: Callable[[Facts], bool]
    alone: bool = False  # when it applies, it is the only reason given


CONFIDENCE_CAPS: tuple[ConfidenceCap, ...] = (
    ConfidenceCap("no_data", "none", "no measurement of any legal backend for this host class, shape and world size",
                  lambda f: not f.single and not f.compared and not f.any_measured, alone=True),
    ConfidenceCap("default_unmeasured", "low", "vLLM's default has no data for every bucket of this workload, "
                  "so nothing could be compared with it", lambda f: not f.single and not f.compared),
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
    )


def confidence(f: Facts) -> tuple[str, list[str]]:
    """``(level, reasons)``: the lowest cap of the rules that apply, and their texts."""
    applies = [cap for cap in CONFIDENCE_CAPS if cap.applies(f)]
    alone = [cap for cap in applies if cap.alone]
    applies = alone[:1] or applies
    level = max((cap.cap for cap in applies), key=CONFIDENCE_LEVELS.index, default="high")
    return level, [cap.text for cap in applies]
