"""`autoselect report`: figures from fixture databases, the HTML page in a real browser, errors."""

from __future__ import annotations

import base64
import json
import re
import shlex
import subprocess
import sys

import matplotlib.image as mpimg
import pytest
from click.testing import CliRunner

from autoselect.cli import main
from autoselect.report.data import collect
from autoselect.report.figures import bandwidth_figure, fleet_figure, latency_figure, phases_figure
from autoselect.report.series import BackendSeries, bandwidth_gbps, build_series, crossovers
from autoselect.report.style import DPI, FIGSIZE_IN
from autoselect.report.terminal import terminal_chart
from autoselect.report.write import write_report
from db.records import Result

from support import browser
from support import report as h
from support.hostile import refused, tree_state
from support.paths import REPO

FIG_H, FIG_W = int(FIGSIZE_IN[1] * DPI), int(FIGSIZE_IN[0] * DPI)


def _texts(fig) -> str:
    """Every piece of text a figure shows (titles, labels, legend, annotations, captions)."""
    parts = [t.get_text() for t in fig.texts]
    for legend in fig.legends:
        parts += [t.get_text() for t in legend.get_texts()]
    for ax in fig.axes:
        parts += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
        parts += [t.get_text() for t in ax.texts]
        legend = ax.get_legend()
        if legend is not None:
            parts += [t.get_text() for t in legend.get_texts()]
    if fig._suptitle is not None:
        parts.append(fig._suptitle.get_text())
    return "\n".join(parts)


def _run(*args):
    return CliRunner().invoke(main, ["report", *args])


@pytest.fixture
def sweep_db(tmp_path):
    """One 8 x H200 node that measured the main fixture sweep of Qwen3-30B-A3B at EP8."""
    return h.write_db(tmp_path / "sweep.db", [(h.gpu_host(), h.full_sweep())])


# ---------------------------------------------------------------------------------------------
# Derived numbers


def _series(backend, points):
    return BackendSeries(
        backend, timed=[Result(backend, 8, t, 2048, 8, 128, "bf16", latency_us_p50=v) for t, v in points]
    )


def test_crossover_is_interpolated_in_log_log_space():
    a = _series("allgather_reducescatter", [(1, 10.0), (4, 40.0)])
    b = _series("flashinfer_nvlink_two_sided", [(1, 20.0), (4, 20.0)])
    [c] = crossovers([a, b])
    assert (c.faster_below, c.faster_above) == ("allgather_reducescatter", "flashinfer_nvlink_two_sided")
    assert c.tokens_per_rank == pytest.approx(2.0)
    assert c.latency_us == pytest.approx(20.0)
    assert c.on_envelope


def test_crossover_of_two_slower_curves_is_not_where_the_fastest_backend_changes():
    a = _series("allgather_reducescatter", [(1, 10.0), (4, 40.0)])
    b = _series("flashinfer_nvlink_two_sided", [(1, 20.0), (4, 20.0)])
    fastest = _series("deepep_high_throughput", [(1, 5.0), (4, 5.0)])
    crossings = crossovers([a, b, fastest])
    assert [(c.tokens_per_rank, c.on_envelope) for c in crossings] == [(pytest.approx(2.0), False)]


def test_illegal_and_baseline_curves_have_no_crossovers():
    a = _series("allgather_reducescatter", [(1, 10.0), (4, 40.0)])
    illegal = _series("flashinfer_nvlink_one_sided", [(1, 20.0), (4, 20.0)])
    illegal.illegal_reasons = ("needs nvfp4 activations",)
    baseline = _series("reference_all_to_all", [(1, 20.0), (4, 20.0)])
    assert crossovers([a, illegal, baseline]) == []


def test_series_keep_the_newest_row_per_token_count_and_name_what_failed():
    old_ok = h.timed("allgather_reducescatter", 8)
    old_ok.created_at = "2026-01-01T00:00:00+00:00"
    new_bad = h.failed("allgather_reducescatter", 8, "incorrect", "byte 3 differs")
    new_bad.created_at = "2026-02-01T00:00:00+00:00"
    ok16 = h.timed("allgather_reducescatter", 16)
    [s] = build_series([old_ok, new_bad, ok16])
    assert s.tokens == [16]
    assert [(r.tokens_per_rank, r.status) for r in s.failed] == [(8, "incorrect")]
    assert s.state == "partial"
    assert s.label() == "allgather_reducescatter — not timed at T=8 (incorrect)"


