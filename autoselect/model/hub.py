"""The Hugging Face Hub side: its cache directory, offline mode, and fetching a repository's config files."""

from __future__ import annotations

import os
from pathlib import Path

from autoselect.model.errors import ModelConfigNotFound


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


def hub_files(repo_id: str, *, offline: bool) -> tuple[Path, Path | None, list[str]]:
    """Download (or find cached) config.json and the optional hf_quant_config.json of ``repo_id``.

    :param offline: the cache only (``HF_HUB_OFFLINE``, or ``serve``).
    """
    import huggingface_hub  # ~45 ms; only for hub ids
    from huggingface_hub import errors as hf_errors

    cache_dir = hub_cache_dir()
    notes: list[str] = []
    try:
        config = huggingface_hub.hf_hub_download(
            repo_id, "config.json", cache_dir=cache_dir, local_files_only=offline
        )
    except hf_errors.LocalEntryNotFoundError:
        raise ModelConfigNotFound(
            f"no cached config.json for {repo_id!r} and HF_HUB_OFFLINE is set; pass a local "
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
                "hf_quant_config.json is not in the cache (offline): a legacy ModelOpt NVFP4 "
                "checkpoint would be reported as unquantized"
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
