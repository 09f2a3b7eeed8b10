"""The reference data file: its schema, opening it read-only, its canonical text form.

The converted records ship as one SQLite file inside the package
(``autoselect/reference/data/``), read with the stdlib ``sqlite3`` only, opened
``mode=ro&immutable=1`` (no locks, no journal, no writes). Three tables hold the records:

* ``sources``: one row per published table (normalized provenance: package and version, table
  path and sha256, framework and version, collection date, image digest, collector, how it was
  measured, the collector's meaning of each column, the collection_meta.yaml runtime block);
* ``points``: one row per published all2all measurement point, referencing its source, with the
  round trip vLLM calls per step and each phase kept separately, and the table rows as published;
* ``collectives``: the NCCL all_gather / reduce_scatter rows the derived allgather_reducescatter
  numbers are computed from (``derived.py``), never presented as an all2all.

``meta`` holds the converter's identity and ``skipped`` what was left out and why.

A SQLite file's bytes depend on the library that wrote it (the header records its version
number at offset 96; page layout may differ between versions), so reproducibility is judged on
:func:`canonical_dump`: every table's schema and every row, in primary-key order, as JSON.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
FILENAME = "aiconfigurator-0.12.0.sqlite"
DEFAULT_PATH = DATA_DIR / FILENAME

#: Bump when the schema or the meaning of a column changes (the converter writes it to meta).
#: 2: ``points.dispatch_dtype`` is ``points.wire_dtype`` (the dtype that crossed the all2all).
SCHEMA_VERSION = 2

SCHEMA = """
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE sources (
    id                INTEGER PRIMARY KEY,
    kind              TEXT NOT NULL,
    system            TEXT NOT NULL,
    table_path        TEXT NOT NULL UNIQUE,
    table_sha256      TEXT NOT NULL,
    table_rows        INTEGER NOT NULL,
    meta_path         TEXT NOT NULL,
    meta_sha256       TEXT NOT NULL,
    package           TEXT NOT NULL,
    package_version   TEXT NOT NULL,
    framework         TEXT NOT NULL,
    framework_version TEXT NOT NULL,
    device            TEXT NOT NULL,
    collected_at      TEXT,
    provenance        TEXT,
    image             TEXT,
    image_digest      TEXT,
    source_commit     TEXT,
    collector_ref     TEXT,
    collector_hash    TEXT,
    collector         TEXT NOT NULL,
    how_measured      TEXT NOT NULL,
    columns           TEXT NOT NULL,
    runtime           TEXT NOT NULL,
    note              TEXT NOT NULL
);
CREATE TABLE points (
    id              INTEGER PRIMARY KEY,
    source_id       INTEGER NOT NULL REFERENCES sources (id),
    system          TEXT NOT NULL,
    backend         TEXT NOT NULL,
    world_size      INTEGER NOT NULL,
    nodes           INTEGER NOT NULL,
    hidden          INTEGER NOT NULL,
    top_k           INTEGER NOT NULL,
    experts         INTEGER NOT NULL,
    wire_dtype      TEXT NOT NULL,
    combine_dtype   TEXT NOT NULL,
    tokens_per_rank INTEGER NOT NULL,
    routing         TEXT NOT NULL,
    latency_us      REAL NOT NULL,
    prepare_us      REAL,
    dispatch_us     REAL NOT NULL,
    combine_us      REAL NOT NULL,
    extra           TEXT NOT NULL,
    raw             TEXT NOT NULL,
    UNIQUE (system, backend, hidden, top_k, experts, wire_dtype, world_size, tokens_per_rank)
);
CREATE TABLE collectives (
    id             INTEGER PRIMARY KEY,
    source_id      INTEGER NOT NULL REFERENCES sources (id),
    system         TEXT NOT NULL,
    op             TEXT NOT NULL,
    nccl_dtype     TEXT NOT NULL,
    num_gpus       INTEGER NOT NULL,
    message_size   INTEGER NOT NULL,
    message_bytes  INTEGER NOT NULL,
    latency_us     REAL NOT NULL,
    raw_latency_ms REAL NOT NULL,
    UNIQUE (system, op, nccl_dtype, num_gpus, message_size)
);
CREATE TABLE skipped (
    id        INTEGER PRIMARY KEY,
    source_id INTEGER NOT NULL REFERENCES sources (id),
    what      TEXT NOT NULL,
    rows      INTEGER NOT NULL,
    reason    TEXT NOT NULL
);
"""


class ReferenceDataMissing(Exception):
    """The packaged reference file is absent (a broken install): not a user mistake."""


def connect(path: Path | str | None = None) -> sqlite3.Connection:
    """A read-only, immutable connection to the reference file (default: the packaged one)."""
    path = Path(path) if path is not None else DEFAULT_PATH
    if not path.is_file():
        raise ReferenceDataMissing(f"the reference data file {path} is missing; reinstall autoselect")
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True, check_same_thread=False)


def attach(conn: sqlite3.Connection, schema: str = "reference", path: Path | str | None = None) -> str:
    """Attach the reference file to ``conn`` (read-only) as ``schema``; returns the schema name.

    ``conn`` should accept URI file names (opened with ``uri=True``, as ``db.queries`` opens the
    results store): SQLite honours the ``mode=ro&immutable=1`` URI there, and elsewhere only
    when built with ``SQLITE_USE_URI``; otherwise the attach raises ``sqlite3.OperationalError``
    (it never opens the file writable nor creates another).
    """
    if not schema.isidentifier():
        raise ValueError(f"schema name {schema!r} is not an identifier")
    path = Path(path) if path is not None else DEFAULT_PATH
    if not path.is_file():
        raise ReferenceDataMissing(f"the reference data file {path} is missing; reinstall autoselect")
    conn.execute(f"ATTACH DATABASE ? AS {schema}", (f"{path.resolve().as_uri()}?mode=ro&immutable=1",))
    return schema


def create(path: Path | str) -> sqlite3.Connection:
    """A new, empty reference file at ``path`` with the schema (the converter writes it)."""
    path = Path(path)
    if path.exists():
        path.unlink()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA page_size = 4096")
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.executescript(SCHEMA)
    return conn


def canonical_dump(conn: sqlite3.Connection) -> str:
    """The file's content as text: schema statements, then every table's rows as JSON lines.

    Tables and indexes in name order, rows in primary-key order, floats as Python's shortest
    round-trip repr: equal dumps mean equal records, whatever SQLite version wrote the file.
    """
    out = []
    objects = conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' "
        "ORDER BY type DESC, name").fetchall()
    for kind, name, sql in objects:
        out.append(f"-- {kind} {name}")
        out.append(" ".join(sql.split()) + ";")
        if kind != "table":
            continue
        pk = [r[1] for r in conn.execute(f"PRAGMA table_info({name})") if r[5]]
        order = ", ".join(pk) if pk else "rowid"
        for row in conn.execute(f"SELECT * FROM {name} ORDER BY {order}"):
            out.append(json.dumps(list(row), ensure_ascii=False, allow_nan=False, separators=(",", ":")))
    return "\n".join(out) + "\n"
