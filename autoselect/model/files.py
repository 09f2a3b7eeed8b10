"""Reading one config file: a bounded, UTF-8 JSON object, or one clear error naming the file."""

from __future__ import annotations

import json
from pathlib import Path

from autoselect.model.errors import ModelConfigInvalid, ModelConfigNotFound

#: The largest config.json / hf_quant_config.json read: real ones are a few KB; a bigger file is
#: not a config, and parsing it would only cost time (serve reads configs per request).
MAX_CONFIG_BYTES = 4 << 20


def read_config_json(path: Path, what: str, label: str | None = None) -> dict:
    """The JSON object in ``path``; anything else (unreadable, too big, not UTF-8, not JSON,
    nested too deeply, not an object) is one :class:`UserError` naming the file as ``label``."""
    label = label or str(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise ModelConfigNotFound(f"cannot read {label}: {e.strerror}; check the path and permissions") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ModelConfigInvalid(f"{label} is larger than {MAX_CONFIG_BYTES >> 20} MiB; a {what} is a few KB, "
                                 f"re-download it or fix the file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        kind = "UTF-16 text" if raw[:2] in (b"\xff\xfe", b"\xfe\xff") else "binary or not UTF-8"
        raise ModelConfigInvalid(f"{label} is not UTF-8 text ({kind}, byte {e.start}); a {what} is UTF-8 JSON, "
                                 f"re-download it or fix the file") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ModelConfigInvalid(
            f"{label} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}); "
            f"re-download the {what} or fix the file"
        ) from None
    except RecursionError:
        raise ModelConfigInvalid(f"{label} is JSON nested too deeply to be a {what}; fix the file") from None
    except ValueError as e:  # an integer literal of thousands of digits
        raise ModelConfigInvalid(f"{label} is not JSON this reader accepts ({e}); fix the file") from None
    if not isinstance(data, dict):
        raise ModelConfigInvalid(f"{label} holds a JSON {type(data).__name__}, not an object; is it a {what}?")
    return data
