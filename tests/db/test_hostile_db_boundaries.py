"""The database's trust boundaries (second sweep): the reserved ``ref-`` host-class namespace is
read-only from every write path, a destructive command refuses a run whose writer is alive and
names runs by one grammar, text that is not UTF-8 is named or refused, stored numbers stay in a
range the readers' arithmetic survives, and a write that fails midway says what stays."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.db import file_state, filled_db, hgx_host, make_result
from support.hostile import cli, refused, tree_state
from support.paths import FIXTURES, REPO, TESTS

from db.errors import DatabaseNotWritable, ReservedHostClass
from db.importing import import_file
from db.store import Store
from db.tuned import TunedConfig, save_tuned

RESULTS = FIXTURES / "results"
MODELS = FIXTURES / "models"
H200 = "h200x8-5d1c7e0a"
REFERENCE = "ref-h200_sxm-x8"


def _records(transform) -> list[str]:
    out = []
    for line in (RESULTS / "h200.jsonl").read_text().splitlines():
        d = json.loads(line)
        transform(d)
        out.append(json.dumps(d))
    return out


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def _in_namespace(part: str, name: str):
    def transform(d):
        if isinstance(d.get(part), dict):
            d[part]["host_class"] = name
    return transform


# --- class 2: the reference namespace is read-only -------------------------------------------------


def _tuned(host_class: str, machine_id: str = "m") -> TunedConfig:
    return TunedConfig(host_class=host_class, machine_id=machine_id, hidden=7168, top_k=8, experts=256,
                       activation_dtype="fp8_block128", world_size=8, device="cuda", workload={},
                       backend="deepep_low_latency", knobs={}, env={}, flags=[], status="gain", stop="budget",
                       study="s")


def _export_with_tuned(tmp_path: Path) -> list[str]:
    """An export holding result records and a tuned-configuration record."""
    db = filled_db(tmp_path / "src.db")
    host = hgx_host("node-a")
    with Store(db) as store:
        save_tuned(store, _tuned(host.host_class, host.machine_id))
    r = cli("db", "export", "--db", db)
    assert r.exit_code == 0 and '"autoselect.tuned"' in r.stdout
    return r.stdout.splitlines()


def test_an_integer_beyond_every_float_is_refused_as_a_number_not_a_crash(tmp_path):
    """JSON integers have no bound; float() of 10**400 overflows. A hypothesis run found the import
    crashing with OverflowError (exit 1) on one as latency_us_p50."""
    def huge(d):
        if isinstance(d.get("result"), dict):
            d["result"]["latency_us_p50"] = 10 ** 400

    path = _write(tmp_path / "huge.jsonl", _records(huge))
    db = tmp_path / "t.db"
    line = refused(cli("db", "import", str(path), "--db", str(db)))
    assert "latency_us_p50" in line and "not a finite number" in line, line
    assert not db.exists()


@pytest.mark.parametrize("part", ["host", "run", "tuned"])
@pytest.mark.parametrize("name", [REFERENCE, "ref-gb200-nvl72", "ref-", "ref-not-a-system"])
def test_import_refuses_a_record_in_the_reference_namespace_and_writes_nothing(tmp_path, part, name):
    lines = []
    for line in _export_with_tuned(tmp_path):
        d = json.loads(line)
        _in_namespace(part, name)(d)
        lines.append(json.dumps(d))
    src = _write(tmp_path / "in.jsonl", lines)
    db = filled_db(tmp_path / "a.db")
    before = file_state(db)
    line = refused(cli("db", "import", src, "--db", db))
    assert f".host_class is '{name}', not a measured host class: ref-... names NVIDIA's published reference " \
           "systems and is read-only" in line
    assert file_state(db) == before


def _relabelled(tmp_path: Path, name: str) -> Path:
    return _write(tmp_path / f"{len(name)}-{abs(hash(name))}.jsonl",
                  _records(lambda d: [d[p].update(host_class=name) for p in ("host", "run") if p in d]))


def test_a_class_that_only_starts_like_the_namespace_is_an_ordinary_class(tmp_path):
    for name in ("reference-h200", "xref-h200", "refh200", "re-f-h200"):
        assert cli("db", "import", _relabelled(tmp_path, name), "--db", tmp_path / f"{name}.db").exit_code == 0


@pytest.mark.parametrize("name", [
    "REF-h200", "Ref-h200", "ref_h200", "ref.h200", "rEf+h200",  # case, and the other separators a class may hold
    "r\u0435f-h200", "\u0433ef-h200",  # Cyrillic ie and ghe for e and r
    "\uff52\uff45\uff46-h200", "\U0001d42b\U0001d41e\U0001d41f-h200",  # full-width and bold letters (NFKC: ref)
    " ref-h200", "ref -h200", "ref\u200b-h200", "\u200dref-h200", "ref\u2010h200", "ref\u2212h200",  # spaces, invisibles, dashes
])
def test_a_class_that_reads_as_the_namespace_is_refused_and_writes_nothing(tmp_path, name):
    db = filled_db(tmp_path / "a.db")
    before = file_state(db)
    line = refused(cli("db", "import", _relabelled(tmp_path, name), "--db", db))
    assert "host_class is " in line and "not a measured host class" in line
    assert file_state(db) == before


def _smuggled(tmp_path: Path) -> Path:
    """A database an older autoselect filled through import: H200 rows relabelled as the reference."""
    db = tmp_path / "old.db"
    import_file(db, RESULTS / "h200.jsonl")
    with sqlite3.connect(db) as c:
        for table in ("hosts", "runs", "results"):
            c.execute(f"UPDATE {table} SET host_class = ? WHERE host_class = ?", (REFERENCE, H200))
    return db


def test_merge_refuses_a_database_with_rows_in_the_namespace(tmp_path):
    src = _smuggled(tmp_path)
    target = filled_db(tmp_path / "t.db")
    before = file_state(target)
    line = refused(cli("db", "merge", src, "--db", target))
    assert f"host_class is '{REFERENCE}', not a measured host class" in line and "nothing was merged" in line
    assert file_state(target) == before


def test_db_check_names_the_rows_of_an_existing_file(tmp_path):
    r = cli("db", "check", "--db", _smuggled(tmp_path), "--format", "json")
    assert r.exit_code == 1
    examples = json.loads(r.stdout)["schema_violation_examples"]
    assert any(e.startswith("host ") and REFERENCE in e for e in examples)
    assert any(e.startswith("run ") and REFERENCE in e for e in examples)


@pytest.mark.parametrize("command", ["recommend", "explain"])
def test_rows_in_the_namespace_never_answer_for_the_reference(tmp_path, command):
    db = _smuggled(tmp_path)
    r = cli(command, "--model", MODELS / "deepseek-v3", "--host-class", REFERENCE, "--db", db, "--format", "json")
    assert r.exit_code == 0, r.stderr
    answer = json.loads(r.stdout)
    clean = json.loads(cli(command, "--model", MODELS / "deepseek-v3", "--host-class", REFERENCE, "--db",
                           tmp_path / "none.db", "--format", "json").stdout)
    assert answer["confidence"] == clean["confidence"] and answer["backend"] == clean["backend"]
    assert answer["data_used"]["results"] == 0 and answer["data_used"]["machines"] == []
    assert "reserved ref- namespace" in r.stderr and r.stderr.startswith("Warning: skipped ")


def test_serve_answers_the_reference_from_the_reference_only(tmp_path):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from autoselect.fleet.service.app import create_app

    client = TestClient(create_app(_smuggled(tmp_path), model_roots=[MODELS]))
    with pytest.warns(UserWarning, match="reserved ref- namespace"):
        r = client.get("/v1/recommend", params={"model": "deepseek-v3", "host_class": REFERENCE})
    assert r.status_code == 200 and r.json()["data_used"]["results"] == 0
    with pytest.warns(UserWarning, match="reserved ref- namespace"):
        hosts = client.get("/v1/hosts").json()["host_classes"]
    assert all(not h["host_class"].startswith("ref-") for h in hosts)


def test_no_store_writer_takes_the_namespace(tmp_path):
    host = hgx_host("node-a")
    host.host_class = REFERENCE
    with Store(tmp_path / "w.db") as store:
        with pytest.raises(ReservedHostClass, match="nothing was written"):
            store.begin_run(host, trigger="bench")
        with pytest.raises(ReservedHostClass):
            with store.run(host, trigger="tune"):
                pass  # never reached
        with pytest.raises(ReservedHostClass):
            save_tuned(store, _tuned(REFERENCE))
        assert store.conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0
        assert store.conn.execute("SELECT COUNT(*) FROM hosts").fetchone()[0] == 0


def test_a_fleet_node_claiming_the_namespace_fails_alone(tmp_path):
    from autoselect.fleet.events import NodeFailed, NodeStarted
    from autoselect.fleet.node import NodeRun
    from autoselect.fleet.probe import Probe
    from autoselect.fleet.run import FleetRun
    from autoselect.fleet.spec import FleetSpec

    class Tasks:  # the node tasks without Ray: a stream handle per bench call
        cluster = type("Cluster", (), {"ray": None})()
        settings = type("Settings", (), {"world_size": 8})()

        def bench(self, bundle, shapes, host):
            return f"stream-{bundle}"

    good, bad = hgx_host("node-a").to_dict(), hgx_host("node-b").to_dict()
    bad["host_class"] = REFERENCE
    events = []
    with Store(tmp_path / "f.db") as store:
        nodes = [NodeRun(0, Probe("r0", good)), NodeRun(1, Probe("r1", bad))]
        fleet = FleetRun(FleetSpec(models=[], shapes=[]), [], Tasks(), store, nodes, emit=events.append)
        fleet.start(nodes[0], nodes[0].probe, good)
        fleet.start(nodes[1], nodes[1].probe, bad)
        classes = [r[0] for r in store.conn.execute("SELECT host_class FROM runs")]
    assert classes == [good["host_class"]]
    assert [type(e) for e in events] == [NodeStarted, NodeFailed]
    assert REFERENCE in events[1].error and nodes[1].outcome.status == "failed"


# --- class 3: a destructive command and a run that is still alive ------------------------------------


def _writer(db: Path, tmp_path: Path) -> subprocess.Popen:
    """A benchmark-like process that begins a run, stores a result a second, never finishes."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "support.db_writer", str(db), "node-w", "0", "4",
                             str(tmp_path / "go")], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _count(db: Path, sql: str) -> int:
    with sqlite3.connect(db) as c:
        return c.execute(sql).fetchone()[0]


