"""The untried configurations the model ranks, one per known machine code.

Where the space is small (POOL configurations at most) every configuration; else POOL random
draws, the best so far with one dimension changed and with pairs of changes, and every compiled
configuration.  Of one code, the configuration with the fewest options set stands for it: the
candidates of one code are one choice; one that differs from a tried configuration only in
passengers (values whose one-option move compiled to the baseline's code) is left out, and so is
one that sets a value whose one-option move was measured clearly slower (RULED_OUT beyond the
noise) or failed, while any other is left: what the measurements rule out is not measured again
in company (in the open evaluation the local step measured a value alone 47% slower, with two
helpful ones, at 1.47x).
"""

from __future__ import annotations

import itertools
import random

from compileiq_build.build.space import BASELINE, DEFAULT, Config, config_key
from compileiq_build.search.strategies.base import Context
from compileiq_build.search.strategies.model.features import best_config, changed_options, without_passengers

POOL = 4000
RULED_OUT = 0.02  # a one-option move this much slower (and 3x the noise) rules its value out


def ruled_out(context: Context, noise: float) -> set[tuple[str, str]]:
    """(dimension, value) of the one-option moves measured slower than the project's flags by
    more than RULED_OUT and three times `noise`, or failed (ratio None)."""
    default = context.space.default_config()
    limit = 1.0 + max(RULED_OUT, 3 * noise)
    return {(moved[0], config[moved[0]]) for config, trial in context.measured
            if len(moved := changed_options(config, default)) == 1
            and (trial.ratio is None or trial.ratio > limit)}


def candidate_pool(context: Context, rng: random.Random, noise: float) -> list[Config]:
    """Untried configurations to rank, one per known machine code."""
    space = context.space
    if context.closed:
        configs = context.choices()
    else:
        dims = space.dimensions
        choices = [(DEFAULT, *d.values) for d in dims]
        if space.size <= POOL:
            configs = [dict(zip((d.key for d in dims), values, strict=True))
                       for values in itertools.product(*choices)]
        else:
            configs = [{d.key: rng.choice(c) for d, c in zip(dims, choices, strict=True)}
                       for _ in range(POOL)]
            # Around the best so far: one dimension changed, and pairs of changes.
            incumbent = best_config(context)
            for d, values in zip(dims, choices, strict=True):
                configs += [{**incumbent, d.key: v} for v in values]
            for _ in range(POOL // 4):
                a, b = rng.sample(range(len(dims)), 2) if len(dims) > 1 else (0, 0)
                configs.append({**incumbent, dims[a].key: rng.choice(choices[a]),
                                dims[b].key: rng.choice(choices[b])})
            configs += [space.full_config(c.config) for c in context.known]
    unique: dict[str, Config] = {}
    codes = context.codes
    # A configuration that differs from one tried only in passengers (values whose move alone
    # left the baseline's code) is presumed of that one's code: live, 13 proposals in a row on a
    # gemm compiled to code measured before, each a compile, and ended the search.
    # The project's flags count as tried: a configuration of passengers alone is the baseline's
    # code (in the open evaluation the local step spent its one proposal for a new best of one
    # option on such a configuration, the best less its option, and never refined the best).
    tried = {BASELINE, *(config_key(without_passengers(context, space.full_config(t.config)))
                         for t in context.history)}
    for c in configs:
        key = config_key(c)
        if context.fresh(c) and config_key(without_passengers(context, c)) not in tried:
            # Of one code, the configuration with the fewest options set stands for it.
            label = codes.get(key) or key
            if label not in unique or len(changed_options(c, space.default_config())) < len(
                    changed_options(unique[label], space.default_config())):
                unique[label] = c
    pool = list(unique.values())
    excluded = ruled_out(context, noise)
    kept = [c for c in pool if not any((k, v) in excluded for k, v in c.items())]
    return kept or pool
