"""Hostile command-line arguments: numbers and lists through one grammar (autoselect.options),
click's own mistakes in one line, and the answers a typo used to get."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.hostile import cli, refused
from support.paths import FIXTURES

from autoselect.errors import UserError
from autoselect.options import (
    MAX_INT,
    BadList,
    BadNumber,
    check_seconds,
    check_seed,
    parse_int,
    parse_name_list,
    parse_number,
)

MODELS = FIXTURES / "models"
RESULTS = FIXTURES / "results"
H200 = "h200x8-5d1c7e0a"


@pytest.fixture(scope="module")
def fixture_db(tmp_path_factory) -> Path:
    from db.importing import import_file

    path = tmp_path_factory.mktemp("hostile-cli") / "fixtures.db"
    import_file(path, RESULTS / "h200.jsonl")
    return path


@pytest.mark.parametrize("argv, starts", [
    (["recommend", "--model", "x", "--dpp", "2"], "Error: No such option '--dpp'"),
    (["inspect", "--model", "x", "--format", "yaml"], "Error: Invalid value for '--format': 'yaml' is not one of"),
    (["nosuch"], "Error: No such command 'nosuch'"),
    (["db", "import"], "Error: Missing argument 'FILE'"),
    (["fleet", "deploy"], "Error: Missing option '--kind'"),
])
def test_click_usage_errors_are_one_line_that_names_the_help(argv, starts):
    line = refused(cli(*argv), starts)
    assert re.search(r"; see `\S+( \S+)* --help`$", line), line


@pytest.mark.parametrize("value, message", [
    ("99999999999999999999", "--dp 99999999999999999999 is above 2147483647"),
    ("1000000", "--dp 1000000 is above 65536 ranks, more than any deployment; check the value"),
    ("١٢", "--dp '١٢' is not a whole number written in digits 0-9"),
    ("1e3", "--dp '1e3' is not a whole number written in digits 0-9"),
    ("", "--dp '' is not a whole number written in digits 0-9"),
])
def test_recommend_dp_is_checked_before_anything_is_read(value, message, fixture_db):
    line = refused(cli("recommend", "--model", MODELS / "deepseek-v3", "--host-class", H200, "--db", fixture_db,
                       "--dp", value))
    assert line == f"Error: {message}"


@pytest.mark.parametrize("option, value", [("--timeout", "nan"), ("--timeout", "inf"), ("--max-noise", "1e400"),
                                           ("--min-time", "-nan"), ("--setup-timeout", "0")])
def test_bench_time_options_refuse_what_cannot_be_a_duration(option, value, tmp_path):
    refused(cli("bench", "--device", "cpu", "--hidden", "2048", "--top-k", "8", "--experts", "128", "--dtype", "bf16",
                option, value, "--db", tmp_path / "b.db"))
    assert list(tmp_path.iterdir()) == []


def test_an_empty_backends_list_is_a_mistake_not_all(tmp_path):
    line = refused(cli("bench", "--device", "cpu", "--hidden", "2048", "--top-k", "8", "--experts", "128",
                       "--dtype", "bf16", "--backends", "", "--db", tmp_path / "b.db"))
    assert line.startswith("Error: --backends is empty; leave the option out for the default")
    assert list(tmp_path.iterdir()) == []


def test_bench_refuses_a_vllm_version_recommend_refuses(tmp_path, fixture_db):
    bench = refused(cli("bench", "--device", "cpu", "--hidden", "2048", "--top-k", "8", "--experts", "128",
                        "--dtype", "bf16", "--vllm-version", "0.0.1", "--db", tmp_path / "b.db"))
    rec = refused(cli("recommend", "--model", MODELS / "deepseek-v3", "--host-class", H200, "--db", fixture_db,
                      "--vllm-version", "0.0.1"))
    assert bench == rec == ("Error: vLLM 0.0.1 has no --all2all-backend flag (it arrived in 0.11.1); pass a newer "
                            "--vllm-version")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [
    ["bench", "--device", "cpu", "--hidden", "2048", "--top-k", "8", "--experts", "128", "--dtype", "bf16",
     "--tokens", "99999999999"],
    ["bench", "--device", "cpu", "--hidden", "2048", "--top-k", "8", "--experts", "128", "--dtype", "bf16",
     "--seed", "99999999999999999999999"],
    ["bench", "--device", "cpu", "--hidden", "99999999999999999999", "--top-k", "8", "--experts", "128",
     "--dtype", "bf16"],
    ["bench", "--device", "cpu", "--hidden", "2000000000", "--top-k", "8", "--experts", "128", "--dtype", "bf16"],
    ["tune", "--model", "shape:99999999999999999999x32x4:bf16", "--device", "cpu"],
])
def test_a_typo_in_a_size_leaves_no_run_row_and_no_study_file(argv, tmp_path):
    db = tmp_path / "typo.db"
    refused(cli(*argv, "--db", db))
    assert list(tmp_path.iterdir()) == []  # no database, no run row, no Optuna file


def test_an_empty_all2all_backend_value_is_quoted_in_check():
    r = cli("check", "--vllm-version", "0.33.0", "--", "vllm", "serve", str(MODELS / "deepseek-v3"), "-dp", "8",
            "--all2all-backend=")
    assert "--all2all-backend '' is not a vLLM choice" in r.stdout, r.stdout


def test_tokens_beyond_the_data_say_the_data_exists(fixture_db):
    # a budget that makes the bucket one step (else vLLM runs it as many, each within the data)
    r = cli("recommend", "--model", MODELS / "deepseek-v3", "--host-class", H200, "--db", fixture_db,
            "--tokens", "1000000", "--max-num-batched-tokens", "1000000")
    assert r.exit_code == 0, r.stderr
    data = next(ln for ln in r.stdout.splitlines() if ln.startswith("data: "))
    assert re.fullmatch(r"data: \d+ stored results for host class h200x8-5d1c7e0a and this shape, none close "
                        r"enough to these token counts to use \(the warnings say why\)", data), data
    assert "more than 4x outside the measured range" in r.stdout


def test_a_disqualified_backend_says_how_to_drop_the_run(fixture_db):
    r = cli("recommend", "--model", MODELS / "deepseek-v3", "--host-class", H200, "--db", fixture_db,
            "--format", "json")
    reasons = [x["reasons"][0] for x in json.loads(r.stdout)["rejected"] if x["kind"] == "disqualified"]
    assert reasons and all(re.search(r"`autoselect db drop-run \d+ --yes` removes it$", x) for x in reasons)


# --- the grammars themselves, property-based --------------------------------------------------------------

NUMBER_TEXT = st.one_of(
    st.text(alphabet=st.sampled_from(list("0123456789-+.eE _,") + ["١", "²", "\u00a0", "½", "٫"]), max_size=14),
    st.integers(min_value=-(2**80), max_value=2**80).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "inf", "-inf", "Infinity", "1e400", "0x1f", "1_0", "+1", ".5", "5.", "-0"]),
)


@settings(max_examples=400, deadline=None, database=None)
@given(NUMBER_TEXT)
def test_parse_int_takes_ascii_whole_numbers_in_range_and_refuses_the_rest(text):
    ascii_int = re.fullmatch(r"-?[0-9]+", text.strip(" \t")) is not None
    try:
        value = parse_int(text, what="--n")
    except BadNumber as e:
        assert str(e).startswith("--n ")
        assert not ascii_int or abs(int(text.strip(" \t"))) > MAX_INT
        return
    assert ascii_int and value == int(text.strip(" \t")) and abs(value) <= MAX_INT


@settings(max_examples=400, deadline=None, database=None)
@given(NUMBER_TEXT)
def test_parse_number_returns_a_finite_float_or_refuses(text):
    try:
        value = parse_number(text, what="--x")
    except BadNumber as e:
        assert str(e).startswith("--x ")
        return
    assert math.isfinite(value) and value == float(text.strip(" \t"))
    assert all(c in "0123456789-+.eE " for c in text)  # ASCII digits, a sign, a point, an exponent


@settings(max_examples=200, deadline=None, database=None)
@given(st.text(alphabet=st.sampled_from(list("ab, _-")), max_size=10))
def test_parse_name_list_never_returns_an_empty_name(text):
    try:
        names = parse_name_list(text)
    except BadList:
        return
    assert names and all(n and n == n.strip(" ") for n in names) and len(set(names)) == len(names)


@pytest.mark.parametrize("check, value", [(check_seconds, 0), (check_seconds, float("nan")), (check_seconds, -1.0),
                                          (check_seconds, 1e12), (check_seed, -1), (check_seed, 2**40),
                                          (check_seed, True)])
def test_seconds_and_seeds_out_of_range_are_user_errors(check, value):
    with pytest.raises(UserError):
        check(value, what="--x")
