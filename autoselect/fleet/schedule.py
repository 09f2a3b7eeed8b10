"""Periodic fleet runs in the foreground (``fleet schedule``): now, then every interval plus jitter.

For production, the rendered systemd timer, Kubernetes CronJob or Slurm job
(:mod:`autoselect.fleet.deploy`) do the waiting instead.
"""

from __future__ import annotations

import random
import time
from typing import Any, Callable, Iterator

from autoselect.errors import UserError
from autoselect.fleet.spec import BadFleetOption
from autoselect.options import BadDuration
from db.errors import (DatabaseDamaged, DatabaseNeedsUpgrade, DatabaseNotWritable, DatabaseTooNew, ForeignDatabase,
                       NotADatabase)

#: Errors about the --db file itself: raised by :func:`run_schedule` instead of retried.
DATABASE_ERRORS = (NotADatabase, ForeignDatabase, DatabaseTooNew, DatabaseNeedsUpgrade, DatabaseNotWritable,
                   DatabaseDamaged)


def schedule_delays(every_s: float, jitter_s: float, rng: random.Random) -> Iterator[float]:
    """The waits between scheduled runs: ``every_s`` plus a uniform jitter in [-jitter_s, +jitter_s]
    (never negative), so a fleet's nodes do not all re-benchmark at the same minute."""
    while True:
        yield max(0.0, every_s + rng.uniform(-jitter_s, jitter_s))


def check_schedule(every_s: float, jitter_s: float, count: int | None) -> None:
    """Raise :class:`BadDuration` / :class:`BadFleetOption` for an interval, jitter or count that cannot work."""
    if every_s <= 0:
        raise BadDuration(f"--every must be positive, got {every_s}s")
    if jitter_s < 0 or jitter_s >= every_s:
        raise BadDuration(f"--jitter must be between 0 and --every ({every_s:g}s), got {jitter_s:g}s")
    if count is not None and count < 1:
        raise BadFleetOption(f"--count must be at least 1, got {count}")


def run_schedule(run_once: Callable[[], Any], *, every_s: float, jitter_s: float = 0.0, count: int | None = None,
                 sleep: Callable[[float], None] = time.sleep, rng: random.Random | None = None,
                 on_wait: Callable[[float], None] | None = None,
                 on_error: Callable[[UserError], None] | None = None) -> list:
    """Call ``run_once`` now and then after each delay of :func:`schedule_delays`, ``count`` times
    (forever when None); returns what the calls returned. A run's :class:`UserError` (an
    unreachable cluster, say) is handed to ``on_error`` at once, kept in the list, and the loop
    goes on, except one about the database file (:data:`DATABASE_ERRORS`), which no later run
    can fix: it is raised."""
    check_schedule(every_s, jitter_s, count)
    delays = schedule_delays(every_s, jitter_s, rng or random.Random())
    out = []
    i = 0
    while count is None or i < count:
        if i:
            delay = next(delays)
            if on_wait:
                on_wait(delay)
            sleep(delay)
        out.append(_run(run_once, on_error))
        i += 1
    return out


def _run(run_once: Callable[[], Any], on_error: Callable[[UserError], None] | None) -> Any:
    """One scheduled run: its answer, or the :class:`UserError` it raised (reported at once)."""
    try:
        return run_once()
    except UserError as e:
        if isinstance(e, DATABASE_ERRORS):
            raise  # a bad --db is bad in every run: stop instead of repeating it
        if on_error:
            on_error(e)
        return e
