"""CompileIQ.cmake on real projects: the manifest, candidate files, tuned flags, and misuse."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import compile_commands

from compileiq_build.decide.selection import Winner, WorkloadGain
from compileiq_build.decide.stats import RatioEstimate
from compileiq_build.project.manifest import load_manifest
from compileiq_build.results.toolchain import Provenance, render


def test_manifest_lists_targets_benchmarks_and_compilers(cxx_project, configure):
    build = cxx_project / "build"
    configure(cxx_project, build)
    project = load_manifest(build / "compileiq" / "manifest.json")
    assert [t.name for t in project.targets] == ["saxpy"]
    assert project.targets[0].languages == ("CXX",)
    assert project.compilers["CXX"].id == "GNU"
    assert project.generator == "Ninja"
    assert project.source_dir == cxx_project
    (bench,) = project.benchmarks
    assert bench.executable == str(build / "bench_saxpy")  # generator expression resolved
    assert bench.args == ("200000", "30")
    assert bench.targets == ("saxpy",)
    assert (bench.format, bench.unit, bench.higher_is_better) == ("regex", "ms", False)
    assert bench.regex == "time_ms: ([0-9.eE+-]+)"
    assert bench.workdir == str(build)


def test_benchmark_targets_found_through_links_when_not_given(tmp_path, configure):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.cpp").write_text("int a() { return 1; }\n")
    (src / "b.cpp").write_text("int a(); int b() { return a(); }\n")
    (src / "main.cpp").write_text("int b(); int main() { return b() - 1; }\n")
    (src / "CMakeLists.txt").write_text("""
cmake_minimum_required(VERSION 3.24)
project(p LANGUAGES CXX)
find_package(CompileIQ CONFIG REQUIRED)
add_library(a STATIC a.cpp)
add_library(b STATIC b.cpp)
target_link_libraries(b PUBLIC a)
add_executable(main main.cpp)
target_link_libraries(main PRIVATE b)
compileiq_tune(a LANGUAGES CXX)
compileiq_add_benchmark(run COMMAND main FORMAT time)
""")
    configure(src, tmp_path / "build")
    project = load_manifest(tmp_path / "build" / "compileiq" / "manifest.json")
    assert project.benchmarks[0].targets == ("a",)


def test_candidate_file_rebuilds_only_the_changed_target(cxx_project, configure):
    build = cxx_project / "build"
    configure(cxx_project, build, "-DCOMPILEIQ_CANDIDATE_FLAGS=ON")
    configure.build(build)
    opts = build / "compileiq" / "candidate" / "saxpy.CXX.opts"
    assert opts.is_file() and opts.read_text() == ""
    assert load_manifest(build / "compileiq" / "manifest.json").targets[0].source_counts == {"CXX": 1}
    # The file relative to the build folder: the command is the same in every tree.
    assert "@compileiq/candidate/saxpy.CXX.opts" in compile_commands(build)["saxpy.cpp"]
    assert "@" not in compile_commands(build)["untouched.cpp"]
    opts.write_text("-O2\n")
    out = configure.build(build, "bench_saxpy").stdout
    rebuilt = re.findall(r"Building CXX object (\S+)", out)
    assert rebuilt == ["CMakeFiles/saxpy.dir/saxpy.cpp.o"]
    assert "Re-running CMake" not in out


def test_tuned_flags_reach_only_the_named_target(cxx_project, configure):
    toolchain = cxx_project / "tc.cmake"
    toolchain.write_text("set(COMPILEIQ_FLAGS_saxpy_CXX_x86_64 [=[-O2]=] [=[-DODD=\"a b;c\"]=])\n"
                         "set(COMPILEIQ_FLAGS_saxpy_CXX_portable [=[-O1]=])\n")
    build = cxx_project / "build"
    configure(cxx_project, build, f"-DCMAKE_TOOLCHAIN_FILE={toolchain}")
    commands = compile_commands(build)
    import platform

    if platform.machine() == "x86_64":
        assert "-O0 -O2" in commands["saxpy.cpp"]
        assert "-O1" not in commands["saxpy.cpp"]
    for other in ("untouched.cpp", "bench_saxpy.cpp"):
        assert "-O2" not in commands[other] and "-O1" not in commands[other]


def _release_with_generated_file(project: Path, configure, path: str,
                                 *args: str) -> subprocess.CompletedProcess[str]:
    """Configure `project` with a generated toolchain file and no -DCompileIQ_ROOT (unless in
    `args`), as the file's own comment says to build, with `path` as PATH."""
    gain = WorkloadGain("saxpy[]", RatioEstimate(0.5, 0.4, 0.6, 5))
    text = render([Winner("saxpy", {"CXX": "portable"}, "CXX:O=2", {"CXX": ("-O2",)}, (gain,), 3)], [],
                  Provenance("2026-11-30", "CPU", "none", (), "staged"))
    toolchain = project / "compileiq-toolchain.cmake"
    toolchain.write_text(text)
    return subprocess.run([configure.cmake, "-S", str(project), "-B", str(project / "release"), "-G", "Ninja",
                           f"-DCMAKE_MAKE_PROGRAM={configure.ninja}", f"-DCMAKE_TOOLCHAIN_FILE={toolchain}",
                           *args],
                          capture_output=True, text=True, env={**os.environ, "PATH": path},
                          cwd=project)  # python3 -m would find the package in this checkout's folder


