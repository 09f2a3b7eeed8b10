"""``check`` on real launch scripts: shell expansions in environment assignments are read
literally like words of the serve line, an ``export`` reaches only the commands after it, a dash
that is not ASCII is no option. The reader's environment is compared with what bash itself gives
the command."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.paths import FIXTURES

from autoselect.check import check_serve_command
from autoselect.vllm_flags import read_command
from autoselect.vllm_flags.serve_args import UNICODE_DASHES

MODELS = FIXTURES / "models"
FP8B = str(MODELS / "deepseek-v3")
MIXTRAL = str(MODELS / "mixtral-8x7b")


def _check(text: str, version: str, environ: dict | None = None):
    return check_serve_command([text], gpu_arch="sm90", vllm_version=version, environ=environ or {})


def _codes(report, severity=None):
    return [f.code for f in report.findings if severity is None or f.severity == severity]


EXPANSIONS = ["${BACKEND:-deepep_low_latency}", "$BACKEND", "${BACKEND}", "$(cat /etc/backend)", "`cat backend`",
              "deepep_${KIND}", "${1}", "$@"]


@pytest.mark.parametrize("value", EXPANSIONS)
@pytest.mark.parametrize("version", ["0.10.0", "0.11.1", "0.12.0", "0.14.0"])
@pytest.mark.parametrize("form", ["VLLM_ALL2ALL_BACKEND='{v}' vllm serve {m} -dp 8 -ep",
                                  "export VLLM_ALL2ALL_BACKEND='{v}'\nvllm serve {m} -dp 8 -ep",
                                  "env VLLM_ALL2ALL_BACKEND='{v}' vllm serve {m} -dp 8 -ep"])
def test_a_variable_the_shell_expands_is_unknown_never_invalid_where_vllm_reads_it(value, version, form):
    report = _check(form.format(v=value, m=FP8B), version)
    assert "env-var-invalid" not in _codes(report)
    assert report.backend is None and report.backend_origin == "VLLM_ALL2ALL_BACKEND"
    assert "backend-unknown" in _codes(report, "warning") and "shell-variables" in _codes(report, "warning")
    assert not any(f.code.startswith("illegal") for f in report.findings)  # nothing judged against a guess
    assert report.exit_code == 0


@pytest.mark.parametrize("value", EXPANSIONS)
def test_a_variable_the_release_ignores_is_said_ignored_without_advice_about_its_value(value):
    report = _check(f"VLLM_ALL2ALL_BACKEND='{value}' vllm serve {FP8B} -dp 8 -ep --all2all-backend deepep_low_latency",
                    "0.17.0")
    [message] = [f.message for f in report.findings if f.code == "env-var-removed"]
    assert "names no backend" not in message and "drop the variable" not in message
    assert report.backend == "deepep_low_latency"


@pytest.mark.parametrize("value", EXPANSIONS)
def test_a_flag_value_the_shell_expands_is_unknown_not_an_invalid_choice(value):
    report = _check(f"vllm serve {FP8B} -dp 8 -ep --all2all-backend '{value}'", "0.17.0")
    assert "invalid-choice" not in _codes(report) and "value-unknown-to-version" not in _codes(report)
    assert report.backend is None and "backend-unknown" in _codes(report)


@pytest.mark.parametrize("assignment", ["NVSHMEM_QP_DEPTH=$DEPTH", "NVSHMEM_QP_DEPTH=${DEPTH:-1024}",
                                        "VLLM_MOE_DP_CHUNK_SIZE=$(nproc)", "VLLM_MOE_DP_CHUNK_SIZE=`echo 256`"])
def test_a_buffer_variable_the_shell_expands_is_not_judged(assignment):
    report = _check(f"{assignment} vllm serve {FP8B} -dp 8 -ep --all2all-backend deepep_low_latency", "0.12.0")
    assert report.exit_code == 0 and "shell-variables" in _codes(report)
    assert report.backend == "deepep_low_latency"


def test_an_expansion_does_not_hide_a_real_problem_elsewhere():
    report = _check(f"NVSHMEM_QP_DEPTH=$D vllm serve {MODELS / 'qwen3-30b-a3b'} -dp 8 -ep "
                    "--all2all-backend flashinfer_nvlink_one_sided", "0.33.0")
    assert "illegal-dtype" in _codes(report, "error")


def test_an_export_after_the_command_does_not_apply_to_it():
    text = f"vllm serve {MIXTRAL} -dp 2 -ep\nexport VLLM_ALL2ALL_BACKEND=deepep_high_throughput\n"
    report = _check(text, "0.11.1")
    assert report.backend_origin == "vLLM's default" and "VLLM_ALL2ALL_BACKEND" not in report.args.env
    [message] = [f.message for f in report.findings if f.code == "export-after-command"]
    assert message.startswith("line 2: `export VLLM_ALL2ALL_BACKEND` comes after the command")


def test_an_export_before_the_command_applies_and_the_later_one_does_not():
    text = (f"export VLLM_ALL2ALL_BACKEND=pplx\n# the server\nvllm serve {MIXTRAL} \\\n  -dp 2 -ep\n"
            "export VLLM_ALL2ALL_BACKEND=naive\n")
    report = _check(text, "0.11.1")
    assert (report.backend, report.backend_origin) == ("pplx", "VLLM_ALL2ALL_BACKEND")
    assert "export-after-command" in _codes(report)


def test_an_assignment_without_export_is_a_shell_variable_not_the_commands_environment():
    report = _check(f"VLLM_ALL2ALL_BACKEND=pplx\nvllm serve {MIXTRAL} -dp 2 -ep", "0.11.1")
    assert report.backend_origin == "vLLM's default"
    [message] = [f.message for f in report.findings if f.code == "shell-assignment"]
    assert message.startswith("line 1: VLLM_ALL2ALL_BACKEND set without `export`")


@pytest.mark.parametrize("dash", sorted(UNICODE_DASHES))
@pytest.mark.parametrize("word, meant", [("{d}-all2all-backend", "--all2all-backend"),
                                         ("{d}{d}all2all-backend=naive", "--all2all-backend=naive"),
                                         ("{d}ep", "-ep"), ("-{d}enable-eplb", "--enable-eplb")])
def test_a_dash_that_is_not_ascii_before_a_flag_is_an_error(dash, word, meant):
    word = word.format(d=dash)
    report = _check(f"vllm serve {FP8B} -dp 8 {word} -ep", "0.17.0")
    [message] = [f.message for f in report.findings if f.code == "unicode-dash"]
    assert message.startswith(f"{word} has ") and f"(U+{ord(dash):04X})" in message and message.endswith(f"type {meant}")
    assert report.exit_code == 1


def test_an_export_with_a_value_replaces_the_shell_variable_a_later_bare_export_reads():
    # found by the bash property below: `export B=1` sets the variable; a later `export B` exports 1, not the 3 before
    assert read_command(["B='3'\nexport B='1'\nexport B\nvllm serve org/m -dp 2"]).env["B"] == "1"
    assert read_command(["B=3\nexport B=1\nB=4\nexport B\nvllm serve org/m -dp 2"]).env["B"] == "4"


def test_a_dash_inside_a_value_is_not_a_flag():
    report = _check(f"vllm serve {FP8B} -dp 8 -ep --served-model-name a–b", "0.17.0")
    assert "unicode-dash" not in _codes(report)


# --- bash as the oracle: what environment does the command get? -------------------------------------------

LINE = st.one_of(
    st.tuples(st.just("export"), st.sampled_from(["A", "B"]), st.sampled_from(["1", "2", "x y"])),
    st.tuples(st.just("set"), st.sampled_from(["A", "B"]), st.sampled_from(["3", "4"])),
    st.tuples(st.just("export-name"), st.sampled_from(["A", "B"]), st.just("")),
)


def _shell_line(kind, name, value):
    if kind == "export-name":  # exports the shell variable, if one was set
        return f"export {name}"
    return f"{'export ' if kind == 'export' else ''}{name}='{value}'"


def _serve_command(inline):
    return " ".join([*(f"{n}={v}" for n, v in inline), "vllm", "serve", "org/m", "-dp", "2"])


def _bash_gives(tmp_path_factory, script: str) -> dict[str, str]:
    """A and B as bash gives them to the ``vllm`` the script starts (a fake that prints them)."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    bin_dir = tmp_path_factory.mktemp("bin")
    fake = bin_dir / "vllm"
    fake.write_text('#!/bin/sh\nprintf "A=%s\\037B=%s" "${A-<unset>}" "${B-<unset>}"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    out = subprocess.run([bash, "-c", script], capture_output=True, text=True,
                         env={"PATH": f"{bin_dir}:{os.environ['PATH']}"}, timeout=30).stdout
    return dict(p.split("=", 1) for p in out.split("\x1f"))


