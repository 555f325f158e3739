"""Which configuration a target gets, decided from the stored measurements alone."""

from __future__ import annotations

from pathlib import Path

from conftest import stored_evaluation

from compileiq_build.decide.selection import (
    NoWinner,
    Winner,
    decide,
    outcomes,
    pending_validation,
    verdict_counts,
)
from compileiq_build.stages.tune import decision_note
from compileiq_build.store.database import Store

ARCH = {"CXX": "x86_64"}




def _store(path: Path, searched: dict[str, float], validated: dict[str, float]) -> Store:
    store = Store(path)
    session = store.start_session("test", {})
    for key, ratio in searched.items():
        stored_evaluation(store, session, key, "search", ratio)
    for key, ratio in validated.items():
        stored_evaluation(store, session, key, "validate", ratio)
    return store


def test_a_validated_winner_stays_until_a_better_one_is_validated(tmp_path):
    # A first run validated 'old'; a later, interrupted run found four better ones and
    # validated none of them: they are named as pending, and 'old' keeps the target.
    newer = {"a": 0.80, "b": 0.82, "c": 0.84, "d": 0.86}
    store = _store(tmp_path / "r.sqlite", {"old": 0.90, **newer, "slow": 1.05}, {"old": 0.91})
    decision = decide(store, "saxpy", ARCH)
    assert isinstance(decision, Winner)
    assert decision.config_key == "old" and decision.flags == {"CXX": ("-fold",)}
    assert decision.pending == ("a", "b", "c", "d")
    assert [o.evaluation.config_key for o in pending_validation(store, "saxpy", ARCH)] == ["a", "b", "c", "d"]
    assert decision.gains[0].estimate.ratio < 1
    # A better one that did not hold up is no longer pending; one that held up replaces 'old'.
    stored_evaluation(store, 1, "a", "validate", 1.0)
    decision = decide(store, "saxpy", ARCH)
    assert decision.config_key == "old" and decision.pending == ("b", "c", "d")
    stored_evaluation(store, 1, "c", "validate", 0.85)
    decision = decide(store, "saxpy", ARCH)
    assert decision.config_key == "c" and decision.pending == ("b",)
    store.close()


def test_no_winner_says_whether_candidates_await_validation(tmp_path):
    store = _store(tmp_path / "r.sqlite", {"a": 0.8, "b": 0.9, "slow": 1.1}, {"a": 1.0})
    decision = decide(store, "saxpy", ARCH)
    assert isinstance(decision, NoWinner) and decision.pending == ("b",)
    assert ("1 candidates faster in the search did not hold up when re-measured (a); 1 more were faster in "
            "the search and are not validated yet (3 measured)") in decision.reason
    stored_evaluation(store, 1, "b", "validate", 1.0)
    decision = decide(store, "saxpy", ARCH)
    assert decision.pending == ()
    assert "none of the 2 candidates faster in the search held up when re-measured" in decision.reason
    store.close()


def test_the_log_says_why_the_winner_is_not_what_was_just_validated(tmp_path):
    store = _store(tmp_path / "r.sqlite", {"old": 0.9, "x": 0.8, "y": 0.85}, {"old": 0.9, "x": 1.0})
    decision = decide(store, "saxpy", ARCH)
    assert decision_note(decision, ["x"]) == (
        f"saxpy: x did not hold up when re-measured; y is faster in the search but not validated yet; "
        f"old, validated in an earlier run, stays the winner ({decision.speedup:.3f}x)")
    stored_evaluation(store, 1, "y", "validate", 0.85)
    decision = decide(store, "saxpy", ARCH)
    assert decision_note(decision, ["y"]) == f"saxpy: winner y ({decision.speedup:.3f}x)"
    store.close()


def test_verdicts_are_counted_with_their_mean_pairs(tmp_path):
    store = _store(tmp_path / "r.sqlite", {"a": 0.9, "b": 1.0, "c": 1.2}, {})
    found = outcomes(store, "saxpy", ARCH, "search")
    assert verdict_counts(found) == ("1 faster, 1 neutral, 1 slower; mean pairs per workload: "
                                     "faster 10.0, neutral 10.0, slower 10.0")
    assert verdict_counts([]) == "none"
    store.close()
