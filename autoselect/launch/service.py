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
           "plain_http_beyond_loopback", "read_token_file"]


class BadServerUrl(UserError):
    "A --server that is not an http(s) URL."


def check_server_url(url: str) -> str:
    """``url`` when it is an ``http://`` or ``https://`` URL with a host.

    :raises BadServerUrl: anything else.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadServerUrl(f"--server {url!r} is not an http(s) URL; pass e.g. http://autoselect.fleet:8765")
    return url.rstrip("/")


def plain_http_beyond_loopback(url: str) -> bool:
    """True for an ``http://`` URL whose host is not this machine (a token would travel in clear text)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").strip("[]")
    return parts.scheme == "http" and host not in ("localhost", "127.0.0.1", "::1") and not host.startswith("127.")


def ask_service(url: str, params: Mapping[str, Any], *, token: str | None, timeout_s: float) -> dict:
    """The service's ``recommend`` document for ``params``, within ``timeout_s`` for the whole exchange.

    :raises ServiceUnavailable: no answer in time, a refusal (its status and sentence), not JSON.
    """
    import urllib.error  # the client itself only when a service is asked
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
