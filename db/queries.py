"""The results store's read side: read-only queries with the standard library's ``sqlite3`` only.

The fast commands (``recommend``, ``explain``, ``db info``, ...) read through this module; it
never writes and never imports sqlite-utils, numpy or torch. In order: opening the file
(:func:`connect_readonly`: ``mode=ro``; a missing, foreign, too-new or not yet upgraded file is
refused), saying which rows a reader skipped (:func:`warn_skipped`: every reader skips rows that
break the schema of :mod:`db.fields`, and says so), result rows (:class:`StoredResult`,
:func:`results_for`, :func:`all_results`, :func:`samples_for`: the lookup's cost is building
Python objects, so :func:`results_for` fetches only the columns the filter does not pin, the run
/ host columns once per run, and with ``summarize`` lets SQL keep one row per group of repeated
measurements), hosts (:func:`host_classes`, :func:`newest_host`, :func:`host`) and runs
(:func:`runs`, :func:`stale_reason`, :func:`stale_runs`). Runs that a dead writer left
``running`` are *reported* as stale here; only :class:`db.store.Store` marks them
``interrupted``. What ``db info`` and ``db check`` show is :mod:`db.info`.
"""

from __future__ import annotations

import os
import sqlite3
import time
import warnings
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from autoselect.hardware import HostFingerprint, measured_class_problem
from db import default_path
from db.errors import DatabaseNeedsUpgrade, DatabaseNotFound
from db.fields import RESULT_RULES, SkippedRows, fast_check, host_problem, result_problem, run_problem
from db.records import SYNTHETIC, Result
from db.rows import RESULT_COLUMNS, loads, row_to_host_dict, stored_bool
from db.schema import BUSY_TIMEOUT_MS, check_connection, check_path, latest_version


# --------------------------------------------------------------------------------------
# Opening the file
# --------------------------------------------------------------------------------------


def connect_readonly(path: str | os.PathLike | None = None) -> sqlite3.Connection:
    """Open the results database for reading; refuse a missing, foreign or too-new file.

    Raises :class:`DatabaseNotFound`, ``NotADatabase``, ``ForeignDatabase``, ``DatabaseTooNew``
    or :class:`DatabaseNeedsUpgrade` (all :class:`autoselect.errors.UserError`). Nothing is
    created: the connection is opened with ``mode=ro``.
    """
    path = Path(path) if path is not None else default_path()
    if not check_path(path, write=False):
        raise DatabaseNotFound(
            f"no results database at {path}; run `autoselect bench` to measure, or pass --db PATH"
        )
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        version = check_connection(conn, path)
        if version == 0:
            raise DatabaseNotFound(f"{path} is an empty database; run `autoselect bench` to measure, or pass --db PATH")
        if version < latest_version():
            raise DatabaseNeedsUpgrade(
                f"{path} has schema {version}, this autoselect reads {latest_version()}; "
                "run `autoselect db upgrade` once (it keeps every row)"
            )
    except BaseException:
        conn.close()
        raise
    conn.row_factory = sqlite3.Row
    return conn


# --------------------------------------------------------------------------------------
# Rows a reader skips
# --------------------------------------------------------------------------------------


def warn_skipped(what: str, skipped: list[str]) -> None:
    """Say (a :class:`db.fields.SkippedRows` warning) that a reader skipped rows breaking the schema."""
    if not skipped:
        return
    first = "; ".join(skipped[:2]) + (f"; and {len(skipped) - 2} more" if len(skipped) > 2 else "")
    warnings.warn(SkippedRows(
        f"skipped {len(skipped)} stored {what} that break the schema ({first}); `autoselect db check` lists "
        "them, `autoselect db drop-run RUN --yes` removes a run"), stacklevel=3)


# --------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------


