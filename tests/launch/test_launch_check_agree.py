"""``check`` and ``launch`` judge a line with one judge, so they agree on every line.

Both call :func:`autoselect.check.judge_line`: launch refuses a line exactly where check reports an
error, with check's own words (the first error finding), and every line launch would start —
the user's, or the one a pick makes — passes check with no error, runs the backend check says it
runs, and carries check's warnings as ``Warning:`` lines. Fed: every published line of
tests/fixtures/published_lines/ as published and with every ``--all2all-backend`` value some
release knows (and one no release knows) appended, on the line's own release and the newest; the
same next to a ``--moe-backend`` that dispatches itself; and lines hypothesis generates from the
pieces published lines are made of (launchers, entry points, parallel sizes, EPLB, DBO, token
budgets, old and new backend names, the variable, Unicode dashes, single-dash options, ``=``
spellings), on every release and both GPU archs, with and without a pick from the reference.

Both judge lines for GPUs here (``--gpu-arch``): vLLM's CPU platform, which check does not model
(it judges lines for GPUs), is launch's alone (tests/launch/test_launch.py). The lines fed are
ones launch may start (:func:`autoselect.vllm_flags.start_problem`); that rule has its own tests.
"""

from __future__ import annotations

import shlex

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from support.db import cpu_host
from support.published_lines import CORPUS, MODELS, command

import autoselect.selector.pipeline as pipeline
from autoselect import rules
from autoselect.check import check_serve_command
from autoselect.errors import UserError
from autoselect.launch import LaunchOptions, plan_launch
from autoselect.launch.choose import LineRefused
from autoselect.rules.versions import RELEASES

VALUES = sorted(rules.ALL_FLAG_VALUES) + ["flashinfer_one_sided"]
#: The reference class of each arch (its answers are picks on that arch).
REFERENCE = {"sm90": "ref-h200_sxm-x8", "sm100": "ref-b200_sxm-x8"}


@pytest.fixture(autouse=True)
def no_gpus_here(monkeypatch):
    monkeypatch.setattr(pipeline, "fingerprint", cpu_host)


def _line(entry: dict, backend: str | None, extra: str = "") -> str:
    text = command(entry).rstrip()
    text = (text[:-1].rstrip() if text.endswith("&") else text) + extra
    return text if backend is None else f"{text} --all2all-backend {backend}"


def judged_alike(line, *, gpu_arch: str, version: str, env: dict, role: str | None = None,
                 host_class: str | None = None, db_path=None) -> str:
    """Check and launch on ``line``; the outcome in a word, after asserting they agree."""
    check = check_serve_command(line, gpu_arch=gpu_arch, vllm_version=version, environ=env, role=role)
    errors = [f.message for f in check.errors]
    try:
        plan = plan_launch(line, LaunchOptions(gpu_arch=gpu_arch, vllm_version=version, role=role,
                                               host_class=host_class, db_path=db_path), environ=env)
    except LineRefused as e:
        # the refusal is check's first error, in check's words
        assert errors and str(e).startswith(errors[0]), (line, str(e), errors)
        return "refused"
    except UserError as e:  # an option the line does not fit (a reference class of 8 GPUs for EP 16)
        assert host_class is not None and "ref-" in str(e), (line, str(e))
        return "option refused"
    assert errors == [], (line, errors)  # launch never starts a line check rejects
    final = check_serve_command([plan.final.shell()], gpu_arch=gpu_arch, vllm_version=version, environ=env,
                                role=role)
    assert final.errors == [], (line, plan.final.shell(), [f.message for f in final.errors])
    # check names the value as the release spells it (flashinfer_all2allv before 0.18.0), launch the backend
    assert same_backend(final.backend, plan.backend), (line, plan.final.shell())
    # every warning check has for the line that runs is a Warning: line of launch (a shell expansion
    # is said in launch's own words: launch starts the words as they are, no shell expands them)
    said = {f.message for f in final.warnings if f.code not in ("shell-variables", "backend-unknown")}
    assert said <= {w.split(" [sm")[0] for w in plan.warnings}, (line, plan.warnings)
    return plan.action


@pytest.mark.parametrize("entry", CORPUS, ids=lambda e: e["id"])
def test_check_and_launch_agree_on_every_backend_of_every_published_line(entry):
    for version in dict.fromkeys((entry["vllm_version"], rules.NEWEST_VLLM)):
        for backend in [None, *VALUES]:
            judged_alike([_line(entry, backend)], gpu_arch=entry["gpu_arch"], version=version,
                         env=dict(entry.get("env", {})), role=entry.get("role"))


@pytest.mark.parametrize("entry", CORPUS, ids=lambda e: e["id"])
def test_check_and_launch_agree_next_to_a_moe_backend_that_dispatches_itself(entry):
    # vLLM binds passthrough for the default (or allgather_reducescatter, or a value replaced by it)
    # and refuses any other backend at start-up (0.34.0 vllm/config/kernel.py:194-228)
    for backend in [None, *VALUES]:
        judged_alike([_line(entry, backend, " --moe-backend flashinfer_moe_ep_cutedsl")], gpu_arch=entry["gpu_arch"],
                     version=rules.NEWEST_VLLM, env=dict(entry.get("env", {})), role=entry.get("role"))


