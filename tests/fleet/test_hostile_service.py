"""``serve`` facing strangers: no model= value reveals anything about the server's files, the
work per request is bounded, HEAD is answered like GET, every bad request is a 4xx in one shape,
and the serve command's own mistakes are one Error line."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.fleet import HOST_CLASS, MODELS, build_fleet_db
from support.hostile import REPO, refused, run_module
from support.paths import FIXTURES

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from autoselect.fleet.service.app import create_app
from autoselect.fleet.service.app import UNKNOWN_MODEL


def cache_hub_model(repo_id: str, config: Path) -> Path:
    """Put ``config`` into the Hugging Face cache ($HF_HOME, set per test) as ``repo_id``'s config.json."""
    hub = Path(os.environ["HF_HOME"]) / "hub" / f"models--{repo_id.replace('/', '--')}"
    commit = "0" * 40
    (hub / "refs").mkdir(parents=True, exist_ok=True)
    (hub / "refs" / "main").write_text(commit)
    snapshot = hub / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    shutil.copy(config, snapshot / "config.json")
    (hub / ".no_exist" / commit).mkdir(parents=True, exist_ok=True)
    (hub / ".no_exist" / commit / "hf_quant_config.json").write_text("")
    return snapshot


@pytest.fixture(scope="module")
def fleet_db(tmp_path_factory):
    return build_fleet_db(tmp_path_factory.mktemp("hostile-svc") / "fleet.db")


@pytest.fixture
def server_files(tmp_path):
    """A directory with a checkpoint (config.json), a secret-looking directory, and a root."""
    shutil.copytree(MODELS / "deepseek-v3", tmp_path / "outside-model")
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_rsa").write_text("secret")
    root = tmp_path / "root"
    root.mkdir()
    shutil.copytree(MODELS / "deepseek-v3", root / "deepseek-v3")
    (root / "escape").symlink_to(tmp_path / "outside-model")
    (root / "empty-dir").mkdir()
    return tmp_path


def hostile_pairs(base: Path) -> list[tuple[str, str]]:
    """(a model= value naming something that exists on the server, one naming nothing)."""
    return [
        (str(base / "outside-model"), str(base / "missing-model")),
        (str(base / ".ssh"), str(base / ".nossh")),
        (str(base / "outside-model" / "config.json"), str(base / "missing-model" / "config.json")),
        ("/etc", "/etc-does-not-exist"),
        ("/", "/does-not-exist"),
        ("~", "~nosuchuser-xyz"),
        ("~/.ssh", "~/.nosuch-dir-xyz"),
        ("../outside-model", "../missing-model"),
        ("root/../outside-model", "root/../missing-model"),
        ("escape", "escape-missing"),
        ("empty-dir", "empty-dir-missing"),
        (str(FIXTURES / "models" / "deepseek-v3"), str(REPO / "tests" / "nope")),
        ("tests/fixtures/models/deepseek-v3", "tests/fixtures/models/nope"),
        (".", "./nope"),
        ("..", "../nope"),
        ("", ""),
        ("file:///etc/passwd", "file:///nope"),
        ("%2e%2e/outside-model", "%2e%2e/missing-model"),
    ]


@pytest.mark.parametrize("with_root", [False, True])
def test_no_model_value_reveals_whether_a_server_path_exists(server_files, fleet_db, monkeypatch, with_root):
    monkeypatch.chdir(server_files if with_root else REPO)
    roots = [server_files / "root"] if with_root else []
    client = TestClient(create_app(fleet_db, model_roots=roots))
    for present, absent in hostile_pairs(server_files):
        answers = []
        for value in (present, absent):
            r = client.get("/v1/recommend", params={"model": value, "host_class": HOST_CLASS})
            answers.append((r.status_code, r.json()))
        assert answers[0] == answers[1] == (404, {"error": UNKNOWN_MODEL}), (present, absent, answers)


