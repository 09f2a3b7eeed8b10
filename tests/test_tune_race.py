"""The adaptive race's decision rules, on measured numbers (no processes)."""

from __future__ import annotations

import pytest

from autoselect.selector import REL_FLOOR, WorkloadSpec
from autoselect.tune import (BadBudget, Measurement, Race, Study, optuna_path, parse_budget, pool,
                             study_name, Shape)

DECODE = WorkloadSpec("explicit", ((8, 0.5), (64, 0.5)))


def m(backend, tokens, lat, h=0.02, stage="screen", status="ok", setting=None, error=None):
    return Measurement(backend=backend, tokens=tokens, stage=stage, setting=setting or {}, status=status,
                       latency_us=lat if status == "ok" else None, rel_halfwidth=h if status == "ok" else None,
                       error=error)


def race_with(*ms, backends=("a", "b")):
    r = Race(list(backends), DECODE)
    for x in ms:
        r.add(x)
    return r


def test_budget_accepts_seconds_minutes_hours_and_refuses_the_rest():
    assert parse_budget("90s") == 90
    assert parse_budget("10m") == 600
    assert parse_budget("1h30m") == 5400
    assert parse_budget("45") == 45
    for bad in ("5x", "", "0s", "m10"):
        with pytest.raises(BadBudget):
            parse_budget(bad)


def test_the_study_file_sits_beside_the_results_database(tmp_path):
    assert optuna_path(tmp_path / "results.db") == tmp_path / "results.optuna.db"


def test_the_study_name_is_host_class_shape_and_workload():
    shape = Shape(2048, 4, 32, "bf16", 2, "cpu")
    assert study_name("cpu-abc", shape, DECODE) == "cpu-abc|h2048-k4-e32-bf16-ws2-cpu|explicit[8:0.5,64:0.5]"


def test_repeated_measurements_pool_by_inverse_variance_but_not_below_the_floor():
    est = pool([m("a", 8, 100.0, h=0.04), m("a", 8, 110.0, h=0.02)])
    assert est.latency_us == pytest.approx((100 / 0.04**2 + 110 / 0.02**2) / (1 / 0.04**2 + 1 / 0.02**2))
    assert est.rel_halfwidth == pytest.approx(1 / (1 / 0.04**2 + 1 / 0.02**2) ** 0.5)
    assert pool([m("a", 8, 100.0, h=0.001)] * 4).rel_halfwidth == REL_FLOOR


def test_a_clearly_slower_backend_is_pruned_with_its_numbers():
    r = race_with(m("a", 8, 100), m("a", 64, 200), m("b", 8, 300), m("b", 64, 600))
    assert r.prune() == [("b", "slower than a: 450.0 ± 9.0 µs vs 150.0 ± 3.0 µs "
                               "(workload-weighted, bands x1 do not overlap)")]
    assert r.alive == ["a"]


def test_backends_within_the_noise_are_kept():
    r = race_with(m("a", 8, 100), m("a", 64, 200), m("b", 8, 103), m("b", 64, 204))
    assert r.prune() == []
    assert r.alive == ["a", "b"]
    assert r.leader() == "a"


def test_a_backend_that_fails_the_correctness_gate_is_pruned():
    r = race_with(m("a", 8, 100), m("a", 64, 200), m("b", 8, 0, status="incorrect", error="token 3 byte 0"))
    assert r.prune() == [("b", "incorrect at 8 tokens/rank: token 3 byte 0")]


def test_refine_goes_to_the_heavily_weighted_bucket_where_the_two_are_closest():
    w = WorkloadSpec("explicit", ((8, 0.2), (64, 0.4), (512, 0.4)))
    r = Race(["a", "b"], w)
    for x in (m("a", 8, 100), m("a", 64, 200), m("a", 512, 1000),
              m("b", 8, 101), m("b", 64, 230), m("b", 512, 1001)):
        r.add(x)
    assert r.refine_targets(k=1) == [512]
    assert r.refine_targets(k=3) == [512, 8, 64]


def test_the_run_to_run_spread_of_repeated_points_widens_the_bands():
    r = race_with(m("a", 8, 100), m("a", 8, 140), m("a", 64, 200), m("a", 64, 200),
                  m("b", 8, 150), m("b", 64, 300))
    assert r.spread() == pytest.approx(20 * 2**0.5 / 120)  # upper median of [0, 0.236]
    assert r.points("b")[8].rel_halfwidth == pytest.approx(2 * r.spread())
    assert r.points("a")[8].rel_halfwidth == pytest.approx(2 * r.spread() / 2**0.5)


def test_refining_is_futile_when_more_runs_could_not_separate_the_two():
    close = race_with(m("a", 8, 100, h=0.2), m("a", 64, 100, h=0.2), m("b", 8, 101, h=0.2), m("b", 64, 101, h=0.2))
    apart = race_with(m("a", 8, 100, h=0.2), m("a", 64, 100, h=0.2), m("b", 8, 130, h=0.2), m("b", 64, 130, h=0.2))
    assert close.futile(rounds_left=5) and not apart.futile(rounds_left=5)


def test_nothing_is_left_to_refine_once_contested_points_are_at_the_floor():
    r = race_with(m("a", 8, 100, h=REL_FLOOR), m("a", 64, 200, h=REL_FLOOR),
                  m("b", 8, 100.5, h=REL_FLOOR), m("b", 64, 200.5, h=REL_FLOOR))
    assert r.prune() == []
    assert r.refine_targets() == []


def test_knob_settings_are_scored_apart_from_the_untuned_backend():
    s = {"NCCL_PROTO": "LL"}
    r = race_with(m("a", 8, 100), m("a", 64, 200), m("a", 8, 80, stage="knob", setting=s),
                  m("a", 64, 160, stage="knob", setting=s))
    assert r.score("a").latency_us == 150
    assert r.score("a", s).latency_us == 120
    assert r.measured("a", 8, "knob", s) and not r.measured("a", 8, "knob", {"NCCL_PROTO": "Simple"})


def test_a_study_keeps_every_measurement_across_reopening(tmp_path):
    path = tmp_path / "results.optuna.db"
    s = Study(path, "host|shape|w", ["a", "b"], [8, 64])
    s.add(m("a", 8, 100.0))
    s.add(m("b", 8, 0, status="incorrect", error="mismatch"))
    again = Study(path, "host|shape|w", ["a", "b"], [8, 64])
    got = again.measurements()
    assert [(x.backend, x.tokens, x.status, x.latency_us) for x in got] == [
        ("a", 8, "ok", 100.0), ("b", 8, "incorrect", None)]
    states = [t.state.name for t in again.study.get_trials()]
    assert states == ["COMPLETE", "FAIL"]
    assert again.study.trials[0].params["backend"] == "a"
    assert again.study.trials[0].params["NCCL_PROTO"] == "default"
