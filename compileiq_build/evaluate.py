"""Evaluate one candidate: build it with Ninja, run its benchmarks paired with the baseline.

Pairs run in a random order (a fixed order would turn any first-run/second-run
effect into a fake gain) and continue adaptively: from `min_pairs` on, a
workload stops once its interval has decided (entirely below or above 1) or is
narrower than `precision`, and at the latest after `max_pairs` or `time_cap`.
Two rules stop a search candidate sooner, each against the noise of a paired log ratio pooled
over the target's earlier search evaluations (`Race`):

- racing (`raced_out`; minimizing steps too): from `RACE_PAIRS` pairs on, a candidate that can
  no longer be a winner (a minimizing step: can no longer serve as well as the configuration
  it reduces), and its remaining benchmarks are not run;
- the indifference zone (`indifferent`): from `INDIFFERENT_PAIRS` pairs on, a candidate that
  cannot beat the best so far by `precision`, the resolution the user asked for.

With several benchmarks, each one's first `RACE_PAIRS` pairs run before any is measured in
full (a probe), so that a candidate slower on its last benchmark stops before the first takes
all its pairs.  Validation measures fully.  What the rules cost and save, measured on recorded
H200 pairs: benchmarks/results/measurement/README.md.
"""

from __future__ import annotations

import math
import random
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise

from compileiq_build.build import BuildResult
from compileiq_build.codeinfo import hot_features
from compileiq_build.errors import CompileIQError
from compileiq_build.gpu import slowdowns
from compileiq_build.measure import Run, coarse_values, compare_evidence
from compileiq_build.parsers import ParseError
from compileiq_build.progress import Reporter
from compileiq_build.project import Benchmark, Target
from compileiq_build.selection import FINALISTS, SAME_AS_BASELINE, Outcome, finalists, outcomes, summarize
from compileiq_build.space import config_key
from compileiq_build.stats import geometric_mean, ratio_estimate
from compileiq_build.store import (
    BUILD_FAILED,
    COMPILED,
    INTERRUPTED,
    INVALID,
    MEASURED,
    SCOUT,
    EvaluationRow,
    Store,
)
from compileiq_build.workers import BASELINE_SLOT, SCOUT_SLOT, Compiled, Worker

# A candidate this much slower on its first pairs is not measured further.
HOPELESS_RATIO = 1.5
HOPELESS_PAIRS = 2

# Racing: see the module docstring.
RACE_PAIRS = 2
RACE_FLOOR = 0.005
RACE_SIGMAS = 3.0
RACE_NOISE_MIN = 8  # successive differences of a workload before its noise is trusted
NORMAL_STEP = 0.954  # median |x - y| / sd for independent normal x, y: 0.6745 * sqrt(2)
# Indifference zone: see the module docstring.
INDIFFERENT_PAIRS = 3
INDIFFERENT_Z = 2.0
MEDIAN_SD = 1.2533  # sd of a normal sample's median, in units of sd / sqrt(n): sqrt(pi / 2)


@dataclass(frozen=True)
class Sampling:
    min_pairs: int = 5
    max_pairs: int = 20
    precision: float = 0.005  # stop when the interval is narrower than this fraction of the ratio
    time_cap: float = 300.0  # seconds per workload and evaluation

    def scaled(self, factor: int) -> Sampling:
        return Sampling(self.min_pairs * factor, self.max_pairs * factor, self.precision,
                        self.time_cap * factor)


Costs = Mapping[str, tuple[list[float], list[float]]]


@dataclass(frozen=True)
class Race:
    """What a search candidate races against (module docstring)."""

    reference: float | None  # the FINALISTS-th best ratio faster than the baseline; None: fewer
    noise: Mapping[str, float]  # workload entry -> standard deviation of its log paired ratio
    settled: Mapping[str, float] = field(default_factory=dict)  # earlier benchmarks' final low ends
    last: bool = True  # measuring the evaluation's last benchmark: rule (b) bounds every workload
    against: str = "the finalists reach"  # what the reference is, for the reason
    incumbent: float | None = None  # the best search ratio so far (at most 1); None: no indifference
    precision: float = 0.005  # the indifference zone's width, relative
    others: Costs = field(default_factory=dict)  # the pairs of the evaluation's other benchmarks

    def margin(self, workload: str) -> float | None:
        sigma = self.noise.get(workload)
        return None if sigma is None else max(RACE_FLOOR, RACE_SIGMAS * sigma)


