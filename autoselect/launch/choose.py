""":func:`plan_launch`: from the user's server line to the line that runs, and why.

The decision, in order (every refusal is a :class:`autoselect.errors.UserError`: one ``Error:``
line, exit status 2, nothing written, nothing started):

1. Read the line (:mod:`autoselect.launch.line`); the platform it runs on here
   (:mod:`autoselect.launch.platform`); the vLLM that will serve it (``--vllm-version``, else the
   release its image tag names, else the line's own Python's vllm, else as every command resolves
   it: :func:`autoselect.bridge.target_version`, which also says when that release is newer than
   every release the rules know); the backend the line itself names, by that
   release's rules (:func:`autoselect.rules.effective_backend`: ``--all2all-backend``,
   ``VLLM_ALL2ALL_BACKEND``, ``--config``).
2. A ``--moe-backend`` that dispatches and combines itself (vLLM 0.32+'s FlashInfer MoE-EP
   megakernels, :data:`autoselect.rules.MOE_BACKENDS`): vLLM binds ``passthrough`` where the
   backend is its default or ``allgather_reducescatter`` and refuses any other at start-up, so
   such a backend is refused and the line otherwise started unchanged: no all2all backend runs.
3. No all2all group (no ``--enable-expert-parallel``, ``-dp 1``, a dense model): the line is
   started unchanged.
4. A backend the line names is judged by the one legality source,
   :func:`autoselect.candidates.candidate_backends`, with what ``check`` judges it on (model, GPU
   arch, EP size, release, token budget, environment, EPLB redundant experts; ``--enable-dbo``'s
   backends; on vLLM's CPU platform, the platform's row): illegal is refused, legal is kept unless
   ``--override``. The host's packages and NVLinks are not a reason to refuse the user's own
   choice (check does not judge them either): vLLM fails loudly at start-up there.
5. Otherwise the pick: on the CPU platform the one backend its communicator builds; on GPUs the
   selector's answer, from ``--server`` (the fleet's ``autoselect serve``) or, when it cannot
   answer, the local database, else the reference, else none (:mod:`autoselect.launch.service`,
   :mod:`autoselect.launch.local`). The database is read once, and a host class's arch is taken
   from the answer rather than looked up before it; on a GPU node the platform probe's fingerprint
   is the machine the selector answers for (NVML is walked once).
   An answer with confidence ``none`` keeps vLLM's default and names the ``autoselect bench``
   command that would settle it (``--require-evidence``: an error). A service's pick is judged
   again here before it is used.
6. The pick goes into the line the way the release reads it
   (:func:`autoselect.vllm_flags.backend_setting`), with the answer's flags and tuned variables
   where the line does not set them already (the user's values win).
"""

from __future__ import annotations

import functools
import math
import os
from typing import Any, Callable, Mapping, NamedTuple

from autoselect import rules
from autoselect.bridge import TargetVersion, target_version
from autoselect.candidates import Target, candidate_backends, legal_backends, resolve_target
from autoselect.errors import UserError
from autoselect.hardware import HostFingerprint
import autoselect.launch as package  # its lazy names load the selector / an HTTP client on first use
from autoselect.launch.pick import RULE, Pick, ServiceUnavailable, pick_of
from autoselect.launch.line import FinalCommand, LaunchLine, has_option, line_python, read_line, rewrite, unchanged
from autoselect.launch.platform import CPU, PlatformChoice, line_platform
from autoselect.model import GPU_ARCHS, DenseModel, load_profile, normalize_arch
from autoselect.rules.selection import default_backend
from autoselect.rules.serve_options import DBO_ASSERT_SOURCE
from autoselect.vllm_flags import CONFIG_UNREAD, backend_setting, redacted_env, redacted_words
from autoselect.workload import ROLE_WORKLOAD, check_role, check_workload_kind

