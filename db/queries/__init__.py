"""Read-only queries on the results store, with the standard library's ``sqlite3`` only.

The fast commands (``recommend``, ``explain``, ``db info``, ...) read through this package;
it never writes, never imports sqlite-utils, numpy or torch. Runs that a dead writer left
``running`` are *reported* as stale here; only :class:`db.store.Store` marks them.

* :mod:`~db.queries.connect` — :func:`connect_readonly` (``mode=ro``; a missing, foreign,
  too-new or not yet upgraded file is refused);
* :mod:`~db.queries.results` — :class:`StoredResult`, :func:`results_for`, :func:`all_results`,
  :func:`samples_for`;
* :mod:`~db.queries.hosts` — :func:`host_classes`, :func:`newest_host`, :func:`host`;
* :mod:`~db.queries.run_info` — :func:`runs`, :func:`stale_reason`, :func:`stale_runs`;
* :mod:`~db.queries.info` — what ``db info`` and ``db check`` show (:func:`info`, :func:`check`,
  :func:`schema_problems`, :func:`info_at`, :func:`check_at`);
* :mod:`~db.queries.skipped` — :func:`warn_skipped`: every reader skips rows that break the
  schema (:mod:`db.fields`) and says so.
"""

from db.queries.connect import connect_readonly
from db.queries.info import check, check_at, info, info_at, schema_problems
from db.queries.hosts import host, host_classes, newest_host
from db.queries.results import SUMMARY_ATTRS, StoredResult, all_results, results_for, samples_for
from db.queries.run_info import STALE_AFTER_S, runs, stale_reason, stale_runs
from db.queries.skipped import warn_skipped

__all__ = [
    "STALE_AFTER_S", "SUMMARY_ATTRS", "StoredResult", "all_results", "check", "check_at", "connect_readonly", "host",
    "host_classes", "info", "info_at", "newest_host", "results_for", "runs", "samples_for", "schema_problems",
    "stale_reason", "stale_runs", "warn_skipped",
]
