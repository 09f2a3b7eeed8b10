"""Step 7: what the user runs. The tuned knobs of the pick, its ``vllm serve`` flags, the launch
environment, the command line, and the ``autoselect bench`` command that would settle an answer
the data could not.
"""

from __future__ import annotations

import shlex
import sqlite3
import warnings
from typing import Any, Iterable, NamedTuple

from autoselect import vllm_flags
from autoselect.selector.answer import Candidate
from autoselect.selector.target import RecommendTarget
from autoselect.workload import Deployment
from db.tuned import best_tuned


class ServeFlags(NamedTuple):
    """The pick as something to run: flags, environment, the whole command, and notes."""

    vllm_args: list[str]
    env: dict[str, str]
    command: str
    notes: list[str]  # e.g. --max-num-batched-tokens lowered to fit the one-sided workspace


class UntrustedTuned(UserWarning):
    "A stored tuned configuration with a variable or flag outside the knob table: not used."


def tuned_knobs(target: RecommendTarget, conn: sqlite3.Connection | None, backend: str) -> dict[str, Any]:
    """The newest ``autoselect tune`` configuration with a measured gain for ``backend`` ({} when none).

    A stored row is untrusted input (``db import`` takes rows from anywhere): one whose variables
    or flags fall outside the knob table (:mod:`autoselect.vllm_flags.trusted`: never
    ``LD_PRELOAD``, never ``--trust-remote-code``) is not used, and a warning says so.
    """
    if conn is None or target.host_class is None:
        return {}
    p = target.profile
    tuned = best_tuned(conn, host_class=target.host_class, hidden=p.hidden_size, top_k=p.top_k,
                       experts=p.num_experts, activation_dtype=target.activation_dtype, world_size=target.world_size,
                       backend=backend)
    if tuned is None:
        return {}
    try:
        vllm_flags.trusted_env(tuned.env, backend)
        vllm_flags.trusted_tuned_flags(tuned.flags, backend)
    except vllm_flags.UntrustedAnswer as e:
        warnings.warn(UntrustedTuned(f"tuned configuration {tuned.id} for {backend} is not used: {e}"), stacklevel=2)
        return {}
    return {"env": tuned.env, "flags": tuned.flags, "settings": tuned.knobs, "gain": tuned.gain,
            "gain_halfwidth": tuned.gain_halfwidth, "tuned_at": tuned.created_at}


def serve_flags(target: RecommendTarget, backend: str, knobs: dict[str, Any]) -> ServeFlags:
    """``vllm serve`` flags, environment and command line for ``backend`` with ``knobs``."""
    p = target.profile
    serve_mnbt, notes = vllm_flags.workspace_max_num_batched_tokens(
        backend, hidden=p.hidden_size, top_k=p.top_k, activation_dtype=target.activation_dtype,
        world_size=target.world_size, max_num_batched_tokens=target.max_num_batched_tokens,
        max_workspace_gib=target.max_workspace_gib, gpu_memory_mib=target.gpu_memory_mib,
        default_budget=target.budget.tokens if target.budget is not None else None,
    )
    vllm_args = vllm_flags.serve_flags(backend, target.deployment, target.vllm_version,
                                       max_num_batched_tokens=serve_mnbt, extra=list(knobs.get("flags", [])))
    knob_env = knobs.get("env") or {}
    env = {"AUTOSELECT_ALL2ALL_BACKEND": backend, "AUTOSELECT_VLLM_ARGS": shlex.join(vllm_args)}
    env.update({k: str(v) for k, v in knob_env.items()})
    command = shlex.join([f"{k}={v}" for k, v in knob_env.items()] + ["vllm", "serve", p.model] + vllm_args)
    return ServeFlags(vllm_args=vllm_args, env=env, command=command, notes=list(notes))


def settle_command(
    model: str, deployment: Deployment, tokens: Iterable[int], backends: Iterable[str], device: str = "cuda"
) -> str:
    """The ``autoselect bench`` command that measures ``backends`` at ``tokens`` per rank."""
    argv = ["autoselect", "bench", "--model", model, "--world-size", str(deployment.world_size),
            "--tokens", ",".join(str(t) for t in sorted(set(tokens)))]
    backends = sorted(set(backends))
    if backends:
        argv += ["--backends", ",".join(backends)]
    argv += ["--device", device]
    return shlex.join(argv)


def settle(target: RecommendTarget, candidates: list[Candidate], default: Candidate | None,
           also: Iterable[str] = ()) -> str | None:
    """The bench command for what the answer lacks: unmeasured candidates at every bucket, incomplete
    ones at their missing buckets, an unmeasured default, and ``also`` (backends the data priced but
    cannot separate) at every bucket; None when nothing is missing. A single legal backend without
    a number gets its command too: the answer has no evidence (confidence none) until it is measured."""
    missing = {c.backend: c.missing_tokens for c in candidates if c.measured and c.weighted_us is None}
    need = {c.backend for c in candidates if not c.measured} | set(missing) | set(also)
    if default is not None and default.weighted_us is None:
        need.add(default.backend)
    if not need:
        return None
    tokens = target.workload.tokens
    need_tokens = set().union(*(missing.get(b, tokens) for b in need))
    return settle_command(target.profile.model, target.deployment, need_tokens or tokens, need)
