"""Host fingerprints as stored: the host classes, the newest machine of a class, one machine."""

from __future__ import annotations

import sqlite3

from autoselect.hardware import HostFingerprint
from db.fields import host_problem
from db.queries.skipped import warn_skipped
from db.rows import row_to_host_dict


def host_classes(conn: sqlite3.Connection) -> list[dict]:
    """One dict per host class: host_class, gpu_name, gpu_count, gpu_arch, machines, newest (last seen)."""
    rows = conn.execute(
        "SELECT host_class, gpu_name, gpu_count, gpu_arch, COUNT(*) AS machines, MAX(last_seen) AS newest"
        " FROM hosts GROUP BY host_class ORDER BY host_class"
    )
    return [dict(r) for r in rows]


def newest_host(conn: sqlite3.Connection, host_class: str):
    """The most recently seen machine of a host class, as a HostFingerprint (None if unknown)."""
    rows = conn.execute("SELECT * FROM hosts WHERE host_class = ? ORDER BY last_seen DESC", (host_class,))
    return _first_host(rows)


def _first_host(rows):
    """The first host row that keeps the schema, as a HostFingerprint (the others are skipped, and said so)."""
    skipped = []
    for row in rows:
        d = row_to_host_dict(dict(row))
        said = host_problem({**d, "first_seen": row["first_seen"], "last_seen": row["last_seen"]})
        if said is None:
            warn_skipped("hosts", skipped)
            return HostFingerprint.from_dict(d)
        skipped.append(f"host {row['machine_id']}: {said}")
    warn_skipped("hosts", skipped)
    return None


def host(conn: sqlite3.Connection, machine_id: str):
    """The stored fingerprint of one machine (None if unknown)."""
    return _first_host(conn.execute("SELECT * FROM hosts WHERE machine_id = ?", (machine_id,)))
