"""The tuning loop: baseline, search, validation, toolchain file.

project -> space -> search <-> evaluate -> select -> toolchain; every sample
goes to the store the moment it is taken, so a killed run loses at most the
sample in flight and the next run resumes from the store.  The Tuner orders the
stages (each a module of its own) and makes the run's clock (decide/clock.py: --time-limit,
each target's share, Ctrl-C), which it hands down with the evaluator.
"""

from __future__ import annotations

import datetime
import shutil
import signal
import statistics
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from compileiq_build.decide.clock import Clock, StepTimes
from compileiq_build.decide.racing import Sampling
from compileiq_build.decide.selection import NoWinner, Winner, decisions, merged
from compileiq_build.errors import CompileIQError, Interrupted
from compileiq_build.evaluate.evaluator import Evaluator
from compileiq_build.machine import environment
from compileiq_build.machine.cpu import Busy, CpuLoadMonitor
from compileiq_build.options import TuneOptions
from compileiq_build.project.manifest import Benchmark, Project, Target, jit_warning, load_project
from compileiq_build.project.workspace import Workspace
from compileiq_build.results.progress import Reporter
from compileiq_build.results.toolchain import (
    DEFAULT_NAME,
    Provenance,
    check_writable,
    measured_codes,
    provenance,
    render,
    source_digests,
    write,
)
from compileiq_build.run import ray_worker
from compileiq_build.run.launch import (
    check_gpus_free,
    measuring_gpus,
    ninja_jobs,
    start_workers,
)
from compileiq_build.run.worker import LocalWorker, Worker, local_workers
from compileiq_build.search.history import history
from compileiq_build.search.prior import Prior, for_space
from compileiq_build.search.prior import load as load_prior
from compileiq_build.search.target import (
    check_dimensions,
    predicted,
    search_notes,
    search_target,
    target_space,
)
from compileiq_build.stages.minimize import minimize_winner
from compileiq_build.stages.profiling import profile_baseline, profile_groups
from compileiq_build.stages.validate import validate
from compileiq_build.store.database import RUNNING, Store, exclusive_store

WINNER_OPTIONS = 6  # options a winner sets, about: minimizing builds it without each once


@dataclass
class TuneResult:
    winners: list[Winner] = field(default_factory=list)
    losers: list[NoWinner] = field(default_factory=list)
    toolchain: Path | None = None


def select_targets(project: Project, names: Sequence[str], has_gpu: bool) -> list[Target]:
    known = [t.name for t in project.targets]
    for name in names:
        if name not in known and not any(t.cmake_target == name for t in project.targets):
            raise CompileIQError(f"--targets names '{name}', which is not tuned in this build. "
                                 f"Tuned targets: {', '.join(known)}.")
    # A CMake target's name selects all its groups.
    chosen = [t for t in project.targets if not names or t.name in names or t.cmake_target in names]
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
                f"COMMAND <executable> ... TARGETS {t.cmake_target}).")
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


def _numerics_checks(target: str, benches: Sequence[Benchmark]) -> list[str]:
    """With --allow-numerics-change, what guards each benchmark against wrong results."""
    warnings = []
    for b in benches:
        if not (b.checksum or b.output_file):
            warnings.append(
                f"benchmark '{b.name}' of {target} registers no CHECKSUM or OUTPUT_FILE: with "
                "--allow-numerics-change only its exit code guards against wrong results. Register "
                "one with TOLERANCE.")
        elif b.tolerance is None:
            warnings.append(
                f"benchmark '{b.name}' of {target} has no TOLERANCE: candidates that change numerics "
                "must match the baseline exactly, so most of them will be invalid.")
    return warnings


@contextmanager
def _stop_on_ctrl_c(report: Reporter, clock: Clock) -> Iterator[None]:
    """First Ctrl-C: finish the evaluation in flight, then stop.  Second: stop at once."""

    def handler(signum: int, frame: object) -> None:
        if clock.interrupted:
            raise KeyboardInterrupt
        clock.interrupt()
        report.note("Ctrl-C: stopping after the evaluation in flight (Ctrl-C again stops at once)")

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


