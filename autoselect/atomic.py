"""Writing where a user said: replacing a file all at once, and the directory files go into.

``db export -o`` and ``fleet deploy --out`` both write files a user may already have (an older
export, an installed unit); a full disk or an interrupted write must leave that file as it was,
never half of the new one. ``report --out`` and ``fleet deploy --out`` name a directory:
:func:`output_directory` checks it once, turning every OS error (a name longer than the file
system allows, a component that is a file, no permission) into the caller's one-line error
before anything is written. Stdlib only.
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
        with os.fdopen(fd, "w", newline=newline, encoding="utf-8") as f:
            yield f
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def output_directory(path: str | os.PathLike, *, what: str, error: type[Exception], create: bool) -> Path:
    """``path`` as a directory files can be written into, or ``error`` naming ``what`` (``--out``).

    :param create: make it (and its parents) when missing; else it must exist.
    :raises error: it is a file, cannot be created or is not writable; any OS error on the way,
        a name too long for the file system included, worded as one line.
    """
    out = Path(path)
    try:
        if out.exists() and not out.is_dir():
            raise error(f"{what} {out} is a file; pass a directory" + (" (it is created if missing)" if create else ""))
        if create:
            out.mkdir(parents=True, exist_ok=True)
        elif not out.is_dir():
            raise error(f"{what} {out} is not an existing directory; create it first")
        if not os.access(out, os.W_OK):
            raise error(f"{what} directory {out} is not writable; pass a writable directory")
    except OSError as e:  # ENAMETOOLONG, ENOTDIR, EACCES, ELOOP ... from stat or mkdir
        raise error(f"cannot use {what} {out} ({e.strerror or e}); pass another directory") from None
    return out
