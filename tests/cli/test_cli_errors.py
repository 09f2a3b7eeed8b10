"""Bad input to every command: one ``Error:`` line on stderr, exit 2, no traceback, nothing written.

One table row per (command, bad input). ``{name}`` fields are paths made by the ``paths``
fixture inside the test's temporary directory; ``$AUTOSELECT_DB`` also points there (conftest),
so "nothing written" is checked on the whole directory: every file's hash, mtime and size,
and no new file or directory. Rows marked ``USAGE`` are click's own parse errors (an unknown
option, a bad choice): one ``Error:`` line too, ending with the command's ``--help``; every other
row must print exactly one line.
No row may start a benchmark worker: validation fails first.
"""

from __future__ import annotations

import hashlib
import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.paths import FIXTURES, REPO
from support.report import QWEN, full_sweep, gpu_host, write_db

from autoselect.cli import COMMANDS, main
from db.schema import latest_version
from db.store import Store

MODELS = FIXTURES / "models"

ONE = "one line"  # exactly "Error: ...\n" on stderr
USAGE = "usage"  # click's parse error: "Error: ...; see `autoselect CMD --help`"

SHAPE = "--hidden 2048 --top-k 8 --experts 128 --dtype bf16"
BENCH = f"bench --device cpu {SHAPE}"
FLEET = "fleet run --device cpu --model {qwen}"
SCHEDULE = "fleet schedule --device cpu --model {qwen} --count 1"
DRY = "confirm --model {qwen} --dry-run --gpu-arch sm90 --dp 2"
REC = "recommend --model {qwen} --gpu-arch sm90 --dp 2"

