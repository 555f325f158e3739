"""`check` (issue 41 item 2): do the committed flags still win, has the tuned code changed since?
Real cmake, ninja, g++ and benchmark runs on the C++ fixture; the CUDA case where a GPU is."""

from __future__ import annotations

import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

from compileiq_build.decide.selection import NoWinner, Winner, WorkloadGain
from compileiq_build.decide.stats import RatioEstimate
from compileiq_build.results.toolchain import Provenance, render

HOST = re.sub(r"[^a-z0-9_]", "_", platform.machine().lower())


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "compileiq_build", *args], capture_output=True, text=True)


def _file(path: Path, flags: tuple[str, ...], losers: tuple[str, ...] = ()) -> Path:
    gain = (WorkloadGain("saxpy[200000 30]", RatioEstimate(0.5, 0.4, 0.6, 5)),)
    path.write_text(render([Winner("saxpy", {"CXX": HOST}, "k", {"CXX": flags}, gain, 3)],
                           [NoWinner(n, {"CXX": HOST}, "none faster") for n in losers],
                           Provenance("2026-12-05", "CPU", "none", (), "staged")))
    return path


def test_a_tuned_file_still_wins_until_its_targets_code_changes(cxx_project, configure):
    build = cxx_project / "build"
    configure(cxx_project, build)
    tuned = _cli("tune", str(build), "--budget", "2", "--repeats", "3", "--strategy", "staged")
    assert tuned.returncode == 0, tuned.stderr
    toolchain = cxx_project / "compileiq-toolchain.cmake"
    assert re.search(r"^set\(COMPILEIQ_CODE_saxpy_\w+ \[=\[[0-9a-f]{64}\]=\]\)$", toolchain.read_text(), re.M)

    ok = _cli("check", str(build), "--repeats", "3")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert re.search(r"^saxpy: still faster with -O\d: saxpy\[200000 30\] \d+\.\d+x \[", ok.stdout, re.M)
    assert "changed" not in ok.stdout + ok.stderr  # the code the file records is the code built now
    assert "== saxpy: measuring the shipped flags" in ok.stderr  # progress, on stderr
    assert f"check of {toolchain}: exit code 0" in ok.stdout

    # New code in the tuned target: named before measuring, and the job fails (3: still faster).
    source = cxx_project / "saxpy.cpp"
    source.write_text(source.read_text().replace("y[i] = a * x[i] + y[i];",
                                                 "y[i] = a * x[i] + y[i] > 1e30f ? 0.0f : a * x[i] + y[i];"))
    changed = _cli("check", str(build), "--repeats", "3")
    assert changed.returncode == 3, changed.stdout + changed.stderr
    said = changed.stderr.index("the code of saxpy changed since it was tuned")
    assert said < changed.stderr.index("== saxpy: measuring the shipped flags")
    assert "the code of saxpy changed since it was tuned: tune again to re-base the file" in changed.stdout

    # The target renamed: emit no longer writes the old name, and says why.
    cml = cxx_project / "CMakeLists.txt"
    cml.write_text(cml.read_text().replace("saxpy STATIC", "saxpy2 STATIC").replace(
        "PRIVATE saxpy untouched", "PRIVATE saxpy2 untouched").replace("(saxpy PRIVATE", "(saxpy2 PRIVATE")
        .replace("compileiq_tune(saxpy ", "compileiq_tune(saxpy2 "))
    configure(cxx_project, build)
    emitted = _cli("emit", str(build))
    assert emitted.returncode == 0, emitted.stderr
    assert ("the stores hold results for saxpy, which the project no longer tunes (renamed or removed?); "
            "they are left out of the toolchain file. Tuned now: saxpy2.") in " ".join(emitted.stderr.split())
    assert "COMPILEIQ_FLAGS_saxpy_" not in toolchain.read_text()


def test_flags_that_lose_or_do_nothing_fail_naming_the_target(cxx_project, configure, tmp_path):
    build = cxx_project / "build"
    configure(cxx_project, build)
    # Trapping UB checks on every access: slower than the project's -O0.
    ub = ("-fsanitize=undefined", "-fsanitize-undefined-trap-on-error")
    slow = _cli("check", str(build), "--repeats", "3", "--toolchain", str(_file(tmp_path / "slow.cmake", ub)))
    assert slow.returncode == 1, slow.stdout + slow.stderr
    assert re.search(r"^saxpy: LOSES with -fsanitize=undefined -fsanitize-undefined-trap-on-error: slower "
                     r"than the project's own flags on saxpy\[200000 30\]: saxpy\[200000 30\] 0\.\d+x",
                     slow.stdout, re.M)
    assert "records no machine code for it" in slow.stderr  # a file without COMPILEIQ_CODE_*
    # The project's own -O0 again: the same code as the baseline, so the flags do nothing.
    same = _cli("check", str(build), "--toolchain", str(_file(tmp_path / "same.cmake", ("-O0",), ("gone",))))
    assert same.returncode == 1, same.stdout + same.stderr
    assert ("saxpy: LOSES: the shipped flags -O0 leave its machine code as the project's own flags make "
            "it; they do nothing") in same.stdout
    assert "gone: in the toolchain file, but the project no longer tunes it (renamed or removed?)" in (
        same.stdout)


def test_check_mistakes_are_one_line_with_exit_code_2(cxx_project, configure, tmp_path):
    build = cxx_project / "build"
    configure(cxx_project, build)
    missing = _cli("check", str(build))
    assert missing.returncode == 2
    assert (f"compileiq_build: error: no toolchain file at {cxx_project / 'compileiq-toolchain.cmake'}. "
            "Name the committed one with --toolchain FILE.") in missing.stderr
    broken = tmp_path / "broken.cmake"
    broken.write_text("set(COMPILEIQ_FLAGS_saxpy_CXX_x86_64 [=[-O2]=]\n")  # no closing parenthesis
    proc = _cli("check", str(build), "--toolchain", str(broken))
    assert proc.returncode == 2 and "CMake cannot read the toolchain file" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.gpu
def test_check_on_the_gpu_finds_the_code_it_tuned(configure, nvcc, tmp_path):
    """CUDA: the recorded digest (of the profiled hot kernels' SASS) is what check builds again."""
    import shutil

    from conftest import FIXTURES

    project = tmp_path / "ops"
    shutil.copytree(FIXTURES / "cuda_groups_project", project)
    build = project / "build"
    configure(project, build, f"-DCMAKE_CUDA_COMPILER={nvcc}", "-DCMAKE_CUDA_ARCHITECTURES=native")
    tuned = _cli("tune", str(build), "--budget", "3", "--repeats", "3", "--strategy", "staged")
    assert tuned.returncode == 0, tuned.stderr
    proc = _cli("check", str(build), "--repeats", "3")
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert "changed since it was tuned" not in proc.stdout + proc.stderr
    text = (project / "compileiq-toolchain.cmake").read_text()
    for unit in ("ops:scale", "ops:rest"):
        if f"# {unit}: CUDA" in text:  # a winner: checked, and named
            assert re.search(rf"^{re.escape(unit)}: (still faster|LOSES)", proc.stdout, re.M), proc.stdout
