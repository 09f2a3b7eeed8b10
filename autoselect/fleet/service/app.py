"""The application ``serve`` runs: what it answers from (checked before it serves) and its assembly.

:func:`create_app` checks the database and the model roots, then assembles the FastAPI app from
the route handlers of :mod:`autoselect.fleet.service.routes` (which imports FastAPI: this module
does not, so importing it costs nothing until an app is made) behind the front that answers
requests answered before.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoselect.bearer import read_token_file
from autoselect.errors import UnknownHostClass, UserError
from autoselect.fleet.service.answers import AnswerCache, Scrubber
from autoselect.model import ModelConfigNotFound, ModelSource
from db import default_path
from db.errors import (DatabaseDamaged, DatabaseLocked, DatabaseNeedsUpgrade, DatabaseNotFound, DatabaseNotReadable,
                       DatabaseTooNew, ForeignDatabase, NotADatabase)
from db.queries import connect_readonly

#: the longest query string a request may carry (every parameter's grammar is far shorter)
MAX_QUERY = 4096
#: the one answer for any model= value the server cannot serve, whatever exists on its disk
UNKNOWN_MODEL = ("unknown model: this server answers for Hugging Face model ids in its cache and for models "
                 "under its --model-root directories")
#: the mistakes that mean "no such thing here" (404) rather than a bad parameter (400)
NOT_FOUND = (ModelConfigNotFound, UnknownHostClass)
#: the server's database can no longer be read as one (gone, replaced, damaged, locked too long):
#: 503 with the reason, as /healthz says; the server answers from nothing else
UNREADABLE_DATABASE = (DatabaseNotFound, NotADatabase, ForeignDatabase, DatabaseTooNew, DatabaseNeedsUpgrade,
                       DatabaseNotReadable, DatabaseDamaged, DatabaseLocked)


class ServeUnavailable(UserError):
    "FastAPI / uvicorn are not installed."


class BadServeOption(UserError):
    "A serve option that cannot work (port, workers)."


class HostClassNeeded(UserError):
    "A recommendation asked without host_class of a service whose database holds no single class."


def model_source(model_roots=()) -> Any:
    """What ``serve`` resolves ``model=`` against: Hub ids from the cache, names under the roots."""
    return ModelSource(local_paths=False, hub=True, offline=True, roots=tuple(Path(r) for r in model_roots))


@dataclass(frozen=True)
class Served:
    """What an app answers from: the database, the models ``model=`` may name, the answers' scrubber and
    cache, and the bearer token every request but ``/healthz`` must carry (None: no token asked)."""

    path: Path
    source: Any  # a ModelSource
    scrub: Scrubber
    cache: AnswerCache
    token: str | None = dataclasses.field(default=None, repr=False)

    @classmethod
    def open(cls, db_path: str | os.PathLike | None = None, model_roots=(),
             token_file: str | os.PathLike | None = None) -> "Served":
        """Check that the database at ``db_path`` (default: ``db.default_path()``) is readable,
        every root is a directory and the token file holds a token; one :class:`UserError` otherwise."""
        path = Path(db_path) if db_path is not None else default_path()
        conn = connect_readonly(path)  # refuse a missing / foreign / too-new database before serving
        conn.close()
        # absolute from here on: what the server reads, and the paths its answers are scrubbed of, never
        # depend on a relative name (``--model-root data``) that may also be a word of an answer
        roots = tuple(Path(os.path.abspath(r)) for r in model_roots)
        for root in roots:
            if not root.is_dir():
                raise BadServeOption(f"--model-root {root} is not a directory; pass a directory of checkpoint "
                                     "directories")
        token = read_token_file(token_file) if token_file is not None else None
        return cls(path=path, source=model_source(roots), scrub=Scrubber(path, roots), cache=AnswerCache(path),
                   token=token)


def create_app(db_path: str | os.PathLike | None = None, *, model_roots=(),
               token_file: str | os.PathLike | None = None):
    """The ASGI application serving the database at ``db_path`` (checked readable now): the
    FastAPI app behind its :class:`~autoselect.fleet.service.front.Front` (``.app``).

    :param model_roots: directories whose checkpoint sub-directories ``model=`` may name
        (relative names only); default none: Hugging Face ids from the local cache only.
    :param token_file: a file holding the bearer token every request but ``/healthz`` must carry
        (:mod:`autoselect.bearer`); default none: no token asked.
    """
    try:
        import fastapi  # noqa: F401
    except ImportError:
        raise ServeUnavailable("fastapi is not installed; pip install 'autoselect[serve]'") from None
    served = Served.open(db_path, model_roots, token_file)
    from autoselect.fleet.service.routes import assemble  # imports FastAPI

    return assemble(served)
