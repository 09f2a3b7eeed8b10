"""The ``tuned_configs`` table (migration 0002): what ``autoselect tune`` found, and its gain.

The write side takes an open :class:`db.store.Store` (sqlite-utils, one transaction per row);
the read side (:func:`best_tuned`) uses stdlib ``sqlite3`` only, because ``recommend`` calls it.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Any

from autoselect.dataclass_methods import DataclassMethods
from db.fields import check_host_class, tuned_problem
from db.queries import warn_skipped
from db.records import TUNED_STATUSES
from db.rows import now_iso, row_to_tuned_dict, tuned_to_row


@dataclass(repr=False, eq=False)  # DataclassMethods: the same methods, not compiled per class
class TunedConfig(DataclassMethods):
    """One finished tune's best configuration for one backend."""

    host_class: str
    machine_id: str
    hidden: int
    top_k: int
    experts: int
    activation_dtype: str
    world_size: int
    device: str
    backend: str
    status: str
    stop: str
    study: str
    workload: dict[str, Any] = field(default_factory=dict)
    knobs: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    gain: float | None = None  # fraction: (untuned - tuned) / untuned, workload-weighted
    gain_halfwidth: float | None = None
    tuned_latency_us: float | None = None
    untuned_latency_us: float | None = None
    versions: dict[str, str] = field(default_factory=dict)
    run_id: int | None = None
    created_at: str | None = None
    id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return dict(self.__dict__)


def save_tuned(store: Any, config: TunedConfig) -> int:
    """Insert one tuned configuration in its own transaction; returns its id."""
    if config.status not in TUNED_STATUSES:
        raise ValueError(f"tuned status {config.status!r} is not one of {TUNED_STATUSES}")
    check_host_class(config.host_class, "tuned")  # the reference namespace is read-only
    row = config.to_dict()
    row["created_at"] = row["created_at"] or now_iso()
    with store.transaction():
        return store.db["tuned_configs"].insert({**tuned_to_row(row), "run_id": config.run_id}).last_pk


def best_tuned(conn: sqlite3.Connection, *, host_class: str, hidden: int, top_k: int, experts: int,
               activation_dtype: str, world_size: int, backend: str) -> TunedConfig | None:
    """The newest ``gain`` configuration for this host class, shape, world size and backend.

    None when there is none (readers open only the latest schema, so the table exists). Rows
    that break the schema are skipped (a :class:`db.fields.SkippedRows` warning says so).
    """
    cur = conn.execute(
        "SELECT * FROM tuned_configs WHERE host_class = ? AND hidden = ? AND top_k = ?"
        " AND experts = ? AND activation_dtype = ? AND world_size = ? AND backend = ?"
        " AND status = 'gain' ORDER BY created_at DESC, id DESC",
        (host_class, hidden, top_k, experts, activation_dtype, world_size, backend),
    )
    names = [c[0] for c in cur.description]
    skipped = []
    for row in cur:  # the newest row that keeps the schema (db.fields); older writers let others in
        d = dict(zip(names, row))
        tuned = row_to_tuned_dict(d)
        said = tuned_problem(tuned)
        if said is None:
            warn_skipped("tuned configurations", skipped)
            return TunedConfig(**tuned, run_id=d["run_id"], id=d["id"])
        skipped.append(f"tuned configuration {d['id']}: {said}")
    warn_skipped("tuned configurations", skipped)
    return None
