"""Hostile model configs: every command that loads a checkpoint refuses a broken config.json in
one ``Error:`` line (the one validation layer, ``autoselect.model.config.check_config``), never hangs,
never guesses a dtype."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from support.hostile import cli, refused, tree_state
from support.paths import FIXTURES

MODELS = FIXTURES / "models"
BASE = json.loads((MODELS / "qwen3-30b-a3b" / "config.json").read_text())
RESULTS = FIXTURES / "results"


def raw_config(tmp_path: Path, data: bytes, name: str = "m") -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_bytes(data)
    return d


def config(tmp_path: Path, text: str | None = None, name: str = "m", **fields) -> Path:
    return raw_config(tmp_path, (text if text is not None else json.dumps({**BASE, **fields})).encode(), name)


#: name -> (config.json bytes builder, the start of the error after "Error: <label>")
EXAMPLES = {
    "binary": (lambda: b"\x00\x01\x02\xff\xfe\x00", " is not UTF-8 text (binary or not UTF-8"),
    "UTF-16": (lambda: json.dumps(BASE).encode("utf-16"), " is not UTF-8 text (UTF-16 text"),
    "invalid UTF-8": (lambda: b'{"hidden_size": "\xc3\x28"}', " is not UTF-8 text"),
    "nested 100k deep": (lambda: b"[" * 100_000 + b"]" * 100_000, " is JSON nested too deeply"),
    "400-digit hidden_size": (lambda: json.dumps(BASE).replace(
        f'"hidden_size": {BASE["hidden_size"]}', '"hidden_size": ' + "9" * 400).encode(),
        ": hidden_size is an integer of 400 characters, not between 1 and"),
    "moe_layer_freq 1e400": (lambda: (json.dumps(BASE)[:-1] + ', "moe_layer_freq": 1e400}').encode(),
                             ": moe_layer_freq is Infinity, neither a layer step"),
    "decoder_sparse_step a string": (lambda: json.dumps({**BASE, "decoder_sparse_step": "two"}).encode(),
                                     ": decoder_sparse_step is 'two', not an integer"),
    "mlp_only_layers nested": (lambda: json.dumps({**BASE, "mlp_only_layers": [[1]]}).encode(),
                               ": mlp_only_layers is [[1]], not a list of layer indices"),
    "num_hidden_layers 1e11": (lambda: json.dumps({**BASE, "num_hidden_layers": 1e11}).encode(),
                               ": num_hidden_layers is 100000000000.0, not an integer"),
    "num_hidden_layers 10**11": (lambda: json.dumps({**BASE, "num_hidden_layers": 10**11}).encode(),
                                 ": num_hidden_layers is 100000000000, not between 0 and 4096"),
    "top-k above the experts": (lambda: json.dumps({**BASE, "num_experts_per_tok": 500}).encode(),
                                ": num_experts_per_tok (500) exceeds the 128 routed experts"),
}

#: quantization blocks that name no scheme: refused, never read as bf16
QUANT_EXAMPLES = {
    "a string": ("fp8", "quantization_config is a string ('fp8'), not an object with a quant_method"),
    "a list": (["fp8"], "quantization_config is a list (['fp8']), not an object with a quant_method"),
    "empty": ({}, "quantization_config is empty: no quant_method"),
    "config_groups a string": ({"quant_method": "compressed-tensors", "config_groups": "x"},
                               "quantization_config: config_groups is a string ('x'), not an object of group objects"),
    "targets an integer": ({"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": 5}}},
                           "config_groups.g.targets is an integer (5), not a list of module names"),
    "block size an integer": ({"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": 128},
                              "weight_block_size is an integer (128), not a list of integers"),
    "quantized_layers a list": ({"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "quantized_layers": [1]},
                                "quantized_layers is a list ([1]), not an object of per-layer objects"),
}


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_inspect_refuses_a_broken_config_in_one_line(tmp_path, name):
    build, message = EXAMPLES[name]
    model = raw_config(tmp_path, build())
    line = refused(cli("inspect", "--model", model))
    assert line.startswith(f"Error: {model / 'config.json'}{message}"), line


@pytest.mark.parametrize("name", list(QUANT_EXAMPLES))
def test_a_quantization_block_that_names_no_scheme_is_refused_not_read_as_bf16(tmp_path, name):
    block, message = QUANT_EXAMPLES[name]
    model = config(tmp_path, quantization_config=block)
    line = refused(cli("inspect", "--model", model))
    assert message in line and "use an explicit shape" in line, line


def test_num_hidden_layers_1e11_does_not_hang(tmp_path):
    model = config(tmp_path, num_hidden_layers=10**11)
    start = time.monotonic()
    refused(cli("inspect", "--model", model))
    assert time.monotonic() - start < 10


def test_the_largest_layer_count_taken_is_counted_quickly(tmp_path):
    model = config(tmp_path, num_hidden_layers=4096)
    r = cli("inspect", "--model", model, "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["moe_layers"] == 4096


def test_a_300_character_path_component_is_one_error_line(tmp_path):
    line = refused(cli("inspect", "--model", tmp_path / ("a" * 300)))
    assert "File name too long" in line


def test_a_nul_byte_in_the_model_name_is_one_error_line():
    refused(cli("inspect", "--model", "org/na\x00me"))


def test_a_config_larger_than_the_limit_is_refused_without_being_parsed(tmp_path):
    model = config(tmp_path, text=json.dumps({**BASE, "padding": "x" * (5 << 20)}))
    assert "is larger than 4 MiB" in refused(cli("inspect", "--model", model))


@pytest.fixture(scope="module")
def fixture_db(tmp_path_factory) -> Path:
    from db.importing import import_file

    path = tmp_path_factory.mktemp("hostile-model") / "fixtures.db"
    import_file(path, RESULTS / "h200.jsonl")
    return path


@pytest.mark.parametrize("command", [
    ["inspect"],
    ["check", "--"],
    ["recommend", "--gpu-arch", "sm90", "--dp", "8"],
    ["explain", "--gpu-arch", "sm90", "--dp", "8"],
    ["report", "--host-class", "h200x8-5d1c7e0a", "--format", "text"],
    ["fleet", "drift"],
    ["tune", "--device", "cpu"],
    ["bench", "--device", "cpu", "--gpu-arch", "sm90"],
    ["confirm", "--dry-run", "--gpu-arch", "sm90", "--dp", "2"],
])
def test_every_command_that_loads_a_model_refuses_a_broken_config_the_same_way(tmp_path, fixture_db, command):
    model = config(tmp_path, decoder_sparse_step="two")
    if command == ["check", "--"]:
        args = ["check", "--", "vllm", "serve", str(model), "-dp", "2", "-ep"]
    else:
        args = [*command, "--model", str(model)]
    if command[0] in ("recommend", "explain", "report", "fleet", "tune", "bench"):
        args += ["--db", str(fixture_db)]
    before = tree_state(tmp_path)
    line = refused(cli(*args))
    assert f"{model / 'config.json'}: decoder_sparse_step is 'two', not an integer" in line
    assert tree_state(tmp_path) == before
