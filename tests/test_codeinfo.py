"""Machine-code digests and features (SASS instruction mix, resource report) from real nvcc
and g++ objects."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from compileiq_build.build.codeinfo import (
    code_digest,
    code_features,
    object_files,
    read_code,
    resource_report,
)
from compileiq_build.machine.environment import find_tool

KERNEL = """
__global__ void k(float* a, const float* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] = sqrtf(b[i]) * expf(b[i]);
}
"""


def _nvcc(nvcc: str, src: Path, out: Path, *flags: str) -> str:
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([nvcc, "-c", str(src), "-o", str(out), "-arch=sm_90", "--resource-usage", *flags],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr


def test_cuda_digest_follows_the_sass_not_the_recorded_options(tmp_path, nvcc):
    if not find_tool("cuobjdump") or not find_tool("nvdisasm"):
        pytest.skip("cuobjdump/nvdisasm are not installed")
    src = tmp_path / "k.cu"
    src.write_text(KERNEL)
    _nvcc(nvcc, src, tmp_path / "base" / "k.cu.o")
    _nvcc(nvcc, src, tmp_path / "o2" / "k.cu.o", "--ptxas-options=-O2")  # same SASS as -O3 here
    _nvcc(nvcc, src, tmp_path / "o0" / "k.cu.o", "--ptxas-options=-O0")
    base, o2, o0 = (code_digest([tmp_path / d / "k.cu.o"]) for d in ("base", "o2", "o0"))
    assert base and base == o2  # the ELF records ptxasOptions, the digest ignores it
    assert o0 != base


def test_device_code_in_objects_not_named_cu(tmp_path, nvcc):
    """miniBUDE compiles a .cpp as CUDA: its object is <name>.cpp.o and holds device code."""
    if not find_tool("cuobjdump") or not find_tool("nvdisasm"):
        pytest.skip("cuobjdump/nvdisasm are not installed")
    src = tmp_path / "k.cpp"
    src.write_text(KERNEL)
    for name, flags in (("base", ()), ("o2", ("--ptxas-options=-O2",)), ("o0", ("--ptxas-options=-O0",))):
        _nvcc(nvcc, src, tmp_path / name / "k.cpp.o", "-x", "cu", *flags)
    base, o2, o0 = (code_digest([tmp_path / d / "k.cpp.o"]) for d in ("base", "o2", "o0"))
    assert base == o2 != o0


# Three kernels (two with C names): plain and const __restrict__ loads; 64 live values (spill
# under 32 registers); a mangled name of more than 60 characters.
KERNELS = """
extern "C" __global__ void copy(float* a, const float* b, const float* __restrict__ c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] = b[i] + c[i];
}
extern "C" __global__ void heavy(float* a, const float* b, int n) {
  float r[64];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
#pragma unroll
  for (int j = 0; j < 64; ++j) r[j] = b[i + j * n];
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < 64; ++j) s += r[j] * r[63 - j] + r[(j * 7) % 64];
  a[i] = s;
}
struct AVeryLongTypeNameThatMakesTheMangledNameLong {};
template <typename T> __global__ void scale_by_a_template_argument(float* a, T) { a[threadIdx.x] *= 2.f; }
template __global__ void scale_by_a_template_argument(float*, AVeryLongTypeNameThatMakesTheMangledNameLong);
"""
LONG = "_Z28scale_by_a_template_argumentI44AVeryLongTypeNameThatMakesTheMangledNameLongEvPfT_"


@pytest.fixture(scope="module")
def kernels(tmp_path_factory, nvcc) -> dict[str, tuple[Path, str]]:
    """Objects of KERNELS and their build logs: default flags, other cache operators for global
    loads and stores, and a register cap that makes `heavy` spill."""
    if not find_tool("cuobjdump") or not find_tool("nvdisasm"):
        pytest.skip("cuobjdump/nvdisasm are not installed")
    tmp = tmp_path_factory.mktemp("kernels")
    src = tmp / "k.cu"
    src.write_text(KERNELS)
    flags = {"default": (), "cache": ("-Xptxas", "-dlcm=cg", "-Xptxas", "-dscm=cs"),
             "capped": ("-maxrregcount=32",)}
    objects = {name: tmp / name / "k.cu.o" for name in flags}
    return {name: (obj, _nvcc(nvcc, src, obj, *flags[name])) for name, obj in objects.items()}


def test_load_and_store_cache_operators(kernels):
    (obj, log), (cached, cached_log) = kernels["default"], kernels["cache"]
    default, cache = code_features([obj], log), code_features([cached], cached_log)
    # sm_90 writes -dlcm=cg as LDG.E.STRONG.GPU, -dscm=cs as STG.E.EF; __restrict__ loads stay .CONSTANT.
    assert default["copy:ldg"] == cache["copy:ldg"] == 2
    assert default["copy:ldg.constant"] == cache["copy:ldg.constant"] == 1
    assert (default["copy:ldg.strong.gpu"], cache["copy:ldg.strong.gpu"]) == (0, 1)
    assert default["copy:stg"] == cache["copy:stg"] == 1
    assert (default["copy:stg.ef"], cache["copy:stg.ef"]) == (0, 1)
    assert default["all:ldg"] == cache["all:ldg"]
    assert default["all:ldg.strong.gpu"] < cache["all:ldg.strong.gpu"]


def test_spills_under_a_register_cap(kernels):
    default, capped = (code_features([obj], log) for obj, log in (kernels["default"], kernels["capped"]))
    assert default["heavy:registers"] > 32 == capped["heavy:registers"]
    assert default["heavy:ldl"] == default["heavy:stl"] == default["heavy:spill_bytes"] == 0
    assert capped["heavy:ldl"] > 0 and capped["heavy:stl"] > 0
    assert capped["heavy:spill_bytes"] > 0 and capped["heavy:stack_bytes"] > 0
    assert capped["copy:spill_bytes"] == 0
    # The totals' names from before per-kernel features (tests/test_cuda_builds.py reads them).
    assert capped["registers_max"] == capped["all:registers"]
    assert capped["spill_bytes"] == capped["all:spill_bytes"]
    assert default["spill_bytes"] == 0


def test_kernels_of_one_object_are_apart(kernels):
    obj, log = kernels["default"]
    features = code_features([obj], log)
    short = f"{LONG[:40]}~{hashlib.sha1(LONG.encode()).hexdigest()[:8]}"  # the name is too long
    labels = {k.split(":", 1)[0] for k in features}
    assert labels == {"copy", "heavy", short, "all", "registers_max", "spill_bytes"}
    assert features["heavy:ffma"] > 0 == features["copy:ffma"]
    assert (features[f"{short}:instructions"], features[f"{short}:fadd"]) == (10, 1)  # a *= 2 is a + a
    for name in ("instructions", "ldg", "ffma", "smem_bytes"):
        assert features[f"all:{name}"] == sum(features[f"{k}:{name}"] for k in ("copy", "heavy", short))
    assert features["all:registers"] == max(features[f"{k}:registers"] for k in ("copy", "heavy", short))
    # Without objects: the resource report alone; without either: nothing.
    assert code_features([], log)["heavy:registers"] == features["heavy:registers"]
    assert "heavy:ldg" not in code_features([], log)
    assert code_features([], "no report here") == {}


def test_digest_and_features_come_from_one_disassembly(kernels):
    (obj, log), (capped, _) = kernels["default"], kernels["capped"]
    code = read_code([obj], resource_report(log))
    assert code.digest == code_digest([obj]) != code_digest([capped])
    assert code.features == code_features([obj], log)


def test_device_link_report_for_two_targets(tmp_path, nvcc):
    """With -rdc, nvlink reports at the device link, naming the target when there are two;
    the SASS of each target is its own too."""
    if not find_tool("cuobjdump") or not find_tool("nvdisasm"):
        pytest.skip("cuobjdump/nvdisasm are not installed")
    src = tmp_path / "k.cu"
    src.write_text(KERNELS)
    archs = ("-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90")
    _nvcc(nvcc, src, tmp_path / "k.cu.o", "-rdc=true", *archs)
    proc = subprocess.run([nvcc, "-dlink", str(tmp_path / "k.cu.o"), "-o", str(tmp_path / "link.o"),
                           "--resource-usage", *archs], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    features = code_features([tmp_path / "k.cu.o"], proc.stdout + proc.stderr)
    for arch in ("sm_80", "sm_90"):
        assert features[f"heavy@{arch}:registers"] > 32 and features[f"heavy@{arch}:ffma"] > 0
    assert features["all:registers"] == max(features[f"heavy@{a}:registers"] for a in ("sm_80", "sm_90"))
    assert "heavy:ffma" not in features


def test_cxx_digest_and_object_discovery(tmp_path):
    cxx = find_tool("c++")
    assert cxx
    src = tmp_path / "f.cpp"
    src.write_text("int f(int x) { int s = 0; for (int i = 0; i < x; ++i) s += i * i; return s; }\n")
    digests = {}
    for name, flags in (("a", ["-O2"]), ("b", ["-O2"]), ("c", ["-O0"])):
        obj = tmp_path / name / "CMakeFiles" / "lib.dir" / "f.cpp.o"
        obj.parent.mkdir(parents=True)
        subprocess.run([cxx, "-c", str(src), "-o", str(obj), *flags], check=True)
        assert object_files(tmp_path / name, "lib") == [obj]
        digests[name] = code_digest([obj])
        assert code_features([obj], "") == {}  # host code only
    assert digests["a"] == digests["b"] != digests["c"]
    assert code_digest([]) == ""


def test_objects_without_sass_are_never_called_identical(tmp_path, nvcc):
    """-dlto objects hold NVVM IR: no SASS to compare, so the whole files are."""
    if not find_tool("cuobjdump") or not find_tool("nvdisasm"):
        pytest.skip("cuobjdump/nvdisasm are not installed")
    src = tmp_path / "k.cu"
    src.write_text(KERNEL)
    for name, flags in (("a", ()), ("b", ("--ptxas-options=-O1",))):
        out = tmp_path / name / "k.cu.o"
        out.parent.mkdir()
        proc = subprocess.run([nvcc, "-c", str(src), "-o", str(out), "-arch=sm_90", "-rdc=true", "-dlto",
                               *flags], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    assert code_digest([tmp_path / "a" / "k.cu.o"]) != code_digest([tmp_path / "b" / "k.cu.o"])