#: What launch did with the line.
INSERT = "insert"  # the line named no backend: the pick is in it now
KEEP = "keep"  # the line names a legal backend: it stays (the user's word wins)
OVERRIDE = "override"  # --override: the pick replaces the line's backend
DEFAULT = "default"  # no evidence (or nothing to pick from): vLLM's default stays, nothing inserted
UNCHANGED = "unchanged"  # no all2all group: there is nothing to choose
ACTIONS = (INSERT, KEEP, OVERRIDE, DEFAULT, UNCHANGED)
#: Seconds the service may take for the whole exchange before the launcher answers locally.
DEFAULT_SERVER_TIMEOUT_S = 5.0
#: Version of the --decision-json document.
SCHEMA_VERSION = 1


class NothingToLaunch(UserError):
    "Nothing after `--`: there is no server line to start."


class BadLaunchOption(UserError):
    "A launch option that cannot work (a timeout, a token without a service, an unwritable decision path)."


class IllegalBackend(UserError):
    "The backend the line names is illegal for its model, GPUs, EP size or vLLM release."


class ConfigUnreadable(UserError):
    "The line's --config file cannot be read: vLLM could not start it either."


class NoEvidence(UserError):
    "--require-evidence, and nothing measured or published answers for this host and shape."


class LaunchOptions(NamedTuple):
    """What ``autoselect launch`` takes besides the line (the CLI's options, one field each; a
    NamedTuple, as every record of the launch path: see :class:`autoselect.launch.line.LaunchLine`)."""

    db_path: str | os.PathLike | None = None
    host_class: str | None = None
    gpu_arch: str | None = None
    vllm_version: str | None = None
    workload: str | None = None
    role: str | None = None
    override: bool = False
    require_evidence: bool = False
    server: str | None = None
    server_timeout_s: float = DEFAULT_SERVER_TIMEOUT_S
    token_file: str | os.PathLike | None = None
    server_model: str | None = None
    max_workspace_gib: float | None = None


class LaunchPlan(NamedTuple):
    """The decision and the command that carries it out (a NamedTuple: see :class:`LaunchOptions`)."""

    action: str  # one of ACTIONS
    backend: str | None  # the backend the final line selects, as named (with no all2all group, unused)
    given: str | None  # the backend the line names, as written
    given_origin: str  # "--all2all-backend", "VLLM_ALL2ALL_BACKEND" or "vLLM's default"
    pick: Pick | None
    why: str  # the second half of the line: evidence, confidence, source, or the reason nothing changed
    line: LaunchLine
    final: FinalCommand
    platform: PlatformChoice
    vllm_version: str
    vllm_version_source: str
    gpu_arch: str | None
    host_class: str | None
    workload: str | None
    role: str | None
    database: str | None = None  # the database state in words, when it was asked
    server: str | None = None
    server_problem: str | None = None  # why the service's answer was not used
    warnings: tuple[str, ...] | list[str] = ()
    vllm_version_warning: str | None = None  # the target release is newer than every release the rules know

    @property
    def text(self) -> str:
        """The one stderr line: what was chosen and why."""
        return f"autoselect launch: {self.why}"

    def to_dict(self) -> dict[str, Any]:
        """The ``--decision-json`` document (docs/launch.md); secrets of the line (``HF_TOKEN=...``,
        ``--api-key ...``) read ``<redacted>``."""
        args = self.line.args
        final = FinalCommand(redacted_env(self.final.env), redacted_words(self.final.argv), self.final.unset)
        return {
            "schema_version": SCHEMA_VERSION,
            "action": self.action,
            "backend": self.backend,
            "given": self.given,
            "given_origin": self.given_origin,
            "pick": self.pick.to_dict() if self.pick is not None else None,
            "reason": self.text,
            "model": args.model,
            "world_size": args.world_size,
            "data_parallel_size": args.data_parallel_size,
            "tensor_parallel_size": args.tensor_parallel_size,
            "uses_all2all": args.uses_all2all,
            "role": self.role,
            "workload": self.workload,
            "platform": self.platform.name,
            "platform_reason": self.platform.why,
            "gpu_arch": self.gpu_arch,
            "host_class": self.host_class,
            "vllm_version": self.vllm_version,
            "vllm_version_source": self.vllm_version_source,
            "vllm_version_warning": self.vllm_version_warning,
            "database": self.database,
            "server": self.server,
            "server_problem": self.server_problem,
            "inserted": self.final.inserted or {"flags": [], "env": {}, "unset": []},
            "command": final.argv,
            "env": final.env,
            "unset": list(final.unset),
            "command_line": final.shell(),
            "warnings": list(self.warnings),
        }


