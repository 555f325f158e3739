"""Where the GPU time goes: kernels timed by ncu, mapped through the objects' SASS to the source
files and groups of a tuned target, and the groups that suggests (profile.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES

from compileiq_build.build.codeinfo import code_features, hot_features, object_files
from compileiq_build.project.manifest import load_manifest
from compileiq_build.results.report import report
from compileiq_build.run.profiler import (
    KernelTime,
    ProfileError,
    attribute,
    hot_kernels,
    kernel_sources,
    parse_ncu_csv,
    propose_groups,
    table_lines,
)
from compileiq_build.stages.profiling import profiled_benchmarks
from compileiq_build.stages.tune import select_targets
from compileiq_build.store.database import open_store


def _fixture(tmp_path: Path) -> Path:
    dest = tmp_path / "cuda_groups_project"
    shutil.copytree(FIXTURES / "cuda_groups_project", dest)
    return dest


# tests/data/ncu_gpu_time.csv is in the layout `ncu --csv --print-units base` writes (one row per
# kernel launch and metric, its log lines around it, thousands separators in values), for the
# kernels of the fixture; ncu_ggml_softmax.csv is ncu's own output, captured on an H200 (ggml's
# test-backend-ops perf -o SOFT_MAX, one case; docs/real-projects.md).
DATA = Path(__file__).resolve().parent / "data"
NCU_CSV = (DATA / "ncu_gpu_time.csv").read_text()


def test_ncu_csv_captured_on_a_gpu():
    ((kernel, (seconds, launches)),) = parse_ncu_csv((DATA / "ncu_ggml_softmax.csv").read_text()).items()
    assert kernel == "_Z12soft_max_f32ILb1ELi4096ELi1024EfEvPKfPKT2_S1_Pf15soft_max_params"
    assert launches == 157
    assert seconds / launches == pytest.approx(284e-6, rel=0.01)  # "283,904" ns and the like


def test_ncu_csv_sums_each_kernels_launches():
    times = parse_ncu_csv(NCU_CSV)
    assert times.keys() == {"_Z12scale_kernelPfPKfi", "_Z13reduce_kernelPfPKfi"}
    assert times["_Z12scale_kernelPfPKfi"] == (pytest.approx(24_800e-9), 2)
    assert times["_Z13reduce_kernelPfPKfi"] == (pytest.approx(9.6e-6), 1)
    with pytest.raises(ProfileError, match=r"ncu reported no kernel: .*==ERROR== LibraryNotLoaded"):
        parse_ncu_csv("==PROF== Connected to process 1\n==ERROR== LibraryNotLoaded\n")


def test_each_kernel_is_found_in_the_object_of_its_source_and_group(tmp_path, configure, nvcc):
    """Real nvcc builds (no GPU needed): the SASS of each object names its kernels, and a
    group's features are those of its hot kernels."""
    project = _fixture(tmp_path)
    build = project / "build"
    configure(project, build, f"-DCMAKE_CUDA_COMPILER={nvcc}", "-DCMAKE_CUDA_ARCHITECTURES=90",
              "-DCOMPILEIQ_CANDIDATE_FLAGS=ON", "-DCOMPILEIQ_TUNING_ARCH=90")
    configure.build(build, "ops")
    units = list(load_manifest(build / "compileiq" / "manifest.json").targets)
    sources = kernel_sources(build, units)
    assert sources == {"_Z12scale_kernelPfPKfi": ("scale.cu", "ops:scale"),
                       "_Z13reduce_kernelPfPKfi": ("reduce.cu", "ops:rest"),
                       "_Z11copy_kernelPfPKfi": ("copy.cu", "ops:rest")}
    rows = attribute("ops", parse_ncu_csv(NCU_CSV), sources)
    assert [(r.kernel, r.launches, r.source, r.unit) for r in rows] == [
        ("_Z12scale_kernelPfPKfi", 2, "scale.cu", "ops:scale"),
        ("_Z13reduce_kernelPfPKfi", 1, "reduce.cu", "ops:rest")]
    # A profile stored before any search (`profile`) is in the report.
    store = open_store(build)
    store.add_kernel_times(store.start_session("profile", {}), "ops", {"CUDA": "sm_90"}, rows)
    store.close()
    assert re.search(r"^where the baseline's GPU time goes in ops \(sm_90, ncu; not searched yet\):\n"
                     r"  ops: 0\.034 ms of GPU time in 2 kernels\n\s+72\.1%\s+2x\s+_Z12scale_kernelPfPKfi\s+"
                     r"scale\.cu \(ops:scale\)$", report(build), re.M), report(build)

    # The model of a group sees the kernels that take the time: the SASS features of the
    # others, and their share of the totals, are left out.
    rest = next(u for u in units if u.name == "ops:rest")
    features = code_features(object_files(build, "ops", rest.sources), "")
    rows = [KernelTime("ops", "_Z13reduce_kernelPfPKfi", 0.20, 8, "reduce.cu", "ops:rest"),
            KernelTime("ops", "_Z11copy_kernelPfPKfi", 0.001, 4, "copy.cu", "ops:rest"),
            KernelTime("ops", "_Z12scale_kernelPfPKfi", 0.80, 80, "scale.cu", "ops:scale")]
    hot = hot_kernels(rows, "ops:rest")
    assert hot == {"_Z13reduce_kernelPfPKfi"}  # copy takes 0.1%, scale is another group's
    kept = hot_features(features, hot)
    assert {k.split(":")[0] for k in kept} == {"_Z13reduce_kernelPfPKfi", "all"}
    assert kept["all:instructions"] == features["_Z13reduce_kernelPfPKfi:instructions"]
    assert features["all:instructions"] > kept["all:instructions"]
    assert kept["all:lds"] > 0  # the reduction's shared-memory loads


