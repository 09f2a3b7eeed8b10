"""The backend registry (autoselect/rules/backends.py) held against every per-backend table.

A backend is declared once, in its registry row: name, spellings, capability, benchmark adapter
and the vLLM module its prepare step lives in. The tables that must have a row for it (the wire
dtypes, the entry points) and every table that names backends (rules, knobs, flags, the report's
style, the published reference, the perf scripts' lists) are checked here; each failure names
the table and what it lacks or what it names that the registry does not know.
"""

from __future__ import annotations

import tomllib

import pytest

from support.paths import REPO, load_script

from autoselect import knobs
from autoselect.payload import ACTIVATION_DTYPES
from autoselect.reference import tables as reference_tables
from autoselect.reference.transfer import TRANSFER_ERROR
from autoselect.report.style import BACKEND_STYLE
from autoselect.rules import backends as registry
from autoselect.rules import (budgets, cuda_graphs, eplb, experts, flashinfer, moe_backends, platforms, reports, selection,
                              serve_options)
from autoselect.rules.versions import version_in
from autoselect.rules.wire import READ_IN, WIRE_DTYPES, WireRule
from autoselect.vllm_flags import emit
from bench import backends as adapters

GROUP = "autoselect.backends"


def entry_points() -> dict[str, str]:
    """pyproject.toml's ``autoselect.backends`` entry points."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return dict(project["entry-points"][GROUP])


# --- what a registered backend must have -----------------------------------------------------


def missing_rows(backends: dict, baselines: dict, wire_rows: tuple, registered: dict[str, str]) -> list[str]:
    """Every row a per-backend table lacks for a backend of the registry, one sentence each.

    :param backends: the registry's rows (:data:`autoselect.rules.BACKENDS`).
    :param baselines: the benchmark-only baselines (:data:`autoselect.rules.BASELINES`).
    :param wire_rows: the wire-dtype table (:data:`autoselect.rules.wire.WIRE_DTYPES`).
    :param registered: the entry points pyproject.toml registers.
    """
    out = []
    built_in = {c.backend: c.adapter for c in backends.values() if c.adapter} | {
        b.name: b.adapter for b in baselines.values()}
    for name, adapter in built_in.items():
        if registered.get(name) != adapter:
            out.append(f'pyproject.toml [project.entry-points."{GROUP}"]: no {name} = "{adapter}" '
                       f"(the adapter autoselect/rules/backends.py declares)")
    for name in registered:
        if name not in built_in:
            out.append(f'pyproject.toml [project.entry-points."{GROUP}"] registers {name}, which '
                       "autoselect/rules/backends.py declares no adapter for")
    for cap in backends.values():
        if cap.adapter is None:
            continue
        for release in (r for r in READ_IN if cap.spelling(r) is not None):  # the releases that have it
            lacking = [d for d in ACTIVATION_DTYPES if not any(
                r.backend == cap.backend and r.env is None and (r.activation is None or d in r.activation)
                and version_in(release, r.since, r.until) for r in wire_rows)]
            if lacking:
                out.append(f"autoselect/rules/wire.py WIRE_DTYPES: no row for {cap.backend} with "
                           f"{', '.join(lacking)} activations in vLLM {release} (a benchmarked backend without "
                           "one would read as sending the activation dtype as it is)")
    for cap in backends.values():
        if any(r.backend == cap.backend for r in wire_rows) and cap.prepare_finalize is None:
            out.append(f"autoselect/rules/backends.py: {cap.backend} has wire rows but no prepare_finalize (the "
                       "vLLM module scripts/read_release.py reads them from)")
    return out


def test_every_registered_backend_has_its_entry_point_and_its_wire_rows():
    assert missing_rows(registry.BACKENDS, registry.BASELINES, WIRE_DTYPES, entry_points()) == []


def test_a_backend_declared_without_its_rows_is_named_with_each_table_it_lacks():
    new = registry.Capability("unregistered_ep", "an example", (registry.Spelling("unregistered_ep", READ_IN[0]),),
                              adapter="bench.backends.unregistered_ep:UnregisteredEp")
    said = missing_rows({**registry.BACKENDS, "unregistered_ep": new}, registry.BASELINES, WIRE_DTYPES, entry_points())
    assert said == [
        f'pyproject.toml [project.entry-points."{GROUP}"]: no unregistered_ep = "bench.backends.unregistered_ep:UnregisteredEp" '
        "(the adapter autoselect/rules/backends.py declares)",
        *[f"autoselect/rules/wire.py WIRE_DTYPES: no row for unregistered_ep with {', '.join(ACTIVATION_DTYPES)} "
          f"activations in vLLM {release} (a benchmarked backend without one would read as sending the "
          "activation dtype as it is)" for release in READ_IN],
    ]
    # rows for every activation dtype, but not from the first release read: named per release
    late = WireRule("unregistered_ep", None, None, READ_IN[-1], None, "as it is", "example")
    said = missing_rows({**registry.BACKENDS, "unregistered_ep": new}, registry.BASELINES, (*WIRE_DTYPES, late),
                        {**entry_points(), "unregistered_ep": new.adapter})
    assert [s.split(" (")[0] for s in said] == [
        f"autoselect/rules/wire.py WIRE_DTYPES: no row for unregistered_ep with {', '.join(ACTIVATION_DTYPES)} "
        f"activations in vLLM {release}" for release in READ_IN[:-1]
    ] + ["autoselect/rules/backends.py: unregistered_ep has wire rows but no prepare_finalize"]


def test_the_entry_points_and_builtin_are_the_registrys_adapters_each_a_backend_of_its_name():
    assert adapters.BUILTIN == registry.ADAPTERS == entry_points()
    assert list(registry.ADAPTERS)[-len(registry.BASELINES):] == list(registry.BASELINES)
    for name, target in registry.ADAPTERS.items():
        module, _, attr = target.partition(":")
        assert module == f"bench.backends.{name}", target  # one file per adapter, named for its backend
        cls = getattr(__import__(module, fromlist=[attr]), attr)
        assert issubclass(cls, adapters.Backend) and cls.name == name


def test_a_backend_is_recommendable_exactly_when_autoselect_can_benchmark_it():
    assert [b for b, c in registry.BACKENDS.items() if c.recommendable] == [
        b for b in registry.ADAPTERS if b not in registry.BASELINES]
    assert all(name.startswith("reference_") and registry.resolve(name) == name for name in registry.BASELINES)


def test_a_backends_prepare_finalize_is_the_module_its_wire_rows_were_read_from():
    for cap in registry.BACKENDS.values():
        rows = [r for r in WIRE_DTYPES if r.backend == cap.backend]
        if rows:
            cited = f"prepare_finalize/{cap.prepare_finalize}.py"
            assert any(cited in r.source for r in rows), f"{cap.backend}: no wire row cites {cited}"


def test_read_release_reads_each_backends_prepare_step_from_its_registry_row():
    script = load_script(REPO / "scripts" / "read_release.py")
    rows = {c.prepare_finalize: c.backend for c in registry.BACKENDS.values() if c.prepare_finalize}
    assert {k: v for k, v in script._PREPARE_FINALIZE.items() if k in rows} == rows


# --- what a table names must be registered ------------------------------------------------------

CANONICAL = set(registry.BACKENDS)
MEASURED = CANONICAL | set(registry.BASELINES)  # what an adapter can be named
FLAG_VALUES = set(registry.ALL_FLAG_VALUES)


def _perf(name: str):
    """A perf script as a module (its ``goals`` helper first: run as a script, perf/ is its path)."""
    load_script(REPO / "perf" / "goals.py")
    return load_script(REPO / "perf" / name)


#: table -> (the names it holds, the registry names they must be among)
NAMED = {
    "rules/wire.py WIRE_DTYPES": (lambda: {r.backend for r in WIRE_DTYPES}, CANONICAL),
    "rules/backends.py ALIASES (targets)": (lambda: {b for b, _, _ in registry.ALIASES.values()}, CANONICAL),
    "rules/backends.py DEPRECATIONS (instead)": (lambda: {d.instead for d in registry.DEPRECATIONS.values()},
                                                 FLAG_VALUES),
    "rules/backends.py replaced_by": (lambda: {c.replaced_by for c in registry.BACKENDS.values() if c.replaced_by},
                                      CANONICAL),
    "rules/selection.py SELECTION_ERAS": (
        lambda: {e.default for e in selection.SELECTION_ERAS} | {v for e in selection.SELECTION_ERAS
                                                                for v in e.variable_values}, FLAG_VALUES),
    "rules/budgets.py DISPATCH_BUDGETS": (lambda: {b.backend for b in budgets.DISPATCH_BUDGETS}, CANONICAL),
    "rules/experts.py EXPERT_KERNELS (accepts)": (
        lambda: {b for k in experts.EXPERT_KERNELS if k.accepts for b in k.accepts}, CANONICAL),
    "rules/experts.py _LAYOUTS": (lambda: {r[0] for r in experts._LAYOUTS}, CANONICAL),
    "rules/cuda_graphs.py EAGER_BACKENDS": (lambda: {r.backend for r in cuda_graphs.EAGER_BACKENDS}, CANONICAL),
    "rules/serve_options.py DBO_SUPPORT": (lambda: {d.backend for d in serve_options.DBO_SUPPORT}, CANONICAL),
    "rules/eplb.py ASYNC_NCCL_BACKENDS": (lambda: set(eplb.ASYNC_NCCL_BACKENDS), CANONICAL),
    "rules/reports.py UPSTREAM_REPORTS": (lambda: {b for r in reports.UPSTREAM_REPORTS for b in r.backends}, CANONICAL),
    "rules/platforms.py PLATFORMS": (lambda: {b for p in platforms.PLATFORMS.values() for b in p.backends}, CANONICAL),
    "rules/moe_backends.py BINDS_FROM": (lambda: {moe_backends.BINDS_FROM}, CANONICAL),
    "rules/flashinfer.py VLLM_CALLS": (lambda: {c.backend for c in flashinfer.VLLM_CALLS}, CANONICAL),
    "knobs.py KNOBS": (lambda: {b for k in knobs.KNOBS for b in k.backends}, MEASURED),
    "vllm_flags/emit.py WORKSPACE_SIZED_BACKENDS": (lambda: set(emit.WORKSPACE_SIZED_BACKENDS), CANONICAL),
    "report/style.py BACKEND_STYLE": (lambda: set(BACKEND_STYLE), MEASURED | FLAG_VALUES),
    "reference/tables.py BACKEND_NAMES": (lambda: set(reference_tables.BACKEND_NAMES.values()), CANONICAL),
    "reference/tables.py ROUND_TRIP": (lambda: set(reference_tables.ROUND_TRIP), CANONICAL),
    "reference/tables.py FIDELITY": (lambda: set(reference_tables.FIDELITY), CANONICAL),
    "reference/transfer.py TRANSFER_ERROR": (lambda: set(TRANSFER_ERROR), CANONICAL),
    "perf/regret.py PRIORITY": (lambda: set(_perf("regret.py").PRIORITY), CANONICAL),
    "perf/regret_reference.py PRIORITY": (lambda: set(_perf("regret_reference.py").PRIORITY), CANONICAL),
    "perf/db_lookup.py BACKENDS": (lambda: set(_perf("db_lookup.py").BACKENDS), MEASURED),
    "perf/vllm_bridge_batching.py BACKENDS": (lambda: set(_perf("vllm_bridge_batching.py").BACKENDS), FLAG_VALUES),
}


@pytest.mark.parametrize("table", sorted(NAMED))
def test_a_table_names_only_backends_the_registry_declares(table):
    names, known = NAMED[table]
    assert sorted(names() - known) == [], f"{table} names backends autoselect/rules/backends.py does not declare"


def test_every_published_backend_has_its_round_trip_and_fidelity():
    published = set(reference_tables.BACKEND_NAMES.values())
    assert sorted(published - set(reference_tables.ROUND_TRIP)) == []
    assert sorted((published | {registry.DEFAULT_BACKEND}) - set(reference_tables.FIDELITY)) == []


def test_the_fixed_priority_policies_are_one_order():
    # TensorRT-LLM's CommunicationFactory order; the local study skips the backends its fixtures lack
    full, local = _perf("regret_reference.py").PRIORITY, _perf("regret.py").PRIORITY
    assert [b for b in full if b in local] == list(local)
    assert full[-1] == local[-1] == registry.DEFAULT_BACKEND
