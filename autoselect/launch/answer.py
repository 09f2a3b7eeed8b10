"""The selector's answer as ``launch`` uses it: from the local database (or the reference), or from a
running ``autoselect serve``.

Both paths read the same document, ``recommend --format json`` (docs/json.md): the local one
builds it with :func:`autoselect.selector.recommend_for`, the service answers it over HTTP
(``GET /v1/recommend``). :func:`pick_of` keeps what launch acts on: the backend, the kind of
evidence under it, the confidence, the flags the answer adds (the one-sided token budget, tuned
knobs), the tuned variables, and the ``autoselect bench`` command that would settle an open answer.

The database is only read (``mode=ro``); a missing or unreadable file is said in
:attr:`DatabaseState.text` and the answer comes from the reference or is vLLM's default.
The service is asked once, within a deadline for the whole exchange, never following a redirect
(the bearer token goes to the URL the user named, nowhere else).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from autoselect.bearer import HEADER, authorization
from autoselect.errors import UserError
from autoselect.selector import recommend_for
from db import default_path
from db.queries import connect_readonly

#: The flags of an answer that describe the deployment or the backend (launch takes those from the
#: line and from :func:`autoselect.vllm_flags.backend_setting`): option -> how many values follow.
DEPLOYMENT_FLAGS = {"--tensor-parallel-size": 1, "--data-parallel-size": 1, "--enable-expert-parallel": 0,
                    "--all2all-backend": 1}
#: The longest answer read from a service (a recommendation is a few tens of KB).
MAX_ANSWER_BYTES = 4 * 2**20
#: The service's route for one recommendation.
RECOMMEND_ROUTE = "/v1/recommend"


class BadServerUrl(UserError):
    "A --server that is not an http(s) URL."


class ServiceUnavailable(Exception):
    "The service did not give a usable answer (the launcher falls back and says why)."


@dataclass(frozen=True)
class Pick:
    """What launch acts on from one answer."""

    backend: str
    confidence: str | None  # the selector's; None: not the selector's call (a platform rule)
    evidence: str  # measured | published | derived | transferred | estimated | none | rule
    source: str  # where it came from, in words, for the line
    flags: tuple[tuple[str, ...], ...] = ()  # the answer's other flags, each option with its values
    env: Mapping[str, str] = field(default_factory=dict)  # tuned variables
    bench_command: str | None = None
    reasons: tuple[str, ...] = ()  # why the confidence is what it is
    warnings: tuple[str, ...] = ()
    answer: dict | None = field(default=None, repr=False)  # the recommend document, when there is one

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (without the whole answer)."""
        return {"backend": self.backend, "confidence": self.confidence, "evidence": self.evidence,
                "source": self.source, "flags": [list(f) for f in self.flags], "env": dict(self.env),
                "bench_command": self.bench_command, "confidence_reasons": list(self.reasons),
                "warnings": list(self.warnings)}


def _other_flags(vllm_args: list[str]) -> tuple[tuple[str, ...], ...]:
    """The answer's flags beyond the deployment and the backend, each option with its values."""
    out: list[list[str]] = []
    i = 0
    while i < len(vllm_args):
        word = vllm_args[i]
        if word in DEPLOYMENT_FLAGS:
            i += 1 + DEPLOYMENT_FLAGS[word]
            continue
        if word.startswith("-") or not out:
            out.append([word])
        else:
            out[-1].append(word)
        i += 1
    return tuple(tuple(f) for f in out)


def pick_of(answer: Mapping[str, Any], source: str) -> Pick:
    """The :class:`Pick` in a ``recommend --format json`` document.

    :raises ServiceUnavailable: a document without a backend, a confidence or flags.
    """
    backend, confidence, args = answer.get("backend"), answer.get("confidence"), answer.get("vllm_args")
    if not (isinstance(backend, str) and isinstance(confidence, str) and isinstance(args, list)
            and all(isinstance(a, str) for a in args)):
        raise ServiceUnavailable("the answer is not a recommendation (no backend, confidence or vllm_args)")
    chosen = next((c for c in answer.get("candidates") or [] if isinstance(c, dict) and c.get("backend") == backend),
                  {})
    measured = chosen.get("fit") is not None
    evidence = "none" if confidence == "none" or not measured else str(chosen.get("evidence", "measured"))
    knobs = answer.get("knobs") or {}
    env = {str(k): str(v) for k, v in (knobs.get("env") or {}).items()} if isinstance(knobs, dict) else {}
    return Pick(backend=backend, confidence=confidence, evidence=evidence, source=source, flags=_other_flags(args),
                env=env, bench_command=answer.get("bench_command"),
                reasons=tuple(str(r) for r in answer.get("confidence_reasons") or ()),
                warnings=tuple(str(w) for w in answer.get("warnings") or ()), answer=dict(answer))


