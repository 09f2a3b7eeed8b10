"""Verdict words have one meaning: one table (autoselect.selector.wording.VERDICTS), and every command
that shows a verdict uses its words: recommend's text and JSON, explain, the report and launch.

The words are judged from the numbers alone (``relate``): ``faster`` / ``slower`` when the bands do
not overlap, ``tie`` when each central value lies within the other's band, ``not separable`` when
the bands overlap and the central values lie apart, always with the central ratio beside it.
"""

from __future__ import annotations

import html
import json
import re

import pytest
from click.testing import CliRunner

from support.paths import FIXTURES, REPO

from autoselect.cli import main
from autoselect.launch import LaunchOptions, plan_launch
from autoselect.report.data import collect
from autoselect.report.html import render_html
from autoselect.selector import recommend_for, render_text
from autoselect.selector.answer import Candidate
from autoselect.selector.wording import NOT_SEPARABLE, RELATIONS, SHOWN, TIE, VERDICTS, relate

MODELS = FIXTURES / "models"
GOLDEN = REPO / "tests" / "fixtures" / "golden" / "recommend_golden.json"
WORDS = {v.word for v in VERDICTS}
#: What no answer says of two backends the data cannot separate (issue words of the old answers).
NEVER = ("tie within the noise", "tied within the noise")


def cand(latency, halfwidth, bound=False):
    return Candidate(backend="x", status="measured", weighted_us=latency, halfwidth_us=halfwidth, buckets=[],
                     fit=None, bound=bound)


@pytest.mark.parametrize("a, b, word", [
    ((40.0, 1.0), (60.0, 2.0), "faster"),
    ((80.0, 1.0), (60.0, 2.0), "slower"),
    ((60.5, 1.0), (60.0, 2.0), "tie"),  # each central value within the other's band
    ((61.5, 1.0), (60.0, 2.0), "not separable"),  # the bands overlap, 61.5 is outside the narrower band
    # the reference answer that used to say "tie within the noise": 1.82x, the bands touch
    ((109.3, 34.5), (60.1, 19.3), "not separable"),
])
def test_a_verdict_is_the_numbers_word_and_carries_the_central_ratio(a, b, word):
    rel = relate(cand(*a), cand(*b))
    assert rel.word == word and rel.ratio == pytest.approx(a[0] / b[0])


def test_above_a_lower_bound_a_backend_is_undecided_below_it_faster():
    bound = cand(100.0, 1.0, bound=True)
    assert relate(cand(50.0, 1.0), bound).word == "faster"
    assert relate(cand(99.5, 1.0), bound).word == "undecided"
    assert relate(cand(300.0, 1.0), bound).word == "undecided"


def _check_answer(doc: dict, where: str) -> None:
    """Every verdict of one recommend JSON document is a word of the table, with its ratio."""
    for c in doc["candidates"]:
        assert c["status"] in WORDS, f"{where}: {c['backend']} says {c['status']!r}"
        if c["status"] in RELATIONS:
            assert "ratio_to_default" in c, f"{where}: {c['backend']} {c['status']} without its ratio"
    assert {r["kind"] for r in doc["rejected"]} <= WORDS
    comparison = doc["comparison"]
    assert comparison["verdict"] in WORDS | {None}
    if comparison["verdict"] is not None:
        assert comparison["ratio"] is not None
    assert not any(phrase in doc["decision"] for phrase in NEVER), doc["decision"]
    if comparison["verdict"] in (NOT_SEPARABLE, TIE):
        assert "beyond the noise" not in doc["decision"], doc["decision"]


