"""Where candidates are compiled and measured: one worker per GPU (one for the CPU).

A worker owns build trees (a baseline and one per candidate it compiles ahead, its
"slots") and the device its benchmarks run on: CUDA_VISIBLE_DEVICES names the worker's
GPU for every benchmark process, so each candidate is paired with baseline runs on the
same GPU.  Local workers are used from threads of the driver; Ray workers
(`ray_workers.py`) are actors on the cluster's GPU nodes with the same methods.  Every
method takes and returns plain, picklable values, but for `build`'s `progress` callback, which
a Ray worker does not send to its actor.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from compileiq_build.build.codeinfo import object_files, read_code
from compileiq_build.build.trees import BuildResult, BuildTree
from compileiq_build.errors import CompileIQError
from compileiq_build.machine.environment import Gpu
from compileiq_build.machine.gpu import GpuMonitor
from compileiq_build.project.manifest import Benchmark, Project
from compileiq_build.run.measure import Run, resolve_format, run_check, run_workload
from compileiq_build.store.records import Sample

BASELINE_SLOT = -1
SCOUT_SLOT = -2  # the first tree that compiles configurations ahead, never measured; the next -3...


@dataclass(frozen=True)
class Compiled:
    """A build in one of a worker's trees: the result, and what the code is."""

    slot: int
    result: BuildResult
    digest: str = ""
    features: dict[str, float] = field(default_factory=dict)
    rebuilt_nothing: bool = False  # new flags were written, and Ninja had no work to do


class Worker(Protocol):
    name: str

    @property
    def slots(self) -> int: ...

    def build(self, slot: int, target: str, flags: Mapping[str, Sequence[str]] | None,
              ninja_targets: Sequence[str], timeout: float, jobs: int | None,
              kernels: Collection[str] | None = None,
              progress: Callable[[int, int], None] | None = None) -> Compiled: ...

    def resolve(self, bench: Benchmark, timeout: float) -> Benchmark: ...

    def run(self, slot: int, bench: Benchmark, timeout: float) -> Run: ...

    def check(self, slot: int, bench: Benchmark, timeout: float) -> tuple[str, float]: ...

    def reset(self) -> None: ...

    @property
    def scout_slots(self) -> list[int]:
        """The slots of its trees that compile ahead (SCOUT_SLOT, SCOUT_SLOT - 1, ...): none, or
        one per compile that may run at once."""
        ...


