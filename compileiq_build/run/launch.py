"""Which GPUs measure, and the workers on them with their build trees configured.

Local workers: one per GPU of the first one's architecture (--gpus, CUDA_VISIBLE_DEVICES
narrow it), each with a share of --jobs candidate trees; the first also has as many trees that
compile ahead (CUDA, --compile-ahead above 0): a single one reached 1.3-3.8 configurations per
evaluation live, where the open evaluation allows 5 (benchmarks/results/search/open/README.md).
A GPU another process holds stops the run unless --allow-shared-gpu.  Ray workers (--ray): one
per GPU of the cluster.  Every tree is configured at once, for the measuring GPUs' architecture.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from compileiq_build.errors import CompileIQError
from compileiq_build.machine.environment import Gpu
from compileiq_build.machine.gpu import compute_processes, shared_gpu_error
from compileiq_build.notes import Notes
from compileiq_build.options import TuneOptions
from compileiq_build.project.manifest import Project
from compileiq_build.run import ray_worker
from compileiq_build.run.worker import LocalWorker, Worker, local_workers


@dataclass
class Workers:
    """The configured workers, the tuning trees' project, the architecture tuned for."""

    workers: list[Worker]
    tree_project: Project
    arch: str
    shared_gpu: list[dict[str, object]] = field(default_factory=list)  # other processes on the GPUs


def start_workers(options: TuneOptions, project: Project, work: Path, gpus: Sequence[Gpu], cuda: bool,
                  notes: Notes) -> Workers:
    """The workers of a run (Ray's with --ray, else local ones), configured."""
    if options.ray:
        return ray_workers_for(options, project, work, cuda, notes)
    measuring = measuring_gpus(gpus, options.gpus, notes) if cuda else []
    shared = check_gpus_free(measuring, options.allow_shared_gpu, notes)
    arch = measuring[0].arch if measuring else ""
    slots = max(1, parallel(options.jobs) // max(1, len(measuring)))
    scouts = slots if cuda and options.compile_ahead else 0
    local = local_workers(project, work, measuring, slots, scouts)
    return Workers(list(local), configure(local, arch), arch, shared)


def parallel(jobs: int | None) -> int:
    """Candidates compiled at once: --jobs, else a quarter of the cores (at most 8)."""
    if jobs:
        return jobs
    return max(1, min(8, (os.cpu_count() or 1) // 4))


def ninja_jobs(parallel: int) -> int | None:
    """Ninja's parallelism in each candidate tree: the cores shared among the trees."""
    return None if parallel == 1 else max(1, (os.cpu_count() or 1) // parallel)


def measuring_gpus(gpus: Sequence[Gpu], chosen: Sequence[int], notes: Notes) -> list[Gpu]:
    """The `chosen` GPUs (--gpus), else every GPU of the first one's architecture that
    CUDA_VISIBLE_DEVICES (when set) lets this process use."""
    found = list(gpus)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and not chosen:
        allowed = {v.strip() for v in visible.split(",") if v.strip()}
        found = [g for g in found if str(g.index) in allowed or g.uuid in allowed]
        if not found:
            raise CompileIQError(f"CUDA_VISIBLE_DEVICES={visible} leaves none of the GPUs that "
                                 "nvidia-smi lists; unset it, or name GPUs with --gpus.")
    if chosen:
        known = {g.index: g for g in gpus}
        unknown = [i for i in chosen if i not in known]
        if unknown:
            raise CompileIQError(f"--gpus names {', '.join(map(str, unknown))}; this machine has "
                                 f"GPUs {', '.join(str(g.index) for g in gpus)}.")
        found = [known[i] for i in chosen]
    same = [g for g in found if g.arch == found[0].arch]
    if len(same) < len(found):
        notes.note(f"tuning for {found[0].arch_key} ({found[0].name}): the GPUs of other "
                   "architectures are not used; run tune again with --gpus for them")
    return same


def check_gpus_free(gpus: Sequence[Gpu], allow_shared: bool, notes: Notes) -> list[dict[str, object]]:
    """Stop when another process holds a GPU that would measure; --allow-shared-gpu goes on,
    and returns the processes, which the run's record in the store keeps for the report."""
    procs = compute_processes([g.index for g in gpus])
    if procs and not allow_shared:
        raise CompileIQError(shared_gpu_error(procs))
    for p in procs:
        notes.note(f"warning: measuring on GPU {p.gpu}, which pid {p.pid} "
                   f"({p.name or 'not visible from here'}) also uses (--allow-shared-gpu)")
    return [asdict(p) for p in procs]


def ray_workers_for(options: TuneOptions, project: Project, work: Path, cuda: bool, notes: Notes) -> Workers:
    """Workers on the Ray cluster's GPUs (or nodes, for CPU targets), configured."""
    slots = options.jobs or 2
    workers = ray_worker.start(options.ray or "local", project, work, slots, cuda)
    arch = workers[0].arch
    if any(w.arch != arch for w in workers):
        notes.note(f"tuning for sm_{arch}: the Ray workers on GPUs of other architectures "
                   "are not used")
        workers = [w for w in workers if w.arch == arch]
    with ThreadPoolExecutor(len(workers)) as pool:
        projects = list(pool.map(lambda w: w.configure(arch), workers))
    return Workers(list(workers), projects[0], arch)


def configure(workers: Sequence[LocalWorker], arch: str) -> Project:
    """Configure every build tree at once; returns the tuning trees' project."""
    trees = [workers[0].baseline, *(t for w in workers for t in w.all_trees[1:])]
    with ThreadPoolExecutor(len(trees)) as pool:
        list(pool.map(lambda tree: tree.configure(arch), trees))
    for worker in workers:
        worker.reset()
    return workers[0].baseline.project