@pytest.mark.slow
def test_drop_run_refuses_a_run_whose_writer_is_alive_then_drops_it_once_stopped(tmp_path):
    db = filled_db(tmp_path / "a.db")
    proc = _writer(db, tmp_path)
    try:
        (tmp_path / "go").touch()
        proc.stdout.readline()  # a result committed: the run is measuring
        run = _count(db, "SELECT MAX(id) FROM runs")
        line = refused(cli("db", "drop-run", str(run), "--yes", "--db", db))
        assert line == (f"Error: run {run} is still running: its writer, process {proc.pid} on this host, is alive "
                        f"(last write {line.split('(last write ')[1][:19]}); stop it first (Ctrl-C where it runs, or "
                        f"`kill {proc.pid}`): it ends the run as interrupted, which can then be dropped; nothing was "
                        "deleted")
        assert _count(db, f"SELECT COUNT(*) FROM runs WHERE id = {run}") == 1
        committed = proc.stdout.readline()  # the writer goes on storing: nothing was taken from under it
        assert committed.startswith("committed ")
    finally:
        proc.kill()
        proc.wait()
    r = cli("db", "drop-run", str(run), "--yes", "--db", db)  # its writer is gone now
    assert r.exit_code == 0, r.stderr
    assert _count(db, f"SELECT COUNT(*) FROM results WHERE run_id = {run}") == 0


