"""Opening the results database for reading: ``mode=ro``, refusing a missing, foreign or too-new file."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from db import default_path
from db.errors import DatabaseNeedsUpgrade, DatabaseNotFound
from db.schema import BUSY_TIMEOUT_MS, check_connection, check_path, latest_version


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
