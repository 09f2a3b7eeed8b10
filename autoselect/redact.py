"""Secrets out of every text autoselect shows: one rule for argv, the environment, JSON and messages.

A server line carries the user's secrets (``HF_TOKEN=...``, ``--api-key ...``, a URL with a
password, an API key inside ``--kv-transfer-config``'s JSON); ``launch``'s ``Warning:`` lines and
``--decision-json``, ``check``'s report and the service's logs quote such lines. Everything they
show passes through here first, and a secret reads :data:`REDACTED`:

* a name that looks like a secret's (:func:`is_secret_name`: one of its ``_`` / ``-`` / ``.``
  separated words is ``TOKEN``, ``KEY``, ``SECRET``, ``PASSWORD`` ...): its value, as
  ``NAME=value``, ``--name value`` or ``--name=value``, or a JSON ``"name": value``;
* the credentials of a URL (``scheme://user:password@host``: the password; ``scheme://token@host``:
  the user part, a token there);
* tokens of a known shape wherever they stand (Hugging Face ``hf_...``, OpenAI ``sk-...``,
  GitHub ``ghp_...`` / ``github_pat_...``, AWS access key ids ``AKIA...``, Slack ``xox.-...``).

The user's own terminal still gets their own words where they asked for them (``launch --dry-run``
prints the command to run). Stdlib only: on every command's path.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

REDACTED = "<redacted>"
#: The words of a name that make its value a secret (``HF_TOKEN``, ``--api-key``, ``aws_secret_access_key``;
#: not ``--max-num-batched-tokens``).
SECRET_WORDS = frozenset({"token", "key", "secret", "password", "passwd", "pass", "pwd", "credential",
                          "credentials", "apikey", "auth", "authorization", "cookie", "private", "pat", "signature"})
#: Tokens of a known shape (patterns as strings: compiled on first use by re's cache).
TOKEN_SHAPES = (r"\bhf_[A-Za-z0-9]{20,}", r"\bsk-[A-Za-z0-9_-]{16,}", r"\bghp_[A-Za-z0-9]{20,}",
                r"\bgithub_pat_[A-Za-z0-9_]{20,}", r"\bAKIA[0-9A-Z]{16}\b", r"\bxox[abprs]-[A-Za-z0-9-]{10,}")
_URL_CREDENTIALS = r"(?i)\b([a-z][a-z0-9+.-]*://)([^/\s:@'\"]*)(:[^/\s@'\"]*)?@"
_NAME = r"[A-Za-z_][A-Za-z0-9_.-]*"


#: A last word that names where a secret is kept, not the secret (``--token-file PATH``).
NOT_SECRET_LAST = frozenset({"file", "files", "path", "dir", "directory", "env", "name"})


def is_secret_name(name: str) -> bool:
    """True when one of ``name``'s words (split at ``_``, ``-``, ``.``, case ignored) names a secret,
    unless its last word names where one is kept (``--token-file``, ``HF_TOKEN_PATH``)."""
    words = re.split(r"[-_.]+", name.strip("-").lower())
    return bool(SECRET_WORDS & set(words)) and words[-1] not in NOT_SECRET_LAST


def _url(match: re.Match) -> str:
    scheme, user, password = match.group(1), match.group(2), match.group(3)
    if password is not None:
        return f"{scheme}{user}:{REDACTED}@"
    return f"{scheme}{REDACTED}@" if user else match.group(0)


def redacted_text(text: str) -> str:
    """``text`` (a message, a JSON document, a shell line) with every secret of the rule replaced."""
    if not text:
        return text
    text = re.sub(_URL_CREDENTIALS, _url, text)
    # "name": "value" / "name": 123 (JSON, a Python repr's 'name': 'value')
    text = re.sub(r"""(["']([A-Za-z0-9_.-]+)["']\s*:\s*)("[^"]*"|'[^']*'|[^\s,{}\[\]"']+)""",
                  lambda m: f"{m.group(1)}{_quoted(m.group(3))}" if is_secret_name(m.group(2)) else m.group(0), text)
    # NAME=value, --name=value, --name value
    text = re.sub(rf"(^|[\s'\"(\[,;])(-{{0,2}}{_NAME})(=)('[^']*'|\"[^\"]*\"|[^\s'\",;)\]]+)",
                  lambda m: f"{m.group(1)}{m.group(2)}={_quoted(m.group(4))}" if is_secret_name(m.group(2))
                  else m.group(0), text)
    text = re.sub(rf"(^|[\s'\"(\[,;])(--{_NAME})(\s+)(?!-)('[^']*'|\"[^\"]*\"|[^\s'\",;)\]]+)",
                  lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}{_quoted(m.group(4))}"
                  if is_secret_name(m.group(2)) else m.group(0), text)
    for shape in TOKEN_SHAPES:
        text = re.sub(shape, REDACTED, text)
    return text


def _quoted(value: str) -> str:
    """:data:`REDACTED` in the quotes ``value`` had."""
    return f"{value[0]}{REDACTED}{value[0]}" if value[:1] in ("'", '"') and len(value) > 1 else REDACTED


def redacted_env(env: Mapping[str, Any]) -> dict[str, Any]:
    """``env`` with the value of every secret-looking name replaced, and secrets inside the others."""
    return {k: (REDACTED if is_secret_name(k) else redacted_text(v) if isinstance(v, str) else v)
            for k, v in env.items()}


def redacted_words(words: Iterable[str]) -> list[str]:
    """Shell words with the secrets out: ``VAR=value`` of a secret-looking name, the value of an
    option named like one (``--api-key X``, ``--hf-token=X``), and secrets inside any word (a URL's
    credentials, a JSON flag's secret keys, a known token shape)."""
    out: list[str] = []
    hide_next = False
    for word in words:
        name, eq, _ = word.partition("=")
        secret = is_secret_name(name) and (name.startswith("-") or name.isidentifier())
        if hide_next and not word.startswith("-"):
            out.append(REDACTED)
        elif eq and secret:
            out.append(f"{name}={REDACTED}")
        else:
            out.append(redacted_text(word))
        hide_next = word.startswith("-") and not eq and secret
    return out


def redacted_json(value: Any) -> Any:
    """A parsed JSON value with the value of every secret-looking key replaced, at any depth, and
    secrets inside its texts."""
    if isinstance(value, dict):
        return {k: (REDACTED if isinstance(k, str) and is_secret_name(k) else redacted_json(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [redacted_json(v) for v in value]
    return redacted_text(value) if isinstance(value, str) else value
