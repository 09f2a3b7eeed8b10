"""`check` on the expert-parallel `vllm serve` lines others published (tests/fixtures/published_lines/).

Every entry records the line, its source, the outcome the source reports and the verdict check
must give; where check disagrees with the source on purpose (the one-sided policy) the entry says
why. Models are the closest shipped config fixture (no download); shell variables take the values
the publisher's own script gives them.
"""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from support.paths import FIXTURES
from support.published_lines import CORPUS, command, expand

from autoselect.check import check_serve_command
from autoselect.cli import main

MODELS = FIXTURES / "models"
AGREEMENTS = ("agrees", "disagrees-on-purpose", "no-outcome-reported")
OUTCOMES = ("worked", "accuracy-drop", "gibberish", "crash", "not-reported")
FAILURES = ("accuracy-drop", "gibberish", "crash")


def run(entry: dict, version: str | None = None):
    return check_serve_command([command(entry)], gpu_arch=entry["gpu_arch"], vllm_version=version or entry["vllm_version"],
                               environ=dict(entry.get("env", {})), role=entry.get("role"))


def _codes(report, severity):
    return {f.code for f in report.findings if f.severity == severity}


def _reports(report):
    return {ref for f in report.findings if f.code == "upstream-report" for ref in re.findall(r"#\d+", f.message[:40])}


@pytest.mark.parametrize("entry", CORPUS, ids=lambda e: e["id"])
def test_check_gives_each_published_line_its_recorded_verdict(entry):
    expect = entry["expect"]
    r = run(entry)
    assert (r.exit_code, r.backend, r.backend_origin) == (expect["exit"], expect["backend"], expect["origin"]), \
        [f"{f.severity} {f.code}: {f.message[:160]}" for f in r.findings]
    assert _codes(r, "error") == set(expect["errors"])
    assert set(expect["warnings"]) <= _codes(r, "warning")
    assert set(expect.get("reports", ())) <= _reports(r)
    assert not set(expect.get("absent_reports", ())) & _reports(r)
    if "message" in expect:
        assert any(expect["message"] in (f.detail or f.message) for f in r.findings if f.severity == "error")
    for extra in entry.get("extra", ()):
        other = run(entry, extra["vllm_version"])
        assert other.exit_code == extra["exit"]
        assert not set(extra.get("absent_reports", ())) & _reports(other)


@pytest.mark.parametrize("entry", CORPUS, ids=lambda e: e["id"])
def test_the_verdict_agrees_with_the_reported_outcome_or_says_why_not(entry):
    expect, outcome, agreement = entry["expect"], entry["outcome"], entry["agreement"]
    if agreement == "agrees":
        if outcome in FAILURES:  # check must warn or refuse: a named upstream report, or an error
            assert expect["exit"] == 1 or expect.get("reports"), entry["id"]
        else:
            assert expect["exit"] == 0, entry["id"]
    elif agreement == "disagrees-on-purpose":
        assert outcome == "worked" and expect["exit"] == 1
        assert entry["why"].startswith(("one-sided policy", "check judges releases"))
    else:
        assert outcome == "not-reported" and expect["exit"] == 1  # the example itself cannot run


@pytest.mark.parametrize("entry", CORPUS, ids=lambda e: e["id"])
def test_the_line_as_published_never_crashes_check(entry):
    argv = ["check", "--gpu-arch", entry["gpu_arch"], "--vllm-version", entry["vllm_version"], "--",
            command(entry, expanded=False)]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code in (0, 1, 2), result.output
    assert "Traceback" not in result.output
    if result.exit_code == 2:
        assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1


def test_the_corpus_is_complete_and_sourced():
    assert len(CORPUS) >= 20
    assert len({e["id"] for e in CORPUS}) == len(CORPUS)
    for e in CORPUS:
        assert e["source"].startswith("https://github.com/") and re.match(r"^\d{4}-\d{2}-\d{2}$", e["date"]), e["id"]
        assert (MODELS / e["fixture"] / "config.json").exists(), e["id"]
        assert e["outcome"] in OUTCOMES and e["outcome_text"] and e["agreement"] in AGREEMENTS and e["why"], e["id"]
        assert e["model"] in expand(e["line"], e.get("shell", {})), e["id"]
        if not e["line_complete"]:
            assert e["completion_note"], e["id"]
    sources = {e["source"].split("/blob/")[0].split("/pull/")[0].split("/issues/")[0] for e in CORPUS}
    assert {"https://github.com/vllm-project/vllm", "https://github.com/vllm-project/recipes"} <= sources
