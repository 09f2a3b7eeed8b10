"""Export, import and merge: the JSON Lines record format (read side uses stdlib only).

One line per result::

    {"format": "autoselect.result", "schema_version": 1, "result_key": "<sha256>",
     "host": {<HostFingerprint.to_dict()>, "first_seen": ..., "last_seen": ...},
     "run": {"uid", "host_class", "started_at", "updated_at", "finished_at", "status",
             "trigger", "command", "hostname", "pid", "autoselect_version", "meta"},
     "result": {<Result.to_dict()>, including "raw_samples_us"}}

``schema_version`` is the record format's version (1), independent of the database schema.
A reader refuses records with a newer version. Import is idempotent: runs are matched by
``run.uid``, results by ``result_key`` (a hash of machine, run and identifying fields).
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
    VERSION_COLUMNS,
    result_key,
    row_to_host_dict,
    row_to_result_dict,
    row_to_run_dict,
)

FORMAT = "autoselect.result"
RECORD_VERSION = 1


def iter_records(conn: sqlite3.Connection) -> Iterator[dict]:
    """Every result of a database as an export record, in insertion order."""
    conn.row_factory = sqlite3.Row
    hosts: dict[str, dict] = {}
    runs: dict[int, dict] = {}
    samples_cur = conn.cursor()
    samples_cur.row_factory = None
    for row in conn.execute("SELECT * FROM results ORDER BY id"):
        mid = row["machine_id"]
        if mid not in hosts:
            h = conn.execute("SELECT * FROM hosts WHERE machine_id = ?", (mid,)).fetchone()
            host = row_to_host_dict(dict(h))
            host.update(first_seen=h["first_seen"], last_seen=h["last_seen"])
            hosts[mid] = host
        if row["run_id"] not in runs:
            u = conn.execute("SELECT * FROM runs WHERE id = ?", (row["run_id"],)).fetchone()
            runs[row["run_id"]] = row_to_run_dict(dict(u))
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
            "host": hosts[mid],
            "run": runs[row["run_id"]],
            "result": result,
        }


def write_jsonl(conn: sqlite3.Connection, out: IO[str]) -> int:
    """Write every result as one JSON line; returns the number of lines."""
    n = 0
    for rec in iter_records(conn):
        out.write(json.dumps(rec, sort_keys=True, separators=(",", ":")) + "\n")
        n += 1
    return n


#: CSV columns: the host and run identity, then every Result field (raw samples omitted;
#: knobs and versions as JSON text)
CSV_COLUMNS = ("result_key", "machine_id", "hostname", "host_class", "gpu_name", "run_uid") + RESULT_COLUMNS


def write_csv(conn: sqlite3.Connection, out: IO[str]) -> int:
    """Write every result as one CSV row (flat; use JSONL to re-import); returns the row count."""
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
    return n


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
    """Validate one decoded JSON record; returns it with the result completed by Result defaults.

    :param where: ``"FILE line N"``, for the error message.
    """
    def bad(msg: str) -> BadImportRecord:
        return BadImportRecord(f"{where}: {msg}; import files must be written by `autoselect db export`")

    if not isinstance(obj, dict):
        raise bad("not a JSON object")
    if obj.get("format") != FORMAT:
        raise bad(f"format is {obj.get('format')!r}, expected {FORMAT!r}")
    version = obj.get("schema_version")
    if not _is_int(version):
        raise bad("schema_version missing or not an integer")
    if version > RECORD_VERSION:
        raise ImportFormatTooNew(
            f"{where}: record format {version} is newer than this autoselect reads ({RECORD_VERSION}); upgrade autoselect"
        )
    host, run, result = obj.get("host"), obj.get("run"), obj.get("result")
    for name, part, required in (("host", host, _HOST_REQUIRED), ("run", run, _RUN_REQUIRED)):
        if not isinstance(part, dict):
            raise bad(f"'{name}' missing or not an object")
        for key, typ in required.items():
            if not isinstance(part.get(key), typ) or isinstance(part.get(key), bool):
                raise bad(f"{name}.{key} missing or not {typ.__name__}")
    if run["status"] not in RUN_STATUSES:
        raise bad(f"run.status {run['status']!r} is not one of {', '.join(RUN_STATUSES)}")
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
    host = {k: host.get(k) for k in HOST_COLUMNS} | {
        k: host[k] for k in ("first_seen", "last_seen") if isinstance(host.get(k), str)
    }
    return {"host": host, "run": run, "result": full}


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


def export_to(db_path, fmt: str, out: IO[str] | None = None, output=None) -> int:
    """Export the database at ``db_path`` as ``jsonl`` or ``csv`` to ``out`` or the file ``output``.

    Returns the number of results written. The database is opened read-only; the output file
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