# -- the local database --------------------------------------------------------------------------


@dataclass(frozen=True)
class DatabaseState:
    """Whether the results database can be read, in words for the line."""

    path: Path
    readable: bool
    text: str  # "the database P", "no database at P", "the database P is unreadable (...)"


def database_state(db_path: str | os.PathLike | None) -> DatabaseState:
    """Open the database read-only once, to say whether the answer can use it (never creates it)."""
    path = Path(db_path) if db_path is not None else default_path()
    if not path.exists():
        return DatabaseState(path, False, f"no database at {path}")
    try:
        connect_readonly(path).close()
    except UserError as e:
        return DatabaseState(path, False, f"the database {path} is unreadable ({str(e).rstrip('.')})")
    return DatabaseState(path, True, f"the database {path}")


def local_source(answer: Mapping[str, Any], db: DatabaseState) -> str:
    """Where a local answer's numbers come from, in words."""
    reference = answer.get("reference")
    if isinstance(reference, dict):
        where = "" if db.readable else f"; {db.text}"
        return f"NVIDIA's published reference (class {reference.get('host_class')}){where}"
    used = answer.get("data_used") or {}
    if answer.get("confidence") == "none" or not used.get("results"):
        return f"no measurement of this host class and shape in {db.text.removeprefix('the database ')}" \
            if db.readable else db.text
    return f"{db.text} (host class {used.get('host_class')}, {used.get('results')} results)"


def local_answer(model: str, db: DatabaseState, **kw) -> dict:
    """The ``recommend`` document for ``model`` from ``db`` (or without it, when it cannot be read)."""
    return recommend_for(model, db_path=db.path, read_db=db.readable, **kw).to_dict()


# -- a running `autoselect serve` ----------------------------------------------------------------


def check_server_url(url: str) -> str:
    """``url`` when it is an ``http://`` or ``https://`` URL with a host.

    :raises BadServerUrl: anything else.
    """
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadServerUrl(f"--server {url!r} is not an http(s) URL; pass e.g. http://autoselect.fleet:8765")
    return url.rstrip("/")


def plain_http_beyond_loopback(url: str) -> bool:
    """True for an ``http://`` URL whose host is not this machine (a token would travel in clear text)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = (parts.hostname or "").strip("[]")
    return parts.scheme == "http" and host not in ("localhost", "127.0.0.1", "::1") and not host.startswith("127.")


def ask_service(url: str, params: Mapping[str, Any], *, token: str | None, timeout_s: float) -> dict:
    """The service's ``recommend`` document for ``params``, within ``timeout_s`` for the whole exchange.

    :raises ServiceUnavailable: no answer in time, a refusal (its status and sentence), not JSON.
    """
    import urllib.error
    import urllib.parse
    import urllib.request

    class _NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, req, fp, code, msg, headers, newurl):
            raise ServiceUnavailable(f"it redirected to {newurl} (not followed: the token goes only where --server "
                                     f"points)")

    query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
    headers = {"Accept": "application/json", "User-Agent": "autoselect-launch"}
    if token is not None:
        headers[HEADER] = authorization(token)
    request = urllib.request.Request(f"{url}{RECOMMEND_ROUTE}?{query}", headers=headers)
    opener = urllib.request.build_opener(_NoRedirect)
    outcome: dict[str, Any] = {}

    def exchange() -> None:
        try:
            with opener.open(request, timeout=timeout_s) as response:
                outcome["body"] = response.read(MAX_ANSWER_BYTES + 1)
        except urllib.error.HTTPError as e:
            try:
                said = json.loads(e.read(65536) or b"{}").get("error")
            except (ValueError, AttributeError, OSError):
                said = None
            outcome["error"] = f"it answered HTTP {e.code}" + (f": {said}" if said else "")
        except ServiceUnavailable as e:
            outcome["error"] = str(e)
        except (urllib.error.URLError, OSError, ValueError) as e:
            reason = getattr(e, "reason", e)
            outcome["error"] = f"no answer ({reason})"

    worker = threading.Thread(target=exchange, daemon=True, name="autoselect-launch-service")
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise ServiceUnavailable(f"no answer within {timeout_s:g} s")
    if "error" in outcome:
        raise ServiceUnavailable(outcome["error"])
    body = outcome.get("body", b"")
    if len(body) > MAX_ANSWER_BYTES:
        raise ServiceUnavailable(f"its answer is larger than {MAX_ANSWER_BYTES} bytes")
    try:
        answer = json.loads(body)
    except ValueError:
        raise ServiceUnavailable("its answer is not JSON") from None
    if not isinstance(answer, dict):
        raise ServiceUnavailable("its answer is not a JSON object")
    return answer
