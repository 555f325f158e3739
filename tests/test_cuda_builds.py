"""The CUDA side of an evaluation that needs no GPU: tuning trees configured from a user's
build folder, candidates compiled ahead in parallel trees, machine-code digests and ptxas'
resource report.  Real cmake, ninja, nvcc and cuobjdump."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import FIXTURES

from compileiq_build.build.trees import BuildTree
from compileiq_build.decide.racing import Sampling
from compileiq_build.evaluate.evaluator import Evaluator
from compileiq_build.machine.environment import find_tool
from compileiq_build.project.manifest import load_project
from compileiq_build.results.progress import Reporter
from compileiq_build.run.worker import BASELINE_SLOT, LocalWorker
from compileiq_build.store.database import open_store


def test_cuda_candidates_compile_ahead_with_digests_and_features(tmp_path, configure, nvcc):
    if not find_tool("cuobjdump") or not find_tool("nvdisasm"):
        pytest.skip("cuobjdump/nvdisasm are not installed")
    src = tmp_path / "patterns"
    shutil.copytree(FIXTURES / "patterns", src)
    user = tmp_path / "build"
    configure(src / "rdc_dlink", user, f"-DCMAKE_CUDA_COMPILER={nvcc}")
    project = load_project(user)
    trees = [BuildTree(project, tmp_path / "work" / name) for name in ("baseline", "c0", "c1", "c2")]
    worker = LocalWorker("cpu", trees[0], trees[1:])
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda t: t.configure("90"), trees))
    worker.reset()
    tree_project = trees[0].project
    assert tree_project.candidate_flags and tree_project.tuning_arch == "90"
    target = tree_project.target("k")
    store = open_store(user)
    evaluator = Evaluator(target, tree_project.benchmarks_for("k"), [worker], store,
                          store.start_session("test", {}), Sampling(), jobs=1,
                          report=Reporter(quiet=True))
    baseline = worker.build(BASELINE_SLOT, "k", None, evaluator.ninja_targets, 600, 1)
    assert baseline.result.ok and baseline.digest
    flags = [{}, {"CUDA": ("--ptxas-options=-O2",)}, {"CUDA": ("--ptxas-options=-O1",)}]
    with ThreadPoolExecutor(3) as pool:
        built = list(pool.map(lambda f, slot: evaluator.build(f, worker, slot), flags, range(3)))
    assert all(b.result.ok for b in built), built[0].result.log
    assert [b.compiled.slot for b in built] == [0, 1, 2]
    assert (trees[2].path / "compileiq" / "candidate" / "k.CUDA.opts").read_text() == \
        "--ptxas-options=-O2\n--resource-usage\n"
    # -O2 gives the SASS of the default -O3 here; -O1 does not.
    digests = [b.compiled.digest for b in built]
    assert digests[0] and digests[0] == digests[1] == baseline.digest != digests[2]
    for b in built:
        assert b.compiled.features["registers_max"] > 0 and b.compiled.features["spill_bytes"] == 0
    # The same flags again in the same slot: nothing to rebuild, the same code.
    again = evaluator.build(flags[1], worker, 1)
    assert "no work to do" in again.result.log and again.compiled.digest == digests[1]
    assert not again.compiled.rebuilt_nothing  # nothing new was written
    # A build that compiled nothing printed no resource report: the tree's report stands.
    assert again.compiled.features == built[1].compiled.features
    rekeyed = worker.build(BASELINE_SLOT, "k", None, evaluator.ninja_targets, 600, 1)
    assert "no work to do" in rekeyed.result.log
    assert rekeyed.features["registers_max"] == baseline.features["registers_max"] > 0
    store.close()
