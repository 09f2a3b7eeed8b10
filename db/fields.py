"""The field rules of every stored record: the one schema import, merge, ``db check`` and the readers apply.

SQLite's column types do not hold a value to its meaning (a REAL column keeps ``'abc'``, an
INTEGER column keeps 2**63 - 1 and text, JSON columns keep any text), and older autoselect
versions imported records checking field names only. So each record kind has a table here:
field name -> :class:`Rule` (what the value must be, its range), plus the few rules that tie
fields together (top-k within the experts). :func:`problem` returns the first violation of a
record as a sentence, or None; the callers decide what it means:

* ``db import`` / ``db merge`` refuse the whole input (``Error: FILE line N: ...``, nothing written);
* ``db check`` counts the stored rows that break a rule and names the first ones;
* the readers (:mod:`db.queries`, :mod:`db.tuned`) skip such a row and say so
  (:class:`SkippedRows`, a warning the CLI prints as one ``Warning:`` line).

One rule keeps a namespace read-only: a host class starting with ``ref-`` names NVIDIA's published
reference systems (:data:`autoselect.hardware.REFERENCE_CLASS_PREFIX`), so no host, run, result
or tuned configuration may carry one, nor a name that reads as one (another case, another
script's letters, spaces: :func:`autoselect.hardware.measured_class_problem`). Import, merge and every store writer refuse it, ``db check``
reports it in an older file, and the readers skip such rows: measurements never pass for the
published reference.

The records are in their exported form (JSON columns decoded, booleans as ``bool``), which is
also what :func:`db.rows.row_to_result_dict` and its siblings return for a stored row.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

from autoselect.hardware import measured_class_problem
# MAX_NAME: identifiers (backend, host class, machine id, run uid, dtypes) are short printable text
from autoselect.options import MAX_DURATION_S, MAX_EXPERTS, MAX_HIDDEN, MAX_NAME, MAX_TOKENS_PER_RANK, MAX_WORLD_SIZE
from db.errors import ReservedHostClass
from db.records import CALLS, DP_SIZES, KINDS, RUN_STATUSES, STATUSES, TIMINGS, TUNED_STATUSES, VIAS

#: GPUs one machine may report
MAX_GPUS = 1 << 12
#: a process id (pid_t is a 32-bit signed integer)
MAX_PID = (1 << 31) - 1
#: The largest time (µs), bandwidth or fraction a stored measurement may hold: a year. Beyond it a
#: value is no measurement, and the readers' arithmetic (the latency model's least squares squares
#: latencies; workload-weighted sums add them) must stay finite: 1e308 µs would overflow to inf.
MAX_MEASURED = MAX_DURATION_S * 1e6
#: SQLite's INTEGER range: a larger Python int cannot be stored at all
SQLITE_INT_MAX = (1 << 63) - 1
#: result.device / host.device / tuned.device
DEVICES = ("cuda", "cpu")


class SkippedRows(UserWarning):
    "Stored rows that break the schema (written by an older autoselect, or by hand): a reader skipped them."


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:  # an integer beyond every float (JSON allows 10**400): no measurement is
        return False


def _is_measured_class(v: Any) -> bool:
    """A host class a measurement may carry (:func:`autoselect.hardware.measured_class_problem`):
    ASCII, and nothing that reads as the reserved ``ref-`` namespace."""
    return _is_name(v) and measured_class_problem(v) is None


#: A stored time may lie ahead of this machine's clock by the clock differences of a fleet's machines
#: and by a time zone written without its offset (hours): a date more than this many days after
#: today's (UTC) is no time a record was written, and ordered as "newest" it would stay newest for
#: ever (every later measurement of its point ignored, a run that never looks stale).
FUTURE_DAYS = 2


class _Latest:
    """The latest date a stored time may carry, recomputed each minute (readers judge every row)."""

    until = 0.0
    date: Any = None


def latest_date():
    """Today's date (UTC) plus :data:`FUTURE_DAYS`."""
    now = time.monotonic()
    if now >= _Latest.until:
        _Latest.until, _Latest.date = now + 60, (datetime.now(timezone.utc) + timedelta(days=FUTURE_DAYS)).date()
    return _Latest.date