#: (command line, exit status, stderr shape)
CASES = [
    # -- models: missing, malformed, dense, not MoE ------------------------------------------------
    ("inspect --model {missing_dir}", 2, ONE),
    ("inspect --model {afile}", 2, ONE),
    ("inspect --model ''", 2, ONE),
    ("inspect --model {bad_json_model}", 2, ONE),
    ("inspect --model {list_json_model}", 2, ONE),
    ("inspect --model {models}/malformed", 2, ONE),
    ("inspect --model {models}/llama-3.1-8b", 2, ONE),
    ("inspect --model {models}/no-moe-fields", 2, ONE),
    ("inspect --model {qwen} --gpu-arch sm42", 2, ONE),
    ("inspect --model {qwen} --format yaml", 2, USAGE),
    ("recommend --model {missing_dir}", 2, ONE),
    ("recommend --model {models}/llama-3.1-8b", 2, ONE),
    ("explain --model {models}/malformed", 2, ONE),
    ("report --model {missing_dir} --db {measured}", 2, ONE),
    ("report --model {models}/llama-3.1-8b --db {measured}", 2, ONE),
    ("tune --model {missing_dir} --device cpu", 2, ONE),
    ("tune --model {models}/llama-3.1-8b --device cpu", 2, ONE),
    ("tune --model shape:bogus --device cpu", 2, ONE),
    ("tune --model shape:2048x32x4:int3 --device cpu", 2, ONE),
    ("tune --model shape:0x32x4:bf16 --device cpu", 2, ONE),
    ("tune --device cpu", 2, ONE),
    ("bench --device cpu --gpu-arch sm90 --model {missing_dir}", 2, ONE),
    ("bench --device cpu --gpu-arch sm90 --model {models}/malformed", 2, ONE),
    ("bench --device cpu --model {qwen}", 2, ONE),  # no GPU here and no --gpu-arch
    ("bench --device cpu --model {qwen} --hidden 2048", 2, ONE),
    ("bench --device cpu --hidden 2048 --top-k 8 --experts 128", 2, ONE),
    ("bench --device cpu --hidden 0 --top-k 8 --experts 128 --dtype bf16", 2, ONE),
    ("bench --device cpu --hidden 2048 --top-k 9 --experts 4 --dtype bf16", 2, ONE),
    ("bench --device cpu --hidden 2048 --top-k 8 --experts 128 --dtype int3", 2, ONE),
    ("confirm --model {missing_dir} --dry-run --gpu-arch sm90 --dp 2", 2, ONE),
    ("confirm --model {models}/llama-3.1-8b --dry-run --gpu-arch sm90 --dp 2", 2, ONE),
    (FLEET.replace("{qwen}", "{missing_dir}"), 2, ONE),
    (FLEET.replace("{qwen}", "{models}/llama-3.1-8b"), 2, ONE),
    ("fleet run --device cpu --hidden 2048", 2, ONE),
    ("fleet run --device cpu --hidden 2048 --top-k 8 --experts 128 --dtype int3", 2, ONE),
    ("fleet run --device cpu", 2, ONE),
    ("check -- vllm serve {missing_dir} -dp 2 -ep", 2, ONE),
    ("check -- vllm serve {models}/malformed -dp 2 -ep", 2, ONE),
    # -- GPU arch and vLLM version ------------------------------------------------------------------
    ("check --gpu-arch sm42 -- vllm serve {qwen} -dp 2 -ep", 2, ONE),
    ("check --vllm-version banana -- vllm serve {qwen} -dp 2 -ep", 2, ONE),
    ("recommend --model {qwen} --gpu-arch sm42", 2, ONE),
    (REC + " --vllm-version banana", 2, ONE),
    (REC + " --vllm-version 0.1.0", 2, ONE),
    ("explain --model {qwen} --gpu-arch sm42", 2, ONE),
    ("report --model {qwen} --gpu-arch sm42 --db {measured}", 2, ONE),
    ("tune --model {qwen} --device cpu --gpu-arch sm42", 2, ONE),
    ("bench --device cpu --model {qwen} --gpu-arch sm42", 2, ONE),
    (BENCH + " --vllm-version banana", 2, ONE),
    (DRY.replace("sm90", "sm42"), 2, ONE),
    (DRY + " --vllm-version banana", 2, ONE),
    # -- backends -------------------------------------------------------------------------------------
    ("tune --model {qwen} --device cpu --backends bogus", 2, ONE),
    ("tune --model {qwen} --device cpu --backends ,", 2, ONE),
    (BENCH + " --backends bogus", 2, ONE),
    (BENCH + " --backends ,", 2, ONE),
    (DRY + " --backends bogus", 2, ONE),
    (DRY + " --backends ,", 2, ONE),
    (DRY + " --backends flashinfer_nvlink_one_sided", 2, ONE),  # illegal for bf16
    (FLEET + " --backends bogus", 2, ONE),
    ("report --model {qwen} --fleet-backend bogus --db {measured}", 2, ONE),
    # -- --tokens lists -------------------------------------------------------------------------------
    *[(f"recommend --model {{qwen}} --tokens {t}", 2, ONE) for t in ("0", "-1", "a,b", "''", "1:x", "1:-1", "1:0", ",")],
    ("explain --model {qwen} --tokens 0", 2, ONE),
    *[(f"tune --model {{qwen}} --device cpu --tokens {t}", 2, ONE) for t in ("0", "-1", "a,b", "''", ",")],
    *[(f"{BENCH} --tokens {t}", 2, ONE) for t in ("0", "-1", "a,b", "''", ",")],
    *[(f"{DRY} --tokens {t}", 2, ONE) for t in ("0", "-1", "a,b", "''")],
    *[(f"{FLEET} --tokens {t}", 2, ONE) for t in ("0", "-1", "a,b", "''")],
    *[(f"report --model {{qwen}} --workload {w} --db {{measured}}", 2, ONE) for w in ("0", "a,b", "''")],
    ("report --model {qwen} --fleet-tokens 0 --db {measured}", 2, ONE),
    # -- world size, dp, tp ---------------------------------------------------------------------------
    ("recommend --model {qwen} --world-size 0", 2, ONE),
    ("recommend --model {qwen} --world-size -4", 2, ONE),
    ("recommend --model {qwen} --dp 0", 2, ONE),
    ("recommend --model {qwen} --tp -1", 2, ONE),
    ("recommend --model {qwen} --dp 3 --tp 2 --world-size 8", 2, ONE),
    ("recommend --model {qwen} --dp x", 2, ONE),
    ("explain --model {qwen} --world-size 0", 2, ONE),
    ("report --model {qwen} --world-size 0 --db {measured}", 2, ONE),
    ("tune --model {qwen} --device cpu --world-size 0", 2, ONE),
    ("tune --model {qwen} --device cpu --world-size -2", 2, ONE),
    (BENCH + " --world-size 0", 2, ONE),
    (BENCH + " --world-size -1", 2, ONE),
    (BENCH + " --world-size 65", 2, ONE),
    ("confirm --model {qwen} --dry-run --gpu-arch sm90 --dp 0", 2, ONE),
    (DRY + " --tp 0", 2, ONE),
    (FLEET + " --world-size 1", 2, ONE),
    (FLEET + " --nodes 0", 2, ONE),
    ("check -- vllm serve {qwen} -dp 0 -ep", 2, ONE),
    ("check -- vllm serve {qwen} -dp -1 -ep", 2, ONE),
    ("check -- vllm serve {qwen} -dp x -ep", 2, ONE),
    ("check -- vllm bench {qwen}", 2, ONE),
    ("check -- vllm serve", 2, ONE),
    # -- launch: the same line mistakes, and its own; a dry run, so even a bug could start nothing ----
    ("launch --dry-run --", 2, ONE),
    ("launch --dry-run", 2, ONE),
    ("launch --dry-run -- vllm serve", 2, ONE),
    ("launch --dry-run -- vllm serve {missing_dir} -dp 2 -ep", 2, ONE),
    ("launch --dry-run -- vllm serve {models}/malformed -dp 2 -ep", 2, ONE),
    ("launch --dry-run -- vllm serve {qwen} -dp 0 -ep", 2, ONE),
    ("launch --dry-run -- vllm bench {qwen}", 2, ONE),
    ("launch --dry-run -- {qwen} -dp 2 -ep", 2, ONE),
    ("launch --dry-run -- \"vllm serve '{qwen}\"", 2, ONE),
    ("launch --dry-run --gpu-arch sm42 -- vllm serve {qwen} -dp 2 -ep", 2, ONE),
    ("launch --dry-run --vllm-version banana -- vllm serve {qwen} -dp 2 -ep", 2, ONE),
    ("launch --dry-run --role router -- vllm serve {qwen} -dp 2 -ep", 2, ONE),
    ("launch --dry-run --gpu-arch sm90 -- vllm serve {qwen} -dp 2 -ep --all2all-backend flashinfer_nvlink_one_sided",
     2, ONE),
    ("launch --dry-run -- vllm serve {qwen} -dp 2 -ep --all2all-backend bogus", 2, ONE),
    ("launch --dry-run -- vllm serve {qwen} -dp 2 -ep --config {missing_dir}.yaml", 2, ONE),
    ("launch --dry-run --server ftp://x -- vllm serve {qwen} -dp 2 -ep", 2, ONE),
    ("launch --dry-run --server http://127.0.0.1:9 --server-timeout nan -- vllm serve {qwen} -dp 2 -ep", 2, ONE),
    ("launch --dry-run --server http://127.0.0.1:9 --token-file {afile} -- vllm serve {qwen} -dp 2 -ep", 2, ONE),
    ("launch --dry-run --token-file {afile} -- vllm serve {qwen} -dp 2 -ep", 2, ONE),
    ("launch --dry-run --decision-json {missing_dir}/d.json -- vllm serve {qwen} -dp 2 -ep", 2, ONE),
    ("launch --dry-run --decision-json {adir} -- vllm serve {qwen} -dp 2 -ep", 2, USAGE),
    ("launch --dry-run --max-workspace-gib 0 -- vllm serve {qwen} -dp 2 -ep", 2, USAGE),
    # -- other numbers ----------------------------------------------------------------------------------
    (REC + " --concurrency 0", 2, ONE),
    (REC + " --max-num-batched-tokens 0", 2, ONE),
    (REC + " --max-workspace-gib -1", 2, ONE),
    (REC + " --max-workspace-gib nan", 2, ONE),
    (BENCH + " --max-noise -1", 2, ONE),
    (BENCH + " --min-samples 0", 2, ONE),
    (BENCH + " --timeout 0", 2, ONE),
    (BENCH + " --seed x", 2, ONE),
    (BENCH + " --routing bogus", 2, ONE),
    (BENCH + " --routing {missing_dir}.json", 2, ONE),
    (DRY + " --iters 0", 2, ONE),
    (DRY + " --samples 0", 2, ONE),
    (DRY + " --kv-len 0", 2, ONE),
    (DRY + " --timeout 0", 2, ONE),
    (FLEET + " --retries -1", 2, ONE),
    (FLEET + " --busy-utilization 2", 2, ONE),
    (FLEET + " --max-noise -1", 2, ONE),
    (FLEET + " --min-samples 0", 2, ONE),
    (FLEET + " --timeout 0", 2, ONE),
    ("fleet drift --db {filled} --min-slowdown -1", 2, ONE),
    ("fleet drift --db {filled} --noise-k -1", 2, ONE),
    ("serve --db {filled} --port 99999", 2, ONE),
    ("serve --db {filled} --workers 0", 2, ONE),
    # -- durations (--budget, --every, --jitter) ---------------------------------------------------------
    *[(f"tune --model {{qwen}} --device cpu --budget {b}", 2, ONE) for b in ("banana", "-5m", "0", "''")],
    (FLEET + " --budget banana", 2, ONE),
    (FLEET + " --budget 0", 2, ONE),
    (SCHEDULE + " --every banana", 2, ONE),
    (SCHEDULE + " --every 0", 2, ONE),
    (SCHEDULE + " --every -1h", 2, ONE),
    (SCHEDULE + " --jitter banana", 2, ONE),
    ("fleet schedule --device cpu --model {qwen} --count 0", 2, ONE),
    (SCHEDULE + " --tokens a,b", 2, ONE),
    ("fleet deploy --kind systemd --every banana", 2, ONE),
    ("fleet deploy --kind cron", 2, USAGE),
    ("tune --model {qwen} --device cpu --workload bogus", 2, USAGE),
    # -- host classes -----------------------------------------------------------------------------------
    (REC + " --host-class nosuch", 2, ONE),
    (REC + " --host-class nosuch --db {filled}", 2, ONE),
    ("explain --model {qwen} --gpu-arch sm90 --host-class nosuch", 2, ONE),
    ("recommend --model {qwen} --dp 2 --db {filled}", 2, ONE),  # CPU host, no --gpu-arch
    ("report --model {qwen} --host-class nosuch --db {measured}", 2, ONE),
    # -- --db: directory, garbage, newer schema, missing for read-only commands ------------------------
    *[(f"{cmd} --db {{{db}}}", 2, shape)
      for cmd in ("db info", "db check", "db export", "db upgrade", "fleet drift", "fleet status", "serve",
                  "report --model {qwen}", REC, "explain --model {qwen} --gpu-arch sm90 --dp 2",
                  BENCH + " --tokens 1", "tune --model {qwen} --device cpu", FLEET, SCHEDULE)
      for db, shape in (("adir", USAGE), ("garbage", ONE), ("newer", ONE))],
    *[(f"{cmd} --db {{missing_db}}", 2, ONE)
      for cmd in ("db info", "db check", "db export", "db upgrade", "fleet drift", "fleet status", "serve",
                  "report --model {qwen}")],
    ("report --model {qwen} --db {empty}", 2, ONE),  # a database without this shape
    ("db import {bad_jsonl} --db {garbage}", 2, ONE),
    ("db import {jsonl} --db {garbage}", 2, ONE),
    ("db import {jsonl} --db {newer}", 2, ONE),
    ("db merge {filled} --db {garbage}", 2, ONE),
    ("db merge {filled} --db {newer}", 2, ONE),
    ("db merge {filled} --db {adir}", 2, USAGE),
    # -- import and merge sources -----------------------------------------------------------------------
    ("db import {missing_dir}.jsonl --db {fresh_db}", 2, ONE),
    ("db import {bad_jsonl} --db {fresh_db}", 2, ONE),
    ("db import {binary_jsonl} --db {fresh_db}", 2, ONE),
    ("db import {afile} --db {fresh_db}", 2, ONE),
    ("db import {adir} --db {fresh_db}", 2, USAGE),
    ("db import {bad_jsonl} --db {filled}", 2, ONE),
    ("db merge {missing_db} --db {fresh_db}", 2, ONE),
    ("db merge {garbage} --db {fresh_db}", 2, ONE),
    ("db merge {newer} --db {fresh_db}", 2, ONE),
    ("db merge {afile} --db {fresh_db}", 2, ONE),
    # -- outputs ----------------------------------------------------------------------------------------
    ("db export --db {filled} -o {adir}", 2, USAGE),
    ("db export --db {filled} -o {missing_dir}/x.jsonl", 2, ONE),
    ("db export --db {filled} -o {filled}", 2, ONE),
    # -- numbers and lists: one grammar (autoselect.options) for every option -----------------------
    (REC + " --dp 99999999999999999999", 2, ONE),
    (REC + " --dp 1000000", 2, ONE),
    ("recommend --model {qwen} --gpu-arch sm90 --dp ١٢", 2, ONE),
    (REC + " --tokens 1,,2", 2, ONE),
    (REC + " --tokens ١٢", 2, ONE),
    (REC + " --tokens 99999999999", 2, ONE),
    (REC + " --max-workspace-gib nan", 2, ONE),
    (REC + " --max-workspace-gib 1e400", 2, ONE),
    (REC + " --vllm-version 0.0.1", 2, ONE),
    (BENCH + " --timeout nan", 2, ONE),
    (BENCH + " --setup-timeout 0", 2, ONE),
    (BENCH + " --backends ''", 2, ONE),
    (BENCH + " --backends a,,b", 2, ONE),
    (BENCH + " --vllm-version 0.0.1", 2, ONE),
    (BENCH + " --tokens 99999999999", 2, ONE),
    (BENCH + " --seed 99999999999999999999999", 2, ONE),
    (BENCH + " --seed -1", 2, ONE),
    ("bench --device cpu --hidden 99999999999999999999 --top-k 8 --experts 128 --dtype bf16", 2, ONE),
    ("bench --device cpu --hidden 2000000000 --top-k 8 --experts 128 --dtype bf16", 2, ONE),
    ("tune --model shape:99999999999999999999x32x4:bf16 --device cpu", 2, ONE),
    ("tune --model shape:2048x32x4:bf16 --device cpu --backends ''", 2, ONE),
    (FLEET + " --backends ''", 2, ONE),
    (DRY + " --backends ''", 2, ONE),
    ("fleet drift --min-slowdown nan", 2, ONE),
    ("serve --port ٨٠", 2, ONE),
    ("db drop-run 999 --yes --db {filled}", 2, ONE),
    ("db drop-run 1 --db {filled}", 2, ONE),  # stdin is no terminal: --yes is needed
    ("db drop-run 1 --yes --db {missing_db}", 2, ONE),
    ("db export --db {filled} --format xml", 2, USAGE),
    ("report --model {qwen} --out {afile} --db {measured}", 2, ONE),
    ("fleet deploy --kind systemd --out {afile}", 2, USAGE),
    ("hosts --format yaml", 2, USAGE),
]

