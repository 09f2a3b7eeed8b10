"""Schema versions and the checks every connection runs before it trusts a file.

The schema is the ordered list of ``db/migrations/NNNN_name.sql`` files; its version is the
number of the newest one and is kept in ``PRAGMA user_version``. A file is checked from its
raw header bytes *before* SQLite opens it, so a garbage file or a database from a newer
autoselect is refused without creating or changing a single byte.
"""

from __future__ import annotations

import os
import re
import sqlite3
import stat
from pathlib import Path
from typing import NamedTuple

from db import default_path
from db.errors import DatabaseNotReadable, DatabaseNotWritable, DatabaseTooNew, ForeignDatabase, NotADatabase

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
SQLITE_MAGIC = b"SQLite format 3\x00"
_USER_VERSION_OFFSET = 60  # big-endian u32 in the 100-byte database header
_MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
#: the tables an autoselect results database has, each with the schema version whose migration adds it
TABLES = {"hosts": 1, "runs": 1, "results": 1, "samples": 1, "tuned_configs": 2}
#: how long a connection waits for another writer before giving up (ms)
BUSY_TIMEOUT_MS = 30_000


class Migration(NamedTuple):
    """One numbered forward migration file."""

    version: int
    name: str
    sql: str

    @property
    def description(self) -> str:
        """The migration's one-line docstring (its first ``--`` comment line)."""
        first = self.sql.lstrip().splitlines()[0]
        return first.lstrip("-").strip()


def migrations() -> list[Migration]:
    """Every migration shipped with this autoselect, oldest first."""
    found = []
    for path in sorted(MIGRATIONS_DIR.iterdir()):
        m = _MIGRATION_NAME.match(path.name)
        if m:
            found.append(Migration(int(m.group(1)), path.name, path.read_text()))
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migration files must be numbered 0001, 0002, ... without gaps: {versions}")
    return found


def latest_version() -> int:
    """The schema version this autoselect writes (the newest migration's number)."""
    return len(migrations())


def statements(sql: str) -> list[str]:
    """Split a migration script into complete SQL statements."""
    out, buf = [], ""
    for line in sql.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                out.append(buf.strip())
            buf = ""
    if buf.strip() and not all(
        ln.strip().startswith("--") or not ln.strip() for ln in buf.splitlines()
    ):
        raise RuntimeError(f"incomplete statement at the end of a migration: {buf[:80]!r}")
    return out


def check_header(path: Path) -> int | None:
    """Refuse a file that is not an SQLite database or is too new; read nothing else.

    Returns the ``user_version`` stored in the header, or None for an empty (0-byte) file,
    which SQLite treats as a new database.
    """
    try:
        with open(path, "rb") as f:
            header = f.read(100)
    except OSError as e:  # this user may not read it (launch takes --db unread by click), or the device fails
        raise DatabaseNotReadable(f"{path} cannot be read ({e.strerror}); make it readable to this user, or pass "
                                  "--db with another path") from None
    if not header:
        return None
    if len(header) < 100 or not header.startswith(SQLITE_MAGIC):
        raise NotADatabase(
            f"{path} is not an SQLite database; pass --db with the path of an autoselect results database"
        )
    version = int.from_bytes(header[_USER_VERSION_OFFSET : _USER_VERSION_OFFSET + 4], "big")
    refuse_too_new(path, version)
    return version


