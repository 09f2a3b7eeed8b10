"""Text that is not valid Unicode, at every door it enters by: the command line (arguments and
``AUTOSELECT_*`` variables), files (a model's config.json, a serve line's JSON options) and HTTP
(tests/fleet/test_hostile_service.py). One check per door (autoselect/text.py), never option by option:
one ``Error:`` line, exit 2, nothing written, the text shown escaped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.hostile import cli, refused, tree_state
from support.paths import FIXTURES, REPO

from autoselect.model import load_profile
from autoselect.model.errors import ModelConfigInvalid
from autoselect.text import NotUnicode, check_argv, check_json, check_query, check_text
from autoselect.vllm_flags import parse_serve_argv
from autoselect.vllm_flags.command import InvalidServeCommand

MODELS = FIXTURES / "models"
BASE = json.loads((MODELS / "qwen3-30b-a3b" / "config.json").read_text())


@pytest.fixture(scope="module")
def fixture_db(tmp_path_factory) -> Path:
    from db.importing import import_file

    path = tmp_path_factory.mktemp("hostile-text") / "fixtures.db"
    import_file(path, FIXTURES / "results" / "h200.jsonl")
    cli("db", "info", "--db", path)
    return path


def _bytes_argv(*args) -> subprocess.CompletedProcess:
    """``python -m autoselect ARGS`` with ARGS as raw bytes: what a shell hands over."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    argv = [sys.executable.encode(), b"-m", b"autoselect", *(a if isinstance(a, bytes) else str(a).encode()
                                                              for a in args)]
    out = subprocess.run(argv, capture_output=True, env=env, timeout=120)
    return subprocess.CompletedProcess(out.args, out.returncode, out.stdout.decode(), out.stderr.decode())


#: commands whose text argument reached SQLite, the terminal or JSON output raw (an argument with
#: bytes that are not UTF-8 in the slot marked None)
COMMANDS = [
    ["recommend", "--model", MODELS / "deepseek-v3", "--host-class", None],
    ["explain", "--model", MODELS / "deepseek-v3", "--host-class", None],
    ["report", "--terminal", "--model", MODELS / "deepseek-v3", "--host-class", None],
    ["fleet", "drift", "--host-class", None],
    ["db", "drop-run", None, "--yes"],
    ["recommend", "--model", None],
    ["inspect", "--model", None],
    ["check", "--gpu-arch", "sm90", "vllm", "serve", None],
    ["recommend", "--model", MODELS / "deepseek-v3", "--vllm-version", None],
    ["recommend", "--model", MODELS / "deepseek-v3", "--gpu-arch", None],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(str(x) for x in a[:2]))
@pytest.mark.parametrize("bad", [b"\xff\xfe", b"h200\x80", b"1\xff", b"\xed\xa0\x80"])
def test_an_argument_that_is_not_utf8_is_one_error_line_wherever_it_goes(fixture_db, argv, bad):
    before = tree_state(fixture_db.parent)
    args = [bad if a is None else a for a in argv]
    line = refused(_bytes_argv(*args, "--db", fixture_db) if argv[0] != "check" else _bytes_argv(*args))
    position = args.index(bad) + 1
    assert line.startswith(f"Error: argument {position} ") and "is not valid Unicode text" in line, line
    assert "\\x" in line and "\udc80" not in line  # the bytes shown escaped, never raw
    assert tree_state(fixture_db.parent) == before


def test_an_autoselect_variable_that_is_not_utf8_is_refused(tmp_path):
    env = {**os.environ, "AUTOSELECT_DB": os.fsdecode(str(tmp_path).encode() + b"/\xff.db"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "autoselect", "db", "info"], capture_output=True, text=True, env=env,
                          timeout=120)
    line = refused(proc)
    assert line.startswith("Error: $AUTOSELECT_DB ") and "the byte 0xff, which is not UTF-8" in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [["db", "import", "a\0b"], ["recommend", "--model", "deepseek-v3\0"],
                                  ["inspect", "--model", "\0", "--gpu-arch", "sm90"]])
