"""Evaluate one candidate: build it with Ninja, run its benchmarks paired with the baseline.

The Evaluator holds what a target's evaluations share (its workers, the store, the baseline)
and does the build-and-record part: compile a candidate in a worker's slot, store its machine
code and features, and reuse the measurement of the same code measured before.  The rest is
in the stages it calls: the baseline (baseline.py), the paired runs (pairing.py) and the rules
that stop them early (decide/racing.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from compileiq_build.build.codeinfo import hot_features
from compileiq_build.build.space import config_key
from compileiq_build.build.trees import BuildResult
from compileiq_build.decide.clock import Clock
from compileiq_build.decide.racing import Race, Sampling, race_for
from compileiq_build.decide.selection import (
    SAME_AS_BASELINE,
    Outcome,
    TargetResults,
    gains_hidden,
    noisy_zones,
    summarize,
)
from compileiq_build.errors import CompileIQError
from compileiq_build.evaluate.baseline import Baseline, prepare_baseline
from compileiq_build.evaluate.pairing import Pairing
from compileiq_build.notes import Notes
from compileiq_build.project.manifest import Benchmark, Target
from compileiq_build.run.worker import BASELINE_SLOT, SCOUT_SLOT, Compiled, Worker
from compileiq_build.store.database import BUILD_FAILED, COMPILED, MEASURED, SCOUT, EvaluationRow, Store


@dataclass(frozen=True)
class Built:
    """A candidate compiled in one of a worker's slots, not yet measured."""

    worker: Worker
    compiled: Compiled
    started: float  # when its build began (time.time())

    @property
    def result(self) -> BuildResult:
        return self.compiled.result


