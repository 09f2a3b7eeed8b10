"""`autoselect report` with NVIDIA's published reference: dashed curves beside the local ones, a
reference class on its own, and every number saying what kind it is.

The reference data is the shipped package data (autoselect/reference/data/, always present);
expected numbers are read back through autoselect.reference's own query API, and two are pinned
to the published tables (212.7 µs, 112.1 µs: 8×H200, 7168 × top-8 × 256 experts, DeepEP LL, 128
tokens per rank).
"""

from __future__ import annotations

import re

import matplotlib.colors as mcolors
import matplotlib.image as mpimg
import numpy as np
import pytest
from click.testing import CliRunner

from autoselect.cli import main
from autoselect.reference import default
from autoselect.report.data import collect
from autoselect.report.figures import bandwidth_figure, latency_figure, phases_figure
from autoselect.report.html import render_html
from autoselect.report.style import BACKEND_STYLE, DPI, EVIDENCE_WORDS, FIGSIZE_IN
from autoselect.report.terminal import terminal_chart
from autoselect.report.write import write_report
from autoselect.selector.answer import EVIDENCE_KINDS

from support import report as h

REF = "ref-h200_sxm-x8"
DSR1 = dict(hidden=7168, top_k=8, experts=256, dtype="bf16")
FIG_H, FIG_W = int(FIGSIZE_IN[1] * DPI), int(FIGSIZE_IN[0] * DPI)
LL_LABEL = "deepep_low_latency — published (AIConfigurator 0.12.0, vLLM 0.24.0 DeepEP on 8×H200)"
HT_LABEL = "deepep_high_throughput — published (AIConfigurator 0.12.0, vLLM 0.24.0 DeepEP on 8×H200)"
AGRS_LABEL = ("allgather_reducescatter — derived from NCCL (NCCL 2.29.2 timings, AIConfigurator 0.12.0); "
              "not a measured all2all")


def _run(*args):
    return CliRunner().invoke(main, ["report", *args])


def _line(ax, label):
    return next(line for line in ax.lines if line.get_label() == label)


@pytest.fixture(scope="module")
def ref_only(tmp_path_factory):
    """DeepSeek-R1 NVFP4 (bf16 activations on Hopper) reported for the reference class alone."""
    missing = tmp_path_factory.mktemp("noref") / "no-such.db"
    return collect(h.DSR1_NVFP4, host_class=REF, db_path=missing, workload="8,128,4096")


def _dsr1_db(tmp_path, host=None, tokens=(8, 32, 128, 512)):
    """One 8 x H200 node that measured DeepSeek-R1 NVFP4's Hopper shape (bf16) at EP8: AGRS and
    DeepEP LL timed, one-sided measured with --include-illegal."""
    rows = [h.timed(b, t, shape=h.DSR1_SHAPE) for b in ("allgather_reducescatter", "deepep_high_throughput")
            for t in tokens]
    rows += [h.timed("flashinfer_nvlink_one_sided", t, illegal=True, shape=h.DSR1_SHAPE) for t in tokens]
    return h.write_db(tmp_path / "dsr1.db", [(host or h.gpu_host(), rows)])


def test_the_report_words_every_evidence_kind_of_the_selector_in_its_order():
    assert tuple(EVIDENCE_WORDS) == EVIDENCE_KINDS


# ---------------------------------------------------------------------------------------------
# A reference class on its own


