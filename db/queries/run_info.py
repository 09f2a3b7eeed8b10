"""The runs table as readers see it: every run, and which ``running`` runs a dead writer left.

Stale runs are *reported* here; only :class:`db.store.Store` marks them ``interrupted``."""

from __future__ import annotations

import os
import socket
import sqlite3
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from db.fields import run_problem
from db.queries.skipped import warn_skipped
from db.rows import loads

#: a run whose writer has not written for this long is considered dead, whatever its host
STALE_AFTER_S = 6 * 3600


def runs(conn: sqlite3.Connection, *, machine_id: str | None = None) -> list[dict]:
    """Every run, oldest first: id, uid, machine_id, host_class, hostname (of the measured machine),
    started_at, updated_at, finished_at, status, trigger, command, writer_hostname, pid,
    autoselect_version, meta (parsed) and its result count."""
    sql = (
        "SELECT u.id, u.uid, u.machine_id, u.host_class, h.hostname, u.started_at, u.updated_at, u.finished_at,"
        " u.status, u.\"trigger\" AS \"trigger\", u.command, u.hostname AS writer_hostname, u.pid,"
        " u.autoselect_version, u.meta,"
        " (SELECT COUNT(*) FROM results r WHERE r.run_id = u.id) AS results"
        " FROM runs u JOIN hosts h ON h.machine_id = u.machine_id"
    )
    args: list[Any] = []
    if machine_id is not None:
        sql += " WHERE u.machine_id = ?"
        args.append(machine_id)
    cur = conn.cursor()
    cur.row_factory = sqlite3.Row
    out, skipped = [], []
    for row in cur.execute(sql + " ORDER BY u.started_at, u.id", args):
        d = dict(row)
        d["meta"] = loads(d["meta"], {})
        said = run_problem({**d, "hostname": d["writer_hostname"]})
        if said:
            skipped.append(f"run {d['id']}: {said}")
            continue
        out.append(d)
    warn_skipped("runs", skipped)
    return out


def _parse_time(s: str) -> float:
    return datetime.fromisoformat(s).timestamp()


def _boot_time() -> float | None:
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except OSError:
        pass
    return None


def _process_state(pid: int) -> tuple[bool, float | None]:
    """(alive, start time as epoch seconds or None) of a local process; zombies count as dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False, None
    except PermissionError:
        pass  # exists, owned by someone else
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True, None
    after = stat.rsplit(")", 1)[1].split()
    if after[0] in ("Z", "X"):
        return False, None
    boot = _boot_time()
    if boot is None:
        return True, None
    return True, boot + int(after[19]) / os.sysconf("SC_CLK_TCK")


def stale_reason(run: dict, *, hostname: str | None = None, now: float | None = None) -> str | None:
    """Why a ``running`` run's writer is gone (None while it may still be writing).

    A run written on this host is stale when its writer pid is gone, or when that pid now
    belongs to a process started after the run began (the pid was reused). A run from any
    host is stale after :data:`STALE_AFTER_S` without a write.
    """
    hostname = hostname or socket.gethostname()
    now = time.time() if now is None else now
    if run["hostname"] == hostname:
        alive, started = _process_state(int(run["pid"]))
        if not alive:
            return f"writer process {run['pid']} on {hostname} is gone"
        if started is not None and started > _parse_time(run["started_at"]) + 2:
            return f"writer pid {run['pid']} was reused by a newer process"
    idle = now - _parse_time(run["updated_at"])
    if idle > STALE_AFTER_S:
        return f"no write for {idle / 3600:.1f} h (limit {STALE_AFTER_S / 3600:.0f} h)"
    return None


def stale_runs(conn: sqlite3.Connection, *, hostname: str | None = None, now: float | None = None) -> list[dict]:
    """Runs still marked ``running`` whose writer is gone, each with a ``reason``."""
    cur = conn.execute(
        "SELECT id, uid, hostname, pid, started_at, updated_at FROM runs WHERE status = 'running' ORDER BY id"
    )
    cols = [c[0] for c in cur.description]
    out = []
    for row in cur.fetchall():
        run = dict(zip(cols, row))
        if run_problem(run, fields=("hostname", "pid", "started_at", "updated_at")):
            continue  # a row no reader can judge: `db check` reports it
        reason = stale_reason(run, hostname=hostname, now=now)
        if reason:
            run["reason"] = reason
            out.append(run)
    return out
