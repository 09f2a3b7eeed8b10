"""The calibration of vLLM's default: its measured path against the fused lower end and the derived value.

``perf/calibrate_default.sh`` measures, on a multi-GPU NVLink node, at decode sizes (1-64 tokens
per rank) and prefill sizes (1024-8192), each on vLLM's footing (graph-replayed up to vLLM's
capture size, eager above it):

* ``reference_allgather_fused``: every gathered tensor packed in one all_gather, the reduce_scatter:
  the lower end of the range the derived default prices (one latency floor);
* ``allgather_reducescatter``: vLLM's calls, one all_gather per tensor in one NCCL group (equal
  DP sizes), and vLLM's unequal-size path (per-root broadcasts and reduces: ``--dp-sizes unequal``);
* where vLLM is installed, vLLM's own prepare / finalize for the default (``--via vllm``).

:func:`read_calibration` reads such a run from a results database (``db.queries``; every row the
store keeps) and gives, per phase, the measured ratios the derived default needs:

* ``over_fused``: vLLM's path / the fused variant, measured side by side on one node;
* ``unequal_over_equal``: the unequal-size path / the equal-size path (eager steps that skip DP
  padding);
* ``factor``: vLLM's path / the derived central value of the node's reference class (the value
  ``recommend`` prices the default at, ``autoselect.reference``), the factor
  ``perf/regret_reference.py`` scores the selector over; None where the node is no reference system.

"vLLM's path" is vLLM's own prepare / finalize where measured, else the adapter that makes
vLLM's calls (``truth_path`` says which). Each ratio is the median over the phase's points with
its range (lowest, highest).

    python3 -m bench.calibration --db calibrate_default.db [--run N] [--ref-class ref-h200_sxm-x8] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Callable, NamedTuple

from autoselect.errors import UserError
from autoselect.reference import default, get_class, match_host
from autoselect.rules.versions import NEWEST_VLLM
from db.queries import all_results, connect_readonly, newest_host
from db.records import ADAPTER, EQUAL, FUSED, GROUPED, UNEQUAL, VLLM

AGRS, FUSED_VARIANT = "allgather_reducescatter", "reference_allgather_fused"
#: The token counts per rank the calibration measures, by phase.
DECODE_TOKENS = (1, 2, 4, 8, 16, 32, 64)
PREFILL_TOKENS = (1024, 2048, 4096, 8192)
PHASES = ("decode", "prefill")


def phase_of(tokens_per_rank: int) -> str | None:
    """``decode`` up to 64 tokens per rank, ``prefill`` from 1024; None between (not calibrated)."""
    if tokens_per_rank <= DECODE_TOKENS[-1]:
        return "decode"
    if tokens_per_rank >= PREFILL_TOKENS[0]:
        return "prefill"
    return None


class CalibrationPoint(NamedTuple):
    """One shape at one token count per rank: the default's paths measured there (µs, None: not measured)."""

    hidden: int
    top_k: int
    experts: int
    dtype: str
    world_size: int
    tokens_per_rank: int
    fused_us: float | None
    grouped_us: float | None
    unequal_us: float | None
    vllm_us: float | None
    timing: str | None  # the grouped row's footing: graph or eager
    host_class: str

    @property
    def phase(self) -> str | None:
        return phase_of(self.tokens_per_rank)

    @property
    def truth_us(self) -> float | None:
        """vLLM's own path where measured, else the adapter making vLLM's calls."""
        return self.vllm_us if self.vllm_us is not None else self.grouped_us

    @property
    def truth_path(self) -> str:
        return VLLM if self.vllm_us is not None else ADAPTER


class Spread(NamedTuple):
    """A ratio over a phase's points: the median and the range."""

    median: float
    low: float
    high: float
    points: int

    @classmethod
    def of(cls, values: list[float]) -> "Spread | None":
        return cls(statistics.median(values), min(values), max(values), len(values)) if values else None


class PhaseCalibration(NamedTuple):
    """What one phase's points measured (see the module docstring)."""

    phase: str
    points: int
    truth_path: str  # "vllm" where every point had vLLM's own path, "adapter" where none, else "mixed"
    over_fused: Spread | None
    unequal_over_equal: Spread | None
    factor: Spread | None
    ref_class: str | None

    def to_dict(self) -> dict:
        out = self._asdict()
        for key in ("over_fused", "unequal_over_equal", "factor"):
            out[key] = None if out[key] is None else out[key]._asdict()
        return out


def read_points(conn, *, run_id: int | None = None) -> list[CalibrationPoint]:
    """The default's ok micro rows (newest per footing and point), grouped into :class:`CalibrationPoint`."""
    rows = [r for r in all_results(conn, statuses=("ok",))
            if r.backend in (AGRS, FUSED_VARIANT) and not r.illegal and not r.knobs
            and (run_id is None or r.run_id == run_id)]
    newest: dict[tuple, object] = {}
    for r in sorted(rows, key=lambda r: (r.created_at or "", r.id)):
        key = (r.host_class, r.hidden, r.top_k, r.experts, r.activation_dtype, r.world_size, r.tokens_per_rank)
        if r.backend == FUSED_VARIANT:
            path = "fused"
        elif r.via == VLLM:
            path = "vllm" if r.dp_sizes == EQUAL else None
        elif r.calls == GROUPED:
            path = "grouped" if r.dp_sizes == EQUAL else "unequal" if r.dp_sizes == UNEQUAL else None
        else:
            path = "fused" if r.calls == FUSED else None  # an old packed row filed under the default's name
        if path is not None:
            newest.setdefault(key, {})[path] = r
    points = []
    for key, paths in sorted(newest.items()):
        host_class, hidden, top_k, experts, dtype, world, tokens = key
        us = {path: row.latency_us_p50 for path, row in paths.items()}
        grouped = paths.get("grouped")
        points.append(CalibrationPoint(hidden, top_k, experts, dtype, world, tokens, us.get("fused"), us.get("grouped"),
                                       us.get("unequal"), us.get("vllm"), None if grouped is None else grouped.timing,
                                       host_class))
    return points


