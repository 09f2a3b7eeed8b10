"""Hostile input to the results database: export targets, poisoned import records, rows an older
version let in, read-only and device databases, and dropping a run.

Each test is one example of a defect class; the property-based tests in
tests/test_hostile_properties.py generate many more of each class.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import threading
from pathlib import Path

import pytest

from support.db import file_state, filled_db
from support.hostile import cli, refused, run_module, tree_state, unprivileged
from support.paths import FIXTURES

from db.importing import import_file

RESULTS = FIXTURES / "results"
MODELS = FIXTURES / "models"
H200 = "h200x8-5d1c7e0a"


def export_text(db: Path) -> str:
    r = cli("db", "export", "--db", db)
    assert r.exit_code == 0, r.stderr
    return r.stdout


# --- db export -o never destroys its target ------------------------------------------------


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm", "-journal"])
def test_export_refuses_the_database_and_its_sidecar_files(tmp_path, suffix):
    db = filled_db(tmp_path / "a.db")
    cli("db", "info", "--db", db)  # a read leaves -wal and -shm beside it
    before = tree_state(tmp_path)
    line = refused(cli("db", "export", "--db", db, "-o", f"{db}{suffix}"))
    assert "would destroy the database" in line
    assert tree_state(tmp_path) == before


def test_export_refuses_the_database_through_a_symlink_or_a_hard_link(tmp_path):
    db = filled_db(tmp_path / "a.db")
    (tmp_path / "link.jsonl").symlink_to(db)
    os.link(db, tmp_path / "hard.jsonl")
    before = file_state(db)
    for target in ("link.jsonl", "hard.jsonl"):
        refused(cli("db", "export", "--db", db, "-o", tmp_path / target))
    assert file_state(db) == before


def test_export_writes_a_device_in_place_and_leaves_it_a_device(tmp_path):
    db = filled_db(tmp_path / "a.db")
    r = cli("db", "export", "--db", db, "-o", "/dev/null")
    assert r.exit_code == 0, r.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert not [p for p in Path("/dev").iterdir() if p.name.startswith((".null", "null."))]


def test_export_writes_through_a_fifo(tmp_path):
    db = filled_db(tmp_path / "a.db")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    r = cli("db", "export", "--db", db, "-o", fifo)
    reader.join(30)
    assert r.exit_code == 0, r.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert got == [export_text(db)]


def test_export_through_a_symlink_replaces_the_target_and_keeps_the_link(tmp_path):
    db = filled_db(tmp_path / "a.db")
    target = tmp_path / "real.jsonl"
    target.write_text("old\n")
    target.chmod(0o600)
    (tmp_path / "link.jsonl").symlink_to(target)
    r = cli("db", "export", "--db", db, "-o", tmp_path / "link.jsonl")
    assert r.exit_code == 0, r.stderr
    assert (tmp_path / "link.jsonl").is_symlink() and target.read_text() == export_text(db)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir() if "partial" in p.name) == []


def test_export_to_a_full_device_is_one_error_line():
    db = filled_db(Path(os.environ["AUTOSELECT_DB"]).parent / "a.db")
    assert "No space left on device" in refused(cli("db", "export", "--db", db, "-o", "/dev/full"))


def test_export_into_an_unwritable_directory_is_one_error_line_and_leaves_nothing(tmp_path):
    db = filled_db(tmp_path / "a.db")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    r = unprivileged("db", "export", "--db", db, "-o", ro / "out.jsonl")
    assert "Permission denied" in refused(r)
    assert list(ro.iterdir()) == []


def test_export_into_a_missing_directory_is_one_error_line(tmp_path):
    db = filled_db(tmp_path / "a.db")
    line = refused(cli("db", "export", "--db", db, "-o", tmp_path / "no" / "such" / "out.jsonl"))
    assert "no directory" in line and not (tmp_path / "no").exists()


def test_a_failed_export_leaves_the_old_file_as_it_was(tmp_path, monkeypatch):
    db = filled_db(tmp_path / "a.db")
    out = tmp_path / "out.jsonl"
    out.write_text("the previous export\n")
    import db.jsonl as transfer

    def broken(conn, f):
        f.write("half a line")
        raise OSError(28, "No space left on device")

    monkeypatch.setitem(transfer.EXPORTERS, "jsonl", broken)
    refused(cli("db", "export", "--db", db, "-o", out))
    assert out.read_text() == "the previous export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.db", "a.db-shm", "a.db-wal", "out.jsonl"]


def test_export_to_standard_output_on_a_full_device_is_one_error_line(tmp_path):
    db = filled_db(tmp_path / "a.db")
    with open("/dev/full", "w") as full:
        p = run_module("db", "export", "--db", db, stdout=full, stderr=-1)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.startswith("Error: cannot write to standard output") and len(p.stderr.splitlines()) == 1


# --- db import / merge validate every field with one schema --------------------------------


def _lines(tmp_path) -> list[dict]:
    return [json.loads(ln) for ln in export_text(filled_db(tmp_path / "src.db")).splitlines()]


POISON = {
    "knobs not an object": (lambda r: r["result"].update(knobs="notadict"), "result.knobs is 'notadict', not a JSON object"),
    "negative latency": (lambda r: r["result"].update(latency_us_p50=-3.5), "result.latency_us_p50 is -3.5, below the minimum 0"),
    "NaN latency": (lambda r: r["result"].update(latency_us_p50=float("nan")), "result.latency_us_p50 is nan, not a finite number"),
    "infinite latency": (lambda r: r["result"].update(latency_us_p90=float("inf")), "result.latency_us_p90 is inf, not a finite number"),
    "negative tokens": (lambda r: r["result"].update(tokens_per_rank=-1), "result.tokens_per_rank is -1, below the minimum 1"),
    "zero tokens": (lambda r: r["result"].update(tokens_per_rank=0), "result.tokens_per_rank is 0, below the minimum 1"),
    "created_at not a date": (lambda r: r["result"].update(created_at="not a date"), "result.created_at is 'not a date', not an ISO-8601"),
    "illegal a string": (lambda r: r["result"].update(illegal="yes"), "result.illegal is 'yes', not true or false"),
    "run.meta a string": (lambda r: r["run"].update(meta="x"), "run.meta is 'x', not a JSON object"),
    "world_size 2**63": (lambda r: r["result"].update(world_size=2**63), "result.world_size is 9223372036854775808, above the maximum"),
    "top_k above experts": (lambda r: r["result"].update(top_k=500, experts=128), "result.top_k (500) exceeds result.experts (128)"),
    "samples not numbers": (lambda r: r["result"].update(raw_samples_us=["1"] * r["result"]["samples"]), "result.raw_samples_us"),
    "host gpus not GPUs": (lambda r: r["host"].update(gpus=[{"index": "x"}]), "host.gpus is"),
    "bad run start": (lambda r: r["run"].update(started_at="yesterday"), "run.started_at is 'yesterday'"),
    "pid 2**40": (lambda r: r["run"].update(pid=2**40), "run.pid is 1099511627776, above the maximum"),
}


@pytest.mark.parametrize("name", list(POISON))
def test_import_refuses_a_poisoned_field_and_writes_nothing(tmp_path, name):
    mutate, message = POISON[name]
    records = _lines(tmp_path)
    mutate(records[1])
    records[1].pop("result_key", None)  # the key would catch some edits first: the rule must catch them all
    f = tmp_path / "bad.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in records))
    target = filled_db(tmp_path / "target.db")
    before = tree_state(tmp_path)
    line = refused(cli("db", "import", f, "--db", target))
    assert line.startswith(f"Error: {f} line 2: {message}"), line
    assert tree_state(tmp_path) == before


def test_import_of_a_deeply_nested_line_is_one_error_line(tmp_path):
    f = tmp_path / "deep.jsonl"
    f.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    assert refused(cli("db", "import", f, "--db", tmp_path / "new.db")).startswith(f"Error: {f} line 1: JSON nested too deeply")
    assert not (tmp_path / "new.db").exists()


def test_import_of_a_huge_integer_literal_is_one_error_line(tmp_path):
    records = _lines(tmp_path)
    text = json.dumps(records[0]).replace('"world_size": 8', '"world_size": ' + "9" * 5000)
    f = tmp_path / "big.jsonl"
    f.write_text(text + "\n")
    assert refused(cli("db", "import", f, "--db", tmp_path / "new.db")).startswith(f"Error: {f} line 1: ")
    assert not (tmp_path / "new.db").exists()


def test_import_refuses_a_run_given_two_machines_in_one_file(tmp_path):
    records = _lines(tmp_path)
    other = json.loads(json.dumps(records[1]))
    other["host"]["machine_id"] = "f" * 32
    other["result"]["tokens_per_rank"] = 999
    other.pop("result_key")
    f = tmp_path / "two.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in [records[0], other]))
    line = refused(cli("db", "import", f, "--db", tmp_path / "new.db"))
    assert line.startswith(f"Error: {f} line 2: run ") and "but " in line and f"{f} line 1 says machine" in line
    assert not (tmp_path / "new.db").exists()


def test_import_refuses_a_run_the_target_holds_on_another_machine(tmp_path):
    target = filled_db(tmp_path / "target.db")
    records = _lines(tmp_path)  # another database: other run uids ...
    uid = sqlite3.connect(target).execute("SELECT uid FROM runs WHERE id = 1").fetchone()[0]
    rec = records[3]  # ... one of h200-vm's results, claimed for node-a's run
    rec["run"]["uid"] = uid
    rec.pop("result_key")
    f = tmp_path / "clash.jsonl"
    f.write_text(json.dumps(rec) + "\n")
    before = tree_state(tmp_path)
    line = refused(cli("db", "import", f, "--db", target))
    assert "holds that run as measured on machine" in line
    assert tree_state(tmp_path) == before


def poison(db: Path) -> Path:
    """Rows an older autoselect let in through import (written here with sqlite3, as it did)."""
    with sqlite3.connect(db) as c:
        c.execute("""UPDATE results SET knobs = '"notadict"' WHERE id = 1""")
        c.execute("UPDATE results SET latency_us_p50 = -5 WHERE id = 2")
        c.execute("UPDATE results SET latency_us_p50 = 'abc', illegal = 'yes' WHERE id = 3")
        c.execute("""UPDATE runs SET meta = '"x"' WHERE id = 1""")
        c.execute("UPDATE results SET world_size = 9223372036854775807 WHERE id = 4")
    return db


def fixture_db(path: Path) -> Path:
    import_file(path, RESULTS / "h200.jsonl")
    import_file(path, RESULTS / "b200.jsonl")
    return path


def test_db_check_finds_the_rows_that_break_the_schema(tmp_path):
    db = poison(fixture_db(tmp_path / "p.db"))
    r = cli("db", "check", "--db", db, "--format", "json")
    assert r.exit_code == 1
    d = json.loads(r.stdout)
    assert d["ok"] is False and d["schema_violations"] == 5
    assert d["schema_violation_examples"][0] == "run 1: run.meta is 'x', not a JSON object"
    assert "result 1 (run 1): result.knobs is 'notadict', not a JSON object" in d["schema_violation_examples"][1]
    text = cli("db", "check", "--db", db).stdout
    assert "schema rules      FAILED (5 rows break them)" in text


def test_db_merge_refuses_a_poisoned_database_and_writes_nothing(tmp_path):
    src = poison(fixture_db(tmp_path / "p.db"))
    target = filled_db(tmp_path / "t.db")
    before = file_state(target)
    line = refused(cli("db", "merge", src, "--db", target))
    assert line.startswith(f"Error: {src}: run 1: run.meta is 'x'") and "nothing was merged" in line
    assert file_state(target) == before


@pytest.mark.parametrize("command", [
    ["recommend", "--model", str(MODELS / "deepseek-v3"), "--host-class", H200, "--format", "json"],
    ["explain", "--model", str(MODELS / "deepseek-v3"), "--host-class", H200],
    ["fleet", "status"],
    ["fleet", "drift"],
    ["report", "--model", str(MODELS / "deepseek-v3"), "--host-class", H200, "--format", "text", "--out", "{out}"],
])
def test_readers_skip_rows_that_break_the_schema_and_say_so(tmp_path, command):
    db = poison(fixture_db(tmp_path / "p.db"))
    r = cli(*[a.replace("{out}", str(tmp_path / "report")) for a in command], "--db", db)
    assert r.exit_code == 0, (r.stderr, r.exception)
    assert "Traceback" not in r.stderr
    warnings = [ln for ln in r.stderr.splitlines() if ln.startswith("Warning: skipped ")]
    assert warnings and all("autoselect db check" in w for w in warnings), r.stderr


def test_recommend_never_picks_a_negative_latency(tmp_path):
    db = fixture_db(tmp_path / "p.db")
    with sqlite3.connect(db) as c:
        c.execute("UPDATE results SET latency_us_p50 = -1000 WHERE backend = 'deepep_low_latency'")
    r = cli("recommend", "--model", MODELS / "deepseek-v3", "--host-class", H200, "--format", "json", "--db", db)
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert all((c.get("latency_us") or 0) >= 0 for c in d.get("candidates", []))
    assert "Warning: skipped " in r.stderr


def test_serve_answers_a_poisoned_database_without_a_500(tmp_path):
    from fastapi.testclient import TestClient

    from autoselect.fleet.service.app import create_app

    db = poison(fixture_db(tmp_path / "p.db"))
    client = TestClient(create_app(db, model_roots=[MODELS]))
    for url in ("/v1/recommend?model=deepseek-v3&host_class=" + H200, "/v1/drift", "/v1/hosts"):
        assert client.get(url).status_code == 200, url


# --- read-only, device and unusable databases ----------------------------------------------


def test_import_into_a_device_is_one_error_line_and_creates_no_journal(tmp_path):
    f = tmp_path / "x.jsonl"
    f.write_text(export_text(filled_db(tmp_path / "a.db")))
    before = sorted(os.listdir("/dev"))
    assert "is not a regular file" in refused(cli("db", "import", f, "--db", "/dev/null"))
    assert sorted(os.listdir("/dev")) == before and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_import_into_a_read_only_database_is_one_error_line_and_creates_no_journal(tmp_path):
    f = tmp_path / "x.jsonl"
    f.write_text(export_text(filled_db(tmp_path / "a.db")))
    db = filled_db(tmp_path / "ro.db")
    db.chmod(0o444)
    before = tree_state(tmp_path)
    assert "is read-only" in refused(unprivileged("db", "import", f, "--db", db))
    assert tree_state(tmp_path) == before


def test_import_into_a_read_only_directory_is_one_error_line(tmp_path):
    f = tmp_path / "x.jsonl"
    f.write_text(export_text(filled_db(tmp_path / "a.db")))
    ro = tmp_path / "ro"
    ro.mkdir()
    filled_db(ro / "r.db")
    ro.chmod(0o555)
    before = tree_state(ro)
    for db in (ro / "r.db", ro / "new.db"):
        assert "is not writable" in refused(unprivileged("db", "import", f, "--db", db))
    assert tree_state(ro) == before


def test_a_wal_database_in_a_read_only_directory_names_the_directory_as_the_cause(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    filled_db(ro / "r.db")
    assert not (ro / "r.db-shm").exists()  # the last writer removed it
    ro.chmod(0o555)
    line = refused(unprivileged("db", "info", "--db", ro / "r.db"))
    assert line == (f"Error: {ro / 'r.db'} is a WAL database and its directory {ro} is not writable: SQLite must "
                    "create r.db-shm there even to read it; make the directory writable, or copy the database to one "
                    "that is")


# --- dropping a run ------------------------------------------------------------------------


def test_drop_run_removes_the_run_its_results_samples_and_tuned_configurations(tmp_path):
    db = filled_db(tmp_path / "a.db")
    r = cli("db", "drop-run", "1", "--yes", "--db", db, "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["results"] == 3
    c = sqlite3.connect(db)
    assert c.execute("SELECT COUNT(*) FROM results WHERE run_id = 1").fetchone()[0] == 0
    assert c.execute("SELECT COUNT(*) FROM runs WHERE id = 1").fetchone()[0] == 0
    assert c.execute("SELECT COUNT(*) FROM samples WHERE result_id NOT IN (SELECT id FROM results)").fetchone()[0] == 0
    assert cli("db", "check", "--db", db).exit_code == 0


def test_drop_run_by_uid_and_an_unknown_run(tmp_path):
    db = filled_db(tmp_path / "a.db")
    uid = sqlite3.connect(db).execute("SELECT uid FROM runs WHERE id = 2").fetchone()[0]
    assert cli("db", "drop-run", uid, "--yes", "--db", db).exit_code == 0
    before = file_state(db)
    assert refused(cli("db", "drop-run", uid, "--yes", "--db", db)).startswith(f"Error: no run {uid} in {db}")
    assert refused(cli("db", "drop-run", "99999999999999999999999", "--yes", "--db", db)).startswith("Error: no run ")
    assert file_state(db)[0] == before[0]


def test_drop_run_without_yes_asks_and_drops_nothing_when_nobody_can_answer(tmp_path):
    db = filled_db(tmp_path / "a.db")
    before = sqlite3.connect(db).execute("SELECT COUNT(*) FROM results").fetchone()[0]
    line = refused(run_module("db", "drop-run", "1", "--db", db, stdin=open(os.devnull)))
    assert line == ("Error: db drop-run deletes run 1 (complete, bench, started "
                    + sqlite3.connect(db).execute("SELECT started_at FROM runs WHERE id = 1").fetchone()[0][:19]
                    + "): 3 results, 0 tuned configurations; pass --yes to confirm")
    assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM results").fetchone()[0] == before
