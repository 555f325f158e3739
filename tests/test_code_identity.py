"""The same configuration built in two build trees is the same code (issue 26): real CMake,
Ninja, nvcc and g++ on a CUDA project of several .cu files, a plain C++ file and a C++
library dependency, configured in two folders as the driver's trees are.

On a public SGEMM project every compile got its own digest: its kernel-less sgemm.cu.o (an
empty cubin) was digested as the whole file, which names the temporary file of each compile
(`tmpxft_<pid>_...`) and records the ptxas options.  bench_kernels' main.cu here is such an
object."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import FIXTURES

from compileiq_build.build import codeinfo
from compileiq_build.build.codeinfo import code_digest, object_files, read_code
from compileiq_build.build.trees import BuildTree
from compileiq_build.machine.environment import find_tool
from compileiq_build.project.manifest import load_manifest
from compileiq_build.project.workspace import Workspace

GEMM = "_Z9gemm_rowsPfPKfS1_i"  # 64 live values: a cap of 32 registers changes its SASS
AXPY = "_Z4axpyPfPKffi"  # a few registers: the cap leaves it alone
CUDA_TARGETS = ("kernels", "bench_kernels")


def _cuda(*flags: str) -> dict[str, dict[str, list[str]]]:
    return {t: {"CUDA": list(flags)} for t in CUDA_TARGETS}


# What each tree builds, in order (tree 1 builds them in another order than tree 0).
O2, CAP = _cuda("--ptxas-options=-O2"), _cuda("--maxrregcount=32")
BUILDS = {0: [("baseline", {}), ("ptxas-O2", O2), ("cap32", CAP)],
          1: [("ptxas-O2", O2), ("baseline", {}), ("cxx-O2", {"hostutil": {"CXX": ["-O2"]}})]}
# Digests read after each build: a target's objects; in tree 0, the baseline's and the capped
# build's also with a profile's hot kernels (~0.5 s to disassemble an object: see _dump_once).
READS = {target: (target, None) for target in ("kernels", "bench_kernels", "hostutil")}
HOT_READS = {"kernels@gemm": ("kernels", {GEMM}), "kernels@axpy": ("kernels", {AXPY}),
             "kernels@elsewhere": ("kernels", {"_Z13not_in_theseiv"})}


@pytest.fixture(scope="module")
def digests(tmp_path_factory, configure, nvcc) -> dict[tuple[int, str, str], str]:
    """(tree, configuration, read) -> digest; also (tree, configuration, "main.cu.o file")."""
    if not find_tool("cuobjdump") or not find_tool("nvdisasm"):
        pytest.skip("cuobjdump/nvdisasm are not installed")
    tmp = tmp_path_factory.mktemp("identity")
    source = tmp / "cuda_multi_project"
    shutil.copytree(FIXTURES / "cuda_multi_project", source)
    paths = [tmp / "work" / "w0-0", tmp / "elsewhere" / "deeper" / "scout"]  # paths of other lengths
    defines = (f"-DCMAKE_CUDA_COMPILER={nvcc}", "-DCMAKE_CUDA_ARCHITECTURES=90-real",
               "-DCOMPILEIQ_CANDIDATE_FLAGS=ON", "-DCOMPILEIQ_TUNING_ARCH=90")  # as the driver's trees
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda p: configure(source, p, *defines), paths))
    trees = [BuildTree(load_manifest(Workspace(p).manifest), p) for p in paths]
    dumped: dict[tuple[str, bytes], bytes | None] = {}
    real_dump = codeinfo.cuobjdump_sass

    def _dump_once(obj: Path) -> bytes | None:
        """The real `cuobjdump -sass` of each object file once: the hot reads, and a build that
        left an object as it was, read the very same bytes at the same path again."""
        key = (str(obj), hashlib.sha256(obj.read_bytes()).digest())
        if key not in dumped:
            dumped[key] = real_dump(obj)
        return dumped[key]

    def build(i: int) -> dict[tuple[int, str, str], str]:
        found = {}
        for name, flags in BUILDS[i]:
            trees[i].write_flags(flags)
            result = trees[i].build(["bench_kernels"], timeout=300, jobs=1)
            assert result.ok, result.log[-3000:]
            reads = {**READS, **HOT_READS} if i == 0 and name != "ptxas-O2" else READS
            for read, (target, kernels) in reads.items():
                found[i, name, read] = read_code(object_files(paths[i], target), {}, kernels).digest
            main = object_files(paths[i], "bench_kernels")
            assert [p.name for p in main] == ["main.cu.o"]
            found[i, name, "main.cu.o file"] = hashlib.sha256(main[0].read_bytes()).hexdigest()
        return found

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(codeinfo, "cuobjdump_sass", _dump_once)
        with ThreadPoolExecutor(2) as pool:  # one compile at a time in each tree
            return {k: v for found in pool.map(build, (0, 1)) for k, v in found.items()}


def test_one_configuration_in_two_trees_is_one_code(digests):
    for config in ("baseline", "ptxas-O2"):
        for read in READS:
            assert digests[0, config, read] == digests[1, config, read] != "", (config, read)
        # The files differ (each compile names its temporary file): the digest is not of files.
        assert digests[0, config, "main.cu.o file"] != digests[1, config, "main.cu.o file"]


def test_a_register_cap_that_changes_the_sass_is_other_code(digests):
    assert digests[0, "cap32", "kernels"] != digests[0, "baseline", "kernels"]
    # main.cu holds no kernel: nothing of it runs on the device, and device flags leave its host code.
    assert digests[0, "cap32", "bench_kernels"] == digests[0, "baseline", "bench_kernels"]


def test_the_hot_kernels_alone_decide(digests):
    """The cap changes gemm_rows, not axpy: with axpy as the profile's only hot kernel the
    capped build is the baseline's code, measured once."""
    assert digests[0, "cap32", "kernels@gemm"] != digests[0, "baseline", "kernels@gemm"]
    assert digests[0, "cap32", "kernels@axpy"] == digests[0, "baseline", "kernels@axpy"]
    assert digests[0, "baseline", "kernels@axpy"] != digests[0, "baseline", "kernels@gemm"]
    # A profile that names none of these kernels: every function counts.
    for config in ("baseline", "cap32"):
        assert digests[0, config, "kernels@elsewhere"] == digests[0, config, "kernels"]


