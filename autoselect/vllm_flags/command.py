"""From what a user pasted to the words ``vllm serve`` itself receives.

Published lines arrive as one pasted block (backslash continuations, comments, ``export`` lines)
or as shell words, and often behind a launcher: ``uv run``, ``env -u X``, ``canhazgpu run --``,
``CUDA_VISIBLE_DEVICES=… nohup``, an interpreter (``python3 -u -m vllm.entrypoints.openai.api_server``),
an absolute path to ``vllm``, a container image (``docker run … vllm/vllm-openai:v0.17.0 MODEL …``).
:func:`read_command` finds where the server command starts, keeps what the launcher does to the
environment (assignments, ``env -u``, ``env -i``), and says in notes what it skipped or repaired.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from autoselect.dataclass_methods import DataclassMethods
from autoselect.errors import UserError
from autoselect.vllm_flags.launchers import WRAPPERS, container_environment


class InvalidServeCommand(UserError):
    "The `vllm serve` command line given to autoselect could not be read."


#: Modules that start the OpenAI server with the same flags as `vllm serve` (cli.main needs `serve`).
ENTRYPOINT_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.cli.main")
_ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
#: Patterns a line needs only in some forms (an `export` block, an image tag, a pasted continuation) are
#: strings, compiled on first use by re's cache: each costs ~0.05 ms of every start that reads a line.
_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
_PYTHON = r"^python[0-9.]*$"
#: The vLLM server images; the tag names the release (``v0.17.0-cu130`` -> 0.17.0).
_IMAGE = r"^(?:[\w.-]+(?::\d+)?/)*vllm/vllm-openai(?:-rocm)?(?::(?P<tag>[\w.-]+))?$"
_TAG_VERSION = r"^v?(\d+\.\d+\.\d+(?:\.\d+)?)(?:[-+].*)?$"
#: Interpreter options that take a value (``-W error``, ``-X dev``); the others stand alone.
_PYTHON_VALUE_OPTIONS = ("-W", "-X")
#: Words that start a command but cannot be a model id or a model directory.
_COMMANDS = frozenset({"uv", "env", "canhazgpu", "nohup", "exec", "time", "sudo", "numactl", "taskset", "nice",
                       "torchrun", "docker", "podman", "srun", "mpirun", "bash", "sh", "nsys", "python", "python3"})
#: `env` options that change the environment, and those that take a value.
_ENV_UNSET = ("-u", "--unset")
_ENV_CLEAR = ("-i", "--ignore-environment", "-")
_ENV_VALUE_OPTIONS = ("-C", "--chdir", "-S", "--split-string")
#: The unquoted `\` + blanks + `#comment` (or trailing blanks) that publishers put after continuations.
_BROKEN_CONTINUATION = r"(?<!\\)\\[ \t]+(#.*)?$"
#: `vllm` subcommands (0.33.0 vllm/entrypoints/cli/): only `serve` starts the server.
_SUBCOMMANDS = frozenset({"serve", "bench", "chat", "complete", "collect-env", "run-batch", "launch"})
#: The note a line that uses shell variables leaves (read literally, not judged).
SHELL_VARIABLES = "shell-variables"
#: The note a line whose output a shell redirects leaves (read without it).
REDIRECTION = "shell-redirection"
#: What a shell expands in a word: ``$NAME``, ``${...}`` (with its default, ``${X:-v}``), ``$1``,
#: ``$@`` and the like, ``$(...)`` / ``$((...))``, and backquotes. A word holding one has a value
#: only the shell that runs the line knows.
_SHELL_VARIABLE = re.compile(r"\$(?:\{[^}]*\}?|\(\(?|[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-])|`[^`]*`?")


@dataclass(repr=False, eq=False)  # DataclassMethods: the same methods, not compiled per class
class Command(DataclassMethods):
    """The server command found in a line, and what surrounded it."""

    serve_words: list  # what `vllm serve` parses: MODEL and flags (no program name, no `serve`)
    env: dict = field(default_factory=dict)  # VAR=value assignments before the command
    unset: list = field(default_factory=list)  # names `env -u` removes
    clear_env: bool = False  # `env -i`: the command starts with an empty environment
    launcher: list = field(default_factory=list)  # the words skipped before the server command
    entrypoint: str = "vllm serve"  # how the server is started
    image: str | None = None  # the container image, when the line runs one
    image_version: str | None = None  # the vLLM release its tag names
    notes: list = field(default_factory=list)  # (severity, code, message): what reading the line did
    words: list = field(default_factory=list)  # every shell word of the line (`export` assignments first)
    start: int | None = None  # index in words of the program that starts the server; None: the line names none
    redirections: list = field(default_factory=list)  # what a shell would redirect (`> log`), taken out of words
    inherit: list = field(default_factory=list)  # names a container takes from the environment (`docker run -e NAME`)

    @property
    def program(self) -> str | None:
        """The word that starts the server (``vllm``, a Python, a container image), or None."""
        return self.words[self.start] if self.start is not None else None


def _open_quote(text: str, quote: str | None) -> str | None:
    """The quote still open at the end of ``text`` (a shell's rules), given the one open before it."""
    i = 0
    while i < len(text):
        c = text[i]
        if quote == "'":
            quote = None if c == "'" else quote
        elif c == "\\":
            i += 1  # escapes the next character, outside single quotes
        elif quote == '"':
            quote = None if c == '"' else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or text[i - 1].isspace()):
            break  # a comment: the rest of the line is not the command
        i += 1
    return quote


