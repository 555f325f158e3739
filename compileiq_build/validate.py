"""Validation: the best few search candidates measured again, with twice the runs.

A best-of-N pick is biased low (the luckiest measurement wins), so a winner is only what holds
up when re-measured; `selection.decide` then names the winner from the stored results.  The
search leaves time for it under --time-limit (`validation_reserve`).
"""

from __future__ import annotations

from collections.abc import Callable

from compileiq_build.evaluate import Evaluator
from compileiq_build.notes import Notes
from compileiq_build.racing import Sampling
from compileiq_build.selection import (
    FINALISTS,
    NoWinner,
    Winner,
    decide,
    finalists,
    outcomes,
    pending_validation,
)
from compileiq_build.space import FlagSpace
from compileiq_build.store import Store


def validation_reserve(evaluator: Evaluator) -> float:
    """Seconds that validating the best candidate so far takes: its build, twice its measuring
    (validation pairs twice as many runs), and a build per option to find the passengers among
    them (minimize.py)."""
    store, name, arch = evaluator.store, evaluator.target.name, evaluator.arch_keys
    best = finalists(outcomes(store, name, arch, "search"), 1)
    if not best:
        return 0.0
    row = best[0].evaluation
    compiles = 1 + len(row.config_key.split())
    return compiles * (row.build_seconds or 0.0) + 2 * store.measuring_seconds(row.same_as or row.id)


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
