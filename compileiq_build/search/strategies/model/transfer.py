"""The warm start: other targets' best configurations, measured first while they hold up here.

Up to TRANSFER_SEEDS of the faster configurations that other targets in the store measured,
best first, as long as they gain here at least half of what they gained there; while they do,
their rows inform the fit (at TRANSFER_WEIGHT, fit.py) as screening would, and screening is left
out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from compileiq_build.build.space import DEFAULT, Config, FlagSpace, config_key
from compileiq_build.search.strategies.base import Context, Trial
from compileiq_build.search.strategies.model.fit import INVALID_RATIO

TRANSFER_SEEDS = 4


def transfer_holds(transfer: Sequence[tuple[Config, Trial]],
               trials: Sequence[tuple[Config, Trial]]) -> bool | None:
    """Whether the other targets' faster configurations measured here gained here at least half
    of what they gained there (log ratios, on average); None before one was measured here."""
    there = {config_key(c): math.log(t.ratio) for c, t in transfer if t.faster and t.ratio}
    pairs = [(math.log(t.ratio) if t.ratio else math.log(INVALID_RATIO), there[config_key(c)])
             for c, t in trials if config_key(c) in there]
    if not pairs:
        return None
    return sum(h for h, _ in pairs) <= 0.5 * sum(t for _, t in pairs)


def expressible(space: FlagSpace, config: Mapping[str, str]) -> bool:
    """A configuration measured for another target that this space can express."""
    values = {d.key: (DEFAULT, *d.values) for d in space.dimensions}
    return all(k in values and v in values[k] for k, v in config.items())


def transfer_seed(context: Context, transfer: Sequence[tuple[Config, Trial]]) -> Config | None:
    """Other targets' best configurations first, while what was taken from them holds up."""
    if len(context.measured) >= TRANSFER_SEEDS or transfer_holds(transfer, context.measured) is False:
        return None
    ranked = sorted(((t.ratio, config_key(c), c) for c, t in transfer
                     if t.faster and t.ratio is not None and context.fresh(c)), key=lambda rkc: rkc[:2])
    for _, _, config in ranked:
        if not context.closed or config in context.choices():
            return config
    return None