def _logical_lines(text: str, notes: list) -> list[tuple[int, str]]:
    """``(first line number, text)`` of each command in a pasted block, continuations joined.

    A quoted string may span lines (a JSON option written over several). A ``\\`` followed by
    blanks (and maybe a comment) ends the command in a shell: the backslash escapes a blank, not
    the newline. Publishers mean a continuation there, so it is read as one, with a warning.
    """
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out, current, start, quote, broken_at = [], [], None, None, []
    for number, line in enumerate(lines, 1):
        if quote is not None:  # inside a quoted string that began on an earlier line
            current[-1] += "\n" + line
            quote = _open_quote(line, quote)
            if quote is not None or line.rstrip().endswith("\\"):
                if quote is None:
                    current[-1] = current[-1].rstrip()[:-1]
                continue
            out.append((start, " ".join(current)))
            current, start = [], None
            continue
        broken = re.search(_BROKEN_CONTINUATION, line)
        if broken and _open_quote(line[:broken.start()], None) is None:
            broken_at.append((number, bool(broken.group(1))))
            line = line[:broken.start()] + "\\"
        stripped = line.rstrip()
        if start is None:
            if not stripped.strip() or stripped.lstrip().startswith("#"):
                continue
            start = number
        quote = _open_quote(stripped, None)
        if quote is not None:
            current.append(stripped)
            continue
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            current.append(stripped[:-1])
            continue
        current.append(stripped)
        out.append((start, " ".join(current)))
        current, start = [], None
    if current:
        out.append((start, " ".join(current)))
    if broken_at:
        numbers = ", ".join(str(n) for n, _ in broken_at)
        what = "a comment" if all(c for _, c in broken_at) else "a comment or blanks"
        notes.append(("warning", "broken-continuation",
                      f"line{'s' if len(broken_at) > 1 else ''} {numbers}: {what} after the `\\` ends the command "
                      f"in a shell (the backslash escapes a blank, not the newline), so pasted as written the shell "
                      f"runs the command only up to line {broken_at[0][0]}; read here as the continuation it was "
                      f"meant to be"))
    return out


