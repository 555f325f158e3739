"""The profiling step of a CUDA target's tuning: where the baseline's GPU time goes.

Once per CMake target and benchmark (stored, so a resumed run profiles nothing again), ncu
profiles a baseline run (profile.py); the kernels that take the time become the evaluator's
hot kernels, and a candidate's identity and features are then those of their code alone.
The `profile` verb runs this step alone and proposes groups of sources (`profile_groups`).
"""

from __future__ import annotations

from collections.abc import Sequence

from compileiq_build.decide.racing import Sampling
from compileiq_build.evaluate.evaluator import Evaluator
from compileiq_build.notes import Notes
from compileiq_build.project.manifest import Benchmark, Project, Target
from compileiq_build.run.launch import ninja_jobs
from compileiq_build.run.profiler import (
    COVER,
    ProfileError,
    attribute,
    hot_kernels,
    kernel_sources,
    profile_run,
    propose_groups,
    table_lines,
)
from compileiq_build.run.worker import BASELINE_SLOT, LocalWorker
from compileiq_build.store.database import Store


def profile_baseline(evaluator: Evaluator, worker: LocalWorker, tree_project: Project, session: int,
                     notes: Notes) -> None:
    """Profile the benchmarks not profiled yet, print the table, and set the hot kernels."""
    unit, store = evaluator.target, evaluator.store
    units = [t for t in tree_project.targets if t.cmake_target == unit.cmake_target]
    done = {r.workload for r in store.kernel_times(unit.cmake_target, evaluator.arch_keys)}
    todo = [b for b in evaluator.benchmarks if b.workload not in done]
    sources = kernel_sources(worker.baseline.path, units) if todo else {}
    for bench in todo:
        notes.phase(f"{unit.cmake_target}: profiling {bench.workload} with ncu (one baseline run)")
        timeout = 20 * evaluator.baseline.wall.get(bench.workload, 60.0) + 120
        try:
            times = profile_run(bench, worker.executable(BASELINE_SLOT, bench), timeout, worker.env)
        except ProfileError as exc:
            notes.note(f"{unit.name}: no kernel profile of {bench.workload}: {exc} "
                       "(--no-profile skips profiling)")
            break  # the next benchmark would fail alike
        store.add_kernel_times(session, unit.cmake_target, evaluator.arch_keys,
                               attribute(bench.workload, times, sources))
    workloads = {b.workload for b in evaluator.benchmarks}
    rows = [r for r in store.kernel_times(unit.cmake_target, evaluator.arch_keys) if r.workload in workloads]
    if rows:
        notes.note("\n".join([f"{unit.name}: where the baseline's GPU time goes (ncu):", *table_lines(rows)]))
    evaluator.hot_kernels = hot_kernels(rows, unit.name)
    if evaluator.hot_kernels:  # identity is now that of the hot kernels' code: the baseline's again
        evaluator.rekey_baseline(worker)


def profile_groups(units: Sequence[Target], tree_project: Project, worker: LocalWorker, store: Store,
                   session: int, sampling: Sampling, notes: Notes) -> list[str]:
    """The `profile` verb's work: profile each CMake target of `units` (its baseline built and
    checked first) and return the groups of sources the profiles suggest, as CMake lines."""
    lines = []
    for cmake in dict.fromkeys(u.cmake_target for u in units):
        mine = [t for t in tree_project.targets if t.cmake_target == cmake]
        evaluator = Evaluator(mine[0], profiled_benchmarks(units, tree_project, cmake), [worker],
                              store, session, sampling, ninja_jobs(1), notes)
        evaluator.prepare_baseline()
        profile_baseline(evaluator, worker, tree_project, session, notes)
        if proposed := propose_groups(store.kernel_times(cmake, evaluator.arch_keys), cmake):
            lines += [f"# groups of {cmake} that hold {COVER:.0%} of each benchmark's GPU time:",
                      *proposed]
    return lines


def profiled_benchmarks(units: Sequence[Target], tree_project: Project, cmake: str) -> list[Benchmark]:
    """The benchmarks `profile` runs for a CMake target: those of the chosen units of it (all of
    its groups unless --targets names some).  Live on ggml, `profile --targets ggml-cuda:mmq`
    ran every group's benchmarks, four decode, prefill and attention workloads under ncu, and
    its 7 minutes ran out before the one named had its profile."""
    benches = {b.index: b for u in units if u.cmake_target == cmake
               for b in tree_project.benchmarks_for(u.name)}
    return sorted(benches.values(), key=lambda b: b.index)
