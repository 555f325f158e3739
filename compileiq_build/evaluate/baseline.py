"""The baseline: the project's own flags, built on every worker and run twice on each.

Every candidate is compared with it: its machine code (a candidate of the same code needs no
GPU time), its runs' checksums or output files (a candidate must match them), and its wall
times (candidate runs time out at a multiple).  A benchmark that fails, or differs between
two runs, with the project's own flags cannot judge candidates: tuning stops with the reason;
so does a benchmark's CHECK that the baseline fails.
"""

from __future__ import annotations

import shlex
import statistics
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from compileiq_build.errors import CompileIQError
from compileiq_build.notes import Notes
from compileiq_build.project.manifest import Benchmark, Target
from compileiq_build.run.measure import Run, coarse_values, compare_evidence
from compileiq_build.run.parsers import ParseError
from compileiq_build.run.worker import BASELINE_SLOT, Compiled, Worker

STEPS_EVERY_S = 30.0  # a long build's progress in the log, at most this often


class BuildSteps:
    """Ninja's steps of a long build as log lines, at most one every STEPS_EVERY_S seconds: a
    baseline build of ggml takes 4 minutes, which the log otherwise passed in silence."""

    def __init__(self, notes: Notes, what: str, now: Callable[[], float] = time.monotonic) -> None:
        self.notes, self.what, self.now = notes, what, now
        self.start = self.last = now()

    def __call__(self, done: int, total: int) -> None:
        now = self.now()
        if done < total and now - self.last >= STEPS_EVERY_S:
            self.last = now
            self.notes.note(f"{self.what}: {done} of {total} build steps done in {now - self.start:.0f} s")


@dataclass
class Baseline:
    """What `prepare_baseline` found."""

    build_s: float = 60.0  # the slowest worker's build, seconds
    digest: str = ""  # the identity of its machine code (codeinfo.py)
    compiled: Compiled | None = None  # its build: code and features
    wall: dict[str, float] = field(default_factory=dict)  # workload -> median wall seconds of a run
    evidence: dict[str, str | bytes | None] = field(default_factory=dict)  # workload -> checksum/output
    check_s: dict[str, float] = field(default_factory=dict)  # workload -> seconds of its CHECK, if any


def prepare_baseline(target: Target, benchmarks: Sequence[Benchmark], workers: Sequence[Worker],
                     ninja_targets: list[str], hot_kernels: Collection[str],
                     notes: Notes) -> tuple[Baseline, list[Benchmark]]:
    """Build every worker's baseline; check that every benchmark passes, twice alike on each
    worker's device, with the project's flags; resolve FORMAT auto (the benchmarks returned);
    keep the checksums candidates must match."""
    notes.phase(f"{target.name}: building the baseline")
    baseline = Baseline()
    seconds = [1.0]
    for worker in workers:  # local workers share one tree: the builds after the first are no-ops
        # Alone, before any candidate or scout tree builds: with Ninja's own parallelism, every
        # core, not a candidate tree's share (ggml's full build took 615 s at -j4 on 16 cores,
        # against 240 s at Ninja's default).
        built = worker.build(BASELINE_SLOT, target.name, None, ninja_targets, 3600, None, hot_kernels,
                             BuildSteps(notes, f"{target.name}: the baseline"))
        if not built.result.ok:
            raise CompileIQError(f"the project does not build with its own flags:\n{built.result.log}")
        seconds.append(built.result.seconds)
        baseline.digest = baseline.digest or built.digest
        baseline.compiled = baseline.compiled or built
    baseline.build_s = max(seconds)
    resolved = []
    checked: dict[tuple[str, ...], float] = {}  # registrations of one benchmark may share a CHECK
    for bench in benchmarks:
        if bench.check:
            if bench.check not in checked:
                notes.phase(f"{target.name}: the baseline's CHECK of {bench.workload}")
                checked[bench.check] = _baseline_check(bench, workers)
            baseline.check_s[bench.workload] = checked[bench.check]
        notes.phase(f"{target.name}: baseline runs of {bench.workload}")
        try:
            bench = workers[0].resolve(bench, timeout=bench.timeout or 3600)
        except ParseError as exc:
            raise CompileIQError(f"benchmark '{bench.workload}': {exc}") from None
        runs = _baseline_runs(bench, workers)
        for warning in coarse_values(runs[0]):
            notes.note(f"warning: {warning}")
        baseline.evidence[bench.workload] = runs[0].evidence
        baseline.wall[bench.workload] = statistics.median(r.samples[0].wall_s for r in runs)
        resolved.append(bench)
    return baseline, resolved


def _baseline_check(bench: Benchmark, workers: Sequence[Worker]) -> float:
    """The benchmark's CHECK with the project's flags on every worker: it must pass; the
    slowest one's seconds."""
    seconds = []
    for worker in workers:
        error, took = worker.check(BASELINE_SLOT, bench, bench.timeout or 3600)
        if error:
            where = f" on {worker.name}" if len(workers) > 1 else ""
            raise CompileIQError(
                f"benchmark '{bench.workload}': its CHECK ({shlex.join(bench.check)}) fails with the "
                f"project's own flags{where}: {error}\nA check that the project's own build fails cannot "
                "judge candidates: fix the check, or its CHECK arguments, first.")
        seconds.append(took)
    return max(seconds)


def _baseline_runs(bench: Benchmark, workers: Sequence[Worker]) -> list[Run]:
    """Two runs on each worker, all passing and of the same checksum or output file."""
    runs = [(w, w.run(BASELINE_SLOT, bench, bench.timeout or 3600)) for w in workers for _ in range(2)]
    for worker, run in runs:
        if not run.ok:
            where = f" on {worker.name}" if len(workers) > 1 else ""
            raise CompileIQError(
                f"benchmark '{bench.workload}' fails with the project's own flags{where}: "
                f"{run.error}\nFix the benchmark (or its registration) first.")
    reference = runs[0][1].evidence
    if any(compare_evidence(reference, run.evidence, None) for _, run in runs[1:]):
        raise CompileIQError(
            f"benchmark '{bench.workload}': its checksum or output file differs between runs "
            "with the project's own flags, so it cannot check candidates. Make its output "
            "deterministic (fixed seeds), or drop CHECKSUM/OUTPUT_FILE.")
    return [run for _, run in runs]
