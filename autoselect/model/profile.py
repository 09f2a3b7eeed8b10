"""The profile: what one MoE checkpoint (or an explicit shape) puts on the all2all, and :func:`load_profile`.

:func:`load_profile` reads a checkpoint's config files into a :class:`MoeProfile` in four steps,
each one call into one module: which files, read bounded (:mod:`~autoselect.model.source`); the
fields, validated once and then read, and the MoE layer count (:mod:`~autoselect.model.config`);
the weight format (:mod:`~autoselect.model.quantization`); its activation dtype per GPU
architecture (:data:`~autoselect.model.formats.QUANT_FORMATS`). The architecture spellings
(:func:`normalize_arch`) live here: a profile answers per architecture.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from autoselect.model.config import (EXPERT_FIELDS, HIDDEN_FIELDS, TOP_K_FIELDS, check_config, count_moe_layers,
                                     first_field, text_config)
from autoselect.errors import InvalidShape
from autoselect.model.errors import DenseModel, MoeFieldsMissing, UnknownGpuArch
from autoselect.model.formats import QUANT_FORMATS
from autoselect.model.quantization import detect_weight_quant
from autoselect.model.source import CLI_SOURCE, ModelSource, locate_config, read_config_json
from autoselect.payload import ACTIVATION_DTYPES

# --------------------------------------------------------------------------------------
# GPU architectures
# --------------------------------------------------------------------------------------

#: GPU architecture families autoselect distinguishes.
GPU_ARCHS = ("sm90", "sm100")

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
# The profile
# --------------------------------------------------------------------------------------


def shape_label(hidden: int, top_k: int, experts: int, dtype: str) -> str:
    """The one spelling of an MoE shape in what autoselect prints: ``H7168 top8 E256 fp8_block128``
    (every number named, so no order to remember). ``tune --model shape:HIDDENxEXPERTSxTOPK:DTYPE``
    stays an input grammar (:meth:`autoselect.workload.Shape.parse`); answers, messages and docs
    spell a shape this way."""
    return f"H{hidden} top{top_k} E{experts} {dtype}"


class MoeProfile(NamedTuple):
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
    notes: tuple = ()  # things worth saying (uncertainties)

    def activation_dtype(self, gpu_arch: str) -> str:
        """The dtype this model dispatches over the all2all on ``gpu_arch`` (any spelling)."""
        return self.activation_dtypes[normalize_arch(gpu_arch)]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        d = self._asdict()
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
            model=shape_label(hidden_size, top_k, num_experts, activation_dtype),
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
# Reading a checkpoint
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
    config_path, quant_path, notes, label = locate_config(model, source)
    config = read_config_json(config_path, "config.json", label)
    hf_quant = (read_config_json(quant_path, "hf_quant_config.json", label.replace("config.json", "hf_quant_config.json"))
                if quant_path is not None else None)
    text = text_config(config)
    check_config(config, text, hf_quant, label)
    model_type = text.get("model_type") or config.get("model_type")

    # check_config has refused every shape field that is not an integer in range
    expert_field, experts = first_field(text, EXPERT_FIELDS)
    hidden_field, hidden = first_field(text, HIDDEN_FIELDS)
    _, top_k = first_field(text, TOP_K_FIELDS)
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
    moe_layers = count_moe_layers(text)
    if moe_layers == 0 and text.get("num_hidden_layers"):
        raise DenseModel(
            f"{model} ({model_type or 'unknown type'}) has {expert_field}={experts} but no layer uses "
            f"them (first_k_dense_replace / moe_layer_freq / interleave_moe_layer_step): no all2all runs"
        )
    weight_quant, quant_source = detect_weight_quant(config, text, hf_quant)
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
