"""recommend / explain answer exactly as they did before the selector was redesigned.

tests/fixtures/golden/recommend_golden.json was written by make_recommend_golden.py (beside it)
before the first move; a change of any answer must be deliberate: regenerate it and say why.
"""

from __future__ import annotations

import json

import pytest

from support.paths import FIXTURES, load_script

GOLDEN_DIR = FIXTURES / "golden"


def _maker():
    return load_script(GOLDEN_DIR / "make_recommend_golden.py")


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    return _maker().run_all()


def test_recommend_answers_on_the_shipped_examples_are_unchanged(answers, monkeypatch):
    saved = json.loads((GOLDEN_DIR / "recommend_golden.json").read_text())
    assert [a["argv"] for a in answers] == [s["argv"] for s in saved]
    changed = [" ".join(a["argv"]) for a, s in zip(answers, saved) if a != s]
    assert not changed, f"{len(changed)} answers changed, first: {changed[0]}"
