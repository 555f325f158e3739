"""End to end on a real C++ project: tune, write the toolchain file, build with it."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys

from conftest import compile_commands

from compileiq_build.project import load_manifest


def _tune(build, *args):
    return subprocess.run([sys.executable, "-m", "compileiq_build", "tune", str(build), *args],
                          capture_output=True, text=True)


def test_tune_finds_a_faster_level_and_the_toolchain_reaches_only_that_target(cxx_project, configure):
    build = cxx_project / "build"
    configure(cxx_project, build)
    proc = _tune(build, "--budget", "3", "--repeats", "3")
    assert proc.returncode == 0, proc.stderr
    toolchain = cxx_project / "compileiq-toolchain.cmake"
    assert f"toolchain file: {toolchain}" in proc.stdout
    # Not a terminal: one plain line per evaluation.
    assert len(re.findall(r"^\[saxpy [123]/3, best \S+x, \d failed, ETA \S+\] CXX:", proc.stderr, re.M)) == 3

    # The library is built at -O0 by the project, so the first candidates (-O2, -O3) win big.
    text = toolchain.read_text()
    assert "set(COMPILEIQ_FLAGS_saxpy_CXX_" in text
    assert "[=[-O2]=]" in text or "[=[-O3]=]" in text
    assert str(build) not in text  # no absolute paths of the tuning machine

    # Every measurement is in the store, the user's build folder is untouched.
    db = sqlite3.connect(build / "compileiq" / "results.sqlite")
    statuses = [r[0] for r in db.execute("SELECT status FROM evaluations WHERE phase='search'")]
    assert statuses == ["measured"] * 3
    assert db.execute("SELECT COUNT(*) FROM samples").fetchone()[0] >= 3 * 2
    assert not load_manifest(build / "compileiq" / "manifest.json").candidate_flags

    # The loop closes: a fresh build folder configured with the file compiles the tuned
    # target with the winning flags and every other target exactly as before.
    release = cxx_project / "release"
    configure(cxx_project, release, f"-DCMAKE_TOOLCHAIN_FILE={toolchain}")
    plain = cxx_project / "plain"
    configure(cxx_project, plain)
    tuned, before = compile_commands(release), compile_commands(plain)
    winner_flags = load_manifest(release / "compileiq" / "manifest.json").targets[0].applied_flags["CXX"]
    assert winner_flags and winner_flags[0] in ("-O2", "-O3")
    assert tuned["saxpy.cpp"].replace(str(release), "") == before["saxpy.cpp"].replace(
        str(plain), "").replace("-O0", "-O0 " + " ".join(winner_flags))
    for other in ("untouched.cpp", "bench_saxpy.cpp"):
        assert tuned[other].replace(str(release), "") == before[other].replace(str(plain), "")
    configure.build(release)

    # Resume: the budget is spent, so a second run measures nothing new and re-emits the file.
    again = _tune(build, "--budget", "3", "--repeats", "3")
    assert again.returncode == 0, again.stderr
    assert db.execute("SELECT COUNT(*) FROM evaluations WHERE phase='search'").fetchone()[0] == 3

    report = subprocess.run([sys.executable, "-m", "compileiq_build", "report", str(build)],
                            capture_output=True, text=True)
    assert report.returncode == 0
    assert re.search(r"^saxpy \(\w+\): 3 candidates measured", report.stdout, re.M), report.stdout
    assert "winner:" in report.stdout
