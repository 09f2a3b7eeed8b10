"""``check`` and ``launch`` never disagree on legality: both read the same lines.

Every published line of tests/fixtures/published_lines/ is fed to both, as published and with
every ``--all2all-backend`` value some release knows (and one no release knows) appended, on the
line's own vLLM release and the newest: launch refuses exactly where check reports an error about
the backend the line runs (its dtype or shape, a value the release does not accept, a variable it
refuses, ``--enable-dbo``). check's other errors (EPLB, options the release lacks) are vLLM's own
start-up failures, not a backend choice: launch leaves them to vLLM. And every line launch would
start, check finds no backend error in.

Both judge lines for GPUs here (``--gpu-arch``): vLLM's CPU platform, which check does not model
(it judges lines for GPUs), is launch's alone (tests/launch/test_launch.py).
"""

from __future__ import annotations

import pytest

from support.published_lines import CORPUS, command

import autoselect.selector.pipeline as pipeline
from autoselect import rules
from autoselect.check import check_serve_command
from autoselect.hardware import cpu_fingerprint
from autoselect.launch import LaunchOptions, plan_launch
from autoselect.launch.choose import IllegalBackend

#: check's error codes about the backend the line runs (launch refuses these).
BACKEND_ERRORS = frozenset({"illegal-dtype", "illegal-shape", "illegal-arch", "invalid-choice",
                            "value-unknown-to-version", "flag-unknown-to-version", "env-var-invalid", "dbo-unsupported",
                            "moe-backend-conflict"})
VALUES = sorted(rules.ALL_FLAG_VALUES) + ["flashinfer_one_sided"]


@pytest.fixture(autouse=True)
def no_gpus_here(monkeypatch):
    monkeypatch.setattr(pipeline, "fingerprint", cpu_fingerprint)


def _line(entry: dict, backend: str | None, extra: str = "") -> str:
    text = command(entry).rstrip()
    text = (text[:-1].rstrip() if text.endswith("&") else text) + extra
    return text if backend is None else f"{text} --all2all-backend {backend}"


def _both(entry: dict, backend: str | None, version: str, extra: str = ""):
    line, env = _line(entry, backend, extra), dict(entry.get("env", {}))
    report = check_serve_command([line], gpu_arch=entry["gpu_arch"], vllm_version=version, environ=env,
                                 role=entry.get("role"))
    check_refuses = sorted({f.code for f in report.findings if f.severity == "error"} & BACKEND_ERRORS)
    try:
        plan = plan_launch([line], LaunchOptions(gpu_arch=entry["gpu_arch"], vllm_version=version,
                                                 role=entry.get("role")), environ=env)
    except IllegalBackend as e:
        return check_refuses, str(e), None
    return check_refuses, None, plan


@pytest.mark.parametrize("entry", CORPUS, ids=lambda e: e["id"])
def test_check_and_launch_agree_on_every_backend_of_every_published_line(entry):
    disagreements = []
    for version in dict.fromkeys((entry["vllm_version"], rules.NEWEST_VLLM)):
        for backend in [None, *VALUES]:
            check_refuses, launch_refusal, _ = _both(entry, backend, version)
            if bool(check_refuses) != (launch_refusal is not None):
                disagreements.append((version, backend, check_refuses, launch_refusal))
    assert disagreements == []


@pytest.mark.parametrize("entry", CORPUS, ids=lambda e: e["id"])
def test_check_and_launch_agree_next_to_a_moe_backend_that_dispatches_itself(entry):
    # vLLM binds passthrough for the default (or allgather_reducescatter, or a value replaced by it)
    # and refuses any other backend at start-up (0.34.0 vllm/config/kernel.py:194-228)
    disagreements = []
    for backend in [None, *VALUES]:
        check_refuses, launch_refusal, plan = _both(entry, backend, rules.NEWEST_VLLM,
                                                    " --moe-backend flashinfer_moe_ep_cutedsl")
        if bool(check_refuses) != (launch_refusal is not None):
            disagreements.append((backend, check_refuses, launch_refusal))
        elif plan is not None and plan.line.args.moe_backend:  # (a pasted block reads its first command)
            assert plan.final.argv == plan.line.argv and plan.backend == "passthrough", (backend, plan.text)
    assert disagreements == []


@pytest.mark.parametrize("entry", CORPUS, ids=lambda e: e["id"])
def test_every_line_launch_would_start_passes_checks_backend_rules(entry):
    for version in dict.fromkeys((entry["vllm_version"], rules.NEWEST_VLLM)):
        for backend in (None, "deepep_low_latency", "flashinfer_nvlink_one_sided"):
            _, refusal, plan = _both(entry, backend, version)
            if plan is None:
                continue
            final = check_serve_command([plan.final.shell()], gpu_arch=entry["gpu_arch"], vllm_version=version,
                                        environ=dict(entry.get("env", {})), role=entry.get("role"))
            errors = {f.code for f in final.findings if f.severity == "error"} & BACKEND_ERRORS
            assert errors == set(), (version, backend, plan.final.shell())
            assert final.backend == plan.backend or (final.backend, plan.backend) == (None, None)
