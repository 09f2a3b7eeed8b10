"""Running the API: the listening socket (one clear error for a taken port), uvicorn, its workers.

uvicorn runs with :func:`uvicorn_config`: serve's HTTP protocol (:mod:`~.connections`: a deadline
for every request head, room kept for new clients as descriptors run out) and its log
(:mod:`~.log`: every line through one function, no access log)."""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path
from typing import Callable

from autoselect.errors import UserError
from autoselect.fleet.service import descriptors, log
from autoselect.fleet.service.app import BadServeOption, ServeUnavailable, create_app
from db import default_path

#: environment variable carrying the database path to uvicorn workers (``--workers`` > 1)
DB_ENV = "AUTOSELECT_SERVE_DB"


class PortInUse(UserError):
    "The address serve should listen on is taken, or cannot be bound."


#: environment variable carrying the model roots to uvicorn workers (os.pathsep-separated)
ROOTS_ENV = "AUTOSELECT_SERVE_MODEL_ROOTS"
#: environment variable carrying the token file's path (never the token) to uvicorn workers
TOKEN_FILE_ENV = "AUTOSELECT_SERVE_TOKEN_FILE"


def uvicorn_options(*, head_timeout_s: float | None = None, max_connections: int | None = None) -> dict:
    """The options serve gives uvicorn (``uvicorn.Config`` and ``uvicorn.run`` take the same).

    :param head_timeout_s: seconds a connection may take to send a whole request head
        (default :data:`autoselect.fleet.service.connections.HEAD_TIMEOUT_S`).
    :param max_connections: open connections kept before the one idle longest is closed
        (default: what the descriptor limit leaves room for).
    """
    from autoselect.fleet.service import connections  # imports uvicorn

    protocol = connections.guarded(connections.HEAD_TIMEOUT_S if head_timeout_s is None else head_timeout_s,
                                   max_connections)
    return {"http": protocol, "log_config": log.log_config(), "log_level": "warning", "access_log": False}


def uvicorn_config(app, *, head_timeout_s: float | None = None, max_connections: int | None = None):
    """The ``uvicorn.Config`` serve runs ``app`` with (:func:`uvicorn_options`)."""
    import uvicorn

    return uvicorn.Config(app, **uvicorn_options(head_timeout_s=head_timeout_s, max_connections=max_connections))


def app_from_env():
    """uvicorn factory for ``--workers`` > 1: the database path, model roots and token file come
    from :data:`DB_ENV`, :data:`ROOTS_ENV` and :data:`TOKEN_FILE_ENV`."""
    roots = [r for r in os.environ.get(ROOTS_ENV, "").split(os.pathsep) if r]
    return create_app(os.environ[DB_ENV], model_roots=roots, token_file=os.environ.get(TOKEN_FILE_ENV) or None)


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
          workers: int = 1, model_roots=(), token_file: str | os.PathLike | None = None,
          on_warning: Callable[[str], None] | None = None) -> None:
    """Run the API with uvicorn until interrupted (checks the database, options, token file and
    the address first, so each mistake is one :class:`UserError`).

    :param model_roots: see :func:`create_app`.
    :param token_file: see :func:`create_app`.
    :param on_warning: told (one sentence) when the address is reachable from other machines:
        without a token anyone can read it; with one, the token travels in clear text unless a
        TLS proxy fronts the service. Default: the service's log (:func:`autoselect.fleet.service.log.warning`).
    """
    if not 0 < port < 65536:
        raise BadServeOption(f"--port {port} is not a TCP port; use 1-65535")
    if workers < 1:
        raise BadServeOption(f"--workers must be at least 1, got {workers}")
    try:
        import uvicorn
    except ImportError:
        raise ServeUnavailable("uvicorn is not installed; pip install 'autoselect[serve]'") from None
    on_warning = on_warning or log.warning
    app = create_app(db_path, model_roots=model_roots, token_file=token_file)
    sock = bind(host, port)
    descriptors.raise_fd_limit()  # what an unprivileged process may: more clients before any is turned away
    if not is_loopback(host):
        if token_file is None:
            on_warning(f"serving on {host}:{port}, reachable from other machines, without authentication: anyone "
                       "who reaches it can read every recommendation and host class in the database; pass "
                       "--token-file, put it behind a proxy that authenticates, or bind 127.0.0.1")
        else:
            on_warning(f"serving on {host}:{port} with a bearer token but no TLS: the token and the answers "
                       "travel in clear text; put a TLS-terminating proxy in front (docs/launch.md)")
    try:
        if workers == 1:
            uvicorn.Server(uvicorn_config(app)).run(sockets=[sock])
            return
        os.environ[DB_ENV] = str(Path(db_path) if db_path is not None else default_path())
        os.environ[ROOTS_ENV] = os.pathsep.join(os.path.abspath(r) for r in model_roots)
        os.environ[TOKEN_FILE_ENV] = str(token_file) if token_file is not None else ""
        uvicorn.run(f"{__name__}:app_from_env", factory=True, fd=sock.fileno(), workers=workers,
                    **uvicorn_options())
    finally:
        sock.close()
