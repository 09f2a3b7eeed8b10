"""What leaves the server: answers cached per database state, and scrubbed of the server's paths."""

from __future__ import annotations

import json
import os
import threading
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
    """A small LRU of JSON answers, dropped whenever the database files change."""

    def __init__(self, db_path: Path, size: int = CACHE_SIZE):
        self.db_path = db_path
        self.size = size
        self._lock = threading.Lock()
        self._state: tuple | None = None
        self._answers: OrderedDict = OrderedDict()

    def state(self) -> tuple:
        """(mtime_ns, size) of the database and its WAL: any commit changes it."""
        out = []
        for p in (self.db_path, Path(f"{self.db_path}-wal")):
            try:
                st = p.stat()
                out.append((st.st_mtime_ns, st.st_size))
            except OSError:
                out.append(None)
        return tuple(out)

    def lookup(self, key: tuple) -> tuple[Any, tuple]:
        """(the cached answer or None, the database state it must belong to)."""
        state = self.state()
        with self._lock:
            if state != self._state:
                self._answers.clear()
                self._state = state
            value = self._answers.get(key)
            if value is not None:
                self._answers.move_to_end(key)
            return value, state

    def store(self, key: tuple, state: tuple, value: Any) -> None:
        """Keep ``value`` for ``key`` unless the database changed while it was computed."""
        with self._lock:
            if state == self._state:
                self._answers[key] = value
                while len(self._answers) > self.size:
                    self._answers.popitem(last=False)
