"""The tuning loop: baseline, search, validation, toolchain file.

project -> space -> search <-> evaluate -> select -> toolchain; every sample
goes to the store the moment it is taken, so a killed run loses at most the
sample in flight and the next run resumes from the store.
"""

from __future__ import annotations

import datetime
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock, Timeout

from compileiq_build import environment
from compileiq_build.build import BuildTree
from compileiq_build.errors import CompileIQError, Interrupted
from compileiq_build.evaluate import Evaluator, Sampling
from compileiq_build.gpu import GpuMonitor
from compileiq_build.progress import Reporter
from compileiq_build.project import Benchmark, Project, Target, jit_warning, load_project
from compileiq_build.search import Config, Strategy, Trial, config_key, make_strategy
from compileiq_build.selection import (
    FINALISTS,
    NoWinner,
    Winner,
    decide,
    finalists,
    outcomes,
)
from compileiq_build.space import FlagSpace, Prober, build_space
from compileiq_build.store import STORE, Store, open_store
from compileiq_build.toolchain import DEFAULT_NAME, Provenance, provenance, render, write


@dataclass
class TuneOptions:
    budget: int = 20  # candidate evaluations per target
    time_limit: float | None = None  # seconds for the whole run
    strategy: str = "model"
    targets: Sequence[str] = ()
    output: Path | None = None
    jobs: int | None = None  # candidates compiled at once (each in its own build tree)
    build_timeout: float | None = None  # seconds per candidate build; default 20x the baseline's
    repeats: int = 5  # paired runs per workload and candidate, at least
    max_repeats: int = 20  # ... and at most
    precision: float = 0.005  # stop pairing once the interval is this narrow (relative)
    measure_time_cap: float = 300.0  # seconds per workload and candidate
    allow_numerics_change: bool = False
    max_stage: int = 3
    dimensions: Sequence[str] = ()  # only these dimensions (names as `space` prints them)
    fresh: bool = False
    seed: int = 0


@dataclass
class TuneResult:
    winners: list[Winner] = field(default_factory=list)
    losers: list[NoWinner] = field(default_factory=list)
    toolchain: Path | None = None


def select_targets(project: Project, names: Sequence[str], has_gpu: bool) -> list[Target]:
    known = [t.name for t in project.targets]
    for name in names:
        if name not in known:
            raise CompileIQError(f"--targets names '{name}', which is not tuned in this build. "
                                 f"Tuned targets: {', '.join(known)}.")
    chosen = [t for t in project.targets if not names or t.name in names]
    cuda = [t.name for t in chosen if "CUDA" in t.languages]
    if cuda and not has_gpu:
        others = [t.name for t in chosen if "CUDA" not in t.languages]
        hint = f" To tune the C++ targets alone: --targets {' '.join(others)}." if others else ""
        raise CompileIQError(
            f"tuning CUDA targets ({', '.join(cuda)}) needs an NVIDIA GPU, and nvidia-smi finds "
            f"none here.{hint}")
    for t in chosen:
        if not project.benchmarks_for(t.name):
            raise CompileIQError(
                f"no benchmark exercises '{t.name}'. Register one: compileiq_add_benchmark(<name> "
                f"COMMAND <executable> ... TARGETS {t.name}).")
    return chosen


def _check_benchmarks(benches: Sequence[Benchmark]) -> None:
    """Programs that are not targets of the project must exist before anything is built."""
    for b in benches:
        if not b.executable_target:
            found = Path(b.executable).is_file() if "/" in b.executable else shutil.which(b.executable)
            if not found:
                raise CompileIQError(
                    f"benchmark '{b.name}': the program {b.executable} does not exist. Name an "
                    "executable target of the project in COMMAND, or a program that is installed.")


@contextmanager
def _stop_on_ctrl_c(report: Reporter) -> Iterator[dict[str, bool]]:
    """First Ctrl-C: finish the evaluation in flight, then stop.  Second: stop at once."""
    state = {"stop": False}

    def handler(signum: int, frame: object) -> None:
        if state["stop"]:
            raise KeyboardInterrupt
        state["stop"] = True
        report.note("Ctrl-C: stopping after the evaluation in flight (Ctrl-C again stops at once)")

    if threading.current_thread() is not threading.main_thread():
        yield state
        return
    old = signal.signal(signal.SIGINT, handler)
    try:
        yield state
    finally:
        signal.signal(signal.SIGINT, old)


