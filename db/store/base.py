"""The write side's connection: opening and validating the file, one transaction per write, migrations.

:class:`StoreBase` owns the connection (WAL journal, foreign keys on, a 30 s busy timeout) and
the row writers that live writes and imports share (a host's fingerprint, a result with its
samples, the lookup of a run). Every write runs in its own ``BEGIN IMMEDIATE`` transaction
(:meth:`StoreBase._write`), so concurrent writers queue instead of failing and a killed writer
leaves whole rows only."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlite_utils

from db import default_path
from db.errors import DatabaseLocked, DatabaseNotFound, DatabaseNotWritable, UnknownRun
from db.queries import stale_runs
from db.rows import host_to_row, result_key, result_to_row
from db.schema import BUSY_TIMEOUT_MS, check_connection, check_path, migrations, statements


class StoreBase:
    """A results database opened for writing: the connection, transactions and shared row writers.

    Opening validates the file (not a database, a foreign database or a newer schema is
    refused before a byte changes), applies pending migrations, and marks runs left
    ``running`` by writers that are gone as ``interrupted``.
    """

    path: Path
    conn: sqlite3.Connection
    db: sqlite_utils.Database
    interrupted: list[dict]  # the runs opening marked interrupted, each with its reason

    def __init__(self, path: str | os.PathLike | None = None, *, create: bool = True):
        self.path = Path(path) if path is not None else default_path()
        if not check_path(self.path, write=True):
            if not create:
                raise DatabaseNotFound(
                    f"no results database at {self.path}; run `autoselect bench` to measure, or pass --db PATH"
                )
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise DatabaseNotWritable(
                    f"cannot create {self.path.parent} ({e.strerror}); pass --db with a writable path"
                ) from None
            check_path(self.path, write=True)  # the directory just made, or found, must be writable
        try:
            conn = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_MS / 1000)
        except sqlite3.OperationalError as e:
            raise DatabaseNotWritable(f"cannot open {self.path} ({e}); pass --db with a writable path") from None
        try:
            check_connection(conn, self.path)
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.OperationalError as e:
            conn.close()
            raise _write_error(self.path, e) from None
        except BaseException:
            conn.close()
            raise
        self.conn = conn
        self.db = sqlite_utils.Database(conn)
        self.interrupted: list[dict] = []
        try:
            self._migrate()
            self.interrupted = self.mark_interrupted()
        except BaseException:
            conn.close()
            raise

    # -- plumbing ---------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[None]:
        """One ``BEGIN IMMEDIATE`` transaction: takes the write lock first, so no upgrade deadlock."""
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            raise _write_error(self.path, e) from None
        try:
            yield
            self.conn.execute("COMMIT")
        except BaseException as e:
            if self.conn.in_transaction:  # some errors (disk full, ...) already rolled it back
                self.conn.execute("ROLLBACK")
            if isinstance(e, sqlite3.OperationalError) and _write_error(self.path, e, None) is not None:
                raise _write_error(self.path, e) from None
            raise

    def _migrate(self) -> None:
        for m in migrations():
            with self._write():
                current = self.conn.execute("PRAGMA user_version").fetchone()[0]
                if current >= m.version:
                    continue  # another process migrated while we waited for the lock
                for stmt in statements(m.sql):
                    self.conn.execute(stmt)
                self.conn.execute(f"PRAGMA user_version = {m.version}")

    @property
    def schema_version(self) -> int:
        """The schema version of the open database."""
        return self.conn.execute("PRAGMA user_version").fetchone()[0]

    def close(self) -> None:
        """Close the connection (the WAL is checkpointed by the last one to close)."""
        self.conn.close()

    def __enter__(self):  # -> the Store itself
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def mark_interrupted(self) -> list[dict]:
        """Mark ``running`` runs whose writer is gone as ``interrupted``; returns them with reasons."""
        with self._write():
            found = stale_runs(self.conn)
            for run in found:
                self.conn.execute(
                    "UPDATE runs SET status = 'interrupted' WHERE id = ? AND status = 'running'", (run["id"],)
                )
        return found

    # -- the row writers that live writes and imports share ---------------------------------

    def _upsert_host(self, host: dict, first_seen: str, last_seen: str) -> bool:
        """Insert or refresh a host's fingerprint; returns True when the machine is new.

        The newest fingerprint of a machine wins (by ``last_seen``); ``first_seen`` keeps the oldest.
        """
        row = host_to_row(host)
        existing = self.conn.execute(
            "SELECT first_seen, last_seen FROM hosts WHERE machine_id = ?", (row["machine_id"],)
        ).fetchone()
        if existing is None:
            self.db["hosts"].insert({**row, "first_seen": first_seen, "last_seen": last_seen})
            return True
        if last_seen > existing[1]:
            self.db["hosts"].update(row["machine_id"], {**row, "last_seen": last_seen})
        if first_seen < existing[0]:
            self.db["hosts"].update(row["machine_id"], {"first_seen": first_seen})
        return False

    def _run(self, run_id: int) -> tuple:
        """(uid, machine_id, host_class, status) of a stored run; :class:`UnknownRun` when there is none."""
        row = self.conn.execute(
            "SELECT uid, machine_id, host_class, status FROM runs WHERE id = ?", (run_id,)
        ).fetchone()
        if row is None:
            raise UnknownRun(f"no run {run_id} in {self.path}; start one with begin_run")
        return row

    def _insert_result(self, run_id: int, run_uid: str, machine_id: str, host_class: str, d: dict) -> int:
        """Insert one result row (a :func:`db.rows.result_to_row` dict) and its raw samples; returns its id."""
        row = result_to_row(d)
        row.update(
            result_key=result_key(machine_id, run_uid, d),
            run_id=run_id,
            machine_id=machine_id,
            host_class=host_class,
        )
        rid = self.db["results"].insert(row).last_pk
        samples = d.get("raw_samples_us") or []
        if samples:  # thousands of 3-column rows: executemany, not sqlite-utils' per-row dicts
            self.conn.executemany(
                "INSERT INTO samples (result_id, idx, latency_us) VALUES (?, ?, ?)",
                [(rid, i, float(v)) for i, v in enumerate(samples)],
            )
        return rid


def _write_error(path: Path, e: sqlite3.OperationalError, default: Any = DatabaseLocked):
    """The user-facing error for an SQLite write failure: a lock held too long, a read-only
    file or directory, a full disk or a failing device; ``default`` (the lock error, or None:
    not a user error) otherwise."""
    text = str(e).lower()
    if "readonly" in text or "read-only" in text:
        return DatabaseNotWritable(f"{path} cannot be written ({e}); make it and its directory writable, "
                                   "or pass --db with another path")
    if "full" in text or "disk i/o" in text:
        return DatabaseNotWritable(f"{path}: {e}; free space on its device (nothing was written), or pass "
                                   "--db with another path")
    if "locked" in text or "busy" in text:
        return DatabaseLocked(f"{path}: {e}; another autoselect is writing it, try again")
    if default is None:
        return None
    return default(f"{path}: {e}; another autoselect is writing it, try again")
