"""The bearer token ``serve`` may require and ``launch`` presents: read from a file, compared in constant time.

A token lives in a file (a Kubernetes Secret mounted as a file, a systemd credential), never on
a command line, where ``ps`` and shell history would show it. The file holds the token on its
first line; surrounding blanks are dropped. The token itself never appears in a message, a log
or an answer: errors name the file, not its content. TLS is not autoselect's: a token sent to a
service beyond loopback travels in clear text unless a TLS-terminating proxy fronts it
(docs/launch.md shows one).
"""

from __future__ import annotations

import hmac
import os

from autoselect.errors import UserError

#: Fewest characters a token may have (a short one is guessable; 32 random bytes in hex are 64).
MIN_TOKEN_CHARS = 16
#: The HTTP header and scheme it travels in (RFC 6750).
HEADER = "Authorization"
SCHEME = "Bearer"


class BadTokenFile(UserError):
    "A --token-file that cannot be read, or holds no usable token."


def read_token_file(path: str | os.PathLike) -> str:
    """The token in ``path``: its first line, stripped.

    :raises BadTokenFile: missing or unreadable file, an empty first line, a token shorter than
        :data:`MIN_TOKEN_CHARS` or with blanks or control characters inside (an HTTP header
        cannot carry them).
    """
    try:
        with open(path, encoding="utf-8") as f:
            first = f.readline()
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else "not UTF-8 text"
        raise BadTokenFile(f"--token-file {path}: cannot read it ({why}); pass a file that holds the token "
                           f"on its first line") from None
    token = first.strip()
    if not token:
        raise BadTokenFile(f"--token-file {path} is empty; write the token on its first line "
                           f"(e.g. `openssl rand -hex 32 > {path}`)")
    if len(token) < MIN_TOKEN_CHARS:
        raise BadTokenFile(f"--token-file {path}: the token has {len(token)} characters, fewer than "
                           f"{MIN_TOKEN_CHARS}; use a long random one (e.g. `openssl rand -hex 32`)")
    if any(c.isspace() or ord(c) < 0x21 or ord(c) == 0x7F or ord(c) > 0x7E for c in token):
        raise BadTokenFile(f"--token-file {path}: the token holds blanks or characters outside printable "
                           f"ASCII, which an HTTP header cannot carry")
    return token


def authorization(token: str) -> str:
    """The ``Authorization`` header value for ``token``."""
    return f"{SCHEME} {token}"


def presented_token(header: str | None) -> str | None:
    """The token in an ``Authorization: Bearer ...`` header value, or None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    return token.strip() if scheme.lower() == SCHEME.lower() and token.strip() else None


def token_matches(presented: str | None, expected: str) -> bool:
    """True when ``presented`` is ``expected``, compared in constant time (no timing hint of how
    many leading characters matched)."""
    if presented is None:
        hmac.compare_digest(expected.encode(), expected.encode())  # the same work either way
        return False
    return hmac.compare_digest(presented.encode("utf-8", "surrogateescape"), expected.encode())
