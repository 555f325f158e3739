"""--time-limit bounds the whole run: the search keeps time to validate and minimize its best
candidate, and a finalist left without time is named, not validated in overtime.

Real cmake, ninja and g++ on the C++ fixture, whose library the project builds at -O0, so
that -O2 is a finalist.
"""

from __future__ import annotations

import io
import sqlite3
import time

import pytest
from conftest import cxx_evaluator
from rich.console import Console

from compileiq_build.build.space import Dimension, FlagSpace
from compileiq_build.decide.selection import NoWinner
from compileiq_build.options import TuneOptions
from compileiq_build.results.progress import Reporter
from compileiq_build.search.history import history, trials
from compileiq_build.search.loop import Proposals, run_search
from compileiq_build.search.strategies import Exhaustive
from compileiq_build.stages.tune import Tuner

SPACE = FlagSpace((Dimension("CXX", "O", ("2",), "-O{v}"),))


def _searched(cxx_project, configure, report=None):
    """The fixture with -O2 measured in the search, and a Tuner over its build folder."""
    evaluator, store = cxx_evaluator(cxx_project, configure, [1], report)
    proposals = Proposals(Exhaustive(), SPACE, lambda: history(evaluator), budget=1, halt=lambda: "")
    run_search(evaluator, evaluator.workers, proposals, Reporter(quiet=True), overlap=False)
    [outcome] = trials(evaluator)
    assert outcome.faster  # -O2 against the project's -O0
    tuner = Tuner(cxx_project / "build", TuneOptions(time_limit=3600), evaluator.report)
    return evaluator, store, tuner


def test_the_search_keeps_time_to_validate_its_best_candidate(cxx_project, configure):
    evaluator, store, tuner = _searched(cxx_project, configure)
    db = sqlite3.connect(cxx_project / "build" / "compileiq" / "results.sqlite")
    build_s, measuring_s = db.execute(
        "SELECT e.build_seconds, SUM(s.wall_s) FROM evaluations e JOIN samples s ON s.evaluation_id = e.id"
        " WHERE e.phase = 'search'").fetchone()
    reserve = tuner._validation_reserve(evaluator)
    # Its build and twice its measuring; with one option, minimizing has nothing to try.
    assert reserve == pytest.approx(build_s + 2 * measuring_s) and reserve > 0
    tuner.deadline = time.monotonic() + reserve / 2  # the deadline is nearer than the reserve
    assert tuner.out_of_time(reserve) and not tuner.out_of_time()
    tuner.deadline = None  # no time limit: nothing is kept
    assert tuner._validation_reserve(evaluator) == 0.0
    store.close()


def test_the_search_keeps_time_to_minimize_a_winner_of_several_options(cxx_project, configure):
    """-O2 -Wall: a build per option to find passengers, and a measurement with validation's
    runs for each option no build has shown to be one (-Wall alone compiles to the baseline's code)."""
    evaluator, store = cxx_evaluator(cxx_project, configure, [1], scout=True)
    space = FlagSpace((*SPACE.dimensions, Dimension("CXX", "Wall", ("on",), "-Wall")))
    worker = evaluator.workers[0]
    alone = {"CXX:Wall": "on"}
    assert evaluator.scout(alone, space.flags(alone), "model", worker) == evaluator.baseline.digest
    config = {"CXX:O": "2", "CXX:Wall": "on"}
    flags = space.flags(config)
    outcome = evaluator.evaluate(config, flags, "model", "search", evaluator.build(flags, worker, 0))
    assert outcome.faster
    row = outcome.evaluation
    tuner = Tuner(cxx_project / "build", TuneOptions(time_limit=3600), evaluator.report)
    build_s = store.evaluation(row.id).build_seconds
    measuring_s = store.measuring_seconds(row.id)
    # Validation (a build, twice the measuring), two compiles, one measured removal (of -O2).
    assert tuner._validation_reserve(evaluator) == pytest.approx(3 * build_s + 4 * measuring_s)
    store.close()


def test_a_finalist_is_not_validated_past_the_time_limit(cxx_project, configure):
    out = io.StringIO()
    evaluator, store, tuner = _searched(cxx_project, configure, Reporter(Console(file=out, width=200)))
    tuner.deadline = time.monotonic() - 1
    decision, _ = tuner._validate(evaluator, store, SPACE)
    assert isinstance(decision, NoWinner)
    assert store.evaluations("saxpy", phase="validate") == []
    assert "time limit reached before CXX:O=2 was validated" in out.getvalue()
    # With time, the same finalist is validated and wins.
    tuner.deadline = time.monotonic() + 3600
    assert not isinstance(tuner._validate(evaluator, store, SPACE)[0], NoWinner)
    assert len(store.evaluations("saxpy", phase="validate")) == 1
    store.close()


def test_each_target_searches_in_its_share_of_the_time_left(cxx_project, configure):
    configure(cxx_project, cxx_project / "build")
    tuner = Tuner(cxx_project / "build", TuneOptions(time_limit=100), Reporter(quiet=True))
    left = tuner.deadline - time.monotonic()
    assert tuner._share_of_time(4) - time.monotonic() == pytest.approx(left / 4, abs=1)
    assert tuner._share_of_time(1) == pytest.approx(tuner.deadline)
    tuner.deadline = time.monotonic() - 5  # past it: no share, not a negative one
    assert tuner._share_of_time(3) == pytest.approx(time.monotonic(), abs=1)
    assert Tuner(cxx_project / "build", TuneOptions(), Reporter(quiet=True))._share_of_time(2) is None



def test_a_measurement_the_time_limit_reaches_is_stopped_and_not_counted(cxx_project, configure):
    """Found on ggml with --time-limit: a candidate measured when the time ran out took its 20
    pairs of benchmark processes (minutes) before the search could stop. It now stops after the
    pair in progress, keeps its pairs, and is not counted: the same command measures it again."""
    out = io.StringIO()
    evaluator, store = cxx_evaluator(cxx_project, configure, [1], Reporter(Console(file=out, width=200)))

    def halt() -> str:  # the time runs out once the candidate's first pair is measured
        rows = store.evaluations("saxpy", phase="search")
        return "time limit reached" if rows and store.samples(rows[0].id) else ""

    proposals = Proposals(Exhaustive(), SPACE, lambda: history(evaluator), budget=1, halt=halt,
                          out_of_time=halt)
    run_search(evaluator, evaluator.workers, proposals, evaluator.report, overlap=False)
    [row] = store.evaluations("saxpy", phase="search")
    assert row.status == "interrupted" and row.reason == "measuring stopped: time limit reached"
    assert {rep for _, _, rep, _, _ in store.samples(row.id)} == {0}  # the pair in progress, kept
    assert trials(evaluator) == []  # not counted: a later run measures it again
    assert "CXX:O=2: measuring stopped: time limit reached; not counted" in out.getvalue()
    store.close()
