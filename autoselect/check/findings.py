"""The findings about one `vllm serve` line: each rule of the line as a :class:`Finding` with a severity.

Pure functions of what was read (:class:`autoselect.vllm_flags.ServeArgs`), the target release, the
backend that release runs (:class:`autoselect.rules.EffectiveBackend`) and the model's profile;
:mod:`autoselect.check.serve_line` calls them in order.
"""

from __future__ import annotations

from typing import NamedTuple

from autoselect import rules
from autoselect.model import MoeProfile
from autoselect.vllm_flags import ServeArgs

SEVERITIES = ("error", "warning", "info")
#: Where the backend vLLM runs came from (EffectiveBackend.origin), as the report says it.
FLAG, VARIABLE, DEFAULT = rules.ORIGIN_FLAG, rules.VARIABLE, rules.ORIGIN_DEFAULT
#: The origin when a --moe-backend that dispatches itself decides (vLLM binds passthrough).
MOE_BACKEND = "--moe-backend"


class Finding(NamedTuple):
    """One thing `check` has to say: severity, a stable code, the message (one sentence), its arch if
    any, and the message with its sources where they say more (``--explain``, JSON ``detail``) (a
    NamedTuple: every check and launch creates the class, and a frozen dataclass costs ~6x more to create)."""

    severity: str
    code: str
    message: str
    gpu_arch: str | None = None
    detail: str | None = None

    def to_dict(self) -> dict:
        """A JSON-ready dict (``detail`` only where there is one)."""
        out = {"severity": self.severity, "code": self.code, "message": self.message, "gpu_arch": self.gpu_arch}
        if self.detail is not None:
            out["detail"] = self.detail
        return out


def _known_value(value: str) -> bool:
    return value in rules.ALL_FLAG_VALUES or value in rules.selection.ALL_VARIABLE_VALUES


def flag_advice(value: str, version: str) -> str:
    """What to write instead of ``VLLM_ALL2ALL_BACKEND=value`` on ``version``, never a removed or
    unknown backend: ``use --all2all-backend X``, or why there is nothing to carry over."""
    if not _known_value(value):
        return f"{value!r} names no backend any vLLM release knows: drop the variable"
    canonical = rules.resolve(value)
    cap = rules.BACKENDS[canonical]
    if cap.replaced_by and rules.version_in(version, cap.removed_in, None):
        return (f"{canonical} itself is gone ({cap.removal_source}; vLLM {version} runs {cap.replaced_by} "
                f"instead): drop the variable and pick a current backend (`autoselect recommend` names one)")
    if not rules.version_in(version, rules.FLAG_SINCE, None):
        return ""
    try:
        return f"use --all2all-backend {rules.flag_value(canonical, version)}"
    except rules.BackendUnknownToVersion as e:
        return str(e)


def option_findings(args: ServeArgs, version: str) -> list[Finding]:
    """Options the target release does not have (yet, any more, or ever)."""
    out: list[Finding] = []
    for option in args.options:
        known = rules.SERVE_OPTIONS.get(option)
        if known is None:
            continue
        if not known.released:
            out.append(Finding("error", "option-never-released",
                               f"{option} is in no vLLM release ({known.source}): vllm serve exits with "
                               f"'unrecognized arguments'; use {known.replacement}"))
        elif not known.accepted_by(version):
            when = (f"added in v{known.since}" if known.since and not rules.version_in(version, known.since, None)
                    else f"removed in v{known.until}")
            hint = (f"set VLLM_ALL2ALL_BACKEND={args.all2all_backend} instead"
                    if option == "--all2all-backend" else f"use {known.replacement}" if known.replacement
                    else "upgrade vLLM or drop it")
            if option == "--all2all-backend" and args.all2all_backend:
                era = rules.selection_era(version)
                if args.all2all_backend not in era.variable_values:
                    hint = (f"vLLM {version} selects backends only through VLLM_ALL2ALL_BACKEND, which takes "
                            f"{', '.join(sorted(era.variable_values))}")
            code = "flag-unknown-to-version" if option == "--all2all-backend" else "option-unknown-to-version"
            out.append(Finding("error", code, f"vLLM {version} has no {option} ({when}; {known.source}): "
                                              f"vllm serve would exit with 'unrecognized arguments'; {hint}"))
        elif known.deprecated_in(version):
            out.append(Finding("warning", "deprecated-option",
                               f"{option} is deprecated in vLLM {version} and gone in v{known.until}: use "
                               f"{known.replacement} ({known.source})"))
    return out


