"""Export, import and merge: the JSON Lines record format (read side uses stdlib only).

One line per result, then one line per tuned configuration (``tuned_configs``)::

    {"format": "autoselect.result", "schema_version": 4, "result_key": "<sha256>",
     "host": {<HostFingerprint.to_dict()>, "first_seen": ..., "last_seen": ...},
     "run": {"uid", "host_class", "started_at", "updated_at", "finished_at", "status",
             "trigger", "command", "hostname", "pid", "autoselect_version", "meta"},
     "result": {<Result.to_dict()>, including "raw_samples_us"}}
    {"format": "autoselect.tuned", "schema_version": 4, "tuned_key": "<sha256>",
     "host": {...} or null, "run": {...} or null,
     "tuned": {<every tuned_configs column but id and run_id, JSON columns decoded>}}

``schema_version`` is the record format's version, independent of the database schema:
1 holds result records only; 2 adds ``autoselect.tuned``; 3 names the dtype a result and a
tuned configuration are filed under ``activation_dtype`` (1 and 2 called it ``dispatch_dtype``:
:data:`RENAMED`) and adds the result's ``wire_dtype`` (absent before: not recorded); 4 (written
now) adds each result's footing (``timing``, ``timing_note``, ``calls``, ``dp_sizes``, ``via``:
:mod:`db.records`). Files of versions 1 to 3 still import, their results on the footing they were
measured on: an ``allgather_reducescatter`` result of those versions was one packed all_gather
(``calls`` = ``fused``); a reader refuses records of a newer version than it knows. A tuned record's
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
from contextlib import contextmanager
from dataclasses import MISSING, fields
from pathlib import Path
from typing import IO, Any

from autoselect.atomic import check_output_file, database_files, output_file
from autoselect.text import check_json
from db import default_path
from db.errors import BadImportRecord, ImportFileNotFound, ImportFormatTooNew, OutputNotWritable
from db.fields import host_problem, result_problem, run_problem, tuned_problem
from db.queries import connect_readonly
from db.records import FUSED, Result
from db.rows import (
    HOST_COLUMNS,
    RESULT_COLUMNS,
    RUN_COLUMNS,
    TUNED_FIELDS,
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
RECORD_VERSION = 4
#: record format version -> the record kinds a file of that version may hold
FORMATS_BY_VERSION = {1: (FORMAT,), 2: (FORMAT, TUNED_FORMAT), 3: (FORMAT, TUNED_FORMAT), 4: (FORMAT, TUNED_FORMAT)}
#: result fields that exist from record format 4 on (the footing, :mod:`db.records`)
FOOTING_FIELDS = ("timing", "timing_note", "calls", "dp_sizes", "via")
#: the backend whose results of record formats 1 to 3 were measured with one packed all_gather
_PACKED_BEFORE_4 = "allgather_reducescatter"
#: fields renamed by a record format: (the last format with the old name, old, new), for the
#: ``result`` and ``tuned`` parts alike; an older record is read under the new names
RENAMED = ((2, "dispatch_dtype", "activation_dtype"),)
#: fields a record format added -> that format (an older record that carries one is refused)
ADDED = {"wire_dtype": 3, **{name: 4 for name in FOOTING_FIELDS}}


def _names_in(fields: Iterable[str], version: int) -> dict[str, str]:
    """The field names a record part of format ``version`` has, each -> its name in this format."""
    old_names = {new: old for last, old, new in RENAMED if version <= last}
    return {old_names.get(f, f): f for f in fields if ADDED.get(f, 1) <= version}


def _current_names(part: dict, names: dict[str, str]) -> dict:
    """A record part under this format's field names (``names``: :func:`_names_in`; every key is one)."""
    return {names[k]: v for k, v in part.items()}


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
    return (rec for _, rec in iter_labeled_records(conn))


