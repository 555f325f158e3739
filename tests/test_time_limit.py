"""--time-limit bounds the whole run, validation and minimizing inside it: one clock (decide/clock.py)
that the search, the paired runs, validation and minimizing ask; its reserve for validating and
minimizing is estimated from measured times and does not starve the search; a limit that cannot
hold one evaluation is refused at the start, with the limit that would.

Real cmake, ninja and g++ on the C++ fixture, whose library the project builds at -O0, so that
-O2 is a finalist; BENCH_SLEEP_MS makes each of its runs last that long.  The clock's arithmetic
is checked with a time source the test sets, not with wall-clock tolerances.
"""

from __future__ import annotations

import io
import re
import time

import pytest
from conftest import cxx_evaluator
from rich.console import Console

from compileiq_build.build.space import Dimension, FlagSpace
from compileiq_build.decide.clock import Clock, StepTimes
from compileiq_build.decide.racing import Sampling
from compileiq_build.decide.selection import FINALISTS, NoWinner, Winner
from compileiq_build.errors import CompileIQError
from compileiq_build.options import TuneOptions
from compileiq_build.results.progress import Reporter
from compileiq_build.search.history import history, trials
from compileiq_build.search.loop import Proposals, run_search
from compileiq_build.search.strategies import Exhaustive
from compileiq_build.stages.tune import tune
from compileiq_build.stages.validate import validate
from compileiq_build.store.database import read_store

SPACE = FlagSpace((Dimension("CXX", "O", ("2",), "-O{v}"),))


