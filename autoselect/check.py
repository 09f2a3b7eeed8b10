"""``autoselect check``: what is wrong with an existing `vllm serve` command line.

:func:`check_serve_command` parses the command line (:mod:`autoselect.vllm_flags`), reads the
model's profile (:mod:`autoselect.model`), and runs the legality rules (:mod:`autoselect.rules`)
for each GPU architecture in question. Every problem becomes a :class:`Finding` with a severity;
any ``error`` makes the exit status 1.

GPU architecture: ``--gpu-arch`` when given; otherwise the local GPUs' arch when
:func:`autoselect.hardware.fingerprint` finds one; otherwise (a CPU host) both ``sm90`` and
``sm100`` are checked and reported separately, because the same checkpoint dispatches
different dtypes on them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from autoselect import rules
from autoselect.model import GPU_ARCHS, DenseModel, MoeProfile, load_profile, normalize_arch
from autoselect.vllm_flags import ServeArgs, parse_serve_argv

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Finding:
    """One thing `check` has to say: severity, a stable code, the message, and its arch if any."""

    severity: str
    code: str
    message: str
    gpu_arch: str | None = None

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return {"severity": self.severity, "code": self.code, "message": self.message, "gpu_arch": self.gpu_arch}


@dataclass
class CheckReport:
    """The outcome of checking one `vllm serve` command line."""

    args: ServeArgs
    vllm_version: str
    vllm_version_source: str  # "--vllm-version", "installed vllm", "vllm at AUTOSELECT_VLLM_PYTHON", "newest known"
    gpu_archs: list[str]
    gpu_arch_source: str  # "--gpu-arch", "local GPUs", "no GPU: both archs"
    profile: MoeProfile | None
    backend: str  # the backend vLLM would run (the default when the flag is absent)
    findings: list[Finding] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """1 when any finding is an error, else 0."""
        return 1 if any(f.severity == "error" for f in self.findings) else 0

    def to_dict(self) -> dict[str, Any]:
        """The JSON ``check --format json`` prints."""
        return {
            "schema_version": 1,
            "ok": self.exit_code == 0,
            "model": self.args.model,
            "vllm_version": self.vllm_version,
            "vllm_version_source": self.vllm_version_source,
            "gpu_archs": self.gpu_archs,
            "gpu_arch_source": self.gpu_arch_source,
            "backend": self.backend,
            "backend_given": self.args.all2all_backend,
            "world_size": self.args.world_size,
            "uses_all2all": self.args.uses_all2all,
            "activation_dtype": (
                {a: self.profile.activation_dtype(a) for a in self.gpu_archs} if self.profile else None
            ),
            "findings": [f.to_dict() for f in self.findings],
            "args": self.args.to_dict(),
        }


def _local_gpu_arch() -> str | None:
    """The arch of the local GPUs, or None (no hardware module yet, no NVML, a CPU host)."""
    try:
        from autoselect.hardware import fingerprint
    except ImportError:
        return None
    try:
        return fingerprint().gpu_arch
    except Exception:  # NVML trouble must not break a static check; fall back to both archs
        return None


def _flag_findings(args: ServeArgs, version: str, environ: dict) -> list[Finding]:
    """Findings about the flags themselves, independent of the model."""
    out: list[Finding] = []
    given = args.all2all_backend
    flag_exists = rules.version_in(version, rules.FLAG_SINCE, None)
    if given is not None and not flag_exists:
        out.append(Finding("error", "flag-unknown-to-version",
                           f"vLLM {version} has no --all2all-backend (added in v{rules.FLAG_SINCE}, PR #26732): "
                           f"vllm serve would exit with 'unrecognized arguments'; set VLLM_ALL2ALL_BACKEND={given} instead"))
    if given is not None and flag_exists:
        if given not in rules.ALL_FLAG_VALUES:
            out.append(Finding("error", "invalid-choice",
                               f"--all2all-backend {given} is not a vLLM choice: vllm serve would exit with "
                               f"'invalid choice'; use one of {', '.join(rules.parser_choices(version))}"))
        elif not rules.value_known_to(given, version):
            canonical = rules.resolve(given)
            spelled = rules.BACKENDS[canonical].spelling(version)
            hint = (f"; this version spells {canonical} as {spelled.value}" if spelled
                    else f"; it accepts: {', '.join(rules.parser_choices(version))}")
            out.append(Finding("error", "value-unknown-to-version",
                               f"vLLM {version} does not accept --all2all-backend {given}: vllm serve would exit "
                               f"with 'invalid choice'{hint}"))
        elif given in rules.ALIASES and rules.version_in(version, rules.ALIASES[given][1], None):
            new, _, source = rules.ALIASES[given]
            out.append(Finding("warning", "deprecated-name",
                               f"{given} is the deprecated old name of {new} ({source}); it still works but "
                               f"will be removed: use --all2all-backend {new}"))
        cap = rules.BACKENDS.get(given)
        if cap is not None and cap.replaced_by and rules.version_in(version, cap.removed_in, None):
            out.append(Finding("warning", "removed-backend",
                               f"--all2all-backend {given} was removed ({cap.removal_source}): vLLM {version} "
                               f"logs a warning and runs {cap.replaced_by}; pass {cap.replaced_by} or "
                               f"another backend explicitly"))
    env_value = args.env.get("VLLM_ALL2ALL_BACKEND", environ.get("VLLM_ALL2ALL_BACKEND"))
    if env_value is not None:
        if rules.version_in(version, rules.ENV_VAR_REMOVED_IN, None):
            out.append(Finding("warning", "env-var-removed",
                               f"VLLM_ALL2ALL_BACKEND={env_value} is set but vLLM {version} ignores it (removed "
                               f"by PR #33535 in v{rules.ENV_VAR_REMOVED_IN}; it only warns 'Unknown vLLM "
                               f"environment variable'): use --all2all-backend {env_value}"))
        elif flag_exists:
            out.append(Finding("warning", "env-var-deprecated",
                               f"VLLM_ALL2ALL_BACKEND={env_value} is deprecated since v{rules.FLAG_SINCE} "
                               f"(PR #26732): use --all2all-backend {env_value}"))
    return out


def _deployment_findings(args: ServeArgs, backend: str) -> list[Finding]:
    """Findings about -ep/-dp/-tp, EPLB and DBO that do not depend on the model's dtype."""
    out: list[Finding] = []
    if not args.uses_all2all:
        if args.all2all_backend is not None:
            why = ("without --enable-expert-parallel (-ep)" if not args.enable_expert_parallel
                   else f"with --data-parallel-size {args.data_parallel_size} (needs > 1)")
            out.append(Finding("warning", "flag-has-no-effect",
                               f"--all2all-backend {args.all2all_backend} has no effect {why}: vLLM builds no "
                               f"all2all group and silently ignores it (EP size = dp x tp = {args.world_size})"))
        if args.data_parallel_size > 1 and not args.enable_expert_parallel:
            out.append(Finding("info", "dp-without-ep",
                               "data parallel without --enable-expert-parallel: MoE layers fall back to "
                               "all-gather + reduce-scatter over DP x TP"))
    elif args.all2all_backend is None:
        out.append(Finding("info", "default-backend",
                           f"no --all2all-backend: vLLM runs its default, {rules.DEFAULT_BACKEND}"))
    if args.enable_eplb and not args.enable_expert_parallel:
        out.append(Finding("error", "eplb-without-ep",
                           "--enable-eplb needs --enable-expert-parallel: vLLM refuses to start "
                           "('enable_expert_parallel must be True to use EPLB')"))
    if args.enable_dbo and backend not in rules.DBO_BACKENDS:
        out.append(Finding("error", "dbo-unsupported",
                           f"--enable-dbo works only with {', '.join(rules.DBO_BACKENDS)} on CUDA; with "
                           f"{backend} vLLM fails an assertion at startup (issue #54493)"))
    if args.uses_all2all and backend in rules.BATCHED_BACKENDS and args.max_num_batched_tokens is None:
        out.append(Finding("info", "batched-token-default",
                           f"{backend} lowers the default --max-num-batched-tokens to 256"))
    return out


