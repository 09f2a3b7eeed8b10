"""The adaptive race's decision rules, on measured numbers (no processes)."""

from __future__ import annotations

import pytest

import math

from autoselect.noise import REL_FLOOR
from autoselect.tune.measurement import Measurement
from autoselect.tune.race import Race
from autoselect.tune.stats import Noise, pool, t_quantile
from autoselect.tune.storage import Study, optuna_path, study_name
from autoselect.workload import Shape, WorkloadSpec

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


def test_the_study_file_sits_beside_the_results_database(tmp_path):
    assert optuna_path(tmp_path / "results.db") == tmp_path / "results.optuna.log"
    (tmp_path / "results.optuna.db").touch()  # an earlier autoselect's SQLite study is resumed where it is
    assert optuna_path(tmp_path / "results.db") == tmp_path / "results.optuna.db"


def test_the_study_name_is_host_class_shape_and_workload():
    shape = Shape(hidden=2048, top_k=4, experts=32, dtype="bf16")
    assert study_name("cpu-abc", shape, 2, "cpu", DECODE) == "cpu-abc|h2048-k4-e32-bf16-ws2-cpu|explicit[8:0.5,64:0.5]"


def test_repeated_measurements_pool_by_inverse_variance_but_not_below_the_floor():
    est = pool([m("a", 8, 100.0, h=0.04), m("a", 8, 110.0, h=0.02)])
    assert est.latency_us == pytest.approx((100 / 0.04**2 + 110 / 0.02**2) / (1 / 0.04**2 + 1 / 0.02**2))
    assert est.rel_halfwidth == pytest.approx(1 / (1 / 0.04**2 + 1 / 0.02**2) ** 0.5)
    assert pool([m("a", 8, 100.0, h=0.001)] * 4).rel_halfwidth == REL_FLOOR


def test_a_clearly_slower_backend_is_pruned_with_its_numbers():
    r = race_with(*[m(b, t, lat * f) for b, t, lat in (("a", 8, 100), ("a", 64, 200), ("b", 8, 300), ("b", 64, 600))
                    for f in (0.99, 1.0, 1.01)])
    assert r.prune() == [("b", "slower than a: 450.0 ± 7.2 µs vs 150.0 ± 2.4 µs (workload-weighted); "
                               "bucket by bucket 3.00x, at least 2.93x (bands x1; run-to-run noise "
                               "b 1.0%, a 1.0%)")]
    assert r.alive == ["a"]


def test_one_start_up_with_unknown_noise_never_prunes_even_at_3x():
    r = race_with(m("a", 8, 100), m("a", 64, 200), m("b", 8, 300), m("b", 64, 600))
    assert r.compare("b", "a").verdict == "slower"
    assert r.prune() == [] and r.alive == ["a", "b"]


def test_two_noisy_start_ups_do_not_prune_a_third_does():
    """A bimodal backend can land in its slow mode twice: above 10 % noise a prune needs 3 start-ups."""
    ms = [m("a", t, lat * f) for t, lat in ((8, 1000), (64, 1100)) for f in (0.97, 1.03)]
    ms += [m("b", t, lat * f) for t, lat in ((8, 2200), (64, 2400)) for f in (0.92, 1.09)]
    r = race_with(*ms)
    assert r.noise("b").stdrel > 0.10 and r.runs("a") == r.runs("b") == 2
    assert r.compare("b", "a").verdict == "slower"
    assert r.prune() == []
    r.add(m("a", 8, 1000))
    r.add(m("b", 8, 2300))
    assert r.runs("a") == r.runs("b") == 3
    assert [b for b, _ in r.prune()] == ["b"]


def test_two_quiet_start_ups_are_enough_to_prune():
    ms = [m("a", t, lat * f) for t, lat in ((8, 1000), (64, 1100)) for f in (0.97, 1.03)]
    ms += [m("b", t, lat * f) for t, lat in ((8, 2200), (64, 2400)) for f in (0.96, 1.04)]
    r = race_with(*ms)
    assert r.noise("b").stdrel <= 0.10 and r.noise("a").stdrel <= 0.10
    assert [b for b, _ in r.prune()] == ["b"]


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


def test_each_backend_has_its_own_run_to_run_noise_pooled_over_its_buckets_in_log_space():
    r = race_with(m("a", 8, 100), m("a", 8, 140), m("a", 64, 200), m("a", 64, 200),
                  m("b", 8, 150), m("b", 8, 150), m("b", 64, 300), m("b", 64, 303))
    # a: ln(1.4) apart at 8, equal at 64; each bucket centred on its own mean, 2 dof in all
    assert r.noise("a") == Noise(pytest.approx(math.sqrt(math.log(1.4) ** 2 / 2 / 2)), 2)
    assert r.noise("b").stdrel == pytest.approx(math.sqrt(math.log(1.01) ** 2 / 2 / 2))
    assert t_quantile(2) == 4.30 and t_quantile(0) == 2.0 and t_quantile(1000) == 2.0