def _how(value: str, origin: str) -> str:
    return f"{rules.VARIABLE}={value}" if origin == rules.VARIABLE else f"--all2all-backend {value}"


def _setting_words(setting) -> str:
    return " ".join(setting.flags) if setting.flags else " ".join(f"{k}={v}" for k, v in setting.env.items())


def _check_options(argv: list[str], o: LaunchOptions) -> str | None:
    """Refuse every bad option before anything is read; the token, when a service needs one."""
    if not argv:
        raise NothingToLaunch("nothing after `--`: pass the server line to start, e.g. "
                              "`autoselect launch -- vllm serve MODEL -dp 8 --enable-expert-parallel`")
    if o.vllm_version:
        rules.parse_version(o.vllm_version)
    check_role(o.role)
    if o.workload is not None:
        check_workload_kind(o.workload)
    if o.gpu_arch is not None:
        normalize_arch(o.gpu_arch)
    if not (o.server_timeout_s > 0 and math.isfinite(o.server_timeout_s)):
        raise BadLaunchOption(f"--server-timeout {o.server_timeout_s} must be a positive number of seconds")
    if o.server is None:
        if o.token_file is not None:
            raise BadLaunchOption("--token-file is the service's token: pass it with --server URL")
        if o.server_model is not None:
            raise BadLaunchOption("--server-model names the model to the service: pass it with --server URL")
        return None
    package.check_server_url(o.server)
    return package.read_token_file(o.token_file) if o.token_file is not None else None


def _version(line: LaunchLine, o: LaunchOptions, serving: Mapping[str, str],
             warnings: list[str]) -> TargetVersion:
    """The vLLM that will serve the line, where that came from, and its warning when it is newer
    than the rules' tables (see the module docstring)."""
    args = line.args
    if o.vllm_version or args.image_version:
        image = (args.image_version, args.image) if args.image_version else None
        return target_version(o.vllm_version, problems=warnings, image=image)
    return target_version(problems=warnings, python=line_python(line, serving))


def _unexpanded(args, name: str) -> str:
    """Why a value only a shell knows (``$B``, ``${B:-x}``) is refused here, where check leaves it unjudged."""
    if name not in args.unexpanded:
        return ""
    return ("; it is a shell expansion, and launch starts the line's words as they are: no shell expands it "
            "before vLLM reads it; pass the line as the shell expands it (`autoselect launch -- ... $B` unquoted)")


def _one(archs: tuple) -> str | None:
    """The arch when there is one (None: the CPU platform, or every known arch)."""
    return archs[0] if len(archs) == 1 else None


def _judged(target: Target, backend: str, archs) -> list[tuple[str | None, Any]]:
    """``[(arch, verdict)]`` of ``backend`` on each arch (one ``None`` entry on the CPU platform)."""
    return [(arch, candidate_backends(target._replace(gpu_arch=arch), [backend])[backend])
            for arch in archs]


def _refusal(backend: str, judged, target: Target, version: str) -> str | None:
    """Why ``backend`` may not run (every arch it is illegal on), or None."""
    problems = []
    for arch, verdict in judged:
        if verdict is None:
            return (f"--all2all-backend {backend!r} is not a backend vLLM knows; vLLM {version} accepts: "
                    f"{', '.join(rules.parser_choices(version)) or 'none (it has no --all2all-backend)'}")
        if not verdict.ok:
            where = f" on {arch}" if arch else ""
            problems.append(f"{'; '.join(verdict.reasons)}{where}")
    if not problems:
        return None
    archs = [arch for arch, _ in judged]  # what is legal, judged where the refusal was
    legal = legal_backends(target._replace(gpu_arch=archs[0]) if len(archs) == 1 else target)
    tail = f"; legal here: {', '.join(legal)}" if legal else ""
    return f"{backend} cannot run {target.profile.model} here: {' / '.join(dict.fromkeys(problems))}{tail}"


