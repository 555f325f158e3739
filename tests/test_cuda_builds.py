"""The CUDA side of an evaluation that needs no GPU: tuning trees configured from a user's
build folder, candidates compiled ahead in parallel trees, machine-code digests and ptxas'
resource report.  Real cmake, ninja, nvcc and cuobjdump."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import FIXTURES

from compileiq_build.build import BuildTree
from compileiq_build.environment import find_tool
from compileiq_build.evaluate import Evaluator, Sampling
from compileiq_build.progress import Reporter
from compileiq_build.project import load_project
from compileiq_build.store import open_store


def test_cuda_candidates_compile_ahead_with_digests_and_features(tmp_path, configure, nvcc):
    if not find_tool("cuobjdump") or not find_tool("nvdisasm"):
        pytest.skip("cuobjdump/nvdisasm are not installed")
    src = tmp_path / "patterns"
    shutil.copytree(FIXTURES / "patterns", src)
    user = tmp_path / "build"
    configure(src / "rdc_dlink", user, f"-DCMAKE_CUDA_COMPILER={nvcc}")
    project = load_project(user)
    trees = [BuildTree(project, tmp_path / "work" / name) for name in ("baseline", "c0", "c1", "c2")]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda t: t.configure("90"), trees))
    tree_project = trees[0].project
    assert tree_project.candidate_flags and tree_project.tuning_arch == "90"
    target = tree_project.target("k")
    store = open_store(user)
    evaluator = Evaluator(target, tree_project.benchmarks_for("k"), trees[0], trees[1:], store,
                          store.start_session("test", {}), Sampling(), jobs=1,
                          report=Reporter(quiet=True))
    trees[0].write_flags({})
    assert trees[0].build(evaluator.ninja_targets, timeout=600).ok
    flags = [{}, {"CUDA": ("--ptxas-options=-O2",)}, {"CUDA": ("--ptxas-options=-O1",)}]
    with ThreadPoolExecutor(3) as pool:
        built = list(pool.map(evaluator.build, flags, trees[1:]))
    assert all(b.result.ok for b in built), built[0].result.log
    assert [b.tree for b in built] == trees[1:]
    assert (trees[2].path / "compileiq" / "candidate" / "k.CUDA.opts").read_text() == \
        "--ptxas-options=-O2\n--resource-usage\n"
    # -O2 gives the SASS of the default -O3 here; -O1 does not.
    assert built[0].digest and built[0].digest == built[1].digest != built[2].digest
    for b in built:
        assert b.features["registers_max"] > 0 and b.features["spill_bytes"] == 0
    # The same flags again in the same tree: nothing to rebuild, the same code.
    again = evaluator.build(flags[1], trees[2])
    assert "no work to do" in again.result.log and again.digest == built[1].digest
    store.close()
