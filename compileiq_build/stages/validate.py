"""Validation: the best few search candidates measured again, with twice the runs.

A best-of-N pick is biased low (the luckiest measurement wins), so a winner is only what holds
up when re-measured: faster on every workload beyond noise and by a gain in all beyond the noise
zone (`selection.beats_baseline`); `selection.decide` then names the winner from the stored
results.  Under --time-limit the search leaves time for it (decide/clock.py); a finalist whose
build the time left cannot hold is named, not validated, and a measurement the time reaches stops.
"""

from __future__ import annotations

from compileiq_build.build.space import FlagSpace
from compileiq_build.decide.racing import Sampling
from compileiq_build.decide.selection import FINALISTS, NoWinner, Winner, beats_baseline, gain_and_zone
from compileiq_build.evaluate.evaluator import Evaluator
from compileiq_build.notes import Notes
from compileiq_build.store.database import INTERRUPTED


def validate(evaluator: Evaluator, space: FlagSpace, sampling: Sampling,
             notes: Notes) -> tuple[Winner | NoWinner, list[str]]:
    """Re-measure the best few candidates ranked above the current answer with `sampling`
    (twice the search's runs), until the evaluator's clock stops it; returns the decision and
    what this run re-measured."""
    results, name = evaluator.results, evaluator.target.name
    noise = results.noise()  # the search's, as `decide` judges the re-measurement
    remeasured: list[str] = []
    for finalist in results.pending_validation()[:FINALISTS]:
        row = finalist.evaluation
        if why := evaluator.clock.why_stop(need=row.build_seconds or 0.0):
            if not evaluator.clock.interrupted:
                notes.note(f"{name}: {why} before {row.config_key} was validated; "
                           "run tune again with more time to validate it")
            break
        notes.phase(f"validating {name}: {row.config_key}")
        flags = {k: tuple(v) for k, v in row.flags.items()}
        built = evaluator.build(flags, evaluator.workers[0], 0)
        check = evaluator.evaluate(row.config, flags, row.strategy, "validate", built,
                                   numerics=space.changes_numerics(row.config), sampling=sampling)
        if check.evaluation.status == INTERRUPTED:
            notes.note(f"{name}: {check.error} while validating {row.config_key}; "
                       "run tune again with more time to validate it")
            break
        remeasured.append(row.config_key)
        if beats_baseline(check, noise):
            break
        within = ""
        if check.faster:
            gain, hidden = gain_and_zone(check, noise)
            within = (f", faster on every workload but by {gain:.1%} in all, less than the {hidden:.1%} "
                      "its noise hides")
        notes.note(f"{name}: {row.config_key} did not hold up when re-measured{within}")
    return results.decide(), remeasured