@settings(max_examples=150, deadline=None, database=None)
@given(before=st.lists(LINE, max_size=3), after=st.lists(LINE, max_size=2),
       inline=st.lists(st.tuples(st.sampled_from(["A", "B"]), st.sampled_from(["5", "6"])), max_size=2))
def test_the_environment_read_is_the_one_bash_gives_the_command(tmp_path_factory, before, after, inline):
    script = "\n".join([*(_shell_line(*x) for x in before), _serve_command(inline), *(_shell_line(*x) for x in after)])
    seen = _bash_gives(tmp_path_factory, script)
    read = read_command([script]).env
    assert {k: read.get(k, "<unset>") for k in ("A", "B")} == seen, (script, read)


@settings(max_examples=100, deadline=None, database=None)
@given(before=st.lists(st.one_of(LINE, st.tuples(st.just("export"), st.sampled_from(["A", "B"]),
                                                 st.sampled_from(["a;b", "c&&d", "e|f"]))), min_size=1, max_size=4),
       inline=st.lists(st.tuples(st.sampled_from(["A", "B"]), st.sampled_from(["5", "6"])), max_size=2))
def test_one_line_of_commands_joined_by_semicolons_is_read_as_bash_runs_it(tmp_path_factory, before, inline):
    """`export X=v; vllm serve ...` on one line: the `;` ends the export (it is no part of its value),
    and a quoted `;`, `&&` or `|` is part of one; compared with what bash gives the command."""
    script = "; ".join([*(_shell_line(*x) for x in before), _serve_command(inline)])
    seen = _bash_gives(tmp_path_factory, script)
    read = read_command([script]).env
    assert {k: read.get(k, "<unset>") for k in ("A", "B")} == seen, (script, read)


@pytest.mark.parametrize("options, version, runs", [
    (["--env=VLLM_ALL2ALL_BACKEND=deepep_low_latency"], "0.14.1", "deepep_low_latency"),
    (["-eVLLM_ALL2ALL_BACKEND=deepep_low_latency"], "0.14.1", "deepep_low_latency"),
    ([], "0.14.1", "deepep_high_throughput"),  # the client's own environment does not reach the container
])
def test_a_containers_environment_is_judged_as_the_container_gets_it(options, version, runs):
    line = ["docker", "run", "--gpus", "all", *options, f"vllm/vllm-openai:v{version}", FP8B, "-dp", "8", "-ep",
            "--all2all-backend", "deepep_high_throughput"]
    report = check_serve_command(line, gpu_arch="sm90", environ={"VLLM_ALL2ALL_BACKEND": "naive"})
    assert report.backend == runs
