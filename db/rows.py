"""Conversions between records and table rows, and the natural keys that make import idempotent.

Pure functions on dicts: no SQLite connection, no sqlite-utils, so the read path can use them.
"""

from __future__ import annotations

import json
from dataclasses import fields
from datetime import datetime, timezone
from typing import Any

from db.records import Result

#: Result fields stored as JSON text
JSON_FIELDS = ("knobs", "versions")
#: Result fields stored as INTEGER 0/1
BOOL_FIELDS = ("illegal", "noise_target_met")
#: versions-dict key -> the results column that repeats it for filtering
VERSION_COLUMNS = {
    "vllm": "vllm_version",
    "flashinfer": "flashinfer_version",
    "torch": "torch_version",
    "nccl": "nccl_version",
    "driver": "driver_version",
    "cuda": "cuda_version",
}
#: Result fields that identify one measured point of one run (with machine_id and run uid)
KEY_FIELDS = (
    "backend", "world_size", "tokens_per_rank", "hidden", "top_k", "experts",
    "activation_dtype", "combine_dtype", "routing", "kind", "device", "illegal", "knobs",
    "status", "created_at",
)
#: field -> the name it had when the keys were first hashed. A key is stored in every database
#: and export, and import matches rows by it, so a renamed field keeps hashing under its old
#: name: the same point keeps the same key across record formats (db.jsonl).
KEY_NAMES = {"activation_dtype": "dispatch_dtype"}
#: every Result field except the raw samples (they live in the samples table)
RESULT_COLUMNS = tuple(f.name for f in fields(Result) if f.name != "raw_samples_us")


def now_iso() -> str:
    """The current UTC time, ISO-8601 with microseconds."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def loads(text: Any, empty: Any) -> Any:
    """A JSON column's value: ``empty`` for NULL / empty text, the text itself when it is not
    JSON (so that the schema rules in :mod:`db.fields`, not a decoder, report the row)."""
    if text is None or text == "":
        return type(empty)()
    if not isinstance(text, (str, bytes)):
        return text
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def dumps(value: Any) -> str:
    """Canonical JSON text: sorted keys, no spaces (stable for hashing and diffing)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def result_key(machine_id: str, run_uid: str, result: dict) -> str:
    """The natural key of a result: a hash of its machine, run and identifying fields."""
    ident = {"machine_id": machine_id, "run_uid": run_uid}
    ident.update({KEY_NAMES.get(k, k): result.get(k) for k in KEY_FIELDS})
    return _sha256(dumps(ident))


def tuned_key(run_uid: str | None, tuned: dict) -> str:
    """The natural key of a tuned configuration: a hash of its run and every stored field.

    ``tuned`` is the exported form (:data:`TUNED_FIELDS`, JSON columns decoded); a tuned row is
    never updated, so all of it identifies it.
    """
    ident = {"run_uid": run_uid, "tuned": {KEY_NAMES.get(k, k): tuned.get(k) for k in TUNED_FIELDS}}
    return _sha256(dumps(ident))


def _sha256(text: str) -> str:
    import hashlib  # ~2 ms (OpenSSL): only writers key rows; the readers (recommend) never do

    return hashlib.sha256(text.encode()).hexdigest()


#: tuned_configs columns as exported (id and run_id are local: the run travels by uid)
TUNED_FIELDS = (
    "host_class", "machine_id", "created_at", "hidden", "top_k", "experts", "activation_dtype", "world_size",
    "device", "workload", "backend", "knobs", "env", "flags", "status", "gain", "gain_halfwidth",
    "tuned_latency_us", "untuned_latency_us", "stop", "study", "versions",
)
#: tuned_configs columns holding JSON text, and the empty value of each
TUNED_JSON_FIELDS = {"workload": {}, "knobs": {}, "env": {}, "flags": [], "versions": {}}


def row_to_tuned_dict(row: dict) -> dict:
    """The exported form of a ``tuned_configs`` row (JSON decoded, without id and run_id)."""
    out = {k: row[k] for k in TUNED_FIELDS}
    for k, empty in TUNED_JSON_FIELDS.items():
        out[k] = loads(out[k], empty)
    return out


def tuned_to_row(tuned: dict) -> dict:
    """A ``tuned_configs`` row (without id and run_id) from the exported form."""
    row = {k: tuned[k] for k in TUNED_FIELDS}
    for k in TUNED_JSON_FIELDS:
        row[k] = dumps(row[k])
    return row


def result_to_row(result: dict) -> dict:
    """A ``results`` row (without id/keys/host columns) from a Result dict."""
    row = {k: result.get(k) for k in RESULT_COLUMNS}
    for k in JSON_FIELDS:
        row[k] = dumps(row[k] or {})
    row["illegal"] = int(bool(row["illegal"]))
    if row["noise_target_met"] is not None:
        row["noise_target_met"] = int(bool(row["noise_target_met"]))
    versions = result.get("versions") or {}
    for key, column in VERSION_COLUMNS.items():
        row[column] = versions.get(key)
    return row


def row_to_result_dict(row: dict) -> dict:
    """The Result fields of a ``results`` row, decoded (JSON parsed, booleans restored)."""
    out = {k: row[k] for k in RESULT_COLUMNS}
    for k in JSON_FIELDS:
        out[k] = loads(out[k], {})
    for k in BOOL_FIELDS:
        out[k] = stored_bool(out[k])
    return out


def stored_bool(value: Any) -> Any:
    """An INTEGER 0/1 column as a bool; NULL stays None and anything else stays as it is (a
    schema violation :mod:`db.fields` reports)."""
    if value is None or isinstance(value, bool):
        return value
    if value in (0, 1) and not isinstance(value, str):
        return value == 1
    return value


#: hosts columns that hold JSON text, and the fingerprint key each comes from
HOST_JSON_COLUMNS = ("gpus", "nvlink_matrix", "versions")
HOST_COLUMNS = (
    "machine_id", "hostname", "host_class", "device", "gpu_name", "gpu_count", "gpu_arch",
    "all_nvlinks_up", "nvlink_peak_gbps", "fabric", "driver_version", "cuda_version",
    "cpu_model", "gpus", "nvlink_matrix", "versions",
)


def host_to_row(host: dict) -> dict:
    """A ``hosts`` row (without first/last seen) from a HostFingerprint dict."""
    row = {k: host.get(k) for k in HOST_COLUMNS}
    for k in HOST_JSON_COLUMNS:
        row[k] = dumps(row[k] if row[k] is not None else ([] if k != "versions" else {}))
    row["all_nvlinks_up"] = int(bool(row["all_nvlinks_up"]))
    return row


def row_to_host_dict(row: dict) -> dict:
    """A HostFingerprint dict from a ``hosts`` row."""
    out = {k: row[k] for k in HOST_COLUMNS}
    for k in HOST_JSON_COLUMNS:
        out[k] = loads(out[k], {} if k == "versions" else [])
    out["all_nvlinks_up"] = stored_bool(out["all_nvlinks_up"])
    return out


RUN_COLUMNS = (
    "uid", "host_class", "started_at", "updated_at", "finished_at", "status", "trigger",
    "command", "hostname", "pid", "autoselect_version", "meta",
)


def row_to_run_dict(row: dict) -> dict:
    """A run record (as exported) from a ``runs`` row."""
    out = {k: row[k] for k in RUN_COLUMNS}
    out["meta"] = loads(out["meta"], {})
    return out