def test_the_run_to_run_noise_widens_the_bands_with_the_t_quantile_of_its_degrees_of_freedom():
    r = race_with(m("a", 8, 100), m("a", 8, 140), m("a", 64, 200), m("a", 64, 200),
                  m("b", 8, 150), m("b", 64, 300))
    noise = r.noise("a")
    assert r.points("a")[8].rel_halfwidth == pytest.approx(4.30 * noise.stdrel / 2**0.5)
    # b has no repeated point yet: its bands borrow the noisiest measured backend's noise
    assert r.noise("b") is None
    assert r.points("b")[8].rel_halfwidth == pytest.approx(4.30 * noise.stdrel)


def test_a_2x_gap_is_pruned_through_one_backends_heavy_run_to_run_noise():
    """22 % a run on the loser; the comparison gives both points that noise, and still prunes."""
    quiet = [m("a", t, lat * f, h=0.02) for t, lat in ((8, 100), (64, 200)) for f in (1.0, 1.03, 0.98)]
    noisy = [m("b", t, lat * f, h=0.05) for t, lat in ((8, 200), (64, 400)) for f in (0.8, 1.0, 1.25)]
    r = race_with(*quiet, *noisy)
    assert r.noise("b").stdrel > 0.2 > 0.03 > r.noise("a").stdrel
    c = r.compare("b", "a")
    assert c.ratio == pytest.approx(2.0, rel=0.05) and c.verdict == "slower"
    t = 2.78 * r.noise("b").stdrel / 3**0.5  # 4 dof, 3 runs
    assert c.buckets[8][1] == pytest.approx(math.hypot(t, t))
    assert [b for b, _ in r.prune()] == ["b"]


def test_a_gap_inside_the_noise_is_not_pruned():
    ms = [m("a", t, lat * f) for t, lat in ((8, 100), (64, 200)) for f in (0.8, 1.25)]
    ms += [m("b", t, lat * f) for t, lat in ((8, 130), (64, 260)) for f in (1.25, 0.8)]
    r = race_with(*ms)
    assert r.compare("b", "a").verdict == "tie"
    assert r.prune() == []


def test_refining_is_futile_when_more_runs_could_not_separate_the_two():
    def race(gap, runs=3):
        return race_with(*[m(b, t, lat, h=0.2) for b, lat in (("a", 100), ("b", 100 * gap)) for t in (8, 64)] * runs)

    close, apart = race(1.01), race(1.3)
    assert close.futile(rounds_left=5) and not apart.futile(rounds_left=5)
    # one start-up says nothing about the noise: no futility claim on it (as no prune)
    assert not race(1.01, runs=1).futile(rounds_left=5)


def test_nothing_is_left_to_refine_once_contested_points_are_at_the_floor():
    r = race_with(*[m(b, t, lat, h=REL_FLOOR) for b, t, lat in
                    (("a", 8, 100), ("a", 64, 200), ("b", 8, 100.5), ("b", 64, 200.5))] * 2)
    assert r.prune() == []
    assert r.refine_targets() == []


def test_a_quiet_single_run_is_not_taken_for_the_floor_before_repeats_show_the_noise():
    r = race_with(m("a", 8, 100, h=REL_FLOOR), m("a", 64, 200, h=REL_FLOOR),
                  m("b", 8, 100.5, h=REL_FLOOR), m("b", 64, 200.5, h=REL_FLOOR))
    assert sorted(r.refine_targets(k=2)) == [8, 64]


def test_knob_settings_are_scored_apart_from_the_untuned_backend():
    s = {"NCCL_PROTO": "LL"}
    r = race_with(m("a", 8, 100), m("a", 64, 200), m("a", 8, 80, stage="knob", setting=s),
                  m("a", 64, 160, stage="knob", setting=s))
    assert r.score("a").latency_us == 150
    assert r.score("a", s).latency_us == 120
    assert r.measured("a", 8, "knob", s) and not r.measured("a", 8, "knob", {"NCCL_PROTO": "Simple"})


@pytest.mark.parametrize("name", ["results.optuna.log", "results.optuna.db"])  # the journal, an earlier SQLite study
def test_a_study_keeps_every_measurement_across_reopening(tmp_path, name):
    path = tmp_path / name
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


