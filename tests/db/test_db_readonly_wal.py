"""Why read-only opens leave ``-wal`` / ``-shm`` beside the database, and why that stays.

``db.queries.connect_readonly`` opens with ``mode=ro``. On a WAL database SQLite then creates
the ``-shm`` index and an empty ``-wal`` (when they are missing), and a read-only connection
cannot remove them on close. The only way to open without them is ``immutable=1``, which takes
no locks and registers no read mark in ``-shm``; a writer that starts meanwhile is then free to
checkpoint over the pages the reader is reading. These tests pin both halves: the snapshot a
``mode=ro`` reader keeps while a writer commits and checkpoints, and the torn read an
``immutable=1`` reader gets in the same sequence, opened exactly when "WAL mode and no -wal
file" would have allowed it (docs/database.md). SQLite 3.40 returns rows of both
commits without an error; other versions may report the file malformed instead.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from support.db import file_state, hgx_host, make_result

from db.queries import connect_readonly
from db.store import Store

ROWS = 4000  # 2 KB of padding each: ~2,000 leaf pages, far beyond the reader's 10-page cache


def filled(path: Path) -> Path:
    """An autoselect database (WAL) with one result, plus a wide table the scans walk through."""
    with Store(path) as s:
        run = s.begin_run(hgx_host())
        s.add_result(run, make_result())
        s.finish_run(run)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE scan (id INTEGER PRIMARY KEY, generation INTEGER, pad BLOB)")
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO scan VALUES (?, 0, zeroblob(2000))", [(i,) for i in range(ROWS)])
    conn.execute("COMMIT")
    conn.close()  # last connection: checkpointed, -wal and -shm removed
    return path


def scan_while_a_writer_commits_and_checkpoints(path: Path, reader: sqlite3.Connection):
    """Read a quarter of the rows, let another connection rewrite every row, commit and
    checkpoint, then read the rest. Returns (generations seen, rows read, frames checkpointed,
    the error the reader got or None)."""
    reader.execute("PRAGMA cache_size = 10")
    cursor = reader.execute("SELECT generation FROM scan ORDER BY id")
    seen = [cursor.fetchone()[0] for _ in range(ROWS // 4)]
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("UPDATE scan SET generation = generation + 1")
    _, _, checkpointed = writer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    writer.close()
    try:
        seen += [row[0] for row in cursor]
        error = None
    except sqlite3.DatabaseError as e:
        error = str(e)
    reader.close()
    return sorted(set(seen)), len(seen), checkpointed, error


def side_files(path: Path) -> list[str]:
    """The -wal / -shm files beside ``path``, with their sizes."""
    return sorted(f"{p.name[len(path.name):]}:{p.stat().st_size}" for p in path.parent.glob(path.name + "-*"))


def test_a_read_only_open_leaves_an_empty_wal_and_the_shm_index_and_changes_nothing_else(db_path):
    filled(db_path)
    assert side_files(db_path) == []
    before = file_state(db_path)[:3]
    conn = connect_readonly(db_path)
    assert conn.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 1
    conn.close()
    assert side_files(db_path) == ["-shm:32768", "-wal:0"]
    assert file_state(db_path)[:3] == before  # the database itself: same bytes, same mtime


def test_the_next_writer_to_close_removes_the_side_files_a_reader_left(db_path):
    filled(db_path)
    connect_readonly(db_path).close()
    with Store(db_path) as s:
        run = s.begin_run(hgx_host())
        s.add_result(run, make_result(tokens=128))
        s.finish_run(run)
    assert side_files(db_path) == []


def test_a_read_only_reader_keeps_its_snapshot_while_a_writer_commits_and_checkpoints(db_path):
    filled(db_path)
    seen, rows, checkpointed, error = scan_while_a_writer_commits_and_checkpoints(db_path, connect_readonly(db_path))
    assert (seen, rows, error) == ([0], ROWS, None)
    assert checkpointed == 0  # the reader's mark in -shm held the checkpoint back


def test_an_immutable_reader_would_read_a_torn_database_under_the_same_checkpoint(db_path):
    filled(db_path)
    # the proposed rule's condition holds: WAL mode in the header (bytes 18 and 19 are 2), no -wal
    header = db_path.read_bytes()[:20]
    assert (header[18], header[19]) == (2, 2) and side_files(db_path) == []
    uri = f"{db_path.resolve().as_uri()}?mode=ro&immutable=1"
    seen, rows, checkpointed, error = scan_while_a_writer_commits_and_checkpoints(
        db_path, sqlite3.connect(uri, uri=True))
    assert checkpointed > 0  # nothing told the writer a reader was there
    assert error is not None or seen == [0, 1], "an immutable reader saw one consistent snapshot"
