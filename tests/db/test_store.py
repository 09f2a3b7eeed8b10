"""The results store's library API: schema, writes, reads, refusals, interrupted runs, export."""

from __future__ import annotations

import io
import json
import sqlite3
from dataclasses import fields
from pathlib import Path

import pytest

from support.db import dead_pid, filled_db, file_state, hgx_host, make_result, single_h200_host

from db import jsonl, queries
from db.errors import (
    BadImportRecord,
    DatabaseNotFound,
    DatabaseTooNew,
    ForeignDatabase,
    ImportFormatTooNew,
    NotADatabase,
)
from db.importing import import_file, merge_into
from db.info import info_at
from db.records import Result
from db.schema import latest_version, migrations
from db.store import Store


def test_a_new_store_has_the_latest_schema_in_wal_mode(db_path):
    Store(db_path).close()
    conn = sqlite3.connect(db_path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == latest_version()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"hosts", "runs", "results", "samples"} <= tables


def test_the_store_turns_foreign_keys_on(db_path):
    with Store(db_path) as s:
        assert s.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        with pytest.raises(sqlite3.IntegrityError):
            s.conn.execute("INSERT INTO samples (result_id, idx, latency_us) VALUES (999, 0, 1.0)")


def test_migrations_are_numbered_without_gaps_and_start_with_a_docstring():
    ms = migrations()
    assert [m.version for m in ms] == list(range(1, len(ms) + 1))
    assert ms[0].name == "0001_initial.sql"
    assert all(m.description for m in ms)


def test_an_added_result_reads_back_with_every_field_and_its_raw_samples(db_path):
    r = make_result("flashinfer_nvlink_two_sided", 32)
    with Store(db_path) as s:
        run = s.begin_run(hgx_host("node-a"))
        rid = s.add_result(run, r)
    conn = queries.connect_readonly(db_path)
    [got] = queries.results_for(conn, hidden=7168, top_k=8, experts=256, activation_dtype="fp8_block128")
    for f in fields(Result):
        if f.name not in ("created_at", "raw_samples_us"):
            assert getattr(got, f.name) == getattr(r, f.name), f.name
    assert got.created_at.endswith("+00:00") and r.created_at is None  # set on the row, not on the object
    assert (got.id, got.run_id, got.hostname, got.gpu_name, got.gpu_arch) == (rid, run, "node-a", "NVIDIA H200", "sm90")
    assert got.host_class == hgx_host().host_class
    assert queries.samples_for(conn, rid) == r.raw_samples_us


def test_results_for_filters_by_shape_host_world_size_and_status(db_path):
    filled_db(db_path)
    conn = queries.connect_readonly(db_path)
    shape = dict(hidden=7168, top_k=8, experts=256, activation_dtype="fp8_block128")
    hgx = hgx_host().host_class
    assert [(r.backend, r.hostname) for r in queries.results_for(conn, **shape, host_class=hgx)] == [
        ("allgather_reducescatter", "node-a"), ("flashinfer_nvlink_two_sided", "node-a"), ("deepep_low_latency", "node-a")]
    assert [r.backend for r in queries.results_for(conn, **shape, host_class=hgx, statuses=["ok"])] == [
        "allgather_reducescatter", "flashinfer_nvlink_two_sided"]
    assert [r.status for r in queries.results_for(conn, **shape, world_size=1)] == ["ok", "incorrect"]
    assert [r.hostname for r in queries.results_for(conn, **{**shape, "activation_dtype": "nvfp4"})] == ["node-b"]
    assert queries.results_for(conn, **shape, kind="e2e") == []


def test_host_classes_group_machines_and_newest_host_returns_a_fingerprint(db_path):
    filled_db(db_path)
    conn = queries.connect_readonly(db_path)
    classes = {c["host_class"]: c for c in queries.host_classes(conn)}
    hgx = classes[hgx_host().host_class]
    assert (hgx["gpu_name"], hgx["gpu_count"], hgx["gpu_arch"], hgx["machines"]) == ("NVIDIA H200", 8, "sm90", 2)
    fp = queries.newest_host(conn, hgx_host().host_class)
    assert fp.hostname == "node-b" and fp.nvlink_matrix == hgx_host().nvlink_matrix
    assert queries.newest_host(conn, "nope") is None


