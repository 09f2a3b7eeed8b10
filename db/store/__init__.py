"""The results store's write side: schema migrations, runs, results, import and merge.

Writes go through sqlite-utils on a connection this package configures: WAL journal (readers
never block the writer), foreign keys on, a 30 s busy timeout, and every write in its own
``BEGIN IMMEDIATE`` transaction so that concurrent writers queue instead of failing and a
killed writer leaves whole rows only. Reads for the fast commands live in :mod:`db.queries`.

* :mod:`~db.store.writer` — :class:`Store`, composed of :mod:`~db.store.base` (opening,
  transactions, migrations, the shared row writers), :mod:`~db.store.runs` (:class:`RunHandle`,
  begin / finish / drop a run), :mod:`~db.store.results` (add a measured result) and
  :mod:`~db.store.importing` (:class:`ImportSummary`, idempotent imports);
* :mod:`~db.store.files` — :func:`import_file`, :func:`merge_into`, :func:`upgrade`.
"""

from db.store.files import import_file, merge_into, upgrade
from db.store.importing import IMPORT_BATCH, ImportSummary
from db.store.runs import RunHandle
from db.store.writer import Store

__all__ = ["IMPORT_BATCH", "ImportSummary", "RunHandle", "Store", "import_file", "merge_into", "upgrade"]
