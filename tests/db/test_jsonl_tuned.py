"""db export / import / merge carry the tuned_configs table (record kind autoselect.tuned, format 2)."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from support.db import file_state, hgx_host, make_result, single_h200_host
from support.paths import FIXTURES

from autoselect.cli import main
from db import jsonl
from db.errors import BadImportRecord, ImportFormatTooNew
from db.importing import import_file, merge_into
from db.queries import connect_readonly
from db.store import Store
from db.tuned import TunedConfig, best_tuned, save_tuned

SHAPE = dict(hidden=7168, top_k=8, experts=256, activation_dtype="bf16", world_size=8)
FIXTURE_V1 = FIXTURES / "records" / "export-format-1.jsonl"


def tuned(host, run_id, created_at, **kw) -> TunedConfig:
    """A tuned configuration of ``host`` with every field set (JSON columns, floats, a flag)."""
    fields = dict(
        host_class=host.host_class, machine_id=host.machine_id, device="cuda", backend="allgather_reducescatter",
        status="gain", stop="settled", study="study-1", workload={"kind": "decode", "buckets": [[8, 0.5], [16, 0.5]]},
        knobs={"NCCL_PROTO": "LL"}, env={"NCCL_PROTO": "LL"}, flags=["--max-num-batched-tokens", "4096"],
        gain=0.12, gain_halfwidth=0.03, tuned_latency_us=88.25, untuned_latency_us=100.5,
        versions={"nccl": "2.28.9"}, run_id=run_id, created_at=created_at, **SHAPE,
    )
    fields.update(kw)
    return TunedConfig(**fields)


def filled(path: Path) -> Path:
    """Results of two runs, and three tuned rows: one of a run with results, one of a run with
    none (a tune whose measurements all failed to store), one with no run at all."""
    a, b = hgx_host("node-a"), single_h200_host("h200-vm")
    with Store(path) as s:
        run = s.begin_run(a, trigger="tune", command="autoselect tune")
        s.add_result(run, make_result("allgather_reducescatter", 8))
        save_tuned(s, tuned(a, run, "2026-11-30T01:00:00+00:00"))
        s.finish_run(run)
        empty = s.begin_run(b, trigger="tune")
        save_tuned(s, tuned(b, empty, "2026-11-30T02:00:00+00:00", status="no_gain", gain=None,
                            gain_halfwidth=None, knobs={}, env={}, flags=[], world_size=1))
        s.finish_run(empty, "failed")
        save_tuned(s, tuned(a, None, "2026-11-30T03:00:00+00:00", backend="deepep_low_latency",
                            env={"VLLM_DBO_COMM_SMS": "20"}, knobs={"VLLM_DBO_COMM_SMS": "20"}, flags=[]))
    return path


def export(path: Path) -> str:
    """`db export` of ``path`` as text."""
    out = io.StringIO()
    jsonl.write_jsonl(connect_readonly(path), out)
    return out.getvalue()


def tuned_rows(path: Path) -> list[tuple]:
    """Every tuned_configs row with its run's uid in place of the local run id."""
    conn = sqlite3.connect(path)
    cols = [c[1] for c in conn.execute("PRAGMA table_info(tuned_configs)") if c[1] not in ("id", "run_id")]
    return conn.execute(f"SELECT {', '.join('t.' + c for c in cols)}, r.uid FROM tuned_configs t "
                        "LEFT JOIN runs r ON r.id = t.run_id ORDER BY t.id").fetchall()


def lines_with_tuned_line_changed(tmp_path: Path, change) -> Path:
    """An export whose first tuned line went through ``change(record)``, written to bad.jsonl."""
    lines = export(filled(tmp_path / "a.db")).splitlines()
    index = next(i for i, line in enumerate(lines) if '"autoselect.tuned"' in line)
    rec = json.loads(lines[index])
    change(rec)
    lines[index] = json.dumps(rec)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    return bad


