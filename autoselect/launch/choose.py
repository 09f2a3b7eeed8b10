""":func:`plan_launch`: from the user's server line to the line that runs, and why.

The decision, in order (every refusal is a :class:`autoselect.errors.UserError`: one ``Error:``
line, exit status 2, nothing written, nothing started):

1. Read the line (:mod:`autoselect.launch.line`): a vLLM server behind the programs launch knows
   (:func:`autoselect.vllm_flags.start_problem`, the one rule of what launch starts), its
   ``--config`` readable; the platform it runs on here (:mod:`autoselect.launch.platform`).
2. Judge it with ``check``'s own judge (:func:`autoselect.check.judge_line`): the release (its
   ``--vllm-version``, image tag, the line's own Python, else as every command resolves it), the
   backend it runs, every finding, on the GPU arch it runs on (``--gpu-arch``, the local GPUs, a
   host class's; vLLM's CPU platform has none). Any error finding refuses the line, worded as
   check words it; ``--override`` lets a pick replace a line's backend first, and the line the
   pick makes is judged again. Every warning finding is a ``Warning:`` line.
3. No all2all group (no ``--enable-expert-parallel``, ``-dp 1``, a dense model), or a
   ``--moe-backend`` that dispatches and combines itself (vLLM binds ``passthrough``): the line is
   started unchanged. A backend the line names is kept (the user's word wins) unless ``--override``.
4. Otherwise the pick: on the CPU platform the one backend its communicator builds; on GPUs the
   selector's answer, from ``--server`` (the fleet's ``autoselect serve``) or, when it cannot
   answer, the local database, else the reference, else none (:mod:`autoselect.launch.service`,
   :mod:`autoselect.launch.local`). An answer is untrusted input: its flags and variables pass
   :mod:`autoselect.vllm_flags.trusted`'s allow-list, and the line it makes is judged as in 2, on
   the arch ``--gpu-arch`` or this machine names (a service's own claim never decides): a pick
   that line refuses is not used. The database is read once; on a GPU node the platform probe's
   fingerprint is the machine the selector answers for (NVML is walked once). An answer with
   confidence ``none`` keeps vLLM's default and names the ``autoselect bench`` command that would
   settle it (``--require-evidence``: an error).
5. The pick goes into the line the way the release reads it
   (:func:`autoselect.vllm_flags.backend_setting`), with the answer's flags and tuned variables
   where the line does not set them already (the user's values win).
"""

from __future__ import annotations

import functools
import math
import os
from typing import Any, Callable, Mapping, NamedTuple

from autoselect import rules
from autoselect.bridge import TargetVersion
from autoselect.check import CheckReport, LineContext, judge_line
from autoselect.errors import UserError
from autoselect.hardware import HostFingerprint
from autoselect.launch.line import FinalCommand, LaunchLine, has_option, line_python, read_line, rewrite, unchanged
from autoselect.launch.pick import RULE, Pick, ServiceUnavailable, answer_host_class, pick_of
from autoselect.launch.platform import CPU, PlatformChoice, line_platform
from autoselect.lazy import lazy_module
from autoselect.model import GPU_ARCHS, normalize_arch
from autoselect.rules.selection import default_backend
from autoselect.redact import redacted_env, redacted_text, redacted_words
from autoselect.vllm_flags import CONFIG_UNREAD, backend_setting
from autoselect.workload import ROLE_WORKLOAD, check_role, check_workload_kind

#: The siblings only a pick needs, loaded on first use: the selector's side and the service's HTTP
#: client (a kept backend or the CPU platform never imports them).
_local = lazy_module("autoselect.launch.local")
_service = lazy_module("autoselect.launch.service")

