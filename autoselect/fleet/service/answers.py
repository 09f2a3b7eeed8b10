"""What leaves the server: answers cached per database state, and scrubbed of the server's paths."""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

from autoselect.model import hub_cache_dir

#: answers kept per database state
CACHE_SIZE = 256


class Scrubber:
    """Replaces the server's own paths in a message or an answer by placeholders, longest first:
    an answer tells a client what it asked (or what is wrong with its request), never where the
    server keeps its files (a fleet run's meta may name a model by its path under a root)."""

    def __init__(self, db_path: Path, roots: tuple[Path, ...]):
        pairs = [(db_path, "<database>"), *((r, "<model root>") for r in roots)]
        hub = hub_cache_dir() or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
        pairs += [(Path(hub), "<hub cache>"), (Path(os.path.expanduser("~")), "<home>")]
        seen: dict[str, str] = {}
        for path, word in pairs:
            for form in (str(path), os.path.abspath(path), os.path.realpath(path)):
                if len(form) > 1:
                    seen.setdefault(form, word)
                    seen.setdefault(json.dumps(form)[1:-1], word)  # as it reads inside a JSON answer
        self.pairs = sorted(seen.items(), key=lambda kv: -len(kv[0]))

    def __call__(self, text: str) -> str:
        for path, word in self.pairs:
            text = text.replace(path, word)
        return text


class AnswerCache:
    """JSON answers kept per database state: dropped whenever the database or its WAL changes.

    Two small LRUs share the bodies: ``answers`` by the route's parsed parameters (so two spellings
    of one question are computed once) and ``requests`` by the request as it arrived, path and raw
    query string (so a request answered before is found without parsing anything: the front's
    lookup, :class:`~autoselect.fleet.service.front.Front`). Used from the event loop only (the
    thread pool computes, the loop stores), so no lock.
    """

    def __init__(self, db_path: Path, size: int = CACHE_SIZE):
        self.db_path = db_path
        self.size = size
        self._files = (os.fspath(db_path), f"{db_path}-wal")
        self._state: tuple | None = None
        self._answers: OrderedDict = OrderedDict()
        self._requests: OrderedDict = OrderedDict()

    def state(self) -> tuple:
        """(mtime_ns, size) of the database and its WAL: any commit changes it."""
        out = []
        for name in self._files:
            try:
                st = os.stat(name)
                out.append((st.st_mtime_ns, st.st_size))
            except OSError:
                out.append(None)
        return tuple(out)

    def current(self) -> tuple:
        """The database state now; every kept answer is dropped if it changed."""
        state = self.state()
        if state != self._state:
            self._answers.clear()
            self._requests.clear()
            self._state = state
        return state

    def lookup(self, key: tuple) -> tuple[Any, tuple]:
        """(the answer for the parsed parameters ``key``, or None; the database state it must belong to)."""
        state = self.current()
        return _get(self._answers, key), state

    def store(self, key: tuple, state: tuple, value: Any) -> None:
        """Keep ``value`` for ``key`` unless the database changed while it was computed."""
        if state == self._state:
            _put(self._answers, key, value, self.size)

    def answered(self, request: tuple) -> tuple[Any, tuple]:
        """(the answer given before to ``request`` (path, raw query string), or None; the database state)."""
        state = self.current()
        return _get(self._requests, request), state

    def remember(self, request: tuple, state: tuple, value: Any) -> None:
        """Keep the answer to ``request`` unless the database changed while it was answered."""
        if state == self._state:
            _put(self._requests, request, value, self.size)


def _get(lru: OrderedDict, key) -> Any:
    value = lru.get(key)
    if value is not None:
        lru.move_to_end(key)
    return value


def _put(lru: OrderedDict, key, value, size: int) -> None:
    lru[key] = value
    lru.move_to_end(key)
    while len(lru) > size:
        lru.popitem(last=False)
