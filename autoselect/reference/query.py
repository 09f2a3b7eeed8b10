"""Rows of the reference data for one reference class, shape, dtype, world size and token counts.

Every row is a :class:`ReferencePoint` that says what it is: its evidence kind (``published``:
a number in NVIDIA's tables; ``derived``: computed here from published NCCL timings, never a
measured all2all), its provenance (the :class:`Source` rows it came from), how close the timed
code is to what vLLM runs (``fidelity``), and the one line a user sees, e.g.
``AIConfigurator 0.12.0, vLLM 0.24.0 DeepEP on 8×H200, collected 2026-08-31``.

Stdlib only (``sqlite3`` on the packaged read-only file): this is on ``recommend``'s path.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any, Iterable, NamedTuple

from autoselect.reference import crosssystem, datafile, derived
from autoselect.rules.agrs_collectives import collectives_for
from autoselect.rules.versions import NEWEST_VLLM
from autoselect.reference.systems import CLASSES, SYSTEMS, ReferenceClass, ReferenceSystem, get_class
from autoselect.reference.tables import FIDELITY
from autoselect.reference.transfer import TRANSFERRED, Transfer, transfer_error, transfer_points

PUBLISHED = "published"
DERIVED = "derived"
AGRS = "allgather_reducescatter"

#: Short framework labels for the source line, per table kind.
_KIND_LABEL = {"vllm_moe_a2a": "DeepEP", "nccl": "all_gather + reduce_scatter (nccl-tests)"}


class Source(NamedTuple):
    """One published table: where it is, who measured what, how (a ``sources`` row)."""

    id: int
    kind: str
    system: str
    table_path: str
    table_sha256: str
    table_rows: int
    package: str
    package_version: str
    framework: str
    framework_version: str
    device: str
    collected_at: str | None
    provenance: str | None
    image: str | None
    image_digest: str | None
    source_commit: str | None
    collector_ref: str | None
    collector: str
    how_measured: str
    columns: dict
    note: str = ""

    def what(self, backend: str | None = None) -> str:
        """``vLLM 0.24.0 DeepEP`` / ``TensorRT-LLM 1.2.0rc6 NVLinkOneSided`` / ``NCCL 2.29.2 ...``."""
        label = _KIND_LABEL.get(self.kind)
        if label is None:
            label = {"flashinfer_nvlink_one_sided": "NVLinkOneSided",
                     "flashinfer_nvlink_two_sided": "NVLinkTwoSided"}.get(backend or "", "NVLink all-to-all")
        return f"{self.framework} {self.framework_version} {label}"

    def when(self) -> str:
        return f"collected {self.collected_at}" if self.collected_at else "collection date not recorded"

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()


class ReferencePoint(NamedTuple):
    """One reference number: a round trip at one token count, with its phases and provenance."""

    ref_class: str
    system: str
    backend: str
    evidence: str  # "published" | "derived"
    world_size: int
    hidden: int
    top_k: int
    experts: int
    wire_dtype: str
    combine_dtype: str
    tokens_per_rank: int
    routing: str
    latency_us: float  # the round trip vLLM runs per step (two-sided: prepare + dispatch + combine)
    dispatch_us: float
    combine_us: float
    prepare_us: float | None
    sources: tuple[Source, ...]
    source_line: str
    fidelity: str
    extra: dict = {}  # other published phases (two-sided combine_low_precision_us); never mutate
    derivation: dict | None = None  # derived rows: formula, message sizes, NCCL points read
    raw: dict | None = None  # published rows: the table's latencies as published, in its unit
    range_us: tuple[float, float] | None = None  # derived rows: (lower, upper); latency_us is the central value
    bound: bool = False  # derived rows: latency_us is a lower bound only (no NCCL rows at this world size)
    band: float | None = None  # a transferred row's relative band where it is not its backend's shape-transfer error

    @property
    def arch(self) -> str:
        """The arch of the row's system (what vLLM's CUDA-graph ceiling depends on)."""
        return SYSTEMS[self.system].arch if self.system in SYSTEMS else "sm90"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (sources as dicts)."""
        d = self._asdict()
        d["sources"] = [s.to_dict() for s in self.sources]
        return d


def _gpus(world_size: int, ref: ReferenceClass) -> str:
    s = ref.system
    text = f"{world_size}×{s.label}"
    if ref.domain == "nvl72" and world_size > s.gpus_per_node:
        text += f" ({-(-world_size // s.gpus_per_node)} trays, MNNVL)"
    return text


