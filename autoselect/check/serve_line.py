"""The one judge of a `vllm serve` line: what the target release runs, and every finding about it.

:func:`judge_line` reads the command line (:mod:`autoselect.vllm_flags`: launchers, pasted
blocks, old option names), resolves the target vLLM release and the backend it would actually
run from ``--all2all-backend``, ``VLLM_ALL2ALL_BACKEND`` and its default
(:func:`autoselect.rules.effective_backend`), reads the model's profile (:mod:`autoselect.model`)
and runs the legality rules (:mod:`autoselect.rules`) for each GPU architecture in question.
Every problem becomes a :class:`Finding` with a severity. ``check`` prints them (any ``error``
makes its exit status 1); ``launch`` calls the same function on the line it would start,
refuses it on any error and prints every warning (:mod:`autoselect.launch.choose`). What the
two callers differ in is what :class:`LineContext` says, never a rule:

* GPU architecture: ``check`` takes ``--gpu-arch``, else the local GPUs' arch when
  :func:`autoselect.hardware.local_gpu_arch` finds one, else (a CPU host) both ``sm90`` and
  ``sm100``, reported separately, because the same checkpoint dispatches different dtypes on
  them (:func:`check_serve_command`); ``launch`` its own (vLLM's CPU platform included).
* The release: ``check`` asks the installed vLLM's own parser (a subprocess) and takes the
  version it reports, but only where that vLLM is the target release: a vLLM's parser speaks for
  its own release, so with ``--vllm-version`` (or an image tag) naming another, it is not asked
  (:func:`_own_parser`); ``launch`` reads the version of the line's own Python instead (no
  subprocess of vLLM on its start path). Either way :func:`autoselect.bridge.target_version`.
* Shell expansions: ``check`` reads a script a shell runs, so a value holding ``$X`` is the
  shell's and is not judged; ``launch`` starts the words as they are (``literal``), so vLLM gets
  ``$X`` itself, and the value is judged as it is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping, NamedTuple

from autoselect import bridge, rules
from autoselect.bridge import (SOURCE_NEWEST, TargetVersion, VllmPythonInvalid, installed_vllm_version, same_release,
                               target_version, vllm_python)
from autoselect.check.findings import (FLAG, MOE_BACKEND, SEVERITIES, VARIABLE, Finding, deployment_findings,
                                       flag_value_findings, model_findings, moe_backend_findings, option_findings,
                                       unknown_origin, variable_findings)
from autoselect.dataclass_methods import DataclassMethods
from autoselect.hardware import local_gpu_arch
from autoselect.redact import redacted_text
from autoselect.model import GPU_ARCHS, DenseModel, MoeProfile, load_profile, normalize_arch
from autoselect.vllm_flags import (SHELL_VARIABLES, Command, ServeArgs, has_shell_expansion, read_command,
                                   serve_args_of, shell_expansions)
from autoselect.workload import check_role

#: What to do about a shell expansion the line's words carry to vLLM as they are.
EXPAND_IT = ("launch starts the line's words as they are, so no shell expands it before vLLM reads it; pass the "
             "line as the shell expands it (`autoselect launch -- ... $B`, unquoted)")
#: Error codes about a value vLLM refuses, where a shell expansion read literally is the likely cause.
VALUE_ERRORS = frozenset({"invalid-choice", "value-unknown-to-version", "env-var-invalid"})

@dataclass(repr=False, eq=False)  # DataclassMethods: the same methods, not compiled per class
class CheckReport(DataclassMethods):
    """The outcome of checking one `vllm serve` command line."""

    args: ServeArgs
    vllm_version: str
    vllm_version_source: str  # "--vllm-version", "the line's image", "installed vllm", ..., "newest known"
    gpu_archs: list[str]
    gpu_arch_source: str  # "--gpu-arch", "local GPUs", "no GPU: both archs"
    profile: MoeProfile | None
    backend: str | None  # the backend vLLM would run, as named; None: vLLM refuses the line's choice
    backend_origin: str  # "--all2all-backend", "VLLM_ALL2ALL_BACKEND", "vLLM's default" or "--moe-backend"
    effective: rules.EffectiveBackend
    role: str | None = None
    findings: list[Finding] = field(default_factory=list)
    vllm_version_warning: str | None = None  # the version is newer than every release the rules know
    moe_binding: rules.Binding | None = None  # a --moe-backend that dispatches and combines itself
    serving: dict = field(default_factory=dict)  # the environment the server starts with (values the rules judge)
    version_problems: list[str] = field(default_factory=list)  # a vLLM Python that could not be read
    platform: str | None = None  # None: GPUs; a platform of autoselect.rules.PLATFORMS ("cpu")

    @property
    def errors(self) -> list[Finding]:
        """The error findings: vLLM would not start the line, or it is illegal."""
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        """The warning findings."""
        return [f for f in self.findings if f.severity == "warning"]

    @property
    def redundant_experts(self) -> int:
        """The EPLB redundant experts the release runs with: the line's, else its default."""
        routed = self.profile.num_experts if self.profile else 0
        return rules.redundant_experts(routed, self.args.redundant_given, self.args.world_size, self.vllm_version,
                                       enable_eplb=self.args.enable_eplb)

    @property
    def exit_code(self) -> int:
        """1 when any finding is an error, else 0."""
        return 1 if any(f.severity == "error" for f in self.findings) else 0

    def to_dict(self) -> dict[str, Any]:
        """The JSON ``check --format json`` prints."""
        return {
            "schema_version": 1,
            "ok": self.exit_code == 0,
            "model": redacted_text(self.args.model),
            "vllm_version": self.vllm_version,
            "vllm_version_source": self.vllm_version_source,
            "vllm_version_warning": self.vllm_version_warning,
            "gpu_archs": self.gpu_archs,
            "gpu_arch_source": self.gpu_arch_source,
            "backend": self.backend,
            "backend_origin": self.backend_origin,
            "backend_given": self.args.all2all_backend,
            "backend_selection": self.effective.to_dict(),
            "moe_backend_binding": self.moe_binding.to_dict() if self.moe_binding else None,
            "role": self.role,
            "world_size": self.args.world_size,
            "uses_all2all": self.args.uses_all2all,
            "physical_experts": (self.profile.num_experts + self.redundant_experts) if self.profile else None,
            "activation_dtype": (
                {a: self.profile.activation_dtype(a) for a in self.gpu_archs} if self.profile else None
            ),
            "findings": [{**f.to_dict(), "message": redacted_text(f.message),
                          **({"detail": redacted_text(f.detail)} if f.detail is not None else {})}
                         for f in self.findings],
            "args": self.args.to_dict(),
        }