def test_a_database_from_a_newer_autoselect_is_refused_and_left_untouched(db_path):
    filled_db(db_path)
    conn = sqlite3.connect(db_path)
    conn.execute(f"PRAGMA user_version = {latest_version() + 1}")
    conn.close()
    before = file_state(db_path)
    msg = (f"{db_path} was written by a newer autoselect (schema {latest_version() + 1} > {latest_version()}); "
           "upgrade autoselect")
    with pytest.raises(DatabaseTooNew) as e:
        Store(db_path)
    assert str(e.value) == msg
    with pytest.raises(DatabaseTooNew):
        queries.connect_readonly(db_path)
    assert file_state(db_path) == before


def test_a_garbage_file_is_refused_and_left_untouched(db_path):
    db_path.write_bytes(b"these are not the results you are looking for\n" * 40)
    before = file_state(db_path)
    for open_it in (Store, queries.connect_readonly):
        with pytest.raises(NotADatabase) as e:
            open_it(db_path)
        assert str(e.value) == (f"{db_path} is not an SQLite database; "
                                "pass --db with the path of an autoselect results database")
    assert file_state(db_path) == before


def test_another_programs_sqlite_database_is_refused(db_path):
    conn = sqlite3.connect(db_path)
    conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    before = file_state(db_path)
    with pytest.raises(ForeignDatabase):
        Store(db_path)
    assert file_state(db_path) == before


def test_readers_never_create_a_missing_database(db_path):
    with pytest.raises(DatabaseNotFound) as e:
        queries.connect_readonly(db_path)
    assert str(e.value) == f"no results database at {db_path}; run `autoselect bench` to measure, or pass --db PATH"
    with pytest.raises(DatabaseNotFound):
        Store(db_path, create=False)
    assert list(db_path.parent.iterdir()) == []


def _raw_running_run(path: Path, hostname: str, pid: int, updated_at: str) -> int:
    """Insert a run left 'running' by some writer, bypassing the Store (as a crash would leave it)."""
    with Store(path) as s:
        run = s.begin_run(hgx_host("node-a"))
    conn = sqlite3.connect(path)
    conn.execute("UPDATE runs SET hostname = ?, pid = ?, updated_at = ?, started_at = ? WHERE id = ?",
                 (hostname, pid, updated_at, updated_at, run))
    conn.commit()
    conn.close()
    return run


def _status(path: Path, run: int) -> str:
    return sqlite3.connect(path).execute("SELECT status FROM runs WHERE id = ?", (run,)).fetchone()[0]


def test_a_run_whose_writer_on_this_host_died_is_marked_interrupted_on_open(db_path):
    import socket

    from db.rows import now_iso

    run = _raw_running_run(db_path, socket.gethostname(), dead_pid(), now_iso())
    with Store(db_path) as s:
        assert [r["id"] for r in s.interrupted] == [run]
        assert "is gone" in s.interrupted[0]["reason"]
    assert _status(db_path, run) == "interrupted"


def test_a_recent_run_of_another_host_stays_running_and_an_old_one_is_interrupted(db_path):
    from db.rows import now_iso

    recent = _raw_running_run(db_path, "some-other-node", 1, now_iso())
    old = _raw_running_run(db_path, "some-other-node", 1, "2026-01-01T00:00:00+00:00")
    Store(db_path).close()
    assert (_status(db_path, recent), _status(db_path, old)) == ("running", "interrupted")


def test_readers_report_a_dead_writers_run_as_stale_without_writing(db_path):
    import socket

    from db.rows import now_iso

    run = _raw_running_run(db_path, socket.gethostname(), dead_pid(), now_iso())
    info = info_at(db_path)
    assert [r["id"] for r in info["stale_running_runs"]] == [run]
    assert _status(db_path, run) == "running"


def test_the_running_writer_own_run_is_not_interrupted_by_another_open(db_path):
    with Store(db_path) as s:
        run = s.begin_run(hgx_host("node-a"))
        with Store(db_path) as other:
            assert other.interrupted == []
        s.add_result(run, make_result())
    assert _status(db_path, run) == "running"


