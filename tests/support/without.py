"""A Python process in which some installed packages are absent, as on an install without their extra.

:func:`env_without` writes a ``sitecustomize`` that makes the named top-level packages unimportable
and their distributions' metadata unknown, and returns the environment that runs ``python -m
autoselect`` with it (the repository and tests/ on the path, as the suite runs)."""

from __future__ import annotations

import os
from pathlib import Path

from support.paths import REPO, TESTS

_SITECUSTOMIZE = '''\
import importlib.metadata as _metadata
import sys

_MODULES = {modules!r}
_DISTRIBUTIONS = {distributions!r}
_version, _distribution = _metadata.version, _metadata.distribution


def _absent(name):
    return name.replace("_", "-").lower() in _DISTRIBUTIONS


def version(name):
    if _absent(name):
        raise _metadata.PackageNotFoundError(name)
    return _version(name)


def distribution(name):
    if _absent(name):
        raise _metadata.PackageNotFoundError(name)
    return _distribution(name)


class _Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in _MODULES:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


_metadata.version, _metadata.distribution = version, distribution
sys.meta_path.insert(0, _Absent())
'''


def env_without(directory: Path, modules: tuple[str, ...], distributions: tuple[str, ...] = ()) -> dict[str, str]:
    """The environment of a process where ``modules`` (top-level names) do not import and
    ``distributions`` (default: the modules' names) have no metadata; ``directory`` holds the hook."""
    directory.mkdir(parents=True, exist_ok=True)
    dists = tuple(d.replace("_", "-").lower() for d in (distributions or modules))
    (directory / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(modules=set(modules), distributions=set(dists)))
    path = [str(directory), str(REPO), str(TESTS), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path))}
