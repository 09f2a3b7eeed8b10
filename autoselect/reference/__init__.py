"""Published reference measurements: NVIDIA AIConfigurator's NVLink all2all tables as evidence.

The converted records ship inside the package (``data/``, read with stdlib ``sqlite3``):
``systems`` names the reference systems and their host classes (``ref-h200_sxm-x8`` ...),
``query`` returns rows with their evidence kind and provenance, ``derived`` prices vLLM's
allgather_reducescatter from NCCL timings, ``transfer`` carries a backend's rows to another shape, ``convert`` regenerates the file from
aiconfigurator-core (needs pyarrow and pyyaml; not imported here).
"""

from autoselect.reference.query import AGRS, DERIVED, ReferenceData, ReferencePoint, default
from autoselect.reference.systems import CLASSES, ReferenceClass, get_class, is_reference_class, match_host
from autoselect.reference.transfer import transfer_points

__all__ = [
    "AGRS", "CLASSES", "DERIVED", "ReferenceClass", "ReferenceData", "ReferencePoint", "default", "get_class",
    "is_reference_class", "match_host", "transfer_points",
]