def test_the_generated_toolchain_file_finds_the_module_by_itself(cxx_project, configure):
    # The python3 of this environment, first on PATH, knows the module.
    proc = _release_with_generated_file(cxx_project, configure,
                                        f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert re.search(r"CompileIQ: saxpy \(CXX, \S+\) uses tuned flags: -O2$", proc.stdout, re.M)


def test_a_toolchain_file_of_a_newer_format_is_refused(cxx_project, configure):
    toolchain = cxx_project / "tc.cmake"
    toolchain.write_text("set(COMPILEIQ_TOOLCHAIN_FORMAT 2)\n"
                         "set(COMPILEIQ_FLAGS_saxpy_CXX_portable [=[-O2]=])\n")
    proc = configure(cxx_project, cxx_project / "b", f"-DCMAKE_TOOLCHAIN_FILE={toolchain}", check=False)
    assert proc.returncode != 0
    message = " ".join(proc.stderr.split())
    assert "the toolchain file is in format 2, written by a newer compileiq_build" in message


CASES = {
    "unknown_target": ("compileiq_tune(nosuch LANGUAGES CXX)",
                       r"'nosuch' is not a target\. Call compileiq_tune\(\) after"),
    "no_target": ("compileiq_tune()", r"needs at least one target"),
    "unknown_language": ("compileiq_tune(lib LANGUAGES Fortran)", r"unknown language 'Fortran'"),
    "language_not_enabled": ("compileiq_tune(lib LANGUAGES CUDA)",
                             r"the project does not enable CUDA"),
    "interface_target": ("add_library(iface INTERFACE)\ncompileiq_tune(iface LANGUAGES CXX)",
                         r"imported, interface or utility target"),
    "no_command": ("compileiq_tune(lib LANGUAGES CXX)\ncompileiq_add_benchmark(b FORMAT time)",
                   r"compileiq_add_benchmark\(b\): COMMAND is missing\. Write: "),
    "unknown_option": ("compileiq_tune(lib LANGUAGES CXX)\n"
                       "compileiq_add_benchmark(b BOGUS 1 COMMAND exe)",
                       r"unknown argument\(s\) 'BOGUS;1'"),
    "bad_format": ("compileiq_tune(lib LANGUAGES CXX)\n"
                   "compileiq_add_benchmark(b COMMAND exe FORMAT xml)", r"unknown FORMAT 'xml'"),
    "regex_missing": ("compileiq_tune(lib LANGUAGES CXX)\n"
                      "compileiq_add_benchmark(b COMMAND exe FORMAT regex)",
                      r"FORMAT regex needs REGEX"),
    "bad_unit": ("compileiq_tune(lib LANGUAGES CXX)\n"
                 "compileiq_add_benchmark(b COMMAND exe REGEX \"t=(.*)\" UNIT min)",
                 r"unknown UNIT 'min'"),
    "unit_and_rate": ("compileiq_tune(lib LANGUAGES CXX)\n"
                      "compileiq_add_benchmark(b COMMAND exe REGEX \"x=(.*)\" UNIT ms HIGHER_IS_BETTER)",
                      r"UNIT names a time, but HIGHER_IS_BETTER"),
    "untuned_in_targets": ("compileiq_tune(lib LANGUAGES CXX)\n"
                           "compileiq_add_benchmark(b COMMAND exe FORMAT time TARGETS exe)",
                           r"TARGETS names 'exe', which is not marked for tuning"),
    "command_is_library": ("compileiq_tune(lib LANGUAGES CXX)\n"
                           "compileiq_add_benchmark(b COMMAND lib FORMAT time TARGETS lib)",
                           r"COMMAND 'lib' is a STATIC_LIBRARY, not an executable"),
    "tolerance_alone": ("compileiq_tune(lib LANGUAGES CXX)\n"
                        "compileiq_add_benchmark(b COMMAND exe FORMAT time TOLERANCE 1e-3)",
                        r"TOLERANCE applies to CHECKSUM or OUTPUT_FILE"),
    "checksum_without_group": ("compileiq_tune(lib LANGUAGES CXX)\n"
                               "compileiq_add_benchmark(b COMMAND exe FORMAT time CHECKSUM \"sum: \")",
                               r"CHECKSUM needs a capture group"),
    "bad_tolerance": ("compileiq_tune(lib LANGUAGES CXX)\ncompileiq_add_benchmark(b COMMAND exe "
                      "FORMAT time CHECKSUM \"s=(.*)\" TOLERANCE lots)", r"TOLERANCE must be a relative"),
    "bad_timeout": ("compileiq_tune(lib LANGUAGES CXX)\n"
                    "compileiq_add_benchmark(b COMMAND exe FORMAT time TIMEOUT soon)",
                    r"TIMEOUT must be a number of seconds"),
    # Misspelt keywords stop the call itself, so the error shows the caller's line (7, the body's 2nd).
    "typo_among_targets": ("compileiq_tune(lib LANGUAGES CXX)\n"
                           "compileiq_add_benchmark(b COMMAND exe TARGETS lib FORMATT regex REGEX \"(.*)\")",
                           r"compileiq_add_benchmark\(b\): 'FORMATT' looks like a misspelt FORMAT\. "
                           r"Write FORMAT; .* after ARGS.*CMakeLists\.txt:7 \(compileiq_add_benchmark\)"),
    # Unchecked, FORMATT and regex would silently become arguments of the benchmark.
    "typo_after_command_args": ("compileiq_tune(lib LANGUAGES CXX)\n"
                                "compileiq_add_benchmark(b COMMAND exe 100 FORMATT regex REGEX \"(.*)\" "
                                "TARGETS lib)",
                                r"'FORMATT' looks like a misspelt FORMAT\..*CMakeLists\.txt:7 "
                                r"\(compileiq_add_benchmark\)"),
    "typo_in_tune": ("compileiq_tune(lib LANGUAGE CXX)",
                     r"compileiq_tune\(\): 'LANGUAGE' looks like a misspelt LANGUAGES\. Write LANGUAGES; "
                     r".*CMakeLists\.txt:6 \(compileiq_tune\)"),
    # Groups of a target's sources.
    "group_file_not_in_target": ("compileiq_tune(lib LANGUAGES CXX SOURCES main.cpp)",
                                 r"compileiq_tune\(lib \.\.\. GROUP main\) in .*CMakeLists\.txt: "
                                 r".*/main\.cpp is not a source of lib\. SOURCES are paths relative to "
                                 r"the folder of lib .* it has 1, such as lib\.cpp"),
    "group_glob_matches_nothing": ("compileiq_tune(lib LANGUAGES CXX SOURCES k*.cpp GROUP k)",
                                   r"'k\*\.cpp' matches no source of lib"),
    "group_overlap": ("compileiq_tune(lib LANGUAGES CXX SOURCES lib.cpp GROUP a)\n"
                      "compileiq_tune(lib LANGUAGES CXX SOURCES *.cpp GROUP b)",
                      r"lib\.cpp is in groups a and b of lib; a source gets the flags of one group"),
    "group_and_whole": ("compileiq_tune(lib LANGUAGES CXX)\n"
                        "compileiq_tune(lib LANGUAGES CXX SOURCES lib.cpp)",
                        r"lib is tuned whole \(compileiq_tune\(lib\)\) and in groups \(lib\)"),
    "group_of_two_targets": ("compileiq_tune(lib exe LANGUAGES CXX SOURCES lib.cpp)",
                             r"SOURCES are files of one target"),
    "group_without_sources": ("compileiq_tune(lib LANGUAGES CXX GROUP g)", r"a group needs its files"),
    "group_bad_name": ("compileiq_tune(lib LANGUAGES CXX SOURCES lib.cpp GROUP \"a b\")",
                       r"the group name 'a b' may hold only"),
    "benchmark_of_unknown_group": ("compileiq_tune(lib LANGUAGES CXX SOURCES lib.cpp GROUP a)\n"
                                   "compileiq_add_benchmark(b COMMAND exe FORMAT time TARGETS lib:z)",
                                   r"TARGETS names 'lib:z', which is not marked for tuning"),
    "group_of_no_file_in_its_language": ('file(WRITE ${CMAKE_CURRENT_SOURCE_DIR}/k.h "")\n'
                                         "target_sources(lib PRIVATE k.h)\n"
                                         "compileiq_tune(lib LANGUAGES CXX SOURCES k.h GROUP h)",
                                         r"none of the group's files compiles as CXX"),
    "typo_sources": ("compileiq_tune(lib LANGUAGES CXX SOURCE lib.cpp)",
                     r"'SOURCE' looks like a misspelt SOURCES"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_misuse_is_a_fatal_error_that_says_what_to_write(case, tmp_path, configure):
    body, expected = CASES[case]
    src = tmp_path / "src"
    src.mkdir()
    (src / "lib.cpp").write_text("int f() { return 1; }\n")
    (src / "main.cpp").write_text("int main() { return 0; }\n")
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.24)\nproject(p LANGUAGES CXX)\n"
        "find_package(CompileIQ CONFIG REQUIRED)\nadd_library(lib STATIC lib.cpp)\n"
        f"add_executable(exe main.cpp)\n{body}\n")
    proc = configure(src, tmp_path / "build", check=False)
    assert proc.returncode != 0
    assert "CMake Error" in proc.stderr
    assert re.search(expected, " ".join(proc.stderr.split())), proc.stderr


def test_manifest_is_valid_json_with_hostile_arguments(tmp_path, configure):
    src = tmp_path / "src"
    src.mkdir()
    (src / "lib.cpp").write_text("int f() { return 1; }\n")
    (src / "main.cpp").write_text("int main() { return 0; }\n")
    (src / "CMakeLists.txt").write_text(r"""
cmake_minimum_required(VERSION 3.24)
project(p LANGUAGES CXX)
find_package(CompileIQ CONFIG REQUIRED)
add_library(lib STATIC lib.cpp)
add_executable(exe main.cpp)
compileiq_tune(lib LANGUAGES CXX)
compileiq_add_benchmark(b COMMAND exe "quote\"d" "back\\slash" "tab	x" "[bracket" TARGETS lib
                        REGEX "time: \"([0-9.]+)\\s*\\[ms\\]" UNIT ms)
""")
    configure(src, tmp_path / "build")
    raw = json.loads((tmp_path / "build" / "compileiq" / "manifest.json").read_text())
    assert raw["benchmarks"][0]["args"] == ['quote"d', "back\\slash", "tab\tx", "[bracket"]
    assert raw["benchmarks"][0]["regex"] == 'time: "([0-9.]+)\\s*\\[ms\\]'


def test_all_caps_arguments_reach_the_benchmark(tmp_path, configure):
    # Far from every keyword they pass as they are; near one, they pass after ARGS.
    src = tmp_path / "src"
    src.mkdir()
    (src / "lib.cpp").write_text("int f() { return 1; }\n")
    (src / "main.cpp").write_text("int main() { return 0; }\n")
    (src / "CMakeLists.txt").write_text("""
cmake_minimum_required(VERSION 3.24)
project(p LANGUAGES CXX)
find_package(CompileIQ CONFIG REQUIRED)
add_library(lib STATIC lib.cpp)
add_executable(exe main.cpp)
compileiq_tune(lib LANGUAGES CXX)
compileiq_add_benchmark(b COMMAND exe --mode FAST NCHW ARGS --unit UNITS FORMATT TARGETS lib FORMAT time)
""")
    configure(src, tmp_path / "build")
    raw = json.loads((tmp_path / "build" / "compileiq" / "manifest.json").read_text())
    assert raw["benchmarks"][0]["args"] == ["--mode", "FAST", "NCHW", "--unit", "UNITS", "FORMATT"]
    assert raw["benchmarks"][0]["targets"] == ["lib"]


def test_cuda_target_manifest_and_tuning_arch(tmp_path, configure, nvcc):
    src = tmp_path / "src"
    src.mkdir()
    (src / "k.cu").write_text("__global__ void k(float* a) { a[threadIdx.x] *= 2.0f; }\n"
                              "void launch(float* a) { k<<<1, 32>>>(a); }\n")
    (src / "main.cpp").write_text("int main() { return 0; }\n")
    (src / "CMakeLists.txt").write_text("""
cmake_minimum_required(VERSION 3.24)
project(p LANGUAGES CXX CUDA)
find_package(CompileIQ CONFIG REQUIRED)
add_library(k STATIC k.cu)
set_target_properties(k PROPERTIES CUDA_ARCHITECTURES 75)
add_executable(exe main.cpp)
target_link_libraries(exe PRIVATE k)
compileiq_tune(k)
compileiq_add_benchmark(b COMMAND exe FORMAT time)
""")
    build = tmp_path / "build"
    configure(src, build, f"-DCMAKE_CUDA_COMPILER={nvcc}", "-DCOMPILEIQ_CANDIDATE_FLAGS=ON",
              "-DCOMPILEIQ_TUNING_ARCH=90")
    project = load_manifest(build / "compileiq" / "manifest.json")
    target = project.targets[0]
    assert target.languages == ("CUDA",)
    assert target.project_architectures == ("75",)
    assert target.arch_keys == {"CUDA": "sm_90"}
    cmd = compile_commands(build)["k.cu"]
    assert "code=[sm_90]" in cmd  # real machine code only: no PTX left to JIT
    assert "--options-file compileiq/candidate/k.CUDA.opts" in cmd  # two words: ccache hashes the file
    assert Path(target.candidate_files["CUDA"]).is_file()


def test_another_compiler_version_warns_and_drops_rejected_flags(cxx_project, configure):
    toolchain = cxx_project / "tc.cmake"
    toolchain.write_text("set(COMPILEIQ_TUNED_WITH_CXX [=[GNU 0.0.1]=])\n"
                         "set(COMPILEIQ_FLAGS_saxpy_CXX_portable [=[-O2]=] [=[-fno-such-option-xyz]=])\n")
    build = cxx_project / "build"
    proc = configure(cxx_project, build, f"-DCMAKE_TOOLCHAIN_FILE={toolchain}")
    err = " ".join(proc.stderr.split())
    assert "were tuned with GNU 0.0.1; this build uses GNU" in err
    assert "rejects -fno-such-option-xyz; it is not applied to saxpy" in err
    command = compile_commands(build)["saxpy.cpp"]
    assert "-O2" in command and "-fno-such-option-xyz" not in command
    configure.build(build)


def test_same_compiler_applies_flags_without_checks(cxx_project, configure):
    from compileiq_build.project.manifest import load_manifest as load

    build = cxx_project / "probe"
    configure(cxx_project, build)
    version = load(build / "compileiq" / "manifest.json").compilers["CXX"].version
    toolchain = cxx_project / "tc.cmake"
    toolchain.write_text(f"set(COMPILEIQ_TUNED_WITH_CXX [=[GNU {version}]=])\n"
                         "set(COMPILEIQ_FLAGS_saxpy_CXX_portable [=[-O2]=])\n")
    proc = configure(cxx_project, cxx_project / "build", f"-DCMAKE_TOOLCHAIN_FILE={toolchain}")
    assert "were tuned with" not in proc.stderr
    assert "-O2" in compile_commands(cxx_project / "build")["saxpy.cpp"]  # applied, unchecked


def test_candidate_file_dependency_for_targets_in_subdirectories(tmp_path, configure):
    """Found on HeCBench: the target lives in src/sub, the module's deferred code runs in the
    top-level directory, and relative source paths must still reach the target's sources."""
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "lib.cpp").write_text("int f() { return 1; }\n")
    (src / "sub" / "main.cpp").write_text("int f(); int main() { return f() - 1; }\n")
    (src / "sub" / "CMakeLists.txt").write_text(
        "add_library(lib STATIC lib.cpp)\nadd_executable(app main.cpp)\n"
        "target_link_libraries(app PRIVATE lib)\n")
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.24)\nproject(p LANGUAGES CXX)\n"
        "find_package(CompileIQ CONFIG REQUIRED)\nadd_subdirectory(sub)\n"
        "compileiq_tune(lib LANGUAGES CXX)\ncompileiq_add_benchmark(b COMMAND app FORMAT time)\n")
    build = tmp_path / "build"
    configure(src, build, "-DCOMPILEIQ_CANDIDATE_FLAGS=ON")
    configure.build(build)
    (build / "compileiq" / "candidate" / "lib.CXX.opts").write_text("-O2\n")
    out = configure.build(build, "app").stdout
    assert re.findall(r"Building CXX object (\S+)", out) == ["sub/CMakeFiles/lib.dir/lib.cpp.o"]


