"""The process's file descriptors: how many connections they leave room for, and running out of
them said once per episode, never as a traceback per connection.

When the process has no descriptor left, asyncio logs a traceback for every accept it retries
(hundreds a second) and every answer that must open a file fails. The connections kept stay below
:func:`connection_limit` (:mod:`~autoselect.fleet.service.connections` makes room), and each place
running out still shows (the event loop's accept, an answer being computed, the connections kept)
calls :func:`fd_exhausted`, which says it once in the service's log; an episode ends after
:data:`QUIET_S` without it. Nothing here imports uvicorn: the front calls :func:`at_start` when
the server starts.
"""

from __future__ import annotations

import errno
import os
import resource
import time

from autoselect.fleet.service import log

#: the errors that mean the process (or the system) is out of descriptors or buffers
EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: seconds without running out of descriptors that end an episode (the next one is said again)
QUIET_S = 60.0
#: descriptors kept free for what is not a connection: the database and its WAL files per
#: computed answer, the thread pool, the log
RESERVED_FDS = 128


def raise_fd_limit() -> int:
    """Raise the process's soft descriptor limit to its hard limit (what an unprivileged process
    may); returns the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = min(hard, 1 << 20) if hard != resource.RLIM_INFINITY else max(soft, 1 << 16)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


def open_fds() -> int | None:
    """How many descriptors this process has open now (None where /proc does not say)."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # listdir's own descriptor
    except OSError:
        return None


def connection_limit() -> int:
    """The open connections the descriptor limit leaves room for: of what the descriptors open at
    the start (:func:`at_start`) leave, half (at most :data:`RESERVED_FDS`) stays free for the work
    the connections ask for."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return 1 << 20
    in_use = _Start.in_use if _Start.in_use is not None else min(64, soft // 4)
    left = soft - in_use
    return max(8, left - min(RESERVED_FDS, left // 2))


class _Exhaustion:
    """Whether the log has said, in this episode, that descriptors ran out, and when they last did:
    an episode ends after :data:`QUIET_S` without running out (one line per episode)."""

    said = False
    last = 0.0


def fd_exhausted(detail: str) -> None:
    """Say once per episode that the process ran out of descriptors (``detail``: where it showed)."""
    _Exhaustion.last = time.monotonic()
    if _Exhaustion.said:
        return
    _Exhaustion.said = True
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    log.warning(f"serve is out of file descriptors ({detail}; the limit is {soft}): the connections that have "
                "waited longest for a request are closed to accept new ones; raise `ulimit -n` to keep more open")


def end_of_episode() -> None:
    """End the episode once :data:`QUIET_S` passed without running out (called each second)."""
    if _Exhaustion.said and time.monotonic() - _Exhaustion.last > QUIET_S:
        _Exhaustion.said = False


def on_loop_error(loop, context: dict) -> None:
    """The event loop's exception handler: running out of descriptors (accept failing with EMFILE)
    is the one warning of :func:`fd_exhausted`, not a traceback each time; anything else is
    logged as asyncio logs it."""
    exc = context.get("exception")
    if isinstance(exc, OSError) and exc.errno in EXHAUSTED:
        fd_exhausted(f"accepting a connection failed: {exc.strerror}")
        return
    callback = getattr(context.get("handle"), "_callback", None)
    if isinstance(exc, ValueError) and getattr(callback, "__name__", "") == "_start_serving":
        return  # asyncio's retry of such an accept, run after the server closed its socket: nothing failed
    loop.default_exception_handler(context)


class _Start:
    """The descriptors open when the server started (before any connection)."""

    in_use: int | None = None


def at_start(loop) -> None:
    """When the server starts: make :func:`on_loop_error` its event loop's exception handler, and
    count the descriptors open before any connection."""
    loop.set_exception_handler(on_loop_error)
    _Start.in_use = open_fds()
