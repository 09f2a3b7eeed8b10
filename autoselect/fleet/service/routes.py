"""The read-only API's handlers and the FastAPI app assembled from them.

This module imports FastAPI at its top: only :func:`autoselect.fleet.service.app.create_app`
imports it, once FastAPI is known to be installed. Every handler is a method of :class:`Api`,
which holds what the app answers from (:class:`~autoselect.fleet.service.app.Served`). The
handlers compute; the front keeps their 200 answers (:mod:`~autoselect.fleet.service.front`,
the service's one cache), with the model files a recommendation was computed from.
"""

from __future__ import annotations

import json
import os
import sqlite3
from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from autoselect import __version__
from autoselect.errors import UserError
from autoselect.fleet.drift import analyze_at
from autoselect.fleet.service.answers import identity
from autoselect.fleet.service.descriptors import EXHAUSTED, fd_exhausted
from autoselect.fleet.service.app import NOT_FOUND, UNKNOWN_MODEL, UNREADABLE_DATABASE, HostClassNeeded, Served
from autoselect.fleet.service.front import FILES, Front
from autoselect.fleet.service.params import read_params
from autoselect.model import ModelConfigNotFound, config_files
from autoselect.options import MIN_SLOWDOWN, NOISE_K
from autoselect.selector import recommend_for
from autoselect.text import SQLITE_NOT_UTF8
from db.queries import connect_readonly, host_classes

#: route -> the :class:`Api` method answering it (GET, and HEAD answered the same way)
ROUTES = {"/healthz": "healthz", "/v1/recommend": "recommend", "/v1/hosts": "hosts", "/v1/drift": "drift"}


def assemble(served: Served) -> Front:
    """The app: the read-only routes of :class:`Api` and their error handlers, behind the
    :class:`~autoselect.fleet.service.front.Front` that asks for the bearer token, bounds the
    query string's length and answers a request answered before."""
    api = Api(served)
    app = FastAPI(title="autoselect", version=__version__, docs_url=None, redoc_url=None,
                  description="Read-only recommendations of vLLM's --all2all-backend from measured data.")
    app.add_exception_handler(UserError, api.user_error)
    app.add_exception_handler(StarletteHTTPException, api.http_error)
    app.add_exception_handler(RequestValidationError, api.bad_params)
    app.add_exception_handler(sqlite3.DatabaseError, api.damaged)
    app.add_exception_handler(OSError, api.out_of_descriptors)
    for route, name in ROUTES.items():
        app.api_route(route, methods=["GET", "HEAD"])(getattr(api, name))
    return Front(app, served.cache, token=served.token)