def test_cuda_enabled_in_a_subdirectory_names_its_compiler(tmp_path, configure, nvcc):
    """Found on ggml: CUDA is enabled in src/ggml-cuda, so the compiler's id and version are not
    variables of the top-level directory, where the module writes the manifest and applies the
    toolchain file. They were written empty; the toolchain file then said `Compiler: CUDA` and
    a build with another nvcc did not warn."""
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "k.cu").write_text("__global__ void k(float* a) { a[threadIdx.x] *= 2.0f; }\n")
    (src / "sub" / "CMakeLists.txt").write_text("enable_language(CUDA)\nadd_library(k STATIC k.cu)\n")
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.24)\nproject(p LANGUAGES CXX)\n"
        "find_package(CompileIQ CONFIG REQUIRED)\nadd_subdirectory(sub)\ncompileiq_tune(k)\n")
    args = (f"-DCMAKE_CUDA_COMPILER={nvcc}", "-DCMAKE_CUDA_ARCHITECTURES=90")
    configure(src, tmp_path / "probe", *args)
    cuda = load_manifest(tmp_path / "probe" / "compileiq" / "manifest.json").compilers["CUDA"]
    assert cuda.id == "NVIDIA" and re.fullmatch(r"\d+\.\d+\.\d+", cuda.version)
    toolchain = tmp_path / "tc.cmake"
    toolchain.write_text(f"set(COMPILEIQ_TUNED_WITH_CUDA [=[NVIDIA {cuda.version}]=])\n"
                         "set(COMPILEIQ_FLAGS_k_CUDA_sm_90 [=[--maxrregcount=64]=])\n")
    build = tmp_path / "build"
    proc = configure(src, build, *args, f"-DCMAKE_TOOLCHAIN_FILE={toolchain}")
    assert "were tuned with" not in proc.stderr
    assert "--maxrregcount=64" in compile_commands(build)["k.cu"]
    toolchain.write_text(toolchain.read_text().replace(f"NVIDIA {cuda.version}", "NVIDIA 0.0.1"))
    proc = configure(src, tmp_path / "other", *args, f"-DCMAKE_TOOLCHAIN_FILE={toolchain}")
    message = " ".join(proc.stderr.split())
    assert f"were tuned with NVIDIA 0.0.1; this build uses NVIDIA {cuda.version}" in message
