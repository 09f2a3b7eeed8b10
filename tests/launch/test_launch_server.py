"""``launch --server``: the fleet's ``autoselect serve`` answers; when it cannot, the local answer does.

The service runs in a thread on loopback (tests/support/service.py) over the fleet database of
tests/support/fleet.py; broken services are small ``http.server`` stand-ins.
"""

from __future__ import annotations

import http.server
import socket
import threading
import time

import pytest

from support.fleet import DEEPSEEK_V3, HOST_CLASS, MODELS, build_fleet_db
from support.service import running_service

from autoselect.launch import LaunchOptions, plan_launch
from autoselect.selector import recommend_for

pytest.importorskip("uvicorn")
TOKEN = "0123456789abcdef0123456789abcdef"
LINE = ["vllm", "serve", DEEPSEEK_V3, "-dp", "8", "--enable-expert-parallel"]


@pytest.fixture(scope="module")
def fleet_db(tmp_path_factory):
    return build_fleet_db(tmp_path_factory.mktemp("fleet") / "fleet.db")


@pytest.fixture(scope="module")
def token_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("secret") / "token"
    path.write_text(TOKEN + "\n")
    return path


@pytest.fixture(scope="module")
def service(fleet_db, token_file):
    with running_service(fleet_db, model_roots=[MODELS], token_file=token_file) as url:
        yield url


def options(url, **kw):
    return LaunchOptions(server=url, workload="decode", server_timeout_s=kw.pop("timeout", 10.0), **kw)


def test_the_service_answers_with_the_fleets_pick(service, fleet_db, token_file, tmp_path, on_fleet_node):
    # the service answers for the host class (its newest machine), as `recommend --host-class` does
    rec = recommend_for(DEEPSEEK_V3, db_path=fleet_db, dp=8, workload="decode", host_class=HOST_CLASS)
    plan = plan_launch(LINE, options(service, token_file=token_file, db_path=tmp_path / "local-none.db"))
    assert (plan.action, plan.backend, plan.pick.confidence) == ("insert", rec.backend, rec.confidence)
    assert plan.pick.source == f"the service {service} ({HOST_CLASS})"
    assert plan.database is None and plan.server_problem is None
    assert plan.to_dict()["pick"]["source"] == plan.pick.source
    assert TOKEN not in repr(plan.to_dict()) and TOKEN not in plan.text


def test_a_wrong_token_falls_back_to_the_local_database_and_says_so(service, fleet_db, tmp_path, on_fleet_node):
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-token-but-long-enough\n")
    plan = plan_launch(LINE, options(service, token_file=wrong, db_path=fleet_db))
    assert plan.action == "insert" and plan.pick.source.startswith(f"the database {fleet_db}")
    assert plan.server_problem == ("it answered HTTP 401: 'this service needs a bearer token: send `Authorization: "
                                   "Bearer <token>` (autoselect launch --token-file)'")
    assert plan.text.endswith(f"(the service {service} was not used: {plan.server_problem})")
    assert "not-the-token" not in plan.text


def test_without_a_token_the_guarded_service_refuses_and_the_reference_answers(service, tmp_path, on_fleet_node):
    plan = plan_launch(LINE, options(service, db_path=tmp_path / "none.db"))
    assert plan.server_problem.startswith("it answered HTTP 401")
    assert "NVIDIA's published reference (class ref-h200_sxm-x8); no database at" in plan.text


def test_a_service_nobody_runs_falls_back_at_once(tmp_path, on_fleet_node):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    plan = plan_launch(LINE, options(f"http://127.0.0.1:{port}", db_path=tmp_path / "none.db"))
    assert plan.server_problem.startswith("no answer (") and "refused" in plan.server_problem.lower()


def test_a_service_that_never_answers_costs_at_most_the_timeout(tmp_path, on_fleet_node):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts (the kernel does), never reads or answers
    try:
        start = time.monotonic()
        plan = plan_launch(LINE, options(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout=0.5,
                                         db_path=tmp_path / "none.db"))
        elapsed = time.monotonic() - start
    finally:
        listener.close()
    assert plan.server_problem in ("no answer within 0.5 s", "no answer (timed out)")
    assert elapsed < 0.5 + 3.0  # the deadline, plus the local answer


class _Stub(http.server.BaseHTTPRequestHandler):
    """A service stand-in: answers every GET with the class's status, headers and body."""

    status, headers, body, seen = 200, {}, b"{}", []

    def do_GET(self):  # noqa: N802 (http.server's name)
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        self.send_response(self.status)
        for k, v in self.headers_out.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@pytest.fixture