def test_add_result_refuses_a_status_the_schema_does_not_know(db_path):
    with Store(db_path) as s:
        run = s.begin_run(hgx_host())
        with pytest.raises(ValueError, match="status must be one of"):
            s.add_result(run, make_result(status="fast"))
        with pytest.raises(ValueError, match="samples=3 but 12 raw samples"):
            s.add_result(run, make_result(samples=3))
        assert s.conn.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 0


def _run_rows(path: Path) -> list[tuple]:
    conn = queries.connect_readonly(path)
    rows = [(r["status"], r["trigger"], r["command"], r["meta"], r["results"], r["finished_at"] is not None)
            for r in queries.runs(conn)]
    conn.close()
    return rows


def test_store_run_finishes_complete_failed_or_interrupted_and_merges_the_handles_meta(db_path):
    with Store(db_path) as s:
        with s.run(hgx_host(), trigger="bench", command="autoselect bench", meta={"spec": 1}) as run:
            s.add_result(run.id, make_result())
            run.meta["seconds"] = 2.5
        with pytest.raises(RuntimeError, match="worker crashed"):
            with s.run(hgx_host(), trigger="tune") as run:
                run.meta["stage"] = "screen"
                raise RuntimeError("worker crashed")
        with pytest.raises(KeyboardInterrupt):
            with s.run(hgx_host(), trigger="confirm"):
                raise KeyboardInterrupt("signal 15")
        with s.run(hgx_host(), trigger="fleet") as run:
            run.status = "failed"  # the body decided, without raising
    assert _run_rows(db_path) == [
        ("complete", "bench", "autoselect bench", {"spec": 1, "seconds": 2.5}, 1, True),
        ("failed", "tune", None, {"stage": "screen"}, 0, True),
        ("interrupted", "confirm", None, {}, 0, True),
        ("failed", "fleet", None, {}, 0, True),
    ]


def _export(path: Path) -> str:
    out = io.StringIO()
    conn = queries.connect_readonly(path)
    jsonl.write_jsonl(conn, out)
    conn.close()
    return out.getvalue()


def _dump(path: Path) -> dict:
    conn = sqlite3.connect(path)
    return {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in ("hosts", "runs", "results", "samples")}


def test_import_export_import_round_trips_exactly(tmp_path):
    a = filled_db(tmp_path / "a.db")
    exported = _export(a)
    (tmp_path / "a.jsonl").write_text(exported)
    first = import_file(tmp_path / "b.db", tmp_path / "a.jsonl")
    assert first.to_dict() == {"results_added": 6, "results_present": 0, "runs_added": 3, "hosts_added": 3,
                               "tuned_added": 0, "tuned_present": 0}
    assert _export(tmp_path / "b.db") == exported
    assert _dump(tmp_path / "b.db") == _dump(a)
    again = import_file(tmp_path / "b.db", tmp_path / "a.jsonl")
    assert again.to_dict() == {"results_added": 0, "results_present": 6, "runs_added": 0, "hosts_added": 0,
                               "tuned_added": 0, "tuned_present": 0}
    assert _dump(tmp_path / "b.db") == _dump(a)


def test_each_exported_line_is_a_versioned_record_with_host_run_and_result(db_path):
    filled_db(db_path)
    rec = json.loads(_export(db_path).splitlines()[0])
    assert (rec["format"], rec["schema_version"]) == ("autoselect.result", 4)
    assert sorted(rec) == ["format", "host", "result", "result_key", "run", "schema_version"]
    assert rec["host"]["gpu_count"] == 8 and rec["run"]["trigger"] == "bench" and rec["run"]["meta"] == {"sweep": 1}
    assert rec["result"]["raw_samples_us"] == make_result("allgather_reducescatter", 1).raw_samples_us


