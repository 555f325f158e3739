"""compileiq_add_benchmark(... CHECK <command>): a correctness check each candidate's build runs
once, before its pairs in validation, after them in the search where it may still win.  Real
cmake, ninja, g++ and runs on the C++ fixture, whose library gains a function that -ffast-math
breaks (it no longer sees a NaN) and a check program that calls it."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import cxx_evaluator, write_finalists

from compileiq_build.errors import CompileIQError
from compileiq_build.project.manifest import load_project
from compileiq_build.store.database import INVALID, MEASURED, EvaluationRow

PROBE = "bool saxpy_sees_nan(float x) { return x != x; }  // -ffast-math folds it to false\n"
CHECKER = """#include <cmath>
#include <cstdio>
#include <cstdlib>
bool saxpy_sees_nan(float x);
int main(int argc, char** argv) {
  int expect = argc > 1 ? std::atoi(argv[1]) : 1;
  int seen = saxpy_sees_nan(NAN);
  std::printf("NaN seen as NaN: %d (expected %d)\\n", seen, expect);
  return seen == expect ? 0 : 3;
}
"""
REGISTRATION = 'FORMAT regex REGEX "time_ms: ([0-9.eE+-]+)" UNIT ms'


def _with_check(project: Path, check: str) -> Path:
    """The fixture with the probe in its tuned library, a check program, and `check` as the
    benchmark's CHECK."""
    (project / "probe.cpp").write_text(PROBE)
    (project / "check_saxpy.cpp").write_text(CHECKER)
    cmake = project / "CMakeLists.txt"
    text = cmake.read_text()
    assert REGISTRATION in text
    cmake.write_text(text.replace(REGISTRATION, f"{REGISTRATION} {check}")
                     + "target_sources(saxpy PRIVATE probe.cpp)\n"
                       "add_executable(check_saxpy check_saxpy.cpp)\n"
                       "target_link_libraries(check_saxpy PRIVATE saxpy)\n")
    return project


def test_check_is_in_the_manifest_with_its_executable_resolved(cxx_project, configure):
    build = cxx_project / "build"
    configure(_with_check(cxx_project, "CHECK check_saxpy 1"), build)
    [bench] = load_project(build).benchmarks
    assert bench.check == (str(build / "check_saxpy"), "1") and bench.check_target == "check_saxpy"
    assert bench.args == ("200000", "30")  # CHECK's words are its own, not the benchmark's


@pytest.mark.parametrize(("check", "message"), [
    ("CHECK", "CHECK needs a command"),
    ("CHECK saxpy", "CHECK 'saxpy' is a STATIC_LIBRARY, not an executable"),
])
def test_a_check_without_an_executable_stops_the_configure(cxx_project, configure, check, message):
    proc = configure(_with_check(cxx_project, check), cxx_project / "build", check=False)
    assert proc.returncode != 0
    assert message in " ".join(proc.stderr.split())


def test_a_candidate_that_fails_the_check_never_counts_and_the_search_checks_only_possible_winners(
        cxx_project, configure):
    evaluator, store = cxx_evaluator(_with_check(cxx_project, "CHECK check_saxpy 1"), configure, [1])
    assert evaluator.baseline.check_s  # the baseline passed it
    fast = {"CXX": ("-O2", "-ffast-math")}

    def evaluate(name: str, flags: dict[str, tuple[str, ...]], phase: str) -> EvaluationRow:
        built = evaluator.build(flags, evaluator.workers[0], 0)
        return evaluator.evaluate({"CXX:O": name}, flags, "exhaustive", phase, built).evaluation

    passed = evaluate("O2", {"CXX": ("-O2",)}, "search")
    assert passed.status == MEASURED and store.samples(passed.id)
    # No history to race against: the candidate may win, so its pairs are followed by the check.
    failed = evaluate("fast", fast, "search")
    assert failed.status == INVALID and store.samples(failed.id)
    assert "its CHECK" in failed.reason and "exit code 3" in failed.reason
    assert "NaN seen as NaN: 0 (expected 1)" in failed.reason  # the check's output tail
    # Validation (and minimizing), whose results ship, check before any pair.
    validated = evaluate("fast", fast, "validate")
    assert validated.status == INVALID and not store.samples(validated.id)
    # Three finalists 100 times faster race the candidate out after 2 pairs: it cannot win, so
    # the search does not spend the check on it (it would have failed).
    write_finalists(evaluator, store, 0.01, 0.001)
    raced = evaluate("fast", fast, "search")
    assert raced.status == MEASURED and raced.reason.startswith("raced out after 2 pairs")
    store.close()


def test_a_check_the_baseline_fails_stops_tuning_with_its_output(cxx_project, configure):
    with pytest.raises(CompileIQError) as info:
        cxx_evaluator(_with_check(cxx_project, "CHECK check_saxpy 0"), configure, [1])
    text = str(info.value)
    assert "its CHECK" in text and "fails with the project's own flags" in text
    assert "NaN seen as NaN: 1 (expected 0)" in text
