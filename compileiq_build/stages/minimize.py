"""Ship only the flags that matter: the validated winner less the options it can do without.

Each round first compiles the configurations with one option fewer, the most exotic option
first, and takes away any whose machine code is the winner's (a passenger) at no GPU time: so a
run stopped by Ctrl-C still ships no passenger that a build would have shown (the time limit
stops these compiles too: tune ends within it).  Only then are the others measured, as
validation measures, in the same order; the smaller set replaces the winner when it is still
faster than the baseline on every workload and not slower than the winner beyond the noise zone
that racing uses (`selection.holds_without`): an option ships only for a gain beyond the noise.
Then its own options are tried in turn.  Each step is stored (phase `minimize`, with the
configuration it reduces), so `selection.decide` ships the result (cut short, the smallest
measured configuration of checked options that serves as well, else the result naming its
unchecked options), `report` says what was left out and why, and a resumed run repeats no step.
"""

from __future__ import annotations

from compileiq_build.build.space import DEFAULT, FlagSpace, config_key
from compileiq_build.decide.racing import Sampling
from compileiq_build.decide.selection import Outcome, Winner, beats_baseline, holds_without
from compileiq_build.evaluate.evaluator import Evaluator
from compileiq_build.notes import Notes
from compileiq_build.store.database import INTERRUPTED


def minimize(evaluator: Evaluator, space: FlagSpace, check: Outcome, sampling: Sampling,
             report: Notes) -> None:
    """Minimizing steps from the validated measurement `check`, until no option can go or the
    evaluator's clock stops them (a step whose build the time left cannot hold is not begun;
    after Ctrl-C the compiles that find passengers go on)."""
    name = evaluator.target.name
    taken = {(o.evaluation.parent, o.evaluation.config_key): o
             for o in evaluator.results.outcomes("minimize")}
    noise = evaluator.results.noise()  # the search's: what `decide` judges the steps with
    current = check
    while True:
        config = space.full_config(current.evaluation.config)
        # One option left: without it the baseline remains, which cannot be faster than itself.
        options = [d for d in reversed(space.dimensions) if config[d.key] != DEFAULT]
        reduced_by = {d.key: {**config, d.key: DEFAULT} for d in (options if len(options) > 1 else ())}
        found = None
        for measure in (False, True):
            for dim, reduced in ((d, reduced_by[d.key]) for d in options if d.key in reduced_by):
                step = taken.get((current.evaluation.config_key, config_key(reduced)))
                if step is None:
                    # The compiles that find passengers go on after Ctrl-C (no shipped option
                    # leaves the machine code as it is), not past the time limit, which tune
                    # promises to hold: options left unchecked there are said NOT CHECKED.
                    clock = evaluator.clock
                    if (clock.why_stop(need=current.evaluation.build_seconds or 0.0)
                            and (measure or not clock.interrupted)):
                        return
                    report.phase(f"minimizing {name}: without {dim.key}={config[dim.key]}"
                                 + ("" if measure else " (compiling)"))
                    flags = space.flags(reduced)
                    built = evaluator.build(flags, evaluator.workers[0], 0)
                    digest = built.compiled.digest
                    passenger = bool(digest) and digest == current.evaluation.digest
                    if not measure and built.result.ok and not passenger:
                        continue  # measured in the second pass
                    step = evaluator.evaluate(reduced, flags, "minimize", "minimize", built,
                                              numerics=space.changes_numerics(reduced), sampling=sampling,
                                              reduced_from=current.evaluation)
                    if step.evaluation.status == INTERRUPTED:
                        return  # the time ran out while measuring it
                    taken[(current.evaluation.config_key, step.evaluation.config_key)] = step
                if holds_without(step, current, noise):
                    found = step
                    break
            if found is not None:
                break
        if found is None:
            return
        current = found


def minimize_winner(evaluator: Evaluator, space: FlagSpace, winner: Winner, sampling: Sampling,
                    report: Notes) -> Winner:
    """The validated winner less the options it can do without, as time allows."""
    results = evaluator.results
    noise = results.noise()
    check = next(o for o in reversed(results.outcomes("validate"))
                 if o.evaluation.config_key == winner.validated and beats_baseline(o, noise))
    minimize(evaluator, space, check, sampling, report)
    decision = results.decide()
    assert isinstance(decision, Winner)  # minimizing adds no search or validation result
    return decision
