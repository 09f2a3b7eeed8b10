"""``autoselect bench``: measure the all2all backends on this node and store the results.

Parsing and printing only; the work is ``bench.run.run_bench``.
"""

from __future__ import annotations

import json

import click

from autoselect.cli import db_option, format_option, stopping_rule_options, warn_newer_vllm
from autoselect.columns import aligned
from autoselect.model.profile import shape_label
from autoselect.options import DEFAULT_TOKENS, SETUP_TIMEOUT_S
from bench.events import GroupStarted, PointMeasured, PointPhase, SweepStarted

#: The columns: (header, units, width: at least this wide, negative for left-aligned; how to render a Result).
COLUMNS = (
    ("backend", "", -28, lambda r: r.backend + (" (illegal)" if r.illegal else "")),
    ("tokens", "(/rank)", 7, lambda r: str(r.tokens_per_rank)),
    ("bytes", "(B/rank)", 11, lambda r: _num(r.bytes_per_rank, "{:d}")),
    ("time_p50", "(us)", 10, lambda r: _num(r.latency_us_p50, "{:.2f}")),
    ("dispatch", "(us)", 10, lambda r: _num(r.dispatch_us_p50, "{:.2f}")),
    ("combine", "(us)", 10, lambda r: _num(r.combine_us_p50, "{:.2f}")),
    ("algbw", "(GB/s)", 8, lambda r: _num(r.algbw_gbps, "{:.2f}")),
    ("busbw", "(GB/s)", 8, lambda r: _num(r.busbw_gbps, "{:.2f}")),
    ("noise", "(%)", 6, lambda r: _num(None if r.noise_stdrel is None else 100 * r.noise_stdrel, "{:.2f}")),
    ("samples", "", 8, lambda r: str(r.samples) if r.samples else "-"),
    ("status", "", -11, lambda r: r.status + ("" if r.noise_target_met in (None, True) or r.status != "ok" else "*")),
    ("footing", "", -13, lambda r: r.footing if r.status == "ok" else "-"),
)


def _num(value, fmt):
    return "-" if value is None else fmt.format(value)


def render_text(report) -> str:
    """nccl-tests-like fixed columns: a header, a units row, one row per point, a footer."""
    s = report.spec
    lines = [f"# autoselect bench: {shape_label(s.hidden, s.top_k, s.experts, s.activation_dtype)}, "
             f"world size {s.world_size}, device {s.device}, routing {s.routing}"]
    lines.append("#")
    table = aligned([[h for h, _, _, _ in COLUMNS], [u for _, u, _, _ in COLUMNS]]
                    + [[f(r) for _, _, _, f in COLUMNS] for r in report.results],
                    right={i for i, (_, _, w, _) in enumerate(COLUMNS) if w > 0},
                    min_widths=[abs(w) for _, _, w, _ in COLUMNS], sep=" ")
    lines += ["# " + line for line in table[:2]] + ["  " + line for line in table[2:]]
    counts = {k: 0 for k in ("ok", "incorrect", "unavailable", "error", "timeout", "harness_error")}
    for r in report.results:
        counts[r.status] = counts.get(r.status, 0) + 1
    lines.append("#")
    lines.append("# " + " · ".join(f"{k} {v}" for k, v in counts.items() if v or k != "harness_error")
                 + f" · skipped (illegal) {len(report.skipped)}")
    lines.extend(_group_lines(report))
    ok = [r.busbw_gbps for r in report.results if r.status == "ok" and r.busbw_gbps is not None]
    if ok:
        lines.append(f"# Avg bus bandwidth (ok rows): {sum(ok) / len(ok):.3f} GB/s")
    if any(r.status == "ok" and r.noise_target_met is False for r in report.results):
        lines.append(f"# * noise target ({100 * s.max_noise:g} %) not met: stopped on stable noise or the "
                     f"{s.timeout_s:g} s timeout")
    for name, reason in report.skipped.items():
        lines.append(f"# skipped {name}: illegal here ({reason}); --include-illegal measures it anyway")
    for name, w in report.wire.items():
        lines.append(f"# {name} moved {w['wire_dtype']} payloads for {s.activation_dtype} activations, as vLLM sends them: "
                     f"{w['why']}")
    failures: dict[tuple, list[int]] = {}  # one line per (backend, status, error), its token counts
    for r in report.results:
        if r.status != "ok" and r.error:
            failures.setdefault((r.backend, r.status, r.error), []).append(r.tokens_per_rank)
    for (backend, status, error), tokens in failures.items():
        lines.append(f"# {backend} @ {','.join(map(str, tokens))}: {status}: {error}")
    eager: dict[tuple, list[int]] = {}  # one line per (backend, why it was eager), its token counts
    for r in report.results:
        if r.status == "ok" and r.timing == "eager" and r.timing_note:
            eager.setdefault((r.backend, r.timing_note), []).append(r.tokens_per_rank)
    for (backend, note), tokens in eager.items():
        lines.append(f"# {backend} @ {','.join(map(str, tokens))}: eager: {note}")
    if any(r.status == "ok" for r in report.results):
        lines.append("# footing: graph (CUDA-graph replay) / eager / cpu; grouped = vLLM's calls, one per tensor; "
                     "fused = packed in one collective; unequal = vLLM's unequal-DP-size path; via-vllm = vLLM's own "
                     "prepare/finalize")
    if any(r.status == "harness_error" for r in report.results):
        lines.append("# harness_error: the harness itself failed (memory, overflow); not stored as a result "
                     "(the run's meta keeps it), so recommend does not count it against the backend")
    check = report.reference_check()
    lines += check.lines() if check is not None else []
    if report.run_id is not None:
        lines.append(f"# stored as run {report.run_id} in {report.db_path}")
    return "\n".join(lines)


