"""A sentence that carries a verdict, and the same with its sources.

Every refusal, warning and reason says its verdict first, in one sentence; the sources behind it
(pull requests, dates, file lines) follow where the reader asks for them: ``--explain``,
``explain`` and the JSON. A rule with more to say than one sentence returns a :class:`Sentence`;
a plain ``str`` is its own detail.
"""

from __future__ import annotations

from typing import NamedTuple


class Sentence(NamedTuple):
    """``text``: the verdict in one sentence; ``detail``: the same, with its sources."""

    text: str
    detail: str


def text_of(said: "str | Sentence") -> str:
    """The one sentence of ``said``."""
    return said.text if isinstance(said, Sentence) else said


def detail_of(said: "str | Sentence") -> str:
    """``said`` with its sources (a plain ``str`` is its own detail)."""
    return said.detail if isinstance(said, Sentence) else said
