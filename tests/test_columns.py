"""autoselect/columns.py: the one printer of aligned text columns."""

from __future__ import annotations

import re

from support.paths import REPO

from autoselect.columns import aligned


def test_each_column_is_as_wide_as_its_widest_cell_and_numbers_align_right():
    rows = [["backend", "us"], ["allgather_reducescatter", "60.1"], ["deepep_low_latency", "109.3"]]
    assert aligned(rows, right={1}) == [
        "backend                     us",
        "allgather_reducescatter   60.1",
        "deepep_low_latency       109.3",
    ]


def test_minimum_widths_hold_until_a_cell_is_wider_and_then_the_column_grows_for_every_row():
    rows = [["backend", "tokens"], ["flashinfer_nvlink_two_sided (illegal)", "1"]]
    assert aligned(rows, right={1}, min_widths=[10, 7], sep=" ") == [
        "backend                                tokens",
        "flashinfer_nvlink_two_sided (illegal)       1",
    ]
    assert aligned([["a", "1"]], right={1}, min_widths=[4, 3], sep=" ") == ["a      1"]


def test_no_line_ends_in_blanks_and_short_rows_get_empty_cells():
    assert aligned([["a", "b", "c"], ["longer"]]) == ["a       b  c", "longer"]
    assert aligned([]) == []


def test_no_other_module_computes_column_widths_itself():
    """One printer: a second one drifts (fixed widths that a long cell breaks, trailing blanks)."""
    own = []
    for path in sorted(p for d in ("autoselect", "bench", "db") for p in (REPO / d).rglob("*.py")):
        if path == REPO / "autoselect" / "columns.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"widths\s*=\s*\[\s*max\(|\.ljust\(-", line):
                own.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert own == [], "print tables with autoselect.columns.aligned"
