"""Evaluate one candidate: build it with Ninja, run its benchmarks interleaved with the baseline."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from pathlib import Path

from compileiq_build.build import BuildTree
from compileiq_build.errors import CompileIQError
from compileiq_build.measure import Sample, run_workload
from compileiq_build.progress import Reporter
from compileiq_build.project import Benchmark, Target
from compileiq_build.search import config_key
from compileiq_build.selection import Outcome, summarize
from compileiq_build.store import BUILD_FAILED, INVALID, MEASURED, Store

# A candidate this much slower on its first pairs is not measured further.
HOPELESS_RATIO = 1.5
HOPELESS_PAIRS = 2


class Evaluator:
    def __init__(self, target: Target, benchmarks: list[Benchmark], baseline_tree: BuildTree,
                 candidate_tree: BuildTree, store: Store, session: int, repeats: int,
                 jobs: int | None, report: Reporter, build_timeout: float | None = None) -> None:
        self.target = target
        self.benchmarks = benchmarks
        self.baseline_tree = baseline_tree
        self.candidate_tree = candidate_tree
        self.store = store
        self.session = session
        self.repeats = max(2, repeats)
        self.jobs = jobs
        self.build_timeout = build_timeout
        self.report = report
        self.arch_keys = dict(target.arch_keys)
        self.ninja_targets = sorted({b.executable_target for b in benchmarks if b.executable_target})
        if any(not b.executable_target for b in benchmarks):
            self.ninja_targets = []  # a benchmark outside the project: build everything
        self.baseline_build_s = 60.0
        self.baseline_wall: dict[str, float] = {}

    def _executable(self, bench: Benchmark, tree: BuildTree) -> Path:
        path = Path(bench.executable)
        if bench.executable_target:
            # The tree's own manifest lists where its executables are.
            for b in tree.project.benchmarks:
                if b.index == bench.index:
                    return Path(b.executable)
        return path

    def _timeout(self, bench: Benchmark) -> float:
        base = self.baseline_wall.get(bench.workload, 60.0)
        limit = 10.0 * base + 10.0
        return min(limit, bench.timeout) if bench.timeout else limit

    def prepare_baseline(self) -> None:
        """Build the baseline tree and check that every benchmark passes with the project's flags."""
        self.report.phase(f"{self.target.name}: building the baseline")
        built = self.baseline_tree.build(self.ninja_targets, timeout=3600, jobs=self.jobs)
        if not built.ok:
            raise CompileIQError(f"the project does not build with its own flags:\n{built.log}")
        self.baseline_build_s = max(built.seconds, 1.0)
        for bench in self.benchmarks:
            exe = self._executable(bench, self.baseline_tree)
            if bench.executable_target and not exe.is_file():
                raise CompileIQError(f"benchmark '{bench.workload}': {exe} was not built.")
            self.report.phase(f"{self.target.name}: baseline run of {bench.workload}")
            walls = []
            for _ in range(2):
                sample = run_workload(bench, exe, timeout=bench.timeout or 3600)
                if not sample.ok:
                    raise CompileIQError(
                        f"benchmark '{bench.workload}' fails with the project's own flags: "
                        f"{sample.error}\nFix the benchmark (or its registration) first.")
                walls.append(sample.wall_s)
            self.baseline_wall[bench.workload] = statistics.median(walls)

    def evaluate(self, config: Mapping[str, str], flags: Mapping[str, tuple[str, ...]],
                 strategy: str, phase: str, repeats: int | None = None) -> Outcome:
        repeats = repeats or self.repeats
        key = config_key(config)
        evaluation = self.store.begin_evaluation(self.session, self.target.name, self.arch_keys,
                                                 key, config, flags, strategy, phase)
        self.candidate_tree.write_flags({self.target.name: flags})
        # A candidate that makes the compiler hang is stopped at a multiple of the baseline build.
        timeout = self.build_timeout or max(300.0, 20 * self.baseline_build_s)
        built = self.candidate_tree.build(self.ninja_targets, timeout=timeout, jobs=self.jobs)
        if not built.ok:
            self.store.finish_evaluation(evaluation, BUILD_FAILED, _last_lines(built.log), built.seconds)
            return self._outcome(evaluation)
        status, reason = MEASURED, ""
        for bench in self.benchmarks:
            error = self._measure(evaluation, bench, repeats)
            if error:
                status, reason = INVALID, f"{bench.workload}: {error}"
                break
        self.store.finish_evaluation(evaluation, status, reason, built.seconds)
        return self._outcome(evaluation)

    def _measure(self, evaluation: int, bench: Benchmark, repeats: int) -> str:
        """Candidate and baseline runs alternate; returns the candidate's error, if any."""
        cand_exe = self._executable(bench, self.candidate_tree)
        base_exe = self._executable(bench, self.baseline_tree)
        timeout = self._timeout(bench)
        ratios = []
        for rep in range(repeats):
            cand = run_workload(bench, cand_exe, timeout)
            self.store.add_sample(evaluation, "candidate", rep, cand)
            if not cand.ok:
                return cand.error
            base = run_workload(bench, base_exe, timeout)
            self.store.add_sample(evaluation, "baseline", rep, base)
            if not base.ok:
                raise CompileIQError(
                    f"benchmark '{bench.workload}' failed with the project's own flags during "
                    f"tuning: {base.error}. The benchmark is unreliable; fix it and run tune again.")
            ratios.append(_ratio(cand, base))
            if rep + 1 >= HOPELESS_PAIRS and min(ratios) > HOPELESS_RATIO:
                break
        return ""

    def _outcome(self, evaluation: int) -> Outcome:
        row = next(r for r in self.store.evaluations(self.target.name, self.arch_keys)
                   if r.id == evaluation)
        return summarize(self.store, row)


def _ratio(cand: Sample, base: Sample) -> float:
    assert cand.cost is not None and base.cost is not None
    return cand.cost / base.cost


def _last_lines(log: str, n: int = 15) -> str:
    return "\n".join(log.strip().splitlines()[-n:])