def test_bandwidth_falls_back_to_bytes_over_median_time():
    r = Result("allgather_reducescatter", 8, 1, 2048, 8, 128, "bf16", latency_us_p50=10.0, bytes_per_rank=450_000)
    assert bandwidth_gbps(r) == pytest.approx(45.0)


# ---------------------------------------------------------------------------------------------
# Figures from fixture databases


def test_report_writes_every_figure_as_png_of_the_figure_size_and_one_page(sweep_db, tmp_path):
    data = collect(h.QWEN, db_path=sweep_db)
    files = write_report(data, tmp_path / "out")
    assert sorted(files.pngs) == ["bandwidth", "latency", "phases"]  # one machine: no fleet figure
    for path in files.pngs.values():
        assert mpimg.imread(path).shape == (FIG_H, FIG_W, 4)
    assert files.html == tmp_path / "out" / "report.html"
    assert files.svgs == {}


def test_svg_flag_also_writes_each_figure_as_svg(sweep_db, tmp_path):
    files = write_report(collect(h.QWEN, db_path=sweep_db), tmp_path / "out", svg=True)
    assert sorted(p.name for p in files.svgs.values()) == ["bandwidth.svg", "latency.svg", "phases.svg"]
    assert all(p.read_text().lstrip().startswith("<?xml") for p in files.svgs.values())


def _legend(fig) -> list[str]:
    [legend] = fig.legends
    return [t.get_text() for t in legend.get_texts()]


def test_latency_legend_names_illegal_incorrect_and_unavailable_backends(sweep_db):
    data = collect(h.QWEN, db_path=sweep_db)
    legend = _legend(latency_figure(data))
    assert "allgather_reducescatter" in legend
    assert any(t.startswith("flashinfer_nvlink_one_sided — ILLEGAL here") for t in legend)
    assert any(t.startswith("deepep_low_latency — INCORRECT") for t in legend)
    assert "nixl_ep — not measured: unavailable here (nixl_ep not installed)" in legend


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


@pytest.mark.parametrize("figure", [latency_figure, phases_figure, bandwidth_figure])
def test_the_legend_and_the_caption_stay_off_the_axes_and_off_each_other(sweep_db, figure):
    fig = figure(collect(h.QWEN, db_path=sweep_db))
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)  # the constrained layout places the axes
    [legend] = fig.legends
    box = legend.get_window_extent(renderer)
    for ax in fig.axes:
        assert not _overlap(box, ax.get_window_extent(renderer)), (figure.__name__, box, ax.get_window_extent())
    for caption in fig.texts:
        assert not _overlap(box, caption.get_window_extent(renderer)), figure.__name__
    assert box.y0 >= 0 and box.x0 >= 0 and box.x1 <= fig.bbox.width


def test_a_backend_never_run_is_not_measured_unavailable_here_not_illegal_measured_only(tmp_path):
    """The Quick start on CPU: FlashInfer and DeepEP cannot run there; the rules call them illegal
    for this machine too, but nothing of theirs was measured."""
    db = h.write_db(tmp_path / "cpu.db", [(h.cpu_host(), h.cpu_quick_start_sweep())])
    data = collect(h.QWEN, db_path=db, gpu_arch="sm90")
    legend = _legend(latency_figure(data))
    assert [t for t in legend if "deepep_low_latency" in t] == [
        "deepep_low_latency — not measured: unavailable here (needs CUDA GPUs (DeepEP kernels); this run is on CPU)"]
    assert not any("measured only" in t or "ILLEGAL" in t for t in legend), legend


def test_latency_figure_is_log_log_with_a_p10_p90_band_per_timed_backend(sweep_db):
    data = collect(h.QWEN, db_path=sweep_db)
    ax = latency_figure(data).axes[0]
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
    assert len(ax.collections) == 4  # fill_between: three legal backends + the illegal one-sided
    assert ax.get_ylabel() == "round-trip latency (µs, log scale)"
    assert ax.get_xlabel() == "tokens per rank"


