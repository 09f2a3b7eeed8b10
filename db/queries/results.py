"""Result rows: every stored result of one shape (or of all), decoded once per distinct text, and raw samples.

The lookup's cost is building Python objects, so :func:`results_for` fetches only the columns
the filter does not pin, the run / host columns once per run, and with ``summarize`` lets SQL
keep one row per group of repeated measurements."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from db.fields import RESULT_RULES, fast_check, result_problem
from db.queries.skipped import warn_skipped
from db.records import Result
from db.rows import RESULT_COLUMNS, loads, stored_bool


@dataclass
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
#: was recorded. The version keys given to ``summarize`` are added to these.
_SUMMARY_PARTITION = ("hidden", "top_k", "experts", "dispatch_dtype", "kind", "backend", "world_size",
                      "tokens_per_rank", "status", "illegal", "knobs", "latency_us_p50 IS NULL")
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
        for rid, machine_id, host_class, started, hostname, gpu_name, gpu_arch in cur.execute(
            "SELECT u.id, u.machine_id, u.host_class, u.started_at, h.hostname, h.gpu_name, h.gpu_arch FROM runs u"
            f" JOIN hosts h ON h.machine_id = u.machine_id WHERE u.id IN ({', '.join('?' * len(chunk))})",
            chunk,
        ):
            runs[rid] = {"machine_id": machine_id, "host_class": host_class, "run_started_at": started,
                         "hostname": hostname, "gpu_name": gpu_name, "gpu_arch": gpu_arch}
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
    dispatch_dtype: str,
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
        NULL and the values of those version keys (machines and runs pooled), and only the
        newest row of each group is returned -- newest by ``created_at`` (its run's start when
        empty), then id, the selector's order -- carrying three extra attributes over its whole
        group: ``group_count`` (rows), ``group_p50_min`` and ``group_p50_max`` (their
        ``latency_us_p50`` range, None when no median). Nothing the selector reads is lost:
        the newest row per point and freshness, the run-to-run range of medians, every status
        with its count and newest error. The returned rows' group counts add up to the number
        of rows the plain query returns. Rows without these attributes count as a group of one.
    """
    equal = dict(hidden=hidden, top_k=top_k, experts=experts, dispatch_dtype=dispatch_dtype, kind=kind,
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
