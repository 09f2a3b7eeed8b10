"""vLLM's verdicts on ``vllm serve`` command lines: a batch of them, and refusing what vLLM rejected."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autoselect.bridge.protocol import FlagVerdict, OpFailed, VllmInfo
from autoselect.errors import UserError


class FlagsRejectedByVllm(UserError):
    "vLLM's own `vllm serve` parser rejected a command line."


@dataclass(frozen=True)
class FlagValidation:
    """The verdicts for a batch of command lines, and which vLLM gave them."""

    vllm: VllmInfo
    verdicts: tuple[FlagVerdict, ...]
    elapsed_s: float

    @property
    def rejected(self) -> list[FlagVerdict]:
        """The command lines vLLM refused."""
        return [v for v in self.verdicts if not v.ok]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: vllm, verdicts, elapsed_s."""
        return {"vllm": self.vllm.to_dict(), "verdicts": [v.to_dict() for v in self.verdicts],
                "elapsed_s": round(self.elapsed_s, 3)}


def verdict_of(argv: tuple[str, ...], answer: FlagVerdict | OpFailed) -> FlagVerdict:
    """The worker's answer to parsing ``argv``; a parse that crashed there is a rejection with its error."""
    if isinstance(answer, OpFailed):
        return FlagVerdict(argv=argv, ok=False, error=answer.error)
    return answer


def ensure_accepted(validation: FlagValidation, *, what: str = "the command line") -> FlagValidation:
    """Return ``validation`` when vLLM accepted every line.

    :raises FlagsRejectedByVllm: naming vLLM's own message for the first rejected line.
    """
    rejected = validation.rejected
    if rejected:
        first = rejected[0]
        raise FlagsRejectedByVllm(
            f"{validation.vllm.label()} rejected {what} `vllm serve {' '.join(first.argv)}`: "
            f"{first.error}; fix that flag (see `vllm serve --help`)"
        )
    return validation
