"""The report's own user mistakes (one class each; the CLI prints the message as one ``Error:``
line). Mistakes several commands share (an unknown backend or host class, a missing GPU arch)
are :mod:`autoselect.errors`' classes."""

from __future__ import annotations

from autoselect.errors import UserError
from autoselect.reference.systems import GpuArchNotOfReference  # noqa: F401  (shared with recommend)


class NothingToReport(UserError):
    "The database holds no measurement of the model's shape, so there is nothing to draw."


class ReportOutputNotWritable(UserError):
    "The --out directory cannot be created or written."


class ReportPackagesMissing(UserError):
    "matplotlib / plotext (the `report` extra) is not installed."


class FleetTokensNotMeasured(UserError):
    "--fleet-tokens names a token count no node measured for the fleet backend."
