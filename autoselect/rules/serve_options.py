"""When the ``vllm serve`` options around the all2all backend came and went, and which backends DBO takes.

:data:`SERVE_OPTIONS` has one row per option whose existence depends on the release (or that
never reached one): first release, deprecation, first release without it, what to write instead,
and the source lines. :data:`DBO_SUPPORT` lists the backends vLLM's micro-batching assert lets
through, per platform (CUDA; ROCm from 0.33.0 also takes allgather_reducescatter), each from the
release that added it.
"""

from __future__ import annotations

from typing import NamedTuple

from autoselect.rules.versions import NEWEST_VLLM, version_in

#: First release with ``--all2all-backend`` (PR #26732).
FLAG_SINCE = "0.11.1"
#: First release that does not read VLLM_ALL2ALL_BACKEND (PR #33535).
ENV_VAR_REMOVED_IN = "0.16.0"


class ServeOption(NamedTuple):
    """One ``vllm serve`` option's life across releases."""

    option: str
    since: str | None  # first release that accepts it (None: older than the tables)
    until: str | None = None  # first release without it
    deprecated: str | None = None  # first release that warns it is deprecated
    replacement: str = ""  # what to write instead
    source: str = ""
    released: bool = True  # False: the name only ever existed in PRs / nightly builds

    def accepted_by(self, vllm_version: str) -> bool:
        """True when ``vllm_version``'s parser accepts the option."""
        return self.released and version_in(vllm_version, self.since, self.until)

    def deprecated_in(self, vllm_version: str) -> bool:
        """True when ``vllm_version`` accepts the option but warns it is deprecated."""
        return self.accepted_by(vllm_version) and self.deprecated is not None and version_in(
            vllm_version, self.deprecated, None)


_EPLB_OLD = ("0.10.0 engine/arg_utils.py:641-650 (own flags); 0.10.2-0.11.x forward them into --eplb-config "
             "(0.11.0 arg_utils.py:716-733, 1306-1312); 0.12.0 has none")

SERVE_OPTIONS = {
    o.option: o
    for o in (
        ServeOption("--all2all-backend", FLAG_SINCE, replacement="VLLM_ALL2ALL_BACKEND=NAME before v0.11.1",
                    source="PR #26732 (merged 2025-10-13); 0.11.1 engine/arg_utils.py:828"),
        ServeOption("--enable-dbo", "0.11.0", source="0.11.0 config/parallel.py:141, engine/arg_utils.py:700"),
        ServeOption("--moe-backend", "0.17.0", source="0.17.0 config/kernel.py:32 (KernelConfig.moe_backend), "
                                                      "engine/arg_utils.py:1236-1238; 0.34.0 arg_utils.py:1874-1876"),
        ServeOption("--enable-microbatching", None, released=False, replacement="--enable-dbo (v0.11.0 and later)",
                    source="the DBO switch's name in PRs #20448 (2025-07-03) and #23693 (2025-08-26); "
                           "no release parser from 0.10.0 to 0.34.0 has it (engine/arg_utils.py)"),
        ServeOption("--eplb-config", "0.10.2", source="0.10.2 engine/arg_utils.py:691"),
        ServeOption("--num-redundant-experts", None, "0.12.0", "0.10.2",
                    replacement="--eplb-config '{\"num_redundant_experts\": N}'", source=_EPLB_OLD),
        ServeOption("--eplb-window-size", None, "0.12.0", "0.10.2",
                    replacement="--eplb-config '{\"window_size\": N}'", source=_EPLB_OLD),
        ServeOption("--eplb-step-interval", None, "0.12.0", "0.10.2",
                    replacement="--eplb-config '{\"step_interval\": N}'", source=_EPLB_OLD),
        ServeOption("--eplb-log-balancedness", None, "0.12.0", "0.10.2",
                    replacement="--eplb-config '{\"log_balancedness\": true}'", source=_EPLB_OLD),
    )
}


#: The platforms the DBO table distinguishes (autoselect's GPU archs are CUDA's).
CUDA, ROCM = "cuda", "rocm"


class DboSupport(NamedTuple):
    """A backend micro-batching (DBO) accepts on ``platforms``, from ``since``."""

    backend: str
    since: str
    source: str
    platforms: frozenset = frozenset({CUDA, ROCM})


DBO_SUPPORT = (
    DboSupport("deepep_low_latency", "0.11.0", "0.11.0 config/__init__.py:484; 0.11.1 config/vllm.py:684"),
    DboSupport("deepep_high_throughput", "0.11.0", "0.11.0 config/__init__.py:484; 0.11.1 config/vllm.py:684"),
    DboSupport("nixl_ep", "0.24.0", "0.24.0 config/vllm.py:1434 (not in 0.23.0); 0.33.0 config/vllm.py:2180-2199"),
    DboSupport("allgather_reducescatter", "0.33.0",
               "0.33.0 config/vllm.py:2182-2190 (if current_platform.is_rocm(): the naive DP/EP prepare/finalize runs its "
               "all-gather / reduce-scatter on the comm stream under DBO; not in 0.32.0 config/vllm.py:2104-2117); "
               "0.34.0 config/vllm.py:2090-2114", frozenset({ROCM})),
)
#: The assert applies whenever DBO is on, with or without an all2all group.
DBO_ASSERT_SOURCE = ("vllm/config/vllm.py __post_init__: assert a2a_backend in supported_backends (0.11.1-0.34.0; "
                     "0.34.0 config/vllm.py:2090-2114)")


def dbo_backends(vllm_version: str | None = None, platform: str = CUDA) -> tuple[str, ...]:
    """The backends ``--enable-dbo`` works with on ``platform`` in ``vllm_version`` (default: the newest)."""
    version = vllm_version or NEWEST_VLLM
    return tuple(d.backend for d in DBO_SUPPORT if platform in d.platforms and version_in(version, d.since, None))


#: Backends DBO accepts in the newest release.
DBO_BACKENDS = dbo_backends()
