"""Writing a report: every figure as PNG (and SVG) and the self-contained ``report.html``.

Everything is read and checked (:func:`~autoselect.report.data.collect`) before the output
directory is created or a file is written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

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


def _prepare_out_dir(out_dir: os.PathLike | str) -> Path:
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ReportOutputNotWritable(f"--out {out} is a file; pass a directory (it is created if missing)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ReportOutputNotWritable(f"cannot create --out directory {out}: {e.strerror}; pass a writable directory") from None
    if not os.access(out, os.W_OK):
        raise ReportOutputNotWritable(f"--out directory {out} is not writable; pass a writable directory")
    return out


def figure_names(data: ReportData) -> list[str]:
    """The figures a report of this data has (``fleet`` only for fleet data)."""
    return [n for n in FIGURES if n != "fleet" or data.fleet is not None]


def write_report(data: ReportData, out_dir: os.PathLike | str, *, svg: bool = False) -> ReportFiles:
    """Draw every figure to ``out_dir`` as PNG (and SVG), then write ``report.html``.

    :param data: what to draw (see :func:`collect`).
    :param out_dir: created when missing.
    :param svg: also write ``<figure>.svg`` beside each PNG.
    """
    out = _prepare_out_dir(out_dir)
    plt = pyplot()
    pngs, svgs, images = {}, {}, {}
    for name in figure_names(data):
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
    page = out / "report.html"
    page.write_text(render_html(data, images), encoding="utf-8")
    return ReportFiles(out, pngs, svgs, page)


def make_report(model: str, out_dir: os.PathLike | str, *, svg: bool = False, **options) -> ReportFiles:
    """:func:`collect` then :func:`write_report`: everything is read and checked before a file is written.

    ``options`` are :func:`collect`'s keyword arguments.
    """
    return write_report(collect(model, **options), out_dir, svg=svg)