@pytest.mark.parametrize("entry", CORPUS, ids=lambda e: e["id"])
def test_a_published_line_with_a_reference_pick_passes_check(entry, tmp_path):
    for host_class in (REFERENCE[entry["gpu_arch"]],):
        judged_alike([_line(entry, None)], gpu_arch=entry["gpu_arch"], version=rules.NEWEST_VLLM,
                     env=dict(entry.get("env", {})), role=entry.get("role"), host_class=host_class,
                     db_path=tmp_path / "none.db")


# ---- generated lines ------------------------------------------------------------------------------

MOE_MODELS = ("qwen3-30b-a3b", "deepseek-v3", "deepseek-r1-nvfp4", "gpt-oss-120b", "mixtral-8x7b", "llama-3.1-8b")
LAUNCHERS = ((), ("env", "A=1"), ("nohup",), ("numactl", "--cpunodebind=0", "--membind", "0"),
             ("taskset", "-c", "0-7"), ("uv", "run", "--with", "x"), ("sudo", "-E"), ("env", "-u", "X", "nice", "-n", "5"))
DASHES = ("-", "\u2013", "\u2014")


@st.composite
def lines(draw):
    """A server line of the pieces published lines are made of, as words, and its environment."""
    model = str(MODELS / draw(st.sampled_from(MOE_MODELS)))
    entry = draw(st.sampled_from(("vllm", "python", "image")))
    version = draw(st.sampled_from(RELEASES))
    if entry == "vllm":
        words = [*draw(st.sampled_from(LAUNCHERS)), "vllm", "serve", model]
    elif entry == "python":
        words = [*draw(st.sampled_from(LAUNCHERS)), "python3", "-m", "vllm.entrypoints.openai.api_server",
                 "--model", model]
    else:
        words = ["docker", "run", "--gpus", "all", "--ipc=host", f"vllm/vllm-openai:v{version}", model]
    dp = draw(st.sampled_from((1, 2, 4, 8, 8, 8, 12, 16, 64, 256)))
    words += [draw(st.sampled_from(("-dp", "--data-parallel-size", "--data-parallel-size="))), str(dp)]
    if words[-2].endswith("="):
        words[-2:] = [words[-2] + words[-1]]
    if draw(st.booleans()):
        words += ["-tp", str(draw(st.sampled_from((1, 2, 8))))]
    if draw(st.integers(0, 4)):
        flag = draw(st.sampled_from(("--enable-expert-parallel", "-ep")))
        dash = draw(st.sampled_from(DASHES)) if draw(st.integers(0, 9)) == 0 else "-"
        words.append(dash + flag[1:])
    backend = draw(st.sampled_from(VALUES)) if draw(st.integers(0, 2)) == 0 else None
    if backend is not None:
        words += draw(st.sampled_from(([f"--all2all-backend={backend}"], ["--all2all-backend", backend],
                                       ["--all2all_backend", backend])))
    if draw(st.integers(0, 2)) == 0:
        words.append(draw(st.sampled_from(("--enable-dbo", "--enable-eplb", "--enforce-eager", "-enable-dbo",
                                           "--moe-backend=flashinfer_moe_ep_cutedsl"))))
    if draw(st.integers(0, 3)) == 0:
        words += ["--eplb-config", f'{{"num_redundant_experts": {draw(st.sampled_from((0, 2, 8, 32)))}}}']
    if draw(st.booleans()):
        words += ["--max-num-batched-tokens", str(draw(st.sampled_from((128, 256, 1024, 8192, 16384))))]
    env = {}
    if draw(st.integers(0, 3)) == 0:
        env["VLLM_ALL2ALL_BACKEND"] = draw(st.sampled_from(VALUES))
    if draw(st.integers(0, 5)) == 0:
        env["VLLM_MOE_DP_CHUNK_SIZE"] = str(draw(st.sampled_from((128, 256, 1024))))
    if entry == "image" and env and draw(st.booleans()):  # the container's own environment
        name, value = next(iter(env.items()))
        words[2:2] = [draw(st.sampled_from((f"-e{name}={value}", f"--env={name}={value}")))]
    return words, env, version


def same_backend(a: str | None, b: str | None) -> bool:
    """One backend under either of its spellings (flashinfer_all2allv is two-sided before vLLM 0.18.0)."""
    return a == b or (a is not None and b is not None and rules.resolve(a) == rules.resolve(b))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(line=lines(), gpu_arch=st.sampled_from(("sm90", "sm100")), pick=st.booleans(), pasted=st.booleans())
def test_check_and_launch_agree_on_generated_lines(line, gpu_arch, pick, pasted, tmp_path_factory):
    words, env, version = line
    host_class = REFERENCE[gpu_arch] if pick else None
    argv = [shlex.join(words)] if pasted else words
    try:
        event(judged_alike(argv, gpu_arch=gpu_arch, version=version, env=env, host_class=host_class,
                           db_path=tmp_path_factory.getbasetemp() / "none.db"))
    except UserError as e:
        event(f"unreadable: {type(e).__name__}")  # a line neither can read (a missing model, ...) is refused by both alike
        with pytest.raises(type(e)):
            plan_launch(argv, LaunchOptions(gpu_arch=gpu_arch, vllm_version=version), environ=env)
