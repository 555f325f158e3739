"""Evaluate one candidate: build it with Ninja, run its benchmarks paired with the baseline.

Pairs run in a random order (a fixed order would turn any first-run/second-run
effect into a fake gain) and continue adaptively: from `min_pairs` on, a
workload stops once its interval has decided (entirely below or above 1) or is
narrower than `precision`, and at the latest after `max_pairs` or `time_cap`.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from compileiq_build.build import BuildResult
from compileiq_build.errors import CompileIQError
from compileiq_build.gpu import slowdowns
from compileiq_build.measure import Run, coarse_values, compare_evidence
from compileiq_build.parsers import ParseError
from compileiq_build.progress import Reporter
from compileiq_build.project import Benchmark, Target
from compileiq_build.selection import SAME_AS_BASELINE, Outcome, summarize
from compileiq_build.space import config_key
from compileiq_build.stats import ratio_estimate
from compileiq_build.store import BUILD_FAILED, INVALID, MEASURED, Store
from compileiq_build.workers import BASELINE_SLOT, Compiled, Worker

# A candidate this much slower on its first pairs is not measured further.
HOPELESS_RATIO = 1.5
HOPELESS_PAIRS = 2


@dataclass(frozen=True)
class Sampling:
    min_pairs: int = 5
    max_pairs: int = 20
    precision: float = 0.005  # stop when the interval is narrower than this fraction of the ratio
    time_cap: float = 300.0  # seconds per workload and evaluation

    def scaled(self, factor: int) -> Sampling:
        return Sampling(self.min_pairs * factor, self.max_pairs * factor, self.precision,
                        self.time_cap * factor)


def sampling_done(costs: Mapping[str, tuple[list[float], list[float]]], pairs: int, sampling: Sampling,
                  elapsed: float) -> bool:
    """The stopping rule: costs maps each workload entry to (candidate, baseline) costs, paired."""
    ratios = [[c / b for c, b in zip(*pair, strict=True)] for pair in costs.values()]
    if pairs >= HOPELESS_PAIRS and any(min(r) > HOPELESS_RATIO for r in ratios):
        return True
    if elapsed > sampling.time_cap:
        return True
    if pairs < sampling.min_pairs:
        return False
    for cand, base in costs.values():
        est = ratio_estimate(cand, base)
        if not (est.faster or est.slower or est.high - est.low < sampling.precision * est.ratio):
            return False
    return True


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
                 store: Store, session: int, sampling: Sampling, jobs: int | None, report: Reporter,
                 build_timeout: float | None = None) -> None:
        self.target = target
        self.benchmarks = benchmarks
        self.workers = list(workers)
        self.store = store
        self.session = session
        self.sampling = sampling
        self.jobs = jobs
        self.build_timeout = build_timeout
        self.report = report
        self.arch_keys = dict(target.arch_keys)
        self.ninja_targets = sorted({b.executable_target for b in benchmarks if b.executable_target})
        if any(not b.executable_target for b in benchmarks):
            self.ninja_targets = []  # a benchmark outside the project: build everything
        self.baseline_build_s = 60.0
        self.baseline_wall: dict[str, float] = {}
        self.evidence: dict[str, str | bytes | None] = {}
        self.baseline_digest = ""
        self.dedup_hits = 0
        self._lock = threading.Lock()

    def _timeout(self, bench: Benchmark) -> float:
        base = self.baseline_wall.get(bench.workload, 60.0)
        limit = 10.0 * base + 10.0
        return min(limit, bench.timeout) if bench.timeout else limit

    def prepare_baseline(self) -> None:
        """Build every worker's baseline; check that every benchmark passes, twice alike on each
        worker's device, with the project's flags; resolve FORMAT auto; keep the checksums
        candidates must match."""
        self.report.phase(f"{self.target.name}: building the baseline")
        seconds = [1.0]
        for worker in self.workers:  # local workers share one tree: the builds after the first are no-ops
            built = worker.build(BASELINE_SLOT, self.target.name, None, self.ninja_targets, 3600, self.jobs)
            if not built.result.ok:
                raise CompileIQError(f"the project does not build with its own flags:\n{built.result.log}")
            seconds.append(built.result.seconds)
            self.baseline_digest = self.baseline_digest or built.digest
        self.baseline_build_s = max(seconds)
        resolved = []
        for bench in self.benchmarks:
            self.report.phase(f"{self.target.name}: baseline runs of {bench.workload}")
            try:
                bench = self.workers[0].resolve(bench, timeout=bench.timeout or 3600)
            except ParseError as exc:
                raise CompileIQError(f"benchmark '{bench.workload}': {exc}") from None
            runs = [(w, w.run(BASELINE_SLOT, bench, bench.timeout or 3600)) for w in self.workers
                    for _ in range(2)]
            for worker, run in runs:
                if not run.ok:
                    where = f" on {worker.name}" if len(self.workers) > 1 else ""
                    raise CompileIQError(
                        f"benchmark '{bench.workload}' fails with the project's own flags{where}: "
                        f"{run.error}\nFix the benchmark (or its registration) first.")
            reference = runs[0][1].evidence
            if any(compare_evidence(reference, run.evidence, None) for _, run in runs[1:]):
                raise CompileIQError(
                    f"benchmark '{bench.workload}': its checksum or output file differs between runs "
                    "with the project's own flags, so it cannot check candidates. Make its output "
                    "deterministic (fixed seeds), or drop CHECKSUM/OUTPUT_FILE.")
            for warning in coarse_values(runs[0][1]):
                self.report.note(f"warning: {warning}")
            self.evidence[bench.workload] = reference
            self.baseline_wall[bench.workload] = statistics.median(r.samples[0].wall_s for _, r in runs)
            resolved.append(bench)
        self.benchmarks = resolved

    def build(self, flags: Mapping[str, tuple[str, ...]], worker: Worker, slot: int) -> Built:
        """Compile a candidate in a worker's slot (safe in a thread: it touches no store)."""
        # A candidate that makes the compiler hang is stopped at a multiple of the baseline build.
        timeout = self.build_timeout or max(300.0, 20 * self.baseline_build_s)
        started = time.time()
        compiled = worker.build(slot, self.target.name, flags, self.ninja_targets, timeout, self.jobs)
        if compiled.rebuilt_nothing and any(self.target.source_counts.get(lang, 0) for lang in flags):
            # New flags that rebuild nothing would measure the old binary as this candidate.
            raise CompileIQError(
                f"new flags for {self.target.name} rebuilt nothing on {worker.name}: its objects do not "
                "depend on the CompileIQ flags file. Please report this with the project's CMakeLists.txt.")
        return Built(worker, compiled, started)

    def evaluate(self, config: Mapping[str, str], flags: Mapping[str, tuple[str, ...]],
                 strategy: str, phase: str, built: Built, numerics: bool = False,
                 sampling: Sampling | None = None) -> Outcome:
        """Measure one compiled candidate on its worker's device, paired with the baseline."""
        sampling = sampling or self.sampling
        key = config_key(config)
        evaluation = self.store.begin_evaluation(self.session, self.target.name, self.arch_keys,
                                                 key, config, flags, strategy, phase, built.worker.name,
                                                 built.started)
        if not built.result.ok:
            self.store.finish_evaluation(evaluation, BUILD_FAILED, _last_lines(built.result.log),
                                         built.result.seconds)
            return self._outcome(evaluation)
        twin = self._same_code(evaluation, phase, built)
        if twin is not None:
            with self._lock:
                self.dedup_hits += 1
            what = "the baseline" if twin == SAME_AS_BASELINE else f"evaluation {twin}"
            self.store.finish_evaluation(evaluation, MEASURED, f"same machine code as {what}",
                                         built.result.seconds)
            return self._outcome(evaluation)
        status, reason = MEASURED, ""
        for bench in self.benchmarks:
            error = self._measure(evaluation, bench, sampling, numerics, built)
            if error:
                status, reason = INVALID, f"{bench.workload}: {error}"
                break
        self.store.finish_evaluation(evaluation, status, reason, built.result.seconds)
        return self._outcome(evaluation)

    def _same_code(self, evaluation: int, phase: str, built: Built) -> int | None:
        """Record the candidate's code digest and compile-time features; in the search, return
        the evaluation (or the baseline) that already measured the same machine code."""
        twin = None
        digest = built.compiled.digest
        if phase == "search" and digest:
            if digest == self.baseline_digest:
                twin = SAME_AS_BASELINE
            else:
                twin = next((r.id for r in self.store.evaluations(self.target.name, self.arch_keys, "search")
                             if r.digest == digest and r.status == MEASURED and r.same_as is None
                             and r.id != evaluation), None)
        self.store.set_code(evaluation, digest, built.compiled.features, twin)
        return twin

    def _measure(self, evaluation: int, bench: Benchmark, sampling: Sampling, numerics: bool,
                 built: Built) -> str:
        """Paired runs on the candidate's worker until the comparison is decided or precise;
        returns the candidate's error."""
        worker, slot = built.worker, built.compiled.slot
        timeout = self._timeout(bench)
        order = random.Random(f"{evaluation}:{bench.index}")
        costs: dict[str, tuple[list[float], list[float]]] = {}
        slowed: list[Run] = []  # runs during which the GPU slowed down: one warning at the end
        start = time.monotonic()
        runs_done = 0
        try:
            for rep in range(sampling.max_pairs):
                runs: dict[str, Run] = {}
                for role in order.sample(("candidate", "baseline"), 2):
                    runs[role] = worker.run(slot if role == "candidate" else BASELINE_SLOT, bench, timeout)
                    runs_done += 1
                    for sample in runs[role].samples:
                        self.store.add_sample(evaluation, role, rep, sample)
                    if runs[role].samples and slowdowns(runs[role].samples[0].gpu):
                        slowed.append(runs[role])
                cand, base = runs["candidate"], runs["baseline"]
                if not cand.ok:
                    return cand.error
                if not base.ok:
                    raise CompileIQError(
                        f"benchmark '{bench.workload}' failed with the project's own flags during "
                        f"tuning: {base.error}. The benchmark is unreliable; fix it and run tune again.")
                mismatch = compare_evidence(self.evidence.get(bench.workload), cand.evidence,
                                            bench.tolerance if numerics else None)
                if mismatch:
                    what = "checksum" if bench.checksum else "output file"
                    return f"{what} {mismatch}"
                base_by_entry = {b.workload: b for b in base.samples}
                if {c.workload for c in cand.samples} != set(base_by_entry):
                    return "the candidate reported other entries than the baseline"
                for c in cand.samples:
                    pair = costs.setdefault(c.workload, ([], []))
                    pair[0].append(c.cost or 0.0)
                    pair[1].append(base_by_entry[c.workload].cost or 0.0)
                if sampling_done(costs, rep + 1, sampling, time.monotonic() - start):
                    break
            return ""
        finally:
            self._warn_slowdowns(bench, slowed, runs_done)

    def _warn_slowdowns(self, bench: Benchmark, slowed: list[Run], runs: int) -> None:
        """One warning per workload and candidate, however many runs the GPU slowed down."""
        if not slowed:
            return
        reasons = sorted({r for run in slowed for r in slowdowns(run.samples[0].gpu)})
        lowest = min(run.samples[0].gpu.get("sm_clock_min_mhz", 0) for run in slowed)
        self.report.note(f"GPU slowdown during {len(slowed)} of {runs} runs of {bench.workload}: "
                         f"{', '.join(reasons)} (SM clock down to {lowest} MHz); the measurements are "
                         "kept, paired with the baseline's, but are noisier")

    def _outcome(self, evaluation: int) -> Outcome:
        return summarize(self.store, self.store.evaluation(evaluation))


def _last_lines(log: str, n: int = 15) -> str:
    return "\n".join(log.strip().splitlines()[-n:])