def flag_value_findings(args: ServeArgs, version: str, effective: rules.EffectiveBackend) -> list[Finding]:
    """Findings about the --all2all-backend value, on a release that has the flag."""
    out: list[Finding] = []
    given = args.all2all_backend
    if given is None or not rules.version_in(version, rules.FLAG_SINCE, None):
        return out
    if given not in rules.ALL_FLAG_VALUES:
        hidden = next((h for h in rules.HIDDEN_VALUES if h.value == given), None)
        why = (f" ({given} is a value of vLLM's config, not of its command line: vLLM sets it itself for "
               f"{hidden.bound_by}; {hidden.source})" if hidden else "")
        return [Finding("error", "invalid-choice",
                        f"--all2all-backend {given!r} is not a vLLM choice: vllm serve would exit with "
                        f"'invalid choice'{why}; use one of {', '.join(rules.parser_choices(version))}")]
    if not rules.value_known_to(given, version):
        canonical = rules.resolve(given)
        spelled = rules.BACKENDS[canonical].spelling(version)
        hint = (f"; this version spells {canonical} as {spelled.value}" if spelled
                else f"; it accepts: {', '.join(rules.parser_choices(version))}")
        return [Finding("error", "value-unknown-to-version",
                        f"vLLM {version} does not accept --all2all-backend {given}: vllm serve would exit "
                        f"with 'invalid choice'{hint}")]
    if effective.origin != FLAG:
        return out  # the variable wins: the flag's value never runs
    if given in rules.ALIASES and rules.version_in(version, rules.ALIASES[given][1], None):
        new, _, source = rules.ALIASES[given]
        out.append(Finding("warning", "deprecated-name",
                           f"{given} is the deprecated old name of {new} ({source}); it still works but "
                           f"will be removed: use --all2all-backend {new}"))
    elif (old := rules.deprecation(given, version)) is not None:
        out.append(Finding("warning", "deprecated-name",
                           f"--all2all-backend {given} is deprecated in vLLM {version} ({old.source}); it still "
                           f"runs, and {old.note}: use --all2all-backend {old.instead}"))
    cap = rules.BACKENDS.get(given)
    if cap is not None and cap.replaced_by and rules.version_in(version, cap.removed_in, None):
        out.append(Finding("warning", "removed-backend",
                           f"--all2all-backend {given} was removed ({cap.removal_source}): vLLM {version} "
                           f"logs a warning and runs {cap.replaced_by}; pass {cap.replaced_by} or "
                           f"another backend explicitly"))
    return out


def unknown_origin(args: ServeArgs, effective: rules.EffectiveBackend, unexpanded: frozenset) -> str | None:
    """``--all2all-backend $X`` or ``VLLM_ALL2ALL_BACKEND=$X`` when the backend vLLM runs (or
    whether it starts at all) depends on that value, which the line leaves to the shell
    (``unexpanded``: :attr:`ServeArgs.unexpanded`, or nothing where the words reach vLLM as they
    are); else None."""
    if effective.origin == FLAG and "--all2all-backend" in unexpanded:
        return f"--all2all-backend {args.all2all_backend}"
    if VARIABLE in unexpanded and (effective.origin == VARIABLE or effective.variable_refused):
        return f"{VARIABLE}={effective.variable}"
    return None


