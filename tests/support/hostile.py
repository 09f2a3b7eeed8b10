"""Helpers for the hostile-input tests: the promise every bad input must keep, and a way to
run a command without root's power to write anything (file modes then mean what they say)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from support.paths import REPO

from autoselect.cli import main



def cli(*args: str, input: str | None = None):
    """``autoselect ARGS`` through click's CliRunner (stdout and stderr apart)."""
    return CliRunner().invoke(main, [str(a) for a in args], input=input)


def refused(result, starts: str = "Error: ") -> str:
    """Assert the promise for a bad input: exit 2, exactly one ``Error: ...`` line on stderr, no
    traceback and nothing on stdout; returns the line."""
    err = getattr(result, "stderr", None)
    if err is None:
        err = result.output
    code = getattr(result, "exit_code", None)
    if code is None:
        code = result.returncode
    out = result.stdout
    assert code == 2, (code, out, err, getattr(result, "exception", None))
    assert "Traceback" not in err and "Traceback" not in out, err
    lines = [ln for ln in err.splitlines() if not ln.startswith("Warning: ")]
    assert len(lines) == 1 and lines[0].startswith(starts), err
    assert out == "", out
    return lines[0]


def tree_state(directory: Path) -> dict[str, tuple]:
    """Every entry under ``directory``: (kind, sha256 of a file's bytes, mode): to prove nothing
    was created, removed or changed."""
    out = {}
    for p in sorted(Path(directory).rglob("*")):
        st = p.lstat()
        if p.is_symlink():
            out[str(p)] = ("link", os.readlink(p), st.st_mode)
        elif p.is_file():
            out[str(p)] = ("file", hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mode)
        else:
            out[str(p)] = ("other", None, st.st_mode)
    return out


#: drops the capabilities that let root write files whatever their mode
_NO_OVERRIDE = ["--bounding-set", "-dac_override,-dac_read_search", "--inh-caps", "-dac_override,-dac_read_search"]


def unprivileged(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m autoselect ARGS`` in a subprocess for which file modes hold: as root, without
    CAP_DAC_OVERRIDE (``setpriv``); as any other user, plainly. Skips when neither works."""
    cmd = [sys.executable, "-m", "autoselect", *map(str, args)]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: file modes cannot be made to bind")
        cmd = [setpriv, *_NO_OVERRIDE, *cmd]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)


def run_module(*args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    """``python -m autoselect ARGS`` in a subprocess (real file descriptors, real exit status)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    if "stdout" not in kw and "stderr" not in kw:
        kw["capture_output"] = True
    return subprocess.run([sys.executable, "-m", "autoselect", *map(str, args)], text=True, env=env,
                          timeout=timeout, **kw)


# --- an independent reader of what systemd makes of a unit line (systemd.syntax(7), systemd.service(5))

_C_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\",
              '"': '"', "'": "'", "s": " "}


def _specifiers(rvalue: str) -> str:
    """systemd resolves ``%`` specifiers on the whole value first; the renderer may only use ``%%``."""
    out, i = [], 0
    while i < len(rvalue):
        if rvalue[i] == "%":
            assert rvalue[i + 1: i + 2] == "%", f"unescaped specifier in {rvalue!r}"
            out.append("%")
            i += 2
        else:
            out.append(rvalue[i])
            i += 1
    return "".join(out)


def systemd_words(rvalue: str) -> list[tuple[str, str]]:
    """(raw text, value) of each word of a unit setting: specifiers resolved, split on blanks,
    double / single quotes removed, C escapes decoded."""
    text = _specifiers(rvalue)
    words, i = [], 0
    while i < len(text):
        if text[i] in " \t":
            i += 1
            continue
        start, value, quote = i, [], None
        while i < len(text) and (quote or text[i] not in " \t"):
            ch = text[i]
            if quote and ch == quote:
                quote = None
            elif not quote and ch in "\"'":
                quote = ch
            elif ch == "\\" and quote != "'":
                nxt = text[i + 1]
                if nxt in _C_ESCAPES:
                    value.append(_C_ESCAPES[nxt])
                elif nxt == ";":
                    value.append("\\;")  # systemd's literal semicolon, resolved by the command reader
                else:
                    raise AssertionError(f"unknown escape \\{nxt} in {rvalue!r}")
                i += 1
            else:
                value.append(ch)
            i += 1
        assert quote is None, f"unbalanced quoting in {rvalue!r}"
        words.append((text[start:i], "".join(value)))
    return words


def systemd_exec_argv(rvalue: str) -> list[str]:
    """The argv systemd runs for an ``ExecStart=`` value that must hold one command."""
    argv = []
    for raw, value in systemd_words(rvalue):
        assert raw != ";", f"a lone ; in {rvalue!r} starts a second command"
        if value == "\\;":
            argv.append(";")
            continue
        out, i = [], 0
        while i < len(value):  # $$ is a literal dollar; $NAME / ${NAME} would be expanded
            if value[i] == "$":
                assert value[i + 1: i + 2] == "$", f"variable expansion in {rvalue!r}"
                out.append("$")
                i += 2
            else:
                out.append(value[i])
                i += 1
        argv.append("".join(out))
    return argv


def systemd_environment_of(unit: str) -> dict[str, str]:
    """The environment the ``Environment=`` lines of a unit set."""
    env = {}
    for line in unit.splitlines():
        if line.startswith("Environment="):
            for _, word in systemd_words(line[len("Environment="):]):
                name, _, value = word.partition("=")
                env[name] = value
    return env
