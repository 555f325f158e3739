"""The driver's build trees with a compiler launcher (ccache) and seeded from the baseline's
outputs: real cmake, ninja, ccache, g++ and nvcc on the fixture projects."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
from conftest import FIXTURES

from compileiq_build.build.trees import BuildTree
from compileiq_build.machine import process
from compileiq_build.project.manifest import load_project
from compileiq_build.run.worker import BASELINE_SLOT, SCOUT_SLOT, local_workers

TUNING = ("-DCOMPILEIQ_CANDIDATE_FLAGS=ON", "-DCOMPILEIQ_TUNING_ARCH=90")


@pytest.fixture
def ccache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """ccache with a cache of this test's own (its environment reaches the compiles)."""
    path = shutil.which("ccache")
    if not path:
        pytest.skip("ccache is not installed")
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "ccache"))
    monkeypatch.delenv("CCACHE_DISABLE", raising=False)
    return path


def _hits(ccache: str) -> int:
    stats = subprocess.run([ccache, "--print-stats"], capture_output=True, text=True, check=True).stdout
    counts = dict(line.split("\t") for line in stats.splitlines() if "\t" in line)
    return int(counts.get("direct_cache_hit", 0)) + int(counts.get("preprocessed_cache_hit", 0))


@pytest.mark.parametrize("lang", ["CXX", "CUDA"])
def test_a_candidate_compiled_through_ccache_gets_its_own_object(lang, tmp_path, configure, ccache, request):
    """ccache hashes the candidate flags file's content: new flags compile anew, and the
    project's flags again come from the cache."""
    if lang == "CUDA":
        nvcc = request.getfixturevalue("nvcc")
        src, unit, flags, obj = "cuda_groups_project", "ops_scale", "-G\n", "CMakeFiles/ops.dir/scale.cu.o"
        defines = [f"-DCMAKE_CUDA_COMPILER={nvcc}", "-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"]
    else:
        src, unit, flags, obj = "cxx_project", "saxpy", "-O2\n", "CMakeFiles/saxpy.dir/saxpy.cpp.o"
        defines = ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
    shutil.copytree(FIXTURES / src, tmp_path / "src")
    build = tmp_path / "build"
    configure(tmp_path / "src", build, *TUNING, *defines)
    opts = build / "compileiq" / "candidate" / f"{unit}.{lang}.opts"
    assert opts.is_file()
    configure.build(build, obj)
    baseline = (build / obj).read_bytes()
    opts.write_text(flags)
    configure.build(build, obj)
    same = (build / obj).read_bytes() == baseline
    assert not same, f"{flags.strip()} gave the baseline's object back"
    assert _hits(ccache) == 0
    opts.write_text("")
    configure.build(build, obj)
    assert (build / obj).read_bytes() == baseline
    assert _hits(ccache) == 1  # the compiles did go through ccache


def _compiled(log: str) -> list[str]:
    """The objects a Ninja run compiled, from its progress lines."""
    return sorted(line.rsplit(" ", 1)[-1] for line in log.splitlines() if " object " in line)


@pytest.mark.parametrize("lang", ["CXX", "CUDA"])
def test_a_candidate_trees_first_build_compiles_only_the_tuned_units_objects(lang, tmp_path, configure,
                                                                             request):
    """Seeded from the baseline tree's outputs, a candidate tree (and the scout tree) compiles
    the tuned unit's objects alone, not the untuned library or the benchmark's."""
    if lang == "CUDA":
        nvcc = request.getfixturevalue("nvcc")
        # ops:rest, a group of the same target, is tuned too, but not in this search.
        src, unit, flags = "cuda_groups_project", "ops:scale", ["-G"]
        defines = [f"-DCMAKE_CUDA_COMPILER={nvcc}"]
        tuned, untuned = ["CMakeFiles/ops.dir/scale.cu.o"], ["copy.cu.o", "reduce.cu.o", "bench_ops.cu.o"]
    else:
        src, unit, flags, defines = "cxx_project", "saxpy", ["-O2"], []
        tuned, untuned = ["CMakeFiles/saxpy.dir/saxpy.cpp.o"], ["untouched.cpp.o", "bench_saxpy.cpp.o"]
    shutil.copytree(FIXTURES / src, tmp_path / "src")
    build = tmp_path / "build"
    configure(tmp_path / "src", build, *defines)
    work = build / "compileiq" / "work"
    [worker] = local_workers(load_project(build), work, [], 1)
    worker.scouts = [BuildTree(worker.baseline.user, work / "scout")]
    worker.configure("90")
    exe = worker.baseline.project.benchmarks[0].executable_target
    steps: list[tuple[int, int]] = []
    baseline = worker.build(BASELINE_SLOT, unit, None, [exe], 600, None, progress=lambda *s: steps.append(s))
    assert baseline.result.ok
    # Ninja's steps came as it took them (tune logs them on a long build), up to the last.
    assert len(steps) >= 3 and steps == sorted(steps) and steps[-1][0] == steps[-1][1]
    assert all(any(o.endswith(u) for o in _compiled(baseline.result.log)) for u in untuned)
    for slot in (0, SCOUT_SLOT):
        first = worker.build(slot, unit, {lang: flags}, [exe], 600, None)
        assert first.result.ok, first.result.log
        assert _compiled(first.result.log) == tuned
        assert first.digest != baseline.digest  # the candidate's own code
    again = worker.build(0, unit, {lang: []}, [exe], 600, None)
    assert _compiled(again.result.log) == tuned and again.digest == baseline.digest
    run = worker.run(0, worker.baseline.project.benchmarks[0], 600)
    assert run.ok or lang == "CUDA", run.error  # the seeded tree's executable works (no GPU here)


def test_a_streamed_run_gives_each_line_as_it_comes_and_is_killed_at_its_timeout():
    lines: list[str] = []
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        process.run(["sh", "-c", "echo one; echo two >&2; echo three; sleep 30"], 1.0, on_line=lines.append)
    assert time.monotonic() - started < 10  # the group was killed, not waited for
    assert lines == ["one\n", "three\n"]  # the error stream is not the output's
    done = process.run(["sh", "-c", "echo out; echo err >&2; exit 3"], 10.0, on_line=lines.append)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
    # Merged (a sitting's log): both streams, in the order written.
    merged: list[str] = []
    done = process.run(["sh", "-c", "echo out; echo err >&2; echo end"], 10.0, on_line=merged.append,
                       merge_stderr=True)
    assert merged == ["out\n", "err\n", "end\n"] and done.stdout == "out\nerr\nend\n" and done.stderr == ""