def variable_findings(args: ServeArgs, version: str, effective: rules.EffectiveBackend,
                      unexpanded: frozenset) -> list[Finding]:
    """Findings about VLLM_ALL2ALL_BACKEND: whether this release reads it, and what to write instead.

    A value the shell expands is not judged: the release's handling of the variable is said,
    never that its (unknown) value is invalid or what to write instead of it."""
    value = effective.variable
    if value is None:
        return []
    era = effective.era
    if VARIABLE in unexpanded:
        if effective.origin == VARIABLE or effective.variable_refused:
            return []  # the backend-unknown finding says it
        effective = rules.EffectiveBackend(effective.backend, effective.origin, era, effective.flag, value,
                                           effective.overridden, effective.variable_ignored, None)
        advice = ""
    else:
        advice = flag_advice(value, version)
    tail = f": {advice}" if advice else ""
    name = f"{VARIABLE}={value}"
    if effective.variable_refused:
        return [Finding("error", "env-var-invalid", f"{name}: {effective.variable_refused} "
                                                    f"({era.cite}){tail}")]
    if effective.variable_ignored:
        warned = (" and warns 'Unknown vLLM environment variable detected'"
                  if era.variable == rules.selection.IGNORED_WARNED else "")
        return [Finding("warning", "env-var-removed",
                        f"{name} is set but vLLM {version} ignores it{warned} (removed by PR #33535 in "
                        f"v{rules.ENV_VAR_REMOVED_IN}); it runs {effective.backend} ({effective.origin}){tail}")]
    if era.variable == rules.selection.ONLY:
        return [Finding("info", "env-var-backend",
                        f"vLLM {version} has no --all2all-backend: {name} chooses the backend ({era.cite})")]
    if effective.origin == FLAG:
        return [Finding("warning", "env-var-overridden",
                        f"{name} is not used: in vLLM {era.releases} --all2all-backend {args.all2all_backend} wins "
                        f"over it ({era.cite}); drop the variable")]
    if effective.overridden:
        keep = f"--all2all-backend {advice.rpartition(' ')[2]}" if advice.startswith("use ") else "another backend"
        return [Finding("warning", "env-var-overrides-flag",
                        f"{name} overrides --all2all-backend {args.all2all_backend} in vLLM {era.releases}: vLLM "
                        f"{version} runs {value}, not the flag's value ({era.cite}); unset the variable to run the "
                        f"flag's value, or pass {keep} and unset it")]
    return [Finding("warning", "env-var-deprecated",
                    f"the backend comes from {name}, deprecated since v{rules.FLAG_SINCE} (PR #26732) and "
                    f"ignored from v{rules.ENV_VAR_REMOVED_IN} (PR #33535){tail}")]


def moe_backend_findings(args: ServeArgs, version: str, binding: rules.Binding | None) -> list[Finding]:
    """Findings about --moe-backend: a megakernel value the release lacks, and what a megakernel
    that dispatches itself does to the all2all backend."""
    out: list[Finding] = []
    moe = args.moe_backend
    if moe is not None and binding is None and rules.SERVE_OPTIONS["--moe-backend"].accepted_by(version):
        row = next((r for r in rules.MOE_BACKENDS if r.moe_backend == moe), None)
        if row is not None and not rules.version_in(version, row.since, row.until):
            out.append(Finding("error", "moe-backend-unknown-to-version",
                               f"vLLM {version} has no --moe-backend {moe} (added in v{row.since}; {row.source}): "
                               f"vllm serve would exit with 'invalid choice'"))
    if binding is None:
        return out
    if binding.refused:
        out.append(Finding("error", "moe-backend-conflict", binding.refused + ": drop --all2all-backend"))
        return out
    out.append(Finding("info", "moe-backend-dispatches",
                       f"--moe-backend {binding.row.moe_backend} dispatches and combines itself: vLLM {version} binds "
                       f"all2all_backend={binding.backend} and runs no all2all, so no --all2all-backend applies "
                       f"({binding.row.source})"))
    if args.all2all_backend is not None:
        out.append(Finding("warning", "all2all-backend-ignored",
                           f"--all2all-backend {args.all2all_backend} does nothing next to --moe-backend "
                           f"{binding.row.moe_backend} (vLLM {version} replaces it by {binding.backend}; any value "
                           f"other than allgather_reducescatter would stop the server): drop it"))
    return out