def test_reference_class_alone_draws_its_published_and_derived_curves_without_a_database(ref_only):
    data = ref_only
    assert data.series == [] and data.reference_only
    assert (data.host_class, data.world_size, data.activation_dtype) == (REF, 8, "bf16")
    assert [(c.backend, c.evidence) for c in data.reference_curves] == [
        ("deepep_high_throughput", "published"), ("deepep_low_latency", "published"),
        ("allgather_reducescatter", "derived"),
    ]
    ll = data.reference.curve("deepep_low_latency")
    point = ll.at(128)
    assert (round(point.latency_us, 1), round(point.dispatch_us, 1), round(point.combine_us, 1)) == (212.7, 112.1,
                                                                                                       100.6)
    ref = default()
    for c in data.reference_curves:  # every point is the reference's own row, the whole published grid
        expected = ref.query(REF, c.backend, world_size=8, **DSR1)
        assert [(p.tokens_per_rank, p.latency_us) for p in c.points] == [(p.tokens_per_rank, p.latency_us)
                                                                          for p in expected]
    assert [c.label() for c in data.reference_curves] == [HT_LABEL, LL_LABEL, AGRS_LABEL]
    assert ll.source_line == "AIConfigurator 0.12.0, vLLM 0.24.0 DeepEP on 8×H200, collected 2026-08-31"
    assert data.host_text == "8×H200 (reference class ref-h200_sxm-x8, published)"
    assert data.nvlink_peak_gbps == 450.0


def test_reference_curves_are_dashed_in_their_backends_colour_with_the_published_values(ref_only):
    fig = latency_figure(ref_only)
    ax = fig.axes[0]
    for curve, label in zip(ref_only.reference_curves, (HT_LABEL, LL_LABEL, AGRS_LABEL)):
        line = _line(ax, label)
        assert line.get_linestyle() == "--"
        assert line.get_markerfacecolor() == "none"
        assert line.get_color() == BACKEND_STYLE[curve.backend][0]
        assert list(line.get_xdata()) == curve.tokens
        assert list(line.get_ydata()) == pytest.approx([p.latency_us for p in curve.points])
    caption = fig.texts[0].get_text()
    assert "not measured here: NVIDIA's published reference for ref-h200_sxm-x8" in caption
    assert "collected 2026-08-31" in caption and "not a measured all2all" in caption
    assert "Band: p10–p90" not in caption  # nothing local to explain


def test_reference_phases_and_bandwidth_are_drawn_from_the_same_points(ref_only):
    fig = phases_figure(ref_only)
    ll = ref_only.reference.curve("deepep_low_latency")
    for ax, phase in zip(fig.axes, ("dispatch_us", "combine_us")):
        line = _line(ax, "deepep_low_latency — published")
        assert line.get_linestyle() == "--"
        assert list(line.get_ydata()) == pytest.approx([getattr(p, phase) for p in ll.points])
    ax = bandwidth_figure(ref_only).axes[0]
    line = _line(ax, "deepep_low_latency — published")
    at128 = list(line.get_xdata()).index(128)
    # bytes per rank = T x (dispatch 2H + 8 top_k, combine 2H), over the round trip, / the 450 GB/s peak
    expected = 128 * (2 * 7168 + 64 + 2 * 7168) / (212.7296008169651e-6) / 1e9 / 450.0
    assert line.get_ydata()[at128] == pytest.approx(expected, rel=1e-6)


def test_reference_class_report_renders_dashed_curves_in_each_backends_colour(ref_only, tmp_path):
    files = write_report(ref_only, tmp_path / "out", svg=True)
    assert sorted(files.pngs) == ["bandwidth", "latency", "phases"]
    png = mpimg.imread(files.pngs["latency"])
    assert png.shape == (FIG_H, FIG_W, 4)
    rgb = png[..., :3]
    for backend in ("deepep_high_throughput", "deepep_low_latency", "allgather_reducescatter"):
        # the backend's colour at the reference curves' 0.9 opacity over the white axes
        colour = 0.9 * np.array(mcolors.to_rgb(BACKEND_STYLE[backend][0])) + 0.1
        assert (np.abs(rgb - colour).max(axis=-1) < 0.03).sum() > 200, backend
    svg = files.svgs["latency"].read_text()
    # every reference line (and its legend sample) is dashed; no local line is drawn
    assert len(re.findall(r"stroke-dasharray", svg)) >= 6


