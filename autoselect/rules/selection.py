"""How vLLM picks its all2all backend, release by release: the flag, ``VLLM_ALL2ALL_BACKEND``, the default.

:data:`SELECTION_ERAS` holds one row per release range, read from each release's source (the
sdists on PyPI; 0.15.x from its wheel): whether ``--all2all-backend`` exists, how the variable is
read next to it (the only way, only when the flag is absent, over the flag, not at all), what runs
when neither names a backend, which values the variable accepts and what a bad one does.
:func:`effective_backend` applies the row to a command line's flag and environment.
"""

from __future__ import annotations

from typing import NamedTuple

from autoselect.rules.versions import NEWEST_VLLM, version_in

#: The environment variable older releases read the backend from.
VARIABLE = "VLLM_ALL2ALL_BACKEND"
#: Where the backend a line runs comes from (:attr:`EffectiveBackend.origin`): the flag, the
#: variable (:data:`VARIABLE`) or the release's default.
ORIGIN_FLAG = "--all2all-backend"
ORIGIN_DEFAULT = "vLLM's default"
#: Oldest release the version tables were checked against; older ones are judged as this one.
OLDEST_CHECKED = "0.10.0"

# How a release reads VLLM_ALL2ALL_BACKEND.
ONLY = "only"  # no flag: the variable is the only way to choose
UNLESS_FLAG = "unless-flag"  # read when --all2all-backend is absent; the flag wins
OVER_FLAG = "over-flag"  # when set, it overrides --all2all-backend
IGNORED = "ignored"  # not read, silently
IGNORED_WARNED = "ignored-warned"  # not read; startup warns that it is an unknown vLLM variable

READING = {
    ONLY: "the only way to choose the backend",
    UNLESS_FLAG: "read only when --all2all-backend is absent (the flag wins)",
    OVER_FLAG: "read when set, and then it overrides --all2all-backend",
    IGNORED: "not read at all (vLLM says nothing)",
    IGNORED_WARNED: "not read; vLLM only warns 'Unknown vLLM environment variable detected'",
}

def release_range(since: str, until: str | None) -> str:
    """``since-last`` for a half-open range: ``("0.14.0", "0.16.0")`` -> ``0.14.0-0.15.x``."""
    if until is None:
        return since if since == NEWEST_VLLM else f"{since}-{NEWEST_VLLM}"
    major, minor, patch = (int(x) for x in until.split(".")[:3])
    last = f"{major}.{minor - 1}.x" if patch == 0 else f"{major}.{minor}.{patch - 1}"
    return since if last == since else f"{since}-{last}"


_V010 = frozenset({"naive", "pplx", "deepep_high_throughput", "deepep_low_latency"})
_V011 = _V010 | {"allgather_reducescatter", "flashinfer_all2allv"}


class SelectionEra(NamedTuple):
    """How one release range chooses the all2all backend, and the source lines that say so."""

    since: str | None  # None: from the oldest release on (checked from OLDEST_CHECKED)
    until: str | None
    flag: bool  # --all2all-backend exists
    variable: str  # ONLY | UNLESS_FLAG | OVER_FLAG | IGNORED | IGNORED_WARNED
    default: str  # what runs when neither the flag nor the variable names a backend
    variable_values: frozenset  # the values the variable accepts (empty when it is not read)
    bad_variable: str  # what a value outside variable_values does
    source: str
    default_source: str = ""  # where the default is set
    cite: str = ""  # the one source line a message quotes
    variable_always_validated: bool = False  # read (and validated) even when the flag is given

    @property
    def releases(self) -> str:
        """``0.14.0-0.15.x``: the range as releases."""
        return release_range(self.since or OLDEST_CHECKED, self.until)


