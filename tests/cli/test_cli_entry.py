"""The process entry point (``autoselect.cli.run``): the collector is off for the commands that load,
answer and exit, on again for every other command before it starts, and what is alive at the end
is frozen; ``main`` itself (library callers, ``CliRunner``) keeps Python's defaults."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest
from click.testing import CliRunner
from support.paths import FIXTURES, REPO

import autoselect.cli as cli
from autoselect.cli import COMMANDS, SHORT_LIVED, main

PROBE = """
import gc, sys
import autoselect.cli as cli
seen = {}
resolve = cli.LazyGroup.resolve_command
def probe(self, ctx, args):
    out = resolve(self, ctx, args)
    seen[out[0]] = gc.isenabled()
    return out
cli.LazyGroup.resolve_command = probe
sys.argv = ["autoselect", *sys.argv[1:]]
try:
    cli.run()
except SystemExit as e:
    code = e.code
print(seen, gc.isenabled(), gc.get_freeze_count() > 10000, code)
"""


@pytest.fixture
def collector():
    """Restore the collector's state after a test that changes it."""
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    (gc.enable if enabled else gc.disable)()


def test_short_lived_commands_are_commands():
    assert SHORT_LIVED <= set(COMMANDS)


@pytest.mark.parametrize("argv, on", [
    (["recommend", "--model", str(FIXTURES / "models" / "deepseek-v3"), "--host-class", "ref-h200_sxm-x8"], False),
    (["check", "--gpu-arch", "sm90", "--", "vllm", "serve", str(FIXTURES / "models" / "deepseek-v3"), "-dp", "8",
      "-ep"], False),
    (["launch", "--dry-run", "--gpu-arch", "sm90", "--", "vllm", "serve", str(FIXTURES / "models" / "deepseek-v3"),
      "-dp", "8", "-ep", "--all2all-backend", "allgather_reducescatter"], False),
    (["hosts"], True),
])
def test_run_keeps_the_collector_off_only_for_short_lived_commands(argv, on, tmp_path):
    env = {"PYTHONPATH": str(REPO), "AUTOSELECT_DB": str(tmp_path / "results.db"), "HF_HUB_OFFLINE": "1",
           "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, env=env, cwd=tmp_path)
    seen, enabled, frozen, code = out.stdout.rsplit("\n", 2)[-2].rsplit(" ", 3)
    assert seen == f"{{{argv[0]!r}: {on}}}", out.stderr
    assert enabled == str(on) and frozen == "True" and code in ("0", "1"), out.stderr


def test_main_leaves_the_collector_alone(collector):
    gc.enable()
    assert CliRunner().invoke(main, ["recommend", "--help"]).exit_code == 0
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_long_command_turns_the_collector_back_on(collector):
    gc.disable()  # as run() leaves it
    assert CliRunner().invoke(main, ["recommend", "--help"]).exit_code == 0
    assert not gc.isenabled()
    assert CliRunner().invoke(main, ["bench", "--help"]).exit_code == 0
    assert gc.isenabled()


def test_run_freezes_what_is_alive_even_when_the_command_fails(collector, monkeypatch):
    def failing():
        assert not gc.isenabled()
        raise SystemExit(2)

    monkeypatch.setattr(cli, "main", failing)
    with pytest.raises(SystemExit):
        cli.run()
    assert gc.get_freeze_count() > 0
