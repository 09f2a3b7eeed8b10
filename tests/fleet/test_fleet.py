"""Fleet runs on a real multi-node Ray cluster (ray.cluster_utils.Cluster on this machine).

Three Ray nodes declare two (fake) GPUs each; every node task runs the CPU gloo harness with
world size 2 on a tiny shape. The driver (this process) is the single writer of the database.
"""

from __future__ import annotations

import json
import random
import sqlite3

import pytest
from click.testing import CliRunner

from autoselect import fleet
from autoselect.cli import main
from autoselect.fleet.cluster import NotEnoughNodes
from autoselect.fleet.events import NodeFailed, NodeResult, ResultMeasured, TaskFinished
from autoselect.fleet.identity import node_scoped_hosts
from autoselect.fleet.probe import Probe, busy_reasons
from autoselect.fleet.run import FleetReport
from autoselect.fleet.task import bench_node
from autoselect.options import parse_duration
from autoselect.workload import Shape
from db.queries import connect_readonly, runs

TINY = ["--device", "cpu", "--hidden", "128", "--top-k", "2", "--experts", "4", "--dtype", "bf16",
        "--min-samples", "3", "--min-time", "0.05", "--timeout", "5"]


@pytest.fixture(scope="module")
def cluster():
    """A 3-node local Ray cluster: the head and two workers, 2 fake GPUs and 1 CPU each."""
    ray_cluster_utils = pytest.importorskip("ray.cluster_utils")
    c = ray_cluster_utils.Cluster(initialize_head=True,
                                  head_node_args={"num_cpus": 1, "num_gpus": 2, "include_dashboard": False})
    workers = [c.add_node(num_cpus=1, num_gpus=2) for _ in range(2)]
    c.wait_for_nodes()
    c.workers = workers
    yield c
    c.shutdown()


def _node_runs(db):
    conn = connect_readonly(db)
    try:
        return runs(conn)
    finally:
        conn.close()


