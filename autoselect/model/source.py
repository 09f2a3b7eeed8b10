"""Which model names resolve, to which config files, and reading one of them.

:class:`ModelSource` says what a caller accepts (the CLI: a path or a Hub id; ``serve``: Hub ids
from the cache and names under its model roots); :func:`locate_config` turns a name into the
config.json (and hf_quant_config.json) to read: a Hub id this package ships the config of
(:func:`shipped_files`) from the package, any other Hub id's fetched into the Hugging Face cache
(:func:`hub_files`), and :func:`config_files` names what an answer about it depends on;
:func:`read_config_json` reads one as a bounded UTF-8 JSON object, or
raises one clear error naming the file.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import NamedTuple

from autoselect.model.errors import ModelConfigInvalid, ModelConfigNotFound
from autoselect.text import check_json

#: a Hugging Face Hub id: ``name`` or ``org/name`` (patterns here are strings, compiled on first use by
#: re's cache: a local directory, the usual name, needs none)
_HUB_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$"


def _looks_like_path(model: str) -> bool:
    return (
        model.startswith(("/", "./", "../", "~", "."))
        or model.count("/") > 1
        or os.sep in model and not re.match(_HUB_ID, model)
        or model.endswith(".json")
    )


class ModelSource(NamedTuple):
    """Which model names :func:`load_profile` resolves, and where.

    The CLI's default takes what its user names: a local directory (or its config.json), or a
    Hugging Face id (downloaded unless ``HF_HUB_OFFLINE``). ``serve`` answers strangers, so it
    takes Hub ids from the cache only, and names under the model roots its operator gave (a
    relative name whose real path stays inside a root): never a path a client chose.
    """

    local_paths: bool = True
    hub: bool = True
    offline: bool = False  # True: the Hub cache only, whatever HF_HUB_OFFLINE says
    roots: tuple[Path, ...] = ()


#: what the command line resolves
CLI_SOURCE = ModelSource()
#: a name under a model root: relative components that never start with a dot (so no "..")
_ROOT_NAME = r"^[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*$"
#: the longest model name or path taken (a Hub id is at most 96 characters)
MAX_MODEL_NAME = 1024


def config_dir(model: str) -> Path:
    """The local directory holding ``model``'s config.json (the Hub cache snapshot for a hub id).

    :raises ModelConfigNotFound: as :func:`load_profile` does.
    """
    return locate_config(model)[0].parent


def locate_config(model: str, source: ModelSource = CLI_SOURCE) -> tuple[Path, Path | None, list[str], str]:
    """(config.json, hf_quant_config.json or None, notes, how messages name config.json)."""
    if not isinstance(model, str) or not model or len(model) > MAX_MODEL_NAME or not model.isprintable():
        raise ModelConfigNotFound(
            f"--model {model[:80]!r} is not a model name; pass a checkpoint directory or a Hugging Face model id"
            if isinstance(model, str) else "--model is not a model name"
        )
    if source.roots and re.match(_ROOT_NAME, model):
        for root in source.roots:
            found = _under_root(Path(root), model)
            if found is not None:
                return found
    if source.local_paths:
        try:
            path = Path(model).expanduser()
            exists = path.exists()
        except (OSError, ValueError, RuntimeError) as e:  # a name too long, a NUL byte, no home directory
            reason = getattr(e, "strerror", None) or str(e)
            raise ModelConfigNotFound(
                f"cannot use {model[:80]!r} as a path ({reason}); pass a checkpoint directory or a Hugging Face "
                "model id (org/name)"
            ) from None
        if exists:
            directory = path if path.is_dir() else path.parent
            config = directory / "config.json"
            if not config.is_file():
                raise ModelConfigNotFound(
                    f"no config.json in {directory}; pass a checkpoint directory or a Hugging Face model id"
                )
            quant = directory / "hf_quant_config.json"
            return config, (quant if quant.is_file() else None), [], str(config)
    if not source.hub or _looks_like_path(model) or not re.match(_HUB_ID, model):
        if not source.local_paths:
            raise ModelConfigNotFound(f"unknown model {model[:80]!r}; pass a Hugging Face model id (org/name)")
        raise ModelConfigNotFound(
            f"no such directory {model!r}; pass a checkpoint directory or a Hugging Face model id (org/name)"
        )
    shipped = shipped_files(model)
    if shipped is not None:
        config, quant = shipped
        return config, quant, [f"config.json of {model}: the copy shipped with autoselect (read offline)"], \
            f"config.json of {model} (shipped with autoselect)"
    config, quant, notes = hub_files(model, offline=source.offline or hub_offline())
    return config, quant, notes, f"config.json of {model}"


def config_files(model: str, source: ModelSource = CLI_SOURCE) -> tuple[str, ...]:
    """The paths whose change changes what an answer about ``model`` reads: its config.json and
    hf_quant_config.json, the directory holding them (a quantization file added or removed changes
    it), ``root/name`` under every model root (a link moved, a directory replaced or created under
    an earlier root), and for a Hub id its ``refs/main`` (which snapshot the cache serves).
    ``serve`` keeps an answer only while their identity is unchanged.

    :raises ModelConfigNotFound: as :func:`locate_config` does.
    """
    config, quant, _, _ = locate_config(model, source)
    files = [str(config), str(config.parent)]
    if quant is not None:
        files.append(str(quant))
    if source.roots and re.match(_ROOT_NAME, model):
        files += [os.path.join(root, model) for root in source.roots]
    if config.parent.parent.name == "snapshots":  # the Hub cache: models--org--name/snapshots/<commit>/
        files.append(str(config.parent.parent.parent / "refs" / "main"))
    return tuple(dict.fromkeys(files))  # once each: root/name is often the directory itself


#: The config files of a few Hub models, shipped as package data (hub_configs/ORG/NAME/; its
#: SOURCES.md says where each comes from): their ids answer without the network or the Hub cache.
SHIPPED_CONFIGS = Path(__file__).parent / "hub_configs"


def shipped_files(repo_id: str) -> tuple[Path, Path | None] | None:
    """(config.json, hf_quant_config.json or None) of ``repo_id`` when this package ships them, else None.

    ``repo_id`` has matched the Hub id pattern: one or two components, each starting with a letter
    or digit, so the join stays inside :data:`SHIPPED_CONFIGS`."""
    directory = SHIPPED_CONFIGS / repo_id
    config = directory / "config.json"
    if "/" not in repo_id or not config.is_file():
        return None
    quant = directory / "hf_quant_config.json"
    return config, (quant if quant.is_file() else None)


def _under_root(root: Path, name: str) -> tuple[Path, Path | None, list[str], str] | None:
    """The config files of ``root/name`` when that is a checkpoint directory whose real path stays
    inside the root's, and so do the real paths of its config.json and hf_quant_config.json (a
    symbolic link out of the root, of the directory or of either file, does not count: the server
    would read, and its errors quote, a file its operator never offered); else None.

    The files are returned by their real paths, so what was checked is what is read."""
    try:
        real_root = os.path.realpath(root)
        directory = os.path.realpath(os.path.join(real_root, name))
        if not _inside(real_root, directory):
            return None
        config = os.path.realpath(os.path.join(directory, "config.json"))
        if not _inside(real_root, config) or not os.path.isfile(config):
            return None
        quant = os.path.join(directory, "hf_quant_config.json")
        if os.path.lexists(quant):
            quant = os.path.realpath(quant)
            if not _inside(real_root, quant) or not os.path.isfile(quant):
                return None  # a quantization file the root does not hold: refuse rather than read without it
        else:
            quant = None
    except (OSError, ValueError):
        return None
    return Path(config), (Path(quant) if quant else None), [], f"{name}/config.json"


def _inside(real_root: str, real_path: str) -> bool:
    """``real_path`` is ``real_root`` or below it (both already resolved)."""
    return os.path.commonpath([real_root, real_path]) == real_root


# --------------------------------------------------------------------------------------
# Reading one config file
# --------------------------------------------------------------------------------------


#: The largest config.json / hf_quant_config.json read: real ones are a few KB; a bigger file is
#: not a config, and parsing it would only cost time (serve reads configs per request).
MAX_CONFIG_BYTES = 4 << 20


def read_config_json(path: Path, what: str, label: str | None = None) -> dict:
    """The JSON object in ``path``; anything else (unreadable, too big, not UTF-8, not JSON,
    nested too deeply, not an object, a string that is no Unicode text) is one
    :class:`UserError` naming the file as ``label``."""
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
    return check_json(data, label, ModelConfigInvalid)  # a "\ud800" escape is JSON, but no text


# --------------------------------------------------------------------------------------
# The Hugging Face Hub
# --------------------------------------------------------------------------------------


def hub_cache_dir() -> str | None:
    """The Hugging Face Hub cache the environment names (``HF_HUB_CACHE``, ``HF_HOME``), else None."""
    # Read at call time: huggingface_hub fixes its constants at import.
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    return None


def hub_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` says to use the cache only."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hub_unreachable() -> str | None:
    """Why the Hub endpoint (``HF_ENDPOINT``) cannot be reached from here, or None when its name resolves.

    huggingface_hub retries a failed connection five times with back-off (~25 s, a warning line each):
    a name that does not resolve is known at once, and the cache answers or one error line says why.
    """
    import socket
    from urllib.parse import urlsplit

    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    try:
        parts = urlsplit(endpoint)
        host = parts.hostname
        socket.getaddrinfo(host, parts.port or (443 if parts.scheme == "https" else 80), type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError) as e:
        return f"{endpoint} cannot be reached from here ({getattr(e, 'strerror', None) or e}; no network?)"
    return None


def hub_files(repo_id: str, *, offline: bool) -> tuple[Path, Path | None, list[str]]:
    """Download (or find cached) config.json and the optional hf_quant_config.json of ``repo_id``.

    :param offline: the cache only (``HF_HUB_OFFLINE``, or ``serve``); also taken when the Hub's name
        does not resolve here (:func:`hub_unreachable`).
    """
    unreachable = None if offline else hub_unreachable()
    offline = offline or unreachable is not None
    import logging

    import huggingface_hub  # ~45 ms; only for hub ids
    from huggingface_hub import errors as hf_errors

    # its retry warnings are not ours to print: a failure ends in one Error line below
    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)
    cache_dir = hub_cache_dir()
    notes: list[str] = []
    try:
        config = huggingface_hub.hf_hub_download(
            repo_id, "config.json", cache_dir=cache_dir, local_files_only=offline
        )
    except hf_errors.LocalEntryNotFoundError:
        raise ModelConfigNotFound(
            f"could not download config.json for {repo_id!r} and none is cached: {unreachable}; pass a local "
            f"directory holding its config.json (and hf_quant_config.json, if it has one)"
            if unreachable
            else f"no cached config.json for {repo_id!r} and HF_HUB_OFFLINE is set; pass a local "
            f"directory, or run once online to cache it"
            if offline
            else f"could not download config.json for {repo_id!r} (no network?); pass a local directory"
        ) from None
    except (hf_errors.RepositoryNotFoundError, hf_errors.GatedRepoError):
        raise ModelConfigNotFound(
            f"no Hugging Face repository {repo_id!r} (or it is gated); check the id, log in with "
            f"`hf auth login`, or pass a local directory"
        ) from None
    except hf_errors.EntryNotFoundError:
        raise ModelConfigNotFound(
            f"{repo_id!r} has no config.json; pass a local directory or a Hugging Face model id"
        ) from None
    except (hf_errors.HfHubHTTPError, OSError, ValueError) as e:
        raise ModelConfigNotFound(
            f"could not fetch config.json for {repo_id!r}: {str(e).splitlines()[0]}; pass a local directory"
        ) from None

    quant: Path | None = None
    cached = huggingface_hub.try_to_load_from_cache(repo_id, "hf_quant_config.json", cache_dir=cache_dir)
    if isinstance(cached, str):
        quant = Path(cached)
    elif cached is None:  # unknown: not cached, and no "does not exist" marker
        if offline:
            notes.append(
                f"hf_quant_config.json is not in the cache ({'the Hub cannot be reached' if unreachable else 'offline'}): "
                "a legacy ModelOpt NVFP4 checkpoint would be reported as unquantized"
            )
        else:
            try:
                quant = Path(
                    huggingface_hub.hf_hub_download(repo_id, "hf_quant_config.json", cache_dir=cache_dir)
                )
            except hf_errors.EntryNotFoundError:
                quant = None
            except (hf_errors.HfHubHTTPError, OSError, ValueError):
                notes.append("could not fetch hf_quant_config.json; quantization read from config.json only")
    return Path(config), quant, notes
