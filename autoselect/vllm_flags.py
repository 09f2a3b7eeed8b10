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