def test_reference_class_page_and_terminal_say_every_number_is_published_or_derived(ref_only, tmp_path):
    page = write_report(ref_only, tmp_path / "out").html.read_text()
    assert "every number on this page is NVIDIA's published measurement" in page
    section = page.split("<h2>Published reference</h2>", 1)[1].split("<h2>Figures</h2>", 1)[0]
    ll = ref_only.reference.curve("deepep_low_latency")
    assert (f'<td class="ev-published" title="published by NVIDIA (AIConfigurator reference tables)">'
            f"{ll.at(128).latency_us:.1f}<sup>P</sup></td>") in section
    assert "AIConfigurator 0.12.0, vLLM 0.24.0 DeepEP on 8×H200, collected 2026-08-31" in section
    agrs = ref_only.reference.curve("allgather_reducescatter")
    assert f"{agrs.at(4096).latency_us:,.0f}<sup>D</sup>" in section
    assert "D derived from published NCCL timings, not a measured all2all" in section

    chart = terminal_chart(ref_only)
    assert "deepep_low_latency — published" in chart and "allgather_reducescatter — derived" in chart
    assert "measured here" not in chart.split("unconnected points")[0]
    assert ("  deepep_low_latency — published: AIConfigurator 0.12.0, vLLM 0.24.0 DeepEP on 8×H200, collected "
            "2026-08-31") in chart.splitlines()
    assert any(line.startswith("  allgather_reducescatter — derived from AIConfigurator 0.12.0 NCCL 2.29.2")
               and line.endswith("not a measured all2all") for line in chart.splitlines())


def test_reference_class_needs_no_local_data_on_the_command_line(tmp_path):
    out = tmp_path / "out"
    result = _run("--model", h.DSR1_NVFP4, "--host-class", REF, "--db", str(tmp_path / "none.db"),
                  "--out", str(out), "--format", "json")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["bandwidth.png", "latency.png", "phases.png", "report.html"]
    assert not (tmp_path / "none.db").exists()


@pytest.mark.parametrize("args, message", [
    (["--host-class", "ref-nope"], "Error: unknown reference host class 'ref-nope'; known: ref-h100_sxm-x8, "
                                   "ref-h200_sxm-x8, ref-b200_sxm-x8, ref-b300_sxm-x8, ref-gb200-x4, ref-gb300-x4, "
                                   "ref-gb200-nvl72\n"),
    (["--host-class", "ref-gb200-nvl72"], "Error: ref-gb200-nvl72 spans up to 72 GPUs in 18 trays: give the world "
                                          "size to answer for (--world-size N, N <= 72)\n"),
    (["--host-class", REF, "--world-size", "16"], "Error: ref-h200_sxm-x8 describes 2 to 8 GPUs, not a world size "
                                                  "of 16\n"),
    (["--host-class", REF, "--gpu-arch", "sm100"], "Error: --gpu-arch sm100: ref-h200_sxm-x8 is H200 hardware "
                                                   "(sm90); drop --gpu-arch or pass sm90\n"),
    (["--host-class", REF, "--fleet-backend", "deepep_low_latency"],
     "Error: --fleet-backend / --fleet-tokens need a fleet database (measurements from two or more machines of "
     "the host class); this one has one machine\n"),
])
def test_bad_reference_options_are_one_error_line_and_write_nothing(tmp_path, args, message):
    out = tmp_path / "out"
    result = _run("--model", h.DSR1_NVFP4, "--db", str(tmp_path / "none.db"), "--out", str(out), *args)
    assert (result.exit_code, result.stderr) == (2, message)
    assert not out.exists()


