"""Writing a report: every figure as PNG (and SVG) and the self-contained ``report.html``.

Everything is read and checked (:func:`~autoselect.report.data.collect`) before the output
directory is created or a file is written.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from autoselect.atomic import output_directory, replacing
from autoselect.report.data import ReportData, collect
from autoselect.report.errors import ReportOutputNotWritable
from autoselect.report.figures import FIGURES, pyplot
from autoselect.report.html import render_html
from autoselect.report.style import DPI


@dataclass
class ReportFiles:
    """What :func:`write_report` wrote."""

    out_dir: Path
    pngs: dict[str, Path]
    svgs: dict[str, Path]
    html: Path

    def to_dict(self) -> dict:
        """JSON-ready paths."""
        return {
            "out_dir": str(self.out_dir),
            "png": {k: str(v) for k, v in self.pngs.items()},
            "svg": {k: str(v) for k, v in self.svgs.items()},
            "html": str(self.html),
        }




def figure_names(data: ReportData) -> list[str]:
    """The figures a report of this data has (``fleet`` only for fleet data)."""
    return [n for n in FIGURES if n != "fleet" or data.fleet is not None]


def write_report(data: ReportData, out_dir: os.PathLike | str, *, svg: bool = False,
                 progress: Callable[[str], None] | None = None) -> ReportFiles:
    """Draw every figure to ``out_dir`` as PNG (and SVG), then write ``report.html``.

    :param data: what to draw (see :func:`collect`).
    :param out_dir: created when missing.
    :param svg: also write ``<figure>.svg`` beside each PNG.
    :param progress: called with one line before each step (the first figure pays for importing
        matplotlib: seconds on a cold start), so a caller can show that the report is being drawn.
    """
    out = output_directory(out_dir, what="--out", error=ReportOutputNotWritable, create=True)
    say = progress or (lambda _line: None)
    names = figure_names(data)
    say(f"drawing {len(names)} figures into {out}")
    plt = pyplot()
    pngs, svgs, images = {}, {}, {}
    page = out / "report.html"
    try:
        for i, name in enumerate(names, 1):
            say(f"drawing {name}.png ({i} of {len(names)})")
            fig = FIGURES[name](data)
            try:
                path = out / f"{name}.png"
                fig.savefig(path, dpi=DPI, format="png")
                pngs[name] = path
                images[name] = path.read_bytes()
                if svg:
                    svgs[name] = out / f"{name}.svg"
                    fig.savefig(svgs[name], format="svg")
            finally:
                plt.close(fig)
        say("writing report.html")
        with replacing(page) as f:  # whole or not at all: the page is what a reader opens
            f.write(render_html(data, images))
    except OSError as e:  # a full disk, the directory removed or made read-only meanwhile
        done = ", ".join(p.name for p in [*pngs.values(), *svgs.values()]) or "no file"
        raise ReportOutputNotWritable(f"cannot write the report into {out} ({e.strerror or e}); {done} written "
                                      "before that, report.html not written; free space or pass another --out") from None
    return ReportFiles(out, pngs, svgs, page)


def make_report(model: str, out_dir: os.PathLike | str, *, svg: bool = False,
                progress: Callable[[str], None] | None = None, **options) -> ReportFiles:
    """:func:`collect` then :func:`write_report`: everything is read and checked before a file is written.

    ``options`` are :func:`collect`'s keyword arguments; ``progress`` as for :func:`write_report`.
    """
    return write_report(collect(model, **options), out_dir, svg=svg, progress=progress)

