"""When the model stops, and the noise its predicted gains are weighed against.

No gain left: even the optimistic bound (mean minus STOP_KAPPA standard deviations: proposals
explore with kappa 2, stopping takes the nearer bound, or a flat landscape would be measured
whole) of every untried configuration beats the best so far by less than the measured noise
(`resolved_noise`).  Before stopping it measures, along every dimension, one configuration that changes
only that dimension of the incumbent (the model may have missed an interaction).  That stop is
for a search that found nothing faster than the project's flags beyond the noise: once it holds
such a winner it spends its budget (lowest bound first), as near the best the model's confidence
is not evidence; the last fraction of a percent lies in interactions that a few measurements of
other codes do not show.  And it stops after FREE_STREAK proposals in a row (of its phases after
screening) compiled to machine code measured before: where most options leave the code as it is,
the bound keeps drawing it to configurations not compiled yet, the same code again, a compile
each.  The measurements behind both rules: benchmarks/results/search/README.md (design notes).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import numpy as np

from compileiq_build.build.space import Config
from compileiq_build.search.strategies.base import Context, Proposal, Stop, Trial
from compileiq_build.search.strategies.model.features import changed_options

# Standard deviations of the optimistic bound that the stop rule weighs (module docstring).
STOP_KAPPA = 1.0
FREE_STREAK = 10  # proposals in a row of measured code (module docstring): a budget evaluation's compiles
MODEL_PHASES = ("combine", "register", "local", "model")  # the phases after screening


def resolved_noise(measured: Sequence[tuple[Config, Trial]], assumed: float) -> tuple[float, bool]:
    """The gain a measurement resolves: the median half-width of the measured intervals, or
    the `assumed` noise before any (and in replays, which have none); whether measured."""
    spreads = [t.spread for _, t in measured if t.spread is not None and math.isfinite(t.spread)]
    return (max(statistics.median(spreads), 1e-4), True) if spreads else (assumed, False)


def measured_repeats(context: Context) -> list[tuple[Trial, bool]]:
    """The measured trials in the order taken, each with whether it compiled to machine code
    measured before it (or the baseline's): a repeat found nothing new."""
    seen, out = {context.baseline_code} - {""}, []
    for t in context.history:
        if not t.pending:
            out.append((t, bool(t.code) and t.code in seen))
            seen.add(t.code)
    return out


def free_streak(context: Context, phases: Sequence[str] = MODEL_PHASES) -> int:
    """How many of the last measured proposals of `phases` (by default the model's phases after
    screening), in a row, compiled to machine code measured before them (or the baseline's)."""
    streak = 0
    for t, repeat in measured_repeats(context):
        streak = streak + 1 if repeat and t.phase in phases else 0
    return streak


def _unchecked_neighbour(incumbent: Config, measured: Sequence[tuple[Config, Trial]],
                         pool: Sequence[Config], bound: np.ndarray) -> int | None:
    """The most promising untried configuration (index into `pool`) that differs from the
    incumbent in one dimension along which no neighbour of it was measured yet."""
    checked = {d[0] for c, _ in measured if len(d := changed_options(c, incumbent)) == 1}
    candidates = [i for i, c in enumerate(pool) if np.isfinite(bound[i])
                  and len(d := changed_options(c, incumbent)) == 1 and d[0] not in checked]
    return min(candidates, key=lambda i: bound[i]) if candidates else None


def no_gain_left(context: Context, incumbent: Config, pool: Sequence[Config], mean: np.ndarray,
                  std: np.ndarray, bound: np.ndarray, best: float, assumed_noise: float
                  ) -> Proposal | Stop | None:
    """Where no untried configuration's optimistic bound beats the best so far beyond the noise:
    an unchecked neighbour of the incumbent, else Stop unless a winner beyond the noise holds
    and a budget remains to spend; None where the search goes on by the bound."""
    noise, measured_noise = resolved_noise(context.measured, assumed_noise)
    if not (mean - STOP_KAPPA * std).min() > math.log(best) + math.log1p(-noise):
        return None
    if (check := _unchecked_neighbour(incumbent, context.measured, pool, bound)) is not None:
        return Proposal(pool[check], "model")
    # A winner beyond the noise: the rest of the budget goes to the bound (module docstring).
    if context.budget is None or best > 1.0 - noise:
        what = "the measured noise" if measured_noise else "the assumed noise"
        return Stop(f"the model predicts that no untried configuration beats the best so far "
                    f"({1 / best:.3f}x) by more than {what} ({100 * noise:.2f}%)")
    return None
