"""Saying that a reader skipped stored rows that break the schema (:mod:`db.fields`)."""

from __future__ import annotations

import warnings

from db.fields import SkippedRows


def warn_skipped(what: str, skipped: list[str]) -> None:
    """Say (a :class:`db.fields.SkippedRows` warning) that a reader skipped rows breaking the schema."""
    if not skipped:
        return
    first = "; ".join(skipped[:2]) + (f"; and {len(skipped) - 2} more" if len(skipped) > 2 else "")
    warnings.warn(SkippedRows(
        f"skipped {len(skipped)} stored {what} that break the schema ({first}); `autoselect db check` lists "
        "them, `autoselect db drop-run RUN --yes` removes a run"), stacklevel=3)
