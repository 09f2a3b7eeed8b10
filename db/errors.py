"""The mistakes a user can make with a results database: one class each."""

from __future__ import annotations

from autoselect.errors import UserError


class DatabaseNotFound(UserError):
    "The results database does not exist."


class NotADatabase(UserError):
    "The file is not an SQLite database."


class ForeignDatabase(UserError):
    "The file is an SQLite database, but not an autoselect results database."


class DatabaseTooNew(UserError):
    "The database was written by a newer autoselect."


class DatabaseNeedsUpgrade(UserError):
    "The database has an older schema and a read-only command cannot upgrade it."


class DatabaseLocked(UserError):
    "Another process held the database locked for longer than the busy timeout."


class BadImportRecord(UserError):
    "A line of an import file is not a valid autoselect result or tuned-configuration record."


class ImportFormatTooNew(UserError):
    "An import file was written by a newer autoselect."


class UnknownRun(UserError):
    "A run id that is not in the database."


class ImportFileNotFound(UserError):
    "The file given to `db import` does not exist."


class OutputNotWritable(UserError):
    "An export destination that cannot be written."


class DatabaseNotWritable(UserError):
    "The database file or its directory cannot be created or written."


class DatabaseDamaged(UserError):
    "The database file is corrupt: SQLite could not read part of it."


class DatabaseNotReadable(UserError):
    "The database cannot be read where it is (a WAL database in a directory this user cannot write)."


class DropNotConfirmed(UserError):
    "`db drop-run` without --yes where nobody can be asked, or the question was answered no."


class ReservedHostClass(UserError):
    "A host, run or tuned configuration in the reserved ref- host-class namespace (the published reference: read-only)."


class RunStillRunning(UserError):
    "A destructive command aimed at a run whose writer may still be measuring."


class AmbiguousRun(UserError):
    "A run reference that is one run's id and another run's uid."
