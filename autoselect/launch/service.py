"""Asking a running ``autoselect serve`` (the fleet's database) for the pick.

The service is asked once, within one deadline for the whole exchange (connect, send, read),
never following a redirect: the bearer token (:mod:`autoselect.bearer`) goes to the URL the user
named and nowhere else. Whatever goes wrong is a :class:`autoselect.launch.pick.ServiceUnavailable`
with the reason, and the launcher answers locally and says why. Loaded on first use (``_LAZY`` in
``autoselect/launch/__init__.py``): a launch without ``--server`` imports no HTTP client.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Mapping
from urllib.parse import urlsplit

from autoselect.bearer import HEADER, authorization, read_token_file
from autoselect.errors import UserError
from autoselect.launch.pick import ServiceUnavailable

#: The longest answer read from a service (a recommendation is a few tens of KB).
MAX_ANSWER_BYTES = 4 * 2**20
#: The service's route for one recommendation.
RECOMMEND_ROUTE = "/v1/recommend"

__all__ = ["BadServerUrl", "MAX_ANSWER_BYTES", "RECOMMEND_ROUTE", "ask_service", "check_server_url",
           "plain_http_beyond_loopback", "read_token_file", "service_said"]


class BadServerUrl(UserError):
    "A --server that is not an http(s) URL."


#: A host name's longest form (RFC 1035: 253 characters), and a URL's longest.
MAX_HOST_CHARS = 253
MAX_URL_CHARS = 2048


def check_server_url(url: str) -> str:
    """``url`` when it is an ``http://`` or ``https://`` URL with a host (a name, an IPv4 address or
    a bracketed IPv6 one), an optional port 1-65535 and an optional path: no credentials (the token
    file carries those), no query, no fragment, no blank or control character.

    :raises BadServerUrl: anything else, said in one line.
    """
    example = "pass e.g. http://autoselect.fleet:8765"
    if len(url) > MAX_URL_CHARS or not url.isprintable() or any(c.isspace() for c in url):
        raise BadServerUrl(f"--server {url[:60]!r} is not an http(s) URL (blanks, control characters or over "
                           f"{MAX_URL_CHARS} characters); {example}")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:  # a bracket left open, a port out of range or not a number
        raise BadServerUrl(f"--server {url[:80]!r} is not an http(s) URL ({e}); {example}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or len(parts.hostname) > MAX_HOST_CHARS:
        raise BadServerUrl(f"--server {url[:80]!r} is not an http(s) URL with a host; {example}")
    if parts.username is not None or parts.password is not None:
        raise BadServerUrl("--server holds credentials (user@ or user:password@); pass the bearer token with "
                           "--token-file instead")
    if parts.query or parts.fragment or port == 0:
        raise BadServerUrl(f"--server {url[:80]!r} has a query, a fragment or port 0; {example}")
    return url.rstrip("/")


#: The most of a service's own error text a launch line quotes.
MAX_SAID = 200


def service_said(text: object) -> str:
    """A service's own words (its ``error``), as launch quotes them: at most :data:`MAX_SAID`
    characters, every character that is not printable escaped, quoted, so no text of a service
    forges a line of its own or sends the terminal a control sequence."""
    said = str(text)
    said = said if len(said) <= MAX_SAID else said[:MAX_SAID] + "..."
    return repr(said)


def plain_http_beyond_loopback(url: str) -> bool:
    """True for an ``http://`` URL whose host is not this machine (a token would travel in clear text)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").strip("[]")
    return parts.scheme == "http" and host not in ("localhost", "127.0.0.1", "::1") and not host.startswith("127.")


def ask_service(url: str, params: Mapping[str, Any], *, token: str | None, timeout_s: float) -> dict:
    """The service's ``recommend`` document for ``params``, within ``timeout_s`` for the whole exchange.

    :raises ServiceUnavailable: no answer in time, a refusal (its status and sentence), not JSON.
    """
    import http.client  # the client itself only when a service is asked
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
        try:  # the service's answer, whole; anything it does wrong is an outcome, never a traceback
            with opener.open(request, timeout=timeout_s) as response:
                outcome["body"] = response.read(MAX_ANSWER_BYTES + 1)
        except urllib.error.HTTPError as e:
            try:
                said = json.loads(e.read(65536) or b"{}").get("error")
            except (ValueError, AttributeError, OSError):
                said = None
            outcome["error"] = f"it answered HTTP {e.code}" + (f": {service_said(said)}" if said else "")
        except ServiceUnavailable as e:
            outcome["error"] = str(e)
        except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as e:
            reason = getattr(e, "reason", e)
            outcome["error"] = f"no answer ({service_said(reason)[1:-1]})"

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
