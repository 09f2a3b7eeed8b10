"""bench/calibration.py reads what perf/calibrate_default.sh leaves in the database, per phase.

The sample (tests/fixtures/calibration/) is CONSTRUCTED, not measured: no multi-GPU NVLink node has
run the calibration yet (SOURCES.md there). It is the store's export of the script's four sweeps on
an 8x H200 node with made-up numbers (the derived default's central value times chosen factors);
the tests import it through ``db import`` and read it with the real reader, which must recover the
chosen factors.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.calibration import PHASES, phase_calibration, phase_of, read_calibration, read_points
from db.importing import import_file
from db.queries import connect_readonly
from support.paths import FIXTURES, REPO

SAMPLE = FIXTURES / "calibration" / "calibrate_default_sample.jsonl"


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory):
    path = tmp_path_factory.mktemp("calibration") / "calibrate_default.db"
    import_file(path, SAMPLE)
    return path


def test_the_sample_is_marked_constructed_on_every_run():
    runs = {json.dumps(json.loads(line)["run"]["meta"]) for line in SAMPLE.read_text().splitlines()}
    assert len(runs) == 1 and "constructed by tests/fixtures/calibration/make_sample.py" in runs.pop()


def test_each_point_gathers_the_defaults_paths_measured_there(sample_db):
    conn = connect_readonly(sample_db)
    points = read_points(conn)
    conn.close()
    assert len(points) == 10  # 2 shapes x 5 token counts
    ds = [p for p in points if p.hidden == 7168]
    assert all(p.vllm_us is not None and p.truth_path == "vllm" for p in ds)
    qwen = [p for p in points if p.hidden == 2048]
    assert all(p.vllm_us is None and p.truth_path == "adapter" for p in qwen)
    assert all(None not in (p.fused_us, p.grouped_us, p.unequal_us) for p in points)
    assert [(p.tokens_per_rank, p.timing) for p in qwen] == [
        (1, "graph"), (8, "graph"), (64, "graph"), (1024, "eager"), (8192, "eager")]


def test_the_reader_recovers_the_factors_per_phase_over_the_derived_value(sample_db):
    c = read_calibration(sample_db)
    assert list(c) == list(PHASES)
    decode, prefill = c["decode"], c["prefill"]
    assert (decode.points, decode.truth_path, decode.ref_class) == (6, "mixed", "ref-h200_sxm-x8")
    # vLLM's path over the derived central value: x1.30 (adapter) and x1.30 x 1.10 (vLLM's own) at decode
    assert (decode.factor.low, decode.factor.high) == pytest.approx((1.30, 1.43), abs=1e-3)
    assert (prefill.factor.low, prefill.factor.high) == pytest.approx((1.05, 1.071), abs=1e-3)
    assert decode.unequal_over_equal.median == pytest.approx(1.25, abs=1e-3)
    assert prefill.unequal_over_equal.median == pytest.approx(1.10, abs=1e-3)
    # over the fused variant, measured side by side: 1.30 / 0.80 (adapter), x1.10 (vLLM's own)
    assert (decode.over_fused.low, decode.over_fused.high) == pytest.approx((1.625, 1.7875), abs=1e-3)


def test_without_a_reference_class_only_the_side_by_side_ratios_are_given(sample_db):
    conn = connect_readonly(sample_db)
    points = read_points(conn)
    conn.close()
    c = phase_calibration(points)
    assert c["prefill"].factor is None and c["prefill"].ref_class is None
    # 1.05 / 0.95 (the adapter's grouped calls), x1.02 for vLLM's own path
    assert (c["prefill"].over_fused.low, c["prefill"].over_fused.high) == pytest.approx((1.1053, 1.1274), abs=1e-3)


def test_phases_are_decode_to_64_and_prefill_from_1024():
    assert [phase_of(t) for t in (1, 64, 65, 512, 1023, 1024, 16384)] == [
        "decode", "decode", None, None, None, "prefill", "prefill"]


def test_the_command_prints_one_line_per_phase_and_json(sample_db):
    env_path = f"{REPO}"
    run = subprocess.run([sys.executable, "-m", "bench.calibration", "--db", str(sample_db)], capture_output=True,
                         text=True, timeout=120, cwd=REPO, env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].split()[:2] == ["phase", "points"]
    assert lines[1].startswith("decode        6  mixed      x1.") and lines[1].endswith("(ref-h200_sxm-x8)")
    assert lines[2].startswith("prefill       4  mixed      x1.")
    run = subprocess.run([sys.executable, "-m", "bench.calibration", "--db", str(sample_db), "--json"],
                         capture_output=True, text=True, timeout=120, cwd=REPO,
                         env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"})
    doc = json.loads(run.stdout)
    assert doc["schema_version"] == 1 and doc["phases"]["decode"]["factor"]["median"] == pytest.approx(1.365, abs=1e-3)


def test_an_unknown_reference_class_is_one_error_line(sample_db):
    run = subprocess.run([sys.executable, "-m", "bench.calibration", "--db", str(sample_db), "--ref-class", "ref-x"],
                         capture_output=True, text=True, timeout=120, cwd=REPO, env={"PYTHONPATH": str(REPO)})
    assert run.returncode == 2 and run.stderr.startswith("Error: unknown reference host class 'ref-x'; known: ")
    assert run.stderr.count("\n") == 1