SELECTION_ERAS = (
    SelectionEra(
        None, "0.11.0", flag=False, variable=ONLY, default="naive", variable_values=_V010,
        bad_variable="vLLM fails when it builds the all2all group: 'Unknown all2all backend'",
        source="0.10.0 vllm/envs.py:912-913 (os.getenv(..., 'naive')), "
               "distributed/device_communicators/cuda_communicator.py:73-91 (same in 0.10.1.1, 0.10.2)",
        default_source="0.10.0 vllm/envs.py:912-913, 0.10.2 envs.py:1059-1060",
        cite="0.10.0 vllm/envs.py:912-913",
    ),
    SelectionEra(
        "0.11.0", "0.11.1", flag=False, variable=ONLY, default="allgather_reducescatter", variable_values=_V011,
        bad_variable="vLLM refuses to start: 'Invalid value ... for VLLM_ALL2ALL_BACKEND'",
        source="0.11.0 vllm/envs.py:1240-1246 (env_with_choices, default allgather_reducescatter), "
               "envs.py:236-275, cuda_communicator.py:93-119",
        default_source="0.11.0 vllm/envs.py:1240-1241",
        cite="0.11.0 vllm/envs.py:1240-1246",
    ),
    SelectionEra(
        "0.11.1", "0.12.0", flag=True, variable=UNLESS_FLAG, default="allgather_reducescatter",
        variable_values=_V011,
        bad_variable="vLLM refuses to start: 'Invalid value ... for VLLM_ALL2ALL_BACKEND'",
        source="PR #26732 (merged 2025-10-13: 'overriden by the argument if both are set'); "
               "0.11.1 vllm/config/parallel.py:466-473 (if self.all2all_backend is None: "
               "self.all2all_backend = envs.VLLM_ALL2ALL_BACKEND), "
               "engine/arg_utils.py:404 (flag default None)",
        default_source="0.11.1 vllm/envs.py:1225-1227 (the variable's default, read when the flag is absent)",
        cite="0.11.1 vllm/config/parallel.py:466-473",
    ),
    SelectionEra(
        "0.12.0", "0.14.0", flag=True, variable=UNLESS_FLAG, default="allgather_reducescatter",
        variable_values=_V011,
        bad_variable="vLLM refuses to start: 'Invalid value ... for VLLM_ALL2ALL_BACKEND'",
        source="0.12.0 vllm/config/parallel.py:495-500 (flag first), parallel.py:489 (compute_hash reads the "
               "variable even when the flag is given, so a bad value fails either way); same in 0.13.0",
        default_source="0.12.0 vllm/envs.py:1270-1272 (the variable's default)",
        cite="0.12.0 vllm/config/parallel.py:489-500",
        variable_always_validated=True,
    ),
    SelectionEra(
        "0.14.0", "0.16.0", flag=True, variable=OVER_FLAG, default="allgather_reducescatter",
        variable_values=_V011 | {"mori"},
        bad_variable="vLLM refuses to start: 'Invalid value ... for VLLM_ALL2ALL_BACKEND'",
        source="0.14.0 vllm/config/parallel.py:529-536 (if envs.is_set('VLLM_ALL2ALL_BACKEND'): "
               "self.all2all_backend = envs.VLLM_ALL2ALL_BACKEND; 'will be removed in v0.15.0'), "
               "0.15.0 parallel.py:542-548, envs.py:1312-1324 (+ mori); the change is PR #30363 (2025-12-09)",
        default_source="0.14.0 vllm/config/parallel.py:152 (all2all_backend field default)",
        cite="0.14.0 vllm/config/parallel.py:529-536",
    ),
    SelectionEra(
        "0.16.0", "0.17.0", flag=True, variable=IGNORED, default="allgather_reducescatter",
        variable_values=frozenset(), bad_variable="nothing: vLLM does not read it",
        source="PR #33535 (merged 2026-02-02) removed the variable; 0.16.0 reads it nowhere",
        default_source="0.16.0 vllm/config/parallel.py:150 (all2all_backend field default)",
        cite="PR #33535",
    ),
    SelectionEra(
        "0.17.0", None, flag=True, variable=IGNORED_WARNED, default="allgather_reducescatter",
        variable_values=frozenset(), bad_variable="nothing: vLLM does not read it",
        source="0.17.0 vllm/envs.py:1704-1710 validate_environ ('Unknown vLLM environment variable detected'; "
               "an error with --fail-on-environ-validation), engine/arg_utils.py:1459; same through 0.33.0; "
               "0.34.0 platforms/interface.py:1497-1501, engine/arg_utils.py:2294 (no VLLM_ALL2ALL_BACKEND in "
               "0.34.0 vllm/envs.py)",
        default_source="vllm/config/parallel.py all2all_backend field default (0.17.0-0.34.0; 0.34.0 "
                       "parallel.py:229; PR #53311 made one-sided the default on main on 2026-08-21, PR #53952 "
                       "reverted it: no release has it; PR #54268, one-sided on GB200/GB300 only, is not in 0.34.0)",
        cite="0.17.0 vllm/envs.py:1704-1710",
    ),
)

