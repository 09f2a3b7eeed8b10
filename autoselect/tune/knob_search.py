"""The knob search: for the race's best recommendable backend, which legal knob setting is faster.

Each legal value of each legal knob (``autoselect/knobs.py``) is screened at every bucket, one
knob at a time; the values that beat the untuned backend are combined (only if the combination
is legal), and the best setting and the untuned backend are re-measured one after the other and
compared as the race compares backends (:meth:`autoselect.tune.race.Race.compare`: bucket by
bucket, relative, both bands from the larger run-to-run noise); a gain counts only beyond that.
Illegal settings are never measured: :func:`plan_knob_settings` only produces settings
:func:`autoselect.knobs.check_setting` accepts. Every setting with an environment variable is
a start-up knob: the backend's worker group restarts for it (the timing log says so).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from autoselect import knobs as knobs_mod
from autoselect.tune.events import KnobsNote

#: What a knob search ends with (``db.tuned.TUNED_STATUSES`` less ``not_searched``).
STATUSES = ("gain", "no_gain", "no_legal_knobs", "budget")


def plan_knob_settings(backend: str, ctx: knobs_mod.KnobContext) -> list[dict[str, str]]:
    """One-knob-at-a-time settings to screen for ``backend``: each legal value of each legal knob.

    Every returned setting is legal (:func:`knobs.check_setting` accepts it); knobs that are
    illegal in ``ctx`` (GPU-only knobs on a CPU run, DBO-only knobs without DBO, ...) and
    illegal values (LL128 without NVLink, token capacities below the workload) never appear.
    """
    choices, _ = knobs_mod.knob_space(backend, ctx)
    plan = []
    for c in choices:
        for v in c.legal:
            if v == knobs_mod.UNSET:
                continue
            setting = {c.knob.name: v}
            if not knobs_mod.check_setting(backend, setting, ctx):
                plan.append(setting)
    return plan


def combine_settings(backend: str, winners: list[tuple[float, dict[str, str]]],
                     ctx: knobs_mod.KnobContext) -> dict[str, str]:
    """Merge single-knob winners (``(gain, setting)``, best first) into one legal setting.

    A knob whose addition would make the combination illegal is skipped (the bigger gain wins).
    """
    merged: dict[str, str] = {}
    for _, setting in sorted(winners, key=lambda x: -x[0]):
        candidate = {**merged, **setting}
        if not knobs_mod.check_setting(backend, candidate, ctx):
            merged = candidate
    return merged


@dataclass(frozen=True)
class ExcludedKnob:
    """A knob of the backend's table that was not searched here, and why."""

    knob: str
    reason: str


@dataclass(frozen=True)
class ScreenedSetting:
    """One screened setting: its workload-weighted latency and band (µs), or why it failed."""

    setting: dict[str, str]
    latency_us: float | None
    halfwidth_us: float | None
    failure: str | None


@dataclass
class KnobSearch:
    """What the knob search of ``backend`` found (the ``knobs`` of the tune outcome).

    ``status``: ``gain`` (``setting`` beats the untuned backend beyond the noise, by ``gain`` =
    1 - tuned/untuned, workload-weighted, ± ``gain_halfwidth``), ``no_gain``,
    ``no_legal_knobs``, ``budget`` (``setting``: the best so far, not confirmed).
    """

    backend: str
    status: str = "no_gain"
    setting: dict[str, str] = field(default_factory=dict)
    gain: float = 0.0
    gain_halfwidth: float | None = None
    tuned_latency_us: float | None = None
    untuned_latency_us: float | None = None
    excluded: list[ExcludedKnob] = field(default_factory=list)
    screened: list[ScreenedSetting] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the ``knobs`` of ``tune --format json``)."""
        return asdict(self)


def search(tuner, backend: str) -> KnobSearch:
    """Screen every legal knob value of ``backend``, combine the winners, confirm with the refine rule."""
    ctx = tuner.spec.knob_ctx
    _, excluded = knobs_mod.knob_space(backend, ctx)
    out = KnobSearch(backend, excluded=[ExcludedKnob(k.name, why) for k, why in excluded])
    plan = plan_knob_settings(backend, ctx)
    if not plan:
        out.status = "no_legal_knobs"
        tuner.progress(KnobsNote(backend, "no legal knob here"))
        return out
    winners = _screen(tuner, backend, plan, out)
    best = combine_settings(backend, winners, ctx)
    if not best:
        out.status = "budget" if out.status == "budget" else "no_gain"
        return out
    _final_check(tuner, backend, best, out)
    return out


def _screen(tuner, backend: str, plan: list[dict[str, str]], out: KnobSearch) -> list[tuple[float, dict]]:
    """Screen each setting of ``plan`` at every bucket; the ``(gain, setting)`` of those faster than untuned."""
    race, spec = tuner.race, tuner.spec
    base = race.score(backend)
    winners = []
    for setting in plan:
        todo = [t for t in spec.workload.tokens if not race.measured(backend, t, "knob", setting)]
        if todo:
            if tuner.estimate(len(todo), spec.screen) > tuner.remaining():
                out.status = "budget"
                break
            tuner.measure([backend], todo, "knob", spec.screen, setting)
        s, failed = race.score(backend, setting), race.failure(backend, setting)
        out.screened.append(ScreenedSetting(setting, s.latency_us if s else None, s.halfwidth_us if s else None,
                                            failed))
        if s and not failed and base and s.latency_us < base.latency_us:
            winners.append(((base.latency_us - s.latency_us) / base.latency_us, setting))
    return winners


def _final_check(tuner, backend: str, best: dict[str, str], out: KnobSearch) -> None:
    """Re-measure ``best`` and the untuned backend one after the other; keep ``best`` only beyond the noise."""
    race, spec = tuner.race, tuner.spec
    tokens = spec.workload.tokens
    if tuner.estimate(2 * len(tokens), spec.refine) > tuner.remaining():
        out.status, out.setting = "budget", best
        return
    tuner.measure([backend], tokens, "knob-final", spec.refine, best)
    tuner.measure([backend], tokens, "knob-final", spec.refine, {})
    s, b = race.score(backend, best), race.score(backend)
    c = race.compare(backend, backend, challenger_setting=best)
    if s is None or b is None or c is None or race.failure(backend, best):
        out.status, out.setting = "no_gain", {}
        return
    # gain = 1 - tuned/untuned (workload-weighted); its band from the ratio's bounds
    faster = c.verdict == "faster"
    out.setting = best if faster else {}
    out.gain, out.gain_halfwidth = 1.0 - c.ratio, max(c.ratio - c.low, c.high - c.ratio)
    out.tuned_latency_us, out.untuned_latency_us = s.latency_us, b.latency_us
    out.status = "gain" if faster else "no_gain"
