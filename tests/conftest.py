"""Shared fixtures. Area-specific helpers live in the tests/support package."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.paths import FIXTURES, PLUGINS

MODELS = FIXTURES / "models"
#: The deliberately faulty and stateful test adapters (a dist-info entry point, see its README).


@pytest.fixture
def models_dir() -> Path:
    """The directory of shipped model config fixtures (one sub-directory per checkpoint)."""
    return MODELS


@pytest.fixture
def db_path(tmp_path) -> Path:
    """A path for a fresh results database inside the test's temporary directory."""
    return tmp_path / "results.db"


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path):
    """Never touch the user's database or the network from a test."""
    monkeypatch.setenv("AUTOSELECT_DB", str(tmp_path / "default.db"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("AUTOSELECT_CACHE_DIR", str(tmp_path / "cache"))  # autoselect.bridge.interpreter's sys.path cache
    # A developer's AUTOSELECT_VLLM_PYTHON would make every `check` start vLLM (5-20 s); the
    # tests that want vLLM set it themselves (tests/bridge/test_vllm_real.py, AUTOSELECT_TEST_VLLM_PYTHON).
    monkeypatch.delenv("AUTOSELECT_VLLM_PYTHON", raising=False)
    monkeypatch.delenv("NVSHMEM_QP_DEPTH", raising=False)  # moves the DeepEP low-latency token limit (rules, bench, check)
    # the bridge's worker sets it when a test imports it in-process; launch reads it as "this line runs on CPU"
    monkeypatch.delenv("VLLM_TARGET_DEVICE", raising=False)


@pytest.fixture
def plugins(monkeypatch):
    """The test adapters of tests/plugins, visible to this process and to the worker processes."""
    import importlib
    import os

    monkeypatch.syspath_prepend(str(PLUGINS))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")])))
    importlib.invalidate_caches()


@pytest.fixture
def timing_log(tmp_path, monkeypatch):
    """The timing log the test's sweeps append to; returns a reader: ``timing_log(event="point")``
    lists the lines of one event kind ("start-up", "point", "job", "close"), ``"all"`` every line."""
    import json

    path = tmp_path / "timing.jsonl"
    monkeypatch.setenv("AUTOSELECT_BENCH_TIMING_LOG", str(path))

    def read(event="point"):
        lines = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        return [e for e in lines if event == "all" or e["event"] == event]

    return read
