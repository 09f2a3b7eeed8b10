"""Property-based tests of the promise, one per input kind: generated hostile model configs,
import records, deploy values and HTTP query parameters.

The promise: a bad input is exit 2 and one ``Error:`` line (HTTP: a 4xx with ``{"error": ...}``),
never a traceback; nothing is written (the database byte-identical, no file created); a good
input keeps working. Each property is bounded (``max_examples``) so that all of them together
take a few minutes at most on a loaded CI machine; the example database is off (``database=None``:
no ``.hypothesis/`` directory is written).
"""

from __future__ import annotations

import copy
import json
import math
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from support.hostile import cli, systemd_environment_of, systemd_exec_argv, tree_state
from support.paths import FIXTURES

from autoselect.errors import UserError

MODELS = FIXTURES / "models"
BOUNDED = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

#: JSON values that break types and ranges: huge and negative integers, non-finite floats,
#: strings, nested containers, booleans, null
HOSTILE_JSON = st.recursive(
    st.one_of(
        st.none(), st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.sampled_from([0, -1, 1, 2**31, 2**63, 10**400, 4097, 128, 500]),
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from([1e11, 1e400, -0.0, 0.5]),
        st.text(max_size=20),
        st.sampled_from(["fp8", "", "1", "notadict", "yes", "not a date"]),
    ),
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)),
    max_leaves=8,
)


def _json_text(obj) -> str:
    # Python's json writes nan / inf as NaN / Infinity, which json.loads reads back: hostile but parseable
    return json.dumps(obj)


# --- model configs -------------------------------------------------------------------------------------

CONFIG_BASES = ["qwen3-30b-a3b", "deepseek-v3", "mixtral-8x7b", "qwen3-30b-a3b-nvfp4-ct", "deepseek-r1-nvfp4"]
#: the fields the loader reads (top level and inside the quantization block)
CONFIG_FIELDS = ["hidden_size", "num_experts", "n_routed_experts", "num_local_experts", "num_experts_per_tok",
                 "num_hidden_layers", "first_k_dense_replace", "moe_layer_freq", "decoder_sparse_step",
                 "mlp_only_layers", "moe_layers", "interleave_moe_layer_step", "model_type", "torch_dtype",
                 "quantization_config", "text_config"]
QUANT_FIELDS = ["quant_method", "quant_algo", "activation_scheme", "weight_block_size", "config_groups",
                "quantized_layers", "quantization"]


@st.composite
def hostile_configs(draw):
    base = json.loads((MODELS / draw(st.sampled_from(CONFIG_BASES)) / "config.json").read_text())
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()) and isinstance(base.get("quantization_config"), dict):
            base["quantization_config"][draw(st.sampled_from(QUANT_FIELDS))] = draw(HOSTILE_JSON)
        else:
            base[draw(st.sampled_from(CONFIG_FIELDS))] = draw(HOSTILE_JSON)
    return base


def _inspect(config_text: bytes | str) -> object:
    with tempfile.TemporaryDirectory() as d:
        model = Path(d) / "m"
        model.mkdir()
        data = config_text.encode() if isinstance(config_text, str) else config_text
        (model / "config.json").write_bytes(data)
        result = cli("inspect", "--model", model, "--format", "json")
        assert sorted(p.name for p in model.iterdir()) == ["config.json"]
        return result


def _keeps_the_promise(result) -> None:
    assert "Traceback" not in result.stderr, result.stderr
    if result.exit_code == 0:
        assert result.stderr == ""
        return
    assert result.exit_code == 2, (result.exit_code, result.stderr, result.exception)
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("Error: "), result.stderr
    assert result.stdout == ""


@pytest.mark.slow  # 300 examples: 5-7 s on 2 cores
@settings(max_examples=300, **BOUNDED)
@given(hostile_configs())
def test_any_config_is_a_profile_or_one_error_line(config):
    result = _inspect(_json_text(config))
    _keeps_the_promise(result)
    if result.exit_code == 0:  # what was accepted is a coherent profile
        p = json.loads(result.stdout)
        assert 1 <= p["top_k"] <= p["num_experts"] and p["hidden_size"] >= 1
        assert set(p["activation_dtypes"]) == {"sm90", "sm100"}


