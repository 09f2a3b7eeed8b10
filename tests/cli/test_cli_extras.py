"""A plain `pip install autoselect` (no extra) answers; a command that needs an extra says which.

Each test runs ``python -m autoselect`` in a process where the extras' packages are absent
(:func:`support.without.env_without`), as on a fresh install from the wheel."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support.hostile import refused
from support.paths import FIXTURES
from support.without import env_without

#: what the `bench`, `tune` and `reference-build` extras add, and the report's and serve's packages
EXTRAS = ("torch", "numpy", "optuna", "pyarrow", "matplotlib", "plotext", "fastapi", "uvicorn", "ray")


def autoselect(env, *args, cwd=None):
    return subprocess.run([sys.executable, "-m", "autoselect", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


@pytest.mark.parametrize("args", [
    ["recommend", "--model", "Qwen/Qwen3-30B-A3B", "--host-class", "ref-h200_sxm-x8"],
    ["inspect", "--model", "deepseek-ai/DeepSeek-V3", "--gpu-arch", "sm90"],
    ["check", "--gpu-arch", "sm90", "--", "vllm", "serve", "Qwen/Qwen3-30B-A3B", "-dp", "8",
     "--enable-expert-parallel"],
    ["launch", "--dry-run", "--host-class", "ref-h200_sxm-x8", "--", "vllm", "serve", "Qwen/Qwen3-30B-A3B",
     "-dp", "8", "--enable-expert-parallel"],
    ["db", "info", "--db", str(FIXTURES / "results" / "h200.jsonl")],
], ids=lambda a: a[0] if a[0] != "db" else "db info")
def test_the_light_commands_answer_without_any_extra(args, tmp_path):
    env = env_without(tmp_path / "hook", EXTRAS)
    if args[0] == "db":  # a database imported from the shipped example records
        db = tmp_path / "example.db"
        assert autoselect(env, "db", "import", FIXTURES / "results" / "h200.jsonl", "--db", db).returncode == 0
        args = ["db", "info", "--db", str(db)]
    result = autoselect(env, *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and result.stdout


def test_bench_without_torch_is_one_error_naming_the_extra_and_writes_nothing(tmp_path):
    env = env_without(tmp_path / "hook", ("torch", "numpy"))
    result = autoselect(env, "bench", "--model", "Qwen/Qwen3-30B-A3B", "--gpu-arch", "sm90", "--device", "cpu",
                        "--db", tmp_path / "x.db", cwd=tmp_path)
    line = refused(result)
    assert line.startswith("Error: autoselect bench needs torch and numpy, not installed here"), line
    assert "pip install 'autoselect[bench]'" in line
    assert not (tmp_path / "x.db").exists()


def test_tune_without_optuna_is_one_error_naming_the_extra_and_writes_nothing(tmp_path):
    env = env_without(tmp_path / "hook", ("optuna",))
    result = autoselect(env, "tune", "--model", "Qwen/Qwen3-30B-A3B", "--gpu-arch", "sm90", "--device", "cpu",
                        "--db", tmp_path / "x.db", cwd=tmp_path)
    line = refused(result)
    assert line.startswith("Error: autoselect tune needs optuna, not installed here"), line
    assert "pip install 'autoselect[tune]'" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hook"]