def test_the_defaults_serve_cached_hub_ids_only(server_files, fleet_db):
    cache_hub_model("acme/deepseek-v3", MODELS / "deepseek-v3" / "config.json")
    client = TestClient(create_app(fleet_db))
    r = client.get("/v1/recommend", params={"model": "acme/deepseek-v3", "host_class": HOST_CLASS})
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "acme/deepseek-v3"
    assert os.environ["HF_HOME"] not in r.text and str(server_files) not in r.text
    r = client.get("/v1/recommend", params={"model": "acme/not-cached", "host_class": HOST_CLASS})
    assert (r.status_code, r.json()) == (404, {"error": UNKNOWN_MODEL})


def test_a_root_serves_its_models_by_name(server_files, fleet_db):
    client = TestClient(create_app(fleet_db, model_roots=[server_files / "root"]))
    r = client.get("/v1/recommend", params={"model": "deepseek-v3", "host_class": HOST_CLASS})
    assert r.status_code == 200, r.text
    assert str(server_files) not in r.text


def test_errors_never_carry_server_paths(server_files, fleet_db, tmp_path):
    root = server_files / "root"
    bad = root / "broken"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"hidden_size": 7168, "num_experts": 8, "num_experts_per_tok": 2,
                                                  "decoder_sparse_step": "two"}))
    cache_hub_model("acme/broken", bad / "config.json")
    client = TestClient(create_app(fleet_db, model_roots=[root]))
    secrets = [str(server_files), str(fleet_db.parent), os.environ["HF_HOME"], os.path.expanduser("~")]
    requests = [("/v1/recommend", {"model": "broken", "host_class": HOST_CLASS}),
                ("/v1/recommend", {"model": "acme/broken", "host_class": HOST_CLASS}),
                ("/v1/recommend", {"model": "deepseek-v3", "host_class": HOST_CLASS, "tokens": "1,,2"}),
                ("/v1/recommend", {"model": "deepseek-v3", "host_class": HOST_CLASS, "vllm_version": "banana"}),
                ("/v1/drift", {"min_slowdown": "-1"}), ("/v1/recommend", {}), ("/healthz", {})]
    for route, params in requests:
        r = client.get(route, params=params)
        assert r.status_code < 500, (route, params, r.text)
        for secret in secrets:
            assert secret not in r.text, (route, params, r.text)
    r = client.get("/v1/recommend", params={"model": "broken", "host_class": HOST_CLASS})
    assert r.status_code == 400 and r.json()["error"].startswith("broken/config.json: decoder_sparse_step is 'two'")
    r = client.get("/v1/recommend", params={"model": "acme/broken", "host_class": HOST_CLASS})
    assert r.json()["error"].startswith("config.json of acme/broken: decoder_sparse_step is 'two'")


def test_a_config_asking_for_1e8_layers_is_refused_quickly(server_files, fleet_db):
    root = server_files / "root"
    config = json.loads((MODELS / "deepseek-v3" / "config.json").read_text())
    for name, layers in (("huge", 10**8), ("float", 1e8)):
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps({**config, "num_hidden_layers": layers}))
    client = TestClient(create_app(fleet_db, model_roots=[root]))
    for name in ("huge", "float"):
        start = time.monotonic()
        r = client.get("/v1/recommend", params={"model": name, "host_class": HOST_CLASS})
        assert r.status_code == 400 and "num_hidden_layers" in r.json()["error"]
        assert time.monotonic() - start < 5


def test_a_query_string_longer_than_any_parameter_needs_is_refused(fleet_db):
    client = TestClient(create_app(fleet_db))
    r = client.get("/v1/recommend", params={"model": "a" * 5000})
    assert (r.status_code, r.json()) == (414, {"error": "query string longer than 4096 bytes"})