class Evaluator:
    def __init__(self, target: Target, benchmarks: list[Benchmark], workers: Sequence[Worker],
                 store: Store, session: int, sampling: Sampling, jobs: int | None, report: Notes,
                 build_timeout: float | None = None, clock: Clock | None = None) -> None:
        self.target = target
        self.benchmarks = benchmarks
        self.workers = list(workers)
        self.store = store
        self.session = session
        self.sampling = sampling
        self.jobs = jobs
        self.build_timeout = build_timeout
        self.report = report
        self.clock = clock or Clock()  # the run's: a measurement stops when its time is up
        self.arch_keys = dict(target.arch_keys)
        self.results = TargetResults(store, target.name, self.arch_keys)  # what the stages read back
        self.ninja_targets = sorted({b.executable_target for b in benchmarks if b.executable_target}
                                    | {b.check_target for b in benchmarks if b.check_target})
        if any(not b.executable_target for b in benchmarks):
            self.ninja_targets = []  # a benchmark outside the project: build everything
        self.baseline = Baseline()
        self.dedup_hits = 0
        self.hot_kernels: set[str] = set()  # the profiled kernels of this target that take the time
        self._lock = threading.Lock()
        self._noisy_said: set[str] = set()  # workloads whose noise the log has warned of

    @property
    def _build_timeout(self) -> float:
        """A candidate that makes the compiler hang is stopped at a multiple of the baseline build."""
        return self.build_timeout or max(300.0, 20 * self.baseline.build_s)

    def _timeout(self, bench: Benchmark) -> float:
        base = self.baseline.wall.get(bench.workload, 60.0)
        limit = 10.0 * base + 10.0
        return min(limit, bench.timeout) if bench.timeout else limit

    def _check_timeout(self, bench: Benchmark) -> float:
        limit = 10.0 * self.baseline.check_s.get(bench.workload, 60.0) + 10.0
        return min(limit, bench.timeout) if bench.timeout else limit

    def prepare_baseline(self) -> None:
        """Build and check the baseline (baseline.py); the benchmarks become the resolved ones."""
        self.baseline, self.benchmarks = prepare_baseline(
            self.target, self.benchmarks, self.workers, self.ninja_targets, self.hot_kernels, self.report)

    def build(self, flags: Mapping[str, tuple[str, ...]], worker: Worker, slot: int) -> Built:
        """Compile a candidate in a worker's slot (safe in a thread: it touches no store)."""
        started = time.time()
        compiled = worker.build(slot, self.target.name, flags, self.ninja_targets, self._build_timeout,
                                self.jobs, self.hot_kernels)
        if compiled.rebuilt_nothing and any(self.target.source_counts.get(lang, 0) for lang in flags):
            # New flags that rebuild nothing would measure the old binary as this candidate.
            raise CompileIQError(
                f"new flags for {self.target.name} rebuilt nothing on {worker.name}: its objects do not "
                "depend on the CompileIQ flags file. Please report this with the project's CMakeLists.txt.")
        if compiled.result.ok:
            self.clock.built(compiled.result.seconds)
        return Built(worker, compiled, started)

    def scout(self, config: Mapping[str, str], flags: Mapping[str, tuple[str, ...]], strategy: str,
              worker: Worker, slot: int = SCOUT_SLOT, jobs: int | None = None) -> str:
        """Compile a configuration ahead in one of the worker's scout trees (`slot`, with
        `jobs`: Ninja's parallelism, default the candidate trees'), the target alone (no
        executable linked), and record its code and features (phase scout): the strategy knows
        them before it chooses what to measure.  Returns the digest ('' when it did not build)."""
        compiled = worker.build(slot, self.target.name, flags, [self.target.cmake_target],
                                self._build_timeout, jobs or self.jobs, self.hot_kernels)
        self.record_compiled(config, flags, strategy, compiled, worker)
        return compiled.digest if compiled.result.ok else ""

    def record_compiled(self, config: Mapping[str, str], flags: Mapping[str, tuple[str, ...]], strategy: str,
                        compiled: Compiled, worker: Worker, why: str = "") -> None:
        """Store a compiled configuration that is not measured (phase scout): its code and
        features, or its build failure; `why` it is not measured, where it was proposed."""
        row = self.store.begin_evaluation(self.session, self.target.name, self.arch_keys, config_key(config),
                                          config, flags, strategy, SCOUT, worker=worker.name)
        if not compiled.result.ok:
            self.store.finish_evaluation(row, BUILD_FAILED, _last_lines(compiled.result.log),
                                         compiled.result.seconds)
            return
        self.store.set_code(row, compiled.digest, self.features(compiled), None)
        self.store.finish_evaluation(row, COMPILED, why, compiled.result.seconds)

    def evaluate(self, config: Mapping[str, str], flags: Mapping[str, tuple[str, ...]],
                 strategy: str, phase: str, built: Built, numerics: bool = False,
                 sampling: Sampling | None = None, reduced_from: EvaluationRow | None = None,
                 proposed_by: str = "", parent: str = "") -> Outcome:
        """Measure one compiled candidate on its worker's device, paired with the baseline.
        `reduced_from` (phase minimize): the evaluation of the configuration this one leaves an
        option out of; of the same machine code, it stands for this one.  `proposed_by` and
        `parent` (phase search): the strategy's phase that proposed it and the key of the
        configuration it refines (Proposal).  When the clock's time is up, measuring stops after
        the run in progress; the candidate is recorded as interrupted: its pairs stay, it is not
        counted, and a later run measures it again, as after a kill.  (Ctrl-C lets the
        evaluation in flight finish.)"""
        sampling = sampling or self.sampling
        key = config_key(config)
        parent = reduced_from.config_key if reduced_from else parent
        evaluation = self.store.begin_evaluation(self.session, self.target.name, self.arch_keys,
                                                 key, config, flags, strategy, phase, built.worker.name,
                                                 built.started, parent, proposed_by)
        if not built.result.ok:
            self.store.finish_evaluation(evaluation, BUILD_FAILED, _last_lines(built.result.log),
                                         built.result.seconds)
            return self._outcome(evaluation)
        twin = self._same_code(evaluation, phase, built, reduced_from)
        if twin is not None:
            with self._lock:
                self.dedup_hits += 1
            what = "the baseline" if twin == SAME_AS_BASELINE else f"evaluation {twin}"
            self.store.finish_evaluation(evaluation, MEASURED, f"same machine code as {what}",
                                         built.result.seconds)
            return self._outcome(evaluation)
        race = None
        if phase == "search":
            race = self._race(evaluation)
            self._warn_of_noise(race)
        elif reduced_from is not None and (reaches := summarize(self.store, reduced_from).ratio):
            race = self._race(evaluation, reaches, "the configuration it reduces reaches")
        pairing = Pairing(self.store, self.report, evaluation, built.worker, built.compiled.slot, numerics,
                          self.baseline.evidence, self._timeout, self.clock, self._check_timeout)
        status, reason = pairing.run(self.benchmarks, sampling, race, check_late=phase == "search")
        self.store.finish_evaluation(evaluation, status, reason, built.result.seconds)
        return self._outcome(evaluation)

    def _race(self, evaluation: int, reference: float | None = None,
              against: str = "the finalists reach") -> Race:
        """What a search candidate (or a minimizing step) races against (racing.race_for)."""
        return race_for(self.results, evaluation, self.sampling.precision, reference, against)

    def _warn_of_noise(self, race: Race) -> None:
        """Once per workload, as soon as the search knows its noise: a benchmark too noisy for
        gains of a few percent is said while the user can still stop and quiet it."""
        with self._lock:
            zones = [(w, z) for w, z in noisy_zones(race.noise) if w not in self._noisy_said]
            self._noisy_said.update(w for w, _ in zones)
        if zones:
            hidden = gains_hidden(zones, self.arch_keys)
            self.report.note(f"warning: {self.target.name}: {hidden} (Ctrl-C stops after "
                             "the evaluation in flight; nothing measured is lost)")

    def _same_code(self, evaluation: int, phase: str, built: Built,
                   reduced_from: EvaluationRow | None) -> int | None:
        """Record the candidate's code digest and compile-time features; in the search (and when
        minimizing), return the evaluation (or the baseline) that already measured the same
        machine code."""
        twin = None
        digest = built.compiled.digest
        if reduced_from is not None and digest:
            # The twin is the evaluation that holds the samples, as in the search.
            twin = SAME_AS_BASELINE if digest == self.baseline.digest else (
                (reduced_from.same_as or reduced_from.id) if digest == reduced_from.digest else None)
        elif phase == "search" and digest:
            if digest == self.baseline.digest:
                twin = SAME_AS_BASELINE
            else:
                twin = next((r.id for r in self.results.evaluations("search")
                             if r.digest == digest and r.status == MEASURED and r.same_as is None
                             and r.id != evaluation), None)
        self.store.set_code(evaluation, digest, self.features(built.compiled), twin)
        return twin

    def rekey_baseline(self, worker: Worker) -> None:
        """The baseline's digest and features once the hot kernels are known (a no-op build)."""
        built = worker.build(BASELINE_SLOT, self.target.name, None, self.ninja_targets, 3600, self.jobs,
                             self.hot_kernels)
        if built.result.ok:
            self.baseline.digest, self.baseline.compiled = built.digest, built

    @property
    def baseline_features(self) -> dict[str, float]:
        """The baseline code's features, as `features` gives a candidate's ({} before the build)."""
        return self.features(self.baseline.compiled) if self.baseline.compiled else {}

    def features(self, compiled: Compiled) -> dict[str, float]:
        """What the model sees of a build: the features of the profiled hot kernels, where known."""
        return hot_features(compiled.features, self.hot_kernels) if self.hot_kernels else compiled.features

    def _outcome(self, evaluation: int) -> Outcome:
        return summarize(self.store, self.store.evaluation(evaluation))


def _last_lines(log: str, n: int = 15) -> str:
    return "\n".join(log.strip().splitlines()[-n:])
