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

from autoselect.report.terminal import terminal_report
from autoselect.report.write import make_report

__all__ = [
    "make_report", "terminal_report",
]
