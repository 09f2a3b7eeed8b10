"""The selector's answer on this machine: the local database, else the reference, else none.

The database is only read (``mode=ro``); a missing or unreadable file is said in
:attr:`DatabaseState.text` and the answer comes from the reference or is vLLM's default.
Only the pick path of :func:`autoselect.launch.plan_launch` needs the database and the
selector; the package loads this module on first use (``_LAZY`` in
``autoselect/launch/__init__.py``), so a line that keeps its own backend, or runs on vLLM's CPU
platform, imports neither.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, NamedTuple

from autoselect.errors import UserError
from autoselect.reference import is_reference_class
from autoselect.selector import recommend_for, target_host
from db import default_path
from db.queries import connect_readonly


class DatabaseState(NamedTuple):
    """Whether the results database can be read, in words for the line (a NamedTuple: see
    :class:`autoselect.launch.line.LaunchLine`)."""

    path: Path
    readable: bool
    text: str  # "the database P", "no database at P", "the database P is unreadable (...)"


def database_state(db_path: str | os.PathLike | None) -> DatabaseState:
    """Open the database read-only once, to say whether the answer can use it (never creates it)."""
    path = Path(db_path) if db_path is not None else default_path()
    if not path.exists():
        return DatabaseState(path, False, f"no database at {path}")
    try:
        connect_readonly(path).close()
    except UserError as e:
        return DatabaseState(path, False, f"the database {path} is unreadable ({str(e).rstrip('.')})")
    return DatabaseState(path, True, f"the database {path}")




def local_answer(model: str, db: DatabaseState, **kw) -> dict:
    """The ``recommend`` document for ``model`` from ``db`` (or without it, when it cannot be read)."""
    return recommend_for(model, db_path=db.path, read_db=db.readable, **kw).to_dict()


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