def test_crossovers_of_the_fixture_curves_are_annotated_where_the_fastest_backend_changes(sweep_db):
    data = collect(h.QWEN, db_path=sweep_db)
    on_envelope = [c for c in crossovers(data.series) if c.on_envelope]
    # two-sided (12 µs + bytes / 40 GB/s) is fastest, then allgather_reducescatter (30 µs, 60 GB/s),
    # then DeepEP HT (55 µs, 150 GB/s): both changes fall between the measured 256 and 512 tokens.
    assert [(c.faster_below, c.faster_above) for c in on_envelope] == [
        ("flashinfer_nvlink_two_sided", "allgather_reducescatter"),
        ("allgather_reducescatter", "deepep_high_throughput"),
    ]
    assert all(256 < c.tokens_per_rank < 512 for c in on_envelope)
    text = _texts(latency_figure(data))
    for c in on_envelope:
        assert f"crossover ≈ {c.tokens_per_rank:.0f} tokens" in text


def test_recommended_backend_per_workload_bucket_is_the_fastest_legal_estimate(sweep_db):
    data = collect(h.QWEN, db_path=sweep_db, workload="1,64,1024")
    # DeepEP HT, fastest at 1024 alone, is no candidate for this workload: vLLM runs it without CUDA
    # graphs, and the 1- and 64-token steps are CUDA-graph steps with every other backend (selector/step.py)
    assert [(b.tokens_per_rank, b.backend) for b in data.buckets] == [
        (1, "flashinfer_nvlink_two_sided"),
        (64, "flashinfer_nvlink_two_sided"),
        (1024, "allgather_reducescatter"),
    ]
    assert collect(h.QWEN, db_path=sweep_db, workload="1024").buckets[0].backend == "deepep_high_throughput"
    assert [b.latency_us for b in data.buckets] == pytest.approx([
        h.latency_us("flashinfer_nvlink_two_sided", 1),
        h.latency_us("flashinfer_nvlink_two_sided", 64),
        h.latency_us("allgather_reducescatter", 1024),
    ])
    ax = latency_figure(data).axes[0]
    stars = [line for line in ax.lines if line.get_marker() == "*" and len(line.get_xdata()) == 1]
    assert sorted(float(line.get_xdata()[0]) for line in stars) == [1.0, 64.0, 1024.0]


def test_bandwidth_is_a_fraction_of_the_hosts_nvlink_peak(sweep_db):
    data = collect(h.QWEN, db_path=sweep_db)
    fig = bandwidth_figure(data)
    ax = fig.axes[0]
    agrs = next(line for line in ax.lines if line.get_label() == "allgather_reducescatter")
    expected = (1024 * h.BYTES_PER_TOKEN) / (h.latency_us("allgather_reducescatter", 1024) * 1e-6) / 1e9 / 450.0
    assert agrs.get_ydata()[-1] == pytest.approx(expected)
    assert ax.get_ylabel() == "logical bandwidth / NVLink peak"
    assert "NVLink peak (450 GB/s per GPU per direction" in _texts(fig)
    assert "logical bandwidth = bytes_per_rank / t_p50" in _texts(fig)


def test_cpu_host_bandwidth_is_plotted_in_gbps_and_says_there_is_no_nvlink_peak(tmp_path):
    db = h.write_db(tmp_path / "cpu.db", [(h.cpu_host(), [h.timed("allgather_reducescatter", t, world_size=2,
                                                                    device="cpu") for t in (1, 8, 64)])])
    data = collect(h.QWEN, db_path=db, gpu_arch="sm90")
    assert data.nvlink_peak_gbps is None
    fig = bandwidth_figure(data)
    ax = fig.axes[0]
    assert ax.get_ylabel() == "logical bandwidth (GB/s) — no NVLink peak on this host"
    assert "No NVLink peak on this host (cpu device): absolute GB/s shown" in _texts(fig)
    line = next(line for line in ax.lines if line.get_label() == "allgather_reducescatter")
    assert line.get_ydata()[0] == pytest.approx(h.BYTES_PER_TOKEN / (h.latency_us("allgather_reducescatter", 1)
                                                                     * 1e-6) / 1e9)


