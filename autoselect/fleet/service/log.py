"""What ``serve`` writes to its log (stderr): every line passes through :func:`write`.

The server's own sentences (:func:`warning`: a bind beyond loopback, the file-descriptor limit
reached) and everything uvicorn and asyncio log (their loggers are routed to :class:`Handler` by
:func:`log_config`, which ``serve`` gives uvicorn) leave through the one function, so what a log
line may show is decided in one place: the secrets it quotes are redacted there
(:mod:`autoselect.redact`, the rule every line that quotes argv or env follows). No request is
logged (uvicorn's access log is off): a query string is the client's, and the bearer token is
never written anywhere.
"""

from __future__ import annotations

import logging
import sys

from autoselect.redact import redacted_text


def write(text: str) -> None:
    """Write ``text`` (one line, or a traceback) to the service's log: the one way out, with every
    secret it quotes redacted (:func:`autoselect.redact.redacted_text`: a traceback may quote an
    argument, an exception a URL with its password)."""
    text = redacted_text(text)
    sys.stderr.write(text if text.endswith("\n") else text + "\n")
    sys.stderr.flush()


def warning(message: str) -> None:
    """One ``Warning:`` line, as the command line words them."""
    write(f"Warning: {message}")


class Handler(logging.Handler):
    """A logging handler whose every record leaves through :func:`write`."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            write(self.format(record))
        except Exception:  # a log line must never take a request down
            self.handleError(record)


def log_config() -> dict:
    """uvicorn's ``log_config``: its loggers (and asyncio's, which reports loop errors) write through
    :class:`Handler`, in uvicorn's words ("ERROR: Exception in ASGI application ..."), at warning and
    above. A new dict each time: ``logging.config.dictConfig`` takes the one it is given apart."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(levelname)s: %(message)s"}},
        "handlers": {"service": {"()": f"{__name__}.Handler", "formatter": "plain"}},
        "loggers": {
            "uvicorn": {"handlers": ["service"], "level": "WARNING", "propagate": False},
            "uvicorn.error": {"level": "WARNING"},
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
            "asyncio": {"handlers": ["service"], "level": "WARNING", "propagate": False},
        },
    }
