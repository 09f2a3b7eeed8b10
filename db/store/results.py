"""Adding one measured result (and its raw samples) to a running run."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from db.fields import result_problem
from db.records import KINDS, STATUSES, Result
from db.rows import now_iso, result_key
from db.store.base import StoreBase


class ResultWrites(StoreBase):
    """The live result writes of a :class:`db.store.Store`."""

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
        with self._write():
            uid, machine_id, host_class, status = self._run(run_id)
            if status != "running":
                raise ValueError(f"run {run_id} is {status}; results can only be added to a running run")
            # the same point measured twice in one run with the same timestamp (a caller's
            # coarse clock) is still two measurements: move the second one a microsecond on
            while self.conn.execute(
                "SELECT 1 FROM results WHERE result_key = ?", (result_key(machine_id, uid, d),)
            ).fetchone():
                d["created_at"] = _next_microsecond(d["created_at"])
            rid = self._insert_result(run_id, uid, machine_id, host_class, d)
            self.conn.execute("UPDATE runs SET updated_at = ? WHERE id = ?", (now_iso(), run_id))
        return rid


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