def test_an_nvfp4_model_on_a_gb200_tray_gets_the_tensorrt_llm_kernels_and_no_bf16_deepep_rows(tmp_path):
    data = collect(h.DSR1_NVFP4, host_class="ref-gb200-x4", db_path=tmp_path / "none.db")
    assert (data.activation_dtype, data.world_size) == ("nvfp4", 4)
    curves = {c.backend: c for c in data.reference_curves}
    assert sorted(curves) == ["allgather_reducescatter", "flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided"]
    assert all(p.wire_dtype == "nvfp4" for b in ("flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided")
               for p in curves[b].points)
    assert curves["flashinfer_nvlink_one_sided"].label() == (
        "flashinfer_nvlink_one_sided — published (AIConfigurator 0.12.0, TensorRT-LLM 1.2.0rc6 NVLinkOneSided on "
        "4×GB200)")


# ---------------------------------------------------------------------------------------------
# Beside local measurements


def test_a_measured_h200_class_gets_the_reference_beside_its_lines_in_the_same_colours(tmp_path):
    data = collect(h.DSR1_NVFP4, db_path=_dsr1_db(tmp_path), workload="8,128")
    assert data.reference.ref_class.name == REF and not data.reference_only
    assert data.reference.how.startswith("host class h200x8-test has 8×NVIDIA H200, the GPUs of ref-h200_sxm-x8")
    # clipped to the measured token range, so the reference sits beside the local lines
    assert all(8 <= t <= 512 for c in data.reference_curves for t in c.tokens)
    assert [c.backend for c in data.reference_curves] == ["deepep_high_throughput", "deepep_low_latency",
                                                          "allgather_reducescatter"]
    ax = latency_figure(data).axes[0]
    for backend in ("allgather_reducescatter", "deepep_high_throughput"):
        local = _line(ax, backend)
        published = next(line for line in ax.lines if line.get_label().startswith(f"{backend} — "))
        assert (local.get_linestyle(), published.get_linestyle()) == ("-", "--")
        assert local.get_color() == published.get_color() == BACKEND_STYLE[backend][0]
    # a local line that is never a candidate is dotted: dashed means "reference" only
    one_sided = next(line for line in ax.lines if line.get_label().startswith("flashinfer_nvlink_one_sided — ILLEGAL"))
    assert one_sided.get_linestyle() == ":"


def test_page_marks_local_numbers_measured_here_and_reference_numbers_published(tmp_path):
    data = collect(h.DSR1_NVFP4, db_path=_dsr1_db(tmp_path), workload="8,128")
    page = write_report(data, tmp_path / "out").html.read_text()
    candidates = page.split("<h2>Candidates</h2>", 1)[1].split("<h2>Published reference</h2>", 1)[0]
    agrs = h.latency_us("allgather_reducescatter", 8, h.DSR1_SHAPE)
    assert f'<td class="ev-measured" title="measured here">{agrs:.1f}<sup>M</sup></td>' in candidates
    assert "M measured here · ~ estimated by the selector" in candidates
    reference = page.split("<h2>Published reference</h2>", 1)[1].split("<h2>Figures</h2>", 1)[0]
    ll = data.reference.curve("deepep_low_latency")
    assert f"{ll.at(128).latency_us:.1f}<sup>P</sup>" in reference and "<sup>M</sup>" not in reference
    measurements = page.split("<h2>Measurements</h2>", 1)[1]
    assert "<td>allgather_reducescatter</td><td>measured here</td>" in measurements
    assert "<td>deepep_low_latency</td><td>published: AIConfigurator 0.12.0, vLLM 0.24.0 DeepEP" in measurements


def test_terminal_names_each_lines_kind_and_each_buckets_number_kind(tmp_path):
    data = collect(h.DSR1_NVFP4, db_path=_dsr1_db(tmp_path), workload="8,128")
    chart = terminal_chart(data)
    assert "allgather_reducescatter — measured here" in chart
    assert "deepep_low_latency — published" in chart and "allgather_reducescatter — derived" in chart
    marks = next(line for line in chart.splitlines() if line.startswith("fastest legal backend per workload bucket"))
    assert re.fullmatch(r"fastest legal backend per workload bucket: T=8: \w+ [\d.]+ µs \(measured here\), "
                        r"T=128: \w+ [\d.]+ µs \(measured here\)", marks), marks