def derived_central(ref_class: str, vllm_version: str | None = None) -> Callable[[CalibrationPoint], float | None]:
    """The derived default's central value for a point on ``ref_class`` (``autoselect.reference``), or None."""
    data, cache = default(), {}

    def central(p: CalibrationPoint) -> float | None:
        key = (p.hidden, p.top_k, p.experts, p.dtype, p.world_size)
        if key not in cache:
            rows = data.derived_agrs(ref_class, hidden=p.hidden, top_k=p.top_k, experts=p.experts, dtype=p.dtype,
                                     world_size=p.world_size, tokens=PREFILL_TOKENS + DECODE_TOKENS,
                                     vllm_version=vllm_version or NEWEST_VLLM)
            cache[key] = {r.tokens_per_rank: r.latency_us for r in rows if not r.bound}
        return cache[key].get(p.tokens_per_rank)

    return central


def phase_calibration(points: list[CalibrationPoint], *, central: Callable | None = None,
                      ref_class: str | None = None) -> dict[str, PhaseCalibration]:
    """Per phase: vLLM's path over the fused variant, the unequal over the equal path, and the factor over
    ``central`` (the derived value, when given)."""
    out = {}
    for phase in PHASES:
        mine = [p for p in points if p.phase == phase and p.truth_us is not None]
        if not mine:
            continue
        paths = {p.truth_path for p in mine}
        over_fused = [p.truth_us / p.fused_us for p in mine if p.fused_us]
        unequal = [p.unequal_us / p.grouped_us for p in mine if p.unequal_us is not None and p.grouped_us]
        factors = []
        if central is not None:
            for p in mine:
                c = central(p)
                if c:
                    factors.append(p.truth_us / c)
        out[phase] = PhaseCalibration(phase, len(mine), paths.pop() if len(paths) == 1 else "mixed",
                                      Spread.of(over_fused), Spread.of(unequal), Spread.of(factors),
                                      ref_class if factors else None)
    return out


def reference_class_of(conn, points: list[CalibrationPoint]) -> str | None:
    """The reference class of the machines the points were measured on (one class for all), or None."""
    classes = {p.host_class for p in points}
    if len(classes) != 1:
        return None
    host = newest_host(conn, classes.pop())
    if host is None:
        return None
    match = match_host(host, next((p.world_size for p in points), None))
    return None if match is None else match.ref_class.name


def read_calibration(db_path, *, run_id: int | None = None, ref_class: str | None = None,
                     vllm_version: str | None = None) -> dict[str, PhaseCalibration]:
    """``perf/calibrate_default.sh``'s rows in the database at ``db_path``, per phase (see the module docstring).

    :param ref_class: the reference class whose derived value the factor is over (default: the class of
        the host that measured the rows, when it is a reference system).
    :param vllm_version: the release whose collectives the derived value prices (default: the newest known).
    """
    conn = connect_readonly(db_path)
    try:
        points = read_points(conn, run_id=run_id)
        if ref_class is None:
            ref_class = reference_class_of(conn, points)
    finally:
        conn.close()
    if ref_class is not None:
        get_class(ref_class)  # an unknown name is one Error: line
    central = derived_central(ref_class, vllm_version) if ref_class else None
    return phase_calibration(points, central=central, ref_class=ref_class)


def _spread(s: Spread | None) -> str:
    return "-" if s is None else f"x{s.median:.3f} [{s.low:.3f}, {s.high:.3f}]"


def render(calibration: dict[str, PhaseCalibration]) -> list[str]:
    """The table ``python -m bench.calibration`` prints: one line per phase."""
    lines = [f"{'phase':8} {'points':>6}  {'vLLM path':9}  {'path / fused':26}  {'unequal / equal':26}  "
             f"factor over the derived central value"]
    for c in calibration.values():
        factor = _spread(c.factor) + (f" ({c.ref_class})" if c.ref_class else "")
        lines.append(f"{c.phase:8} {c.points:>6}  {c.truth_path:9}  {_spread(c.over_fused):26}  "
                     f"{_spread(c.unequal_over_equal):26}  {factor}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.calibration", description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True, help="the results database perf/calibrate_default.sh wrote")
    ap.add_argument("--run", type=int, help="only this run's rows")
    ap.add_argument("--ref-class", help="the reference class the factor is over (default: the measuring host's)")
    ap.add_argument("--vllm-version", help="the release whose collectives the derived value prices")
    ap.add_argument("--json", action="store_true", help="print the JSON document instead of the table")
    args = ap.parse_args(argv)
    try:
        calibration = read_calibration(args.db, run_id=args.run, ref_class=args.ref_class,
                                       vllm_version=args.vllm_version)
    except UserError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"schema_version": 1, "phases": {k: v.to_dict() for k, v in calibration.items()}}, indent=2))
    else:
        print("\n".join(render(calibration)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
