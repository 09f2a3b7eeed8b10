"""``autoselect recommend`` and ``autoselect explain``: the fastest legal backend as flags.

Parsing and printing only; the decision is :func:`autoselect.selector.recommend_for`. This
path never imports torch, flashinfer, vllm, numpy, sqlite_utils or optuna.
"""

from __future__ import annotations

import json

import click

from autoselect.cli import db_option, format_option, warn_newer_vllm


def recommend_options(f):
    """The flags ``recommend`` and ``explain`` share (model, deployment, host, workload)."""
    options = [
        click.option("--model", required=True, metavar="DIR|HF_ID",
                     help="Model: a local checkpoint directory or a Hugging Face id (config files only)."),
        click.option("--dp", type=int, default=None, metavar="N", show_default="all GPUs of the host / tp",
                     help="Data-parallel size (engines)."),
        click.option("--tp", type=int, default=None, metavar="N", show_default="1",
                     help="Tensor-parallel size per engine."),
        click.option("--world-size", type=int, default=None, metavar="N", show_default="dp x tp",
                     help="EP size = dp x tp; give it instead of --dp."),
        click.option("--host-class", default=None, metavar="CLASS",
                     help="Answer for another host class in the database (`autoselect db info`), or for a "
                          "reference class ref-<system>-x<N> from NVIDIA's published measurements (no database "
                          "needed; docs/reference-data.md); default: this machine."),
        click.option("--gpu-arch", default=None, metavar="ARCH",
                     help="GPU arch for the activation dtype: sm90, sm100, ... (default: the host's)."),
        click.option("--vllm-version", default=None, metavar="X.Y.Z",
                     help="vLLM to serve with (default: the vllm of $AUTOSELECT_VLLM_PYTHON, else the installed "
                          "vllm, else the newest known; as check)."),
        click.option("--workload", type=click.Choice(["decode", "prefill", "mixed"]), default=None,
                     show_default="mixed", help="Token buckets to compare on."),
        click.option("--tokens", default=None, metavar="LIST",
                     help="Explicit tokens per rank with optional weights, e.g. 1:0.5,64:0.3,8192:0.2."),
        click.option("--concurrency", type=int, default=256, show_default=True, metavar="N",
                     help="Running requests over the deployment (a load assumption); decode buckets = N / dp."),
        click.option("--max-num-batched-tokens", type=int, default=None, metavar="N",
                     show_default="vLLM's for the GPU memory: 16384 >= 160 GiB, 8192 >= 70 GiB, else 2048",
                     help="vLLM's per-engine token budget per step: the prefill bucket; emitted when given. The "
                          "answer prints the budget it assumed and where it came from."),
        click.option("--max-workspace-gib", type=float, default=2.0, show_default=True, metavar="GIB",
                     help="One-sided workspace allowed per GPU; --max-num-batched-tokens is lowered to fit."),
        db_option,
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _recommend(kw: dict, validate: bool = False):
    from autoselect.selector import recommend_for

    rec = recommend_for(
        kw["model"],
        db_path=kw["db_path"],
        dp=kw["dp"],
        tp=kw["tp"],
        world_size=kw["world_size"],
        host_class=kw["host_class"],
        gpu_arch=kw["gpu_arch"],
        vllm_version=kw["vllm_version"],
        workload=kw["workload"],
        tokens=kw["tokens"],
        concurrency=kw["concurrency"],
        max_num_batched_tokens=kw["max_num_batched_tokens"],
        max_workspace_gib=kw["max_workspace_gib"],
        validate=validate,
    )
    warn_newer_vllm(rec.vllm_version_warning)
    return rec


@click.command("recommend")
@recommend_options
@click.option("--explain", is_flag=True, help="Also show the evidence per token bucket (text format).")
@click.option("--validate", is_flag=True,
              help="Also parse the flags with vLLM's own `vllm serve` parser (needs vllm; runs it in a "
                   "subprocess); a flag vLLM rejects is an error.")
@format_option("text", "json", "args", "env")
def recommend_cmd(explain, validate, fmt, **kw):
    """Print the vllm serve flags of the fastest legal all2all backend for a model.

    Candidates are the backends the rules allow for the model's activation dtype
    (flashinfer_nvlink_one_sided: nvfp4 only); vLLM's default stays unless a candidate is
    faster beyond the measured noise on the workload. Without measurements the answer is
    the default with confidence none and the `autoselect bench` command that would settle it;
    on GPUs of a published reference system (or --host-class ref-...) NVIDIA's published
    measurements answer, with confidence reference.

    \b
    Examples:
      autoselect recommend --model deepseek-ai/DeepSeek-R1 --workload decode
      autoselect recommend --model deepseek-ai/DeepSeek-V3 --host-class ref-h200_sxm-x8
      autoselect recommend --model ./Qwen3-30B-A3B --tokens 1:0.5,64:0.3,8192:0.2 --format json
      vllm serve ./Qwen3-30B-A3B $(autoselect recommend --model ./Qwen3-30B-A3B --format args)
      eval "$(autoselect recommend --model ./Qwen3-30B-A3B --format env)"
      autoselect recommend --model ./Qwen3-30B-A3B --validate
    """
    from autoselect import selector

    rec = _recommend(kw, validate=validate)  # with the stored e2e results and vLLM's verdict on the flags
    if fmt == "json":
        click.echo(json.dumps(rec.to_dict(), indent=2))
    elif fmt == "args":
        click.echo(selector.render_args(rec))
    elif fmt == "env":
        click.echo(selector.render_env(rec))
    else:
        click.echo(selector.render_text(rec, explain=explain))


@click.command("explain")
@recommend_options
@format_option("text", "json")
def explain_cmd(fmt, **kw):
    """Show the evidence behind a recommendation, token bucket by token bucket.

    Every candidate's expected latency per bucket with its noise band, whether it was
    measured, interpolated or extrapolated (and from which results), the weighted
    comparison against vLLM's default, and the fitted latency model per backend.

    \b
    Example:
      autoselect explain --model deepseek-ai/DeepSeek-R1 --host-class b200x8-9a4f2b61
    """
    from autoselect import selector

    rec = _recommend(kw)
    if fmt == "json":
        click.echo(json.dumps(rec.to_dict(), indent=2))
    else:
        click.echo(selector.render_text(rec, explain=True))
