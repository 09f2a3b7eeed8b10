"""The docs are tested: every command has help and a README mention; README examples are real."""

from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from autoselect.cli import COMMANDS, main

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()

#: README ```console blocks for these commands are re-run and must match exactly (deterministic
#: commands only: no database, no clock). Add yours here once its output is deterministic.
REPRODUCED = ("inspect", "check")


def _command(name: str) -> click.Command:
    module_name, attr = COMMANDS[name].split(":")
    return getattr(importlib.import_module(module_name), attr)


def _all_commands():
    """(path, command) for every registered command and every subcommand of a group."""
    out = []
    for name in sorted(COMMANDS):
        cmd = _command(name)
        out.append((name, cmd))
        if isinstance(cmd, click.Group):
            out.extend((f"{name} {sub}", sub_cmd) for sub, sub_cmd in sorted(cmd.commands.items()))
    return out


@pytest.mark.parametrize("path", [p for p, _ in _all_commands()])
def test_every_command_has_help_with_an_example_block(path):
    cmd = dict(_all_commands())[path]
    assert cmd.help and cmd.help.strip(), f"`autoselect {path}` has no help text"
    assert cmd.get_short_help_str(limit=200).strip(), f"`autoselect {path}` has no short help"
    assert "\b" in cmd.help, f"`autoselect {path}` help has no \\b example block"


@pytest.mark.parametrize("path", [p for p, _ in _all_commands()])
def test_every_command_is_mentioned_in_the_readme(path):
    assert re.search(rf"autoselect {re.escape(path)}\b", README), f"README.md never mentions `autoselect {path}`"


def _console_blocks():
    for block in re.findall(r"```console\n(.*?)```", README, flags=re.S):
        lines = block.rstrip("\n").split("\n")
        if not lines[0].startswith("$ autoselect "):
            continue
        argv = shlex.split(lines[0][2:])[1:]
        if argv[0] in REPRODUCED:
            yield lines[0][2:], argv, "\n".join(lines[1:]) + "\n"


@pytest.mark.parametrize("command, argv, expected", list(_console_blocks()), ids=lambda x: x if isinstance(x, str) and x.startswith("autoselect") else "")
def test_readme_console_examples_reproduce_exactly(command, argv, expected, monkeypatch):
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(main, argv)
    assert result.exit_code in (0, 1), result.stderr
    assert result.stdout == expected


def test_quick_start_commands_run():
    block = re.search(r"## Quick start\n\n```bash\n(.*?)```", README, flags=re.S).group(1)
    commands = [shlex.split(line)[1:] for line in block.splitlines() if line.startswith("autoselect ")]
    assert commands, "the Quick start has no autoselect command"
    for argv in commands:
        if argv[0] not in REPRODUCED:
            continue
        result = CliRunner().invoke(main, argv, catch_exceptions=False)
        assert result.exit_code == 0, (argv, result.stderr)


def test_readme_documents_reproduced_examples():
    assert {argv[0] for _, argv, _ in _console_blocks()} == set(REPRODUCED)
