"""Model profiles: what one MoE checkpoint puts on the all2all (pure Python, no torch).

:func:`load_profile` reads a checkpoint's ``config.json`` (and ``hf_quant_config.json`` when
the checkpoint has one) from a local directory or the Hugging Face Hub — config files only,
never weights, never remote code — and returns a :class:`MoeProfile`: hidden size, routed
experts, top-k, MoE layer count, weight quantization and the activation dtype that crosses the
all2all on each GPU architecture.

The activation dtype follows vLLM's kernel choice per architecture (``docs/facts.md``, "The
activation dtype that crosses the all2all"): it is a table below, :data:`QUANT_FORMATS`, not
code. Quantization schemes are recognised from the blocks that real checkpoints carry
(ModelOpt ``hf_quant_config.json`` and ``quantization_config``, compressed-tensors config
groups, block/per-tensor FP8, MXFP4); anything else is refused with a clear message rather
than guessed, because a wrong dtype here could put a model on a backend that corrupts it.
compressed-tensors groups are matched against the patterns in the same table
(:class:`CtScheme`, vLLM's ``CompressedTensorsConfig._is_*`` predicates). Configs vLLM
refuses to load (block FP8 with static activations) or runs with a different dtype in
different layers (MIXED_PRECISION experts in several formats) are refused here too.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autoselect.errors import InvalidShape, UserError  # InvalidShape: shared (autoselect.workload.Shape)
from autoselect.options import MAX_EXPERTS, MAX_HIDDEN
from autoselect.payload import ACTIVATION_DTYPES

#: GPU architecture families autoselect distinguishes.
GPU_ARCHS = ("sm90", "sm100")


class UnknownGpuArch(UserError):
    "The GPU architecture given is not one autoselect knows."


class ModelConfigNotFound(UserError):
    "No config.json could be found for the model the user named."


class ModelConfigInvalid(UserError):
    "The model's config.json (or hf_quant_config.json) is not valid JSON or not an object."


class DenseModel(UserError):
    "The model has no routed experts, so it has no all2all to choose a backend for."


class MoeFieldsMissing(UserError):
    "config.json lacks the fields a MoE profile needs (hidden size, routed experts, top-k)."


class UnsupportedQuantization(UserError):
    "The checkpoint's quantization scheme is not one autoselect can map to an activation dtype."


# --------------------------------------------------------------------------------------
# Architectures
# --------------------------------------------------------------------------------------

#: Accepted spellings -> family. Compute capabilities 10.x (SM100, SM103) are datacenter
#: Blackwell; 9.0 is Hopper. Consumer Blackwell (SM120) has no NVLink all2all and is refused.
_ARCH_SPELLINGS = {
    "sm90": "sm90", "sm90a": "sm90", "90": "sm90", "9.0": "sm90", "hopper": "sm90",
    "sm100": "sm100", "sm100a": "sm100", "100": "sm100", "10.0": "sm100",
    "sm103": "sm100", "sm103a": "sm100", "103": "sm100", "10.3": "sm100",
    "sm101": "sm100", "101": "sm100", "10.1": "sm100", "sm110": "sm100", "11.0": "sm100",
    "blackwell": "sm100",
}


def normalize_arch(s: str) -> str:
    """Map a GPU architecture spelling to its family, ``"sm90"`` or ``"sm100"``.

    :param s: ``sm90``, ``sm_90``, ``9.0``, ``90``, ``sm100``, ``sm_103``, ``10.3``, ``hopper``,
        ``blackwell`` ...
    :raises UnknownGpuArch: for anything else.
    """
    key = str(s).strip().lower().replace("_", "").replace("compute", "sm")
    if key in _ARCH_SPELLINGS:
        return _ARCH_SPELLINGS[key]
    raise UnknownGpuArch(
        f"unknown GPU architecture {s!r}; use sm90 (Hopper, H100/H200) or sm100 "
        f"(Blackwell, B200/B300/GB200)"
    )


# --------------------------------------------------------------------------------------
# Weight formats -> activation dtype per architecture (the table of docs/facts.md)
# --------------------------------------------------------------------------------------


#: compressed-tensors ``QuantizationArgs`` defaults (a field absent from a config group means this).
CT_ARG_DEFAULTS = {"num_bits": 8, "type": "int", "symmetric": True, "dynamic": False,
                   "group_size": None, "block_structure": None}


@dataclass(frozen=True)
class CtScheme:
    """compressed-tensors quantization args that vLLM runs as one format (its ``_is_*`` predicates).

    Each field of ``weights`` / ``inputs`` must equal the value given (a tuple: any of these).
    ``inputs=None``: the group has no ``input_activations`` (weight-only). Patterns of different
    formats never overlap, so the table order does not matter.
    """

    weights: dict
    inputs: dict | None = None


@dataclass(frozen=True)
class QuantFormat:
    """One weight format: the activation dtype it dispatches on each arch, and why."""

    weight_quant: str
    activation: dict  # {"sm90": dtype, "sm100": dtype}
    why: str
    #: the compressed-tensors config groups that are this format (vLLM 0.32
    #: CompressedTensorsConfig._is_nvfp4_format, _is_mxfp4, _is_fp8_w8a8, _is_fp8_w8a16,
    #: _is_wNa16_group_channel, as CompressedTensorsMoEMethod.get_moe_method applies them)
    compressed_tensors: tuple = ()


#: vLLM's ``_is_nvfp4_format``: 4-bit float, one scale per 16 values plus a global scale.
_CT_NVFP4 = {"type": "float", "num_bits": 4, "strategy": "tensor_group", "group_size": 16, "symmetric": True}
#: vLLM's ``_is_mxfp4``: 4-bit float, one e8m0 scale per 32 values (the OCP MX layout).
_CT_MXFP4 = {"type": "float", "num_bits": 4, "strategy": "group", "group_size": 32, "symmetric": True}
#: vLLM's ``_is_fp8_w8a8`` / ``_is_fp8_w8a16`` weights: static symmetric e4m3.
_CT_FP8_TENSOR = {"type": "float", "num_bits": 8, "strategy": ("tensor", "channel"), "symmetric": True,
                  "dynamic": False}
_CT_FP8_BLOCK128 = {"type": "float", "num_bits": 8, "strategy": "block", "block_structure": [128, 128],
                    "symmetric": True, "dynamic": False}
#: ``_is_fp8_w8a8`` inputs: any dynamic e4m3, or static symmetric per-tensor.
_CT_FP8_INPUTS = (
    {"type": "float", "num_bits": 8, "dynamic": True},
    {"type": "float", "num_bits": 8, "dynamic": False, "symmetric": True, "strategy": "tensor"},
)
#: ``_is_wNa16_group_channel``: static per-channel or per-group integer weights, no input quant.
_CT_INT = {"type": "int", "strategy": ("channel", "group"), "dynamic": False}


#: weight_quant -> QuantFormat. The only place that decides an activation dtype.
QUANT_FORMATS: dict[str, QuantFormat] = {
    q.weight_quant: q
    for q in (
        QuantFormat("bf16", {"sm90": "bf16", "sm100": "bf16"}, "unquantized: vLLM dispatches bf16"),
        QuantFormat("fp16", {"sm90": "fp16", "sm100": "fp16"}, "unquantized fp16 checkpoint"),
        QuantFormat(
            "fp8",
            {"sm90": "fp8", "sm100": "fp8"},
            "FP8 per-tensor/per-token: e4m3 activations",
            tuple(CtScheme(_CT_FP8_TENSOR, inputs) for inputs in _CT_FP8_INPUTS),
        ),
        QuantFormat(
            "fp8_block128",
            {"sm90": "fp8_block128", "sm100": "fp8_block128"},
            "FP8 block [128,128]: e4m3 + one fp32 scale per 128 values",
            tuple(CtScheme(_CT_FP8_BLOCK128, inputs) for inputs in _CT_FP8_INPUTS),
        ),
        QuantFormat(
            "nvfp4",
            {"sm90": "bf16", "sm100": "nvfp4"},
            "NVFP4 W4A4: nvfp4 activations on Blackwell; Hopper has no FP4 kernel and runs "
            "the weights weight-only with bf16 activations",
            (CtScheme(_CT_NVFP4, _CT_NVFP4),),
        ),
        QuantFormat(
            "w4a16_nvfp4",
            {"sm90": "bf16", "sm100": "bf16"},
            "NVFP4 weights only (W4A16): activations stay bf16",
            (CtScheme(_CT_NVFP4, None),),
        ),
        QuantFormat(
            "mxfp4",
            {"sm90": "bf16", "sm100": "bf16"},
            "MXFP4 weights (gpt-oss; compressed-tensors 4-bit float in groups of 32): bf16 "
            "activations on vLLM's default expert kernels, which quantize inside the expert",
            # vLLM's CompressedTensorsW4A4Mxfp4MoEMethod takes MXFP4 weights whatever the input
            # args say, except dynamic fp8 inputs (_is_mxfp4_w4a8_fp8: no format here, refused)
            (CtScheme(_CT_MXFP4, None), CtScheme(_CT_MXFP4, {"type": "float", "num_bits": 4})),
        ),
        QuantFormat(
            "mxfp8",
            {"sm90": "bf16", "sm100": "mxfp8"},
            "MXFP8: mxfp8 activations on Blackwell; Hopper runs the weights with Marlin (bf16 activations)",
        ),
        QuantFormat(
            "fp8_weight_only",
            {"sm90": "bf16", "sm100": "bf16"},
            "FP8 weights only: activations stay bf16",
            (CtScheme({**_CT_FP8_TENSOR, "strategy": ("tensor", "channel", "block")}, None),),
        ),
        QuantFormat(
            "int4_weight_only",
            {"sm90": "bf16", "sm100": "bf16"},
            "4-bit integer weights only (AWQ/GPTQ/W4A16): activations stay bf16",
            (CtScheme({**_CT_INT, "num_bits": 4}, None),),
        ),
        QuantFormat(
            "int8_weight_only",
            {"sm90": "bf16", "sm100": "bf16"},
            "8-bit (or 2/3/5-7-bit) integer weights only: activations stay bf16",
            (CtScheme({**_CT_INT, "num_bits": (2, 3, 5, 6, 7, 8)}, None),),
        ),
    )
}

#: ModelOpt ``quant_algo`` -> weight_quant (vLLM 0.33.0 modelopt.py LINEAR_ALGOS and its
#: ``resolve()``: FP8_PB_WO is 128x128 block weights with dynamic per-128 activations, W8A8).
MODELOPT_ALGOS = {
    "NVFP4": "nvfp4",
    "W4A16_NVFP4": "w4a16_nvfp4",
    "FP8": "fp8",
    "FP8_PER_CHANNEL_PER_TOKEN": "fp8",
    "FP8_PB_WO": "fp8_block128",
    "FP8_BLOCK_SCALES": "fp8_block128",
    "MXFP8": "mxfp8",
}

#: ``quant_method`` values whose activations stay in the model dtype (weight-only int).
WEIGHT_ONLY_INT_METHODS = {
    "awq": "int4_weight_only",
    "awq_marlin": "int4_weight_only",
    "gptq": "int4_weight_only",
    "gptq_marlin": "int4_weight_only",
    "auto-round": "int4_weight_only",
    "bitsandbytes": "int4_weight_only",
}

#: Routed-expert, top-k and hidden-size field names, first match wins (docs/facts.md).
EXPERT_FIELDS = ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")
TOP_K_FIELDS = ("num_experts_per_tok", "experts_per_token", "moe_topk")
HIDDEN_FIELDS = ("hidden_size", "d_model", "n_embd")
#: Where multimodal checkpoints keep the language model's config.
TEXT_CONFIG_KEYS = ("text_config", "language_config", "llm_config")


# --------------------------------------------------------------------------------------
# The profile
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MoeProfile:
    """What one MoE model puts on the all2all: shape, quantization, activation dtype per arch."""

    model: str
    model_type: str | None
    hidden_size: int
    num_experts: int
    top_k: int
    moe_layers: int
    weight_quant: str
    activation_dtypes: dict
    num_layers: int | None = None
    quant_source: str = ""  # where the quantization was read ("config.json quantization_config", ...)
    notes: tuple = field(default_factory=tuple)  # things worth saying (uncertainties)

    def activation_dtype(self, gpu_arch: str) -> str:
        """The dtype this model dispatches over the all2all on ``gpu_arch`` (any spelling)."""
        return self.activation_dtypes[normalize_arch(gpu_arch)]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        d = asdict(self)
        d["notes"] = list(self.notes)
        d["activation_dtypes"] = dict(self.activation_dtypes)
        return d

    @classmethod
    def from_shape(cls, hidden_size, num_experts, top_k, activation_dtype) -> "MoeProfile":
        """A profile for an explicit shape (no checkpoint): one MoE layer, same dtype on every arch.

        :raises InvalidShape: for a non-positive size or an unknown activation dtype.
        """
        values = {"hidden_size": hidden_size, "num_experts": num_experts, "top_k": top_k}
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidShape(f"{name} must be a positive integer, got {value!r}")
        if top_k > num_experts:
            raise InvalidShape(f"top_k ({top_k}) cannot exceed the number of experts ({num_experts})")
        if activation_dtype not in ACTIVATION_DTYPES:
            raise InvalidShape(
                f"unknown activation dtype {activation_dtype!r}; use one of {', '.join(ACTIVATION_DTYPES)}"
            )
        return cls(
            model=f"shape:{hidden_size}x{num_experts}x{top_k}:{activation_dtype}",
            model_type=None,
            hidden_size=hidden_size,
            num_experts=num_experts,
            top_k=top_k,
            moe_layers=1,
            weight_quant=activation_dtype,
            activation_dtypes={arch: activation_dtype for arch in GPU_ARCHS},
            quant_source="explicit shape",
        )


# --------------------------------------------------------------------------------------
# Reading config files
# --------------------------------------------------------------------------------------


#: The largest config.json / hf_quant_config.json read: real ones are a few KB; a bigger file is
#: not a config, and parsing it would only cost time (serve reads configs per request).
MAX_CONFIG_BYTES = 4 << 20


def _read_json(path: Path, what: str, label: str | None = None) -> dict:
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


_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


def _looks_like_path(model: str) -> bool:
    return (
        model.startswith(("/", "./", "../", "~", "."))
        or model.count("/") > 1
        or os.sep in model and not _HUB_ID.match(model)
        or model.endswith(".json")
    )


def hub_cache_dir() -> str | None:
    """The Hugging Face Hub cache the environment names (``HF_HUB_CACHE``, ``HF_HOME``), else None."""
    # Read at call time: huggingface_hub fixes its constants at import.
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    return None


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _hub_files(repo_id: str, *, offline: bool) -> tuple[Path, Path | None, list[str]]:
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
    return _locate(model)[0].parent


def _locate(model: str, source: ModelSource = CLI_SOURCE) -> tuple[Path, Path | None, list[str], str]:
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
    config, quant, notes = _hub_files(model, offline=source.offline or _offline())
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


# --------------------------------------------------------------------------------------
# Shape
# --------------------------------------------------------------------------------------


def _text_config(config: dict) -> dict:
    """The dict that holds the language model's fields (top level, or a nested text config)."""
    if any(k in config for k in EXPERT_FIELDS) or any(k in config for k in HIDDEN_FIELDS):
        return config
    for key in TEXT_CONFIG_KEYS:
        if isinstance(config.get(key), dict):
            return config[key]
    return config


