"""The phases on the project's own flags before the model ranks: screening, or a prior's guesses.

- screen: one-option moves away from the project's flags, in passes over the dimensions in stage
  order (common to exotic), each pass taking every dimension's next value; a dimension's values
  come extremes first (0 and 10 before 4), except a count of the code's (a register cap): nearest
  the project's own code's first.  A move whose machine code was measured is known without
  measuring.  Screening spends at most SCREEN_SHARE of the budget, IDLE_SCREEN_SHARE while no
  move beat the project's flags beyond the noise (the model would have nothing to exploit):
  what it leaves unmeasured, the model ranks.
- prior (with a prior learned across kernels, prior.py, in place of the first screening moves):
  the untried one-option move of the best predicted mean, while it is predicted to beat the best
  so far beyond the noise, until PRIOR_TRIES guesses of new code gained nothing beyond the noise
  (guesses in flight counting as such until measured) or PRIOR_TRIES in a row compiled to code
  measured before.  One option at a time: out of project, the prior's predictions for several
  options at once were its worst (6x the error of one-option rows), and a guess of six options
  that measured 0.98x live told the search nothing about which option cost it.  While it
  guesses, the one-option moves are compiled ahead, best predicted first, so that their code
  informs it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from compileiq_build.build.space import Config, Dimension, FlagSpace, config_key
from compileiq_build.search.strategies.base import Context
from compileiq_build.search.strategies.model.features import best_ratio, code_count
from compileiq_build.search.strategies.model.fit import predict, prior_informs
from compileiq_build.search.strategies.model.spills import spilling_mask
from compileiq_build.search.strategies.model.stop import free_streak, measured_repeats, resolved_noise

if TYPE_CHECKING:
    from compileiq_build.search.prior import Prior

SCREEN_SHARE = 0.5
# While no move measured beats the project's flags beyond the noise, the model has nothing to
# exploit: screening goes on, up to this share of the budget.
IDLE_SCREEN_SHARE = 0.8
PRIOR_TRIES = 2  # guesses of the prior that must gain, or screening takes over


def spread_order(dim: Dimension) -> list[str]:
    """A dimension's values, extremes first, then each time the value farthest from those taken
    (numeric values), or as listed."""
    try:
        numbers = [float(v) for v in dim.values]
    except ValueError:
        return list(dim.values)
    order = [int(np.argmin(numbers)), int(np.argmax(numbers))] if len(numbers) > 1 else [0]
    while len(order) < len(numbers):
        gaps = [min(abs(x - numbers[j]) for j in order) if i not in order else -1.0
                for i, x in enumerate(numbers)]
        order.append(int(np.argmax(gaps)))
    return [dim.values[i] for i in dict.fromkeys(order)]


def value_order(dim: Dimension, baseline: Mapping[str, float]) -> list[str]:
    """A dimension's values in screening order.  Those of a count of the code's (`anchor`: a
    register cap) come nearest the project's own code's count first, by ratio, ties to the
    larger: far below it the code spills, far above it the cap changes little.  On 8 of the
    corpus's 9 kernels where a cap gained >= 0.5%, the best was among the first two caps so
    ordered that changed the code (3 of 9 extremes first: benchmarks/cap_order.py), and live
    the best caps of libor (64, at 32 registers) and miniBUDE (128, at 96) come first.  Other
    dimensions spread (`spread_order`)."""
    count = code_count(baseline, dim.anchor) if dim.anchor else math.nan
    if not count > 0:
        return spread_order(dim)
    return sorted(dim.values, key=lambda v: (abs(math.log(float(v) / count)), -float(v)))


def screening_moves(space: FlagSpace, baseline: Mapping[str, float]) -> list[Config]:
    """One-option moves in passes over the dimensions (stage order), each taking the next value
    (`value_order`, given the project's own code's features)."""
    orders = [value_order(d, baseline) for d in space.dimensions]
    moves = []
    for step in range(max((len(o) for o in orders), default=0)):
        for dim, order in zip(space.dimensions, orders, strict=True):
            if step < len(order):
                moves.append({**space.default_config(), dim.key: order[step]})
    return moves


def screening_open(context: Context, noise: float) -> bool:
    """Screening may still spend evaluations: SCREEN_SHARE of the budget, IDLE_SCREEN_SHARE while
    nothing measured beats the project's flags by more than `noise` (the combinations measured
    during screening not counted: local.py's `early_combination`)."""
    if context.budget is None:
        return True
    screened = replace(context, history=[t for t in context.history if t.phase != "combine"]).spent
    share = SCREEN_SHARE if best_ratio(context) < 1.0 - noise else IDLE_SCREEN_SHARE
    return screened < math.ceil(share * context.budget)


def screen_move(context: Context, noise: float) -> Config | None:
    if not screening_open(context, noise):
        return None
    available = context.choices() if context.closed else None
    for move in screening_moves(context.space, context.baseline_features):
        if context.fresh(move) and (available is None or move in available):
            return move
    return None


def prior_guess(context: Context, prior: Prior | None, assumed_noise: float) -> Config | None:
    """While screening with a prior: the untried one-option move the prior (scaled and corrected
    by what was measured here) predicts to beat the best so far by the most, while it predicts
    one to beat it beyond the noise."""
    noise, _ = resolved_noise(context.measured, assumed_noise)
    # A guess found something only as a code not measured before.
    guessed = [t for t, repeat in measured_repeats(context) if t.phase == "prior" and not repeat]
    # Guesses in flight (proposed while the GPU measures others) count as gaining nothing until
    # measured, so that no more than PRIOR_TRIES are out before one has shown a gain.
    in_flight = sum(t.pending and t.phase == "prior" for t in context.history)
    # Two new codes that gained nothing beyond the noise: the prior does not know this code.
    if (len(guessed) + in_flight >= PRIOR_TRIES
            and not any(t.ratio and t.ratio < 1 - noise for t in guessed)):
        return None
    # Two guesses in a row of code measured before: its guesses vary options that leave this
    # code as it is, a compile each, and screening takes over.
    if free_streak(context, ("prior",)) >= PRIOR_TRIES:
        return None
    if not screening_open(context, noise):
        return None
    moves = [m for m in screening_moves(context.space, context.baseline_features) if context.fresh(m)]
    if context.closed:
        available = {config_key(c) for c in context.choices()}
        moves = [m for m in moves if config_key(m) in available]
    if not moves:
        return None
    mean, _ = predict(context, [], moves, prior, assumed_noise)
    mean = np.where(spilling_mask(context, moves), np.inf, mean)
    choice = int(np.argmin(mean))
    # Near the best so far the prediction is the best's own: no guess there finds new code.
    return moves[choice] if mean[choice] < math.log(best_ratio(context)) + math.log1p(-noise) else None


def screening_order(context: Context, prior: Prior | None, assumed_noise: float) -> list[Config]:
    """The one-option moves in screening order; with a prior, best predicted first."""
    moves = screening_moves(context.space, context.baseline_features)
    if not prior_informs(prior, context):
        return moves
    mean, _ = predict(context, [], moves, prior, assumed_noise)
    return [moves[i] for i in np.argsort(mean, kind="stable")]