def _group_lines(report) -> list[str]:
    """One line per backend: its worker group's start-ups and its points' wall time."""
    out = []
    for g in report.groups:
        starts = g["startups"]
        points = sum(j["points"] for j in g["jobs"])
        seconds = sum(j["seconds"] for j in g["jobs"])
        startup_s = sum(s["seconds"] for s in starts)
        text = (f"# {g['backend']}: {len(starts)} start-up{'s' if len(starts) != 1 else ''} "
                f"({startup_s:.1f} s), {points} point{'s' if points != 1 else ''} in {seconds:.1f} s")
        restarts = [s["reason"] for s in starts[1:]]
        if restarts:
            text += "; restarted: " + "; ".join(restarts)
        out.append(text)
    return out


@click.command("bench")
@click.option("--model", metavar="DIR|HF_ID", help="Checkpoint whose MoE shape and activation dtype to use.")
@click.option("--gpu-arch", metavar="ARCH", help="sm90 or sm100: the arch the activation dtype and legality are judged for "
              "(default: this host's GPUs).")
@click.option("--hidden", type=int, help="Hidden size (instead of --model).")
@click.option("--top-k", type=int, help="Experts per token (instead of --model).")
@click.option("--experts", type=int, help="Routed experts (instead of --model).")
@click.option("--dtype", metavar="DTYPE", help="Activation dtype crossing the all2all: bf16 fp16 fp8 fp8_block128 nvfp4 mxfp8 mxfp4.")
@click.option("--backends", metavar="LIST",
              help="Comma list of backends (default: every registered adapter, the reference_all_to_all baseline "
                   "included: a plain all_to_all vLLM never runs, timed for comparison, never recommended).")
@click.option("--tokens", metavar="LIST",
              help=f"Comma list of tokens per rank (default: {','.join(map(str, DEFAULT_TOKENS))}).")
@click.option("--world-size", type=int, metavar="N", help="Ranks (default: every GPU; 2 on --device cpu).")
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default=None,
              help="cuda: NCCL on the local GPUs; cpu: gloo processes (tests the harness, not NVLink). Default: "
                   "cuda when this host has GPUs, else cpu (as tune).")
@click.option("--routing", default="uniform", show_default=True, metavar="SPEC",
              help="uniform, zipf, zipf:S, or a .json/.npy/.pt file of expert ids [tokens, top_k].")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of payloads and routing.")
@stopping_rule_options
@click.option("--setup-timeout", "setup_timeout_s", type=float, default=SETUP_TIMEOUT_S, show_default=True,
              help="Seconds for a worker group's start-up and for each point's adapter setup (FlashInfer JIT builds take minutes).")
