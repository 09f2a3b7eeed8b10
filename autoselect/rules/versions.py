"""vLLM version numbers: parsing, ordering and half-open release ranges."""

from __future__ import annotations

import re

from autoselect.errors import UserError

#: Newest vLLM release the tables were checked against.
NEWEST_VLLM = "0.33.0"


class InvalidVllmVersion(UserError):
    "The vLLM version string could not be parsed."


_VERSION = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:\.(\d+))?(?:\.?(rc|dev|a|b|post)\.?(\d*))?(?:\+.*)?$")


def parse_version(v: str) -> tuple:
    """A sortable key for a vLLM version: ``0.11.1`` < ``0.19.1rc1`` < ``0.19.1`` < ``0.19.1.post1``.

    Accepts a leading ``v``, a fourth component (``0.10.1.1``), ``rcN``/``devN``/``postN`` and a
    local suffix (``+cu130``). :raises InvalidVllmVersion: for anything else.
    """
    m = _VERSION.match(str(v).strip())
    if not m:
        raise InvalidVllmVersion(f"cannot read vLLM version {v!r}; use a release number such as {NEWEST_VLLM}")
    nums = tuple(int(x or 0) for x in m.group(1, 2, 3, 4))
    tag, n = m.group(5), int(m.group(6) or 0)
    # dev < a < b < rc < final < post
    rank = {"dev": -4, "a": -3, "b": -2, "rc": -1, None: 0, "post": 1}[tag]
    return nums + (rank, n)


def version_in(version: str, since: str | None, until: str | None) -> bool:
    """True when ``since <= version < until`` (None = unbounded). Pre-releases count as the release."""
    key = parse_version(version)[:4]
    if since is not None and key < parse_version(since)[:4]:
        return False
    if until is not None and key >= parse_version(until)[:4]:
        return False
    return True