def source_line(source: Source, backend: str, world_size: int, ref: ReferenceClass, *, evidence: str,
                rows_gpus: int | None = None) -> str:
    """The line a user sees next to a reference number (``rows_gpus``: a derived lower bound read
    from the NCCL rows at that many GPUs)."""
    pkg = f"AIConfigurator {source.package_version}"
    if evidence == DERIVED and rows_gpus is not None and rows_gpus != world_size:
        return (f"lower bound for {_gpus(world_size, ref)} from {pkg} {source.what(backend)} on "
                f"{_gpus(rows_gpus, ref)}, {source.when()}; no NCCL rows at {world_size} GPUs, not a measured all2all")
    if evidence == DERIVED:
        return (f"derived from {pkg} {source.what(backend)} on {_gpus(world_size, ref)}, "
                f"{source.when()}; not a measured all2all")
    return f"{pkg}, {source.what(backend)} on {_gpus(world_size, ref)}, {source.when()}"


class ShapeRows(NamedTuple):
    """One backend's reference rows for one shape at one EP size (:meth:`ReferenceData.for_shape`)."""

    points: list[ReferencePoint]  # the shape's published rows, else those transferred from other shapes
    evidence: str  # PUBLISHED or TRANSFERRED
    refused: str | None  # why nothing was transferred (None when the shape is published)
    any_published: bool  # the system publishes the backend at this EP size in some shape


_POINT_SQL = (
    "SELECT backend, world_size, hidden, top_k, experts, wire_dtype, combine_dtype, tokens_per_rank, routing, "
    "latency_us, dispatch_us, combine_us, prepare_us, source_id, extra, raw FROM points WHERE system = ?")


