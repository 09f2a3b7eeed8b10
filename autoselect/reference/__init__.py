"""Published reference measurements: NVIDIA AIConfigurator's NVLink all2all tables as evidence.

The converted records ship inside the package (``data/``, read with stdlib ``sqlite3``):
``systems`` names the reference systems and their host classes (``ref-h200_sxm-x8`` ...),
``query`` returns rows with their evidence kind and provenance, ``derived`` prices vLLM's
allgather_reducescatter from NCCL timings, ``transfer`` carries a backend's rows to another shape, ``convert`` regenerates the file from
aiconfigurator-core (needs pyarrow and pyyaml; not imported here).
"""

from autoselect.reference.derived import agrs_messages
from autoselect.reference.query import (
    AGRS,
    DERIVED,
    PUBLISHED,
    ReferenceData,
    ReferencePoint,
    Source,
    default,
    source_line,
)
from autoselect.reference.datafile import ReferenceDataMissing, attach, canonical_dump, connect
from autoselect.reference.transfer import SHAPE_TRANSFER_LIMIT, TRANSFERRED, Transfer, transfer_points
from autoselect.reference.systems import (
    CLASSES,
    SYSTEMS,
    GpuArchNotOfReference,
    ReferenceClass,
    ReferenceMatch,
    ReferenceSystem,
    ReferenceWorldSizeUnavailable,
    UnknownReferenceClass,
    get_class,
    is_reference_class,
    match_host,
)

__all__ = [
    "AGRS", "CLASSES", "DERIVED", "GpuArchNotOfReference", "PUBLISHED", "SYSTEMS", "ReferenceClass", "ReferenceData", "ReferenceDataMissing",
    "ReferenceMatch", "ReferencePoint", "ReferenceSystem", "ReferenceWorldSizeUnavailable", "Source",
    "UnknownReferenceClass", "agrs_messages", "attach", "canonical_dump", "connect", "default", "get_class",
    "is_reference_class", "match_host", "source_line", "SHAPE_TRANSFER_LIMIT", "TRANSFERRED", "Transfer",
    "transfer_points",
]