def _model_findings(profile: MoeProfile, args: ServeArgs, backend: str, version: str, arch: str,
                    environ: dict) -> list[Finding]:
    """Findings from the legality rules for one arch.

    The rules see the line's ``--max-num-batched-tokens`` as the tokens each rank dispatches at
    most (vLLM sizes the per-rank buffers from it; absent, vLLM's default for the backend, 256 for
    deepep_low_latency, which a lowered ``NVSHMEM_QP_DEPTH`` can still refuse) and the line's
    environment over ``environ`` (``NVSHMEM_QP_DEPTH``).
    """
    out: list[Finding] = []
    if not args.uses_all2all:
        return out
    try:
        canonical = rules.resolve(backend)
    except rules.UnknownBackend:
        return out  # already an invalid-choice error
    if args.all2all_backend is not None and not rules.value_known_to(args.all2all_backend, version):
        return out  # already reported: vllm serve would not start
    serving = {**environ, **args.env}
    tokens = args.max_num_batched_tokens
    if tokens is None:
        from autoselect.vllm_flags import BACKEND_DEFAULT_MAX_NUM_BATCHED_TOKENS

        tokens = BACKEND_DEFAULT_MAX_NUM_BATCHED_TOKENS.get(canonical)
    limits = {"max_tokens_per_rank": tokens, "environ": serving}
    verdict = rules.legal(backend, profile, None, args.world_size, version, gpu_arch=arch, **limits)
    dtype = profile.activation_dtype(arch)
    alternatives = None
    for reason in verdict.reasons:
        if "has no --all2all-backend value" in reason:
            continue
        if alternatives is None:
            alternatives = rules.legal_alternatives(profile, None, args.world_size, version, gpu_arch=arch,
                                                    exclude=(canonical,), **limits)
        code = "illegal-dtype" if "activations;" in reason else "illegal-shape"
        alt = (f"; legal here: {', '.join(rules.flag_value(b, version) for b in alternatives)}"
               if alternatives else "")
        out.append(Finding("error", code, reason + alt, arch))
    for warning in verdict.warnings:
        if warning.startswith(("no host fingerprint", f"{canonical} was removed", f"{backend} is the deprecated")):
            continue  # said once by the flag findings, or about hardware check cannot see
        out.append(Finding("warning" if "open upstream report" in warning else "info", "note", warning, arch))
    if verdict.ok and canonical == "flashinfer_nvlink_one_sided":
        out.append(Finding("info", "one-sided-ok", f"{profile.model} dispatches {dtype} on {arch}: one-sided is legal", arch))
    return out


