"""Reading published `vllm serve` lines: launchers, pasted blocks, old and mistyped options."""

from __future__ import annotations

import pytest

from autoselect.vllm_flags import parse_serve_argv, read_command
from autoselect.vllm_flags.command import InvalidServeCommand


def codes(args):
    return [c for _, c, _ in args.notes]


@pytest.mark.parametrize(
    "line, launcher",
    [("uv run vllm serve org/m -dp 2 -ep", ["uv", "run"]),
     ("uv run --with vllm vllm serve org/m -dp 2 -ep", ["uv", "run", "--with", "vllm"]),
     ("canhazgpu run --gpus 2 -- vllm serve org/m -dp 2 -ep", ["canhazgpu", "run", "--gpus", "2", "--"]),
     ("nohup /home/u/.local/bin/vllm serve org/m -dp 2 -ep", ["nohup"]),
     ("env -u VLLM_ALL2ALL_BACKEND vllm serve org/m -dp 2 -ep", ["env", "-u", "VLLM_ALL2ALL_BACKEND"])],
)
def test_the_server_command_is_found_after_common_launchers_and_the_skipped_words_are_said(line, launcher):
    a = parse_serve_argv([line])
    assert (a.model, a.data_parallel_size, a.enable_expert_parallel, a.launcher) == ("org/m", 2, True, launcher)
    [note] = [m for _, c, m in a.notes if c == "launcher"]
    assert note.startswith(f"read the server command after `{' '.join(launcher)} ")


def test_a_line_given_as_shell_words_is_read_the_same_as_the_pasted_string():
    words = ["canhazgpu", "run", "--gpus", "2", "--", "vllm", "serve", "org/m", "-tp", "2"]
    assert parse_serve_argv(words).to_dict() == parse_serve_argv([" ".join(words)]).to_dict()


@pytest.mark.parametrize(
    "line, entrypoint",
    [("python3 -u -m vllm.entrypoints.openai.api_server --model org/m -dp 2 -ep",
      "python -m vllm.entrypoints.openai.api_server"),
     ("python -W ignore -X dev -m vllm.entrypoints.openai.api_server --model org/m -dp 2 -ep",
      "python -m vllm.entrypoints.openai.api_server"),
     ("torchrun --nproc-per-node=2 -m vllm.entrypoints.cli.main serve org/m -dp 2 -ep",
      "python -m vllm.entrypoints.cli.main")],
)
def test_interpreter_flags_and_module_entrypoints_are_read(line, entrypoint):
    a = parse_serve_argv([line])
    assert (a.model, a.data_parallel_size, a.entrypoint) == ("org/m", 2, entrypoint)


def test_a_container_image_gives_the_server_arguments_and_its_tag_the_vllm_release():
    a = parse_serve_argv(["docker run --gpus all -p 8000:8000 --ipc=host vllm/vllm-openai:v0.17.0-cu130 "
                          "moonshotai/Kimi-K2.5 --tensor-parallel-size 8 --trust-remote-code"])
    assert (a.model, a.tensor_parallel_size, a.image_version) == ("moonshotai/Kimi-K2.5", 8, "0.17.0")
    assert a.image == "vllm/vllm-openai:v0.17.0-cu130"
    assert parse_serve_argv(["docker run vllm/vllm-openai:latest org/m"]).image_version is None


def test_the_launchers_environment_changes_reach_the_serving_environment():
    a = parse_serve_argv(["A=1 env -u VLLM_ALL2ALL_BACKEND B=2 CUDA_VISIBLE_DEVICES=0,1 vllm serve org/m"])
    assert (a.env, a.unset) == ({"A": "1", "B": "2", "CUDA_VISIBLE_DEVICES": "0,1"}, ["VLLM_ALL2ALL_BACKEND"])
    assert a.serving_environ({"VLLM_ALL2ALL_BACKEND": "pplx", "HOME": "/h"}) == {
        "HOME": "/h", "A": "1", "B": "2", "CUDA_VISIBLE_DEVICES": "0,1"}
    cleared = parse_serve_argv(["env -i X=1 vllm serve org/m"])
    assert cleared.clear_env and cleared.serving_environ({"VLLM_ALL2ALL_BACKEND": "pplx"}) == {"X": "1"}


