"""``serve``'s kept answers: a request answered before never reaches the app again (its front
answers from the one cache), errors are never kept, every kept answer is dropped when the
database changes, and an answer about a model when its files change or go."""

from __future__ import annotations

import json
import os
import shutil
import time

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


def test_each_spelling_of_a_question_is_kept_under_the_request_as_it_arrived(served):
    client, calls, computed, _ = served
    a = "/v1/recommend?model=deepseek-v3&host_class=h200x8-fleet&workload=decode"
    b = "/v1/recommend?workload=decode&host_class=h200x8-fleet&model=deepseek-v3"
    answers = [client.get(target) for target in (a, b, a, b)]
    assert {r.status_code for r in answers} == {200} and len({r.content for r in answers}) == 1
    assert len(calls) == 2 and computed == ["deepseek-v3", "deepseek-v3"]  # one cache: one entry per spelling


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


def test_the_cache_keeps_at_most_size_answers(tmp_path):
    db = build_fleet_db(tmp_path / "fleet.db", fleet_runs=("f1",))
    cache = AnswerCache(db, size=2)
    state = cache.current()
    for i in range(3):
        cache.put(("/p", b"%d" % i), state, b"%d" % i)
    assert len(cache) == 2
    assert cache.get(("/p", b"0"))[0] is None and cache.get(("/p", b"1"))[0] == b"1"
    stale = state[:-1] + (("changed", 0),)
    cache.put(("/p", b"9"), stale, b"9")  # computed against another database state: not kept
    assert cache.get(("/p", b"9"))[0] is None


@pytest.fixture
def model_root(tmp_path):
    """A model root holding a copy of the DeepSeek-V3 fixture (bf16 on Hopper: fp8 block weights)."""
    root = tmp_path / "models"
    root.mkdir()
    shutil.copytree(MODELS / "deepseek-v3", root / "deepseek-v3")
    return root


def _counted(db, root, monkeypatch, recheck_s: float = 0.0):
    """(a client, the requests reaching the app); the model files are looked at again after ``recheck_s``."""
    front = create_app(db, model_roots=[root])
    front.app = inner = Counted(front.app)
    front.cache.files_recheck_s = recheck_s
    return TestClient(front), inner.calls


def _nvfp4(config: dict) -> dict:
    """``config`` as a ModelOpt NVFP4 checkpoint's (what a re-quantized checkpoint's config.json says)."""
    return {**config, "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4",
                                              "group_size": 16, "kv_cache_quant_algo": None}}


@pytest.mark.parametrize("how", ["rewritten", "replaced"])
def test_a_changed_checkpoint_is_answered_anew(tmp_path, model_root, monkeypatch, how):
    db = build_fleet_db(tmp_path / "fleet.db", fleet_runs=("f1",))
    client, calls = _counted(db, model_root, monkeypatch)
    params = {**RECOMMEND, "gpu_arch": "sm100"}
    before = client.get("/v1/recommend", params=params)
    assert before.status_code == 200 and client.get("/v1/recommend", params=params).content == before.content
    assert len(calls) == 1
    config = model_root / "deepseek-v3" / "config.json"
    text = json.dumps(_nvfp4(json.loads(config.read_text())))
    if how == "rewritten":  # in place: same inode, new size and mtime
        config.write_text(text)
    else:  # a new file renamed over the old one, as a download or a copy does
        (config.parent / "config.json.new").write_text(text)
        os.replace(config.parent / "config.json.new", config)
    after = client.get("/v1/recommend", params=params)
    assert after.status_code == 200 and len(calls) == 2
    assert (before.json()["profile"]["weight_quant"], after.json()["profile"]["weight_quant"]) == ("fp8_block128",
                                                                                                  "nvfp4")


def test_a_deleted_checkpoint_is_an_unknown_model_at_once(tmp_path, model_root, monkeypatch):
    db = build_fleet_db(tmp_path / "fleet.db", fleet_runs=("f1",))
    client, calls = _counted(db, model_root, monkeypatch)
    assert client.get("/v1/recommend", params=RECOMMEND).status_code == 200
    shutil.rmtree(model_root / "deepseek-v3")
    r = client.get("/v1/recommend", params=RECOMMEND)
    assert r.status_code == 404 and len(calls) == 2


def test_a_quantization_file_added_beside_the_config_is_read(tmp_path, model_root, monkeypatch):
    db = build_fleet_db(tmp_path / "fleet.db", fleet_runs=("f1",))
    client, calls = _counted(db, model_root, monkeypatch)
    params = {**RECOMMEND, "gpu_arch": "sm100"}
    first = client.get("/v1/recommend", params=params)
    assert first.status_code == 200 and first.json()["profile"]["weight_quant"] == "fp8_block128"
    config = model_root / "deepseek-v3" / "config.json"
    plain = {k: v for k, v in json.loads(config.read_text()).items() if k != "quantization_config"}
    config.write_text(json.dumps(plain))  # bf16 weights ...
    assert client.get("/v1/recommend", params=params).json()["profile"]["weight_quant"] != "nvfp4"
    # ... until a legacy ModelOpt quantization file appears beside it
    shutil.copy(MODELS / "deepseek-r1-nvfp4" / "hf_quant_config.json", model_root / "deepseek-v3")
    again = client.get("/v1/recommend", params=params)
    assert len(calls) == 3 and again.status_code == 200 and again.json()["profile"]["weight_quant"] == "nvfp4"


def test_an_unchanged_checkpoint_is_answered_from_the_cache(tmp_path, model_root, monkeypatch):
    db = build_fleet_db(tmp_path / "fleet.db", fleet_runs=("f1",))
    client, calls = _counted(db, model_root, monkeypatch)
    first = client.get("/v1/recommend", params=RECOMMEND)
    (model_root / "deepseek-v3" / "config.json").read_text()  # reading changes nothing kept
    for _ in range(3):
        assert client.get("/v1/recommend", params=RECOMMEND).content == first.content
    assert len(calls) == 1


def test_the_log_says_at_the_end_how_many_requests_the_kept_answers_served(tmp_path, capsys):
    db = build_fleet_db(tmp_path / "fleet.db", fleet_runs=("f1",))
    with TestClient(create_app(db, model_roots=[MODELS])) as client:  # the lifespan runs: start and stop
        for _ in range(3):
            assert client.get("/v1/hosts").status_code == 200
        assert client.get("/v1/nothing").status_code == 404
    assert capsys.readouterr().err.splitlines()[-1] == "serve: stopped after 4 requests, 2 answered from the kept answers"


def test_a_kept_answer_looks_at_its_model_files_at_most_once_per_interval(tmp_path, model_root, monkeypatch):
    import autoselect.fleet.service.answers as answers

    db = build_fleet_db(tmp_path / "fleet.db", fleet_runs=("f1",))
    client, calls = _counted(db, model_root, monkeypatch, recheck_s=0.5)
    stats = []
    identity = answers.identity
    monkeypatch.setattr(answers, "identity", lambda paths: stats.append(paths) or identity(paths))
    first = client.get("/v1/recommend", params=RECOMMEND)
    stats.clear()
    for _ in range(20):
        assert client.get("/v1/recommend", params=RECOMMEND).content == first.content
    assert all("config.json" not in " ".join(p) for p in stats)  # the database's state only: no model file
    shutil.rmtree(model_root / "deepseek-v3")
    time.sleep(0.6)
    assert client.get("/v1/recommend", params=RECOMMEND).status_code == 404 and len(calls) == 2