#: Inputs that are not input errors: the command answers, and still writes nothing.
NOT_ERRORS = [
    # check judges a command line: an unknown backend value is a finding (exit 1), a dense model a warning.
    ("check -- vllm serve {qwen} -dp 2 -ep --all2all-backend bogus", 1),
    ("check -- vllm serve {models}/llama-3.1-8b -dp 2 -ep", 0),
    # recommend without measurements answers vLLM's default with confidence none (README), creating nothing.
    (REC + " --db {missing_db}", 0),
    # a dry run needs no database (confirm's docstring): the --db is not read.
    (DRY + " --db {garbage}", 0),
    # launch reads the database read-only: an unreadable one is said in its line, never an error.
    ("launch --dry-run --gpu-arch sm90 --db {garbage} -- vllm serve {qwen} -dp 2 -ep", 0),
    ("launch --dry-run --host-class ref-h200_sxm-x8 --db {newer} -- vllm serve {qwen} -dp 8 -ep", 0),
]

@pytest.fixture
def paths(tmp_path) -> dict[str, str]:
    """Every bad (and good) file a row can name, made inside ``tmp_path``."""
    p = {
        "tmp": tmp_path, "models": MODELS, "qwen": QWEN,
        "missing_dir": tmp_path / "no-such-checkpoint", "missing_db": tmp_path / "missing.db",
        "fresh_db": tmp_path / "fresh.db", "afile": tmp_path / "a-file.txt", "adir": tmp_path / "a-dir",
        "garbage": tmp_path / "garbage.db", "newer": tmp_path / "newer.db", "empty": tmp_path / "empty.db",
        "filled": tmp_path / "filled.db", "measured": tmp_path / "measured.db",
        "bad_json_model": tmp_path / "bad-json", "list_json_model": tmp_path / "list-json",
        "jsonl": tmp_path / "good.jsonl", "bad_jsonl": tmp_path / "bad.jsonl", "binary_jsonl": tmp_path / "binary.jsonl",
    }
    p["afile"].write_text("just text\n")
    p["adir"].mkdir()
    p["garbage"].write_bytes(b"not a database, just bytes\n" * 8)
    with Store(p["newer"]):
        pass
    conn = sqlite3.connect(p["newer"])
    conn.execute(f"PRAGMA user_version = {latest_version() + 7}")
    conn.close()
    with Store(p["empty"]):
        pass
    write_db(p["measured"], [(gpu_host(), full_sweep())])
    with Store(p["filled"]) as s:
        with s.run(gpu_host(), trigger="bench") as run:
            s.add_result(run.id, full_sweep()[0])
    (p["bad_json_model"]).mkdir()
    (p["bad_json_model"] / "config.json").write_text('{"model_type": "qwen3_moe",')
    (p["list_json_model"]).mkdir()
    (p["list_json_model"] / "config.json").write_text("[1, 2]")
    p["jsonl"].write_text("")
    p["bad_jsonl"].write_text("{not json\n")
    p["binary_jsonl"].write_bytes(b"\xff\xfe\x00 garbage\n")
    return {k: str(v) for k, v in p.items()}