@settings(max_examples=60, **BOUNDED)
@given(st.binary(max_size=200) | st.text(max_size=100).map(lambda t: t.encode("utf-16")))
def test_any_bytes_are_a_profile_or_one_error_line(data):
    _keeps_the_promise(_inspect(data))


@settings(max_examples=40, **BOUNDED)
@given(st.sampled_from(["", "quantization_config"]), st.one_of(st.text(max_size=10), st.lists(st.text(max_size=4)),
                                                              st.just({}), st.integers()))
def test_a_quantization_block_that_is_not_an_object_is_never_read_as_unquantized(where, value):
    config = json.loads((MODELS / "qwen3-30b-a3b" / "config.json").read_text())
    config["quantization_config"] = value
    result = _inspect(_json_text(config))
    _keeps_the_promise(result)
    assert result.exit_code == 2 and "quantization_config" in result.stderr


# --- import records ------------------------------------------------------------------------------------

RESULT_FIELDS = ["world_size", "tokens_per_rank", "hidden", "top_k", "experts", "latency_us_p50", "latency_us_p99",
                 "noise_stdrel", "knobs", "versions", "created_at", "illegal", "status", "samples", "backend",
                 "raw_samples_us", "bytes_per_rank", "noise_target_met", "kind", "device"]
HOST_FIELDS = ["machine_id", "host_class", "gpu_count", "gpus", "nvlink_matrix", "versions", "last_seen", "device"]
RUN_FIELDS = ["uid", "meta", "pid", "started_at", "updated_at", "status", "host_class", "finished_at"]


@pytest.fixture(scope="module")
def export_lines(tmp_path_factory):
    from support.db import filled_db

    d = tmp_path_factory.mktemp("props")
    src = filled_db(d / "src.db")
    r = cli("db", "export", "--db", src)
    target = filled_db(d / "target.db")
    cli("db", "info", "--db", target)  # settle the -wal / -shm a reader leaves
    return [json.loads(ln) for ln in r.stdout.splitlines()], target


@st.composite
def poisoned_records(draw, records):
    rec = copy.deepcopy(draw(st.sampled_from(records)))
    part = draw(st.sampled_from(["result", "host", "run"]))
    field = draw(st.sampled_from({"result": RESULT_FIELDS, "host": HOST_FIELDS, "run": RUN_FIELDS}[part]))
    rec[part][field] = draw(HOSTILE_JSON)
    if draw(st.booleans()):
        rec.pop("result_key", None)
    return rec


@settings(max_examples=200, **BOUNDED)
@given(data=st.data())
def test_an_import_either_keeps_the_schema_or_writes_nothing(export_lines, data):
    records, target = export_lines
    rec = data.draw(poisoned_records(records))
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        db = d / "t.db"
        shutil.copy(target, db)
        f = d / "in.jsonl"
        f.write_text(_json_text(rec) + "\n")
        before = tree_state(d)
        result = cli("db", "import", f, "--db", db)
        _keeps_the_promise(result)
        if result.exit_code == 2:
            assert result.stderr.startswith(f"Error: {f} line 1: "), result.stderr
            assert tree_state(d) == before
            return
        check = cli("db", "check", "--db", db, "--format", "json")  # what got in keeps every rule
        assert check.exit_code == 0, check.stdout
        assert json.loads(check.stdout)["schema_violations"] == 0


#: text for an imported string field: lone surrogates (a JSON \\ud800 escape), control characters,
#: non-ASCII, the reserved host-class prefix
IMPORT_TEXT = st.one_of(
    st.text(alphabet=st.one_of(st.characters(codec="utf-8"), st.sampled_from(["\ud800", "\udcff", "\udfff", "\x00",
                                                                              "\x1b", "\n", "é", "—"])),
            max_size=16),
    st.sampled_from(["ref-h200_sxm-x8", "ref-", "ref-x", "REF-x", ""]),
)
#: the text fields of each record part (a host class among them)
TEXT_FIELDS = {"host": ["hostname", "gpu_name", "cpu_model", "host_class", "driver_version", "machine_id"],
               "run": ["command", "trigger", "hostname", "uid", "host_class"],
               "result": ["error", "backend", "routing", "activation_dtype"]}