def _check_text(text: str, where: str) -> None:
    """The candidates table's verdict column holds only the table's words."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("candidate ")), None)
    if start is None:
        return
    header = lines[start]
    verdict, ratio = header.index("verdict"), header.index("x default")
    for row in lines[start + 1:]:
        if not row or row.startswith(("(", " ")) or ":" in row[:verdict]:
            break
        said = row[verdict:ratio].strip()
        assert said in SHOWN.values(), f"{where}: {said!r}"
    assert not any(phrase in text for phrase in NEVER)


def test_every_golden_answer_uses_the_tables_words():
    answers = json.loads(GOLDEN.read_text())
    checked = 0
    for case in answers:
        if case["exit_code"] != 0:
            continue
        if "json" in case["argv"]:
            _check_answer(json.loads(case["stdout"]), " ".join(case["argv"]))
        else:
            _check_text(case["stdout"], " ".join(case["argv"]))
        checked += 1
    assert checked > 150


def test_a_kept_default_says_why_when_a_backend_is_faster_by_the_bands():
    # a derived default stays when the tie rule holds a candidate whose band clears the default's: the
    # candidate's word is 'faster' (the numbers), so the decision names the rule, never "every other is slower"
    held = 0
    for case in json.loads(GOLDEN.read_text()):
        if case["exit_code"] != 0 or "json" not in case["argv"]:
            continue
        doc = json.loads(case["stdout"])
        if doc["comparison"]["rule"] != "default stays":
            continue
        faster = sorted((c for c in doc["candidates"] if c["status"] == "faster"), key=lambda c: c["weighted_us"])
        if faster:
            held += 1
            assert doc["decision"].startswith(f"vLLM's default stays: {faster[0]['backend']} is faster by the bands (")
            assert "by the tie rule (bands-1-0.85)" in doc["decision"]
        assert "every other backend with a number is slower" not in doc["decision"] or not faster
    assert held >= 1


# the reference classes, where derived, transferred and lower-bound numbers meet the tie rule
REFERENCE_CASES = [
    ("deepseek-v3", "ref-h200_sxm-x8", {"workload": "decode"}),
    ("deepseek-v3", "ref-h200_sxm-x8", {"workload": "prefill"}),
    ("kimi-k2", "ref-h200_sxm-x8", {"workload": "mixed"}),
    ("deepseek-r1-nvfp4", "ref-b200_sxm-x8", {"tokens": "128"}),
    ("qwen3-30b-a3b", "ref-b200_sxm-x8", {"workload": "decode"}),
    ("deepseek-r1-nvfp4", "ref-gb200-x4", {"workload": "decode"}),
    ("deepseek-r1-nvfp4", "ref-gb200-nvl72", {"world_size": 16, "tokens": "4096:1"}),
    ("deepseek-r1-nvfp4", "ref-gb200-nvl72", {"world_size": 16, "workload": "decode"}),
    ("gpt-oss-120b", "ref-h100_sxm-x8", {"workload": "mixed"}),
]


@pytest.mark.parametrize("model, host_class, kw", REFERENCE_CASES, ids=lambda x: x if isinstance(x, str) else "")
def test_recommend_and_explain_on_the_reference_classes_use_the_tables_words(model, host_class, kw, tmp_path):
    rec = recommend_for(str(MODELS / model), host_class=host_class, db_path=tmp_path / "none.db", **kw)
    _check_answer(json.loads(json.dumps(rec.to_dict())), f"{model} {host_class}")
    _check_text(render_text(rec, explain=True), f"{model} {host_class}")


def test_the_report_shows_the_answers_words(tmp_path):
    data = collect(str(MODELS / "deepseek-v3"), host_class="ref-h200_sxm-x8", db_path=tmp_path / "none.db",
                   workload="decode")
    page = render_html(data, {})
    table = page.split("<h2>Candidates</h2>", 1)[1].split("</table>", 1)[0]
    said = re.findall(r"<tr[^>]*><td>([a-z0-9_]+)</td><td>([^<]*)</td>", table)
    assert said and {word for _, word in said} <= WORDS
    assert ("deepep_low_latency", "tie") in said
    assert f"Decision: {html.escape(data.recommendation['decision'])}." in page


def test_launch_says_the_answers_decision_in_its_words(tmp_path):
    line = ["vllm", "serve", str(MODELS / "deepseek-v3"), "-dp", "8", "--enable-expert-parallel"]
    plan = plan_launch(line, LaunchOptions(host_class="ref-h200_sxm-x8", workload="decode",
                                           db_path=tmp_path / "none.db"))
    decision = plan.pick.answer["decision"]
    assert decision.startswith("vLLM's default stays: deepep_low_latency ties with it (0.95x")
    assert decision in plan.why and not any(phrase in plan.why for phrase in NEVER)
    _check_answer(plan.pick.answer, "launch")


def test_the_cli_text_and_json_agree_word_for_word(tmp_path):
    args = ["recommend", "--model", str(MODELS / "deepseek-v3"), "--host-class", "ref-h200_sxm-x8", "--workload",
            "decode", "--db", str(tmp_path / "none.db")]
    text = CliRunner().invoke(main, args).stdout
    doc = json.loads(CliRunner().invoke(main, [*args, "--format", "json"]).stdout)
    for c in doc["candidates"]:
        row = next(line for line in text.splitlines() if line.startswith(c["backend"] + " "))
        assert f" {SHOWN[c['status']]} " in row
        if "ratio_to_default" in c:
            assert f" {c['ratio_to_default']:.2f}x " in row
    assert f"backend     {doc['backend']}  ({doc['decision']})" in text


def test_a_buckets_source_and_evidence_never_contradict(tmp_path):
    # source says how the value relates to the points (a point, interpolated, ...); evidence says of what kind
    from autoselect.selector.answer import BUCKET_SOURCES, EVIDENCE_KINDS

    for model, host_class, kw in REFERENCE_CASES:
        doc = recommend_for(str(MODELS / model), host_class=host_class, db_path=tmp_path / "none.db", **kw).to_dict()
        for c in doc["candidates"]:
            for b in c["buckets"]:
                assert b["source"] in BUCKET_SOURCES and b.get("evidence", "measured") in EVIDENCE_KINDS
                assert b["source"] not in EVIDENCE_KINDS
    derived = recommend_for(str(MODELS / "deepseek-v3"), host_class="ref-h200_sxm-x8", workload="decode",
                            db_path=tmp_path / "none.db").to_dict()["candidates"][0]["buckets"][0]
    assert (derived["source"], derived["evidence"]) == ("point", "derived")


def test_a_close_call_is_said_with_the_tables_word_and_ratio():
    from autoselect.selector.decide import decide
    from autoselect.selector.wording import assign, close_call

    def named(backend, latency, halfwidth):
        c = cand(latency, halfwidth)
        c.backend, c.fit = backend, object()  # measured: it has a latency model
        return c

    default = named("allgather_reducescatter", 100.0, 1.0)
    one, two = named("flashinfer_nvlink_one_sided", 50.0, 1.0), named("flashinfer_nvlink_two_sided", 50.5, 1.0)
    decision = decide([default, one, two])
    assign(decision, [default, one, two])
    assert (decision.pick.backend, one.status, two.status) == ("flashinfer_nvlink_one_sided", "pick", "faster")
    assert close_call(decision) == ("flashinfer_nvlink_one_sided is not separated from flashinfer_nvlink_two_sided "
                                    "(tie, 1.01x the pick's central value): flashinfer_nvlink_one_sided is the "
                                    "fastest of them")
    # both need flashinfer-python: among equals the faster is kept, and the tie says why (selector/decide.py)
    assert decision.tie is not None and decision.tie.kept == "flashinfer_nvlink_one_sided"


def test_every_rule_of_the_decision_has_its_words():
    # a new rule in decide.RULES without a sentence here fails, rather than borrowing another rule's words
    from autoselect.selector.decide import RULES, Decision
    from autoselect.selector.wording import decision_sentence

    default, other = cand(100.0, 1.0), cand(50.0, 1.0)
    default.backend, other.backend = "allgather_reducescatter", "deepep_low_latency"
    for rule in RULES:
        pick = default if rule in ("single", "uncompared", "bound only", "default stays") else other
        said = decision_sentence(Decision(pick, default, other, rule, single=rule == "single", compared=True,
                                          tie_rule="margin-1.2"), [default, other], "0.34.0")
        assert said and not any(phrase in said for phrase in NEVER)
    with pytest.raises(ValueError, match="no words for the decision rule 'new rule'"):
        decision_sentence(Decision(default, default, None, "new rule", single=False, compared=True), [default],
                          "0.34.0")
