"""Shared fixtures: real cmake, ninja, g++ and nvcc on small real projects."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from filelock import FileLock

from compileiq_build import cmake_dir
from compileiq_build.build.space import Prober, dimensions_for
from compileiq_build.build.trees import BuildTree
from compileiq_build.decide.racing import Sampling
from compileiq_build.errors import CompileIQError
from compileiq_build.evaluate.evaluator import Evaluator
from compileiq_build.machine import environment
from compileiq_build.project.manifest import load_manifest, load_project
from compileiq_build.project.workspace import Workspace
from compileiq_build.results.progress import Reporter
from compileiq_build.run.worker import LocalWorker, scout_folder
from compileiq_build.store.database import MEASURED, Store, open_store
from compileiq_build.store.records import Sample

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def pytest_collection_modifyitems(config, items):
    if environment.detect_gpus():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (nvidia-smi finds none)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _one_gpu_test_at_a_time(request, tmp_path_factory):
    """GPU tests measure, and one checks that tune refuses a GPU another process holds: they
    run one at a time across pytest-xdist's workers (a lock in the run's shared temporary
    folder; xdist's loadgroup does not group tests under pytest 9.2)."""
    if "gpu" not in request.node.keywords:
        yield
        return
    with FileLock(tmp_path_factory.getbasetemp().parent / "gpu-tests.lock"):
        yield


@pytest.fixture(scope="session")
def cmake() -> str:
    path = environment.find_tool("cmake")
    assert path, "cmake is a dependency of compileiq-build and must be installed"
    return path


@pytest.fixture(scope="session")
def ninja() -> str:
    path = environment.find_tool("ninja")
    assert path, "ninja is a dependency of compileiq-build and must be installed"
    return path


@pytest.fixture(scope="session")
def nvcc() -> str:
    path = environment.find_tool("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
    if not path:
        pytest.skip("nvcc is not installed")
    return path


class Configure:
    def __init__(self, cmake: str, ninja: str, probes: Path | None = None) -> None:
        self.cmake = cmake
        self.ninja = ninja
        self.probes = probes  # this worker's verdicts of the C++ compiler on every C++ flag
        self._probed: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def __call__(self, source: Path, build: Path, *defines: str,
                 check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [self.cmake, "-S", str(source), "-B", str(build), "-G", "Ninja",
               f"-DCMAKE_MAKE_PROGRAM={self.ninja}", f"-DCompileIQ_ROOT={cmake_dir()}",
               "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", *defines]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if check:
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        if proc.returncode == 0:
            self._seed_probes(build)
        return proc

    def _seed_probes(self, build: Path) -> None:
        """Give the build folder the flag probes of its C++ compiler, as a second `tune` of
        that compiler finds them (the cache is per compiler version, space.py): probed once
        per worker with the real compiler, instead of 14 compiles in each test that tunes
        (about 4 s of CPU each, over 30 tests).  The probe itself is tested in test_space.py."""
        manifest = Workspace(build).manifest
        if self.probes is None or not manifest.is_file():
            return
        try:
            cxx = load_manifest(manifest).compilers.get("CXX")
        except CompileIQError:
            return  # a manifest a test made unreadable on purpose
        if cxx is None:
            return
        with self._lock:
            if (cxx.path, cxx.version) not in self._probed:
                flags = [d.template.format(v=v) for d in dimensions_for("CXX") for v in d.values]
                Prober(self.probes).probe("CXX", cxx.path, cxx.version, flags)
                self._probed.add((cxx.path, cxx.version))
        probe = Workspace(build).probe
        probe.mkdir(parents=True, exist_ok=True)
        for cache in self.probes.glob("probe-CXX-*.json"):
            shutil.copyfile(cache, probe / cache.name)

    def build(self, build: Path, *targets: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([self.ninja, "-C", str(build), *targets], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc


@pytest.fixture(scope="session")
def configure(cmake: str, ninja: str, tmp_path_factory: pytest.TempPathFactory) -> Configure:
    return Configure(cmake, ninja, tmp_path_factory.mktemp("probes"))


@pytest.fixture
def cxx_project(tmp_path: Path) -> Path:
    """A copy of the C++ fixture project (its library is built at -O0 by the project)."""
    dest = tmp_path / "cxx_project"
    shutil.copytree(FIXTURES / "cxx_project", dest)
    return dest


def compile_commands(build: Path) -> dict[str, str]:
    """Source file name -> its compile command."""
    entries = json.loads((build / "compile_commands.json").read_text())
    return {Path(e["file"]).name: e["command"] for e in entries}


def cxx_evaluator(project_dir: Path, configure: Configure, workers_slots: list[int],
                  report: Reporter | None = None, scouts: int = 0) -> tuple[Evaluator, Store]:
    """The C++ fixture configured, with one local worker per entry of `workers_slots` (that many
    candidate trees each; the first also has `scouts` trees that compile ahead), its baseline
    built and run: ready to evaluate candidates of `saxpy`."""
    build = project_dir / "build"
    configure(project_dir, build)
    project = load_project(build)
    work = build / "compileiq" / "work"
    baseline = BuildTree(project, work / "baseline")
    workers = [LocalWorker(f"w{i}", baseline, [BuildTree(project, work / f"w{i}-{s}") for s in range(slots)],
                           scouts=[BuildTree(project, work / scout_folder(s))
                                   for s in range(scouts if i == 0 else 0)])
               for i, slots in enumerate(workers_slots)]
    trees = [baseline, *(t for w in workers for t in w.all_trees[1:])]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda t: t.configure(""), trees))
    for w in workers:
        w.reset()
    tree_project = baseline.project
    store = open_store(build)
    evaluator = Evaluator(tree_project.target("saxpy"), tree_project.benchmarks_for("saxpy"), workers, store,
                          store.start_session("test", {}), Sampling(2, 2), jobs=1,
                          report=report or Reporter(quiet=True))
    evaluator.prepare_baseline()
    return evaluator, store


def write_finalists(evaluator: Evaluator, store: Store, ratio: float, noise: float) -> None:
    """Three earlier search evaluations of `ratio` times the baseline's cost on every benchmark
    (5 pairs, alternating by `noise`), written as the search would have: the finalists and the
    noise that racing reads."""
    for i in range(3):
        row = store.begin_evaluation(evaluator.session, evaluator.target.name, evaluator.arch_keys,
                                     f"fake{i}", {"fake": str(i)}, {}, "test", "search")
        for bench in evaluator.benchmarks:
            for rep in range(5):
                for role, cost in (("candidate", ratio * (1 + noise * (rep % 2))), ("baseline", 1.0)):
                    store.add_sample(row, role, rep, Sample(bench.workload, cost, cost, 0.1, 0, ""))
        store.finish_evaluation(row, MEASURED)


def stored_evaluation(store: Store, session: int, key: str, phase: str, ratio: float,
                      arch: dict[str, str] | None = None) -> None:
    """A measured evaluation of saxpy's `key` with 10 pairs at this cost ratio to the baseline."""
    ev = store.begin_evaluation(session, "saxpy", arch or {"CXX": "x86_64"}, key, {"CXX:x": key},
                                {"CXX": [f"-f{key}"]}, "staged", phase)
    for rep in range(10):
        cost = ratio * (1 + 0.001 * (rep % 3))
        store.add_sample(ev, "candidate", rep, Sample("w", cost, cost, 0.1, 0, ""))
        store.add_sample(ev, "baseline", rep, Sample("w", 1.0, 1.0, 0.1, 0, ""))
    store.finish_evaluation(ev, MEASURED)