def test_the_measurements_saved(digests):
    """Five builds of device flags, five different files (each names its temporary file: five
    digests before), are two codes: ptxas -O2 gives these kernels the SASS of its default -O3
    (as in test_codeinfo.py), so both -O2 builds stand for the baseline, and the second tree's
    baseline too; the cap is the one other code.  Three of five measured, before."""
    builds = [(i, name) for i, done in BUILDS.items() for name, flags in done if "hostutil" not in flags]
    codes = {digests[i, name, "kernels"] + digests[i, name, "bench_kernels"] for i, name in builds}
    files = {digests[i, name, "main.cu.o file"] for i, name in builds}
    assert (len(builds), len(files), len(codes)) == (5, 5, 2)
    for i in (0, 1):
        assert digests[i, "ptxas-O2", "kernels"] == digests[0, "baseline", "kernels"]


def test_host_code_counts_for_cxx_objects(digests):
    """hostutil is C++ (no device code): -O2 against the project's -O0 is other code, the same
    -O0 in both trees is one."""
    o2, o0, o0_other_tree = (digests[i, name, "hostutil"] for i, name in ((1, "cxx-O2"), (1, "baseline"),
                                                                          (0, "baseline")))
    assert o2 != o0 == o0_other_tree
    # The CUDA target's objects are not rebuilt by another target's C++ flags.
    assert digests[1, "cxx-O2", "kernels"] == digests[1, "baseline", "kernels"]


def test_lto_objects_count_by_their_fatbinary(tmp_path, nvcc):
    """-dlto objects hold NVVM IR, no SASS: their fatbinary (the IR and the options recorded
    with it) is their code: two compiles alike are one, other ptxas options are not.  (The IR
    is scrambled with the folder nvcc ran in, so two build trees never share such a digest:
    the safe side.)"""
    if not find_tool("cuobjdump") or not find_tool("nvdisasm"):
        pytest.skip("cuobjdump/nvdisasm are not installed")
    src = tmp_path / "k.cu"
    src.write_text("__global__ void axpy(float* y, const float* x, float a, int n) {\n"
                   "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                   "  if (i < n) y[i] = a * x[i] + y[i];\n"
                   "}\n")
    objects = {}
    for name, flags in (("a", ()), ("b", ()), ("c", ("--ptxas-options=-O1",))):
        out = objects[name] = tmp_path / name / "axpy.cu.o"
        out.parent.mkdir()
        cmd = [nvcc, "-c", str(src), "-o", str(out), "-arch=sm_90", "-rdc=true", "-dlto", *flags]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    digest = {name: code_digest([obj]) for name, obj in objects.items()}
    assert digest["a"] == digest["b"] != digest["c"]
    assert objects["a"].read_bytes() != objects["b"].read_bytes()  # the temporary file's name