def _moe_backend_binding(args, effective: rules.EffectiveBackend, version: str):
    """What ``version`` does with the line's backend next to a ``--moe-backend`` that dispatches and
    combines itself (binds ``passthrough``, or refuses to start), as check judges it; None when the
    line names no such ``--moe-backend`` (the table is read only when it names one)."""
    if not args.moe_backend:
        return None
    return rules.moe_backend_binding(args.moe_backend, rules.acted_on(effective.backend, version), version)


def _dbo_refusal(line: LaunchLine, backend: str, version: str, platform: str) -> str | None:
    """Why ``--enable-dbo`` cannot run with ``backend`` (vLLM asserts at start-up), or None."""
    args = line.args
    if not args.enable_dbo or platform == CPU or not rules.SERVE_OPTIONS["--enable-dbo"].accepted_by(version):
        return None
    supported = rules.dbo_backends(version)
    # passthrough (a --moe-backend's binding) is no flag value: it is judged as vLLM names it
    if (rules.resolve(backend) if backend in rules.ALL_FLAG_VALUES else backend) in supported:
        return None
    return (f"the line enables --enable-dbo, which vLLM {version} runs only with {', '.join(supported)}; with "
            f"{backend} it fails an assertion at start-up ({DBO_ASSERT_SOURCE}): name one of them "
            f"with --all2all-backend, or drop --enable-dbo")


