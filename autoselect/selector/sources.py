"""Which evidence sources a recommendation reads, strongest first.

Always this host class's measurements (:class:`~autoselect.selector.evidence.MeasuredEvidence`);
then NVIDIA's published reference (:class:`~autoselect.selector.reference_evidence.ReferenceEvidence`)
for a reference class, or for a host whose GPUs are a reference system when the host class has no
local measurement of the shape at the EP size (local measurements always win).
"""

from __future__ import annotations

import sqlite3

from autoselect.selector.evidence import EvidenceSource, MeasuredEvidence
from autoselect.selector.reference_evidence import ReferenceEvidence, choose_reference
from autoselect.selector.target import RecommendTarget
from db.queries import StoredResult


def sources_for(target: RecommendTarget, conn: sqlite3.Connection | None,
                rows: list[StoredResult] | None = None) -> list[EvidenceSource]:
    """The evidence sources of a recommendation (``rows`` instead of the store's, for
    leave-one-out studies)."""
    measured = MeasuredEvidence(target, rows) if rows is not None else MeasuredEvidence.from_store(target, conn)
    choice = choose_reference(target, len(measured.rows))
    return [measured] + ([ReferenceEvidence(target, choice)] if choice is not None else [])
