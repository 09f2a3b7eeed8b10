"""Convert aiconfigurator-core 0.12.0's published tables into autoselect's reference file.

Reads the package's parquet tables and their ``collection_meta.yaml`` as files, from an
installed ``aiconfigurator-core`` (located through ``importlib.metadata``, never imported: it
pulls pandas, scipy and a Rust extension) or from an unpacked wheel (``from_dir``). Never the
network. pyarrow and pyyaml are imported only here, only when converting.

The mapping (``tables.py`` holds the names and the collectors' column meanings):

* vLLM 0.24 ``moe_a2a_perf``: ``deepep_ht`` → ``deepep_high_throughput``, ``deepep_ll`` →
  ``deepep_low_latency``; one point = the dispatch and combine rows of the same case, round trip
  = dispatch + combine (what vLLM's prepare() and finalize() cost per step). ``comm_dtype``
  "default" is bf16 on the wire. ``deepep_v2_*`` rows are kept only when the rules can judge
  ``deepep_v2``; otherwise skipped and recorded in the ``skipped`` table.
* GB200 TensorRT-LLM ``trtllm_alltoall_perf``: ``NVLinkOneSided`` →
  ``flashinfer_nvlink_one_sided`` (nvfp4 dispatch, bf16 combine; round trip dispatch +
  combine), ``NVLinkTwoSided`` → ``flashinfer_nvlink_two_sided`` (bf16 / fp8 / nvfp4 dispatch,
  bf16 combine; round trip prepare + dispatch + combine). The two-sided nvfp4 low-precision
  combine has no vLLM counterpart (FlashInfer's two-sided combine is bf16 only): kept in
  ``extra``, never in the round trip. Milliseconds become microseconds.
* NCCL ``nccl_perf`` (2.29.2): the ``half`` all_gather and reduce_scatter rows, from which
  ``derived.py`` prices allgather_reducescatter; ``message_size`` is in elements (2 bytes).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoselect import rules
from autoselect.errors import UserError
from autoselect.reference import datafile
from autoselect.reference.systems import SYSTEMS
from autoselect.reference.tables import (
    BACKEND_NAMES,
    DATA_DIR,
    DTYPE_NAMES,
    KINDS,
    NCCL,
    PACKAGE,
    PACKAGE_DIR,
    PACKAGE_VERSION,
    ROUND_TRIP,
    ROUTING_BALANCED,
    ROUTING_RANDOM,
    TRTLLM_ALLTOALL,
    VLLM_MOE_A2A,
    TableKind,
)

CONVERTER = "autoselect/reference/convert.py"


class AiconfiguratorNotFound(UserError):
    "Neither an installed aiconfigurator-core nor the --from directory holds the package."


class WrongAiconfiguratorVersion(UserError):
    "The aiconfigurator-core found is not the pinned version."


class ReferenceTableMissing(UserError):
    "A table the converter needs is not in the package."


class ReferenceTableInvalid(UserError):
    "A table or its collection_meta.yaml does not have the shape the converter was written for."


class ConverterDependencyMissing(UserError):
    "pyarrow or pyyaml, needed only to convert, is not installed."


@dataclass(frozen=True)
class PackageRoot:
    """Where the package's files are: ``root / aiconfigurator_core / systems / data``."""

    root: Path
    version: str
    origin: str  # for messages only (never written to the output)


def _metadata_version(root: Path) -> str | None:
    for meta in sorted(root.glob("aiconfigurator_core-*.dist-info/METADATA")):
        for line in meta.read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    return None