def test_drop_run_refuses_a_live_run_of_this_process(tmp_path):
    db = filled_db(tmp_path / "a.db")
    with Store(db) as store:
        run = store.begin_run(hgx_host("node-a"), trigger="bench")
        store.add_result(run, make_result(tokens=3))
        line = refused(cli("db", "drop-run", str(run), "--yes", "--db", db))
        assert f"process {os.getpid()} on this host, is alive" in line and f"`kill {os.getpid()}`" in line
        store.add_result(run, make_result(tokens=5))  # the run is still there to write into
        store.finish_run(run, "interrupted")
    assert cli("db", "drop-run", str(run), "--yes", "--db", db).exit_code == 0


def test_a_running_run_written_on_another_host_is_refused_until_it_is_stale(tmp_path):
    db = filled_db(tmp_path / "a.db")
    now = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    with sqlite3.connect(db) as c:
        c.execute("UPDATE runs SET status = 'running', hostname = 'elsewhere', pid = 4242, updated_at = ? "
                  "WHERE id = 1", (now,))
    line = refused(cli("db", "drop-run", "1", "--yes", "--db", db))
    assert "its writer, process 4242 on elsewhere, wrote last at" in line
    assert "this host cannot see whether it is alive; stop it on elsewhere first (`kill 4242` there)" in line
    old = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() - 7 * 3600))
    with sqlite3.connect(db) as c:
        c.execute("UPDATE runs SET updated_at = ? WHERE id = 1", (old,))
    assert cli("db", "drop-run", "1", "--yes", "--db", db).exit_code == 0