def test_dispatch_and_combine_are_drawn_in_separate_panels(sweep_db):
    fig = phases_figure(collect(h.QWEN, db_path=sweep_db))
    assert [ax.get_title() for ax in fig.axes] == ["Dispatch", "Combine"]
    two_sided = [next(line for line in ax.lines if line.get_label() == "flashinfer_nvlink_two_sided")
                 for ax in fig.axes]
    p50 = h.latency_us("flashinfer_nvlink_two_sided", 1)
    assert [line.get_ydata()[0] for line in two_sided] == pytest.approx([0.45 * p50, 0.55 * p50])


def test_a_single_measured_point_is_drawn_with_its_band_and_sane_limits(tmp_path):
    db = h.write_db(tmp_path / "one.db", [(h.gpu_host(), [h.timed("allgather_reducescatter", 64)])])
    data = collect(h.QWEN, db_path=db)
    files = write_report(data, tmp_path / "out")
    assert mpimg.imread(files.pngs["latency"]).shape == (FIG_H, FIG_W, 4)
    ax = latency_figure(data).axes[0]
    assert ax.get_xlim() == pytest.approx((32.0, 128.0))
    p50 = h.latency_us("allgather_reducescatter", 64)
    lo, hi = ax.get_ylim()
    assert lo < 0.97 * p50 and hi > 1.05 * p50


def test_all_failed_database_draws_message_figures_naming_each_failure(tmp_path):
    rows = [h.failed("allgather_reducescatter", t, "timeout", "no result in 15 s") for t in (1, 8)]
    rows += [h.failed("deepep_low_latency", 1, "incorrect", "byte 3 differs")]
    db = h.write_db(tmp_path / "failed.db", [(h.gpu_host(), rows)])
    data = collect(h.QWEN, db_path=db)
    files = write_report(data, tmp_path / "out")
    for path in files.pngs.values():
        assert mpimg.imread(path).shape == (FIG_H, FIG_W, 4)
    text = _texts(latency_figure(data))
    assert "No backend was timed" in text
    assert "allgather_reducescatter — timed out (2 points)" in text
    assert "deepep_low_latency — INCORRECT: failed the correctness gate (1 token count)" in text
    assert f"autoselect bench --model {data.model} --world-size 8" in text
    assert "No backend was timed" in terminal_chart(data)


def test_empty_database_is_a_clear_error_and_writes_nothing(tmp_path):
    db = h.write_db(tmp_path / "empty.db", [])
    out = tmp_path / "out"
    result = _run("--model", h.QWEN, "--db", str(db), "--out", str(out))
    assert result.exit_code == 2
    assert result.stderr == (
        f"Error: no measurement of {h.QWEN} (H2048 top8 E128) on any host class; "
        f"run `autoselect bench --model {h.QWEN}` first\n"
    )
    assert not out.exists()


def test_missing_database_is_a_clear_error(tmp_path):
    result = _run("--model", h.QWEN, "--db", str(tmp_path / "nope.db"), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"Error: no results database at {tmp_path / 'nope.db'}")
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "nope.db").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--world-size", "0"], "Error: --world-size 0 must be at least 1\n"),
        (["--world-size", "4"], "Error: no measurement of {model} at --world-size 4 on host class h200x8-test "
                                "(measured: 8); pass one of those or run autoselect bench\n"),
        (["--host-class", "nope"], "Error: host class 'nope' is not in {db}; known: h200x8-test (`autoselect db "
                                   "info` lists them)\n"),
        (["--workload", "bursty"], "Error: unknown --workload 'bursty'; use decode, prefill, mixed or token "
                                   "counts per rank like 1,8,64\n"),
        (["--fleet-backend", "allgather_reducescatter"],
         "Error: --fleet-backend / --fleet-tokens need a fleet database (measurements from two or more machines "
         "of the host class); this one has one machine\n"),
    ],
)
def test_bad_options_are_one_error_line_and_write_nothing(sweep_db, tmp_path, args, message):
    out = tmp_path / "out"
    before = sweep_db.read_bytes()
    result = _run("--model", h.QWEN, "--db", str(sweep_db), "--out", str(out), *args)
    assert result.exit_code == 2
    assert result.stderr == message.format(model=h.QWEN, db=sweep_db)
    assert not out.exists()
    assert sweep_db.read_bytes() == before


