"""What ``launch`` takes from an answer it did not compute: the flags autoselect emits, the knob table's variables.

A ``recommend`` document reaches ``launch`` from the fleet's service (over HTTP) or from this
machine's selector, whose tuned knobs are rows of a database anyone could have imported. Neither
is trusted: before any of it goes into the line that starts vLLM, :func:`trusted_answer` reads the
answer's ``vllm_args`` and ``knobs.env`` against one allow-list and refuses the rest, naming the
field:

* flags: only those :func:`autoselect.vllm_flags.serve_flags` itself emits (:data:`EMITTED`), each
  spelled as it emits them (``--flag value`` or ``--flag=value``: vLLM's parser reads both alike,
  so both are read here; an underscore or abbreviated spelling vLLM would also accept is no flag
  autoselect emits, and refused), each once, each value by its grammar. The backend's value must
  be the answer's own ``backend`` spelled for the target release, and the deployment's the line's
  own: a second ``--all2all-backend`` would be the one vLLM runs (argparse keeps the last).
* variables: only rows of the knob table (:data:`autoselect.knobs.KNOBS`) of kind ``env`` that
  apply to the picked backend, each with one of the table's values: never ``LD_PRELOAD``, never a
  variable the table does not name.

What the pick is judged on (its GPU arch) never comes from the answer: ``launch`` judges the line
the pick makes with the rules, on ``--gpu-arch`` or the local GPUs.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, NamedTuple

from autoselect import rules
from autoselect.lazy import lazy_module
from autoselect.options import MAX_TOKENS_PER_RANK, MAX_WORLD_SIZE

#: The knob table, read only for an answer that carries tuned knobs (its rows cost a launch ~1 ms to build).
knobs = lazy_module("autoselect.knobs")

#: The flags autoselect emits (:func:`autoselect.vllm_flags.serve_flags`, the knob table's flag
#: knobs) -> how many values follow, and the largest a numeric one may be (None: not a number).
EMITTED: dict[str, tuple[int, int | None]] = {
    "--tensor-parallel-size": (1, MAX_WORLD_SIZE),
    "--data-parallel-size": (1, MAX_WORLD_SIZE),
    "--enable-expert-parallel": (0, None),
    "--all2all-backend": (1, None),
    "--max-num-batched-tokens": (1, MAX_TOKENS_PER_RANK),
}
#: The flags that restate the deployment the line already sets: their values must be the line's.
DEPLOYMENT = {"--tensor-parallel-size": "tensor_parallel_size", "--data-parallel-size": "data_parallel_size"}


class UntrustedAnswer(Exception):
    "Part of an answer is outside what launch takes from one (the message names the field)."


class TrustedAnswer(NamedTuple):
    """The part of an answer ``launch`` may put into a line."""

    flags: tuple[tuple[str, ...], ...]  # beyond the deployment and the backend: each option with its value
    env: dict[str, str]  # knob-table variables


def _option_values(words: list[str]) -> list[tuple[str, str | None]]:
    """``[(option, value)]`` of ``words`` read as vLLM's parser reads them (``--opt v``, ``--opt=v``).

    :raises UntrustedAnswer: a word that is no flag autoselect emits, a value missing or shaped
        like an option.
    """
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(words):
        word = words[i]
        option, eq, inline = word.partition("=")
        if option not in EMITTED:
            raise UntrustedAnswer(f"vllm_args: {word[:80]!r} is not a flag autoselect emits "
                                  f"({', '.join(EMITTED)})")
        takes, _ = EMITTED[option]
        if not takes:
            if eq:
                raise UntrustedAnswer(f"vllm_args: {option} takes no value, got {word[:80]!r}")
            out.append((option, None))
            i += 1
            continue
        if eq:
            value, i = inline, i + 1
        elif i + 1 < len(words):
            value, i = words[i + 1], i + 2
        else:
            raise UntrustedAnswer(f"vllm_args: {option} has no value")
        if not value or value.startswith("-"):
            raise UntrustedAnswer(f"vllm_args: {option} {value[:80]!r} is not a value")
        out.append((option, value))
    return out


def _number(option: str, value: str) -> int:
    limit = EMITTED[option][1]
    if not re.fullmatch(r"[0-9]{1,12}", value) or not 1 <= int(value) <= limit:
        raise UntrustedAnswer(f"vllm_args: {option} {value[:80]!r} is not a whole number from 1 to {limit}")
    return int(value)


def trusted_flags(words: Any, *, backend: str, version: str, deployment: Mapping[str, int]) -> tuple:
    """The answer's flags beyond the deployment and the backend, after the allow-list (module docstring).

    :param deployment: the line's ``tensor_parallel_size`` and ``data_parallel_size``.
    :raises UntrustedAnswer: naming the field and the word.
    """
    if not (isinstance(words, list) and all(isinstance(w, str) for w in words)):
        raise UntrustedAnswer("vllm_args is not a list of strings")
    seen: set[str] = set()
    flags: list[tuple[str, ...]] = []
    for option, value in _option_values(words):
        if option in seen:
            raise UntrustedAnswer(f"vllm_args: {option} appears twice (vLLM would run the last one)")
        seen.add(option)
        if option == "--all2all-backend":
            if value != rules.flag_value(backend, version):
                raise UntrustedAnswer(f"vllm_args: --all2all-backend {value[:80]!r} is not the answer's backend "
                                      f"{backend} spelled for vLLM {version} ({rules.flag_value(backend, version)})")
        elif option in DEPLOYMENT:
            if _number(option, value) != deployment[DEPLOYMENT[option]]:
                raise UntrustedAnswer(f"vllm_args: {option} {value} is not the line's own "
                                      f"({deployment[DEPLOYMENT[option]]})")
        elif value is not None:
            _number(option, value)
            flags.append((option, value))
    return tuple(flags)


def trusted_env(env: Any, backend: str) -> dict[str, str]:
    """The answer's tuned variables when every one is a knob-table variable of ``backend`` with one
    of the table's values (module docstring).

    :raises UntrustedAnswer: naming the variable.
    """
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise UntrustedAnswer("knobs.env is not an object")
    out: dict[str, str] = {}
    for name, value in env.items():
        row = next((k for k in knobs.KNOBS if k.name == name and k.kind == "env"), None)
        shown = f"knobs.env: {str(name)[:60]!r}"
        if row is None:
            raise UntrustedAnswer(f"{shown} is not a variable of autoselect's knob table")
        if backend not in row.backends:
            raise UntrustedAnswer(f"{shown} does not apply to {backend} (only {', '.join(row.backends)})")
        if not isinstance(value, (str, int)) or isinstance(value, bool) or str(value) not in row.values:
            raise UntrustedAnswer(f"{shown} = {str(value)[:40]!r} is not one of its values ({', '.join(row.values)})")
        out[name] = str(value)
    return out


def trusted_tuned_flags(flags: Any, backend: str) -> tuple[str, ...]:
    """A tuned configuration's flags when each is a knob-table flag of ``backend`` followed by one of
    its values (``--max-num-batched-tokens 2048``).

    :raises UntrustedAnswer: naming the flag.
    """
    if not (isinstance(flags, list) and all(isinstance(f, str) for f in flags)) or len(flags) % 2:
        raise UntrustedAnswer("knobs.flags is not a list of flag and value pairs")
    for name, value in zip(flags[::2], flags[1::2]):
        row = next((k for k in knobs.KNOBS if k.name == name and k.kind == "flag"), None)
        if row is None or backend not in row.backends:
            raise UntrustedAnswer(f"knobs.flags: {name[:60]!r} is not a flag knob of {backend} in autoselect's "
                                  f"knob table")
        if value not in row.values:
            raise UntrustedAnswer(f"knobs.flags: {name} {value[:40]!r} is not one of its values "
                                  f"({', '.join(row.values)})")
    return tuple(flags)


def trusted_backend(backend: Any, version: str) -> str:
    """The answer's ``backend`` when it is a backend the rules know and the release can name.

    :raises UntrustedAnswer: anything else.
    """
    if not isinstance(backend, str) or backend not in rules.BACKENDS:
        raise UntrustedAnswer(f"backend {str(backend)[:80]!r} is not a backend autoselect knows")
    try:
        rules.flag_value(backend, version)
    except rules.BackendUnknownToVersion as e:
        raise UntrustedAnswer(f"backend {backend}: {e}") from None
    return backend


def trusted_answer(answer: Mapping[str, Any], *, version: str, deployment: Mapping[str, int]) -> TrustedAnswer:
    """The flags and variables of ``answer`` (a ``recommend --format json`` document) launch may use.

    :raises UntrustedAnswer: naming the first field outside the allow-list.
    """
    backend = trusted_backend(answer.get("backend"), version)
    knob_doc = answer.get("knobs")
    if knob_doc is not None and not isinstance(knob_doc, dict):
        raise UntrustedAnswer("knobs is not an object")
    return TrustedAnswer(trusted_flags(answer.get("vllm_args"), backend=backend, version=version,
                                       deployment=deployment),
                         trusted_env((knob_doc or {}).get("env"), backend))
