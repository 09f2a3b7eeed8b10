"""``autoselect serve``: a small read-only HTTP API over a results database (FastAPI).

Endpoints (GET, and HEAD answered like GET; every other method is 405):

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

The server answers strangers, so ``model=`` never names a path: models are Hugging Face ids
resolved from the local cache only (never downloaded), or names under the model roots the
operator passed (``--model-root``; a name whose real path leaves its root does not exist).
Every model the server cannot serve gets the same 404 sentence, whatever exists on its disk,
and no answer carries a server path (the database, the roots, the Hub cache and the home
directory are replaced by placeholders). Per request, the work is bounded by the checks of the
config and of each parameter (at most :data:`MAX_QUERY` bytes of query string).
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

from autoselect import __version__
from autoselect.fleet.drift import analyze_at
from autoselect.errors import UnknownHostClass, UserError
from autoselect.model import ModelConfigNotFound, ModelSource, hub_cache_dir
from autoselect.selector import recommend_for
from db import default_path
from db.queries import connect_readonly, host_classes

#: answers kept per database state
CACHE_SIZE = 256
#: environment variable carrying the database path to uvicorn workers (``--workers`` > 1)
DB_ENV = "AUTOSELECT_SERVE_DB"


class ServeUnavailable(UserError):
    "FastAPI / uvicorn are not installed."


class BadServeOption(UserError):
    "A serve option that cannot work (port, workers)."


#: the longest query string a request may carry (every parameter's grammar is far shorter)
MAX_QUERY = 4096
#: the one answer for any model= value the server cannot serve, whatever exists on its disk
UNKNOWN_MODEL = ("unknown model: this server answers for Hugging Face model ids in its cache and for models "
                 "under its --model-root directories")


class PortInUse(UserError):
    "The address serve should listen on is taken, or cannot be bound."


#: the mistakes that mean "no such thing here" (404) rather than a bad parameter (400)
NOT_FOUND = (ModelConfigNotFound, UnknownHostClass)


class Scrubber:
    """Replaces the server's own paths in a message or an answer by placeholders, longest first:
    an answer tells a client what it asked (or what is wrong with its request), never where the
    server keeps its files (a fleet run's meta may name a model by its path under a root)."""

    def __init__(self, db_path: Path, roots: tuple[Path, ...]):
        pairs = [(db_path, "<database>"), *((r, "<model root>") for r in roots)]
        hub = hub_cache_dir() or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
        pairs += [(Path(hub), "<hub cache>"), (Path(os.path.expanduser("~")), "<home>")]
        seen: dict[str, str] = {}
        for path, word in pairs:
            for form in (str(path), os.path.abspath(path), os.path.realpath(path)):
                if len(form) > 1:
                    seen.setdefault(form, word)
                    seen.setdefault(json.dumps(form)[1:-1], word)  # as it reads inside a JSON answer
        self.pairs = sorted(seen.items(), key=lambda kv: -len(kv[0]))

    def __call__(self, text: str) -> str:
        for path, word in self.pairs:
            text = text.replace(path, word)
        return text


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


def model_source(model_roots=()) -> Any:
    """What ``serve`` resolves ``model=`` against: Hub ids from the cache, names under the roots."""
    return ModelSource(local_paths=False, hub=True, offline=True, roots=tuple(Path(r) for r in model_roots))


def create_app(db_path: str | os.PathLike | None = None, *, model_roots=()):
    """The FastAPI application serving the database at ``db_path`` (checked readable now).

    :param model_roots: directories whose checkpoint sub-directories ``model=`` may name
        (relative names only); default none: Hugging Face ids from the local cache only.
    """
    try:
        from fastapi import FastAPI, Request
        from fastapi.concurrency import run_in_threadpool
        from fastapi.exceptions import RequestValidationError
        from fastapi.responses import JSONResponse, Response
        from starlette.exceptions import HTTPException as StarletteHTTPException
    except ImportError:
        raise ServeUnavailable("fastapi is not installed; pip install 'autoselect[serve]'") from None

    path = Path(db_path) if db_path is not None else default_path()
    conn = connect_readonly(path)  # refuse a missing / foreign / too-new database before serving
    conn.close()
    roots = tuple(Path(r) for r in model_roots)
    for root in roots:
        if not root.is_dir():
            raise BadServeOption(f"--model-root {root} is not a directory; pass a directory of checkpoint directories")
    source = model_source(roots)
    scrub = Scrubber(path, roots)
    cache = AnswerCache(path)

    app = FastAPI(title="autoselect", version=__version__, docs_url=None, redoc_url=None,
                  description="Read-only recommendations of vLLM's --all2all-backend from measured data.")

    async def answer(key: tuple, compute: Callable[[], Any]) -> Response:
        """Serve the cached JSON bytes for ``key``; compute misses in the thread pool (blocking
        SQLite and the selector never run on the event loop)."""
        body, state = cache.lookup(key)
        if body is None:
            body = await run_in_threadpool(lambda: scrub(json.dumps(compute())).encode())
            cache.store(key, state, body)
        return Response(content=body, media_type="application/json")

    @app.exception_handler(UserError)
    async def user_error(request: Request, exc: UserError):
        if isinstance(exc, ModelConfigNotFound):
            return JSONResponse({"error": UNKNOWN_MODEL}, status_code=404)
        return JSONResponse({"error": scrub(str(exc))}, status_code=404 if isinstance(exc, NOT_FOUND) else 400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        return JSONResponse({"error": scrub(str(exc.detail))}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def bad_params(request: Request, exc: RequestValidationError):
        parts = []
        for e in exc.errors():
            where = ".".join(str(x) for x in e.get("loc", ())[1:]) or "request"
            parts.append(f"{where}: {e.get('msg', 'invalid')}")
        return JSONResponse({"error": scrub("; ".join(parts))}, status_code=400)

    @app.middleware("http")
    async def bounded(request: Request, call_next):
        """Refuse a query string longer than any parameter needs before anything parses it."""
        if len(request.url.query) > MAX_QUERY:
            return JSONResponse({"error": f"query string longer than {MAX_QUERY} bytes"}, status_code=414)
        return await call_next(request)

    def get(route: str):
        """A read-only route: GET, and HEAD answered the same way (headers, no body)."""
        return app.api_route(route, methods=["GET", "HEAD"])

    @get("/healthz")
    async def healthz():
        """Liveness: the database can be opened and read (re-checked whenever its files change);
        503 with the reason when it cannot."""
        def compute():
            c = connect_readonly(path)
            try:
                version = c.execute("PRAGMA user_version").fetchone()[0]
            finally:
                c.close()
            return {"status": "ok", "db": path.name, "schema_version": version}

        try:
            return await answer(("healthz",), compute)
        except UserError as e:
            return JSONResponse({"status": "error", "db": path.name, "error": scrub(str(e))}, status_code=503)

    @get("/v1/recommend")
    async def recommend(model: str, host_class: str | None = None, workload: str | None = None,
                  tokens: str | None = None, dp: int | None = None, tp: int | None = None,
                  world_size: int | None = None, gpu_arch: str | None = None, vllm_version: str | None = None,
                  concurrency: int | None = None, max_num_batched_tokens: int | None = None,
                  max_workspace_gib: float | None = None):
        """The same JSON as ``autoselect recommend --format json``."""
        kw = {"host_class": host_class, "workload": workload, "tokens": tokens, "dp": dp, "tp": tp,
              "world_size": world_size, "gpu_arch": gpu_arch, "vllm_version": vllm_version,
              "concurrency": concurrency, "max_num_batched_tokens": max_num_batched_tokens,
              "max_workspace_gib": max_workspace_gib}
        key = ("recommend", model, tuple(sorted(kw.items())))
        return await answer(key, lambda: recommend_for(model, db_path=path, model_source=source, **kw).to_dict())

    @get("/v1/hosts")
    async def hosts():
        """One row per host class in the database: its GPUs, how many machines, when last seen."""
        def compute():
            c = connect_readonly(path)
            try:
                return {"host_classes": host_classes(c)}
            finally:
                c.close()

        return await answer(("hosts",), compute)

    @get("/v1/drift")
    async def drift(host_class: str | None = None, min_slowdown: float = 0.05, noise_k: float = 3.0):
        """``autoselect fleet drift --format json``."""
        key = ("drift", host_class, min_slowdown, noise_k)
        return await answer(key, lambda: analyze_at(path, host_class=host_class, min_slowdown=min_slowdown,
                                                     noise_k=noise_k).to_dict())

    return app


#: environment variable carrying the model roots to uvicorn workers (os.pathsep-separated)
ROOTS_ENV = "AUTOSELECT_SERVE_MODEL_ROOTS"


def app_from_env():
    """uvicorn factory for ``--workers`` > 1: the database path and model roots come from
    :data:`DB_ENV` and :data:`ROOTS_ENV`."""
    roots = [r for r in os.environ.get(ROOTS_ENV, "").split(os.pathsep) if r]
    return create_app(os.environ[DB_ENV], model_roots=roots)


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int):
    """A listening TCP socket on ``host:port``; a taken port or an address this machine does not
    have is :class:`PortInUse` (one sentence, before uvicorn could print its own)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise BadServeOption(f"--host {host!r} is not an address of this machine ({e.strerror}); "
                             "pass an IP address or a host name that resolves") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: TIME_WAIT is no conflict
        sock.bind(address)
        sock.listen(2048)
    except OSError as e:
        sock.close()
        raise PortInUse(f"cannot listen on {host}:{port} ({e.strerror}); pass another --port, or stop what "
                        "listens there") from None
    sock.set_inheritable(True)  # uvicorn's worker processes take it over
    return sock


def serve(db_path: str | os.PathLike | None = None, *, host: str = "127.0.0.1", port: int = 8765,
          workers: int = 1, model_roots=(), on_warning: Callable[[str], None] | None = None) -> None:
    """Run the API with uvicorn until interrupted (checks the database, options and the address
    first, so each mistake is one :class:`UserError`).

    :param model_roots: see :func:`create_app`.
    :param on_warning: told (one sentence) when the address is reachable from other machines:
        the API has no authentication.
    """
    if not 0 < port < 65536:
        raise BadServeOption(f"--port {port} is not a TCP port; use 1-65535")
    if workers < 1:
        raise BadServeOption(f"--workers must be at least 1, got {workers}")
    try:
        import uvicorn
    except ImportError:
        raise ServeUnavailable("uvicorn is not installed; pip install 'autoselect[serve]'") from None
    app = create_app(db_path, model_roots=model_roots)
    sock = bind(host, port)
    if not is_loopback(host) and on_warning is not None:
        on_warning(f"serving on {host}:{port}, reachable from other machines, without authentication: anyone who "
                   "reaches it can read every recommendation and host class in the database; put it behind a "
                   "proxy that authenticates, or bind 127.0.0.1")
    try:
        if workers == 1:
            uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
            return
        os.environ[DB_ENV] = str(Path(db_path) if db_path is not None else default_path())
        os.environ[ROOTS_ENV] = os.pathsep.join(str(r) for r in model_roots)
        uvicorn.run("autoselect.service:app_from_env", factory=True, fd=sock.fileno(), workers=workers,
                    log_level="warning")
    finally:
        sock.close()
