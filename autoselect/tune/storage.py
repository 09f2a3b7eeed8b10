"""Where a tune keeps its trials: one Optuna study per problem, in a journal file beside the results.

Every measurement is one Optuna trial (params: backend, tokens, stage, and every knob of the
table; the :class:`~autoselect.tune.measurement.Measurement` in its user attributes), so a
killed tune resumes from the trials it completed. The study lives in an Optuna journal file
(``results.db`` -> ``results.optuna.log``, ``optuna.storages.JournalStorage``): appending a trial
is one write to the file, where the SQLite RDB storage took ~50 ms per trial and ~3 s to create
its tables on a 2-core machine (the whole measuring budget of a short tune). A study an
earlier autoselect left in ``results.optuna.db`` (RDB) is resumed there.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from autoselect import knobs as knobs_mod
from autoselect.tune.measurement import Measurement
from autoselect.workload import Shape, WorkloadSpec

#: Parameter names every trial of a study carries (besides the knobs).
STAGES = ("screen", "refine", "knob", "knob-final")
#: Suffix of the journal file beside a results database, and of an earlier version's SQLite study file.
JOURNAL_SUFFIX, LEGACY_SUFFIX = ".optuna.log", ".optuna.db"


def optuna_path(db_path: str | Path) -> Path:
    """The study file beside a results database: ``results.db`` -> ``results.optuna.log``
    (``results.optuna.db`` when an earlier autoselect left its SQLite study there)."""
    p = Path(db_path)
    legacy = p.with_name(p.stem + LEGACY_SUFFIX)
    return legacy if legacy.exists() else p.with_name(p.stem + JOURNAL_SUFFIX)


def open_storage(path: str | Path):
    """The Optuna storage of a study file (journal, or SQLite for ``*.db``); creates the file if missing."""
    import optuna  # heavy: only a tune (or a reader of its study) pays for it

    path = Path(path)
    if path.suffix == ".db":
        return optuna.storages.RDBStorage(f"sqlite:///{path}", engine_kwargs={"connect_args": {"timeout": 30}})
    from optuna.storages.journal import JournalFileBackend

    return optuna.storages.JournalStorage(JournalFileBackend(str(path)))


def study_name(host_class: str, shape: Shape, world_size: int, device: str, workload: WorkloadSpec) -> str:
    """host class + shape + EP size + device + workload: the same command on the same host
    resumes the same study (``cpu-abc|h2048-k4-e32-bf16-ws2-cpu|decode[...]``)."""
    buckets = ",".join(f"{t}:{w:.4g}" for t, w in workload.buckets)
    return f"{host_class}|{shape.key()}-ws{world_size}-{device}|{workload.kind}[{buckets}]"


class Study:
    """The Optuna study that stores every measurement of one tune problem."""

    def __init__(self, path: Path, name: str, backends: list[str], tokens: list[int]):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._optuna = optuna
        self.path = Path(path)
        self.name = name
        self.study = optuna.create_study(study_name=name, storage=open_storage(path), load_if_exists=True,
                                         direction="minimize")
        # The categorical choices must stay the same for the life of a study: store the union.
        known = self.study.user_attrs.get("backends", [])
        self.backends = sorted(set(known) | set(backends))
        self.tokens = sorted(set(tokens))
        if self.backends != known:
            self.study.set_user_attr("backends", self.backends)
        self._dists = self._distributions()

    def _distributions(self) -> dict:
        D = self._optuna.distributions.CategoricalDistribution
        dists = {
            "backend": D(self.backends),
            "tokens": D(self.tokens),
            "stage": D(list(STAGES)),
        }
        for k in knobs_mod.KNOBS:
            dists[k.name] = D(list(k.choices()))
        return dists

    def add(self, m: Measurement) -> None:
        """Store one measurement as a finished trial (COMPLETE when ok, FAIL otherwise)."""
        params = {"backend": m.backend, "tokens": m.tokens, "stage": m.stage}
        for k in knobs_mod.KNOBS:
            params[k.name] = m.setting.get(k.name, knobs_mod.UNSET)
        state = self._optuna.trial.TrialState
        ok = m.status == "ok" and m.latency_us is not None
        trial = self._optuna.trial.create_trial(
            params=params,
            distributions=self._dists,
            value=m.latency_us if ok else None,
            state=state.COMPLETE if ok else state.FAIL,
            user_attrs={"measurement": asdict(m)},
        )
        self.study.add_trial(trial)

    def measurements(self) -> list[Measurement]:
        """Every measurement stored so far (what a resumed tune starts from)."""
        out = []
        for t in self.study.get_trials(deepcopy=False):
            attrs = t.user_attrs.get("measurement")
            if attrs:
                out.append(Measurement(**attrs))
        return out

    def set(self, key: str, value: Any) -> None:
        """Store a study-level attribute (pruned backends, outcome)."""
        self.study.set_user_attr(key, value)
