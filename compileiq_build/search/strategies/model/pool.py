"""The untried configurations the model ranks, one per known machine code.

Where the space is small (POOL configurations at most) every configuration; else POOL random
draws, the best so far with one dimension changed and with pairs of changes, and every compiled
configuration.  Of one code, the configuration with the fewest options set stands for it: the
candidates of one code are one choice; one that differs from a tried configuration only in
passengers (values whose one-option move compiled to the baseline's code) is left out, and so is
one that sets a value whose one-option move was measured clearly slower (RULED_OUT beyond the
noise) or failed, while any other is left: what the measurements rule out is not measured again
in company (in the open evaluation the local step measured a value alone 47% slower, with two
helpful ones, at 1.47x).  Except in company of another value whose move changed the code's
register count, if its own did: ptxas allocates registers under both at once, and the loss
alone says nothing of the pair (live on the sample's gemm, H100: a register cap alone 3-30%
slower, with register-usage-level 0-3 the best known, 1.024-1.031x against 1.018x; in the H100
tables of benchmarks/corpus/dense_h100, such a value added to a measured configuration never
made it slower beyond the noise (1 faster, 24 alike), where any other did 31 times of 39).
"""

from __future__ import annotations

import itertools
import math
import random

from compileiq_build.build.space import BASELINE, DEFAULT, Config, config_key
from compileiq_build.search.strategies.base import Context
from compileiq_build.search.strategies.model.features import (
    best_config,
    changed_options,
    code_count,
    config_features,
    without_passengers,
)

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


def register_moves(context: Context) -> set[tuple[str, str]]:
    """(dimension, value) of the compiled one-option moves whose code has a register count other
    than the baseline's code."""
    base = code_count(context.baseline_features, "registers")
    if math.isnan(base):
        return set()
    default = context.space.default_config()
    moves = [(d.key, v) for d in context.space.dimensions for v in d.values]
    counts = [code_count(f, "registers")
              for f in config_features(context, [{**default, k: v} for k, v in moves])]
    return {kv for kv, n in zip(moves, counts, strict=True) if not math.isnan(n) and n != base}


def excluded(config: Config, ruled: set[tuple[str, str]], registers: set[tuple[str, str]]) -> bool:
    """Whether `config` sets a ruled-out value outside the company that excuses it: another
    dimension's value that changed the register count, where its own move did too."""
    values = set(config.items())
    return not all(kv in registers and any(o in registers and o[0] != kv[0] for o in values)
                   for kv in values & ruled)


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
    ruled = ruled_out(context, noise)
    registers = register_moves(context) if ruled else set()
    kept = [c for c in pool if not excluded(c, ruled, registers)]
    return kept or pool