@settings(max_examples=200, **BOUNDED)
@given(data=st.data())
def test_imported_text_is_unicode_outside_the_reference_namespace_or_refused(export_lines, data):
    from autoselect.text import is_unicode

    records, target = export_lines
    rec = copy.deepcopy(data.draw(st.sampled_from([r for r in records if "result" in r])))
    part = data.draw(st.sampled_from(sorted(TEXT_FIELDS)))
    field = data.draw(st.sampled_from(TEXT_FIELDS[part]))
    text = data.draw(IMPORT_TEXT)
    rec[part][field] = text
    if part == "host" and field == "host_class":
        rec["run"]["host_class"] = text  # a run keeps its host's class: the namespace rule, not a mismatch
    rec.pop("result_key", None)
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        db = d / "t.db"
        shutil.copy(target, db)
        f = d / "in.jsonl"
        f.write_text(json.dumps(rec) + "\n")
        before = tree_state(d)
        result = cli("db", "import", f, "--db", db)
        _keeps_the_promise(result)
        read = json.loads(json.dumps(text))  # what the importer sees: an escaped surrogate pair is one character
        if not is_unicode(read):
            assert result.exit_code == 2 and "not valid Unicode text" in result.stderr, (field, text, result.stderr)
        elif field == "host_class" and read.startswith("ref-"):
            assert result.exit_code == 2 and "not a measured host class" in result.stderr, (text, result.stderr)
        if result.exit_code == 2:
            assert tree_state(d) == before
            return
        check = cli("db", "check", "--db", db, "--format", "json")
        assert check.exit_code == 0 and json.loads(check.stdout)["schema_violations"] == 0, check.stdout


@settings(max_examples=30, **BOUNDED)
@given(st.lists(HOSTILE_JSON, min_size=1, max_size=3))
def test_any_json_line_imports_or_is_one_error_line(values):
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "in.jsonl"
        f.write_text("\n".join(_json_text(v) for v in values) + "\n")
        result = cli("db", "import", f, "--db", Path(d) / "new.db")
        _keeps_the_promise(result)
        assert result.exit_code == 2 and not (Path(d) / "new.db").exists()


# --- deploy values ---------------------------------------------------------------------------------------

#: text that exercises every quoting rule: quotes, backslashes, $, %, ;, spaces, #, YAML and shell
#: syntax, control characters, non-ASCII
DEPLOY_TEXT = st.text(
    alphabet=st.one_of(st.sampled_from(list(" \"'\\$%;#:{}[]&|`()*?!<>=,@~\t\n\r\x00\x1b\x85é—\ufeff\U00010000\udcff")),
                       st.characters(codec="utf-8")),
    max_size=24,
)


@settings(max_examples=300, **BOUNDED)
@given(db=DEPLOY_TEXT, address=DEPLOY_TEXT, image=DEPLOY_TEXT, words=st.lists(DEPLOY_TEXT, max_size=3))
def test_deploy_values_come_back_exactly_or_are_refused(db, address, image, words):
    from autoselect.fleet.deploy import render

    yaml = pytest.importorskip("yaml")
    db_path = "/var/lib/" + db
    fleet_args = " ".join(shlex.quote(w) for w in words)
    try:
        files = {kind: render(kind, db_path=db_path, address=address, image=image, fleet_args=fleet_args,
                              executable="/usr/bin/autoselect")
                 for kind in ("systemd", "kubernetes", "slurm")}
    except UserError as e:
        text = db_path + address + image + fleet_args
        unsafe = [c for c in text if ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or 0xD800 <= ord(c) <= 0xDFFF]
        if unsafe:
            assert "holds the control character" in str(e) or "is not valid UTF-8" in str(e), str(e)
        else:  # a path with "." / ".." / "//" or a trailing "/" names no file plainly (a k8s mountPath refuses "..")
            assert not _plain_path(db_path) and "is not a plain path to a file" in str(e), str(e)
        return
    unit = files["systemd"]["autoselect-fleet.service"]
    assert systemd_environment_of(unit) == {"RAY_ADDRESS": address, "AUTOSELECT_DB": db_path}
    exec_line = next(ln for ln in unit.splitlines() if ln.startswith("ExecStart="))[len("ExecStart="):]
    assert systemd_exec_argv(exec_line)[6:] == words
    cronjob, _ = list(yaml.safe_load_all(files["kubernetes"]["cronjob.yaml"]))
    container = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == image and container["args"][5:] == words
    assert {e["name"]: e["value"] for e in container["env"]} == {"RAY_ADDRESS": address, "AUTOSELECT_DB": db_path}
    script = files["slurm"]["autoselect-fleet.sbatch"]
    export = next(ln for ln in script.splitlines() if ln.startswith("export AUTOSELECT_DB="))
    assert shlex.split(export[len("export "):]) == [f"AUTOSELECT_DB={db_path}"]


