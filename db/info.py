"""What ``autoselect db info`` and ``autoselect db check`` show: counts, integrity, rows that break the schema."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from db import default_path
from db.errors import DatabaseDamaged
from db.fields import host_problem, result_problem, run_problem, tuned_problem
from db.queries import connect_readonly, stale_runs
from db.rows import row_to_host_dict, row_to_result_dict, row_to_run_dict, row_to_tuned_dict
from db.schema import decode_text, latest_version


def info(conn: sqlite3.Connection, path: str | os.PathLike) -> dict:
    """What ``autoselect db info`` shows: schema, counts (tuned configurations too), per host and backend, newest run, interrupted runs."""
    one = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
    hosts = [
        dict(r)
        for r in conn.execute(
            "SELECT h.machine_id, h.hostname, h.host_class, h.gpu_name, h.gpu_count,"
            " (SELECT COUNT(*) FROM results r WHERE r.machine_id = h.machine_id) AS results,"
            " (SELECT COUNT(*) FROM runs u WHERE u.machine_id = h.machine_id) AS runs,"
            " h.last_seen FROM hosts h ORDER BY h.hostname, h.machine_id"
        )
    ]
    backends = [
        dict(r)
        for r in conn.execute(
            "SELECT backend, COUNT(*) AS results, SUM(status = 'ok') AS ok, SUM(status = 'incorrect') AS incorrect,"
            " SUM(status NOT IN ('ok', 'incorrect')) AS other FROM results GROUP BY backend ORDER BY backend"
        )
    ]
    newest = conn.execute(
        "SELECT u.id, u.started_at, u.finished_at, u.status, u.\"trigger\", h.hostname, u.host_class, u.command,"
        " (SELECT COUNT(*) FROM results r WHERE r.run_id = u.id) AS results"
        " FROM runs u JOIN hosts h ON h.machine_id = u.machine_id ORDER BY u.started_at DESC, u.id DESC LIMIT 1"
    ).fetchone()
    interrupted = [
        dict(r)
        for r in conn.execute(
            "SELECT id, hostname, started_at, updated_at FROM runs WHERE status = 'interrupted' ORDER BY id"
        )
    ]
    p = Path(path)
    return {
        "path": str(p),
        "size_bytes": p.stat().st_size,
        "schema_version": one("PRAGMA user_version"),
        "journal_mode": one("PRAGMA journal_mode"),
        "counts": {
            "hosts": one("SELECT COUNT(*) FROM hosts"),
            "runs": one("SELECT COUNT(*) FROM runs"),
            "results": one("SELECT COUNT(*) FROM results"),
            "samples": one("SELECT COUNT(*) FROM samples"),
            "tuned_configs": one("SELECT COUNT(*) FROM tuned_configs"),
        },
        "hosts": hosts,
        "backends": backends,
        "newest_run": dict(newest) if newest else None,
        "interrupted_runs": interrupted,
        "stale_running_runs": stale_runs(conn),
    }


def check(conn: sqlite3.Connection, path: str | os.PathLike) -> dict:
    """What ``autoselect db check`` verifies: integrity, foreign keys, whole rows, schema version.

    A database so damaged that a check cannot run is reported (``ok`` False, the SQLite error
    in ``integrity_check``), not raised; checks that could not run are None.
    """
    def attempt(fn):
        try:
            return fn(), None
        except sqlite3.DatabaseError as e:
            return None, str(e)

    conn.text_factory = decode_text  # text another program stored that is not UTF-8 is read escaped, and named

    integrity, err = attempt(lambda: [r[0] for r in conn.execute("PRAGMA integrity_check")])
    if err:
        integrity = [f"cannot run: {err}"]
    fk, fk_err = attempt(lambda: len(conn.execute("PRAGMA foreign_key_check").fetchall()))
    partial, partial_err = attempt(lambda: conn.execute(
        "SELECT COUNT(*) FROM (SELECT r.samples AS n, COUNT(s.idx) AS stored FROM results r"
        " LEFT JOIN samples s ON s.result_id = r.id GROUP BY r.id) WHERE stored > 0 AND stored != n"
    ).fetchone()[0])
    stale, _ = attempt(lambda: stale_runs(conn))
    schema, schema_err = attempt(lambda: schema_problems(conn))
    violations, examples = schema if schema is not None else (None, [f"cannot run: {schema_err}"])
    ok = integrity == ["ok"] and fk == 0 and partial == 0 and violations == 0
    return {
        "path": str(path),
        "ok": ok,
        "integrity_check": integrity,
        "foreign_key_violations": fk,
        "results_with_missing_samples": partial,
        "schema_violations": violations,
        "schema_violation_examples": examples,
        "schema_version": conn.execute("PRAGMA user_version").fetchone()[0],
        "latest_schema_version": latest_version(),
        "journal_mode": conn.execute("PRAGMA journal_mode").fetchone()[0],
        "stale_running_runs": stale or [],
    }


def schema_problems(conn: sqlite3.Connection) -> tuple[int, list[str]]:
    """Stored rows that break the schema rules (:mod:`db.fields`): (how many, the first 20 as
    sentences). Results, runs, hosts and tuned configurations are each decoded as the readers
    decode them; a result whose machine or host class differs from its run's counts too."""
    found: list[str] = []
    count = 0

    def note(what: str) -> None:
        nonlocal count
        count += 1
        if len(found) < 20:
            found.append(what)

    for what in _text_problems(conn):
        note(what)
    conn.text_factory = decode_text  # the checks below read such values escaped
    cur = conn.cursor()
    cur.row_factory = sqlite3.Row
    for row in cur.execute("SELECT * FROM hosts ORDER BY machine_id"):
        said = host_problem({**row_to_host_dict(dict(row)), "first_seen": row["first_seen"], "last_seen": row["last_seen"]})
        if said:
            note(f"host {row['machine_id']}: {said}")
    for row in cur.execute("SELECT * FROM runs ORDER BY id"):
        said = run_problem(row_to_run_dict(dict(row)))
        if said:
            note(f"run {row['id']}: {said}")
    for row in cur.execute("SELECT * FROM results ORDER BY id"):
        said = result_problem(row_to_result_dict(dict(row)), with_samples=False)
        if said:
            note(f"result {row['id']} (run {row['run_id']}): {said}")
    for rid, run_id, machine, host_class, run_machine, run_class in cur.execute(
        "SELECT r.id, r.run_id, r.machine_id, r.host_class, u.machine_id, u.host_class FROM results r"
        " JOIN runs u ON u.id = r.run_id WHERE r.machine_id <> u.machine_id OR r.host_class <> u.host_class"
        " ORDER BY r.id"
    ):
        note(f"result {rid} (run {run_id}): measured on machine {machine} (class {host_class}) but its run on "
             f"{run_machine} (class {run_class})")
    for row in cur.execute("SELECT * FROM tuned_configs ORDER BY id"):
        said = tuned_problem(row_to_tuned_dict(dict(row)))
        if said:
            note(f"tuned configuration {row['id']}: {said}")
    return count, found


