"""Figures of the measurements and the decision, and one self-contained HTML page.

``autoselect report`` reads the store (stdlib ``sqlite3`` through :mod:`db.queries`), asks the
selector for its recommendation, and draws:

- ``latency.png``: round-trip latency vs tokens per rank, one line per backend, log-log, the
  p10–p90 band around each median, crossovers annotated, the fastest legal backend of each
  workload bucket starred; illegal / incorrect / unavailable backends named as such in the legend;
- ``phases.png``: dispatch and combine latency, side by side;
- ``bandwidth.png``: logical bandwidth as a fraction of the host's NVLink peak (GB/s on a host
  without one, labelled so);
- ``fleet.png`` (fleet databases only): per-node latency of one shape and backend, nodes the
  drift check flags in red;
- ``report.html``: the recommendation, the ``vllm serve`` command, the candidate table and the
  figures, images embedded as base64 data URIs (one file to mail or attach to a ticket).

NVIDIA's published reference measurements of the same shape (:mod:`autoselect.reference`) are
drawn dashed beside the local lines when the host class's GPUs are a reference system, or alone
for a reference class (``--host-class ref-h200_sxm-x8``); every number says whether it was
measured here, published, derived, transferred or estimated.

The flow is the module list: ``data`` reads the store and the selector into a
:class:`ReportData` (``series``, ``nodes`` and ``reference_curves`` are the analysis it uses: one
series per backend, crossovers, the fleet view, NVIDIA's published curves of the same shape);
``figures``, ``html`` and ``terminal`` draw it (``style`` holds the colours, line styles and
wording they share); ``write`` puts the files on disk. matplotlib (Agg backend) and plotext are
imported inside the functions that draw, so importing this package stays cheap. Printers only read: nothing here writes to the database.
"""

from autoselect.report.data import WORKLOAD_KINDS, BucketMark, ReportData, bucket_marks, collect
from autoselect.report.errors import (
    FleetTokensNotMeasured,
    GpuArchNotOfReference,
    NothingToReport,
    ReportOutputNotWritable,
    ReportPackagesMissing,
)
from autoselect.report.figures import (
    FIGURES,
    bandwidth_figure,
    fleet_figure,
    latency_figure,
    message_figure,
    phases_figure,
)
from autoselect.report.html import FIGURE_CAPTIONS, render_html
from autoselect.report.nodes import FleetNode, FleetView, flag_drift, fleet_view
from autoselect.report.reference_curves import ReferenceCurve, ReferenceView, reference_view
from autoselect.report.series import (
    BackendSeries,
    Crossover,
    bandwidth_gbps,
    build_series,
    crossovers,
    interpolate_latency,
    newest_per_token,
)
from autoselect.report.style import (
    BACKEND_STYLE,
    BANDWIDTH_FORMULA,
    DPI,
    ESTIMATED_MARK,
    EVIDENCE_WORDS,
    EXTRA_COLOURS,
    FAILED_MARKER,
    FAILURE_ORDER,
    FIGSIZE_IN,
    MEASURED_LINE,
    NOT_CANDIDATE_LINE,
    REFERENCE_LINE,
    STATE_LABEL,
    backend_style,
)
from autoselect.report.terminal import terminal_chart, terminal_report
from autoselect.report.write import ReportFiles, figure_names, make_report, write_report

__all__ = [
    "BACKEND_STYLE", "BANDWIDTH_FORMULA", "DPI", "ESTIMATED_MARK", "EVIDENCE_WORDS", "EXTRA_COLOURS", "FAILED_MARKER",
    "FAILURE_ORDER", "FIGSIZE_IN", "FIGURES", "FIGURE_CAPTIONS", "MEASURED_LINE", "NOT_CANDIDATE_LINE",
    "REFERENCE_LINE", "STATE_LABEL", "WORKLOAD_KINDS", "BackendSeries", "BucketMark", "Crossover", "FleetNode",
    "FleetTokensNotMeasured", "FleetView", "GpuArchNotOfReference", "NothingToReport", "ReferenceCurve",
    "ReferenceView", "ReportData", "ReportFiles", "ReportOutputNotWritable", "ReportPackagesMissing", "backend_style",
    "bandwidth_figure", "bandwidth_gbps", "bucket_marks", "build_series", "collect", "crossovers", "figure_names",
    "flag_drift", "fleet_figure", "fleet_view", "interpolate_latency", "latency_figure", "make_report",
    "message_figure", "newest_per_token", "phases_figure", "reference_view", "render_html", "terminal_chart",
    "terminal_report", "write_report",
]
