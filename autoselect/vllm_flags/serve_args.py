"""The ``vllm serve`` options that matter to the all2all backend, read from a command line.

Plain functions and dataclasses, no vLLM import: the spellings are those of vLLM's parser
(``make_arg_parser``), plus options older releases had (the EPLB flags before ``--eplb-config``)
and the DBO switch's pre-release name. Options autoselect does not know
are kept aside, in order, so nothing the user wrote is lost.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import asdict, dataclass, field

from autoselect.dataclass_methods import DataclassMethods
from autoselect.redact import redacted_env, redacted_json, redacted_text, redacted_words
from autoselect.text import check_json
from autoselect.vllm_flags.command import Command, InvalidServeCommand, has_shell_expansion, read_command

#: option spelling -> (field, converter). Options that take a value.
VALUE_OPTIONS = {
    "--tensor-parallel-size": ("tensor_parallel_size", int),
    "-tp": ("tensor_parallel_size", int),
    "--data-parallel-size": ("data_parallel_size", int),
    "-dp": ("data_parallel_size", int),
    "--data-parallel-size-local": ("data_parallel_size_local", int),
    "-dpl": ("data_parallel_size_local", int),
    "--all2all-backend": ("all2all_backend", str),
    "--moe-backend": ("moe_backend", "moe_backend"),
    "--max-num-batched-tokens": ("max_num_batched_tokens", int),
    "--max-num-seqs": ("max_num_seqs", int),
    "--quantization": ("quantization", str),
    "-q": ("quantization", str),
    "--model": ("model", str),
    "--eplb-config": ("eplb_config", "json"),
    "--num-redundant-experts": ("num_redundant_experts", "count"),
    "--kv-transfer-config": ("kv_transfer_config", "json"),
    "--config": ("config", str),
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
    # The DBO switch's name before it was merged as --enable-dbo (no release has it).
    "--enable-microbatching": ("enable_dbo", True),
    "--enforce-eager": ("enforce_eager", True),
    "--no-enforce-eager": ("enforce_eager", False),
}

#: Every long option autoselect reads, for argparse's unambiguous-prefix rule.
_LONG_OPTIONS = sorted(o for o in (*VALUE_OPTIONS, *FLAG_OPTIONS) if o.startswith("--"))
#: argparse also takes `--eplb-config.num_redundant_experts 2` (dotted keys of a JSON option).
_DOTTED = re.compile(r"^(--eplb-config|--kv-transfer-config)\.([a-z_]+)$")
#: `-word-word`: a long option typed with one dash, which vLLM's parser does not know (a string,
#: compiled on first use by re's cache: most lines never need it).
_SINGLE_DASH_LONG = r"^-[a-z][a-z0-9]*(?:-[a-z0-9]+)+$"
#: kv_role of --kv-transfer-config -> the serving role of the instance.
KV_ROLES = {"kv_producer": "prefill", "kv_consumer": "decode", "kv_both": "both"}
#: The file types vLLM's ``--config`` takes (``FlexibleArgumentParser.load_config_file``).
CONFIG_EXTENSIONS = ("yaml", "yml")
#: The note a ``--config`` file that cannot be read here leaves (its options are not seen).
CONFIG_UNREAD = "config-unread"


@dataclass(repr=False, eq=False)  # DataclassMethods: the same methods, not compiled per class
class ServeArgs(DataclassMethods):
    """The parts of a `vllm serve` command line that matter to the all2all backend."""

    model: str
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    data_parallel_size_local: int | None = None
    enable_expert_parallel: bool = False
    all2all_backend: str | None = None
    moe_backend: str | None = None  # as vLLM's parser reads it: lower case, dashes as underscores
    enable_eplb: bool = False
    enforce_eager: bool = False
    enable_dbo: bool = False
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    quantization: str | None = None
    eplb_config: dict | None = None
    num_redundant_experts: int | None = None  # --num-redundant-experts (releases before 0.12.0)
    kv_transfer_config: dict | None = None
    config: str | None = None  # --config FILE.yaml: its keys are read as options the line's own flags override
    env: dict = field(default_factory=dict)  # VAR=value assignments before the command
    unset: list = field(default_factory=list)  # names `env -u` removes from the environment
    clear_env: bool = False  # `env -i`, or a container: the server starts without the launcher's environment
    inherit: list = field(default_factory=list)  # names it still takes from that environment (`docker run -e NAME`)
    unknown: list = field(default_factory=list)  # every other argument, in order
    given: list = field(default_factory=list)  # the fields the command line set explicitly
    options: list = field(default_factory=list)  # the option spellings the line used, as vLLM reads them
    launcher: list = field(default_factory=list)  # words skipped before the server command
    entrypoint: str = "vllm serve"
    image: str | None = None
    image_version: str | None = None
    serve_words: list = field(default_factory=list)  # what vLLM's `vllm serve` parser receives
    notes: list = field(default_factory=list)  # (severity, code, message) from reading the line

    @property
    def world_size(self) -> int:
        """The EP group size vLLM forms: data parallel x tensor parallel."""
        return self.data_parallel_size * self.tensor_parallel_size

    @property
    def uses_all2all(self) -> bool:
        """True when vLLM builds an all2all group: expert parallel and data parallel > 1."""
        return self.enable_expert_parallel and self.data_parallel_size > 1

    @property
    def redundant_experts(self) -> int:
        """EPLB's redundant experts as the line gives them (0 when it does not: see :attr:`redundant_given`)."""
        given = self.redundant_given
        return 0 if given is None else given

    @property
    def redundant_given(self) -> int | None:
        """EPLB's redundant experts from ``--eplb-config`` or the old ``--num-redundant-experts``;
        None when the line does not set them (the release's default applies:
        :func:`autoselect.rules.redundant_experts`)."""
        if self.num_redundant_experts is not None:
            return self.num_redundant_experts
        value = (self.eplb_config or {}).get("num_redundant_experts")
        return _count("--eplb-config num_redundant_experts", value) if value is not None else None

    @property
    def role(self) -> str | None:
        """``prefill`` / ``decode`` / ``both`` from --kv-transfer-config's kv_role; None when unknown."""
        return KV_ROLES.get(str((self.kv_transfer_config or {}).get("kv_role", "")))

    @property
    def unexpanded(self) -> frozenset:
        """What the line sets to a value only the shell knows (``$X``, ``${X:-v}``, ``$(...)``):
        ``--all2all-backend`` and the names of its environment assignments. Such a value is read
        literally and must not be judged as if it were the value the shell makes."""
        names = {k for k, v in self.env.items() if has_shell_expansion(v)}
        if self.all2all_backend is not None and has_shell_expansion(self.all2all_backend):
            names.add("--all2all-backend")
        return frozenset(names)

    def serving_environ(self, environ: dict) -> dict:
        """The environment the server starts with: ``environ`` after the launcher's changes."""
        if self.clear_env:
            base = {k: environ[k] for k in self.inherit if k in environ}
        else:
            base = {k: v for k, v in environ.items() if k not in self.unset}
        return {**base, **self.env}

    def to_dict(self) -> dict:
        """A JSON-ready dict, with the derived world size and all2all use."""
        d = asdict(self)
        d["env"] = redacted_env(self.env)
        for name in ("serve_words", "unknown", "launcher"):
            d[name] = redacted_words(d[name])
        for name in ("kv_transfer_config", "eplb_config"):
            d[name] = redacted_json(d[name])
        d["notes"] = [{"severity": s, "code": c, "message": redacted_text(m)} for s, c, m in self.notes]
        d["world_size"] = self.world_size
        d["uses_all2all"] = self.uses_all2all
        d["redundant_experts"] = self.redundant_experts
        d["role"] = self.role
        d["unexpanded"] = sorted(self.unexpanded)
        return d


