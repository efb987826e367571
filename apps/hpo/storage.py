"""Optuna's storage and the samplers and pruners a study names (docs/hpo.md says why the storage lives where it does).

PostgreSQL: the portal's own database, in schema `hpo` (search_path in the URL, the driver named: a bare
`postgresql://` picks whichever driver SQLAlchemy prefers). SQLite (the embedded default): a file of its own beside
the portal's database. One storage (one SQLAlchemy pool) per process and URL.
"""

from __future__ import annotations

import importlib.util
import threading
from typing import Any

from django.conf import settings
from django.db import connection

SCHEMA = "hpo"
_storages: dict[str, Any] = {}
# Optuna studies loaded in this process, by (storage URL, name): loading one costs queries every pass, and what it
# holds (the study's id and directions) never changes; each pass gives it a fresh sampler and pruner.
_studies: dict[tuple[str, str], Any] = {}
_lock = threading.Lock()


def storage_url() -> str:
    from sqlalchemy.engine import URL

    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{settings.VAR_DIR / 'optuna.sqlite3'}"
    return URL.create(
        "postgresql+psycopg",
        username=db.get("USER") or None,
        password=db.get("PASSWORD") or None,
        host=db.get("HOST") or None,
        port=int(db["PORT"]) if db.get("PORT") else None,
        database=db["NAME"],
        # Optuna's commits do not wait for the WAL flush: every Optuna write comes before the portal's write that
        # records it (a trial asked before its row, told before its row ends, a study made before its row, deleted
        # after), so a PostgreSQL crash that loses one loses those too, and the next pass repairs what is left
        # (docs/hpo.md, "What a pass commits").
        query={"options": f"-csearch_path={SCHEMA} -csynchronous_commit=off"},
    ).render_as_string(hide_password=False)


def get_storage() -> Any:
    """The process's Optuna storage (created, with its tables, on first use)."""
    import optuna  # heavy (SQLAlchemy, alembic): only where a study is driven or shown

    url = storage_url()
    with _lock:
        storage = _storages.get(url)
        if storage is None:
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:  # the migration made it; a database restored without it too
                    cursor.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
                kwargs: dict[str, Any] = {"pool_pre_ping": True, "pool_size": 2, "max_overflow": 2}
            else:
                kwargs = {"connect_args": {"timeout": 30}}
            optuna.logging.set_verbosity(optuna.logging.WARNING)
            storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
            _storages[url] = storage
    return storage


def forget() -> None:
    """Drop this process's storages (their connection pools): what a restarted process starts from."""
    with _lock:
        for storage in _storages.values():
            storage.engine.dispose()
        _storages.clear()
        _studies.clear()


def gp_available() -> bool:
    """Optuna's GPSampler needs PyTorch in the portal's own environment."""
    return importlib.util.find_spec("torch") is not None


def make_sampler(study: Any, trials_so_far: int) -> Any:
    """The study's sampler. Samplers are made again for every pass of the driver, so the seed moves on with the
    number of trials asked (the same seed each pass would sample the same point again), except Sobol's, whose
    scrambling must stay the same for the whole sequence (Optuna keeps its position in the storage), and the grid's,
    whose seed shuffles the grid that the trials' stored grid ids index."""
    import numpy as np
    import optuna

    from apps.hpo.models import Algorithm
    from apps.hpo.space import grid

    # Mixed, not added: with seed + n, a study seeded 1 would sample what one seeded 0 samples from its second trial on.
    seed = int(np.random.SeedSequence([study.seed, trials_so_far]).generate_state(1)[0])
    algorithm = study.algorithm
    if algorithm == Algorithm.RANDOM:
        return optuna.samplers.RandomSampler(seed=seed)
    if algorithm == Algorithm.GRID:
        return optuna.samplers.GridSampler(grid(study.space), seed=study.seed)
    if algorithm == Algorithm.CMAES:
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    if algorithm == Algorithm.SOBOL:
        return optuna.samplers.QMCSampler(qmc_type="sobol", seed=study.seed, warn_independent_sampling=False)
    if algorithm == Algorithm.GP:
        return optuna.samplers.GPSampler(seed=seed)
    if algorithm == Algorithm.NSGA2:
        return optuna.samplers.NSGAIISampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


def make_pruner(study: Any) -> Any:
    import optuna

    from apps.hpo.models import EarlyStopping

    options = dict(study.early_stopping_settings or {})
    kind = study.early_stopping
    if kind == EarlyStopping.MEDIAN:
        return optuna.pruners.MedianPruner(**options)
    if kind == EarlyStopping.PERCENTILE:
        return optuna.pruners.PercentilePruner(**{"percentile": 25.0, **options})
    if kind == EarlyStopping.SUCCESSIVE_HALVING:
        return optuna.pruners.SuccessiveHalvingPruner(**options)
    if kind == EarlyStopping.HYPERBAND:
        return optuna.pruners.HyperbandPruner(**options)
    return optuna.pruners.NopPruner()


# The settings each early-stopping rule accepts (checked when a study is made), and their types.
PRUNER_SETTINGS: dict[str, dict[str, type]] = {
    "none": {},
    "median": {"n_startup_trials": int, "n_warmup_steps": int, "interval_steps": int, "n_min_trials": int},
    "percentile": {
        "percentile": float, "n_startup_trials": int, "n_warmup_steps": int, "interval_steps": int,
        "n_min_trials": int,
    },
    "successive_halving": {"min_resource": int, "reduction_factor": int, "min_early_stopping_rate": int},
    "hyperband": {"min_resource": int, "max_resource": int, "reduction_factor": int},
}  # fmt: skip


def load(study: Any, trials_so_far: int = 0) -> Any:
    """The Optuna study of a portal study, with its sampler and pruner."""
    import optuna

    key = (storage_url(), study.optuna_name)
    loaded = _studies.get(key)
    if loaded is None:
        loaded = optuna.load_study(study_name=study.optuna_name, storage=get_storage())
        _studies[key] = loaded
    loaded.sampler, loaded.pruner = make_sampler(study, trials_so_far), make_pruner(study)
    return loaded


def delete(optuna_names: list[str]) -> None:
    """Delete Optuna studies (and their trials) from the storage; one already gone is skipped."""
    import optuna

    for name in optuna_names:
        _studies.pop((storage_url(), name), None)
        try:
            optuna.delete_study(study_name=name, storage=get_storage())
        except KeyError:  # not there (a second delete, or a study made where the storage was lost)
            continue


def create(study: Any) -> Any:
    import optuna

    return optuna.create_study(
        study_name=study.optuna_name,
        storage=get_storage(),
        directions=[o["direction"] for o in study.objectives],
        load_if_exists=True,
    )