@dataclass(repr=False, eq=False)  # Result's DataclassMethods: the same methods, not compiled per class
class StoredResult(Result):
    """A Result as stored: with its row id, run, and the host that measured it."""

    id: int = 0
    run_id: int = 0
    host_class: str = ""
    machine_id: str = ""
    hostname: str = ""
    gpu_name: str | None = None
    gpu_arch: str | None = None
    run_started_at: str = ""
    synthetic: str | None = None  # its run is synthetic example data (run meta ``synthetic``): what made it


class _Decoder:
    """Builds StoredResults from result rows without dataclass ``__init__`` overhead.

    knobs / versions JSON repeats across the rows of one query (a run shares its versions):
    each distinct text is parsed once and every result gets its own shallow copy. A row that
    breaks the schema (:mod:`db.fields`; an older autoselect imported such rows) becomes None
    and its problem is kept in ``skipped``.
    """

    def __init__(self, names: tuple[str, ...], fixed: dict[str, Any], runs: dict[int, dict]):
        self.names, self.runs = names, runs
        self.base = {**fixed, "raw_samples_us": None}
        self.parsed: dict[str, Any] = {"{}": {}}
        self.run_index = names.index("run_id")
        self.skipped: list[str] = []
        # the columns the query pinned hold the (valid) values it asked for; knobs and versions
        # texts repeat, so their rules are judged once per distinct text (json_ok)
        self.ok = fast_check(RESULT_RULES, skip=(*fixed, "raw_samples_us", "knobs", "versions"))
        self.json_ok: dict[tuple[str, Any], bool] = {}

    def json(self, text: Any) -> Any:
        if not isinstance(text, str):
            return loads(text, {})
        d = self.parsed.get(text)
        if d is None:
            d = self.parsed[text] = loads(text, {})
        return d.copy() if isinstance(d, dict) else d

    def __call__(self, row: tuple) -> StoredResult | None:
        d = self.base.copy()
        d.update(zip(self.names, row))
        run = self.runs.get(row[self.run_index])
        if run is None:  # its run or the run's host is missing (foreign keys were off)
            self.skipped.append(f"result {d['id']}: its run {d['run_id']} or that run's host is missing")
            return None
        if measured_class_problem(run["host_class"]):  # an older autoselect imported it: never evidence
            self.skipped.append(f"result {d['id']} (run {d['run_id']}): host class {run['host_class']!r} is in the "
                                "reserved ref- namespace of the published reference, or reads as it")
            return None
        d.update(run)
        d["illegal"] = stored_bool(d["illegal"])
        d["noise_target_met"] = stored_bool(d["noise_target_met"])
        d["raw_samples_us"] = []
        valid = True
        for name in ("knobs", "versions"):
            text = d[name]
            d[name] = self.json(text)
            known = self.json_ok.get((name, text))
            if known is None:
                known = self.json_ok[(name, text)] = RESULT_RULES[name].check(d[name]) is None
            valid = valid and known
        if not valid or not self.ok(d):
            said = result_problem(d, with_samples=False) or "breaks the schema"
            self.skipped.append(f"result {d['id']} (run {d['run_id']}): {said}")
            return None
        obj = StoredResult.__new__(StoredResult)
        obj.__dict__ = d
        return obj


#: Columns that tell two results of one shape apart as evidence (``summarize``): the same
#: point (backend, world size, tokens per rank), status, knobs and legality, whether a median
#: was recorded, and the footing (numbers on two footings are never pooled). The version keys
#: given to ``summarize`` are added to these.
_SUMMARY_PARTITION = ("hidden", "top_k", "experts", "activation_dtype", "kind", "backend", "world_size",
                      "tokens_per_rank", "status", "illegal", "knobs", "latency_us_p50 IS NULL",
                      "timing", "calls", "dp_sizes", "via")
#: Extra attributes of a summarized row (see :func:`results_for`).
SUMMARY_ATTRS = ("group_count", "group_p50_min", "group_p50_max")


