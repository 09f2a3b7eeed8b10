"""`check` on vLLM 0.34.0 and on releases newer than the rules tables.

Each expected verdict cites the 0.34.0 source line it rests on (the wheel's files, dated
2026-11-16: ``pip download --no-deps vllm==0.34.0``).
"""

from __future__ import annotations

import json

from click.testing import CliRunner

from support.paths import FIXTURES

from autoselect.check import check_serve_command
from autoselect.cli import main

MODELS = FIXTURES / "models"
NVFP4 = str(MODELS / "deepseek-r1-nvfp4")
BF16 = str(MODELS / "qwen3-30b-a3b")
FP8B = str(MODELS / "deepseek-v3")
NEWER = "vLLM 0.41.0 is newer than every release autoselect has read (newest: 0.34.0)"


def _check(*words, version="0.34.0", arch="sm100", environ=None):
    return check_serve_command(["vllm", "serve", *words], gpu_arch=arch, vllm_version=version, environ=environ or {})


def _findings(report, code):
    return [f for f in report.findings if f.code == code]


def test_mori_is_a_choice_again_in_0_34_and_runs_on_rocm_only():
    # 0.34.0 vllm/config/parallel.py:54 ("mori" in All2AllBackend); all2all.py:986-988 (gfx942/gfx950 only)
    r = _check(BF16, "-dp", "4", "-ep", "--all2all-backend", "mori", arch="sm90")
    assert not _findings(r, "invalid-choice") and not _findings(r, "value-unknown-to-version")
    [arch] = _findings(r, "illegal-arch")
    assert arch.message.startswith("mori does not run on sm90 (only on gfx942, gfx950)")
    # 0.23.0-0.33.x had no "mori" (split into two values): vllm serve exits at parse time
    old = _check(BF16, "-dp", "4", "-ep", "--all2all-backend", "mori", version="0.33.0", arch="sm90")
    [unknown] = _findings(old, "value-unknown-to-version")
    assert unknown.message.startswith("vLLM 0.33.0 does not accept --all2all-backend mori")


def test_the_split_mori_names_are_deprecated_in_0_34():
    # 0.34.0 distributed/device_communicators/cuda_communicator.py:236-247
    r = _check(BF16, "-dp", "4", "-ep", "--all2all-backend", "mori_high_throughput", arch="sm90")
    [dep] = _findings(r, "deprecated-name")
    assert dep.severity == "warning" and dep.message.endswith("use --all2all-backend mori")
    assert "cuda_communicator.py:236-247" in dep.message and "IntraNode kernel" in dep.message
    assert not _findings(_check(BF16, "-dp", "4", "-ep", "--all2all-backend", "mori_high_throughput",
                                version="0.33.0", arch="sm90"), "deprecated-name")


def test_a_megakernel_moe_backend_with_an_explicit_backend_is_a_startup_error():
    # 0.34.0 vllm/config/kernel.py:194-228: ValueError "cannot be paired with all2all_backend=..."
    r = _check(NVFP4, "-dp", "8", "-ep", "--moe-backend", "flashinfer_moe_ep_cutedsl",
               "--all2all-backend", "deepep_low_latency")
    assert r.exit_code == 1
    [conflict] = _findings(r, "moe-backend-conflict")
    assert conflict.severity == "error" and conflict.message.startswith(
        "vLLM 0.34.0 refuses to start: --moe-backend flashinfer_moe_ep_cutedsl dispatches and combines itself and "
        "cannot be paired with --all2all-backend deepep_low_latency")
    assert conflict.message.endswith(": drop --all2all-backend")
    assert (r.backend, r.backend_origin) == (None, "--moe-backend")
    d = r.to_dict()
    assert d["moe_backend_binding"]["backend"] is None and d["moe_backend_binding"]["refused"]
    # the backend's own rules are not judged: vLLM never gets that far
    assert not _findings(r, "batched-token-default") and not [f for f in r.findings if f.gpu_arch]