class Tuner:
    def __init__(self, build_dir: Path, options: TuneOptions, reporter: Reporter) -> None:
        self.build_dir = build_dir.resolve()
        self.options = options
        self.report = reporter
        self.project = load_project(self.build_dir)
        self.gpus = environment.detect_gpus()
        self.work = self.build_dir / "compileiq" / "work"
        self.deadline = time.monotonic() + options.time_limit if options.time_limit else None
        self.interrupt = {"stop": False}

    def check_interrupt(self) -> None:
        if self.interrupt["stop"]:
            raise Interrupted("stopped; every finished measurement is in the store. "
                              "Run the same command again to resume.")

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def run(self, command: str) -> TuneResult:
        targets = select_targets(self.project, self.options.targets, bool(self.gpus))
        for t in targets:
            _check_benchmarks(self.project.benchmarks_for(t.name))
        lock = FileLock(str(self.build_dir / "compileiq" / "tune.lock"))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            raise CompileIQError(f"another `tune` is running on {self.build_dir}; wait for it, "
                                 "or stop it first.") from None
        try:
            if self.options.fresh:
                store_path = self.build_dir / STORE
                for suffix in ("", "-wal", "-shm"):
                    store_path.with_name(store_path.name + suffix).unlink(missing_ok=True)
            store = open_store(self.build_dir)
            try:
                self.report.start([t.name for t in targets], self.options.budget)
                with _stop_on_ctrl_c(self.report) as self.interrupt:
                    return self._run(targets, store, command)
            finally:
                self.report.stop()
                store.close()
        finally:
            lock.release()

    def _run(self, targets: list[Target], store: Store, command: str) -> TuneResult:
        arch = self.gpus[0].arch if self.gpus and any("CUDA" in t.languages for t in targets) else ""
        session = store.start_session(command, self._environment())
        self.report.phase("configuring the tuning build trees")
        baseline_tree = BuildTree(self.project, self.work / "baseline")
        parallel = self._parallel()
        candidate_trees = [BuildTree(self.project, self.work / f"candidate-{i}") for i in range(parallel)]
        trees = [baseline_tree, *candidate_trees]
        with ThreadPoolExecutor(len(trees)) as pool:
            list(pool.map(lambda tree: tree.configure(arch), trees))
        for tree in trees:
            tree.write_flags({})
        tree_project = baseline_tree.project
        for target in targets:
            if arch and "CUDA" in target.languages and (warning := jit_warning(target, arch)):
                self.report.note(f"warning: {warning}")
        monitor = GpuMonitor(enabled=bool(arch))
        result = TuneResult()
        for target in targets:
            evaluator = Evaluator(
                target=tree_project.target(target.name),
                benchmarks=tree_project.benchmarks_for(target.name),
                baseline_tree=baseline_tree, candidate_trees=candidate_trees,
                store=store, session=session, sampling=self._sampling(),
                jobs=self._ninja_jobs(parallel), report=self.report,
                build_timeout=self.options.build_timeout, monitor=monitor)
            evaluator.prepare_baseline()
            space = self._space(target, tree_project)
            self.report.note(f"{target.name}: {len(space.dimensions)} dimensions, "
                             f"{space.size} configurations; strategy {self.options.strategy}")
            self._search(evaluator, space)
            if evaluator.dedup_hits:
                self.report.note(f"{target.name}: {evaluator.dedup_hits} candidates had the machine code "
                                 "of one measured before and reused its measurement")
            decision = self._validate(evaluator, store, space)
            if isinstance(decision, Winner):
                result.winners.append(decision)
                self.report.note(f"{target.name}: winner {decision.config_key} "
                                 f"({decision.speedup:.3f}x)")
            else:
                result.losers.append(decision)
                self.report.note(f"{target.name}: {decision.reason}; it keeps the project's flags")
        for tree in trees:
            tree.write_flags({})
        output = self.options.output or (self.project.source_dir / DEFAULT_NAME)
        write(output, render(result.winners, result.losers, self._provenance()))
        result.toolchain = output
        return result

    def _space(self, target: Target, tree_project: Project) -> FlagSpace:
        compilers = {lang: (c.path, c.version) for lang, c in tree_project.compilers.items()}
        extra = {"CUDA": [f"-arch=sm_{self.gpus[0].arch}"] if self.gpus else []}
        prober = Prober(self.build_dir / "compileiq" / "probe", extra)
        space = build_space(target.languages, compilers, prober,
                            self.options.allow_numerics_change, self.options.max_stage)
        if self.options.dimensions:
            known = {d.name for d in space.dimensions} | {d.key for d in space.dimensions}
            unknown = [n for n in self.options.dimensions if n not in known]
            if unknown:
                raise CompileIQError(f"--dimensions names {', '.join(unknown)}, not in the space of "
                                     f"{target.name}: {', '.join(sorted(d.name for d in space.dimensions))}")
            space = FlagSpace(tuple(d for d in space.dimensions if d.name in self.options.dimensions
                                    or d.key in self.options.dimensions), space.rejected,
                              space.excluded_numerics)
        for r in space.rejected:
            self.report.note(f"dropped {r.flag}: {r.reason}")
        return space

    def _trials(self, store: Store, evaluator: Evaluator) -> list[Trial]:
        return [Trial(o.evaluation.config, o.ratio, o.faster)
                for o in outcomes(store, evaluator.target.name, evaluator.arch_keys, "search")]

    def _parallel(self) -> int:
        """Candidates compiled at once: --jobs, else a quarter of the cores (at most 8)."""
        if self.options.jobs:
            return self.options.jobs
        return max(1, min(8, (os.cpu_count() or 1) // 4))

    @staticmethod
    def _ninja_jobs(parallel: int) -> int | None:
        """Ninja's parallelism in each candidate tree: the cores shared among the trees."""
        return None if parallel == 1 else max(1, (os.cpu_count() or 1) // parallel)

    def _batch(self, strategy: Strategy, space: FlagSpace, trials: list[Trial], size: int) -> list[Config]:
        """The next `size` proposals, each made as if the ones before had measured neutral
        (the "constant liar"), so that they can be compiled together."""
        batch: list[Config] = []
        assumed = list(trials)
        while len(batch) < size:
            config = strategy.propose(space, assumed)
            if config is None:
                break
            batch.append(config)
            assumed.append(Trial(config, 1.0, False))
        return batch

    def _search(self, evaluator: Evaluator, space: FlagSpace) -> None:
        strategy = make_strategy(self.options.strategy, self.options.seed)
        store = evaluator.store
        name = evaluator.target.name
        trees = evaluator.candidate_trees
        # CPU benchmarks are measured only once the compilers are done: they share the cores.
        overlap = "CUDA" in evaluator.target.languages
        with ThreadPoolExecutor(len(trees)) as pool:
            while True:
                self.check_interrupt()
                trials = self._trials(store, evaluator)
                if len(trials) >= self.options.budget:
                    self.report.note(f"{name}: budget of {self.options.budget} evaluations reached")
                    return
                if self.out_of_time():
                    self.report.note("time limit reached")
                    return
                size = min(len(trees), self.options.budget - len(trials))
                batch = self._batch(strategy, space, trials, size)
                if not batch:
                    why = getattr(strategy, "stop_reason", "") or "nothing more to try"
                    self.report.note(f"{name}: strategy {strategy.name} stops: {why}")
                    return
                if len(batch) > 1:
                    self.report.phase(f"{name}: compiling {len(batch)} candidates at once")
                builds = [pool.submit(evaluator.build, space.flags(c), tree)
                          for c, tree in zip(batch, trees, strict=False)]
                if not overlap:
                    wait(builds)
                for i, (config, build) in enumerate(zip(batch, builds, strict=True)):
                    self.check_interrupt()
                    self.report.evaluating(name, len(trials) + i, config_key(config))
                    outcome = evaluator.evaluate(config, space.flags(config), strategy.name, "search",
                                                 numerics=space.changes_numerics(config),
                                                 built=build.result())
                    self.report.outcome(name, outcome)

    def _sampling(self) -> Sampling:
        o = self.options
        return Sampling(o.repeats, max(o.repeats, o.max_repeats), o.precision, o.measure_time_cap)

    def _validate(self, evaluator: Evaluator, store: Store, space: FlagSpace) -> Winner | NoWinner:
        """Re-measure the best few with twice the runs: a best-of-N pick is biased low."""
        name, arch = evaluator.target.name, evaluator.arch_keys
        validated = {o.evaluation.config_key for o in outcomes(store, name, arch, "validate")}
        for finalist in finalists(outcomes(store, name, arch, "search"), FINALISTS):
            row = finalist.evaluation
            if row.config_key in validated:
                continue
            self.check_interrupt()
            self.report.phase(f"validating {name}: {row.config_key}")
            check = evaluator.evaluate(row.config, {k: tuple(v) for k, v in row.flags.items()},
                                       row.strategy, "validate", numerics=space.changes_numerics(row.config),
                                       sampling=self._sampling().scaled(2))
            if check.faster:
                break
            self.report.note(f"{name}: {row.config_key} did not hold up when re-measured")
        return decide(store, name, arch)

    def _environment(self) -> dict[str, object]:
        compilers = {lang: f"{c.id} {c.version}" for lang, c in self.project.compilers.items()}
        return {**environment.describe(self.gpus), "compilers": compilers}

    def _provenance(self) -> Provenance:
        date = datetime.datetime.now(datetime.UTC).date().isoformat()
        return provenance([self._environment()], self.project.compilers, self.options.strategy, date)


def tune(build_dir: Path, options: TuneOptions, reporter: Reporter, command: str) -> TuneResult:
    return Tuner(build_dir, options, reporter).run(command)