def split_words(argv: list[str]) -> tuple[list[str], list, list[str]]:
    """Shell words of one command: ``argv`` as given, or the one pasted string split as a shell would.

    ``export VAR=value`` lines of a pasted block written before the command become leading
    assignments of the command; one written after it, or a ``VAR=value`` line without ``export``
    (a shell variable), does not reach the command's environment: a note says so.
    :raises InvalidServeCommand: unbalanced quotes, or more than one command in the block.
    """
    notes: list = []
    argv = list(argv)
    if len(argv) != 1 or not argv[0].strip() or (" " not in argv[0].strip() and "\n" not in argv[0]):
        return argv, notes, []
    exported: dict[str, str] = {}  # the environment the lines before the command build, as bash does
    shell: dict[str, str] = {}  # variables set without export: the shell's own, not the command's
    marked: set[str] = set()  # `export NAME` of a name with no value yet
    commands, late, unexported = [], [], []
    redirections: list[str] = []
    for number, words in _line_commands(argv[0], notes, redirections):
        if words[0] == "export" and all(_ENV_ASSIGNMENT.match(w) or re.match(_NAME, w) for w in words[1:]):
            if commands:  # an export reaches only the commands after it
                late.append((number, words[1:]))
                continue
            for w in words[1:]:
                name, eq, value = w.partition("=")
                if eq:  # the variable now holds this value, exported: a shell value set before is gone
                    exported[name] = value
                    shell.pop(name, None)
                    marked.discard(name)
                elif name in shell:  # `export NAME` exports the shell variable's value
                    exported[name] = shell.pop(name)
                elif name not in exported:
                    marked.add(name)  # exported once it gets a value
        elif all(_ENV_ASSIGNMENT.match(w) for w in words):
            if commands:
                continue
            for w in words:  # an exported name stays exported: the assignment changes its value
                name, _, value = w.partition("=")
                if name in exported or name in marked:
                    exported[name] = value
                    marked.discard(name)
                else:
                    shell[name] = value
                    unexported.append((number, name))
        else:
            commands.append((number, words))
    for number, names in late:
        notes.append(("warning", "export-after-command",
                      f"line {number}: `export {' '.join(_names(names))}` comes after the command, so the command "
                      f"does not see it; read here without it (move it above the command if the server needs it)"))
    unexported = [(n, name) for n, name in unexported if name in shell]  # `export NAME` later still counts
    for number in dict.fromkeys(n for n, _ in unexported):
        names = ", ".join(dict.fromkeys(name for n, name in unexported if n == number))
        notes.append(("info", "shell-assignment",
                      f"line {number}: {names} set without `export` (shell variables): the command's environment "
                      f"does not get them; read here without them"))
    exports = [f"{name}={value}" for name, value in exported.items()]
    if len(commands) > 1:
        starts = ", ".join(str(n) for n, _ in commands)
        shown = "; ".join(f"`{shlex.join(words[:3])}{' ...' if len(words) > 3 else ''}`" for _, words in commands)
        raise InvalidServeCommand(f"the text holds {len(commands)} commands (lines {starts}: {shown}); pass one "
                                  f"`vllm serve` command at a time (a shell runs the others: `&&`, `;`, `|` and "
                                  f"`&` end a command)")
    if redirections:
        notes.append(("warning", REDIRECTION,
                      f"the shell redirects the command's input or output ({' '.join(redirections)}): read here "
                      f"without it (launch starts the server itself, and no shell redirects it)"))
    if not commands:
        raise InvalidServeCommand("no command in the text; pass `vllm serve MODEL [flags...]`")
    return exports + commands[0][1], notes, redirections


def _line_commands(text: str, notes: list, redirections: list[str]):
    """``(line number, words)`` of each command of a pasted block: its logical lines, each split at
    the shell's control operators (``;``, ``&&``, ``||``, ``|``, ``&``) outside quotes and
    substitutions, its redirections (``> log``, ``2>&1``) taken out into ``redirections``.

    :raises InvalidServeCommand: a command a shell could not split (an unbalanced quote).
    """
    for number, line in _logical_lines(text, notes):
        for piece in _control_split(line, redirections):
            try:
                words = shlex.split(piece, comments=True)
            except ValueError as e:
                raise InvalidServeCommand(f"cannot split line {number} of the command: {e}; quote it as a shell "
                                          f"would") from None
            if words:
                yield number, words


#: A redirection where a word starts: optional fd digits, the operator, and a glued ``&N`` / ``&-``.
_REDIRECTION = r"\d*(?:&>>|&>|>>|>\||>&|<<<|<<|<&|<>|>|<)(?:&?[0-9]+-?|&-)?"
#: The shell's control operators, longest first.
_CONTROL = ("&&", "||", ";;", ";", "|", "&")


def _redirection_at(line: str, i: int) -> str | None:
    """The redirection operator at ``line[i]`` (outside quotes), or None: any ``<`` or ``>``, ``&>``,
    and fd digits right before one where a word starts (``2>&1``)."""
    rest = line[i:]
    word_start = i == 0 or line[i - 1].isspace() or line[i - 1] in ";&|"
    if rest[0] in "<>" or rest.startswith("&>") or (word_start and re.match(r"\d+[<>]", rest)):
        return re.match(_REDIRECTION, rest).group(0)
    return None


