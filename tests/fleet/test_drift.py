"""Fleet drift: slow nodes beyond the noise, and recommendation changes with the reason."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from autoselect.cli import main
from autoselect.fleet import drift
from autoselect.fleet.drift.analysis import analyze
from autoselect.fleet.drift.points import reference, slow_threshold
from db.queries import all_results, connect_readonly
from support.fleet import DEEPSEEK_V3, NODES, SLOW_NODE, TOKENS, build_fleet_db


@pytest.fixture(scope="module")
def fleet_db(tmp_path_factory):
    """The three-run, four-node scenario of tests/support/fleet.py (gpu-c planted slow in f3)."""
    return build_fleet_db(tmp_path_factory.mktemp("fleet") / "fleet.db")


@pytest.fixture(scope="module")
def quiet_db(tmp_path_factory):
    """The same scenario with no slow node: only the +-2 % run-to-run wobble."""
    return build_fleet_db(tmp_path_factory.mktemp("quiet") / "fleet.db", slow_node=None)


def _nodes(path):
    conn = connect_readonly(path)
    try:
        return {n.hostname: n for n in drift.node_drift(drift.observations(all_results(conn)))}
    finally:
        conn.close()


def test_drift_flags_the_planted_slow_node_and_nothing_else(fleet_db):
    nodes = _nodes(fleet_db)
    assert sorted(h for h, n in nodes.items() if n.flagged) == [SLOW_NODE]


def test_slow_node_is_slow_against_the_class_at_every_point_by_about_thirty_percent(fleet_db):
    slow = _nodes(fleet_db)[SLOW_NODE].slow
    vs_class = [s for s in slow if s.versus == "class"]
    assert len(vs_class) == 2 * len(TOKENS)  # both backends, every token count
    assert all(0.24 < s.slowdown < 0.37 for s in vs_class)
    assert {s.backend for s in vs_class} == {"allgather_reducescatter", "flashinfer_nvlink_two_sided"}
    assert vs_class[0].shape == "H7168 top8 E256 fp8_block128 ws8 T1"


def test_slow_node_against_its_own_history_only_where_it_did_not_also_improve(fleet_db):
    hist = [s for s in _nodes(fleet_db)[SLOW_NODE].slow if s.versus == "history"]
    # two-sided got twice as fast with the flashinfer upgrade, which hides the 30 % loss (0.5 x 1.3 < 1)
    assert {s.backend for s in hist} == {"allgather_reducescatter"}
    assert len(hist) == len(TOKENS)


def test_normal_run_to_run_noise_flags_nothing(quiet_db):
    nodes = _nodes(quiet_db)
    assert sorted(nodes) == list(NODES)
    assert [h for h, n in nodes.items() if n.flagged] == []
    assert all(n.compared_history == 18 and n.compared_class == 18 for n in nodes.values())


def test_drift_reports_the_software_versions_that_changed(fleet_db):
    assert _nodes(fleet_db)["gpu-a"].versions_changed == {"flashinfer": ["0.7.2.post1", "0.7.3"]}


def test_slow_threshold_is_the_larger_of_the_floor_and_k_standard_errors():
    assert slow_threshold(0.01, 0.0) == 0.05
    assert slow_threshold(0.03, 0.04) == pytest.approx(0.15)


def test_reference_noise_includes_the_run_to_run_spread():
    ref = reference([100.0, 110.0, 90.0], [0.01, 0.01, 0.01])
    assert ref.latency_us == 100.0
    assert ref.noise_stdrel == pytest.approx(1.4826 * 10 / 100)
    assert reference([100.0, 120.0], [0.02, 0.01]).noise_stdrel == pytest.approx(0.015)


def test_recommendation_change_since_the_previous_run_names_the_measurements_that_moved(fleet_db):
    conn = connect_readonly(fleet_db)
    try:
        report = analyze(conn)
    finally:
        conn.close()
    changes = [r for r in report.recommendations if r.changed]
    assert len(changes) == 1
    ch = changes[0]
    assert (ch.model, ch.before, ch.now, ch.before_run, ch.now_run) == (
        DEEPSEEK_V3, "allgather_reducescatter", "flashinfer_nvlink_two_sided", "f2", "f3")
    moved = {(m.backend, m.tokens_per_rank) for m in ch.moved}
    assert moved == {("flashinfer_nvlink_two_sided", t) for t in TOKENS}
    assert all(-0.55 < m.change < -0.45 for m in ch.moved)


def test_fleet_drift_json_lists_the_flagged_node(fleet_db):
    result = CliRunner().invoke(main, ["fleet", "drift", "--db", str(fleet_db), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    by_host = {n["hostname"]: n for n in doc["nodes"]}
    assert doc["flagged"] == [by_host[SLOW_NODE]["machine_id"]]
    assert [c["now"] for c in doc["recommendation_changes"]] == ["flashinfer_nvlink_two_sided"]


def test_fleet_drift_text_names_the_slow_node_and_the_change(fleet_db):
    result = CliRunner().invoke(main, ["fleet", "drift", "--db", str(fleet_db)])
    assert result.exit_code == 0, result.output
    assert "gpu-c" in result.stdout and "SLOW" in result.stdout
    assert "allgather_reducescatter -> flashinfer_nvlink_two_sided" in result.stdout


def test_fleet_drift_rejects_a_negative_floor_without_traceback(fleet_db):
    result = CliRunner().invoke(main, ["fleet", "drift", "--db", str(fleet_db), "--min-slowdown", "-1"])
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: --min-slowdown -1.0 is not a fraction")
    assert result.stderr.count("\n") == 1


def test_fleet_drift_on_a_missing_database_is_one_error_line(tmp_path):
    result = CliRunner().invoke(main, ["fleet", "drift", "--db", str(tmp_path / "none.db")])
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: no results database at")
    assert not (tmp_path / "none.db").exists()


def test_fleet_status_lists_nodes_with_last_run_health_and_flags(tmp_path):
    from db.store import Store
    from support.fleet import h200_host

    db = build_fleet_db(tmp_path / "fleet.db")
    with Store(db) as store:
        run = store.begin_run(h200_host("gpu-d"), trigger="systemd", meta={"fleet_run": "f4"})
        store.finish_run(run, "failed", meta={"error": "node 1a2b3c4d died (raylet exited)"})
    result = CliRunner().invoke(main, ["fleet", "status", "--db", str(db), "--format", "json"])
    assert result.exit_code == 0, result.output
    nodes = {n["hostname"]: n for n in json.loads(result.stdout)["nodes"]}
    assert sorted(nodes) == list(NODES)
    assert [(h, n["health"], n["flagged"]) for h, n in sorted(nodes.items())] == [
        ("gpu-a", "ok", False), ("gpu-b", "ok", False), ("gpu-c", "ok", True), ("gpu-d", "failed", False)]
    assert nodes["gpu-d"]["error"] == "node 1a2b3c4d died (raylet exited)"
    assert (nodes["gpu-d"]["last_trigger"], nodes["gpu-d"]["fleet_run"]) == ("systemd", "f4")
    assert nodes["gpu-c"]["fleet_run"] == "f3" and 0.25 < nodes["gpu-c"]["worst_slowdown"] < 0.40
    text = CliRunner().invoke(main, ["fleet", "status", "--db", str(db)]).stdout
    assert "failed: node 1a2b3c4d died (raylet exited)" in text and "SLOW +" in text


def test_fleet_drift_status_and_help_import_no_heavy_packages(fleet_db):
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from autoselect.cli import main\n"
        f"for args in (['fleet', '--help'], ['serve', '--help'], ['fleet', 'drift', '--db', {str(fleet_db)!r}],"
        f" ['fleet', 'status', '--db', {str(fleet_db)!r}]):\n"
        "    try:\n"
        "        main(args)\n"
        "    except SystemExit as e:\n"
        "        assert e.code in (0, None), (args, e.code)\n"
        "heavy = sorted(m for m in ('torch', 'ray', 'fastapi', 'uvicorn', 'numpy', 'sqlite_utils', 'optuna',"
        " 'flashinfer', 'vllm') if m in sys.modules)\n"
        "print('HEAVY', heavy)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "HEAVY []"
