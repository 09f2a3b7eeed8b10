"""Running the plan: one ``vllm bench forward`` subprocess per backend, each result row stored as it arrives.

A backend whose run crashes or times out is recorded (``error`` / ``timeout`` rows), not raised:
the other backends still run. :func:`confirm` is the CLI's one call: plan, check this host and
its vLLM, run, store.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from autoselect import bridge
from autoselect.confirm.output import failed_rows, parse_forward_output, shape_error
from autoselect.confirm.plan import ConfirmPlan, check_runnable, plan_confirm
from autoselect.confirm.report import BackendRun, ConfirmReport
from autoselect.hardware import fingerprint
from autoselect.options import CONFIRM_ITERS, CONFIRM_KV_LEN, CONFIRM_SAMPLES, CONFIRM_TIMEOUT_S


@dataclass(frozen=True)
class ConfirmProgress:
    """A backend's run starting (``event="start"``) or finished (``"done"``, with its status)."""

    event: str  # "start" | "done"
    backend: str
    index: int  # 0-based position in the plan's backends
    total: int
    status: str | None = None  # "ok", "error", "timeout" once done


def _tail(text: str | bytes | None) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def run_backend(plan: ConfirmPlan, backend: str, *, versions: dict | None = None,
                env: dict | None = None, runner: Callable = subprocess.run) -> BackendRun:
    """Run ``vllm bench forward`` for one backend and parse what it wrote.

    A crash or a timeout is recorded (one ``error``/``timeout`` row per case), not raised:
    the other backends still run.
    :raises autoselect.confirm.BadForwardOutput: vLLM wrote a file in another format.
    """
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="autoselect-confirm-") as tmp:
        out = Path(tmp) / f"{backend}.json"
        argv = plan.argv(backend, out)
        status, error, results = "ok", None, []
        try:
            proc = runner(argv, capture_output=True, text=True, timeout=plan.timeout_s,
                          env={**os.environ, **(env or {})})
            if proc.returncode != 0:
                status, error = "error", f"exit {proc.returncode}: {_tail(proc.stderr or proc.stdout)}"
            elif not out.exists():
                status, error = "error", f"no --output-json written: {_tail(proc.stderr or proc.stdout)}"
            else:
                try:
                    data = json.loads(out.read_text())
                except json.JSONDecodeError as e:
                    raise shape_error(str(out), f"not JSON ({e.msg})") from None
                results = parse_forward_output(data, plan, backend, source=str(out), versions=versions)
        except subprocess.TimeoutExpired:
            status, error = "timeout", f"no answer within {plan.timeout_s:g} s"
    if status != "ok":
        results = failed_rows(plan, backend, status, error, versions=versions)
    return BackendRun(backend, shlex.join(argv), status, time.perf_counter() - started, results, error)


def run_confirm(plan: ConfirmPlan, *, store, host, vllm_version: str | None = None,
                command: str | None = None, runner: Callable = subprocess.run,
                progress: Callable[[ConfirmProgress], None] | None = None) -> ConfirmReport:
    """Run every backend of ``plan`` and store each result row as it arrives (kind ``e2e``).

    :param store: an open :class:`db.store.Store`.
    :param progress: called with a :class:`ConfirmProgress` before and after each backend.
    """
    versions = dict(getattr(host, "versions", {}) or {})
    if vllm_version:
        versions["vllm"] = vllm_version
    runs: list[BackendRun] = []
    total = len(plan.backends)
    with store.run(host, trigger="confirm", command=command,
                   meta={"kind": "e2e", "tool": "vllm bench forward", "plan": plan.to_dict()}) as stored:
        for i, backend in enumerate(plan.backends):
            if progress:
                progress(ConfirmProgress("start", backend, i, total))
            run = run_backend(plan, backend, versions=versions, runner=runner)
            for result in run.results:
                store.add_result(stored.id, result)
            runs.append(run)
            if progress:
                progress(ConfirmProgress("done", backend, i, total, run.status))
    return ConfirmReport(plan=plan, vllm_version=vllm_version, runs=runs, run_id=stored.id)


def confirm(model: str, *, db_path=None, backends: list[str] | None = None, tokens: str | None = None,
            dp: int | None = None, tp: int | None = None, gpu_arch: str | None = None,
            vllm_version: str | None = None, kv_len: int = CONFIRM_KV_LEN, iters: int = CONFIRM_ITERS,
            samples: int = CONFIRM_SAMPLES, timeout_s: float = CONFIRM_TIMEOUT_S, dry_run: bool = False,
            progress: Callable[[ConfirmProgress], None] | None = None) -> ConfirmReport:
    """``autoselect confirm`` from its flags: validate, check vLLM and GPUs, run, store.

    With ``dry_run`` only the plan is made (no vLLM, GPU or database needed).
    :raises UserError: bad input, no vLLM / no ``bench forward`` / too few GPUs (nothing written).
    """
    host = fingerprint()
    python = bridge.vllm_python()
    plan = plan_confirm(model, backends=backends, tokens=tokens, dp=dp, tp=tp, gpu_arch=gpu_arch,
                        vllm_version=vllm_version, kv_len=kv_len, iters=iters, samples=samples,
                        timeout_s=timeout_s, host=host, python=python or "python3")
    if dry_run:
        return ConfirmReport(plan=plan, vllm_version=None, runs=[])
    check_runnable(plan, host)
    vllm = bridge.vllm_info(python=bridge.require_vllm())
    check_runnable(plan, host, vllm)
    from db.store import Store  # heavy (sqlite_utils): only a run that measured pays for it

    with Store(db_path) as store:
        report = run_confirm(plan, store=store, host=host, vllm_version=vllm.version,
                             command=shlex.join(["autoselect", "confirm", "--model", model]), progress=progress)
        report.db_path = str(getattr(store, "path", db_path))
    return report
