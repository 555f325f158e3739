"""The search loop: proposals handed out to the workers, compiles overlapped with measurement.

Each worker keeps its slots compiling the next proposals while its GPU measures one
candidate at a time; workers on several GPUs measure at the same time.  For CPU targets
a worker compiles a batch, then measures it: compilers would disturb CPU benchmarks.

Proposals are made one at a time under a lock; the candidates still in flight reach the
strategy as pending trials (with their machine code once compiled), so strategies stay
stateless and a resumed run continues where it stopped.

Compiling ahead (GPU targets, a strategy with `scout`): while the GPUs measure, build trees of
their own (the first worker's scout trees, one compile each at a time) compile the
configurations the strategy names next, up to `compile_ahead` per evaluation started.  Each is
stored with its machine code and compile-time features (phase scout) and reaches the strategy
as a known candidate: its code may be one measured already (no GPU time then), and the model
predicts it from its features.

Vetting (a strategy with `vet`): a proposal, once compiled, goes to the GPU only if the
strategy still wants it now that its code and features are known; one it turns down is stored
as compiled and not measured (phase scout), and counts against the candidate bound.

`drive` runs the same loop in one thread with the caller's compile and measure (replays, open
evaluations): the same `Proposals`, so the same budget, candidate bound, vetting and compiling ahead.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace

from compileiq_build.build.space import DEFAULT, Config, FlagSpace, config_key
from compileiq_build.decide.clock import Clock
from compileiq_build.evaluate.evaluator import Built, Evaluator
from compileiq_build.results.progress import Reporter
from compileiq_build.run.worker import Worker
from compileiq_build.search.strategies import Candidate, Context, Proposal, Strategy, Trial
from compileiq_build.search.strategies.base import Scouting, Vetting
from compileiq_build.store.database import INTERRUPTED

# Candidates compiled per evaluation of the budget, at most: most flag combinations compile to
# machine code already measured, and those cost no GPU time.
CANDIDATES_PER_EVALUATION = 10
AHEAD_POLL_S = 2.0  # how often compiling ahead asks again when the strategy named nothing


class Proposals:
    """Hands the next configuration to whichever worker has a free slot.

    The budget counts evaluations: distinct machine codes measured.  A candidate whose code was
    measured before (or is the baseline's) costs a compile and no GPU time; the search also ends
    after `max_candidates` compiles, so that a strategy whose proposals keep compiling to known
    code cannot go on forever."""

    def __init__(self, strategy: Strategy, space: FlagSpace,
                 history: Callable[[], tuple[list[Trial], list[Candidate]]], budget: int,
                 baseline_code: str = "", max_candidates: int | None = None,
                 compile_ahead: int = 0, clock: Clock | None = None,
                 baseline_features: Mapping[str, float] | None = None, closed: bool = False) -> None:
        self.strategy = strategy
        self.closed = closed  # the strategy chooses among the known candidates only (a replay's table)
        self.baseline_features = dict(baseline_features or {})  # the baseline code's (the prior reads them)
        self.space = space
        self.history = history  # the search so far, from the store: trials, and the compiled candidates
        self.budget = budget
        self.max_candidates = max_candidates or CANDIDATES_PER_EVALUATION * budget
        self.clock = clock or Clock()  # why to stop now (Ctrl-C, out of time), or ""
        self.baseline_code = baseline_code
        self.in_flight: dict[str, tuple[Proposal, str]] = {}  # key -> (proposal, code once compiled)
        self.finished = ""  # why the search ended, once it has
        self.ahead_per_evaluation = compile_ahead  # compiled ahead per evaluation started, at most
        self.ahead_limit = compile_ahead * budget  # configurations compiled ahead, at most
        self.ahead: dict[str, str] = {}  # compiled ahead in this run: key -> code ('' did not build)
        self.scouting: set[str] = set()  # being compiled ahead now
        self.turned_down = 0  # proposals compiled in this run and not measured (`vet`)
        self._cond = threading.Condition()

    def context(self) -> Context:
        trials, known = self.history()
        # A candidate being measured is in the store already: count it once.
        recorded = {config_key(t.config) for t in trials}
        pending = [Trial(p.config, None, False, code=code, pending=True, phase=p.phase, parent=p.parent)
                   for key, (p, code) in self.in_flight.items() if key not in recorded]
        return Context(self.space, [*trials, *pending], known, closed=self.closed, budget=self.budget,
                       baseline_code=self.baseline_code, baseline_features=self.baseline_features)

    def progress(self) -> tuple[int, float]:
        """Evaluations finished (distinct machine codes measured) and the best speedup found
        faster so far (1.0 before any), those of earlier runs too."""
        trials, _ = self.history()
        return (Context(self.space, trials, baseline_code=self.baseline_code).spent,
                max([1.0, *(1 / t.ratio for t in trials if t.faster and t.ratio)]))

    def next(self, may_wait: bool) -> Proposal | None:
        """The next proposal, or None.  A caller with nothing in flight may wait for other
        workers' results when the strategy needs them to propose more."""
        with self._cond:
            while not self.finished:
                context = self.context()
                if faster := [t for _, t in context.measured if t.faster]:
                    # Something to validate: the reserve for validating these and minimizing.
                    self.clock.winner(len(faster), max(sum(v != DEFAULT for v in t.config.values())
                                                       for t in faster))
                if why := self.clock.why_stop():
                    self._finish(why)
                    break
                if (context.spent >= self.budget
                        or len(context.history) + self.turned_down >= self.max_candidates):
                    if not self.in_flight:
                        self._finish(f"budget of {self.budget} evaluations reached"
                                     if context.spent >= self.budget
                                     else f"{self.max_candidates} candidates compiled")
                    return None
                result = self.strategy.propose(context)
                if isinstance(result, Proposal):
                    self.in_flight[config_key(result.config)] = (result, "")
                    return result
                if not self.in_flight:
                    self._finish(f"strategy {self.strategy.name} stops: {result.reason}")
                    break
                if not may_wait:
                    return None
                self._cond.wait()
            return None

    def vet(self, proposal: Proposal, candidate: Candidate) -> str:
        """Why the strategy turns down a proposal now that it is compiled (its `vet`), or ""."""
        if not isinstance(self.strategy, Vetting):
            return ""
        key = config_key(proposal.config)
        with self._cond:
            context = self.context()
        history = [t for t in context.history if config_key(t.config) != key]
        seen = replace(context, history=history, known=[*context.known, candidate])
        why = self.strategy.vet(seen, proposal, candidate)
        if why:
            with self._cond:
                self.turned_down += 1
        return why

    def next_ahead(self) -> Config | None:
        """The next configuration to compile ahead, reserved for the caller until it reports
        the compile (`compiled_ahead`, `drop_ahead`); None: no `scout`, nothing to name, done,
        the budget spent, or `compile_ahead` per evaluation started compiled or compiling."""
        strategy = self.strategy
        if not isinstance(strategy, Scouting):
            return None
        with self._cond:
            if not self._ahead_room(context := self.context()):
                return None
            count = 1 + len(self.in_flight) + len(self.scouting)
        named = strategy.scout(context, count)  # outside the lock: proposing goes on meanwhile
        with self._cond:
            if not self._ahead_room(context):  # another tree may have taken the last room
                return None
            busy = {*self.in_flight, *self.ahead, *self.scouting}
            for config in named:
                if (key := config_key(config)) not in busy:
                    self.scouting.add(key)
                    return config
        return None

    def _ahead_room(self, context: Context) -> bool:
        """Whether one more configuration may be compiled ahead now (under the lock)."""
        taken = len(self.ahead) + len(self.scouting)
        return (not self.finished and not self.clock.why_stop() and context.spent < self.budget
                and taken < min(self.ahead_limit, self.ahead_per_evaluation * (context.spent + 1)))

    def compiled_ahead(self, config: Config, code: str) -> None:
        with self._cond:
            key = config_key(config)
            self.scouting.discard(key)
            self.ahead[key] = code
            self._cond.notify_all()  # a worker waiting for news may propose now

    def drop_ahead(self, config: Config) -> None:
        """A configuration reserved to compile ahead that was not compiled."""
        with self._cond:
            self.scouting.discard(config_key(config))

    def ahead_open(self) -> bool:
        return not self.finished and len(self.ahead) < self.ahead_limit

    def close_ahead(self) -> None:
        with self._cond:
            self.ahead_limit = 0
            self._cond.notify_all()

    def wait(self, seconds: float) -> None:
        """Until something changes (a result, a compile ahead), at most `seconds`."""
        with self._cond:
            if self.ahead_open():
                self._cond.wait(seconds)

    def compiled(self, config: Config, code: str) -> None:
        """A candidate in flight was compiled: its code is known before it is measured."""
        with self._cond:
            key = config_key(config)
            if key in self.in_flight:
                self.in_flight[key] = (self.in_flight[key][0], code)

    def done(self, config: Config) -> None:
        with self._cond:
            self.in_flight.pop(config_key(config), None)
            self._cond.notify_all()

    def abort(self, why: str) -> None:
        with self._cond:
            self._finish(why)

    def _finish(self, why: str) -> None:
        self.finished = self.finished or why
        self._cond.notify_all()


@dataclass(frozen=True)
class Measured:
    """What measuring a compiled candidate gave (`drive`'s `measure`)."""

    ratio: float | None  # candidate/baseline cost; None: the measurement failed
    faster: bool  # significantly faster than the baseline
    spread: float | None = None  # relative half-width of the ratio's interval


def drive(strategy: Strategy, space: FlagSpace, budget: int, compile: Callable[[Config], Candidate],
          measure: Callable[[Config, str], Measured], *, baseline_code: str,
          baseline_features: Mapping[str, float] | None = None, known: Sequence[Candidate] = (),
          closed: bool = False, compile_ahead: int = 0, max_candidates: int | None = None) -> Proposals:
    """The search loop of `tune` in this thread, compiling and measuring through the caller's
    callables: replays and evaluations answered from tables or models instead of a GPU.

    The accounting is `Proposals`', as in `run_search`: the budget in distinct machine codes, the
    candidate bound (default CANDIDATES_PER_EVALUATION x budget), vetting, compiling ahead.  Each
    step first compiles what the strategy's `scout` names, up to `compile_ahead` per evaluation
    started (tune does so while the GPU measures one), then the next proposal.  A proposal the
    strategy's `vet` turns down stays a known candidate; one of a code measured before (or the
    baseline's) takes that measurement; one that did not build counts an evaluation, as in tune;
    `measure` is asked of new codes only.
    `compile(config)`: the candidate with its code ("": it did not build) and compile-time
    features.  `measure(config, code)`: its ratio to the baseline.  `known`: candidates known from
    the start (a table's rows: the pool of a `closed` context; code "" until compiled).
    Returns the proposals: `finished` says why the search ended, `history()` gives the trials in
    the order measured and the known candidates."""
    trials: list[Trial] = []
    pool = {config_key(space.full_config(c.config)): c for c in known}

    def learn(candidate: Candidate) -> None:
        if candidate.code:
            pool[config_key(space.full_config(candidate.config))] = candidate

    proposals = Proposals(strategy, space, lambda: (list(trials), list(pool.values())), budget,
                          baseline_code=baseline_code, max_candidates=max_candidates,
                          compile_ahead=compile_ahead, baseline_features=baseline_features, closed=closed)
    while True:
        while (config := proposals.next_ahead()) is not None:
            learn(ahead := compile(config))
            proposals.compiled_ahead(config, ahead.code)
        if (proposal := proposals.next(may_wait=False)) is None:
            return proposals
        candidate = compile(proposal.config)
        proposals.compiled(proposal.config, candidate.code)
        if not (candidate.code and proposals.vet(proposal, candidate)):
            trials.append(_measured(proposal, candidate.code, proposals.context(), measure))
        learn(candidate)
        proposals.done(proposal.config)


def _measured(proposal: Proposal, code: str, context: Context,
              measure: Callable[[Config, str], Measured]) -> Trial:
    """The proposal's trial: the measurement of its code where taken, else a new one."""
    def trial(ratio: float | None, faster: bool, spread: float | None = None) -> Trial:
        return Trial(proposal.config, ratio, faster, spread, code, phase=proposal.phase,
                     parent=proposal.parent)

    if not code:
        return trial(None, False)  # it did not build
    if (twin := context.by_code.get(code)) is not None:
        return trial(twin.ratio, twin.faster, twin.spread)
    m = measure(proposal.config, code)
    return trial(m.ratio, m.faster, m.spread)


def run_search(evaluator: Evaluator, workers: Sequence[Worker], proposals: Proposals,
               report: Reporter, overlap: bool) -> None:
    """Every worker works until the proposals end; with `overlap` (GPU benchmarks) its slots
    compile while it measures.  The first worker runs in this thread, so that a second
    Ctrl-C reaches the benchmark it is running."""
    search = _Search(evaluator, workers, proposals, report, overlap)
    scouts = [(w, s) for w in workers for s in w.scout_slots] if overlap and proposals.ahead_limit else []
    jobs = scout_jobs(evaluator.jobs, len(scouts))
    scouting = [threading.Thread(target=search.ahead, args=(w, s, jobs), name=f"compile-ahead-{i}",
                                 daemon=True) for i, (w, s) in enumerate(scouts)]
    for thread in scouting:
        thread.start()
    with ThreadPoolExecutor(max(1, len(workers) - 1), thread_name_prefix="worker") as others:
        futures = [others.submit(search.guarded, w) for w in workers[1:]]
        try:
            search.guarded(workers[0])
        finally:
            errors = [f.exception() for f in futures]
            proposals.close_ahead()  # the search is over: the compiles ahead in progress are the last
            for thread in scouting:
                thread.join()
    for error in errors:
        if error is not None:
            raise error


def scout_jobs(jobs: int | None, trees: int) -> int | None:
    """Ninja's parallelism in each tree that compiles ahead, given a candidate tree's (`jobs`):
    the trees share one candidate tree's cores, so a target of many sources compiles ahead on no
    more cores than one tree took, and one of a single source in `trees` builds at once."""
    if trees <= 1:
        return jobs
    return max(1, (jobs or os.cpu_count() or 1) // trees)


class _Search:
    """What each worker's thread does in `run_search`: compile proposals in its slots, measure
    them one at a time; and, in a thread of its own, compile ahead."""

    def __init__(self, evaluator: Evaluator, workers: Sequence[Worker], proposals: Proposals,
                 report: Reporter, overlap: bool) -> None:
        self.evaluator, self.workers, self.proposals = evaluator, workers, proposals
        self.report, self.overlap = report, overlap
        self.space, self.strategy = proposals.space, proposals.strategy
        self.name = evaluator.target.name

    def compile_one(self, config: Config, worker: Worker, slot: int) -> Built:
        built = self.evaluator.build(self.space.flags(config), worker, slot)
        self.proposals.compiled(config, built.compiled.digest)
        return built

    def guarded(self, worker: Worker) -> None:
        try:
            self.work(worker)
        except BaseException as exc:
            self.proposals.abort(f"{worker.name} failed: {exc}")
            raise

    def work(self, worker: Worker) -> None:
        pending: deque[tuple[Proposal, Future[Built]]] = deque()
        free = list(range(worker.slots))
        with ThreadPoolExecutor(worker.slots, thread_name_prefix=f"compile-{worker.name}") as compiles:
            while True:
                if self.overlap or not pending:
                    self._start_compiles(worker, compiles, pending, free)
                if not pending:
                    return
                if not self.overlap:
                    wait([future for _, future in pending])
                proposal, future = pending.popleft()
                try:
                    if why := self.proposals.finished or self.proposals.clock.why_stop():
                        self.proposals.abort(why)  # the search ends saying why, whichever slot sees it
                        continue  # stopping: compiled but not measured, nothing is recorded
                    free.append(self._measure(proposal, future.result()))
                finally:
                    self.proposals.done(proposal.config)

    def _start_compiles(self, worker: Worker, compiles: ThreadPoolExecutor,
                        pending: deque[tuple[Proposal, Future[Built]]], free: list[int]) -> None:
        """A compile of the next proposal in each free slot of the worker."""
        started = 0
        while free and (proposal := self.proposals.next(may_wait=not pending)) is not None:
            slot = free.pop(0)
            future = compiles.submit(self.compile_one, proposal.config, worker, slot)
            pending.append((proposal, future))
            started += 1
        if started > 1:
            where = f" for {worker.name}" if len(self.workers) > 1 else ""
            self.report.phase(f"{self.name}: compiling {started} candidates at once{where}")

    def _measure(self, proposal: Proposal, built: Built) -> int:
        """Measure a compiled proposal, unless the strategy turns it down now; returns its slot."""
        evaluator, space, name, config = self.evaluator, self.space, self.name, proposal.config
        if built.result.ok and (why := self.proposals.vet(proposal, Candidate(
                config, built.compiled.digest, evaluator.features(built.compiled)))):
            evaluator.record_compiled(config, space.flags(config), self.strategy.name, built.compiled,
                                      built.worker, why)
            self.report.note(f"{name}: {config_key(config)} ({proposal.phase}): {why}; not measured")
            return built.compiled.slot
        done, best = self.proposals.progress()
        self.report.evaluating(name, done, config_key(config), best)
        outcome = evaluator.evaluate(config, space.flags(config), self.strategy.name, "search", built,
                                     numerics=space.changes_numerics(config),
                                     proposed_by=proposal.phase, parent=proposal.parent)
        if outcome.evaluation.status == INTERRUPTED:
            self.report.note(f"{name}: {config_key(config)}: {outcome.error}; not counted "
                             "(the same command resumes the search and measures it again)")
        else:
            self.report.outcome(name, outcome, proposal.phase)
        return built.compiled.slot

    def ahead(self, worker: Worker, slot: int, jobs: int | None) -> None:
        """Compile what the strategy names next in one of the worker's scout trees, until the
        search ends."""
        proposals, config = self.proposals, None
        try:
            while proposals.ahead_open():
                if (config := proposals.next_ahead()) is None:
                    proposals.wait(AHEAD_POLL_S)  # results change what it names
                    continue
                flags = self.space.flags(config)
                proposals.compiled_ahead(config, self.evaluator.scout(config, flags, self.strategy.name,
                                                                      worker, slot, jobs))
                config = None
        except Exception as exc:  # advisory: the search goes on without this tree
            if config is not None:
                proposals.drop_ahead(config)
            self.report.note(f"{self.name}: compiling ahead stopped: {exc}")
