"""The pipeline: target -> evidence -> judged candidates -> decision -> confidence -> caveats -> flags.

:func:`recommend` runs it over an open store (or given rows); :func:`recommend_for` is what the
``recommend`` / ``explain`` commands and the HTTP service call: it validates every flag, opens the
store, resolves the host, runs :func:`recommend`, and adds the stored end-to-end results and
(``validate``) vLLM's verdict on the flags, so one call returns the whole answer.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any, Callable, Sequence

from autoselect import reference, rules
from autoselect.bridge import target_version
from autoselect.candidates import candidate_backends
from autoselect.errors import UnknownHostClass, UserError
from autoselect.hardware import HostFingerprint, fingerprint, is_reference_class
from autoselect.model import MoeProfile, load_profile, normalize_arch
from autoselect.options import MAX_WORKSPACE_GIB
from autoselect.selector.answer import ModelSummary, Recommendation
from autoselect.selector.caveats import caveats
from autoselect.selector.confidence import capping, facts, level_of
from autoselect.selector.decide import DEFAULT_POLICY, DecisionPolicy, decide
from autoselect.selector.e2e import e2e_evidence, validate_flags
from autoselect.selector.evidence import EvidenceSource, collect
from autoselect.selector.flags import serve_flags, settle, tuned_knobs
from autoselect.selector.judge import judge_backend
from autoselect.selector.provenance import data_used
from autoselect.selector.reference_evidence import ReferenceEvidence
from autoselect.selector.sources import sources_for
from autoselect.selector.target import RecommendTarget, default_budget, resolve
from autoselect.selector.ties import expected_effect, tie_answer
from autoselect.selector.wording import assign, comparison, decision_sentence, open_pair
from autoselect.workload import (BadWorkloadOption, Deployment, WorkloadSpec, check_deployment_flags,
                                 check_workload_kind, resolve_deployment, workload_from_kind, workload_from_tokens)
from db import default_path
from db.queries import StoredResult, connect_readonly, host_classes, newest_host


class NoLegalBackend(UserError):
    "No all2all backend is legal for this model, deployment and vLLM version."


class BadWorkspaceAllowance(UserError):
    "The --max-workspace-gib allowance is not a positive number of GiB within MAX_WORKSPACE_GIB."


def recommend(
    profile: MoeProfile,
    *,
    conn: sqlite3.Connection | None,
    deployment: Deployment,
    host_class: str | None = None,
    host: HostFingerprint | None = None,
    gpu_arch: str | None = None,
    vllm_version: str | None = None,
    workload: WorkloadSpec | str | None = None,
    max_num_batched_tokens: int | None = None,
    max_workspace_gib: float | None = None,
    knobs: dict[str, Any] | None = None,
    rows: list[StoredResult] | None = None,
    vllm_version_source: str | None = None,
    evidence: Callable[[RecommendTarget], Sequence[EvidenceSource]] | None = None,
    policy: DecisionPolicy = DEFAULT_POLICY,
) -> Recommendation:
    """The fastest legal backend for ``profile`` on the host (class), with its evidence.

    :param conn: a read-only sqlite3 connection to the results store, or None (no data).
    :param deployment: dp x tp; the all2all spans ``deployment.world_size`` ranks.
    :param host_class: the host class whose results count (default ``host.host_class``).
    :param host: the target host (hardware rules and current driver / flashinfer versions), or None.
    :param gpu_arch: the target GPU arch (default ``host.gpu_arch``).
    :param vllm_version: the vLLM version to serve with (default: resolved as every command resolves
        it, :func:`autoselect.candidates.resolve_target`).
    :param workload: token buckets, or a ``--workload`` kind built with the answer's token budget
        (default ``mixed``).
    :param max_num_batched_tokens: the per-engine token budget the user set, if any.
    :param max_workspace_gib: the one-sided workspace allowance (default
        :data:`autoselect.vllm_flags.DEFAULT_MAX_WORKSPACE_GIB`).
    :param knobs: tuned knobs for the pick, ``{"env": {...}, "flags": [...]}``; default: the
        newest ``autoselect tune`` configuration with a measured gain in ``conn`` (``{}`` if none).
    :param rows: the measurements to use instead of querying ``conn`` (leave-one-out studies).
    :param vllm_version_source: where ``vllm_version`` came from (JSON ``vllm_version_source``);
        default ``"--vllm-version"`` when a version is given, else the resolution's.
    :param evidence: the evidence sources for the target (default
        :func:`autoselect.selector.sources.sources_for`: this host class's measurements, from
        ``rows`` or ``conn``, and NVIDIA's published reference for a reference class or a host of a
        reference system without local measurements of the shape); each backend's points come
        from the strongest source that has any.
    """
    target = resolve(profile, deployment=deployment, host_class=host_class, host=host, gpu_arch=gpu_arch,
                     vllm_version=vllm_version, vllm_version_source=vllm_version_source, workload=workload,
                     max_num_batched_tokens=max_num_batched_tokens, max_workspace_gib=max_workspace_gib)
    sources = list(evidence(target)) if evidence is not None else sources_for(target, conn, rows)
    verdicts = candidate_backends(target.legality)
    judged = [judge_backend(target, verdict, collect(sources, backend)) for backend, verdict in verdicts.items()]
    candidates = [j.candidate for j in judged if j.candidate is not None]
    rejected = [j.rejection for j in judged if j.rejection is not None]
    if not candidates:
        raise _no_legal_backend(target, rejected)
    used = {rid: row for j in judged for rid, row in j.rows.items()}
    decision = decide(candidates, policy, [w for _, w in target.workload.buckets])
    final = verdicts[decision.pick.backend]
    # Belt and braces: the one-sided nvfp4 rule (and every other) is the rules table's call.
    assert final is not None and final.ok, f"selector picked an illegal backend {decision.pick.backend}"
    assign(decision, candidates)
    notes = caveats(target, decision, candidates, used)
    ref_used = next((s.used(candidates) for s in sources if isinstance(s, ReferenceEvidence)), None)
    caps = capping(facts(decision, candidates, stale=bool(notes.stale)))
    level = level_of(caps)
    knobs = dict(knobs or {}) or tuned_knobs(target, conn, decision.pick.backend)
    flags = serve_flags(target, decision.pick.backend, knobs)
    pair = open_pair(decision, candidates)
    bench = settle(target, candidates, decision.default, also=pair)
    compared = comparison(decision, candidates, bench if pair else None)
    details = dict(notes.details)
    details.update((r, v.detail(i)) for v in verdicts.values() if v is not None and not v.ok
                   for i, r in enumerate(v.reasons) if v.detail(i) != r)
    return Recommendation(
        model=profile.model,
        profile=ModelSummary(profile.hidden_size, profile.num_experts, profile.top_k, profile.weight_quant),
        deployment=deployment, gpu_arch=target.gpu_arch, activation_dtype=target.activation_dtype,
        vllm_version=target.vllm_version, vllm_version_source=target.legality.vllm_version_source,
        vllm_version_warning=rules.newer_than_known(target.vllm_version), workload=target.workload,
        token_budget=target.budget, backend=decision.pick.backend,
        decision=decision_sentence(decision, candidates, target.vllm_version),
        step_consequences=next(j.step for j in judged if j.candidate is decision.pick).consequences,
        vllm_args=flags.vllm_args, command=flags.command, env=flags.env, knobs=knobs,
        confidence=level, confidence_reasons=[cap.text for cap in caps], confidence_codes=[cap.name for cap in caps],
        comparison=compared, candidates=candidates, rejected=rejected,
        warnings=list(dict.fromkeys(list(final.warnings) + notes.warnings + flags.notes
                                    + (ref_used.caveats if ref_used is not None else []))),
        data_used=data_used(target, used, notes.stale, sum(s.considered for s in sources)),
        bench_command=bench,
        reference=ref_used,
        tie=tie_answer(target, decision, candidates),
        expected_effect=(expected_effect(decision.pick, decision.default)
                         if decision.default is not None and decision.pick is not decision.default else None),
        details=details or None,
    )


def _no_legal_backend(target: RecommendTarget, rejected: list) -> NoLegalBackend:
    # A vLLM without the flag (no backend at all) was refused when the target was resolved
    # (autoselect.candidates.check_vllm_version): every backend here was judged and rejected.
    return NoLegalBackend(
        f"no all2all backend is legal for {target.profile.model} at EP {target.world_size} on vLLM "
        f"{target.vllm_version}: " + "; ".join(f"{r.backend}: {'; '.join(r.reasons)}" for r in rejected)
    )


def target_vllm_version(explicit: str | None = None) -> str:
    """The vLLM version to spell flags for, resolved as ``check`` resolves it (the version alone).

    ``--vllm-version``, else ``$AUTOSELECT_VLLM_PYTHON``'s vllm metadata, else this environment's,
    else the newest known: :func:`autoselect.bridge.target_version`, which also says where
    the version came from. vllm itself is never imported.
    """
    return target_version(explicit)[0]


def _check_flags(workload, tokens, concurrency, max_num_batched_tokens, max_workspace_gib, dp, tp,
                 world_size) -> WorkloadSpec | None:
    """Refuse every bad flag before anything is read; the explicit ``--tokens`` workload, if any."""
    if workload is not None and tokens is not None:
        raise BadWorkloadOption("pass either --workload or --tokens, not both")
    explicit = workload_from_tokens(tokens) if tokens is not None else None
    check_workload_kind(workload or "mixed")
    if max_workspace_gib is not None and not (0 < max_workspace_gib <= MAX_WORKSPACE_GIB):
        raise BadWorkspaceAllowance(f"--max-workspace-gib {max_workspace_gib} must be a positive number of GiB, "
                                    f"at most {MAX_WORKSPACE_GIB:g} (more than any GPU holds)")
    for name, value in (("--concurrency", concurrency), ("--max-num-batched-tokens", max_num_batched_tokens)):
        if value is not None and value < 1:
            raise BadWorkloadOption(f"{name} {value} must be at least 1")
    check_deployment_flags(dp, tp, world_size)
    return explicit


def target_host(conn: sqlite3.Connection | None, path, host_class: str | None) -> HostFingerprint:
    """This machine, the newest machine of ``host_class`` in the store (``path`` names the store in
    the error), or the machine a reference class stands for
    (:func:`autoselect.reference.host.reference_host`). The one host-class lookup: ``recommend``,
    ``explain``, the service and ``report`` resolve a ``--host-class`` through it.

    :raises UnknownHostClass: ``host_class`` is not in the store (or there is no store).
    :raises UnknownReferenceClass: a ``ref-`` name that is no reference class.
    """
    if host_class is None:
        return fingerprint()
    if is_reference_class(host_class):
        return reference.reference_host(reference.get_class(host_class))
    host = newest_host(conn, host_class) if conn is not None else None
    if host is not None:
        return host
    # No usable machine: the class list tells an unknown class (named in the error) from a known
    # one whose every stored machine breaks the schema (newest_host skipped them, and said so).
    known = [h["host_class"] for h in host_classes(conn)] if conn is not None else []
    if host_class not in known:
        raise UnknownHostClass(
            f"host class {host_class!r} is not in {path}; known: {', '.join(known) or 'none'} "
            "(`autoselect db info` lists them)"
        )
    return host


def recommend_for(
    model: str,
    *,
    db_path: str | os.PathLike | None = None,
    dp: int | None = None,
    tp: int | None = None,
    world_size: int | None = None,
    host_class: str | None = None,
    gpu_arch: str | None = None,
    vllm_version: str | None = None,
    workload: str | None = None,
    tokens: str | None = None,
    concurrency: int | None = None,
    max_num_batched_tokens: int | None = None,
    max_workspace_gib: float | None = None,
    validate: bool = False,
    model_source=None,
    read_db: bool = True,
    this_host: HostFingerprint | None = None,
    profile: MoeProfile | None = None,
) -> Recommendation:
    """``autoselect recommend`` from its flags: validate, load, read the store, decide, check.

    ``model_source`` (:class:`autoselect.model.ModelSource`) says which model names resolve
    (``serve``: Hub ids from the cache, names under its roots; default: the CLI's). ``read_db``
    False answers without the database (``launch``, once it found the file unreadable).
    ``this_host``: this machine's fingerprint when the caller has taken it already (``launch``
    probes the platform with it), so it is not taken twice (NVML, every GPU and link, the
    installed versions); used only without ``host_class``. ``profile``: ``model``'s profile when
    the caller has read it already (``launch`` judges the line with it), so its files are not read twice.

    Every input is checked before anything is read. The target host is this machine
    (:func:`autoselect.hardware.fingerprint`) unless ``host_class`` names a class present in
    the database (its newest machine then stands for it) or is a reference class (``ref-...``: a
    machine of that published system; the world size defaults to the class's, and the NVL72 rack
    class needs one). A missing database file means no measurements (confidence ``none``), not
    an error, unless ``host_class`` needs it. The answer
    carries the stored e2e results of its shape (``e2e``) and, with ``validate``, vLLM's own
    parser's verdict on the flags (``vllm_validation``; a rejection is an error).
    """
    explicit = _check_flags(workload, tokens, concurrency, max_num_batched_tokens, max_workspace_gib, dp, tp,
                            world_size)
    gpu_arch = normalize_arch(gpu_arch) if gpu_arch is not None else None
    version_problems: list[str] = []  # an AUTOSELECT_VLLM_PYTHON that could not be read: a warning
    version, version_source = target_version(vllm_version, problems=version_problems)
    if profile is None:
        profile = load_profile(model) if model_source is None else load_profile(model, source=model_source)
    path = default_path() if db_path is None else db_path
    conn = connect_readonly(path) if read_db and os.path.exists(path) else None
    try:
        host = this_host if host_class is None and this_host is not None else target_host(conn, path, host_class)
        deployment = resolve_deployment(dp, tp, world_size, _default_gpus(host_class, host, dp, tp, world_size))
        arch = gpu_arch or (normalize_arch(host.gpu_arch) if host.gpu_arch else None)
        budget = default_budget(host, host_class, arch, version, deployment, max_num_batched_tokens)
        spec = explicit or workload_from_kind(workload or "mixed", deployment, concurrency=concurrency,
                                              max_num_batched_tokens=budget.tokens)
        rec = recommend(profile, conn=conn, deployment=deployment,
                        host_class=host_class if host_class is not None else host.host_class,
                        host=host, gpu_arch=gpu_arch, vllm_version=version, vllm_version_source=version_source,
                        workload=spec, max_num_batched_tokens=max_num_batched_tokens,
                        max_workspace_gib=max_workspace_gib)
        rec.warnings.extend(version_problems)
        if rec.bench_command and rec.reference is not None and is_reference_class(host_class):
            rec.warnings.append(f"run the bench command on a machine of the reference system: {rec.reference.system}")
        elif rec.bench_command and host_class is not None:
            rec.warnings.append(f"run the bench command on a machine of host class {host_class}")
        _add_checks(rec, conn, validate)
        return rec
    finally:
        if conn is not None:
            conn.close()


def _default_gpus(host_class: str | None, host: HostFingerprint, dp: int | None, tp: int | None,
                  world_size: int | None) -> int | None:
    """The GPUs a deployment without --dp / --world-size spans: the host's; a reference class's
    default world size (the NVL72 rack class has none: it asks for --world-size)."""
    if not is_reference_class(host_class):
        return host.gpu_count if host is not None else None
    asked = world_size if world_size is not None else (dp * (tp or 1) if dp is not None else None)
    return reference.get_class(host_class).check_world_size(asked)


def _add_checks(rec: Recommendation, conn: sqlite3.Connection | None, validate: bool) -> None:
    """The stored e2e results of the answer's shape and, with ``validate``, vLLM's verdict on its flags;
    their disagreements and warnings join ``rec.warnings``."""
    rec.e2e = e2e_evidence(conn, rec)
    if rec.e2e is not None:
        rec.warnings.extend(rec.e2e.warnings)
    if validate:
        rec.vllm_validation, warnings = validate_flags(rec.model, rec.vllm_args)
        rec.warnings.extend(warnings)
