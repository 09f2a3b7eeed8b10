"""The store under concurrent writers and a writer killed mid-run (real processes, real SQLite)."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from support.paths import REPO, TESTS

from autoselect.cli import main
from db.store import Store

#: The writer process: ``python -m support.db_writer`` (tests/ and the repository on its path).
WRITER_PATH = os.pathsep.join(filter(None, [str(TESTS), str(REPO), os.environ.get("PYTHONPATH")]))


def _writer(db: Path, machine: str, results: int, samples: int, go: Path | None = None) -> subprocess.Popen:
    args = [sys.executable, "-m", "support.db_writer", str(db), machine, str(results), str(samples)] + ([str(go)] if go else [])
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": WRITER_PATH})


@pytest.mark.slow
def test_four_processes_writing_at_once_lose_nothing(tmp_path):
    db, go = tmp_path / "results.db", tmp_path / "go"
    Store(db).close()
    procs = [_writer(db, f"node-{i}", 60, 200, go) for i in range(4)]
    for p in procs:
        assert p.stdout.readline() == "ready\n"
    go.touch()  # all four start writing together
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert out.splitlines()[-1] == "committed 60"
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 240
    assert conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == 240 * 200
    per_writer = conn.execute(
        "SELECT h.hostname, COUNT(*), COUNT(DISTINCT r.tokens_per_rank) FROM results r"
        " JOIN hosts h ON h.machine_id = r.machine_id GROUP BY h.hostname ORDER BY 1"
    ).fetchall()
    assert per_writer == [(f"node-{i}", 60, 60) for i in range(4)]
    order = [r[0] for r in conn.execute("SELECT machine_id FROM results ORDER BY id")]
    switches = sum(a != b for a, b in zip(order, order[1:]))
    assert switches > 3  # the writers really interleaved, they did not run one after another
    assert conn.execute("SELECT status, COUNT(*) FROM runs GROUP BY status").fetchall() == [("complete", 4)]
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.mark.slow
def test_four_processes_creating_the_same_new_database_at_once_all_succeed(tmp_path):
    db = tmp_path / "fresh.db"  # does not exist yet: every writer races to create and migrate it
    procs = [_writer(db, f"node-{i}", 5, 10) for i in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    conn = sqlite3.connect(db)
    from db.schema import latest_version

    assert conn.execute("PRAGMA user_version").fetchone()[0] == latest_version()
    assert conn.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 20


@pytest.mark.slow
def test_a_writer_killed_mid_run_leaves_whole_rows_and_an_interrupted_run(tmp_path):
    db = tmp_path / "results.db"
    p = _writer(db, "node-k", 0, 5000)  # writes until killed; 5000 samples per result
    assert p.stdout.readline() == "ready\n"
    committed = 0
    while committed < 8:
        committed = int(p.stdout.readline().split()[1])
    p.send_signal(signal.SIGKILL)  # most likely inside a transaction: the writer never pauses
    p.wait(timeout=30)
    assert p.returncode == -signal.SIGKILL

    conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    n = conn.execute("SELECT COUNT(*) FROM results").fetchone()[0]
    assert n >= committed
    assert conn.execute(
        "SELECT COUNT(*) FROM results r WHERE r.samples != (SELECT COUNT(*) FROM samples s WHERE s.result_id = r.id)"
    ).fetchone()[0] == 0  # whole rows only: every result has all its samples
    assert conn.execute("SELECT status FROM runs").fetchall() == [("running",)]
    conn.close()

    runner = CliRunner()
    check = runner.invoke(main, ["db", "check", "--db", str(db)])
    assert check.exit_code == 0 and "verdict           ok" in check.stdout
    assert "stale run #1" in check.stdout

    with Store(db) as s:  # the next writer's open marks the run
        assert [(r["id"], r["reason"]) for r in s.interrupted] == [(1, f"writer process {p.pid} on {socket.gethostname()} is gone")]
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT status, finished_at FROM runs").fetchall() == [("interrupted", None)]
    assert conn.execute("SELECT COUNT(*) FROM results").fetchone()[0] == n
    info = runner.invoke(main, ["db", "info", "--db", str(db)])
    assert "interrupted runs  #1" in info.stdout


@pytest.mark.slow
def test_writers_killed_at_arbitrary_moments_never_leave_half_a_row(tmp_path):
    import time

    db = tmp_path / "results.db"
    for round_, delay in enumerate((0.05, 0.13, 0.29), start=1):
        p = _writer(db, f"node-{round_}", 0, 3000)
        assert p.stdout.readline() == "ready\n"
        time.sleep(delay)  # wherever the writer happens to be: inside add_result most of the time
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
        conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute(
            "SELECT COUNT(*) FROM results r WHERE r.samples != (SELECT COUNT(*) FROM samples s WHERE s.result_id = r.id)"
        ).fetchone()[0] == 0
        conn.close()
        with Store(db) as s:
            assert [r["id"] for r in s.interrupted] == [round_]
    statuses = sqlite3.connect(db).execute("SELECT status FROM runs ORDER BY id").fetchall()
    assert statuses == [("interrupted",)] * 3