#: What launch did with the line.
INSERT = "insert"  # the line named no backend: the pick is in it now
KEEP = "keep"  # the line names a legal backend: it stays (the user's word wins)
OVERRIDE = "override"  # --override: the pick replaces the line's backend
DEFAULT = "default"  # no evidence (or nothing to pick from): vLLM's default stays, nothing inserted
UNCHANGED = "unchanged"  # no all2all group: there is nothing to choose
ACTIONS = (INSERT, KEEP, OVERRIDE, DEFAULT, UNCHANGED)
#: Seconds the service may take for the whole exchange before the launcher answers locally.
DEFAULT_SERVER_TIMEOUT_S = 5.0
#: The longest a launch waits for the service: it stands between a container's start and vLLM's.
MAX_SERVER_TIMEOUT_S = 600.0
#: Version of the --decision-json document.
SCHEMA_VERSION = 1


class NothingToLaunch(UserError):
    "Nothing after `--`: there is no server line to start."


class BadLaunchOption(UserError):
    "A launch option that cannot work (a timeout, a token without a service, an unwritable decision path)."


class LineRefused(UserError):
    "check finds an error in the line launch would start: vLLM would not start it, or its backend is illegal."


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
    dry_run: bool = False  # run nothing of the line (its Python included): the decision is only printed


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
    findings: tuple = ()  # check's findings on the line that runs (autoselect.check.Finding)
    options: LaunchOptions = LaunchOptions()  # what the plan was asked with (run_plan's output check reads it)

    @property
    def text(self) -> str:
        """The one stderr line: what was chosen and why."""
        return f"autoselect launch: {self.why}"

    def to_dict(self) -> dict[str, Any]:
        """The ``--decision-json`` document (docs/launch.md); secrets of the line (``HF_TOKEN=...``,
        ``--api-key ...``, URL credentials, secret keys inside JSON flags) read ``<redacted>``
        (:mod:`autoselect.redact`, in every text it holds)."""
        args = self.line.args
        final = FinalCommand(redacted_env(self.final.env), redacted_words(self.final.argv), self.final.unset)
        return {
            "schema_version": SCHEMA_VERSION,
            "action": self.action,
            "backend": self.backend,
            "given": self.given,
            "given_origin": self.given_origin,
            "pick": self.pick.to_dict() if self.pick is not None else None,
            "reason": redacted_text(self.text),
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
            "warnings": [redacted_text(w) for w in self.warnings],
            "findings": [{**f.to_dict(), "message": redacted_text(f.message)} for f in self.findings],
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
    if not (0 < o.server_timeout_s <= MAX_SERVER_TIMEOUT_S and math.isfinite(o.server_timeout_s)):
        raise BadLaunchOption(f"--server-timeout {o.server_timeout_s:g} must be a number of seconds above 0 and at "
                              f"most {MAX_SERVER_TIMEOUT_S:g}")
    if o.server is None:
        if o.token_file is not None:
            raise BadLaunchOption("--token-file is the service's token: pass it with --server URL")
        if o.server_model is not None:
            raise BadLaunchOption("--server-model names the model to the service: pass it with --server URL")
        return None
    _service.check_server_url(o.server)
    return _service.read_token_file(o.token_file) if o.token_file is not None else None


def refusal(report: CheckReport, lead: str = "") -> LineRefused:
    """The one ``Error:`` line for a line check finds errors in: the first, worded as check words it."""
    errors = report.errors
    first = errors[0]
    where = f" [{first.gpu_arch}]" if first.gpu_arch else ""
    more = (f"; {len(errors) - 1} more error(s) (`autoselect check` lists every finding)" if len(errors) > 1 else "")
    return LineRefused(f"{lead}{first.message}{where}{more} (nothing was started)")


def warning_lines(report: CheckReport) -> list[str]:
    """check's warning findings as launch's ``Warning:`` lines: one per message, its archs said."""
    archs: dict[str, list[str]] = {}
    for f in report.warnings:
        archs.setdefault(f.message, []).extend([f.gpu_arch] if f.gpu_arch else [])
    return [message + (f" [{', '.join(dict.fromkeys(a))}]" if a else "") for message, a in archs.items()]


class _Planner:
    """One launch decision in named steps (:func:`plan_launch` runs them in order): the line, what
    judged it, and what the plan has gathered so far."""

    def __init__(self, line: LaunchLine, o: LaunchOptions, platform: PlatformChoice, environ: dict, serving: dict,
                 token: str | None):
        self.line, self.o, self.platform = line, o, platform
        self.environ, self.serving, self.token = environ, serving, token
        self.cpu = platform.name == CPU
        self.gpu_arch = normalize_arch(o.gpu_arch) if o.gpu_arch else None
        self.warnings: list[str] = []
        self.extra: dict[str, Any] = {"server": o.server}  # where the pick came from (LaunchPlan fields)
        self.deferred = False  # a host class's arch comes with the local answer, not looked up first
        self.report: CheckReport | None = None  # the user's line, judged
        self.given: str | None = None  # the backend the line names

    # ---- judging: check's judge on the line, on the archs it runs on ----------------------------

    def judge(self, words, archs: tuple[tuple, str]) -> CheckReport:
        """``check``'s judge on ``words`` (the user's line or the one a pick makes)."""
        first = self.report is None
        o, args = self.o, self.line.args
        python = (line_python(self.line, self.serving) if first and not (o.vllm_version or args.image_version)
                  else None)
        target = None if first else (self.report.vllm_version, self.report.vllm_version_source)
        context = LineContext(archs[0], archs[1], vllm_version=o.vllm_version, environ=self.environ, role=o.role,
                              platform=CPU if self.cpu else None, python=python, literal=True, run_python=not o.dry_run,
                              target=None if target is None else TargetVersion(*target),
                              profile=None if first else self.report.profile)
        return judge_line(words, context)

    @functools.cached_property
    def class_archs(self) -> tuple[tuple, str]:
        """The archs of ``--host-class``: its reference system's, or the local database's newest machine's
        (every known arch where neither says)."""
        host_class = self.o.host_class
        arch = _local.class_arch(host_class, _local.database_state(self.o.db_path))
        return ((arch,), f"host class {host_class}") if arch else (GPU_ARCHS, f"host class {host_class} (arch unknown "
                                                                              f"here: every arch)")

    def line_archs(self) -> tuple[tuple, str]:
        """The archs the user's line is judged on: none on vLLM's CPU platform; ``--gpu-arch``; a host
        class's (looked up only for a backend the line names: a pick brings its class's arch); the
        local GPUs'; else every known arch."""
        if self.cpu:
            return (None,), "vLLM's CPU platform"
        if self.gpu_arch:
            return (self.gpu_arch,), "--gpu-arch"
        if self.o.host_class:
            if self.line.args.all2all_backend is not None or rules.VARIABLE in self.serving:
                return self.class_archs
            self.deferred = True
            return GPU_ARCHS, f"host class {self.o.host_class} (its arch comes with the answer)"
        host = self.platform.host
        if host is not None and host.gpu_arch:
            return (normalize_arch(host.gpu_arch),), "local GPUs"
        return GPU_ARCHS, "no GPU arch known: every arch"

    def pick_archs(self, pick: Pick, local: bool) -> tuple[tuple, str]:
        """The archs a pick's line is judged on: the user's line's, unless a host class's arch was left to
        the answer; then a local answer's own (this machine's selector read the class), never a
        service's claim (its class is looked up here, else every arch)."""
        if not self.deferred:
            return tuple(self.report.gpu_archs), self.report.gpu_arch_source
        arch = (pick.answer or {}).get("gpu_arch") if local else None
        if isinstance(arch, str) and arch in GPU_ARCHS:
            return (arch,), f"host class {self.o.host_class}"
        return self.class_archs

    # ---- the decision ----------------------------------------------------------------------------

    def plan(self) -> LaunchPlan:
        """Judge the line, then start it unchanged, keep its backend, or put the pick in."""
        self.report = report = self.judge(self.line.command, self.line_archs())
        self.warnings += report.version_problems
        effective = report.effective
        self.given = effective.backend if effective.origin != rules.ORIGIN_DEFAULT else None
        args = report.args
        # only a pick replacing the line's own backend (--override) may mend an error; its line is judged again
        replaceable = (self.o.override and self.given is not None and args.uses_all2all
                       and report.moe_binding is None and report.profile is not None)
        if report.errors and not replaceable:
            raise refusal(report)
        if not args.uses_all2all:
            why = ("no --enable-expert-parallel" if not args.enable_expert_parallel
                   else f"--data-parallel-size {args.data_parallel_size}")
            return self.done(UNCHANGED, report.backend, f"line unchanged: {why}, so vLLM builds no all2all group "
                                                        f"and no backend matters (EP needs -ep and -dp > 1)", report)
        binding = report.moe_binding
        if binding is not None:  # vLLM binds passthrough: no all2all backend runs, none to choose or insert
            return self.done(UNCHANGED, binding.backend,
                             f"line unchanged: --moe-backend {binding.row.moe_backend} dispatches and combines "
                             f"itself, so vLLM {report.vllm_version} binds all2all_backend={binding.backend} and runs "
                             f"no all2all backend ({binding.row.source})", report)
        if report.profile is None:
            dense = next(f.message for f in report.findings if f.code == "dense-model")
            return self.done(UNCHANGED, effective.backend, f"line unchanged: {dense}", report)
        if self.given is not None and not self.o.override:
            where = "vLLM's CPU platform" if self.cpu else " and ".join(report.gpu_archs)
            return self.done(KEEP, self.given, f"the line's {_how(self.given, effective.origin)} kept (legal for "
                                               f"{args.model} on {where} at EP {args.world_size}, vLLM "
                                               f"{report.vllm_version}); --override lets autoselect choose", report)
        return self.choose()

    def choose(self) -> LaunchPlan:
        """The pick from the platform's rule, the service or this machine; its line if check accepts it."""
        report, o = self.report, self.o
        if self.cpu:
            return self.cpu_rule()
        version = report.vllm_version
        if not rules.version_in(version, rules.FLAG_SINCE, None):
            return self.without_pick(None, f"vLLM {version} predates --all2all-backend ({rules.FLAG_SINCE}), and "
                                           f"autoselect picks for releases that have it")
        if o.server is not None:
            try:
                pick = self.service_pick()
            except ServiceUnavailable as e:
                self.extra["server_problem"] = str(e)
            else:
                planned, why = self.with_pick(pick, local=False)
                if planned is not None:
                    return planned
                self.extra["server_problem"] = f"its pick is illegal here: {why}"
        pick, no_pick = self.local_pick()
        if pick is not None and pick.confidence != "none":
            planned, why = self.with_pick(pick, local=True)
            if planned is not None:
                return planned
            pick, no_pick = None, f"the selector's pick is illegal for this line: {why}"
        return self.without_pick(pick, no_pick)

    def cpu_rule(self) -> LaunchPlan:
        """vLLM's CPU platform: the one backend its communicator builds, no selector, no database."""
        report = self.report
        legal = [b for b in sorted(rules.PLATFORMS[CPU].backends)
                 if rules.legal(b, report.profile, None, report.args.world_size, report.vllm_version,
                                redundant_experts=report.redundant_experts, platform=CPU).ok]
        if not legal:
            raise LineRefused(f"no all2all backend runs {report.args.model} on vLLM's CPU platform at EP "
                              f"{report.args.world_size} (nothing was started)")
        pick = Pick(legal[0], None, RULE, f"the only all2all manager vLLM's CPU platform builds "
                                          f"({self.platform.why}); no database read")
        planned, why = self.with_pick(pick, local=True)
        if planned is None:
            raise LineRefused(f"{why} (nothing was started)")
        return planned

    def service_pick(self) -> Pick:
        """The service's pick (:class:`ServiceUnavailable` when it cannot be used)."""
        o, args = self.o, self.line.args
        model = o.server_model or (os.path.basename(os.path.normpath(args.model)) if os.path.isdir(args.model)
                                   else args.model)
        host_class = o.host_class or (self.platform.host.host_class if self.platform.host is not None else None)
        params = {"model": model, **self.query(), "host_class": host_class}
        answer = _service.ask_service(o.server, params, token=self.token, timeout_s=o.server_timeout_s)
        pick = pick_of(answer, "", version=self.report.vllm_version, deployment=self.deployment())
        return pick._replace(source=f"the service {o.server} ({answer_host_class(answer) or 'its data'})")

    def local_pick(self) -> tuple[Pick | None, str | None]:
        """This machine's pick: the database read-only, else the reference (``None`` and why: none)."""
        o, report = self.o, self.report
        local = _local.local_answer(report.args.model, o.db_path, profile=report.profile,
                                    this_host=self.platform.host if o.host_class is None else None,
                                    host_class=o.host_class, **self.query())
        db, answer = local.database, local.answer
        self.extra["database"] = db.text
        if answer is None:
            return None, f"host class {o.host_class} is unknown without a database ({db.text}): {local.unknown}"
        try:
            pick = pick_of(answer, _local.local_source(answer, db), version=report.vllm_version,
                           deployment=self.deployment())
        except ServiceUnavailable as e:  # a tuned row of the database outside the allow-list
            return None, f"this machine's answer is not used: {e}"
        self.extra["host_class"] = answer_host_class(answer) or o.host_class
        return pick, None

    def deployment(self) -> dict[str, int]:
        args = self.line.args
        return {"tensor_parallel_size": args.tensor_parallel_size, "data_parallel_size": args.data_parallel_size}

    def query(self) -> dict[str, Any]:
        """What the selector is asked besides the model and host class: the line's deployment."""
        args, o = self.line.args, self.o
        workload = o.workload or ROLE_WORKLOAD.get(self.report.role or "both", "mixed")
        return dict(dp=args.data_parallel_size, tp=args.tensor_parallel_size, gpu_arch=o.gpu_arch,
                    vllm_version=self.report.vllm_version, workload=workload,
                    concurrency=args.max_num_seqs * args.data_parallel_size if args.max_num_seqs else None,
                    max_num_batched_tokens=args.max_num_batched_tokens, max_workspace_gib=o.max_workspace_gib)

    def with_pick(self, pick: Pick, *, local: bool) -> tuple[LaunchPlan | None, str]:
        """The plan that starts the line the pick makes, when check finds no error in it (else None and why)."""
        report, given = self.report, self.given
        try:
            setting = backend_setting(pick.backend, report.vllm_version, self.serving)
        except rules.BackendUnknownToVersion as e:  # a release before the flag without a variable value for it
            return None, str(e)
        notes: list[str] = []
        flags, env = _answer_extras(self.line, pick, self.serving, notes)
        final = rewrite(self.line, setting, flags, env)
        judged = self.judge(final.words(), self.pick_archs(pick, local))
        if judged.errors:
            return None, refusal(judged).args[0].removesuffix(" (nothing was started)")
        self.warnings += notes
        args = report.args
        subject = (f"{_setting_words(setting)} replaces the line's {_how(given, report.effective.origin)} "
                   f"(--override)" if given else f"{_setting_words(setting)} inserted")
        unused = self.unused()
        if pick.confidence is None:  # a platform rule, not the selector's call
            why = f"{subject}: {pick.source}"
        else:  # the selector's decision in its own words (autoselect.selector.wording), then what it rests on
            why = (f"{subject} for {args.model} at EP {args.world_size} on vLLM {report.vllm_version}: "
                   + (f"{pick.decision}; " if pick.decision else "")
                   + f"{pick.evidence} evidence, confidence {pick.confidence}, from {pick.source}{unused}")
        return self.done(OVERRIDE if given else INSERT, pick.backend, why, judged, final=final, pick=pick), ""

    def unused(self) -> str:
        problem = self.extra.get("server_problem")
        return f" (the service {self.o.server} was not used: {problem})" if problem else ""

    def without_pick(self, pick: Pick | None, no_pick: str | None) -> LaunchPlan:
        """No usable pick: the line's own backend (``--override`` found nothing), else vLLM's default."""
        report, given = self.report, self.given
        if pick is None:
            why, bench = no_pick or "no pick", None
        else:
            why = (f"no evidence: {pick.reasons[0] if pick.reasons else 'nothing measured or published'} "
                   f"({pick.source})")
            bench = pick.bench_command
        why += self.unused()
        if given is not None and report.errors:
            raise refusal(report, f"--override found nothing to replace the line's backend with ({why}): ")
        if self.o.require_evidence:
            raise NoEvidence(f"--require-evidence: {why}" + (f"; settle it with: {bench}" if bench else "")
                             + " (nothing was started)")
        settle = f"; to settle it: {bench}" if bench else ""
        if given is not None:
            return self.done(KEEP, given, f"the line's {_how(given, report.effective.origin)} kept: --override has "
                                          f"nothing to replace it with ({why}){settle}", report, pick=pick)
        if self.deferred:  # what runs is the line as it stands: judged on the class's own arch
            judged = self.judge(self.line.command, self.class_archs)
            if judged.errors:
                raise refusal(judged, "the line runs vLLM's default, and ")
            report = self.report = judged
        default = default_backend(report.vllm_version)
        return self.done(DEFAULT, default, f"vLLM's default ({default}) kept, nothing inserted: {why}{settle}", report,
                         pick=pick)

    def done(self, action: str, backend: str | None, why: str, judged: CheckReport, *, final: FinalCommand | None = None,
             pick: Pick | None = None) -> LaunchPlan:
        """The plan: what runs, why, and check's warnings on the line that runs."""
        report, o = self.report, self.o
        archs = [a for a in judged.gpu_archs if a]
        warnings = [*self.warnings, *warning_lines(judged)]
        return LaunchPlan(action=action, backend=backend, given=self.given, given_origin=report.effective.origin,
                          pick=pick, why=why, line=self.line, final=final or unchanged(self.line),
                          platform=self.platform, vllm_version=report.vllm_version,
                          vllm_version_source=report.vllm_version_source, gpu_arch=archs[0] if len(archs) == 1 else None,
                          host_class=self.extra.get("host_class") or o.host_class,
                          workload=o.workload or ROLE_WORKLOAD.get(report.role or "both", "mixed"), role=report.role,
                          database=self.extra.get("database"), server=o.server,
                          server_problem=self.extra.get("server_problem"), warnings=list(dict.fromkeys(warnings)),
                          vllm_version_warning=report.vllm_version_warning, findings=tuple(judged.findings),
                          options=o)


def plan_launch(argv: list[str], options: LaunchOptions = LaunchOptions(), *,  # noqa: B008 (immutable NamedTuple)
                environ: Mapping[str, str] | None = None,
                probe: Callable[[], HostFingerprint | None] | None = None) -> LaunchPlan:
    """Decide what ``autoselect launch`` runs for the server line ``argv`` (module docstring).

    :param argv: the line after ``--``: shell words, or one pasted string (read as ``check`` reads it).
    :param options: the launch options.
    :param environ: the environment the line starts in (default ``os.environ``).
    :param probe: this machine's fingerprint, for the platform and the local GPUs (default
        :func:`autoselect.launch.platform.local_host`: NVML's where an NVIDIA driver is loaded).
    :raises UserError: bad input, a line check finds an error in, no evidence under ``--require-evidence``.
    """
    environ = dict(os.environ if environ is None else environ)
    token = _check_options(list(argv), options)
    line = read_line(list(argv))
    unread = [m for _, code, m in line.args.notes if code == CONFIG_UNREAD]
    if unread:
        raise ConfigUnreadable(f"{unread[0]}; vLLM could not start the line either")
    serving = line.args.serving_environ(environ)
    platform = line_platform(serving, gpu_arch=options.gpu_arch, host_class=options.host_class, probe=probe)
    planner = _Planner(line, options, platform, environ, serving, token)
    if token is not None and _service.plain_http_beyond_loopback(options.server):
        planner.warnings.append(f"the bearer token goes to {options.server} in clear text (plain http beyond this "
                                f"machine); put a TLS proxy in front of the service and pass its https:// URL")
    return planner.plan()


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
