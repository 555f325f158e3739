"""The bundled sample_project: it configures with the module, builds with nvcc and g++, and tunes."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, compile_commands

from compileiq_build.decide.selection import Winner, decide, pairs
from compileiq_build.machine import environment
from compileiq_build.project.manifest import load_manifest
from compileiq_build.store.database import read_store

CUDA_TARGETS = ["gemm_kernels", "nbody_kernels", "stencil_kernels"]
HOST_TARGETS = ["host_matmul", "host_blur", "host_particles"]


def test_sample_project_builds_cuda_and_host_targets(tmp_path, configure, nvcc):
    build = tmp_path / "build"
    configure(ROOT / "sample_project", build, f"-DCMAKE_CUDA_COMPILER={nvcc}",
              "-DCMAKE_CUDA_ARCHITECTURES=90")
    configure.build(build)
    project = load_manifest(build / "compileiq" / "manifest.json")
    assert sorted(t.name for t in project.targets) == sorted(CUDA_TARGETS + HOST_TARGETS)
    for t in project.targets:
        assert t.languages == (("CUDA",) if t.name in CUDA_TARGETS else ("CXX",))
    workloads = {b.workload for b in project.benchmarks}
    assert {"gemm[--n 2048 --reps 50]", "gemm[--n 4096 --reps 20]"} <= workloads
    for b in project.benchmarks:
        assert (build / b.executable_target).is_file() and b.executable == str(build / b.executable_target)
    commands = compile_commands(build)
    assert "sm_90" in commands["gemm.cu"]
    # Every registration is a CTest test labelled compileiq; those of CUDA targets also 'gpu',
    # and they hold one GPU each through the resource spec the module wrote.
    ctest = str(Path(configure.cmake).with_name("ctest"))
    listed = subprocess.run([ctest, "-N", "-L", "compileiq"], cwd=build, capture_output=True, text=True)
    assert f"Total Tests: {len(project.benchmarks)}" in listed.stdout
    gpu_listed = subprocess.run([ctest, "-N", "-L", "gpu"], cwd=build, capture_output=True, text=True)
    assert "Total Tests: 5" in gpu_listed.stdout
    spec = json.loads((build / "compileiq" / "ctest-resources.json").read_text())
    assert spec["version"] == {"major": 1, "minor": 0} and "gpus" in spec["local"][0]
    # The host benchmarks run here through CTest and check their own results.
    host = subprocess.run([ctest, "-L", "compileiq", "-LE", "gpu", "--output-on-failure"], cwd=build,
                          capture_output=True, text=True, timeout=600)
    assert host.returncode == 0, host.stdout[-3000:]
    assert re.search(r"100% tests passed.*out of 3", host.stdout), host.stdout


def test_demo_tunes_the_host_targets_without_a_gpu(tmp_path):
    if environment.detect_gpus():
        pytest.skip("with a GPU the demo tunes CUDA targets (see the gpu test)")
    proc = subprocess.run(
        [sys.executable, "-m", "compileiq_build", "demo", "--workdir", str(tmp_path),
         "--budget", "2", "--repeats", "3"], capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    toolchain = tmp_path / "sample_project" / "compileiq-toolchain.cmake"
    assert f"toolchain file: {toolchain}" in proc.stdout
    text = toolchain.read_text()
    assert "Tuned on:  CPU" in text
    # Each target is what the store decides: a winner's flags in its variable, or kept with why.
    store = read_store(tmp_path / "build" / "compileiq" / "results.sqlite")
    try:
        found = pairs(store)
        assert sorted(t for t, _ in found) == sorted(HOST_TARGETS)
        for target, arch in found:
            decision = decide(store, target, arch)
            if isinstance(decision, Winner):
                flags = "".join(f"\n  [=[{f}]=]" for fl in decision.flags.values() for f in fl)
                assert f"set(COMPILEIQ_FLAGS_{target}_CXX_{arch['CXX']}{flags}\n)" in text
            else:
                assert f"#   {target} ({arch['CXX']}): {decision.reason}" in text
    finally:
        store.close()
    assert "tuning the CXX targets host_matmul, host_blur, host_particles" in proc.stderr
    assert "strategy staged" in proc.stdout + proc.stderr  # 2 candidates: no room for the model's seeds


def test_demo_without_a_workdir_leaves_no_folder_behind(tmp_path):
    if environment.detect_gpus():
        pytest.skip("with a GPU the demo tunes CUDA targets")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "compileiq_build", "demo", "--targets", "host_blur", "--budget", "1",
         "--repeats", "2"], capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "host_blur" in proc.stdout and "temporary folder, now removed; --workdir DIR keeps" in proc.stdout
    assert list(tmp_path.iterdir()) == []  # the copy of the project, its build and results are gone


@pytest.mark.gpu
def test_demo_tunes_the_cuda_targets_on_a_gpu(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "compileiq_build", "demo", "--workdir", str(tmp_path),
         "--budget", "2", "--repeats", "3", "--max-repeats", "6"], capture_output=True, text=True,
        timeout=3000)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = (tmp_path / "sample_project" / "compileiq-toolchain.cmake").read_text()
    assert "(sm_" in text
    for target in CUDA_TARGETS:
        assert target in text
    # The GPU's state during every valid run is stored with the sample.
    db = sqlite3.connect(tmp_path / "build" / "compileiq" / "results.sqlite")
    states = [json.loads(g) for (g,) in db.execute("SELECT gpu FROM samples WHERE error=''")]
    assert states and all(s.get("uuid", "").startswith("GPU-") and s["sm_clock_max_mhz"] > 0
                          for s in states)


@pytest.mark.gpu
def test_one_worker_per_gpu(tmp_path, configure):
    """Every GPU of the first one's kind gets a worker, and each worker measures candidates."""
    build = tmp_path / "build"
    configure(ROOT / "sample_project", build, "-DCMAKE_CUDA_ARCHITECTURES=native")
    proc = subprocess.run(
        [sys.executable, "-m", "compileiq_build", "tune", str(build), "--targets", "stencil_kernels",
         "--strategy", "random", "--budget", "8", "--repeats", "2", "--max-repeats", "2", "--jobs", "8"],
        capture_output=True, text=True, timeout=3000)
    assert proc.returncode == 0, proc.stderr[-3000:]
    gpus = environment.detect_gpus()
    expected = {f"gpu{g.index}" for g in gpus if g.arch == gpus[0].arch}
    db = sqlite3.connect(build / "compileiq" / "results.sqlite")
    workers = {w for (w,) in db.execute("SELECT worker FROM evaluations WHERE phase = 'search'")}
    assert workers == expected
    (environment_json,) = db.execute("SELECT environment FROM sessions").fetchone()
    assert sorted(json.loads(environment_json)["workers"]) == sorted(expected)
