"""Ship only the flags that matter: the validated winner less the options it can do without.

The winner's options are taken out one at a time, the most exotic first.  The configuration
with one option fewer is compiled: when its machine code is the winner's, the option is a
passenger and goes, at no GPU time.  Otherwise it is measured as validation measures, and the
smaller set replaces the winner when it is still faster than the baseline on every workload and
not slower than the winner beyond noise (`selection.holds_without`); then its own options are
tried in turn.  Each step is stored (phase `minimize`, with the configuration it reduces), so
`selection.decide` ships the result, `report` says what was left out and why, and a resumed run
repeats no step.
"""

from __future__ import annotations

from collections.abc import Callable

from compileiq_build.evaluate import Evaluator, Sampling
from compileiq_build.progress import Reporter
from compileiq_build.selection import Outcome, holds_without, outcomes
from compileiq_build.space import DEFAULT, FlagSpace, config_key


def minimize(evaluator: Evaluator, space: FlagSpace, check: Outcome, sampling: Sampling,
             halt: Callable[[], bool], report: Reporter) -> None:
    """Minimizing steps from the validated measurement `check`, until no option can go or `halt`."""
    name, arch = evaluator.target.name, evaluator.arch_keys
    taken = {(o.evaluation.parent, o.evaluation.config_key): o
             for o in outcomes(evaluator.store, name, arch, "minimize")}
    current = check
    while True:
        config = space.full_config(current.evaluation.config)
        # One option left: without it the baseline remains, which cannot be faster than itself.
        options = [d for d in reversed(space.dimensions) if config[d.key] != DEFAULT]
        for dim in options if len(options) > 1 else ():
            reduced = {**config, dim.key: DEFAULT}
            step = taken.get((current.evaluation.config_key, config_key(reduced)))
            if step is None:
                if halt():
                    return
                report.phase(f"minimizing {name}: without {dim.key}={config[dim.key]}")
                flags = space.flags(reduced)
                built = evaluator.build(flags, evaluator.workers[0], 0)
                step = evaluator.evaluate(reduced, flags, "minimize", "minimize", built,
                                          numerics=space.changes_numerics(reduced), sampling=sampling,
                                          reduced_from=current.evaluation)
            if holds_without(step, current):
                current = step
                break
        else:
            return
