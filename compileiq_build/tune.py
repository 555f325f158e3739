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
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from filelock import FileLock, Timeout

from compileiq_build import environment, ray_workers
from compileiq_build.environment import Gpu
from compileiq_build.errors import CompileIQError, Interrupted
from compileiq_build.evaluate import Evaluator
from compileiq_build.gpu import compute_processes, shared_gpu_error
from compileiq_build.minimize import minimize
from compileiq_build.pipeline import Proposals, run_search
from compileiq_build.prior import Prior, for_space
from compileiq_build.prior import load as load_prior
from compileiq_build.profile import (
    COVER,
    ProfileError,
    attribute,
    hot_kernels,
    kernel_sources,
    profile_run,
    propose_groups,
    table_lines,
)
from compileiq_build.progress import Reporter
from compileiq_build.project import Benchmark, Project, Target, jit_warning, load_project
from compileiq_build.racing import Sampling
from compileiq_build.selection import (
    FINALISTS,
    NoWinner,
    Winner,
    decide,
    decisions,
    finalists,
    merged,
    outcomes,
    pending_validation,
    verdict_counts,
)
from compileiq_build.space import DEFAULT, FlagSpace, Prober, build_space, config_key
from compileiq_build.store import COMPILED, SCOUT, Store, open_store
from compileiq_build.strategies import Candidate, Trial, make_strategy
from compileiq_build.toolchain import DEFAULT_NAME, Provenance, check_writable, provenance, render, write
from compileiq_build.workers import BASELINE_SLOT, LocalWorker, Worker, local_workers
from compileiq_build.workspace import Workspace