def deployment_findings(args: ServeArgs, version: str, effective: rules.EffectiveBackend,
                        profile: MoeProfile | None, serving: dict, binding: rules.Binding | None,
                        platform: str | None = None) -> list[Finding]:
    """Findings about -ep/-dp/-tp, EPLB, DBO and the batch defaults that do not depend on the dtype
    (``platform``: None on GPUs; DBO's backend assert is the CUDA platform's)."""
    out: list[Finding] = []
    backend = effective.backend
    bound = binding is not None and binding.backend is not None  # passthrough: no all2all backend runs
    chosen = {FLAG: f"--all2all-backend {args.all2all_backend}",
              VARIABLE: f"{VARIABLE}={effective.variable}"}.get(effective.origin)
    if not args.uses_all2all:
        if chosen is not None and backend is not None and binding is None:
            why = ("without --enable-expert-parallel (-ep)" if not args.enable_expert_parallel
                   else f"with --data-parallel-size {args.data_parallel_size} (needs > 1)")
            out.append(Finding("warning", "flag-has-no-effect",
                               f"{chosen} has no effect {why}: vLLM builds no all2all group and silently "
                               f"ignores it (EP size = dp x tp = {args.world_size})"))
        if args.data_parallel_size > 1 and not args.enable_expert_parallel:
            out.append(Finding("info", "dp-without-ep",
                               "data parallel without --enable-expert-parallel: MoE layers fall back to "
                               "all-gather + reduce-scatter over DP x TP"))
    elif effective.origin == DEFAULT and not bound:
        out.append(Finding("info", "default-backend",
                           f"no backend named: vLLM {version} runs its default, {backend}"))
    if profile is not None:
        redundant = rules.redundant_experts(profile.num_experts, args.redundant_given, args.world_size, version,
                                            enable_eplb=args.enable_eplb)
        for reason in rules.eplb_reasons(profile.num_experts, redundant, args.world_size, version,
                                         enable_eplb=args.enable_eplb, expert_parallel=args.enable_expert_parallel):
            out.append(Finding("error", "eplb", reason))
        if redundant and args.redundant_given is None and args.enable_expert_parallel:
            row = next(r for r in rules.REDUNDANT_DEFAULTS if rules.version_in(version, r.since, r.until))
            out.append(Finding("info", "eplb-redundant-default",
                               f"no num_redundant_experts: vLLM {version} adds {redundant}, the fewest that make the "
                               f"{profile.num_experts} routed experts divide over EP size {args.world_size} "
                               f"({row.source})"))
    elif args.enable_eplb and not args.enable_expert_parallel:
        out.append(Finding("error", "eplb-without-ep",
                           "--enable-eplb needs --enable-expert-parallel: vLLM refuses to start "
                           "('enable_expert_parallel must be True to use EPLB')"))
    acted_on = rules.acted_on(effective.backend, version)
    for note in rules.eplb_notes(acted_on, version, args.eplb_config, enable_eplb=args.enable_eplb):
        out.append(Finding("info", "eplb-forced-sync", note))
    return out + runtime_findings(args, version, effective, serving, binding, platform)


def runtime_findings(args: ServeArgs, version: str, effective: rules.EffectiveBackend, serving: dict,
                     binding: rules.Binding | None, platform: str | None = None) -> list[Finding]:
    """Findings about DBO's backends and the dispatch buffers' token budget (``platform``: None on GPUs;
    DBO's backend assert is the CUDA platform's)."""
    out: list[Finding] = []
    backend = effective.backend
    bound = binding is not None and binding.backend is not None
    dbo_known = rules.SERVE_OPTIONS["--enable-dbo"].accepted_by(version)
    if args.enable_dbo and dbo_known and backend is not None and not (binding and binding.refused) and platform is None:
        canonical = binding.backend if bound else rules.resolve(backend)
        supported = rules.dbo_backends(version)
        if canonical not in supported:
            rocm = [b for b in rules.dbo_backends(version, rules.serve_options.ROCM) if b not in supported]
            also = (f" (on ROCm vLLM {version} also takes {', '.join(rocm)}; autoselect judges CUDA GPUs)"
                    if canonical in rocm else "")
            out.append(Finding("error", "dbo-unsupported",
                               f"--enable-dbo works only with {', '.join(supported)} on CUDA in vLLM {version}; "
                               f"with {canonical} vLLM fails an assertion at startup "
                               f"({rules.serve_options.DBO_ASSERT_SOURCE}; issue #54493){also}"))
    if args.uses_all2all and backend is not None and binding is None:
        canonical = rules.resolve(backend)
        budget = rules.dispatch_budget(canonical, version, max_num_batched_tokens=args.max_num_batched_tokens,
                                       environ=serving)
        step = {c.kind: c for c in rules.step_consequences(
            canonical, version, data_parallel_size=args.data_parallel_size,
            max_num_batched_tokens=args.max_num_batched_tokens, enforce_eager=args.enforce_eager)}
        if budget is not None and not budget.given:
            lowered = step.get(rules.consequences.STEP_BUDGET)  # every step capped: a warning, which launch says too
            if lowered is not None:
                out.append(Finding("warning", "batched-token-default", f"{lowered.text} ({budget.row.cite})"))
            else:
                out.append(Finding("info", "batched-token-default",
                                   f"{canonical}'s buffer holds {budget.tokens} tokens per rank ({budget.describe()}); "
                                   f"vLLM chunks larger batches ({budget.row.cite})"))
        if rules.consequences.CUDA_GRAPHS_OFF in step:
            out.append(Finding("warning", "cuda-graphs-off",
                               f"{step[rules.consequences.CUDA_GRAPHS_OFF].text}; for decode-heavy serving use "
                               f"another backend"))
    chunk = serving.get(rules.budgets.CHUNK_SIZE)
    if chunk is not None and rules.version_in(version, rules.budgets.CHUNK_SIZE_REMOVED_IN, None):
        out.append(Finding("warning", "env-var-removed",
                           f"{rules.budgets.CHUNK_SIZE}={chunk} is set but vLLM {version} does not read it "
                           f"({rules.budgets.CHUNK_SIZE_REMOVED_SOURCE}): from v{rules.budgets.CHUNK_SIZE_REMOVED_IN} "
                           f"--max-num-batched-tokens sizes the low-latency buffers"))
    return out