def _first(config: dict, names: tuple[str, ...]):
    for name in names:
        if config.get(name) is not None:
            return name, config[name]
    return None, None


# --------------------------------------------------------------------------------------
# Validation: every field this module reads, checked once, before anything reads it
# --------------------------------------------------------------------------------------

#: The most decoder layers a config may declare (the largest MoE checkpoints have ~100):
#: layer counting walks the layers, so a value like 1e11 must be refused, not counted.
MAX_LAYERS = 4096

#: integer fields -> (lowest, highest) value a real checkpoint can have; null means absent
CONFIG_INTS: dict[str, tuple[int, int]] = {
    **{f: (1, MAX_HIDDEN) for f in HIDDEN_FIELDS},
    **{f: (0, MAX_EXPERTS) for f in EXPERT_FIELDS},  # 0: a dense model
    **{f: (1, MAX_EXPERTS) for f in TOP_K_FIELDS},
    "num_hidden_layers": (0, MAX_LAYERS),
    "first_k_dense_replace": (0, MAX_LAYERS),
    "decoder_sparse_step": (0, MAX_LAYERS),  # 0 counts as 1 (every layer), as before
    "interleave_moe_layer_step": (0, MAX_LAYERS),  # Llama-4: 0 means no MoE layer
}
#: fields holding a list of layer indices
CONFIG_LAYER_LISTS = ("mlp_only_layers", "moe_layers")
#: fields holding a string (printed, or compared as text)
CONFIG_TEXTS = ("model_type", "torch_dtype", "dtype")


