"""Every user mistake ends in a short message and a non-zero exit, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

from compileiq_build.machine import environment
from compileiq_build.project.manifest import load_project
from compileiq_build.stages.tune import _numerics_checks


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "compileiq_build", *args],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)


def _fails_with(proc: subprocess.CompletedProcess[str], text: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert text in " ".join(proc.stderr.split()), proc.stderr


def test_build_dir_missing(tmp_path):
    _fails_with(_cli("tune", str(tmp_path / "nope")), "does not exist. Configure the project first")


def test_build_dir_not_configured(tmp_path):
    _fails_with(_cli("tune", str(tmp_path)), "is not a configured CMake build folder")


def test_build_dir_without_compileiq(tmp_path, cmake, ninja):
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.24)\nproject(p NONE)\n")
    subprocess.run([cmake, "-S", str(src), "-B", str(tmp_path / "b"), "-G", "Ninja",
                    f"-DCMAKE_MAKE_PROGRAM={ninja}"], check=True, capture_output=True)
    _fails_with(_cli("tune", str(tmp_path / "b")), "was configured without CompileIQ")


def test_unknown_target(cxx_project, configure):
    configure(cxx_project, cxx_project / "build")
    _fails_with(_cli("tune", str(cxx_project / "build"), "--targets", "nosuch"),
                "--targets names 'nosuch', which is not tuned in this build. Tuned targets: saxpy.")


def test_incompatible_manifest(cxx_project, configure):
    configure(cxx_project, cxx_project / "build")
    manifest = cxx_project / "build" / "compileiq" / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"schema" : 1', '"schema" : 99'))
    _fails_with(_cli("tune", str(cxx_project / "build")), "has manifest schema 99")


def test_corrupt_manifest(cxx_project, configure):
    configure(cxx_project, cxx_project / "build")
    (cxx_project / "build" / "compileiq" / "manifest.json").write_text("{ not json")
    _fails_with(_cli("tune", str(cxx_project / "build")), "Re-run the CMake configure step")


def test_bad_budget_is_an_argument_error(tmp_path):
    proc = _cli("tune", str(tmp_path), "--budget", "0")
    assert proc.returncode == 2 and "must be at least 1" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_benchmark_failing_at_baseline(cxx_project, configure):
    cml = cxx_project / "CMakeLists.txt"
    cml.write_text(cml.read_text().replace("bench_saxpy 200000 30", "bench_saxpy 200000 30 extra")
                   .replace('REGEX "time_ms', 'REGEX "nothing_ms'))
    configure(cxx_project, cxx_project / "build")
    _fails_with(_cli("tune", str(cxx_project / "build"), "--budget", "1"),
                "fails with the project's own flags: REGEX 'nothing_ms: ([0-9.eE+-]+)' matched nothing")


def test_unwritable_output(cxx_project, configure, tmp_path):
    configure(cxx_project, cxx_project / "build")
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = _cli("tune", str(cxx_project / "build"), "--budget", "1", "--repeats", "2",
                "--output", str(blocker / "sub" / "tc.cmake"))
    _fails_with(proc, "cannot write the toolchain file")
    # Said before tuning, not after it: nothing was measured.
    assert not (cxx_project / "build" / "compileiq" / "results.sqlite").exists()


def test_numerics_changes_without_a_check_are_warned_about(cxx_project, configure):
    configure(cxx_project, cxx_project / "build")
    proc = _cli("tune", str(cxx_project / "build"), "--budget", "1", "--repeats", "2", "--strategy", "staged",
                "--allow-numerics-change")
    assert proc.returncode == 0, proc.stderr
    assert ("warning: benchmark 'saxpy' of saxpy registers no CHECKSUM or OUTPUT_FILE: with "
            "--allow-numerics-change only its exit code guards") in " ".join(proc.stderr.split())
    [bench] = load_project(cxx_project / "build").benchmarks_for("saxpy")
    assert "has no TOLERANCE" in _numerics_checks("saxpy", [replace(bench, checksum="sum: (.*)")])[0]
    assert _numerics_checks("saxpy", [replace(bench, checksum="sum: (.*)", tolerance=1e-3)]) == []


def test_fresh_needs_confirmation_without_a_terminal(cxx_project, configure, tmp_path):
    build = cxx_project / "build"
    configure(cxx_project, build)
    (build / "compileiq" / "results.sqlite").write_bytes(b"")
    _fails_with(_cli("tune", str(build), "--fresh"), "add --yes to confirm")
    # The demo's store too, when its folder is reused.
    store = tmp_path / "demo" / "build" / "compileiq" / "results.sqlite"
    store.parent.mkdir(parents=True)
    store.write_bytes(b"kept")
    _fails_with(_cli("demo", "--workdir", str(tmp_path / "demo"), "--fresh"), "add --yes to confirm")
    assert store.read_bytes() == b"kept"


@pytest.mark.skipif(bool(environment.detect_gpus()), reason="a GPU is present")
def test_cuda_targets_without_a_gpu(tmp_path, configure, nvcc):
    src = tmp_path / "src"
    src.mkdir()
    (src / "k.cu").write_text("__global__ void k() {}\n")
    (src / "main.cpp").write_text("int main() { return 0; }\n")
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.24)\nproject(p LANGUAGES CXX CUDA)\n"
        "find_package(CompileIQ CONFIG REQUIRED)\nadd_library(k STATIC k.cu)\n"
        "add_library(h STATIC main.cpp)\nadd_executable(exe main.cpp)\n"
        "compileiq_tune(k)\ncompileiq_tune(h LANGUAGES CXX)\n"
        "compileiq_add_benchmark(b COMMAND exe FORMAT time TARGETS k h)\n")
    configure(src, tmp_path / "build", f"-DCMAKE_CUDA_COMPILER={nvcc}", "-DCMAKE_CUDA_ARCHITECTURES=90")
    _fails_with(_cli("tune", str(tmp_path / "build")),
                "tuning CUDA targets (k) needs an NVIDIA GPU, and nvidia-smi finds none here. "
                "To tune the C++ targets alone: --targets h")


def test_out_of_range_settings_are_refused(tmp_path):
    for args, text in ((["--precision", "-1"], "must lie between 0 and 1"),
                       (["--precision", "1.5"], "must lie between 0 and 1"),
                       (["--compile-ahead", "-2"], "not a whole number of 0 or more")):
        proc = _cli("tune", str(tmp_path), *args)
        assert proc.returncode == 2 and text in proc.stderr and "Traceback" not in proc.stderr