def tree_state(root: Path) -> dict[str, tuple]:
    """Every file and directory under ``root``: (sha256, mtime_ns, size) or "dir".

    Left out: the ``-shm`` index and an empty ``-wal`` that SQLite itself makes beside an existing
    WAL-mode database when a read-only connection (``mode=ro``) opens it; the database is unchanged.
    """
    state = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        main_db = path.with_name(path.name[:-4])
        if path.name.endswith(("-shm", "-wal")) and main_db.is_file() and (
                path.name.endswith("-shm") or path.stat().st_size == 0):
            continue
        if path.is_dir():
            state[rel] = "dir"
        else:
            st = path.stat()
            state[rel] = (hashlib.sha256(path.read_bytes()).hexdigest(), st.st_mtime_ns, st.st_size)
    return state


def invoke(line: str, paths: dict[str, str]):
    return CliRunner().invoke(main, shlex.split(line.format(**paths)))


def assert_error_shape(stderr: str, shape: str) -> None:
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert lines and lines[-1].startswith("Error: "), stderr
    assert stderr == lines[0] + "\n", stderr
    if shape == USAGE:
        assert lines[0].endswith(" --help`"), stderr


def _id(case) -> str:
    line = case[0]
    return line.replace("{", "").replace("}", "")


@pytest.mark.parametrize(("line", "status", "shape"), CASES,
                         ids=[_id(c) for c in CASES])
