"""docs/check.md's per-release tables are the rules tables, rendered (scripts/gen_check_facts.py)."""

from __future__ import annotations

import difflib

import pytest

from support.paths import REPO, load_script

ROOT = REPO


def _generator():
    return load_script(ROOT / "scripts" / "gen_check_facts.py")


def test_the_per_release_facts_of_docs_check_md_are_the_rules_tables():
    gen = _generator()
    current, expected = gen.current(), gen.render()
    if current != expected:
        diff = "".join(list(difflib.unified_diff(current.splitlines(True), expected.splitlines(True),
                                                 "docs/check.md", "the rules tables"))[:40])
        pytest.fail(f"docs/check.md's facts are out of date with autoselect/rules/; regenerate them with "
                    f"`{gen.REGENERATE}` and commit.\n{diff}", pytrace=False)


def test_every_rules_table_row_is_in_the_page():
    from autoselect import rules

    block = _generator().current()
    for report in rules.UPSTREAM_REPORTS:
        assert f"| {report.ref} |" in block
    for option in rules.SERVE_OPTIONS:
        assert f"| `{option}` |" in block
    assert block.count("\n| ") - block.count("\n|---") >= (
        len(rules.SELECTION_ERAS) + len(rules.DISPATCH_BUDGETS) + len(rules.EPLB_RULES) + len(rules.SERVE_OPTIONS)
        + len(rules.DBO_SUPPORT) + len(rules.UPSTREAM_REPORTS) + len(rules.ONE_SIDED_ERAS))
