""":class:`MoeProfile`: what one MoE checkpoint (or an explicit shape) puts on the all2all."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from autoselect.model.arch import GPU_ARCHS, normalize_arch
from autoselect.model.errors import InvalidShape
from autoselect.payload import ACTIVATION_DTYPES


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
