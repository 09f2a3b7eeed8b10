"""``launch`` under hostile input: each class of defect of the third sweep, with variants of its own.

Every refusal keeps the promise (one ``Error:`` line, exit 2, nothing on stdout, nothing started,
nothing written: :func:`support.hostile.refused`); the exec is a stand-in that records its calls.
"""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from support.db import cpu_host
from support.hostile import refused, tree_state, unprivileged
from support.paths import FIXTURES
from support.vllm_env import fake_vllm_env, runs

import autoselect.selector.pipeline as pipeline
from autoselect.cli import main
from autoselect.launch import LaunchOptions, plan_launch, run_plan
from autoselect.launch.run import CannotStart

MODELS = FIXTURES / "models"
QWEN = str(MODELS / "qwen3-30b-a3b")
NVFP4 = str(MODELS / "deepseek-r1-nvfp4")


@pytest.fixture(autouse=True)
def on_cpu(monkeypatch):
    monkeypatch.setattr("autoselect.launch.platform.local_host", cpu_host)
    monkeypatch.setattr(pipeline, "fingerprint", cpu_host)


@pytest.fixture
def started(monkeypatch):
    calls: list = []
    monkeypatch.setattr(os, "execvpe", lambda *a: calls.append(a))
    return calls


def launch(*args, env=None):
    return CliRunner().invoke(main, ["launch", *[str(a) for a in args]], env=env)


def serve(model=QWEN, *flags):
    return ["vllm", "serve", model, "-dp", "2", "-ep", *flags]


# ---- what launch starts: a vLLM server behind the programs it knows, nothing else ----------------


@pytest.mark.parametrize("line", [
    ["rm -rf junk && vllm serve ./m -dp 2 -ep"],  # a pasted compound line
    ["true && vllm serve ./m -dp 2 -ep"],
    ["cd /srv; vllm serve ./m -dp 2 -ep"],
    ["vllm serve ./m -dp 2 -ep | tee log"],
    ["vllm serve ./m -dp 2 -ep > log 2>&1"],
    ["rm", "-rf", "junk", "&&", "vllm", "serve", QWEN, "-dp", "2", "-ep"],  # the same, as words
    ["--", "vllm", "serve", QWEN, "-dp", "2", "-ep"],  # `launch -- -- vllm serve ...`
    ["env", "rm", "-rf", "junk", "vllm", "serve", QWEN, "-dp", "2", "-ep"],
    ["bash", "-c", "echo", "vllm", "serve", QWEN, "-dp", "2", "-ep"],
    ["sudo", "-s", "vllm", "serve", QWEN, "-dp", "2", "-ep"],
    ["docker", "run", "--entrypoint", "/bin/sh", "vllm/vllm-openai:v0.34.0", QWEN, "-dp", "2", "-ep"],
    ["-m", "vllm.entrypoints.openai.api_server", "--model", QWEN, "-dp", "2", "-ep"],
])
@pytest.mark.parametrize("dry_run", [True, False])
def test_launch_starts_only_a_vllm_server_line(line, dry_run, started, tmp_path):
    decision = tmp_path / "d.json"
    result = launch(*(["--dry-run"] if dry_run else []), "--decision-json", decision, "--", *line)
    error = refused(result)
    assert error.startswith(("Error: launch starts only a vLLM server: ", "Error: the text holds 2 commands")), error
    assert started == [] and not decision.exists()


# ---- the lines check rejects: never started ------------------------------------------------------


@pytest.mark.parametrize("flag, code", [
    ("\u2013\u2013all2all-backend", "unicode-dash"), ("\u2014enable-dbo", "unicode-dash"),
    ("-enable-eplb", "single-dash-option"), ("-max-num-batched-tokens=512", "single-dash-option"),
])
def test_a_line_check_reports_an_error_in_is_never_started(flag, code, started):
    from autoselect.check import check_serve_command

    line = serve(QWEN, flag, *(["deepep_low_latency"] if "all2all" in flag else []))
    assert code in {f.code for f in check_serve_command(line, gpu_arch="sm90", vllm_version="0.34.0").errors}
    for dry_run in (["--dry-run"], []):
        line_said = refused(launch(*dry_run, "--gpu-arch", "sm90", "--vllm-version", "0.34.0", "--", *line))
        assert "cannot start" not in line_said and "dash" in line_said.lower(), line_said
    assert started == []


# ---- output paths: never the database, the model, the token, the --config, the program -----------