@click.option("--include-illegal", is_flag=True, help="Also measure backends the rules reject (rows marked illegal).")
@click.option("--dp-sizes", type=click.Choice(["equal", "unequal"]), default="equal", show_default=True,
              help="vLLM's default's call path for equal token counts per DP rank (padded, as under CUDA graphs) or "
                   "unequal ones (per-root broadcasts and reduces, eager steps); other backends run as always.")
@click.option("--via", type=click.Choice(["adapter", "vllm"]), default="adapter", show_default=True,
              help="adapter: the benchmark's adapters; vllm: vLLM's own prepare/finalize objects for each backend "
                   "(a GPU node with vLLM installed).")
@click.option("--vllm-version", metavar="X.Y.Z",
              help="vLLM release legality is judged for and whose FlashInfer calls the adapters make (default: the "
                   "vllm of $AUTOSELECT_VLLM_PYTHON, else the installed vllm, else the newest known; as check).")
@db_option
@format_option("text", "json")
def bench_cmd(model, gpu_arch, hidden, top_k, experts, dtype, backends, tokens, world_size, device,
              routing, seed, max_noise, min_samples, min_time_s, timeout_s, setup_timeout_s,
              include_illegal, dp_sizes, via, vllm_version, db_path, fmt):
    """Measure the all2all backends on this node (correctness first) and store every point.

    Each backend runs in one worker group (one process per rank, started once for all its
    points, restarted only after a crash or a hang), with a wall-clock limit per point;
    every point is checked bit-exactly before it is timed, and lands in the database as
    ok, incorrect, unavailable, error, timeout or harness_error. Run it under torchrun to
    let torchrun own the processes.

    \b
    Examples:
      autoselect bench --model deepseek-ai/DeepSeek-R1
      autoselect bench --hidden 7168 --top-k 8 --experts 256 --dtype nvfp4 --tokens 1,16,256,4096
      autoselect bench --device cpu --world-size 2 --hidden 2048 --top-k 8 --experts 64 --dtype bf16 --tokens 1,16,256
      autoselect bench --model deepseek-ai/DeepSeek-R1 --backends allgather_reducescatter --via vllm
    """
    from bench.run import run_bench

    with _Progress(enabled=fmt == "text") as progress:
        report = run_bench(
            model=model, gpu_arch=gpu_arch, hidden=hidden, top_k=top_k, experts=experts, dtype=dtype,
            backends=backends, tokens=tokens, world_size=world_size, device=device, routing=routing,
            seed=seed, max_noise=max_noise, min_samples=min_samples, min_time_s=min_time_s,
            timeout_s=timeout_s, setup_timeout_s=setup_timeout_s, include_illegal=include_illegal,
            dp_sizes=dp_sizes, via=via, vllm_version=vllm_version, db_path=db_path, progress=progress,
        )
    if report.db_path is None and report.run_id is None and not report.results:
        return  # a non-zero torchrun rank: rank 0 prints
    warn_newer_vllm(report.vllm_version_warning)
    if fmt == "json":
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        click.echo(render_text(report))


class _Progress:
    """A rich progress bar on stderr (only on a terminal), fed by the sweep's progress events."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.bar = None
        self.task = None

    def __enter__(self):
        if self.enabled:
            try:
                from rich.console import Console
            except ImportError:  # the bar is a nicety; the sweep does not need it
                return self

            console = Console(stderr=True)
            if console.is_terminal:
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

                self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                    TimeElapsedColumn(), console=console, transient=True)
                self.bar.start()
        return self

    def __call__(self, event):
        if self.bar is None:
            return
        if isinstance(event, SweepStarted):
            self.task = self.bar.add_task("bench", total=event.total)
        elif self.task is None:
            return
        elif isinstance(event, GroupStarted):
            self.bar.update(self.task, description=f"{event.backend}: workers ready in {event.seconds:.1f} s")
        elif isinstance(event, PointPhase):
            self.bar.update(self.task, description=f"{event.backend} @ {event.tokens_per_rank}: {event.phase}")
        elif isinstance(event, PointMeasured):
            self.bar.advance(self.task)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        return False