class Now:
    """A time source the test moves."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_each_target_has_an_equal_share_of_the_time_left():
    now = Now()
    clock = Clock(100, now=now)
    now.t += 20
    clock.share(4)
    assert clock.share_s == 20 and clock.remaining() == 20
    now.t += 30  # the first target used 30 s: the next ones share the 50 s left
    clock.share(2)
    assert clock.share_s == 25 and clock.end == now.t + 25
    now.t += 60  # past the deadline: no share, not a negative one
    clock.share(1)
    assert clock.share_s == 0 and clock.why_stop() == "time limit reached"
    assert Clock().remaining() is None and Clock().why_stop() == ""


def test_the_reserve_is_what_validating_and_minimizing_take_at_most_a_quarter():
    now = Now()
    times = StepTimes(build_s=2.0, pair_s=1.0, pairs=3)  # validation: 2 s + 6 pairs = 8 s
    clock = Clock(1000, now=now)
    clock.share(1)
    line = clock.plan("k", times, compiles=4, refuse=True)
    assert clock.planned == FINALISTS * 8.0 + 4 * 2.0  # far less than a quarter of 1000 s
    assert line == (f"k: the search keeps {clock.planned:.0f} s of its 1000 s to validate and minimize "
                    f"({FINALISTS} validations of a build and 6 pairs of 1.0 s, 4 builds of 2.0 s; "
                    "8 s until a candidate is faster)")
    # Nothing faster yet: one validation is kept, the rest is the search's.
    assert clock.reserve == 8.0
    clock.winner()
    assert clock.reserve == clock.planned
    now.t += 1000 - clock.reserve - 1
    assert clock.why_stop() == ""
    now.t += 2
    assert clock.why_stop() == f"time limit reached ({clock.reserve:.0f} s kept to validate and minimize " \
        "the best candidate)"
    # A CHECK (ggml's attention test: 20 s) runs once in each validation.
    checked = Clock(1000, now=Now())
    checked.share(1)
    line = checked.plan("k", StepTimes(2.0, 1.0, 3, check_s=20.0), compiles=4, refuse=True)
    assert checked.planned == FINALISTS * 28.0 + 4 * 2.0
    assert "validations of a build, a check of 20.0 s and 6 pairs of 1.0 s" in line
    # Runs twenty times as long: the search still has three quarters of its share.
    slow = Clock(1000, now=Now())
    slow.share(1)
    assert "at most a quarter of the share" in slow.plan("k", StepTimes(2.0, 20.0, 3), 4, refuse=True)
    slow.winner()
    assert slow.reserve == 250
    # A quarter that cannot hold one validation keeps one validation.
    tight = Clock(100, now=Now())
    tight.share(1)
    tight.plan("k", StepTimes(2.0, 5.0, 3), 4, refuse=True)
    assert tight.reserve == 2.0 + 6 * 5.0
    tight.keep(0.0)  # after the search: validation and minimizing run to the share's end
    assert tight.remaining() == 100


def test_the_reserve_follows_the_candidates_builds_not_the_baselines_full_one():
    """A candidate rebuilds its target's objects (or its group's: 26 s live on ggml), the baseline
    built everything (155 s there): once candidates were built, the reserve is planned on their
    median build, before and after a candidate was faster."""
    clock = Clock(20000, now=Now())
    clock.share(1)
    clock.plan("k", StepTimes(build_s=155.0, pair_s=4.0, pairs=5), compiles=6, refuse=True)
    assert clock.planned == FINALISTS * (155 + 40) + 6 * 155 and clock.reserve == 155 + 40
    for seconds in (30.0, 26.0, 25.0):
        clock.built(seconds)
    assert clock.planned == FINALISTS * (26 + 40) + 6 * 26 and clock.reserve == 26 + 40
    clock.winner()
    assert clock.reserve == clock.planned
    clock.built(20.0)  # median of 30, 26, 25, 20: 25.5
    assert clock.reserve == clock.planned == FINALISTS * (25.5 + 40) + 6 * 25.5
    clock.keep(0.0)  # the search ended: validation's builds leave the share's end to it
    clock.built(100.0)
    assert clock.reserve == 0.0
    clock.share(1)  # the next target plans on its own builds
    assert clock.builds == [] and not clock.won


def test_a_step_that_would_not_end_in_time_is_not_begun_and_ctrl_c_lets_a_measurement_finish():
    now = Now()
    clock = Clock(60, now=now)
    now.t += 55
    assert clock.why_stop() == "" and clock.why_stop(need=10) == "time limit reached"
    clock.interrupt()
    assert clock.why_stop() == "stopped by Ctrl-C" and clock.why_stop(in_flight=True) == ""
    later = Now()
    two = Clock(60, now=later)
    two.share(2)
    later.t += 31
    assert two.why_stop() == "its share of the time limit is used (2 targets were left)"


def test_a_limit_that_cannot_hold_one_evaluation_is_refused_with_the_limit_that_would():
    now = Now()
    clock = Clock(60, now=now)
    now.t += 15  # building and measuring the baseline took 15 s
    clock.share(2)
    times = StepTimes(build_s=4.0, pair_s=2.0, pairs=5)  # 14 s, validating 24 s: 38 s a target
    with pytest.raises(CompileIQError) as exc:
        clock.plan("saxpy", times, 4, refuse=True)
    assert str(exc.value) == (
        "--time-limit 60s cannot hold one evaluation of saxpy and its validation: a build takes 4.0 s "
        "and a pair of runs (candidate and baseline) 2.0 s, so 5 pairs and validating with 10 take "
        "38 s for each of 2 targets, and 15 s are spent already. Give --time-limit 100s or more, or "
        "fewer --repeats.")
    clock.plan("saxpy", times, 4, refuse=False)  # a later target: its search runs as time allows


def test_a_finalist_is_not_validated_past_the_time_limit(cxx_project, configure):
    out = io.StringIO()
    evaluator, store = cxx_evaluator(cxx_project, configure, [1], Reporter(Console(file=out, width=200)))
    run_search(evaluator, evaluator.workers, Proposals(Exhaustive(), SPACE, lambda: history(evaluator), 1),
               Reporter(quiet=True), overlap=False)
    [outcome] = trials(evaluator)
    assert outcome.faster  # -O2 against the project's -O0
    now = Now()
    evaluator.clock = Clock(60, now=now)
    now.t += 61
    decision, _ = validate(evaluator, SPACE, Sampling(4, 4), evaluator.report)
    assert isinstance(decision, NoWinner)
    assert store.evaluations("saxpy", phase="validate") == []
    assert "saxpy: time limit reached before CXX:O=2 was validated" in out.getvalue()
    # The time runs out after the first run of its validation: stopped there, named, not counted.
    evaluator.clock = Clock(60, now=lambda: 100.0 if _validating(store) else 0.0)
    decision, remeasured = validate(evaluator, SPACE, Sampling(4, 4), evaluator.report)
    assert isinstance(decision, NoWinner) and remeasured == []
    [row] = store.evaluations("saxpy", phase="validate")
    assert row.status == "interrupted" and len(store.samples(row.id)) == 1
    assert ("saxpy: measuring stopped: time limit reached while validating CXX:O=2; run tune again "
            "with more time to validate it") in out.getvalue()
    # With time, the same finalist is validated and wins.
    evaluator.clock = Clock(3600)
    assert isinstance(validate(evaluator, SPACE, Sampling(4, 4), evaluator.report)[0], Winner)
    store.close()


def _validating(store) -> bool:
    rows = store.evaluations("saxpy", phase="validate")
    return bool(rows and store.samples(rows[-1].id))


def test_a_measurement_the_time_limit_reaches_is_stopped_and_not_counted(cxx_project, configure):
    """Found on ggml with --time-limit: a candidate measured when the time ran out took its 20
    pairs of benchmark processes (minutes) before the search could stop. It now stops after the
    run in progress, keeps it, and is not counted: the same command measures it again."""
    out = io.StringIO()
    evaluator, store = cxx_evaluator(cxx_project, configure, [1], Reporter(Console(file=out, width=200)))

    def now() -> float:  # the time runs out once the candidate's first run is measured
        rows = store.evaluations("saxpy", phase="search")
        return 100.0 if rows and store.samples(rows[0].id) else 0.0

    evaluator.clock = Clock(60, now=now)
    proposals = Proposals(Exhaustive(), SPACE, lambda: history(evaluator), budget=1, clock=evaluator.clock)
    run_search(evaluator, evaluator.workers, proposals, evaluator.report, overlap=False)
    [row] = store.evaluations("saxpy", phase="search")
    assert row.status == "interrupted" and row.reason == "measuring stopped: time limit reached"
    assert len(store.samples(row.id)) == 1  # the run in progress, kept
    assert trials(evaluator) == []  # not counted: a later run measures it again
    assert "CXX:O=2: measuring stopped: time limit reached; not counted" in out.getvalue()
    store.close()


def _tune(build, limit, **options) -> tuple[float, str]:
    """tune in this process (the clock starts with it): its seconds and its log."""
    out = io.StringIO()
    started = time.monotonic()
    tune(build, TuneOptions(time_limit=limit, **options), Reporter(Console(file=out, width=300)), "test")
    return time.monotonic() - started, out.getvalue()


def test_the_time_limit_holds_with_validation_and_minimizing_and_the_search_uses_three_quarters(
        cxx_project, configure):
    """Random draws set many options: the reserve of the old estimate (a build and a measurement
    for each option of the best so far) was larger than the limit, and the search stopped after
    one evaluation.  Now it searches until a quarter of the limit is left; validating and
    minimizing end within the limit, a measurement stopped before a run the time has not left."""
    build = cxx_project / "build"
    configure(cxx_project, build)
    limit = 30.0
    started = time.time()
    seconds, log = _tune(build, limit, strategy="random", budget=100, repeats=2, max_repeats=3, seed=1)
    store = read_store(build / "compileiq" / "results.sqlite")
    rows = store.evaluations("saxpy")
    searched = [r for r in rows if r.phase == "search"]
    validated = [r for r in rows if r.phase == "validate"]
    assert validated and validated[0].status == "measured", log
    assert re.search(r"saxpy: time limit reached \(\d+ s kept to validate and minimize", log), log
    # The search stopped with its budget left once no more than a quarter of the limit was left.
    (validating,) = store.db.execute("SELECT MIN(started) FROM evaluations WHERE phase='validate'").fetchone()
    assert validating - started >= 0.75 * limit, log
    assert len({r.digest for r in searched if r.same_as is None}) >= 2
    # A candidate of code measured before names that evaluation by the counter's number.
    shown: dict[str, str] = {}  # the counter's number -> what the evaluation that took it measured
    for number, text in re.findall(r"^\[saxpy (\d+)/100, [^]]*\] random: CXX:\S+(?: CXX:\S+)*: (.*)$",
                                   log, re.M):
        shown.setdefault(number, text)
    twins = re.findall(r"\] random: \(machine code of evaluation (\d+)\) CXX:\S+(?: CXX:\S+)*: (.*)$",
                       log, re.M)
    # A twin repeats the measurement, not the racing remark that followed it (`; raced out ...`).
    assert twins and all(shown[number].startswith(text) for number, text in twins), log
    # The whole run, its validation and minimizing included, within the limit and one benchmark
    # run (with a second for what follows the last step: the decision and the toolchain file).
    longest_run = store.db.execute("SELECT MAX(wall_s) FROM samples").fetchone()[0]
    assert seconds <= limit + longest_run + 1.0, log
    store.close()


def test_an_impossible_limit_is_refused_with_the_limit_that_would_hold(cxx_project, configure, monkeypatch):
    """With a CHECK (1.5 s here, ggml's 20 s live), which a candidate that may win and each
    validation run once: the named limit counts it."""
    monkeypatch.setenv("BENCH_SLEEP_MS", "500")
    cmake = cxx_project / "CMakeLists.txt"
    registration = 'UNIT ms'
    assert cmake.read_text().count(registration) == 1
    cmake.write_text(cmake.read_text().replace(registration, f"{registration} CHECK sleep 1.5"))
    build = cxx_project / "build"
    configure(cxx_project, build)
    # One evaluation: the run with the limit named ends once -O2 is validated.
    options = {"strategy": "staged", "dimensions": ["O"], "budget": 1, "repeats": 2, "max_repeats": 2}
    with pytest.raises(CompileIQError) as exc:
        _tune(build, 4.0, **options)
    found = re.search(r"^--time-limit 4s cannot hold one evaluation of saxpy and its validation: a build "
                      r"takes [0-9.]+ s, its check 1\.[5-9] s and .*"
                      r"Give --time-limit (\d+)s or more", str(exc.value))
    assert found, str(exc.value)
    store = read_store(build / "compileiq" / "results.sqlite")
    assert store.evaluations("saxpy") == []  # refused before the search
    store.close()
    # The limit it names holds an evaluation and its validation.
    would = float(found.group(1))
    seconds, log = _tune(build, would, **options)
    store = read_store(build / "compileiq" / "results.sqlite")
    assert [r.status for r in store.evaluations("saxpy", phase="validate")] == ["measured"], log
    assert "saxpy: winner CXX:O=" in log
    assert seconds <= would + 1.5, log
    store.close()


def test_the_search_keeps_the_whole_reserve_only_once_a_candidate_was_faster():
    """Live, searches that found nothing left a quarter of a 180 s limit unspent with their budget
    left: until a candidate is faster, the loop keeps one validation; from the first winner on,
    what validating the faster candidates and minimizing the winner take."""
    from compileiq_build.search.strategies import Trial

    space = FlagSpace((Dimension("T", "O", ("1", "2"), "-O{v}", 1),))
    now = Now()
    clock = Clock(1000, now=now)
    clock.share(1)
    clock.plan("k", StepTimes(build_s=2.0, pair_s=1.0, pairs=3), compiles=4, refuse=True)
    measured: list[Trial] = [Trial({"T:O": "1"}, 1.01, False, code="o1")]
    proposals = Proposals(Exhaustive(), space, lambda: (measured, []), budget=5, clock=clock)
    assert proposals.next(may_wait=False) is not None and clock.reserve == 8.0
    measured.append(Trial({"T:O": "2"}, 0.95, True, code="o2"))
    proposals.next(may_wait=False)
    # One candidate of one option to validate and minimize, not FINALISTS of four (live on ggml's
    # attention: 291 s kept, 185 s used by the two validations there were).
    assert clock.reserve == clock.planned == 8.0 + 1 * 2.0
    clock.winner(5, 6)  # more faster candidates than are validated, of more options than planned
    assert clock.reserve == clock.planned == FINALISTS * 8.0 + 4 * 2.0


def test_a_resumed_search_plans_its_reserve_on_the_candidates_builds_before_any_new_one(cxx_project,
                                                                                       configure):
    """Live (ggml, sitting 3): a resumed search planned on the baseline's full build, 164 s, where
    its candidates had taken 27 s; on a warm machine (sitting 4) on the no-op rebuild, 1 s.  The
    plan now starts from the candidates' builds stored for the target."""
    import statistics

    build = cxx_project / "build"
    configure(cxx_project, build)
    options = {"strategy": "staged", "dimensions": ["O"], "repeats": 2, "max_repeats": 2}
    _, first = _tune(build, 600.0, budget=1, **options)
    store = read_store(build / "compileiq" / "results.sqlite")
    built = [r.build_seconds for r in store.evaluations("saxpy") if r.build_seconds]
    store.close()
    assert built, first
    _, again = _tune(build, 600.0, budget=2, **options)
    planned = re.search(r"saxpy: the search keeps .* builds of ([\d.]+) s", again)
    assert planned and float(planned.group(1)) == round(statistics.median(built), 1), again
