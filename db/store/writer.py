""":class:`Store`: a results database opened for writing, its runs, results and imports together."""

from __future__ import annotations

from db.store.importing import ImportWrites
from db.store.results import ResultWrites
from db.store.runs import RunWrites


class Store(RunWrites, ResultWrites, ImportWrites):
    """A results database opened for writing.

    Opening validates the file (not a database, a foreign database or a newer schema is
    refused before a byte changes), applies pending migrations, and marks runs left
    ``running`` by writers that are gone as ``interrupted``. The methods come from one module
    per concern: :mod:`~db.store.base` (connection, transactions), :mod:`~db.store.runs`,
    :mod:`~db.store.results`, :mod:`~db.store.importing`.
    """