class _FakeHarness:
    """``bench.sweep.run_sweep`` for the race loop without processes: each backend's true latency
    per bucket times a log-normal run-to-run factor (seeded), 1 % in-run noise."""

    def __init__(self, true_us, sigma, seed):
        import random

        self.true_us, self.sigma, self.rng = true_us, sigma, random.Random(seed)
        self.calls = []

    def __call__(self, sweep, *, store=None, run_id=None, host=None, progress=None, groups=None):
        from types import SimpleNamespace

        from bench.events import PointMeasured

        self.calls.append((list(sweep.backends), list(sweep.tokens)))
        for b in sweep.backends:
            for t in sweep.tokens:
                lat = self.true_us[b][t] * math.exp(self.rng.gauss(0.0, self.sigma))
                progress(PointMeasured(SimpleNamespace(
                    backend=b, tokens_per_rank=t, status="ok", latency_us_p50=lat, latency_us_mean=lat,
                    noise_stdrel=0.005, samples=100, error=None)))
        return []


def _tuner(tmp_path, monkeypatch, harness, backends):
    import autoselect.tune.tuner
    from autoselect.knobs import KnobContext
    from autoselect.tune.tuner import TuneSpec, Tuner

    monkeypatch.setattr(autoselect.tune.tuner, "run_sweep", harness)
    workload = WorkloadSpec("explicit", ((8, 0.25), (16, 0.25), (32, 0.25), (64, 0.25)))
    spec = TuneSpec(shape=Shape(hidden=1024, top_k=4, experts=32, dtype="bf16"), world_size=2, device="cpu",
                    workload=workload, backends=list(backends), db_path=tmp_path / "r.db", host=None,
                    vllm_version="0.33.0", budget_s=600, knob_ctx=KnobContext(),
                    search_knobs=False)
    study = Study(tmp_path / "r.optuna.log", "fake", list(backends), workload.tokens)
    return Tuner(spec, store=None, run_id=0, study=study)


@pytest.mark.parametrize("seed", range(5))
def test_a_2x_separated_pair_settles_through_heavy_run_to_run_noise(tmp_path, monkeypatch, seed):
    """The numbers of a loaded 2-core machine: 25 % log-normal noise per run, one backend 2x slower."""
    true_us = {"fast": {8: 800, 16: 850, 32: 900, 64: 1000}, "slow": {8: 1600, 16: 1700, 32: 1800, 64: 2000}}
    harness = _FakeHarness(true_us, sigma=0.25, seed=seed)
    tuner = _tuner(tmp_path, monkeypatch, harness, ["slow", "fast"])
    tuner.screen()
    stop = tuner.refine()
    assert (stop, tuner.race.leader(), list(tuner.race.pruned)) == ("settled", "fast", ["slow"])
    # the screen measures every bucket; then one sweep call per round (one worker start-up per
    # backend), each at the (at most) 2 buckets that matter most
    assert sorted(harness.calls[0][1]) == [8, 16, 32, 64]
    assert all(len(tokens) <= 2 for _, tokens in harness.calls[1:])
    # no more points per backend than the old 4-bucket rounds needed (screen + at most 2 rounds)
    assert sum(len(tokens) for _, tokens in harness.calls) <= 12


@pytest.mark.parametrize("seed", range(5))
def test_the_winner_is_never_pruned_when_two_backends_are_equal(tmp_path, monkeypatch, seed):
    true_us = {b: {8: 800, 16: 850, 32: 900, 64: 1000} for b in ("a", "b")}
    tuner = _tuner(tmp_path, monkeypatch, _FakeHarness(true_us, sigma=0.25, seed=seed), ["a", "b"])
    tuner.screen()
    assert tuner.refine() in ("unresolved", "tie")
    assert tuner.race.pruned == {}


def test_the_knob_final_check_compares_a_setting_to_the_untuned_backend_bucket_by_bucket():
    fast = {"OMP_NUM_THREADS": "2"}
    # untuned runs scatter by ~20 % run to run: a 10 % faster setting is within that noise
    r = race_with(m("a", 8, 100, stage="refine"), m("a", 8, 125, stage="refine"),
                  m("a", 64, 200, stage="refine"), m("a", 64, 250, stage="refine"),
                  m("a", 8, 90, stage="knob-final", setting=fast), m("a", 64, 180, stage="knob-final", setting=fast))
    c = r.compare("a", "a", challenger_setting=fast)
    assert c.ratio == pytest.approx((0.5 * 90 + 0.5 * 180) / (0.5 * r.points("a")[8].latency_us
                                                              + 0.5 * r.points("a")[64].latency_us))
    assert c.verdict == "tie"  # the setting's single run gets the untuned backend's noise, not 2 %
    # quiet repeated runs on both sides: the same 10 % is beyond the bands
    q = race_with(*[m("a", t, lat, stage="refine") for t, lat in ((8, 100), (8, 100.5), (64, 200), (64, 201))],
                  *[m("a", t, lat, stage="knob-final", setting=fast)
                    for t, lat in ((8, 90), (8, 90.4), (64, 180), (64, 180.9))])
    assert q.compare("a", "a", challenger_setting=fast).verdict == "faster"