def plan_launch(argv: list[str], options: LaunchOptions = LaunchOptions(), *,  # noqa: B008 (immutable NamedTuple)
                environ: Mapping[str, str] | None = None,
                probe: Callable[[], HostFingerprint | None] | None = None) -> LaunchPlan:
    """Decide what ``autoselect launch`` runs for the server line ``argv`` (module docstring).

    :param argv: the line after ``--``: shell words, or one pasted string (read as ``check`` reads it).
    :param options: the launch options.
    :param environ: the environment the line starts in (default ``os.environ``).
    :param probe: this machine's fingerprint, for the platform and the local GPUs (default
        :func:`autoselect.launch.platform.local_host`: NVML's where an NVIDIA driver is loaded).
    :raises UserError: bad input, an illegal backend, no evidence under ``--require-evidence``.
    """
    environ = dict(os.environ if environ is None else environ)
    token = _check_options(list(argv), options)
    line = read_line(list(argv))
    args = line.args
    unread = [m for _, code, m in args.notes if code == CONFIG_UNREAD]
    if unread:
        raise ConfigUnreadable(f"{unread[0]}; vLLM could not start the line either")
    serving = args.serving_environ(environ)
    platform = line_platform(serving, gpu_arch=options.gpu_arch, host_class=options.host_class, probe=probe)
    warnings: list[str] = []
    if token is not None and package.plain_http_beyond_loopback(options.server):
        warnings.append(f"the bearer token goes to {options.server} in clear text (plain http beyond this machine); "
                        f"put a TLS proxy in front of the service and pass its https:// URL")
    resolved = _version(line, options, serving, warnings)
    version, version_source = resolved
    effective = rules.effective_backend(version, args.all2all_backend, serving.get(rules.VARIABLE))
    if effective.variable_refused:
        raise IllegalBackend(f"{rules.VARIABLE}={effective.variable}: {effective.variable_refused}"
                             f"{_unexpanded(args, rules.VARIABLE)} (nothing was started)")
    if args.all2all_backend and not effective.era.flag:
        raise IllegalBackend(f"vLLM {version} has no --all2all-backend (it arrived in {rules.FLAG_SINCE}): vllm serve "
                             f"would exit with 'unrecognized arguments'; set {rules.VARIABLE}={args.all2all_backend} "
                             f"instead, or pass the vLLM that will run with --vllm-version (nothing was started)")
    given = effective.backend if effective.origin != rules.ORIGIN_DEFAULT else None
    if given is not None and effective.origin == rules.ORIGIN_FLAG and not rules.value_known_to(given, version):
        choices = ", ".join(rules.parser_choices(version))
        raise IllegalBackend(f"vLLM {version} does not accept --all2all-backend {given}: vllm serve would exit with "
                             f"'invalid choice'; it accepts: {choices}{_unexpanded(args, '--all2all-backend')} "
                             f"(nothing was started)")
    role = options.role or args.role
    workload = options.workload or ROLE_WORKLOAD.get(role or "both", "mixed")
    gpu_arch = normalize_arch(options.gpu_arch) if options.gpu_arch else None
    plan = dict(line=line, platform=platform, vllm_version=version, vllm_version_source=version_source,
                vllm_version_warning=resolved.warning, gpu_arch=gpu_arch, host_class=options.host_class,
                workload=workload, role=role, given=given, given_origin=effective.origin, warnings=warnings,
                server=options.server)

    def done(action, backend, why, final=None, pick=None, **extra):
        runs = backend or default_backend(version)
        refusal = _dbo_refusal(line, runs, version, platform.name)
        if refusal:  # vLLM asserts at start-up, whatever else the line says
            raise IllegalBackend(f"{refusal} (nothing was started)")
        plan.update(extra)
        plan["warnings"] = list(dict.fromkeys(plan["warnings"]))
        return LaunchPlan(action=action, backend=backend, pick=pick, why=why, final=final or unchanged(line), **plan)

    binding = _moe_backend_binding(args, effective, version)
    if binding is not None and binding.refused:
        raise IllegalBackend(f"{binding.refused}: drop {_how(given or effective.backend, effective.origin)} "
                             f"(nothing was started)")
    if not args.uses_all2all:
        why = ("no --enable-expert-parallel" if not args.enable_expert_parallel
               else f"--data-parallel-size {args.data_parallel_size}")
        return done(UNCHANGED, binding.backend if binding else effective.backend, f"line unchanged: {why}, so vLLM builds no all2all group and no "
                                                  f"backend matters (EP needs -ep and -dp > 1)")
    if binding is not None:  # vLLM binds passthrough: no all2all backend runs, none to choose or insert
        return done(UNCHANGED, binding.backend,
                    f"line unchanged: --moe-backend {binding.row.moe_backend} dispatches and combines itself, so vLLM "
                    f"{version} binds all2all_backend={binding.backend} and runs no all2all backend "
                    f"({binding.row.source})")
    try:
        profile = load_profile(args.model)
    except DenseModel as e:
        return done(UNCHANGED, effective.backend, f"line unchanged: {e}")
    cpu = platform.name == CPU

    @functools.cache
    def archs() -> tuple:
        """The GPU archs the line runs on (one ``None`` on the CPU platform; every known arch where
        nothing says which). A host class's is looked up only when no answer brings it."""
        if cpu:
            return (None,)
        if gpu_arch:
            return (gpu_arch,)
        if options.host_class:
            arch = package.class_arch(options.host_class, package.database_state(options.db_path))
            return (arch,) if arch else GPU_ARCHS
        return (normalize_arch(platform.host.gpu_arch),) if platform.host and platform.host.gpu_arch else GPU_ARCHS

    # A pick's answer names the arch of its host class (the newest machine's, which class_arch would
    # read): on the pick path the class's arch is not looked up first, the pick is judged on the answer's.
    deferred = options.host_class is not None and not (cpu or gpu_arch)
    plan["gpu_arch"] = None if deferred else _one(archs())
    target = resolve_target(profile, world_size=args.world_size, gpu_arch=plan["gpu_arch"], vllm_version=version,
                            vllm_version_source=version_source, max_num_batched_tokens=args.max_num_batched_tokens,
                            environ=serving, tensor_parallel_size=args.tensor_parallel_size,
                            redundant_experts=args.redundant_experts, platform=CPU if cpu else None,
                            require_flag=False)
    refusal = None
    if given is not None:
        plan["gpu_arch"] = _one(archs())
        refusal = _refusal(given, _judged(target, given, archs()), target, version) or \
            _dbo_refusal(line, given, version, platform.name)
        if refusal and not options.override:
            raise IllegalBackend(refusal + " (nothing was started)")
        if not options.override:
            where = "vLLM's CPU platform" if cpu else (plan["gpu_arch"] or "sm90 and sm100")
            return done(KEEP, given, f"the line's {_how(given, effective.origin)} kept (legal for {profile.model} on "
                                     f"{where} at EP {args.world_size}, vLLM {version}); --override lets autoselect "
                                     f"choose")

    pick, extra = _pick(line, options, target, platform, version, workload, token, archs)
    no_pick = extra.pop("no_pick", None)
    plan.update(extra)
    if pick is not None and pick.confidence not in (None, "none"):
        # The selector weighs neither the line's environment nor its EPLB experts: its pick is judged
        # again for this very line, and one the rules refuse here is not used.
        judged_on = _answer_archs(pick, archs)
        if deferred and plan["gpu_arch"] is None:
            plan["gpu_arch"] = _one(judged_on)
        illegal = _refusal(pick.backend, _judged(target, pick.backend, judged_on), target, version)
        if illegal:
            pick, no_pick = None, f"the selector's pick is illegal for this line: {illegal}"
    unused = (f" (the service {options.server} was not used: {plan['server_problem']})"
              if plan.get("server_problem") else "")
    if pick is None or pick.confidence == "none":
        if pick is None:
            why, bench = no_pick, None
        else:
            why = (f"no evidence: {pick.reasons[0] if pick.reasons else 'nothing measured or published'} "
                   f"({pick.source})")
            bench = pick.bench_command
        why += unused
        if refusal:
            raise IllegalBackend(f"{refusal}; --override found nothing to replace it with ({why}) (nothing was "
                                 f"started)")
        if options.require_evidence:
            raise NoEvidence(f"--require-evidence: {why}" + (f"; settle it with: {bench}" if bench else "")
                             + " (nothing was started)")
        settle = f"; to settle it: {bench}" if bench else ""
        if given is not None:
            return done(KEEP, given, f"the line's {_how(given, effective.origin)} kept: --override has nothing to "
                                     f"replace it with ({why}){settle}", pick=pick)
        default = default_backend(version)
        plan["gpu_arch"] = plan["gpu_arch"] or _one(archs())
        illegal = _refusal(default, _judged(target, default, archs()), target, version)
        if illegal:  # what the line runs as it stands is illegal too
            raise IllegalBackend(f"the line runs vLLM's default, and {illegal}; nothing better is known ({why}) "
                                 f"(nothing was started)")
        return done(DEFAULT, default, f"vLLM's default ({default}) kept, nothing inserted: {why}{settle}", pick=pick)
    try:
        setting = backend_setting(pick.backend, version, serving)
    except rules.BackendUnknownToVersion as e:  # a release before the flag without a variable value for it
        if given is not None:
            return done(KEEP, given, f"the line's {_how(given, effective.origin)} kept: {e}", pick=pick)
        default = default_backend(version)
        return done(DEFAULT, default, f"vLLM's default ({default}) kept, nothing inserted: {e}", pick=pick)
    flags, env = _answer_extras(line, pick, serving, plan["warnings"])
    final = rewrite(line, setting, flags, env)
    subject = (f"{_setting_words(setting)} replaces the line's {_how(given, effective.origin)} (--override)" if given
               else f"{_setting_words(setting)} inserted")
    if pick.confidence is None:  # a platform rule, not the selector's call
        why = f"{subject}: {pick.source}"
    elif pick.evidence == RULE:  # the selector's only legal candidate
        why = (f"{subject} for {profile.model} at EP {args.world_size} on vLLM {version}: the only backend the rules "
               f"allow here (nothing to compare), confidence {pick.confidence}; {pick.source}{unused}")
    else:
        why = (f"{subject} for {profile.model} at EP {args.world_size} on vLLM {version}: {pick.evidence} evidence, "
               f"confidence {pick.confidence}, from {pick.source}{unused}")
    return done(OVERRIDE if given else INSERT, pick.backend, why, final=final, pick=pick)


