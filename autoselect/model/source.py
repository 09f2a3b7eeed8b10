"""Which model names resolve, and to which config files: local directories, model roots, Hub ids.

:class:`ModelSource` says what a caller accepts (the CLI: a path or a Hub id; ``serve``: Hub ids
from the cache and names under its model roots); :func:`locate_config` turns a name into the
config.json (and hf_quant_config.json) to read.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from autoselect.model.errors import ModelConfigNotFound
from autoselect.model.hub import hub_files, hub_offline

#: a Hugging Face Hub id: ``name`` or ``org/name``
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


def _looks_like_path(model: str) -> bool:
    return (
        model.startswith(("/", "./", "../", "~", "."))
        or model.count("/") > 1
        or os.sep in model and not _HUB_ID.match(model)
        or model.endswith(".json")
    )


@dataclass(frozen=True)
class ModelSource:
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
_ROOT_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*$")
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
    if source.roots and _ROOT_NAME.match(model):
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
    if not source.hub or _looks_like_path(model) or not _HUB_ID.match(model):
        if not source.local_paths:
            raise ModelConfigNotFound(f"unknown model {model[:80]!r}; pass a Hugging Face model id (org/name)")
        raise ModelConfigNotFound(
            f"no such directory {model!r}; pass a checkpoint directory or a Hugging Face model id (org/name)"
        )
    config, quant, notes = hub_files(model, offline=source.offline or hub_offline())
    return config, quant, notes, f"config.json of {model}"


def _under_root(root: Path, name: str) -> tuple[Path, Path | None, list[str], str] | None:
    """The config files of ``root/name`` when that is a checkpoint directory whose real path stays
    inside the root's (a symbolic link out of it does not count); else None."""
    try:
        real_root = os.path.realpath(root)
        directory = os.path.realpath(os.path.join(real_root, name))
        if os.path.commonpath([real_root, directory]) != real_root:
            return None
        config = Path(directory) / "config.json"
        if not config.is_file():
            return None
    except (OSError, ValueError):
        return None
    quant = Path(directory) / "hf_quant_config.json"
    return config, (quant if quant.is_file() else None), [], f"{name}/config.json"
