"""Quoting for the three formats ``fleet deploy`` renders: systemd unit files, Kubernetes YAML,
and a bash batch script.

Every value a user passes (``--db``, ``--image``, ``--address``, ``--args``) reaches a file that
another program parses with its own rules, so each format gets its own quoting, and a value
that no quoting can carry safely -- one with a control character (a newline would start a new
unit directive, YAML key or shell command) -- is refused by :func:`refuse_control`.

* systemd (systemd.syntax(7), systemd.service(5) "Command lines"): words are split on spaces
  and may be double-quoted, with C-style backslash escapes inside; ``%`` starts a specifier
  everywhere (``%%`` is a literal percent); in ``ExecStart=`` a ``$`` starts an environment
  variable (``$$`` is a literal dollar); in ``Environment=`` the ``$`` has no meaning.
* YAML: double-quoted scalars, with ``"`` and ``\\`` escaped and whatever YAML may not hold
  as it is (outside its printable set) written as a ``\\u`` / ``\\U`` escape.
* bash: :func:`shlex.quote` (single quotes; nothing is expanded inside them).
"""

from __future__ import annotations

import re
import shlex

from autoselect.errors import UserError


class UnsafeDeployValue(UserError):
    "A value for a rendered deployment file that holds a control character (a newline, a tab, NUL ...)."


#: words systemd reads as they are: no quote, backslash, space, specifier or variable character
_SYSTEMD_BARE = re.compile(r"^[A-Za-z0-9_./:=,+@^-]+$")


def refuse_control(what: str, value: str) -> str:
    """``value`` unchanged, unless it holds a control character (C0, DEL or C1): those would end
    a line of the rendered file and start a directive, key or command of the value's choosing;
    or a lone surrogate (bytes that were not UTF-8 on the command line), which no UTF-8 file holds."""
    for ch in value:
        if ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F:
            raise UnsafeDeployValue(
                f"{what} {value!r} holds the control character {ch!r}; a deployment file cannot carry it "
                "safely: pass the value without it"
            )
        if 0xD800 <= ord(ch) <= 0xDFFF:
            raise UnsafeDeployValue(f"{what} {value!r} is not valid UTF-8 text; a deployment file cannot carry it: "
                                    "pass the value in UTF-8")
    return value


def _systemd_quoted(value: str, *, dollar: bool) -> str:
    out = value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    if dollar:
        out = out.replace("$", "$$")
    return f'"{out}"'


def systemd_word(value: str) -> str:
    """One word of an ``ExecStart=`` command line: bare when systemd reads it as it is, else
    double-quoted with ``\\``, ``"``, ``%`` and ``$`` escaped; a lone ``;`` (which would end the
    command and start another) as systemd's documented literal ``\\;``."""
    if value == ";":
        return "\\;"
    if _SYSTEMD_BARE.match(value):
        return value
    return _systemd_quoted(value, dollar=True)


def systemd_command(words: list[str]) -> str:
    """An ``ExecStart=`` command line of ``words``."""
    return " ".join(systemd_word(w) for w in words)


def systemd_environment(name: str, value: str) -> str:
    """The value of one ``Environment=`` assignment: ``NAME=value``, double-quoted as a whole
    when the value needs it (a space would otherwise split it into two assignments)."""
    assignment = f"{name}={value}"
    if _SYSTEMD_BARE.match(assignment):
        return assignment
    return _systemd_quoted(assignment, dollar=False)


def _yaml_printable(o: int) -> bool:
    """YAML's c-printable set (the characters a YAML stream may hold as they are), less the BOM."""
    return 0x20 <= o <= 0x7E or 0xA0 <= o <= 0xD7FF or (0xE000 <= o <= 0xFFFD and o != 0xFEFF) or o >= 0x10000


def yaml_scalar(value: str) -> str:
    """A YAML double-quoted scalar holding exactly ``value``: ``"`` and ``\\`` escaped, anything
    YAML may not hold as it is written as a ``\\u`` / ``\\U`` escape (never a JSON surrogate
    pair, which YAML parsers read as two characters)."""
    out = ['"']
    for ch in value:
        o = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif _yaml_printable(o):
            out.append(ch)
        elif o <= 0xFFFF:
            out.append(f"\\u{o:04x}")
        else:
            out.append(f"\\U{o:08x}")
    out.append('"')
    return "".join(out)


def yaml_list(values: list[str]) -> str:
    """A YAML flow sequence of strings."""
    return "[" + ", ".join(yaml_scalar(v) for v in values) + "]"


def shell_word(value: str) -> str:
    """One bash word holding exactly ``value`` (nothing inside is expanded)."""
    return shlex.quote(value)
