"""The selector's answer as ``launch`` uses it (:class:`Pick`).

The answer is the ``recommend --format json`` document (docs/json.md), built on this machine
(:mod:`autoselect.launch.local`, :func:`autoselect.selector.recommend_for`) or answered by the
fleet's service (:mod:`autoselect.launch.service`, ``GET /v1/recommend``). :func:`pick_of` keeps
what launch acts on: the backend, the kind of evidence under it, the confidence, the flags the
answer adds (the one-sided token budget, tuned knobs), the tuned variables, and the
``autoselect bench`` command that would settle an open answer.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping, NamedTuple


#: The flags of an answer that describe the deployment or the backend (launch takes those from the
#: line and from :func:`autoselect.vllm_flags.backend_setting`): option -> how many values follow.
DEPLOYMENT_FLAGS = {"--tensor-parallel-size": 1, "--data-parallel-size": 1, "--enable-expert-parallel": 0,
                    "--all2all-backend": 1}


#: The evidence of a pick the rules alone make (vLLM's CPU platform; the only legal backend).
RULE = "rule"


class ServiceUnavailable(Exception):
    "The service did not give a usable answer (the launcher falls back and says why)."


class Pick(NamedTuple):
    """What launch acts on from one answer (a NamedTuple: see :class:`autoselect.launch.line.LaunchLine`)."""

    backend: str
    confidence: str | None  # the selector's; None: not the selector's call (a platform rule)
    evidence: str  # measured | published | derived | transferred | estimated | synthetic | none | rule (RULE)
    source: str  # where it came from, in words, for the line
    flags: tuple[tuple[str, ...], ...] = ()  # the answer's other flags, each option with its values
    env: Mapping[str, str] = MappingProxyType({})  # tuned variables
    bench_command: str | None = None
    reasons: tuple[str, ...] = ()  # why the confidence is what it is
    warnings: tuple[str, ...] = ()
    answer: dict | None = None  # the recommend document, when there is one

    def __repr__(self) -> str:  # without the whole answer
        return (f"Pick(backend={self.backend!r}, confidence={self.confidence!r}, evidence={self.evidence!r}, "
                f"source={self.source!r})")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (without the whole answer)."""
        return {"backend": self.backend, "confidence": self.confidence, "evidence": self.evidence,
                "source": self.source, "flags": [list(f) for f in self.flags], "env": dict(self.env),
                "bench_command": self.bench_command, "confidence_reasons": list(self.reasons),
                "warnings": list(self.warnings)}


def _other_flags(vllm_args: list[str]) -> tuple[tuple[str, ...], ...]:
    """The answer's flags beyond the deployment and the backend, each option with its values."""
    out: list[list[str]] = []
    i = 0
    while i < len(vllm_args):
        word = vllm_args[i]
        if word in DEPLOYMENT_FLAGS:
            i += 1 + DEPLOYMENT_FLAGS[word]
            continue
        if word.startswith("-") or not out:
            out.append([word])
        else:
            out[-1].append(word)
        i += 1
    return tuple(tuple(f) for f in out)


def pick_of(answer: Mapping[str, Any], source: str) -> Pick:
    """The :class:`Pick` in a ``recommend --format json`` document.

    :raises ServiceUnavailable: a document without a backend, a confidence or flags.
    """
    backend, confidence, args = answer.get("backend"), answer.get("confidence"), answer.get("vllm_args")
    if not (isinstance(backend, str) and isinstance(confidence, str) and isinstance(args, list)
            and all(isinstance(a, str) for a in args)):
        raise ServiceUnavailable("the answer is not a recommendation (no backend, confidence or vllm_args)")
    candidates = [c for c in answer.get("candidates") or [] if isinstance(c, dict)]
    chosen = next((c for c in candidates if c.get("backend") == backend), {})
    measured = chosen.get("fit") is not None
    if confidence == "none":
        evidence = "none"
    elif measured:
        evidence = str(chosen.get("evidence", "measured"))
    else:  # the only legal backend: the rules chose it, there was nothing to compare
        evidence = RULE if len(candidates) == 1 and chosen else "none"
    knobs = answer.get("knobs") or {}
    env = {str(k): str(v) for k, v in (knobs.get("env") or {}).items()} if isinstance(knobs, dict) else {}
    return Pick(backend=backend, confidence=confidence, evidence=evidence, source=source, flags=_other_flags(args),
                env=env, bench_command=answer.get("bench_command"),
                reasons=tuple(str(r) for r in answer.get("confidence_reasons") or ()),
                warnings=tuple(str(w) for w in answer.get("warnings") or ()), answer=dict(answer))
