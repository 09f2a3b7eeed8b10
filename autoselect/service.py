"""``autoselect serve``: a small read-only HTTP API over a results database (FastAPI).

Endpoints (GET only; every other method is 405):

* ``/v1/recommend?model=...&host_class=...&workload=...`` (also ``tokens``, ``dp``, ``tp``,
  ``world_size``, ``gpu_arch``, ``vllm_version``, ``concurrency``, ``max_num_batched_tokens``,
  ``max_workspace_gib``): exactly the JSON of ``autoselect recommend --format json`` — both
  call :func:`autoselect.selector.recommend_for`.
* ``/v1/hosts``: the host classes in the database.
* ``/v1/drift``: ``autoselect fleet drift --format json``.
* ``/healthz``: ``{"status": "ok", ...}`` when the database can be read.

Bad parameters get 400 with ``{"error": "..."}`` (the same sentence the CLI prints); an
unknown model or host class gets 404. The database is opened read-only per request; answers
are cached as JSON bytes per (endpoint, parameters) until the database file or its WAL
changes; a miss is computed in the thread pool, a hit is served from the event loop.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

from autoselect.errors import UserError

#: answers kept per database state
CACHE_SIZE = 256
#: environment variable carrying the database path to uvicorn workers (``--workers`` > 1)
DB_ENV = "AUTOSELECT_SERVE_DB"


class ServeUnavailable(UserError):
    "FastAPI / uvicorn are not installed."


class BadServeOption(UserError):
    "A serve option that cannot work (port, workers)."


def _not_found_errors() -> tuple[type, ...]:
    from autoselect.model import ModelConfigNotFound
    from autoselect.selector import UnknownHostClass

    return (ModelConfigNotFound, UnknownHostClass)


class AnswerCache:
    """A small LRU of JSON answers, dropped whenever the database files change."""

    def __init__(self, db_path: Path, size: int = CACHE_SIZE):
        self.db_path = db_path
        self.size = size
        self._lock = threading.Lock()
        self._state: tuple | None = None
        self._answers: OrderedDict = OrderedDict()

    def state(self) -> tuple:
        """(mtime_ns, size) of the database and its WAL: any commit changes it."""
        out = []
        for p in (self.db_path, Path(f"{self.db_path}-wal")):
            try:
                st = p.stat()
                out.append((st.st_mtime_ns, st.st_size))
            except OSError:
                out.append(None)
        return tuple(out)

    def lookup(self, key: tuple) -> tuple[Any, tuple]:
        """(the cached answer or None, the database state it must belong to)."""
        state = self.state()
        with self._lock:
            if state != self._state:
                self._answers.clear()
                self._state = state
            value = self._answers.get(key)
            if value is not None:
                self._answers.move_to_end(key)
            return value, state

    def store(self, key: tuple, state: tuple, value: Any) -> None:
        """Keep ``value`` for ``key`` unless the database changed while it was computed."""
        with self._lock:
            if state == self._state:
                self._answers[key] = value
                while len(self._answers) > self.size:
                    self._answers.popitem(last=False)

    def get(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """The cached answer for ``key``, computing (outside the lock) when absent or stale."""
        value, state = self.lookup(key)
        if value is None:
            value = compute()
            self.store(key, state, value)
        return value


def create_app(db_path: str | os.PathLike | None = None):
    """The FastAPI application serving the database at ``db_path`` (checked readable now)."""
    try:
        from fastapi import FastAPI, Request
        from fastapi.concurrency import run_in_threadpool
        from fastapi.exceptions import RequestValidationError
        from fastapi.responses import JSONResponse, Response
        from starlette.exceptions import HTTPException as StarletteHTTPException
    except ImportError:
        raise ServeUnavailable("fastapi is not installed; pip install 'autoselect[serve]'") from None

    from db import default_path
    from db.queries import connect_readonly

    path = Path(db_path) if db_path is not None else default_path()
    conn = connect_readonly(path)  # refuse a missing / foreign / too-new database before serving
    conn.close()
    cache = AnswerCache(path)
    not_found = _not_found_errors()

    app = FastAPI(title="autoselect", version=_version(), docs_url=None, redoc_url=None,
                  description="Read-only recommendations of vLLM's --all2all-backend from measured data.")

    async def answer(key: tuple, compute: Callable[[], Any]) -> Response:
        """Serve the cached JSON bytes for ``key``; compute misses in the thread pool (blocking
        SQLite and the selector never run on the event loop)."""
        body, state = cache.lookup(key)
        if body is None:
            body = await run_in_threadpool(lambda: json.dumps(compute()).encode())
            cache.store(key, state, body)
        return Response(content=body, media_type="application/json")

    @app.exception_handler(UserError)
    async def user_error(request: Request, exc: UserError):
        return JSONResponse({"error": str(exc)}, status_code=404 if isinstance(exc, not_found) else 400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def bad_params(request: Request, exc: RequestValidationError):
        parts = []
        for e in exc.errors():
            where = ".".join(str(x) for x in e.get("loc", ())[1:]) or "request"
            parts.append(f"{where}: {e.get('msg', 'invalid')}")
        return JSONResponse({"error": "; ".join(parts)}, status_code=400)

    @app.get("/healthz")
    async def healthz():
        """Liveness: the database can be opened and read (re-checked whenever its files change);
        503 with the reason when it cannot."""
        def compute():
            c = connect_readonly(path)
            try:
                version = c.execute("PRAGMA user_version").fetchone()[0]
            finally:
                c.close()
            return {"status": "ok", "db": str(path), "schema_version": version}

        try:
            return await answer(("healthz",), compute)
        except UserError as e:
            return JSONResponse({"status": "error", "db": str(path), "error": str(e)}, status_code=503)

    @app.get("/v1/recommend")
    async def recommend(model: str, host_class: str | None = None, workload: str | None = None,
                  tokens: str | None = None, dp: int | None = None, tp: int | None = None,
                  world_size: int | None = None, gpu_arch: str | None = None, vllm_version: str | None = None,
                  concurrency: int | None = None, max_num_batched_tokens: int | None = None,
                  max_workspace_gib: float | None = None):
        """The same JSON as ``autoselect recommend --format json``."""
        from autoselect.selector import recommend_for

        kw = {"host_class": host_class, "workload": workload, "tokens": tokens, "dp": dp, "tp": tp,
              "world_size": world_size, "gpu_arch": gpu_arch, "vllm_version": vllm_version,
              "concurrency": concurrency, "max_num_batched_tokens": max_num_batched_tokens,
              "max_workspace_gib": max_workspace_gib}
        key = ("recommend", model, tuple(sorted(kw.items())))
        return await answer(key, lambda: recommend_for(model, db_path=path, **kw).to_dict())

    @app.get("/v1/hosts")
    async def hosts():
        """One row per host class in the database: its GPUs, how many machines, when last seen."""
        from db.queries import host_classes

        def compute():
            c = connect_readonly(path)
            try:
                return {"host_classes": host_classes(c)}
            finally:
                c.close()

        return await answer(("hosts",), compute)

    @app.get("/v1/drift")
    async def drift(host_class: str | None = None, min_slowdown: float = 0.05, noise_k: float = 3.0):
        """``autoselect fleet drift --format json``."""
        from autoselect.drift import analyze_at

        key = ("drift", host_class, min_slowdown, noise_k)
        return await answer(key, lambda: analyze_at(path, host_class=host_class, min_slowdown=min_slowdown,
                                                     noise_k=noise_k).to_dict())

    return app


def _version() -> str:
    from autoselect import __version__

    return __version__


def app_from_env():
    """uvicorn factory for ``--workers`` > 1: the database path comes from :data:`DB_ENV`."""
    return create_app(os.environ[DB_ENV])


def serve(db_path: str | os.PathLike | None = None, *, host: str = "127.0.0.1", port: int = 8765,
          workers: int = 1) -> None:
    """Run the API with uvicorn until interrupted (checks the database and options first)."""
    if not 0 < port < 65536:
        raise BadServeOption(f"--port {port} is not a TCP port; use 1-65535")
    if workers < 1:
        raise BadServeOption(f"--workers must be at least 1, got {workers}")
    try:
        import uvicorn
    except ImportError:
        raise ServeUnavailable("uvicorn is not installed; pip install 'autoselect[serve]'") from None
    app = create_app(db_path)
    if workers == 1:
        uvicorn.run(app, host=host, port=port, log_level="warning")
        return
    from db import default_path

    os.environ[DB_ENV] = str(Path(db_path) if db_path is not None else default_path())
    uvicorn.run("autoselect.service:app_from_env", factory=True, host=host, port=port, workers=workers,
                log_level="warning")
