"""The timing log: one JSON line per group start-up, point, job and close, for scripts that check a run.

Set ``$AUTOSELECT_BENCH_TIMING_LOG`` to a file and the parent appends (the store has no
columns for these):

- ``{"event": "start-up", "backend", "seconds", "reason", "startup"}``: a worker group became
  ready, ``seconds`` from spawn to ready, ``startup`` its number for this backend (1, 2 ...),
  ``reason``: why it (re)started (a start-up knob that changed, a crash, a hang, an adapter
  asking for a fresh process);
- ``{"event": "point", "backend", "dtype", "tokens", "status", "timing", "timing_note",
  "seconds", "job"}``: how each point was timed (``graph``, ``eager`` with the reason,
  ``cpu``, None when not timed) and its wall time in the group;
- ``{"event": "job", "backend", "job", "points", "seconds", "startups"}``: one job's wall
  time and the start-ups it paid;
- ``{"event": "close", "backend", "reason"}``: a group ended (closed, crashed, hung, restarted).

``perf/gpu_check.sh`` reads the point lines to fail when a row it expects replayed was eager.
"""

from __future__ import annotations

import json
import os

#: Environment variable naming the timing log file.
TIMING_LOG_ENV = "AUTOSELECT_BENCH_TIMING_LOG"


def log(event: str, **fields) -> None:
    """Append one line ``{"event": event, **fields}`` to the timing log, if one is set."""
    path = os.environ.get(TIMING_LOG_ENV)
    if not path:
        return
    with open(path, "a") as f:
        f.write(json.dumps({"event": event, **fields}) + "\n")


def log_point(done, *, dtype: str | None, job: int | None) -> None:
    """The ``point`` line of a :class:`bench.launch.protocol.PointDone`."""
    log("point", backend=done.backend, dtype=dtype, tokens=done.tokens_per_rank, status=done.status,
        timing=done.timing, timing_note=done.timing_note,
        seconds=None if done.seconds is None else round(done.seconds, 4), job=job)
