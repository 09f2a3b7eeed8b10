"""docs/launch.md's deployment forms are real: each is parsed as its tool parses it and launched.

The Dockerfile (BuildKit's parser, the ``dockerfile`` package: ENTRYPOINT + CMD in exec form is the
process's argv), the Kubernetes Pod (``command`` + ``args``) and the llm-d-style decode worker are
read from the page itself, their model replaced by the closest shipped config, and run through
``autoselect launch --dry-run``: vLLM's CPU platform here (``VLLM_TARGET_DEVICE=cpu``), and a
reference class's pick with the service unreachable (the fallback the page describes).
"""

from __future__ import annotations

import re
import socket

import pytest
import yaml
from click.testing import CliRunner

from support.paths import FIXTURES, REPO

from autoselect.cli import main
from autoselect.vllm_flags import read_command

PAGE = (REPO / "docs" / "launch.md").read_text()
MODELS = FIXTURES / "models"
#: the page's models -> the closest shipped configs (no download)
FIXTURE_OF = {"deepseek-ai/DeepSeek-V3": str(MODELS / "deepseek-v3"),
              "nvidia/DeepSeek-R1-0528-NVFP4-v2": str(MODELS / "deepseek-r1-nvfp4")}


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", PAGE, flags=re.S)


def dockerfile_argv() -> list[str]:
    dockerfile = pytest.importorskip("dockerfile", reason="pip install 'autoselect[test]' (the dockerfile parser)")
    [text] = _blocks("dockerfile")
    instructions = {i.cmd: i for i in dockerfile.parse_string(text)}
    assert instructions["ENTRYPOINT"].json and instructions["CMD"].json  # exec form: no shell in between
    return list(instructions["ENTRYPOINT"].value) + list(instructions["CMD"].value)


def kubernetes_argv() -> list[str]:
    pod = next(doc for doc in map(yaml.safe_load, _blocks("yaml")) if doc.get("kind") == "Pod")
    [container] = pod["spec"]["containers"]
    return container["command"] + container["args"]


def llmd_argv() -> list[str]:
    worker = next(doc for doc in map(yaml.safe_load, _blocks("yaml")) if "decode" in doc)
    [container] = worker["decode"]["containers"]
    return container["command"] + container["args"]


FORMS = {"dockerfile": dockerfile_argv, "kubernetes": kubernetes_argv, "llm-d": llmd_argv}


def _runnable(argv: list[str], tmp_path, server: str | None = None) -> list[str]:
    """The form's argv as `autoselect ...` arguments: a dry run, fixture models, a real token file."""
    assert argv[:2] == ["autoselect", "launch"] and "--" in argv, argv
    token = tmp_path / "token"
    token.write_text("0123456789abcdef0123456789abcdef\n")
    out = ["launch", "--dry-run"]
    for i, word in enumerate(argv[2:], 2):
        if argv[i - 1] == "--token-file":
            word = str(token)
        elif argv[i - 1] == "--server" and server is not None:
            word = server
        elif argv[i - 1] == "--decision-json":
            word = str(tmp_path / "decision.json")
        out.append(FIXTURE_OF.get(word, word))
    return out


@pytest.mark.parametrize("form", FORMS)
def test_each_deployment_form_of_the_page_launches_on_the_cpu_platform(form, tmp_path):
    argv = FORMS[form]()
    result = CliRunner().invoke(main, _runnable(argv, tmp_path), env={"VLLM_TARGET_DEVICE": "cpu"})
    assert result.exit_code == 0, result.output
    line = argv[argv.index("--") + 1:]
    expected = [FIXTURE_OF.get(w, w) for w in line] + ["--all2all-backend", "allgather_reducescatter"]
    assert read_command([result.stdout]).words == expected


@pytest.mark.parametrize("form", FORMS)
def test_each_form_gets_a_pick_for_gpus_when_the_service_cannot_answer(form, tmp_path):
    """The reference class of the form's GPUs where it holds the EP size (published evidence); the GPU
    arch alone (the llm-d worker's EP 16) has no evidence, so vLLM's default stays, said as such."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{s.getsockname()[1]}"
    argv = FORMS[form]()
    args = [a for a in _runnable(argv, tmp_path, server=nobody) if a != "--require-evidence"]
    wide = "16" in argv
    args[2:2] = ["--gpu-arch", "sm100"] if wide else ["--host-class", "ref-h200_sxm-x8"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    if wide:  # nothing measured or published for these GPUs at EP 16: confidence none, whatever is legal
        assert "--all2all-backend " not in result.stdout
        assert "vLLM's default (allgather_reducescatter) kept, nothing inserted: no evidence: " in result.stderr
    else:
        assert "--all2all-backend " in result.stdout
        assert "confidence reference, from NVIDIA's published reference" in result.stderr
    if "--server" in args:
        assert f"(the service {nobody} was not used: no answer (" in result.stderr


def test_the_llm_d_worker_is_weighed_as_decode():
    argv = llmd_argv()
    assert argv[argv.index("--role") + 1] == "decode"