def test_out_that_is_a_file_is_a_clear_error(sweep_db, tmp_path):
    out = tmp_path / "taken"
    out.write_text("x")
    result = _run("--model", h.QWEN, "--db", str(sweep_db), "--out", str(out))
    assert result.exit_code == 2
    assert result.stderr == f"Error: --out {out} is a file; pass a directory (it is created if missing)\n"
    assert out.read_text() == "x"


@pytest.mark.parametrize("name", ["a" * 300, "b/" * 2100 + "c", "taken/sub"])
def test_out_the_file_system_cannot_hold_is_one_error_line_and_writes_nothing(sweep_db, tmp_path, name):
    area = tmp_path / "area"
    area.mkdir()
    (area / "taken").write_text("x")  # a file where a directory is needed: ENOTDIR
    before = tree_state(area)
    line = refused(_run("--model", h.QWEN, "--db", str(sweep_db), "--out", str(area / name)))
    assert line.startswith("Error: cannot use --out ") and line.endswith("; pass another directory")
    assert tree_state(area) == before


# ---------------------------------------------------------------------------------------------
# Fleet


def _fleet_db(tmp_path, slow_node: int = 2):
    runs = []
    for i in range(4):
        host = h.gpu_host(machine_id=f"m-node-{i:02d}", hostname=f"node-{i:02d}")
        scale = 1.6 if i == slow_node else 1.0 + 0.002 * i
        runs.append((host, [h.timed(b, t, scale=scale) for b in h.CURVES if b != "flashinfer_nvlink_one_sided"
                            for t in (1, 64, 512)]))
    return h.write_db(tmp_path / "fleet.db", runs)


def test_fleet_database_draws_one_bar_per_node_for_the_chosen_backend_and_tokens(tmp_path):
    db = _fleet_db(tmp_path)
    data = collect(h.QWEN, db_path=db, fleet_backend="allgather_reducescatter", fleet_tokens=64)
    view = data.fleet
    assert (view.backend, view.tokens_per_rank) == ("allgather_reducescatter", 64)
    p50 = h.latency_us("allgather_reducescatter", 64)
    assert {n.hostname: n.latency_us_p50 for n in view.nodes} == pytest.approx(
        {"node-00": p50, "node-01": p50 * 1.002, "node-02": p50 * 1.6, "node-03": p50 * 1.006}
    )
    files = write_report(data, tmp_path / "out")
    assert mpimg.imread(files.pngs["fleet"]).shape == (FIG_H, FIG_W, 4)


def test_fleet_figure_defaults_to_the_recommended_backend(tmp_path):
    data = collect(h.QWEN, db_path=_fleet_db(tmp_path), workload="1")
    assert data.fleet.backend == data.recommended == "flashinfer_nvlink_two_sided"


def test_fleet_tokens_nobody_measured_is_a_clear_error(tmp_path):
    result = _run("--model", h.QWEN, "--db", str(_fleet_db(tmp_path)), "--fleet-tokens", "3",
                  "--fleet-backend", "deepep_high_throughput", "--out", str(tmp_path / "out"))
    assert result.exit_code == 2
    assert result.stderr == (
        "Error: --fleet-tokens 3: no node measured deepep_high_throughput at that token count; "
        "measured: 1, 64, 512\n"
    )


# ---------------------------------------------------------------------------------------------
# The page and the terminal


def test_page_is_self_contained_with_recommendation_command_candidates_and_figures(sweep_db, tmp_path):
    data = collect(h.QWEN, db_path=sweep_db, workload="1,64,1024")
    page = write_report(data, tmp_path / "out").html.read_text()
    assert re.findall(r'src="([a-z]+):', page) == ["data"] * 3
    assert "http://" not in page and "https://" not in page and "<link" not in page
    assert f"<code>--all2all-backend {data.recommended}</code>" in page
    assert data.recommendation["command"].replace("'", "&#x27;") in page
    assert page.count('<tr class="chosen"><td>' + data.recommended + "</td>") == 1
    for png in (tmp_path / "out").glob("*.png"):
        assert base64.b64encode(png.read_bytes()).decode() in page


