"""The tests' own layout (tests/README.md): folders that mirror the code, helpers in support/.

pytest imports test files by basename (the folders are not packages), helpers come from the
``support`` package that pyproject's ``pythonpath`` puts on ``sys.path``, and every file finds
the fixtures through ``support.paths`` so it can move between folders unchanged.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter

import pytest

from support.paths import REPO, TESTS

#: Not test code: data, generators and the test adapters.
DATA = ("fixtures", "plugins")


def _code() -> list:
    return sorted(p for p in TESTS.rglob("*.py") if not set(p.relative_to(TESTS).parts) & set(DATA))


def test_every_test_file_has_a_basename_of_its_own():
    names = Counter(p.name for p in TESTS.rglob("test_*.py") if p.relative_to(TESTS).parts[0] not in DATA)
    assert [n for n, count in names.items() if count > 1] == []


def test_no_test_changes_sys_path_or_imports_another_test_file():
    bad = []
    for path in _code():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"sys\.path\.(insert|append)|^\s*(from|import) (test_|helpers_|conftest)", line):
                bad.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert bad == [], "import helpers from tests/support/ (pyproject's pythonpath finds it)"


def test_only_support_paths_locates_files_from_its_own_place():
    own_place = re.compile(r"Path\(\s*__file__\s*\)\s*\.(parent|resolve|absolute)")  # its folder, not itself
    bad = [str(p.relative_to(REPO)) for p in _code()
           if own_place.search(p.read_text()) and p != TESTS / "support" / "paths.py"]
    assert bad == [], "use support.paths (REPO, TESTS, FIXTURES, PLUGINS)"


def test_the_readme_names_every_test_folder():
    readme = (TESTS / "README.md").read_text()
    folders = sorted(p.name for p in TESTS.iterdir()
                     if p.is_dir() and not p.name.startswith((".", "__")) and p.name not in DATA)
    assert [f for f in folders if f"`tests/{f}/`" not in readme] == []


def test_pytest_finds_the_support_package_through_its_configuration():
    assert 'pythonpath = [".", "tests"]' in (REPO / "pyproject.toml").read_text()


@pytest.mark.skipif(sys.version_info < (3, 11), reason="python -P (no working directory on sys.path) is 3.11's")
def test_plain_pytest_imports_the_db_and_bench_packages_not_the_test_folders_of_their_names():
    """``pytest`` as a console script puts no working directory on sys.path (``python -P -m pytest``
    does the same); tests/db and tests/bench must not stand in for the packages then."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
         "tests/db/test_store.py", "tests/bench/test_bench_groups.py"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "error" not in result.stdout.splitlines()[-1], result.stdout[-2000:]