def stub():
    """Start a stub service; returns ``make(status, body, headers) -> url``."""
    servers = []

    def make(status=200, body=b"{}", headers=None):
        handler = type("Handler", (_Stub,), {"status": status, "body": body, "headers_out": headers or {},
                                              "seen": []})
        server = http.server.HTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}", handler

    yield make
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_redirect_is_not_followed_so_the_token_goes_nowhere_else(stub, token_file, tmp_path, on_fleet_node):
    elsewhere, other = stub()
    url, handler = stub(302, b"", {"Location": f"{elsewhere}/steal"})
    plan = plan_launch(LINE, options(url, token_file=token_file, db_path=tmp_path / "none.db"))
    assert plan.server_problem == f"it redirected to {elsewhere}/steal (not followed: the token goes only where " \
                                  "--server points)"
    assert handler.seen[0][1] == f"Bearer {TOKEN}" and other.seen == []


def test_an_answer_that_is_not_a_recommendation_is_not_used(stub, tmp_path, on_fleet_node):
    url, _ = stub(200, b"<html>proxy login</html>")
    assert plan_launch(LINE, options(url, db_path=tmp_path / "n.db")).server_problem == "its answer is not JSON"
    url, _ = stub(200, b'{"status": "ok"}')
    assert plan_launch(LINE, options(url, db_path=tmp_path / "n.db")).server_problem == \
        "the answer is not a recommendation (no backend, confidence or vllm_args)"


def test_a_pick_the_rules_refuse_here_is_not_used(stub, tmp_path, on_fleet_node):
    answer = (b'{"backend": "flashinfer_nvlink_one_sided", "confidence": "high", "gpu_arch": "sm90", '
              b'"vllm_args": ["--all2all-backend", "flashinfer_nvlink_one_sided"], "candidates": []}')
    url, _ = stub(200, answer)
    plan = plan_launch(LINE, options(url, db_path=tmp_path / "n.db"))
    assert plan.server_problem.startswith("its pick is illegal here: flashinfer_nvlink_one_sided needs nvfp4 "
                                          "activations")
    assert plan.backend != "flashinfer_nvlink_one_sided"


def test_the_service_is_asked_for_this_machines_class_and_the_models_name_under_its_root(stub, tmp_path,
                                                                                        on_fleet_node):
    url, handler = stub(503, b'{"error": "busy"}')
    plan = plan_launch([*LINE, "--max-num-seqs", "16"], options(url, db_path=tmp_path / "n.db"))
    assert plan.server_problem == "it answered HTTP 503: 'busy'"
    path, auth = handler.seen[0]
    assert path.startswith("/v1/recommend?model=deepseek-v3&") and auth is None
    for part in (f"host_class={HOST_CLASS}", "dp=8", "tp=1", "workload=decode", "concurrency=128", "vllm_version="):
        assert part in path


def test_a_token_over_plain_http_beyond_this_machine_is_a_warning(token_file, tmp_path, on_fleet_node, monkeypatch):
    import autoselect.launch.service as service
    from autoselect.launch.pick import ServiceUnavailable

    def unreachable(*args, **kw):
        raise ServiceUnavailable("no answer (test)")

    monkeypatch.setattr(service, "ask_service", unreachable)
    plan = plan_launch(LINE, options("http://autoselect.fleet.example:8765", token_file=token_file,
                                     db_path=tmp_path / "n.db"))
    assert plan.warnings[0] == ("the bearer token goes to http://autoselect.fleet.example:8765 in clear text (plain "
                                "http beyond this machine); put a TLS proxy in front of the service and pass its "
                                "https:// URL")


# ---- the service's answer is untrusted input -------------------------------------------------------


def _answer(backend="allgather_reducescatter", *extra, **fields) -> bytes:
    import json

    args = ["--data-parallel-size", "8", "--enable-expert-parallel", "--all2all-backend", backend, *extra]
    return json.dumps({"backend": backend, "confidence": "high", "vllm_args": args, "candidates": [],
                       **fields}).encode()


@pytest.mark.parametrize("extra, field", [
    (["--all2all-backend=flashinfer_nvlink_one_sided"], "vllm_args: --all2all-backend appears twice"),
    (["--all2all_backend", "flashinfer_nvlink_one_sided"], "vllm_args: '--all2all_backend' is not a flag"),
    (["--trust-remote-code"], "vllm_args: '--trust-remote-code' is not a flag autoselect emits"),
    (["--host", "0.0.0.0"], "vllm_args: '--host' is not a flag autoselect emits"),
    (["--api-key", "stolen"], "vllm_args: '--api-key' is not a flag autoselect emits"),
    (["--config", "/tmp/x.yaml"], "vllm_args: '--config' is not a flag autoselect emits"),
])
def test_an_answer_carrying_any_other_flag_is_refused_and_nothing_of_it_runs(extra, field, stub, tmp_path,
                                                                           on_fleet_node):
    url, _ = stub(200, _answer("allgather_reducescatter", *extra))
    plan = plan_launch(LINE, options(url, db_path=tmp_path / "n.db"))
    assert plan.server_problem == f"its answer is refused: {field}" or plan.server_problem.startswith(
        f"its answer is refused: {field}")
    assert not set(extra) & set(plan.final.argv) and not any(w.startswith(extra[0]) for w in plan.final.argv[6:])