def test_a_running_run_whose_local_writer_is_gone_can_be_dropped(tmp_path):
    db = filled_db(tmp_path / "a.db")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with sqlite3.connect(db) as c:
        c.execute("UPDATE runs SET status = 'running', hostname = ?, pid = ? WHERE id = 1",
                  (socket.gethostname(), dead.pid))
    assert cli("db", "drop-run", "1", "--yes", "--db", db).exit_code == 0


def test_a_number_that_is_one_runs_id_and_another_runs_uid_is_an_ambiguity(tmp_path):
    db = filled_db(tmp_path / "a.db")
    with sqlite3.connect(db) as c:
        c.execute("UPDATE runs SET uid = '1' WHERE id = 2")
        uid1 = c.execute("SELECT uid FROM runs WHERE id = 1").fetchone()[0]
    before = file_state(db)
    line = refused(cli("db", "drop-run", "1", "--yes", "--db", db))
    assert line == (f"Error: 1 is run 1's id and run 2's uid; pass the uid of the run you mean: {uid1} (run 1) "
                    "or 1 (run 2)")
    assert file_state(db)[0] == before[0]
    assert cli("db", "drop-run", uid1, "--yes", "--db", db).exit_code == 0
    assert cli("db", "drop-run", "1", "--yes", "--db", db).exit_code == 0  # now only run 2's uid
    assert _count(db, "SELECT COUNT(*) FROM runs WHERE id IN (1, 2)") == 0


@pytest.mark.parametrize("text", [" 1", "1 ", "\t1", "1\n", "1\u00a0", "١", "", "1\x00"])
def test_a_run_reference_is_taken_exactly_and_refused_before_the_database_opens(tmp_path, text):
    db = filled_db(tmp_path / "a.db")
    before = tree_state(tmp_path)
    line = refused(cli("db", "drop-run", text, "--yes", "--db", db))
    # a NUL never reaches drop-run: the door refuses it first (no command line carries one)
    assert line.startswith("Error: argument 3 '1\\x00' holds a NUL character" if "\x00" in text else "Error: RUN ")
    assert tree_state(tmp_path) == before


def test_a_run_id_with_leading_zeros_is_no_id(tmp_path):
    db = filled_db(tmp_path / "a.db")
    assert refused(cli("db", "drop-run", "01", "--yes", "--db", db)).startswith("Error: no run 01 in ")


# --- class 4: text in the database that is not UTF-8 (another program wrote it) ----------------------


def _not_utf8(tmp_path: Path) -> Path:
    db = tmp_path / "bytes.db"
    import_file(db, RESULTS / "h200.jsonl")
    with sqlite3.connect(db) as c:
        c.execute("UPDATE hosts SET hostname = CAST(x'6e6f6465ff' AS TEXT) WHERE rowid = 1")
        c.execute("UPDATE results SET error = CAST(x'c328' AS TEXT) WHERE id = 2")
    return db


