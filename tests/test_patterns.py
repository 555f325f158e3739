"""Habits of real CUDA projects (tests/fixtures/patterns/): architectures set in odd places,
separable compilation, options the project already sets.  Real cmake, ninja and nvcc."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import FIXTURES

from compileiq_build.machine import environment
from compileiq_build.project.manifest import jit_warning, load_manifest

TUNING = ("-DCOMPILEIQ_CANDIDATE_FLAGS=ON", "-DCOMPILEIQ_TUNING_ARCH=90")
GENCODE = "--generate-code=arch=compute_90,code=sm_90"


@pytest.fixture
def patterns(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURES / "patterns", tmp_path / "patterns")
    return tmp_path / "patterns"


def _commands(configure, build: Path, target: str) -> list[str]:
    proc = subprocess.run([configure.ninja, "-C", str(build), "-t", "commands", target],
                          capture_output=True, text=True, check=True)
    return proc.stdout.splitlines()


def _compile_of(commands: list[str], source: str) -> str:
    return next(c for c in commands if f"{source} -o" in c and " -c " in c)


def _dlink(commands: list[str]) -> str:
    return next(c for c in commands if " -dlink " in c)


def test_architectures_as_an_ordinary_variable(patterns, configure, nvcc):
    build = patterns / "b"
    configure(patterns / "arch_variable", build, f"-DCMAKE_CUDA_COMPILER={nvcc}", *TUNING)
    target = load_manifest(build / "compileiq" / "manifest.json").targets[0]
    assert target.project_architectures == ("75",) and target.arch_keys == {"CUDA": "sm_90"}
    commands = _commands(configure, build, "bench")
    assert GENCODE in _compile_of(commands, "k.cu")
    assert GENCODE in _dlink(commands)  # the executable's device link includes the sm_90 code
    configure.build(build)


def test_target_built_for_another_architecture_is_tuned_as_real_code_and_flagged(patterns, configure, nvcc):
    build = patterns / "b"
    configure(patterns / "target_arch_other", build, f"-DCMAKE_CUDA_COMPILER={nvcc}", *TUNING)
    commands = _commands(configure, build, "bench")
    assert "code=[sm_90]" in _compile_of(commands, "k.cu")  # no PTX left for the driver to JIT
    configure.build(build)
    user = patterns / "user"
    configure(patterns / "target_arch_other", user, f"-DCMAKE_CUDA_COMPILER={nvcc}")
    target = load_manifest(user / "compileiq" / "manifest.json").targets[0]
    warning = jit_warning(target, "90")
    assert "for CUDA architecture(s) 75, not for this GPU's 90: on this GPU the project's binary runs " \
           "JIT-compiled PTX" in warning
    assert jit_warning(target, "75") == ""
    # ggml's default list for CUDA 13 holds sm_90 as PTX only.
    ggml = replace(target, project_architectures=("75-virtual", "80-virtual", "86-real", "89-real",
                                                  "90-virtual", "120a-real", "121a-real"))
    assert "75-virtual, 80-virtual, 86-real, 89-real, 90-virtual, 120a-real, 121a-real: 90 only as PTX " \
           "(90-virtual)" in jit_warning(ggml, "90")
    for fine in (("90",), ("90-real", "90-virtual"), ("90a-real",), ("all-major",)):
        assert jit_warning(replace(target, project_architectures=fine), "90") == ""


def test_a_build_for_an_architecture_the_toolchain_file_lacks_says_so(patterns, configure, nvcc):
    toolchain = patterns / "tc.cmake"
    toolchain.write_text("set(COMPILEIQ_FLAGS_k_CUDA_sm_90 [=[--maxrregcount=64]=])\n")
    proc = configure(patterns / "target_arch_other", patterns / "release", f"-DCMAKE_CUDA_COMPILER={nvcc}",
                     f"-DCMAKE_TOOLCHAIN_FILE={toolchain}")
    assert "k (CUDA) builds for sm_75, but the toolchain file has flags for it only for sm_90" in (
        " ".join(proc.stderr.split()))
    assert "--maxrregcount=64" not in _compile_of(_commands(configure, patterns / "release", "bench"), "k.cu")


def test_arch_in_cuda_flags_with_cmp0104_old(patterns, configure, nvcc):
    user = patterns / "user"
    configure(patterns / "arch_in_flags", user, f"-DCMAKE_CUDA_COMPILER={nvcc}")
    target = load_manifest(user / "compileiq" / "manifest.json").targets[0]
    assert target.arch_keys == {"CUDA": "sm_75"}  # read from -arch=sm_75 in CMAKE_CUDA_FLAGS
    build = patterns / "b"
    configure(patterns / "arch_in_flags", build, f"-DCMAKE_CUDA_COMPILER={nvcc}", *TUNING)
    command = _compile_of(_commands(configure, build, "bench"), "k.cu")
    assert "-arch=sm_75" in command and GENCODE in command  # the flags cannot drop the GPU's code
    configure.build(build)


@pytest.mark.skipif(bool(environment.detect_gpus()), reason="a GPU is present")
def test_native_architecture_without_a_gpu_is_a_clear_error(patterns, configure, nvcc):
    proc = configure(patterns / "native", patterns / "b", f"-DCMAKE_CUDA_COMPILER={nvcc}", check=False)
    assert proc.returncode != 0
    text = " ".join(proc.stderr.split())
    assert "builds for CUDA_ARCHITECTURES native, but CMake found no GPU here" in text
    assert "-DCMAKE_CUDA_ARCHITECTURES=90" in text


def test_separable_compilation_passes_flags_to_the_device_link(patterns, configure, nvcc):
    build = patterns / "b"
    configure(patterns / "rdc_dlink", build, f"-DCMAKE_CUDA_COMPILER={nvcc}", *TUNING)
    opts = build / "compileiq" / "candidate" / "k.CUDA.opts"
    opts.write_text("--ptxas-options=-dlcm=cg\n--maxrregcount=64\n")
    assert "--options-file compileiq/candidate/k.CUDA.opts" in _dlink(_commands(configure, build, "bench"))
    configure.build(build)
    # The same through a toolchain file, in a release build.
    toolchain = patterns / "tc.cmake"
    toolchain.write_text("set(COMPILEIQ_FLAGS_k_CUDA_sm_90\n"
                         "  [=[--ptxas-options=-dlcm=cg]=] [=[--maxrregcount=64]=])\n")
    release = patterns / "release"
    configure(patterns / "rdc_dlink", release, f"-DCMAKE_CUDA_COMPILER={nvcc}",
              f"-DCMAKE_TOOLCHAIN_FILE={toolchain}")
    commands = _commands(configure, release, "bench")
    assert "--ptxas-options=-dlcm=cg --maxrregcount=64" in _compile_of(commands, "k.cu")
    assert "--ptxas-options=-dlcm=cg" in _dlink(commands) and "--maxrregcount=64" in _dlink(commands)
    configure.build(release)


def test_options_the_project_sets_stay_and_candidates_come_after(patterns, configure, nvcc):
    build = patterns / "b"
    configure(patterns / "existing_options", build, f"-DCMAKE_CUDA_COMPILER={nvcc}", *TUNING)
    opts = build / "compileiq" / "candidate" / "k.CUDA.opts"
    opts.write_text("--maxrregcount=128\n--ftz=false\n--resource-usage\n")
    command = _compile_of(_commands(configure, build, "bench"), "k.cu")
    for own in ("-use_fast_math", "-maxrregcount=64", "-Xptxas -v", "-lineinfo"):
        assert own in command  # the baseline keeps the project's options
    # Last wins; the file named relative to the build folder, the same in every tree of the driver's.
    assert command.index("-maxrregcount=64") < command.index("--options-file compileiq/candidate/k.CUDA.opts")
    proc = configure.build(build)
    assert "ptxas info" in proc.stdout  # nvcc accepted the overriding options