def test_no_reference_flag_and_a_host_of_other_gpus_draw_no_reference(tmp_path):
    data = collect(h.DSR1_NVFP4, db_path=_dsr1_db(tmp_path), reference=False)
    assert (data.reference, data.reference_note) == (None, "reference curves left out (--no-reference)")
    nvl = h.gpu_host(gpu_name="NVIDIA H200 NVL", host_class="h200nvl-test")
    other = tmp_path / "other"
    other.mkdir()
    data = collect(h.DSR1_NVFP4, db_path=_dsr1_db(other, host=nvl))
    assert data.reference is None
    assert data.reference_note.startswith("no reference curves: host class h200nvl-test (8×NVIDIA H200 NVL) is none "
                                          "of the published reference systems")
    assert not [line for line in latency_figure(data).axes[0].lines if line.get_linestyle() == "--"]
    page = write_report(data, tmp_path / "out").html.read_text()
    assert f"<h2>Published reference</h2>\n<p>{data.reference_note}.</p>" in page


def test_a_dtype_the_reference_did_not_publish_gets_only_the_derived_curve_and_says_why(tmp_path):
    db = h.write_db(tmp_path / "fp8.db", [(h.gpu_host(), [
        h.timed("allgather_reducescatter", t, shape=(7168, 8, 256, "fp8_block128")) for t in (8, 64)])])
    data = collect(str(h.MODELS / "deepseek-v3"), db_path=db)
    assert [(c.backend, c.evidence) for c in data.reference_curves] == [("allgather_reducescatter", "derived")]
    [absent] = data.reference.absent
    assert absent.startswith("ref-h200_sxm-x8 has no published all2all rows for H7168 top8 E256 "
                             "fp8_block128 dispatch at EP8; it has deepep_high_throughput, deepep_low_latency at")
    assert "bf16 dispatch" in absent
    assert absent in terminal_chart(data)


def test_candidate_values_the_selector_rests_on_published_or_derived_rows_are_marked_so(tmp_path):
    """The candidate table and the terminal read each bucket's ``evidence`` (the selector writes it
    when a value is not measured here) and ``source`` (interpolated / extrapolated: estimated)."""
    data = collect(h.DSR1_NVFP4, db_path=_dsr1_db(tmp_path), workload="8,128")
    rec = data.recommendation
    first, second = rec["candidates"][0]["buckets"]
    first.update(evidence="published", source="point")
    second.update(evidence="derived", source="interpolated")
    page = render_html(data, {})
    candidates = page.split("<h2>Candidates</h2>", 1)[1].split("<h2>Published reference</h2>", 1)[0]
    assert (f'<td class="ev-published" title="published by NVIDIA (AIConfigurator reference tables)">'
            f'{first["latency_us"]:.1f}<sup>P</sup></td>') in candidates
    assert (f'<td class="ev-derived" title="derived from published NCCL timings, not a measured all2all; '
            f'estimated between or beyond the token counts it rests on">~{second["latency_us"]:.1f}<sup>D</sup></td>'
            ) in candidates
    # the weighted latency carries the weakest kind of what it weighs, estimated when any part is
    weighted = rec["candidates"][0]["weighted_us"]
    assert f"~{weighted:.1f}<sup>D</sup></td>" in candidates
    assert ("M measured here · P published by NVIDIA (AIConfigurator reference tables) · D derived from published "
            "NCCL timings, not a measured all2all · ~ estimated by the selector") in candidates

    data.buckets[0].evidence, data.buckets[1].estimated = "published", True
    marks = next(line for line in terminal_chart(data).splitlines()
                 if line.startswith("fastest legal backend per workload bucket"))
    assert "µs (published by NVIDIA (AIConfigurator reference tables))" in marks
    assert "µs (~ estimated from values measured here)" in marks