@pytest.mark.parametrize("knobs, field", [
    ({"env": {"LD_PRELOAD": "/tmp/evil.so"}}, "knobs.env: 'LD_PRELOAD' is not a variable of autoselect's knob table"),
    ({"env": {"NCCL_PROTO": "LL\nEVIL=1"}}, "knobs.env: 'NCCL_PROTO' = 'LL\\nEVIL=1' is not one of its values "
                                             "(LL, LL128, Simple)"),
    ({"env": ["NCCL_PROTO=LL"]}, "knobs.env is not an object"),
    ("LD_PRELOAD=/tmp/x.so", "knobs is not an object"),
])
def test_an_answer_with_a_variable_outside_the_knob_table_is_refused(knobs, field, stub, tmp_path, on_fleet_node):
    url, _ = stub(200, _answer(knobs=knobs))
    plan = plan_launch(LINE, options(url, db_path=tmp_path / "n.db"))
    assert plan.server_problem == f"its answer is refused: {field}"
    assert "LD_PRELOAD" not in plan.final.shell() and "EVIL" not in plan.final.shell()


def test_the_pick_is_judged_on_this_machines_gpus_never_on_the_arch_the_answer_claims(stub, tmp_path, on_fleet_node):
    # this machine is an H200 node (sm90): an NVFP4 model dispatches bf16 here, whatever the answer says
    nvfp4 = str(MODELS / "deepseek-r1-nvfp4")
    url, _ = stub(200, _answer("flashinfer_nvlink_one_sided", gpu_arch="sm100",
                               data_used={"host_class": "b200-claimed"}))
    plan = plan_launch(["vllm", "serve", nvfp4, "-dp", "8", "-ep"], options(url, db_path=tmp_path / "n.db"))
    assert plan.server_problem.startswith("its pick is illegal here: flashinfer_nvlink_one_sided needs nvfp4 "
                                          f"activations; {nvfp4} dispatches bf16 on sm90")
    assert "flashinfer_nvlink_one_sided" not in plan.final.argv and plan.gpu_arch == "sm90"
    # --gpu-arch names the GPUs: there it is legal, and it is used
    plan = plan_launch(["vllm", "serve", nvfp4, "-dp", "8", "-ep"], options(url, db_path=tmp_path / "n.db",
                                                                            gpu_arch="sm100"))
    assert (plan.backend, plan.server_problem) == ("flashinfer_nvlink_one_sided", None)


@pytest.mark.parametrize("body, problem", [
    (b"[1, 2]", "its answer is not a JSON object"),
    (b'{"backend": "allgather_reducescatter", "confidence": 3, "vllm_args": []}',
     "the answer is not a recommendation (no backend, confidence or vllm_args)"),
    (_answer(candidates="all"), "the answer's candidates is not a list"),
    (_answer(confidence_reasons="a string"), "the answer's confidence_reasons is not a list"),
    (_answer(confidence_reasons=[{"x": 1}]), "the answer's confidence_reasons item is not a text"),
    (_answer(bench_command=7), "the answer's bench_command is not a text"),
    (_answer(warnings=["w" * 5000]), "the answer's warnings item is not a text of at most 2000 characters"),
    (_answer(data_used=["h200"]), "the answer's data_used is not an object"),
    (_answer(backend_unknown=1, vllm_args="--all2all-backend x"), "the answer is not a recommendation"),
])
def test_a_malformed_answer_is_not_used_and_the_launcher_says_why(body, problem, stub, tmp_path, on_fleet_node):
    url, _ = stub(200, body)
    plan = plan_launch(LINE, options(url, db_path=tmp_path / "n.db"))
    assert plan.server_problem.startswith(problem), plan.server_problem


def test_a_services_error_text_never_reaches_the_terminal_raw(stub, tmp_path, on_fleet_node):
    from click.testing import CliRunner

    from autoselect.cli import main

    forged = "busy\nError: your GPUs are on fire\x1b[2J\x1b]0;owned\x07\r" + "x" * 500
    url, _ = stub(500, ('{"error": %s}' % __import__("json").dumps(forged)).encode())
    result = CliRunner().invoke(main, ["launch", "--dry-run", "--server", url, "--db", str(tmp_path / "n.db"),
                                       "--workload", "decode", "--", *LINE])
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert not [ln for ln in lines if ln.startswith("Error")] and "\x1b" not in result.stderr
    assert "\r" not in result.stderr and "\x07" not in result.stderr
    assert "it answered HTTP 500: 'busy\\nError: your GPUs are on fire\\x1b[2J" in result.stderr
    assert "x" * 201 not in result.stderr  # shortened
