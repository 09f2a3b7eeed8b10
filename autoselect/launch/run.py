"""Carrying a plan out: the line on stderr, the decision as JSON, then the server in this process.

:func:`run_plan` prints :attr:`LaunchPlan.text` (and each warning, a target vLLM newer than the
rules' tables first) on stderr, writes the ``--decision-json`` document (replacing the file all
at once), and then either prints the final command (``--dry-run``) or replaces this process
with it: ``os.execvpe`` keeps the PID, so signals, the exit status and the container's PID 1
belong to vLLM, and nothing of autoselect stays in memory. Everything that can fail is checked
before anything is written: the program must be found, the decision's folder must exist.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Callable, Mapping, TextIO

from autoselect.atomic import replacing
from autoselect.errors import UserError
from autoselect.launch.choose import BadLaunchOption, LaunchPlan


class ProgramNotFound(UserError):
    "The line's program is not on PATH or not executable: nothing was started."


def check_decision_path(path: str | os.PathLike | None) -> None:
    """Refuse a ``--decision-json`` path whose folder does not exist or that names a folder."""
    if path is None:
        return
    p = Path(path)
    if p.is_dir():
        raise BadLaunchOption(f"--decision-json {path} is a directory; pass a file path")
    if not p.parent.is_dir():
        raise BadLaunchOption(f"--decision-json {path}: folder {p.parent} does not exist; create it or pass "
                              f"another path")


def program_path(plan: LaunchPlan, environ: Mapping[str, str]) -> str:
    """Where the final command's program is, as ``execvpe`` will search it.

    :raises ProgramNotFound: not found or not executable.
    """
    program = plan.final.argv[0]
    env = plan.final.exec_env(environ)
    if os.sep in program:
        found = program if os.path.isfile(program) and os.access(program, os.X_OK) else None
    else:
        found = shutil.which(program, path=env.get("PATH", os.defpath))
    if found is None:
        raise ProgramNotFound(f"cannot start {program!r}: not found on PATH or not executable (nothing was started)")
    return found


def run_plan(plan: LaunchPlan, *, dry_run: bool = False, decision_json: str | os.PathLike | None = None,
             environ: Mapping[str, str] | None = None, err: TextIO | None = None, out: TextIO | None = None,
             execvpe: Callable = os.execvpe) -> int:
    """Say the decision, write it, then print the command (``dry_run``: returns 0) or become it
    (``execvpe`` does not return).

    :raises ProgramNotFound, BadLaunchOption: checked before anything is printed or written.
    """
    environ = dict(os.environ if environ is None else environ)
    err = err or sys.stderr
    out = out or sys.stdout
    check_decision_path(decision_json)
    if not dry_run:
        program_path(plan, environ)
    print(plan.text, file=err)
    for warning in ([plan.vllm_version_warning] if plan.vllm_version_warning else []) + list(plan.warnings):
        print(f"Warning: {warning}", file=err)
    if decision_json is not None:
        with replacing(Path(decision_json)) as f:
            json.dump(plan.to_dict(), f, indent=2)
            f.write("\n")
    if dry_run:
        print(plan.final.shell(), file=out)
        out.flush()
        return 0
    err.flush()
    out.flush()
    execvpe(plan.final.argv[0], plan.final.argv, plan.final.exec_env(environ))
    return 0  # only a test's execvpe returns