def test_tuned_rows_are_exported_after_the_results_with_their_run_and_host(tmp_path):
    records = [json.loads(line) for line in export(filled(tmp_path / "a.db")).splitlines()]
    assert [r["format"] for r in records] == ["autoselect.result"] + ["autoselect.tuned"] * 3
    assert {r["schema_version"] for r in records} == {4}
    first, no_results, no_run = records[1:]
    assert sorted(first) == ["format", "host", "run", "schema_version", "tuned", "tuned_key"]
    assert first["run"]["uid"] == records[0]["run"]["uid"] and first["host"]["hostname"] == "node-a"
    assert first["tuned"]["flags"] == ["--max-num-batched-tokens", "4096"] and first["tuned"]["gain"] == 0.12
    assert "id" not in first["tuned"] and "run_id" not in first["tuned"]
    assert no_results["run"]["status"] == "failed" and no_results["host"]["hostname"] == "h200-vm"
    assert no_results["tuned"]["gain"] is None
    assert no_run["run"] is None and no_run["host"]["hostname"] == "node-a"


def test_export_import_export_is_byte_identical_with_tuned_rows(tmp_path):
    a = filled(tmp_path / "a.db")
    exported = export(a)
    (tmp_path / "a.jsonl").write_text(exported)
    summary = import_file(tmp_path / "b.db", tmp_path / "a.jsonl")
    assert summary.to_dict() == {"results_added": 1, "results_present": 0, "runs_added": 2, "hosts_added": 2,
                                 "tuned_added": 3, "tuned_present": 0}
    assert export(tmp_path / "b.db") == exported
    assert tuned_rows(tmp_path / "b.db") == tuned_rows(a)


def test_importing_the_same_file_twice_adds_no_tuned_row(tmp_path):
    (tmp_path / "a.jsonl").write_text(export(filled(tmp_path / "a.db")))
    import_file(tmp_path / "b.db", tmp_path / "a.jsonl")
    again = import_file(tmp_path / "b.db", tmp_path / "a.jsonl")
    assert again.to_dict() == {"results_added": 0, "results_present": 1, "runs_added": 0, "hosts_added": 0,
                               "tuned_added": 0, "tuned_present": 3}
    assert len(tuned_rows(tmp_path / "b.db")) == 3


def test_merge_carries_tuned_rows_and_dedupes_them_like_results(tmp_path):
    a = filled(tmp_path / "a.db")
    with Store(tmp_path / "fleet.db") as s:  # the fleet db has its own run, result and tuned row
        other = single_h200_host("other-vm")
        run = s.begin_run(other)
        s.add_result(run, make_result(world_size=1))
        save_tuned(s, tuned(other, run, "2026-11-29T00:00:00+00:00"))
        s.finish_run(run)
    first = merge_into(tmp_path / "fleet.db", a)
    assert (first.results_added, first.tuned_added, first.tuned_present) == (1, 3, 0)
    second = merge_into(tmp_path / "fleet.db", a)
    assert (second.results_added, second.tuned_added, second.tuned_present) == (0, 0, 3)
    assert len(tuned_rows(tmp_path / "fleet.db")) == 4
    assert tuned_rows(tmp_path / "fleet.db")[1:] == tuned_rows(a)


def test_a_file_import_and_a_merge_of_the_same_rows_count_them_once(tmp_path):
    a = filled(tmp_path / "a.db")
    (tmp_path / "a.jsonl").write_text(export(a))
    import_file(tmp_path / "b.db", tmp_path / "a.jsonl")
    assert merge_into(tmp_path / "b.db", a).tuned_present == 3


def test_two_tunes_at_the_same_time_with_different_knobs_are_two_rows(tmp_path):
    host = hgx_host("node-a")
    with Store(tmp_path / "a.db") as s:
        save_tuned(s, tuned(host, None, "2026-11-30T01:00:00+00:00"))
        save_tuned(s, tuned(host, None, "2026-11-30T01:00:00+00:00", knobs={"NCCL_PROTO": "Simple"},
                            env={"NCCL_PROTO": "Simple"}))
    (tmp_path / "a.jsonl").write_text(export(tmp_path / "a.db"))
    assert import_file(tmp_path / "b.db", tmp_path / "a.jsonl").tuned_added == 2


