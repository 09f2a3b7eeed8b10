"""``autoselect serve``: a small read-only HTTP API over a results database (FastAPI).

Endpoints (GET, and HEAD answered like GET; every other method is 405):

* ``/v1/recommend?model=...&host_class=...&workload=...`` (also ``tokens``, ``dp``, ``tp``,
  ``world_size``, ``gpu_arch``, ``vllm_version``, ``concurrency``, ``max_num_batched_tokens``,
  ``max_workspace_gib``): exactly the JSON of ``autoselect recommend --format json`` — both
  call :func:`autoselect.selector.recommend_for`.
* ``/v1/hosts``: the host classes in the database.
* ``/v1/drift``: ``autoselect fleet drift --format json``.
* ``/healthz``: ``{"status": "ok", ...}`` when the database can be read.

With ``--token-file`` every route but ``/healthz`` needs ``Authorization: Bearer <token>``
(compared in constant time, never logged; :mod:`autoselect.bearer`); a wrong or missing token is
401. TLS stays with a reverse proxy in front of the service (docs/launch.md).

Bad parameters get 400 with ``{"error": "..."}`` (the same sentence the CLI prints); an
unknown model or host class gets 404; a database that can no longer be read (gone, replaced,
damaged) gets 503 with the reason on every route, as ``/healthz`` says. Every parameter is read by
the command line's grammar (``dp=1_0`` is refused as ``--dp 1_0`` is; :mod:`~.params`), and a query
whose text is not UTF-8 is refused before anything reads it. The database is opened read-only per
computed answer. Answers are kept as JSON bytes in one cache, under the request as it arrived, while
the database file and its WAL are unchanged and, for a recommendation, the model's files too (a
``stat`` of each, the model's at most once a second): a request answered before is answered by the front from the event loop (a few
``stat`` calls, a dictionary lookup, a write: FastAPI never sees it); a new one is validated by
FastAPI and computed in the thread pool.

A recommendation is about a host class of the database (or a published ``ref-...`` class):
without ``host_class`` it is about the database's one class, and a database with several (or none)
asks for one (400). The server's own machine (its hostname, CPU, packages, links) is never what an
answer describes.

The server answers strangers, so ``model=`` never names a path: models are Hugging Face ids
resolved from the local cache only (never downloaded), or names under the model roots the
operator passed (``--model-root``; a name whose real path leaves its root does not exist).
Every model the server cannot serve gets the same 404 sentence, whatever exists on its disk,
and no answer carries a server path (the database, the roots, the Hub cache and the home
directory are replaced by placeholders, as whole absolute paths: a root given as a relative name
is never a word replaced in an answer). Per request, the work is bounded by the checks of the
config and of each parameter (at most :data:`MAX_QUERY` bytes of query string).

The modules: :mod:`~.app` (what the app answers from, checked before serving, and
:func:`create_app`), :mod:`~.routes` (the handlers and the assembly; the only one importing
FastAPI), :mod:`~.front` (the pure ASGI layer answering requests answered before),
:mod:`~.params` (the parameters' grammar), :mod:`~.answers` (the one answer cache, the files'
identity and the path scrubber), :mod:`~.server` (the socket and uvicorn: :func:`serve`),
:mod:`~.connections` (uvicorn's HTTP protocol with a deadline for every request head and room kept
for new clients), :mod:`~.descriptors` (the file-descriptor limit, and running out said once),
:mod:`~.log` (every line of the service's log, through one function).
"""

from autoselect.fleet.service.server import serve

__all__ = [
    "serve",
]
