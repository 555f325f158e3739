"""Staged: one dimension at a time around the best configuration so far."""

from __future__ import annotations

from compileiq_build.build.space import DEFAULT
from compileiq_build.search.strategies.base import Context, Proposal, Stop


class Staged:
    """Dimensions come in stage order (common to exotic).  After a dimension's values are
    measured, the incumbent moves to the best of them that was significantly faster than the
    baseline and better than the incumbent.  Passes repeat until one changes nothing.  A
    configuration whose machine code was measured is known without measuring; in a closed
    context, one that is not known is skipped."""

    name = "staged"

    def propose(self, context: Context) -> Proposal | Stop:
        space = context.space
        available = {repr(sorted(c.items())) for c in context.choices()} if context.closed else None
        incumbent = space.default_config()
        incumbent_ratio = 1.0
        while True:
            moved = False
            for dim in space.dimensions:
                best, best_ratio = None, incumbent_ratio
                for value in (DEFAULT, *dim.values):
                    if value == incumbent[dim.key]:
                        continue
                    config = {**incumbent, dim.key: value}
                    trial = context.outcome(config)
                    if trial is None:
                        key = repr(sorted(config.items()))
                        # pending, or of a code pending: its outcome is coming
                        if not context.fresh(config) or (available is not None and key not in available):
                            continue
                        return Proposal(config, "staged")
                    if trial.faster and trial.ratio is not None and trial.ratio < best_ratio:
                        best, best_ratio = config, trial.ratio
                if best is not None:
                    incumbent, incumbent_ratio, moved = best, best_ratio, True
            if not moved:
                return Stop("every value of every dimension was tried around the best configuration")
