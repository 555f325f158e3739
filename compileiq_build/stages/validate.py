"""Validation: the best few search candidates measured again, with twice the runs.

A best-of-N pick is biased low (the luckiest measurement wins), so a winner is only what holds
up when re-measured; `selection.decide` then names the winner from the stored results.  The
search leaves time for it and for minimizing under --time-limit (`validation_reserve`).
"""

from __future__ import annotations

from collections.abc import Callable

from compileiq_build.build.space import FlagSpace
from compileiq_build.decide.racing import Sampling
from compileiq_build.decide.selection import (
    FINALISTS,
    NoWinner,
    Winner,
    decide,
    finalists,
    outcomes,
    pending_validation,
)
from compileiq_build.evaluate.evaluator import Evaluator
from compileiq_build.notes import Notes
from compileiq_build.store.database import Store


def validation_reserve(evaluator: Evaluator) -> float:
    """Seconds that validating and minimizing the best candidate so far take (minimize.py), so
    that a run under --time-limit ships only flags whose removal was checked: its build and
    twice its measuring (validation pairs twice the runs), then for a winner of several options
    a build per option (to find its passengers) and, with validation's runs, a measurement per
    option that no build has shown to be a passenger (its code set alone is not the baseline's)."""
    store, name, arch = evaluator.store, evaluator.target.name, evaluator.arch_keys
    best = finalists(outcomes(store, name, arch, "search"), 1)
    if not best:
        return 0.0
    row = best[0].evaluation
    # One option left: minimizing has nothing to take away (the baseline remains without it).
    removals = row.config_key.split() if len(row.config_key.split()) > 1 else []
    measured = [o for o in removals if o not in _passengers(store, name, arch, evaluator.baseline.digest)]
    measuring = 2 * store.measuring_seconds(row.same_as or row.id)
    return (1 + len(removals)) * (row.build_seconds or 0.0) + (1 + len(measured)) * measuring


def _passengers(store: Store, name: str, arch: dict[str, str], baseline: str) -> set[str]:
    """The options whose code, set alone in any phase, is the baseline's."""
    return {r.config_key for r in store.evaluations(name, arch)
            if baseline and r.digest == baseline and len(r.config_key.split()) == 1}


def validate(evaluator: Evaluator, store: Store, space: FlagSpace, sampling: Sampling,
             check_interrupt: Callable[[], None], out_of_time: Callable[[], bool],
             notes: Notes) -> tuple[Winner | NoWinner, list[str]]:
    """Re-measure the best few candidates ranked above the current answer with `sampling`
    (twice the search's runs); returns the decision and what this run re-measured."""
    name, arch = evaluator.target.name, evaluator.arch_keys
    remeasured: list[str] = []
    for finalist in pending_validation(store, name, arch)[:FINALISTS]:
        row = finalist.evaluation
        check_interrupt()
        if out_of_time():
            notes.note(f"{name}: time limit reached before {row.config_key} was validated; "
                       "run tune again with more time to validate it")
            break
        notes.phase(f"validating {name}: {row.config_key}")
        flags = {k: tuple(v) for k, v in row.flags.items()}
        built = evaluator.build(flags, evaluator.workers[0], 0)
        check = evaluator.evaluate(row.config, flags, row.strategy, "validate", built,
                                   numerics=space.changes_numerics(row.config), sampling=sampling)
        remeasured.append(row.config_key)
        if check.faster:
            break
        notes.note(f"{name}: {row.config_key} did not hold up when re-measured")
    return decide(store, name, arch), remeasured
