"""The selector's answer as ``launch`` uses it (:class:`Pick`).

The answer is the ``recommend --format json`` document (docs/json.md), built on this machine
(:mod:`autoselect.launch.local`, :func:`autoselect.selector.recommend_for`) or answered by the
fleet's service (:mod:`autoselect.launch.service`, ``GET /v1/recommend``). :func:`pick_of` keeps
what launch acts on: the backend, the kind of evidence under it, the confidence, the flags the
answer adds (the one-sided token budget, tuned knobs), the tuned variables, and the
``autoselect bench`` command that would settle an open answer. Either way the answer is untrusted
input: its flags and variables pass the allow-list of :mod:`autoselect.vllm_flags.trusted`, every
field it keeps is checked for its type, and nothing it says about the GPUs decides what is legal.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping, NamedTuple

from autoselect.vllm_flags import UntrustedAnswer, trusted_answer


#: The evidence of a pick the rules alone make (vLLM's CPU platform).
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
    decision: str | None = None  # how the selector reached the pick, in its words (its one sentence)

    def __repr__(self) -> str:  # without the whole answer
        return (f"Pick(backend={self.backend!r}, confidence={self.confidence!r}, evidence={self.evidence!r}, "
                f"source={self.source!r})")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (without the whole answer)."""
        return {"backend": self.backend, "confidence": self.confidence, "evidence": self.evidence,
                "source": self.source, "flags": [list(f) for f in self.flags], "env": dict(self.env),
                "bench_command": self.bench_command, "confidence_reasons": list(self.reasons),
                "warnings": list(self.warnings), "decision": self.decision}


#: The longest text of an answer a pick keeps (a source, a reason, a warning, a command).
MAX_TEXT = 2000


def _text(value: Any, field: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise ServiceUnavailable(f"the answer's {field} is not a text of at most {MAX_TEXT} characters")
    return value


def _texts(value: Any, field: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ServiceUnavailable(f"the answer's {field} is not a list")
    return tuple(_text(v, f"{field} item") for v in value)


def _mapping(value: Any, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ServiceUnavailable(f"the answer's {field} is not an object")
    return value


def pick_of(answer: Any, source: str, *, version: str, deployment: Mapping[str, int]) -> Pick:
    """The :class:`Pick` in a ``recommend --format json`` document, its flags and variables through the
    allow-list of :mod:`autoselect.vllm_flags.trusted` (an answer is untrusted input: the service's,
    or this machine's selector reading tuned rows of a database).

    :param version: the target vLLM release (the backend's flag value is spelled for it).
    :param deployment: the line's ``tensor_parallel_size`` and ``data_parallel_size``.
    :raises ServiceUnavailable: a document that is no recommendation, a field of the wrong type, or
        a flag or variable outside the allow-list (the message names the field).
    """
    if not isinstance(answer, dict):
        raise ServiceUnavailable("the answer is not a JSON object")
    confidence = answer.get("confidence")
    if not (isinstance(answer.get("backend"), str) and isinstance(confidence, str)
            and isinstance(answer.get("vllm_args"), list)):
        raise ServiceUnavailable("the answer is not a recommendation (no backend, confidence or vllm_args)")
    try:
        trusted = trusted_answer(answer, version=version, deployment=deployment)
    except UntrustedAnswer as e:
        raise ServiceUnavailable(f"its answer is refused: {e}") from None
    backend = answer["backend"]
    candidates = answer.get("candidates")
    if candidates is not None and not isinstance(candidates, list):
        raise ServiceUnavailable("the answer's candidates is not a list")
    candidates = [c for c in candidates or [] if isinstance(c, dict)]
    chosen = next((c for c in candidates if c.get("backend") == backend), {})
    if confidence == "none":
        evidence = "none"
    elif chosen.get("fit") is not None:
        evidence = _text(chosen.get("evidence", "measured"), "candidate evidence")
    else:  # no number of its own: the selector's confidence is none then (confidence.py)
        evidence = "none"
    return Pick(backend=backend, confidence=_text(confidence, "confidence"), evidence=evidence, source=source,
                flags=trusted.flags, env=trusted.env,
                bench_command=_text(answer.get("bench_command"), "bench_command", optional=True),
                reasons=_texts(answer.get("confidence_reasons"), "confidence_reasons"),
                warnings=_texts(answer.get("warnings"), "warnings"), answer=dict(answer),
                decision=_text(answer.get("decision"), "decision", optional=True))


def answer_host_class(answer: Mapping[str, Any]) -> str | None:
    """The host class an answer says it is for (``data_used.host_class``), when it is a short text."""
    value = _mapping(answer.get("data_used"), "data_used").get("host_class")
    return value if isinstance(value, str) and 0 < len(value) <= 200 else None
