"""`vllm serve` command lines: parsing existing ones (for ``check``) and emitting new ones.

Plain functions and dataclasses, no vLLM import: the spellings are those of vLLM 0.33.0's live
parser (``docs/facts.md``, "Exact argparse names"). Parsing keeps every option it does not
know aside, in order, so nothing the user wrote is lost.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import asdict, dataclass, field

from autoselect.errors import UserError


class InvalidServeCommand(UserError):
    "The `vllm serve` command line given to autoselect could not be read."


#: option spelling -> (field, converter). Options that take a value.
VALUE_OPTIONS = {
    "--tensor-parallel-size": ("tensor_parallel_size", int),
    "-tp": ("tensor_parallel_size", int),
    "--data-parallel-size": ("data_parallel_size", int),
    "-dp": ("data_parallel_size", int),
    "--data-parallel-size-local": ("data_parallel_size_local", int),
    "-dpl": ("data_parallel_size_local", int),
    "--all2all-backend": ("all2all_backend", str),
    "--max-num-batched-tokens": ("max_num_batched_tokens", int),
    "--quantization": ("quantization", str),
    "-q": ("quantization", str),
    "--model": ("model", str),
}

#: flag spelling -> (field, value). Options that take no value (argparse BooleanOptionalAction).
FLAG_OPTIONS = {
    "--enable-expert-parallel": ("enable_expert_parallel", True),
    "-ep": ("enable_expert_parallel", True),
    "--disable-expert-parallel": ("enable_expert_parallel", False),
    "--no-enable-expert-parallel": ("enable_expert_parallel", False),
    "--enable-eplb": ("enable_eplb", True),
    "--disable-eplb": ("enable_eplb", False),
    "--no-enable-eplb": ("enable_eplb", False),
    "--enable-dbo": ("enable_dbo", True),
    "--disable-dbo": ("enable_dbo", False),
    "--no-enable-dbo": ("enable_dbo", False),
}

#: Ways to start the OpenAI server that take the same flags as `vllm serve`.
_ENTRYPOINT_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.cli.main")
_ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SECRET = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|CREDENTIAL", re.I)


@dataclass
class ServeArgs:
    """The parts of a `vllm serve` command line that matter to the all2all backend."""

    model: str
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    data_parallel_size_local: int | None = None
    enable_expert_parallel: bool = False
    all2all_backend: str | None = None
    enable_eplb: bool = False
    enable_dbo: bool = False
    max_num_batched_tokens: int | None = None
    quantization: str | None = None
    env: dict = field(default_factory=dict)  # VAR=value assignments before the command
    unknown: list = field(default_factory=list)  # every other argument, in order
    given: list = field(default_factory=list)  # the fields the command line set explicitly

    @property
    def world_size(self) -> int:
        """The EP group size vLLM forms: data parallel x tensor parallel."""
        return self.data_parallel_size * self.tensor_parallel_size

    @property
    def uses_all2all(self) -> bool:
        """True when vLLM builds an all2all group: expert parallel and data parallel > 1."""
        return self.enable_expert_parallel and self.data_parallel_size > 1

    def to_dict(self) -> dict:
        """A JSON-ready dict, with the derived world size and all2all use."""
        d = asdict(self)
        d["env"] = {k: ("<redacted>" if _SECRET.search(k) else v) for k, v in self.env.items()}
        d["world_size"] = self.world_size
        d["uses_all2all"] = self.uses_all2all
        return d


def _strip_launcher(argv: list[str]) -> list[str]:
    """Drop ``vllm serve`` / ``python -m ...`` so that the model (or a flag) comes first."""
    args = list(argv)
    if args and (args[0] == "vllm" or args[0].endswith("/vllm")):
        args = args[1:]
        if args and args[0] == "serve":
            args = args[1:]
        elif args:
            raise InvalidServeCommand(f"`vllm {args[0]}` is not `vllm serve`; pass a `vllm serve MODEL ...` command")
        return args
    if args and re.match(r"^(.*/)?python[0-9.]*$", args[0]):
        if len(args) >= 3 and args[1] == "-m" and args[2] in _ENTRYPOINT_MODULES:
            args = args[3:]
            if args and args[0] == "serve":
                args = args[1:]
            return args
        raise InvalidServeCommand(
            "a python command line must be `python -m vllm.entrypoints.openai.api_server ...`; "
            "pass a `vllm serve MODEL ...` command"
        )
    if args and args[0] == "serve":
        return args[1:]
    return args


def _convert(option: str, name: str, conv, raw: str):
    if conv is int:
        try:
            value = int(raw)
        except ValueError:
            raise InvalidServeCommand(f"{option} needs an integer, got {raw!r}") from None
        if value < 1:
            raise InvalidServeCommand(f"{option} must be at least 1, got {value}")
        return value
    return raw


def parse_serve_argv(argv: list[str]) -> ServeArgs:
    """Read a `vllm serve MODEL [flags...]` command line.

    Accepts ``vllm serve MODEL ...``, ``serve MODEL ...``, ``MODEL ...``, ``python -m
    vllm.entrypoints.openai.api_server --model MODEL ...``, leading ``VAR=value`` environment
    assignments, a single quoted string holding the whole command, ``--opt value`` and
    ``--opt=value`` forms and underscores in long option names. Options autoselect does not
    know are kept in ``unknown``.

    :raises InvalidServeCommand: no model, a missing or non-integer value.
    """
    args = list(argv)
    if len(args) == 1 and " " in args[0].strip():
        try:
            args = shlex.split(args[0])
        except ValueError as e:
            raise InvalidServeCommand(f"cannot split the command line: {e}; quote it as a shell would") from None
    env = {}
    while args and _ENV_ASSIGNMENT.match(args[0]):
        key, _, value = args.pop(0).partition("=")
        env[key] = value
    if args and args[0] == "env":
        args.pop(0)
        while args and _ENV_ASSIGNMENT.match(args[0]):
            key, _, value = args.pop(0).partition("=")
            env[key] = value
    args = _strip_launcher(args)

    values: dict = {}
    given: list[str] = []
    unknown: list[str] = []
    positional: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-") or arg == "-":
            positional.append(arg)
            i += 1
            continue
        option, has_eq, inline = arg.partition("=")
        if option.startswith("--"):
            option = "--" + option[2:].replace("_", "-")
        if option in VALUE_OPTIONS:
            name, conv = VALUE_OPTIONS[option]
            if has_eq:
                raw = inline
            elif i + 1 < len(args):
                raw = args[i + 1]
                i += 1
            else:
                raise InvalidServeCommand(f"{option} needs a value")
            values[name] = _convert(option, name, conv, raw)
            given.append(name)
        elif option in FLAG_OPTIONS and not has_eq:
            name, value = FLAG_OPTIONS[option]
            values[name] = value
            given.append(name)
        else:
            unknown.append(arg)
            # keep an unknown option's value with it: the next word, unless it is an option
            if not has_eq and i + 1 < len(args) and not args[i + 1].startswith("-") and positional:
                unknown.append(args[i + 1])
                i += 1
        i += 1

    model = values.pop("model", None)
    if positional:
        if model is None:
            model = positional[0]
        unknown.extend(positional[1:] if model == positional[0] else positional)
    if not model:
        raise InvalidServeCommand("no model in the command line; pass `vllm serve MODEL [flags...]`")
    return ServeArgs(model=model, env=env, unknown=unknown, given=list(dict.fromkeys(given)), **values)


# --------------------------------------------------------------------------------------
# Emit side (issue 5): the `vllm serve` argv for a chosen backend
# --------------------------------------------------------------------------------------

#: The one-sided workspace the user allows per GPU when they do not say (TensorRT-LLM's
#: default `TRTLLM_MOE_A2A_WORKSPACE_MB` is 2048 MB).
DEFAULT_MAX_WORKSPACE_GIB = 2.0

#: vLLM's default `--max-num-batched-tokens` for `vllm serve` by GPU memory (0.33.0,
#: `arg_utils.py`): (minimum GiB, tokens), largest first; backends that lower it (batched DP
#: MoE) are in :data:`BACKEND_DEFAULT_MAX_NUM_BATCHED_TOKENS`.
VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS = ((160, 16384), (70, 8192), (0, 8192))
BACKEND_DEFAULT_MAX_NUM_BATCHED_TOKENS = {"deepep_low_latency": 256, "nixl_ep": 256}

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
    """Bytes per rank of the one-sided all2all workspace (FlashInfer's formula, docs/facts.md).

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


def vllm_default_max_num_batched_tokens(backend: str, gpu_memory_mib: int | None) -> int:
    """The `--max-num-batched-tokens` vLLM would use without the flag (see the tables above)."""
    if backend in BACKEND_DEFAULT_MAX_NUM_BATCHED_TOKENS:
        return BACKEND_DEFAULT_MAX_NUM_BATCHED_TOKENS[backend]
    gib = (gpu_memory_mib or 0) / 1024
    return next(tokens for min_gib, tokens in VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS if gib >= min_gib)


def workspace_max_num_batched_tokens(
    backend: str,
    *,
    hidden: int,
    top_k: int,
    dispatch_dtype: str,
    world_size: int,
    max_num_batched_tokens: int | None = None,
    max_workspace_gib: float | None = None,
    gpu_memory_mib: int | None = None,
) -> tuple[int | None, list[str]]:
    """The `--max-num-batched-tokens` to emit for ``backend`` (None: leave vLLM's), with notes.

    The user's value is kept when given. For a backend whose workspace is sized from it
    (one-sided), the value (the user's, else vLLM's default for the GPU) is lowered to the
    largest multiple of 256 whose workspace fits ``max_workspace_gib``, and a note says so.
    """
    from autoselect.payload import combine_bytes_per_token, dispatch_bytes_per_token

    notes: list[str] = []
    if backend not in WORKSPACE_SIZED_BACKENDS:
        return max_num_batched_tokens, notes
    allowance = DEFAULT_MAX_WORKSPACE_GIB if max_workspace_gib is None else max_workspace_gib
    limit = int(allowance * 2**30)
    dispatch = dispatch_bytes_per_token(dispatch_dtype, hidden, top_k)
    combine = combine_bytes_per_token(hidden)
    wanted = max_num_batched_tokens or vllm_default_max_num_batched_tokens(backend, gpu_memory_mib)

    def size(tokens: int) -> int:
        return one_sided_workspace_bytes(world_size, tokens, dispatch, combine)

    if size(wanted) <= limit:
        return max_num_batched_tokens, notes
    tokens = wanted // TOKEN_ROUNDING * TOKEN_ROUNDING
    while tokens > 0 and size(tokens) > limit:
        tokens -= TOKEN_ROUNDING
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
    """
    from autoselect.rules import flag_value

    flags: list[str] = []
    if deployment.tp > 1:
        flags += ["--tensor-parallel-size", str(deployment.tp)]
    flags += [
        "--data-parallel-size",
        str(deployment.dp),
        "--enable-expert-parallel",
        "--all2all-backend",
        flag_value(backend, vllm_version),
    ]
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
