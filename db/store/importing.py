"""Importing exported records: hosts by machine id, runs by uid, results by ``result_key``, tuned
configurations by ``tuned_key``, so an import or a merge is idempotent."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from db.errors import BadImportRecord
from db.rows import RUN_COLUMNS, dumps, result_key, row_to_tuned_dict, tuned_key, tuned_to_row
from db.store.base import StoreBase

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


class ImportWrites(StoreBase):
    """The imports of a :class:`db.store.Store` (records validated by :mod:`db.jsonl`)."""

    def import_records(self, records: Iterable[dict], *, progress=None, total: int | None = None,
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
            self._refuse_other_machines(runs)
        summary = ImportSummary()
        batch: list[dict] = []
        done = 0
        for rec in records:
            batch.append(rec)
            if len(batch) >= IMPORT_BATCH:
                self._import_batch(batch, summary)
                done += len(batch)
                batch = []
                if progress:
                    progress(done, total)
        if batch:
            self._import_batch(batch, summary)
            done += len(batch)
            if progress:
                progress(done, total)
        return summary

    def _refuse_other_machines(self, runs) -> None:
        """Raise :class:`BadImportRecord` when a run uid of the input is stored here with another
        machine or host class (its results would be filed under the wrong machine)."""
        uids = list(runs.runs)
        for i in range(0, len(uids), 500):
            chunk = uids[i : i + 500]
            for uid, machine_id, host_class in self.conn.execute(
                f"SELECT uid, machine_id, host_class FROM runs WHERE uid IN ({', '.join('?' * len(chunk))})", chunk
            ):
                machine, cls, where = runs.runs[uid]
                if (machine, cls) != (machine_id, host_class):
                    raise BadImportRecord(
                        f"{where}: run {uid} measured on machine {machine} (class {cls}), but {self.path} holds "
                        f"that run as measured on machine {machine_id} (class {host_class}); nothing was imported"
                    )

    def _import_batch(self, batch: list[dict], summary: ImportSummary) -> None:
        with self._write():
            for rec in batch:
                if "tuned" in rec:
                    self._import_tuned(rec, summary)
                    continue
                host, run, result = rec["host"], rec["run"], rec["result"]
                seen = host.get("last_seen") or run["updated_at"]
                if self._upsert_host(host, host.get("first_seen") or seen, seen):
                    summary.hosts_added += 1
                run_id = self._ensure_run(host["machine_id"], run, summary)
                key = result_key(host["machine_id"], run["uid"], result)
                if self.conn.execute("SELECT 1 FROM results WHERE result_key = ?", (key,)).fetchone():
                    summary.results_present += 1
                    continue
                self._insert_result(run_id, run["uid"], host["machine_id"], run["host_class"], result)
                summary.results_added += 1

    def _import_tuned(self, rec: dict, summary: ImportSummary) -> None:
        """Add one tuned configuration record (inside the batch's transaction) unless present."""
        host, run, tuned = rec.get("host"), rec.get("run"), rec["tuned"]
        if host is not None:
            seen = host.get("last_seen") or (run["updated_at"] if run else tuned["created_at"])
            if self._upsert_host(host, host.get("first_seen") or seen, seen):
                summary.hosts_added += 1
        run_id = self._ensure_run(host["machine_id"], run, summary) if run is not None else None
        key = tuned_key(run["uid"] if run is not None else None, tuned)
        if key in self._tuned_keys(tuned):
            summary.tuned_present += 1
            return
        self.db["tuned_configs"].insert({**tuned_to_row(tuned), "run_id": run_id})
        summary.tuned_added += 1

    def _tuned_keys(self, tuned: dict) -> set[str]:
        """The ``tuned_key`` of every stored row that could equal ``tuned`` (same lookup and time)."""
        cur = self.conn.execute(
            "SELECT t.*, r.uid AS run_uid FROM tuned_configs t LEFT JOIN runs r ON r.id = t.run_id"
            " WHERE t.host_class = ? AND t.hidden = ? AND t.top_k = ? AND t.experts = ? AND t.dispatch_dtype = ?"
            " AND t.world_size = ? AND t.backend = ? AND t.created_at = ?",
            tuple(tuned[k] for k in ("host_class", "hidden", "top_k", "experts", "dispatch_dtype", "world_size",
                                     "backend", "created_at")),
        )
        names = [c[0] for c in cur.description]
        rows = [dict(zip(names, r)) for r in cur.fetchall()]
        return {tuned_key(row["run_uid"], row_to_tuned_dict(row)) for row in rows}

    def _ensure_run(self, machine_id: str, run: dict, summary: ImportSummary) -> int:
        row = self.conn.execute("SELECT id, status, updated_at FROM runs WHERE uid = ?", (run["uid"],)).fetchone()
        if row is None:
            summary.runs_added += 1
            return self.db["runs"].insert(
                {**{k: run[k] for k in RUN_COLUMNS}, "machine_id": machine_id, "meta": dumps(run.get("meta") or {})}
            ).last_pk
        run_id, status, updated_at = row
        # a fleet copy may have seen the run finish after this one last heard of it
        if run["updated_at"] > updated_at:
            self.conn.execute(
                "UPDATE runs SET status = ?, finished_at = ?, updated_at = ? WHERE id = ?",
                (run["status"], run["finished_at"], run["updated_at"], run_id),
            )
        return run_id
