"""The shared grammars (integer lists, weighted token lists, durations) and the stopping rule."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from autoselect.cli import main
from autoselect.options import (
    MAX_INT,
    MAX_TOKENS_PER_RANK,
    BadDuration,
    BadList,
    BadRunRef,
    RunRef,
    parse_duration,
    parse_int_list,
    parse_run_ref,
    parse_weighted_tokens,
)
from autoselect.stopping import STOPPING, BadStoppingRule, StoppingRule

# --- integer lists -------------------------------------------------------------------


def test_an_integer_list_keeps_order_and_repeats_and_strips_spaces():
    assert parse_int_list("1,16,256") == [1, 16, 256]
    assert parse_int_list(" 64, 1 ,64") == [64, 1, 64]
    assert parse_int_list(str(MAX_TOKENS_PER_RANK)) == [MAX_TOKENS_PER_RANK]
    assert parse_int_list(str(MAX_INT), maximum=MAX_INT) == [MAX_INT]


@pytest.mark.parametrize("text, message", [
    ("", "--tokens '' is empty; pass e.g. 1,16,256"),
    ("   ", "--tokens '   ' is empty; pass e.g. 1,16,256"),
    ("1,,2", "--tokens '1,,2' has an empty item; separate the values by single commas, e.g. 1,16,256"),
    ("1,2,", "--tokens '1,2,' has an empty item; separate the values by single commas, e.g. 1,16,256"),
    ("+1", "--tokens item '+1' is not a whole number written in digits 0-9; e.g. 1,16,256"),
    ("-1", "--tokens item '-1' is not a whole number written in digits 0-9; e.g. 1,16,256"),
    ("١٦", "--tokens item '١٦' is not a whole number written in digits 0-9; e.g. 1,16,256"),  # Arabic-Indic
    ("１６", "--tokens item '１６' is not a whole number written in digits 0-9; e.g. 1,16,256"),  # full width
    ("1_000", "--tokens item '1_000' is not a whole number written in digits 0-9; e.g. 1,16,256"),
    ("1e3", "--tokens item '1e3' is not a whole number written in digits 0-9; e.g. 1,16,256"),
    ("1.0", "--tokens item '1.0' is not a whole number written in digits 0-9; e.g. 1,16,256"),
    ("0", "--tokens item '0': token counts per rank must be at least 1"),
    ("99999999999999999999", "--tokens item '99999999999999999999': token counts per rank must be at most 16777216"),
    ("9" * 5000, f"--tokens item '{'9' * 5000}': token counts per rank must be at most 16777216"),
    ("16777217", "--tokens item '16777217': token counts per rank must be at most 16777216"),
])
def test_an_integer_list_refuses_what_is_meaningless(text, message):
    with pytest.raises(BadList) as e:
        parse_int_list(text)
    assert str(e.value) == message


def test_an_integer_list_names_its_option_and_range():
    with pytest.raises(BadList, match=r"^--gpus item '9': GPU indices must be at most 7$"):
        parse_int_list("1,9", what="--gpus", noun="GPU indices", minimum=0, maximum=7)
    assert parse_int_list("0,7", what="--gpus", minimum=0, maximum=7) == [0, 7]


# --- weighted token lists ------------------------------------------------------------


def test_weighted_tokens_keep_the_given_weights_and_drop_zero_weights():
    assert parse_weighted_tokens("1:0.5,64:0.3,8192:0.2") == [(1, 0.5), (64, 0.3), (8192, 0.2)]
    assert parse_weighted_tokens("8, 64") == [(8, 1.0), (64, 1.0)]
    assert parse_weighted_tokens("1:0,2:.5,4:3,8:1e-3") == [(2, 0.5), (4, 3.0), (8, 0.001)]
    assert parse_weighted_tokens(" 8 : 0.7 , 64 : 0.3 ") == [(8, 0.7), (64, 0.3)]


@pytest.mark.parametrize("text, message", [
    ("", "--tokens '' is empty; pass e.g. 1,64,8192 or 1:0.5,64:0.5"),
    ("1:0.5,,64:0.5", "--tokens '1:0.5,,64:0.5' has an empty item"),
    ("1:0.5,64", "--tokens '1:0.5,64' mixes weighted and unweighted items; give every item a weight"),
    ("0", "--tokens item '0': token counts per rank must be at least 1"),
    ("0:1", "--tokens item '0:1': token counts per rank must be at least 1"),
    ("1:nan", "--tokens item '1:nan' is not TOKENS or TOKENS:WEIGHT"),
    ("1:inf", "--tokens item '1:inf' is not TOKENS or TOKENS:WEIGHT"),
    ("1:-1", "--tokens item '1:-1' is not TOKENS or TOKENS:WEIGHT"),
    ("1:", "--tokens item '1:' is not TOKENS or TOKENS:WEIGHT"),
    ("1:2:3", "--tokens item '1:2:3' is not TOKENS or TOKENS:WEIGHT"),
    ("٨:1", "--tokens item '٨:1' is not TOKENS or TOKENS:WEIGHT"),
    ("1:1e999", "--tokens item '1:1e999': weights must be finite and non-negative"),
    ("99999999999999999999:1", "--tokens item '99999999999999999999:1': token counts per rank must be at most"),
    ("1:0,2:0", "--tokens '1:0,2:0': the weights sum to zero; give some bucket a weight"),
])
def test_weighted_tokens_refuse_what_is_meaningless(text, message):
    with pytest.raises(BadList) as e:
        parse_weighted_tokens(text)
    assert str(e.value).startswith(message)


# --- durations -----------------------------------------------------------------------


@pytest.mark.parametrize("text, seconds", [
    ("90", 90), ("90s", 90), ("15m", 900), ("1h30m", 5400), ("7d", 604800), ("2d12h", 216000),
    ("1.5h", 5400), (".5m", 30), ("1d2h3m4s", 93784), ("1H30M", 5400), (" 10m ", 600),
])
def test_a_duration_is_seconds_or_unit_groups_longest_first(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text, problem", [
    ("0", "must be longer than zero"), ("0s", "must be longer than zero"), ("0h0m", "must be longer than zero"),
    ("-1s", "is not a duration"), ("-5", "is not a duration"), ("nan", "is not a duration"),
    ("inf", "is not a duration"), ("", "is not a duration"), ("5x", "is not a duration"),
    ("30m1h", "is not a duration"), ("1h1h", "is not a duration"), ("1h 30m", "is not a duration"),
    ("m10", "is not a duration"), ("1w", "is not a duration"), ("٥m", "is not a duration"),
    ("400d", "is longer than 365 days"), ("99999999999999999999d", "is longer than 365 days"),
])
def test_a_duration_refuses_what_is_meaningless(text, problem):
    with pytest.raises(BadDuration) as e:
        parse_duration(text, what="--budget")
    assert str(e.value).startswith(f"--budget {text!r} {problem}")


def test_zero_is_a_duration_only_where_the_option_allows_it():
    assert parse_duration("0s", what="--jitter", allow_zero=True) == 0


# --- the stopping rule ---------------------------------------------------------------


def test_the_stopping_defaults_are_ten_samples_half_a_second_half_a_percent_fifteen_seconds():
    assert STOPPING.to_dict() == {"max_noise": 0.005, "min_samples": 10, "min_time_s": 0.5, "timeout_s": 15.0}


@pytest.mark.parametrize("rule, message", [
    (StoppingRule(max_noise=0), "--max-noise must be a fraction in (0, 1), got 0"),
    (StoppingRule(max_noise=float("nan")), "--max-noise must be a fraction in (0, 1), got nan"),
    (StoppingRule(min_samples=0), "--min-samples must be a whole number of at least 1, got 0"),
    (StoppingRule(min_time_s=-1), "--min-time must be 0 or more seconds, got -1"),
    (StoppingRule(timeout_s=0), "--timeout must be a positive number of seconds, got 0"),
    (StoppingRule(timeout_s=float("inf")), "--timeout must be a positive number of seconds, got inf"),
])
def test_a_stopping_rule_that_cannot_stop_is_refused(rule, message):
    with pytest.raises(BadStoppingRule) as e:
        rule.validate()
    assert str(e.value) == message


@pytest.mark.parametrize("command", [["bench"], ["fleet", "run"], ["fleet", "schedule"]])
def test_every_command_with_a_stopping_rule_shows_the_same_defaults(command):
    help_text = " ".join(CliRunner().invoke(main, [*command, "--help"]).output.split())
    for option, value in (("--max-noise", "0.005"), ("--min-samples", "10"), ("--min-time", "0.5"),
                          ("--timeout", "15.0")):
        assert f"{option} " in help_text and f"[default: {value}]" in help_text.split(f"{option} ", 1)[1][:300]


def test_tune_budget_takes_days_and_hour_minute_groups(tmp_path):
    from autoselect.tune import prepare

    for budget, seconds in (("7d", 604800.0), ("1h30m", 5400.0)):
        spec, _ = prepare("shape:256x8x2:bf16", db_path=tmp_path / "r.db", device="cpu", world_size=2,
                          budget=budget, backends=["allgather_reducescatter"], search_knobs=False)
        assert spec.budget_s == seconds
    with pytest.raises(BadDuration, match=r"^--budget '0s' must be longer than zero"):
        prepare("shape:256x8x2:bf16", db_path=tmp_path / "r.db", device="cpu", budget="0s")


# --- run references (db drop-run RUN) --------------------------------------------------------


@pytest.mark.parametrize("text, ref", [
    ("12", RunRef("12", 12)),
    ("1", RunRef("1", 1)),
    ("0012", RunRef("0012")),  # no run id is shown with leading zeros: only a uid can be this
    ("9f2c1e0a5b7d4c3e8a1b2c3d4e5f6a7b", RunRef("9f2c1e0a5b7d4c3e8a1b2c3d4e5f6a7b")),
    ("1" * 19, RunRef("1" * 19)),  # beyond any SQLite id: a uid
    ("run-é", RunRef("run-é")),
])
def test_a_run_reference_is_an_id_as_shown_or_a_uid(text, ref):
    assert parse_run_ref(text) == ref


@pytest.mark.parametrize("text, problem", [
    ("", "is empty"), (" 12", "holds blanks"), ("12 ", "holds blanks"), ("1 2", "holds blanks"),
    ("12\n", "holds blanks"), ("1\x1e", "holds blanks or control characters"), ("\t", "holds blanks"),
    ("12\u00a0", "holds blanks"), ("١٢", "is not written in digits 0-9"), ("x" * 257, "is longer than any run"),
])
def test_a_run_reference_is_taken_exactly_as_shown(text, problem):
    with pytest.raises(BadRunRef, match=problem):
        parse_run_ref(text)