def _count(option: str, raw) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidServeCommand(f"{option} needs a whole number, got {raw!r}") from None
    if value < 0:
        raise InvalidServeCommand(f"{option} must be 0 or more, got {value}")
    return value


def _convert(option: str, conv, raw: str):
    if conv is int:
        if raw.startswith("$"):
            raise InvalidServeCommand(f"{option} is the shell variable {raw}: pass the line after the shell "
                                      f"expanded it (or the value itself)")
        try:
            value = int(raw)
        except ValueError:
            raise InvalidServeCommand(f"{option} needs an integer, got {raw!r}") from None
        if value < 1:
            raise InvalidServeCommand(f"{option} must be at least 1, got {value}")
        return value
    if conv == "count":
        return _count(option, raw)
    if conv == "moe_backend":  # vLLM's parser: type=lambda s: s.lower().replace("-", "_")
        return raw.lower().replace("-", "_")
    if conv == "json":
        if raw.startswith("$"):
            return None  # a shell variable: the shell-variables note says so
        try:
            value = json.loads(raw)
        except ValueError as e:
            raise InvalidServeCommand(f"{option} is not valid JSON ({e}): {raw!r}; vLLM would refuse it too") \
                from None
        if not isinstance(value, dict):
            raise InvalidServeCommand(f"{option} must be a JSON object, got {raw!r}")
        return check_json(value, option, InvalidServeCommand, "fix the JSON (vLLM could not encode it either)")
    return raw


