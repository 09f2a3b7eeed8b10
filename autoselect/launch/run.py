"""Carrying a plan out: the line on stderr, the decision as JSON, then the server in this process.

:func:`run_plan` prints :attr:`LaunchPlan.text` (and each warning, a target vLLM newer than the
rules' tables first) on stderr, writes the ``--decision-json`` document (replacing the file all
at once), and then either prints the final command (``--dry-run``) or replaces this process
with it: ``os.execvpe`` keeps the PID, so signals, the exit status and the container's PID 1
belong to vLLM, and nothing of autoselect stays in memory. Everything that can fail is checked
before anything is written: the program must be found and be a program, the decision's path must
be writable and none of the files the line needs (:func:`protected_paths`). Should the exec still
fail, the decision file is put back as it was and the failure is one ``Error:`` line. Every line
printed is one line (control characters escaped) with the line's secrets out
(:mod:`autoselect.redact`).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Callable, Mapping, TextIO

from autoselect.atomic import Protected, check_output_file, database_files, output_file
from autoselect.errors import UserError
from autoselect.launch.choose import BadLaunchOption, LaunchPlan
from autoselect.launch.line import which_program
from autoselect.redact import redacted_text
from autoselect.text import one_line
from db import default_path

#: The first bytes of what ``execve`` runs: a script's ``#!`` line or an ELF binary.
PROGRAM_MAGIC = (b"#!", b"\x7fELF")


class ProgramNotFound(UserError):
    "The line's program is not on PATH, not executable or not a program: nothing was started."


class CannotStart(UserError):
    "The operating system refused to start the line's program (the exec failed): nothing was started."


def check_decision_path(path: str | os.PathLike | None, protected=()) -> Path | None:
    """``--decision-json``'s path (links resolved) when the decision may be written there: the one
    output check (:func:`autoselect.atomic.check_output_file`), ``protected`` refused."""
    if path is None:
        return None
    return check_output_file(path, option="--decision-json", error=BadLaunchOption, protected=protected)


def protected_paths(plan: LaunchPlan, environ: Mapping[str, str]) -> list[Protected]:
    """What ``--decision-json`` may never replace: the results database and its side files, the
    model's directory, the line's ``--config``, the service's token file, the program it starts."""
    o, args = plan.options, plan.line.args
    out = database_files(o.db_path if o.db_path is not None else environ.get("AUTOSELECT_DB") or default_path())
    if os.path.isdir(args.model):
        out.append(Protected(args.model, "a file of the model's directory", "the model", tree=True))
    if args.config:
        out.append(Protected(args.config, "the line's --config file", "the line's configuration"))
    if o.token_file is not None:
        out.append(Protected(o.token_file, "the service's token file", "the token"))
    program = which_program(plan.final.argv[0], plan.final.exec_env(environ))
    if program:
        out.append(Protected(program, "the program the line starts", "the server's program"))
    return out


def program_path(plan: LaunchPlan, environ: Mapping[str, str]) -> str:
    """Where the final command's program is, as ``execvpe`` will search it.

    :raises ProgramNotFound: not found, not executable, or neither a script (``#!``) nor a binary.
    """
    program = plan.final.argv[0]
    found = which_program(program, plan.final.exec_env(environ))
    if found is None:
        raise ProgramNotFound(f"cannot start {program!r}: not found on PATH or not executable (nothing was started)")
    try:
        with open(found, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise ProgramNotFound(f"cannot start {program!r}: {e.strerror} (nothing was started)") from None
    if not head.startswith(PROGRAM_MAGIC):
        raise ProgramNotFound(f"cannot start {program!r}: {found} is neither a script with a #! line nor a binary "
                              f"(nothing was started)")
    return found


def _say(text: str, stream: TextIO) -> None:
    """One line on ``stream``: secrets out, control characters escaped."""
    print(one_line(redacted_text(text)), file=stream)


def run_plan(plan: LaunchPlan, *, dry_run: bool = False, decision_json: str | os.PathLike | None = None,
             environ: Mapping[str, str] | None = None, err: TextIO | None = None, out: TextIO | None = None,
             execvpe: Callable = os.execvpe) -> int:
    """Say the decision, write it, then print the command (``dry_run``: returns 0) or become it
    (``execvpe`` does not return).

    :raises ProgramNotFound, BadLaunchOption: checked before anything is printed or written.
    :raises CannotStart: the exec failed after all (the decision file is as it was before).
    """
    environ = dict(os.environ if environ is None else environ)
    err = err or sys.stderr
    out = out or sys.stdout
    target = check_decision_path(decision_json, protected_paths(plan, environ)) if decision_json is not None else None
    if not dry_run:
        program_path(plan, environ)
    before = _contents(target)
    if target is not None:
        with output_file(target, option="--decision-json", error=BadLaunchOption) as f:
            json.dump(plan.to_dict(), f, indent=2)
            f.write("\n")
    _say(plan.text, err)
    for warning in ([plan.vllm_version_warning] if plan.vllm_version_warning else []) + list(plan.warnings):
        _say(f"Warning: {warning}", err)
    if dry_run:
        print(plan.final.shell(), file=out)
        out.flush()
        return 0
    err.flush()
    out.flush()
    try:
        execvpe(plan.final.argv[0], plan.final.argv, plan.final.exec_env(environ))
    except OSError as e:
        _restore(target, before)
        raise CannotStart(f"cannot start {plan.final.argv[0]!r}: {e.strerror or e} (nothing was started"
                          + ("; --decision-json is as it was before" if target is not None else "") + ")") from None
    return 0  # only a test's execvpe returns


def _contents(target: Path | None) -> bytes | None:
    """A regular file's bytes before the decision replaces it (None: no such file, or not a regular one)."""
    if target is None or not target.is_file():
        return None
    try:
        return target.read_bytes()
    except OSError:
        return None


def _restore(target: Path | None, before: bytes | None) -> None:
    """Put ``target`` back as it was before the decision was written (removed when it was not there)."""
    if target is None or not target.is_file():
        return
    try:
        if before is None:
            target.unlink()
        else:
            target.write_bytes(before)
    except OSError:
        pass  # the Error line still says the server did not start
