"""``autoselect inspect`` and ``autoselect check``: parse, call one library function, print."""

from __future__ import annotations

import json

import click

from autoselect.cli import format_option, warn_newer_vllm


def _bytes_line(profile, archs):
    from autoselect.payload import combine_bytes_per_token, dispatch_bytes_per_token

    return "   ".join(
        f"{arch}: {dispatch_bytes_per_token(profile.activation_dtype(arch), profile.hidden_size, profile.top_k)}"
        for arch in archs
    ) + f"   (combine {combine_bytes_per_token(profile.hidden_size)})"


def _wire_cell(wire: dict) -> str:
    """``nvfp4 (allgather_reducescatter, ...), bf16 (deepep_high_throughput, ...)``: backends by what they send."""
    by_dtype: dict[str, list[str]] = {}
    for backend, w in wire.items():
        by_dtype.setdefault(w.dtype, []).append(backend)
    if len(by_dtype) == 1:
        return f"{next(iter(by_dtype))} on every backend"
    return ", ".join(f"{dtype} ({', '.join(backends)})" for dtype, backends in by_dtype.items())


def _expert_cell(wire: dict) -> str | None:
    """``FlashInferExperts, takes the activation unquantized (allgather_reducescatter, ...), ...``: the
    kernel vLLM runs behind each backend; None where rules.experts does not model the weight format."""
    by_kernel: dict[str, list[str]] = {}
    for backend, w in wire.items():
        if w.expert is not None:
            label = w.expert.kernel + (", takes the activation unquantized" if w.expert.defers else "")
            by_kernel.setdefault(label, []).append(backend)
    if not by_kernel:
        return None
    return "; ".join(f"{kernel} ({', '.join(backends)})" for kernel, backends in by_kernel.items())


@click.command("inspect")
@click.option("--model", "model", required=True, metavar="DIR|HF_ID",
              help="Checkpoint directory (with config.json) or Hugging Face model id; config files only.")
@click.option("--gpu-arch", default=None, metavar="ARCH",
              help="sm90 (Hopper) or sm100 (Blackwell); default: report both.")
@click.option("--vllm-version", default=None, metavar="X.Y.Z",
              help="The vLLM whose prepare steps decide what each backend sends (the wire dtype); default: the "
                   "installed vllm, else the newest known.")
@click.option("--moe-backend", default=None, metavar="NAME",
              help="The line's --moe-backend (triton, deep_gemm, flashinfer_cutlass, marlin, ...): the expert kernel "
                   "then is that one, and with it what crosses the wire; default: the one vLLM's oracle chooses.")
@click.option("--cross-check", is_flag=True,
              help="Also read the quantization with vLLM's own config classes (needs vllm; runs it in a "
                   "subprocess) and warn where vLLM and autoselect disagree.")
