"""The emit side: the `vllm serve` flags that run a chosen backend, and the token budget to emit."""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping, NamedTuple

from autoselect.payload import combine_bytes_per_token, dispatch_bytes_per_token
from autoselect import rules
from autoselect.rules import (NEWEST_VLLM, VARIABLE, BackendUnknownToVersion, UnknownBackend, flag_value, resolve,
                              selection, selection_era)


#: The one-sided workspace the user allows per GPU when they do not say (TensorRT-LLM's
#: default `TRTLLM_MOE_A2A_WORKSPACE_MB` is 2048 MB).
DEFAULT_MAX_WORKSPACE_GIB = 2.0

#: Backends whose workspace grows with `--max-num-batched-tokens` and is sized from it.
WORKSPACE_SIZED_BACKENDS = ("flashinfer_nvlink_one_sided",)
#: FlashInfer's largest top_k for the routing tables in the one-sided aux region.
_ONE_SIDED_MAX_TOPK = 22
#: `--max-num-batched-tokens` values emitted to fit a workspace are multiples of this.
TOKEN_ROUNDING = 256


def _pad128(n: int) -> int:
    return (n + 127) // 128 * 128


def one_sided_workspace_bytes(
    world_size: int, max_tokens: int, dispatch_bytes_per_token: int, combine_bytes_per_token: int
) -> int:
    """Bytes per rank of the one-sided all2all workspace, FlashInfer's formula
    (``moe_a2a_get_workspace_size_per_rank``).

    ``pad128(aux) + pad128(ep * T * dispatch) + pad128(ep * T * combine)``, ``T`` the per-rank
    token maximum (vLLM passes ``--max-num-batched-tokens``); ``aux`` holds the flags,
    counters and two ``T x 22`` int32 routing tables.
    """
    ep = world_size
    aux = (
        _pad128(8)
        + _pad128(2 * ep * 4)
        + 2 * _pad128(ep * 4)
        + 2 * _pad128(max_tokens * _ONE_SIDED_MAX_TOPK * 4)
    )
    return (
        _pad128(aux)
        + _pad128(ep * max_tokens * dispatch_bytes_per_token)
        + _pad128(ep * max_tokens * combine_bytes_per_token)
    )


def vllm_default_max_num_batched_tokens(backend: str, gpu_memory_mib: int | None, vllm_version: str = NEWEST_VLLM,
                                        gpu_arch: str | None = None) -> int:
    """The `--max-num-batched-tokens` ``vllm serve`` would use for ``backend`` without the flag, in
    ``vllm_version`` on GPUs of ``gpu_memory_mib`` (unknown: the smallest data-center GPU of
    ``gpu_arch``): :func:`autoselect.rules.token_budget`, which also says where it came from."""
    return rules.token_budget(backend, vllm_version, gpu_memory_mib=gpu_memory_mib, gpu_arch=gpu_arch).tokens


def workspace_max_num_batched_tokens(
    backend: str,
    *,
    hidden: int,
    top_k: int,
    activation_dtype: str,
    world_size: int,
    max_num_batched_tokens: int | None = None,
    max_workspace_gib: float | None = None,
    gpu_memory_mib: int | None = None,
    default_budget: int | None = None,
) -> tuple[int | None, list[str]]:
    """The `--max-num-batched-tokens` to emit for ``backend`` (None: leave vLLM's), with notes.

    The user's value is kept when given. For a backend whose workspace is sized from it
    (one-sided), the value (the user's, else ``default_budget``, vLLM's default the answer
    assumes, else vLLM's default for ``gpu_memory_mib``) is lowered to the largest multiple of
    256 whose workspace fits ``max_workspace_gib``, and a note says so.
    """
    notes: list[str] = []
    if backend not in WORKSPACE_SIZED_BACKENDS:
        return max_num_batched_tokens, notes
    allowance = DEFAULT_MAX_WORKSPACE_GIB if max_workspace_gib is None else max_workspace_gib
    limit = allowance * 2**30  # a float: int() of a huge allowance would overflow
    dispatch = dispatch_bytes_per_token(activation_dtype, hidden, top_k)
    combine = combine_bytes_per_token(hidden)
    wanted = max_num_batched_tokens or default_budget or vllm_default_max_num_batched_tokens(backend, gpu_memory_mib)

    def size(tokens: int) -> int:
        return one_sided_workspace_bytes(world_size, tokens, dispatch, combine)

    if size(wanted) <= limit:
        return max_num_batched_tokens, notes
    # the largest multiple of TOKEN_ROUNDING that fits: the size grows with the tokens, so a
    # bisection (a budget of 2**31 tokens stepped down by 256 would take millions of steps)
    low, high = 0, wanted // TOKEN_ROUNDING  # units of TOKEN_ROUNDING; `low` always fits (or is 0)
    while low < high:
        mid = (low + high + 1) // 2
        if size(mid * TOKEN_ROUNDING) <= limit:
            low = mid
        else:
            high = mid - 1
    tokens = low * TOKEN_ROUNDING
    if tokens <= 0:
        tokens = TOKEN_ROUNDING
        notes.append(
            f"{backend}: even {tokens} tokens need a {size(tokens) / 2**30:.2f} GiB workspace, more "
            f"than --max-workspace-gib {allowance:g}; raise the allowance"
        )
        return tokens, notes
    notes.append(
        f"{backend}: --max-num-batched-tokens lowered from {wanted} to {tokens} so the workspace "
        f"({size(wanted) / 2**30:.2f} -> {size(tokens) / 2**30:.2f} GiB per GPU at EP{world_size}) "
        f"fits --max-workspace-gib {allowance:g}"
    )
    return tokens, notes