def test_the_decision_never_replaces_a_file_the_line_needs(tmp_path, started):
    db = tmp_path / "results.db"
    db.write_bytes(b"SQLite format 3\0" + b"\0" * 100)
    for side in ("-wal", "-shm", "-journal"):
        Path(f"{db}{side}").write_bytes(b"side")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text((MODELS / "qwen3-30b-a3b" / "config.json").read_text())
    config = tmp_path / "serve.yaml"
    config.write_text("data-parallel-size: 2\nenable-expert-parallel: true\n")
    token = tmp_path / "token"
    token.write_text("0123456789abcdef0123456789abcdef\n")
    before = tree_state(tmp_path)
    targets = {db: "the database itself", Path(f"{db}-wal"): "the database's -wal file",
               Path(f"{db}-journal"): "the database's -journal file", model / "config.json": "the model's directory",
               model / "new.json": "the model's directory", config: "the line's --config file",
               token: "the service's token file"}
    for target, what in targets.items():
        args = ["--dry-run", "--db", db, "--decision-json", target]
        if target == token:
            args += ["--server", "http://127.0.0.1:9", "--server-timeout", "0.5", "--token-file", token]
        line = refused(launch(*args, "--", "vllm", "serve", model, "--config", config))
        assert what in line and "writing it would destroy" in line, line
    assert tree_state(tmp_path) == before and started == []


def test_the_decision_never_replaces_the_program_it_starts(tmp_path, started):
    program = fake_program(tmp_path / "bin" / "vllm")
    line = refused(launch("--decision-json", program, "--", program, "serve", QWEN, "-dp", "2", "-ep"))
    assert "is the program the line starts" in line and program.read_text().startswith("#!/bin/sh")


def test_an_unwritable_folder_or_an_overlong_name_is_one_error_line(tmp_path):
    long = tmp_path / ("d" * 300 + ".json")
    assert "cannot write" in refused(launch("--dry-run", "--decision-json", long, "--", *serve()))
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    result = unprivileged("launch", "--dry-run", "--vllm-version", "0.32.0", "--decision-json", ro / "d.json", "--",
                          "VLLM_TARGET_DEVICE=cpu", *serve())
    assert "Permission denied" in refused(result) and list(ro.iterdir()) == []


