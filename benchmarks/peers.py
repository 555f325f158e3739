"""Peer search engines for the replay benchmark (benchmarks/search_replay.py).

Each peer searches a discrete space (dimension -> value labels) by calling `evaluate` on
configurations until `budget` distinct ones were measured.  A repeated configuration is
answered from a cache and does not count; a peer stops anyway after 20 * budget trials, or
once every configuration of the space was measured.  The engines are optional dependencies
(`pip install optuna compileiq`), imported only when a peer runs.
"""

from __future__ import annotations

import math
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

Evaluate = Callable[[dict[str, str]], float]  # config (dimension -> label) -> time, lower is better
Peer = Callable[[dict[str, list[str]], Evaluate, int, int], None]

TRIALS_PER_BUDGET = 20


class BudgetSpent(Exception):
    """Raised by the replay's `evaluate` once the budget of distinct codes is spent: the run ends."""


class PeerUnavailable(Exception):
    """A peer cannot be imported or run offline; the message says why."""


class _Run:
    """Applies the shared budget rule: one evaluation per distinct config, a cap on trials."""

    def __init__(self, dims: dict[str, list[str]], evaluate: Evaluate, budget: int) -> None:
        self.names = tuple(dims)
        self.evaluate = evaluate
        # A space smaller than the budget ends the run once it is exhausted.
        self.target = min(budget, math.prod(len(labels) for labels in dims.values()))
        self.max_trials = TRIALS_PER_BUDGET * budget
        self.trials = 0
        self.times: dict[tuple[str, ...], float] = {}

    @property
    def left(self) -> int:
        """Distinct configs still to evaluate (0 once the trial cap is reached)."""
        return 0 if self.trials >= self.max_trials else self.target - len(self.times)

    def __call__(self, config: dict[str, str]) -> float:
        self.trials += 1
        key = tuple(config[name] for name in self.names)
        if key not in self.times:
            self.times[key] = self.evaluate(dict(zip(self.names, key, strict=True)))
        return self.times[key]


def optuna_tpe(dims: dict[str, list[str]], evaluate: Evaluate, budget: int, seed: int) -> None:
    """Optuna's TPESampler (default settings, seeded), one categorical parameter per dimension."""
    try:
        import optuna
    except ImportError as exc:
        raise PeerUnavailable(f"optuna is not installed ({exc})") from exc
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed))
    run = _Run(dims, evaluate, budget)
    while run.left:
        trial = study.ask()
        config = {name: trial.suggest_categorical(name, labels) for name, labels in dims.items()}
        # A repeat is told its cached time, so TPE learns from it without spending budget.
        study.tell(trial, run(config))


def compileiq_engine(dims: dict[str, list[str]], evaluate: Evaluate, budget: int, seed: int) -> None:
    """CompileIQ's default engine ("amber", a native NSGA-III genetic search built on pymoo).

    Driven through `Search.ask` / `Search.tell` with the manual worker, so CompileIQ never runs
    an objective itself (no Ray, no GPU, no network); each dimension is a `choice` of its labels.
    """
    try:
        from compileiq.backends import BackendError, EngineConfig, SearchSpaceExhaustedError
        from compileiq.ciq import Search
        from compileiq.search_spaces.base import choice
        from compileiq.types import SearchConfiguration, WorkerTypes
        from compileiq.utils.validation import INVALID_SCORE, Score
        from loguru import logger
    except ImportError as exc:
        raise PeerUnavailable(f"compileiq is not installed ({exc})") from exc
    # The native engine is its own top-level package, outside the "compileiq" logger prefix.
    logger.disable("compileiq")
    logger.disable("compileiq_native_runtime")

    run = _Run(dims, evaluate, budget)
    # CompileIQ's single-objective default pool is 32, which would spend small budgets on the
    # random first generation alone; shrink it so at least 4 generations fit (6 is its minimum).
    pool = max(6, min(32, budget // 4))
    with tempfile.TemporaryDirectory(prefix="peers-compileiq-") as cache, warnings.catch_warnings():
        # Expected with failed configs: the engine refills their places in the next batch.
        warnings.filterwarnings("ignore", r"\d+ failed evaluation", UserWarning)
        try:
            search = Search(
                objective_function=evaluate,  # never called: the manual worker leaves it to tell()
                search_space={name: choice(labels) for name, labels in dims.items()},
                # The trial cap bounds the generations, so the engine never ends the run itself.
                search_config=SearchConfiguration(generations=run.max_trials, pool_size=pool),
                worker_type=WorkerTypes.MANUAL,
                engine=EngineConfig(name="amber", options={"seed": seed}),
                cache_folder=Path(cache),
                exit_on_failure=False,
                disable_progress_bar=True,
            )
        except BackendError as exc:
            raise PeerUnavailable(f"compileiq's amber engine cannot start ({exc})") from exc
        while run.left:
            # The engine's own batch size: a new generation, or refills for failed candidates.
            try:
                candidates = search.ask()
            except SearchSpaceExhaustedError:
                # That batch is larger than the untried rest of the space (the engine never
                # re-issues a config) or its operators found no untried offspring: ask for
                # just what the budget still needs, and stop if even that fails.
                try:
                    candidates = search.ask(run.left)
                except SearchSpaceExhaustedError:
                    break
            scores = []
            for candidate in candidates[: run.left]:
                measured = run(candidate.params)
                # A failed measurement (inf/nan) is reported as CompileIQ's failure marker.
                score = measured if math.isfinite(measured) else INVALID_SCORE
                scores.append(Score(score=score, param_id=candidate.param_id, num_objectives=1))
            search.tell(scores)


PEERS: dict[str, Peer] = {"optuna-tpe": optuna_tpe, "compileiq": compileiq_engine}