def moe_backend_of(words: list[str]) -> str | None:
    """The ``--moe-backend`` value among ``vllm serve`` words (``--moe-backend X`` or ``--moe-backend=X``;
    the last one wins, as in argparse), or None."""
    found = None
    for i, word in enumerate(words):
        if word == "--moe-backend" and i + 1 < len(words):
            found = words[i + 1]
        elif word.startswith("--moe-backend="):
            found = word.partition("=")[2]
    return found


def serve_flags(
    backend: str,
    deployment,
    vllm_version: str,
    *,
    max_num_batched_tokens: int | None = None,
    extra: list[str] | None = None,
) -> list[str]:
    """The `vllm serve` flags (no program, no model) that run ``backend`` on ``deployment``.

    ``--tensor-parallel-size`` (when > 1), ``--data-parallel-size``,
    ``--enable-expert-parallel``, ``--all2all-backend`` spelled for ``vllm_version``
    (:func:`autoselect.rules.flag_value`), ``--max-num-batched-tokens`` when given, then ``extra``.
    No ``--all2all-backend`` when ``extra`` names a ``--moe-backend`` that dispatches and combines
    itself on ``vllm_version`` (vLLM binds ``passthrough`` and refuses any other explicit backend:
    :func:`autoselect.rules.moe_backend_binding`).
    """
    flags: list[str] = []
    if deployment.tp > 1:
        flags += ["--tensor-parallel-size", str(deployment.tp)]
    flags += ["--data-parallel-size", str(deployment.dp), "--enable-expert-parallel"]
    moe_backend = moe_backend_of(extra or [])
    # the --moe-backend table loads only when the extra flags name a --moe-backend
    if not moe_backend or rules.dispatching_moe_backend(moe_backend, vllm_version) is None:
        flags += ["--all2all-backend", flag_value(backend, vllm_version)]
    if max_num_batched_tokens is not None:
        flags += ["--max-num-batched-tokens", str(max_num_batched_tokens)]
    return flags + list(extra or [])


def serve_argv(
    model: str,
    backend: str,
    deployment,
    vllm_version: str,
    *,
    extra: list[str] | None = None,
    max_num_batched_tokens: int | None = None,
) -> list[str]:
    """``["vllm", "serve", model, *serve_flags(...)]``."""
    return ["vllm", "serve", model] + serve_flags(
        backend, deployment, vllm_version, max_num_batched_tokens=max_num_batched_tokens, extra=extra
    )


class BackendSetting(NamedTuple):
    """How one vLLM release is told to run a backend: flags, environment, and variables to unset."""

    flags: tuple[str, ...] = ()
    env: Mapping[str, str] = MappingProxyType({})  # read only: one empty default for all
    unset: tuple[str, ...] = ()  # variables that would override the flag if left in the environment

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return {"flags": list(self.flags), "env": dict(self.env), "unset": list(self.unset)}


def backend_setting(backend: str, vllm_version: str, environ: Mapping[str, str] | None = None) -> BackendSetting:
    """What makes ``vllm_version`` run ``backend``, the way that release reads it
    (:data:`autoselect.rules.SELECTION_ERAS`).

    A release with the flag gets ``--all2all-backend`` spelled for it (:func:`autoselect.rules.flag_value`);
    where ``VLLM_ALL2ALL_BACKEND`` overrides the flag (0.14.0-0.15.x) and ``environ`` sets it, the
    variable is unset too. A release before the flag gets ``VLLM_ALL2ALL_BACKEND`` with the value it
    accepts for the backend (an old name where it has one).

    :raises BackendUnknownToVersion: the release has no way to name the backend.
    """
    era = selection_era(vllm_version)
    canonical = resolve(backend)
    if era.flag:
        flags = ("--all2all-backend", flag_value(canonical, vllm_version))
        overrides = era.variable == selection.OVER_FLAG and VARIABLE in (environ or {})
        return BackendSetting(flags=flags, unset=(VARIABLE,) if overrides else ())
    values = sorted(v for v in era.variable_values if v == backend or _canonical(v) == canonical)
    if not values:
        raise BackendUnknownToVersion(
            f"vLLM {vllm_version} chooses the backend only through {VARIABLE}, which takes "
            f"{', '.join(sorted(era.variable_values))}: none of them is {canonical} ({era.cite})")
    value = backend if backend in values else values[0]
    return BackendSetting(env={VARIABLE: value})


def _canonical(value: str) -> str | None:
    try:
        return resolve(value)
    except UnknownBackend:  # a value of the variable the rules table has no row for
        return None