def fake_program(path: Path, body: str = "#!/bin/sh\nexit 7\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(0o755)
    return path


def test_a_failed_exec_after_the_decision_was_written_puts_the_decision_back(tmp_path):
    program = fake_program(tmp_path / "bin" / "vllm")
    decision = tmp_path / "d.json"
    decision.write_text("the previous decision\n")
    plan = plan_launch([str(program), "serve", QWEN, "-dp", "2", "-ep"], LaunchOptions(vllm_version="0.32.0"))

    def failing(*args):
        raise OSError(errno.ENOEXEC, "Exec format error")

    with pytest.raises(CannotStart, match="cannot start .*: Exec format error \\(nothing was started; "
                                          "--decision-json is as it was before\\)"):
        run_plan(plan, decision_json=decision, execvpe=failing, environ={"PATH": str(program.parent)})
    assert decision.read_text() == "the previous decision\n"
    fresh = tmp_path / "fresh.json"
    with pytest.raises(CannotStart):
        run_plan(plan, decision_json=fresh, execvpe=failing, environ={"PATH": str(program.parent)})
    assert not fresh.exists()


def test_a_file_that_is_no_program_is_refused_before_anything_is_written(tmp_path, started):
    program = fake_program(tmp_path / "bin" / "vllm", body="just text, no #! line\n")
    decision = tmp_path / "d.json"
    line = refused(launch("--vllm-version", "0.32.0", "--decision-json", decision, "--", program, "serve", QWEN,
                          "-dp", "2", "-ep"))
    assert "is neither a script with a #! line nor a binary" in line
    assert started == [] and not decision.exists()


# ---- bad options: one line each -------------------------------------------------------------------


@pytest.mark.parametrize("args, message", [
    (["--server", "http://127.0.0.1:8765", "--server-timeout", "1e10"], "--server-timeout 1e+10 must be a number "
                                                                         "of seconds above 0 and at most 600"),
    (["--server", "http://127.0.0.1:8765", "--server-timeout", "601"], "at most 600"),
    (["--server", "http://[::1", "--server-timeout", "1"], "is not an http(s) URL (Invalid IPv6 URL)"),
    (["--server", "http://host:99999"], "Port out of range"),
    (["--server", "http://host:port"], "is not an http(s) URL (Port could not be cast"),
    (["--server", "http://user:pw@host:8765"], "--server holds credentials"),
    (["--server", "http://host:8765/?next=evil"], "has a query, a fragment or port 0"),
    (["--server", "http://ho st:8765"], "is not an http(s) URL (blanks, control characters"),
    (["--server", "http://host\x1b[31m:8765"], "is not an http(s) URL (blanks, control characters"),
    (["--server", "https://"], "is not an http(s) URL with a host"),
    (["--server", "http://" + "h" * 300], "is not an http(s) URL with a host"),
    (["--vllm-version", "0." + "9" * 5000], "cannot read vLLM version '0.9999"),
    (["--vllm-version", "1" * 10 + ".0.0"], "cannot read vLLM version"),
])
def test_bad_options_are_one_error_line(args, message, started):
    line = refused(launch(*args, "--", *serve()))
    assert message in line and len(line) < 400, line
    assert "\x1b" not in line and started == []


def test_a_token_file_that_never_opens_or_never_ends_is_one_error_line(tmp_path, started):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    huge = tmp_path / "huge"
    huge.write_bytes(b"x" * 10_000)
    (tmp_path / "zero").symlink_to("/dev/zero")
    for path, why in ((fifo, "is not a regular file"), (tmp_path / "zero", "is not a regular file"),
                      (huge, "its first line is longer than 4096 bytes")):
        began = time.monotonic()
        line = refused(launch("--server", "http://127.0.0.1:8765", "--token-file", path, "--", *serve()))
        assert why in line and time.monotonic() - began < 30
    assert started == []


# ---- --config YAML: hostile files are one line, fast ----------------------------------------------


LAUGHS = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi"))


@pytest.mark.parametrize("name, text, why", [
    ("recursive.yaml", "data-parallel-size: 2\nx: &r [1, *r]\n", "a YAML alias inside the value it names"),
    ("mapping.yaml", "x: &m {a: *m}\n", "a YAML alias inside the value it names"),
    ("deep.yaml", "x: " + "[" * 20000 + "]" * 20000 + "\n", "nested deeper than 32 levels"),
    ("deepmap.yaml", "".join("  " * i + f"k{i}:\n" for i in range(60)) + "  " * 60 + "v: 1\n",
     "nested deeper than 32 levels"),
    ("laughs.yaml", LAUGHS, "expands to more than 100000 values"),
    ("big.yaml", "data-parallel-size: 2\n" + "# padding\n" * 200_000, "larger than 1 MiB"),
])
@pytest.mark.timeout(60)
def test_a_hostile_config_file_is_one_error_line_for_launch_and_check(tmp_path, name, text, why, started):
    config = tmp_path / name
    config.write_text(text)
    for command in (["launch", "--dry-run"], ["check", "--gpu-arch", "sm90"]):
        began = time.monotonic()
        line = refused(CliRunner().invoke(main, [*command, "--", *serve(QWEN, "--config", str(config))]))
        assert why in line and time.monotonic() - began < 20, line
    assert started == []


@pytest.mark.timeout(60)
def test_a_config_that_never_opens_or_never_ends_is_one_error_line(tmp_path, started):
    fifo = tmp_path / "serve.yaml"
    os.mkfifo(fifo)
    (tmp_path / "zero.yaml").symlink_to("/dev/zero")
    for config in (fifo, tmp_path / "zero.yaml"):
        for command in (["launch", "--dry-run"], ["check", "--gpu-arch", "sm90"]):
            line = refused(CliRunner().invoke(main, [*command, "--", *serve(QWEN, "--config", str(config))]))
            assert "is not a regular file" in line


# ---- secrets: never in a line launch prints, never in the decision --------------------------------


def test_no_secret_of_the_line_reaches_stderr_or_the_decision(tmp_path):
    decision = tmp_path / "d.json"
    secrets = ("hf_abcdefghijklmnopqrstuvwxyz012345", "aws-s3cr3t-value", "k-42-secret-key", "pw-in-url-42")
    kv = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both",
                     "kv_connector_extra_config": {"api_key": secrets[2]}})
    line = [f"HF_TOKEN={secrets[0]}", f"AWS_SECRET_ACCESS_KEY={secrets[1]}", "VLLM_ALL2ALL_BACKEND=pplx",
            *serve(QWEN, "--kv-transfer-config", kv, "--served-model-name", f"https://u:{secrets[3]}@h/m")]
    result = launch("--dry-run", "--vllm-version", "0.34.0", "--decision-json", decision, "--", *line)
    assert result.exit_code == 0, result.output
    assert "Warning: VLLM_ALL2ALL_BACKEND=pplx is set but vLLM 0.34.0 ignores it" in result.stderr
    text = decision.read_text() + result.stderr
    assert not [s for s in secrets if s in text]
    assert json.loads(decision.read_text())["env"]["HF_TOKEN"] == "<redacted>"
    assert secrets[0] in result.stdout  # the command to run, printed for the user to run: their own words
    refusal = launch("--dry-run", "--", *serve(QWEN, f"-hf-token={secrets[0]}"))  # single-dash: an error quoting it
    assert secrets[0] not in refused(refusal) and "<redacted>" in refusal.stderr
    check = CliRunner().invoke(main, ["check", "--gpu-arch", "sm90", "--format", "json", "--", *line])
    assert not [s for s in secrets if s in check.stdout]