def check_serve_command(argv: list[str], *, gpu_arch: str | None = None, vllm_version: str | None = None,
                        environ: dict | None = None) -> CheckReport:
    """Check a `vllm serve MODEL [flags...]` command line and return every finding.

    :param argv: the command line, as words (``["vllm", "serve", "MODEL", "-dp", "8", ...]``).
    :param gpu_arch: the target arch (any spelling); default: the local GPUs', else both archs.
    :param vllm_version: the vLLM that will run it; default: the version the vLLM that checked the
        flags reported (``$AUTOSELECT_VLLM_PYTHON`` or this environment's), else the package
        metadata of ``$AUTOSELECT_VLLM_PYTHON``'s environment, else this environment's, else the
        newest known (:func:`autoselect.vllm_target.target_version`, shared with ``recommend``).
    :param environ: the environment to look for ``VLLM_ALL2ALL_BACKEND`` and ``NVSHMEM_QP_DEPTH`` in
        (default ``os.environ``); ``VAR=value`` words before the command win over it.
    :raises UserError: an unreadable command line, model, version or arch (exit status 2).
    """
    if vllm_version:
        rules.parse_version(vllm_version)  # a bad --vllm-version is refused before vLLM starts
    if gpu_arch:
        archs, arch_source = [normalize_arch(gpu_arch)], "--gpu-arch"
    else:
        local = _local_gpu_arch()
        archs, arch_source = ([normalize_arch(local)], "local GPUs") if local else (list(GPU_ARCHS), "no GPU: both archs")
    args = parse_serve_argv(argv)
    backend = args.all2all_backend or rules.DEFAULT_BACKEND
    # vLLM's own parser, when vLLM is installed (a subprocess; see autoselect/vllm_bridge.py);
    # the version it reports is the one the rules judge the line against.
    from autoselect.vllm_bridge import serve_command_check
    from autoselect.vllm_target import target_version

    answered, vllm_findings = serve_command_check(argv)
    version, version_source = target_version(vllm_version, answered)  # the same resolution as recommend
    environ = dict(os.environ if environ is None else environ)
    findings = _flag_findings(args, version, environ)
    findings += _deployment_findings(args, backend)
    findings += [Finding(sev, code, msg) for sev, code, msg in vllm_findings]
    if version_source == "newest known":
        why = "vLLM did not answer" if vllm_findings else "no vLLM installed"
        findings.append(Finding("info", "assumed-version",
                                f"{why} and no --vllm-version: assuming vLLM {version}"))
    try:
        profile = load_profile(args.model)
    except DenseModel as e:
        findings.append(Finding("warning", "dense-model", str(e)))
        profile = None
    if profile is not None:
        for arch in archs:
            findings += _model_findings(profile, args, backend, version, arch, environ)
    order = {s: i for i, s in enumerate(SEVERITIES)}
    findings.sort(key=lambda f: order[f.severity])
    return CheckReport(args, version, version_source, archs, arch_source, profile, backend, findings)
