"""Importing exported records into a :class:`~db.store.Store`: ``db import`` and ``db merge``.

Functions over a Store, as sqlite-utils' are over its Database: :func:`import_file` (a JSONL
export, validated completely before the database is opened) and :func:`merge_into` (another
database, read in one snapshot and validated first) both end in :func:`import_records`, which
matches hosts by machine id, runs by uid, results by ``result_key`` and tuned configurations by
``tuned_key``, so an import or a merge is idempotent. The record format is :mod:`db.jsonl`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from db.errors import BadImportRecord, DatabaseNotWritable
from db.info import schema_problems
from db.jsonl import RunIdentities, count_records, iter_labeled_records, iter_records, parse_record, read_file
from db.queries import connect_readonly
from db.rows import RUN_COLUMNS, dumps, result_key, row_to_tuned_dict, tuned_key, tuned_to_row
from db.store import Store

#: how many imported records share one transaction
IMPORT_BATCH = 500


@dataclass
class ImportSummary:
    """What an import or merge added (and what it found already present)."""

    results_added: int = 0
    results_present: int = 0
    runs_added: int = 0
    hosts_added: int = 0
    tuned_added: int = 0
    tuned_present: int = 0

    def to_dict(self) -> dict[str, int]:
        """A JSON-ready dict."""
        return dict(self.__dict__)


def import_file(db_path, file, progress=None) -> ImportSummary:
    """Validate a JSONL export completely, then add it to the database at ``db_path``.

    :param progress: optional ``progress(done, total)`` callback, called after each batch.
    """
    records = read_file(file)  # raises before the database is opened
    with Store(db_path) as store:
        return import_records(store, records, progress=progress)


def merge_into(db_path, other, progress=None) -> ImportSummary:
    """Add every run, result and tuned configuration of the database ``other`` to the one at
    ``db_path`` (idempotent)."""
    src = connect_readonly(other)  # validated before the target is opened for writing
    try:
        src.execute("BEGIN")  # one snapshot: what is validated is what is merged
        _, problems = schema_problems(src)
        if problems:
            raise BadImportRecord(f"{other}: {problems[0]}; nothing was merged (`autoselect db check --db {other}` "
                                  "lists every such row)")
        runs = RunIdentities()
        for label, rec in iter_labeled_records(src):  # the rules db import applies, every record
            where = f"{other} {label}"
            runs.add(parse_record(rec, where, hint=f"nothing was merged (`autoselect db check --db {other}`)"), where)
        total = sum(count_records(src).values())
        with Store(db_path) as store:
            return import_records(store, iter_records(src), progress=progress, total=total, runs=runs)
    finally:
        src.close()



def import_records(store: Store, records: Iterable[dict], *, progress=None, total: int | None = None,
                   runs=None) -> ImportSummary:
    """Add exported records (see :mod:`db.jsonl`); records already present are skipped.

    Records must already be validated (:func:`db.jsonl.parse_record`): result records
    and tuned-configuration records (``"tuned"`` instead of ``"result"``). Idempotent: hosts
    are matched by machine id, runs by uid, results by ``result_key``, tuned configurations
    by ``tuned_key``. ``progress(done, total)`` is called after each batch of
    :data:`IMPORT_BATCH` records.

    :param runs: the :class:`db.jsonl.RunIdentities` of the records (default: the
        records' ``runs`` attribute, as :class:`db.jsonl.ImportFile` has): a run this
        database already holds under the same uid but on another machine or host class is
        refused before anything is written.
    """
    if total is None and hasattr(records, "__len__"):
        total = len(records)
    if runs is None:
        runs = getattr(records, "runs", None)
    if runs is not None:
        _refuse_other_machines(store, runs)
    summary = ImportSummary()
    batch: list[dict] = []
    done = 0
    try:
        for rec in records:
            batch.append(rec)
            if len(batch) >= IMPORT_BATCH:
                _import_batch(store, batch, summary)
                done += len(batch)
                batch = []
                if progress:
                    progress(done, total)
        if batch:
            _import_batch(store, batch, summary)
            done += len(batch)
            if progress:
                progress(done, total)
    except DatabaseNotWritable as e:  # each batch is one transaction: the batches before it stay
        if done == 0:
            raise
        raise DatabaseNotWritable(f"{e}; the first {done} records are in the database: import again once it can be "
                                  "written (records already present are skipped)") from None
    return summary

def _refuse_other_machines(store: Store, runs) -> None:
    """Raise :class:`BadImportRecord` when a run uid of the input is stored here with another
    machine or host class (its results would be filed under the wrong machine)."""
    uids = list(runs.runs)
    for i in range(0, len(uids), 500):
        chunk = uids[i : i + 500]
        for uid, machine_id, host_class in store.conn.execute(
            f"SELECT uid, machine_id, host_class FROM runs WHERE uid IN ({', '.join('?' * len(chunk))})", chunk
        ):
            machine, cls, where = runs.runs[uid]
            if (machine, cls) != (machine_id, host_class):
                raise BadImportRecord(
                    f"{where}: run {uid} measured on machine {machine} (class {cls}), but {store.path} holds "
                    f"that run as measured on machine {machine_id} (class {host_class}); nothing was imported"
                )

def _import_batch(store: Store, batch: list[dict], summary: ImportSummary) -> None:
    with store.transaction():
        for rec in batch:
            if "tuned" in rec:
                _import_tuned(store, rec, summary)
                continue
            host, run, result = rec["host"], rec["run"], rec["result"]
            seen = host.get("last_seen") or run["updated_at"]
            if store.upsert_host(host, host.get("first_seen") or seen, seen):
                summary.hosts_added += 1
            run_id = _ensure_run(store, host["machine_id"], run, summary)
            key = result_key(host["machine_id"], run["uid"], result)
            if store.conn.execute("SELECT 1 FROM results WHERE result_key = ?", (key,)).fetchone():
                summary.results_present += 1
                continue
            store.insert_result(run_id, run["uid"], host["machine_id"], run["host_class"], result)
            summary.results_added += 1

def _import_tuned(store: Store, rec: dict, summary: ImportSummary) -> None:
    """Add one tuned configuration record (inside the batch's transaction) unless present."""
    host, run, tuned = rec.get("host"), rec.get("run"), rec["tuned"]
    if host is not None:
        seen = host.get("last_seen") or (run["updated_at"] if run else tuned["created_at"])
        if store.upsert_host(host, host.get("first_seen") or seen, seen):
            summary.hosts_added += 1
    run_id = _ensure_run(store, host["machine_id"], run, summary) if run is not None else None
    key = tuned_key(run["uid"] if run is not None else None, tuned)
    if key in _tuned_keys(store, tuned):
        summary.tuned_present += 1
        return
    store.db["tuned_configs"].insert({**tuned_to_row(tuned), "run_id": run_id})
    summary.tuned_added += 1

def _tuned_keys(store: Store, tuned: dict) -> set[str]:
    """The ``tuned_key`` of every stored row that could equal ``tuned`` (same lookup and time)."""
    cur = store.conn.execute(
        "SELECT t.*, r.uid AS run_uid FROM tuned_configs t LEFT JOIN runs r ON r.id = t.run_id"
        " WHERE t.host_class = ? AND t.hidden = ? AND t.top_k = ? AND t.experts = ? AND t.activation_dtype = ?"
        " AND t.world_size = ? AND t.backend = ? AND t.created_at = ?",
        tuple(tuned[k] for k in ("host_class", "hidden", "top_k", "experts", "activation_dtype", "world_size",
                                 "backend", "created_at")),
    )
    names = [c[0] for c in cur.description]
    rows = [dict(zip(names, r)) for r in cur.fetchall()]
    return {tuned_key(row["run_uid"], row_to_tuned_dict(row)) for row in rows}

def imported_status(status: str) -> str:
    """The status an imported run is stored with: a run its source still calls ``running`` is
    ``interrupted`` here. Its writer writes another file: nothing will add to it in this one, and
    its host name and pid say nothing about a process here (``db drop-run`` must never wait for, or
    advise killing, a process of this machine that happens to carry that pid). A later import of
    the finished run replaces the status."""
    return "interrupted" if status == "running" else status


def _ensure_run(store: Store, machine_id: str, run: dict, summary: ImportSummary) -> int:
    row = store.conn.execute("SELECT id, status, updated_at FROM runs WHERE uid = ?", (run["uid"],)).fetchone()
    if row is None:
        summary.runs_added += 1
        return store.db["runs"].insert(
            {**{k: run[k] for k in RUN_COLUMNS}, "status": imported_status(run["status"]), "machine_id": machine_id,
             "meta": dumps(run.get("meta") or {})}
        ).last_pk
    run_id, status, updated_at = row
    # a fleet copy may have seen the run finish after this one last heard of it
    if run["updated_at"] > updated_at:
        store.conn.execute(
            "UPDATE runs SET status = ?, finished_at = ?, updated_at = ? WHERE id = ?",
            (imported_status(run["status"]), run["finished_at"], run["updated_at"], run_id),
        )
    return run_id
