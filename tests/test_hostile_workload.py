"""Hostile workload weights and other user numbers the code sums, multiplies or raises to a power:
finite each, but their arithmetic must never overflow into a confident wrong answer."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.hostile import cli, refused, tree_state
from support.paths import FIXTURES

from autoselect.options import MAX_TOKENS_PER_RANK
from autoselect.workload import BadWorkloadOption, normalized_workload, workload_from_tokens

MODELS = FIXTURES / "models"
H200 = "h200x8-5d1c7e0a"
BOUNDED = dict(deadline=None, database=None)


@pytest.fixture(scope="module")
def fixture_db(tmp_path_factory):
    from db.importing import import_file

    path = tmp_path_factory.mktemp("hostile-workload") / "fixtures.db"
    import_file(path, FIXTURES / "results" / "h200.jsonl")
    cli("db", "info", "--db", path)  # settle the -wal / -shm a reader leaves
    return path


def _answer(db, *args) -> dict:
    result = cli("recommend", "--model", MODELS / "deepseek-v3", "--host-class", H200, "--db", db,
                 "--format", "json", *args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("huge, small", [
    ("1:1e308,64:1e308,256:1e308", "1:1,64:1,256:1"),  # each finite, the sum is inf
    ("1:1.7e308,64:1.7e308", "1:1,64:1"),
    ("1:1e308,1:1e308,64:1e308", "1:2,64:1"),  # a repeat merged: 2e308 in one bucket
    ("1:1e308,64:5e307,256:1e-300", "1:2,64:1"),  # a share below 1e-12 carries no weight: dropped
])
def test_weights_whose_sum_overflows_answer_like_the_same_shares_written_small(fixture_db, huge, small):
    big, ref = _answer(fixture_db, "--tokens", huge), _answer(fixture_db, "--tokens", small)
    assert big["workload"] == ref["workload"]
    assert all(0 < b["weight"] <= 1 for b in big["workload"]["buckets"])
    assert (big["backend"], big["confidence"]) == (ref["backend"], ref["confidence"])
    assert big["candidates"] == ref["candidates"]


def test_a_weight_that_is_itself_infinite_is_refused(fixture_db):
    refused(cli("recommend", "--model", MODELS / "deepseek-v3", "--host-class", H200, "--db", fixture_db,
                "--tokens", "1:1,64:2e308"), "Error: --tokens item '64:2e308': weights must be finite")


def test_explain_and_serve_normalise_the_same_way(fixture_db):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from autoselect.fleet.service.app import create_app

    explain = cli("explain", "--model", MODELS / "deepseek-v3", "--host-class", H200, "--db", fixture_db,
                  "--format", "json", "--tokens", "1:1e308,64:1e308,256:1e308")
    assert explain.exit_code == 0, explain.stderr
    client = TestClient(create_app(fixture_db, model_roots=[MODELS]))
    r = client.get("/v1/recommend", params={"model": "deepseek-v3", "host_class": H200,
                                            "tokens": "1:1e308,64:1e308,256:1e308"})
    ref = _answer(fixture_db, "--tokens", "1,64,256")
    assert r.status_code == 200
    assert r.json()["backend"] == json.loads(explain.stdout)["backend"] == ref["backend"]
    assert r.json()["workload"] == ref["workload"]


@settings(max_examples=300, **BOUNDED)
@given(pairs=st.lists(st.tuples(st.integers(1, 4096), st.floats(min_value=0, max_value=1.7976931348623157e308,
                                                                   allow_nan=False, allow_infinity=False)),
                      min_size=1, max_size=8),
       exponent=st.integers(-300, 300))
def test_normalised_weights_are_shares_that_sum_to_one_whatever_the_scale(pairs, exponent):
    if max(w for _, w in pairs) <= 0:
        with pytest.raises(BadWorkloadOption):
            normalized_workload("explicit", pairs)
        return
    spec = normalized_workload("explicit", pairs)
    weights = [w for _, w in spec.buckets]
    assert all(math.isfinite(w) and 0 < w <= 1 for w in weights)
    assert math.isclose(sum(weights), 1.0, rel_tol=1e-9)
    assert [t for t, _ in spec.buckets] == sorted({t for t, w in spec.buckets})
    # the shares do not depend on the unit the weights are written in, as long as each stays finite
    scale = 10.0 ** exponent
    scaled = [(t, w * scale) for t, w in pairs]
    if all(math.isfinite(w) for _, w in scaled) and max(w for _, w in scaled) > 0 and min(
            (w for _, w in pairs if w > 0), default=1) * scale > 1e-290:
        again = normalized_workload("explicit", scaled)
        assert [t for t, _ in again.buckets] == [t for t, _ in spec.buckets]
        assert all(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
                   for (_, a), (_, b) in zip(again.buckets, spec.buckets))


@settings(max_examples=200, **BOUNDED)
@given(st.lists(st.tuples(st.integers(1, 8192), st.sampled_from(["1e308", "1.7976931348623157e308", "9e307", "1",
                                                                 "0", "1e-320", "5e-324", "0.5", "1e-300"])),
                min_size=1, max_size=6))
def test_any_weighted_token_text_is_a_workload_or_one_refusal(items):
    text = ",".join(f"{t}:{w}" for t, w in items)
    try:
        spec = workload_from_tokens(text)
    except Exception as e:  # every refusal is the user's mistake, said in one line
        from autoselect.errors import UserError

        assert isinstance(e, UserError), repr(e)
        return
    assert math.isclose(sum(w for _, w in spec.buckets), 1.0, rel_tol=1e-9)
    assert all(0 < w <= 1 for _, w in spec.buckets)


@pytest.mark.parametrize("args, message", [
    (["--concurrency", "2147483647"], "Error: the workload has a bucket of 268435456 tokens per rank, outside "
                                      f"1..{MAX_TOKENS_PER_RANK}; lower --concurrency or --max-num-batched-tokens, "
                                      "or pass --tokens"),
    (["--max-num-batched-tokens", "2147483647"], "Error: the workload has a bucket of 2147483647 tokens per rank"),
    (["--max-workspace-gib", "1e308"], "Error: --max-workspace-gib 1e+308 must be a positive number of GiB, at most 4096"),
    (["--max-workspace-gib", "4097"], "Error: --max-workspace-gib 4097.0 must be a positive number of GiB, at most 4096"),
])
def test_numbers_that_would_overflow_downstream_are_refused_up_front(fixture_db, args, message):
    before = tree_state(fixture_db.parent)
    refused(cli("recommend", "--model", MODELS / "deepseek-v3", "--host-class", H200, "--db", fixture_db, *args),
            message)
    assert tree_state(fixture_db.parent) == before


@pytest.mark.parametrize("text", ["zipf:inf", "zipf:-inf", "zipf:nan", "zipf:1e400", "zipf:9", "zipf:1_0",
                                  "zipf:١", "zipf:", "zipf:0", "zipf:-1", "zipf:0x1"])
def test_a_zipf_exponent_is_a_finite_number_in_range(text):
    from bench.routing import BadRouting, parse_routing

    with pytest.raises(BadRouting, match="use e.g. zipf:1.2"):
        parse_routing(text)


def test_bench_refuses_an_infinite_zipf_exponent_before_opening_the_database(tmp_path):
    before = tree_state(tmp_path)
    refused(cli("bench", "--hidden", "64", "--top-k", "2", "--experts", "8", "--dtype", "bf16", "--device", "cpu",
                "--routing", "zipf:inf", "--db", tmp_path / "x.db"), "Error: routing 'zipf:inf'")
    assert tree_state(tmp_path) == before


def test_the_largest_zipf_exponent_still_draws_top_k_distinct_experts():
    torch = pytest.importorskip("torch")
    from bench.routing import MAX_ZIPF_EXPONENT
    from bench.synthetic import BenchPoint

    point = BenchPoint(tokens_per_rank=4, hidden=64, top_k=22, experts=1 << 16, world_size=2, dtype="bf16",
                       routing=f"zipf:{MAX_ZIPF_EXPONENT:g}")
    ids, _ = point.global_routing()
    assert ids.shape == (8, 22)
    assert all(len(set(row.tolist())) == 22 for row in ids)
    assert torch.all(ids < (1 << 16))
