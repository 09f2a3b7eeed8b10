"""The selector's answer on this machine: the local database, else the reference, else none.

The database is only read (``mode=ro``), and opened once: by the selector, for the answer
(:func:`local_answer`); a missing or unreadable file is said in :attr:`DatabaseState.text` and the
answer comes from the reference or is vLLM's default.
Only the pick path of :func:`autoselect.launch.plan_launch` needs the database and the
selector; the package loads this module on first use (``_LAZY`` in
``autoselect/launch/__init__.py``), so a line that keeps its own backend, or runs on vLLM's CPU
platform, imports neither.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, NamedTuple

from autoselect.errors import UnknownHostClass, UserError
from autoselect.reference import is_reference_class
from autoselect.selector import recommend_for, target_host
from db import default_path
from db.errors import (DatabaseNeedsUpgrade, DatabaseNotFound, DatabaseNotReadable, DatabaseTooNew, ForeignDatabase,
                       NotADatabase)
from db.queries import connect_readonly

#: What opening a file as the results database refuses (db.schema's checks, db.queries.connect_readonly):
#: the file cannot be read as one. Reading it once open fails otherwise (DatabaseDamaged, DatabaseLocked).
UNREADABLE = (DatabaseNotFound, NotADatabase, ForeignDatabase, DatabaseTooNew, DatabaseNeedsUpgrade,
              DatabaseNotReadable)


class DatabaseState(NamedTuple):
    """Whether the results database can be read, in words for the line (a NamedTuple: see
    :class:`autoselect.launch.line.LaunchLine`)."""

    path: Path
    readable: bool
    text: str  # "the database P", "no database at P", "the database P is unreadable (...)"


class LocalAnswer(NamedTuple):
    """The answer on this machine and the database's state; ``answer`` None: the host class asked
    for is unknown without a readable database (``unknown`` says so in the selector's words)."""

    database: DatabaseState
    answer: dict | None
    unknown: str | None = None


def _path(db_path: str | os.PathLike | None) -> Path:
    return Path(db_path) if db_path is not None else default_path()


def _unreadable(path: Path, e: Exception) -> DatabaseState:
    return DatabaseState(path, False, f"the database {path} is unreadable ({str(e).rstrip('.')})")


def database_state(db_path: str | os.PathLike | None) -> DatabaseState:
    """Open the database read-only once, to say whether it can be read (never creates it): for a
    lookup before any answer (:func:`class_arch`); an answer says it itself (:func:`local_answer`)."""
    path = _path(db_path)
    if not path.exists():
        return DatabaseState(path, False, f"no database at {path}")
    try:
        connect_readonly(path).close()
    except UserError as e:
        return _unreadable(path, e)
    return DatabaseState(path, True, f"the database {path}")


def local_answer(model: str, db_path: str | os.PathLike | None, **kw) -> LocalAnswer:
    """The ``recommend`` document for ``model`` from the database at ``db_path``, or without it when
    it is missing or cannot be read as a results database (said in the state, never an error).

    The selector opens the file itself, once: no separate look first. ``kw`` go to
    :func:`autoselect.selector.recommend_for`.

    :raises UnknownHostClass: a host class the readable database does not hold.
    """
    path = _path(db_path)
    if path.exists():
        try:
            return LocalAnswer(DatabaseState(path, True, f"the database {path}"),
                               recommend_for(model, db_path=path, **kw).to_dict())
        except UNREADABLE as e:  # raised while opening it, before anything was read
            state = _unreadable(path, e)
    else:
        state = DatabaseState(path, False, f"no database at {path}")
    try:
        return LocalAnswer(state, recommend_for(model, db_path=path, read_db=False, **kw).to_dict())
    except UnknownHostClass as e:
        return LocalAnswer(state, None, str(e).split(";")[0])


def local_source(answer: Mapping[str, Any], db: DatabaseState) -> str:
    """Where a local answer's numbers come from, in words."""
    reference = answer.get("reference")
    if isinstance(reference, dict):
        where = "" if db.readable else f"; {db.text}"
        return f"NVIDIA's published reference (class {reference.get('host_class')}){where}"
    used = answer.get("data_used") or {}
    if answer.get("confidence") == "none" or not used.get("results"):
        return f"no measurement of this host class and shape in {db.text.removeprefix('the database ')}" \
            if db.readable else db.text
    return f"{db.text} (host class {used.get('host_class')}, {used.get('results')} results)"


def class_arch(host_class: str, db: DatabaseState) -> str | None:
    """The GPU arch of a host class: a reference class's system, else the database's newest machine
    of the class (None: the database cannot be read)."""
    if is_reference_class(host_class):
        return target_host(None, db.path, host_class).gpu_arch
    if not db.readable:
        return None
    conn = connect_readonly(db.path)
    try:
        return target_host(conn, db.path, host_class).gpu_arch
    finally:
        conn.close()