def _control_split(line: str, redirections: list[str]) -> list[str]:
    """``line`` cut at its control operators into commands, the redirections taken out, as a shell
    scans it: nothing inside quotes, ``$(...)``, ``${...}`` or backquotes is an operator."""
    pieces, current = [], []
    i, quote, depth = 0, None, 0
    while i < len(line):
        c = line[i]
        if quote == "'":
            quote = None if c == "'" else quote
        elif c == "\\":
            current.append(line[i:i + 2])
            i += 2
            continue
        elif quote in ('"', "`"):
            quote = None if c == quote else quote
        elif c in "'\"`":
            quote = c
        elif line.startswith(("$(", "${"), i):
            depth += 1
            current.append(line[i:i + 2])
            i += 2
            continue
        elif depth and c in "({":
            depth += 1
        elif depth and c in ")}":
            depth -= 1
        elif depth == 0 and c == "#" and (i == 0 or line[i - 1].isspace()):
            break  # a comment
        elif depth == 0 and (m := _redirection_at(line, i)):
            j = i + len(m)
            target = "" if m[-1].isdigit() or m.endswith("-") else re.match(r"\s*[^\s;&|<>]*", line[j:]).group(0)
            redirections.append(f"{m} {target.strip()}".strip())
            i = j + len(target)
            continue
        elif depth == 0 and (op := next((o for o in _CONTROL if line.startswith(o, i)), None)):
            pieces.append("".join(current))
            current = []
            i += len(op)
            continue
        current.append(c)
        i += 1
    pieces.append("".join(current))
    return [p for p in pieces if p.strip()]


def _names(assignments: list[str]) -> list[str]:
    """The variable names of ``NAME=value`` words."""
    return [w.partition("=")[0] for w in assignments]


def shell_expansions(texts) -> list[str]:
    """Every shell expansion in ``texts`` (``$X``, ``${X:-v}``, ``$(...)``, backquotes), sorted, once each."""
    return sorted({m.group(0) for text in texts for m in _SHELL_VARIABLE.finditer(text)})


def has_shell_expansion(text: str) -> bool:
    """True when a shell would expand something in ``text`` (``$X``, ``${X:-v}``, ``$(...)``,
    backquotes): its value is not known from the line itself."""
    return _SHELL_VARIABLE.search(text) is not None


def leading_assignments(words: list[str]) -> int:
    """How many of ``words`` are ``VAR=value`` assignments before the first program word."""
    n = 0
    while n < len(words) and _ENV_ASSIGNMENT.match(words[n]):
        n += 1
    return n


def is_python(word: str) -> bool:
    """True when ``word`` names a Python interpreter (``python``, ``/venv/bin/python3.11``)."""
    return re.match(_PYTHON, PurePosixPath(word).name) is not None


def _is_vllm(word: str) -> bool:
    return PurePosixPath(word).name == "vllm"


def _serve_start(words: list[str]) -> tuple[int, int, str, str | None] | None:
    """``(launcher end, serve words start, entrypoint, image)`` of the first server command, or None."""
    for i, word in enumerate(words):
        if _is_vllm(word) and i + 1 < len(words) and words[i + 1] in _SUBCOMMANDS:
            if words[i + 1] == "serve":
                return i, i + 2, "vllm serve", None
            raise InvalidServeCommand(f"`vllm {words[i + 1]}` is not `vllm serve`; pass a `vllm serve MODEL ...` "
                                      f"command")
        if re.match(_IMAGE, word) and i > 0:
            return i, i + 1, f"the {word} image", word
        if word == "-m" and i + 1 < len(words) and words[i + 1] in ENTRYPOINT_MODULES:
            module = words[i + 1]
            begin = i
            # the interpreter and its own options belong to the entrypoint, not to the launcher
            j = i - 1
            while j >= 0 and (words[j].startswith("-") or (j > 0 and words[j - 1] in _PYTHON_VALUE_OPTIONS)):
                j -= 1
            if j >= 0 and re.match(_PYTHON, PurePosixPath(words[j]).name):
                begin = j
            end = i + 2
            if module.endswith("cli.main"):
                if end < len(words) and words[end] == "serve":
                    end += 1
                else:
                    raise InvalidServeCommand(f"`-m {module}` needs the `serve` subcommand; pass "
                                              f"`python -m {module} serve MODEL ...`")
            return begin, end, f"python -m {module}", None
    return None


