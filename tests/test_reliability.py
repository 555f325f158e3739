"""Reliability with real processes: kills, Ctrl-C, broken candidates, locks, damaged stores."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import FIXTURES

from compileiq_build.decide.selection import decisions
from compileiq_build.project.workspace import Workspace
from compileiq_build.store.database import Store, read_store
from compileiq_build.store.records import Sample

TUNE = [sys.executable, "-m", "compileiq_build", "tune", "--strategy", "staged"]


def _rows(build: Path, query: str) -> list[tuple]:
    db = sqlite3.connect(f"file:{Workspace(build).store}?mode=ro", uri=True)
    try:
        return db.execute(query).fetchall()
    finally:
        db.close()


def _wait_for(build: Path, query: str, at_least: int, proc: subprocess.Popen, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if Workspace(build).store.exists():
            try:
                if _rows(build, query)[0][0] >= at_least:
                    return
            except sqlite3.OperationalError:
                pass  # tables not created yet
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {query}")


def test_sigkill_mid_run_then_resume(cxx_project, configure):
    build = cxx_project / "build"
    configure(cxx_project, build)
    # One candidate tree, and benchmark runs of at least 0.5 s: when the kill lands, the evaluation
    # seen measuring has at least 5 more runs to go, so it is the one left in flight.
    args = [*TUNE, str(build), "--budget", "5", "--repeats", "3", "--jobs", "1"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "BENCH_SLEEP_MS": "500"})
    _wait_for(build, "SELECT COUNT(*) FROM evaluations WHERE status='measured'", 2, proc)
    _wait_for(build, "SELECT COUNT(*) FROM evaluations e WHERE status='running' AND EXISTS "
              "(SELECT 1 FROM samples s WHERE s.evaluation_id = e.id)", 1, proc)
    proc.kill()
    proc.wait()
    before = _rows(build, "SELECT * FROM samples ORDER BY id")
    done = _rows(build, "SELECT config_key FROM evaluations WHERE status='measured'")
    ((in_flight,),) = _rows(build, "SELECT id FROM evaluations WHERE status='running'")
    assert len(done) >= 2 and before

    again = subprocess.run(args, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    after = _rows(build, "SELECT * FROM samples ORDER BY id")
    assert after[:len(before)] == before  # every sample taken before the kill is kept as it was
    statuses = _rows(build, "SELECT id, config_key, status, same_as FROM evaluations WHERE phase='search'")
    measured = [k for _, k, s, _ in statuses if s == "measured"]
    assert len(measured) == len(set(measured))  # nothing measured twice
    # The budget counts distinct machine codes: candidates of a measured code ran nothing.
    assert len([k for _, k, s, twin in statuses if s == "measured" and twin is None]) == 5
    assert {k for (k,) in done} <= set(measured)
    # The evaluation the kill cut short is marked so, and is the only one that is not measured.
    assert [(i, s) for i, _, s, _ in statuses if s != "measured"] == [(in_flight, "interrupted")]
    assert (cxx_project / "compileiq-toolchain.cmake").is_file()


def test_ctrl_c_stops_after_the_evaluation_in_flight(cxx_project, configure):
    build = cxx_project / "build"
    configure(cxx_project, build)
    args = [*TUNE, str(build), "--budget", "4", "--repeats", "3"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(build, "SELECT COUNT(*) FROM evaluations WHERE status='running'", 1, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "stopping after the evaluation in flight" in err
    assert "Run the same command again to resume" in err and "Traceback" not in err
    statuses = [s for (s,) in _rows(build, "SELECT status FROM evaluations")]
    assert statuses and set(statuses) == {"measured"}  # the evaluation in flight finished
    again = subprocess.run(args, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    # Four evaluations: distinct machine codes measured (candidates of a measured code run nothing).
    assert len(_rows(build, "SELECT id FROM evaluations WHERE phase='search' AND same_as IS NULL")) == 4


@pytest.mark.parametrize("fault,status,reason", [
    ("compile", "build_failed", "this candidate does not compile"),
    ("crash", "invalid", "killed by SIGABRT (signal 6)"),
    ("hang", "invalid", "timed out after 3 s"),
    ("garbage", "invalid", "matched nothing in the output; output ends: time_ms: banana"),
    ("wrong", "invalid", "check: FAILED result 41, expected 42"),
    ("checksum", "invalid", "checksum differs from the baseline's (exact match required)"),
])
def test_broken_candidates_are_recorded_and_never_win(fault, status, reason, tmp_path, configure):
    src = tmp_path / "faulty"
    shutil.copytree(FIXTURES / "faulty_project", src)
    build = tmp_path / "build"
    configure(src, build, f"-DFAULT={fault}")
    proc = subprocess.run([*TUNE, str(build), "--budget", "1", "--repeats", "2"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    ((got_status, got_reason),) = _rows(build, "SELECT status, reason FROM evaluations")
    assert got_status == status
    assert reason in got_reason
    assert "faulty: unchanged" in proc.stdout
    assert "COMPILEIQ_FLAGS_faulty" not in (src / "compileiq-toolchain.cmake").read_text()


def test_a_second_tune_on_the_same_folder_is_refused(cxx_project, configure):
    build = cxx_project / "build"
    configure(cxx_project, build)
    first = subprocess.Popen([*TUNE, str(build), "--budget", "3", "--repeats", "3"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(build, "SELECT COUNT(*) FROM sessions", 1, first)
        second = subprocess.run([*TUNE, str(build)], capture_output=True, text=True)
        assert second.returncode == 2
        assert "another `tune` is running on" in second.stderr
    finally:
        first.kill()
        first.wait()


def test_a_damaged_store_is_refused_and_left_untouched(cxx_project, configure):
    build = cxx_project / "build"
    configure(cxx_project, build)
    store = Workspace(build).store
    store.write_bytes(b"this is not a database" * 100)
    digest = hashlib.sha256(store.read_bytes()).hexdigest()
    proc = subprocess.run([*TUNE, str(build), "--budget", "1"], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "is damaged" in proc.stderr and "move it away" in proc.stderr
    assert hashlib.sha256(store.read_bytes()).hexdigest() == digest


def test_other_generators_are_refused(cxx_project, cmake):
    from compileiq_build import cmake_dir

    if not shutil.which("make"):
        pytest.skip("make is not installed")
    subprocess.run([cmake, "-S", str(cxx_project), "-B", str(cxx_project / "mk"), "-G", "Unix Makefiles",
                    f"-DCompileIQ_ROOT={cmake_dir()}"], check=True, capture_output=True)
    proc = subprocess.run([*TUNE, str(cxx_project / "mk")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "uses the 'Unix Makefiles' generator" in proc.stderr and "-G Ninja" in proc.stderr


def test_multi_config_ninja_is_refused_with_what_to_do(cxx_project, cmake, ninja):
    from compileiq_build import cmake_dir

    build = cxx_project / "multi"
    subprocess.run([cmake, "-S", str(cxx_project), "-B", str(build), "-G", "Ninja Multi-Config",
                    f"-DCMAKE_MAKE_PROGRAM={ninja}", f"-DCompileIQ_ROOT={cmake_dir()}"],
                   check=True, capture_output=True)
    proc = subprocess.run([*TUNE, str(build)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "uses a multi-config generator" in proc.stderr and "-G Ninja" in proc.stderr


def test_no_tuned_targets(tmp_path, configure):
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.24)\nproject(p NONE)\n"
                                        "find_package(CompileIQ CONFIG REQUIRED)\n")
    proc = configure(src, tmp_path / "b")
    assert "no target is marked with compileiq_tune()" in " ".join(proc.stderr.split())
    tune = subprocess.run([*TUNE, str(tmp_path / "b")], capture_output=True, text=True)
    assert tune.returncode == 2 and "no target is marked for tuning" in tune.stderr


def test_missing_benchmark_program(cxx_project, configure):
    cml = cxx_project / "CMakeLists.txt"
    cml.write_text(cml.read_text() + "compileiq_add_benchmark(external COMMAND ./not-built-here "
                   "TARGETS saxpy FORMAT time)\n")
    configure(cxx_project, cxx_project / "build")
    proc = subprocess.run([*TUNE, str(cxx_project / "build"), "--budget", "1"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "benchmark 'external': the program" in proc.stderr and "does not exist" in proc.stderr


def test_report_exports_one_row_per_stored_measurement(cxx_project, configure, tmp_path):
    build = cxx_project / "build"
    configure(cxx_project, build)
    subprocess.run([*TUNE, str(build), "--budget", "1", "--repeats", "2"], check=True, capture_output=True)
    csv, parquet = tmp_path / "m.csv", tmp_path / "m.parquet"
    proc = subprocess.run([sys.executable, "-m", "compileiq_build", "report", str(build),
                           "--csv", str(csv), "--parquet", str(parquet)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    first = pd.read_csv(csv)
    assert len(first) == _rows(build, "SELECT COUNT(*) FROM samples")[0][0]
    assert list(first.columns) == ["sample_id", "created", "session_id", "evaluation_id", "target",
                                   "arch_keys", "config_key", "config", "flags", "strategy", "phase",
                                   "worker", "workload", "role", "rep", "value", "cost", "wall_s",
                                   "exit_code", "error", "gpu"]
    # Parquet holds the same rows and values as the CSV, with their types.
    table = pd.read_parquet(parquet)
    assert list(table.columns) == list(first.columns)
    assert table["sample_id"].tolist() == first["sample_id"].tolist()
    assert table["cost"].tolist() == pytest.approx(first["cost"].tolist())
    # More tuning later: the rows already exported stay exactly as they were.
    subprocess.run([*TUNE, str(build), "--budget", "2", "--repeats", "2"], check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "compileiq_build", "report", str(build), "--csv", str(csv)],
                   check=True, capture_output=True)
    second = pd.read_csv(csv)
    assert len(second) > len(first)
    pd.testing.assert_frame_equal(second.iloc[:len(first)].reset_index(drop=True), first)


def _synthetic(path: Path, arch: str, results: dict[str, tuple[float, bool]]) -> None:
    """A store as a machine of architecture `arch` would leave it: per configuration, the
    cost ratio of 10 pairs and whether it was re-measured (validated)."""
    store = Store(path)
    session = store.start_session("test", {"gpus": [], "cpu": f"machine-{arch}",
                                           "compilers": {"CXX": "GNU 12.2.0"}})
    for key, (ratio, validated) in results.items():
        flags = {"CXX": [f"-f{key}"]}
        for phase in ("search", "validate") if validated else ("search",):
            ev = store.begin_evaluation(session, "saxpy", {"CXX": arch}, key, {"CXX:x": key}, flags,
                                        "staged", phase)
            for rep in range(10):
                noise = 1 + 0.001 * (rep % 3)
                store.add_sample(ev, "candidate", rep, Sample("w", ratio * noise, ratio * noise, 0.1, 0, ""))
                store.add_sample(ev, "baseline", rep, Sample("w", 1.0, 1.0, 0.1, 0, ""))
            store.finish_evaluation(ev, "measured")
    store.close()


def test_emit_merges_stores_of_two_architectures_with_a_portable_set(cxx_project, configure, tmp_path):
    build = cxx_project / "build"
    configure(cxx_project, build)
    # Architecture A: 'fast' wins (validated); 'other' is neutral there.
    _synthetic(Workspace(build).store, "arch_a", {"fast": (0.90, True), "other": (1.0, False)})
    # Architecture B: 'other' wins; 'fast' is slower there, so it cannot be portable.
    _synthetic(tmp_path / "b.sqlite", "arch_b", {"other": (0.95, True), "fast": (1.05, False)})
    out = tmp_path / "merged.cmake"
    proc = subprocess.run([sys.executable, "-m", "compileiq_build", "emit", str(build), "--merge",
                           str(tmp_path / "b.sqlite"), "--output", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "set(COMPILEIQ_FLAGS_saxpy_CXX_arch_a\n  [=[-ffast]=]" in text
    assert "set(COMPILEIQ_FLAGS_saxpy_CXX_arch_b\n  [=[-fother]=]" in text
    assert "set(COMPILEIQ_FLAGS_saxpy_CXX_portable\n  [=[-fother]=]" in text
    assert "machine-arch_a" in text and "machine-arch_b" in text
    assert json.dumps(str(tmp_path)) not in text and str(tmp_path) not in text
    # Merging the same stores again gives the same file, byte for byte.
    again = tmp_path / "again.cmake"
    subprocess.run([sys.executable, "-m", "compileiq_build", "emit", str(build), "--merge",
                    str(tmp_path / "b.sqlite"), "--output", str(again)], check=True, capture_output=True)
    assert again.read_text() == text


def test_emit_needs_existing_stores(cxx_project, configure, tmp_path):
    configure(cxx_project, cxx_project / "build")
    proc = subprocess.run([sys.executable, "-m", "compileiq_build", "emit", str(cxx_project / "build")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "no results store at" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_hanging_compile_is_stopped_and_recorded(cxx_project, configure, tmp_path):
    # A compiler launcher (CMake's own hook) that hangs when the candidate's flags are in use.
    launcher = tmp_path / "launcher.sh"
    pidfile = tmp_path / "sleep.pid"
    launcher.write_text('#!/bin/sh\nfor a in "$@"; do case "$a" in @*.opts) grep -q O2 "${a#@}" && '
                        f'{{ sleep 600 & echo $! > {pidfile}; wait; }};; esac; done\nexec "$@"\n')
    launcher.chmod(0o755)
    build = cxx_project / "build"
    configure(cxx_project, build, f"-DCMAKE_CXX_COMPILER_LAUNCHER={launcher}")
    proc = subprocess.run([*TUNE, str(build), "--budget", "1", "--repeats", "2", "--build-timeout", "5"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    ((status, reason),) = _rows(build, "SELECT status, reason FROM evaluations")
    assert status == "build_failed" and "build timed out after 5 s" in reason
    # The whole process group was killed: the hanging compile's own sleep is gone too (or a
    # zombie that nobody has reaped yet).
    status = Path(f"/proc/{int(pidfile.read_text())}/status")
    assert not status.exists() or "\nState:\tZ" in status.read_text()


def test_report_reads_a_store_of_an_older_schema_without_changing_it(tmp_path):
    # The H200 demo's store, committed at schema 1: reading it must not migrate the file.
    store = tmp_path / "results.sqlite"
    shutil.copy(Path(__file__).resolve().parent.parent / "benchmarks/results/h200-demo/results.sqlite", store)
    before = hashlib.sha256(store.read_bytes()).hexdigest()
    snapshot = read_store(store)
    assert {d.target for d in decisions(snapshot)} == {"gemm_kernels", "nbody_kernels", "stencil_kernels"}
    snapshot.close()
    assert hashlib.sha256(store.read_bytes()).hexdigest() == before
    assert [p.name for p in tmp_path.iterdir()] == ["results.sqlite"]  # no -wal, no -shm
    assert not snapshot.path.exists()  # the snapshot is gone with it