def test_an_argument_holding_a_nul_is_one_error_line_before_anything_reads_it(fixture_db, argv):
    # no exec passes a NUL, but an in-process caller can, and os.stat() raises ValueError on one
    before = tree_state(fixture_db.parent)
    line = refused(cli(*argv, "--db", fixture_db))
    assert line.startswith(f"Error: argument {argv.index(next(a for a in argv if chr(0) in a)) + 1} ")
    assert "holds a NUL character" in line and "\\x00" in line
    assert tree_state(fixture_db.parent) == before


def test_valid_non_ascii_text_passes_the_door(fixture_db):
    result = cli("recommend", "--model", MODELS / "deepseek-v3", "--host-class", "hôte-ü", "--db", fixture_db)
    assert "not valid Unicode" not in result.stderr
    refused(result, "Error: host class 'hôte-ü' is not in")


@pytest.mark.parametrize("field, value", [
    ("torch_dtype", "\ud800"), ("model_type", "qwen3\udcff_moe"), ("architectures", ["Qwen3MoeForCausalLM", "\udfff"]),
])
def test_a_config_string_that_is_no_text_is_refused(tmp_path, field, value):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**BASE, field: value}))  # json.dumps escapes it: \ud800
    with pytest.raises(ModelConfigInvalid, match=r"is not valid Unicode text .*lone surrogate"):
        load_profile(str(d))
    before = tree_state(tmp_path)
    line = refused(cli("inspect", "--model", d))
    assert f"config.json: the string at .{field}" in line and "fix the file" in line
    assert tree_state(tmp_path) == before


def test_a_config_key_that_is_no_text_is_refused(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**BASE, "quantization_config": {"\ud834": 1}}))
    line = refused(cli("inspect", "--model", d))
    assert "config.json: a key in .quantization_config" in line


def test_an_hf_quant_config_that_is_no_text_is_refused(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(BASE))
    (d / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "NVFP4\ud800"}}))
    line = refused(cli("inspect", "--model", d))
    assert "hf_quant_config.json" in line and "not valid Unicode text" in line


def test_a_serve_lines_json_option_that_is_no_text_is_refused():
    with pytest.raises(InvalidServeCommand, match="--kv-transfer-config: the string at .kv_role"):
        parse_serve_argv(["vllm serve org/m --kv-transfer-config '{\"kv_role\": \"\\ud800\"}'"])


def test_the_checks_name_where_the_bad_text_is():
    assert check_text("plain é ✓", "x") == "plain é ✓"
    doc = {"a": [1, {"b": "ok"}, {"c": "\udcff"}]}
    with pytest.raises(NotUnicode, match=r"doc: the string at .a\[2\].c .\\udcff. .*the lone surrogate U\+DCFF"):
        check_json(doc, "doc")
    with pytest.raises(NotUnicode, match=r"argument 2 'x\\ud800'.*the lone surrogate U\+D800"):
        check_argv(["ok", "x\ud800"], {})
    check_argv(["ok"], {"PATH": "\udcff", "AUTOSELECT_DB": "/tmp/a.db"})  # only our own variables
    check_query("a=%C3%A9&b=1+2&c")
    with pytest.raises(NotUnicode, match="query parameter 'b'"):
        check_query("a=1&b=%ff")


@pytest.mark.parametrize("text", ["\r", "a\nb", "x\x1b[31my", "\x85", "line\u2028sep"])
def test_a_message_quoting_control_characters_stays_one_line(tmp_path, text):
    before = tree_state(tmp_path)
    for args in (["db", "import", text, "--db", tmp_path / "x.db"], [f"no{text}such"],
                 ["recommend", "--model", text, "--db", tmp_path / "x.db"]):
        line = refused(cli(*args))
        assert line.isprintable() and "\x1b" not in line, line
    assert tree_state(tmp_path) == before