def test_db_check_names_stored_text_that_is_not_utf8(tmp_path):
    r = cli("db", "check", "--db", _not_utf8(tmp_path), "--format", "json")
    assert r.exit_code == 1
    examples = json.loads(r.stdout)["schema_violation_examples"]
    assert any(e.startswith("host ") and r"hostname is 'node\xff', not UTF-8 text" in e for e in examples)
    assert "result 2: error is '\\xc3(', not UTF-8 text (written by another program)" in examples


@pytest.mark.parametrize("command", [
    ["recommend", "--model", str(MODELS / "deepseek-v3"), "--host-class", H200],
    ["fleet", "status"], ["fleet", "drift"], ["db", "export"], ["db", "info"],
])
def test_every_reader_of_such_a_database_is_one_error_line(tmp_path, command):
    db = _not_utf8(tmp_path)
    line = refused(cli(*command, "--db", db))
    assert "not UTF-8" in line or "is damaged (Could not decode to UTF-8" in line


def test_merge_refuses_such_a_database(tmp_path):
    target = filled_db(tmp_path / "t.db")
    before = file_state(target)
    line = refused(cli("db", "merge", _not_utf8(tmp_path), "--db", target))
    assert "not UTF-8 text (written by another program); nothing was merged" in line
    assert file_state(target) == before


def test_serve_says_503_for_such_a_database(tmp_path):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from autoselect.fleet.service.app import create_app

    client = TestClient(create_app(_not_utf8(tmp_path), model_roots=[MODELS]))
    r = client.get("/v1/recommend", params={"model": "deepseek-v3", "host_class": H200})
    assert (r.status_code, r.json()) == (503, {"error": "the database holds text that is not UTF-8; its operator can "
                                                        "find the rows with `autoselect db check`"})


@pytest.mark.parametrize("where, field", [("host", "hostname"), ("host", "gpu_name"), ("host", "cpu_model"),
                                          ("run", "command"), ("run", "trigger"), ("result", "error"),
                                          ("result", "backend")])
def test_an_import_record_string_that_is_no_text_is_refused(tmp_path, where, field):
    def poison(d):
        if where in d:
            d[where][field] = "ok\udfffok"
    src = _write(tmp_path / "in.jsonl", _records(poison))
    line = refused(cli("db", "import", src, "--db", tmp_path / "new.db"))
    assert f"line 1: the string at .{where}.{field} 'ok\\udfffok' is not valid Unicode text" in line
    assert not (tmp_path / "new.db").exists()


# --- class 1: stored numbers the readers' arithmetic survives ------------------------------------------


@pytest.mark.parametrize("field, value", [("latency_us_p50", 1e308), ("latency_us_p99", 1.7e308),
                                          ("algbw_gbps", 1e300), ("raw_samples_us", [1e308] * 3)])
def test_a_measurement_beyond_a_year_is_no_measurement(tmp_path, field, value):
    def poison(d):
        if "result" in d:
            d["result"][field] = value
            d.pop("result_key", None)
            if field == "raw_samples_us":
                d["result"]["samples"] = 3
    src = _write(tmp_path / "in.jsonl", _records(poison))
    line = refused(cli("db", "import", src, "--db", tmp_path / "new.db"))
    assert f"result.{field} is " in line


# --- class 7: a write that fails midway says what stays ------------------------------------------------


def _tiny(monkeypatch, spare_pages: int) -> None:
    """Every Store opened from now on has ``spare_pages`` pages left: SQLite's own "database or
    disk is full" (SQLITE_FULL), the error a full device gives."""
    original = Store.__init__

    def opened(self, *args, **kwargs):
        original(self, *args, **kwargs)
        pages = self.conn.execute("PRAGMA page_count").fetchone()[0]
        self.conn.execute(f"PRAGMA max_page_count = {pages + spare_pages}")

    monkeypatch.setattr(Store, "__init__", opened)