def _select_results(conn: sqlite3.Connection, equal: dict[str, Any], statuses,
                    summarize: tuple[str, ...] | None = None) -> list[StoredResult]:
    """Results whose columns equal ``equal`` (None values ignored) and status is in ``statuses``.

    The lookup's cost is building Python objects (the index finds the rows in well under a
    millisecond), so columns pinned by the filter are not fetched (their value is known), and
    the run / host columns (machine, host class, hostname, GPU, run start), shared by all
    rows of a run, are fetched once per run in a second small query. With ``summarize``
    (version keys), SQL keeps one row per group (see :func:`results_for`), so history that
    only repeats a point costs one GROUP BY pass over the index's rows, not Python objects.
    """
    fixed = {k: v for k, v in equal.items() if v is not None}
    names = tuple(c for c in RESULT_COLUMNS if c not in fixed) + ("id", "run_id")
    where = [f"{k} = ?" for k in fixed]
    args = list(fixed.values())
    if statuses:
        where.append(f"status IN ({', '.join('?' * len(statuses))})")
        args.extend(statuses)
    if summarize is None:
        sql = f"SELECT {', '.join(names)} FROM results"
        if where:
            sql += " WHERE " + " AND ".join(where)
    else:
        for key in summarize:
            if not key.isidentifier():
                raise ValueError(f"summarize: version key {key!r} is not an identifier")
        partition = [f"r.{c}" for c in _SUMMARY_PARTITION if c not in fixed]
        partition += [f"json_extract(r.versions, '$.{key}')" for key in summarize]
        # The newest row of a group in the selector's order: created_at (its run's start when
        # empty), then id. One GROUP BY pass keeps MAX(when || \x01 || 20-digit id) -- the
        # same order as the (when, id) tuple, since \x01 sorts before any timestamp
        # character -- and the id is read back from its last 20 characters.
        when = ("CASE WHEN r.created_at <> '' THEN r.created_at"
                " ELSE COALESCE((SELECT u.started_at FROM runs u WHERE u.id = r.run_id), '') END")
        groups = (
            f"SELECT MAX({when} || char(1) || printf('%020d', r.id)) AS newest, COUNT(*) AS group_count,"
            " MIN(r.latency_us_p50) AS group_p50_min, MAX(r.latency_us_p50) AS group_p50_max FROM results r"
            + (" WHERE " + " AND ".join("r." + w for w in where) if where else "")
            + f" GROUP BY {', '.join(partition)}"
        )
        sql = (
            f"SELECT {', '.join('r.' + n for n in names)}, {', '.join('g.' + a for a in SUMMARY_ATTRS)}"
            f" FROM ({groups}) g JOIN results r ON r.id = CAST(substr(g.newest, -20) AS INTEGER)"
        )
        names = names + SUMMARY_ATTRS
    cur = conn.cursor()
    cur.row_factory = None
    rows = cur.execute(sql + (" ORDER BY id" if summarize is None else " ORDER BY r.id"), args).fetchall()
    run_index = names.index("run_id")
    run_ids = sorted({row[run_index] for row in rows})
    runs: dict[int, dict] = {}
    for i in range(0, len(run_ids), 500):
        chunk = run_ids[i : i + 500]
        for rid, machine_id, host_class, started, hostname, gpu_name, gpu_arch, synthetic in cur.execute(
            "SELECT u.id, u.machine_id, u.host_class, u.started_at, h.hostname, h.gpu_name, h.gpu_arch,"
            f" CASE WHEN json_valid(u.meta) THEN json_extract(u.meta, '$.{SYNTHETIC}') END FROM runs u"
            f" JOIN hosts h ON h.machine_id = u.machine_id WHERE u.id IN ({', '.join('?' * len(chunk))})",
            chunk,
        ):
            runs[rid] = {"machine_id": machine_id, "host_class": host_class, "run_started_at": started,
                         "hostname": hostname, "gpu_name": gpu_name, "gpu_arch": gpu_arch,
                         "synthetic": None if synthetic is None else str(synthetic)}
    decode = _Decoder(names, fixed, runs)
    out = [r for r in map(decode, rows) if r is not None]
    warn_skipped("result rows", decode.skipped)
    return out