class ReferenceData:
    """The packaged reference file (or another one at ``path``), opened on first use."""

    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path is not None else datafile.DEFAULT_PATH
        self._conn: sqlite3.Connection | None = None
        self._sources: dict[int, Source] | None = None
        self._collectives: dict[tuple[str, str, int], tuple[derived.Collective, int] | None] = {}

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = datafile.connect(self.path)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def meta(self) -> dict[str, str]:
        return dict(self.conn.execute("SELECT key, value FROM meta"))

    def sources(self) -> dict[int, Source]:
        """Every source table, by id."""
        if self._sources is None:
            names = list(Source._fields)
            rows = self.conn.execute(f"SELECT {', '.join(names)} FROM sources ORDER BY id").fetchall()
            self._sources = {}
            for row in rows:
                d = dict(zip(names, row))
                d["columns"] = json.loads(d["columns"])
                self._sources[d["id"]] = Source(**d)
        return self._sources

    def skipped(self) -> list[dict[str, Any]]:
        """What the converter left out, per source table, and why."""
        src = self.sources()
        return [{"table_path": src[sid].table_path, "what": what, "rows": rows, "reason": reason}
                for sid, what, rows, reason in
                self.conn.execute("SELECT source_id, what, rows, reason FROM skipped ORDER BY id")]

    # --- published points ---------------------------------------------------------------

    def published(self, ref_class: str | ReferenceClass, backend: str | None = None, *, hidden: int | None = None,
                  top_k: int | None = None, experts: int | None = None, dtype: str | None = None,
                  world_size: int | None = None, tokens: Iterable[int] | None = None) -> list[ReferencePoint]:
        """Published points of the class's system within its domain, filtered by what is given.

        Ordered by backend, shape, dtype, world size, tokens.
        """
        ref = get_class(ref_class)
        sql, args = _POINT_SQL + " AND world_size <= ?", [ref.system.key, ref.max_world_size]
        for col, val in (("backend", backend), ("hidden", hidden), ("top_k", top_k), ("experts", experts),
                         ("wire_dtype", dtype), ("world_size", world_size)):
            if val is not None:
                sql += f" AND {col} = ?"
                args.append(val)
        if tokens is not None:
            tokens = sorted(set(tokens))
            sql += f" AND tokens_per_rank IN ({', '.join('?' * len(tokens))})"
            args += tokens
        sql += " ORDER BY backend, hidden, top_k, experts, wire_dtype, world_size, tokens_per_rank"
        sources = self.sources()
        out = []
        for (b, ws, h, k, e, dd, cd, t, routing, lat, disp, comb, prep, sid, extra, raw) in self.conn.execute(sql, args):
            src = sources[sid]
            out.append(ReferencePoint(
                ref_class=ref.name, system=ref.system.key, backend=b, evidence=PUBLISHED, world_size=ws, hidden=h,
                top_k=k, experts=e, wire_dtype=dd, combine_dtype=cd, tokens_per_rank=t, routing=routing,
                latency_us=lat, dispatch_us=disp, combine_us=comb, prepare_us=prep, sources=(src,),
                source_line=source_line(src, b, ws, ref, evidence=PUBLISHED), fidelity=FIDELITY[b],
                extra=json.loads(extra), raw=json.loads(raw)))
        return out

    # --- derived allgather_reducescatter ------------------------------------------------

    def _collective(self, system: str, op: str, num_gpus: int) -> tuple[derived.Collective, int] | None:
        """The NCCL timings of one op at one GPU count, and their source id (None: no rows)."""
        key = (system, op, num_gpus)
        if key not in self._collectives:
            rows = self.conn.execute(
                "SELECT message_bytes, latency_us, source_id FROM collectives WHERE system = ? AND op = ? "
                "AND nccl_dtype = 'half' AND num_gpus = ? ORDER BY message_bytes", (system, op, num_gpus)).fetchall()
            self._collectives[key] = (derived.Collective(op, num_gpus, tuple(r[0] for r in rows),
                                                         tuple(r[1] for r in rows)), rows[0][2]) if rows else None
        return self._collectives[key]

    def agrs_world_sizes(self, ref_class: str | ReferenceClass) -> list[int]:
        """World sizes at which the class's system has the NCCL rows AGRS is derived from."""
        ref = get_class(ref_class)
        rows = self.conn.execute(
            "SELECT num_gpus FROM collectives WHERE system = ? AND nccl_dtype = 'half' AND num_gpus <= ? "
            "GROUP BY num_gpus HAVING COUNT(DISTINCT op) = 2 ORDER BY num_gpus",
            (ref.system.key, ref.max_world_size)).fetchall()
        return [r[0] for r in rows]

    def derived_agrs(self, ref_class: str | ReferenceClass, *, hidden: int, top_k: int, experts: int, dtype: str,
                     world_size: int, tokens: Iterable[int], vllm_version: str | None = None) -> list[ReferencePoint]:
        """allgather_reducescatter round trips derived from NCCL timings (see ``derived.py``).

        Any shape works (AGRS moves bytes, it has no kernel per shape); ``dtype`` is the activation
        dtype (AGRS gathers it quantized, ``rules.wire``); the NCCL calls are ``vllm_version``'s
        (default: the newest known). Each row's ``latency_us`` is the central value of its
        ``range_us``. Where the system has no NCCL rows at ``world_size`` but has them at fewer
        GPUs (the NVL72 rack beyond a tray) the rows are lower bounds (``bound``). Token counts
        whose messages lie too far past the measured NCCL sizes give no row. ``experts`` only
        labels the rows (AGRS traffic does not depend on it).
        """
        ref = get_class(ref_class)
        if world_size > ref.max_world_size:
            return []
        collectives, read = collectives_for(vllm_version or NEWEST_VLLM)
        rows_gpus = world_size
        ag = self._collective(ref.system.key, "all_gather", world_size)
        rs = self._collective(ref.system.key, "reduce_scatter", world_size)
        if ag is None or rs is None:
            fewer = [n for n in self.agrs_world_sizes(ref) if n < world_size]
            if not fewer:
                return []
            rows_gpus = fewer[-1]
            ag = self._collective(ref.system.key, "all_gather", rows_gpus)
            rs = self._collective(ref.system.key, "reduce_scatter", rows_gpus)
        (ag, source_id), (rs, _) = ag, rs
        src = self.sources()[source_id]
        bound = rows_gpus != world_size
        line = source_line(src, AGRS, world_size, ref, evidence=DERIVED, rows_gpus=rows_gpus)
        price = derived.agrs_bound if bound else derived.agrs_estimate
        out = []
        for t in sorted(set(tokens)):
            est = price(ag, rs, hidden=hidden, top_k=top_k, dtype=dtype, world_size=world_size,
                        tokens_per_rank=t, collectives=collectives, read=read)
            if est is None:
                continue
            upper = est.upper_us
            out.append(ReferencePoint(
                ref_class=ref.name, system=ref.system.key, backend=AGRS, evidence=DERIVED, world_size=world_size,
                hidden=hidden, top_k=top_k, experts=experts, wire_dtype=dtype, combine_dtype="bf16",
                tokens_per_rank=t, routing="any (every rank receives every token)", latency_us=est.latency_us,
                dispatch_us=est.dispatch_us, combine_us=est.reduce_scatter.time_us, prepare_us=None,
                sources=(src,), source_line=line, fidelity=FIDELITY[AGRS], derivation=est.derivation(),
                range_us=None if upper is None else (est.lower_us, upper), bound=bound))
        return out

    # --- one entry point ----------------------------------------------------------------

    def token_grid(self, ref_class: str | ReferenceClass) -> tuple[int, ...]:
        """Every token count some published point of the class's system has (ascending)."""
        ref = get_class(ref_class)
        return tuple(r[0] for r in self.conn.execute(
            "SELECT DISTINCT tokens_per_rank FROM points WHERE system = ? AND world_size <= ? ORDER BY 1",
            (ref.system.key, ref.max_world_size)))

    def query(self, ref_class: str | ReferenceClass, backend: str, *, hidden: int, top_k: int, experts: int,
              dtype: str, world_size: int | None = None, tokens: Iterable[int] | None = None) -> list[ReferencePoint]:
        """The reference rows for one backend, shape, activation dtype and world size.

        ``world_size`` defaults to the class's (the rack class needs one:
        :class:`~autoselect.reference.systems.ReferenceWorldSizeUnavailable`); ``tokens`` to
        :meth:`token_grid`. allgather_reducescatter rows are derived, all others published
        (exact shape and dtype only: transferring to another shape is the caller's job).
        """
        ref = get_class(ref_class)
        ws = ref.check_world_size(world_size)
        if backend == AGRS:
            return self.derived_agrs(ref, hidden=hidden, top_k=top_k, experts=experts, dtype=dtype, world_size=ws,
                                     tokens=self.token_grid(ref) if tokens is None else tokens)
        return self.published(ref, backend, hidden=hidden, top_k=top_k, experts=experts, dtype=dtype, world_size=ws,
                              tokens=tokens)

    def transferred(self, ref_class: str | ReferenceClass, backend: str, *, hidden: int, top_k: int, experts: int,
                    dtype: str, world_size: int, rows: list[ReferencePoint] | None = None) -> Transfer:
        """``backend``'s published rows of the class's system at ``world_size``, transferred to a shape
        and dtype the tables lack (:mod:`autoselect.reference.transfer`); the exact shape, if published,
        is not among the sources (ask :meth:`published` for it). ``rows``: those published rows (every
        shape) when the caller has read them already."""
        if rows is None:
            rows = self.published(ref_class, backend, world_size=world_size)
        sources = [p for p in rows if (p.hidden, p.top_k, p.experts, p.wire_dtype) != (hidden, top_k, experts, dtype)]
        if not sources:
            ref = get_class(ref_class)
            return Transfer([], (), None, f"no published {backend} rows on {ref.system.label} at EP {world_size}")
        return transfer_points(sources, hidden=hidden, top_k=top_k, experts=experts, dtype=dtype)

    def for_shape(self, ref_class: str | ReferenceClass, backend: str, *, hidden: int, top_k: int, experts: int,
                  dtype: str, world_size: int) -> ShapeRows:
        """``backend``'s published rows of the shape at ``world_size``, else those the system's other
        shapes transfer to it (:meth:`transferred`), from one read of the backend's rows at that EP size."""
        rows = self.published(ref_class, backend, world_size=world_size)
        exact = [p for p in rows if (p.hidden, p.top_k, p.experts, p.wire_dtype) == (hidden, top_k, experts, dtype)]
        if exact:
            return ShapeRows(exact, PUBLISHED, None, True)
        moved = self.transferred(ref_class, backend, hidden=hidden, top_k=top_k, experts=experts, dtype=dtype,
                                 world_size=world_size, rows=rows)
        return ShapeRows(moved.points, TRANSFERRED, moved.refused, bool(rows))

    def across_systems(self, ref_class: str | ReferenceClass, backend: str, *, hidden: int, top_k: int,
                       experts: int, dtype: str, world_size: int) -> Transfer:
        """``backend``'s rows at ``world_size`` from another system of the class's NVLink generation
        (:mod:`autoselect.reference.crosssystem`): that system's published rows of the shape, else its
        other shapes transferred; labelled ``transferred``, the source system named, each with the
        measured cross-system error as its band (plus the shape transfer's error when there was one).
        Nothing for a backend :data:`~autoselect.reference.crosssystem.FAMILY` does not carry, or for a
        system of another generation (the refusal says why)."""
        ref = get_class(ref_class)
        target = ref.system
        if backend not in crosssystem.FAMILY:
            return Transfer([], (), None, f"{backend}'s rows are not carried across systems")
        having = [r[0] for r in self.conn.execute(
            "SELECT DISTINCT system FROM points WHERE backend = ? AND world_size = ? ORDER BY system",
            (backend, world_size))]
        if not having:
            return Transfer([], (), None, f"no system publishes {backend} at EP {world_size}")
        family, why = crosssystem.FAMILY[backend]
        for source in crosssystem.sources_for(target, having):
            error = crosssystem.cross_system_error(self.conn, source.key, target.key, family)
            if error is None:
                continue
            src_class = next(c for c in CLASSES.values() if c.system.key == source.key
                             and c.max_world_size >= world_size and (world_size > source.gpus_per_node) == (c.domain == "nvl72"))
            shape = dict(hidden=hidden, top_k=top_k, experts=experts, dtype=dtype, world_size=world_size)
            found = self.for_shape(src_class, backend, **shape)
            points = found.points
            shape_error = transfer_error(backend) if found.evidence == TRANSFERRED else 0.0
            if not points:
                continue
            line = (f"transferred from {source.label} ({points[0].source_line}) to {target.label}, one NVLink "
                    f"generation ({target.nvlink}); band: {error.describe()}")
            extra = {"method": "across systems", "from_system": source.key, "to_system": target.key,
                     "family": family, "why_family": why, "cross_system_error": error.error,
                     "shape_transfer_error": shape_error, "cross_system": error._asdict(),
                     "support": f"{crosssystem.SUPPORT.says} ({crosssystem.SUPPORT.source})"}
            out = [p._replace(ref_class=ref.name, system=target.key, evidence=TRANSFERRED, source_line=line,
                              band=error.error + shape_error,
                              derivation={**extra, "source_evidence": p.evidence, "source_derivation": p.derivation},
                              raw=None) for p in points]
            return Transfer(out, (f"{source.label} EP {world_size}",), "across systems", None)
        others = ", ".join(SYSTEMS[k].label for k in having if k in SYSTEMS)
        return Transfer([], (), None, (
            f"no published {backend} rows on {target.label} at EP {world_size}; those of {others} are not carried "
            f"to {target.label}: " + "; ".join(self._why_not_carried(target, having))))

    def _why_not_carried(self, target: ReferenceSystem, having: list[str]) -> list[str]:
        out = []
        for k in having:
            s = SYSTEMS.get(k)
            if s is None or k == target.key:
                continue
            if not crosssystem.same_generation(s, target):
                error = crosssystem.cross_system_error(self.conn, k, target.key)
                measured = f" (their NCCL rows differ by {error.describe()})" if error is not None else ""
                out.append(f"{s.label} is {s.nvlink}, {target.label} {target.nvlink}: another NVLink generation"
                           + measured)
            else:
                out.append(f"{s.label} and {target.label} publish no NCCL rows in common to measure the error on")
        return out

    def available(self, ref_class: str | ReferenceClass) -> list[dict[str, Any]]:
        """What the class has published rows for: one dict per (backend, shape, dtype, world size)
        with its token counts, plus the world sizes AGRS can be derived at."""
        ref = get_class(ref_class)
        rows = self.conn.execute(
            "SELECT backend, hidden, top_k, experts, wire_dtype, world_size, GROUP_CONCAT(tokens_per_rank), "
            "MIN(routing) FROM points WHERE system = ? AND world_size <= ? "
            "GROUP BY backend, hidden, top_k, experts, wire_dtype, world_size "
            "ORDER BY backend, hidden, top_k, experts, wire_dtype, world_size",
            (ref.system.key, ref.max_world_size)).fetchall()
        out = [{"backend": b, "hidden": h, "top_k": k, "experts": e, "dtype": d, "world_size": ws,
                "tokens": sorted(int(x) for x in toks.split(",")), "routing": r, "evidence": PUBLISHED}
               for b, h, k, e, d, ws, toks, r in rows]
        out += [{"backend": AGRS, "hidden": None, "top_k": None, "experts": None, "dtype": None, "world_size": ws,
                 "tokens": None, "routing": None, "evidence": DERIVED} for ws in self.agrs_world_sizes(ref)]
        return out


_DEFAULT: ReferenceData | None = None


def default() -> ReferenceData:
    """The packaged reference data, shared by every caller of this process."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = ReferenceData()
    return _DEFAULT


