"""The results store: one SQLite file, written through sqlite-utils, read with sqlite3.

This is the only package that contains SQL.
"""

from __future__ import annotations

import os
from pathlib import Path


def default_path() -> Path:
    """``$AUTOSELECT_DB``, else ``<user data dir>/autoselect/results.db``."""
    env = os.environ.get("AUTOSELECT_DB")
    if env:
        return Path(env)
    from platformdirs import user_data_dir

    return Path(user_data_dir("autoselect", appauthor=False)) / "results.db"
