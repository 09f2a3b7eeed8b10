"""The corpus of published `vllm serve` lines (tests/fixtures/published_lines/), as check and launch read it."""

from __future__ import annotations

import json
import re

from support.paths import FIXTURES

MODELS = FIXTURES / "models"
#: Every entry of lines.json (its SOURCES.md says what each field is).
CORPUS = json.loads((FIXTURES / "published_lines" / "lines.json").read_text())["lines"]


def expand(line: str, shell: dict) -> str:
    """``line`` after the shell substituted ``shell``'s values (``$((...))`` keys first, longest names first)."""
    for key in sorted((k for k in shell if k.startswith("$")), key=len, reverse=True):
        line = line.replace(key, shell[key])
    for name in sorted((k for k in shell if not k.startswith("$")), key=len, reverse=True):
        line = re.sub(rf"\$\{{{name}\}}|\${name}(?![A-Za-z0-9_])", lambda _: shell[name], line)  # noqa: B023
    return line


def command(entry: dict, *, expanded: bool = True) -> str:
    line = expand(entry["line"], entry.get("shell", {})) if expanded else entry["line"]
    model = entry["model"] if expanded or "MODEL" not in entry.get("shell", {}) else "$MODEL"
    return line.replace(model, str(MODELS / entry["fixture"]))
