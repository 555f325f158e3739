"""`doctor` says what is missing and how to fix it; `tune` shows its progress."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys

from rich.console import Console

from compileiq_build.decide.selection import Outcome
from compileiq_build.decide.stats import RatioEstimate
from compileiq_build.evaluate.baseline import STEPS_EVERY_S, BuildSteps
from compileiq_build.results.progress import Reporter
from compileiq_build.store.database import EvaluationRow


def _doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "compileiq_build", "doctor", *args],
                          capture_output=True, text=True, env=env)


def test_doctor_reports_a_missing_tool_with_its_fix():
    proc = _doctor(env={**os.environ, "PATH": "/nonexistent"})
    assert proc.returncode == 1
    assert "c++    MISSING: install a C++ compiler, e.g. apt-get install g++" in proc.stdout
    assert re.search(r"^cmake  cmake version \d", proc.stdout, re.M)  # from the cmake package


def test_doctor_checks_a_build_folder(cxx_project, configure, tmp_path):
    configure(cxx_project, cxx_project / "build")
    good = _doctor(str(cxx_project / "build"))
    assert good.returncode == 0, good.stdout
    assert "CompileIQ 0.1.0 module found; tuned targets saxpy; 1 benchmark registrations" in good.stdout
    bad = _doctor(str(tmp_path))
    assert bad.returncode == 1
    assert "is not a configured CMake build folder" in bad.stdout


def _outcome(key: str, ratio: float, faster: bool) -> Outcome:
    row = EvaluationRow(1, "saxpy", {"CXX": "x86_64"}, key, {}, {}, "staged", "search", "measured", "", 0.1)
    est = RatioEstimate(ratio, ratio * 0.99 if faster else 0.9, ratio * 1.01 if faster else 1.1, 5)
    return Outcome(row, {"saxpy[1]": est}, "")


def test_live_display_on_a_terminal():
    out = io.StringIO()
    reporter = Reporter(Console(file=out, force_terminal=True, width=140))
    reporter.start(["saxpy"], budget=5)
    reporter.phase("saxpy: building the baseline")
    reporter.evaluating("saxpy", 0, "CXX:O=2")
    reporter.outcome("saxpy", _outcome("CXX:O=2", 0.5, True))
    reporter.evaluating("saxpy", 1, "CXX:O=3")
    reporter.stop()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    assert "best speedup" in text and "1/5" in text and "2.000x" in text and "ETA" in text
    assert "measuring CXX:O=3" in text


def test_one_plain_line_per_evaluation_elsewhere():
    out = io.StringIO()
    reporter = Reporter(Console(file=out, force_terminal=False, width=200))
    reporter.start(["saxpy"], budget=3)
    for i, (ratio, faster) in enumerate(((0.5, True), (1.0, False), (0.4, True))):
        reporter.evaluating("saxpy", i, f"k{i}")
        reporter.outcome("saxpy", _outcome(f"k{i}", ratio, faster))
    reporter.stop()
    lines = [line for line in out.getvalue().splitlines() if line.startswith("[saxpy")]
    assert len(lines) == 3
    expected = r"\[saxpy 3/3, best 2\.500x, 0 failed, ETA \S+\] k2: faster: saxpy\[1\] 2\.500x"
    assert re.match(expected, lines[2])
    assert "\x1b[" not in out.getvalue()


def test_counts_with_two_workers_measuring_at_once():
    """Worker B's result is in the store (the count passed in) before it is shown: the
    display counts each outcome once, and starts from the evaluations of earlier runs."""
    out = io.StringIO()
    reporter = Reporter(Console(file=out, force_terminal=False, width=200))
    reporter.start(["saxpy"], budget=4)
    reporter.evaluating("saxpy", 1, "a")  # one evaluation from an earlier run
    reporter.evaluating("saxpy", 1, "b")
    reporter.evaluating("saxpy", 2, "c")  # b has landed in the store, not yet shown
    for key in ("b", "a", "c"):
        reporter.outcome("saxpy", _outcome(key, 1.0, False))
    reporter.stop()
    lines = [line for line in out.getvalue().splitlines() if line.startswith("[saxpy")]
    assert [line.split(",")[0] for line in lines] == ["[saxpy 2/4", "[saxpy 3/4", "[saxpy 4/4"]


def test_a_resumed_run_shows_the_best_of_earlier_runs():
    """After a resume the line's best is that of the whole search, not of this run alone (the
    H200 gemm log said "best 1.000x" after a first run had found 1.015x)."""
    out = io.StringIO()
    reporter = Reporter(Console(file=out, force_terminal=False, width=200))
    reporter.start(["saxpy"], budget=4)
    reporter.evaluating("saxpy", 2, "a", best=1.015)
    reporter.outcome("saxpy", _outcome("a", 1.0, False))
    reporter.stop()
    (line,) = [line for line in out.getvalue().splitlines() if line.startswith("[saxpy")]
    assert line.startswith("[saxpy 3/4, best 1.015x")


def test_one_warning_per_workload_for_gpu_slowdowns():
    from compileiq_build.evaluate.pairing import warn_slowdowns
    from compileiq_build.run.measure import Run
    from compileiq_build.store.records import Sample

    out = io.StringIO()
    reporter = Reporter(Console(file=out, force_terminal=False, width=200))
    bench = type("B", (), {"workload": "gemm[--n 4096]"})()
    states = [{"clock_event_reasons": 0x4, "sm_clock_min_mhz": 1905},
              {"clock_event_reasons": 0x4 | 0x20, "sm_clock_min_mhz": 1755}]
    slowed = [Run([Sample("gemm[--n 4096]", 1.0, 1.0, 0.1, 0, "", g)]) for g in states]
    warn_slowdowns(reporter, bench, slowed, 10)
    warn_slowdowns(reporter, bench, [], 10)
    lines = out.getvalue().strip().splitlines()
    assert len(lines) == 1
    assert ("GPU slowdown during 2 of 10 runs of gemm[--n 4096]: software power cap, software thermal "
            "slowdown (SM clock down to 1755 MHz)") in lines[0]


def test_the_slowdown_warning_names_the_clock_while_slowed_not_the_idle_one():
    """Live (ggml's flash attention, H100): test-backend-ops idles the GPU at 345 MHz while it
    sets up, and the warning said "software power cap (SM clock down to 345 MHz)"."""
    from compileiq_build.evaluate.pairing import warn_slowdowns
    from compileiq_build.machine.gpu import summarize
    from compileiq_build.run.measure import Run
    from compileiq_build.store.records import Sample

    state = summarize([(345, 2619, 36, 0x1), (1905, 2619, 38, 0x4), (1980, 2619, 39, 0x0)])
    assert state["sm_clock_min_mhz"] == 345 and state["slowed_sm_clock_min_mhz"] == 1905
    assert state["clock_event_reasons"] == 0x5 and state["readings"] == 3
    assert "slowed_sm_clock_min_mhz" not in summarize([(345, 2619, 36, 0x1), (1980, 2619, 39, 0x0)])
    out = io.StringIO()
    reporter = Reporter(Console(file=out, force_terminal=False, width=200))
    bench = type("B", (), {"workload": "fattn"})()
    warn_slowdowns(reporter, bench, [Run([Sample("fattn", 1.0, 1.0, 0.1, 0, "", state)])], 10)
    assert "software power cap (SM clock down to 1905 MHz)" in out.getvalue()


def test_a_long_build_logs_its_steps_at_most_every_half_minute():
    """ggml's baseline build took 4 minutes with nothing in the log between its heading and its
    end; now Ninja's steps are a line every STEPS_EVERY_S seconds (a short build shows none)."""
    lines: list[str] = []

    class Log:
        def note(self, text: str) -> None:
            lines.append(text)

        def phase(self, text: str) -> None:
            lines.append(text)

    t = [100.0]
    steps = BuildSteps(Log(), "k: the baseline", now=lambda: t[0])
    for at, done in ((1, 1), (STEPS_EVERY_S - 1, 40), (STEPS_EVERY_S, 41), (STEPS_EVERY_S + 5, 60),
                     (2 * STEPS_EVERY_S + 1, 120), (4 * STEPS_EVERY_S, 187)):
        t[0] = 100.0 + at
        steps(done, 187)
    assert lines == [f"k: the baseline: 41 of 187 build steps done in {STEPS_EVERY_S:.0f} s",
                     f"k: the baseline: 120 of 187 build steps done in {2 * STEPS_EVERY_S + 1:.0f} s"]
