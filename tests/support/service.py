"""``autoselect serve``'s app on 127.0.0.1 at a free port, in a background thread (uvicorn)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Iterator


@contextlib.contextmanager
def running_service(db_path, *, model_roots=(), token_file=None) -> Iterator[str]:
    """The service's base URL while the block runs; stopped (bounded) after it."""
    import uvicorn

    from autoselect.fleet.service.app import create_app

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = create_app(db_path, model_roots=model_roots, token_file=token_file)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
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