def _is_timestamp(v: Any) -> bool:
    if not isinstance(v, str) or not 10 <= len(v) <= 40:
        return False
    try:
        when = datetime.fromisoformat(v)
    except ValueError:
        return False
    return when.date() <= latest_date()


def _is_name(v: Any) -> bool:
    return isinstance(v, str) and 0 < len(v) <= MAX_NAME and v.isprintable()


def _is_text_map(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and (x is None or isinstance(x, str)) for k, x in v.items())


def _is_knobs(v: Any) -> bool:
    """Tuned settings: an object; its ``env`` a map of names to scalars, its ``flags`` a list of strings."""
    if not isinstance(v, dict):
        return False
    env, flags, adapter = v.get("env"), v.get("flags"), v.get("adapter")
    if env is not None and not (isinstance(env, dict) and all(
            isinstance(x, (str, int, float, bool)) for x in env.values())):
        return False
    if flags is not None and not (isinstance(flags, list) and all(isinstance(f, str) for f in flags)):
        return False
    return adapter is None or isinstance(adapter, dict)


_GPU_KEYS = {"index": _is_int, "name": lambda v: isinstance(v, str), "uuid": lambda v: isinstance(v, str),
             "memory_total_mib": _is_int, "sm_arch": lambda v: isinstance(v, str),
             "compute_capability": lambda v: isinstance(v, str), "nvlinks_up": _is_int, "nvlinks_total": _is_int,
             "pci_bus_id": lambda v: v is None or isinstance(v, str)}


def _is_gpus(v: Any) -> bool:
    """A fingerprint's GPU list: objects with :class:`autoselect.hardware.GpuInfo`'s fields, nothing else."""
    if not isinstance(v, list) or len(v) > MAX_GPUS:
        return False
    for g in v:
        if not isinstance(g, dict) or set(g) - set(_GPU_KEYS):
            return False
        for key, ok in _GPU_KEYS.items():
            if key == "pci_bus_id" and key not in g:
                continue
            if not ok(g.get(key)):
                return False
    return True


def _is_matrix(v: Any) -> bool:
    return isinstance(v, list) and len(v) <= MAX_GPUS and all(
        isinstance(row, list) and len(row) <= MAX_GPUS and all(_is_int(x) and 0 <= x <= 1 << 16 for x in row)
        for row in v)


class Rule(NamedTuple):
    """What one field's value must be: ``kind`` (a key of :data:`KIND_CHECKS`), a range for
    numbers, the allowed values for a choice, and whether null is allowed."""

    kind: str
    low: float | None = None
    high: float | None = None
    choices: tuple = ()
    nullable: bool = False

    def check(self, value: Any) -> str | None:
        """None when ``value`` keeps the rule, else what it should have been (a phrase)."""
        if value is None:
            return None if self.nullable else "required (it is null or missing)"
        if self.kind == "choice":
            return None if value in self.choices else f"not one of {', '.join(self.choices)}"
        ok, words = KIND_CHECKS[self.kind]
        if not ok(value):
            return f"not {words}"
        if self.low is not None and value < self.low:
            return f"below the minimum {self.low:g}" if isinstance(self.low, float) else f"below the minimum {self.low}"
        if self.high is not None and value > self.high:
            return f"above the maximum {self.high}"
        return None


