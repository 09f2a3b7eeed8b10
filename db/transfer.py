"""Export, import and merge: the JSON Lines record format (read side uses stdlib only).

One line per result, then one line per tuned configuration (``tuned_configs``)::

    {"format": "autoselect.result", "schema_version": 2, "result_key": "<sha256>",
     "host": {<HostFingerprint.to_dict()>, "first_seen": ..., "last_seen": ...},
     "run": {"uid", "host_class", "started_at", "updated_at", "finished_at", "status",
             "trigger", "command", "hostname", "pid", "autoselect_version", "meta"},
     "result": {<Result.to_dict()>, including "raw_samples_us"}}
    {"format": "autoselect.tuned", "schema_version": 2, "tuned_key": "<sha256>",
     "host": {...} or null, "run": {...} or null,
     "tuned": {<every tuned_configs column but id and run_id, JSON columns decoded>}}

``schema_version`` is the record format's version, independent of the database schema:
1 holds result records only; 2 (written now) adds ``autoselect.tuned``. Files of version 1
still import; a reader refuses records of a newer version than it knows. A tuned record's
``run`` (the tune's run, by uid) and ``host`` (that run's machine, else the row's machine if
the database knows it) travel with it, so it imports into a database without them. Import is
idempotent: runs are matched by ``run.uid``, hosts by ``machine_id``, results by
``result_key`` (a hash of machine, run and identifying fields), tuned configurations by
``tuned_key`` (a hash of the run uid and every stored field: a tuned row is never updated).
"""

from __future__ import annotations

import csv
import json
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import MISSING, fields
from typing import IO, Any

from db.errors import BadImportRecord, ImportFormatTooNew
from db.records import KINDS, RUN_STATUSES, STATUSES, Result
from db.rows import (
    HOST_COLUMNS,
    RESULT_COLUMNS,
    TUNED_FIELDS,
    VERSION_COLUMNS,
    result_key,
    row_to_host_dict,
    row_to_result_dict,
    row_to_run_dict,
    row_to_tuned_dict,
    tuned_key,
)

FORMAT = "autoselect.result"
TUNED_FORMAT = "autoselect.tuned"
#: the record format this autoselect writes (and the newest it reads)
RECORD_VERSION = 2
#: record format version -> the record kinds a file of that version may hold
FORMATS_BY_VERSION = {1: (FORMAT,), 2: (FORMAT, TUNED_FORMAT)}


