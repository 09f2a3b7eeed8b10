"""The server's connections: each waits a bounded time for its next request, and running out of
file descriptors is one warning, not a traceback per connection.

uvicorn closes a keep-alive connection only once it has answered a request on it
(``timeout_keep_alive``), and any byte the client sends stops that timer: a connection that never
sends a request, sends half of one, or a byte every few seconds stays open for ever, and a few
hundred of them hold every file descriptor the process may open, so nobody else is accepted (and
asyncio logs a traceback for every refused accept). :class:`GuardedProtocol`, uvicorn's own HTTP
protocol (httptools, else h11) with two rules added:

* **a deadline for every request head**: :data:`HEAD_TIMEOUT_S` from the moment the connection
  opens, and again from each answer; a connection whose next request head has not arrived whole by
  then is closed (a sweep each second: no timer is set or cancelled per request);
* **room for the next client**: when the open connections reach what the process's descriptor
  limit leaves room for (:func:`~autoselect.fleet.service.descriptors.connection_limit`), the connection that has waited longest for a
  request (none in progress) is closed as a new one arrives, and the log says so once
  (:func:`~autoselect.fleet.service.descriptors.fd_exhausted`; the loop's own "out of system
  resource" errors are said the same way).

The rules apply before the app sees anything, so they hold for every client, with or without a
bearer token.
"""

from __future__ import annotations

import weakref

from uvicorn.protocols.http.auto import AutoHTTPProtocol

from autoselect.fleet.service.descriptors import connection_limit, end_of_episode, fd_exhausted

#: seconds a connection may take to send a whole request head, from its opening or its last answer
HEAD_TIMEOUT_S = 10.0
#: how often the deadlines are checked (seconds)
SWEEP_S = 1.0


#: the servers (their uvicorn state) whose connections a sweep watches -> their connection limit
_limits: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _sweep(server_state, loop, timeout_s: float) -> None:
    """Close every connection whose request head is overdue; end a quiet exhaustion episode; run
    again in :data:`SWEEP_S`."""
    now = loop.time()
    for conn in list(server_state.connections):
        since = getattr(conn, "waiting_since", None)
        if since is not None and now - since > timeout_s and not conn.transport.is_closing():
            conn.transport.close()
    end_of_episode()
    loop.call_later(SWEEP_S, _sweep, server_state, loop, timeout_s)


class GuardedProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
    """uvicorn's HTTP protocol with a deadline for every request head and room kept for new clients."""

    #: seconds a request head may take (a subclass changes it: :func:`guarded`)
    head_timeout_s = HEAD_TIMEOUT_S
    #: the open connections allowed before the one waiting longest is closed (None: from the limit)
    max_connections: int | None = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        loop = self.loop
        #: the loop time since which the connection waits for a request head (None: one is in progress)
        self.waiting_since = loop.time()
        limit = _limits.get(self.server_state)
        if limit is None:  # the server's first connection: what it keeps, and its sweep
            limit = _limits[self.server_state] = self.max_connections or connection_limit()
            loop.call_later(SWEEP_S, _sweep, self.server_state, loop, self.head_timeout_s)
        if len(self.connections) > limit:
            self._make_room(limit)

    def _make_room(self, limit: int) -> None:
        """Close the connections that have waited longest for a request until ``limit`` remain open."""
        live = [c for c in self.connections if not c.transport.is_closing()]
        excess = len(live) - limit
        if excess <= 0:
            return
        fd_exhausted(f"{len(live)} connections open, the most it keeps is {limit}")
        idle = sorted((c for c in live if c is not self and getattr(c, "waiting_since", None) is not None),
                      key=lambda c: c.waiting_since)
        for conn in idle[:excess]:
            conn.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.waiting_since is None:
            super().data_received(data)
            return
        cycle = self.cycle
        super().data_received(data)
        if self.cycle is not cycle:  # a whole request head arrived: the app has it
            self.waiting_since = None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
            self.waiting_since = self.loop.time()


def guarded(head_timeout_s: float = HEAD_TIMEOUT_S, max_connections: int | None = None) -> type:
    """:class:`GuardedProtocol`, or a subclass with another head deadline or connection limit."""
    if head_timeout_s == HEAD_TIMEOUT_S and max_connections is None:
        return GuardedProtocol
    return type("GuardedProtocol", (GuardedProtocol,),
                {"head_timeout_s": head_timeout_s, "max_connections": max_connections})