@contextmanager
def cpu_load_watch(report: Reporter, target: Target, store: Store, session: int) -> Iterator[None]:
    """While a C++ target is tuned: other processes' CPU load, warned of as it begins and
    recorded with the session (the reports say so), as the shared-GPU check does for GPUs."""
    if "CUDA" in target.languages:
        yield
        return

    def busy(b: Busy) -> None:
        report.note(f"warning: {target.name}: {b.text()} while its CPU benchmarks ran: they "
                         "measure that load as noise, or as a difference that is not the flags'")

    monitor = CpuLoadMonitor(busy)
    try:
        with monitor:
            yield
    finally:  # after the monitor's last window closed
        if monitor.busy:
            store.update_session(session, "cpu_load", {target.name: [b.text() for b in monitor.busy]})

def note_killed(report: Reporter, store: Store) -> None:
    """Evaluations a killed run left running (the lock says no other run is): said, as the
    store marks them interrupted and the search measures them afresh."""
    killed = [e for e in store.evaluations() if e.status == RUNNING]
    for e in killed:
        report.note(f"{e.target}: the last run ended (killed?) while evaluating {e.config_key} "
                         f"({e.phase}); its measurements are kept, not counted: it is measured afresh "
                         "if proposed again")


class Tuner:
    def __init__(self, build_dir: Path, options: TuneOptions, reporter: Reporter) -> None:
        self.workspace = Workspace(build_dir)
        self.build_dir = self.workspace.build_dir
        self.options = options
        self.report = reporter
        self.project = load_project(self.build_dir)
        self.gpus = environment.detect_gpus()
        self.clock = Clock(options.time_limit)  # starts now: the whole run counts
        self.shared_gpu: list[dict[str, object]] = []  # other processes on the GPUs measured
        self._prior: Prior | bool | None = False  # loaded on first use (False: not yet)

    def _stop_if_interrupted(self) -> None:
        """Between stages: a Ctrl-C that stopped the last one ends the run (exit 130)."""
        if self.clock.interrupted:
            raise Interrupted("stopped; every finished measurement is in the store. "
                              "Run the same command again to resume.")

    def run(self, command: str) -> TuneResult:
        self._check_gpus_named()
        targets = select_targets(self.project, self.options.targets, bool(self.gpus or self.options.ray))
        for t in targets:
            _check_benchmarks(self.project.benchmarks_for(t.name))
            if self.options.allow_numerics_change:
                for warning in _numerics_checks(t.name, self.project.benchmarks_for(t.name)):
                    self.report.note(f"warning: {warning}")
        # Before any build: a misspelt --dimensions, an unwritable build folder or output.
        check_dimensions(targets, self.options)
        self.workspace.check_writable()
        check_writable(self._output())
        with exclusive_store(self.build_dir, self.options.fresh) as store:
            try:
                self.report.start([t.name for t in targets], self.options.budget)
                with _stop_on_ctrl_c(self.report, self.clock):
                    return self._run(targets, store, command)
            finally:
                self.report.stop()

    def _check_gpus_named(self) -> None:
        if self.options.gpus and not self.gpus and not self.options.ray:
            raise CompileIQError(
                f"--gpus {','.join(map(str, self.options.gpus))}: nvidia-smi finds no GPU on this "
                "machine. C++ targets are measured on the CPU: leave --gpus out.")

    def profile(self, command: str) -> list[str]:
        """No search: profile the benchmarks of the chosen CUDA targets (stored, printed as the
        search would) and return the groups the profiles suggest, as CMake lines."""
        units = [t for t in select_targets(self.project, self.options.targets, bool(self.gpus))
                 if "CUDA" in t.languages]
        if not units:
            raise CompileIQError("profile looks at CUDA targets, and none is chosen; name them "
                                 "with --targets.")
        self._check_gpus_named()
        with exclusive_store(self.build_dir) as store:
            note_killed(self.report, store)
            gpus = measuring_gpus(self.gpus, self.options.gpus, self.report)[:1]
            self.shared_gpu = check_gpus_free(gpus, self.options.allow_shared_gpu, self.report)
            self.report.phase("configuring the baseline build tree")
            (worker,) = local_workers(self.project, self.workspace.work, gpus, 1)
            worker.baseline.configure(gpus[0].arch)
            worker.baseline.write_flags({})
            tree_project = worker.baseline.project
            session = store.start_session(command, self._environment())
            return profile_groups(units, tree_project, worker, store, session, Sampling.of(self.options),
                                  self.report)

    def _run(self, targets: list[Target], store: Store, command: str) -> TuneResult:
        cuda = any("CUDA" in t.languages for t in targets)
        self.report.phase("configuring the tuning build trees")
        try:
            started = start_workers(self.options, self.project, self.workspace.work, self.gpus, cuda,
                                    self.report)
            self.shared_gpu = started.shared_gpu
            workers = started.workers
            if len(workers) > 1:
                self.report.note(f"measuring on {len(workers)} workers at once: "
                                 f"{', '.join(w.name for w in workers)}, {workers[0].slots} candidates "
                                 "compiled ahead for each")
            described = {**self._environment(), "workers": [w.name for w in workers]}
            note_killed(self.report, store)
            session = store.start_session(command, described)
            return self._tune(targets, workers, started.tree_project, started.arch, store, session)
        finally:
            if self.options.ray:
                ray_worker.stop()

    def _tune(self, targets: list[Target], workers: Sequence[Worker], tree_project: Project, arch: str,
              store: Store, session: int) -> TuneResult:
        for target in targets:
            if arch and "CUDA" in target.languages and (warning := jit_warning(target, arch)):
                self.report.note(f"warning: {warning}")
        result = TuneResult()
        for i, target in enumerate(targets):
            with cpu_load_watch(self.report, target, store, session):
                decision = self._tune_target(target, workers, tree_project, arch, store, session,
                                             len(targets) - i, first=i == 0)
            if isinstance(decision, Winner):
                result.winners.append(decision)
            else:
                result.losers.append(decision)
        for worker in workers:
            worker.reset()
        # The file holds every target of the project the store has decided, not only this run's:
        # tuning one target after another must not drop the flags of the first.
        names = {t.name for t in tree_project.targets}
        winners, losers = merged([*result.winners, *result.losers],
                                 (d for d in decisions(store) if d.target in names))
        result.toolchain = self._output()
        write(result.toolchain, render(winners, losers, self._provenance(),
                                       codes=measured_codes(store, self.project, winners),
                                       sources=source_digests(self.project, (w.target for w in winners))))
        return result

    def _tune_target(self, target: Target, workers: Sequence[Worker], tree_project: Project, arch: str,
                     store: Store, session: int, targets_left: int, first: bool) -> Winner | NoWinner:
        """Baseline, profile, search, validation and minimizing of one target, in its share of the
        time left: its decision."""
        self.clock.share(targets_left)
        # CPU benchmarks on several workers at once would disturb each other: one for them.
        active = workers if "CUDA" in target.languages else workers[:1]
        evaluator = Evaluator(
            target=tree_project.target(target.name), benchmarks=tree_project.benchmarks_for(target.name),
            workers=active, store=store, session=session, sampling=Sampling.of(self.options),
            jobs=None if self.options.ray else ninja_jobs(sum(w.slots for w in workers)),
            report=self.report, build_timeout=self.options.build_timeout, clock=self.clock)
        evaluator.prepare_baseline()
        if "CUDA" in target.languages and self.options.profile and isinstance(active[0], LocalWorker):
            profile_baseline(evaluator, active[0], tree_project, session, self.report)
        space = target_space(target, tree_project, arch, self.options, self.workspace.probe, self.report)
        self.report.note(f"{target.name}: {len(space.dimensions)} dimensions, "
                         f"{space.size} configurations; strategy {self.options.strategy}")
        # Read before the time is planned (seconds, once): the report's prediction of the winner
        # reads it, and only where the prior knows the space's options and the code's features.
        prior = self.prior() if for_space(space) and evaluator.baseline_features else None
        # A candidate rebuilds its target's (or group's) objects, not everything: a resumed search
        # plans on its earlier candidates' builds (ggml: 27 s, against 164 s for the baseline's).
        built = [r.build_seconds for r in evaluator.results.evaluations() if r.build_seconds]
        checks = {b.check: evaluator.baseline.check_s.get(b.workload, 0.0)  # a shared CHECK runs once
                  for b in evaluator.benchmarks if b.check}
        times = StepTimes(statistics.median(built) if built else evaluator.baseline.build_s,
                          2 * sum(evaluator.baseline.wall.values()), Sampling.of(self.options).min_pairs,
                          sum(checks.values()))
        if plan := self.clock.plan(target.name, times, min(len(space.dimensions), WINNER_OPTIONS),
                                   refuse=first):
            self.report.note(plan)
        proposals = search_target(evaluator, space, self.options, self.prior, self.report)
        self._stop_if_interrupted()
        search_notes(evaluator, proposals, self.report)
        self.clock.keep(0.0)  # validation and minimizing run to the end of the share
        if evaluator.dedup_hits:
            self.report.note(f"{target.name}: {evaluator.dedup_hits} candidates had the machine code "
                             "of one measured before and reused its measurement")
        twice = Sampling.of(self.options).scaled(2)
        decision, remeasured = validate(evaluator, space, twice, self.report)
        if isinstance(decision, Winner):
            # Also after Ctrl-C: its compiles take the passengers out of what `emit` ships.
            decision = minimize_winner(evaluator, space, decision, twice, self.report)
        self._stop_if_interrupted()
        if isinstance(decision, Winner):
            known = history(evaluator)[1]
            if guess := predicted(prior, known, evaluator.baseline_features, space, decision):
                store.update_session(session, "predicted", {target.name: guess})
        self.report.note(decision_note(decision, remeasured))
        return decision

    def _output(self) -> Path:
        return self.options.output or (self.project.source_dir / DEFAULT_NAME)

    def prior(self) -> Prior | None:
        """The prior (prior.py), loaded once: --prior's file, else the build folder's own
        (`learn --add`), else the shipped one; None with --no-prior or, with a warning, when it
        cannot be read."""
        if self._prior is False:
            own = self.workspace.prior
            path = self.options.prior_path or (own if own.is_file() else None)
            self._prior = load_prior(path, lambda text: self.report.note(f"warning: {text}")) \
                if self.options.prior else None
        return self._prior if isinstance(self._prior, Prior) else None

    def _environment(self) -> dict[str, object]:
        compilers = {lang: f"{c.id} {c.version}" for lang, c in self.project.compilers.items()}
        described = {**environment.describe(self.gpus), "compilers": compilers}
        if self.options.strategy == "model":
            described["prior"] = "off (--no-prior)" if not self.options.prior else (
                str(self.options.prior_path) if self.options.prior_path else "default")
        return {**described, "shared_gpu": self.shared_gpu} if self.shared_gpu else described

    def _provenance(self) -> Provenance:
        date = datetime.datetime.now(datetime.UTC).date().isoformat()
        return provenance([self._environment()], self.project.compilers, self.options.strategy, date)


