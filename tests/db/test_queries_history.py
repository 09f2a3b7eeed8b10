"""`db.queries.results_for(summarize=...)`: the selector reads one row per point, not the history.

A fleet that re-benchmarks daily stores the same points again and again; the selector only
needs the newest row per point, status and versions, the range of the medians and how many
rows there were. These tests build such a history (two machines, six sweeps, an old and a new
vLLM, disqualifying, unavailable, timed-out, tuned and illegal rows) and check that the
summarized query loses nothing the selector reads: every answer equals the answer computed
from every stored row.
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from support.db import hgx_host, make_result
from support.paths import FIXTURES

from autoselect.model import MoeProfile, load_profile
from autoselect.selector import STALENESS_KEYS, recommend
from autoselect.workload import Deployment
from db import queries
from db.importing import import_file
from db.store import Store

SHAPE = dict(hidden=7168, top_k=8, experts=256, activation_dtype="fp8_block128")
TOKENS = (1, 8, 64, 512, 4096)


def _history(path: Path) -> str:
    """Six sweeps on two machines of one host class; returns the host class."""
    rng = random.Random(7)
    hosts = [hgx_host("node-a"), hgx_host("node-b")]
    with Store(path) as store:
        for sweep in range(6):
            vllm = "0.30.0" if sweep < 2 else "0.33.0"
            for m, host in enumerate(hosts):
                versions = {"vllm": vllm, "flashinfer": "0.7.2", "driver": "570.133.20"}
                # two rows of a sweep share a timestamp: the id breaks the tie, as in the selector
                when = f"2026-11-{10 + sweep:02d}T0{m}:00:00+00:00"
                with store.run(host) as run:
                    for backend, base in (("allgather_reducescatter", 100.0), ("flashinfer_nvlink_two_sided", 90.0),
                                          ("deepep_high_throughput", 80.0)):
                        for t in TOKENS:
                            p50 = (base + t / 16) * (1 + rng.random() * 0.5)  # run-to-run spread > one run's band
                            store.add_result(run.id, make_result(backend, t, knobs={}, versions=versions,
                                                                 latency_us_p50=p50, raw_samples_us=[],
                                                                 samples=12, created_at=when))
                    # tuned and illegal rows: never the untuned backend's evidence
                    store.add_result(run.id, make_result("allgather_reducescatter", 64, versions=versions,
                                                         latency_us_p50=1.0, created_at=when))
                    store.add_result(run.id, make_result("flashinfer_nvlink_one_sided", 64, knobs={}, illegal=True,
                                                         versions=versions, latency_us_p50=1.0, created_at=when))
                    store.add_result(run.id, make_result("deepep_low_latency", 8, knobs={}, raw_samples_us=[],
                                                         status="unavailable", error=f"no DeepEP (sweep {sweep})",
                                                         versions=versions, created_at=when))
                    if sweep in (2, 4) and m == 1:
                        status = "incorrect" if sweep == 2 else "error"
                        store.add_result(run.id, make_result("deepep_high_throughput", 512, knobs={}, status=status,
                                                             raw_samples_us=[], error=f"{status} in sweep {sweep}",
                                                             versions=versions, created_at=when))
                    if sweep == 3:
                        store.add_result(run.id, make_result("flashinfer_nvlink_two_sided", 4096, knobs={},
                                                             status="timeout", raw_samples_us=[], versions=versions,
                                                             created_at=when))
    return hosts[0].host_class


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    path = tmp_path_factory.mktemp("history") / "history.db"
    host_class = _history(path)
    conn = queries.connect_readonly(path)
    yield conn, host_class
    conn.close()


def test_summarized_rows_stand_for_every_stored_row_of_the_shape(history):
    conn, host_class = history
    every = queries.results_for(conn, **SHAPE, world_size=8, host_class=host_class)
    summary = queries.results_for(conn, **SHAPE, world_size=8, host_class=host_class, summarize=STALENESS_KEYS)
    assert len(every) == 6 * 2 * (3 * 5 + 3) + 2 + 2  # + the disqualifying and the timed-out rows
    assert sum(r.group_count for r in summary) == len(every)
    groups: dict[tuple, list] = {}
    for r in every:
        key = (r.backend, r.tokens_per_rank, r.status, r.illegal, tuple(sorted(r.knobs.items())),
               r.latency_us_p50 is None, r.versions["vllm"])
        groups.setdefault(key, []).append(r)
    assert len(summary) == len(groups)
    for s in summary:
        members = groups[(s.backend, s.tokens_per_rank, s.status, s.illegal, tuple(sorted(s.knobs.items())),
                          s.latency_us_p50 is None, s.versions["vllm"])]
        newest = max(members, key=lambda r: (r.created_at, r.id))
        assert s.id == newest.id and s.__dict__ == {**newest.__dict__, "group_count": len(members),
                                                    "group_p50_min": s.group_p50_min,
                                                    "group_p50_max": s.group_p50_max}
        medians = [r.latency_us_p50 for r in members if r.latency_us_p50 is not None]
        assert (s.group_p50_min, s.group_p50_max) == ((min(medians), max(medians)) if medians else (None, None))
    assert [r.id for r in summary] == sorted(r.id for r in summary)


def test_the_summarized_lookup_uses_the_shape_index(history):
    conn, host_class = history
    sql: list[str] = []
    conn.set_trace_callback(sql.append)
    try:
        queries.results_for(conn, **SHAPE, world_size=8, host_class=host_class, summarize=STALENESS_KEYS)
    finally:
        conn.set_trace_callback(None)
    plan = " ".join(row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + sql[0]))
    assert "USING INDEX results_shape_host_class" in plan
    assert "SCAN r" not in plan


@pytest.mark.parametrize("vllm_version", ["0.33.0", "0.30.0"])
@pytest.mark.parametrize("kind", ["decode", "prefill", "mixed"])
def test_the_selector_answers_the_same_from_the_summary_as_from_every_row(history, vllm_version, kind):
    conn, host_class = history
    profile = MoeProfile.from_shape(7168, 256, 8, "fp8_block128")
    deployment = Deployment(dp=8, tp=1)
    every = queries.results_for(conn, **SHAPE, world_size=8, host_class=host_class)
    host = hgx_host("node-a")
    host.versions = {**host.versions, "deep_ep": "1.2.1", "flashinfer": "0.7.2"}  # DeepEP legal, flashinfer fresh
    kw = dict(conn=conn, deployment=deployment, host_class=host_class, host=host,
              vllm_version=vllm_version, workload=kind)
    summarized = recommend(profile, **kw).to_dict()
    assert summarized == recommend(profile, rows=every, **kw).to_dict()
    rejected = {r["backend"]: r for r in summarized["rejected"]}
    assert rejected["deepep_high_throughput"]["reasons"] == [
        "error result at 512 tokens/rank (result 184, run 10, 2026-11-14T01:00:00+00:00): error in sweep 4;"
        " 1 more such result(s); if run 10 measured a mistake, `autoselect db drop-run 10 --yes` removes it"]
    assert rejected["deepep_low_latency"]["reasons"] == ["unavailable on this host class: no DeepEP (sweep 5)"]
    assert summarized["data_used"]["results_considered"] == len(every)


@pytest.mark.parametrize("model,host_class,world_size", [
    ("deepseek-r1-nvfp4", "b200x8-9a4f2b61", 8), ("deepseek-r1-nvfp4", "h200x8-5d1c7e0a", 8),
    ("deepseek-v3", "h200x8-5d1c7e0a", 8), ("qwen3-30b-a3b", "h200x8-5d1c7e0a", 8),
    ("qwen3-235b-a22b-fp8", "h200x8-5d1c7e0a", 8), ("deepseek-r1-nvfp4", "b200x8-9a4f2b61", 4),
])
def test_the_shipped_fixtures_answer_the_same_summarized(tmp_path_factory, model, host_class, world_size):
    path = tmp_path_factory.getbasetemp() / "shipped-fixtures.db"
    if not path.exists():
        import_file(path, FIXTURES / "results" / "h200.jsonl")
        import_file(path, FIXTURES / "results" / "b200.jsonl")
    conn = queries.connect_readonly(path)
    try:
        host = queries.newest_host(conn, host_class)
        profile = load_profile(str(FIXTURES / "models" / model))
        dtype = profile.activation_dtype(host.gpu_arch)
        every = queries.results_for(conn, hidden=profile.hidden_size, top_k=profile.top_k,
                                    experts=profile.num_experts, activation_dtype=dtype, world_size=world_size,
                                    host_class=host_class)
        deployment = Deployment(dp=world_size, tp=1)
        for kind in ("decode", "prefill", "mixed"):
            kw = dict(conn=conn, deployment=deployment, host_class=host_class, host=host,
                      workload=kind)
            assert recommend(profile, **kw).to_dict() == recommend(profile, rows=every, **kw).to_dict()
    finally:
        conn.close()


def test_a_row_without_created_at_is_dated_by_its_run_as_the_selector_dates_it(tmp_path):
    path = tmp_path / "undated.db"
    host_class = _history(path)
    with sqlite3.connect(path) as raw:  # rows written by an old or foreign writer: no created_at
        raw.execute("UPDATE results SET created_at = '' WHERE run_id % 3 = 0")
        raw.execute("UPDATE runs SET started_at = '2026-11-20T00:00:00+00:00' WHERE id = 3")
    conn = queries.connect_readonly(path)
    try:
        every = queries.results_for(conn, **SHAPE, world_size=8, host_class=host_class)
        summary = queries.results_for(conn, **SHAPE, world_size=8, host_class=host_class, summarize=STALENESS_KEYS)
        assert {r.run_id for r in summary if r.status == "ok" and r.versions["vllm"] == "0.30.0"} == {3}
        profile = MoeProfile.from_shape(7168, 256, 8, "fp8_block128")
        deployment = Deployment(dp=8, tp=1)
        kw = dict(conn=conn, deployment=deployment, host_class=host_class, host=hgx_host("node-a"),
                  vllm_version="0.30.0", workload="mixed")
        assert recommend(profile, **kw).to_dict() == recommend(profile, rows=every, **kw).to_dict()
    finally:
        conn.close()