DOCS_BLOCK = """\
# Single node EP deployment with pplx backend
VLLM_ALL2ALL_BACKEND=pplx VLLM_USE_DEEP_GEMM=1 \\
    vllm serve deepseek-ai/DeepSeek-V3-0324 \\
    --tensor-parallel-size 1 \\      # Tensor parallelism across 1 GPU
    --data-parallel-size 8 \\         # Data parallelism across 8 processes
    --enable-expert-parallel         # Enable expert parallelism
"""


def test_comments_after_a_continuation_break_the_line_in_a_shell_and_are_read_as_meant_with_a_warning():
    a = parse_serve_argv([DOCS_BLOCK])
    assert (a.model, a.tensor_parallel_size, a.data_parallel_size, a.enable_expert_parallel) == (
        "deepseek-ai/DeepSeek-V3-0324", 1, 8, True)
    assert a.env == {"VLLM_ALL2ALL_BACKEND": "pplx", "VLLM_USE_DEEP_GEMM": "1"}
    [broken] = [m for s, c, m in a.notes if c == "broken-continuation"]
    assert broken.startswith("lines 4, 5: a comment after the `\\` ends the command in a shell (the backslash "
                             "escapes a blank, not the newline), so pasted as written the shell runs the command "
                             "only up to line 4")
    assert a.unknown == []  # nothing of the comments leaked into the command


def test_trailing_blanks_after_a_backslash_are_a_broken_continuation_too():
    a = parse_serve_argv(["vllm serve org/m \\   \n  -dp 2 -ep"])
    assert (a.data_parallel_size, codes(a)) == (2, ["broken-continuation"])


def test_export_lines_of_a_pasted_block_are_the_commands_environment():
    a = parse_serve_argv(['export MODEL_ENV=1\nexport VLLM_ALL2ALL_BACKEND=deepep_low_latency\n'
                          'vllm serve org/m -dp 2 -ep\n'])
    assert a.env == {"MODEL_ENV": "1", "VLLM_ALL2ALL_BACKEND": "deepep_low_latency"}


def test_a_block_with_two_commands_is_refused_naming_their_lines():
    with pytest.raises(InvalidServeCommand, match=r"the text holds 2 commands \(lines 2, 4: `vllm serve org/m ...`; `vllm serve org/m ...`\); pass one"):
        parse_serve_argv(["# node 0\nvllm serve org/m -dp 16\n# node 1\nvllm serve org/m -dp 16 --headless\n"])


def test_a_one_dash_long_option_is_an_error_vllm_would_exit_with():
    a = parse_serve_argv(["vllm serve org/m -dp 2 -ep -no-enable-prefix-caching --max-model-len 2048"])
    [(severity, message)] = [(s, m) for s, c, m in a.notes if c == "single-dash-option"]
    assert severity == "error"
    # vLLM 0.32's own parser answers "argument --nnodes/-n: invalid int value: 'o-enable-prefix-caching'"
    assert message == ("-no-enable-prefix-caching has one dash: vLLM's parser reads it as a short option with a value "
                       "(-n is --nnodes) or not at all, and `vllm serve` exits with an argument error; write "
                       "--no-enable-prefix-caching")
    assert "-no-enable-prefix-caching" in a.unknown and a.data_parallel_size == 2


def test_short_aliases_and_negative_numbers_are_not_one_dash_long_options():
    a = parse_serve_argv(["vllm serve org/m -tp 2 -dp 2 -ep -dpl 1 --seed -1 -O3"])
    assert "single-dash-option" not in codes(a)


def test_an_unambiguous_abbreviation_is_read_as_argparse_does():
    a = parse_serve_argv(["vllm serve org/m --tensor-parallel-size 8 --enable-expert-paralle"])
    assert a.enable_expert_parallel
    assert codes(a) == ["abbreviated-option"]


