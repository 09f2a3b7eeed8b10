"""The pages that mirror code stay true to it: docs/json.md documents the recommend JSON exactly as
autoselect/selector/answer.py writes it, docs/recommend.md's confidence table is CONFIDENCE_CAPS and
its verdict table the wording table VERDICTS, every module path the docs name exists, and no file
carries tracker tags or outside paths.

Each `## `Class`` section's table lists that object's keys in the order they are written, and
its "written" column says when each key is present (always / when not null / when not measured,
from the field's metadata). The dataclasses reachable from Recommendation and the documented
sections are the same set, and every key of the saved golden answers is documented where it
appears.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from pathlib import Path

import pytest

from support.paths import REPO

from autoselect.rules import StepConsequence, TokenBudget
from autoselect.selector import answer as answer_json
from autoselect.workload import Deployment, WorkloadSpec

ROOT = REPO
PAGE = (ROOT / "docs" / "json.md").read_text()
GOLDEN = ROOT / "tests" / "fixtures" / "golden" / "recommend_golden.json"

#: Vocabulary types that write themselves (their keys are not their fields): one instance each.
SAMPLES = {Deployment: Deployment(dp=2, tp=1), WorkloadSpec: WorkloadSpec("decode", ((8, 1.0),)),
           TokenBudget: TokenBudget(8192, "vLLM's default", "", ""),
           StepConsequence: StepConsequence("deepep_low_latency", "step_budget", "", "")}


def _documented() -> dict[str, list[tuple[str, str]]]:
    """Class name -> [(key, written)] of every `## `Class`` section's table, in order."""
    out = {}
    for m in re.finditer(r"^## `(\w+)`.*?\n(.*?)(?=^## |\Z)", PAGE, flags=re.S | re.M):
        rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \|", m.group(2), flags=re.M)
        out[m.group(1)] = [(key, written.strip()) for key, written in rows]
    return out


def _children(cls) -> dict[str, type]:
    """Field name -> the documented class its value holds (through list, tuple, | None)."""
    if cls in SAMPLES:
        return {}
    out = {}
    for name, hint in typing.get_type_hints(cls).items():
        if typing.get_origin(hint) is typing.ClassVar:
            continue
        stack = [hint]
        while stack:
            h = stack.pop()
            args = typing.get_args(h)
            if args and (typing.get_origin(h) in (list, tuple, typing.Union) or isinstance(h, types.UnionType)):
                stack.extend(a for a in args if a is not Ellipsis)
            elif isinstance(h, type) and (dataclasses.is_dataclass(h) or h in SAMPLES):
                out[name] = h
    return out


def _reachable() -> dict[str, type]:
    seen, todo = {}, [answer_json.Recommendation]
    while todo:
        cls = todo.pop()
        if cls.__name__ not in seen:
            seen[cls.__name__] = cls
            todo.extend(_children(cls).values())
    return seen


def _keys(cls) -> list[tuple[str, str]]:
    """(key, written) as the code writes them."""
    if cls in SAMPLES:
        return [(key, "always") for key in SAMPLES[cls].to_dict()]
    out = []
    for f in dataclasses.fields(cls):
        if f.metadata.get("omit_none"):
            out.append((f.name, "when not null"))
        elif f.metadata.get("omit_default"):
            out.append((f.name, f"when not `{f.default}`"))
        else:
            out.append((f.name, "always"))
    return out


def test_every_object_of_the_json_has_a_section_and_nothing_else_does():
    assert set(_documented()) == set(_reachable())


@pytest.mark.parametrize("name", sorted(_reachable()))
def test_each_section_lists_the_keys_in_order_and_when_they_are_written(name):
    assert _documented()[name] == _keys(_reachable()[name])


def test_the_page_states_the_schema_version_and_the_evidence_words():
    assert f"`schema_version` {answer_json.SCHEMA_VERSION})" in PAGE.splitlines()[0]
    for kind in answer_json.EVIDENCE_KINDS:
        assert f"`{kind}`" in PAGE


