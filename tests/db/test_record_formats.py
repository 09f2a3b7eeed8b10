"""Record formats 1 and 2 (``dispatch_dtype``) still import, as format 3 (``activation_dtype``,
``wire_dtype``) reads them; a schema-2 database upgrades keeping every row and every key."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import pytest

from support.paths import FIXTURES

from db import jsonl
from db.errors import BadImportRecord
from db.importing import import_file
from db.jsonl import parse_record, write_jsonl
from db.queries import connect_readonly, results_for
from db.rows import host_to_row, result_key, result_to_row, tuned_to_row
from db.schema import migrations
from db.store import Store, upgrade
from db.tuned import best_tuned

FORMAT_1 = FIXTURES / "records" / "export-format-1.jsonl"
FORMAT_2 = FIXTURES / "records" / "export-format-2.jsonl"


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def export(path: Path) -> list[dict]:
    """`db export` of the database at ``path``, one record per line."""
    conn = connect_readonly(path)
    out = io.StringIO()
    write_jsonl(conn, out)
    conn.close()
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_the_old_files_are_what_the_old_writer_wrote():
    assert {(r["format"], r["schema_version"]) for r in lines(FORMAT_1)} == {("autoselect.result", 1)}
    assert [(r["format"], r["schema_version"]) for r in lines(FORMAT_2)] == [
        ("autoselect.result", 2), ("autoselect.result", 2), ("autoselect.tuned", 2)]
    for r in lines(FORMAT_1) + lines(FORMAT_2):
        part = r.get("result") or r.get("tuned")
        assert "dispatch_dtype" in part and "activation_dtype" not in part and "wire_dtype" not in part


def test_a_format_2_file_imports_its_dispatch_dtype_as_the_activation_dtype(tmp_path):
    summary = import_file(tmp_path / "a.db", FORMAT_2)
    assert (summary.results_added, summary.tuned_added) == (2, 1)
    conn = connect_readonly(tmp_path / "a.db")
    rows = results_for(conn, hidden=7168, top_k=8, experts=256, activation_dtype="fp8_block128")
    assert [(r.backend, r.status, r.activation_dtype, r.wire_dtype) for r in rows] == [
        ("allgather_reducescatter", "ok", "fp8_block128", None),  # not recorded by a format-2 writer
        ("deepep_high_throughput", "incorrect", "fp8_block128", None)]
    # the keys the old writer stored are the keys this reader computes: the point is the same point
    stored = {r[0] for r in conn.execute("SELECT result_key FROM results")}
    assert stored == {r["result_key"] for r in lines(FORMAT_2) if r["format"] == "autoselect.result"}
    tuned = best_tuned(conn, host_class=rows[0].host_class, hidden=7168, top_k=8, experts=256,
                       activation_dtype="fp8_block128", world_size=8, backend="allgather_reducescatter")
    assert (tuned.activation_dtype, tuned.env, tuned.gain) == ("fp8_block128", {"NCCL_PROTO": "LL128"}, 0.07)


def test_a_format_1_file_imports_its_dispatch_dtype_as_the_activation_dtype(tmp_path):
    assert import_file(tmp_path / "a.db", FORMAT_1).results_added == 3
    want = [r["result"]["dispatch_dtype"] for r in lines(FORMAT_1)]
    got = [r[0] for r in sqlite3.connect(tmp_path / "a.db").execute("SELECT activation_dtype FROM results ORDER BY id")]
    assert got == want and set(got) == {"fp8_block128"}


def test_an_old_file_and_its_new_export_are_the_same_records(tmp_path):
    import_file(tmp_path / "a.db", FORMAT_2)
    new = export(tmp_path / "a.db")
    assert {r["schema_version"] for r in new} == {jsonl.RECORD_VERSION}
    for old, now in zip(lines(FORMAT_2), new):
        part = "result" if old["format"] == "autoselect.result" else "tuned"
        renamed = {("activation_dtype" if k == "dispatch_dtype" else k): v for k, v in old[part].items()}
        if part == "result":
            renamed["wire_dtype"] = None
            # format 4's footing: a format-2 allgather_reducescatter result was the packed all_gather
            renamed.update(timing=None, timing_note=None, dp_sizes="equal", via="adapter",
                           calls="fused" if renamed["backend"] == "allgather_reducescatter" else None)
        assert now[part] == renamed
        assert now.get("result_key") == old.get("result_key") and now.get("tuned_key") == old.get("tuned_key")
    # the new export into the database the old file filled adds nothing, and the other way round
    (tmp_path / "new.jsonl").write_text("".join(json.dumps(r) + "\n" for r in new))
    again = import_file(tmp_path / "a.db", tmp_path / "new.jsonl")
    assert (again.results_added, again.results_present, again.tuned_added, again.tuned_present) == (0, 2, 0, 1)
    import_file(tmp_path / "b.db", tmp_path / "new.jsonl")
    back = import_file(tmp_path / "b.db", FORMAT_2)
    assert (back.results_added, back.results_present, back.tuned_added, back.tuned_present) == (0, 2, 0, 1)


def _changed(record: dict, part: str, change) -> dict:
    record = json.loads(json.dumps(record))
    change(record[part])
    record.pop("result_key", None)
    record.pop("tuned_key", None)
    return record


@pytest.mark.parametrize(
    "index, part, version, change, message",
    [
        (0, "result", 2, lambda r: r.update(activation_dtype=r.pop("dispatch_dtype")), "unknown result field(s) activation_dtype"),
        (0, "result", 2, lambda r: r.update(wire_dtype="bf16"), "unknown result field(s) wire_dtype"),
        (2, "tuned", 2, lambda r: r.update(activation_dtype=r.pop("dispatch_dtype")), "unknown tuned field(s) activation_dtype"),
        (0, "result", 3, lambda r: None, "unknown result field(s) dispatch_dtype"),
        (2, "tuned", 3, lambda r: None, "unknown tuned field(s) dispatch_dtype"),
    ],
)
def test_each_format_has_its_own_field_names(index, part, version, change, message):
    record = _changed(lines(FORMAT_2)[index], part, change)
    record["schema_version"] = version
    with pytest.raises(BadImportRecord) as e:
        parse_record(record, "f line 1")
    assert f"f line 1: {message};" in str(e.value)


def test_a_format_3_result_carries_its_wire_dtype():
    record = _changed(lines(FORMAT_2)[0], "result", lambda r: r.update(activation_dtype=r.pop("dispatch_dtype"),
                                                                      wire_dtype="bf16"))
    record["schema_version"] = jsonl.RECORD_VERSION
    parsed = parse_record(record, "f line 1")["result"]
    assert (parsed["activation_dtype"], parsed["wire_dtype"]) == ("fp8_block128", "bf16")


def _schema_2_database(path: Path) -> None:
    """A database as autoselect wrote it before migration 0003, holding the format-2 file's rows."""
    conn = sqlite3.connect(path)
    for m in migrations()[:2]:
        conn.executescript(m.sql)
    conn.execute("PRAGMA user_version = 2")
    runs = {}
    for n, raw in enumerate(lines(FORMAT_2), 1):
        rec = parse_record(raw, f"line {n}")
        host, run = rec["host"], rec["run"]
        hosts = host_to_row(host) | {"first_seen": host["first_seen"], "last_seen": host["last_seen"]}
        conn.execute(f"INSERT OR IGNORE INTO hosts ({', '.join(hosts)}) VALUES ({', '.join('?' * len(hosts))})",
                     list(hosts.values()))
        if run["uid"] not in runs:
            row = {**run, "machine_id": host["machine_id"], "meta": json.dumps(run["meta"])}
            runs[run["uid"]] = conn.execute(f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                                            list(row.values())).lastrowid
        if "tuned" in rec:
            row = tuned_to_row(rec["tuned"])
            row["dispatch_dtype"] = row.pop("activation_dtype")
            row["run_id"] = runs[run["uid"]]
            conn.execute(f"INSERT INTO tuned_configs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                         list(row.values()))
            continue
        result = rec["result"]
        row = result_to_row(result)
        row["dispatch_dtype"] = row.pop("activation_dtype")
        for name in ("wire_dtype", *jsonl.FOOTING_FIELDS):  # columns a schema-2 database does not have
            del row[name]
        row.update(result_key=result_key(host["machine_id"], run["uid"], result), run_id=runs[run["uid"]],
                   machine_id=host["machine_id"], host_class=run["host_class"])
        rid = conn.execute(f"INSERT INTO results ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                           list(row.values())).lastrowid
        conn.executemany("INSERT INTO samples (result_id, idx, latency_us) VALUES (?, ?, ?)",
                         [(rid, i, v) for i, v in enumerate(result["raw_samples_us"])])
    conn.commit()
    conn.close()


def test_a_schema_2_database_upgrades_keeping_every_row_and_key(tmp_path):
    _schema_2_database(tmp_path / "old.db")
    assert upgrade(tmp_path / "old.db") == (2, len(migrations()))
    conn = sqlite3.connect(tmp_path / "old.db")
    columns = {t: [r[1] for r in conn.execute(f"PRAGMA table_info({t})")] for t in ("results", "tuned_configs")}
    assert "dispatch_dtype" not in columns["results"] + columns["tuned_configs"]
    assert "activation_dtype" in columns["tuned_configs"] and {"activation_dtype", "wire_dtype"} <= set(columns["results"])
    indexes = " ".join(r[0] for r in conn.execute("SELECT sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"))
    assert "activation_dtype" in indexes and "dispatch_dtype" not in indexes
    conn.close()
    # the upgraded database holds what importing the same records into a new one gives
    import_file(tmp_path / "new.db", FORMAT_2)
    assert export(tmp_path / "old.db") == export(tmp_path / "new.db")
    with Store(tmp_path / "old.db") as store:  # and a writer opening it finds nothing left to do
        assert store.schema_version == len(migrations())