@pytest.mark.slow
def test_fleet_run_fills_the_db_with_results_from_three_distinct_nodes(cluster, db_path):
    result = CliRunner().invoke(main, ["fleet", "run", "--address", cluster.address, *TINY, "--tokens", "1,4",
                                       "--backends", "allgather_reducescatter", "--only-idle",
                                       "--db", str(db_path), "--format", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [n["status"] for n in report["nodes"]] == ["complete"] * 3
    assert len({n["ray_node_id"] for n in report["nodes"]}) == 3
    conn = sqlite3.connect(db_path)
    machines = conn.execute("SELECT COUNT(DISTINCT machine_id) FROM results WHERE status = 'ok'").fetchone()[0]
    per_node = conn.execute("SELECT machine_id, COUNT(*) FROM results GROUP BY machine_id").fetchall()
    assert machines == 3
    assert sorted(n for _, n in per_node) == [2, 2, 2]  # 1 backend x 2 token counts on each node
    node_runs = _node_runs(db_path)
    assert {r["trigger"] for r in node_runs} == {"manual"}
    assert {r["status"] for r in node_runs} == {"complete"}
    assert {r["meta"]["fleet_run"] for r in node_runs} == {report["fleet_run"]}
    # three raylets share this machine: each got a node-scoped id and hostname
    assert all("/" in r["hostname"] for r in node_runs)


@pytest.mark.slow
def test_fleet_schedule_measures_a_model_and_records_trigger_schedule(cluster, db_path, models_dir):
    model = str(models_dir / "mixtral-8x7b")  # hidden 4096, 8 experts, top-2, bf16 activations
    result = CliRunner().invoke(main, ["fleet", "schedule", "--every", "1s", "--count", "1",
                                       "--address", cluster.address, "--device", "cpu", "--model", model,
                                       "--tokens", "1", "--backends", "allgather_reducescatter",
                                       "--min-samples", "3", "--min-time", "0.05", "--timeout", "5",
                                       "--db", str(db_path)])
    assert result.exit_code == 0, result.output
    assert "complete" in result.stdout
    node_runs = _node_runs(db_path)
    assert len(node_runs) == 3
    assert {r["trigger"] for r in node_runs} == {"schedule"}
    assert all(r["meta"]["models"] == [model] for r in node_runs)
    conn = sqlite3.connect(db_path)
    shapes = conn.execute("SELECT DISTINCT hidden, experts, top_k, activation_dtype, status FROM results").fetchall()
    assert shapes == [(4096, 8, 2, "bf16", "ok")]


@pytest.mark.slow
def test_asking_for_more_nodes_than_the_cluster_has_is_one_error_line_and_writes_nothing(cluster, db_path):
    result = CliRunner().invoke(main, ["fleet", "run", "--address", cluster.address, *TINY, "--nodes", "5",
                                       "--db", str(db_path)])
    assert result.exit_code == 2
    assert result.stderr == ("Error: 3 alive Ray node(s) have 2 GPU(s) and 1 CPU(s); asked for 5. "
                             "Lower --nodes or --gpus-per-node\n")
    assert not db_path.exists()


@pytest.mark.slow
def test_a_failing_node_task_is_retried_on_its_live_node_then_recorded_failed(cluster, db_path):
    # --device cuda on nodes whose fake GPUs have no driver: the harness refuses on the node
    spec = fleet.FleetSpec(address=cluster.address, nodes=1, device="cuda", shapes=[Shape(hidden=128, top_k=2, experts=4, dtype="bf16")],
                           tokens=[1], backends=["allgather_reducescatter"], retries=1, world_size=2,
                           reschedule_wait_s=2.0)
    events = []
    report = fleet.run_fleet(spec, db_path, progress=events.append)
    (node,) = report.nodes
    assert (node.status, node.attempts, node.results) == ("failed", 2, 0)
    assert "NotEnoughGpus" in node.error and "no CUDA GPU" in node.error
    assert [e.retry for e in events if isinstance(e, NodeFailed)] == [True, False]
    node_runs = _node_runs(db_path)
    assert [(r["status"], r["meta"]["attempt"]) for r in node_runs] == [("failed", 1), ("failed", 2)]
    assert node_runs[0]["meta"]["error"] == node.error


@pytest.mark.slow
def test_a_node_killed_mid_run_is_recorded_and_the_others_finish(cluster, db_path):
    """Runs last in this module: it removes one worker node from the shared cluster."""
    victims = {w.node_id: w for w in cluster.workers}
    killed = {}

    def kill_on_first_result(event):
        if isinstance(event, NodeResult) and event.ray_node_id in victims and not killed:
            killed["node"] = event.ray_node_id
            cluster.remove_node(victims[event.ray_node_id])

    spec = fleet.FleetSpec(address=cluster.address, device="cpu", shapes=[Shape(hidden=128, top_k=2, experts=4, dtype="bf16")], tokens=[1, 4],
                           backends=["allgather_reducescatter", "reference_all_to_all"], retries=1,
                           min_samples=3, min_time_s=0.05, timeout_s=5, reschedule_wait_s=2.0)
    report = fleet.run_fleet(spec, db_path, progress=kill_on_first_result)

    assert killed, "no result arrived from a worker node"
    by_node = {n.ray_node_id: n for n in report.nodes}
    lost = by_node[killed["node"]]
    assert lost.status == "lost"
    assert f"node {killed['node'][:8]} died" in lost.error
    assert lost.attempts == 1 and lost.results >= 1
    others = [n for n in report.nodes if n.ray_node_id != killed["node"]]
    assert [n.status for n in others] == ["complete", "complete"]
    assert all(n.results == 4 for n in others)  # 2 backends x 2 token counts
    assert not report.ok
    node_runs = {r["meta"]["ray_node_id"]: r for r in _node_runs(db_path)}
    assert node_runs[killed["node"]]["status"] == "failed"
    assert node_runs[killed["node"]]["meta"]["error"] == lost.error
    assert node_runs[killed["node"]]["results"] == lost.results  # what it measured before dying is kept
    assert sorted(r["status"] for r in node_runs.values()) == ["complete", "complete", "failed"]


# -- no cluster needed -------------------------------------------------------------------------------


def test_fleet_run_without_a_shape_is_one_error_line_and_writes_nothing(db_path):
    result = CliRunner().invoke(main, ["fleet", "run", "--address", "127.0.0.1:1", "--db", str(db_path)])
    assert result.exit_code == 2
    assert result.stderr == ("Error: nothing to measure; pass --model NAME (repeatable) or "
                             "--hidden/--top-k/--experts/--dtype\n")
    assert not db_path.exists()


@pytest.mark.parametrize("args, message", [
    (["--nodes", "0"], "Error: --nodes must be at least 1, got 0\n"),
    (["--retries", "-1"], "Error: --retries must be 0 or more, got -1\n"),
    (["--budget", "soon"], "Error: --budget 'soon' is not a duration; write e.g. 90s, 15m, 1h30m or 7d\n"),
    (["--tokens", "1,x"], "Error: --tokens item 'x' is not a whole number written in digits 0-9; e.g. 1,16,256\n"),
    (["--busy-memory", "2"], "Error: --busy-memory must be a fraction between 0 and 1, got 2.0\n"),
    (["--world-size", "1"], "Error: --world-size must be at least 2 (an all2all needs peers), got 1\n"),
])
def test_fleet_run_rejects_bad_options_before_touching_ray_or_the_db(db_path, args, message):
    result = CliRunner().invoke(main, ["fleet", "run", "--address", "127.0.0.1:1", *TINY, *args,
                                       "--db", str(db_path)])
    assert result.exit_code == 2
    assert result.stderr == message
    assert not db_path.exists()


def test_fleet_run_with_an_unknown_model_is_one_error_line(db_path, tmp_path):
    result = CliRunner().invoke(main, ["fleet", "run", "--model", str(tmp_path / "missing"), "--db", str(db_path)])
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1
    assert not db_path.exists()


def test_an_unreachable_cluster_is_one_error_line_and_writes_nothing(db_path):
    result = CliRunner().invoke(main, ["fleet", "run", "--address", "127.0.0.1:1", *TINY, "--db", str(db_path)])
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: cannot reach the Ray cluster at 127.0.0.1:1")
    assert not db_path.exists()


def test_durations_take_a_unit():
    assert [parse_duration(s) for s in ("30s", "15m", "24h", "7d", "90")] == [30, 900, 86400, 604800, 90]


def test_busy_reasons_name_each_gpu_over_a_threshold():
    gpus = [{"index": 0, "utilization": 0.0, "memory_used": 0.01},
            {"index": 1, "utilization": 0.55, "memory_used": 0.80}]
    assert busy_reasons(gpus, utilization=0.10, memory_used=0.10) == [
        "GPU 1 at 55% utilisation (limit 10%)", "GPU 1 has 80% of its memory in use (limit 10%)"]
    assert busy_reasons([], utilization=0.10, memory_used=0.10) == []  # a CPU node is never busy


def test_ray_nodes_sharing_a_machine_get_node_scoped_ids_and_unique_machines_keep_theirs():
    host = {"machine_id": "m1", "hostname": "box"}
    other = {"machine_id": "m2", "hostname": "other"}
    probes = [Probe(ray_node_id="aaaaaaaa11", host=host), Probe(ray_node_id="bbbbbbbb22", host=host),
              Probe(ray_node_id="cccccccc33", host=other)]
    scoped = node_scoped_hosts(probes)
    assert [h["hostname"] for h in scoped] == ["box/aaaaaaaa", "box/bbbbbbbb", "other"]
    assert len({h["machine_id"] for h in scoped}) == 3
    assert scoped[2]["machine_id"] == "m2"
    assert scoped == node_scoped_hosts(probes)  # stable
    assert host == {"machine_id": "m1", "hostname": "box"}  # the probes' hosts are not changed


def test_schedule_waits_every_plus_jitter_between_runs_and_keeps_going_after_an_error():
    waits, calls = [], []

    def run_once():
        calls.append(len(calls))
        if len(calls) == 2:
            raise NotEnoughNodes("cluster gone")
        return len(calls)

    reported = []
    out = fleet.run_schedule(run_once, every_s=100, jitter_s=10, count=3, sleep=waits.append,
                             rng=random.Random(7), on_error=lambda e: reported.append((len(calls), str(e))))
    assert out[0] == 1 and isinstance(out[1], NotEnoughNodes) and out[2] == 3
    assert reported == [(2, "cluster gone")]  # reported when it happened, not after the loop
    assert len(waits) == 2 and all(90 <= w <= 110 for w in waits)
    assert waits == [100 + random.Random(7).uniform(-10, 10) for _ in range(1)] + [waits[1]]


def test_schedule_rejects_a_jitter_as_long_as_the_interval(db_path):
    result = CliRunner().invoke(main, ["fleet", "schedule", "--every", "1h", "--jitter", "2h", *TINY,
                                       "--db", str(db_path)])
    assert result.exit_code == 2
    assert result.stderr == "Error: --jitter must be between 0 and --every (3600s), got 7200s\n"
    assert not db_path.exists()


@pytest.mark.slow
def test_bench_node_streams_each_result_and_stops_starting_backends_after_the_budget():
    """The node-side generator, run in this process (no Ray needed): gloo harness, world size 2."""
    from autoselect.hardware import fingerprint

    spec = fleet.FleetSpec(device="cpu", shapes=[Shape(hidden=128, top_k=2, experts=4, dtype="bf16")], tokens=[1, 4],
                           backends=["allgather_reducescatter", "reference_all_to_all"], budget_s=0.001,
                           min_samples=3, min_time_s=0.05, timeout_s=5)
    shapes = fleet.validate(spec)
    events = list(bench_node(spec.node_settings(2), shapes, fingerprint().to_dict()))
    results = [e.result for e in events if isinstance(e, ResultMeasured)]
    assert [(r.backend, r.tokens_per_rank, r.status) for r in results] == [
        ("allgather_reducescatter", 1, "ok"), ("allgather_reducescatter", 4, "ok")]
    assert isinstance(events[-1], TaskFinished) and events[-1].budget_exhausted is True
    assert {b: len(ups) for b, ups in events[-1].startups.items()} == {"allgather_reducescatter": 1}


def _captured_spec(monkeypatch, *argv):
    """Run `fleet run ARGV` with run_fleet replaced by a recorder: the FleetSpec the CLI built."""
    seen = []

    def fake_run_fleet(spec, db_path, progress=None):
        seen.append(spec)
        return FleetReport(fleet_run="f", trigger=spec.trigger, db_path=str(db_path), nodes=[], seconds=0.0)

    monkeypatch.setattr(fleet, "run_fleet", fake_run_fleet)
    result = CliRunner().invoke(main, ["fleet", "run", *argv])
    assert result.exit_code == 0, result.output
    return seen[0]


def test_the_explicit_shape_keeps_top_k_and_experts_apart(monkeypatch, db_path):
    spec = _captured_spec(monkeypatch, "--device", "cpu", "--hidden", "2048", "--top-k", "4", "--experts", "32",
                          "--dtype", "bf16", "--db", str(db_path))
    assert spec.shapes == [Shape(hidden=2048, top_k=4, experts=32, dtype="bf16")]
    (shape,) = fleet.validate(spec)
    assert (shape.hidden, shape.top_k, shape.experts, shape.activation_dtype("sm90")) == (2048, 4, 32, "bf16")
    assert shape.model == "H2048 top4 E32 bf16"  # every number named: the one spelling of a shape


@pytest.mark.parametrize("budget, seconds", [("1h30m", 5400.0), ("7d", 604800.0), ("90s", 90.0), ("2d12h", 216000.0)])
def test_fleet_run_budget_takes_every_duration_tune_takes(monkeypatch, db_path, budget, seconds):
    spec = _captured_spec(monkeypatch, *TINY, "--budget", budget, "--db", str(db_path))
    assert spec.budget_s == seconds


@pytest.mark.parametrize("argv, message", [
    (["--budget", "0s"], "Error: --budget '0s' must be longer than zero; write e.g. 90s, 15m, 1h30m or 7d\n"),
    (["--tokens", "1,,8"], "Error: --tokens '1,,8' has an empty item; separate the values by single commas, "
                           "e.g. 1,16,256\n"),
    (["--tokens", "1,٨"], "Error: --tokens item '٨' is not a whole number written in digits 0-9; e.g. 1,16,256\n"),
    (["--hidden", "128", "--top-k", "2"], "Error: missing --experts, --dtype: an explicit shape needs all of "
                                          "--hidden, --top-k, --experts and --dtype (or pass --model)\n"),
    (["--max-noise", "nan"], "Error: --max-noise 'nan' is not a finite number written in digits 0-9 (e.g. 0.5, 30, 1e-3)\n"),
])
def test_fleet_run_refuses_bad_options_in_one_line(db_path, argv, message):
    base = ["--device", "cpu", "--hidden", "128", "--top-k", "2", "--experts", "4", "--dtype", "bf16"]
    if argv[0] == "--hidden":
        base = ["--device", "cpu"]
    result = CliRunner().invoke(main, ["fleet", "run", *base, *argv, "--db", str(db_path)])
    assert (result.exit_code, result.stderr) == (2, message)
    assert not db_path.exists()
