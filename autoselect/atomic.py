"""Writing where a user said: replacing a file all at once, and the directory files go into.

``db export -o``, ``fleet deploy --out``, ``report``'s page, ``launch --decision-json``, the bridge's
cache of a vLLM's paths and a worker's exit status all replace files someone may read at any
moment, or already has (an older export, an installed unit): a full disk, an interrupted write or
a crash must leave the file as it was, never half of the new one. :func:`replacing` is the one
way they do it. A file an output option names is checked once (:func:`check_output_file`): never
the database or its side files, a model's files or a token file (:class:`Protected`), and every
OS error on the way is one line. ``report --out`` and ``fleet deploy --out`` name a directory:
:func:`output_directory` checks it once, turning every OS error (a name longer than the file
system allows, a component that is a file, no permission) into the caller's one-line error
before anything is written. Stdlib only.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, NamedTuple


@contextmanager
def replacing(path: Path, *, mode: int | None = None, newline: str | None = None,
              durable: bool = True) -> Iterator[IO[str]]:
    """A text stream onto a temporary file beside ``path``, renamed over ``path`` when the block
    returns and removed when it raises. Any OS error propagates (the caller words it).

    :param mode: the permission bits of the new file; default: the old file's, else what a new
        file gets under the process umask.
    :param durable: flush the new file to disk before the rename and the directory entry after
        it, so that a crash or power loss leaves the old file or the whole new one (a rename is
        atomic for readers at once, but on disk only once both are synced). False for a file only
        running processes read (a worker's exit status), where the two fsyncs buy nothing.
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
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        sync_directory(path.parent)


def sync_directory(directory: Path) -> None:
    """fsync ``directory``, so that a rename or a new entry in it survives a crash. Where a
    directory cannot be opened or synced (Windows; some network file systems refuse with EINVAL),
    the file's own data was synced already: nothing more can be done, so nothing is raised."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


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


#: The files SQLite keeps beside a database, the database itself first: an output never replaces one.
DATABASE_FILES = ("", "-wal", "-shm", "-journal")
#: What a temporary name adds to a file's own (``.NAME.XXXXXXXX.partial``, :func:`replacing`).
_TEMPORARY_EXTRA = len("..12345678.partial")


class Protected(NamedTuple):
    """A path no output may replace: ``what`` it is, and whose loss writing it would be."""

    path: str | os.PathLike
    what: str  # "the database itself", "the database's -wal file", "a file of the model's directory"
    owner: str  # "the database", "the model", "the token"
    tree: bool = False  # a directory: no file inside it either


def database_files(db_path: str | os.PathLike) -> list[Protected]:
    """The database and its side files as :class:`Protected` paths."""
    return [Protected(f"{os.fspath(db_path)}{suffix}",
                      "the database itself" if not suffix else f"the database's {suffix} file", "the database")
            for suffix in DATABASE_FILES]


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_output_file(path: str | os.PathLike, *, option: str, error: type[Exception],
                      protected: Iterable[Protected] = ()) -> Path:
    """``path`` (symbolic links resolved) when an output may be written there: the one check of every
    option that names a file to write (``db export -o``, ``launch --decision-json``).

    :param protected: what must never be replaced (:func:`database_files`, a model's directory, a
        token file): the same file, through any link, or a file inside a protected directory.
    :raises error: naming ``option``: a protected path, a directory, a folder that does not exist or
        cannot be written, a name longer than the file system takes; any OS error on the way worded
        as one line. Nothing is created.
    """
    shown = os.fspath(path)
    try:
        target = os.path.realpath(path)
        for p in protected:
            real = os.path.realpath(p.path)
            inside = p.tree and target.startswith(real.rstrip(os.sep) + os.sep)
            if inside or target == real or _same_file(target, real):
                raise error(f"{option} {shown} is {p.what}; writing it would destroy {p.owner}, pass another file")
        if os.path.isdir(target):
            raise error(f"{option} {shown} is a directory; pass a file name")
        folder = os.path.dirname(target) or "."
        if not os.path.isdir(folder):
            raise error(f"cannot write {shown}: no directory {folder}; create it or pass another {option}")
        regular = not os.path.exists(target) or stat.S_ISREG(os.stat(target).st_mode)
        if regular and len(os.fsencode(os.path.basename(target))) + _TEMPORARY_EXTRA > os.pathconf(folder,
                                                                                                   "PC_NAME_MAX"):
            raise error(f"cannot write {shown}: its name is longer than the file system takes; pass a shorter "
                        f"{option}")
        if regular and not os.access(folder, os.W_OK):
            raise error(f"cannot write {shown}: directory {folder} is not writable (Permission denied); pass "
                        f"another {option}")
    except OSError as e:  # ENAMETOOLONG, ELOOP, EACCES ... from realpath, stat or pathconf
        raise error(f"cannot write {shown} ({e.strerror or e}); pass another {option}") from None
    return Path(target)


@contextmanager
def output_file(target: Path, *, option: str, error: type[Exception]) -> Iterator[IO[str]]:
    """A text stream onto ``target`` (from :func:`check_output_file`), committed only if the block
    succeeds: a regular file (or a new one) is written beside itself and renamed over the old one,
    so a failure leaves the old file as it was; a device or a FIFO is written in place, never
    replaced. Any OS error is ``error`` naming ``option``, and the partial file is removed."""
    try:
        try:
            st = os.stat(target)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            with open(target, "w", newline="") as f:
                yield f
            return
        with replacing(target, newline="") as f:
            yield f
    except OSError as e:
        raise error(f"cannot write {target} ({e.strerror or e}); pass another {option}") from None
