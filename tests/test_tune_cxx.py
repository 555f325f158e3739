"""End to end on a real C++ project: tune, write the toolchain file, build with it."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys

from conftest import compile_commands

from compileiq_build.project import load_manifest


def _tune(build, *args):
    return subprocess.run([sys.executable, "-m", "compileiq_build", "tune", str(build),
                           "--strategy", "staged", *args],
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


def test_model_guided_search_end_to_end(cxx_project, configure):
    build = cxx_project / "build"
    configure(cxx_project, build)
    proc = subprocess.run([sys.executable, "-m", "compileiq_build", "tune", str(build), "--budget", "10",
                           "--repeats", "3", "--max-repeats", "4"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    db = sqlite3.connect(build / "compileiq" / "results.sqlite")
    rows = db.execute("SELECT strategy, config_key FROM evaluations WHERE phase='search'").fetchall()
    assert len(rows) == 10 and {s for s, _ in rows} == {"model"}
    assert len({k for _, k in rows}) == 10  # never the same configuration twice
    assert "saxpy: " in proc.stdout and "x with -O" in proc.stdout  # a -O level beats the project's -O0


def test_identical_code_is_measured_once_and_tables_export(cxx_project, configure, tmp_path):
    build = cxx_project / "build"
    configure(cxx_project, build)
    proc = subprocess.run([sys.executable, "-m", "compileiq_build", "tune", str(build),
                           "--strategy", "exhaustive", "--dimensions", "O", "unroll-loops",
                           "--repeats", "2", "--max-repeats", "2"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    db = sqlite3.connect(build / "compileiq" / "results.sqlite")
    rows = db.execute("SELECT config_key, same_as, digest FROM evaluations WHERE phase='search'").fetchall()
    assert len(rows) == 5  # 3 x 2 configurations but the baseline
    # At the project's -O0, -funroll-loops alone changes no machine code: no benchmark run for it.
    (same,) = [r for r in rows if r[0] == "CXX:unroll-loops=on"]
    assert same[1] == 0 and same[2]
    sampled = {e for (e,) in db.execute("SELECT DISTINCT evaluation_id FROM samples")}
    ids = dict(db.execute("SELECT config_key, id FROM evaluations WHERE phase='search'").fetchall())
    assert ids["CXX:unroll-loops=on"] not in sampled
    assert "candidates had the machine code of one measured before" in proc.stderr

    out = tmp_path / "table.csv"
    report = subprocess.run([sys.executable, "-m", "compileiq_build", "report", str(build),
                             "--table", str(out)], capture_output=True, text=True)
    assert report.returncode == 0, report.stderr
    lines = out.read_text().splitlines()
    assert lines[0] == "O,unroll-loops,time" and len(lines) == 1 + 6
    table = {tuple(line.split(",")[:2]): float(line.split(",")[2]) for line in lines[1:]}
    assert table[("default", "on")] == table[("default", "default")]  # same code, same time
    assert table[("3", "default")] < table[("default", "default")]


def test_candidates_compile_in_parallel_trees(cxx_project, configure):
    build = cxx_project / "build"
    configure(cxx_project, build)
    proc = subprocess.run([sys.executable, "-m", "compileiq_build", "tune", str(build),
                           "--strategy", "exhaustive", "--dimensions", "O", "march",
                           "--jobs", "3", "--repeats", "2", "--max-repeats", "2"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "compiling 3 candidates at once" in proc.stderr
    work = build / "compileiq" / "work"
    assert sorted(p.name for p in work.iterdir() if p.is_dir()) == [
        "baseline", "candidate-0", "candidate-1", "candidate-2"]
    db = sqlite3.connect(build / "compileiq" / "results.sqlite")
    rows = db.execute("SELECT config_key, status, flags FROM evaluations WHERE phase='search'").fetchall()
    assert len(rows) == 5 and {s for _, s, _ in rows} == {"measured"}
    # Each evaluation measured the code of its own flags: -O3 beats -O2 by far at this size.
    ratio = dict(db.execute(
        "SELECT e.config_key, AVG(s.cost) FROM samples s JOIN evaluations e ON e.id = s.evaluation_id "
        "WHERE s.role = 'candidate' AND e.phase = 'search' GROUP BY e.config_key").fetchall())
    assert ratio["CXX:O=3"] < ratio["CXX:O=2"]
