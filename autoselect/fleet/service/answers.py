"""What leaves the server: answers kept while what they were computed from is unchanged, and
scrubbed of the server's paths."""

from __future__ import annotations

import json
import os
import re
import time
from collections import OrderedDict
from pathlib import Path

from autoselect.model import hub_cache_dir

#: answers kept (the least recently asked goes first)
CACHE_SIZE = 256
#: seconds a kept answer's model files are taken as unchanged after they were last seen so: a
#: ``stat`` costs several microseconds here (a cached answer costs about 40), so the files are
#: looked at again at most once a second per answer, and a changed checkpoint is answered anew
#: within a second (perf/service_load.py measured both)
FILES_RECHECK_S = 1.0
#: characters a path component may continue with: a match that runs on into one of them is part of
#: a longer name (``/data`` in ``/database``), never the path itself
_NAME_CHAR = r"[\w.~+-]"


class Scrubber:
    """Replaces the server's own paths in a message or an answer by placeholders, longest first:
    an answer tells a client what it asked (or what is wrong with its request), never where the
    server keeps its files (a fleet run's meta may name a model by its path under a root).

    Only absolute paths are replaced, and only where they stand as a whole path: at the start of
    the text or after a character that cannot be inside a path name, and followed by ``/`` or by
    such a character. A root the operator passed as a relative name (``--model-root data``) is
    scrubbed as the absolute path it resolves to; the word itself is answer text
    (``--data-parallel-size`` stays what it is).
    """

    def __init__(self, db_path: Path, roots: tuple[Path, ...]):
        pairs = [(db_path, "<database>"), *((r, "<model root>") for r in roots)]
        hub = hub_cache_dir() or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
        pairs += [(Path(hub), "<hub cache>"), (Path(os.path.expanduser("~")), "<home>")]
        seen: dict[str, str] = {}
        for path, word in pairs:
            for form in {os.path.abspath(path), os.path.realpath(path)}:
                if len(form) > 1:  # "/" alone is in every path
                    seen.setdefault(form, word)
                    seen.setdefault(json.dumps(form)[1:-1], word)  # as it reads inside a JSON answer
        self.pairs = sorted(seen.items(), key=lambda kv: -len(kv[0]))
        self._words = dict(self.pairs)
        alternatives = "|".join(re.escape(path) for path, _ in self.pairs)
        self._pattern = re.compile(rf"(?<!{_NAME_CHAR})(?:{alternatives})(?!{_NAME_CHAR})") if self.pairs else None

    def __call__(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(lambda m: self._words[m.group(0)], text)


def identity(paths: tuple[str, ...]) -> tuple:
    """What says that the files at ``paths`` are the ones seen before: (device, inode, mtime_ns, size)
    of each (None where there is none). One ``stat`` per path: a file replaced (a new inode), written
    (a new mtime or size) or removed reads differently."""
    out = []
    for name in paths:
        try:
            st = os.stat(name)
        except (OSError, ValueError):
            out.append(None)
            continue
        out.append((st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(out)


class Kept:
    """One kept answer: its JSON bytes, the files besides the database it was computed from (a
    model's config files) with their :func:`identity` when it was computed, and when they were
    last seen unchanged (``time.monotonic``)."""

    __slots__ = ("body", "files", "identity", "seen")

    def __init__(self, body: bytes, files: tuple[str, ...], identity: tuple, seen: float):
        self.body, self.files, self.identity, self.seen = body, files, identity, seen


class AnswerCache:
    """The one cache of ``serve``'s answers: the bytes of each 200 answer, kept under the request as
    it arrived (path and raw query string), so a request answered before is found without parsing
    anything (the front's lookup, :class:`~autoselect.fleet.service.front.Front`).

    An answer stays while what it was computed from is unchanged: every kept answer is dropped when
    the database or its WAL changes (any commit changes their size or mtime: two ``stat`` calls per
    request), and an answer about a model also when that model's files change or go
    (:func:`identity` of the files it named when it was kept, looked at again at most every
    ``files_recheck_s`` seconds: no reading, no hashing). Used from the event loop only (the thread
    pool computes, the loop stores), so no lock.
    """

    def __init__(self, db_path: Path, size: int = CACHE_SIZE, files_recheck_s: float = FILES_RECHECK_S):
        self.db_path = db_path
        self.size = size
        self.files_recheck_s = files_recheck_s
        self._files = (os.fspath(db_path), f"{db_path}-wal")
        self._state: tuple | None = None
        self._kept: OrderedDict[tuple, Kept] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def current(self) -> tuple:
        """The database's state now (the :func:`identity` of it and its WAL); every kept answer is
        dropped if it changed."""
        state = identity(self._files)
        if state != self._state:
            self._kept.clear()
            self._state = state
        return state

    def get(self, request: tuple) -> tuple[bytes | None, tuple]:
        """(the answer kept for ``request`` (path, raw query string), or None; the database state
        an answer computed now belongs to)."""
        state = self.current()
        kept = self._kept.get(request)
        if kept is None:
            return None, state
        if kept.files:
            now = time.monotonic()
            if now - kept.seen >= self.files_recheck_s:
                if identity(kept.files) != kept.identity:
                    del self._kept[request]  # the model's files changed: computed again
                    return None, state
                kept.seen = now
        self._kept.move_to_end(request)
        return kept.body, state

    def put(self, request: tuple, state: tuple, body: bytes, files: tuple[str, ...] = (),
            files_identity: tuple = ()) -> None:
        """Keep ``body`` for ``request`` unless the database changed since ``state`` was read.

        :param files: the files besides the database the answer was computed from;
            ``files_identity`` their :func:`identity`, taken before the answer was computed (so a
            change while it was computed is seen at the next request).
        """
        if state != self._state:
            return
        self._kept[request] = Kept(body, tuple(files), tuple(files_identity), time.monotonic())
        self._kept.move_to_end(request)
        while len(self._kept) > self.size:
            self._kept.popitem(last=False)
