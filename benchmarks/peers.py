"""Peer search engines for the replays (benchmarks/search_replay.py), run through `tune`'s loop.

Each peer searches a discrete space (dimension -> value labels) by asking an `Ask` for the time
of configurations.  `PeerStrategy` makes the engine a strategy of the search loop
(compileiq_build.search.loop.drive): every configuration it asks for is proposed, compiled and
measured there, so the budget (distinct machine codes), the candidate bound and the free answer
for a code measured before are the loop's, as for our strategies.  The engines are optional
dependencies (`pip install -e '.[bench]'`: optuna, compileiq, smac, kernel_tuner), imported only
when a peer runs; SMAC 2.4 fits its own random forest on scikit-learn, so it needs neither pyrfr
nor swig.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import queue
import random
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from compileiq_build.build.space import Config
from compileiq_build.search.loop import CANDIDATES_PER_EVALUATION
from compileiq_build.search.strategies import Context, Proposal, Stop, Trial


class Ask(Protocol):
    """What an engine asks: a configuration's time (lower is better; inf once the search ended, or
    where it failed), and `left`, the evaluations the loop has left (0 once it ended)."""

    left: int

    def __call__(self, config: dict[str, str]) -> float: ...


Peer = Callable[[dict[str, list[str]], Ask, int, int], None]  # (dims, ask, budget, seed)


class PeerUnavailable(Exception):
    """A peer cannot be imported or run offline; the message says why."""


class PeerStrategy:
    """A peer engine as a strategy of the search loop: it runs in a thread of its own, and each
    configuration it asks for is the next proposal (`config_of` maps its labels to the space's
    configuration, e.g. a table's nearest row); its answer is the proposal's outcome as the loop
    measured it (`time_of`: the time of a measured trial; default its ratio to the baseline).
    `close` ends the engine once the loop has ended."""

    def __init__(self, name: str, peer: Peer, dims: dict[str, list[str]], budget: int, seed: int,
                 config_of: Callable[[dict[str, str]], Config],
                 time_of: Callable[[Trial], float] = lambda trial: trial.ratio or math.inf) -> None:
        self.name, self._peer, self._dims, self._budget, self._seed = name, peer, dims, budget, seed
        self._config_of, self._time_of = config_of, time_of
        self.left = budget
        self._questions: queue.Queue[dict[str, str] | None] = queue.Queue()  # None: the engine ended
        self._answers: queue.Queue[float] = queue.Queue()
        self._asked: Config | None = None  # the proposal whose time the engine waits for
        self._thread: threading.Thread | None = None
        self._ended = self._closed = False
        self._error: BaseException | None = None

    def __call__(self, config: dict[str, str]) -> float:
        """The engine's question (in its thread): the time of `config`."""
        if self._closed:
            return math.inf
        self._questions.put(dict(config))
        return self._answers.get()

    def _engine(self) -> None:
        try:
            self._peer(self._dims, self, self._budget, self._seed)
        except BaseException as exc:  # raised in the loop's thread by `propose`
            self._error = exc
        finally:
            self._questions.put(None)

    def propose(self, context: Context) -> Proposal | Stop:
        self.left = max(0, self._budget - context.spent)
        if self._asked is not None:
            outcome = context.outcome(self._asked)
            measured = outcome is not None and outcome.ratio is not None
            self._answers.put(self._time_of(outcome) if outcome is not None and measured else math.inf)
            self._asked = None
        if self._thread is None:
            self._thread = threading.Thread(target=self._engine, name=self.name, daemon=True)
            self._thread.start()
        question = None if self._ended else self._questions.get()
        if question is None:
            self._ended = True
            if (error := self._error) is not None:
                self._error = None
                raise error
            return Stop(f"{self.name} ended its search")
        self._asked = self._config_of(question)
        return Proposal(self._asked, self.name)

    def close(self) -> None:
        """Answer the engine inf from now on, and wait for it to end."""
        self._closed, self.left = True, 0
        if self._thread is None:
            return
        if self._asked is not None:
            self._answers.put(math.inf)
            self._asked = None
        while not self._ended:
            if self._questions.get() is None:
                self._ended = True
            else:
                self._answers.put(math.inf)
        self._thread.join()


class _Penalty:
    """A finite cost for a failed (inf) config, for engines whose surrogate cannot fit inf:
    twice the worst finite time seen so far (1.0 before any, as the unit is unknown)."""

    def __init__(self) -> None:
        self.worst = 0.0

    def __call__(self, t: float) -> float:
        if math.isfinite(t):
            self.worst = max(self.worst, t)
            return t
        return 2 * self.worst if self.worst > 0 else 1.0


def optuna_tpe(dims: dict[str, list[str]], ask: Ask, budget: int, seed: int) -> None:
    """Optuna's TPESampler (default settings, seeded), one categorical parameter per dimension."""
    try:
        import optuna
    except ImportError as exc:
        raise PeerUnavailable(f"optuna is not installed ({exc})") from exc
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed))
    while ask.left:
        trial = study.ask()
        config = {name: trial.suggest_categorical(name, labels) for name, labels in dims.items()}
        # A repeat is answered free by the loop (its code was measured), so TPE learns from it.
        study.tell(trial, ask(config))


