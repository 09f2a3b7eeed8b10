"""The front of the app: a request answered before is answered again from the event loop.

A pure ASGI layer in front of the FastAPI app (no middleware stack, no parameter parsing). Every
answer of this read-only API depends only on the request, the database and (for a recommendation)
the model's files, so the body of a 200 answer is kept under the request as it arrived (path and
raw query string) while they are unchanged (:class:`~autoselect.fleet.service.answers.AnswerCache`,
the service's one cache): the next identical request is a few ``stat`` calls, a dictionary lookup
and a write. Everything else (a request not answered before, an error, another method) goes to the
app, which validates it; a query string longer than any parameter needs, or one not answered
before whose text is not UTF-8 (Starlette would read it as U+FFFD), is refused here, before
anything parses it. A handler names the files its answer was computed from in the request's scope
(:data:`FILES`), and the front keeps them with the answer.

When the service has a bearer token (``serve --token-file``), the front asks for it first, before
the kept answers: a request to any route but :data:`OPEN_ROUTES` without the right token gets
the one 401 answer whatever it presented, so a kept answer never reaches a client that could not
have asked for it (:mod:`autoselect.bearer`: compared in constant time, never logged or echoed).
"""

from __future__ import annotations

import asyncio
import json

from autoselect.bearer import HEADER, SCHEME, presented_token, token_matches
from autoselect.errors import UserError
from autoselect.fleet.service import log
from autoselect.fleet.service.answers import AnswerCache
from autoselect.fleet.service.app import MAX_QUERY
from autoselect.fleet.service.descriptors import at_start
from autoselect.text import check_query

#: the methods whose 200 answers are kept (HEAD is answered like GET; the server drops its body)
READS = frozenset({"GET", "HEAD"})
_TOO_LONG = json.dumps({"error": f"query string longer than {MAX_QUERY} bytes"}, separators=(",", ":")).encode()
#: Routes answered without the bearer token: liveness probes carry none, and it tells nothing of the data.
OPEN_ROUTES = frozenset({"/healthz"})
#: The one answer to a request without the right token (the same whatever was presented).
UNAUTHORIZED = "this service needs a bearer token: send `Authorization: Bearer <token>` (autoselect launch --token-file)"
_UNAUTHORIZED = json.dumps({"error": UNAUTHORIZED}, separators=(",", ":")).encode()
_HEADER = HEADER.lower().encode()
#: The scope key under which a handler leaves (files, their identity) of the answer it computed.
FILES = "autoselect.files"


def _start(status: int, body: bytes, extra: tuple = ()) -> dict:
    return {"type": "http.response.start", "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)), *extra]}


def _presented(scope) -> str | None:
    """The bearer token of the request's ``Authorization`` header (the first one), or None."""
    for name, value in scope["headers"]:
        if name == _HEADER:
            return presented_token(value.decode("latin-1"))
    return None


class Front:
    """The ASGI application ``serve`` runs: kept answers first, then ``app`` (the FastAPI app)."""

    def __init__(self, app, cache: AnswerCache, *, token: str | None = None):
        self.app = app
        self.cache = cache
        self.token = token
        #: requests answered from the kept answers, and all requests (the log's line at the end)
        self.kept = self.requests = 0

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":  # lifespan: the app's own, once the loop's errors are serve's to word
            if scope["type"] == "lifespan":
                at_start(asyncio.get_running_loop())
                send = self._saying_the_end(send)
            await self.app(scope, receive, send)
            return
        self.requests += 1
        if self.token is not None and scope["path"] not in OPEN_ROUTES \
                and not token_matches(_presented(scope), self.token):
            await send(_start(401, _UNAUTHORIZED, ((b"www-authenticate", SCHEME.encode()),)))
            await send({"type": "http.response.body", "body": _UNAUTHORIZED})
            return
        query = scope["query_string"]
        if len(query) > MAX_QUERY:
            await send(_start(414, _TOO_LONG))
            await send({"type": "http.response.body", "body": _TOO_LONG})
            return
        if scope["method"] not in READS:
            await self.app(scope, receive, send)
            return
        request = (scope["path"], query)
        body, state = self.cache.get(request)
        if body is not None:
            self.kept += 1
            await send(_start(200, body))
            await send({"type": "http.response.body", "body": body})
            return
        try:  # a new request: text that is not UTF-8 is refused before anything reads it (never kept)
            check_query(query.decode("latin-1"))
        except UserError as e:
            body = json.dumps({"error": str(e)}, separators=(",", ":")).encode()
            await send(_start(400, body))
            await send({"type": "http.response.body", "body": body})
            return
        if scope["method"] == "GET":  # a HEAD answer's body may be left out: keep GET's only
            send = _Keep(send, self.cache, request, state, scope)
        await self.app(scope, receive, send)


    def _saying_the_end(self, send):
        """``send`` of the lifespan, which says in the log, as the server stops, how many requests
        it answered and how many of them from the kept answers (whether the front did its work)."""

        async def lifespan_send(message) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                log.write(f"serve: stopped after {self.requests} requests, {self.kept} answered from the kept "
                          "answers")
            await send(message)

        return lifespan_send


class _Keep:
    """``send`` for a request not answered before: passes every message on and keeps the body
    of a 200 answer sent in one piece (every answer of the API is one JSON body), with the files
    the handler named in the scope (:data:`FILES`)."""

    __slots__ = ("send", "cache", "request", "state", "scope", "ok")

    def __init__(self, send, cache: AnswerCache, request: tuple, state: tuple, scope):
        self.send, self.cache, self.request, self.state, self.scope = send, cache, request, state, scope
        self.ok = False

    async def __call__(self, message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.ok = message["status"] == 200
        elif kind == "http.response.body" and self.ok and not message.get("more_body", False):
            files, identity = self.scope.get(FILES, ((), ()))
            self.cache.put(self.request, self.state, bytes(message.get("body", b"")), files, identity)
        await self.send(message)
