"""What a newcomer tripped on (issue 41, item 4): each with the real CLI on the C++ fixture."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import cxx_evaluator, stored_evaluation
from filelock import FileLock

from compileiq_build.build.space import Dimension, FlagSpace
from compileiq_build.decide.racing import Sampling
from compileiq_build.decide.selection import NoWinner, Winner, decide
from compileiq_build.machine import environment
from compileiq_build.project.manifest import Benchmark
from compileiq_build.project.workspace import Workspace
from compileiq_build.results.progress import Reporter
from compileiq_build.run.measure import run_workload
from compileiq_build.stages.minimize import minimize_winner
from compileiq_build.store.database import Store

CLI = [sys.executable, "-m", "compileiq_build"]
QUICK = ["--strategy", "staged", "--budget", "1", "--repeats", "2", "--max-repeats", "2"]


def _cli(*args: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, **kw)


def _refused(proc: subprocess.CompletedProcess[str], *parts: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    said = " ".join(proc.stderr.split())
    for part in parts:
        assert part in said, said


def test_a_store_damaged_in_its_middle_is_refused_by_tune_and_report(cxx_project, configure):
    build = cxx_project / "build"
    configure(cxx_project, build)
    assert _cli("tune", str(build), *QUICK).returncode == 0
    store = Workspace(build).store
    data = bytearray(store.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 3000] = b"\xab" * 3000  # the header stays intact
    store.write_bytes(bytes(data))
    for verb in (["report", str(build)], ["tune", str(build), *QUICK]):
        _refused(_cli(*verb), f"the results store {store} is damaged", "It was left untouched")
        assert store.read_bytes() == bytes(data)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="runs tune as user nobody, which needs root and setpriv")
def test_a_read_only_build_folder_says_what_works(cxx_project, configure):
    # As root every folder is writable: the project lies in a folder nobody may read but not write.
    place = Path(tempfile.mkdtemp(prefix="compileiq-readonly-"))
    try:
        place.chmod(0o755)
        project = place / "p"
        shutil.copytree(cxx_project, project)
        configure(project, project / "build")
        writable = place / "out"
        writable.mkdir(mode=0o777)
        writable.chmod(0o777)
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        for output in ([], ["--output", str(writable / "t.cmake")]):
            proc = subprocess.run([*nobody, *CLI, "tune", str(project / "build"), *QUICK, *output],
                                  capture_output=True, text=True, timeout=300, cwd=writable)
            _refused(proc, f"cannot write in {project / 'build' / 'compileiq'}: Permission denied",
                     "configure another build folder where you can write", "-DCompileIQ_ROOT=")
            assert "--output" not in proc.stderr  # that alone would not help
    finally:
        shutil.rmtree(place)


def test_list_options_leave_the_build_folder_and_take_commas(cxx_project, configure):
    build = cxx_project / "build"
    configure(cxx_project, build)
    proc = _cli("tune", "--targets", "saxpy", "--dimensions", "O,unroll-loops", str(build), *QUICK)
    assert proc.returncode == 0, proc.stderr
    assert "2 dimensions" in proc.stderr
    # The older spelling, words after the folder, still works.
    proc = _cli("tune", str(build), "--dimensions", "O", "unroll-loops", "--targets", "saxpy", *QUICK)
    assert proc.returncode == 0, proc.stderr
    # A verb whose folder is optional still goes without it.
    assert "BUILD_DIR" not in _cli("doctor").stderr


def test_mistakes_are_caught_before_the_baseline_is_built(cxx_project, configure):
    build = cxx_project / "build"
    configure(cxx_project, build)
    typo = _cli("tune", "--dimensions", "O", "unrol-loops", str(build))
    _refused(typo, "--dimensions names unrol-loops, not in the space of saxpy", "unroll-loops")
    numerics = _cli("tune", str(build), "--dimensions", "ffast-math")
    _refused(numerics, "--dimensions names ffast-math", "--allow-numerics-change")
    _refused(_cli("tune", str(build), "--max-repeats", "2", "--repeats", "5"),
             "--max-repeats 2 is below --repeats 5")
    _refused(_cli("tune", str(build), "--time-limit", "-5m"), "argument --time-limit: '-5m' must be positive")
    for proc in (typo, numerics):
        assert "baseline" not in proc.stderr
    assert not (build / "compileiq" / "work").exists()


@pytest.mark.skipif(bool(environment.detect_gpus()), reason="this machine has a GPU")
def test_gpus_on_a_machine_without_one_is_refused(cxx_project, configure):
    build = cxx_project / "build"
    configure(cxx_project, build)
    _refused(_cli("tune", str(build), "--gpus", "0"), "--gpus 0: nvidia-smi finds no GPU on this machine",
             "leave --gpus out")


def test_a_crash_names_its_signal_and_the_output_tail(tmp_path):
    exe = tmp_path / "bench.sh"
    exe.write_text("#!/bin/sh\necho 'allocating the grid'\nkill -SEGV $$\n")
    exe.chmod(0o755)
    bench = Benchmark(name="b", index=0, executable="", executable_target="", args=(), targets=("t",),
                      format="regex", regex=r"time_ms: ([0-9.]+)", column="", unit="ms",
                      higher_is_better=False, workdir="", timeout=None, labels=())
    (sample,) = run_workload(bench, exe, timeout=30).samples
    assert sample.error == "killed by SIGSEGV (signal 11); output ends: allocating the grid"
    exe.write_text("#!/bin/sh\nkill -SEGV $$\n")
    (sample,) = run_workload(bench, exe, timeout=30).samples
    assert sample.error == "killed by SIGSEGV (signal 11); it printed nothing"


def test_an_unconfigured_folder_hint_names_the_module(tmp_path):
    (tmp_path / "b").mkdir()
    _refused(_cli("tune", str(tmp_path / "b")),
             "no CMakeCache.txt", "-DCompileIQ_ROOT=$(python -m compileiq_build --cmake-dir)")


def test_a_second_tune_says_which_process_holds_the_folder(cxx_project, configure):
    build = cxx_project / "build"
    configure(cxx_project, build)
    # A tune that is running holds the lock and wrote who it is (as exclusive_store does).
    lock = Workspace(build).lock
    with FileLock(str(lock)):
        lock.write_text(f"pid 4242, since {time.strftime('%Y-%m-%d')} 10:00:00")
        _refused(_cli("tune", str(build)), f"another `tune` is running on {build.resolve()} (pid 4242, since")


def test_resuming_after_a_kill_says_what_was_interrupted(cxx_project, configure):
    build = cxx_project / "build"
    configure(cxx_project, build)
    proc = subprocess.Popen([*CLI, "tune", str(build), "--strategy", "staged", "--budget", "3",
                             "--repeats", "20", "--max-repeats", "20"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    store = Workspace(build).store
    deadline = time.monotonic() + 120
    running: list[tuple[str, str]] = []
    while not running and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
        if store.exists():
            try:
                db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
                running = db.execute("SELECT target, config_key FROM evaluations WHERE status='running' "
                                     "AND phase='search'").fetchall()
                db.close()
            except sqlite3.Error:
                pass
    proc.kill()
    proc.communicate()
    assert running
    again = _cli("tune", str(build), *QUICK)
    assert again.returncode == 0, again.stderr
    target, key = running[0]
    assert (f"{target}: the last run ended (killed?) while evaluating {key} (search); its measurements "
            "are kept, not counted") in again.stderr


def test_after_failed_validations_the_decision_does_not_contradict_them(tmp_path):
    store = Store(tmp_path / "r.sqlite")
    session = store.start_session("test", {})
    arch = {"CXX": "x86_64"}
    for key, ratio, phase in [("a", 0.80, "search"), ("b", 0.82, "search"), ("c", 0.84, "search"),
                              ("d", 0.86, "search"), ("e", 0.88, "search"),
                              ("a", 1.0, "validate"), ("b", 1.0, "validate"), ("c", 1.0, "validate")]:
        stored_evaluation(store, session, key, phase, ratio, arch)
    decision = decide(store, "saxpy", arch)
    store.close()
    assert isinstance(decision, NoWinner) and decision.pending == ("d", "e")
    assert decision.reason == (
        "3 candidates faster in the search did not hold up when re-measured (a, b, c); 2 more were "
        "faster in the search and are not validated yet (5 measured): run tune again to re-measure "
        "the next 2")


def _configure_with(project: Path, configure, old: str, new: str) -> str:
    lists = project / "CMakeLists.txt"
    assert old in lists.read_text()
    lists.write_text(lists.read_text().replace(old, new))
    proc = configure(project, project / "build", check=False)
    assert proc.returncode != 0, proc.stdout
    return proc.stderr


def test_compileiq_tune_without_languages_in_a_cxx_project_names_the_line(cxx_project, configure):
    err = _configure_with(cxx_project, configure, "compileiq_tune(saxpy LANGUAGES CXX)",
                          "compileiq_tune(saxpy untouched)")
    line = next(i for i, text in enumerate((cxx_project / "CMakeLists.txt").read_text().splitlines(), 1)
                if text.startswith("compileiq_tune("))
    said = " ".join(err.split())
    assert f"CMakeLists.txt:{line} (compileiq_tune)" in said and "DEFERRED" not in said
    assert ("compileiq_tune(saxpy untouched): without LANGUAGES it tunes the targets' CUDA sources, and "
            "the project does not enable CUDA. For C++ write compileiq_tune(saxpy untouched LANGUAGES "
            "CXX)") in said


@pytest.mark.parametrize("regex", ["time_ms: [0-9.eE+-]+", r"time_ms \\(ms\\): [0-9.]+",
                                   "(?:time_ms): [0-9.]+"])
def test_a_regex_without_a_capture_group_is_refused_at_configure(regex, cxx_project, configure):
    err = _configure_with(cxx_project, configure, 'REGEX "time_ms: ([0-9.eE+-]+)"', f'REGEX "{regex}"')
    assert "has no capture group for the measured value" in " ".join(err.split())


def test_a_run_stopped_by_ctrl_c_still_leaves_passengers_out(cxx_project, configure):
    # -fno-math-errno changes nothing in saxpy (no math calls): a passenger of -O3.
    space = FlagSpace((Dimension("CXX", "O", ("3",), "-O{v}", 1),
                       Dimension("CXX", "no-math-errno", ("on",), "-fno-math-errno", 2)))
    config = {"CXX:O": "3", "CXX:no-math-errno": "on"}
    evaluator, store = cxx_evaluator(cxx_project, configure, [1])
    flags, worker = space.flags(config), evaluator.workers[0]
    evaluator.evaluate(config, flags, "staged", "search", evaluator.build(flags, worker, 0))
    assert evaluator.evaluate(config, flags, "staged", "validate", evaluator.build(flags, worker, 0),
                              sampling=Sampling(4, 4)).faster
    winner = decide(store, "saxpy", evaluator.arch_keys)
    assert isinstance(winner, Winner) and winner.unchecked == ("CXX:O=3", "CXX:no-math-errno=on")
    evaluator.clock.interrupt()  # Ctrl-C came during validation
    shipped = minimize_winner(evaluator, space, winner, Sampling(4, 4), Reporter(quiet=True))
    store.close()
    assert shipped.flags == {"CXX": ("-O3",)} and shipped.unchecked == ()
    assert [(d.option, d.why) for d in shipped.dropped] == [
        ("CXX:no-math-errno=on", "the machine code is the same without it")]


def test_a_cpu_search_stopped_by_the_time_limit_says_why(cxx_project, configure):
    # One slot, CPU benchmarks (no overlap): the candidate compiled when the time ran out is not
    # measured; the search's stop reason was printed empty ('   saxpy: ') when its slot was lost.
    from compileiq_build.decide.clock import Clock
    from compileiq_build.search.history import history
    from compileiq_build.search.loop import Proposals, run_search
    from compileiq_build.search.strategies import Exhaustive

    space = FlagSpace((Dimension("CXX", "O", ("2", "3"), "-O{v}", 1),
                       Dimension("CXX", "unroll-loops", ("on",), "-funroll-loops", 1)))
    evaluator, store = cxx_evaluator(cxx_project, configure, [1])
    clock = Clock(60, now=lambda: 100.0 if store.evaluations("saxpy", phase="search") else 0.0)
    proposals = Proposals(Exhaustive(), space, lambda: history(evaluator), budget=100, clock=clock)
    run_search(evaluator, evaluator.workers, proposals, Reporter(quiet=True), overlap=False)
    store.close()
    assert proposals.finished == "time limit reached"
