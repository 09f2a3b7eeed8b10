"""The user's own server line as ``launch`` reads it, and the same line with the chosen backend in it.

The line is read by ``check``'s reader (:mod:`autoselect.vllm_flags`): launchers, ``env``,
interpreters, ``python -m vllm.entrypoints.openai.api_server``, container images, ``--config``
YAML, pasted blocks. Launch then needs what check does not: a program to replace itself with, and
the Python that program runs (whose vLLM is the one that will serve).

Rewriting appends, never edits: the backend flag and the answer's flags go at the end of the line,
where argparse lets the last occurrence of an option win and vLLM lets the command line win over
``--config`` (0.32.0 ``vllm/utils/argparse_utils.py`` ``_pull_args_from_config``), so ``--override``
needs no surgery on the user's words. Environment variables go where the server process sees
them: before a bare program as ``VAR=value``, behind a launcher as ``env VAR=value`` (``sudo``
and ``env -i`` would drop an inherited one), into a container as ``-e VAR=value`` before its image.
"""

from __future__ import annotations

import os
import shlex
import shutil
from types import MappingProxyType
from typing import Mapping, NamedTuple

from autoselect.errors import UserError
from autoselect.vllm_flags import (BackendSetting, Command, ServeArgs, is_python, leading_assignments, read_command,
                                   serve_args_of, start_problem)


class NoServerProgram(UserError):
    "The line names no program that starts the vLLM server."


class NotAServerLine(UserError):
    "The line starts something other than a vLLM server behind the programs launch knows (a compound shell line)."


class CannotRewrite(UserError):
    "The line cannot carry the chosen setting (a variable inside a container that would override the flag)."


class LaunchLine(NamedTuple):
    """The user's line: what the reader found, and where its program starts.

    Immutable records of the launch path are NamedTuples, not frozen dataclasses: every launch
    creates their classes before it starts the server, and on CPython 3.11 a frozen dataclass
    costs ~0.4 ms to create, a NamedTuple ~0.06 ms (perf/launch_latency.py holds launch's start).
    """

    command: Command
    args: ServeArgs
    lead: int  # leading VAR=value words: an environment, not a program

    @property
    def assignments(self) -> dict[str, str]:
        """The leading ``VAR=value`` words (``export`` lines of a pasted block included), in order."""
        return dict(w.split("=", 1) for w in self.command.words[:self.lead])

    @property
    def argv(self) -> list[str]:
        """The words a process is started with: the line after its leading assignments."""
        return list(self.command.words[self.lead:])

    @property
    def launcher(self) -> bool:
        """True when words run before the server program (``nohup``, ``env``, ``docker run``...)."""
        return self.command.start is not None and self.command.start > self.lead


def read_line(argv: list[str]) -> LaunchLine:
    """Read the user's line (as ``check`` reads it) and find its program.

    :raises autoselect.vllm_flags.InvalidServeCommand: a line the reader cannot read (several
        commands, a compound shell line pasted as one string), or without a model.
    :raises NoServerProgram: a line of bare arguments (``MODEL -dp 8``): nothing to start.
    :raises NotAServerLine: anything but a vLLM server behind the programs launch knows
        (:func:`autoselect.vllm_flags.start_problem`, the one rule of what launch starts).
    """
    command = read_command(argv)
    why = start_problem(command)
    if why:
        raise NotAServerLine(f"launch starts only a vLLM server: {why} (nothing was started)")
    args = serve_args_of(command)
    if command.start is None:
        raise NoServerProgram(
            f"the line names no program that starts the server (it begins with {command.words[0]!r}); pass the "
            "whole command: `vllm serve MODEL ...` or `python -m vllm.entrypoints.openai.api_server --model MODEL ...`")
    return LaunchLine(command, args, leading_assignments(command.words[:command.start]))


def which_program(program: str, environ: Mapping[str, str]) -> str | None:
    """``program`` as ``execvpe`` finds it: a path with a directory as it is, a bare name on the
    ``PATH`` of ``environ`` (the environment the program starts with); None when that is no
    executable file."""
    if os.sep in program:
        return program if os.path.isfile(program) and os.access(program, os.X_OK) else None
    return shutil.which(program, path=environ.get("PATH", os.defpath))