def _canonical(option: str) -> tuple[str, str | None]:
    """``(option, note)``: underscores read as dashes, an unambiguous prefix read as its option."""
    if not option.startswith("--"):
        return option, None
    name, dot, key = option[2:].partition(".")
    option = "--" + name.replace("_", "-") + dot + key  # dotted keys keep their underscores
    if option in VALUE_OPTIONS or option in FLAG_OPTIONS or _DOTTED.match(option):
        return option, None
    matches = [o for o in _LONG_OPTIONS if o.startswith(option)] if len(option) >= 8 else []
    if len(matches) == 1:
        return matches[0], (f"{option} is read as {matches[0]}: vLLM's parser (argparse) accepts an "
                            f"unambiguous prefix of an option; spell it out")
    return option, None


class _Reading:
    """What the walk over the serve words has collected so far (a plain class, not a dataclass:
    every command that reads a line creates it, and a dataclass costs ~0.3 ms to create)."""

    __slots__ = ("notes", "values", "given", "options", "unknown", "positional", "dotted")

    def __init__(self, notes: list):
        self.notes = notes
        self.values: dict = {}  # ServeArgs field -> value
        self.given: list = []
        self.options: list = []
        self.unknown: list = []
        self.positional: list = []
        self.dotted: dict = {}  # --eplb-config -> {key: raw value} of its dotted keys


def _is_positional(arg: str) -> bool:
    """A word that is no option: not dashed, a lone ``-``, or a negative number."""
    return not arg.startswith("-") or arg == "-" or re.match(r"^-\d", arg) is not None


def _read_option(reading: _Reading, args: list[str], i: int) -> int:
    """Read the option ``args[i]`` (and the value it takes); the index of the last word used."""
    arg = args[i]
    raw_option, has_eq, inline = arg.partition("=")
    option, note = _canonical(raw_option)
    if note:
        reading.notes.append(("info", "abbreviated-option", note))
    dot = _DOTTED.match(option)
    if option in VALUE_OPTIONS or dot:
        if has_eq:
            raw = inline
        elif i + 1 < len(args):
            raw = args[i + 1]
            i += 1
        else:
            raise InvalidServeCommand(f"{option} needs a value")
        if dot:
            reading.dotted.setdefault(dot.group(1), {})[dot.group(2)] = raw
            reading.options.append(dot.group(1))
        else:
            name, conv = VALUE_OPTIONS[option]
            reading.values[name] = _convert(option, conv, raw)
            reading.given.append(name)
            reading.options.append(option)
    elif option in FLAG_OPTIONS and not has_eq:
        name, value = FLAG_OPTIONS[option]
        reading.values[name] = value
        reading.given.append(name)
        reading.options.append(option)
    else:
        i = _keep_unknown(reading, args, i, has_eq)
    return i


def _keep_unknown(reading: _Reading, args: list[str], i: int, has_eq: str) -> int:
    """Keep the unknown option ``args[i]`` (and its value); the index of the last word kept."""
    arg = args[i]
    if re.match(_SINGLE_DASH_LONG, arg.partition("=")[0]):  # `-word-word=value` too
        reading.notes.append(("error", "single-dash-option",
                              f"{arg} has one dash: vLLM's parser reads it as a short option with a value (-n is "
                              f"--nnodes) or not at all, and `vllm serve` exits with an argument error; write -{arg}"))
    reading.unknown.append(arg)
    # keep an unknown option's value with it: the next word, unless it is an option
    if not has_eq and i + 1 < len(args) and not args[i + 1].startswith("-") and reading.positional:
        reading.unknown.append(args[i + 1])
        i += 1
    return i


#: Characters that look like ``-`` but are not (what word processors and chat clients make of
#: ``--``): a word starting with one is no option to vLLM's parser.
UNICODE_DASHES = {"\u2010": "HYPHEN", "\u2011": "NON-BREAKING HYPHEN", "\u2012": "FIGURE DASH", "\u2013": "EN DASH",
                  "\u2014": "EM DASH", "\u2015": "HORIZONTAL BAR", "\u2212": "MINUS SIGN", "\ufe58": "SMALL EM DASH",
                  "\ufe63": "SMALL HYPHEN-MINUS", "\uff0d": "FULLWIDTH HYPHEN-MINUS"}


