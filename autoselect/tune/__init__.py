"""Adaptive sweeps and knob search on Optuna: spend benchmark time where the decision is made.

An exhaustive sweep measures every backend at every token bucket to 0.5 % noise. Most of that
time goes to backends that are clearly losing. ``tune`` runs a race instead:

1. **Screen**: every candidate backend at every bucket of the workload, with a short
   stopping rule (:data:`SCREEN`). A backend that fails the correctness gate, is unavailable
   or errors at any bucket is dropped on the spot, with the harness's reason.
2. **Refine rounds**: every alive backend is re-measured (short runs, :data:`REFINE`) at the
   (up to :data:`REFINE_BUCKETS_PER_ROUND`) buckets where the leader and its closest
   challenger are closest relative to their bands, weighted by the bucket's share of the
   workload, in alternating backend order; one sweep call per round: one job for each backend's
   worker group, which was started once for the whole race (screen to final check; a pruned
   backend's group is closed at once). Repeated runs of a point are
   pooled (inverse-variance). Each backend's **run-to-run noise** (e.g. load from other
   processes, which no single run shows) is the pooled standard deviation of ``ln(latency)``
   between repeated runs of the same point, each point centred on its own mean (buckets of
   different scale never mix, and the squared deviations are pooled with their degrees of
   freedom instead of a median of one-run spreads); it widens the bands to at least
   ``t x noise / sqrt(runs)``, ``t`` the Student-t 95 % quantile of the noise's degrees of
   freedom (4.3 with 2, 2.8 with 4, never below Z = 2), and never below the selector's
   reproducibility floor.
3. **Prune** after each round, bucket by bucket and relative: per bucket, the log ratio
   challenger / leader of the pooled points with the half-width ``sqrt(h_c^2 + h_l^2)`` of
   the two points' relative bands (x :data:`PRUNE_SAFETY`; both bands from the larger of the
   two backends' noise, as the load is the machine's); a backend is dropped, with the
   numbers, when its workload-weighted latency ratio to the leader stays above 1 even with
   every bucket at its band's most favourable end (bands combine linearly over buckets, as
   in the selector; :meth:`Race.compare`). No backend is pruned for dominance before every
   alive one has repeated runs (its own noise), and never on fewer than
   :data:`PRUNE_MIN_RUNS` (3) independent runs (jobs, one per sweep call) of both backends unless
   both noises are known and at most :data:`PRUNE_QUIET_NOISE` (a bimodal backend can land in its
   slow mode in two runs in a row; :meth:`Race.enough_evidence`).
4. **Stop** and say which: ``settled`` (one backend left), ``tie`` (every contested point is
   at the reproducibility floor and the bands still overlap), ``unresolved`` (even the
   remaining rounds could not separate the two at the current means: futility, judged with
   the bands those runs would give, the runs spread over all buckets, and only on as much
   evidence as a prune needs), or ``budget`` (``--budget`` ran out; rerun to continue).
5. **Knobs**: for the fastest backend vLLM has, each legal value of each legal knob
   (``autoselect/knobs.py``) is screened at every bucket, one knob at a time; the values that
   beat the untuned backend are combined (only if the combination is legal), and the best
   setting and the untuned backend are re-measured one after the other and compared as the
   race compares backends (:meth:`Race.compare`: bucket by bucket, relative, both bands from
   the larger run-to-run noise); a gain counts only beyond that. Illegal settings are
   never measured: :func:`plan_knob_settings` only produces settings
   :func:`knobs.check_setting` accepts.

Every measurement is one Optuna trial (params: backend, tokens, stage, and every knob of the
table), added to a study in an Optuna journal file next to the results database
(``results.db`` -> ``results.optuna.log``), named after the host class, the model shape, the
world size and the workload. A killed tune loses at most the sweep call in flight: rerun the
same command and the completed trials are reused (the race is rebuilt from them). Every
measurement is also a row of the results database (``bench.sweep.run_sweep`` writes it), and
the best configuration is stored in ``tuned_configs`` (``db/tuned.py``), which ``recommend``
reads to print the knobs and their measured gain.

The package, one concern per module (the flow: spec -> tuner -> race over an index -> study):

- :mod:`~autoselect.tune.entry`: validate the inputs (:func:`prepare`), run and store (:func:`run_tune`);
- :mod:`~autoselect.tune.tuner`: :class:`TuneSpec`, the stopping rules :data:`SCREEN` / :data:`REFINE`,
  :class:`Tuner` (budget, sweep calls on long-lived worker groups, the phases);
- :mod:`~autoselect.tune.race`: the policy (:class:`Race`: leader, prune, futility, refine targets);
- :mod:`~autoselect.tune.index`: the measurements filed by series, point and stage;
- :mod:`~autoselect.tune.stats`: pooling, run-to-run noise, Student-t bands, scores, comparisons;
- :mod:`~autoselect.tune.measurement`: one measured point (:class:`Measurement`);
- :mod:`~autoselect.tune.knob_search`: the knob plan and search (:class:`KnobSearch`, its result);
- :mod:`~autoselect.tune.storage`: the Optuna study (:class:`Study`, :func:`optuna_path`);
- :mod:`~autoselect.tune.outcome`: :class:`TuneOutcome` (the JSON payload);
- :mod:`~autoselect.tune.events`: the typed progress events.
"""

from autoselect.tune.entry import prepare, run_tune
from autoselect.tune.events import TrialAdded

__all__ = [
    "TrialAdded", "prepare", "run_tune",
]
