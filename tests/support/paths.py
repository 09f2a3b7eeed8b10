"""Where the tests' files are: the repository, tests/, its fixtures and its test plugins."""

from __future__ import annotations

from pathlib import Path

#: The repository's root (pyproject.toml, README.md, docs/, perf/, scripts/).
REPO = Path(__file__).resolve().parents[2]
#: tests/ (also on sys.path: ``import support``).
TESTS = REPO / "tests"
#: Small real inputs with a SOURCES note each: models, results, nvml, golden answers ...
FIXTURES = TESTS / "fixtures"
#: The deliberately faulty and stateful test adapters (a dist-info entry point, see its README).
PLUGINS = TESTS / "plugins"