def _local_gpu_arch() -> str | None:
    """The arch of the local GPUs, or None (no NVML, a CPU host)."""
    try:
        return local_gpu_arch()
    except Exception:  # NVML trouble must not break a static check; fall back to both archs
        return None


class LineContext(NamedTuple):
    """What a line is judged for besides its own words (see the module docstring for how ``check``
    and ``launch`` fill it)."""

    gpu_archs: tuple  # the archs judged, each reported apart; (None,) on a platform without GPUs
    gpu_arch_source: str  # "--gpu-arch", "local GPUs", "no GPU: both archs", ...
    vllm_version: str | None = None  # --vllm-version
    environ: Mapping[str, str] | None = None  # the environment the line starts in (default os.environ)
    role: str | None = None  # --role (default: the line's --kv-transfer-config kv_role)
    platform: str | None = None  # None: GPUs; a platform of autoselect.rules.PLATFORMS
    python: str | None = None  # the line's own Python, whose vllm names the release (launch)
    ask_vllm: bool = False  # ask the installed vLLM's own parser, and take the version it reports (check)
    literal: bool = False  # the words reach vLLM as they are: no shell expands them (launch)
    target: TargetVersion | None = None  # the release, already resolved (launch's final line)
    run_python: bool = True  # False: ``python`` is never run (launch --dry-run): its sys.path only from the cache
    profile: MoeProfile | None = None  # the line's model, already read (launch's final line)


def _ask_vllm(serve_words) -> tuple[Any, list]:
    """:func:`autoselect.bridge.serve_command_check` when there is a vLLM to ask (or a
    ``$AUTOSELECT_VLLM_PYTHON`` to complain about); without one, no answer and no finding, and the
    bridge's client (its worker protocol, a dozen dataclasses, subprocess) is never imported."""
    try:
        if vllm_python() is None:
            return None, []
    except VllmPythonInvalid:
        pass  # serve_command_check turns it into a warning
    return bridge.serve_command_check(serve_words)


def _target(args: ServeArgs, context: LineContext) -> tuple[TargetVersion, list, list[str]]:
    """The release the line is judged against, vLLM's own findings (``ask_vllm``), and why a vLLM
    Python could not be read; the resolution every command shares (the line's image tag second)."""
    problems: list[str] = []
    if context.target is not None:
        return context.target, [], problems
    image = (args.image_version, args.image) if args.image_version else None
    named = context.vllm_version or (args.image_version if args.image_version and _orderable(args.image_version)
                                     else None)
    answered, vllm_findings = None, []
    if context.ask_vllm:
        answered, vllm_findings = _own_parser(args.serve_words, named)
    target = target_version(context.vllm_version, answered, problems, context.python, image=image,
                            run_python=context.run_python)
    return target, vllm_findings, problems