@dataclass
class TuneOptions:
    budget: int = 20  # evaluations (distinct machine codes measured) per target
    max_candidates: int | None = None  # candidates compiled per target, at most; default 10x the budget
    time_limit: float | None = None  # seconds for the whole run: the search leaves time to validate
    strategy: str = "model"
    targets: Sequence[str] = ()
    output: Path | None = None
    jobs: int | None = None  # candidates compiled at once (each in its own build tree), all GPUs together
    gpus: Sequence[int] = ()  # indices of the GPUs to measure on; default all of the first one's kind
    ray: str | None = None  # a Ray cluster's address ("local": start one): workers on its nodes
    build_timeout: float | None = None  # seconds per candidate build; default 20x the baseline's
    repeats: int = 5  # paired runs per workload and candidate, at least
    max_repeats: int = 20  # ... and at most
    precision: float = 0.005  # stop pairing once the interval is this narrow (relative)
    measure_time_cap: float = 300.0  # seconds per workload and candidate
    allow_numerics_change: bool = False
    allow_host_specific: bool = False  # options like -march=native: binaries then need a CPU like this one
    allow_shared_gpu: bool = False  # measure although another process holds the GPU
    profile: bool = True  # profile each CUDA benchmark's baseline once with ncu (profile.py)
    compile_ahead: int = 5  # CUDA: configurations compiled ahead per evaluation of the budget (pipeline.py)
    max_stage: int = 3
    dimensions: Sequence[str] = ()  # only these dimensions (names as `space` prints them)
    fresh: bool = False
    seed: int = 0
    prior: bool = True  # the model learned across kernels (prior.py) steers the model-guided search
    prior_path: Path | None = None  # its file; default <build>/compileiq/prior.txt, else the shipped one


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
        self.workspace = Workspace(self.build_dir)
        self.work = self.workspace.work
        self.deadline = time.monotonic() + options.time_limit if options.time_limit else None
        self.interrupt = {"stop": False}
        self.shared_gpu: list[dict[str, object]] = []  # other processes on the GPUs measured
        self._prior: Prior | bool | None = False  # loaded on first use (False: not yet)

    def check_interrupt(self) -> None:
        if self.interrupt["stop"]:
            raise Interrupted("stopped; every finished measurement is in the store. "
                              "Run the same command again to resume.")

    def out_of_time(self, reserve: float = 0.0, deadline: float | None = None) -> bool:
        """Past the deadline (the run's, unless another is given), or within `reserve` seconds of it."""
        end = self.deadline if deadline is None else deadline
        return end is not None and time.monotonic() > end - reserve

    def _share_of_time(self, targets_left: int) -> float | None:
        """The deadline of the next target's search: an equal share of the time left, so that the
        first target cannot take the time of those after it (what it leaves goes to the next)."""
        if self.deadline is None:
            return None
        now = time.monotonic()
        return now + max(0.0, self.deadline - now) / targets_left

    def _validation_reserve(self, evaluator: Evaluator) -> float:
        """Seconds the search leaves for validating its best candidate so far, so that the run
        ends within --time-limit: its build, twice its measuring (validation pairs twice as
        many runs), and a build per option to find the passengers among them."""
        if self.deadline is None:
            return 0.0
        store, name, arch = evaluator.store, evaluator.target.name, evaluator.arch_keys
        best = finalists(outcomes(store, name, arch, "search"), 1)
        if not best:
            return 0.0
        row = best[0].evaluation
        # Then the compiles that find the passengers among its options (minimize.py).
        compiles = 1 + len(row.config_key.split())
        return compiles * (row.build_seconds or 0.0) + 2 * store.measuring_seconds(row.same_as or row.id)

    def run(self, command: str) -> TuneResult:
        targets = select_targets(self.project, self.options.targets, bool(self.gpus or self.options.ray))
        for t in targets:
            _check_benchmarks(self.project.benchmarks_for(t.name))
            if self.options.allow_numerics_change:
                for warning in _numerics_checks(t.name, self.project.benchmarks_for(t.name)):
                    self.report.note(f"warning: {warning}")
        check_writable(self._output())
        with self._store() as store:
            try:
                self.report.start([t.name for t in targets], self.options.budget)
                with _stop_on_ctrl_c(self.report) as self.interrupt:
                    return self._run(targets, store, command)
            finally:
                self.report.stop()

    @contextmanager
    def _store(self) -> Iterator[Store]:
        """The build folder's store, this process alone on it (--fresh: emptied first)."""
        lock = FileLock(str(self.workspace.lock))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            raise CompileIQError(f"another `tune` is running on {self.build_dir}; wait for it, "
                                 "or stop it first.") from None
        try:
            if self.options.fresh:
                store_path = self.workspace.store
                for suffix in ("", "-wal", "-shm"):
                    store_path.with_name(store_path.name + suffix).unlink(missing_ok=True)
            store = open_store(self.build_dir)
            try:
                yield store
            finally:
                store.close()
        finally:
            lock.release()

    def profile(self, command: str) -> list[str]:
        """No search: profile the benchmarks of the chosen CUDA targets (stored, printed as the
        search would) and return the groups the profiles suggest, as CMake lines."""
        units = [t for t in select_targets(self.project, self.options.targets, bool(self.gpus))
                 if "CUDA" in t.languages]
        if not units:
            raise CompileIQError("profile looks at CUDA targets, and none is chosen; name them "
                                 "with --targets.")
        with self._store() as store:
            gpus = self._measuring_gpus()[:1]
            self._check_gpus_free(gpus)
            self.report.phase("configuring the baseline build tree")
            (worker,) = local_workers(self.project, self.work, gpus, 1)
            worker.baseline.configure(gpus[0].arch)
            worker.baseline.write_flags({})
            tree_project = worker.baseline.project
            session = store.start_session(command, self._environment())
            lines = []
            for cmake in dict.fromkeys(u.cmake_target for u in units):
                mine = [t for t in tree_project.targets if t.cmake_target == cmake]
                benches = {b.index: b for u in mine for b in tree_project.benchmarks_for(u.name)}
                evaluator = Evaluator(mine[0], sorted(benches.values(), key=lambda b: b.index), [worker],
                                      store, session, self._sampling(), self._ninja_jobs(1), self.report)
                evaluator.prepare_baseline()
                self._profile(evaluator, worker, tree_project, session)
                if proposed := propose_groups(store.kernel_times(cmake, evaluator.arch_keys), cmake):
                    lines += [f"# groups of {cmake} that hold {COVER:.0%} of each benchmark's GPU time:",
                              *proposed]
            return lines

    def _run(self, targets: list[Target], store: Store, command: str) -> TuneResult:
        cuda = any("CUDA" in t.languages for t in targets)
        self.report.phase("configuring the tuning build trees")
        try:
            if self.options.ray:
                workers, tree_project, arch = self._ray_workers(cuda)
            else:
                gpus = self._measuring_gpus() if cuda else []
                self._check_gpus_free(gpus)
                arch = gpus[0].arch if gpus else ""
                slots = max(1, self._parallel() // max(1, len(gpus)))
                local = local_workers(self.project, self.work, gpus, slots,
                                      scout=cuda and self.options.compile_ahead > 0)
                tree_project = self._configure(local, arch)
                workers = list(local)
            if len(workers) > 1:
                self.report.note(f"measuring on {len(workers)} workers at once: "
                                 f"{', '.join(w.name for w in workers)}, {workers[0].slots} candidates "
                                 "compiled ahead for each")
            described = {**self._environment(), "workers": [w.name for w in workers]}
            session = store.start_session(command, described)
            return self._tune(targets, workers, tree_project, arch, store, session)
        finally:
            if self.options.ray:
                ray_workers.stop()

    def _tune(self, targets: list[Target], workers: Sequence[Worker], tree_project: Project, arch: str,
              store: Store, session: int) -> TuneResult:
        for target in targets:
            if arch and "CUDA" in target.languages and (warning := jit_warning(target, arch)):
                self.report.note(f"warning: {warning}")
        result = TuneResult()
        for i, target in enumerate(targets):
            # CPU benchmarks on several workers at once would disturb each other: one for them.
            active = workers if "CUDA" in target.languages else workers[:1]
            evaluator = Evaluator(
                target=tree_project.target(target.name),
                benchmarks=tree_project.benchmarks_for(target.name), workers=active,
                store=store, session=session, sampling=self._sampling(),
                jobs=None if self.options.ray else self._ninja_jobs(sum(w.slots for w in workers)),
                report=self.report,
                build_timeout=self.options.build_timeout)
            evaluator.prepare_baseline()
            if "CUDA" in target.languages and self.options.profile and isinstance(active[0], LocalWorker):
                self._profile(evaluator, active[0], tree_project, session)
            space = self._space(target, tree_project, arch)
            self.report.note(f"{target.name}: {len(space.dimensions)} dimensions, "
                             f"{space.size} configurations; strategy {self.options.strategy}")
            self._search(evaluator, space, len(targets) - i)
            if evaluator.dedup_hits:
                self.report.note(f"{target.name}: {evaluator.dedup_hits} candidates had the machine code "
                                 "of one measured before and reused its measurement")
            decision, remeasured = self._validate(evaluator, store, space)
            if isinstance(decision, Winner):
                decision = self._minimize(evaluator, store, space, decision)
                if predicted := self._predicted(evaluator, space, decision):
                    store.update_session(session, "predicted", {target.name: predicted})
            if isinstance(decision, Winner):
                result.winners.append(decision)
            else:
                result.losers.append(decision)
            self.report.note(decision_note(decision, remeasured))
        for worker in workers:
            worker.reset()
        # The file holds every target of the project the store has decided, not only this run's:
        # tuning one target after another must not drop the flags of the first.
        names = {t.name for t in tree_project.targets}
        winners, losers = merged([*result.winners, *result.losers],
                                 (d for d in decisions(store) if d.target in names))
        output = self._output()
        write(output, render(winners, losers, self._provenance()))
        result.toolchain = output
        return result

    def _profile(self, evaluator: Evaluator, worker: LocalWorker, tree_project: Project,
                 session: int) -> None:
        """Once per CMake target and benchmark: where the baseline's GPU time goes (profile.py),
        stored and printed."""
        unit, store = evaluator.target, evaluator.store
        units = [t for t in tree_project.targets if t.cmake_target == unit.cmake_target]
        done = {r.workload for r in store.kernel_times(unit.cmake_target, evaluator.arch_keys)}
        todo = [b for b in evaluator.benchmarks if b.workload not in done]
        sources = kernel_sources(worker.baseline.path, units) if todo else {}
        for bench in todo:
            self.report.phase(f"{unit.cmake_target}: profiling {bench.workload} with ncu (one baseline run)")
            timeout = 20 * evaluator.baseline.wall.get(bench.workload, 60.0) + 120
            try:
                times = profile_run(bench, worker.executable(BASELINE_SLOT, bench), timeout, worker.env)
            except ProfileError as exc:
                self.report.note(f"{unit.name}: no kernel profile of {bench.workload}: {exc} "
                                 "(--no-profile skips profiling)")
                break  # the next benchmark would fail alike
            store.add_kernel_times(session, unit.cmake_target, evaluator.arch_keys,
                                   attribute(bench.workload, times, sources))
        workloads = {b.workload for b in evaluator.benchmarks}
        rows = [r for r in store.kernel_times(unit.cmake_target, evaluator.arch_keys)
                if r.workload in workloads]
        if rows:
            self.report.note("\n".join([f"{unit.name}: where the baseline's GPU time goes (ncu):",
                                        *table_lines(rows)]))
        evaluator.hot_kernels = hot_kernels(rows, unit.name)
        if evaluator.hot_kernels:  # identity is now that of the hot kernels' code: the baseline's again
            evaluator.rekey_baseline(worker)

    def _output(self) -> Path:
        return self.options.output or (self.project.source_dir / DEFAULT_NAME)

    def _measuring_gpus(self) -> list[Gpu]:
        """--gpus, else every GPU of the first one's architecture that CUDA_VISIBLE_DEVICES
        (when set) lets this process use."""
        gpus = self.gpus
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is not None and not self.options.gpus:
            allowed = {v.strip() for v in visible.split(",") if v.strip()}
            gpus = [g for g in gpus if str(g.index) in allowed or g.uuid in allowed]
            if not gpus:
                raise CompileIQError(f"CUDA_VISIBLE_DEVICES={visible} leaves none of the GPUs that "
                                     "nvidia-smi lists; unset it, or name GPUs with --gpus.")
        if self.options.gpus:
            known = {g.index: g for g in self.gpus}
            unknown = [i for i in self.options.gpus if i not in known]
            if unknown:
                raise CompileIQError(f"--gpus names {', '.join(map(str, unknown))}; this machine has "
                                     f"GPUs {', '.join(str(g.index) for g in self.gpus)}.")
            gpus = [known[i] for i in self.options.gpus]
        same = [g for g in gpus if g.arch == gpus[0].arch]
        if len(same) < len(gpus):
            self.report.note(f"tuning for {gpus[0].arch_key} ({gpus[0].name}): the GPUs of other "
                             "architectures are not used; run tune again with --gpus for them")
        return same

    def _check_gpus_free(self, gpus: Sequence[Gpu]) -> None:
        """Stop when another process holds a GPU that would measure; --allow-shared-gpu goes
        on, and the session records the processes, for the report."""
        procs = compute_processes([g.index for g in gpus])
        if procs and not self.options.allow_shared_gpu:
            raise CompileIQError(shared_gpu_error(procs))
        self.shared_gpu = [asdict(p) for p in procs]
        for p in procs:
            self.report.note(f"warning: measuring on GPU {p.gpu}, which pid {p.pid} "
                             f"({p.name or 'not visible from here'}) also uses (--allow-shared-gpu)")

    def _ray_workers(self, cuda: bool) -> tuple[list[Worker], Project, str]:
        """Workers on the Ray cluster's GPUs (or nodes, for CPU targets), configured."""
        slots = self.options.jobs or 2
        workers = ray_workers.start(self.options.ray or "local", self.project, self.work, slots, cuda)
        arch = workers[0].arch
        if any(w.arch != arch for w in workers):
            self.report.note(f"tuning for sm_{arch}: the Ray workers on GPUs of other architectures "
                             "are not used")
            workers = [w for w in workers if w.arch == arch]
        with ThreadPoolExecutor(len(workers)) as pool:
            projects = list(pool.map(lambda w: w.configure(arch), workers))
        return list(workers), projects[0], arch

    def _configure(self, workers: Sequence[LocalWorker], arch: str) -> Project:
        """Configure every build tree at once; returns the tuning trees' project."""
        trees = [workers[0].baseline, *(t for w in workers for t in w.all_trees[1:])]
        with ThreadPoolExecutor(len(trees)) as pool:
            list(pool.map(lambda tree: tree.configure(arch), trees))
        for worker in workers:
            worker.reset()
        return workers[0].baseline.project

    def _space(self, target: Target, tree_project: Project, arch: str) -> FlagSpace:
        compilers = {lang: (c.path, c.version) for lang, c in tree_project.compilers.items()}
        extra = {"CUDA": [f"-arch=sm_{arch}"] if arch else []}
        prober = Prober(self.workspace.probe, extra)
        space = build_space(target.languages, compilers, prober, self.options.allow_numerics_change,
                            self.options.max_stage, self.options.allow_host_specific)
        if self.options.dimensions:
            known = {d.name for d in space.dimensions} | {d.key for d in space.dimensions}
            unknown = [n for n in self.options.dimensions if n not in known]
            left_out = {n for k in space.excluded_host_specific for n in (k, k.split(":", 1)[1])}
            host = [n for n in unknown if n in left_out]
            if host:
                raise CompileIQError(f"--dimensions names {', '.join(host)}, whose flags make binaries "
                                     "that run only on CPUs like this one; add --allow-host-specific "
                                     "to tune it.")
            if unknown:
                raise CompileIQError(f"--dimensions names {', '.join(unknown)}, not in the space of "
                                     f"{target.name}: {', '.join(sorted(d.name for d in space.dimensions))}")
            space = FlagSpace(tuple(d for d in space.dimensions if d.name in self.options.dimensions
                                    or d.key in self.options.dimensions), space.rejected,
                              space.excluded_numerics, space.excluded_host_specific)
        for r in space.rejected:
            self.report.note(f"dropped {r.flag}: {r.reason}")
        if space.excluded_host_specific:
            self.report.note(f"{target.name}: left out {', '.join(space.excluded_host_specific)}: "
                             "binaries would run only on CPUs like this one (--allow-host-specific "
                             "tries them)")
        return space

    @staticmethod
    def _trials(evaluator: Evaluator, target: str | None = None) -> list[Trial]:
        """A target's measured search history (default: the evaluator's), as strategies see it."""
        return Tuner._history(evaluator, target)[0]

    @staticmethod
    def _history(evaluator: Evaluator, target: str | None = None) -> tuple[list[Trial], list[Candidate]]:
        """The search so far: its trials, and every compiled candidate with its code and
        compile-time features (the model fits on those, measured or not)."""
        name = target or evaluator.target.name
        found = outcomes(evaluator.store, name, evaluator.arch_keys, "search")
        trials = [Trial(o.evaluation.config, o.ratio, o.faster, o.spread, o.evaluation.digest,
                        phase=o.evaluation.proposed_by, parent=o.evaluation.parent) for o in found]
        ahead = [r for r in evaluator.store.evaluations(name, evaluator.arch_keys, SCOUT)
                 if r.status == COMPILED and r.digest]
        known = [Candidate(r.config, r.digest, r.features or {})
                 for r in [*(o.evaluation for o in found), *ahead] if r.digest]
        return trials, known

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

    def _predicted(self, evaluator: Evaluator, space: FlagSpace, decision: Winner) -> dict[str, object]:
        """What the prior predicted of the winner, option by option (pred_contrib), for the report."""
        prior = self.prior()
        _, known = self._history(evaluator)
        ours = [c for c in known if config_key(space.full_config(c.config)) == decision.config_key]
        if prior is None or not ours or not evaluator.baseline_features:
            return {}
        config = space.full_config(ours[0].config)
        features = next((c.features for c in ours if c.features), None)
        contributions = prior.contributions(config, features, evaluator.baseline_features)
        chosen = {d.name for d in space.dimensions if config[d.key] != DEFAULT}
        return {"config": decision.config_key, "prior": prior.label, "total": sum(contributions.values()),
                "contributions": {k: v for k, v in contributions.items() if k in chosen or k == "code"}}

    @staticmethod
    def _transfer(evaluator: Evaluator) -> list[Trial]:
        """Search evaluations of the other targets tuned for the same architectures (warm start)."""
        name = evaluator.target.name
        others = {r.target for r in evaluator.store.evaluations(phase="search") if r.target != name}
        return [t for other in sorted(others) for t in Tuner._trials(evaluator, other)]

    def _parallel(self) -> int:
        """Candidates compiled at once: --jobs, else a quarter of the cores (at most 8)."""
        if self.options.jobs:
            return self.options.jobs
        return max(1, min(8, (os.cpu_count() or 1) // 4))

    @staticmethod
    def _ninja_jobs(parallel: int) -> int | None:
        """Ninja's parallelism in each candidate tree: the cores shared among the trees."""
        return None if parallel == 1 else max(1, (os.cpu_count() or 1) // parallel)

    def _search(self, evaluator: Evaluator, space: FlagSpace, targets_left: int) -> None:
        until = self._share_of_time(targets_left)

        def out_of_time() -> str:
            reserve = self._validation_reserve(evaluator)
            if not self.out_of_time(reserve, until):
                return ""
            kept = f" ({reserve:.0f} s kept to validate the best candidate)" if reserve >= 1 else ""
            if targets_left > 1:
                return f"its share of the time limit is used ({targets_left} targets were left){kept}"
            return f"time limit reached{kept}"

        def halt() -> str:
            return "stopped by Ctrl-C" if self.interrupt["stop"] else out_of_time()

        transfer = self._transfer(evaluator)
        model = self.options.strategy == "model"
        if transfer and model:
            self.report.note(f"{evaluator.target.name}: the search starts from {len(transfer)} evaluations "
                             "of other targets in the store")
        prior = self.prior() if model and for_space(space) and evaluator.baseline_features else None
        if model:
            used = prior.label if prior else (
                "none: it knows CUDA options only" if not for_space(space) else
                "off (--no-prior)" if not self.options.prior else
                "none: the baseline's machine code has no features" if not evaluator.baseline_features else
                "none: it could not be loaded (see the warning)")
            self.report.note(f"{evaluator.target.name}: prior {used}")
            evaluator.store.update_session(evaluator.session, "prior_used", {evaluator.target.name: used})
        strategy = make_strategy(self.options.strategy, self.options.seed, transfer, prior)
        proposals = Proposals(strategy, space, lambda: self._history(evaluator), self.options.budget, halt,
                              evaluator.baseline.digest, self.options.max_candidates,
                              self.options.compile_ahead, out_of_time, evaluator.baseline_features)
        # CPU benchmarks are measured only once the compilers are done: they share the cores.
        run_search(evaluator, evaluator.workers, proposals, self.report,
                   overlap="CUDA" in evaluator.target.languages)
        self.check_interrupt()
        self.report.note(f"{evaluator.target.name}: {proposals.finished}")
        searched = outcomes(evaluator.store, evaluator.target.name, evaluator.arch_keys, "search")
        self.report.note(f"{evaluator.target.name}: {len(searched)} candidates measured "
                         f"({verdict_counts(searched)})")
        if ahead := proposals.ahead:
            codes = [c for c in ahead.values() if c]
            self.report.note(f"{evaluator.target.name}: {len(ahead)} configurations compiled ahead, "
                             f"{len(set(codes))} distinct machine codes "
                             f"({len(ahead) - len(codes)} did not build)")

    def _sampling(self) -> Sampling:
        o = self.options
        return Sampling(o.repeats, max(o.repeats, o.max_repeats), o.precision, o.measure_time_cap)

    def _validate(self, evaluator: Evaluator, store: Store,
                  space: FlagSpace) -> tuple[Winner | NoWinner, list[str]]:
        """Re-measure the best few candidates ranked above the current answer with twice the runs
        (a best-of-N pick is biased low); returns the decision and what this run re-measured."""
        name, arch = evaluator.target.name, evaluator.arch_keys
        remeasured: list[str] = []
        for finalist in pending_validation(store, name, arch)[:FINALISTS]:
            row = finalist.evaluation
            self.check_interrupt()
            if self.out_of_time():
                self.report.note(f"{name}: time limit reached before {row.config_key} was validated; "
                                 "run tune again with more time to validate it")
                break
            self.report.phase(f"validating {name}: {row.config_key}")
            flags = {k: tuple(v) for k, v in row.flags.items()}
            built = evaluator.build(flags, evaluator.workers[0], 0)
            check = evaluator.evaluate(row.config, flags, row.strategy, "validate", built,
                                       numerics=space.changes_numerics(row.config),
                                       sampling=self._sampling().scaled(2))
            remeasured.append(row.config_key)
            if check.faster:
                break
            self.report.note(f"{name}: {row.config_key} did not hold up when re-measured")
        return decide(store, name, arch), remeasured

    def _minimize(self, evaluator: Evaluator, store: Store, space: FlagSpace, winner: Winner) -> Winner:
        """The winner less the options it can do without (minimize.py), as time allows."""
        name, arch = evaluator.target.name, evaluator.arch_keys
        check = next(o for o in reversed(outcomes(store, name, arch, "validate"))
                     if o.evaluation.config_key == winner.validated and o.faster)

        def halt() -> bool:
            self.check_interrupt()
            return self.out_of_time()

        minimize(evaluator, space, check, self._sampling().scaled(2), halt, self.report)
        decision = decide(store, name, arch)
        assert isinstance(decision, Winner)  # minimizing adds no search or validation result
        return decision

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