def test_eplb_settings_every_way_they_are_spelled():
    json_config = parse_serve_argv(["vllm serve org/m -ep -dp 8 --enable-eplb --eplb-config "
                                    "'{\"window_size\":1000,\"num_redundant_experts\":2}'"])
    strings = parse_serve_argv(["vllm serve org/m --enable-eplb --eplb-config '{\"num_redundant_experts\":\"32\"}'"])
    dotted = parse_serve_argv(["vllm serve org/m --enable-eplb --eplb-config.num_redundant_experts 4"])
    old = parse_serve_argv(["vllm serve org/m --enable-eplb --num-redundant-experts 8 --eplb-window-size 200"])
    assert [a.redundant_experts for a in (json_config, strings, dotted, old)] == [2, 32, 4, 8]
    assert old.options == ["--enable-eplb", "--num-redundant-experts"]
    assert "--eplb-window-size" in old.unknown
    assert parse_serve_argv(["vllm serve org/m"]).redundant_experts == 0


@pytest.mark.parametrize(
    "line, message",
    [("vllm serve org/m --eplb-config '{nope'", "--eplb-config is not valid JSON"),
     ("vllm serve org/m --eplb-config '[1]'", "--eplb-config must be a JSON object"),
     ("vllm serve org/m --eplb-config '{\"num_redundant_experts\": -1}'", "must be 0 or more, got -1"),
     ("vllm serve org/m --num-redundant-experts two", "--num-redundant-experts needs a whole number, got 'two'"),
     ("vllm serve org/m -tp $TP_SIZE", r"-tp is the shell variable \$TP_SIZE: pass the line after the shell"),
     ("uv run python train.py", "found no `vllm serve`"),
     ("python -m vllm.entrypoints.cli.main org/m", "needs the `serve` subcommand"),
     ("vllm bench serve org/m", "`vllm bench` is not `vllm serve`"),
     ("vllm serve org/m 'unbalanced", "cannot split line 1 of the command")],
)
def test_unreadable_lines_are_one_clear_error(line, message):
    with pytest.raises(InvalidServeCommand, match=message):
        parse_serve_argv([line])


def test_the_role_comes_from_the_kv_transfer_config():
    role = {r: parse_serve_argv([f"vllm serve org/m --kv-transfer-config '{{\"kv_connector\":\"NixlConnector\","
                                 f"\"kv_role\":\"{r}\"}}'"]).role for r in ("kv_producer", "kv_consumer", "kv_both")}
    assert role == {"kv_producer": "prefill", "kv_consumer": "decode", "kv_both": "both"}
    assert parse_serve_argv(['vllm serve org/m --kv_transfer_config "$KV_TRANSFER_CONFIG"']).role is None


def test_shell_variables_left_in_the_line_are_said():
    a = parse_serve_argv(["vllm serve org/m -dp 8 -ep --data-parallel-address $MASTER_IP --port ${PORT}"])
    [message] = [m for _, c, m in a.notes if c == "shell-variables"]
    assert "($MASTER_IP, ${PORT})" in message


def test_the_words_vllms_own_parser_receives_carry_no_launcher():
    command = read_command(["CUDA_VISIBLE_DEVICES=0 uv run vllm serve org/m -dp 2 -ep"])
    assert command.serve_words == ["org/m", "-dp", "2", "-ep"]
    assert parse_serve_argv(["python3 -m vllm.entrypoints.openai.api_server --model org/m -tp 2"]).serve_words == [
        "--model", "org/m", "-tp", "2"]


# ---- what launch needs from the reader: the program, --max-num-seqs, --config YAML ----------------