# ---- the line's Python: --dry-run runs nothing of the line --------------------------------------


def test_a_dry_run_never_runs_the_lines_python(tmp_path, started):
    python, _, counter = fake_vllm_env(tmp_path, "0.19.1")
    line = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", QWEN, "-dp", "2", "-ep"]
    result = launch("--dry-run", "--", *line)
    assert result.exit_code == 0, result.output
    assert runs(counter) == 0
    assert "Warning: --dry-run runs nothing of the line, and the sys.path of its Python" in result.stderr
    plan = plan_launch(line)  # a real launch asks it (the line is about to run it anyway), and caches the answer
    assert (plan.vllm_version, runs(counter)) == ("0.19.1", 1)
    again = plan_launch(line, LaunchOptions(dry_run=True))
    assert (again.vllm_version, again.vllm_version_source, runs(counter)) == ("0.19.1", "the line's vllm", 1)


# ---- the database's tuned rows: only the knob table ------------------------------------------------


def test_a_tuned_row_outside_the_knob_table_never_reaches_the_line(tmp_path):
    from db.importing import import_file
    from db.store import Store
    from db.tuned import TunedConfig, save_tuned

    from autoselect.selector import recommend_for

    db = tmp_path / "fixtures.db"
    import_file(db, FIXTURES / "results" / "b200.jsonl")
    host_class = "b200x8-9a4f2b61"
    clean = recommend_for(NVFP4, db_path=db, host_class=host_class, workload="prefill")
    for env, flags in (({"LD_PRELOAD": "/tmp/evil.so"}, []), ({}, ["--trust-remote-code", "1"]),
                       ({"TLLM_MOE_A2A_COMBINE_BLOCK_SIZE": "512; rm -rf /"}, [])):
        with Store(db) as store:  # a row db import would take: text fields that keep the schema
            save_tuned(store, TunedConfig(
                host_class=host_class, machine_id="m1", hidden=7168, top_k=8, experts=256,
                activation_dtype=clean.activation_dtype, world_size=8, device="cuda", backend=clean.backend,
                status="gain", stop="settled", study="s", knobs=env, env=env, flags=flags, gain=0.3,
                gain_halfwidth=0.01))
        with pytest.warns(UserWarning, match="tuned configuration .* is not used: knobs\\."):
            answer = recommend_for(NVFP4, db_path=db, host_class=host_class, workload="prefill")
        assert answer.knobs == {} and answer.command == clean.command
        result = launch("--dry-run", "--db", db, "--host-class", host_class, "--workload", "prefill", "--",
                        "vllm", "serve", NVFP4, "-dp", "8", "-ep")
        assert result.exit_code == 0, result.output
        assert "LD_PRELOAD" not in result.stdout and "trust-remote-code" not in result.stdout
        assert "rm -rf" not in result.stdout and "is not used: knobs." in result.stderr


@pytest.mark.parametrize("line", [
    ["vllm", "serve", QWEN, "-dp", "1", "--all2all-backend", "deepep_low_latency", "-enable-eplb"],
    serve(QWEN, "--moe-backend", "flashinfer_moe_ep_cutedsl", "--all2all-backend", "deepep_low_latency"),
    ["vllm", "serve", str(MODELS / "llama-3.1-8b"), "-dp", "2", "-ep", "--all2all-backend", "deepep_low_latency",
     "-enable-dbo"],
])
def test_override_mends_no_error_where_there_is_no_backend_to_replace(line, started):
    """--override lets a pick replace the line's backend; without an all2all group, next to a
    --moe-backend that binds passthrough or for a dense model there is none, and the error stands."""
    assert "cannot start" not in refused(launch("--dry-run", "--override", "--gpu-arch", "sm100", "--vllm-version",
                                                "0.34.0", "--", *line))
    assert started == []
