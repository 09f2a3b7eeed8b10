"""The results store's write side: :class:`Store`, one class for a database opened for writing.

Writes go through sqlite-utils on a connection this module configures: WAL journal (readers
never block the writer), foreign keys on, a 30 s busy timeout, and every write in its own
``BEGIN IMMEDIATE`` transaction (:meth:`Store.transaction`) so that concurrent writers queue instead
of failing and a killed writer leaves whole rows only. A :class:`Store` opens and migrates the
file, begins and finishes runs (:meth:`Store.run`), adds measured results with their raw
samples (:meth:`Store.add_result`) and drops runs; importing exported records is
:mod:`db.importing`, functions over a Store. Reads for the fast commands live in
:mod:`db.queries` (stdlib ``sqlite3``: sqlite-utils stays off their path).
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import sqlite_utils

from autoselect import __version__
from autoselect.options import parse_run_ref
from db import default_path
from db.errors import (AmbiguousRun, DatabaseLocked, DatabaseNotFound, DatabaseNotWritable, RunStillRunning,
                       UnknownRun)
from db.fields import check_host_class, result_problem, run_problem
from db.queries import STALE_AFTER_S, stale_reason, stale_runs
from db.records import KINDS, RUN_STATUSES, STATUSES, Result
from db.rows import dumps, host_to_row, now_iso, result_key, result_to_row
from db.schema import BUSY_TIMEOUT_MS, check_connection, check_header, check_path, migrations, statements


@dataclass
class RunHandle:
    """The run :meth:`Store.run` began: its id, and the status and meta it will be finished with."""

    id: int
    status: str = "complete"  # what a block that returns normally ends the run with
    meta: dict = field(default_factory=dict)  # merged into the run's meta at the end


class Store:
    """A results database opened for writing: its runs, results and the transactions they take.

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
    def transaction(self) -> Iterator[None]:
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
        pending = [m for m in migrations() if m.version > self.schema_version]
        if not pending:
            return
        # A migration may rebuild a table others reference (SQLite's way to change a column): with
        # foreign keys on, dropping the old table would delete, or refuse to delete, every row that
        # points at it. Off while migrations run (outside a transaction, where SQLite honours it),
        # and no reference may break in a migration (checked before it commits).
        self.conn.execute("PRAGMA foreign_keys = OFF")
        try:
            for m in pending:
                with self.transaction():
                    current = self.conn.execute("PRAGMA user_version").fetchone()[0]
                    if current >= m.version:
                        continue  # another process migrated while we waited for the lock
                    before = len(self.conn.execute("PRAGMA foreign_key_check").fetchall())  # an older file's own
                    for stmt in statements(m.sql):
                        self.conn.execute(stmt)
                    after = self.conn.execute("PRAGMA foreign_key_check").fetchall()
                    if len(after) > before:
                        raise RuntimeError(f"migration {m.name} broke {len(after) - before} references "
                                           f"(one: {tuple(after[0])}); the database is unchanged")
                    self.conn.execute(f"PRAGMA user_version = {m.version}")
        finally:
            self.conn.execute("PRAGMA foreign_keys = ON")

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
        with self.transaction():
            found = stale_runs(self.conn)
            for run in found:
                self.conn.execute(
                    "UPDATE runs SET status = 'interrupted' WHERE id = ? AND status = 'running'", (run["id"],)
                )
        return found

    # -- runs ---------------------------------------------------------------------------------

    def begin_run(self, host, *, trigger: str = "manual", command: str | None = None, meta: dict | None = None) -> int:
        """Record the start of a run on ``host`` (a HostFingerprint) by this process; returns its id.

        :raises ReservedHostClass: ``host`` claims a class of the reserved ``ref-`` namespace.
        """
        h = host.to_dict() if hasattr(host, "to_dict") else dict(host)
        check_host_class(h.get("host_class"), "host")  # the reference namespace is read-only
        now = now_iso()
        with self.transaction():
            self.upsert_host(h, now, now)
            return self.db["runs"].insert(
                {
                    "uid": uuid.uuid4().hex,
                    "machine_id": h["machine_id"],
                    "host_class": h["host_class"],
                    "started_at": now,
                    "updated_at": now,
                    "finished_at": None,
                    "status": "running",
                    "trigger": trigger,
                    "command": command,
                    "hostname": socket.gethostname(),
                    "pid": os.getpid(),
                    "autoselect_version": __version__,
                    "meta": dumps(meta or {}),
                }
            ).last_pk

    @contextmanager
    def run(self, host, *, trigger: str = "manual", command: str | None = None,
            meta: dict | None = None) -> Iterator["RunHandle"]:
        """Begin a run, yield a :class:`RunHandle`, and always finish the run on the way out.

        The final status is ``interrupted`` when the block raises ``KeyboardInterrupt``
        (``launch.signals_raise`` turns SIGTERM/SIGHUP into one), ``failed`` when it raises
        anything else (the exception propagates either way), and otherwise ``handle.status``
        (``complete`` unless the block set ``failed`` or ``interrupted``). Keys the block puts
        in ``handle.meta`` are merged into the run's meta when it is finished::

            with store.run(host, trigger="bench", command="autoselect bench") as run:
                store.add_result(run.id, result)
                run.meta["seconds"] = 12.5

        A write that fails for want of space or a failing device (:class:`DatabaseNotWritable`)
        is raised saying what the database keeps of the run: the results stored before it.

        :param host: the :class:`autoselect.hardware.HostFingerprint` the run measures.
        :param trigger, command, meta: as for :meth:`begin_run`.
        """
        handle = RunHandle(self.begin_run(host, trigger=trigger, command=command, meta=meta))
        try:
            yield handle
        except BaseException as e:
            status = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
            try:
                self.finish_run(handle.id, status, meta=handle.meta or None)
            except DatabaseNotWritable:
                pass  # the run stays `running` until the next open marks it interrupted; e says why
            if isinstance(e, DatabaseNotWritable):
                raise self._run_kept(handle.id, e) from None
            raise
        else:
            try:
                self.finish_run(handle.id, handle.status, meta=handle.meta or None)
            except DatabaseNotWritable as e:
                raise self._run_kept(handle.id, e) from None

    def _run_kept(self, run_id: int, error: DatabaseNotWritable) -> DatabaseNotWritable:
        """``error`` (a write of run ``run_id`` failed: a full disk, a failing device) with what
        the database still holds of the run: the results stored before stay."""
        try:
            results = self.conn.execute("SELECT COUNT(*) FROM results WHERE run_id = ?", (run_id,)).fetchone()[0]
            status = self.conn.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()[0]
        except sqlite3.Error:
            return error  # the file cannot even be read: nothing more is known
        state = ("it stays `running` until the database is next opened for writing, which marks it interrupted"
                 if status == "running" else f"its status: {status}")
        return DatabaseNotWritable(f"{error}; run {run_id} keeps the {results} result(s) stored before the failure "
                                   f"({state}): `autoselect db drop-run {run_id} --yes` removes them")

    def finish_run(self, run_id: int, status: str = "complete", *, meta: dict | None = None) -> None:
        """Close a run with a final status (``complete``, ``failed`` or ``interrupted``).

        :param meta: keys merged into the run's meta (e.g. why a fleet node's run failed).
        """
        if status not in RUN_STATUSES or status == "running":
            raise ValueError(f"finish_run status must be one of {RUN_STATUSES[1:]}, not {status!r}")
        now = now_iso()
        with self.transaction():
            self._run(run_id)
            self.conn.execute(
                "UPDATE runs SET status = ?, finished_at = ?, updated_at = ? WHERE id = ?",
                (status, now, now, run_id),
            )
            if meta:
                old = self.conn.execute("SELECT meta FROM runs WHERE id = ?", (run_id,)).fetchone()[0]
                merged = {**(json.loads(old) if old else {}), **meta}
                self.conn.execute("UPDATE runs SET meta = ? WHERE id = ?", (dumps(merged), run_id))

    def append_run_meta(self, run_id: int, key: str, items: list) -> None:
        """Append ``items`` to the list at ``meta[key]`` of a run (created when absent), in one write.

        What a run learned that is not a result row: e.g. the points the benchmark harness
        itself could not build or run (``harness_failures``), which must never look like a
        backend's failure.
        """
        with self.transaction():
            self._run(run_id)
            old = self.conn.execute("SELECT meta FROM runs WHERE id = ?", (run_id,)).fetchone()[0]
            meta = json.loads(old) if old else {}
            meta[key] = list(meta.get(key) or []) + list(items)
            self.conn.execute("UPDATE runs SET meta = ?, updated_at = ? WHERE id = ?",
                              (dumps(meta), now_iso(), run_id))

    def drop_run(self, run: str | int) -> dict:
        """Delete one run: its results (with their raw samples), its tuned configurations and the
        run itself, in one transaction; the machine's fingerprint stays. ``run`` is the run's id
        (as ``db info`` and the errors show it) or its uid, in the run-reference grammar
        (:func:`autoselect.options.parse_run_ref`). Returns what was removed:
        ``{"id", "uid", "results", "tuned_configs"}``.

        A run still ``running`` is dropped only once its writer is gone (:func:`db.queries.stale_reason`:
        its pid on this host dead or reused, or no write for six hours from another host): the
        check and the delete are one transaction, so the writer cannot add a result between them.

        :raises UnknownRun: no such run. :raises AmbiguousRun: the reference is one run's id and
            another's uid. :raises RunStillRunning: its writer may be alive (the message says how
            to stop it).
        """
        with self.transaction():
            found = self._find_run(run)
            if found is None:
                raise UnknownRun(f"no run {run} in {self.path}; `autoselect db info` shows the newest run, "
                                 "`autoselect db check` names the runs of bad rows")
            run_id, uid = found
            self._refuse_live(run_id)
            results = self.conn.execute("SELECT COUNT(*) FROM results WHERE run_id = ?", (run_id,)).fetchone()[0]
            self.conn.execute("DELETE FROM samples WHERE result_id IN (SELECT id FROM results WHERE run_id = ?)",
                              (run_id,))
            self.conn.execute("DELETE FROM results WHERE run_id = ?", (run_id,))
            tuned = 0
            if self.schema_version >= 2:
                tuned = self.conn.execute("DELETE FROM tuned_configs WHERE run_id = ?", (run_id,)).rowcount
            self.conn.execute("DELETE FROM runs WHERE id = ?", (run_id,))
        return {"id": run_id, "uid": uid, "results": results, "tuned_configs": tuned}

    def _refuse_live(self, run_id: int) -> None:
        """Refuse to destroy a ``running`` run whose writer may still be measuring."""
        cur = self.conn.execute("SELECT status, hostname, pid, started_at, updated_at FROM runs WHERE id = ?",
                                (run_id,))
        run = dict(zip([c[0] for c in cur.description], cur.fetchone()))
        if run["status"] != "running" or run_problem(run, fields=("hostname", "pid", "started_at", "updated_at")):
            return  # finished, or a row no reader can judge (`db check` reports it): nothing writes it
        if stale_reason(run) is not None:
            return  # its writer is gone: the run is interrupted in all but name
        pid, host, last = run["pid"], run["hostname"], run["updated_at"][:19]
        if host == socket.gethostname():
            how = (f"its writer, process {pid} on this host, is alive (last write {last}); stop it first "
                   f"(Ctrl-C where it runs, or `kill {pid}`): it ends the run as interrupted, which can then be dropped")
        else:
            how = (f"its writer, process {pid} on {host}, wrote last at {last}, and this host cannot see whether it "
                   f"is alive; stop it on {host} first (`kill {pid}` there), or drop the run once it has not "
                   f"written for {STALE_AFTER_S // 3600} h")
        raise RunStillRunning(f"run {run_id} is still running: {how}; nothing was deleted")

    def run_summary(self, run: str | int) -> dict | None:
        """What :meth:`drop_run` would remove (``{"id", "uid", "results", "tuned_configs",
        "started_at", "status", "trigger", "command"}``), None when there is no such run."""
        found = self._find_run(run)
        if found is None:
            return None
        run_id, uid = found
        started, status, trigger, command = self.conn.execute(
            "SELECT started_at, status, \"trigger\", command FROM runs WHERE id = ?", (run_id,)).fetchone()
        tuned = self.conn.execute("SELECT COUNT(*) FROM tuned_configs WHERE run_id = ?", (run_id,)).fetchone()[0] \
            if self.schema_version >= 2 else 0
        return {"id": run_id, "uid": uid,
                "results": self.conn.execute("SELECT COUNT(*) FROM results WHERE run_id = ?", (run_id,)).fetchone()[0],
                "tuned_configs": tuned, "started_at": started, "status": status, "trigger": trigger,
                "command": command}

    def _find_run(self, run: str | int) -> tuple[int, str] | None:
        """(id, uid) of a run named by its id or its uid (the run-reference grammar); None when none is.

        :raises BadRunRef: text outside the grammar (blanks, control characters ...).
        :raises AmbiguousRun: the text is one run's id and another run's uid.
        """
        ref = parse_run_ref(str(run))
        by_id = (self.conn.execute("SELECT id, uid FROM runs WHERE id = ?", (ref.id,)).fetchone()
                 if ref.id is not None else None)
        by_uid = self.conn.execute("SELECT id, uid FROM runs WHERE uid = ?", (ref.text,)).fetchone()
        if by_id is not None and by_uid is not None and tuple(by_id) != tuple(by_uid):
            raise AmbiguousRun(f"{ref.text} is run {by_id[0]}'s id and run {by_uid[0]}'s uid; pass the uid of the run "
                               f"you mean: {by_id[1]} (run {by_id[0]}) or {by_uid[1]} (run {by_uid[0]})")
        return by_id if by_id is not None else by_uid

    # -- results ------------------------------------------------------------------------------

    def add_result(self, run_id: int, result: Result) -> int:
        """Store one result and its raw samples in one transaction; returns the result's id.

        ``created_at`` is set to now when the result has none (the passed object is not changed).
        """
        d = result.to_dict()
        _validate_result(d)
        if not d.get("created_at"):
            d["created_at"] = now_iso()
        said = result_problem(d)  # the rules import applies hold for every writer (db/fields.py)
        if said:
            raise ValueError(f"refusing to store a result that breaks the schema: {said}")
        with self.transaction():
            uid, machine_id, host_class, status = self._run(run_id)
            if status != "running":
                raise ValueError(f"run {run_id} is {status}; results can only be added to a running run")
            # the same point measured twice in one run with the same timestamp (a caller's
            # coarse clock) is still two measurements: move the second one a microsecond on
            while self.conn.execute(
                "SELECT 1 FROM results WHERE result_key = ?", (result_key(machine_id, uid, d),)
            ).fetchone():
                d["created_at"] = _next_microsecond(d["created_at"])
            rid = self.insert_result(run_id, uid, machine_id, host_class, d)
            self.conn.execute("UPDATE runs SET updated_at = ? WHERE id = ?", (now_iso(), run_id))
        return rid

    # -- the row writers that live writes and imports share ---------------------------------

    def upsert_host(self, host: dict, first_seen: str, last_seen: str) -> bool:
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
        if row is None:  # never begun, or dropped while it was being written (by hand, or an older autoselect)
            raise UnknownRun(f"run {run_id} is not in {self.path} (removed while it was measuring?); what it "
                             "measured from here on cannot be stored: start a new run")
        return row

    def insert_result(self, run_id: int, run_uid: str, machine_id: str, host_class: str, d: dict) -> int:
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