def test_recommend_reads_an_imported_tuned_configuration(tmp_path):
    a = filled(tmp_path / "a.db")
    (tmp_path / "a.jsonl").write_text(export(a))
    import_file(tmp_path / "b.db", tmp_path / "a.jsonl")
    host = hgx_host("node-a")
    got = best_tuned(connect_readonly(tmp_path / "b.db"), host_class=host.host_class,
                     backend="allgather_reducescatter", **SHAPE)
    want = best_tuned(connect_readonly(a), host_class=host.host_class, backend="allgather_reducescatter", **SHAPE)
    assert (got.env, got.flags, got.gain, got.created_at) == (want.env, want.flags, want.gain, want.created_at) == (
        {"NCCL_PROTO": "LL"}, ["--max-num-batched-tokens", "4096"], 0.12, "2026-11-30T01:00:00+00:00")


def test_a_format_1_file_without_tuned_records_still_imports(tmp_path):
    first = json.loads(FIXTURE_V1.read_text().splitlines()[0])
    assert (first["format"], first["schema_version"]) == ("autoselect.result", 1)
    summary = import_file(tmp_path / "b.db", FIXTURE_V1)
    assert summary.results_added == len(FIXTURE_V1.read_text().splitlines()) and summary.tuned_added == 0


def test_integer_latencies_in_a_hand_written_record_dedupe_as_the_stored_floats(tmp_path):
    bad = lines_with_tuned_line_changed(tmp_path, lambda r: (r["tuned"].update(untuned_latency_us=100),
                                                             r.pop("tuned_key")))
    assert import_file(tmp_path / "b.db", bad).tuned_added == 3
    assert import_file(tmp_path / "b.db", bad).tuned_present == 3


@pytest.mark.parametrize(
    "change, error, message",
    [
        (lambda r: r.update(schema_version=5), ImportFormatTooNew, "record format 5 is newer than this autoselect reads (4); upgrade autoselect"),
        (lambda r: r.update(schema_version=1), BadImportRecord, "autoselect.tuned records exist from record format 2 on, this line says 1"),
        (lambda r: r.update(format="autoselect.tuning"), BadImportRecord, "format is 'autoselect.tuning', expected 'autoselect.result' or 'autoselect.tuned'"),
        (lambda r: r["tuned"].update(status="great"), BadImportRecord, "tuned.status is 'great', not one of gain, no_gain"),
        (lambda r: r["tuned"].update(device="tpu"), BadImportRecord, "tuned.device is 'tpu', not one of cuda, cpu"),
        (lambda r: r["tuned"].update(speedup=2), BadImportRecord, "unknown tuned field(s) speedup"),
        (lambda r: r["tuned"].pop("study"), BadImportRecord, "tuned field(s) study missing"),
        (lambda r: r["tuned"].update(hidden="7168"), BadImportRecord, "tuned.hidden is '7168', not an integer"),
        (lambda r: r["tuned"].update(env={"NCCL_PROTO": 1}), BadImportRecord, "tuned.env is {'NCCL_PROTO': 1}, not a JSON object of strings"),
        (lambda r: r["tuned"].update(flags="--x"), BadImportRecord, "tuned.flags is '--x', not a list of strings"),
        (lambda r: r["tuned"].update(gain="12%"), BadImportRecord, "tuned.gain is '12%', not a finite number"),
        (lambda r: r["tuned"].update(gain=0.5), BadImportRecord, "tuned_key does not match the record's content"),
        (lambda r: r.pop("host"), BadImportRecord, "'host' missing or not an object"),
        (lambda r: r["run"].pop("uid"), BadImportRecord, "run.uid is required (it is null or missing)"),
    ],
)
def test_a_bad_tuned_line_is_refused_before_anything_is_written(tmp_path, change, error, message):
    bad = lines_with_tuned_line_changed(tmp_path, change)
    with pytest.raises(error) as e:
        import_file(tmp_path / "new.db", bad)
    assert str(e.value).startswith(f"{bad} line 2: ") and message in str(e.value)
    assert not (tmp_path / "new.db").exists()