def _kind(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


def _shown(value: Any) -> str:
    text = repr(value) if not isinstance(value, (int, float)) or isinstance(value, bool) else json.dumps(value)
    return text if len(text) <= 40 else f"{_kind(value)} of {len(text)} characters"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_config(config: dict, text: dict, hf_quant: dict | None, label: str) -> None:
    """Refuse a config whose fields this module reads are of the wrong type or out of range.

    Every command that loads a checkpoint goes through :func:`load_profile`, and it calls this
    first, so a hostile or broken config.json is one :class:`ModelConfigInvalid` (or
    :class:`UnsupportedQuantization`) naming the field, never a traceback or a wrong answer.
    """
    def bad(field: str, value: Any, want: str) -> ModelConfigInvalid:
        return ModelConfigInvalid(f"{label}: {field} is {_shown(value)}, {want}; fix the config or use an explicit shape")

    for part in (config, text):
        for name, (low, high) in CONFIG_INTS.items():
            value = part.get(name)
            if value is None:
                continue
            if not _is_int(value):
                raise bad(name, value, f"not an integer")
            if not low <= value <= high:
                raise bad(name, value, f"not between {low} and {high}")
        for name in CONFIG_LAYER_LISTS:
            value = part.get(name)
            if value is not None and not (isinstance(value, list) and len(value) <= MAX_LAYERS
                                          and all(_is_int(i) and 0 <= i < MAX_LAYERS for i in value)):
                raise bad(name, value, f"not a list of layer indices (integers 0 to {MAX_LAYERS - 1})")
        freq = part.get("moe_layer_freq")
        if freq is not None and not (
            (_is_int(freq) and 0 <= freq <= MAX_LAYERS)
            or (isinstance(freq, list) and len(freq) <= MAX_LAYERS and all(f in (0, 1) for f in freq))
        ):
            raise bad("moe_layer_freq", freq, f"neither a layer step (0 to {MAX_LAYERS}) nor a list of 0/1 flags")
        for name in CONFIG_TEXTS:
            value = part.get(name)
            if value is not None and not isinstance(value, str):
                raise bad(name, value, "not a string")
    for name in TEXT_CONFIG_KEYS:
        if config.get(name) is not None and not isinstance(config[name], dict):
            raise bad(name, config[name], "not an object")
    experts, top_k = _first(text, EXPERT_FIELDS), _first(text, TOP_K_FIELDS)
    if experts[1] and top_k[1] and top_k[1] > experts[1]:
        raise ModelConfigInvalid(
            f"{label}: {top_k[0]} ({top_k[1]}) exceeds the {experts[1]} routed experts ({experts[0]}); no router "
            "picks more experts than exist: fix the config or use an explicit shape"
        )
    for where, q in (("config.json quantization_config", config.get("quantization_config")),
                     ("config.json text config quantization_config", text.get("quantization_config"))):
        if q is not None:
            _check_quant_block(q, where)
    if hf_quant is not None:
        for key in ("producer", "quantization"):
            if hf_quant.get(key) is not None and not isinstance(hf_quant[key], dict):
                raise UnsupportedQuantization(f"hf_quant_config.json: {key} is {_kind(hf_quant[key])}, not an "
                                              "object; autoselect never guesses a dtype: fix the file or use an explicit shape")
        quant = hf_quant.get("quantization") or {}
        _check_quant_fields(quant, "hf_quant_config.json quantization")


def _check_quant_block(q: Any, where: str) -> None:
    """A ``quantization_config`` must be an object autoselect can read: a string (``"fp8"``), a
    list or an empty object names no scheme, and reading it as unquantized would be a guess."""
    if not isinstance(q, dict):
        raise UnsupportedQuantization(
            f"{where} is {_kind(q)} ({_shown(q)}), not an object with a quant_method; autoselect never guesses "
            "the activation dtype: fix the config or use an explicit shape"
        )
    if not q:
        raise UnsupportedQuantization(
            f"{where} is empty: no quant_method; autoselect never guesses the activation dtype: fix the config "
            "or use an explicit shape"
        )
    _check_quant_fields(q, where)


def _check_quant_fields(q: dict, where: str) -> None:
    """The fields of a quantization block the readers below use, each of the type they need."""
    def bad(field: str, value: Any, want: str) -> UnsupportedQuantization:
        return UnsupportedQuantization(f"{where}: {field} is {_kind(value)} ({_shown(value)}), not {want}; "
                                       "fix the config or use an explicit shape")

    for name in ("quant_method", "quant_algo", "activation_scheme"):
        if q.get(name) is not None and not isinstance(q[name], str):
            raise bad(name, q[name], "a string")
    if q.get("quantization") is not None:
        if not isinstance(q["quantization"], dict):
            raise bad("quantization", q["quantization"], "an object")
        _check_quant_fields(q["quantization"], f"{where}.quantization")
    block = q.get("weight_block_size")
    if block is not None and not (isinstance(block, list) and len(block) <= 4 and all(_is_int(b) for b in block)):
        raise bad("weight_block_size", block, "a list of integers")
    layers = q.get("quantized_layers")
    if layers is not None and not (isinstance(layers, dict) and all(isinstance(v, dict) for v in layers.values())):
        raise bad("quantized_layers", layers, "an object of per-layer objects")
    groups = q.get("config_groups")
    if groups is None:
        return
    if not isinstance(groups, dict) or not all(isinstance(g, dict) for g in groups.values()):
        raise bad("config_groups", groups, "an object of group objects")
    for name, group in groups.items():
        targets = group.get("targets")
        if targets is not None and not (isinstance(targets, list) and all(isinstance(t, str) for t in targets)):
            raise bad(f"config_groups.{name}.targets", targets, "a list of module names")
        for part in ("weights", "input_activations"):
            args = group.get(part)
            if args is not None and not isinstance(args, dict):
                raise bad(f"config_groups.{name}.{part}", args, "an object")
            for key, value in (args or {}).items():
                if key == "block_structure" and value is not None and not (
                        isinstance(value, list) and all(_is_int(v) for v in value)):
                    raise bad(f"config_groups.{name}.{part}.{key}", value, "a list of integers")
                if key in ("num_bits", "group_size") and value is not None and not _is_int(value):
                    raise bad(f"config_groups.{name}.{part}.{key}", value, "an integer")
                if key in ("type", "strategy") and value is not None and not isinstance(value, str):
                    raise bad(f"config_groups.{name}.{part}.{key}", value, "a string")


def count_moe_layers(text: dict) -> int:
    """How many decoder layers have routed experts, as each family's modelling code decides.

    DeepSeek/Kimi/GLM: ``i >= first_k_dense_replace and i % moe_layer_freq == 0``; Qwen-MoE:
    ``(i + 1) % decoder_sparse_step == 0 and i not in mlp_only_layers``; Llama-4:
    ``(i + 1) % interleave_moe_layer_step == 0`` (or the explicit ``moe_layers`` list); Mixtral
    and gpt-oss: every layer. Absent fields are neutral, so one rule covers every family.
    """
    n = int(text.get("num_hidden_layers") or 0)
    explicit = text.get("moe_layers")
    if isinstance(explicit, list) and explicit:
        return len(explicit)
    first_dense = int(text.get("first_k_dense_replace") or 0)
    freq = text.get("moe_layer_freq", 1)
    if isinstance(freq, list):  # per-layer 0/1 flags
        return sum(1 for i, flag in enumerate(freq[:n]) if flag and i >= first_dense)
    freq = int(freq or 1)
    sparse_step = int(text.get("decoder_sparse_step") or 1)
    interleave = int(text.get("interleave_moe_layer_step", 1) or 0)
    if interleave <= 0:  # Llama-4: a step of 0 means no MoE layer at all
        return 0
    mlp_only = set(text.get("mlp_only_layers") or [])
    return sum(
        1
        for i in range(n)
        if i >= first_dense
        and i % freq == 0
        and (i + 1) % sparse_step == 0
        and (i + 1) % interleave == 0
        and i not in mlp_only
    )


# --------------------------------------------------------------------------------------
# Quantization
# --------------------------------------------------------------------------------------


def _modelopt_weight_quant(algo: str | None, quantized_layers: dict | None, where: str) -> str:
    algo = (algo or "").upper()
    if algo == "MIXED_PRECISION":
        expert_algos = Counter(
            str(v.get("quant_algo", "")).upper()
            for k, v in (quantized_layers or {}).items()
            if isinstance(v, dict) and "experts" in k and "shared_expert" not in k
        )
        if not expert_algos:
            raise UnsupportedQuantization(
                f"{where}: ModelOpt MIXED_PRECISION without per-layer entries for the routed "
                f"experts; autoselect cannot tell their format (use an explicit shape instead)"
            )
        formats = {MODELOPT_ALGOS.get(a, a) for a in expert_algos}
        if len(formats) > 1:
            # vLLM quantizes each layer's experts as that layer says, so the dtype on the
            # all2all changes from layer to layer: no one activation dtype is right.
            counts = ", ".join(f"{a}: {n} layer(s)" for a, n in sorted(expert_algos.items()))
            raise UnsupportedQuantization(
                f"{where}: ModelOpt MIXED_PRECISION whose routed experts use different formats "
                f"({counts}): vLLM dispatches a different dtype in different layers and a profile "
                f"has one; use an explicit shape for each dtype instead"
            )
        algo = expert_algos.most_common(1)[0][0]
    if algo in MODELOPT_ALGOS:
        return MODELOPT_ALGOS[algo]
    raise UnsupportedQuantization(
        f"{where}: ModelOpt quant_algo {algo or 'missing'!r} is not supported; known: "
        f"{', '.join(sorted(MODELOPT_ALGOS))} and MIXED_PRECISION"
    )


def _ct_group_for_experts(groups: dict) -> dict | None:
    """The compressed-tensors config group whose targets cover the routed experts."""
    chosen = None
    for group in groups.values():
        if not isinstance(group, dict):
            continue
        targets = [str(t) for t in group.get("targets") or []]
        if any("experts" in t and "shared_expert" not in t for t in targets):
            return group
        if "Linear" in targets and chosen is None:
            chosen = group
    return chosen


def _ct_args(args: dict | None) -> dict | None:
    """A config group's weights / input_activations as compressed-tensors reads them.

    Absent fields take ``QuantizationArgs``' defaults and the strategy is inferred as it infers
    it (no group size: ``tensor``; a positive one: ``group``; -1: ``channel``); ``dynamic``
    (``true`` or ``"local"``) becomes a bool.
    """
    if not args:
        return None
    out = {**CT_ARG_DEFAULTS, **{k: v for k, v in args.items() if v is not None}}
    if out.get("strategy") is None:
        group = out["group_size"]
        out["strategy"] = "tensor" if group is None else "channel" if group == -1 else "group"
    out["dynamic"] = bool(out["dynamic"])
    if isinstance(out["block_structure"], (list, tuple)):
        out["block_structure"] = list(out["block_structure"])
    return out


def _ct_matches(args: dict | None, pattern: dict | None) -> bool:
    if pattern is None or args is None:
        return pattern is None and args is None
    for name, want in pattern.items():
        value = args.get(name)
        if isinstance(want, tuple):
            if value not in want:
                return False
        elif value != want:
            return False
    return True


def _compressed_tensors_weight_quant(q: dict, where: str) -> str:
    group = _ct_group_for_experts(q.get("config_groups") or {})
    if group is None:
        raise UnsupportedQuantization(
            f"{where}: compressed-tensors config without a group covering the experts; "
            f"use an explicit shape instead"
        )
    w, a = _ct_args(group.get("weights")), _ct_args(group.get("input_activations"))
    for fmt in QUANT_FORMATS.values():
        if any(_ct_matches(w, p.weights) and _ct_matches(a, p.inputs) for p in fmt.compressed_tensors):
            return fmt.weight_quant
    weights = _ct_describe(w) if w else "missing"
    inputs = _ct_describe(a) if a else "none (weight-only)"
    raise UnsupportedQuantization(
        f"{where}: compressed-tensors weights {weights} with input activations {inputs} match no "
        f"scheme vLLM runs for MoE layers that autoselect knows (NVFP4: 4-bit float tensor_group "
        f"16; MXFP4: 4-bit float group 32; FP8 tensor/channel/block [128, 128]; integer weight-only); "
        f"use an explicit shape instead"
    )


def _ct_describe(args: dict) -> str:
    """``4-bit float (group, group_size 16)`` for messages."""
    layout = args["strategy"]
    if args.get("group_size") not in (None, -1):
        layout += f", group_size {args['group_size']}"
    if args.get("block_structure"):
        layout += f", block {args['block_structure']}"
    if not args.get("symmetric"):
        layout += ", asymmetric"
    return f"{args['num_bits']}-bit {args['type']} ({layout})"


#: ``activation_scheme`` values vLLM's Fp8Config accepts (its ACTIVATION_SCHEMES).
FP8_ACTIVATION_SCHEMES = ("static", "dynamic")


def _fp8_weight_quant(q: dict, where: str) -> str:
    """``quant_method: fp8`` as vLLM's ``Fp8Config`` reads it, refusing what it refuses to load."""
    scheme = q.get("activation_scheme")
    if scheme not in FP8_ACTIVATION_SCHEMES:
        said = "no activation_scheme" if scheme is None else f"activation_scheme {scheme!r}"
        raise UnsupportedQuantization(
            f"{where}: FP8 with {said}: vLLM refuses to load it (Fp8Config needs 'static' or "
            f"'dynamic'); fix the config or use an explicit shape"
        )
    block = q.get("weight_block_size")
    if block is None:
        return "fp8"
    if list(block) != [128, 128]:
        raise UnsupportedQuantization(
            f"{where}: FP8 block size {list(block)} is not [128, 128]; use an explicit shape"
        )
    if scheme != "dynamic":
        raise UnsupportedQuantization(
            f"{where}: FP8 block {list(block)} weights with activation_scheme 'static': vLLM refuses "
            f"to load it (its Fp8Config runs block-wise FP8 with dynamic activations only); use an "
            f"explicit shape instead"
        )
    return "fp8_block128"


def _weight_quant(config: dict, text: dict, hf_quant: dict | None) -> tuple[str, str]:
    """(weight_quant, where it was read) following vLLM's precedence: config.json first."""
    q = config.get("quantization_config") or text.get("quantization_config")
    if isinstance(q, dict) and q:
        where = "config.json quantization_config"
        method = str(q.get("quant_method", "")).lower()
        if method == "fp8":
            return _fp8_weight_quant(q, where), where
        if method.startswith("modelopt"):
            algo = q.get("quant_algo") or (q.get("quantization") or {}).get("quant_algo")
            groups = q.get("config_groups")
            if str(algo).upper() == "NVFP4" and isinstance(groups, dict) and groups and all(
                isinstance(g, dict) and g.get("input_activations") is None for g in groups.values()
            ):
                # vLLM routes an "NVFP4" export without activation quantization through W4A16
                return "w4a16_nvfp4", where
            return _modelopt_weight_quant(algo, q.get("quantized_layers"), where), where
        if method == "compressed-tensors":
            return _compressed_tensors_weight_quant(q, where), where
        if method == "mxfp4":
            return "mxfp4", where
        if method == "fbgemm_fp8":
            return "fp8", where
        if method in WEIGHT_ONLY_INT_METHODS:
            return WEIGHT_ONLY_INT_METHODS[method], where
        raise UnsupportedQuantization(
            f"{where}: quant_method {method or 'missing'!r} is not supported (known: fp8, modelopt, "
            f"compressed-tensors, mxfp4, fbgemm_fp8, {', '.join(sorted(WEIGHT_ONLY_INT_METHODS))}); "
            f"use an explicit shape instead"
        )
    if hf_quant is not None:
        where = "hf_quant_config.json"
        producer = str((hf_quant.get("producer") or {}).get("name", "")).lower()
        quant = hf_quant.get("quantization") or {}
        if producer and producer != "modelopt":
            raise UnsupportedQuantization(f"{where}: producer {producer!r} is not supported (only modelopt)")
        return _modelopt_weight_quant(quant.get("quant_algo"), quant.get("quantized_layers"), where), where
    dtype = str(text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    return ("fp16" if dtype in ("float16", "half", "fp16") else "bf16"), f"unquantized ({dtype})"


# --------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------


def load_profile(model: str, *, source: ModelSource = CLI_SOURCE) -> MoeProfile:
    """Read a checkpoint's config files and return its :class:`MoeProfile`.

    :param model: a local checkpoint directory (or its ``config.json``), or a Hugging Face
        model id. Hub ids fetch ``config.json`` and, when present, ``hf_quant_config.json`` into
        the Hugging Face cache (honours ``HF_HUB_OFFLINE``, ``HF_HOME``); never weights, never
        remote code.
    :raises ModelConfigNotFound: no such directory / no config.json / unknown or uncached hub id.
    :raises ModelConfigInvalid: malformed JSON.
    :raises DenseModel: no routed experts.
    :raises MoeFieldsMissing: hidden size, experts or top-k missing.
    :raises UnsupportedQuantization: a quantization scheme autoselect cannot map.
    :param source: which names resolve, and where (:class:`ModelSource`; ``serve`` passes its own).
    """
    config_path, quant_path, notes, label = _locate(model, source)
    config = _read_json(config_path, "config.json", label)
    hf_quant = (_read_json(quant_path, "hf_quant_config.json", label.replace("config.json", "hf_quant_config.json"))
                if quant_path is not None else None)
    text = _text_config(config)
    check_config(config, text, hf_quant, label)
    model_type = text.get("model_type") or config.get("model_type")

    expert_field, experts = _first(text, EXPERT_FIELDS)
    hidden_field, hidden = _first(text, HIDDEN_FIELDS)
    top_k_field, top_k = _first(text, TOP_K_FIELDS)
    if expert_field is None or experts == 0:
        if hidden_field is not None:
            raise DenseModel(
                f"{model} ({model_type or 'unknown type'}) is a dense model: it has no routed "
                f"experts, so there is no all2all and --all2all-backend has no effect"
            )
        raise MoeFieldsMissing(
            f"{label} has no MoE fields (hidden_size, one of {', '.join(EXPERT_FIELDS)}, "
            f"num_experts_per_tok); is it a language model's config.json?"
        )
    missing = [n for n, v in (("hidden_size", hidden), ("num_experts_per_tok", top_k)) if v is None]
    if missing:
        raise MoeFieldsMissing(
            f"{label} has routed experts ({expert_field}) but no {' or '.join(missing)}; "
            f"fix the config or use an explicit shape"
        )
    for name, value in ((hidden_field, hidden), (expert_field, experts), (top_k_field, top_k)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise MoeFieldsMissing(f"{label}: {name} is {value!r}, not a positive integer")

    moe_layers = count_moe_layers(text)
    if moe_layers == 0 and text.get("num_hidden_layers"):
        raise DenseModel(
            f"{model} ({model_type or 'unknown type'}) has {expert_field}={experts} but no layer uses "
            f"them (first_k_dense_replace / moe_layer_freq / interleave_moe_layer_step): no all2all runs"
        )
    weight_quant, quant_source = _weight_quant(config, text, hf_quant)
    fmt = QUANT_FORMATS[weight_quant]
    num_layers = text.get("num_hidden_layers")
    return MoeProfile(
        model=model,
        model_type=model_type,
        hidden_size=hidden,
        num_experts=experts,
        top_k=top_k,
        moe_layers=moe_layers,
        weight_quant=weight_quant,
        activation_dtypes=dict(fmt.activation),
        num_layers=int(num_layers) if isinstance(num_layers, int) else None,
        quant_source=quant_source,
        notes=tuple(notes),
    )
