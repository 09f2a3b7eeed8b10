"""Published reference measurements: NVIDIA AIConfigurator's NVLink all2all tables as evidence.

The converted records ship inside the package (``data/``, read with stdlib ``sqlite3``):
``systems`` names the reference systems and their host classes (``ref-h200_sxm-x8`` ...),
``host`` the host a reference class stands for, ``query`` returns rows with their evidence kind
and provenance, ``derived`` prices vLLM's allgather_reducescatter from NCCL timings, ``transfer``
carries a backend's rows to another shape, ``convert`` regenerates the file from
aiconfigurator-core (needs pyarrow and pyyaml; not imported here).

Every name but :func:`is_reference_class` loads on first use (:mod:`autoselect.lazy`): an answer
from a local database asks only whether its host class is in the reserved ``ref-`` namespace
(a prefix, :mod:`autoselect.hardware`), and never builds the systems, the derivation or the
query (their tables and the NCCL collectives behind them).
"""

from autoselect.hardware import is_reference_class  # the reserved namespace: no table needed
from autoselect.lazy import lazy_exports

_LAZY = {
    "query": ("AGRS", "DERIVED", "ReferenceData", "ReferencePoint", "default"),
    "systems": ("CLASSES", "ReferenceClass", "get_class", "match_host"),
    "host": ("GENERIC_REQUIREMENT", "REQUIREMENTS", "reference_host"),
    "transfer": ("transfer_error", "transfer_points"),
    "footing": ("Footed", "on_common_footing", "summary"),
}
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "AGRS", "CLASSES", "DERIVED", "Footed", "GENERIC_REQUIREMENT", "REQUIREMENTS", "ReferenceClass",
    "ReferenceData", "ReferencePoint", "default", "get_class", "is_reference_class", "match_host", "on_common_footing",
    "reference_host", "summary", "transfer_error", "transfer_points",
]