#: Every value some release accepted in VLLM_ALL2ALL_BACKEND.
ALL_VARIABLE_VALUES = frozenset().union(*(e.variable_values for e in SELECTION_ERAS))


def selection_era(vllm_version: str) -> SelectionEra:
    """The :data:`SELECTION_ERAS` row for ``vllm_version`` (older than the table: its first row)."""
    for era in SELECTION_ERAS:
        if version_in(vllm_version, era.since, era.until):
            return era
    return SELECTION_ERAS[0]


def default_backend(vllm_version: str) -> str:
    """What ``vllm_version`` runs with neither the flag nor the variable (``naive`` before 0.11.0)."""
    return selection_era(vllm_version).default


class EffectiveBackend(NamedTuple):
    """The backend a command line runs, where that came from, and what lost.

    ``backend`` is the value vLLM acts on as written (an old or removed name stays as it is:
    :func:`autoselect.rules.resolve` maps it); None when vLLM would refuse the variable's value.
    """

    backend: str | None
    origin: str  # "--all2all-backend" | "VLLM_ALL2ALL_BACKEND" | "vLLM's default"
    era: SelectionEra
    flag: str | None
    variable: str | None
    overridden: str | None = None  # what lost to the variable or the flag, in words
    variable_ignored: bool = False  # set but not read by this release
    variable_refused: str | None = None  # why vLLM refuses the variable's value

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return {"backend": self.backend, "origin": self.origin, "flag": self.flag, "variable": self.variable,
                "overridden": self.overridden, "variable_ignored": self.variable_ignored,
                "variable_refused": self.variable_refused, "rule": READING[self.era.variable],
                "rule_source": self.era.source}


def effective_backend(vllm_version: str, flag: str | None = None, variable: str | None = None) -> EffectiveBackend:
    """What ``vllm_version`` runs given ``--all2all-backend flag`` and ``VLLM_ALL2ALL_BACKEND=variable``.

    A flag on a release without the flag is reported by the caller (vLLM exits at parse time);
    here it is simply not what runs.
    """
    era = selection_era(vllm_version)
    refused = None
    if variable is not None and era.variable_values and variable not in era.variable_values:
        refused = f"{era.bad_variable}; vLLM {vllm_version} accepts {', '.join(sorted(era.variable_values))}"
    flag = flag if era.flag else None

    def result(backend, origin, **kw):
        return EffectiveBackend(backend, origin, era, flag, variable, **kw)

    if variable is None:
        return result(flag or era.default, ORIGIN_FLAG if flag else ORIGIN_DEFAULT)
    if era.variable in (IGNORED, IGNORED_WARNED):
        return result(flag or era.default, ORIGIN_FLAG if flag else ORIGIN_DEFAULT, variable_ignored=True)
    if era.variable == UNLESS_FLAG and flag is not None:
        refused = refused if era.variable_always_validated else None
        return result(None if refused else flag, ORIGIN_FLAG, variable_refused=refused,
                      overridden=f"{VARIABLE}={variable} (the flag wins in vLLM {era.releases})")
    overridden = (f"--all2all-backend {flag} ({VARIABLE} wins in vLLM {era.releases})"
                  if flag is not None and era.variable == OVER_FLAG else None)
    return result(None if refused else variable, VARIABLE, overridden=overridden, variable_refused=refused)
