"""Paired measurement of one compiled candidate against the baseline, benchmark by benchmark.

Pairs run in a random order (a fixed order would turn any first-run/second-run effect into a
fake gain) and continue until the stopping rule (racing.py) says the comparison is decided,
precise, or hopeless.  With several benchmarks and a race, each one's first `RACE_PAIRS` pairs
run before any is measured in full (a probe), so that a candidate slower on its last benchmark
stops before the first takes all its pairs.  Every sample goes to the store as it is taken.

The candidate's build runs each benchmark's CHECK once, and one that fails makes it invalid:
before the first pair in validation and minimizing, whose results can ship; after the pairs in
the search, and only for a candidate still able to win (not raced out, not indifferent), since
no other can ship or be validated unchecked.  A check is no cheaper than a candidate's pairs:
ggml's test of its attention ops took about 20 s of a 45 s evaluation live, and 9 of the 12
candidates that search measured were raced out or indifferent.
"""

from __future__ import annotations

import random
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from compileiq_build.decide.clock import Clock
from compileiq_build.decide.racing import (
    RACE_PAIRS,
    Costs,
    Race,
    Sampling,
    indifferent,
    raced_out,
    sampling_done,
)
from compileiq_build.decide.stats import ratio_estimate
from compileiq_build.errors import CompileIQError
from compileiq_build.machine.gpu import slowdowns
from compileiq_build.notes import Notes
from compileiq_build.project.manifest import Benchmark
from compileiq_build.run.measure import Run, compare_evidence
from compileiq_build.run.worker import BASELINE_SLOT, Worker
from compileiq_build.store.database import INTERRUPTED, INVALID, MEASURED, Store


class Stopped(Exception):
    """The time ran out while a candidate was being measured."""


