"""Each result's footing (db/records.py): stored, exported, imported, and what older rows and records mean.

Before the footing was recorded (schema 4, record format 3) the allgather_reducescatter adapter
packed every tensor into one all_gather: the migration and the importer file those rows as
``calls = fused``, never as vLLM's grouped calls.
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from db.errors import BadImportRecord
from db.jsonl import FOOTING_FIELDS, parse_record, write_jsonl
from db.queries import connect_readonly, results_for
from db.records import Result, footing_words
from db.schema import migrations
from db.store import Store
from support.db import hgx_host, make_result

SHAPE = dict(hidden=7168, top_k=8, experts=256, activation_dtype="fp8_block128")


def _schema_4_copy(current, old):
    """``old``: a schema-4 database holding ``current``'s hosts, runs and results (their schema-4 columns)."""
    conn = sqlite3.connect(old)
    for m in migrations()[:4]:
        conn.executescript(m.sql)
    conn.execute("PRAGMA user_version = 4")
    conn.execute(f"ATTACH DATABASE '{current}' AS cur")
    for table in ("hosts", "runs", "results", "samples"):
        cols = [r[1] for r in conn.execute(f"PRAGMA main.table_info({table})")]
        conn.execute(f"INSERT INTO main.{table} ({', '.join(cols)}) SELECT {', '.join(cols)} FROM cur.{table}")
    conn.commit()
    conn.close()


def test_the_footing_is_stored_and_read_back(db_path):
    with Store(db_path) as s:
        run = s.begin_run(hgx_host())
        s.add_result(run, make_result("allgather_reducescatter", 64, knobs={}, timing="graph", calls="grouped"))
        s.add_result(run, make_result("allgather_reducescatter", 1024, knobs={}, timing="eager",
                                      timing_note="as vLLM runs it: above the capture size", calls="grouped",
                                      dp_sizes="unequal"))
        s.add_result(run, make_result("deepep_low_latency", 64, knobs={}, timing="graph", via="vllm"))
    rows = results_for(connect_readonly(db_path), **SHAPE)
    got = [(r.backend, r.tokens_per_rank, r.timing, r.timing_note, r.calls, r.dp_sizes, r.via) for r in rows]
    assert got == [
        ("allgather_reducescatter", 64, "graph", None, "grouped", "equal", "adapter"),
        ("allgather_reducescatter", 1024, "eager", "as vLLM runs it: above the capture size", "grouped", "unequal",
         "adapter"),
        ("deepep_low_latency", 64, "graph", None, None, "equal", "vllm"),
    ]
    assert [r.footing for r in rows] == ["graph grouped", "eager grouped unequal", "graph via-vllm"]
    assert footing_words(None, None, "equal", "adapter") == "-"


def test_the_migration_files_old_allgather_rows_as_the_fused_calls_they_were(tmp_path):
    current, old = tmp_path / "current.db", tmp_path / "old.db"
    with Store(current) as s:
        run = s.begin_run(hgx_host())
        s.add_result(run, make_result("allgather_reducescatter", 64))
        s.add_result(run, make_result("deepep_high_throughput", 64))
    _schema_4_copy(current, old)
    with Store(old):  # a writer migrates
        pass
    conn = sqlite3.connect(old)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(migrations())
    rows = conn.execute("SELECT backend, timing, timing_note, calls, dp_sizes, via FROM results ORDER BY id").fetchall()
    assert rows == [("allgather_reducescatter", None, None, "fused", "equal", "adapter"),
                    ("deepep_high_throughput", None, None, None, "equal", "adapter")]


def _record(result: Result, version: int) -> dict:
    host = hgx_host().to_dict()
    run = {"uid": "u1", "host_class": host["host_class"], "started_at": "2026-12-01T00:00:00+00:00",
           "updated_at": "2026-12-01T00:00:00+00:00", "finished_at": None, "status": "complete",
           "trigger": "bench", "command": None, "hostname": "node-a", "pid": 1, "autoselect_version": "0.1.0",
           "meta": {}}
    d = {**result.to_dict(), "created_at": "2026-12-01T00:00:01+00:00"}
    if version < 4:
        for name in FOOTING_FIELDS:
            d.pop(name)
    if version < 3:
        d["dispatch_dtype"] = d.pop("activation_dtype")
        d.pop("wire_dtype")
    return {"format": "autoselect.result", "schema_version": version, "host": host, "run": run, "result": d}


def test_an_older_allgather_record_imports_as_the_fused_calls_and_a_format_4_keeps_its_footing():
    old = parse_record(_record(make_result("allgather_reducescatter", 64), 2), "f line 1")["result"]
    old3 = parse_record(_record(make_result("allgather_reducescatter", 64), 3), "f line 1")["result"]
    other = parse_record(_record(make_result("flashinfer_nvlink_two_sided", 64), 3), "f line 2")["result"]
    new = parse_record(_record(make_result("allgather_reducescatter", 64, calls="grouped", timing="graph"), 4),
                       "f line 3")["result"]
    assert old3["calls"] == "fused"
    assert (old["calls"], old["dp_sizes"], old["via"], old["timing"]) == ("fused", "equal", "adapter", None)
    assert other["calls"] is None
    assert (new["calls"], new["timing"]) == ("grouped", "graph")


def test_a_footing_field_in_an_older_record_or_a_value_outside_its_choices_is_refused():
    rec = _record(make_result("allgather_reducescatter", 64), 3)
    rec["result"]["calls"] = "grouped"
    with pytest.raises(BadImportRecord) as e:
        parse_record(rec, "f line 1")
    assert str(e.value).startswith("f line 1: unknown result field(s) calls")
    with pytest.raises(BadImportRecord) as e:
        parse_record(_record(make_result("allgather_reducescatter", 64, timing="warp"), 4), "f line 2")
    assert str(e.value).startswith("f line 2: result.timing is 'warp', not one of graph, eager, cpu")


def test_an_export_carries_the_footing_and_imports_unchanged(db_path, tmp_path):
    with Store(db_path) as s:
        run = s.begin_run(hgx_host())
        s.add_result(run, make_result("allgather_reducescatter", 64, timing="eager", timing_note="why",
                                      calls="grouped", dp_sizes="unequal"))
    out = tmp_path / "a.jsonl"
    with out.open("w") as f:
        write_jsonl(connect_readonly(db_path), f)
    rec = json.loads(out.read_text().splitlines()[0])
    assert rec["schema_version"] == 4
    assert {k: rec["result"][k] for k in FOOTING_FIELDS} == {
        "timing": "eager", "timing_note": "why", "calls": "grouped", "dp_sizes": "unequal", "via": "adapter"}
    assert parse_record(rec, "a line 1")["result"]["dp_sizes"] == "unequal"