@format_option("text", "json")
def inspect_cmd(model, gpu_arch, fmt, vllm_version=None, cross_check=False, moe_backend=None):
    """Show what a MoE model puts on the all2all: shape, quantization, activation and wire dtype per GPU arch.

    Reads config.json (and hf_quant_config.json when present) from a local directory or the
    Hugging Face Hub (HF_HUB_OFFLINE is honoured; weights are never downloaded). Without
    --gpu-arch both Hopper (sm90) and Blackwell (sm100) are shown, because an NVFP4
    checkpoint dispatches nvfp4 on Blackwell but bf16 on Hopper. The wire dtype is what each
    backend really sends for that activation dtype in the target vLLM with EP > 1: behind the
    expert kernel vLLM chooses (block-FP8 weights on Hopper run FlashInfer CUTLASS experts, which
    take bf16) and through its prepare step (its DeepEP backends send an nvfp4 model's
    activations as bf16). In JSON, activation_dtype, wire_dtype and expert_kernel (present where
    autoselect models the kernel choice: block-FP8 weights) are then objects keyed by arch; with
    --gpu-arch they are a string and one object each.

    \b
    Examples:
      autoselect inspect --model tests/fixtures/models/deepseek-r1-nvfp4
      autoselect inspect --model deepseek-ai/DeepSeek-V3 --gpu-arch sm90 --format json
      autoselect inspect --model deepseek-ai/DeepSeek-V3 --gpu-arch sm90 --moe-backend triton
      autoselect inspect --model ./DeepSeek-R1-FP4 --cross-check
    """
    from autoselect import rules
    from autoselect.model import GPU_ARCHS, load_profile, normalize_arch

    from autoselect.bridge import target_version
    from autoselect.rules.wire import wire_dtypes

    archs = [normalize_arch(gpu_arch)] if gpu_arch else list(GPU_ARCHS)
    version, _ = target_version(vllm_version)
    profile = load_profile(model)
    wire = {a: wire_dtypes(profile.activation_dtype(a), version, weight_quant=profile.weight_quant, gpu_arch=a,
                           moe_backend=moe_backend) for a in archs}
    checked = None
    if cross_check:
        from autoselect.bridge import cross_check_model

        checked = cross_check_model(model, profile)
    one_sided = {a: profile.activation_dtype(a) == "nvfp4" for a in archs}
    if fmt == "json":
        d = profile.to_dict()
        d["activation_dtype"] = (profile.activation_dtype(archs[0]) if gpu_arch
                                 else {a: profile.activation_dtype(a) for a in archs})
        d["one_sided_legal"] = one_sided[archs[0]] if gpu_arch else one_sided
        sent = {a: {b: w.dtype for b, w in wire[a].items()} for a in archs}
        d["wire_dtype"] = sent[archs[0]] if gpu_arch else sent
        if any(w.expert for a in archs for w in wire[a].values()):  # only where rules.experts models the format
            kernels = {a: {b: w.expert.to_dict() if w.expert else None for b, w in wire[a].items()} for a in archs}
            d["expert_kernel"] = kernels[archs[0]] if gpu_arch else kernels
        d["wire_vllm_version"] = version
        d["gpu_arch"] = archs[0] if gpu_arch else None
        if checked is not None:
            d["vllm_cross_check"] = checked.to_dict()
        click.echo(json.dumps(d, indent=2))
        for disagreement in checked.disagreements if checked is not None else ():
            click.echo(f"warning: {disagreement}", err=True)
        return
    layers = f"{profile.moe_layers}" + (f" of {profile.num_layers}" if profile.num_layers else "")
    experts = {a: cell for a in archs if (cell := _expert_cell(wire[a])) is not None}
    rows = [
        ("model", profile.model),
        ("model type", profile.model_type or "-"),
        ("hidden size", str(profile.hidden_size)),
        ("routed experts", str(profile.num_experts)),
        ("top-k", str(profile.top_k)),
        ("MoE layers", layers),
        ("weight quant", f"{profile.weight_quant} (from {profile.quant_source})"),
        ("activation dtype", "   ".join(f"{a}: {profile.activation_dtype(a)}" for a in archs)),
        ("dispatch B/token", _bytes_line(profile, archs)),
        *[("expert kernel" if i == 0 else "", f"{a}: {cell}" + (f"   (vLLM {version}, EP > 1)" if i == 0 else ""))
          for i, (a, cell) in enumerate(experts.items())],
        *[("wire dtype" if i == 0 else "", f"{a}: {_wire_cell(wire[a])}" + (f"   (vLLM {version})" if i == 0 else ""))
          for i, a in enumerate(archs)],
        ("one-sided", "   ".join(f"{a}: {'legal (nvfp4)' if one_sided[a] else 'ILLEGAL (not nvfp4)'}" for a in archs)),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        click.echo(f"{k:<{width}}  {v}")
    for note in profile.notes:
        click.echo(f"note: {note}")
    if any(not w.read for sent in wire.values() for w in sent.values()):
        from autoselect.rules.wire import not_read_note

        click.echo(f"note: {not_read_note(version)}")
    if moe_backend and not any(w.expert for sent in wire.values() for w in sent.values()):
        click.echo(f"note: --moe-backend {moe_backend} does not change what crosses the wire for "
                   f"{profile.weight_quant} weights here (autoselect models the expert kernel of block-FP8 weights)")
    if not any(one_sided.values()):
        click.echo(f"note: {rules.ONE_SIDED_POLICY}")
    if checked is not None:
        c = checked.classification
        read = f"{c.config_class} -> {c.weight_quant or c.scheme}" if c.ok else f"refuses it: {c.error}"
        click.echo(f"vLLM check  {checked.vllm.label()}: {read}" + (" (agrees)" if checked.agrees else ""))
        for disagreement in checked.disagreements:
            click.echo(f"warning: {disagreement}", err=True)


@click.command("check", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--gpu-arch", default=None, metavar="ARCH",
              help="sm90 or sm100; default: the local GPUs', or both archs on a host without GPUs.")
@click.option("--vllm-version", default=None, metavar="X.Y.Z",
              help="The vLLM that will run the command; default: the installed vllm, else the newest known.")
@click.option("--role", default=None, metavar="ROLE",
              help="prefill, decode or both: what this instance serves in prefill/decode disaggregation "
                   "(upstream reports about one side apply only there); default: the line's "
                   "--kv-transfer-config kv_role, else unknown.")
@click.option("--explain", is_flag=True,
              help="Also show the sources behind each finding that has them (text format; JSON has them as detail).")
@format_option("text", "json")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
def check_cmd(gpu_arch, vllm_version, role, explain, fmt, command):
    """Check a `vllm serve` command line for illegal or ineffective all2all settings.

    Reads the line as the target vLLM release does: the backend it runs comes from
    --all2all-backend, VLLM_ALL2ALL_BACKEND or the release's default, by that release's rules.
    Launchers (uv run, env, canhazgpu run --, python -m ..., a vllm/vllm-openai image) and pasted
    blocks are read through. Reports, with a severity each: a backend illegal for the model's
    activation dtype (flashinfer_nvlink_one_sided needs nvfp4; on vLLM before v0.20.0 anything
    else silently corrupts output), a backend setting without expert parallelism or with -dp 1
    (silently ignored), removed or renamed values (pplx, naive, flashinfer_all2allv), the
    variable where it is ignored or overrides the flag, --enable-dbo with a backend that does not
    support it, EPLB redundant experts that do not divide over the EP size, experts not divisible
    by the EP size, unsupported top-k, DeepEP kernel limits (EP sizes, experts per rank, row
    bytes, the low-latency buffer against NVSHMEM_QP_DEPTH), upstream bug reports that apply to
    the release. Exit status 1 if any finding is an error, 0 otherwise, 2 for input that cannot
    be read. Without --gpu-arch on a host without GPUs, both sm90 and sm100 are checked and
    reported separately.

    \b
    Examples:
      autoselect check -- vllm serve nvidia/DeepSeek-R1-FP4 -dp 8 -ep --all2all-backend flashinfer_nvlink_one_sided
      autoselect check --gpu-arch sm90 --vllm-version 0.19.1 -- vllm serve Qwen/Qwen3-30B-A3B -dp 4 -ep
    """
    from autoselect.check import check_serve_command
    from autoselect.redact import redacted_text
    from autoselect.text import one_line

    report = check_serve_command(list(command), gpu_arch=gpu_arch, vllm_version=vllm_version, role=role)
    warn_newer_vllm(report.vllm_version_warning)
    if fmt == "json":
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        dtype = ("   ".join(f"{a}: {report.profile.activation_dtype(a)}" for a in report.gpu_archs)
                 if report.profile else "-")
        click.echo(f"model      {one_line(redacted_text(report.args.model))}")
        click.echo(f"vLLM       {report.vllm_version} ({report.vllm_version_source})")
        click.echo(f"GPU arch   {', '.join(report.gpu_archs)} ({report.gpu_arch_source})")
        origin = {"--all2all-backend": "", "vLLM's default": " (vLLM default)"}.get(
            report.backend_origin, f" ({report.backend_origin})")
        click.echo(f"backend    {report.backend or '-'}" + origin
                   + f"   EP size {report.args.world_size}"
                   + ("" if report.args.uses_all2all else "   (no all2all)"))
        click.echo(f"dispatch   {dtype}")
        for f in report.findings:
            where = f" [{f.gpu_arch}]" if f.gpu_arch else ""
            click.echo(f"{f.severity.upper():<7} {f.code}{where}: {one_line(redacted_text(f.message))}")
            if explain and f.detail:
                click.echo(f"        in full: {one_line(redacted_text(f.detail))}")
        errors = sum(f.severity == "error" for f in report.findings)
        click.echo(f"{'FAIL' if errors else 'OK'}: {errors} error(s), "
                   f"{sum(f.severity == 'warning' for f in report.findings)} warning(s)")
    raise SystemExit(report.exit_code)