class LocalWorker:
    """Build trees on this host, benchmarks on one GPU (or on the CPU: `gpu` None)."""

    def __init__(self, name: str, baseline: BuildTree, trees: Sequence[BuildTree],
                 gpu: Gpu | None = None, scouts: Sequence[BuildTree] = ()) -> None:
        self.name = name
        self.baseline = baseline
        self.trees = list(trees)
        self.scouts = list(scouts)
        self.gpu = gpu
        # The GPU by UUID: immune to CUDA_VISIBLE_DEVICES renumbering and to PCI order.
        self.env = {"CUDA_VISIBLE_DEVICES": gpu.uuid} if gpu else {}
        self.monitor = GpuMonitor(index=gpu.index) if gpu else GpuMonitor.disabled()
        self._baseline_built = False
        self._seeded: set[int] = set()  # the slots whose trees were seeded (or had built) already

    @property
    def slots(self) -> int:
        return len(self.trees)

    def _tree(self, slot: int) -> BuildTree:
        if slot <= SCOUT_SLOT:
            return self.scouts[SCOUT_SLOT - slot]
        return self.baseline if slot == BASELINE_SLOT else self.trees[slot]

    @property
    def all_trees(self) -> list[BuildTree]:
        return [self.baseline, *self.trees, *self.scouts]

    def configure(self, arch: str) -> Project:
        for tree in self.all_trees:
            tree.configure(arch)
            tree.write_flags({})
        return self.baseline.project

    @property
    def scout_slots(self) -> list[int]:
        return [SCOUT_SLOT - i for i in range(len(self.scouts))]

    def reset(self) -> None:
        """Every tree back to the project's own flags."""
        for tree in self.all_trees:
            tree.write_flags({})

    def build(self, slot: int, target: str, flags: Mapping[str, Sequence[str]] | None,
              ninja_targets: Sequence[str], timeout: float, jobs: int | None,
              kernels: Collection[str] | None = None,
              progress: Callable[[int, int], None] | None = None) -> Compiled:
        """Compile `flags` for `target` in a slot (the baseline slot keeps the project's flags);
        the code's identity is that of `kernels` (the profiled hot ones) where they are found.
        `progress` is told Ninja's steps (done, total) as they come."""
        tree = self._tree(slot)
        if slot != BASELINE_SLOT and self._baseline_built and slot not in self._seeded:
            tree.seed_from(self.baseline, target)  # else its first build compiles the whole project
            self._seeded.add(slot)
        changed = tree.write_flags({target: flags} if flags else {})
        result = tree.build(ninja_targets, timeout=timeout, jobs=jobs, progress=progress)
        if not result.ok:
            return Compiled(slot, result)
        self._baseline_built = self._baseline_built or slot == BASELINE_SLOT
        nothing = "ninja: no work to do" in result.log and any(t == target for t, _ in changed)
        unit = tree.project.target(target)
        # The tree's report: this build's, and that of the objects it did not compile again.
        code = read_code(object_files(tree.path, unit.cmake_target, unit.sources), tree.report(),
                         set(kernels) if kernels else None)
        return Compiled(slot, result, code.digest, code.features, nothing)

    def executable(self, slot: int, bench: Benchmark) -> Path:
        if not bench.executable_target:
            return Path(bench.executable)
        return Path(self._registration(slot, bench).executable)

    def _registration(self, slot: int, bench: Benchmark) -> Benchmark:
        """The benchmark as the slot's tree registers it.  The tree's own manifest lists where
        its executables are; another tree's copy would measure the wrong flags without a sign."""
        for b in self._tree(slot).project.benchmarks:
            if b.index == bench.index:
                return b
        raise CompileIQError(
            f"benchmark '{bench.workload}' is not registered in the build tree "
            f"{self._tree(slot).path}: the CMakeLists changed since it was configured. Run tune again.")

    def resolve(self, bench: Benchmark, timeout: float) -> Benchmark:
        """FORMAT auto, recognised from a run of the baseline (raises ParseError)."""
        return resolve_format(bench, self.executable(BASELINE_SLOT, bench), timeout, env=self.env)

    def run(self, slot: int, bench: Benchmark, timeout: float) -> Run:
        exe = self.executable(slot, bench)
        if bench.executable_target and not exe.is_file():
            return Run([Sample(bench.workload, None, None, 0.0, None, f"{exe} was not built")])
        return run_workload(bench, exe, timeout, env=self.env, monitor=self.monitor)

    def check(self, slot: int, bench: Benchmark, timeout: float) -> tuple[str, float]:
        """Run the benchmark's CHECK with the slot's build, in the tree's folder: why it failed
        ("" when it passed) and its seconds."""
        own = self._registration(slot, bench)
        exe = Path(own.check[0])
        if own.check_target and not exe.is_file():
            return f"{exe} was not built", 0.0
        return run_check(own.check, Path(own.workdir or exe.parent), timeout, env=self.env)


def local_workers(project: Project, work: Path, gpus: Sequence[Gpu], slots: int,
                  scouts: int = 0) -> list[LocalWorker]:
    """One worker per GPU (one for the CPU when `gpus` is empty), sharing one baseline tree,
    each with `slots` candidate trees of its own; the first also has `scouts` trees that compile
    configurations ahead."""
    baseline = BuildTree(project, work / "baseline")
    devices: Sequence[Gpu | None] = list(gpus) or [None]
    workers = []
    for i, gpu in enumerate(devices):
        trees = [BuildTree(project, work / f"candidate-{i * slots + s}") for s in range(slots)]
        ahead = [BuildTree(project, work / scout_folder(s)) for s in range(scouts if i == 0 else 0)]
        workers.append(LocalWorker(f"gpu{gpu.index}" if gpu else "cpu", baseline, trees, gpu, ahead))
    return workers


def scout_folder(index: int) -> str:
    """The folder of a worker's `index`-th tree that compiles ahead (the first keeps the name
    of the single one before, so that an earlier run's tree is built on)."""
    return "scout" if index == 0 else f"scout-{index}"