#: rule kind -> (predicate, what the value must be, for messages)
KIND_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "int": (_is_int, "an integer"),
    "number": (_is_number, "a finite number"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "text": (lambda v: isinstance(v, str), "a string"),
    "name": (_is_name, f"a non-empty printable string of at most {MAX_NAME} characters"),
    "host_class": (_is_measured_class, "a measured host class: ref-... names NVIDIA's published reference "
                                       "systems and is read-only, in any case or script (a class is ASCII "
                                       "letters, digits, '.', '_', '+', '-')"),
    "timestamp": (_is_timestamp, f"an ISO-8601 timestamp, at most {FUTURE_DAYS} days after today"),
    # a result written by an old or foreign writer may be undated: its run's start dates it
    "result_time": (lambda v: v == "" or _is_timestamp(v),
                    f"an ISO-8601 timestamp, at most {FUTURE_DAYS} days after today (or empty: dated by its run)"),
    "object": (lambda v: isinstance(v, dict), "a JSON object"),
    "text_map": (_is_text_map, "a JSON object of strings"),
    "text_list": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of strings"),
    "samples": (lambda v: isinstance(v, list) and all(_is_number(x) and 0 <= x <= MAX_MEASURED for x in v),
                "a list of numbers from 0 to a year in µs"),
    "knobs": (_is_knobs, "a JSON object (env: an object of values, flags: a list of strings)"),
    "gpus": (_is_gpus, "a list of GPU objects (index, name, uuid, memory_total_mib, sm_arch, ...)"),
    "matrix": (_is_matrix, "a list of lists of link counts"),
}

_LATENCY = Rule("number", low=0.0, high=MAX_MEASURED, nullable=True)

#: ``result`` fields (db/records.py Result)
RESULT_RULES: dict[str, Rule] = {
    "backend": Rule("name"),
    "world_size": Rule("int", 1, MAX_WORLD_SIZE),
    "tokens_per_rank": Rule("int", 1, MAX_TOKENS_PER_RANK),
    "hidden": Rule("int", 1, MAX_HIDDEN),
    "top_k": Rule("int", 1, MAX_EXPERTS),
    "experts": Rule("int", 1, MAX_EXPERTS),
    "activation_dtype": Rule("name"),
    "wire_dtype": Rule("name", nullable=True),
    "combine_dtype": Rule("name"),
    "routing": Rule("name"),
    "status": Rule("choice", choices=STATUSES),
    "error": Rule("text", nullable=True),
    "kind": Rule("choice", choices=KINDS),
    "device": Rule("choice", choices=DEVICES),
    "illegal": Rule("bool"),
    "knobs": Rule("knobs"),
    "samples": Rule("int", 0, SQLITE_INT_MAX),
    **{f"latency_us_{s}": _LATENCY for s in ("p50", "mean", "min", "p10", "p90", "p99")},
    "latency_stdrel": _LATENCY,
    "noise_stdrel": _LATENCY,
    "dispatch_us_p50": _LATENCY,
    "combine_us_p50": _LATENCY,
    "bytes_per_rank": Rule("int", 0, SQLITE_INT_MAX, nullable=True),
    "algbw_gbps": _LATENCY,
    "busbw_gbps": _LATENCY,
    "noise_target_met": Rule("bool", nullable=True),
    "timing": Rule("choice", choices=TIMINGS, nullable=True),
    "timing_note": Rule("text", nullable=True),
    "calls": Rule("choice", choices=CALLS, nullable=True),
    "dp_sizes": Rule("choice", choices=DP_SIZES),
    "via": Rule("choice", choices=VIAS),
    "versions": Rule("text_map"),
    "created_at": Rule("result_time"),
    "raw_samples_us": Rule("samples"),
}

