"""vLLM version numbers: parsing, ordering, half-open release ranges, and the releases the tables know."""

from __future__ import annotations

import functools
import re

from autoselect.errors import UserError

#: Every vLLM release on PyPI from the oldest the tables were checked against (0.10.0) to the newest
#: (``pip index versions vllm``, read 2026-12-03). A release past the last one is judged by the
#: newest's rows (every table's last range is open-ended), and every command says so
#: (:func:`newer_than_known`).
RELEASES = (
    "0.10.0", "0.10.1", "0.10.1.1", "0.10.2", "0.11.0", "0.11.1", "0.11.2", "0.12.0", "0.13.0", "0.14.0",
    "0.14.1", "0.15.0", "0.15.1", "0.16.0", "0.17.0", "0.17.1", "0.18.0", "0.18.1", "0.19.0", "0.19.1",
    "0.20.0", "0.20.1", "0.20.2", "0.21.0", "0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.25.1",
    "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0",
)
#: Newest vLLM release the tables were checked against (its wheel: files dated 2026-11-16).
NEWEST_VLLM = RELEASES[-1]


class InvalidVllmVersion(UserError):
    "The vLLM version string could not be parsed."


#: A component has at most 9 digits: a longer one names no release (and ``int()`` refuses texts over
#: 4300 digits with a ValueError, not the one-line error).
_VERSION = re.compile(r"^v?(\d{1,9})(?:\.(\d{1,9}))?(?:\.(\d{1,9}))?(?:\.(\d{1,9}))?(?:\.?(rc|dev|a|b|post)\.?(\d{0,9}))?"
                      r"(?:\+.*)?$")


@functools.lru_cache(maxsize=1024)  # every rule asks for the same few versions, a judged line ~100 times
def parse_version(v: str) -> tuple:
    """A sortable key for a vLLM version: ``0.11.1`` < ``0.19.1rc1`` < ``0.19.1`` < ``0.19.1.post1``.

    Accepts a leading ``v``, a fourth component (``0.10.1.1``), ``rcN``/``devN``/``postN`` and a
    local suffix (``+cu130``). :raises InvalidVllmVersion: for anything else.
    """
    m = _VERSION.match(str(v).strip())
    if not m:
        shown = repr(v) if len(str(v)) <= 40 else f"{str(v)[:37]!r}..."
        raise InvalidVllmVersion(f"cannot read vLLM version {shown}; use a release number such as {NEWEST_VLLM}")
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


def newer_than_known(version: str) -> str | None:
    """The one-line warning for a ``version`` newer than :data:`NEWEST_VLLM`, else None.

    Such a release is judged by the newest release's rows; what changed after it is unknown to
    autoselect. A pre-release of a newer release (``0.35.0rc1``) counts as that release.
    :raises InvalidVllmVersion: ``version`` does not parse.
    """
    if parse_version(version)[:4] <= parse_version(NEWEST_VLLM)[:4]:
        return None
    return (f"vLLM {version} is newer than every release autoselect has read (newest: {NEWEST_VLLM}); "
            f"it is judged by {NEWEST_VLLM}'s rules, and anything that changed after {NEWEST_VLLM} is unchecked")