def _unicode_dash(reading: _Reading, word: str) -> None:
    """Say that ``word``, which starts with a dash that is not ASCII, is no option to vLLM."""
    name = word.lstrip("-" + "".join(UNICODE_DASHES))
    dash = next(c for c in word if c in UNICODE_DASHES)
    meant = f"-{name}" if f"-{name}" in VALUE_OPTIONS or f"-{name}" in FLAG_OPTIONS else f"--{name}"
    reading.notes.append(("error", "unicode-dash",
                          f"{word} has {UNICODE_DASHES[dash]} (U+{ord(dash):04X}) where the ASCII '-' belongs: to vLLM's "
                          f"parser it is not the option it looks like, and `vllm serve` exits with "
                          f"'unrecognized arguments' (or takes it for the model); type {meant}"))


def _read_words(args: list[str], notes: list) -> _Reading:
    """Every serve word read, the dotted keys merged into their JSON options."""
    reading = _Reading(notes=notes)
    i = 0
    while i < len(args):
        if args[i].lstrip("-")[:1] in UNICODE_DASHES:
            _unicode_dash(reading, args[i])  # then read as vLLM reads it: an argument (or an unknown option)
        if _is_positional(args[i]):
            reading.positional.append(args[i])
        else:
            i = _read_option(reading, args, i)
        i += 1
    for option, keys in reading.dotted.items():
        name = VALUE_OPTIONS[option][0]
        reading.values[name] = {**(reading.values.get(name) or {}), **keys}
        reading.given.append(name)
    return reading


def _model(reading: _Reading) -> str:
    """The model (``--model`` or the first positional word); the other positional words go to unknown."""
    model = reading.values.pop("model", None)
    positional = reading.positional
    if positional:
        if model is None:
            model = positional[0]
        reading.unknown.extend(positional[1:] if model == positional[0] else positional)
    if not model:
        raise InvalidServeCommand("no model in the command line; pass `vllm serve MODEL [flags...]`")
    return model


#: The largest ``--config`` file read (a serve config is a few hundred bytes), its deepest nesting,
#: and the most values it may expand to once its aliases are followed (a "billion laughs" document
#: expands a few lines into billions).
MAX_CONFIG_BYTES = 1 << 20
MAX_CONFIG_DEPTH = 32
MAX_CONFIG_VALUES = 100_000


