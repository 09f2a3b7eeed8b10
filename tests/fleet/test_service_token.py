"""``serve --token-file``: every route but /healthz needs the bearer token (autoselect/bearer.py)."""

from __future__ import annotations

import hmac
import re
import socket

import httpx
import pytest
from click.testing import CliRunner

from support.fleet import HOST_CLASS, MODELS, build_fleet_db
from support.service import running_service

from autoselect import bearer
from autoselect.cli import main

pytest.importorskip("uvicorn")
TOKEN = "3f9c1e7a5b2d4c6e8f0a1b3c5d7e9f11"


@pytest.fixture(scope="module")
def token_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("token") / "token"
    path.write_text(TOKEN + "\n")
    return path


@pytest.fixture(scope="module")
def guarded(tmp_path_factory, token_file):
    db = build_fleet_db(tmp_path_factory.mktemp("svc") / "fleet.db")
    with running_service(db, model_roots=[MODELS], token_file=token_file) as url:
        yield url


def test_a_request_without_the_token_is_401_and_says_how_to_send_one(guarded):
    r = httpx.get(f"{guarded}/v1/hosts")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert r.json() == {"error": "this service needs a bearer token: send `Authorization: Bearer <token>` "
                                 "(autoselect launch --token-file)"}


@pytest.mark.parametrize("header", ["Bearer wrong-token-of-some-length", f"Basic {TOKEN}", f"Bearer {TOKEN}x",
                                    f"Bearer {TOKEN[:-1]}", "Bearer"])
def test_a_wrong_token_is_401_and_never_echoed(guarded, header):
    r = httpx.get(f"{guarded}/v1/recommend", params={"model": "deepseek-v3", "host_class": HOST_CLASS},
                  headers={"Authorization": header})
    assert r.status_code == 401
    assert TOKEN[:8] not in r.text and "wrong-token" not in r.text


def test_the_right_token_gets_the_answer_and_healthz_needs_none(guarded):
    r = httpx.get(f"{guarded}/v1/recommend", params={"model": "deepseek-v3", "host_class": HOST_CLASS},
                  headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200 and r.json()["model"] == "deepseek-v3"
    assert TOKEN not in r.text
    assert httpx.get(f"{guarded}/healthz").status_code == 200  # liveness probes carry no token


def test_an_answer_kept_for_a_client_with_the_token_is_never_given_to_one_without(guarded):
    # the front keeps a 200 answer under the request as it arrived; the token is asked before that
    params = {"model": "deepseek-v3", "host_class": HOST_CLASS, "workload": "decode"}
    ok = httpx.get(f"{guarded}/v1/recommend", params=params, headers={"Authorization": f"Bearer {TOKEN}"})
    again = httpx.get(f"{guarded}/v1/recommend", params=params, headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == again.status_code == 200 and again.content == ok.content
    for headers in ({}, {"Authorization": "Bearer wrong-token-of-some-length"}):
        r = httpx.get(f"{guarded}/v1/recommend", params=params, headers=headers)
        assert r.status_code == 401 and "deepseek" not in r.text


def test_the_token_is_compared_in_constant_time(monkeypatch):
    calls = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: calls.append((a, b)) or real(a, b))
    assert bearer.token_matches(TOKEN, TOKEN) and not bearer.token_matches("x" * 32, TOKEN)
    assert not bearer.token_matches(None, TOKEN)
    assert len(calls) == 3


def test_the_header_is_read_as_rfc_6750_says():
    assert bearer.presented_token(f"Bearer {TOKEN}") == TOKEN
    assert bearer.presented_token(f"bearer   {TOKEN} ") == TOKEN
    assert bearer.presented_token(f"Basic {TOKEN}") is None
    assert bearer.presented_token(None) is None and bearer.presented_token("Bearer ") is None
    assert bearer.authorization(TOKEN) == f"Bearer {TOKEN}"


@pytest.mark.parametrize("content, message", [
    (None, "cannot read it (No such file or directory)"),
    ("", "is empty; write the token on its first line"),
    ("short\n", "the token has 5 characters, fewer than 16"),
    ("has a blank in the middle of it\n", "holds blanks or characters outside printable ASCII"),
    ("t\u00f6ken-with-a-non-ascii-letter\n", "holds blanks or characters outside printable ASCII"),
])
def test_a_token_file_without_a_usable_token_is_refused_without_showing_it(tmp_path, content, message):
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    with pytest.raises(bearer.BadTokenFile, match=re.escape(message)) as e:
        bearer.read_token_file(path)
    if content:
        assert content.strip() not in str(e.value)


def test_serve_with_a_bad_token_file_is_one_error_line(tmp_path):
    db = build_fleet_db(tmp_path / "fleet.db")
    result = CliRunner().invoke(main, ["serve", "--db", str(db), "--token-file", str(tmp_path / "absent")])
    assert result.exit_code == 2
    assert result.stderr == f"Error: --token-file {tmp_path / 'absent'}: cannot read it (No such file or directory); " \
                            "pass a file that holds the token on its first line\n"


def test_serve_warns_that_a_token_beyond_loopback_travels_in_clear_text(tmp_path, token_file, monkeypatch):
    import uvicorn

    from autoselect.fleet.service import serve

    class Stop(Exception):
        pass

    def no_run(self, sockets=None):
        raise Stop

    monkeypatch.setattr(uvicorn.Server, "run", no_run)
    said: list[str] = []
    db = build_fleet_db(tmp_path / "fleet.db")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(Stop):
        serve(db, host="0.0.0.0", port=port, token_file=token_file, on_warning=said.append)
    assert said == [f"serving on 0.0.0.0:{port} with a bearer token but no TLS: the token and the answers travel in "
                    f"clear text; put a TLS-terminating proxy in front (docs/launch.md)"]