class _Lookup:
    """Host and run records of one exporting connection, each read once."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn
        self.hosts: dict[str, dict | None] = {}
        self.runs: dict[int, tuple[dict, str] | None] = {}

    def host(self, machine_id: str) -> dict | None:
        """The host record (with first/last seen) of a machine, None if the database lacks it."""
        if machine_id not in self.hosts:
            h = self.conn.execute("SELECT * FROM hosts WHERE machine_id = ?", (machine_id,)).fetchone()
            host = None
            if h is not None:
                host = row_to_host_dict(dict(h))
                host.update(first_seen=h["first_seen"], last_seen=h["last_seen"])
            self.hosts[machine_id] = host
        return self.hosts[machine_id]

    def run(self, run_id: int) -> tuple[dict, str] | None:
        """(run record, its machine id), None if the database lacks it."""
        if run_id not in self.runs:
            u = self.conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
            self.runs[run_id] = None if u is None else (row_to_run_dict(dict(u)), u["machine_id"])
        return self.runs[run_id]


def iter_records(conn: sqlite3.Connection) -> Iterator[dict]:
    """Every result, then every tuned configuration, as export records, in insertion order."""
    conn.row_factory = sqlite3.Row
    lookup = _Lookup(conn)
    samples_cur = conn.cursor()
    samples_cur.row_factory = None
    for row in conn.execute("SELECT * FROM results ORDER BY id"):
        mid = row["machine_id"]
        host = lookup.host(mid)
        run, _ = lookup.run(row["run_id"])
        result = row_to_result_dict(dict(row))
        result["raw_samples_us"] = [
            r[0]
            for r in samples_cur.execute(
                "SELECT latency_us FROM samples WHERE result_id = ? ORDER BY idx", (row["id"],)
            )
        ]
        yield {
            "format": FORMAT,
            "schema_version": RECORD_VERSION,
            "result_key": row["result_key"],
            "host": host,
            "run": run,
            "result": result,
        }
    yield from iter_tuned_records(conn, lookup)


def iter_tuned_records(conn: sqlite3.Connection, lookup: _Lookup | None = None) -> Iterator[dict]:
    """Every ``tuned_configs`` row as an export record, in insertion order (none before schema 2)."""
    conn.row_factory = sqlite3.Row
    lookup = lookup or _Lookup(conn)
    try:
        rows = conn.execute("SELECT * FROM tuned_configs ORDER BY id")
    except sqlite3.OperationalError as e:
        if "no such table" in str(e):
            return
        raise
    for row in rows:
        tuned = row_to_tuned_dict(dict(row))
        found = lookup.run(row["run_id"]) if row["run_id"] is not None else None
        run, machine_id = found if found is not None else (None, tuned["machine_id"])
        yield {
            "format": TUNED_FORMAT,
            "schema_version": RECORD_VERSION,
            "tuned_key": tuned_key(run["uid"] if run else None, tuned),
            "host": lookup.host(machine_id),
            "run": run,
            "tuned": tuned,
        }


def count_records(conn: sqlite3.Connection) -> dict[str, int]:
    """How many records an export of ``conn`` holds: ``{"results": n, "tuned_configs": m}``."""
    out = {"results": conn.execute("SELECT COUNT(*) FROM results").fetchone()[0], "tuned_configs": 0}
    try:
        out["tuned_configs"] = conn.execute("SELECT COUNT(*) FROM tuned_configs").fetchone()[0]
    except sqlite3.OperationalError as e:
        if "no such table" not in str(e):
            raise
    return out


def write_jsonl(conn: sqlite3.Connection, out: IO[str]) -> dict[str, int]:
    """Write every result and tuned configuration as one JSON line each; returns the counts
    (``{"results": n, "tuned_configs": m}``)."""
    counts = {"results": 0, "tuned_configs": 0}
    for rec in iter_records(conn):
        out.write(json.dumps(rec, sort_keys=True, separators=(",", ":")) + "\n")
        counts["results" if rec["format"] == FORMAT else "tuned_configs"] += 1
    return counts


#: CSV columns: the host and run identity, then every Result field (raw samples omitted;
#: knobs and versions as JSON text)
CSV_COLUMNS = ("result_key", "machine_id", "hostname", "host_class", "gpu_name", "run_uid") + RESULT_COLUMNS


def write_csv(conn: sqlite3.Connection, out: IO[str]) -> dict[str, int]:
    """Write every result as one CSV row (flat; use JSONL to re-import; tuned configurations are
    not carried); returns the counts (``{"results": n, "tuned_configs": 0}``)."""
    w = csv.writer(out, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    cols = ", ".join(f"r.{c}" for c in RESULT_COLUMNS)
    cur = conn.cursor()
    cur.row_factory = None
    n = 0
    for row in cur.execute(
        f"SELECT r.result_key, r.machine_id, h.hostname, r.host_class, h.gpu_name, u.uid, {cols}"
        " FROM results r JOIN hosts h ON h.machine_id = r.machine_id JOIN runs u ON u.id = r.run_id ORDER BY r.id"
    ):
        w.writerow(["" if v is None else v for v in row])
        n += 1
    return {"results": n, "tuned_configs": 0}


_RESULT_FIELDS = {f.name for f in fields(Result)}
#: field -> a function returning its default (fresh lists / dicts for default_factory fields)
_RESULT_DEFAULTS = {
    f.name: (f.default_factory if f.default_factory is not MISSING else (lambda v=f.default: v))
    for f in fields(Result)
    if f.default is not MISSING or f.default_factory is not MISSING
}
_INT_FIELDS = ("world_size", "tokens_per_rank", "hidden", "top_k", "experts", "samples")
_STR_FIELDS = ("backend", "dispatch_dtype", "combine_dtype", "routing", "device", "created_at")
_FLOAT_FIELDS = tuple(
    f for f in RESULT_COLUMNS if f.startswith(("latency_", "noise_stdrel", "dispatch_us", "combine_us")) or f.endswith("_gbps")
)
_HOST_REQUIRED = {"machine_id": str, "hostname": str, "host_class": str, "device": str, "gpu_count": int}
_RUN_REQUIRED = {
    "uid": str, "host_class": str, "started_at": str, "updated_at": str, "status": str,
    "trigger": str, "hostname": str, "pid": int, "autoselect_version": str,
}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def parse_record(obj: Any, where: str) -> dict:
    """Validate one decoded JSON record: ``{"host", "run", "result"}`` for a result record (the
    result completed by Result defaults), ``{"host", "run", "tuned"}`` for a tuned one.

    :param where: ``"FILE line N"``, for the error message.
    """
    def bad(msg: str) -> BadImportRecord:
        return BadImportRecord(f"{where}: {msg}; import files must be written by `autoselect db export`")

    if not isinstance(obj, dict):
        raise bad("not a JSON object")
    kind, version = obj.get("format"), obj.get("schema_version")
    ours = isinstance(kind, str) and kind.startswith("autoselect.")
    if ours and _is_int(version) and version > RECORD_VERSION:
        raise ImportFormatTooNew(
            f"{where}: record format {version} is newer than this autoselect reads ({RECORD_VERSION}); upgrade autoselect"
        )
    if kind not in (FORMAT, TUNED_FORMAT):
        raise bad(f"format is {kind!r}, expected {FORMAT!r} or {TUNED_FORMAT!r}")
    if not _is_int(version):
        raise bad("schema_version missing or not an integer")
    if version not in FORMATS_BY_VERSION:
        raise bad(f"schema_version {version} is not a record format (1 to {RECORD_VERSION})")
    if kind not in FORMATS_BY_VERSION[version]:
        raise bad(f"{kind} records exist from record format 2 on, this line says {version}")
    if kind == TUNED_FORMAT:
        return _parse_tuned(obj, bad)
    host, run, result = obj.get("host"), obj.get("run"), obj.get("result")
    _check_host_and_run(host, run, bad)
    if not isinstance(result, dict):
        raise bad("'result' missing or not an object")
    unknown = sorted(set(result) - _RESULT_FIELDS)
    if unknown:
        raise bad(f"unknown result field(s) {', '.join(unknown)}")
    for key in _INT_FIELDS:
        if not _is_int(result.get(key)):
            raise bad(f"result.{key} missing or not an integer")
    for key in _STR_FIELDS:
        if not isinstance(result.get(key), str):
            raise bad(f"result.{key} missing or not a string")
    for key in _FLOAT_FIELDS:
        if result.get(key) is not None and not _is_num(result[key]):
            raise bad(f"result.{key} is not a number")
    if result.get("status") not in STATUSES:
        raise bad(f"result.status {result.get('status')!r} is not one of {', '.join(STATUSES)}")
    if result.get("kind", "micro") not in KINDS:
        raise bad(f"result.kind {result.get('kind')!r} is not one of {', '.join(KINDS)}")
    raw = result.get("raw_samples_us") or []
    if not isinstance(raw, list) or not all(_is_num(v) for v in raw):
        raise bad("result.raw_samples_us is not a list of numbers")
    if raw and len(raw) != result["samples"]:
        raise bad(f"result.samples is {result['samples']} but raw_samples_us has {len(raw)}")
    full = {name: default() for name, default in _RESULT_DEFAULTS.items()}
    full.update(result)
    key = result_key(host["machine_id"], run["uid"], full)
    if obj.get("result_key") not in (None, key):
        raise bad("result_key does not match the record's content (edited or corrupted)")
    return {"host": _host_record(host), "run": run, "result": full}


def _check_part(name: str, part: Any, required: dict, bad) -> None:
    """Refuse a host or run part that is not an object with the required fields."""
    if not isinstance(part, dict):
        raise bad(f"'{name}' missing or not an object")
    for key, typ in required.items():
        if not isinstance(part.get(key), typ) or isinstance(part.get(key), bool):
            raise bad(f"{name}.{key} missing or not {typ.__name__}")


def _check_host_and_run(host: Any, run: Any, bad) -> None:
    """Refuse a host or run part that is not an object with the required fields."""
    _check_part("host", host, _HOST_REQUIRED, bad)
    _check_part("run", run, _RUN_REQUIRED, bad)
    if run["status"] not in RUN_STATUSES:
        raise bad(f"run.status {run['status']!r} is not one of {', '.join(RUN_STATUSES)}")


def _host_record(host: dict) -> dict:
    """The stored columns of a host part, with its first / last seen when given."""
    return {k: host.get(k) for k in HOST_COLUMNS} | {
        k: host[k] for k in ("first_seen", "last_seen") if isinstance(host.get(k), str)
    }


#: tuned field -> the JSON type it must have (None allowed only for _TUNED_NUMBERS)
_TUNED_TYPES = {
    "host_class": str, "machine_id": str, "created_at": str, "hidden": int, "top_k": int, "experts": int,
    "dispatch_dtype": str, "world_size": int, "device": str, "workload": dict, "backend": str, "knobs": dict,
    "env": dict, "flags": list, "status": str, "stop": str, "study": str, "versions": dict,
}
_TYPE_WORDS = {str: "a string", int: "an integer", dict: "a JSON object", list: "a list"}
_TUNED_NUMBERS = ("gain", "gain_halfwidth", "tuned_latency_us", "untuned_latency_us")
#: tuned_configs.device values (the table's CHECK constraint)
_TUNED_DEVICES = ("cuda", "cpu")


def _parse_tuned(obj: dict, bad) -> dict:
    """Validate one ``autoselect.tuned`` record; returns ``{"host", "run", "tuned"}``."""
    from db.tuned import TUNED_STATUSES

    host, run, tuned = obj.get("host"), obj.get("run"), obj.get("tuned")
    if not isinstance(tuned, dict):
        raise bad("'tuned' missing or not an object")
    unknown = sorted(set(tuned) - set(TUNED_FIELDS))
    if unknown:
        raise bad(f"unknown tuned field(s) {', '.join(unknown)}")
    missing = [k for k in TUNED_FIELDS if k not in tuned]
    if missing:
        raise bad(f"tuned field(s) {', '.join(missing)} missing")
    for key, typ in _TUNED_TYPES.items():
        if not isinstance(tuned[key], typ) or isinstance(tuned[key], bool):
            raise bad(f"tuned.{key} is not {_TYPE_WORDS[typ]}")
    for key in _TUNED_NUMBERS:
        if tuned[key] is not None and not _is_num(tuned[key]):
            raise bad(f"tuned.{key} is not a number")
    if tuned["status"] not in TUNED_STATUSES:
        raise bad(f"tuned.status {tuned['status']!r} is not one of {', '.join(TUNED_STATUSES)}")
    if tuned["device"] not in _TUNED_DEVICES:
        raise bad(f"tuned.device {tuned['device']!r} is not one of {', '.join(_TUNED_DEVICES)}")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in tuned["env"].items()):
        raise bad("tuned.env is not a map of strings")
    if not all(isinstance(f, str) for f in tuned["flags"]):
        raise bad("tuned.flags is not a list of strings")
    if run is not None:
        _check_host_and_run(host, run, bad)  # the run needs its machine
    elif host is not None:
        _check_part("host", host, _HOST_REQUIRED, bad)
        if host["machine_id"] != tuned["machine_id"]:
            raise bad("host.machine_id differs from tuned.machine_id and there is no run to explain it")
    # SQLite stores these as REAL: 3 reads back as 3.0, so the key is taken over floats
    tuned = {**tuned, **{k: float(tuned[k]) for k in _TUNED_NUMBERS if tuned[k] is not None}}
    key = tuned_key(run["uid"] if run is not None else None, tuned)
    if obj.get("tuned_key") not in (None, key):
        raise bad("tuned_key does not match the record's content (edited or corrupted)")
    return {"host": None if host is None else _host_record(host), "run": run, "tuned": tuned}


def iter_jsonl(lines: Iterable[str], name: str) -> Iterator[dict]:
    """Parse and validate JSONL records one at a time; raises on the first bad line."""
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise BadImportRecord(
                f"{name} line {n}: not JSON ({e.msg}); import files must be written by `autoselect db export`"
            ) from None
        yield parse_record(obj, f"{name} line {n}")


def read_jsonl(lines: Iterable[str], name: str) -> list[dict]:
    """Parse and validate a whole JSONL export before anything is written; raises on the first bad line."""
    return list(iter_jsonl(lines, name))


class ImportFile:
    """A JSONL export file that has been validated completely; iterating parses it again.

    Two passes keep memory flat for exports of any size: the first (in :func:`read_file`)
    only validates, the import pass re-reads the file record by record.
    """

    def __init__(self, path, count: int):
        self.path, self.count = path, count

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[dict]:
        with open(self.path, encoding="utf-8") as f:
            yield from iter_jsonl(f, str(self.path))


#: export format -> writer
EXPORTERS = {"jsonl": write_jsonl, "csv": write_csv}


def export_to(db_path, fmt: str, out: IO[str] | None = None, output=None) -> dict[str, int]:
    """Export the database at ``db_path`` as ``jsonl`` or ``csv`` to ``out`` or the file ``output``.

    Returns what was written: ``{"results": n, "tuned_configs": m}`` (CSV carries results
    only). The database is opened read-only; the output file
    is only created once the database has been validated.
    """
    from pathlib import Path

    from db.errors import OutputNotWritable
    from db.queries import connect_readonly

    writer = EXPORTERS[fmt]
    if output is not None:
        output = Path(output)
        if output.is_dir() or not output.parent.is_dir():
            raise OutputNotWritable(f"cannot write {output}: not a file in an existing directory; pass another --output")
    conn = connect_readonly(db_path)
    try:
        if output is None:
            return writer(conn, out)
        tmp = output.with_name(output.name + ".partial")
        with open(tmp, "w", newline="") as f:
            n = writer(conn, f)
        tmp.replace(output)
        return n
    finally:
        conn.close()


def read_file(path) -> ImportFile:
    """Validate a whole JSONL export file (nothing is written); returns it, ready to import."""
    from pathlib import Path

    from db.errors import ImportFileNotFound

    path = Path(path)
    if not path.is_file():
        raise ImportFileNotFound(f"no file {path}; pass a file written by `autoselect db export`")
    try:
        with open(path, encoding="utf-8") as f:
            count = sum(1 for _ in iter_jsonl(f, str(path)))
        return ImportFile(path, count)
    except UnicodeDecodeError:
        raise BadImportRecord(
            f"{path} is not UTF-8 text; import files must be written by `autoselect db export`"
        ) from None