def test_a_run_that_fills_the_disk_says_which_results_stay(tmp_path, monkeypatch):
    _tiny(monkeypatch, 4)
    db = tmp_path / "x.db"
    with Store(db) as store:
        with pytest.raises(DatabaseNotWritable) as caught:
            with store.run(hgx_host("node-a"), trigger="bench") as run:
                for i in range(500):
                    store.add_result(run.id, make_result(tokens=i + 1, raw_samples_us=[1.0] * 400))
    kept = _count(db, "SELECT COUNT(*) FROM results")
    assert kept > 0
    message = str(caught.value)
    assert "nothing was written" not in message
    assert message.endswith(f"the write that failed was not stored; free space on its device, or pass --db with "
                            f"another path; run {run.id} keeps the {kept} result(s) stored before the failure "
                            f"(its status: failed): `autoselect db drop-run {run.id} --yes` removes them")


@pytest.mark.slow
def test_bench_on_a_full_disk_does_not_say_nothing_was_written(tmp_path, monkeypatch):
    _tiny(monkeypatch, 6)
    db = tmp_path / "b.db"
    r = cli("bench", "--hidden", "64", "--top-k", "2", "--experts", "8", "--dtype", "bf16", "--device", "cpu",
            "--backends", "allgather_reducescatter", "--tokens", ",".join(str(t) for t in range(1, 41)),
            "--min-samples", "200", "--min-time", "0", "--db", db)
    line = refused(r)
    kept = _count(db, "SELECT COUNT(*) FROM results")
    assert "nothing was written" not in line and f"keeps the {kept} result(s) stored before the failure" in line


def test_an_import_that_fills_the_disk_says_the_first_batches_stay(tmp_path, monkeypatch):
    import db.importing as importing

    monkeypatch.setattr(importing, "IMPORT_BATCH", 5)
    db = tmp_path / "i.db"
    import_file(db, RESULTS / "b200.jsonl")  # the file exists and is migrated: only the import is small
    _tiny(monkeypatch, 12)
    line = refused(cli("db", "import", RESULTS / "h200.jsonl", "--db", db))
    assert "nothing was written" not in line
    assert "records are in the database: import again once it can be written (records already present are " \
           "skipped)" in line
    monkeypatch.undo()
    assert cli("db", "import", RESULTS / "h200.jsonl", "--db", db).exit_code == 0  # the rest, once there is room


# --- an imported run never passes for a live one; no record is dated in the future ----------------


def _first_run_id(db: Path) -> int:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT MIN(id) FROM runs").fetchone()[0]


@pytest.mark.parametrize("updated_at", ["now", "2026-01-01T00:00:00+00:00"])
def test_a_run_imported_while_running_is_interrupted_here_and_can_be_dropped(tmp_path, updated_at):
    # its writer's host name is this host's and its pid is alive (1): nothing here writes it all the same
    now = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    src = _write(tmp_path / "in.jsonl", _records(lambda d: d["run"].update(
        status="running", finished_at=None, hostname=socket.gethostname(), pid=1,
        updated_at=now if updated_at == "now" else updated_at)))
    db = tmp_path / "a.db"
    assert cli("db", "import", src, "--db", db).exit_code == 0
    with sqlite3.connect(db) as c:
        assert {s for (s,) in c.execute("SELECT status FROM runs")} == {"interrupted"}
    r = cli("db", "drop-run", str(_first_run_id(db)), "--yes", "--db", db)
    assert r.exit_code == 0 and "kill" not in r.output + r.stderr


@pytest.mark.parametrize("part,field", [("run", "updated_at"), ("run", "started_at"), ("run", "finished_at"),
                                        ("result", "created_at"), ("host", "last_seen")])
@pytest.mark.parametrize("when", ["2999-01-01T00:00:00+00:00", "days:3", "29991231"])
def test_a_record_dated_in_the_future_is_refused_and_writes_nothing(tmp_path, part, field, when):
    if when.startswith("days:"):
        when = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() + 86400 * int(when[5:])))
    src = _write(tmp_path / "in.jsonl", _records(lambda d: d[part].update({field: when})))
    db = filled_db(tmp_path / "a.db")
    before = file_state(db)
    line = refused(cli("db", "import", src, "--db", db))
    assert f"{part}.{field} is " in line and "at most 2 days after today" in line
    assert file_state(db) == before