def iter_labeled_records(conn: sqlite3.Connection) -> Iterator[tuple[str, dict]]:
    """:func:`iter_records` with each record's row named (``result 17``, ``tuned configuration 3``)."""
    conn.row_factory = sqlite3.Row
    lookup = _Lookup(conn)
    samples_cur = conn.cursor()
    samples_cur.row_factory = None
    for row in conn.execute("SELECT * FROM results ORDER BY id"):
        mid = row["machine_id"]
        host = lookup.host(mid)
        run, _ = lookup.run(row["run_id"]) or (None, None)
        result = row_to_result_dict(dict(row))
        result["raw_samples_us"] = [
            r[0]
            for r in samples_cur.execute(
                "SELECT latency_us FROM samples WHERE result_id = ? ORDER BY idx", (row["id"],)
            )
        ]
        yield f"result {row['id']}", {
            "format": FORMAT,
            "schema_version": RECORD_VERSION,
            "result_key": row["result_key"],
            "host": host,
            "run": run,
            "result": result,
        }
    for row_id, rec in _iter_tuned(conn, lookup):
        yield f"tuned configuration {row_id}", rec


def _iter_tuned(conn: sqlite3.Connection, lookup: _Lookup) -> Iterator[tuple[int, dict]]:
    for row in conn.execute("SELECT * FROM tuned_configs ORDER BY id"):
        tuned = row_to_tuned_dict(dict(row))
        found = lookup.run(row["run_id"]) if row["run_id"] is not None else None
        run, machine_id = found if found is not None else (None, tuned["machine_id"])
        yield row["id"], {
            "format": TUNED_FORMAT,
            "schema_version": RECORD_VERSION,
            "tuned_key": tuned_key(run["uid"] if run else None, tuned),
            "host": lookup.host(machine_id),
            "run": run,
            "tuned": tuned,
        }


def count_records(conn: sqlite3.Connection) -> dict[str, int]:
    """How many records an export of ``conn`` holds: ``{"results": n, "tuned_configs": m}``."""
    return {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("results", "tuned_configs")}


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
#: what an absent optional host field means (HostFingerprint's defaults)
_HOST_DEFAULTS = {"gpus": list, "nvlink_matrix": list, "versions": dict, "all_nvlinks_up": lambda: False}
#: what an absent optional run field means
_RUN_DEFAULTS = {"meta": dict}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


#: what an import error adds: where good records come from
IMPORT_HINT = "import files must be written by `autoselect db export`"


def parse_record(obj: Any, where: str, *, hint: str = IMPORT_HINT) -> dict:
    """Validate one decoded JSON record against the schema (:mod:`db.fields`): ``{"host", "run",
    "result"}`` for a result record (the result completed by Result defaults), ``{"host", "run",
    "tuned"}`` for a tuned one.

    :param where: ``"FILE line N"``, for the error message.
    :param hint: the error message's advice.
    """
    def bad(msg: str) -> BadImportRecord:
        return BadImportRecord(f"{where}: {msg}; {hint}")

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
        return _parse_tuned(obj, version, bad)
    host, run = _host_and_run(obj.get("host"), obj.get("run"), bad)
    result = obj.get("result")
    if not isinstance(result, dict):
        raise bad("'result' missing or not an object")
    names = _names_in(_RESULT_FIELDS, version)
    unknown = sorted(set(result) - set(names))
    if unknown:
        raise bad(f"unknown result field(s) {', '.join(unknown)}")
    result = _current_names(result, names)
    full = {name: default() for name, default in _RESULT_DEFAULTS.items()}
    if version < 4 and result.get("backend") == _PACKED_BEFORE_4:
        full["calls"] = FUSED  # what that adapter did before the footing was recorded
    full.update(result)
    if full["raw_samples_us"] is None:
        full["raw_samples_us"] = []
    said = result_problem(full)
    if said:
        raise bad(said)
    key = result_key(host["machine_id"], run["uid"], full)
    if obj.get("result_key") not in (None, key):
        raise bad("result_key does not match the record's content (edited or corrupted)")
    return {"host": host, "run": run, "result": full}


def _part(name: str, part: Any, defaults: dict, check, bad) -> dict:
    """A host or run part completed by its defaults, refused unless every field keeps its rule."""
    if not isinstance(part, dict):
        raise bad(f"'{name}' missing or not an object")
    full = {**{k: make() for k, make in defaults.items()}, **{k: v for k, v in part.items() if v is not None}}
    said = check(full)
    if said:
        raise bad(said)
    return full


