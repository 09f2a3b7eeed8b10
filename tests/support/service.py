"""``autoselect serve``'s app on 127.0.0.1 at a free port, in a background thread (uvicorn)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Iterator


@contextlib.contextmanager
def running_service(db_path, *, model_roots=(), token_file=None, head_timeout_s=None,
                    max_connections=None) -> Iterator[str]:
    """The service's base URL while the block runs; stopped (bounded) after it. uvicorn runs with
    serve's own options (its HTTP protocol and log: ``server.uvicorn_config``); ``head_timeout_s``
    and ``max_connections`` shorten its deadline and connection limit for a test."""
    import uvicorn

    from autoselect.fleet.service.app import create_app
    from autoselect.fleet.service.server import uvicorn_config

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    port = sock.getsockname()[1]
    app = create_app(db_path, model_roots=model_roots, token_file=token_file)
    server = uvicorn.Server(uvicorn_config(app, head_timeout_s=head_timeout_s, max_connections=max_connections))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