def test_drift_of_an_unknown_host_class_is_404_like_recommend(fleet_db):
    client = TestClient(create_app(fleet_db, model_roots=[MODELS]))
    drift = client.get("/v1/drift", params={"host_class": "bogus"})
    rec = client.get("/v1/recommend", params={"model": "deepseek-v3", "host_class": "bogus"})
    assert drift.status_code == rec.status_code == 404
    assert drift.json()["error"].startswith("host class 'bogus' is not in ")
    assert client.get("/v1/drift", params={"host_class": HOST_CLASS}).status_code == 200


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(*args: str) -> tuple[subprocess.Popen, int]:
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "autoselect", "serve", *args, "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return proc, port


def _wait_listening(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("serve did not start")


def test_head_is_answered_like_get_over_a_real_connection(fleet_db):
    import httpx

    proc, port = _start("--db", str(fleet_db), "--model-root", str(MODELS))
    try:
        _wait_listening(port, proc)
        base = f"http://127.0.0.1:{port}"
        for path in ("/healthz", "/v1/hosts", "/v1/drift",
                     f"/v1/recommend?model=deepseek-v3&host_class={HOST_CLASS}", "/v1/recommend?model=x/nope"):
            get, head = httpx.get(base + path, timeout=60), httpx.head(base + path, timeout=60)
            assert head.status_code == get.status_code != 405, path
            assert head.content == b"" and head.headers["content-type"] == get.headers["content-type"], path
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_a_taken_port_is_one_error_line_and_exit_2(fleet_db):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = run_module("serve", "--db", fleet_db, "--port", port, timeout=60)
    line = refused(r)
    assert line.startswith(f"Error: cannot listen on 127.0.0.1:{port} (Address already in use)")


def test_a_host_this_machine_does_not_have_is_one_error_line(fleet_db):
    refused(run_module("serve", "--db", fleet_db, "--host", "no-such-host.invalid", "--port", "8765", timeout=60))


def test_a_missing_model_root_is_one_error_line(fleet_db, tmp_path):
    line = refused(run_module("serve", "--db", fleet_db, "--model-root", tmp_path / "none", timeout=60))
    assert "is not a directory" in line


def test_binding_beyond_loopback_warns_that_there_is_no_authentication(fleet_db):
    proc, port = _start("--db", str(fleet_db), "--host", "0.0.0.0")
    try:
        _wait_listening(port, proc)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    warning = [ln for ln in err.splitlines() if ln.startswith("Warning: ")]
    assert warning and f"serving on 0.0.0.0:{port}, reachable from other machines, without authentication" in warning[0]


def test_loopback_binds_do_not_warn(fleet_db):
    proc, port = _start("--db", str(fleet_db))
    try:
        _wait_listening(port, proc)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "Warning" not in err


def _secret_config(tmp_path: Path) -> Path:
    """A JSON file outside every root whose values an error message would quote."""
    secret = tmp_path / "outside" / "secret.json"
    secret.parent.mkdir()
    secret.write_text(json.dumps({**json.loads((MODELS / "deepseek-v3" / "config.json").read_text()),
                                  "decoder_sparse_step": "TOKEN-abc123", "model_type": "TOKEN-abc123"}))
    return secret


@pytest.mark.parametrize("link", ["config.json", "hf_quant_config.json", "directory-of-links"])
def test_a_config_file_linked_out_of_the_root_is_an_unknown_model(tmp_path, fleet_db, link):
    secret = _secret_config(tmp_path)
    root = tmp_path / "root"
    model = root / "leaky"
    model.mkdir(parents=True)
    if link == "config.json":
        (model / "config.json").symlink_to(secret)
    elif link == "hf_quant_config.json":
        shutil.copy(MODELS / "deepseek-v3" / "config.json", model / "config.json")
        (model / "hf_quant_config.json").symlink_to(secret)
    else:  # every file a link to outside, the directory itself inside
        (model / "config.json").symlink_to(secret)
        (model / "hf_quant_config.json").symlink_to(tmp_path / "outside")
    (root / "missing").mkdir()
    client = TestClient(create_app(fleet_db, model_roots=[root]))
    answers = [client.get("/v1/recommend", params={"model": name, "host_class": HOST_CLASS}) for name in
               ("leaky", "missing", "nosuch")]
    for r in answers:
        assert (r.status_code, r.json()) == (404, {"error": UNKNOWN_MODEL})
        assert "TOKEN" not in r.text


def test_a_config_linked_inside_the_root_is_still_served(tmp_path, fleet_db):
    root = tmp_path / "root"
    shutil.copytree(MODELS / "deepseek-v3", root / "store" / "deepseek-v3")
    (root / "alias").mkdir()
    (root / "alias" / "config.json").symlink_to(root / "store" / "deepseek-v3" / "config.json")
    client = TestClient(create_app(fleet_db, model_roots=[root]))
    r = client.get("/v1/recommend", params={"model": "alias", "host_class": HOST_CLASS})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("query, name", [
    ("model=deepseek-v3&host_class=%ff%fe", "host_class"),
    ("model=%ed%a0%80", "model"),  # the UTF-8 spelling of a lone surrogate: not UTF-8 either
    ("model=deepseek-v3&tokens=1%c3", "tokens"),
    ("model=deepseek-v3&vllm_version=0.%80", "vllm_version"),
])
def test_a_query_that_is_not_utf8_is_refused_before_anything_reads_it(fleet_db, query, name):
    client = TestClient(create_app(fleet_db, model_roots=[MODELS]))
    for route in ("/v1/recommend", "/v1/drift", "/v1/hosts"):
        r = client.get(f"{route}?{query}")
        assert r.status_code == 400, (route, r.text)
        error = r.json()["error"]
        assert error.startswith(f"query parameter '{name}' is not valid UTF-8 (byte ") and error.endswith(
            "of its value, percent-decoded); send UTF-8 text, percent-encoded"), error


#: numbers the web framework read its own way (pydantic: "1_0" is 10, " 8 " is 8) or not at all
@pytest.mark.parametrize("name, value", [("dp", "1_0"), ("dp", "١٠"), ("dp", "0x10"), ("dp", "1e1"), ("dp", "+8"),
                                         ("tp", "1_0"), ("world_size", "8.0"), ("concurrency", "2_56"),
                                         ("max_num_batched_tokens", "8_192"), ("max_workspace_gib", "1_0"),
                                         ("max_workspace_gib", "nan"), ("max_workspace_gib", "inf")])
def test_a_query_number_is_refused_where_the_command_line_refuses_it(fleet_db, name, value):
    from support.hostile import cli

    client = TestClient(create_app(fleet_db, model_roots=[MODELS]))
    r = client.get("/v1/recommend", params={"model": "deepseek-v3", "host_class": HOST_CLASS, name: value})
    line = refused(cli("recommend", "--model", MODELS / "deepseek-v3", "--host-class", HOST_CLASS, "--db", fleet_db,
                       f"--{name.replace('_', '-')}={value}"))
    assert r.status_code == 400
    assert r.json()["error"] == line[len("Error: "):].replace(f"--{name.replace('_', '-')}", name, 1)


@pytest.mark.parametrize("name", ["data", "expert", "parallel", "allgather_reducescatter", "serve", "deepseek-v3"])
def test_a_model_root_given_as_a_relative_name_never_rewrites_answer_text(tmp_path, fleet_db, monkeypatch, name):
    # the root's name is also a word of the answer (--data-parallel-size, --enable-expert-parallel,
    # the backend, the vllm serve command, the model): only the path it resolves to is scrubbed
    shutil.copytree(MODELS / "deepseek-v3", tmp_path / name / "deepseek-v3")
    monkeypatch.chdir(tmp_path)
    relative = TestClient(create_app(fleet_db, model_roots=[name]))
    absolute = TestClient(create_app(fleet_db, model_roots=[MODELS]))
    params = {"model": "deepseek-v3", "host_class": HOST_CLASS, "dp": "8"}
    r = relative.get("/v1/recommend", params=params)
    assert r.status_code == 200, r.text
    assert r.json() == absolute.get("/v1/recommend", params=params).json()
    assert "--data-parallel-size" in r.text and "<model root>" not in r.text
    assert str(tmp_path) not in r.text


def test_the_scrubber_replaces_whole_paths_only(tmp_path):
    from autoselect.fleet.service.answers import Scrubber

    root = tmp_path / "data"
    scrub = Scrubber(tmp_path / "fleet.db", (root,))
    assert scrub(f"no config.json in {root}/x") == "no config.json in <model root>/x"
    assert scrub(f'"path": "{root}"') == '"path": "<model root>"'
    assert scrub(f"{root}2/x and {root}.old") == f"{root}2/x and {root}.old"  # other names that start alike
    assert scrub(f"/elsewhere{root}") == f"/elsewhere{root}"  # a path that ends alike
    assert scrub("--data-parallel-size data data/x") == "--data-parallel-size data data/x"


def _two_class_db(path: Path) -> Path:
    """The fleet database plus one machine of a second class."""
    from support.db import make_result
    from support.fleet import h200_host

    from db.store import Store

    db = build_fleet_db(path, fleet_runs=("f1",))
    with Store(db) as store, store.run(h200_host("lab-x", host_class="h200x8-lab")) as run:
        store.add_result(run.id, make_result())
    return db


def test_a_recommendation_without_host_class_never_describes_the_server(tmp_path, fleet_db, monkeypatch):
    import autoselect.selector.pipeline as pipeline

    def no_fingerprint(*a, **kw):
        raise AssertionError("serve took the server's own fingerprint")

    monkeypatch.setattr(pipeline, "fingerprint", no_fingerprint)
    one = TestClient(create_app(fleet_db, model_roots=[MODELS]))
    r = one.get("/v1/recommend", params={"model": "deepseek-v3"})
    named = one.get("/v1/recommend", params={"model": "deepseek-v3", "host_class": HOST_CLASS})
    assert r.status_code == 200 and r.json() == named.json()  # the database's one class
    assert socket.gethostname() not in r.text

    two = TestClient(create_app(_two_class_db(tmp_path / "two.db"), model_roots=[MODELS]))
    r = two.get("/v1/recommend", params={"model": "deepseek-v3", "workload": "decode"})
    assert r.status_code == 400
    assert r.json() == {"error": "this service answers for the host classes of its database (h200x8-fleet, "
                                 "h200x8-lab): name one with host_class= (/v1/hosts lists them)"}
    assert two.get("/v1/recommend", params={"model": "deepseek-v3", "host_class": "h200x8-lab"}).status_code == 200


def _replace_with(db: Path, how: str) -> None:
    data = db.read_bytes()
    for extra in ("-wal", "-shm"):
        Path(f"{db}{extra}").unlink(missing_ok=True)
    db.unlink()
    if how == "garbage":
        db.write_bytes(b"not a database at all" * 100)
    elif how == "truncated":
        db.write_bytes(data[: len(data) // 3])
    elif how == "directory":
        db.mkdir()
    elif how == "foreign":
        import sqlite3

        with sqlite3.connect(db) as c:
            c.execute("CREATE TABLE t (x)")


@pytest.mark.parametrize("how", ["deleted", "garbage", "truncated", "directory", "foreign"])
def test_a_database_that_turns_unreadable_is_503_on_every_route_never_500(tmp_path, how):
    db = build_fleet_db(tmp_path / "fleet.db", fleet_runs=("f1",))
    client = TestClient(create_app(db, model_roots=[MODELS]), raise_server_exceptions=False)
    routes = [("/v1/recommend", {"model": "deepseek-v3", "host_class": HOST_CLASS, "workload": "prefill"}),
              ("/v1/hosts", {}), ("/v1/drift", {}), ("/healthz", {})]
    assert [client.get(r, params=p).status_code for r, p in routes] == [200] * 4
    _replace_with(db, how)
    routes[0][1]["workload"] = "decode"  # a question not answered before: it must read the database
    for route, params in routes:
        r = client.get(route, params=params)
        assert r.status_code == 503, (route, r.status_code, r.text)
        assert str(tmp_path) not in r.text