def _config_text(path: str) -> str:
    """The text of the regular file ``path``, opened without waiting (a FIFO no writer opens would hang
    ``open``), at most :data:`MAX_CONFIG_BYTES`.

    :raises InvalidServeCommand: a FIFO, a device or a socket (it never opens or never ends), a
        file over the limit.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InvalidServeCommand(f"--config {path} is not a regular file (a FIFO, a device or a socket never "
                                      f"ends or never opens); pass a YAML file")
        data = b""
        while chunk := os.read(fd, MAX_CONFIG_BYTES + 1 - len(data)):
            data += chunk
            if len(data) > MAX_CONFIG_BYTES:
                raise InvalidServeCommand(f"--config {path} is larger than {MAX_CONFIG_BYTES >> 20} MiB; a serve "
                                          f"config is a few options")
    finally:
        os.close(fd)
    return data.decode("utf-8")


def _config_yaml(path: str, text: str):
    """``text`` as YAML (``yaml.safe_load``, as vLLM reads it), once its node graph is known to be a
    tree of bounded depth and size: no alias that refers to itself, no alias bomb.

    :raises InvalidServeCommand: not YAML, nested deeper than :data:`MAX_CONFIG_DEPTH`, more than
        :data:`MAX_CONFIG_VALUES` values once aliases are expanded, an alias inside itself.
    """
    import yaml  # only for a line with --config; vLLM itself reads the file with yaml.safe_load

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        raise InvalidServeCommand(f"--config {path} is not valid YAML ({' '.join(str(e).split())[:300]}); vLLM "
                                  f"would refuse it too") from None
    except RecursionError:
        raise InvalidServeCommand(f"--config {path} is nested deeper than {MAX_CONFIG_DEPTH} levels; a serve "
                                  f"config is a mapping of options") from None
    stack, seen = ([(node, 0, ())] if node is not None else []), 0
    while stack:  # every value as the loader would build it, aliases followed: bounded before building
        current, depth, ancestors = stack.pop()
        seen += 1
        if depth > MAX_CONFIG_DEPTH:
            raise InvalidServeCommand(f"--config {path} is nested deeper than {MAX_CONFIG_DEPTH} levels; a serve "
                                      f"config is a mapping of options")
        if seen > MAX_CONFIG_VALUES:
            raise InvalidServeCommand(f"--config {path} expands to more than {MAX_CONFIG_VALUES} values through "
                                      f"its YAML aliases; write the options out")
        if any(current is a for a in ancestors):
            raise InvalidServeCommand(f"--config {path} has a YAML alias inside the value it names (a recursive "
                                      f"anchor): it has no end; write the options out")
        children = ([c for pair in current.value for c in pair] if isinstance(current, yaml.MappingNode)
                    else current.value if isinstance(current, yaml.SequenceNode) else [])
        stack.extend((child, depth + 1, (*ancestors, current)) for child in children)
    return yaml.safe_load(text)


def _config_words(path: str, notes: list) -> list[str]:
    """The options a ``--config`` YAML file gives, as vLLM's parser expands them (0.32.0
    ``vllm/utils/argparse_utils.py`` ``load_config_file``: a true boolean is ``--key``, a false
    one ``--no-key`` where that option exists, a mapping its JSON, anything else its text),
    written ``--key=value`` so no value is mistaken for the model. A file that cannot be read
    here leaves a :data:`CONFIG_UNREAD` warning and no options.

    :raises InvalidServeCommand: not a .yaml/.yml file, not YAML, not a mapping.
    """
    if path.rsplit(".", 1)[-1] not in CONFIG_EXTENSIONS:
        raise InvalidServeCommand(f"--config {path}: vLLM reads only .yaml / .yml config files")
    try:
        text = _config_text(path)
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        notes.append(("warning", CONFIG_UNREAD, f"--config {path} cannot be read here ({why}): the options it "
                                                f"sets are not seen"))
        return []
    config = _config_yaml(path, text)
    if not isinstance(config, dict):
        raise InvalidServeCommand(f"--config {path} must hold a mapping of option names to values, "
                                  f"got {type(config).__name__}")
    words: list[str] = []
    for key, value in config.items():
        option = f"--{key}"
        if isinstance(value, bool):
            if value:
                words.append(option)
            elif _canonical(f"--no-{key}")[0] in FLAG_OPTIONS:
                words.append(f"--no-{key}")
        elif isinstance(value, (dict, list)):
            if value:
                words.append(f"{option}={json.dumps(value)}")
        elif value is not None:
            words.append(f"{option}={value}")
    notes.append(("info", "config-read", f"read {len(words)} option(s) from --config {path}; the line's own "
                                         f"options override them, as in vLLM"))
    return words


def _with_config(args: list[str], notes: list) -> list[str]:
    """The words to read: ``--config FILE`` replaced by the options the file gives (before the
    line's own, which win), as vLLM's parser does for the exact word ``--config``."""
    if "--config" not in args:
        return args
    if args.count("--config") > 1:
        raise InvalidServeCommand("more than one --config: vLLM reads one config file")
    i = args.index("--config")
    if i + 1 >= len(args):
        raise InvalidServeCommand("--config needs a file: pass --config FILE.yaml")
    path = args[i + 1]
    return _config_words(path, notes) + [f"--config={path}"] + args[:i] + args[i + 2:]


def parse_serve_argv(argv: list[str]) -> ServeArgs:
    """Read a `vllm serve MODEL [flags...]` command line (see :func:`read_command` for the forms).

    Accepts ``--opt value`` and ``--opt=value``, underscores in long option names, unambiguous
    prefixes (as argparse does), ``--eplb-config.KEY VALUE``, a ``--config FILE.yaml`` (its keys
    read as options the line's own override). Options autoselect does not know are kept in ``unknown``.

    :raises InvalidServeCommand: no model, a missing or non-integer value, invalid JSON, a
        ``--config`` that is no YAML mapping.
    """
    return serve_args_of(read_command(argv))


def serve_args_of(command: Command) -> ServeArgs:
    """:func:`parse_serve_argv` on a command :func:`read_command` already found."""
    args = command.serve_words
    notes = list(command.notes)
    reading = _read_words(_with_config(args, notes), notes)
    model = _model(reading)
    values = reading.values
    redundant = (values.get("eplb_config") or {}).get("num_redundant_experts")
    if redundant is not None:  # refused now, as vLLM's config validation would
        _count("--eplb-config num_redundant_experts", redundant)
    return ServeArgs(model=model, env=command.env, unset=command.unset, clear_env=command.clear_env,
                     inherit=command.inherit,
                     unknown=reading.unknown, given=list(dict.fromkeys(reading.given)),
                     options=list(dict.fromkeys(reading.options)), launcher=command.launcher,
                     entrypoint=command.entrypoint, image=command.image, image_version=command.image_version,
                     serve_words=list(args), notes=reading.notes, **values)