def upgrade(db_path) -> tuple[int, int]:
    """Apply pending migrations to the database at ``db_path``; returns (old, new) schema version."""
    path = Path(db_path) if db_path is not None else default_path()
    if not path.is_file():
        raise DatabaseNotFound(f"no results database at {path}; pass --db PATH")
    old = check_header(path) or 0
    with Store(path, create=False) as store:
        return old, store.schema_version


def _write_error(path: Path, e: sqlite3.OperationalError, default: Any = DatabaseLocked):
    """The user-facing error for an SQLite write failure: a lock held too long, a read-only
    file or directory, a full disk or a failing device; ``default`` (the lock error, or None:
    not a user error) otherwise."""
    text = str(e).lower()
    if "readonly" in text or "read-only" in text:
        return DatabaseNotWritable(f"{path} cannot be written ({e}); make it and its directory writable, "
                                   "or pass --db with another path")
    if "full" in text or "disk i/o" in text:  # only this write is known lost: callers say what else stays
        return DatabaseNotWritable(f"{path}: {e}; the write that failed was not stored; free space on its device, "
                                   "or pass --db with another path")
    if "locked" in text or "busy" in text:
        return DatabaseLocked(f"{path}: {e}; another autoselect is writing it, try again")
    if default is None:
        return None
    return default(f"{path}: {e}; another autoselect is writing it, try again")


def _next_microsecond(iso: str) -> str:
    """An ISO-8601 timestamp one microsecond later (UTC if it had no zone)."""
    t = datetime.fromisoformat(iso)
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return (t + timedelta(microseconds=1)).isoformat(timespec="microseconds")


def _validate_result(d: dict) -> None:
    """Reject a Result the schema would store wrongly (a programming error, not user input)."""
    if d["status"] not in STATUSES:
        raise ValueError(f"result status must be one of {STATUSES}, not {d['status']!r}")
    if d["kind"] not in KINDS:
        raise ValueError(f"result kind must be one of {KINDS}, not {d['kind']!r}")
    raw = d.get("raw_samples_us") or []
    if raw and len(raw) != d["samples"]:
        raise ValueError(f"result has samples={d['samples']} but {len(raw)} raw samples")