def test_a_record_a_day_ahead_of_this_clock_is_accepted(tmp_path):
    ahead = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() + 86400))
    src = _write(tmp_path / "in.jsonl", _records(lambda d: d["run"].update(updated_at=ahead)))
    assert cli("db", "import", src, "--db", tmp_path / "a.db").exit_code == 0


def test_a_stored_run_dated_in_the_future_no_longer_blocks_drop_run_or_wins_as_newest(tmp_path):
    """A file an older autoselect imported: a running run and a result dated in the year 2999."""
    db = tmp_path / "old.db"
    import_file(db, RESULTS / "h200.jsonl")
    with sqlite3.connect(db) as c:
        run = c.execute("SELECT MIN(id) FROM runs").fetchone()[0]
        c.execute("UPDATE runs SET status = 'running', hostname = ?, pid = 1, updated_at = '2999-01-01T00:00:00+00:00'"
                  " WHERE id = ?", (socket.gethostname(), run))
        c.execute("UPDATE results SET created_at = '2999-01-01T00:00:00+00:00' WHERE run_id = ?", (run,))
    check = cli("db", "check", "--db", db)
    assert "2999-01-01" in check.output
    from db.queries import all_results, connect_readonly

    conn = connect_readonly(db)
    try:
        with pytest.warns(UserWarning, match="at most 2 days after today"):
            assert all(r.run_id != run for r in all_results(conn, host_class=H200))  # never the newest of its point
    finally:
        conn.close()
    r = cli("db", "drop-run", str(run), "--yes", "--db", db)
    assert r.exit_code == 0 and "kill" not in r.output + r.stderr


# --- run ids ----------------------------------------------------------------------------------------


def _one_run(store: Store, machine: str = "node-a") -> int:
    with store.run(hgx_host(machine)) as run:
        store.add_result(run.id, make_result())
    return run.id


def test_a_dropped_run_s_id_is_never_given_again(tmp_path):
    db = tmp_path / "a.db"
    with Store(db) as store:
        first, second = _one_run(store), _one_run(store)
        store.drop_run(second)
        third = _one_run(store)
        store.drop_run(third)
        store.drop_run(first)
        fourth = _one_run(store)
    assert (first, second, third, fourth) == (1, 2, 3, 4)


def test_an_older_database_keeps_its_run_ids_and_never_reuses_one_after_upgrading(tmp_path):
    from db.schema import migrations, statements

    db = tmp_path / "old.db"
    with sqlite3.connect(db) as c:  # a database at schema 2, as the previous autoselect wrote it
        for m in migrations()[:2]:
            for stmt in statements(m.sql):
                c.execute(stmt)
        c.execute("PRAGMA user_version = 2")
    with sqlite3.connect(db) as c:
        c.execute("INSERT INTO hosts (machine_id, hostname, host_class, device, gpu_name, gpu_count, gpu_arch,"
                  " all_nvlinks_up, nvlink_peak_gbps, gpus, nvlink_matrix, versions, first_seen, last_seen)"
                  " SELECT 'm1', 'h', 'h200x8-old', 'cuda', 'NVIDIA H200', 8, 'sm90', 1, 450.0, '[]', '[]', '{}',"
                  " '2026-11-01T00:00:00+00:00', '2026-11-01T00:00:00+00:00'")
        for i, uid in ((5, "a"), (9, "b")):
            c.execute("INSERT INTO runs (id, uid, machine_id, host_class, started_at, updated_at, status, \"trigger\","
                      " hostname, pid, autoselect_version, meta) VALUES (?, ?, 'm1', 'h200x8-old',"
                      " '2026-11-01T00:00:00+00:00', '2026-11-01T00:00:00+00:00', 'complete', 'bench', 'h', 1, '0',"
                      " '{}')", (i, uid))
    with Store(db) as store:
        assert store.schema_version >= 3
        assert [r for (r,) in store.conn.execute("SELECT id FROM runs ORDER BY id")] == [5, 9]
        store.drop_run(9)
        assert _one_run(store) == 10