def _shebang_python(script: str) -> str | None:
    """The Python a script's ``#!`` line names directly (a console script's), else None."""
    try:
        with open(script, "rb") as f:
            first = f.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", "replace").split()
    return words[0] if words and os.path.isabs(words[0]) and is_python(words[0]) else None


def line_python(line: LaunchLine, environ: Mapping[str, str]) -> str | None:
    """The Python the line's server runs under, when this machine can tell: the interpreter of
    ``python -m vllm.entrypoints...``, or the one the ``vllm`` script's ``#!`` names; None for a
    container image or a program that cannot be found here."""
    program = line.command.program
    if line.command.image or program is None:
        return None
    found = which_program(program, environ)
    if found is None:
        return None
    if line.command.entrypoint.startswith("python -m"):
        return found if is_python(found) else None
    return _shebang_python(found)


class FinalCommand(NamedTuple):
    """What runs: the environment assignments before the program, variables it must not inherit,
    and the program with its arguments (a NamedTuple: see :class:`LaunchLine`)."""

    env: dict[str, str]
    argv: list[str]
    unset: tuple[str, ...] = ()
    inserted: Mapping = MappingProxyType({})  # what autoselect added: {"flags": [...], "env": {...}, "unset": [...]}

    def words(self) -> list[str]:
        """The command's words: ``env -u`` for what it must not inherit, its assignments, its program
        and arguments (what launch judges, and :meth:`shell` quotes)."""
        head = ["env", *(w for name in self.unset for w in ("-u", name))] if self.unset else []
        return head + [f"{k}={v}" for k, v in self.env.items()] + list(self.argv)

    def shell(self) -> str:
        """The command line, shell-quoted, to run by hand (``--dry-run`` prints it)."""
        return shlex.join(self.words())

    def exec_env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The environment the program is started with: ``environ`` less :attr:`unset`, plus :attr:`env`."""
        return {**{k: v for k, v in environ.items() if k not in self.unset}, **self.env}


def unchanged(line: LaunchLine) -> FinalCommand:
    """The line as the user wrote it (the leading assignments as its environment)."""
    return FinalCommand(line.assignments, line.argv)


def rewrite(line: LaunchLine, setting: BackendSetting, flags: list[str] = (),
            env: Mapping[str, str] | None = None) -> FinalCommand:
    """The line with ``setting`` (the backend, the way the target release reads it), ``flags``
    (the answer's other flags) and ``env`` (tuned variables) added; see the module docstring.

    :raises CannotRewrite: a container line whose variable would override the flag (it cannot
        be unset inside the container from here).
    """
    added_flags = [*setting.flags, *flags]
    added_env = {**setting.env, **(env or {})}
    unset = tuple(setting.unset)
    argv = line.argv + added_flags
    inserted = {"flags": added_flags, "env": dict(added_env), "unset": list(unset)}
    start = line.command.start - line.lead  # the server program's index in argv
    own = line.assignments
    if line.command.image:
        if unset:
            raise CannotRewrite(f"the container line sets {', '.join(unset)}, which this vLLM release reads over "
                                f"--all2all-backend; autoselect cannot unset it inside the container: drop it from "
                                f"the line")
        extra = [w for k, v in added_env.items() for w in ("-e", f"{k}={v}")]
        return FinalCommand(own, argv[:start] + extra + argv[start:], (), inserted)
    if line.launcher and (added_env or unset):
        extra = ["env", *(w for name in unset for w in ("-u", name)), *(f"{k}={v}" for k, v in added_env.items())]
        return FinalCommand(own, argv[:start] + extra + argv[start:], (), inserted)
    own = {k: v for k, v in own.items() if k not in unset}
    return FinalCommand({**own, **added_env}, argv, unset, inserted)


def has_option(args: ServeArgs, option: str) -> bool:
    """True when the line (``--config`` included) already sets ``option`` (``--max-num-batched-tokens``):
    the user's value wins over the answer's."""
    if option in args.options:
        return True
    spelled = option.replace("_", "-")
    return any(w.split("=", 1)[0].replace("_", "-") == spelled for w in args.unknown if w.startswith("--"))
