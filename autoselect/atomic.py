"""Replacing a file all at once: written beside its name, renamed over it only when complete.

``db export -o`` and ``fleet deploy --out`` both write files a user may already have (an older
export, an installed unit); a full disk or an interrupted write must leave that file as it was,
never half of the new one. Stdlib only.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


@contextmanager
def replacing(path: Path, *, mode: int | None = None, newline: str | None = None) -> Iterator[IO[str]]:
    """A text stream onto a temporary file beside ``path``, renamed over ``path`` when the block
    returns and removed when it raises. Any OS error propagates (the caller words it).

    :param mode: the permission bits of the new file; default: the old file's, else what a new
        file gets under the process umask.
    """
    path = Path(path)
    if mode is None:
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(fd, "w", newline=newline) as f:
            yield f
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
