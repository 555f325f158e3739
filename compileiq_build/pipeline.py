"""The search loop: proposals handed out to the workers, compiles overlapped with measurement.

Each worker keeps its slots compiling the next proposals while its GPU measures one
candidate at a time; workers on several GPUs measure at the same time.  For CPU targets
a worker compiles a batch, then measures it: compilers would disturb CPU benchmarks.

Proposals are made one at a time under a lock, each as if the candidates still in
flight had measured neutral (the "constant liar"), so strategies stay stateless and a
resumed run continues where it stopped.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait

from compileiq_build.evaluate import Built, Evaluator
from compileiq_build.progress import Reporter
from compileiq_build.search import Config, Strategy, Trial, config_key
from compileiq_build.space import FlagSpace
from compileiq_build.workers import Worker


class Proposals:
    """Hands the next configuration to whichever worker has a free slot."""

    def __init__(self, strategy: Strategy, space: FlagSpace, trials: Callable[[], list[Trial]],
                 budget: int, halt: Callable[[], str]) -> None:
        self.strategy = strategy
        self.space = space
        self.trials = trials  # the measured history, from the store
        self.budget = budget
        self.halt = halt  # why to stop now (interrupted, out of time), or ""
        self.in_flight: list[Config] = []
        self.finished = ""  # why the search ended, once it has
        self._cond = threading.Condition()

    def next(self, may_wait: bool) -> Config | None:
        """The next configuration, or None.  A caller with nothing in flight may wait for
        other workers' results when the strategy needs them to propose more."""
        with self._cond:
            while not self.finished:
                if why := self.halt():
                    self._finish(why)
                    break
                trials = self.trials()
                # A candidate being measured is in the store already: count it once.
                recorded = {config_key(t.config) for t in trials}
                pending = [c for c in self.in_flight if config_key(c) not in recorded]
                if len(trials) + len(pending) >= self.budget:
                    if not self.in_flight:
                        self._finish(f"budget of {self.budget} evaluations reached")
                    return None
                assumed = trials + [Trial(c, 1.0, False) for c in pending]
                config = self.strategy.propose(self.space, assumed)
                if config is not None:
                    self.in_flight.append(config)
                    return config
                if not self.in_flight:
                    why = getattr(self.strategy, "stop_reason", "") or "nothing more to try"
                    self._finish(f"strategy {self.strategy.name} stops: {why}")
                    break
                if not may_wait:
                    return None
                self._cond.wait()
            return None

    def done(self, config: Config) -> None:
        with self._cond:
            self.in_flight.remove(config)
            self._cond.notify_all()

    def abort(self, why: str) -> None:
        with self._cond:
            self._finish(why)

    def _finish(self, why: str) -> None:
        self.finished = self.finished or why
        self._cond.notify_all()


def run_search(evaluator: Evaluator, workers: Sequence[Worker], proposals: Proposals,
               report: Reporter, overlap: bool) -> None:
    """Every worker works until the proposals end; with `overlap` (GPU benchmarks) its slots
    compile while it measures.  The first worker runs in this thread, so that a second
    Ctrl-C reaches the benchmark it is running."""
    space, strategy = proposals.space, proposals.strategy
    name = evaluator.target.name

    def work(worker: Worker) -> None:
        pending: deque[tuple[Config, Future[Built]]] = deque()
        free = list(range(worker.slots))
        with ThreadPoolExecutor(worker.slots, thread_name_prefix=f"compile-{worker.name}") as compiles:
            while True:
                if overlap or not pending:
                    started = 0
                    while free and (config := proposals.next(may_wait=not pending)) is not None:
                        slot = free.pop(0)
                        pending.append((config, compiles.submit(evaluator.build, space.flags(config),
                                                                worker, slot)))
                        started += 1
                    if started > 1:
                        where = f" for {worker.name}" if len(workers) > 1 else ""
                        report.phase(f"{name}: compiling {started} candidates at once{where}")
                if not pending:
                    return
                if not overlap:
                    wait([future for _, future in pending])
                config, future = pending.popleft()
                try:
                    if proposals.finished or proposals.halt():
                        continue  # stopping: compiled but not measured, nothing is recorded
                    built = future.result()
                    report.evaluating(name, len(proposals.trials()), config_key(config))
                    outcome = evaluator.evaluate(config, space.flags(config), strategy.name, "search", built,
                                                 numerics=space.changes_numerics(config))
                    report.outcome(name, outcome)
                    free.append(built.compiled.slot)
                finally:
                    proposals.done(config)

    def guarded(worker: Worker) -> None:
        try:
            work(worker)
        except BaseException as exc:
            proposals.abort(f"{worker.name} failed: {exc}")
            raise

    with ThreadPoolExecutor(max(1, len(workers) - 1), thread_name_prefix="worker") as others:
        futures = [others.submit(guarded, w) for w in workers[1:]]
        try:
            guarded(workers[0])
        finally:
            errors = [f.exception() for f in futures]
    for error in errors:
        if error is not None:
            raise error