def _stat(path: Path) -> os.stat_result | None:
    """``os.stat`` of a --db path: None when it does not exist; a directory, device, FIFO or
    socket, or a path the OS refuses (a name too long, a file where a directory should be),
    is :class:`NotADatabase`."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):  # the writer's mkdir of the parent says why
        return None
    except OSError as e:
        raise NotADatabase(f"cannot use {path} as a database ({e.strerror}); pass --db with the path of a database file") from None
    if stat.S_ISDIR(st.st_mode):
        raise NotADatabase(f"{path} is a directory; pass --db with the path of a database file")
    if not stat.S_ISREG(st.st_mode):
        raise NotADatabase(f"{path} is not a regular file (a device, FIFO or socket); pass --db with the path of a "
                           "database file")
    return st


def check_path(path: str | Path | None, *, write: bool = True) -> bool:
    """Refuse, before any work starts, a database path no writer (``write``) or reader could
    use; read only the header. Returns whether the file exists.

    A directory, a device or FIFO, a file that is not SQLite or one of a newer schema raises; a
    missing file is fine (the writer creates it). A writer also needs the file and its
    directory writable: SQLite keeps ``-wal`` and ``-shm`` files beside a WAL database (and a
    ``-journal`` while it converts one), so a read-only directory fails here, before SQLite
    could leave a journal behind. ``None`` means the default path (``$AUTOSELECT_DB`` ...).
    """
    if path is None:
        path = default_path()
    path = Path(path)
    exists = _stat(path) is not None
    if exists:
        check_header(path)
    if write:
        real = Path(os.path.realpath(path))
        if exists and not os.access(real, os.W_OK):
            raise DatabaseNotWritable(f"{path} is read-only; make it writable, or pass --db with another path")
        directory = real.parent
        if directory.is_dir() and not os.access(directory, os.W_OK | os.X_OK):
            raise DatabaseNotWritable(
                f"cannot write {path}: its directory {directory} is not writable (SQLite keeps {real.name}-wal and "
                f"{real.name}-shm beside the database); make the directory writable, or pass --db with another path"
            )
    return exists


def wal_directory_problem(path: Path) -> str | None:
    """Why a reader cannot open ``path``, when the cause is its directory: a WAL database whose
    ``-shm`` index is missing and whose directory is not writable (SQLite must create the index
    even to read). None when that is not the case."""
    try:
        with open(path, "rb") as f:
            header = f.read(20)
    except OSError:
        return None
    real = Path(os.path.realpath(path))
    if len(header) < 20 or header[18:20] != b"\x02\x02" or Path(f"{real}-shm").exists():
        return None
    if os.access(real.parent, os.W_OK | os.X_OK):
        return None
    return (f"{path} is a WAL database and its directory {real.parent} is not writable: SQLite must create "
            f"{real.name}-shm there even to read it; make the directory writable, or copy the database to one that is")


def refuse_too_new(path: Path, version: int) -> None:
    """Raise :class:`DatabaseTooNew` when ``version`` is newer than this autoselect's schema."""
    latest = latest_version()
    if version > latest:
        raise DatabaseTooNew(
            f"{path} was written by a newer autoselect (schema {version} > {latest}); upgrade autoselect"
        )


def decode_text(raw: bytes) -> str:
    """A stored TEXT value as ``str``, each byte that is not UTF-8 escaped (``\\xff``): the
    ``text_factory`` of ``db check`` and ``db merge``'s checks, which must read a file such
    bytes are in to name them (the readers keep sqlite3's faster strict decoding, and a value
    that is not UTF-8 is one ``Error:`` line there: the CLI translates
    :data:`autoselect.text.SQLITE_NOT_UTF8`). autoselect never stores such a value (text is
    checked where it enters); only another program writing the file can."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("utf-8", "backslashreplace")


def check_connection(conn: sqlite3.Connection, path: Path) -> int:
    """Validate an open connection: readable, not too new, ours. Returns ``user_version``."""
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as e:
        cause = wal_directory_problem(path)
        if cause:
            raise DatabaseNotReadable(cause) from None
        raise NotADatabase(
            f"{path} is not a readable SQLite database ({e}); pass --db with the path of an autoselect results database"
        ) from None
    refuse_too_new(path, version)
    if version == 0 and names:
        raise ForeignDatabase(
            f"{path} is an SQLite database but not an autoselect one (tables: {', '.join(sorted(names))}); "
            "pass --db with another path"
        )
    required = {t for t, since in TABLES.items() if since <= version}
    if version > 0 and not required <= names:
        missing = ", ".join(sorted(required - names))
        raise ForeignDatabase(
            f"{path} claims autoselect schema {version} but lacks tables {missing}; pass --db with another path"
        )
    return version