def test_proposed_groups_hold_90_percent_of_each_benchmarks_time():
    rows = [KernelTime("ops", "ka", 0.80, 40, "scale.cu", "ops:scale"),
            KernelTime("ops", "kb", 0.15, 4, "reduce.cu", "ops:rest"),
            KernelTime("ops", "kc", 0.05, 2, "copy.cu", "ops:rest"),
            KernelTime("other", "kb", 1.0, 9, "reduce.cu", "ops:rest")]
    # ops needs scale.cu and reduce.cu for 90%, other reduce.cu alone: one group, as a source
    # takes one group's flags.
    assert propose_groups(rows, "ops") == [
        "compileiq_tune(ops SOURCES reduce.cu scale.cu GROUP reduce)",
        "#   measured by ops, other: add TARGETS ops:reduce to their registrations"]
    assert propose_groups(rows[:3], "ops") == [
        "compileiq_tune(ops SOURCES reduce.cu scale.cu GROUP scale)",
        "#   measured by ops: add TARGETS ops:scale to its registration"]
    lines = table_lines(rows, shown=2)
    assert lines[0] == "  ops: 1000.000 ms of GPU time in 3 kernels"
    assert re.match(r"^\s+80\.0%\s+40x\s+ka\s+scale\.cu \(ops:scale\)$", lines[1])
    assert re.match(r"^\s+5\.0%  in 1 other kernels$", lines[3])


@pytest.mark.gpu
def test_profile_maps_each_kernel_to_its_file_and_group(tmp_path, configure):
    project = _fixture(tmp_path)
    build = project / "build"
    configure(project, build, "-DCMAKE_CUDA_ARCHITECTURES=90")
    proc = subprocess.run([sys.executable, "-m", "compileiq_build", "profile", str(build)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = proc.stderr
    scale = re.search(r"^\s+(\d+\.\d)%\s+80x\s+scale_kernel\(.*\)\s+scale\.cu \(ops:scale\)$", table, re.M)
    assert scale and float(scale[1]) > 50, table
    assert re.search(r"\s+8x\s+reduce_kernel.*reduce\.cu \(ops:rest\)$", table, re.M), table
    assert re.search(r"\s+4x\s+copy_kernel.*copy\.cu \(ops:rest\)$", table, re.M), table
    # Launches: each op runs twice (a warm-up, then timed), 40, 4 and 2 launches a pass.
    assert "compileiq_tune(ops SOURCES " in proc.stdout and "GROUP " in proc.stdout
    report = subprocess.run([sys.executable, "-m", "compileiq_build", "report", str(build)],
                            capture_output=True, text=True)
    assert re.search(r"^where the baseline's GPU time goes in ops \(sm_90, ncu; not searched yet\):$",
                     report.stdout, re.M), report.stdout


def test_profile_runs_the_benchmarks_of_the_groups_named(tmp_path, configure, nvcc):
    """`profile --targets ops:scale` runs the benchmarks of that group, not every benchmark of
    its CMake target (live on ggml, naming one group profiled four workloads under ncu and ran
    out of time); without --targets, or naming the CMake target, every group's."""
    project = _fixture(tmp_path)
    build = project / "build"
    configure(project, build, f"-DCMAKE_CUDA_COMPILER={nvcc}", "-DCMAKE_CUDA_ARCHITECTURES=90",
              "-DFIXTURE_SCALE_BENCHMARK=ON")
    tree = load_manifest(build / "compileiq" / "manifest.json")

    def profiled(*names: str) -> list[str]:
        return [b.name for b in profiled_benchmarks(select_targets(tree, names, True), tree, "ops")]

    assert profiled("ops:scale") == ["scale_only"]
    assert profiled("ops:rest") == ["ops"]
    assert profiled() == profiled("ops") == ["ops", "scale_only"]