#: ``host`` fields (autoselect/hardware.py HostFingerprint, plus first / last seen)
HOST_RULES: dict[str, Rule] = {
    "machine_id": Rule("name"),
    "hostname": Rule("text"),
    "host_class": Rule("host_class"),
    "device": Rule("choice", choices=DEVICES),
    "gpu_name": Rule("text", nullable=True),
    "gpu_count": Rule("int", 0, MAX_GPUS),
    "gpu_arch": Rule("text", nullable=True),
    "all_nvlinks_up": Rule("bool"),
    "nvlink_peak_gbps": _LATENCY,
    "fabric": Rule("text", nullable=True),
    "driver_version": Rule("text", nullable=True),
    "cuda_version": Rule("text", nullable=True),
    "cpu_model": Rule("text", nullable=True),
    "gpus": Rule("gpus"),
    "nvlink_matrix": Rule("matrix"),
    "versions": Rule("text_map"),
    "first_seen": Rule("timestamp", nullable=True),
    "last_seen": Rule("timestamp", nullable=True),
}

#: ``run`` fields (the runs table, meta decoded)
RUN_RULES: dict[str, Rule] = {
    "uid": Rule("name"),
    "host_class": Rule("host_class"),
    "started_at": Rule("timestamp"),
    "updated_at": Rule("timestamp"),
    "finished_at": Rule("timestamp", nullable=True),
    "status": Rule("choice", choices=RUN_STATUSES),
    "trigger": Rule("text"),
    "command": Rule("text", nullable=True),
    "hostname": Rule("text"),
    "pid": Rule("int", 0, MAX_PID),
    "autoselect_version": Rule("text"),
    "meta": Rule("object"),
}


#: ``tuned`` fields (the tuned_configs table, JSON columns decoded)
TUNED_RULES: dict[str, Rule] = {
    "host_class": Rule("host_class"),
    "machine_id": Rule("name"),
    "created_at": Rule("timestamp"),
    "hidden": RESULT_RULES["hidden"],
    "top_k": RESULT_RULES["top_k"],
    "experts": RESULT_RULES["experts"],
    "activation_dtype": Rule("name"),
    "world_size": RESULT_RULES["world_size"],
    "device": Rule("choice", choices=DEVICES),
    "workload": Rule("object"),
    "backend": Rule("name"),
    "knobs": Rule("object"),
    "env": Rule("text_map"),
    "flags": Rule("text_list"),
    "status": Rule("choice", choices=TUNED_STATUSES),
    "gain": Rule("number", nullable=True),
    "gain_halfwidth": _LATENCY,
    "tuned_latency_us": _LATENCY,
    "untuned_latency_us": _LATENCY,
    "stop": Rule("text"),
    "study": Rule("text"),
    "versions": Rule("text_map"),
}


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def problem(rules: dict[str, Rule], record: dict, prefix: str, *, fields: Iterable[str] | None = None) -> str | None:
    """The first field of ``record`` that breaks ``rules``, as ``"result.knobs is 'x', not a JSON
    object"``; None when every field keeps its rule (and the cross-field rules hold).

    :param prefix: the record part's name in messages (``result``, ``host``, ``run``, ``tuned``).
    :param fields: only these fields (default: every field of ``rules``).
    """
    for name in fields if fields is not None else rules:
        value = record.get(name)
        said = rules[name].check(value)
        if said is not None:
            return f"{prefix}.{name} is {said}" if value is None else f"{prefix}.{name} is {_show(value)}, {said}"
    top_k, experts = record.get("top_k"), record.get("experts")
    if _is_int(top_k) and _is_int(experts) and "top_k" in rules and top_k > experts:
        return f"{prefix}.top_k ({top_k}) exceeds {prefix}.experts ({experts})"
    samples, raw = record.get("samples"), record.get("raw_samples_us")
    if "raw_samples_us" in rules and raw and _is_int(samples) and len(raw) != samples:
        return f"{prefix}.samples is {samples} but raw_samples_us has {len(raw)}"
    return None


