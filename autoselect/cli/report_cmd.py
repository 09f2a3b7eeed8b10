"""``autoselect report``: figures of the measurements and the decision (parsing and printing only)."""

from __future__ import annotations

import json
import sys

import click

from autoselect.cli import db_option, format_option


@click.command("report")
@click.option("--model", required=True, metavar="DIR|HF_ID",
              help="Local checkpoint directory or Hugging Face id (config files only).")
@click.option("--host-class", default=None, metavar="CLASS",
              help="Host class whose measurements to draw (default: the one that measured this shape most recently); "
                   "a reference class such as ref-h200_sxm-x8 draws NVIDIA's published measurements on their own.")
@click.option("--world-size", type=int, default=None, metavar="N",
              help="EP size (dp x tp) to draw (default: the largest measured for this shape).")
@click.option("--gpu-arch", default=None, metavar="ARCH",
              help="GPU arch whose activation dtype applies (sm90, sm100); needed for CPU-host measurements.")
@click.option("--workload", default=None, metavar="KIND|TOKENS", show_default="the token counts measured",
              help="Workload the recommendation is weighted for (as `autoselect recommend`): decode, prefill, "
                   "mixed, or token counts per rank with optional weights (1,8,64 or 1:0.5,64:0.5). Default: the "
                   "token counts measured for the host class and shape, equally weighted (mixed for a reference "
                   "class, or when nothing was timed).")
@click.option("--out", "out_dir", type=click.Path(), default="autoselect-report", show_default=True, metavar="DIR",
              help="Directory for the PNGs and report.html (created when missing).")
@click.option("--svg", is_flag=True, help="Also write each figure as SVG.")
@click.option("--terminal", is_flag=True,
              help="Draw the latency chart in this terminal instead of writing files.")
@click.option("--no-reference", "no_reference", is_flag=True,
              help="Leave out NVIDIA's published reference curves (drawn dashed when the host class's GPUs are a "
                   "reference system).")
@click.option("--fleet-backend", default=None, metavar="BACKEND",
              help="Backend of the per-node fleet figure (default: the recommended one).")
@click.option("--fleet-tokens", type=int, default=None, show_default=True,
              help="Tokens per rank of the fleet figure (default: the token count most nodes measured).")
@db_option
@format_option("text", "json")
def report_cmd(model, host_class, world_size, gpu_arch, workload, out_dir, svg, terminal, no_reference, fleet_backend,
               fleet_tokens, db_path, fmt):
    """Draw the measurements and the recommendation as PNGs and one self-contained HTML page.

    Latency vs tokens per rank (log-log, p10-p90 bands, crossovers, the fastest legal backend
    per workload bucket starred), dispatch and combine separately, bandwidth as a fraction of
    the NVLink peak, and for a fleet database the per-node latency with drift-flagged nodes
    in red. When the host class's GPUs are a reference system, NVIDIA's published
    measurements of the same shape are drawn dashed beside the local lines, each labelled
    published or derived. report.html embeds every image: mail it or attach it to a ticket.

    \b
    Examples:
      autoselect report --model deepseek-ai/DeepSeek-R1 --out report/
      autoselect report --model ./Qwen3-30B-A3B --workload prefill --svg
      autoselect report --model deepseek-ai/DeepSeek-R1 --terminal
      autoselect report --model nvidia/DeepSeek-R1-FP4 --host-class ref-h200_sxm-x8
    """
    from autoselect import report

    options = dict(
        db_path=db_path, host_class=host_class, world_size=world_size, workload=workload, gpu_arch=gpu_arch,
        fleet_backend=fleet_backend, fleet_tokens=fleet_tokens, reference=not no_reference,
    )
    if terminal:
        click.echo(report.terminal_report(model, colour=sys.stdout.isatty(), **options))
        return
    files = report.make_report(model, out_dir, svg=svg, progress=lambda line: click.echo(f"report: {line}", err=True),
                               **options)
    if fmt == "json":
        click.echo(json.dumps(files.to_dict(), indent=2))
        return
    for name, path in {**files.pngs, **{f"{k} (svg)": v for k, v in files.svgs.items()}}.items():
        click.echo(f"{name:<16} {path}")
    click.echo(f"{'page':<16} {files.html}")
