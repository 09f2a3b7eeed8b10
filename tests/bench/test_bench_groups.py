"""Long-lived worker groups on CPU (gloo): one start-up for many jobs, isolation, honest state between jobs.

Every test runs real worker processes (``python -m bench.launch``) through
:class:`bench.launch.WorkerGroups` and :func:`bench.sweep.run_sweep`; the stateful and faulty
adapters are the test plugins (``tests/plugins``, registered through a dist-info entry point).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from bench.events import GroupStarted, JobFinished
from bench.launch import WorkerGroups, zygote
from bench.sweep import SweepSpec, run_sweep

FAST = dict(min_time_s=0.02, min_samples=10, timeout_s=1.0)
SHAPE = dict(hidden=256, top_k=4, experts=16, activation_dtype="bf16", device="cpu", world_size=2)


@pytest.fixture
def build_log(tmp_path, monkeypatch):
    """Where the stateful test adapters note each buffer they build (pid, rank, budget)."""
    path = tmp_path / "builds.jsonl"
    monkeypatch.setenv("AUTOSELECT_TEST_BUILD_LOG", str(path))
    return lambda: [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _spec(backends, tokens=(4,), **kw):
    return SweepSpec(backends=list(backends), tokens=list(tokens), **{**SHAPE, **FAST, **kw})


def _statuses(results):
    return [(r.backend, r.tokens_per_rank, r.status) for r in results]


def _startups(log, backend=None):
    return [e for e in log("start-up") if backend in (None, e["backend"])]


@pytest.mark.slow
def test_one_group_per_backend_serves_every_job_of_its_caller(timing_log):
    events = []
    with WorkerGroups() as groups:
        first = run_sweep(_spec(["reference_all_to_all", "allgather_reducescatter"], tokens=(1, 8)),
                          groups=groups, progress=events.append)
        pids = [p.pid for p in groups.groups["reference_all_to_all"].procs]
        second = run_sweep(_spec(["reference_all_to_all"], tokens=(4,), hidden=128), groups=groups,
                           progress=events.append)
        assert [p.pid for p in groups.groups["reference_all_to_all"].procs] == pids  # the same processes
    assert {r.status for r in first + second} == {"ok"}
    assert [(e.backend, e.reason) for e in events if isinstance(e, GroupStarted)] == [
        ("reference_all_to_all", "first use"), ("allgather_reducescatter", "first use")]
    jobs = [(e.backend, e.points, e.startups) for e in events if isinstance(e, JobFinished)]
    assert jobs == [("reference_all_to_all", 2, 1), ("allgather_reducescatter", 1 + 1, 1), ("reference_all_to_all", 1, 0)]
    assert len(_startups(timing_log)) == 2
    points = timing_log()
    assert [e["job"] for e in points if e["backend"] == "reference_all_to_all"] == [1, 1, 2]
    assert all(e["seconds"] > 0 for e in points)


@pytest.mark.slow
def test_a_start_up_knob_restarts_the_group_and_the_timing_log_says_why(plugins, timing_log):
    with WorkerGroups() as groups:
        run_sweep(_spec(["reference_all_to_all"]), groups=groups)
        (r,) = run_sweep(_spec(["reference_all_to_all"], env={"AUTOSELECT_TEST_KNOB": "7"}), groups=groups)
        run_sweep(_spec(["reference_all_to_all"], env={"AUTOSELECT_TEST_KNOB": "7"}, tokens=(8,)), groups=groups)
    assert r.status == "ok" and r.knobs == {"env": {"AUTOSELECT_TEST_KNOB": "7"}}
    reasons = [e["reason"] for e in _startups(timing_log)]
    assert reasons == ["first use", "start-up knobs changed (AUTOSELECT_TEST_KNOB=unset -> 7)"]
    closes = [e["reason"] for e in timing_log("close")]
    assert closes[0] == "restart: start-up knobs changed (AUTOSELECT_TEST_KNOB=unset -> 7)"


@pytest.mark.slow
def test_a_crash_costs_one_point_and_the_rest_of_the_job_runs_in_a_fresh_group(plugins, timing_log, monkeypatch):
    monkeypatch.setenv("AUTOSELECT_TEST_FAULT_AFTER", "1")  # rank 1 dies at the second point it sets up
    with WorkerGroups() as groups:
        results = run_sweep(_spec(["test_crashes_later"], tokens=(2, 4, 8)), groups=groups)
        (later,) = run_sweep(_spec(["test_crashes_later"], tokens=(16,)), groups=groups)
    assert _statuses(results) == [("test_crashes_later", 2, "ok"), ("test_crashes_later", 4, "error"),
                                  ("test_crashes_later", 8, "ok")]
    assert results[1].error.startswith("rank 1 died (exit status 13)")
    # the fresh group's first point is its first setup: no crash; the next job's point is its second
    assert later.status == "error"
    reasons = [e["reason"] for e in _startups(timing_log)]
    assert reasons[:2] == ["first use", "the previous group crashed (error at 4 tokens/rank)"]


@pytest.mark.slow
def test_a_hang_is_a_timeout_for_its_point_and_only_its_group_is_restarted(plugins, timing_log, monkeypatch):
    monkeypatch.setattr("bench.launch.group.MEASURE_GRACE_S", 1.0)
    monkeypatch.setenv("AUTOSELECT_TEST_FAULT_AFTER", "1")
    with WorkerGroups() as groups:
        results = run_sweep(_spec(["test_hangs_later", "reference_all_to_all"], tokens=(2, 4, 8), timeout_s=0.5),
                            groups=groups)
    assert _statuses(results) == [
        ("test_hangs_later", 2, "ok"), ("test_hangs_later", 4, "timeout"), ("test_hangs_later", 8, "ok"),
        ("reference_all_to_all", 2, "ok"), ("reference_all_to_all", 4, "ok"), ("reference_all_to_all", 8, "ok"),
    ], [r.error for r in results]
    assert "wall-clock limit" in results[1].error
    assert [e["reason"] for e in _startups(timing_log, "test_hangs_later")] == [
        "first use", "the previous group hung (timeout at 4 tokens/rank)"]
    assert len(_startups(timing_log, "reference_all_to_all")) == 1


@pytest.mark.slow
def test_a_larger_batch_rebuilds_the_buffer_inside_the_group(plugins, timing_log, build_log):
    # like DeepEP low latency crossing its 256-token budget: the same processes rebuild
    results = run_sweep(_spec(["test_rebuilds_in_group"], tokens=(4, 300, 8)))
    assert [r.status for r in results] == ["ok", "ok", "ok"]
    assert len(_startups(timing_log)) == 1
    builds = build_log()
    assert [b["built"] for b in builds if b["rank"] == 0] == [256, 300, 256]
    assert len({b["pid"] for b in builds if b["rank"] == 0}) == 1


@pytest.mark.slow
def test_a_buffer_that_cannot_be_rebuilt_gets_a_fresh_group_for_the_larger_batch(plugins, timing_log, build_log):
    results = run_sweep(_spec(["test_needs_fresh_process"], tokens=(4, 8, 300)))
    assert [r.status for r in results] == ["ok", "ok", "ok"]
    startups = _startups(timing_log)
    assert [e["reason"] for e in startups] == [
        "first use", "the adapter needs a fresh process at 300 tokens/rank: its buffer holds 256 tokens "
                     "per rank and cannot be rebuilt in this process"]
    builds = [b for b in build_log() if b["rank"] == 0]
    assert [b["built"] for b in builds] == [256, 300] and builds[0]["pid"] != builds[1]["pid"]


@pytest.mark.slow
@pytest.mark.parametrize("poison, second", [(True, "incorrect"), (False, "ok")])
def test_every_job_re_gates_and_a_reused_workspace_is_poisoned_first(plugins, monkeypatch, poison, second):
    # The adapter's defect: once its per-geometry workspace holds rows, dispatch delivers
    # nothing. The first job passes (its gate ran the real exchange); the second job's gate,
    # in the same processes, sees the poisoned workspace. Without the poison it would pass on
    # the first job's bytes: that is what the poison is for.
    if not poison:
        monkeypatch.setenv("AUTOSELECT_TEST_NO_POISON", "1")
    with WorkerGroups() as groups:
        (a,) = run_sweep(_spec(["test_stale_workspace"]), groups=groups)
        (b,) = run_sweep(_spec(["test_stale_workspace"]), groups=groups)
        assert len(groups.groups["test_stale_workspace"].startups) == 1
    assert a.status == "ok" and b.status == second
    if poison:
        assert b.error.startswith("dispatch: rank 0: received row 0 names token -1, outside [0, 8)")


@pytest.mark.slow
def test_an_allocation_failure_is_a_harness_failure_not_an_error(plugins, timing_log):
    results = run_sweep(_spec(["test_setup_out_of_memory"], tokens=(4, 128, 8)))
    assert [r.status for r in results] == ["ok", "harness_error", "ok"]
    assert results[1].error.startswith("rank ") and ("harness failure in the backend's setup at 128 tokens/rank: "
                                                     "MemoryError: cannot allocate the workspace for 128") in results[1].error
    assert [e["reason"] for e in _startups(timing_log)][1] == "the previous group crashed (harness_error at 128 tokens/rank)"


@pytest.mark.slow
def test_a_point_the_harness_cannot_build_is_a_harness_failure_and_the_session_goes_on(tmp_path):
    # an overflowing seed: the payload generator raises before the adapter is touched; the
    # ranks agree on it and run the next point in the same processes
    import torch.distributed as dist

    from bench.launch import GroupConfig, Job
    from bench.launch.worker import WorkerSession

    events = []
    session = WorkerSession(GroupConfig("reference_all_to_all", 1, "cpu"), 0, 1, events.append,
                            init_method=f"file://{tmp_path / 'rendezvous'}")
    assert session.open() is None
    try:
        for seed in (2**70, 0):
            session.run_job(seed and 1 or 2, Job(tokens=(4,), hidden=256, top_k=4, experts=16, wire_dtype="bf16",
                                                 seed=seed, min_time_s=0.01, timeout_s=0.5))
    finally:
        session.close()
    assert not dist.is_initialized()
    results = [e for e in events if e["event"] == "result"]
    assert [r["status"] for r in results] == ["harness_error", "ok"]
    assert results[0]["error"].startswith("harness failure building the point: ValueError: Overflow when unpacking")
    assert results[0]["error"].endswith("not counted against the backend")


@pytest.mark.slow
def test_bench_stores_no_row_for_a_harness_failure_and_keeps_it_with_the_run(plugins, db_path):
    # a harness failure is no measurement of the backend: recommend must never see it as one
    import sqlite3

    from click.testing import CliRunner

    from autoselect.cli import main

    res = CliRunner().invoke(main, [
        "bench", "--device", "cpu", "--world-size", "2", "--hidden", "256", "--top-k", "4", "--experts", "16",
        "--dtype", "bf16", "--backends", "test_setup_out_of_memory", "--tokens", "4,128", "--min-time", "0.02",
        "--timeout", "1", "--db", str(db_path)])
    assert res.exit_code == 0, res.output
    assert "# ok 1 · incorrect 0 · unavailable 0 · error 0 · timeout 0 · harness_error 1 · skipped (illegal) 0" in res.stdout
    assert ("# test_setup_out_of_memory @ 128: harness_error: rank 0: harness failure in the backend's setup at "
            "128 tokens/rank: MemoryError") in res.stdout.replace("rank 1:", "rank 0:")
    assert "recommend does not count it against the backend" in res.stdout
    conn = sqlite3.connect(db_path)
    assert conn.execute("select tokens_per_rank, status from results").fetchall() == [(4, "ok")]
    (meta,) = conn.execute("select meta from runs").fetchone()
    (failure,) = json.loads(meta)["harness_failures"]
    assert failure["backend"] == "test_setup_out_of_memory" and failure["tokens_per_rank"] == 128
    assert "not counted against the backend" in failure["error"]


@pytest.mark.slow
def test_a_point_measured_again_in_a_group_reuses_its_harness_tables(tmp_path):
    from bench.launch import GroupConfig, Job
    from bench.launch.worker import WorkerSession

    events = []
    session = WorkerSession(GroupConfig("reference_all_to_all", 1, "cpu"), 0, 1, events.append,
                            init_method=f"file://{tmp_path / 'rendezvous'}")
    session.open()
    job = Job(tokens=(4,), hidden=256, top_k=4, experts=16, wire_dtype="bf16", min_time_s=0.01, timeout_s=0.5)
    try:
        session.run_job(1, job)
        (point,) = session._points.values()
        session.run_job(2, job)
        assert list(session._points.values()) == [point]  # the same object: tables generated once
        session.run_job(3, job.with_tokens((8,)))
        assert len(session._points) == 2
    finally:
        session.close()
    assert [e["status"] for e in events if e["event"] == "result"] == ["ok", "ok", "ok"]


def _parent_of(pid: int) -> int:
    from pathlib import Path

    return int(next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                    if line.startswith("PPid:")).split()[1])


@pytest.mark.slow
def test_ranks_are_forks_of_one_zygote_unless_the_group_has_start_up_env_vars(plugins):
    import os

    with WorkerGroups() as groups:
        run_sweep(_spec(["reference_all_to_all", "allgather_reducescatter"]), groups=groups)
        zygote = groups._zygote.proc.pid
        for backend in ("reference_all_to_all", "allgather_reducescatter"):
            procs = groups.groups[backend].procs
            assert [_parent_of(p.pid) for p in procs] == [zygote, zygote]
            assert [os.getpgid(p.pid) for p in procs] == [procs[0].pid] * 2  # one killpg ends the group
        # a variable read while torch is imported could not take effect in a fork: spawned
        (r,) = run_sweep(_spec(["reference_all_to_all"], env={"AUTOSELECT_TEST_KNOB": "7"}), groups=groups)
        assert r.status == "ok"
        assert [_parent_of(p.pid) for p in groups.groups["reference_all_to_all"].procs] == [os.getpid()] * 2
        procs = groups.groups["allgather_reducescatter"].procs
    assert all(p.poll() is not None for p in procs)  # closed with the pool, the zygote too
    assert groups._zygote is None


def _reaped() -> subprocess.Popen:
    """A process that has exited and been reaped (nothing answers to its pid now)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child


