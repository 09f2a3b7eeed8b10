"""Shared fixtures. Area-specific helpers live in their own tests/helpers_*.py modules."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
MODELS = FIXTURES / "models"


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
    # tests that want vLLM set it themselves (tests/test_vllm_real.py, AUTOSELECT_TEST_VLLM_PYTHON).
    monkeypatch.delenv("AUTOSELECT_VLLM_PYTHON", raising=False)
    monkeypatch.delenv("NVSHMEM_QP_DEPTH", raising=False)  # moves the DeepEP low-latency token limit (rules, bench, check)
