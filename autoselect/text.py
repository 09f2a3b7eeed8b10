"""Text where it enters: every string autoselect takes must be valid Unicode, checked once, there.

Text reaches autoselect through four doors, and each checks it as it comes in, for every value
at once (never option by option):

* **the command line** — every argument and every ``AUTOSELECT_*`` variable, before click parses
  them (``autoselect/cli/__init__.py`` calls :func:`check_argv`). Linux hands a program bytes;
  Python turns bytes that are not UTF-8 into lone surrogates (``\\udcff``), which SQLite, JSON
  output and the terminal all refuse later, each with a traceback.
* **files** — a model's ``config.json`` / ``hf_quant_config.json``, ``db import`` records, a
  JSON option of a serve line: after parsing, :func:`check_json` walks every key and string (a
  JSON escape ``"\\ud800"`` is valid JSON syntax but no character).
* **HTTP** — ``serve`` refuses a query whose percent-escapes are not UTF-8 before anything
  parses it (:func:`check_query`), rather than reading them as U+FFFD the way Starlette would.
* **the database** — text SQLite hands back is UTF-8 once the doors above hold; a value another
  program stored that is not is named by ``db check`` (read escaped there), refused by
  ``db merge``, and one ``Error:`` line for every other command (sqlite3 raises
  :data:`SQLITE_NOT_UTF8`; the CLI and ``serve`` translate it).

The rule is the same at every door: text that is not valid Unicode is refused with one message
that shows it escaped (``'\\udcff'``), never echoed raw. Stdlib only (on every command's path).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote_to_bytes

from autoselect.errors import UserError

#: how much of a refused text the message shows (escaped)
_SHOWN = 40
#: compiled on first use (re's cache): only a refused text needs it
_ESCAPED_BYTE = r"\\udc([89a-f][0-9a-f])"


#: What sqlite3 says when a stored TEXT value is not UTF-8 (``sqlite3.OperationalError``)
SQLITE_NOT_UTF8 = "Could not decode to UTF-8"


class NotUnicode(UserError):
    "Text that is not valid Unicode: bytes that are not UTF-8, or a lone surrogate (a JSON ``\\ud800`` escape)."


def is_unicode(text: str) -> bool:
    """True when ``text`` encodes as UTF-8: no lone surrogate (what undecodable bytes became)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown(text: str, *, from_bytes: bool = False) -> str:
    """``text`` escaped for a message (``repr``), shortened: safe to print whatever it holds.

    :param from_bytes: the text was decoded from bytes with ``surrogateescape`` (argv, the
        environment): a byte that was not UTF-8 is shown as ``\\xff``, not as its stand-in ``\\udcff``.
    """
    out = repr(text)
    if from_bytes:
        out = re.sub(_ESCAPED_BYTE, r"\\x\1", out)
    return out if len(out) <= _SHOWN else f"{out[:_SHOWN - 3]}..."


def _character(c: str, from_bytes: bool) -> str:
    """How a message names the character that is not Unicode."""
    code = ord(c)
    if from_bytes and 0xDC80 <= code <= 0xDCFF:  # Python's stand-in for an undecodable byte (PEP 383)
        return f"the byte 0x{code - 0xDC00:02x}, which is not UTF-8"
    return f"the lone surrogate U+{code:04X}, which is no character"


def one_line(message: str) -> str:
    """``message`` with every character that is not printable escaped (``\\r``, ``\\n``, ``\\x1b``):
    what the CLI prints for an error or a warning, so text a message quotes from its input (a
    path, a run id) can neither break it into lines nor send a terminal control sequence."""
    if message.isprintable():
        return message
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in message)


def check_text(text: str, what: str, error: type[UserError] = NotUnicode,
               fix: str = "retype it or fix its encoding", *, from_bytes: bool = False) -> str:
    """``text`` itself when it is valid Unicode.

    :param what: what the text is, for the message (``argument 3``, ``config.json``).
    :param fix: what to do, for the message.
    :param from_bytes: as for :func:`shown`.
    :raises error: naming ``what`` and the first bad character's position, the text escaped.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise error(f"{what} {shown(text, from_bytes=from_bytes)} is not valid Unicode text (character "
                    f"{e.start + 1} is {_character(text[e.start], from_bytes)}); {fix}") from None
    return text


def check_json(value: Any, what: str, error: type[UserError] = NotUnicode, fix: str = "fix the file") -> Any:
    """``value`` (parsed JSON) itself when every key and string in it is valid Unicode.

    :raises error: naming ``what`` and where in the document the bad string is (``.a[2]``).
    """
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if not is_unicode(item):
                check_text(item, f"{what}: the string at {where or 'the top'}", error, fix)
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str) and not is_unicode(key):
                    check_text(key, f"{what}: a key{' in ' + where if where else ''}", error, fix)
                stack.append((child, f"{where}.{key}"))
        elif isinstance(item, list):
            stack.extend((child, f"{where}[{i}]") for i, child in enumerate(item))
    return value


def check_argv(args: list[str], environ: dict[str, str]) -> None:
    """Refuse a command line or an ``AUTOSELECT_*`` variable that is not valid Unicode.

    :raises NotUnicode: naming the argument (its position) or the variable.
    """
    for i, arg in enumerate(args, 1):
        if not is_unicode(arg):
            check_text(arg, f"argument {i}", from_bytes=True)
        if "\0" in arg:  # no exec can pass one; a caller in-process can, and os.stat() raises on it
            raise NotUnicode(f"argument {i} {shown(arg)} holds a NUL character (position {arg.index(chr(0)) + 1}), "
                             "which no command line can carry; retype it")
    for name, value in environ.items():
        if name.startswith("AUTOSELECT_") and not is_unicode(value):
            check_text(value, f"${name}", from_bytes=True)


def check_query(query: str) -> None:
    """Refuse a URL query string whose names or values, percent-decoded, are not UTF-8.

    :raises NotUnicode: naming the parameter.
    """
    for part in query.split("&"):  # Starlette splits on & alone (parse_qsl)
        name, _, value = part.partition("=")
        for piece, label in ((name, "a query parameter name"), (value, f"query parameter {shown(name)}")):
            raw = unquote_to_bytes(piece.replace("+", " "))
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise NotUnicode(f"{label} is not valid UTF-8 (byte {e.start + 1} of its value, percent-decoded); "
                                 "send UTF-8 text, percent-encoded") from None
