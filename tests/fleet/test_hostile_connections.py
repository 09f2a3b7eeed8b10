"""``serve``'s connections against clients that hold them: real sockets against the real server.

A connection that sends nothing, half a request head, or a byte at a time is closed once its
head deadline passes (after it opened, and after each answer); idle connections never keep a
client with a token from being answered; running out of file descriptors is one warning line,
never a traceback per connection.
"""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import time

import pytest

from support.fleet import build_fleet_db
from support.hostile import REPO
from support.service import running_service

pytest.importorskip("uvicorn")
import httpx

#: the head deadline the in-thread servers run with (serve's own is HEAD_TIMEOUT_S, 10 s)
DEADLINE_S = 1.0


@pytest.fixture(scope="module")
def fleet_db(tmp_path_factory):
    return build_fleet_db(tmp_path_factory.mktemp("conns") / "fleet.db", fleet_runs=("f1",))


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def _closed_within(sock: socket.socket, seconds: float, trickle: bytes = b"") -> float | None:
    """Seconds until the server closes ``sock`` (None: still open after ``seconds``), sending one
    byte of ``trickle`` every quarter second meanwhile."""
    start = time.monotonic()
    sock.settimeout(0.25)
    sent = 0
    while time.monotonic() - start < seconds:
        try:
            if sock.recv(4096) == b"":
                return time.monotonic() - start
        except socket.timeout:
            pass
        except ConnectionResetError:
            return time.monotonic() - start
        if sent < len(trickle):
            try:
                sock.sendall(trickle[sent:sent + 1])
            except (BrokenPipeError, ConnectionResetError):
                return time.monotonic() - start
            sent += 1
    return None


def _answer(sock: socket.socket, target: str = "/healthz") -> bytes:
    sock.settimeout(5)
    sock.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(4096)
    return head.split(b"\r\n")[0]


@pytest.fixture(scope="module")
def service(fleet_db):
    with running_service(fleet_db, head_timeout_s=DEADLINE_S) as url:
        yield _address(url)


def test_a_connection_that_sends_nothing_is_closed_after_the_head_deadline(service):
    with socket.create_connection(service) as sock:
        waited = _closed_within(sock, DEADLINE_S + 4)
    assert waited is not None and DEADLINE_S - 0.1 <= waited <= DEADLINE_S + 2.5


@pytest.mark.parametrize("sent", [b"GET /healthz HTTP/1.1\r\nHost: x\r\n", b"G", b"GET /v1/hosts?model="])
def test_a_request_head_that_never_completes_is_closed_whatever_trickles_in(service, sent):
    with socket.create_connection(service) as sock:
        sock.sendall(sent)
        waited = _closed_within(sock, DEADLINE_S + 4, trickle=b"X-Slow: " + b"a" * 40)
    assert waited is not None and waited <= DEADLINE_S + 2.5


def test_a_kept_alive_connection_must_send_its_next_head_in_time(service):
    with socket.create_connection(service) as sock:
        assert _answer(sock) == b"HTTP/1.1 200 OK"
        assert _answer(sock) == b"HTTP/1.1 200 OK"  # a whole request in time: answered on the same connection
        waited = _closed_within(sock, DEADLINE_S + 4, trickle=b"GET /healthz HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaa")
    assert waited is not None and waited <= DEADLINE_S + 2.5


def test_a_request_head_sent_slowly_but_within_the_deadline_is_answered(service):
    with socket.create_connection(service) as sock:
        for part in (b"GET /heal", b"thz HTTP/1.1\r\n", b"Host: x\r\n"):
            sock.sendall(part)
            time.sleep(DEADLINE_S / 5)
        sock.sendall(b"\r\n")
        sock.settimeout(5)
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")


def test_idle_connections_never_starve_a_client_with_a_token(fleet_db, tmp_path, capsys):
    token = tmp_path / "token"
    token.write_text("s3cret-token-for-the-test\n")
    with running_service(fleet_db, token_file=token, head_timeout_s=30, max_connections=16) as url:
        capsys.readouterr()
        idle = [socket.create_connection(_address(url)) for _ in range(60)]
        half = [socket.create_connection(_address(url)) for _ in range(20)]
        for sock in half:
            sock.sendall(b"GET /v1/hosts HTTP/1.1\r\nAuthorization: Bearer wr")
        try:
            headers = {"Authorization": "Bearer s3cret-token-for-the-test"}
            for _ in range(5):
                start = time.monotonic()
                r = httpx.get(f"{url}/v1/hosts", headers=headers, timeout=5)
                assert r.status_code == 200 and time.monotonic() - start < 2
        finally:
            for sock in idle + half:
                sock.close()
    err = capsys.readouterr().err
    assert err.count("Warning: serve is out of file descriptors") == 1, err
    assert "Traceback" not in err and "s3cret" not in err


def _limit_descriptors():
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))


@pytest.mark.slow  # a server process of its own (~6 s)
def test_serve_out_of_descriptors_answers_its_clients_and_says_it_once(fleet_db, tmp_path):
    """The real command under a descriptor limit of 64: 150 connections that send nothing (more
    than it can hold) cost one warning line and no traceback, and every request is answered."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    err = tmp_path / "stderr"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with open(err, "w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "autoselect", "serve", "--db", str(fleet_db), "--port",
                                 str(port)], stdout=subprocess.DEVNULL, stderr=stderr, env=env,
                                preexec_fn=_limit_descriptors)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, err.read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "serve did not start"
                time.sleep(0.1)
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(150)]
        time.sleep(0.5)
        try:
            answered = [httpx.get(f"http://127.0.0.1:{port}/v1/hosts", timeout=5).status_code for _ in range(5)]
        finally:
            for sock in idle:
                sock.close()
        assert answered == [200] * 5
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    lines = err.read_text().splitlines()
    assert len(lines) == 2 and lines[0].startswith("Warning: serve is out of file descriptors ("), lines
    assert lines[1].startswith("serve: stopped after ")


def test_the_service_log_never_shows_a_secret(capsys):
    import logging

    from autoselect.fleet.service import log

    log.warning("serving with HF_TOKEN=hf_abcdefghijklmnopqrstuvwx and https://user:pa55word@example.com/x")
    handler = log.Handler()
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    try:
        raise RuntimeError("--api-key sk-abcdefghijklmnopqrstuvwx failed")
    except RuntimeError:
        handler.emit(logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, "Exception in ASGI application",
                                       None, sys.exc_info()))
    err = capsys.readouterr().err
    assert "hf_abcdefghijklmnopqrstuvwx" not in err and "pa55word" not in err and "sk-abcdefghij" not in err
    assert err.startswith("Warning: serving with HF_TOKEN=<redacted>") and "Traceback" in err