def fast_check(rules: dict[str, Rule], skip: Iterable[str] = ()) -> Callable[[dict], bool]:
    """A predicate equal to ``problem(rules, record, ...) is None`` but several times faster,
    for readers that judge every row they return: the rules grouped by kind, each group one
    loop of inline tests (the slow :func:`problem` then only words the rare failure).

    :param skip: fields the caller knows are fine (a query pinned them to valid values).
    """
    skip = set(skip)
    groups: dict[str, list] = {}
    for name, rule in rules.items():
        if name not in skip:
            groups.setdefault(rule.kind, []).append((name, rule))
    ints = tuple((n, r.low if r.low is not None else -math.inf, r.high if r.high is not None else math.inf, r.nullable)
                 for n, r in groups.pop("int", []))
    numbers = tuple((n, r.low if r.low is not None else -math.inf, r.high if r.high is not None else math.inf,
                     r.nullable) for n, r in groups.pop("number", []))
    names = tuple((n, r.nullable) for n, r in groups.pop("name", []))
    choices = tuple((n, r.choices, r.nullable) for n, r in groups.pop("choice", []))
    bools = tuple((n, r.nullable) for n, r in groups.pop("bool", []))
    others = tuple((n, r) for items in groups.values() for n, r in items)
    has_top_k = "top_k" in rules
    has_samples = "raw_samples_us" in rules and "raw_samples_us" not in skip
    inf = math.inf

    def ok(d: dict) -> bool:
        get = d.get
        for n, low, high, nullable in ints:
            v = get(n)
            if v is None:
                if not nullable:
                    return False
            elif v.__class__ is not int or not low <= v <= high:
                return False
        for n, low, high, nullable in numbers:
            v = get(n)
            if v is None:
                if not nullable:
                    return False
            elif (v.__class__ is not float and v.__class__ is not int) or not (low <= v <= high) or v == inf:
                return False  # NaN fails low <= v; an infinite value fails either bound or the last test
        for n, nullable in names:
            v = get(n)
            if v is None:
                if not nullable:
                    return False
            elif v.__class__ is not str or not 0 < len(v) <= MAX_NAME or not v.isprintable():
                return False
        for n, allowed, nullable in choices:
            v = get(n)
            if (v is None and not nullable) or (v is not None and v not in allowed):
                return False
        for n, nullable in bools:
            v = get(n)
            if v is None:
                if not nullable:
                    return False
            elif v.__class__ is not bool:
                return False
        for n, rule in others:
            if rule.check(get(n)) is not None:
                return False
        if has_top_k:
            top_k, experts = get("top_k"), get("experts")
            if top_k.__class__ is int and experts.__class__ is int and top_k > experts:
                return False
        if has_samples:
            raw, samples = get("raw_samples_us"), get("samples")
            if raw and samples.__class__ is int and len(raw) != samples:
                return False
        return True

    return ok


def result_problem(result: dict, *, with_samples: bool = True) -> str | None:
    """:func:`problem` of a result (``with_samples=False``: its raw samples are not loaded)."""
    fields = None if with_samples else [n for n in RESULT_RULES if n != "raw_samples_us"]
    return problem(RESULT_RULES, result, "result", fields=fields)


def host_problem(host: dict) -> str | None:
    """:func:`problem` of a host fingerprint."""
    return problem(HOST_RULES, host, "host")


def run_problem(run: dict, *, fields: Iterable[str] | None = None) -> str | None:
    """:func:`problem` of a run (``fields``: only these)."""
    return problem(RUN_RULES, run, "run", fields=fields)


def tuned_problem(tuned: dict) -> str | None:
    """:func:`problem` of a tuned configuration."""
    return problem(TUNED_RULES, tuned, "tuned")


def check_host_class(host_class: Any, prefix: str) -> None:
    """What a store writer calls before it writes a host, a run or a tuned configuration: the
    host-class rule of :data:`HOST_RULES` (the reserved reference namespace is read-only).

    :raises db.errors.ReservedHostClass: naming the class and why; nothing is written.
    """
    said = problem({"host_class": HOST_RULES["host_class"]}, {"host_class": host_class}, prefix)
    if said:
        raise ReservedHostClass(f"{said}; nothing was written")
