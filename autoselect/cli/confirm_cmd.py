"""``autoselect confirm``: parse, call :func:`autoselect.confirm.confirm`, print."""

from __future__ import annotations

import json
import sys

import click

from autoselect.cli import db_option, format_option, warn_newer_vllm
from autoselect.options import (CONFIRM_ITERS, CONFIRM_KV_LEN, CONFIRM_SAMPLES, CONFIRM_TIMEOUT_S, CONFIRM_TOKENS,
                                parse_name_list)


class _Progress:
    """A rich progress bar on stderr, one step per backend (silent when stderr is no terminal)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and sys.stderr.isatty()
        self.bar = None
        self.task = None

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=Console(stderr=True))
            self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def __call__(self, event):
        """One :class:`autoselect.confirm.ConfirmProgress`: a backend starts or is done."""
        if self.bar is None:
            return
        if self.task is None:
            self.task = self.bar.add_task("vllm bench forward", total=event.total)
        if event.event == "start":
            self.bar.update(self.task, description=f"vllm bench forward: {event.backend}")
        else:
            self.bar.advance(self.task)


@click.command("confirm")
@click.option("--model", required=True, metavar="DIR|HF_ID",
              help="Model: a local checkpoint directory or a Hugging Face id (dummy weights are used).")
@click.option("--backends", default=None, metavar="LIST",
              help="Comma-separated --all2all-backend values (default: every backend legal for the model).")
@click.option("--tokens", default=None, metavar="LIST", show_default=",".join(map(str, CONFIRM_TOKENS)),
              help="Tokens per rank: up to 256 a decode batch of that many requests, above one prefill.")
@click.option("--dp", type=int, default=None, metavar="N", show_default="all GPUs of the host / tp",
              help="Data-parallel size (one torchrun process per rank).")
@click.option("--tp", type=int, default=None, metavar="N", show_default="1", help="Tensor-parallel size.")
@click.option("--gpu-arch", default=None, metavar="ARCH", help="sm90 or sm100 (default: the local GPUs').")
@click.option("--vllm-version", default=None, metavar="X.Y.Z",
              help="Spell flags for this vLLM (default: the installed one).")
@click.option("--kv-len", type=int, default=CONFIRM_KV_LEN, show_default=True, metavar="N",
              help="KV length of each decode request.")
@click.option("--iters", type=int, default=CONFIRM_ITERS, show_default=True, metavar="N",
              help="Graph replays per sample.")
@click.option("--samples", type=int, default=CONFIRM_SAMPLES, show_default=True, metavar="N", help="Samples per case.")
@click.option("--timeout", "timeout_s", type=float, default=CONFIRM_TIMEOUT_S, show_default=True, metavar="SECONDS",
              help="Seconds one backend's run may take (model load and graph capture included).")
@click.option("--dry-run", is_flag=True, help="Print the commands without running anything (no GPU needed).")
@db_option
@format_option("text", "json")
def confirm_cmd(model, backends, tokens, dp, tp, gpu_arch, vllm_version, kv_len, iters, samples, timeout_s,
                dry_run, db_path, fmt):
    """Confirm the recommendation end to end with vLLM's own forward pass (needs GPUs).

    Runs `vllm bench forward` (vLLM >= 0.33: the real model forward with dummy weights and
    balanced MoE routing, as CUDA graphs; torchrun with one process per GPU) once per
    candidate backend with the flags recommend would emit, and stores each case's latency
    as an e2e result next to the microbenchmark's. `autoselect recommend` then shows both
    and warns where their winners differ. Without vLLM or without enough CUDA GPUs it
    says so and exits 2 before writing anything.

    \b
    Examples:
      autoselect confirm --model deepseek-ai/DeepSeek-R1 --backends allgather_reducescatter,deepep_low_latency
      autoselect confirm --model ./Qwen3-30B-A3B --tokens 1,32,256 --dp 8 --format json
      autoselect confirm --model ./Qwen3-30B-A3B --gpu-arch sm90 --dp 8 --dry-run
    """
    from autoselect.confirm import confirm, render_text

    with _Progress(enabled=fmt == "text") as progress:
        report = confirm(
            model, db_path=db_path, backends=parse_name_list(backends, what="--backends") if backends is not None else None,
            tokens=tokens, dp=dp, tp=tp, gpu_arch=gpu_arch, vllm_version=vllm_version, kv_len=kv_len,
            iters=iters, samples=samples, timeout_s=timeout_s, dry_run=dry_run, progress=progress,
        )
    warn_newer_vllm(report.vllm_version_warning)
    if fmt == "json":
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        click.echo(render_text(report))