def _golden_answers():
    for case in json.loads(GOLDEN.read_text()):
        if "json" in case["argv"] and case["exit_code"] == 0:
            yield json.loads(case["stdout"])


def _walk(obj: dict, cls, where: str, problems: list[str]) -> None:
    documented = [key for key, _ in _documented()[cls.__name__]]
    keys = list(obj)
    if [k for k in documented if k in keys] != keys:
        problems.append(f"{where}: keys {keys} not in the documented order {documented}")
    for key, child in _children(cls).items():
        value = obj.get(key)
        for i, item in enumerate(value if isinstance(value, list) else [value]):
            if isinstance(item, dict):
                _walk(item, child, f"{where}.{key}[{i}]" if isinstance(value, list) else f"{where}.{key}", problems)


def test_every_key_of_the_golden_answers_is_documented_where_it_appears():
    answers = list(_golden_answers())
    assert len(answers) > 20
    problems: list[str] = []
    for answer in answers:
        _walk(answer, answer_json.Recommendation, "recommendation", problems)
    assert not problems, "\n".join(problems[:10])
    # the optional objects are exercised too: the reference answers carry `reference` and `evidence`
    assert any("reference" in a for a in answers)
    assert any("evidence" in c for a in answers for c in a["candidates"])


def test_the_confidence_table_of_docs_recommend_is_the_rules_table():
    from autoselect.selector.confidence import CONFIDENCE_CAPS, CONFIDENCE_LEVELS

    page = (ROOT / "docs" / "recommend.md").read_text()
    section = page.split("\n## Confidence\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| (.+) \| (\w+) \|$", section, flags=re.M)
    assert rows == [(c.name, c.text, c.cap) for c in CONFIDENCE_CAPS]
    assert ", ".join(f"`{level}`" for level in CONFIDENCE_LEVELS) in section


def test_every_path_the_docs_name_exists():
    """A module path (autoselect/, bench/, db/, deploy/, scripts/, perf/, tests/) in a code span of README.md
    or a page under docs/ names a file or folder of the repository: internals.md is a map of module
    paths, and a move must update it."""
    pages = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
    missing = []
    for page in pages:
        if page.name == "cli-reference.md":
            continue
        for span in re.findall(r"`([^`\s]+)`", page.read_text()):
            path = span.split("::")[0].rstrip(",.")
            if re.fullmatch(r"(autoselect|bench|db|deploy|scripts|perf|tests)/[\w./-]*", path) and "*" not in path:
                if not (ROOT / path).exists():
                    missing.append(f"{page.name}: {path}")
    assert not missing, "the docs name paths that do not exist:\n" + "\n".join(missing)


#: What comments and docs must not carry: tracker tags instead of a reason, and paths outside the
#: repository (a reader of a clone has neither). Upstream numbers ("vLLM PR #39717") are sources.
_FORBIDDEN = re.compile(r"\(issues? [0-9]+|\.\./shared|/work/|docs/facts\.md|DESIGN\.md")


def test_no_tracker_tags_or_paths_outside_the_repository():
    roots = ["autoselect", "bench", "db", "deploy", "scripts", "perf", "docs", "tests", ".ci"]
    files = [ROOT / "README.md", ROOT / "pyproject.toml", ROOT / "Dockerfile"]
    for root in roots:
        files += [p for p in (ROOT / root).rglob("*") if p.is_file() and p.suffix in (".py", ".md", ".sh", ".toml", "")]
    found = []
    for path in files:
        rel = path.relative_to(ROOT)
        if rel.parts[:2] == ("tests", "fixtures") or path == Path(__file__) or "__pycache__" in rel.parts:
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        found += [f"{rel}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1) if _FORBIDDEN.search(line)]
    assert not found, "say why instead of which issue asked, and cite sources inside the repository:\n" + "\n".join(found)


def test_the_verdict_table_of_docs_recommend_is_the_wording_table():
    from autoselect.selector.wording import VERDICTS

    page = (ROOT / "docs" / "recommend.md").read_text()
    section = page.split("\n## Verdict words\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| (.+) \|$", section, flags=re.M)
    assert rows == [(v.shown, v.meaning) for v in VERDICTS]
