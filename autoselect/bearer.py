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
import stat

from autoselect.errors import UserError

#: Fewest characters a token may have (a short one is guessable; 32 random bytes in hex are 64).
MIN_TOKEN_CHARS = 16
#: The most of a token file read: its first line must fit (a token is a few dozen characters).
MAX_TOKEN_FILE_BYTES = 4096
#: The HTTP header and scheme it travels in (RFC 6750).
HEADER = "Authorization"
SCHEME = "Bearer"


class BadTokenFile(UserError):
    "A --token-file that cannot be read, or holds no usable token."


def _first_line(path: str | os.PathLike) -> str:
    """The first line of the regular file ``path``, read without waiting: opened non-blocking (a FIFO
    no writer opens would hang ``open``), refused unless it is a regular file (a FIFO, a device such
    as /dev/zero: a file that never ends), at most :data:`MAX_TOKEN_FILE_BYTES` read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BadTokenFile(f"--token-file {path} is not a regular file (a FIFO, a device or a socket never "
                               f"ends or never opens); write the token into a file")
        data = os.read(fd, MAX_TOKEN_FILE_BYTES + 1)
    finally:
        os.close(fd)
    first, newline, _ = data.partition(b"\n")
    if not newline and len(data) > MAX_TOKEN_FILE_BYTES:
        raise BadTokenFile(f"--token-file {path}: its first line is longer than {MAX_TOKEN_FILE_BYTES} bytes; "
                           f"write the token alone on the first line")
    return first.decode("utf-8")


def read_token_file(path: str | os.PathLike) -> str:
    """The token in ``path``: its first line, stripped.

    :raises BadTokenFile: missing or unreadable file, not a regular file, a first line over
        :data:`MAX_TOKEN_FILE_BYTES`, an empty first line, a token shorter than
        :data:`MIN_TOKEN_CHARS` or with blanks or control characters inside (an HTTP header
        cannot carry them).
    """
    try:
        first = _first_line(path)
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
