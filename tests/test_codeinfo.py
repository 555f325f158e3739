"""Machine-code digests and resource reports from real nvcc and g++ objects."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from compileiq_build.codeinfo import code_digest, object_files, resource_features
from compileiq_build.environment import find_tool

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


def test_resource_report_features(tmp_path, nvcc):
    src = tmp_path / "k.cu"
    src.write_text(KERNEL)
    out = _nvcc(nvcc, src, tmp_path / "k.cu.o")
    features = resource_features(out)
    assert features["registers_max"] >= 8 and features["spill_bytes"] == 0
    capped = resource_features(_nvcc(nvcc, src, tmp_path / "c.cu.o", "--maxrregcount=255"))
    assert capped["registers_max"] == features["registers_max"]
    assert resource_features("no report here") == {}


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