def _environment(words: list[str], command: Command) -> None:
    """Apply the launcher's environment changes (leading assignments, `env` words) to ``command``;
    behind ``docker run`` / ``podman run``, the container's own environment replaces them
    (:func:`autoselect.vllm_flags.launchers.container_environment`)."""
    i = 0
    while i < len(words):
        word = words[i]
        wrapper = WRAPPERS.get(PurePosixPath(word).name)
        if wrapper is not None and wrapper.image and words[i + 1:i + 2] == ["run"]:
            _container(words[i + 2:], command)
            return
        if _ENV_ASSIGNMENT.match(word):
            key, _, value = word.partition("=")
            command.env[key] = value
            command.unset = [u for u in command.unset if u != key]
        elif PurePosixPath(word).name == "env":
            i += 1
            while i < len(words) and (words[i].startswith("-") or _ENV_ASSIGNMENT.match(words[i])):
                option, eq, inline = words[i].partition("=")
                if _ENV_ASSIGNMENT.match(words[i]):
                    key, _, value = words[i].partition("=")
                    command.env[key] = value
                elif option in _ENV_UNSET:
                    name = inline if eq else (words[i + 1] if i + 1 < len(words) else "")
                    i += 0 if eq else 1
                    command.unset.append(name)
                    command.env.pop(name, None)
                elif words[i] in _ENV_CLEAR:
                    command.clear_env = True
                    command.env.clear()
                elif option in _ENV_VALUE_OPTIONS and not eq:
                    i += 1
                i += 1
            continue
        i += 1


def _container(options: list[str], command: Command) -> None:
    """The container's environment: only what ``-e`` / ``--env`` give it (``-e NAME`` passes the
    client's value); what the client's own environment held stays outside."""
    env, inherit, files = container_environment(options)
    client = command.env  # the leading assignments and `env` words: the client's environment
    outside = [name for name in inherit if name not in client]
    command.env = {**{name: client[name] for name in inherit if name in client}, **env}
    command.inherit = [] if command.clear_env else [n for n in outside if n not in command.unset]
    command.unset = []
    command.clear_env = True
    if files:
        command.notes.append(("warning", "env-file-unread",
                              f"--env-file {', '.join(files)}: the variables it gives the container are not "
                              f"read here (pass them with -e NAME=value to have them judged)"))


def read_command(argv: list[str]) -> Command:
    """The server command in ``argv``: its words, the environment the launcher gives it, and notes.

    Accepts ``vllm serve MODEL ...`` (any path to ``vllm``), ``serve MODEL ...``, ``MODEL ...``,
    ``python [interpreter options] -m vllm.entrypoints.openai.api_server ...`` (or
    ``vllm.entrypoints.cli.main serve``), a ``vllm/vllm-openai`` image followed by the server's
    arguments, and any launcher before those (``VAR=value``, ``env``, ``uv run``, ``canhazgpu run --``,
    ``nohup`` ...): what it skips is said in a note.

    :raises InvalidServeCommand: a block with several commands, a launcher with no server command
        after it, ``vllm`` with another subcommand.
    """
    words, notes, redirections = split_words(argv)
    command = Command(serve_words=[], notes=notes, words=list(words), redirections=redirections)
    found = _serve_start(words)
    if found is None:
        lead = 0
        while lead < len(words) and _ENV_ASSIGNMENT.match(words[lead]):
            lead += 1
        head = words[lead] if lead < len(words) else ""
        if PurePosixPath(head).name in _COMMANDS or _is_vllm(head):
            raise InvalidServeCommand(
                f"found no `vllm serve` (nor `python -m vllm.entrypoints.openai.api_server`) after "
                f"`{' '.join(words[lead:lead + 3])}`; pass the `vllm serve MODEL ...` command the launcher runs")
        _environment(words[:lead], command)
        rest = words[lead:]
        command.serve_words = rest[1:] if rest[:1] == ["serve"] else rest
        return command
    begin, end, entrypoint, image = found
    command.start = begin
    _environment(words[:begin], command)
    command.launcher = [w for w in words[:begin] if not _ENV_ASSIGNMENT.match(w)]
    command.entrypoint = entrypoint
    command.serve_words = words[end:]
    if image:
        command.image = image
        tag = re.match(_IMAGE, image).group("tag") or ""
        version = re.match(_TAG_VERSION, tag)
        command.image_version = version.group(1) if version else None
    skipped = [w for w in words[:end] if not _ENV_ASSIGNMENT.match(w)]
    if command.launcher or entrypoint != "vllm serve" or (skipped and skipped[0] != "vllm"):
        command.notes.append(("info", "launcher", f"read the server command after `{' '.join(skipped)}`"
                              + (f" (its tag names vLLM {command.image_version})" if command.image_version else "")))
    # the serve words and the environment the command gets are read alike: a shell expansion is
    # kept as written, and a value holding one is not judged as if it were the value the shell makes
    variables = shell_expansions([*command.serve_words, *command.env.values()])
    if variables:
        command.notes.append(("warning", SHELL_VARIABLES,
                              f"the line uses shell variables ({', '.join(variables)}), read here literally: "
                              f"a value that holds one is not judged; pass the line the shell ran (expand them, "
                              f"e.g. with echo) for a full check"))
    return command