def test_the_command_keeps_its_words_and_where_the_server_program_starts():
    c = read_command(["A=1", "B=2", "nohup", "/opt/venv/bin/vllm", "serve", "org/m", "-dp", "2"])
    assert c.words[:3] == ["A=1", "B=2", "nohup"] and c.start == 3 and c.program == "/opt/venv/bin/vllm"
    c = read_command(["python3", "-u", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"])
    assert (c.start, c.program) == (0, "python3")
    c = read_command(["docker", "run", "--gpus", "all", "vllm/vllm-openai:v0.19.1", "m", "-dp", "2"])
    assert c.program == "vllm/vllm-openai:v0.19.1"
    assert read_command(["org/m", "-dp", "2"]).start is None  # bare arguments: no program


def test_leading_assignments_and_interpreters_are_told_apart():
    from autoselect.vllm_flags import is_python, leading_assignments

    assert leading_assignments(["A=1", "B=", "vllm", "serve", "C=3"]) == 2
    assert leading_assignments(["vllm"]) == 0
    assert [is_python(w) for w in ("python", "/v/bin/python3.11", "python3", "pythonista", "vllm")] == \
        [True, True, True, False, False]


def test_max_num_seqs_is_read():
    assert parse_serve_argv(["vllm", "serve", "m", "--max-num-seqs", "64"]).max_num_seqs == 64
    assert parse_serve_argv(["vllm", "serve", "m", "--max_num_seqs=8"]).max_num_seqs == 8
    with pytest.raises(InvalidServeCommand, match="--max-num-seqs needs an integer"):
        parse_serve_argv(["vllm", "serve", "m", "--max-num-seqs", "many"])


def test_a_config_file_is_read_as_options_the_line_overrides(tmp_path):
    config = tmp_path / "serve.yaml"
    config.write_text("data-parallel-size: 8\nenable_expert_parallel: true\nall2all-backend: deepep_low_latency\n"
                      "tensor-parallel-size: 2\nenable-eplb: false\nport: 8000\n"
                      "kv-transfer-config:\n  kv_connector: NixlConnector\n  kv_role: kv_producer\n")
    a = parse_serve_argv(["vllm", "serve", "org/m", "--config", str(config), "-tp", "1"])
    assert (a.model, a.data_parallel_size, a.tensor_parallel_size, a.enable_expert_parallel) == ("org/m", 8, 1, True)
    assert (a.all2all_backend, a.config, a.role, a.enable_eplb) == ("deepep_low_latency", str(config), "prefill", False)
    assert "--port=8000" in a.unknown
    assert a.serve_words == ["org/m", "--config", str(config), "-tp", "1"]  # what vLLM itself receives
    [note] = [m for _, c, m in a.notes if c == "config-read"]
    assert note.startswith("read 7 option(s) from --config")


def test_the_api_server_module_takes_its_model_from_the_config_file(tmp_path):
    config = tmp_path / "c.yml"
    config.write_text("model: org/from-config\ndata-parallel-size: 2\n")
    a = parse_serve_argv(["python", "-m", "vllm.entrypoints.openai.api_server", "--config", str(config), "-ep"])
    assert (a.model, a.data_parallel_size, a.uses_all2all) == ("org/from-config", 2, True)


def test_a_config_file_that_cannot_be_read_here_is_a_warning_and_its_options_are_not_seen(tmp_path):
    a = parse_serve_argv(["vllm", "serve", "org/m", "--config", str(tmp_path / "absent.yaml"), "-dp", "2"])
    assert (a.data_parallel_size, a.config) == (2, str(tmp_path / "absent.yaml"))
    [(severity, message)] = [(s, m) for s, c, m in a.notes if c == "config-unread"]
    assert severity == "warning" and "cannot be read here (No such file or directory)" in message


@pytest.mark.parametrize("text, message", [
    ("- a\n- b\n", "must hold a mapping of option names to values, got list"),
    ("a: [unclosed\n", "is not valid YAML"),
])
def test_a_config_file_vllm_would_refuse_is_refused(tmp_path, text, message):
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    with pytest.raises(InvalidServeCommand, match=message):
        parse_serve_argv(["vllm", "serve", "m", "--config", str(config)])


@pytest.mark.parametrize("words, message", [
    (["--config", "c.json"], "vLLM reads only .yaml / .yml config files"),
    (["--config"], "--config needs a file"),
    (["--config", "a.yaml", "--config", "b.yaml"], "more than one --config"),
])
def test_config_mistakes_vllm_refuses_are_refused(words, message):
    with pytest.raises(InvalidServeCommand, match=message):
        parse_serve_argv(["vllm", "serve", "m", *words])