def _settings(args: ServeArgs, version: str) -> dict:
    """The line's settings some upstream reports need (:data:`autoselect.rules.reports.SETTINGS`)."""
    return {"enforce_eager": args.enforce_eager,
            "enable_dbo": args.enable_dbo and rules.SERVE_OPTIONS["--enable-dbo"].accepted_by(version),
            "eplb_async": rules.eplb_is_async(version, args.eplb_config, enable_eplb=args.enable_eplb)}


def model_findings(profile: MoeProfile, args: ServeArgs, backend: str, version: str, arch: str | None,
                   serving: dict, role: str | None, redundant: int, platform: str | None = None) -> list[Finding]:
    """Findings from the legality rules for one arch.

    The rules see the line's ``--max-num-batched-tokens`` and environment (``NVSHMEM_QP_DEPTH``,
    ``VLLM_MOE_DP_CHUNK_SIZE``): which of them sizes a batched backend's buffer depends on the
    release (:func:`autoselect.rules.dispatch_budget`); the EPLB redundant experts count as
    experts; TP size and role select the upstream reports that apply. On a platform without GPUs
    (``platform``, ``arch`` None) that platform's row decides (:data:`autoselect.rules.PLATFORMS`).
    """
    out: list[Finding] = []
    if not args.uses_all2all:
        return out
    try:
        canonical = rules.resolve(backend)
    except rules.UnknownBackend:
        return out  # already an invalid-choice error
    limits = {"max_num_batched_tokens": args.max_num_batched_tokens, "environ": serving,
              "redundant_experts": redundant}
    verdict = rules.legal(backend, profile, None, args.world_size, version, gpu_arch=arch,
                          tensor_parallel_size=args.tensor_parallel_size, role=role,
                          settings=_settings(args, version), platform=platform, **limits)
    alternatives = None
    for i, reason in enumerate(verdict.reasons):
        if "has no --all2all-backend value" in reason:
            continue  # the option findings said it: vllm serve would not start
        if alternatives is None:
            alternatives = rules.legal_alternatives(profile, None, args.world_size, version, gpu_arch=arch,
                                                    exclude=(canonical,), platform=platform, **limits)
        code = ("illegal-dtype" if "activations;" in reason else "illegal-arch" if " does not run on " in reason
                else "illegal-platform" if platform is not None and "platform" in reason else "illegal-shape")
        alt = (f"; legal here: {', '.join(rules.flag_value(b, version) for b in alternatives)}"
               if alternatives else "")
        detail = verdict.detail(i)
        out.append(Finding("error", code, reason + alt, arch, detail=detail + alt if detail != reason else None))
    for warning in verdict.warnings:
        if warning.startswith(("no host fingerprint", f"{canonical} was removed", f"{backend} is the deprecated",
                               f"{backend} is deprecated")):
            continue  # said once by the flag findings, or about hardware check cannot see
        if warning.startswith("upstream report"):
            certain = not ("is unknown" in warning or "applies " in warning)
            out.append(Finding("warning" if certain else "info", "upstream-report", warning, arch))
        else:
            out.append(Finding("info", "note", warning, arch))
    if verdict.ok and canonical == "flashinfer_nvlink_one_sided" and arch is not None:
        out.append(Finding("info", "one-sided-ok",
                           f"{profile.model} dispatches {profile.activation_dtype(arch)} on {arch}: one-sided is "
                           f"legal", arch))
    return out