#: table -> the column that names a row in messages
_ROW_NAMES = {"hosts": "machine_id", "runs": "id", "results": "id", "tuned_configs": "id"}


def _text_problems(conn: sqlite3.Connection) -> list[str]:
    """Stored values that are not UTF-8 text (another program wrote them), one sentence each."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    previous, conn.text_factory = conn.text_factory, bytes
    out = []
    try:
        for table, key in _ROW_NAMES.items():
            if table not in tables:
                continue
            cur = conn.execute(f"SELECT * FROM {table} ORDER BY rowid")
            names = [c[0] for c in cur.description]
            for row in cur:
                for name, value in zip(names, row):
                    if isinstance(value, bytes) and not _utf8(value):
                        ident = row[names.index(key)]
                        ident = decode_text(ident) if isinstance(ident, bytes) else ident
                        out.append(f"{table[:-1].replace('_config', ' configuration')} {ident}: {name} is "
                                   f"'{decode_text(value)[:40]}', not UTF-8 text (written by another program)")
    finally:
        conn.text_factory = previous
    return out


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def info_at(path: str | os.PathLike | None = None) -> dict:
    """:func:`info` of the database at ``path`` (default: :func:`db.default_path`), read-only."""
    path = Path(path) if path is not None else default_path()
    conn = connect_readonly(path)
    try:
        return info(conn, path)
    except sqlite3.DatabaseError as e:
        raise DatabaseDamaged(f"{path} is damaged ({e}); run `autoselect db check --db {path}` for details") from None
    finally:
        conn.close()


def check_at(path: str | os.PathLike | None = None) -> dict:
    """:func:`check` of the database at ``path`` (default: :func:`db.default_path`), read-only."""
    path = Path(path) if path is not None else default_path()
    conn = connect_readonly(path)
    try:
        return check(conn, path)
    finally:
        conn.close()