def _host_and_run(host: Any, run: Any, bad) -> tuple[dict, dict]:
    """The validated host and run parts of a record (the run's host class is the one it measured)."""
    host = _part("host", host, _HOST_DEFAULTS, host_problem, bad)
    run = _part("run", run, _RUN_DEFAULTS, run_problem, bad)
    return _host_record(host), {k: run.get(k) for k in RUN_COLUMNS}


def _host_record(host: dict) -> dict:
    """The stored columns of a host part, with its first / last seen when given."""
    return {k: host.get(k) for k in HOST_COLUMNS} | {
        k: host[k] for k in ("first_seen", "last_seen") if isinstance(host.get(k), str)
    }


def _parse_tuned(obj: dict, version: int, bad) -> dict:
    """Validate one ``autoselect.tuned`` record of format ``version``; returns ``{"host", "run", "tuned"}``."""
    host, run, tuned = obj.get("host"), obj.get("run"), obj.get("tuned")
    if not isinstance(tuned, dict):
        raise bad("'tuned' missing or not an object")
    names = _names_in(TUNED_FIELDS, version)
    unknown = sorted(set(tuned) - set(names))
    if unknown:
        raise bad(f"unknown tuned field(s) {', '.join(unknown)}")
    tuned = _current_names(tuned, names)
    missing = [k for k in TUNED_FIELDS if k not in tuned]
    if missing:
        raise bad(f"tuned field(s) {', '.join(missing)} missing")
    said = tuned_problem(tuned)
    if said:
        raise bad(said)
    if run is not None:
        host, run = _host_and_run(host, run, bad)  # the run needs its machine
    elif host is not None:
        host = _host_record(_part("host", host, _HOST_DEFAULTS, host_problem, bad))
    if host is not None and host["machine_id"] != tuned["machine_id"] and run is None:
        raise bad("host.machine_id differs from tuned.machine_id and there is no run to explain it")
    # SQLite stores these as REAL: 3 reads back as 3.0, so the key is taken over floats
    tuned = {**tuned, **{k: float(tuned[k]) for k in _TUNED_NUMBERS if tuned[k] is not None}}
    key = tuned_key(run["uid"] if run is not None else None, tuned)
    if obj.get("tuned_key") not in (None, key):
        raise bad("tuned_key does not match the record's content (edited or corrupted)")
    return {"host": host, "run": run, "tuned": tuned}


#: tuned fields SQLite stores as REAL
_TUNED_NUMBERS = ("gain", "gain_halfwidth", "tuned_latency_us", "untuned_latency_us")


class RunIdentities:
    """The machine and host class each run uid of an input measured on: every record of one run
    must agree (a result is stored with its run's machine and class), and so must the run the
    target database already holds under that uid (:func:`db.importing.import_records`)."""

    def __init__(self):
        self.runs: dict[str, tuple[str, str, str]] = {}  # uid -> (machine_id, host_class, where)

    def add(self, rec: dict, where: str) -> None:
        """Note the run of a parsed record; raises when an earlier record gave it another machine."""
        run, host = rec.get("run"), rec.get("host")
        if run is None:
            return
        ident = (host["machine_id"], run["host_class"])
        seen = self.runs.setdefault(run["uid"], (*ident, where))
        if seen[:2] != ident:
            raise BadImportRecord(
                f"{where}: run {run['uid']} measured on machine {ident[0]} (class {ident[1]}), but {seen[2]} "
                f"says machine {seen[0]} (class {seen[1]}); a run has one machine: the file was edited or "
                "put together from several exports by hand"
            )