def locate(from_dir: Path | str | None = None) -> PackageRoot:
    """The package to convert: ``from_dir`` (an unpacked wheel), else the installed one.

    :raises AiconfiguratorNotFound: nothing there.
    :raises WrongAiconfiguratorVersion: another version than :data:`PACKAGE_VERSION`.
    """
    if from_dir is not None:
        d = Path(from_dir)
        if d.name == PACKAGE_DIR and (d / "systems").is_dir():
            d = d.parent
        if not (d / DATA_DIR).is_dir():
            raise AiconfiguratorNotFound(
                f"{from_dir} holds no {DATA_DIR}/; unzip the aiconfigurator_core-{PACKAGE_VERSION} wheel "
                "there (unzip -q aiconfigurator_core-*.whl -d DIR) and pass that DIR")
        version = _metadata_version(d)
        if version is None:
            raise AiconfiguratorNotFound(
                f"{from_dir} has no aiconfigurator_core-*.dist-info/METADATA, so its version is unknown; "
                "unzip the whole wheel, not only the aiconfigurator_core folder")
        origin = f"unpacked at {d}"
    else:
        try:
            dist = importlib.metadata.distribution(PACKAGE)
        except importlib.metadata.PackageNotFoundError:
            raise AiconfiguratorNotFound(
                f"{PACKAGE} is not installed; pip install --no-deps {PACKAGE}=={PACKAGE_VERSION} "
                "(and pip install 'autoselect[reference-build]' for pyarrow), or pass --from DIR with the "
                "unpacked wheel") from None
        version = dist.version
        d = Path(dist.locate_file(""))
        origin = f"installed at {d}"
        if version == PACKAGE_VERSION and not (d / DATA_DIR).is_dir():
            raise AiconfiguratorNotFound(f"{PACKAGE} {version} is installed but {d / DATA_DIR} is missing")
    if version != PACKAGE_VERSION:
        raise WrongAiconfiguratorVersion(
            f"{PACKAGE} {version} ({origin}) is not {PACKAGE_VERSION}, the version these tables were "
            f"read for; install {PACKAGE}=={PACKAGE_VERSION} or pass --from DIR with its unpacked wheel")
    return PackageRoot(d, version, origin)


def _imports():
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ConverterDependencyMissing("pyarrow is not installed; pip install 'autoselect[reference-build]' (needed only to convert)") from None
    try:
        import yaml
    except ImportError:
        raise ConverterDependencyMissing("pyyaml is not installed; pip install pyyaml (needed only to convert)") from None
    return pq, yaml


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class _Table:
    kind: TableKind
    system: str
    rel: str  # path inside the package root
    rows: list[dict]
    meta: dict
    source: dict  # the sources row (without id)


REQUIRED_COLUMNS = {
    "vllm_moe_a2a": {"framework", "version", "device", "comm_backend", "phase", "comm_dtype", "ep_size", "node_num",
                     "hidden_size", "topk", "num_experts", "num_tokens", "sms", "transmit_us", "notify_us", "latency"},
    "trtllm_alltoall": {"framework", "version", "device", "op_name", "kernel_source", "moe_dtype", "num_tokens",
                        "hidden_size", "topk", "num_experts", "moe_ep_size", "distribution", "latency"},
    "nccl": {"version", "device", "op_name", "nccl_dtype", "num_gpus", "message_size", "latency"},
}


