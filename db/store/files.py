"""Whole-file operations behind ``db import``, ``db merge`` and ``db upgrade``: validate first, then write."""

from __future__ import annotations

from pathlib import Path

from db import default_path
from db.errors import BadImportRecord, DatabaseNotFound
from db.queries import connect_readonly, schema_problems
from db.schema import check_header
from db.store.importing import ImportSummary
from db.store.writer import Store
from db.jsonl import RunIdentities, count_records, iter_labeled_records, iter_records, parse_record, read_file


def import_file(db_path, file, progress=None) -> ImportSummary:
    """Validate a JSONL export completely, then add it to the database at ``db_path``.

    :param progress: optional ``progress(done, total)`` callback, called after each batch.
    """
    records = read_file(file)  # raises before the database is opened
    with Store(db_path) as store:
        return store.import_records(records, progress=progress)


def merge_into(db_path, other, progress=None) -> ImportSummary:
    """Add every run, result and tuned configuration of the database ``other`` to the one at
    ``db_path`` (idempotent)."""
    src = connect_readonly(other)  # validated before the target is opened for writing
    try:
        src.execute("BEGIN")  # one snapshot: what is validated is what is merged
        _, problems = schema_problems(src)
        if problems:
            raise BadImportRecord(f"{other}: {problems[0]}; nothing was merged (`autoselect db check --db {other}` "
                                  "lists every such row)")
        runs = RunIdentities()
        for label, rec in iter_labeled_records(src):  # the rules db import applies, every record
            where = f"{other} {label}"
            runs.add(parse_record(rec, where, hint=f"nothing was merged (`autoselect db check --db {other}`)"), where)
        total = sum(count_records(src).values())
        with Store(db_path) as store:
            return store.import_records(iter_records(src), progress=progress, total=total, runs=runs)
    finally:
        src.close()


def upgrade(db_path) -> tuple[int, int]:
    """Apply pending migrations to the database at ``db_path``; returns (old, new) schema version."""
    path = Path(db_path) if db_path is not None else default_path()
    if not path.is_file():
        raise DatabaseNotFound(f"no results database at {path}; pass --db PATH")
    old = check_header(path) or 0
    with Store(path, create=False) as store:
        return old, store.schema_version
