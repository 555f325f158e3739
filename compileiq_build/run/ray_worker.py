"""Workers on the nodes of a Ray cluster: `tune --ray ADDRESS`.

One actor per GPU of the cluster (Ray gives each `num_gpus=1` and sets its
CUDA_VISIBLE_DEVICES), or one per node for CPU targets.  Each actor configures build
trees of its own on its node, compiles there and runs the benchmarks there; the driver
keeps the search and the store, and stores every run's samples as its call returns.
The nodes need compileiq_build installed and the project's source and build folders at
the same paths as the driver (a shared file system, or the same checkout everywhere).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from compileiq_build.build.trees import BuildTree
from compileiq_build.errors import CompileIQError
from compileiq_build.machine import environment
from compileiq_build.project.manifest import Benchmark, Project
from compileiq_build.run.measure import Run
from compileiq_build.run.worker import Compiled, LocalWorker

PLACEMENT_TIMEOUT_S = 300


class _Node:
    """The actor's side: a LocalWorker on the actor's node and GPU."""

    def __init__(self, project: Project, work: str, slots: int, use_gpu: bool) -> None:
        import ray

        node = ray.get_runtime_context().get_node_id()[:8]
        gpu = None
        if use_gpu:
            ids = [str(i) for i in ray.get_gpu_ids()]
            gpu = next((g for g in environment.detect_gpus() if str(g.index) in ids), None)
            if gpu is None:
                raise CompileIQError(f"Ray gave this worker GPU {ids} on node {node}, and nvidia-smi "
                                     "there does not list it")
        self.name = f"ray:{node}/{f'gpu{gpu.index}' if gpu else 'cpu'}"
        folder = Path(work) / self.name.replace(":", "-").replace("/", "-")
        trees = [BuildTree(project, folder / f"candidate-{s}") for s in range(slots)]
        self.worker = LocalWorker(self.name, BuildTree(project, folder / "baseline"), trees, gpu)
        self.arch = gpu.arch if gpu else ""

    def describe(self) -> tuple[str, str]:
        return self.name, self.arch

    def configure(self, arch: str) -> Project:
        return self.worker.configure(arch)

    def build(self, *args: Any) -> Compiled:
        return self.worker.build(*args)

    def resolve(self, bench: Benchmark, timeout: float) -> Benchmark:
        return self.worker.resolve(bench, timeout)

    def run(self, slot: int, bench: Benchmark, timeout: float) -> Run:
        return self.worker.run(slot, bench, timeout)

    def check(self, slot: int, bench: Benchmark, timeout: float) -> tuple[str, float]:
        return self.worker.check(slot, bench, timeout)

    def reset(self) -> None:
        self.worker.reset()


class RayWorker:
    """The driver's side: the Worker interface, each call a remote call to the actor."""

    def __init__(self, actor: Any, name: str, arch: str, slots: int) -> None:
        self.actor = actor
        self.name = name
        self.arch = arch
        self.slots = slots

    def _call(self, method: str, *args: Any) -> Any:
        import ray

        try:
            return ray.get(getattr(self.actor, method).remote(*args))
        except ray.exceptions.RayTaskError as exc:
            raise exc.as_instanceof_cause() from None
        except ray.exceptions.RayActorError as exc:
            raise CompileIQError(f"the Ray worker {self.name} died: {exc}") from None

    def configure(self, arch: str) -> Project:
        return self._call("configure", arch)

    def build(self, slot: int, target: str, flags: Mapping[str, Sequence[str]] | None,
              ninja_targets: Sequence[str], timeout: float, jobs: int | None,
              kernels: Collection[str] | None = None,
              progress: Callable[[int, int], None] | None = None) -> Compiled:
        """As LocalWorker.build on the actor's node; its steps are not reported (`progress`
        cannot travel to the actor)."""
        return self._call("build", slot, target, flags, ninja_targets, timeout, jobs, kernels)

    def resolve(self, bench: Benchmark, timeout: float) -> Benchmark:
        return self._call("resolve", bench, timeout)

    def run(self, slot: int, bench: Benchmark, timeout: float) -> Run:
        return self._call("run", slot, bench, timeout)

    def check(self, slot: int, bench: Benchmark, timeout: float) -> tuple[str, float]:
        return self._call("check", slot, bench, timeout)

    def reset(self) -> None:
        self._call("reset")

    @property
    def scout_slots(self) -> list[int]:
        return []  # compiling ahead runs beside the local worker's trees only


def _check_reachable(address: str) -> None:
    """A HOST:PORT that nothing answers on fails here at once: Ray itself retries for minutes."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # "local", "auto": Ray resolves them
    try:
        socket.create_connection((host, int(port)), timeout=10).close()
    except OSError as exc:
        raise CompileIQError(
            f"no Ray cluster answers at {address} ({exc}). Start one with `ray start --head` and "
            "pass the address it prints, or use --ray local.") from None


def start(address: str, project: Project, work: Path, slots: int, use_gpus: bool) -> list[RayWorker]:
    """Connect to the cluster (`local`: start one on this machine) and start the workers."""
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    except ImportError:
        raise CompileIQError("--ray needs Ray: pip install 'compileiq-build[ray]'") from None
    _check_reachable(address)
    try:
        ray.init(address=None if address == "local" else address, include_dashboard=False,
                 log_to_driver=False, ignore_reinit_error=True)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise CompileIQError(f"cannot connect to the Ray cluster at {address}: {exc}") from None
    actor_class = ray.remote(_Node)
    # A slot compiles while another measures: one thread per slot, and one for the measuring.
    options: dict[str, Any] = {"max_concurrency": slots + 2}
    if use_gpus:
        count = int(ray.cluster_resources().get("GPU", 0))
        if count == 0:
            raise CompileIQError(f"the Ray cluster at {address} has no GPUs to tune CUDA targets on")
        actors: list[Any] = [actor_class.options(num_gpus=1, **options).remote(project, str(work), slots,
                                                                                True) for _ in range(count)]
    else:
        nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
        actors = [actor_class.options(num_cpus=1, scheduling_strategy=NodeAffinitySchedulingStrategy(
            node, soft=False), **options).remote(project, str(work), slots, False) for node in nodes]
    try:
        described = ray.get([a.describe.remote() for a in actors], timeout=PLACEMENT_TIMEOUT_S)
    except ray.exceptions.RayTaskError as exc:
        raise exc.as_instanceof_cause() from None
    except ray.exceptions.GetTimeoutError:
        raise CompileIQError(
            f"the Ray cluster at {address} did not start {len(actors)} workers within "
            f"{PLACEMENT_TIMEOUT_S} s: are its GPUs (or nodes) taken by other work?") from None
    return [RayWorker(a, name, arch, slots) for a, (name, arch) in zip(actors, described, strict=True)]


def stop() -> None:
    import ray

    ray.shutdown()
