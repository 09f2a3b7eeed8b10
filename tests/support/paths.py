"""Where the tests' files are: the repository, tests/, its fixtures and its test plugins (and how to import a script)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

#: The repository's root (pyproject.toml, README.md, docs/, perf/, scripts/).
REPO = Path(__file__).resolve().parents[2]
#: tests/ (also on sys.path: ``import support``).
TESTS = REPO / "tests"
#: Small real inputs with a SOURCES note each: models, results, nvml, golden answers ...
FIXTURES = TESTS / "fixtures"
#: The deliberately faulty and stateful test adapters (a dist-info entry point, see its README).
PLUGINS = TESTS / "plugins"


def load_script(path: Path) -> ModuleType:
    """Import a script that is not on sys.path (scripts/, perf/, a fixture's maker) as a module,
    registered under its stem (a dataclass resolving its annotations looks its module up there)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module