@dataclass(frozen=True)
class Pairing:
    """One candidate's paired runs: where it runs, what it must match, where the samples go."""

    store: Store
    notes: Notes
    evaluation: int  # the store's row of this measurement
    worker: Worker
    slot: int  # the worker's tree holding the candidate
    numerics: bool  # the candidate may change numerics: outputs match within each TOLERANCE
    evidence: Mapping[str, str | bytes | None]  # workload -> the baseline's checksum or output
    timeout: Callable[[Benchmark], float]  # seconds a run of the benchmark may take
    clock: Clock | None = None  # asked before every run: why to stop now (the time is up), or ""
    check_timeout: Callable[[Benchmark], float] | None = None  # for a CHECK; else TIMEOUT, or an hour

    def run(self, benchmarks: Sequence[Benchmark], sampling: Sampling, race: Race | None,
            check_late: bool = False) -> tuple[str, str]:
        """Every benchmark's CHECK, then every benchmark measured (a probe first, when racing
        several): the status and its reason.  With `check_late` (the search) the CHECK runs
        after the pairs, for a candidate that may still win (module docstring)."""
        status, reason = MEASURED, ""
        probed: dict[int, Costs] = {}
        try:
            if not check_late and (failed := self.check(benchmarks)):
                return INVALID, failed
            if race is not None and len(benchmarks) > 1:
                probe = replace(sampling, min_pairs=RACE_PAIRS, max_pairs=RACE_PAIRS)
                status, reason, probed = self.measure_all(benchmarks, probe, race, {})
            if not reason:
                status, reason, _ = self.measure_all(benchmarks, sampling, race, probed)
            if check_late and status == MEASURED and not reason and (failed := self.check(benchmarks)):
                return INVALID, failed
        except Stopped as why:
            status, reason = INTERRUPTED, f"measuring stopped: {why}"
        return status, reason

    def check(self, benchmarks: Sequence[Benchmark]) -> str:
        """Each distinct CHECK of the benchmarks, once, with the candidate's build: why the
        first that fails makes it invalid ("" when all pass).  Raises Stopped before a check
        when the clock says why."""
        done: set[tuple[str, ...]] = set()
        for bench in benchmarks:
            if not bench.check or bench.check in done:
                continue
            done.add(bench.check)
            if self.clock is not None and (why := self.clock.why_stop(in_flight=True)):
                raise Stopped(why)
            timeout = self.check_timeout(bench) if self.check_timeout else bench.timeout or 3600
            error, _ = self.worker.check(self.slot, bench, timeout)
            if error:
                return f"{bench.workload}: its CHECK ({shlex.join(bench.check)}) fails: {error}"
        return ""

    def measure_all(self, benchmarks: Sequence[Benchmark], sampling: Sampling, race: Race | None,
                    earlier: Mapping[int, Costs]) -> tuple[str, str, dict[int, Costs]]:
        """Every benchmark in turn, continuing its `earlier` pairs, until one is invalid or the
        candidate is raced out: the status, the reason ("" when neither), and each benchmark's
        pairs."""
        costs_of: dict[int, Costs] = {}
        for i, bench in enumerate(benchmarks):
            if race is not None:
                others = {w: c for j, costs in {**earlier, **costs_of}.items() if j != bench.index
                          for w, c in costs.items()}
                race = replace(race, last=i == len(benchmarks) - 1, others=others)
            error, costs = self.measure(bench, sampling, race, earlier.get(bench.index))
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

    def measure(self, bench: Benchmark, sampling: Sampling, race: Race | None,
                earlier: Costs | None = None) -> tuple[str, Costs]:
        """Paired runs until the comparison is decided or precise, or the candidate is raced
        out, continuing the `earlier` pairs (a probe); returns the candidate's error and the
        paired costs.  Raises Stopped before a run when the clock says why."""
        costs: dict[str, tuple[list[float], list[float]]] = {
            w: (list(c), list(b)) for w, (c, b) in (earlier or {}).items()}
        first = len(next(iter(costs.values()))[0]) if costs else 0
        slowed: list[Run] = []  # runs during which the GPU slowed down: one warning at the end
        timeout = self.timeout(bench)
        start = time.monotonic()
        runs_done = 0
        try:
            for rep in range(first, sampling.max_pairs):
                runs: dict[str, Run] = {}
                order = random.Random(f"{self.evaluation}:{bench.index}:{rep}")
                for role in order.sample(("candidate", "baseline"), 2):
                    if self.clock is not None and (why := self.clock.why_stop(in_flight=True)):
                        raise Stopped(why)
                    runs[role] = self.worker.run(self.slot if role == "candidate" else BASELINE_SLOT, bench,
                                                 timeout)
                    runs_done += 1
                    for sample in runs[role].samples:
                        self.store.add_sample(self.evaluation, role, rep, sample)
                    if runs[role].samples and slowdowns(runs[role].samples[0].gpu):
                        slowed.append(runs[role])
                if error := self._add(bench, runs, costs):
                    return error, costs
                if sampling_done(costs, rep + 1, sampling, time.monotonic() - start, race):
                    break
            return "", costs
        finally:
            warn_slowdowns(self.notes, bench, slowed, runs_done)

    def _add(self, bench: Benchmark, runs: Mapping[str, Run],
             costs: dict[str, tuple[list[float], list[float]]]) -> str:
        """Add a pair's costs, each workload entry's; or the candidate's error, when it has one."""
        cand, base = runs["candidate"], runs["baseline"]
        if not cand.ok:
            return cand.error
        if not base.ok:
            raise CompileIQError(
                f"benchmark '{bench.workload}' failed with the project's own flags during "
                f"tuning: {base.error}. The benchmark is unreliable; fix it and run tune again.")
        mismatch = compare_evidence(self.evidence.get(bench.workload), cand.evidence,
                                    bench.tolerance if self.numerics else None)
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
        return ""


def warn_slowdowns(notes: Notes, bench: Benchmark, slowed: list[Run], runs: int) -> None:
    """One warning per workload and candidate, however many runs the GPU slowed down."""
    if not slowed:
        return
    reasons = sorted({r for run in slowed for r in slowdowns(run.samples[0].gpu)})
    # The clock while slowed down (stores before it kept only the lowest of all, idle included).
    lowest = min(g.get("slowed_sm_clock_min_mhz", g.get("sm_clock_min_mhz", 0))
                 for g in (run.samples[0].gpu for run in slowed))
    notes.note(f"GPU slowdown during {len(slowed)} of {runs} runs of {bench.workload}: "
               f"{', '.join(reasons)} (SM clock down to {lowest} MHz); the measurements are "
               "kept, paired with the baseline's, but are noisier")