def test_a_megakernel_moe_backend_alone_binds_passthrough():
    # 0.34.0 kernel.py:207-222: default backend -> all2all_backend = "passthrough"
    r = _check(NVFP4, "-dp", "8", "-ep", "--moe-backend", "FLASHINFER-MOE-EP-MEGA-DEEP-GEMM")
    assert r.exit_code == 0 and (r.backend, r.backend_origin) == ("passthrough", "--moe-backend")
    [bound] = _findings(r, "moe-backend-dispatches")
    assert bound.message.startswith("--moe-backend flashinfer_moe_ep_mega_deep_gemm dispatches and combines itself: "
                                    "vLLM 0.34.0 binds all2all_backend=passthrough")
    assert not _findings(r, "default-backend")
    # an explicit allgather_reducescatter is the default to vLLM: bound too, and pointless
    same = _check(NVFP4, "-dp", "8", "-ep", "--moe-backend", "flashinfer_moe_ep_cutedsl",
                  "--all2all-backend", "allgather_reducescatter")
    assert same.backend == "passthrough" and same.exit_code == 0
    assert _findings(same, "all2all-backend-ignored")[0].message.endswith("drop it")
    # a removed value is replaced by allgather_reducescatter first (parallel.py:575-581), then bound
    assert _check(NVFP4, "-dp", "8", "-ep", "--moe-backend", "flashinfer_moe_ep_cutedsl",
                  "--all2all-backend", "pplx").backend == "passthrough"


def test_the_megakernel_values_do_not_exist_before_0_32():
    # 0.31.0 config/kernel.py has no FLASHINFER_MOE_EP_BACKENDS: the --moe-backend choice is refused
    r = _check(NVFP4, "-dp", "8", "-ep", "--moe-backend", "flashinfer_moe_ep_cutedsl", version="0.31.0")
    [unknown] = _findings(r, "moe-backend-unknown-to-version")
    assert unknown.message.startswith("vLLM 0.31.0 has no --moe-backend flashinfer_moe_ep_cutedsl (added in v0.32.0")
    # --moe-backend itself came in 0.17.0 (config/kernel.py:32)
    old = _check(NVFP4, "-dp", "8", "-ep", "--moe-backend", "triton", version="0.16.0")
    assert _findings(old, "option-unknown-to-version")


def test_passthrough_on_the_command_line_is_an_invalid_choice_with_the_reason():
    # 0.34.0 engine/arg_utils.py:1173-1176 removes it from the choices
    r = _check(NVFP4, "-dp", "8", "-ep", "--all2all-backend", "passthrough")
    [bad] = _findings(r, "invalid-choice")
    assert "passthrough is a value of vLLM's config, not of its command line" in bad.message


def test_0_34_lines_mention_that_its_flashinfer_pin_is_not_on_pypi():
    # vllm-0.34.0.dist-info/METADATA:90 Requires-Dist: flashinfer-python==0.7.3 (absent from PyPI)
    [hazard] = _findings(_check(NVFP4, "-dp", "8", "-ep"), "install-hazard")
    assert hazard.severity == "info" and "flashinfer-python==0.7.3, which is not on PyPI" in hazard.message
    assert not _findings(_check(NVFP4, "-dp", "8", "-ep", version="0.33.0"), "install-hazard")
    # the official image ships its FlashInfer: nothing to install
    image = check_serve_command(["docker", "run", "vllm/vllm-openai:v0.34.0", NVFP4, "-dp", "8", "-ep"],
                                gpu_arch="sm100", environ={})
    assert image.vllm_version == "0.34.0" and not _findings(image, "install-hazard")


def test_0_34_adds_the_redundant_experts_eplb_needs_when_the_line_names_none():
    # 0.34.0 config/parallel.py:652-684: the fewest redundant experts that make 256 divide over EP 6
    r = _check(FP8B, "-dp", "6", "-ep", "--enable-eplb", arch="sm90")
    assert not _findings(r, "eplb")
    [note] = _findings(r, "eplb-redundant-default")
    assert note.message.startswith("no num_redundant_experts: vLLM 0.34.0 adds 2,")
    assert r.to_dict()["physical_experts"] == 258
    [broken] = _findings(_check(FP8B, "-dp", "6", "-ep", "--enable-eplb", version="0.33.0", arch="sm90"), "eplb")
    assert broken.message.startswith("EPLB spreads 256 physical experts (256 routed + 0 redundant) over EP size 6")