def _read(pkg: PackageRoot, kind: TableKind, system: str, pq, yaml) -> _Table:
    rel = f"{DATA_DIR}/{kind.path.format(system=system)}"
    path = pkg.root / rel
    meta_path = path.parent / "collection_meta.yaml"
    for p in (path, meta_path):
        if not p.is_file():
            raise ReferenceTableMissing(f"{PACKAGE} {pkg.version} ({pkg.origin}) has no {p.relative_to(pkg.root)}")
    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as e:  # pyarrow raises ArrowInvalid and OSError subclasses for bad files
        raise ReferenceTableInvalid(f"{rel} is not a readable parquet table: {e}") from None
    try:
        meta = yaml.safe_load(meta_path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ReferenceTableInvalid(f"{meta_path.relative_to(pkg.root)} is not valid YAML: {e}") from None
    if not rows:
        raise ReferenceTableInvalid(f"{rel} has no rows")
    missing = REQUIRED_COLUMNS[kind.kind] - set(rows[0])
    if missing:
        raise ReferenceTableInvalid(f"{rel} lacks the column(s) {', '.join(sorted(missing))}")
    devices = {r["device"] for r in rows}
    expected = SYSTEMS[system].gpu_name
    if devices != {expected}:
        raise ReferenceTableInvalid(f"{rel} was measured on {', '.join(sorted(devices))}, not {expected}")
    runtime = meta.get("runtime") or {}
    table_meta = (meta.get("tables") or {}).get(path.stem) or {}
    if table_meta.get("status") not in (None, "complete"):
        raise ReferenceTableInvalid(f"{meta_path.relative_to(pkg.root)} marks {path.stem} {table_meta.get('status')!r}")
    versions = sorted({str(r["version"]) for r in rows})
    if len(versions) != 1:
        raise ReferenceTableInvalid(f"{rel} mixes framework versions {versions}")
    if kind is VLLM_MOE_A2A:
        framework, fversion = "vLLM", str(runtime.get("version"))
        if versions != [fversion]:
            raise ReferenceTableInvalid(f"{rel} rows say vLLM {versions[0]}, its collection_meta.yaml {fversion}")
    elif kind is TRTLLM_ALLTOALL:
        framework, fversion = "TensorRT-LLM", versions[0]
    else:
        framework, fversion = "NCCL", versions[0]
        if fversion != path.parent.name:
            raise ReferenceTableInvalid(f"{rel} rows say NCCL {fversion}, not {path.parent.name}")
    abi = runtime.get("abi") or {}
    source = {
        "kind": kind.kind, "system": system, "table_path": rel, "table_sha256": _sha256(path),
        "table_rows": len(rows), "meta_path": str(meta_path.relative_to(pkg.root)),
        "meta_sha256": _sha256(meta_path), "package": PACKAGE, "package_version": pkg.version,
        "framework": framework, "framework_version": fversion, "device": expected,
        "collected_at": _text(table_meta.get("collected_at")), "provenance": _text(meta.get("provenance")),
        "image": _text(runtime.get("image")), "image_digest": _text(runtime.get("image_digest")),
        "source_commit": _text(runtime.get("source_commit")),
        "collector_ref": _text(table_meta.get("collector_ref")), "collector_hash": _text(table_meta.get("collector_hash")),
        "collector": kind.collector, "how_measured": kind.how_measured,
        "columns": json.dumps(kind.columns, sort_keys=True, separators=(",", ":")),
        "runtime": json.dumps(_plain(runtime), sort_keys=True, separators=(",", ":")),
        "note": kind.note,
    }
    if abi.get("driver"):
        source["note"] = "; ".join(x for x in (source["note"], f"driver {abi['driver']}") if x)
    return _Table(kind, system, rel, rows, meta, source)


def _text(v: Any) -> str | None:
    return None if v is None else str(v)


def _plain(v: Any) -> Any:
    """YAML values as JSON-ready plain types (dates become ISO strings)."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)


def _json(v: Any) -> str:
    return json.dumps(v, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _deepep_v2_judgeable() -> bool:
    cap = rules.BACKENDS.get("deepep_v2")
    return cap is not None and cap.recommendable


def _vllm_points(t: _Table, skipped: list) -> list[dict]:
    cases: dict[tuple, dict] = defaultdict(dict)
    v2_rows = 0
    for r in t.rows:
        name = BACKEND_NAMES.get(("vllm_moe_a2a", r["comm_backend"]))
        if name is None:
            raise ReferenceTableInvalid(f"{t.rel}: unknown comm_backend {r['comm_backend']!r}")
        if name == "deepep_v2" and not _deepep_v2_judgeable():
            v2_rows += 1
            continue
        dtype = DTYPE_NAMES.get(r["comm_dtype"])
        if dtype is None:
            raise ReferenceTableInvalid(f"{t.rel}: unknown comm_dtype {r['comm_dtype']!r}")
        key = (r["comm_backend"], r["comm_dtype"], r["ep_size"], r["node_num"], r["hidden_size"], r["topk"],
               r["num_experts"], r["num_tokens"], r["sms"])
        if r["phase"] in cases[key]:
            raise ReferenceTableInvalid(f"{t.rel}: two {r['phase']} rows for {key}")
        if r["phase"] not in ("dispatch", "combine"):
            raise ReferenceTableInvalid(f"{t.rel}: unknown phase {r['phase']!r}")
        cases[key][r["phase"]] = r
    if v2_rows:
        skipped.append({"what": "deepep_v2_context / deepep_v2_generation rows", "rows": v2_rows, "reason": (
            "autoselect's rules know the deepep_v2 flag but cannot judge the backend (no kernel limits or "
            "dispatch dtypes: checked, never recommended), so its rows are not evidence for any answer")})
    points = {}
    for key, phases in cases.items():
        if set(phases) != {"dispatch", "combine"}:
            raise ReferenceTableInvalid(f"{t.rel}: case {key} lacks a {'dispatch' if 'dispatch' not in phases else 'combine'} row")
        comm_backend, comm_dtype, ep, nodes, hidden, top_k, experts, tokens, sms = key
        backend = BACKEND_NAMES[("vllm_moe_a2a", comm_backend)]
        latency = {p: phases[p]["latency"] for p in ("dispatch", "combine")}
        raw = {"unit": "us", "comm_backend": comm_backend, "comm_dtype": comm_dtype, "sms": sms, "latency": latency}
        split = {p: [phases[p]["transmit_us"], phases[p]["notify_us"]] for p in latency
                 if phases[p]["notify_us"] or phases[p]["transmit_us"] != phases[p]["latency"]}
        if split:
            raw["transmit_notify_us"] = split
        point = dict(
            system=t.system, backend=backend, world_size=ep, nodes=nodes, hidden=hidden, top_k=top_k,
            experts=experts, wire_dtype=DTYPE_NAMES[comm_dtype], combine_dtype="bf16", tokens_per_rank=tokens,
            routing=ROUTING_RANDOM, prepare_us=None, dispatch_us=latency["dispatch"], combine_us=latency["combine"],
            extra={}, raw=raw)
        ident = (backend, ep, hidden, top_k, experts, point["wire_dtype"], tokens)
        other = points.get(ident)
        if other is not None:
            # deepep_v2 has an eager (context) and a CUDA-graph (generation) population; where both
            # hold a token count, the CUDA-graph one is vLLM's decode path: it is the point, the
            # eager times stay beside it.
            graph, eager = (point, other) if comm_backend.endswith("generation") else (other, point)
            graph["extra"] = {"eager_dispatch_us": eager["dispatch_us"], "eager_combine_us": eager["combine_us"]}
            graph["raw"] = {"unit": "us", "rows": [graph["raw"], eager["raw"]]}
            point = graph
        points[ident] = point
    return [dict(p, extra=_json(p["extra"]), raw=_json(p["raw"])) for p in points.values()]


_TRT_OPS = ("alltoall_prepare", "alltoall_dispatch", "alltoall_combine", "alltoall_combine_low_precision")


def _trtllm_points(t: _Table) -> list[dict]:
    cases: dict[tuple, dict] = defaultdict(dict)
    for r in t.rows:
        if r["op_name"] not in _TRT_OPS:
            raise ReferenceTableInvalid(f"{t.rel}: unknown op_name {r['op_name']!r}")
        if ("trtllm_alltoall", r["kernel_source"]) not in BACKEND_NAMES:
            raise ReferenceTableInvalid(f"{t.rel}: unknown kernel_source {r['kernel_source']!r}")
        if r["moe_dtype"] not in DTYPE_NAMES or r["moe_dtype"] == "default":
            raise ReferenceTableInvalid(f"{t.rel}: unknown moe_dtype {r['moe_dtype']!r}")
        if r["distribution"] != "balanced":
            raise ReferenceTableInvalid(f"{t.rel}: unknown distribution {r['distribution']!r}")
        key = (r["kernel_source"], r["moe_dtype"], r["moe_ep_size"], r["hidden_size"], r["topk"], r["num_experts"],
               r["num_tokens"])
        if r["op_name"] in cases[key]:
            raise ReferenceTableInvalid(f"{t.rel}: two {r['op_name']} rows for {key}")
        cases[key][r["op_name"]] = r["latency"]
    gpn = SYSTEMS[t.system].gpus_per_node
    points = []
    for key, ops in cases.items():
        kernel, moe_dtype, ep, hidden, top_k, experts, tokens = key
        backend = BACKEND_NAMES[("trtllm_alltoall", kernel)]
        needed = {"alltoall_" + p for p in ROUND_TRIP[backend]}
        if not needed <= set(ops):
            raise ReferenceTableInvalid(f"{t.rel}: {kernel} case {key} lacks {', '.join(sorted(needed - set(ops)))}")
        if backend == "flashinfer_nvlink_one_sided" and (moe_dtype != "nvfp4" or set(ops) != needed):
            raise ReferenceTableInvalid(f"{t.rel}: a one-sided row that is not an nvfp4 dispatch/combine: {key}")
        us = {op: ms * 1000.0 for op, ms in ops.items()}
        extra = {}
        if "alltoall_combine_low_precision" in us:
            extra["combine_low_precision_us"] = us["alltoall_combine_low_precision"]
        points.append(dict(
            system=t.system, backend=backend, world_size=ep, nodes=math.ceil(ep / gpn), hidden=hidden, top_k=top_k,
            experts=experts, wire_dtype=DTYPE_NAMES[moe_dtype], combine_dtype="bf16", tokens_per_rank=tokens,
            routing=ROUTING_BALANCED, prepare_us=us.get("alltoall_prepare"), dispatch_us=us["alltoall_dispatch"],
            combine_us=us["alltoall_combine"], extra=_json(extra),
            raw=_json({"unit": "ms", "kernel_source": kernel, "moe_dtype": moe_dtype, "distribution": "balanced",
                       "latency": dict(sorted(ops.items()))})))
    return points


#: NCCL ops and dtype kept: vLLM's AGRS is an all_gather and a bf16 reduce_scatter.
NCCL_OPS = ("all_gather", "reduce_scatter")
NCCL_DTYPE = "half"
NCCL_ELEMENT_BYTES = {"half": 2, "int8": 1}


def _collectives(t: _Table, skipped: list) -> list[dict]:
    out, left = [], 0
    seen = set()
    for r in t.rows:
        if r["nccl_dtype"] not in NCCL_ELEMENT_BYTES:
            raise ReferenceTableInvalid(f"{t.rel}: unknown nccl_dtype {r['nccl_dtype']!r}")
        if r["op_name"] not in NCCL_OPS or r["nccl_dtype"] != NCCL_DTYPE:
            left += 1
            continue
        key = (r["op_name"], r["nccl_dtype"], r["num_gpus"], r["message_size"])
        if key in seen:
            raise ReferenceTableInvalid(f"{t.rel}: two rows for {key}")
        seen.add(key)
        out.append(dict(system=t.system, op=r["op_name"], nccl_dtype=r["nccl_dtype"], num_gpus=r["num_gpus"],
                        message_size=r["message_size"],
                        message_bytes=r["message_size"] * NCCL_ELEMENT_BYTES[r["nccl_dtype"]],
                        latency_us=r["latency"] * 1000.0, raw_latency_ms=r["latency"]))
    if left:
        skipped.append({"what": "alltoall, all_reduce and int8 rows", "rows": left, "reason": (
            "not used: vLLM's allgather_reducescatter is an all_gather and a bf16 reduce_scatter, priced from the "
            "half rows (an all_gather moves bytes whatever their dtype)")})
    return out


_POINT_COLUMNS = ("source_id", "system", "backend", "world_size", "nodes", "hidden", "top_k", "experts",
                  "wire_dtype", "combine_dtype", "tokens_per_rank", "routing", "latency_us", "prepare_us",
                  "dispatch_us", "combine_us", "extra", "raw")
_COLLECTIVE_COLUMNS = ("source_id", "system", "op", "nccl_dtype", "num_gpus", "message_size", "message_bytes",
                       "latency_us", "raw_latency_ms")


def _round_trip(p: dict) -> float:
    phases = ROUND_TRIP[p["backend"]]
    return sum(p[f"{phase}_us"] for phase in phases)


@dataclass(frozen=True)
class Summary:
    """What one conversion wrote."""

    path: Path
    sources: int
    points: int
    collectives: int
    skipped: tuple  # (table path, what, rows, reason)
    origin: str


def convert(out: Path | str, from_dir: Path | str | None = None, *, systems: tuple[str, ...] | None = None) -> Summary:
    """Write the reference file ``out`` from the package (see :func:`locate`).

    :param systems: restrict to these systems (the fixture slice holds a few); default all
        systems of every table kind.
    :raises UserError: one of this module's errors; nothing is written then.
    """
    pq, yaml = _imports()
    pkg = locate(from_dir)
    tables = []
    for kind in KINDS.values():
        for system in kind.systems:
            if systems is None or system in systems:
                tables.append(_read(pkg, kind, system, pq, yaml))
    records = []  # (source row, points, collectives, skipped)
    for t in tables:
        skipped: list = []
        if t.kind is VLLM_MOE_A2A:
            points, colls = _vllm_points(t, skipped), []
        elif t.kind is TRTLLM_ALLTOALL:
            points, colls = _trtllm_points(t), []
        else:
            points, colls = [], _collectives(t, skipped)
        records.append((t.source, points, colls, skipped))
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    conn = datafile.create(tmp)
    try:
        _write(conn, records)
        conn.close()
    except BaseException:
        conn.close()
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(out)
    return Summary(out, len(records), sum(len(r[1]) for r in records), sum(len(r[2]) for r in records),
                   tuple((r[0]["table_path"], s["what"], s["rows"], s["reason"]) for r in records for s in r[3]),
                   pkg.origin)


def _write(conn, records) -> None:
    meta = {
        "package": PACKAGE, "package_version": PACKAGE_VERSION, "schema_version": str(datafile.SCHEMA_VERSION),
        "converter": CONVERTER, "licence": "Apache-2.0",
        "attribution": "NVIDIA AIConfigurator (aiconfigurator-core), Copyright (c) 2025-2026 NVIDIA CORPORATION "
                       "& AFFILIATES, Apache-2.0; converted by autoselect (see NOTICE)",
        "nccl_version": NCCL.path.split("/")[2],
    }
    with conn:
        conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", sorted(meta.items()))
        order = {s: i for i, s in enumerate(SYSTEMS)}
        kinds = list(KINDS)
        records = sorted(records, key=lambda r: (kinds.index(r[0]["kind"]), order[r[0]["system"]]))
        all_points, all_colls = [], []
        for source_id, (source, points, colls, skipped) in enumerate(records, start=1):
            cols = ["id", *source]
            conn.execute(f"INSERT INTO sources ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                         (source_id, *source.values()))
            for s in skipped:
                conn.execute("INSERT INTO skipped (source_id, what, rows, reason) VALUES (?, ?, ?, ?)",
                             (source_id, s["what"], s["rows"], s["reason"]))
            all_points += [dict(p, source_id=source_id, latency_us=_round_trip(p)) for p in points]
            all_colls += [dict(c, source_id=source_id) for c in colls]
        all_points.sort(key=lambda p: (order[p["system"]], p["backend"], p["hidden"], p["top_k"], p["experts"],
                                       p["wire_dtype"], p["world_size"], p["tokens_per_rank"]))
        all_colls.sort(key=lambda c: (order[c["system"]], c["op"], c["nccl_dtype"], c["num_gpus"], c["message_size"]))
        conn.executemany(
            f"INSERT INTO points ({', '.join(_POINT_COLUMNS)}) VALUES ({', '.join('?' * len(_POINT_COLUMNS))})",
            [tuple(p[c] for c in _POINT_COLUMNS) for p in all_points])
        conn.executemany(
            f"INSERT INTO collectives ({', '.join(_COLLECTIVE_COLUMNS)}) "
            f"VALUES ({', '.join('?' * len(_COLLECTIVE_COLUMNS))})",
            [tuple(c[k] for k in _COLLECTIVE_COLUMNS) for c in all_colls])
    conn.execute("VACUUM")