def _pick(line: LaunchLine, o: LaunchOptions, target: Target, platform: PlatformChoice, version: str,
          workload: str, token: str | None, archs: Callable[[], tuple]) -> tuple[Pick | None, dict]:
    """The pick and what the plan records about where it came from (``no_pick``: why there is none).

    ``archs`` is read on first call (``plan_launch``'s): the GPU archs the line runs on."""
    if platform.name == CPU:
        legal = legal_backends(target, sorted(rules.PLATFORMS[CPU].backends))
        if not legal:
            raise IllegalBackend(f"no all2all backend runs {target.profile.model} on vLLM's CPU platform at EP "
                                 f"{target.world_size} (nothing was started)")
        return Pick(legal[0], None, RULE, f"the only all2all manager vLLM's CPU platform builds ({platform.why}); "
                                          f"no database read"), {}
    if not rules.version_in(version, rules.FLAG_SINCE, None):
        return None, {"no_pick": f"vLLM {version} predates --all2all-backend ({rules.FLAG_SINCE}), and autoselect "
                                 f"picks for releases that have it"}
    args = line.args
    kw = dict(dp=args.data_parallel_size, tp=args.tensor_parallel_size, host_class=o.host_class,
              gpu_arch=o.gpu_arch, vllm_version=version, workload=workload,
              concurrency=args.max_num_seqs * args.data_parallel_size if args.max_num_seqs else None,
              max_num_batched_tokens=args.max_num_batched_tokens, max_workspace_gib=o.max_workspace_gib)
    extra: dict[str, Any] = {}
    if o.server is not None:
        try:
            return _service_pick(line, o, platform, kw, token, target, archs), {"database": None}
        except ServiceUnavailable as e:
            extra["server_problem"] = str(e)
    local = package.local_answer(args.model, o.db_path, profile=target.profile,
                                 this_host=platform.host if o.host_class is None else None, **kw)
    db, answer = local.database, local.answer
    extra["database"] = db.text
    if answer is None:
        return None, {**extra, "no_pick": f"host class {o.host_class} is unknown without a database ({db.text}): "
                                          f"{local.unknown}"}
    pick = pick_of(answer, package.local_source(answer, db))
    return pick, {**extra, "gpu_arch": answer.get("gpu_arch"),
                  "host_class": (answer.get("data_used") or {}).get("host_class") or o.host_class}


