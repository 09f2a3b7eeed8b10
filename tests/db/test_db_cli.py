"""``autoselect db ...`` and ``autoselect hosts`` through click's CliRunner."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from support.db import file_state, filled_db, hgx_host, make_result
from support.paths import REPO

from autoselect.cli import main
from autoselect.hardware import fingerprint
from autoselect.reference.systems import CLASSES
from db.schema import latest_version
from db.store import Store


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_db_info_shows_counts_per_host_and_backend_and_the_newest_run(db_path):
    filled_db(db_path)
    r = run("db", "info", "--db", str(db_path))
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"database   {db_path}  (") and f"schema {latest_version()}, wal)" in lines[0]
    assert lines[1] == "contents   3 hosts, 3 runs, 6 results, 60 samples, 0 tuned configurations"
    assert any(ln.startswith("node-a ") and " 8x NVIDIA H200 " in ln and ln.split()[5:7] == ["1", "3"] for ln in lines)
    assert "allgather_reducescatter                 3        3          0      0" in lines
    assert lines[-2].startswith("newest run #3  ") and "complete  on node-b  (1 results, trigger bench)" in lines[-2]
    assert lines[-1] == "interrupted runs  none"


def test_db_info_json_is_the_documented_structure(db_path):
    filled_db(db_path)
    r = run("db", "info", "--db", str(db_path), "--format", "json")
    d = json.loads(r.stdout)
    assert d["counts"] == {"hosts": 3, "runs": 3, "results": 6, "samples": 60, "tuned_configs": 0}
    assert d["schema_version"] == latest_version()
    assert {b["backend"]: (b["results"], b["ok"], b["incorrect"], b["other"]) for b in d["backends"]} == {
        "allgather_reducescatter": (3, 3, 0, 0), "deepep_low_latency": (1, 0, 0, 1),
        "flashinfer_nvlink_one_sided": (1, 0, 1, 0), "flashinfer_nvlink_two_sided": (1, 1, 0, 0)}
    assert d["newest_run"]["id"] == 3 and d["interrupted_runs"] == [] and d["stale_running_runs"] == []


def test_db_info_without_a_database_says_so_and_creates_nothing(tmp_path):
    missing = tmp_path / "none.db"
    r = run("db", "info", "--db", str(missing))
    assert r.exit_code == 2
    assert r.stderr == f"Error: no results database at {missing}; run `autoselect bench` to measure, or pass --db PATH\n"
    assert r.stdout == ""
    assert not missing.exists() and list(tmp_path.iterdir()) == []


def test_db_info_uses_AUTOSELECT_DB_by_default(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOSELECT_DB", str(filled_db(tmp_path / "env.db")))
    assert json.loads(run("db", "info", "--format", "json").stdout)["path"] == str(tmp_path / "env.db")


@pytest.mark.parametrize("command", [["db", "info"], ["db", "check"], ["db", "export"], ["db", "import", "x.jsonl"],
                                     ["db", "merge", "other.db"], ["db", "upgrade"]])
def test_every_db_command_refuses_a_garbage_file_in_one_line_and_leaves_it_untouched(tmp_path, command):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"\x00garbage" * 100)
    (tmp_path / "x.jsonl").write_text(_export_text(filled_db(tmp_path / "good.db")))
    (tmp_path / "other.db").write_bytes((tmp_path / "good.db").read_bytes())
    before = file_state(bad)
    args = [a if not a.endswith((".jsonl", "other.db")) else str(tmp_path / a) for a in command]
    r = run(*args, "--db", str(bad))
    assert r.exit_code == 2
    assert r.stderr == f"Error: {bad} is not an SQLite database; pass --db with the path of an autoselect results database\n"
    assert file_state(bad) == before


def test_db_commands_refuse_a_newer_schema_and_leave_it_untouched(db_path):
    filled_db(db_path)
    conn = sqlite3.connect(db_path)
    conn.execute(f"PRAGMA user_version = {latest_version() + 7}")
    conn.close()
    before = file_state(db_path)
    for args in (["db", "info"], ["db", "check"], ["db", "upgrade"]):
        r = run(*args, "--db", str(db_path))
        assert r.exit_code == 2
        assert r.stderr == (f"Error: {db_path} was written by a newer autoselect "
                            f"(schema {latest_version() + 7} > {latest_version()}); upgrade autoselect\n")
    assert file_state(db_path) == before


def test_a_database_missing_a_table_of_its_schema_is_one_error_line(db_path):
    filled_db(db_path)
    conn = sqlite3.connect(db_path)
    conn.execute("DROP TABLE tuned_configs")
    conn.close()
    before = file_state(db_path)
    for args in (["db", "info"], ["db", "check"], ["db", "export"]):
        r = run(*args, "--db", str(db_path))
        assert (r.exit_code, r.stdout) == (2, "")
        assert r.stderr == (f"Error: {db_path} claims autoselect schema {latest_version()} but lacks tables "
                            "tuned_configs; pass --db with another path\n")
    assert file_state(db_path)[:3] == before[:3]  # the read-only WAL open may leave -shm/-wal beside it


def _export_text(path: Path) -> str:
    r = run("db", "export", "--db", str(path))
    assert r.exit_code == 0, r.stderr
    return r.stdout


def test_db_check_says_ok_on_a_healthy_database(db_path):
    filled_db(db_path)
    r = run("db", "check", "--db", str(db_path))
    assert r.exit_code == 0
    assert r.stdout.splitlines()[3:] == [
        "integrity_check   ok",
        "foreign keys      ok (0 violations)",
        "whole rows        ok (0 results with missing samples)",
        "schema rules      ok (0 rows break them)",
        "verdict           ok",
    ]


def test_db_check_exits_1_when_a_result_lost_its_samples(db_path):
    filled_db(db_path)
    conn = sqlite3.connect(db_path)
    conn.execute("DELETE FROM samples WHERE result_id = 1 AND idx > 5")
    conn.commit()
    conn.close()
    r = run("db", "check", "--db", str(db_path), "--format", "json")
    assert r.exit_code == 1
    d = json.loads(r.stdout)
    assert (d["ok"], d["integrity_check"], d["results_with_missing_samples"]) == (False, ["ok"], 1)


def test_export_import_export_through_the_cli_round_trips_and_a_second_import_adds_nothing(tmp_path):
    src = filled_db(tmp_path / "a.db")
    text = _export_text(src)
    (tmp_path / "a.jsonl").write_text(text)
    r = run("db", "import", str(tmp_path / "a.jsonl"), "--db", str(tmp_path / "b.db"))
    assert (r.exit_code, r.stdout) == (0, "added 6 results (0 already present), 3 runs, 3 hosts\n")
    assert _export_text(tmp_path / "b.db") == text
    r = run("db", "import", str(tmp_path / "a.jsonl"), "--db", str(tmp_path / "b.db"), "--format", "json")
    assert json.loads(r.stdout) == {"results_added": 0, "results_present": 6, "runs_added": 0, "hosts_added": 0,
                                      "tuned_added": 0, "tuned_present": 0}


def test_export_csv_has_a_header_and_one_row_per_result(db_path, tmp_path):
    filled_db(db_path)
    out = tmp_path / "r.csv"
    r = run("db", "export", "--format", "csv", "-o", str(out), "--db", str(db_path))
    assert (r.exit_code, r.stderr) == (0, f"exported 6 results to {out}\n")
    import csv

    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 6
    assert (rows[0]["hostname"], rows[0]["backend"], rows[0]["tokens_per_rank"], rows[0]["knobs"]) == (
        "node-a", "allgather_reducescatter", "1", '{"NCCL_PROTO":"LL128"}')


def test_import_of_a_bad_line_names_the_line_and_writes_nothing(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text(_export_text(filled_db(tmp_path / "a.db")).splitlines()[0] + "\n{not json\n")
    target = tmp_path / "target.db"
    r = run("db", "import", str(f), "--db", str(target))
    assert r.exit_code == 2
    assert r.stderr == (f"Error: {f} line 2: not JSON (Expecting property name enclosed in double quotes); "
                        "import files must be written by `autoselect db export`\n")
    assert not target.exists()


def test_import_of_a_missing_file_is_one_error_line(tmp_path):
    r = run("db", "import", str(tmp_path / "nope.jsonl"), "--db", str(tmp_path / "t.db"))
    assert (r.exit_code, r.stderr) == (2, f"Error: no file {tmp_path / 'nope.jsonl'}; pass a file written by `autoselect db export`\n")
    assert not (tmp_path / "t.db").exists()


def test_merge_gathers_fleet_databases_and_is_idempotent(tmp_path):
    for name in ("n1", "n2"):
        with Store(tmp_path / f"{name}.db") as s:
            run_id = s.begin_run(hgx_host(name))
            s.add_result(run_id, make_result(tokens=16))
            s.finish_run(run_id)
    fleet = str(tmp_path / "fleet.db")
    outs = [run("db", "merge", str(tmp_path / f), "--db", fleet).stdout for f in ("n1.db", "n2.db", "n1.db")]
    assert outs == ["added 1 results (0 already present), 1 runs, 1 hosts\n"] * 2 + [
        "added 0 results (1 already present), 0 runs, 0 hosts\n"]


def test_hosts_json_is_this_machines_fingerprint_and_the_reference_classes():
    r = run("hosts", "--format", "json")
    assert r.exit_code == 0
    d = json.loads(r.stdout)
    assert [c["name"] for c in d.pop("reference_classes")] == list(CLASSES)
    assert d.pop("reference_class") is None  # this test machine is no published system
    assert d == fingerprint().to_dict()


def test_hosts_text_lists_every_reference_class_with_its_system():
    lines = run("hosts").stdout.splitlines()
    start = lines.index("reference host classes (NVIDIA's published measurements; --host-class NAME, "
                        "no database needed):")
    assert lines[start + 1:] == [f"  {name:<15}  {ref.describe()}" for name, ref in CLASSES.items()]
    assert "  ref-h200_sxm-x8  8×H200 (sm90, NVLink 4, 450 GB/s per GPU per direction, one NVSwitch domain)" in lines


def test_hosts_text_names_the_host_class():
    r = run("hosts")
    assert r.stdout.splitlines()[2] == f"host class    {fingerprint().host_class}"


def test_db_help_lists_every_subcommand_with_help_and_an_example():
    for sub in ("info", "check", "export", "import", "merge", "upgrade"):
        r = run("db", sub, "--help")
        assert r.exit_code == 0 and "Example" in r.stdout, sub


def test_read_only_db_commands_import_neither_sqlite_utils_nor_numpy_nor_torch(db_path):
    filled_db(db_path)
    code = (
        "import sys; from click.testing import CliRunner; from autoselect.cli import main; "
        f"rs = [CliRunner().invoke(main, a + ['--db', {str(db_path)!r}]) for a in (['db', 'info'], ['db', 'check'], ['db', 'export'])]; "
        "assert all(r.exit_code == 0 for r in rs), [r.output for r in rs]; "
        "print(sorted(m for m in ('sqlite_utils', 'numpy', 'torch', 'optuna', 'vllm', 'flashinfer') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stderr


def test_the_docs_document_every_column_of_the_schema_and_every_db_command():
    import re

    from db.schema import migrations

    root = REPO
    # docs/database.md says what the commands do and documents the tables and records
    section = (root / "docs" / "database.md").read_text()
    conn = sqlite3.connect(":memory:")
    for m in migrations():  # the schema as it is now
        conn.executescript(m.sql)
    for table in ("hosts", "runs", "results", "samples"):
        assert f"**{table}**" in section
        for (_, column, *_rest) in conn.execute(f"PRAGMA table_info({table})"):
            assert re.search(rf"\b{column}\b", section), f"{table}.{column} missing from docs/database.md"
    for command in ("info", "check", "export", "import", "merge", "upgrade", "drop-run"):
        assert f"autoselect db {command}" in section
    assert '"format": "autoselect.result", "schema_version": 3' in section
    assert '"format": "autoselect.tuned", "schema_version": 3' in section


def test_a_database_path_under_a_file_is_one_error_line(tmp_path):
    (tmp_path / "afile").write_text("x")
    target = tmp_path / "afile" / "results.db"
    f = tmp_path / "a.jsonl"
    f.write_text(_export_text(filled_db(tmp_path / "a.db")))
    r = run("db", "import", str(f), "--db", str(target))
    assert r.exit_code == 2
    assert r.stderr.startswith(f"Error: cannot create {tmp_path / 'afile'} (") and r.stderr.endswith(
        "); pass --db with a writable path\n")


def test_an_older_schema_is_refused_by_readers_and_upgraded_by_db_upgrade(db_path):
    from db.schema import migrations

    if latest_version() < 2:
        pytest.skip("only one migration so far")
    conn = sqlite3.connect(db_path)
    conn.executescript(migrations()[0].sql)
    conn.execute("PRAGMA user_version = 1")
    conn.close()
    before = file_state(db_path)
    r = run("db", "info", "--db", str(db_path))
    assert (r.exit_code, r.stderr) == (2, f"Error: {db_path} has schema 1, this autoselect reads {latest_version()}; "
                                          "run `autoselect db upgrade` once (it keeps every row)\n")
    assert file_state(db_path) == before
    r = run("db", "upgrade", "--db", str(db_path))
    assert (r.exit_code, r.stdout) == (0, f"schema 1 -> {latest_version()}\n")
    assert run("db", "info", "--db", str(db_path)).exit_code == 0
    assert run("db", "upgrade", "--db", str(db_path)).stdout == f"schema {latest_version()}: up to date\n"


def _damage(path: Path) -> None:
    """Overwrite the header of every page in the second half of the file (data pages, not the schema)."""
    data = bytearray(path.read_bytes())
    for off in range(len(data) // 8192 * 4096, len(data), 4096):
        data[off:off + 64] = bytes(range(64))
    path.write_bytes(bytes(data))


def test_db_check_reports_a_damaged_file_and_exits_1_and_info_says_it_is_damaged(db_path):
    with Store(db_path) as s:
        run_id = s.begin_run(hgx_host())
        for t in range(100):
            s.add_result(run_id, make_result(tokens=t + 1))
    _damage(db_path)
    r = run("db", "check", "--db", str(db_path))
    assert r.exit_code == 1
    assert r.stdout.splitlines()[-1] == "verdict           FAILED"
    r = run("db", "info", "--db", str(db_path))
    assert r.exit_code == 2
    assert r.stderr.startswith(f"Error: {db_path} is damaged (") and r.stderr.endswith(
        f"); run `autoselect db check --db {db_path}` for details\n")


def test_hosts_on_an_hgx_h200_shows_gpus_links_matrix_and_driver(monkeypatch):
    from support.nvml import ReplayNvml, load

    monkeypatch.setitem(sys.modules, "pynvml", ReplayNvml(load("hgx_h200_8gpu")))  # NVML answers of an HGX H200
    lines = run("hosts").stdout.splitlines()
    assert lines[3:7] == [
        "GPUs          8x NVIDIA H200 (sm90, 143771 MiB)",
        "NVLink        18/18 links up, peak 450 GB/s per GPU per direction",
        "link matrix     X  18  18  18  18  18  18  18",
        "               18   X  18  18  18  18  18  18",
    ]
    assert "fabric        none reported" in lines
    assert "driver        570.133.20, CUDA 12.8" in lines


def test_hosts_on_a_single_h200_without_nvlink_says_not_supported(monkeypatch):
    from support.nvml import ReplayNvml, load

    monkeypatch.setitem(sys.modules, "pynvml", ReplayNvml(load("h200_1gpu_no_nvlink")))
    r = run("hosts", "--format", "json")
    d = json.loads(r.stdout)
    assert (d["gpu_count"], d["all_nvlinks_up"], d["nvlink_peak_gbps"], d["nvlink_matrix"]) == (1, False, None, [[0]])
    assert ("NVLink        not supported (NVML reports no NVLink): the FlashInfer NVLink backends cannot run"
            in run("hosts").stdout.splitlines())