def test_a_reaped_rank_whose_status_is_still_being_written_is_not_taken_for_killed(tmp_path):
    # The zygote reaps a rank, then writes its exit status: in between, the pid is gone and the
    # file is not there. That rank exited on its own (an adapter's error, status 3); reading it as
    # SIGKILLed there turned "rank 0: ValueError: ..." into "rank 0 died (signal 9)".
    living_zygote = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        rank = zygote.ForkedProcess(_reaped().pid, tmp_path, 0, living_zygote)
        assert rank.poll() is None
        assert rank.poll() is None
        (tmp_path / "rank0.exit").write_text("3")
        assert rank.poll() == 3
    finally:
        living_zygote.kill()
        living_zygote.wait()


def test_a_reaped_rank_without_a_status_was_killed_with_the_zygote(tmp_path):
    # init reaped it: the zygote that would have written its status is gone
    rank = zygote.ForkedProcess(_reaped().pid, tmp_path, 0, _reaped())
    assert rank.poll() == -signal.SIGKILL


def test_a_status_written_before_the_zygote_died_is_kept(tmp_path):
    (tmp_path / "rank0.exit").write_text("3")
    rank = zygote.ForkedProcess(_reaped().pid, tmp_path, 0, _reaped())
    assert rank.poll() == 3