def raced_out(costs: Costs, pairs: int, race: Race | None) -> str:
    """Why the candidate can no longer be a winner, or "" while it still can.

    A workload's margin is max(`RACE_FLOOR`, `RACE_SIGMAS` x its pooled sigma); a workload with
    fewer than `RACE_NOISE_MIN` successive differences is never raced.  Out when

    (a) a workload's interval lies above 1 + margin: it can never be faster on every workload,
        which a winner needs; or
    (b) the geometric mean of its intervals' low ends (earlier benchmarks' final low ends
        included, so only while measuring the last one) lies above reference x (1 + mean
        margin).  The reference is the ratio of the `FINALISTS`-th best candidate faster than
        the baseline so far (`decide` validates that many, and the second best wins when the
        best fails validation); for a minimizing step, that of the configuration it reduces.

    With 2 pairs the low end is the smaller ratio: a candidate truly as good as the reference
    is raced out with probability P(z > 3)^2 = 2e-6 under normal noise."""
    if race is None or pairs < RACE_PAIRS:
        return ""
    lows = dict(race.settled)
    for workload, (cand, base) in costs.items():
        lows[workload] = ratio_estimate(cand, base).low
        margin = race.margin(workload)
        if margin is not None and lows[workload] > 1 + margin:
            return (f"raced out after {pairs} pairs: {workload} at least {lows[workload] - 1:.1%} "
                    "slower than the baseline")
    margins = [race.margin(w) for w in lows]
    if race.reference is None or not race.last or None in margins:
        return ""
    bound = geometric_mean(list(lows.values()))
    mean_margin = sum(m for m in margins if m is not None) / len(margins)
    if bound > race.reference * (1 + mean_margin):
        return (f"raced out after {pairs} pairs: at best {1 / bound:.3f}x, {race.against} "
                f"{1 / race.reference:.3f}x")
    return ""


def indifferent(costs: Costs, pairs: int, race: Race | None) -> str:
    """Why the candidate cannot beat the incumbent by the race's precision, or "" while it
    still can; needs every workload's noise.

    The incumbent is the best search candidate found faster, else the baseline.  The bound is
    the geometric mean over workloads (the evaluation's other benchmarks' pairs included) of
    exp(median log ratio - `INDIFFERENT_Z` x `MEDIAN_SD` x sigma / sqrt(pairs)), 2.3% one sided
    per look; the candidate stops when it lies above incumbent x (1 - precision).  One whose
    interval says faster still gets `min_pairs` first (`sampling_done`)."""
    if race is None or race.incumbent is None or pairs < INDIFFERENT_PAIRS:
        return ""
    bounds = []
    for workload, (cand, base) in {**race.others, **costs}.items():
        sigma = race.noise.get(workload)
        if sigma is None or not cand:
            return ""
        logs = [math.log(c / b) for c, b in zip(cand, base, strict=False)]
        bounds.append(statistics.median(logs) - INDIFFERENT_Z * MEDIAN_SD * sigma / math.sqrt(len(logs)))
    bound = math.exp(sum(bounds) / len(bounds))
    if bound <= race.incumbent * (1 - race.precision):
        return ""
    best = "the baseline" if race.incumbent >= 1 else f"the best so far, {1 / race.incumbent:.3f}x"
    return (f"indifferent after {pairs} pairs: at best {1 / bound:.3f}x, not {race.precision:.1%} "
            f"better than {best}")