def test_page_images_load_in_headless_chromium(tmp_path):
    db = _fleet_db(tmp_path)
    files = write_report(collect(h.QWEN, db_path=db), tmp_path / "out")
    # the broken control image last: the probe must see it fail, or it proves nothing
    assert browser.loaded(files.html, tmp_path)[0] == [f"true:{FIG_W}x{FIG_H}"] * 4 + ["true:0x0"]


def _quick_start_report(tmp_path, *extra):
    """The Quick start's report (`report --model ... --gpu-arch sm90 --db example-cpu.db --out
    report-cpu`) over what its CPU bench stores; (the page, the command's stderr)."""
    db = h.write_db(tmp_path / "example-cpu.db", [(h.cpu_host(), h.cpu_quick_start_sweep())])
    out = tmp_path / "report-cpu"
    result = _run("--model", h.QWEN, "--gpu-arch", "sm90", "--db", str(db), "--out", str(out), *extra)
    assert result.exit_code == 0, result.output
    return out / "report.html", result.stderr


@pytest.mark.slow  # two headless Chromium starts: 3-11 s on 2 cores
def test_the_quick_start_report_page_in_chromium_shows_what_was_measured_and_an_honest_confidence(tmp_path):
    page, stderr = _quick_start_report(tmp_path)
    # progress while it draws, on stderr
    assert stderr.splitlines() == [
        f"report: drawing 3 figures into {tmp_path / 'report-cpu'}", "report: drawing latency.png (1 of 3)",
        "report: drawing phases.png (2 of 3)", "report: drawing bandwidth.png (3 of 3)", "report: writing report.html"]
    images, dom = browser.loaded(page, tmp_path)
    assert images == [f"true:{FIG_W}x{FIG_H}"] * 3 + ["true:0x0"]  # every image loaded (and the control did not)
    assert mpimg.imread(browser.screenshot(page, tmp_path, tmp_path / "page.png")).shape[:2] == (4000, 1280)
    # the candidate table weighs exactly the token counts the Quick start measured
    assert re.findall(r"<th>T=(\d+) \(µs\)</th>", dom) == ["1", "16", "256"]
    [chosen] = re.findall(r'<tr class="chosen"><td>([^<]*)</td><td>([^<]*)</td>', dom)
    assert chosen[0] == "allgather_reducescatter" and chosen[1] != "incomplete", chosen  # a weighted value
    assert "for the token counts measured for this host class and shape (1, 16, 256 per rank)" in dom
    # a backend never run is "not measured", not "measured here | illegal"
    rows = dict(re.findall(r"<tr><td>(deepep_low_latency)</td><td>([^<]*)</td>", dom))
    assert rows == {"deepep_low_latency": "not measured"}
    # each caption once: drawn in its image; the page keeps it as alt text only
    assert "<figcaption" not in dom and "Line: median (p50)" not in dom


def test_an_incomplete_pick_is_never_shown_with_high_confidence(tmp_path):
    """--workload mixed weighs 8192 tokens per rank, which nothing measured: the pick has no weighted
    value, and the page says so instead of the answer's confidence."""
    page, _ = _quick_start_report(tmp_path, "--workload", "mixed")
    text = page.read_text()
    assert re.search(r'<tr class="chosen"><td>allgather_reducescatter</td><td>incomplete</td>', text)
    assert "(confidence: high)" not in text
    # the answer itself says none (vLLM's default has no value at 8192: nothing could be compared), so
    # the page shows the answer's level and needs no cap of its own
    assert "(confidence: none)" in text and "Confidence shown as" not in text


def test_terminal_flag_draws_the_latency_chart_and_writes_no_files(sweep_db, tmp_path):
    out = tmp_path / "out"
    result = _run("--model", h.QWEN, "--db", str(sweep_db), "--terminal", "--out", str(out))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].strip().startswith("All2all round-trip latency, µs p50 (log) vs tokens per rank (log)")
    assert any("▚ allgather_reducescatter" in line for line in lines)
    assert any("▚ allgather_reducescatter — measured here" in line for line in lines)
    assert any("flashinfer_nvlink_one_sided — measured here, not a candidate" in line for line in lines)
    assert "deepep_low_latency — INCORRECT: failed the correctness gate (4 token counts)" in lines
    assert "\x1b[" not in result.stdout
    assert not out.exists()