def _plain_path(path: str) -> bool:
    return not path.endswith("/") and all(part not in ("", ".", "..") for part in path.split("/")[1:])


@settings(max_examples=25, **BOUNDED)
@given(db=DEPLOY_TEXT)
def test_bash_reads_the_slurm_database_path_back_exactly(db):
    from autoselect.fleet.deploy import render

    assume(not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or 0xD800 <= ord(c) <= 0xDFFF for c in db))
    db_path = "/var/lib/" + db
    assume(_plain_path(db_path))
    script = render("slurm", db_path=db_path)["autoselect-fleet.sbatch"]
    export = next(ln for ln in script.splitlines() if ln.startswith("export AUTOSELECT_DB="))
    proc = subprocess.run(["bash", "-c", f'{export}; printf %s "$AUTOSELECT_DB"'], capture_output=True, timeout=30)
    assert proc.stdout.decode("utf-8", "surrogateescape") == db_path


# --- HTTP query parameters --------------------------------------------------------------------------------

QUERY_TEXT = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["", "0", "-1", "nan", "inf", "1e400", "99999999999999999999", "1,,2", "١٢", "../..", "/etc",
                     "~", "%00", "decode", "sm90", "0.0.1", "1,2,3", "h200x8-fleet"]),
)
RECOMMEND_PARAMS = ["model", "host_class", "workload", "tokens", "dp", "tp", "world_size", "gpu_arch", "vllm_version",
                    "concurrency", "max_num_batched_tokens", "max_workspace_gib"]


@pytest.fixture(scope="module")
def http_client(tmp_path_factory):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient
    from support.fleet import build_fleet_db

    from autoselect.fleet.service.app import create_app

    d = tmp_path_factory.mktemp("props-http")
    db = build_fleet_db(d / "fleet.db")
    return TestClient(create_app(db, model_roots=[MODELS])), [str(d), str(MODELS), os.path.expanduser("~")]


@settings(max_examples=200, **BOUNDED)
@given(route=st.sampled_from(["/v1/recommend", "/v1/drift", "/v1/hosts", "/healthz"]),
       params=st.dictionaries(st.sampled_from(RECOMMEND_PARAMS + ["min_slowdown", "noise_k"]), QUERY_TEXT, max_size=5),
       model=st.sampled_from(["deepseek-v3", "qwen3-30b-a3b", None]))
def test_any_query_is_an_answer_or_a_4xx_that_names_no_server_path(http_client, route, params, model):
    client, secrets = http_client
    if model is not None and "model" not in params:
        params["model"] = model
    r = client.get(route, params=params)
    assert r.status_code < 500, (route, params, r.text)
    body = r.json()
    if r.status_code >= 400:
        assert set(body) == {"error"} and body["error"], body
    for secret in secrets:
        assert secret not in r.text, (route, params, r.text)
    if route == "/v1/recommend" and r.status_code == 200:
        assert isinstance(body.get("backend"), (str, type(None)))
        assert all(not (isinstance(v, float) and not math.isfinite(v)) for v in body.values())


# --- command-line argument strings ------------------------------------------------------------------------