def test_dbo_with_allgather_reducescatter_names_the_rocm_allowance():
    # 0.34.0 config/vllm.py:2090-2114: ROCm adds allgather_reducescatter; CUDA does not
    [dbo] = _findings(_check(FP8B, "-dp", "8", "-ep", "--enable-dbo", arch="sm90"), "dbo-unsupported")
    assert dbo.message.endswith("(on ROCm vLLM 0.34.0 also takes allgather_reducescatter; autoselect judges CUDA GPUs)")
    [old] = _findings(_check(FP8B, "-dp", "8", "-ep", "--enable-dbo", version="0.32.0", arch="sm90"), "dbo-unsupported")
    assert "ROCm" not in old.message


def test_reports_that_need_a_setting_follow_the_line():
    # #51824: deepep_v2 + --enforce-eager + the TRT-LLM BF16 experts crash at start-up, 0.26.0-0.28.x
    eager = _check(BF16, "-dp", "4", "-ep", "--all2all-backend", "deepep_v2", "--enforce-eager", version="0.28.0")
    assert [f.message[:30] for f in _findings(eager, "upstream-report") if "#51824" in f.message] == [
        "upstream report #51824 (fixed;"]
    assert not [f for f in _findings(_check(BF16, "-dp", "4", "-ep", "--all2all-backend", "deepep_v2", version="0.28.0"),
                                     "upstream-report") if "#51824" in f.message]
    # #32860: async EPLB (on by default from 0.23.0, here set) + deepep_low_latency deadlocked before 0.17.0
    hang = _check(FP8B, "-dp", "8", "-ep", "--all2all-backend", "deepep_low_latency", "--enable-eplb",
                  "--eplb-config", '{"use_async": true}', version="0.16.0", arch="sm90")
    assert any("#32860" in f.message for f in _findings(hang, "upstream-report"))
    # 0.17.0-0.19.x force synchronous EPLB next to allgather_reducescatter (0.17.0 config/parallel.py:777-786)
    forced = _check(FP8B, "-dp", "8", "-ep", "--enable-eplb", "--eplb-config.use_async", "true", version="0.18.0",
                    arch="sm90")
    assert _findings(forced, "eplb-forced-sync")


def test_a_release_newer_than_the_tables_gets_one_warning_on_stderr_and_in_the_json():
    words = ["check", "--gpu-arch", "sm90", "--vllm-version", "0.41.0", "--", "vllm", "serve", BF16, "-dp", "4", "-ep"]
    text = CliRunner().invoke(main, words)
    assert text.exit_code == 0
    assert text.stderr.count("Warning: ") == 1 and text.stderr.startswith(f"Warning: {NEWER}")
    assert NEWER not in text.stdout
    js = CliRunner().invoke(main, [*words[:5], "--format", "json", *words[5:]])
    d = json.loads(js.stdout)
    assert d["vllm_version"] == "0.41.0" and d["vllm_version_warning"].startswith(NEWER)
    assert js.stderr.count("Warning: ") == 1
    known = CliRunner().invoke(main, ["check", "--gpu-arch", "sm90", "--vllm-version", "0.34.0", "--format", "json",
                                      "--", "vllm", "serve", BF16, "-dp", "4", "-ep"])
    assert json.loads(known.stdout)["vllm_version_warning"] is None and "Warning" not in known.stderr


def test_an_image_tag_newer_than_the_tables_gets_the_warning_too():
    r = check_serve_command(["docker", "run", "--gpus", "all", "vllm/vllm-openai:v0.41.0", BF16, "-dp", "4", "-ep"],
                            gpu_arch="sm90", environ={})
    assert r.vllm_version == "0.41.0" and r.vllm_version_source.startswith("the line's image")
    assert r.vllm_version_warning.startswith(NEWER)