def test_report_command_prints_the_files_it_wrote(sweep_db, tmp_path):
    out = tmp_path / "out"
    result = _run("--model", h.QWEN, "--db", str(sweep_db), "--out", str(out), "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "out_dir": str(out),
        "png": {n: str(out / f"{n}.png") for n in ("latency", "phases", "bandwidth")},
        "svg": {},
        "html": str(out / "report.html"),
    }


def test_report_command_module_does_not_import_matplotlib_until_it_runs():
    code = ("import sys, autoselect.cli.report_cmd, autoselect.report; "
            "print(sorted(m for m in ('matplotlib', 'plotext', 'torch') if m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "[]"


def test_fleet_figure_flags_the_node_the_drift_check_finds_slow_and_no_other(tmp_path):
    data = collect(h.QWEN, db_path=_fleet_db(tmp_path, slow_node=2), fleet_tokens=512)
    assert [(n.hostname, n.drifted, n.drift_note) for n in sorted(data.fleet.nodes, key=lambda n: n.hostname)] == [
        ("node-00", False, None),
        ("node-01", False, None),
        ("node-02", True, "+60% vs the other nodes"),
        ("node-03", False, None),
    ]
    fig = fleet_figure(data)
    bars = fig.axes[0].patches
    assert [b.get_facecolor()[:3] for b in bars].count(pytest.approx((0.839, 0.153, 0.157), abs=0.01)) == 1
    assert "+60% vs the other nodes" in _texts(fig)


def test_report_guide_examples_produce_the_pngs_and_the_page(tmp_path, monkeypatch):
    root = REPO
    guide = (root / "docs" / "report.md").read_text()
    assert "(docs/report.md)" in (root / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", guide, flags=re.S)
    assert len(blocks) == 2  # the synthetic example, then a reference class alone
    monkeypatch.chdir(root)
    monkeypatch.setenv("AUTOSELECT_DB", str(tmp_path / "default.db"))  # the second block names no --db
    for block in blocks:
        for line in block.strip().splitlines():
            argv = shlex.split(line.replace("example.db", str(tmp_path / "example.db"))
                               .replace("report/", str(tmp_path / "report") + "/")
                               .replace("report-ref/", str(tmp_path / "report-ref") + "/"))
            assert argv[0] == "autoselect"
            result = CliRunner().invoke(main, argv[1:])
            assert result.exit_code == 0, (line, result.output)
    for out in ("report", "report-ref"):
        for name in ("latency", "phases", "bandwidth"):
            assert mpimg.imread(tmp_path / out / f"{name}.png").shape == (FIG_H, FIG_W, 4)
        assert (tmp_path / out / "report.html").is_file()
    assert not (tmp_path / "default.db").exists()
    # The guide shows the committed figures those commands draw, of the same size.
    for image in ("latency", "latency-ref-h200"):
        assert f"(img/{image}.png)" in guide
        assert mpimg.imread(root / "docs" / "img" / f"{image}.png").shape == (FIG_H, FIG_W, 4)


def test_cpu_host_measurements_need_the_gpu_arch_whose_dtype_they_stand_for(tmp_path):
    db = h.write_db(tmp_path / "cpu.db", [(h.cpu_host(), [h.timed("allgather_reducescatter", 8, world_size=2,
                                                                    device="cpu")])])
    result = _run("--model", h.QWEN, "--db", str(db), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2
    assert result.stderr == (
        "Error: host class cpu-test-x2 has no GPU architecture (a CPU host); pass --gpu-arch sm90|sm100 "
        "to say which arch's activation dtype its measurements stand for\n"
    )
    assert not (tmp_path / "out").exists()


def test_world_size_one_is_drawn_without_a_recommendation(tmp_path):
    db = h.write_db(tmp_path / "ws1.db", [(h.gpu_host(), [h.timed("allgather_reducescatter", t, world_size=1)
                                                           for t in (1, 8)])])
    data = collect(h.QWEN, db_path=db)
    assert (data.world_size, data.recommended, data.buckets) == (1, None, [])
    page = write_report(data, tmp_path / "out").html.read_text()
    assert "No recommendation: at world size 1 vLLM builds no all2all group" in page