def test_merge_is_idempotent_and_carries_a_later_run_status(tmp_path):
    a = filled_db(tmp_path / "a.db")
    with Store(tmp_path / "fleet.db") as s:
        run = s.begin_run(single_h200_host("other-vm"))
        s.add_result(run, make_result(world_size=1))
        s.finish_run(run)
    first = merge_into(tmp_path / "fleet.db", a)
    assert (first.results_added, first.runs_added) == (6, 3)
    assert merge_into(tmp_path / "fleet.db", a).results_added == 0
    assert sqlite3.connect(tmp_path / "fleet.db").execute("SELECT COUNT(*) FROM results").fetchone()[0] == 7


def test_merge_brings_a_run_finished_elsewhere_forward(tmp_path):
    with Store(tmp_path / "node.db") as s:
        run = s.begin_run(hgx_host("node-a"))
        s.add_result(run, make_result())
        merge_into(tmp_path / "fleet.db", tmp_path / "node.db")  # copied while the run was going
        s.finish_run(run)
    assert merge_into(tmp_path / "fleet.db", tmp_path / "node.db").results_added == 0
    conn = sqlite3.connect(tmp_path / "fleet.db")
    assert conn.execute("SELECT status FROM runs").fetchall() == [("complete",)]


@pytest.mark.parametrize(
    "mutate, error, message",
    [
        (lambda r: r.update(format="other"), BadImportRecord, "format is 'other', expected 'autoselect.result'"),
        (lambda r: r.update(schema_version=5), ImportFormatTooNew, "record format 5 is newer than this autoselect reads (4)"),
        (lambda r: r["result"].update(hidden="7168"), BadImportRecord, "result.hidden is '7168', not an integer"),
        (lambda r: r["result"].update(status="fast"), BadImportRecord, "result.status is 'fast', not one of"),
        (lambda r: r["result"].update(speed=1), BadImportRecord, "unknown result field(s) speed"),
        (lambda r: r["result"].update(tokens_per_rank=3), BadImportRecord, "result_key does not match"),
        (lambda r: r["run"].pop("uid"), BadImportRecord, "run.uid is required (it is null or missing)"),
    ],
)
def test_a_bad_import_line_is_refused_before_anything_is_written(tmp_path, mutate, error, message):
    lines = _export(filled_db(tmp_path / "a.db")).splitlines()
    rec = json.loads(lines[1])
    mutate(rec)
    lines[1] = json.dumps(rec)
    f = tmp_path / "bad.jsonl"
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(error) as e:
        import_file(tmp_path / "new.db", f)
    assert str(e.value).startswith(f"{f} line 2: ") and message in str(e.value)
    assert not (tmp_path / "new.db").exists()


def test_all_results_and_runs_list_everything_oldest_first(db_path):
    filled_db(db_path)
    conn = queries.connect_readonly(db_path)
    assert [r.tokens_per_rank for r in queries.all_results(conn)] == [1, 1, 1, 64, 64, 128]
    assert [r.backend for r in queries.all_results(conn, statuses=["incorrect"])] == ["flashinfer_nvlink_one_sided"]
    assert len(queries.all_results(conn, host_class=hgx_host().host_class, kind="micro")) == 4
    rs = queries.runs(conn)
    assert [(r["id"], r["hostname"], r["status"], r["trigger"], r["results"]) for r in rs] == [
        (1, "node-a", "complete", "bench", 3), (2, "h200-vm", "failed", "fleet", 2), (3, "node-b", "complete", "bench", 1)]
    assert rs[0]["meta"] == {"sweep": 1} and rs[0]["command"] == "autoselect bench"


def test_the_same_point_stored_twice_with_one_timestamp_stays_two_results_through_a_round_trip(tmp_path):
    a = tmp_path / "a.db"
    with Store(a) as s:
        run = s.begin_run(hgx_host())
        first = s.add_result(run, make_result(created_at="2026-11-30T01:00:00+00:00"))
        second = s.add_result(run, make_result(created_at="2026-11-30T01:00:00+00:00"))
    conn = sqlite3.connect(a)
    assert conn.execute("SELECT id, created_at FROM results ORDER BY id").fetchall() == [
        (first, "2026-11-30T01:00:00+00:00"), (second, "2026-11-30T01:00:00.000001+00:00")]
    (tmp_path / "a.jsonl").write_text(_export(a))
    assert import_file(tmp_path / "b.db", tmp_path / "a.jsonl").results_added == 2