def compileiq_engine(dims: dict[str, list[str]], ask: Ask, budget: int, seed: int) -> None:
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

    # CompileIQ's single-objective default pool is 32, which would spend small budgets on the
    # random first generation alone; shrink it so at least 4 generations fit (6 is its minimum).
    pool = max(6, min(32, budget // 4))
    with tempfile.TemporaryDirectory(prefix="peers-compileiq-") as cache, warnings.catch_warnings():
        # Expected with failed configs: the engine refills their places in the next batch.
        warnings.filterwarnings("ignore", r"\d+ failed evaluation", UserWarning)
        try:
            search = Search(
                objective_function=ask,  # never called: the manual worker leaves it to tell()
                search_space={name: choice(labels) for name, labels in dims.items()},
                # The loop's candidate bound bounds the generations: the engine never ends the run.
                search_config=SearchConfiguration(generations=CANDIDATES_PER_EVALUATION * budget,
                                                  pool_size=pool),
                worker_type=WorkerTypes.MANUAL,
                engine=EngineConfig(name="amber", options={"seed": seed}),
                cache_folder=Path(cache),
                exit_on_failure=False,
                disable_progress_bar=True,
            )
        except BackendError as exc:
            raise PeerUnavailable(f"compileiq's amber engine cannot start ({exc})") from exc
        while ask.left:
            # The engine's own batch size: a new generation, or refills for failed candidates.
            try:
                candidates = search.ask()
            except SearchSpaceExhaustedError:
                # That batch is larger than the untried rest of the space (the engine never
                # re-issues a config) or its operators found no untried offspring: ask for
                # just what the budget still needs, and stop if even that fails.
                try:
                    candidates = search.ask(ask.left)
                except SearchSpaceExhaustedError:
                    break
            scores = []
            for candidate in candidates[: ask.left]:
                measured = ask(candidate.params)
                # A failed measurement (inf/nan) is reported as CompileIQ's failure marker.
                score = measured if math.isfinite(measured) else INVALID_SCORE
                scores.append(Score(score=score, param_id=candidate.param_id, num_objectives=1))
            search.tell(scores)


def smac_hpo(dims: dict[str, list[str]], ask: Ask, budget: int, seed: int) -> None:
    """SMAC3's HyperparameterOptimizationFacade (random-forest BO; its BlackBoxFacade is the GP
    one), one categorical hyperparameter per dimension, driven through `ask` / `tell`.

    Defaults but two: each config is run once (`deterministic`, and `max_config_calls=1`, as a
    time is answered once), and the Sobol initial design gets SMAC's own 25% cap (`max_ratio`)
    applied to the budget rather than to `n_trials`, here the loop's candidate bound: at most
    `budget // 4` configs (at least 2) instead of 10 per dimension.  A failed config is told as
    CRASHED with twice the worst finite time as its cost (the forest cannot fit inf).  A seed
    repeats its run within one interpreter only: SMAC's choices also follow Python's per-process
    string hashing (fix PYTHONHASHSEED to repeat it across processes).
    """
    try:
        from ConfigSpace import Categorical, ConfigurationSpace
        from smac import HyperparameterOptimizationFacade, Scenario
        from smac.main.exceptions import ConfigurationSpaceExhaustedException
        from smac.runhistory.dataclasses import TrialValue
        from smac.runhistory.enumerations import StatusType
    except ImportError as exc:
        raise PeerUnavailable(f"smac is not installed ({exc})") from exc
    # logging_level=False below leaves the root logger alone; this quiets SMAC's own messages
    # (e.g. "could not find any new trials" on a small, exhausted space).
    logging.getLogger("smac").setLevel(logging.CRITICAL)

    penalty = _Penalty()
    space = ConfigurationSpace(seed=seed)
    space.add([Categorical(name, labels) for name, labels in dims.items()])
    with tempfile.TemporaryDirectory(prefix="peers-smac-") as out:
        scenario = Scenario(space, output_directory=Path(out), deterministic=True,
                            n_trials=CANDIDATES_PER_EVALUATION * budget, seed=seed)
        facade = HyperparameterOptimizationFacade
        initial = max(2, min(10 * len(dims), budget // 4))
        smac = facade(
            scenario,
            target_function=lambda config, seed=0: math.inf,  # never called: ask/tell runs the trials
            initial_design=facade.get_initial_design(scenario, n_configs=initial),
            intensifier=facade.get_intensifier(scenario, max_config_calls=1),
            logging_level=False,
            overwrite=True,
        )
        while ask.left:
            try:
                info = smac.ask()
            except (StopIteration, ConfigurationSpaceExhaustedException):  # it found no untried config
                break
            t = ask(dict(info.config))
            if ask.left:  # else the search ended: nothing more to learn
                status = StatusType.SUCCESS if math.isfinite(t) else StatusType.CRASHED
                smac.tell(info, TrialValue(cost=penalty(t), status=status))


def _kernel_tuner(strategy: str, options: Callable[[int], dict[str, Any]]) -> Peer:
    """A Kernel Tuner strategy, run through its internal `tune(searchspace, runner, tuning_options)`
    with a runner that answers each config through `ask` (no kernel, no GPU, no cache file).

    Parameters are named p0, p1, ... with the label indices 0..n-1 as values (its BO needs
    numbers).  `options(budget)` gives the strategy options; `max_fevals` is the space's size
    (counted in distinct configs), so the loop ends the run: once it has, the runner answers None,
    which Kernel Tuner treats as "budget exhausted" and stops.  Failed configs get a finite time
    (`_Penalty`): its BO fits a GP on the times, and Kernel Tuner's own failure marker is the
    largest float.
    """

    def peer(dims: dict[str, list[str]], ask: Ask, budget: int, seed: int) -> None:
        try:
            import numpy as np
            from kernel_tuner.interface import Options, _tuning_options, strategy_map
            from kernel_tuner.runners.runner import Runner
            from kernel_tuner.searchspace import Searchspace
            from kernel_tuner.util import TuningBudget
            module = strategy_map[strategy]
            module.tune  # noqa: B018 - the strategy module is imported lazily: fail here, not mid-run
        except ImportError as exc:
            raise PeerUnavailable(f"kernel_tuner's {strategy} cannot be imported ({exc})") from exc

        penalty = _Penalty()
        seen: set[tuple[int, ...]] = set()  # configs answered: Kernel Tuner counts its fevals in those
        names = list(dims)
        tune_params = {f"p{i}": list(range(len(dims[name]))) for i, name in enumerate(names)}

        class EvaluateRunner(Runner):
            """Kernel Tuner's runner interface over `ask`: one result dict per config, None once done."""

            def __init__(self) -> None:
                super().__init__()
                self.dev = Options(max_threads=1_000_000_000)  # no block sizes, so no thread limit

            def get_device_info(self) -> Options:
                return self.dev

            def get_environment(self, tuning_options: Options) -> dict[str, Any]:
                return {}

            def run(self, parameter_space, tuning_options: Options) -> list[dict[str, Any] | None]:
                results: list[dict[str, Any] | None] = []
                for element in parameter_space:
                    if not ask.left:
                        results.append(None)
                        continue
                    config = {name: dims[name][int(v)] for name, v in zip(names, element, strict=True)}
                    t = ask(config)
                    if not ask.left and not math.isfinite(t):  # the search ended before answering
                        results.append(None)
                        continue
                    if (key := tuple(int(v) for v in element)) not in seen:
                        seen.add(key)
                        tuning_options.budget.add_evaluations(1)
                    results.append({**dict(zip(tune_params, element, strict=True)), "time": penalty(t)})
                return results

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its notes on popsize and on pruning the space
            searchspace = Searchspace(tune_params, None, 1_000_000_000)
        tuning_options = Options({key: None for key in _tuning_options})
        tuning_options.update(
            tune_params=tune_params, restrictions=None, restrictions_unmodified=None, objective=["time"],
            objective_higher_is_better=[False], verbose=False, cache={}, cachefile=None, simulation_mode=True,
            seed=seed, strategy_options=Options(options(budget), max_fevals=searchspace.size),
            budget=TuningBudget(max_fevals=searchspace.size),
        )
        # Its strategies draw from the global generators of random and numpy.
        random.seed(seed)
        np.random.seed(seed)
        with _seeded_lhs(strategy, seed), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                module.tune(searchspace, EvaluateRunner(), tuning_options)
            except ImportError as exc:  # its BO imports scikit-learn only when it starts
                raise PeerUnavailable(f"kernel_tuner's {strategy} lacks a dependency ({exc})") from exc

    peer.__doc__ = f"Kernel Tuner's {strategy} strategy (see `_kernel_tuner`)."
    return peer


@contextlib.contextmanager
def _seeded_lhs(strategy: str, seed: int) -> Iterator[None]:
    """Kernel Tuner's BO draws its Latin hypercube from SciPy unseeded (fresh OS entropy on every
    run), so the peer would not be reproducible: give that draw the seed, for this run only."""
    if strategy != "bayes_opt":
        yield
        return
    from kernel_tuner.strategies import bayes_opt

    unseeded = bayes_opt.LatinHypercube
    bayes_opt.LatinHypercube = functools.partial(unseeded, rng=seed)
    try:
        yield
    finally:
        bayes_opt.LatinHypercube = unseeded


def _initial_samples(budget: int) -> int:
    """Kernel Tuner's BO samples 20 configs before modelling, a whole budget of 20: apply the cap
    the smac peer uses (SMAC's 25% of the budget, at least 2)."""
    return max(2, min(20, budget // 4))


def _population(budget: int) -> int:
    """Kernel Tuner's GA breeds 26 per generation; as for compileiq, shrink that so 4 generations
    fit in the budget (4 at least, for crossover to mix), and let the budget, not `maxiter`, end the run."""
    return max(4, min(26, budget // 4))


PEERS: dict[str, Peer] = {
    "optuna-tpe": optuna_tpe,
    "compileiq": compileiq_engine,
    "smac": smac_hpo,
    # Its default method, "multi-ultrafast", refits the GP only when the last evaluation took 5 times
    # longer than the last prediction: always for real builds, by the clock's chance for the
    # replay's instant lookups.  "multi-fast" is that default as it runs on real builds, deterministic.
    "kernel-tuner-bo": _kernel_tuner("bayes_opt", lambda budget: {
        "popsize": _initial_samples(budget), "method": "multi-fast"}),
    "kernel-tuner-ga": _kernel_tuner("genetic_algorithm", lambda budget: {
        "popsize": _population(budget), "maxiter": CANDIDATES_PER_EVALUATION * budget}),
}