def _own_parser(serve_words, named: str | None) -> tuple[Any, list]:
    """What the installed vLLM's own parser says (:func:`_ask_vllm`), when it speaks for the target
    release: a vLLM's parser knows its own release only. With a target named (``--vllm-version``,
    the line's image tag) that another installed release would judge, it is not asked (an INFO
    says so, naming both); one that answers from another release than its metadata said has its
    verdict kept as an INFO naming both. Its version then decides nothing."""
    installed = installed_vllm_version() if named else None
    if named and installed and _orderable(installed) and not same_release(installed, named):
        return None, [("info", "vllm-not-asked",
                       f"the installed vLLM {installed} is not the target release {named}: its own parser speaks "
                       f"for {installed} only and was not asked (autoselect's tables judge the line for {named})")]
    answered, findings = _ask_vllm(serve_words)
    other = answered.version if answered is not None and _orderable(answered.version) else None
    if named and other and not same_release(other, named):
        return None, [("info", "vllm-other-release",
                       f"vLLM {other}, not the target release {named}, answered: {message}")
                      for severity, code, message in findings if code != "vllm-parsed"]
    return answered, findings


def _orderable(version: str | None) -> bool:
    try:
        rules.parse_version(version)
    except (rules.InvalidVllmVersion, TypeError):
        return False
    return bool(version)


def _effective(args: ServeArgs, version: str, serving: dict, unexpanded: frozenset):
    """The backend the release runs (None where vLLM refuses the value, or only the shell knows it),
    and the line's value only the shell knows (``--all2all-backend $X``), if any."""
    effective = rules.effective_backend(version, args.all2all_backend, serving.get(VARIABLE))
    unknown = unknown_origin(args, effective, unexpanded)
    if unknown or (effective.origin == FLAG and not rules.value_known_to(effective.backend, version)):
        # vllm serve exits at parse time (an invalid-choice or unknown-value error says so), or
        # the backend is a shell expansion's value, which only the shell knows
        effective = rules.EffectiveBackend(None, effective.origin, effective.era, effective.flag, effective.variable,
                                           effective.overridden, effective.variable_ignored, effective.variable_refused)
    return effective, unknown


def _line_findings(args: ServeArgs, version: str, effective, unknown: str | None, unexpanded: frozenset,
                   binding, literal: bool) -> list[Finding]:
    """What reading the line said, and the findings about its options, backend flag, variable and
    ``--moe-backend``."""
    findings = [Finding(sev, code, msg) for sev, code, msg in args.notes if not (literal and code == SHELL_VARIABLES)]
    if literal and (expansions := shell_expansions([*args.serve_words, *args.env.values()])):
        findings.append(Finding("warning", "shell-expansion-literal",
                                f"the line holds shell expansions ({', '.join(expansions)}) and its words reach "
                                f"vLLM as they are: no shell expands them; {EXPAND_IT}"))
    findings += option_findings(args, version)
    if unknown:
        findings.append(Finding("warning", "backend-unknown",
                                f"{unknown} is a shell expansion, read here literally: the backend vLLM {version} "
                                f"runs is its value, which only the shell knows; pass the line the shell ran "
                                f"(expand it, e.g. with echo) to check the backend"))
    if "--all2all-backend" not in unexpanded:
        findings += flag_value_findings(args, version, effective)
    findings += variable_findings(args, version, effective, unexpanded)
    findings += moe_backend_findings(args, version, binding)
    if literal:  # a refused value that is an expansion: say why vLLM would get it as it is
        findings = [Finding(f.severity, f.code, f"{f.message}; it is a shell expansion: {EXPAND_IT}", f.gpu_arch)
                    if f.severity == "error" and f.code in VALUE_ERRORS and has_shell_expansion(f.message) else f
                    for f in findings]
    return findings


def _release_findings(args: ServeArgs, target: TargetVersion, vllm_findings: list) -> list[Finding]:
    """What vLLM's own parser said, and what is known about the release itself."""
    version, version_source = target
    findings = [Finding(sev, code, msg) for sev, code, msg in vllm_findings]
    if version_source == SOURCE_NEWEST:
        why = "vLLM did not answer" if vllm_findings else "no vLLM installed"
        findings.append(Finding("info", "assumed-version",
                                f"{why} and no --vllm-version: assuming vLLM {version}"))
    if not rules.version_in(version, rules.OLDEST_CHECKED, None):
        findings.append(Finding("warning", "untested-version",
                                f"vLLM {version} is older than anything autoselect's version tables were checked "
                                f"against ({rules.OLDEST_CHECKED}): it is judged as {rules.OLDEST_CHECKED}"))
    hazard = rules.install_hazard(version)
    if hazard and not args.image_version:  # a vllm/vllm-openai image ships its FlashInfer
        findings.append(Finding("info", "install-hazard", hazard.text, detail=hazard.detail))
    return findings