def decision_note(decision: Winner | NoWinner, remeasured: Sequence[str]) -> str:
    """The log line of a target's decision; when the winner is not what this run re-measured,
    it says why it stays the winner."""
    name = decision.target
    if isinstance(decision, NoWinner):
        return f"{name}: {decision.reason}; it keeps the project's flags"
    left_out = "".join(f"; without {d.option}: {d.why}" for d in decision.dropped)
    if decision.unchecked:
        left_out += (f"; not checked, as minimizing stopped before their removal: "
                     f"{', '.join(decision.unchecked)}")
    if decision.validated in remeasured:
        return f"{name}: winner {decision.config_key} ({decision.speedup:.3f}x){left_out}"
    why = []
    if failed := [k for k in remeasured if k != decision.config_key]:
        why.append(f"{', '.join(failed)} did not hold up when re-measured")
    if decision.pending:
        why.append(f"{', '.join(decision.pending)} {'is' if len(decision.pending) == 1 else 'are'} "
                   "faster in the search but not validated yet")
    return (f"{name}: {''.join(f'{w}; ' for w in why)}{decision.validated}, validated in an earlier run, "
            f"stays the winner ({decision.speedup:.3f}x){left_out}")


def tune(build_dir: Path, options: TuneOptions, reporter: Reporter, command: str) -> TuneResult:
    return Tuner(build_dir, options, reporter).run(command)


def profile(build_dir: Path, options: TuneOptions, reporter: Reporter, command: str) -> list[str]:
    return Tuner(build_dir, options, reporter).profile(command)