#: text a user could type for a number or a list: every script's digits, signs, exponents, nan / inf,
#: huge values, separators, blanks
ARG_TEXT = st.one_of(
    st.text(alphabet=st.sampled_from(list("0123456789-+.,:eE _xn ") + ["١", "٢", "໓", "٣", "²", "\u00a0", "½"]),
            max_size=12),
    st.sampled_from(["", " ", "nan", "inf", "-inf", "1e400", "99999999999999999999", "2147483648", "-1", "0",
                     "1,,2", ",", "1:0.5,2", "1:nan", "0x10", "1_000", "٣٢", "8", "2", "0.5", "1e-3", "16777217"]),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)

RECOMMEND_OPTIONS = ["--dp", "--tp", "--world-size", "--concurrency", "--max-num-batched-tokens",
                     "--max-workspace-gib", "--tokens", "--vllm-version"]
CONFIRM_OPTIONS = ["--dp", "--tp", "--kv-len", "--iters", "--samples", "--timeout", "--tokens", "--backends"]


@pytest.fixture(scope="module")
def recommend_db(tmp_path_factory):
    from db.importing import import_file

    d = tmp_path_factory.mktemp("props-args")
    db = d / "fixtures.db"
    import_file(db, FIXTURES / "results" / "h200.jsonl")
    cli("db", "info", "--db", db)  # settle the -wal / -shm a reader leaves
    return db


def _keeps_the_argument_promise(result) -> None:
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    if result.exit_code == 0:
        return
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    lines = [ln for ln in result.stderr.splitlines() if not ln.startswith("Warning: ")]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr


@settings(max_examples=150, **BOUNDED)
@given(option=st.sampled_from(RECOMMEND_OPTIONS), value=ARG_TEXT, command=st.sampled_from(["recommend", "explain"]))
def test_any_recommend_argument_is_an_answer_or_one_error_line(recommend_db, option, value, command):
    before = tree_state(recommend_db.parent)
    result = cli(command, "--model", MODELS / "deepseek-v3", "--host-class", "h200x8-5d1c7e0a", "--db", recommend_db,
                 f"{option}={value}")
    _keeps_the_argument_promise(result)
    assert tree_state(recommend_db.parent) == before
    if result.exit_code == 0 and option in ("--dp", "--tp", "--world-size"):
        assert int(value.strip()) <= 65536  # a deployment beyond any cluster is refused, never printed


@settings(max_examples=80, **BOUNDED)
@given(option=st.sampled_from(CONFIRM_OPTIONS), value=ARG_TEXT)
def test_any_confirm_dry_run_argument_is_a_plan_or_one_error_line(option, value):
    with tempfile.TemporaryDirectory() as d:
        before = tree_state(Path(d))
        result = cli("confirm", "--model", MODELS / "qwen3-30b-a3b", "--dry-run", "--gpu-arch", "sm90",
                     *(["--dp", "2"] if option != "--dp" else []), f"{option}={value}", "--db", Path(d) / "x.db")
        _keeps_the_argument_promise(result)
        assert tree_state(Path(d)) == before


@settings(max_examples=60, **BOUNDED)
@given(option=st.sampled_from(["--every", "--jitter"]), value=ARG_TEXT | st.sampled_from(["1h30m", "7d", "0s", "1d1d"]))
def test_any_deploy_duration_is_a_unit_or_one_error_line(option, value):
    _keeps_the_argument_promise(cli("fleet", "deploy", "--kind", "systemd", f"{option}={value}"))


@settings(max_examples=60, **BOUNDED)
@given(option=st.sampled_from(["--min-slowdown", "--noise-k"]), value=ARG_TEXT)
def test_any_drift_threshold_is_a_report_or_one_error_line(recommend_db, option, value):
    before = tree_state(recommend_db.parent)
    _keeps_the_argument_promise(cli("fleet", "drift", "--db", recommend_db, f"{option}={value}"))
    assert tree_state(recommend_db.parent) == before


# --- text that is not valid Unicode, at the command line and over HTTP ---------------------------------

#: argument text with lone surrogates (what bytes that are not UTF-8 become in argv) among other text
UNICODE_TEXT = st.text(alphabet=st.one_of(st.characters(codec="utf-8"),
                                          st.sampled_from(["\udcff", "\udc80", "\ud800", "\udfff", "é", "—"])),
                       max_size=12)