def _answer_archs(pick: Pick, archs: Callable[[], tuple]) -> tuple:
    """The archs a pick is judged on: the answer's own GPU arch, else the line's."""
    arch = (pick.answer or {}).get("gpu_arch")
    return (arch,) if arch else tuple(archs())


def _service_pick(line: LaunchLine, o: LaunchOptions, platform: PlatformChoice, kw: dict, token: str | None,
                  target: Target, archs: Callable[[], tuple]) -> Pick:
    """The service's pick, judged again here (:class:`ServiceUnavailable` when it cannot be used)."""
    model = o.server_model or (os.path.basename(os.path.normpath(line.args.model))
                               if os.path.isdir(line.args.model) else line.args.model)
    host_class = o.host_class or (platform.host.host_class if platform.host is not None else None)
    params = {"model": model, **{k: v for k, v in kw.items() if k != "host_class"}, "host_class": host_class}
    answer = package.ask_service(o.server, params, token=token, timeout_s=o.server_timeout_s)
    pick = pick_of(answer, f"the service {o.server} ({(answer.get('data_used') or {}).get('host_class') or 'its data'})")
    refusal = _refusal(pick.backend, _judged(target, pick.backend, _answer_archs(pick, archs)), target,
                       target.vllm_version)
    if refusal:
        raise ServiceUnavailable(f"its pick is illegal here: {refusal}")
    return pick


def _answer_extras(line: LaunchLine, pick: Pick, serving: Mapping[str, str],
                   warnings: list[str]) -> tuple[list[str], dict[str, str]]:
    """The answer's flags and tuned variables the line does not set itself (the user's win, said)."""
    flags: list[str] = []
    for option, *values in pick.flags:
        if has_option(line.args, option):
            warnings.append(f"the line's own {option} is kept; the answer for {pick.backend} suggests "
                            f"{' '.join([option, *values])}")
        else:
            flags += [option, *values]
    env: dict[str, str] = {}
    for name, value in pick.env.items():
        if name in serving and serving[name] != value:
            warnings.append(f"the line's own {name}={serving[name]} is kept; the tuned value for {pick.backend} is "
                            f"{value}")
        elif name not in serving:
            env[name] = value
    return flags, env