def results_for(
    conn: sqlite3.Connection,
    *,
    hidden: int,
    top_k: int,
    experts: int,
    activation_dtype: str,
    world_size: int | None = None,
    host_class: str | None = None,
    machine_id: str | None = None,
    kind: str = "micro",
    statuses: tuple[str, ...] | list[str] | None = None,
    backend: str | None = None,
    summarize: tuple[str, ...] | list[str] | None = None,
) -> list[StoredResult]:
    """Every stored result for one MoE shape, oldest first (raw samples not loaded).

    :param host_class: only results measured on this class of machine.
    :param machine_id: only results measured on this machine.
    :param statuses: only these result statuses (default: all).
    :param summarize: version keys of the ``versions`` JSON (the selector passes
        ``("vllm", "flashinfer", "driver")``). When given, the rows are grouped by backend,
        world size, tokens per rank, status, illegal, knobs, whether ``latency_us_p50`` is
        NULL, the footing (timing, calls, DP sizes, path) and the values of those version keys
        (machines and runs pooled), and only the
        newest row of each group is returned -- newest by ``created_at`` (its run's start when
        empty), then id, the selector's order -- carrying three extra attributes over its whole
        group: ``group_count`` (rows), ``group_p50_min`` and ``group_p50_max`` (their
        ``latency_us_p50`` range, None when no median). Nothing the selector reads is lost:
        the newest row per point and freshness, the run-to-run range of medians, every status
        with its count and newest error. The returned rows' group counts add up to the number
        of rows the plain query returns. Rows without these attributes count as a group of one.
    """
    equal = dict(hidden=hidden, top_k=top_k, experts=experts, activation_dtype=activation_dtype, kind=kind,
                 host_class=host_class, machine_id=machine_id, world_size=world_size, backend=backend)
    return _select_results(conn, equal, statuses, tuple(summarize) if summarize is not None else None)


def all_results(
    conn: sqlite3.Connection,
    *,
    kind: str | None = "micro",
    statuses: tuple[str, ...] | list[str] | None = None,
    host_class: str | None = None,
    machine_id: str | None = None,
) -> list[StoredResult]:
    """Every stored result of every shape, oldest first (raw samples not loaded): fleet drift's input.

    :param kind: only this measurement kind (None: all).
    :param statuses: only these result statuses (default: all).
    :param host_class: only results measured on this class of machine.
    :param machine_id: only results measured on this machine.
    """
    return _select_results(conn, {"kind": kind, "host_class": host_class, "machine_id": machine_id}, statuses)


def samples_for(conn: sqlite3.Connection, result_id: int) -> list[float]:
    """The raw round-trip latencies (µs) of one result, in measurement order."""
    cur = conn.cursor()
    cur.row_factory = None
    return [r[0] for r in cur.execute("SELECT latency_us FROM samples WHERE result_id = ? ORDER BY idx", (result_id,))]


# --------------------------------------------------------------------------------------
# Hosts
# --------------------------------------------------------------------------------------


def host_classes(conn: sqlite3.Connection) -> list[dict]:
    """One dict per host class: host_class, gpu_name, gpu_count, gpu_arch, machines, newest (last seen).

    A class of the reserved ``ref-`` namespace (stored by an older autoselect) is not listed,
    and said so: no measured machine belongs to it."""
    rows = conn.execute(
        "SELECT host_class, gpu_name, gpu_count, gpu_arch, COUNT(*) AS machines, MAX(last_seen) AS newest"
        " FROM hosts GROUP BY host_class ORDER BY host_class"
    )
    out = [dict(r) for r in rows]
    warn_skipped("hosts", [f"host class {d['host_class']!r}: in the reserved ref- namespace of the published "
                           "reference, or reads as it" for d in out if measured_class_problem(d["host_class"])])
    return [d for d in out if not measured_class_problem(d["host_class"])]


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


# --------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------


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
    if not hostname:
        import socket  # ~2 ms: only when a running run is judged, which recommend never does

        hostname = socket.gethostname()
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
