"""``serve``'s kept answers: a request answered before never reaches the app again (its front
answers from the cache), two spellings of one question are computed once, errors are never
kept, and every kept answer is dropped when the database changes."""

from __future__ import annotations

import pytest

from support.fleet import HOST_CLASS, MODELS, build_fleet_db

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

import autoselect.fleet.service.routes as routes
from autoselect.fleet.service.answers import AnswerCache
from autoselect.fleet.service.app import create_app
from autoselect.fleet.service.front import Front

RECOMMEND = {"model": "deepseek-v3", "host_class": HOST_CLASS, "workload": "decode"}


class Counted:
    """Counts the requests that reach the wrapped ASGI app (the front lets only misses through)."""

    def __init__(self, app):
        self.app, self.calls = app, []

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            self.calls.append((scope["method"], scope["path"], scope["query_string"]))
        await self.app(scope, receive, send)


@pytest.fixture
def served(tmp_path, monkeypatch):
    """(client, the requests reaching the app, the selector calls, the database path)."""
    db = build_fleet_db(tmp_path / "fleet.db", fleet_runs=("f1", "f2"))
    front = create_app(db, model_roots=[MODELS])
    assert isinstance(front, Front)
    front.app = inner = Counted(front.app)
    computed = []
    recommend_for = routes.recommend_for

    def counting(model, **kw):
        computed.append(model)
        return recommend_for(model, **kw)

    monkeypatch.setattr(routes, "recommend_for", counting)
    return TestClient(front), inner.calls, computed, db


def test_a_request_answered_before_does_not_reach_the_app(served):
    client, calls, computed, _ = served
    first = client.get("/v1/recommend", params=RECOMMEND)
    assert first.status_code == 200
    for _ in range(3):
        again = client.get("/v1/recommend", params=RECOMMEND)
        assert (again.status_code, again.content) == (200, first.content)
        assert again.headers["content-type"] == first.headers["content-type"] == "application/json"
        assert again.headers["content-length"] == first.headers["content-length"]
    assert len(calls) == 1 and computed == ["deepseek-v3"]


def test_two_spellings_of_one_question_are_computed_once(served):
    client, calls, computed, _ = served
    a = client.get("/v1/recommend?model=deepseek-v3&host_class=h200x8-fleet&workload=decode")
    b = client.get("/v1/recommend?workload=decode&host_class=h200x8-fleet&model=deepseek-v3")
    assert a.status_code == b.status_code == 200 and a.content == b.content
    assert len(calls) == 2 and computed == ["deepseek-v3"]  # the app parsed both; the selector ran once


def test_errors_are_never_kept(served):
    client, calls, _, _ = served
    for _ in range(2):
        assert client.get("/v1/recommend", params={**RECOMMEND, "dp": "x"}).status_code == 400
        assert client.get("/v1/recommend", params={**RECOMMEND, "model": "nope"}).status_code == 404
        assert client.get("/v1/nothing").status_code == 404
    assert len(calls) == 6


def test_a_head_request_is_answered_from_get_s_answer_but_never_kept(served):
    client, calls, _, _ = served
    assert client.head("/v1/hosts").status_code == 200
    assert client.head("/v1/hosts").status_code == 200
    assert len(calls) == 2  # HEAD's body may be left out: not kept
    get = client.get("/v1/hosts")
    head = client.head("/v1/hosts")
    assert head.status_code == 200 and head.headers["content-length"] == get.headers["content-length"]
    assert len(calls) == 3


def test_a_database_change_drops_every_kept_answer(served):
    client, calls, computed, db = served
    before = client.get("/v1/drift").json()
    rec = client.get("/v1/recommend", params=RECOMMEND)
    assert client.get("/v1/drift").json() == before and len(calls) == 2
    build_fleet_db(db, fleet_runs=("f3",))  # a new fleet run lands: gpu-c is slow
    after = client.get("/v1/drift").json()
    assert after != before and len(calls) == 3
    assert client.get("/v1/recommend", params=RECOMMEND).status_code == rec.status_code == 200
    assert computed == ["deepseek-v3", "deepseek-v3"] and len(calls) == 4


def test_a_query_string_too_long_is_refused_before_the_app(served):
    client, calls, _, _ = served
    r = client.get("/v1/recommend", params={"model": "a" * 5000})
    assert (r.status_code, r.json()) == (414, {"error": "query string longer than 4096 bytes"})
    assert calls == []


def test_the_cache_keeps_at_most_size_answers_per_kind(tmp_path):
    db = build_fleet_db(tmp_path / "fleet.db", fleet_runs=("f1",))
    cache = AnswerCache(db, size=2)
    state = cache.current()
    for i in range(3):
        cache.store(("k", i), state, b"%d" % i)
        cache.remember(("/p", b"%d" % i), state, b"%d" % i)
    assert cache.lookup(("k", 0))[0] is None and cache.lookup(("k", 2))[0] == b"2"
    assert cache.answered(("/p", b"0"))[0] is None and cache.answered(("/p", b"1"))[0] == b"1"
    stale = state[:-1] + (("changed", 0),)
    cache.store(("k", 9), stale, b"9")  # computed against another database state: not kept
    assert cache.lookup(("k", 9))[0] is None