def test_a_tuned_record_without_a_run_must_name_its_own_machine_as_host(tmp_path):
    def other_host(r):
        if r["run"] is None:
            r["host"]["machine_id"] = "elsewhere"
    lines = export(filled(tmp_path / "a.db")).splitlines()
    rec = json.loads(lines[3])
    other_host(rec)
    lines[3] = json.dumps(rec)
    (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(BadImportRecord, match="line 4: host.machine_id differs from tuned.machine_id"):
        import_file(tmp_path / "new.db", tmp_path / "bad.jsonl")


# --- the CLI ------------------------------------------------------------------------------


def cli(*args: str):
    """Run autoselect in-process."""
    return CliRunner().invoke(main, list(args))


def test_db_import_of_a_newer_format_is_one_error_line_and_leaves_the_database_untouched(tmp_path):
    target = filled(tmp_path / "target.db")
    before = file_state(target)
    bad = lines_with_tuned_line_changed(tmp_path, lambda r: r.update(schema_version=5))
    r = cli("db", "import", str(bad), "--db", str(target))
    assert r.exit_code == 2
    assert r.stderr == (f"Error: {bad} line 2: record format 5 is newer than this autoselect reads (4); "
                        "upgrade autoselect\n")
    assert "Traceback" not in r.output and r.stdout == ""
    assert file_state(target) == before


def test_db_import_of_a_bad_tuned_line_is_one_error_line_and_writes_nothing(tmp_path):
    bad = lines_with_tuned_line_changed(tmp_path, lambda r: r["tuned"].update(status="great"))
    r = cli("db", "import", str(bad), "--db", str(tmp_path / "new.db"))
    assert r.exit_code == 2
    assert r.stderr.startswith(f"Error: {bad} line 2: tuned.status is 'great', not one of ") and len(r.stderr.splitlines()) == 1
    assert not (tmp_path / "new.db").exists()


def test_db_import_and_merge_say_how_many_tuned_configurations_they_added(tmp_path):
    a = filled(tmp_path / "a.db")
    r = cli("db", "export", "--db", str(a), "-o", str(tmp_path / "a.jsonl"))
    assert r.exit_code == 0 and r.stderr == f"exported 1 results and 3 tuned configurations to {tmp_path / 'a.jsonl'}\n"
    r = cli("db", "import", str(tmp_path / "a.jsonl"), "--db", str(tmp_path / "b.db"))
    assert r.stdout == ("added 1 results (0 already present), 2 runs, 2 hosts, "
                        "3 tuned configurations (0 already present)\n")
    r = cli("db", "merge", str(a), "--db", str(tmp_path / "b.db"), "--format", "json")
    assert json.loads(r.stdout) == {"results_added": 0, "results_present": 1, "runs_added": 0, "hosts_added": 0,
                                    "tuned_added": 0, "tuned_present": 3}


def test_db_export_stdout_round_trips_through_the_cli(tmp_path):
    a = filled(tmp_path / "a.db")
    exported = cli("db", "export", "--db", str(a)).stdout
    (tmp_path / "a.jsonl").write_text(exported)
    assert cli("db", "import", str(tmp_path / "a.jsonl"), "--db", str(tmp_path / "b.db")).exit_code == 0
    assert cli("db", "export", "--db", str(tmp_path / "b.db")).stdout == exported


def test_db_info_counts_the_tuned_configurations(tmp_path):
    res = cli("db", "info", "--db", str(filled(tmp_path / "a.db")), "--format", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["counts"]["tuned_configs"] == 3