def _decode_line(line: str, where: str) -> Any:
    try:
        obj = json.loads(line)
        if "\\u" in line:  # the file is UTF-8 text: only a \uXXXX escape can make a lone surrogate
            check_json(obj, where, BadImportRecord, "import files must be written by `autoselect db export`")
        return obj
    except json.JSONDecodeError as e:
        raise BadImportRecord(f"{where}: not JSON ({e.msg}); import files must be written by `autoselect db export`") from None
    except RecursionError:
        raise BadImportRecord(f"{where}: JSON nested too deeply; import files must be written by `autoselect db export`") from None
    except ValueError as e:  # an integer literal of thousands of digits (Python's int_max_str_digits)
        raise BadImportRecord(f"{where}: not JSON this reader accepts ({e}); import files must be written by "
                              "`autoselect db export`") from None


def iter_jsonl(lines: Iterable[str], name: str, runs: RunIdentities | None = None) -> Iterator[dict]:
    """Parse and validate JSONL records one at a time; raises on the first bad line.

    :param runs: collects each record's run identity (and refuses a run given two machines).
    """
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{name} line {n}"
        rec = parse_record(_decode_line(line, where), where)
        if runs is not None:
            runs.add(rec, where)
        yield rec


class ImportFile:
    """A JSONL export file that has been validated completely; iterating parses it again.

    Two passes keep memory flat for exports of any size: the first (in :func:`read_file`)
    only validates, the import pass re-reads the file record by record. ``runs`` holds the
    machine and host class of every run uid in the file, which the importer compares with
    the runs the target database already has before it writes anything.
    """

    def __init__(self, path, count: int, runs: RunIdentities | None = None):
        self.path, self.count = path, count
        self.runs = runs or RunIdentities()

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[dict]:
        with open(self.path, encoding="utf-8") as f:
            yield from iter_jsonl(f, str(self.path))


#: export format -> writer
EXPORTERS = {"jsonl": write_jsonl, "csv": write_csv}
def check_output(output, db_path) -> Path:
    """Refuse an export destination that is the database itself, one of its side files, or a
    directory; returns the path the export will write (symbolic links resolved). The one check of
    every output option (:func:`autoselect.atomic.check_output_file`)."""
    db = db_path if db_path is not None else default_path()
    return check_output_file(output, option="--output", error=OutputNotWritable, protected=database_files(db))


@contextmanager
def open_output(output: Path, shown) -> Iterator[IO[str]]:
    """A text stream onto ``output`` (from :func:`check_output`): :func:`autoselect.atomic.output_file`."""
    with output_file(output, option="--output", error=OutputNotWritable) as f:
        yield f


def export_to(db_path, fmt: str, out: IO[str] | None = None, output=None) -> dict[str, int]:
    """Export the database at ``db_path`` as ``jsonl`` or ``csv`` to ``out`` or the file ``output``.

    Returns what was written: ``{"results": n, "tuned_configs": m}`` (CSV carries results
    only). The database is opened read-only; the output (never the database or its sidecar
    files, see :func:`check_output`) is only opened once the database has been validated, and
    written as :func:`open_output` says.
    """
    writer = EXPORTERS[fmt]
    target = check_output(output, db_path) if output is not None else None
    conn = connect_readonly(db_path)
    try:
        if target is None:
            return writer(conn, out)
        with open_output(target, output) as f:
            return writer(conn, f)
    finally:
        conn.close()


def read_file(path) -> ImportFile:
    """Validate a whole JSONL export file (nothing is written); returns it, ready to import."""
    path = Path(path)
    try:
        regular = path.is_file()
    except OSError as e:  # a name too long for the file system
        raise ImportFileNotFound(f"cannot read {path} ({e.strerror}); pass a file written by `autoselect db export`") from None
    if not regular:
        raise ImportFileNotFound(f"no file {path}; pass a file written by `autoselect db export`")
    runs = RunIdentities()
    try:
        with open(path, encoding="utf-8") as f:
            count = sum(1 for _ in iter_jsonl(f, str(path), runs))
        return ImportFile(path, count, runs)
    except UnicodeDecodeError:
        raise BadImportRecord(
            f"{path} is not UTF-8 text; import files must be written by `autoselect db export`"
        ) from None
    except OSError as e:
        raise ImportFileNotFound(f"cannot read {path} ({e.strerror}); pass a file written by `autoselect db export`") from None