#: (command line with one slot, whether it needs the fixture database): every kind of text option
TEXT_SLOTS = [
    (["recommend", "--model", str(MODELS / "deepseek-v3"), "--host-class", None], True),
    (["explain", "--model", None], True),
    (["recommend", "--model", str(MODELS / "deepseek-v3"), "--tokens", None], True),
    (["fleet", "drift", "--host-class", None], True),
    (["db", "drop-run", None], True),
    (["db", "import", None], True),
    (["inspect", "--model", None, "--gpu-arch", "sm90"], False),
    (["check", "--gpu-arch", "sm90", "vllm", "serve", str(MODELS / "deepseek-v3"), "--all2all-backend", None], False),
    (["fleet", "deploy", "--kind", "systemd", "--address", None], False),
]


def _files(directory: Path) -> dict:
    """tree_state without the -wal / -shm a reader of a WAL database creates and removes in turn."""
    return {k: v for k, v in tree_state(directory).items() if not k.endswith(("-wal", "-shm"))}


@settings(max_examples=120, **BOUNDED)
@given(slot=st.sampled_from(TEXT_SLOTS), text=UNICODE_TEXT)
def test_any_argument_text_is_unicode_or_refused_at_the_door(recommend_db, slot, text):
    from autoselect.text import is_unicode

    argv, with_db = slot
    args = [text if a is None else a for a in argv] + (["--db", str(recommend_db)] if with_db else [])
    before = _files(recommend_db.parent)
    result = cli(*args)
    if argv[0] == "check" and result.exit_code == 1:  # check's own verdict: the line has errors
        assert "FAIL:" in result.stdout and "Traceback" not in result.stderr, result.stdout
    else:
        _keeps_the_argument_promise(result)
    if not is_unicode(text):
        assert result.exit_code == 2 and "is not valid Unicode text" in result.stderr, result.stderr
    assert _files(recommend_db.parent) == before


@settings(max_examples=120, **BOUNDED)
@given(route=st.sampled_from(["/v1/recommend", "/v1/drift", "/v1/hosts"]),
       params=st.dictionaries(st.sampled_from(RECOMMEND_PARAMS + ["min_slowdown", "noise_k"]), st.binary(max_size=8),
                              max_size=4))
def test_any_query_bytes_are_an_answer_or_a_4xx(http_client, route, params):
    from urllib.parse import quote_from_bytes

    client, secrets = http_client
    params.setdefault("model", b"deepseek-v3")
    query = "&".join(f"{name}={quote_from_bytes(value)}" for name, value in params.items())
    r = client.get(f"{route}?{query}")
    assert r.status_code < 500, (route, query, r.text)
    not_utf8 = []
    for value in params.values():
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            not_utf8.append(value)
    if not_utf8:
        assert r.status_code == 400 and "is not valid UTF-8" in r.json()["error"], r.text
    for secret in secrets:
        assert secret not in r.text


NUMBER_PARAMS = ["dp", "tp", "world_size", "concurrency", "max_num_batched_tokens", "max_workspace_gib"]


@pytest.mark.slow  # 150 examples, each over the CLI and HTTP: ~5 s on 2 cores
@settings(max_examples=150, **BOUNDED)
@given(name=st.sampled_from(NUMBER_PARAMS), value=ARG_TEXT)
def test_a_number_means_the_same_on_the_command_line_and_over_http(recommend_db, name, value):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from autoselect.fleet.service.app import create_app

    client = TestClient(create_app(recommend_db, model_roots=[MODELS]))
    r = client.get("/v1/recommend", params={"model": "deepseek-v3", "host_class": "h200x8-5d1c7e0a", name: value})
    result = cli("recommend", "--model", MODELS / "deepseek-v3", "--host-class", "h200x8-5d1c7e0a", "--db",
                 recommend_db, "--format", "json", f"--{name.replace('_', '-')}={value}")
    _keeps_the_argument_promise(result)
    assert r.status_code < 500, r.text
    assert (result.exit_code == 0) == (r.status_code == 200), (name, value, result.stderr, r.text)
    if r.status_code == 200:
        cli_answer = json.loads(result.stdout)
        assert r.json()["backend"] == cli_answer["backend"] and r.json()["deployment"] == cli_answer["deployment"]