def test_bad_input_is_one_error_line_exit_2_and_writes_nothing(paths, tmp_path, line, status, shape):
    before = tree_state(tmp_path)
    r = invoke(line, paths)
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == status, r.stderr
    assert_error_shape(r.stderr, shape)
    assert "Traceback" not in r.stdout
    assert tree_state(tmp_path) == before


@pytest.mark.parametrize(("line", "status"), NOT_ERRORS, ids=[_id(c) for c in NOT_ERRORS])
def test_inputs_that_are_not_errors_answer_and_write_nothing(paths, tmp_path, line, status):
    before = tree_state(tmp_path)
    r = invoke(line, paths)
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == status, r.stderr
    assert "Error" not in r.stderr and "Traceback" not in r.stderr + r.stdout
    assert tree_state(tmp_path) == before


def test_the_table_covers_every_command_and_subcommand():
    import click

    covered = {shlex.split(line)[0] for line, *_ in CASES + NOT_ERRORS}
    assert covered >= set(COMMANDS)
    for group in ("db", "fleet"):
        cmd = main.get_command(click.Context(main), group)
        subs = {shlex.split(line)[1] for line, *_ in CASES if shlex.split(line)[0] == group}
        assert subs == set(cmd.commands), f"{group}: {set(cmd.commands) - subs} have no bad-input row"


#: A few rows again through a real interpreter: what reaches a terminal, not CliRunner's capture.
SUBPROCESS_CASES = [
    "inspect --model {models}/malformed",
    "db info --db {garbage}",
    BENCH + " --tokens ''",
    FLEET + " --db {newer}",
    "check --vllm-version banana -- vllm serve {qwen} -dp 2 -ep",
]


@pytest.mark.parametrize("line", SUBPROCESS_CASES, ids=[_id((c,)) for c in SUBPROCESS_CASES])
def test_a_real_process_prints_one_error_line_and_no_traceback(paths, tmp_path, line):
    before = tree_state(tmp_path)
    p = subprocess.run([sys.executable, "-m", "autoselect", *shlex.split(line.format(**paths))],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("Error: "), p.stderr
    assert "Traceback" not in p.stdout
    assert tree_state(tmp_path) == before
