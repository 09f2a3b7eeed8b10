"""What launch may start (vllm_flags/launchers.py), a pasted line cut where a shell cuts it, and a container's own environment."""

from __future__ import annotations

import shlex

import pytest

from autoselect.vllm_flags.command import InvalidServeCommand, read_command
from autoselect.vllm_flags.launchers import WRAPPERS, start_problem
from autoselect.vllm_flags.serve_args import parse_serve_argv


def problem(line: str) -> str | None:
    return start_problem(read_command(shlex.split(line)))


@pytest.mark.parametrize("line", [
    "vllm serve m -dp 2 -ep",
    "A=1 B=2 vllm serve m",
    "/opt/venv/bin/vllm serve m",
    "env -u X -i A=1 nohup nice -n 5 vllm serve m",
    "sudo -E -u svc --chdir=/srv numactl --cpunodebind=0 -m 0 taskset -c 0-7 vllm serve m",
    "taskset 0x3 vllm serve m",
    "uv run --with flashinfer-python -p 3.12 vllm serve m",
    "canhazgpu run --gpus 8 -- vllm serve m",
    "srun -N 1 --gres=gpu:8 vllm serve m",
    "nsys profile -o trace -t cuda,nvtx vllm serve m",
    "time -p vllm serve m",
    "python3 -u -X dev -m vllm.entrypoints.openai.api_server --model m",
    "python -m vllm.entrypoints.cli.main serve m",
    "docker run --rm -it --gpus all --ipc=host -e A=1 -v /m:/m -p 8000:8000 vllm/vllm-openai:v0.34.0 m",
    "podman run --device nvidia.com/gpu=all vllm/vllm-openai:v0.34.0 m",
])
def test_a_server_behind_the_programs_launch_knows_may_start(line):
    assert problem(line) is None


@pytest.mark.parametrize("line, why", [
    ("rm -rf junk && vllm serve m", "`rm` is not a program launch starts the server through"),
    ("true vllm serve m", "`true` is not a program"),
    ("-- vllm serve m", "`--` is not a program"),
    ("env rm -rf x vllm serve m", "`rm` is not a program"),  # env runs rm, not vllm
    ("bash -c true vllm serve m", "`bash` is not a program"),
    ("sh vllm serve m", "`sh` is not a program"),
    ("torchrun --nproc-per-node 8 -m vllm.entrypoints.openai.api_server --model m", "has no Python before it"),
    ("torchrun --nproc-per-node 8 python -m vllm.entrypoints.openai.api_server --model m", "`torchrun` is not a "
                                                                                          "program"),
    ("-m vllm.entrypoints.openai.api_server --model m", "has no Python before it"),
    ("env -S 'vllm serve m' vllm serve m", "`env -S`: it splits a string into the command"),
    ("sudo -s vllm serve m", "`sudo -s`: it starts a shell"),
    ("sudo -iu root vllm serve m", "`sudo -i`: it starts a login shell"),
    ("nice --adjustment 5 exec vllm serve m", "`exec` is not a program"),
    ("docker run --entrypoint /bin/sh vllm/vllm-openai:v0.34.0 m", "`docker run --entrypoint`: --entrypoint "
                                                                   "replaces the image's server"),
    ("docker run ubuntu vllm serve m", "`docker run` runs `ubuntu` there"),
    ("docker vllm/vllm-openai:v0.34.0 m", "`docker` without `run`"),
    ("numactl --show vllm serve m", "`numactl --show`: it shows the policy"),
    ("taskset -p 1 vllm serve m", "`taskset -p`: it changes a running process"),
    ("nohup --weird-option value vllm serve m", "`value` is not a program"),  # an unknown option: no value taken
])
def test_anything_else_before_the_server_is_why_launch_refuses(line, why):
    assert why in (problem(line) or ""), problem(line)


