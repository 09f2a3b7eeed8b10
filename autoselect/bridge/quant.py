"""vLLM's reading of a checkpoint's quantization, in autoselect's vocabulary, and where the two differ.

The worker names a scheme from vLLM's own config class (:mod:`autoselect.bridge.worker_quant`);
here that scheme becomes one of autoselect's weight formats (:data:`autoselect.model.QUANT_FORMATS`)
and :func:`cross_check` compares it with the :class:`~autoselect.model.MoeProfile` autoselect read.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from autoselect.bridge.protocol import OpFailed, QuantAnswer, VllmInfo

#: vLLM scheme (as the worker names it) -> autoselect weight format. Unquantized checkpoints
#: take their dtype from the config (bf16 / fp16).
SCHEME_WEIGHT_QUANT = {
    "nvfp4": "nvfp4",
    "w4a16_nvfp4": "w4a16_nvfp4",
    "fp8": "fp8",
    "fp8_block128": "fp8_block128",
    "fp8_weight_only": "fp8_weight_only",
    "mxfp4": "mxfp4",
    "mxfp8": "mxfp8",
    "int4_weight_only": "int4_weight_only",
    "int8_weight_only": "int8_weight_only",
}
#: Config dtypes of unquantized checkpoints -> autoselect weight format.
UNQUANTIZED_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "bf16", None: "bf16"}


@dataclass(frozen=True)
class QuantClassification:
    """How vLLM reads one checkpoint's quantization."""

    model_dir: str
    ok: bool
    method: str | None = None  # vLLM's quantization method name (modelopt_fp4, compressed-tensors, fp8 ...)
    config_class: str | None = None  # the vLLM class that took the config (ModelOptNvFp4Config ...)
    scheme: str | None = None  # the worker's scheme name
    weight_quant: str | None = None  # the same, in autoselect's vocabulary (None: no equivalent)
    detail: dict = field(default_factory=dict)
    error: str | None = None  # vLLM refused the config
    notes: tuple[str, ...] = ()

    @classmethod
    def of(cls, model_dir: str, answer: QuantAnswer | OpFailed) -> "QuantClassification":
        """The worker's answer for ``model_dir`` (as the caller named it); a crash there is ``ok=False``."""
        if isinstance(answer, OpFailed):
            return cls(model_dir=model_dir, ok=False, error=answer.error)
        return cls(model_dir=model_dir, ok=answer.ok, method=answer.method, config_class=answer.config_class,
                   scheme=answer.scheme, weight_quant=weight_quant_of(answer) if answer.ok else None,
                   detail=answer.detail, error=answer.error, notes=answer.notes)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        d = asdict(self)
        d["notes"] = list(self.notes)
        return d


def weight_quant_of(answer: QuantAnswer) -> str | None:
    """autoselect's weight format for the worker's scheme (None: autoselect has none)."""
    if answer.scheme == "unquantized":
        return UNQUANTIZED_DTYPES.get(answer.torch_dtype, "bf16")
    return SCHEME_WEIGHT_QUANT.get(answer.scheme)


def cross_check(profile, vllm_class: QuantClassification) -> list[str]:
    """Where autoselect's profile and vLLM's classes disagree (empty when they agree).

    Compared: the weight format (which decides the activation dtype per arch in
    ``autoselect.model.QUANT_FORMATS``). Each disagreement is one sentence.
    """
    if not vllm_class.ok:
        return [f"vLLM refuses this checkpoint's quantization config ({vllm_class.error}) "
                f"while autoselect read it as {profile.weight_quant}"]
    if vllm_class.weight_quant is None:
        return [f"vLLM reads the quantization as {vllm_class.scheme} ({vllm_class.config_class}), "
                f"which autoselect has no format for; autoselect assumed {profile.weight_quant}"]
    if vllm_class.weight_quant != profile.weight_quant:
        return [f"vLLM reads the weights as {vllm_class.weight_quant} ({vllm_class.config_class}"
                f"{_detail(vllm_class)}) but autoselect read {profile.weight_quant} "
                f"from {profile.quant_source or 'the config'}: the activation dtype on the all2all "
                "may differ from what autoselect assumes"]
    return []


def _detail(c: QuantClassification) -> str:
    algo = c.detail.get("quant_algo")
    return f", quant_algo {algo}" if algo else ""


@dataclass(frozen=True)
class CrossCheck:
    """vLLM's reading of one model next to autoselect's, and where they differ."""

    vllm: VllmInfo
    classification: QuantClassification
    disagreements: tuple[str, ...]

    @property
    def agrees(self) -> bool:
        """True when vLLM reads the same weight format as autoselect."""
        return not self.disagreements

    def to_dict(self) -> dict[str, Any]:
        """JSON form: vllm, classification, agrees, disagreements."""
        return {"vllm": self.vllm.to_dict(), "classification": self.classification.to_dict(),
                "agrees": self.agrees, "disagreements": list(self.disagreements)}