class Api:
    """The handlers: errors in one shape (``{"error": ...}``, scrubbed), and the routes."""

    def __init__(self, served: Served):
        self.served = served
        self.path = served.path
        self.scrub = served.scrub

    async def answer(self, compute: Callable[[], Any]) -> Response:
        """The JSON answer ``compute`` returns, computed in the thread pool (blocking SQLite and the
        selector never run on the event loop) and scrubbed; the front keeps it."""
        body = await run_in_threadpool(lambda: self.scrub(json.dumps(compute())).encode())
        return Response(content=body, media_type="application/json")

    # -- errors ------------------------------------------------------------------------------------

    async def user_error(self, request: Request, exc: UserError) -> JSONResponse:
        """A mistake in the request: 404 for something that is not here (one sentence for any model),
        else 400; the server's database no longer readable as one: 503, as /healthz says."""
        if isinstance(exc, ModelConfigNotFound):
            return JSONResponse({"error": UNKNOWN_MODEL}, status_code=404)
        if isinstance(exc, UNREADABLE_DATABASE):
            return self.unavailable(f"the service cannot read its database: {exc}")
        return JSONResponse({"error": self.scrub(str(exc))}, status_code=404 if isinstance(exc, NOT_FOUND) else 400)

    def unavailable(self, sentence: str) -> JSONResponse:
        """503: the database cannot be read now (the server answers from nothing else)."""
        return JSONResponse({"error": self.scrub(sentence)}, status_code=503)

    async def http_error(self, request: Request, exc: StarletteHTTPException) -> JSONResponse:
        """Starlette's own errors (404 path, 405 method) in the same shape."""
        return JSONResponse({"error": self.scrub(str(exc.detail))}, status_code=exc.status_code, headers=exc.headers)

    async def bad_params(self, request: Request, exc: RequestValidationError) -> JSONResponse:
        """A parameter of the wrong type: 400, ``name: what is wrong`` for each."""
        parts = []
        for e in exc.errors():
            where = ".".join(str(x) for x in e.get("loc", ())[1:]) or "request"
            parts.append(f"{where}: {e.get('msg', 'invalid')}")
        return JSONResponse({"error": self.scrub("; ".join(parts))}, status_code=400)

    async def damaged(self, request: Request, exc: sqlite3.DatabaseError) -> JSONResponse:
        """The database failed while it was read (damaged, replaced, unreadable, text that is not
        UTF-8): 503 with SQLite's reason, as /healthz says of a database it cannot read. A mistake
        in autoselect's own SQL (ProgrammingError, IntegrityError) stays a server error."""
        if isinstance(exc, (sqlite3.ProgrammingError, sqlite3.IntegrityError)):
            raise exc
        if SQLITE_NOT_UTF8 in str(exc):
            return self.unavailable("the database holds text that is not UTF-8; its operator can find the rows with "
                                    "`autoselect db check`")
        return self.unavailable(f"the service cannot read its database: {str(exc).rstrip('.')}; its operator can see "
                                "why with `autoselect db check`")

    async def out_of_descriptors(self, request: Request, exc: OSError) -> JSONResponse:
        """The process ran out of file descriptors while it computed an answer: 503, and the log's one
        warning (:func:`~autoselect.fleet.service.descriptors.fd_exhausted`). Any other OSError is a bug."""
        if exc.errno not in EXHAUSTED:
            raise exc
        fd_exhausted(f"computing an answer failed: {exc.strerror}")
        return JSONResponse({"error": "the service is out of file descriptors; try again"}, status_code=503)

    # -- routes ------------------------------------------------------------------------------------

    async def healthz(self):
        """Liveness: the database can be opened and read (re-checked whenever its files change);
        503 with the reason when it cannot."""
        try:
            return await self.answer(self._health)
        except (UserError, sqlite3.DatabaseError) as e:
            return JSONResponse({"status": "error", "db": self.path.name, "error": self.scrub(str(e))},
                                status_code=503)

    def _health(self) -> dict:
        c = connect_readonly(self.path)
        try:
            version = c.execute("PRAGMA user_version").fetchone()[0]
        finally:
            c.close()
        return {"status": "ok", "db": self.path.name, "schema_version": version}

    async def recommend(self, request: Request, model: str, host_class: str | None = None, workload: str | None = None,
                        tokens: str | None = None, dp: str | None = None, tp: str | None = None,
                        world_size: str | None = None, gpu_arch: str | None = None, vllm_version: str | None = None,
                        concurrency: str | None = None, max_num_batched_tokens: str | None = None,
                        max_workspace_gib: str | None = None):
        """The same JSON as ``autoselect recommend --format json``, for a host class of the database
        (or a reference class): without ``host_class``, the database's one class, never the server."""
        # every parameter arrives as text and goes through the command line's grammar (params.py)
        kw = read_params({"host_class": host_class, "workload": workload, "tokens": tokens, "dp": dp, "tp": tp,
                          "world_size": world_size, "gpu_arch": gpu_arch, "vllm_version": vllm_version,
                          "concurrency": concurrency, "max_num_batched_tokens": max_num_batched_tokens,
                          "max_workspace_gib": max_workspace_gib})

        def compute() -> dict:
            if not os.path.exists(self.path):
                connect_readonly(self.path)  # raises: a database gone since the start is 503, not "no measurements"
            files = config_files(model, self.served.source)
            request.scope[FILES] = (files, identity(files))  # before reading them: a change during is seen next time
            if kw["host_class"] is None:
                kw["host_class"] = self._only_class()
            return recommend_for(model, db_path=self.path, model_source=self.served.source, **kw).to_dict()

        return await self.answer(compute)

    def _only_class(self) -> str:
        """The database's one measured host class: what a request without ``host_class`` is about
        (the server's own machine is never described)."""
        c = connect_readonly(self.path)
        try:
            known = [h["host_class"] for h in host_classes(c)]
        finally:
            c.close()
        if len(known) == 1:
            return known[0]
        if not known:
            raise HostClassNeeded("this service's database holds no measured host class: name a published "
                                  "reference class with host_class=ref-... (`autoselect hosts` lists them)")
        shown = ", ".join(known[:8]) + (f" and {len(known) - 8} more" if len(known) > 8 else "")
        raise HostClassNeeded(f"this service answers for the host classes of its database ({shown}): name one "
                              "with host_class= (/v1/hosts lists them)")

    async def hosts(self):
        """One row per host class in the database: its GPUs, how many machines, when last seen."""
        return await self.answer(self._hosts)

    def _hosts(self) -> dict:
        c = connect_readonly(self.path)
        try:
            return {"host_classes": host_classes(c)}
        finally:
            c.close()

    async def drift(self, host_class: str | None = None, min_slowdown: str | None = None,
                    noise_k: str | None = None):
        """``autoselect fleet drift --format json``."""
        given = read_params({"min_slowdown": min_slowdown, "noise_k": noise_k})
        min_slowdown = MIN_SLOWDOWN if given["min_slowdown"] is None else given["min_slowdown"]
        noise_k = NOISE_K if given["noise_k"] is None else given["noise_k"]
        return await self.answer(lambda: analyze_at(self.path, host_class=host_class,
                                                    min_slowdown=min_slowdown, noise_k=noise_k).to_dict())