@pytest.mark.parametrize("text, redirected", [
    ("vllm serve m > log 2>&1", "> log 2>&1"),
    ("vllm serve m &>log", "&> log"),
    ("vllm serve m < /dev/null", "< /dev/null"),
    ("vllm serve m 2>err.txt", "2> err.txt"),
])
def test_a_pasted_line_whose_output_a_shell_redirects_is_no_line_launch_starts(text, redirected):
    command = read_command([text])
    assert command.words == ["vllm", "serve", "m"] and " ".join(command.redirections) == redirected
    assert f"the line redirects its input or output ({redirected})" in start_problem(command)
    assert any(code == "shell-redirection" for _, code, _ in command.notes)  # check reads it without them


@pytest.mark.parametrize("text", [
    "rm -rf junk && vllm serve m", "true || vllm serve m", "vllm serve m | tee log", "cd /srv; vllm serve m",
    "vllm serve m & vllm serve n", "A=1 vllm serve m && B=2 vllm serve n",
])
def test_a_pasted_compound_line_is_several_commands_for_check_and_launch(text):
    with pytest.raises(InvalidServeCommand, match=r"the text holds 2 commands \(lines 1, 1: .*a shell runs the "
                                                  r"others: `&&`, `;`, `\|` and `&` end a command\)"):
        read_command([text])


@pytest.mark.parametrize("text, env", [
    ("export VLLM_ALL2ALL_BACKEND=deepep_low_latency; vllm serve m -dp 2",
     {"VLLM_ALL2ALL_BACKEND": "deepep_low_latency"}),  # the `;` ends the export, it is not in the value
    ("export A=1;export B='x;y'; vllm serve m", {"A": "1", "B": "x;y"}),
    ("VLLM_CPU_OMP_THREADS_BIND='0|1' vllm serve m &", {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}),
    ('vllm serve m --kv-transfer-config \'{"kv_role":"kv_both","x":"a;b&c"}\'', {}),
])
def test_operators_inside_quotes_and_export_lines_are_read_as_bash_reads_them(text, env):
    args = parse_serve_argv([text])
    assert args.env == env and args.model == "m"


def test_the_port_arithmetic_of_a_published_line_is_one_word_not_two_commands():
    args = parse_serve_argv(["vllm serve m --port $((8000 + R)) -dp 2"])
    assert args.data_parallel_size == 2 and "$((8000" in " ".join(args.unknown)


@pytest.mark.parametrize("options, env, inherit", [
    (["--env=VLLM_ALL2ALL_BACKEND=pplx"], {"VLLM_ALL2ALL_BACKEND": "pplx"}, []),
    (["-eVLLM_ALL2ALL_BACKEND=pplx"], {"VLLM_ALL2ALL_BACKEND": "pplx"}, []),
    (["-e", "VLLM_ALL2ALL_BACKEND=pplx", "--env", "A=1"], {"VLLM_ALL2ALL_BACKEND": "pplx", "A": "1"}, []),
    (["-it", "-e", "HOME_ONLY"], {}, ["HOME_ONLY"]),  # -e NAME: the client's value, if it has one
    (["-e", "A=1", "-e", "A"], {}, ["A"]),  # the last -e of a name wins
])
def test_docker_run_env_options_are_the_containers_environment(options, env, inherit):
    args = parse_serve_argv(["docker", "run", "--gpus", "all", *options, "vllm/vllm-openai:v0.34.0", "m"])
    assert (args.env, args.inherit, args.clear_env) == (env, inherit, True)


def test_the_clients_own_environment_does_not_reach_the_container():
    args = parse_serve_argv(["VLLM_ALL2ALL_BACKEND=naive", "docker", "run", "-e", "X", "-e", "VLLM_ALL2ALL_BACKEND",
                             "vllm/vllm-openai:v0.34.0", "m"])
    assert args.serving_environ({"X": "1", "HF_HOME": "/h", "NVSHMEM_QP_DEPTH": "1024"}) == {
        "VLLM_ALL2ALL_BACKEND": "naive", "X": "1"}
    env_file = parse_serve_argv(["docker", "run", "--env-file", "e.list", "vllm/vllm-openai:v0.34.0", "m"])
    assert [code for _, code, _ in env_file.notes if code == "env-file-unread"] == ["env-file-unread"]


def test_every_wrapper_row_names_its_source():
    assert all(w.source and w.name for w in WRAPPERS.values())
    assert all(w.image == (w.name in ("docker", "podman")) for w in WRAPPERS.values())
