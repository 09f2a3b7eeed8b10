"""Fleet drift: which nodes got slower than their own history or than their host class.

Every node (``machine_id``) is judged on its **newest run**: for each measured point
(backend x shape x tokens per rank x dtype x world size) its median latency is compared

* with the same node's **history** (the median of its older runs' medians), and
* with its **host class** (the median of the other nodes' newest medians; leave-one-out, so
  one slow node cannot drag the reference towards itself), and
* where the node's GPUs are a published reference system, with **NVIDIA's published numbers**
  (:mod:`autoselect.reference.health`: more than 1.5x a published or transferred number is slow,
  whatever the noise; ``versus`` ``"reference"``).

A point is *slow* only beyond the measured noise: the slowdown must exceed both
``min_slowdown`` (default 5 %) and ``noise_k`` (default 3) times the combined relative noise
of the two sides, where each side's noise is the larger of the stored standard error of the
median (``noise_stdrel``) and the run-to-run spread of the reference values (1.4826 x MAD,
relative). A node is flagged when it has slow points; the report lists them with how much.

It also answers "did the recommended backend change since the previous run, and why": for each
known model (the models fleet runs were asked to measure, from their run meta) and host class,
:func:`autoselect.selector.recommend` is run on the rows of the previous fleet run and on the
rows of the newest one (on the token counts the newest run measured, equally weighted), and
the measurements that moved beyond the noise are listed.

Reads only (stdlib ``sqlite3`` through :mod:`db.queries`); no torch, numpy or sqlite-utils.

One concern per module: :mod:`~.points` (a point across runs, observations, the reference median
and the slow threshold), :mod:`~.nodes` (each node's verdict), :mod:`~.recommendations` (pick
changes between fleet runs), :mod:`~.analysis` (``fleet drift``'s report), :mod:`~.status`
(``fleet status``).
"""

from autoselect.fleet.drift.analysis import analyze_at
from autoselect.fleet.drift.nodes import node_drift
from autoselect.fleet.drift.points import observations
from autoselect.fleet.drift.status import status_at

__all__ = [
    "analyze_at", "node_drift", "observations", "status_at",
]
