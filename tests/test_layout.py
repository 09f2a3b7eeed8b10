"""The tests' own layout (tests/README.md): folders that mirror the code, helpers in support/.

pytest imports test files by basename (the folders are not packages), helpers come from the
``support`` package that pyproject's ``pythonpath`` puts on ``sys.path``, and every file finds
the fixtures through ``support.paths`` so it can move between folders unchanged.
"""

from __future__ import annotations

import re
from collections import Counter

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
    assert 'pythonpath = ["tests"]' in (REPO / "pyproject.toml").read_text()