def judge_line(line: list[str] | Command, context: LineContext) -> CheckReport:
    """Judge a `vllm serve MODEL [flags...]` command line: the facts and every finding.

    :param line: the command line, as words (``["vllm", "serve", "MODEL", "-dp", "8", ...]``) or as
        one pasted string (continuations, comments and ``export`` lines are read as a shell would),
        or the :class:`autoselect.vllm_flags.Command` already read from it.
    :param context: what it is judged for (:class:`LineContext`).
    :raises UserError: an unreadable command line or model (exit status 2).
    """
    command = line if isinstance(line, Command) else read_command(list(line))
    args = serve_args_of(command)
    target, vllm_findings, problems = _target(args, context)
    version = target.version
    unexpanded = frozenset() if context.literal else args.unexpanded
    serving = args.serving_environ(dict(os.environ if context.environ is None else context.environ))
    effective, unknown = _effective(args, version, serving, unexpanded)
    # the rules judge only values the line states: one a shell expands is left to vLLM's default
    serving = {k: v for k, v in serving.items() if k not in unexpanded or k == VARIABLE}
    binding = (rules.moe_backend_binding(args.moe_backend, rules.acted_on(effective.backend, version), version)
               if effective.backend is not None else None)
    findings = _line_findings(args, version, effective, unknown, unexpanded, binding, context.literal)
    findings += _release_findings(args, target, vllm_findings)
    try:
        known = context.profile
        profile = known if known is not None and known.model == args.model else load_profile(args.model)
    except DenseModel as e:
        findings.append(Finding("warning", "dense-model", str(e)))
        profile = None
    findings += deployment_findings(args, version, effective, profile, serving, binding, context.platform)
    runs, origin = effective.backend, effective.origin
    if binding is not None:  # vLLM binds passthrough (or refuses to start)
        runs, origin = binding.backend, MOE_BACKEND
    report = CheckReport(args, version, target.source, list(context.gpu_archs), context.gpu_arch_source, profile,
                         runs, origin, effective, context.role or args.role, findings, target.warning, binding,
                         serving, problems, context.platform)
    if profile is not None and effective.backend is not None and binding is None:
        for arch in context.gpu_archs:
            findings += model_findings(profile, args, effective.backend, version, arch, serving, report.role,
                                       report.redundant_experts, context.platform)
    order = {s: i for i, s in enumerate(SEVERITIES)}
    findings.sort(key=lambda f: order[f.severity])
    return report


def check_serve_command(argv: list[str], *, gpu_arch: str | None = None, vllm_version: str | None = None,
                        environ: dict | None = None, role: str | None = None) -> CheckReport:
    """Check a `vllm serve MODEL [flags...]` command line and return every finding (``autoselect check``).

    :param argv: the command line, as words or as one pasted string (:func:`judge_line`).
    :param gpu_arch: the target arch (any spelling); default: the local GPUs', else both archs.
    :param vllm_version: the vLLM that will run it; default: the release the line's
        ``vllm/vllm-openai`` image tag names, else the version the vLLM that checked the flags
        reported (``$AUTOSELECT_VLLM_PYTHON`` or this environment's), else the package metadata
        of ``$AUTOSELECT_VLLM_PYTHON``'s environment, else this environment's, else the newest
        known (:func:`autoselect.bridge.target_version`, shared with ``recommend``).
    :param environ: the environment the line runs in (default ``os.environ``); the line's own
        ``VAR=value`` words and ``env -u`` / ``env -i`` apply on top.
    :param role: ``prefill``, ``decode`` or ``both`` (what this instance serves, for reports that
        concern one side of prefill/decode disaggregation); default: the line's
        ``--kv-transfer-config`` kv_role, else unknown.
    :raises UserError: an unreadable command line, model, version, arch or role (exit status 2).
    """
    if vllm_version:
        rules.parse_version(vllm_version)  # a bad --vllm-version is refused before vLLM starts
    check_role(role)
    if gpu_arch:
        archs, arch_source = (normalize_arch(gpu_arch),), "--gpu-arch"
    else:
        local = _local_gpu_arch()
        archs, arch_source = (((normalize_arch(local),), "local GPUs") if local
                              else (GPU_ARCHS, "no GPU: both archs"))
    return judge_line(argv, LineContext(archs, arch_source, vllm_version=vllm_version, environ=environ, role=role,
                                        ask_vllm=True))