def sampling_done(costs: Costs, pairs: int, sampling: Sampling, elapsed: float,
                  race: Race | None = None) -> bool:
    """The stopping rule: costs maps each workload entry to (candidate, baseline) costs, paired."""
    ratios = [[c / b for c, b in zip(*pair, strict=True)] for pair in costs.values()]
    if pairs >= HOPELESS_PAIRS and any(min(r) > HOPELESS_RATIO for r in ratios):
        return True
    if raced_out(costs, pairs, race):
        return True
    if indifferent(costs, pairs, race) and (pairs >= sampling.min_pairs or not any(
            ratio_estimate(c, b).faster for c, b in costs.values())):
        return True  # one that looks faster still gets the pairs that a "faster" call needs
    if elapsed > sampling.time_cap:
        return True
    if pairs < sampling.min_pairs:
        return False
    for cand, base in costs.values():
        est = ratio_estimate(cand, base)
        if not (est.faster or est.slower or est.high - est.low < sampling.precision * est.ratio):
            return False
    return True


class _Stopped(Exception):
    """The search's time ran out while a candidate was being measured."""


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
        self.baseline_compiled: Compiled | None = None  # the baseline build's code and features
        self.dedup_hits = 0
        self.hot_kernels: set[str] = set()  # the profiled kernels of this target that take the time
        self._lock = threading.Lock()

    @property
    def _build_timeout(self) -> float:
        """A candidate that makes the compiler hang is stopped at a multiple of the baseline build."""
        return self.build_timeout or max(300.0, 20 * self.baseline_build_s)

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
            built = worker.build(BASELINE_SLOT, self.target.name, None, self.ninja_targets, 3600, self.jobs,
                                 self.hot_kernels)
            if not built.result.ok:
                raise CompileIQError(f"the project does not build with its own flags:\n{built.result.log}")
            seconds.append(built.result.seconds)
            self.baseline_digest = self.baseline_digest or built.digest
            self.baseline_compiled = self.baseline_compiled or built
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
        started = time.time()
        compiled = worker.build(slot, self.target.name, flags, self.ninja_targets, self._build_timeout,
                                self.jobs, self.hot_kernels)
        if compiled.rebuilt_nothing and any(self.target.source_counts.get(lang, 0) for lang in flags):
            # New flags that rebuild nothing would measure the old binary as this candidate.
            raise CompileIQError(
                f"new flags for {self.target.name} rebuilt nothing on {worker.name}: its objects do not "
                "depend on the CompileIQ flags file. Please report this with the project's CMakeLists.txt.")
        return Built(worker, compiled, started)

    def scout(self, config: Mapping[str, str], flags: Mapping[str, tuple[str, ...]], strategy: str,
              worker: Worker) -> str:
        """Compile a configuration ahead in the worker's scout tree, the target alone (no
        executable linked), and record its code and features (phase scout): the strategy knows
        them before it chooses what to measure.  Returns the digest ('' when it did not build)."""
        compiled = worker.build(SCOUT_SLOT, self.target.name, flags, [self.target.cmake_target],
                                self._build_timeout, self.jobs, self.hot_kernels)
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
                 proposed_by: str = "", parent: str = "", stop: Callable[[], str] | None = None) -> Outcome:
        """Measure one compiled candidate on its worker's device, paired with the baseline.
        `reduced_from` (phase minimize): the evaluation of the configuration this one leaves an
        option out of; of the same machine code, it stands for this one.  `proposed_by` and
        `parent` (phase search): the strategy's phase that proposed it and the key of the
        configuration it refines (Proposal).  `stop`, asked after every pair, says
        why to stop measuring (the search's time is up) or ""; a candidate stopped so is recorded
        as interrupted: its pairs stay, it is not counted, and a later run measures it again, as
        after a kill.  (Ctrl-C lets the evaluation in flight finish.)"""
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
        elif reduced_from is not None and (reaches := summarize(self.store, reduced_from).ratio):
            race = self._race(evaluation, reaches, "the configuration it reduces reaches")
        status, reason = MEASURED, ""
        probed: dict[int, Costs] = {}
        try:
            if race is not None and len(self.benchmarks) > 1:
                # A probe: every benchmark's first pairs before any is measured in full, so that a
                # candidate slower on a later benchmark stops before the earlier ones take all theirs.
                probe = replace(sampling, min_pairs=RACE_PAIRS, max_pairs=RACE_PAIRS)
                status, reason, probed = self._measure_all(evaluation, probe, numerics, built, race, {}, stop)
            if not reason:
                status, reason, _ = self._measure_all(evaluation, sampling, numerics, built, race, probed,
                                                      stop)
        except _Stopped as why:
            status, reason = INTERRUPTED, f"measuring stopped: {why}"
        self.store.finish_evaluation(evaluation, status, reason, built.result.seconds)
        return self._outcome(evaluation)

    def _measure_all(self, evaluation: int, sampling: Sampling, numerics: bool, built: Built,
                     race: Race | None, earlier: Mapping[int, Costs],
                     stop: Callable[[], str] | None = None) -> tuple[str, str, dict[int, Costs]]:
        """Every benchmark in turn, continuing its `earlier` pairs, until one is invalid or the
        candidate is raced out: the status, the reason ("" when neither), and each benchmark's
        pairs."""
        costs_of: dict[int, Costs] = {}
        for i, bench in enumerate(self.benchmarks):
            if race is not None:
                others = {w: c for j, costs in {**earlier, **costs_of}.items() if j != bench.index
                          for w, c in costs.items()}
                race = replace(race, last=i == len(self.benchmarks) - 1, others=others)
            error, costs = self._measure(evaluation, bench, sampling, numerics, built, race,
                                         earlier.get(bench.index), stop)
            costs_of[bench.index] = costs
            if error:
                return INVALID, f"{bench.workload}: {error}", costs_of
            if race is not None and costs:
                pairs = len(next(iter(costs.values()))[0])
                if why := raced_out(costs, pairs, race) or indifferent(costs, pairs, race):
                    return MEASURED, why, costs_of  # its other benchmarks cannot make it a winner
                lows = {w: ratio_estimate(c, b).low for w, (c, b) in costs.items()}
                race = replace(race, settled={**race.settled, **lows})
        return MEASURED, "", costs_of

    def _race(self, evaluation: int, reference: float | None = None,
              against: str = "the finalists reach") -> Race:
        """Each workload's noise, from the target's earlier search evaluations (tens of rows:
        cheap enough at the start of every evaluation), and the reference: `reference`, else the
        FINALISTS-th best ratio of the search so far, and then the incumbent (the best ratio
        faster than the baseline, else 1) for the indifference zone."""
        incumbent = None
        if reference is None:
            measured = [o for o in outcomes(self.store, self.target.name, self.arch_keys, "search")
                        if o.evaluation.id != evaluation]
            best = finalists(measured, FINALISTS)
            reference = best[-1].ratio if len(best) == FINALISTS else None
            incumbent = min(1.0, best[0].ratio or 1.0) if best else 1.0
        steps: dict[str, list[float]] = {}
        for row in self.store.evaluations(self.target.name, self.arch_keys, "search"):
            if row.status != MEASURED or row.same_as is not None:
                continue
            paired: dict[str, dict[int, dict[str, float]]] = {}
            for workload, role, rep, cost, error in self.store.samples(row.id):
                if cost and not error:
                    paired.setdefault(workload, {}).setdefault(rep, {})[role] = cost
            for workload, reps in paired.items():
                logs = [math.log(p["candidate"] / p["baseline"]) for _, p in sorted(reps.items())
                        if len(p) == 2]
                steps.setdefault(workload, []).extend(abs(a - b) for a, b in pairwise(logs))
        noise = {w: statistics.median(d) / NORMAL_STEP for w, d in steps.items() if len(d) >= RACE_NOISE_MIN}
        return Race(reference, noise, against=against, incumbent=incumbent,
                    precision=self.sampling.precision)

    def _same_code(self, evaluation: int, phase: str, built: Built,
                   reduced_from: EvaluationRow | None) -> int | None:
        """Record the candidate's code digest and compile-time features; in the search (and when
        minimizing), return the evaluation (or the baseline) that already measured the same
        machine code."""
        twin = None
        digest = built.compiled.digest
        if reduced_from is not None and digest:
            # The twin is the evaluation that holds the samples, as in the search.
            twin = SAME_AS_BASELINE if digest == self.baseline_digest else (
                (reduced_from.same_as or reduced_from.id) if digest == reduced_from.digest else None)
        elif phase == "search" and digest:
            if digest == self.baseline_digest:
                twin = SAME_AS_BASELINE
            else:
                twin = next((r.id for r in self.store.evaluations(self.target.name, self.arch_keys, "search")
                             if r.digest == digest and r.status == MEASURED and r.same_as is None
                             and r.id != evaluation), None)
        self.store.set_code(evaluation, digest, self.features(built.compiled), twin)
        return twin

    def rekey_baseline(self, worker: Worker) -> None:
        """The baseline's digest and features once the hot kernels are known (a no-op build)."""
        built = worker.build(BASELINE_SLOT, self.target.name, None, self.ninja_targets, 3600, self.jobs,
                             self.hot_kernels)
        if built.result.ok:
            self.baseline_digest, self.baseline_compiled = built.digest, built

    @property
    def baseline_features(self) -> dict[str, float]:
        """The baseline code's features, as `features` gives a candidate's ({} before the build)."""
        return self.features(self.baseline_compiled) if self.baseline_compiled else {}

    def features(self, compiled: Compiled) -> dict[str, float]:
        """What the model sees of a build: the features of the profiled hot kernels, where known."""
        return hot_features(compiled.features, self.hot_kernels) if self.hot_kernels else compiled.features

    def _measure(self, evaluation: int, bench: Benchmark, sampling: Sampling, numerics: bool,
                 built: Built, race: Race | None, earlier: Costs | None = None,
                 stop: Callable[[], str] | None = None) -> tuple[str, Costs]:
        """Paired runs on the candidate's worker until the comparison is decided or precise, or
        the candidate is raced out, continuing the `earlier` pairs (a probe); returns the
        candidate's error and the paired costs.  Raises _Stopped when `stop` says why."""
        worker, slot = built.worker, built.compiled.slot
        timeout = self._timeout(bench)
        costs: dict[str, tuple[list[float], list[float]]] = {
            w: (list(c), list(b)) for w, (c, b) in (earlier or {}).items()}
        first = len(next(iter(costs.values()))[0]) if costs else 0
        slowed: list[Run] = []  # runs during which the GPU slowed down: one warning at the end
        start = time.monotonic()
        runs_done = 0
        try:
            for rep in range(first, sampling.max_pairs):
                runs: dict[str, Run] = {}
                order = random.Random(f"{evaluation}:{bench.index}:{rep}")
                for role in order.sample(("candidate", "baseline"), 2):
                    runs[role] = worker.run(slot if role == "candidate" else BASELINE_SLOT, bench, timeout)
                    runs_done += 1
                    for sample in runs[role].samples:
                        self.store.add_sample(evaluation, role, rep, sample)
                    if runs[role].samples and slowdowns(runs[role].samples[0].gpu):
                        slowed.append(runs[role])
                cand, base = runs["candidate"], runs["baseline"]
                if not cand.ok:
                    return cand.error, costs
                if not base.ok:
                    raise CompileIQError(
                        f"benchmark '{bench.workload}' failed with the project's own flags during "
                        f"tuning: {base.error}. The benchmark is unreliable; fix it and run tune again.")
                mismatch = compare_evidence(self.evidence.get(bench.workload), cand.evidence,
                                            bench.tolerance if numerics else None)
                if mismatch:
                    what = "checksum" if bench.checksum else "output file"
                    return f"{what} {mismatch}", costs
                base_by_entry = {b.workload: b for b in base.samples}
                if {c.workload for c in cand.samples} != set(base_by_entry):
                    return "the candidate reported other entries than the baseline", costs
                for c in cand.samples:
                    pair = costs.setdefault(c.workload, ([], []))
                    pair[0].append(c.cost or 0.0)
                    pair[1].append(base_by_entry[c.workload].cost or 0.0)
                if sampling_done(costs, rep + 1, sampling, time.monotonic() - start, race):
                    break
                if stop is not None and (why := stop()):
                    raise _Stopped(why)
            return "", costs
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
