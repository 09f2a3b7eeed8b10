"""The read-only HTTP API, exercised over real loopback requests (uvicorn in a thread, httpx)."""

from __future__ import annotations

import json

import httpx
import pytest
from click.testing import CliRunner

from support.fleet import DEEPSEEK_V3, HOST_CLASS, MODELS, SLOW_NODE, build_fleet_db
from support.service import running_service

from autoselect.cli import main

pytest.importorskip("uvicorn")


@pytest.fixture(scope="module")
def fleet_db(tmp_path_factory):
    """The drift scenario of tests/support/fleet.py."""
    return build_fleet_db(tmp_path_factory.mktemp("svc") / "fleet.db")


@pytest.fixture(scope="module")
def base_url(fleet_db):
    """``autoselect.fleet.service`` on 127.0.0.1 at a free port, in a background thread."""
    with running_service(fleet_db, model_roots=[MODELS]) as url:
        yield url


def test_healthz_answers_ok(base_url, fleet_db):
    r = httpx.get(f"{base_url}/healthz")
    assert r.status_code == 200
    assert r.json() == {"status": "ok", "db": fleet_db.name, "schema_version": r.json()["schema_version"]}


def test_recommend_returns_the_same_json_as_the_cli(base_url, fleet_db):
    # serve names the checkpoint under its --model-root; the CLI takes the path
    r = httpx.get(f"{base_url}/v1/recommend",
                  params={"model": "deepseek-v3", "host_class": HOST_CLASS, "workload": "decode"})
    assert r.status_code == 200, r.text
    cli = CliRunner().invoke(main, ["recommend", "--model", DEEPSEEK_V3, "--host-class", HOST_CLASS,
                                    "--workload", "decode", "--db", str(fleet_db), "--format", "json"])
    assert cli.exit_code == 0, cli.output
    assert r.json() == json.loads(cli.stdout.replace(DEEPSEEK_V3, "deepseek-v3"))
    assert r.json()["model"] == "deepseek-v3" and r.json()["workload"]["kind"] == "decode"


def test_hosts_lists_the_host_classes(base_url):
    r = httpx.get(f"{base_url}/v1/hosts")
    assert r.status_code == 200
    assert [(h["host_class"], h["machines"]) for h in r.json()["host_classes"]] == [(HOST_CLASS, 4)]


def test_drift_flags_the_slow_node(base_url):
    doc = httpx.get(f"{base_url}/v1/drift").json()
    flagged = [n["hostname"] for n in doc["nodes"] if n["flagged"]]
    assert flagged == [SLOW_NODE]


def test_unknown_model_is_404_with_a_message(base_url, tmp_path):
    r = httpx.get(f"{base_url}/v1/recommend", params={"model": "acme/nowhere", "host_class": HOST_CLASS})
    assert r.status_code == 404
    assert r.json()["error"].startswith("unknown model: this server answers for Hugging Face model ids in its cache")


def test_unknown_host_class_is_404(base_url):
    r = httpx.get(f"{base_url}/v1/recommend", params={"model": "deepseek-v3", "host_class": "tpu-v9"})
    assert r.status_code == 404
    assert "tpu-v9" in r.json()["error"]


@pytest.mark.parametrize("params, message", [
    ({}, "model: Field required"),
    ({"model": "deepseek-v3", "dp": "two"}, "dp 'two' is not a whole number written in digits 0-9"),
    ({"model": "deepseek-v3", "host_class": HOST_CLASS, "workload": "weekend"},
     "unknown workload 'weekend'; use one of decode, prefill, mixed or --tokens"),
])
def test_bad_parameters_are_400_with_a_clear_message(base_url, params, message):
    r = httpx.get(f"{base_url}/v1/recommend", params=params)
    assert r.status_code == 400
    assert r.json() == {"error": message}


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_there_are_no_write_endpoints(base_url, method, fleet_db):
    before = fleet_db.read_bytes()
    for path in ("/v1/recommend", "/v1/hosts", "/v1/drift", "/healthz"):
        r = httpx.request(method, f"{base_url}{path}")
        assert (r.status_code, r.json()) == (405, {"error": "Method Not Allowed"})
    assert fleet_db.read_bytes() == before


def test_serve_on_a_missing_database_is_one_error_line(tmp_path):
    result = CliRunner().invoke(main, ["serve", "--db", str(tmp_path / "none.db"), "--port", "0"])
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: ")
    assert result.stderr.count("\n") == 1
    assert not (tmp_path / "none.db").exists()


def test_serve_rejects_a_port_out_of_range(fleet_db):
    result = CliRunner().invoke(main, ["serve", "--db", str(fleet_db), "--port", "70000"])
    assert result.exit_code == 2
    assert result.stderr == "Error: --port 70000 is not a TCP port; use 1-65535\n"


def test_healthz_is_503_with_the_reason_when_the_database_goes_away(tmp_path):
    from fastapi.testclient import TestClient

    from autoselect.fleet.service.app import create_app

    db = build_fleet_db(tmp_path / "fleet.db")
    client = TestClient(create_app(db))
    assert client.get("/healthz").status_code == 200
    db.unlink()
    for extra in ("-wal", "-shm"):
        (tmp_path / f"fleet.db{extra}").unlink(missing_ok=True)
    r = client.get("/healthz")
    assert r.status_code == 503
    assert r.json()["error"].startswith("no results database at <database>")


def test_unknown_paths_are_404_in_the_same_error_shape(base_url):
    r = httpx.get(f"{base_url}/v1/nothing")
    assert (r.status_code, r.json()) == (404, {"error": "Not Found"})
