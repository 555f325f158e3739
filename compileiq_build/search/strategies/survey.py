"""Survey: every one-option move away from the project's flags, then uniform samples.

Not a way to find a winner quickly: it maps a space evenly (every option's effect alone, then
how they combine at random), which is what a recorded table of a large space needs
(`benchmarks/search_replay.py` replays strategies on such tables).
"""

from __future__ import annotations

import random

from compileiq_build.build.space import DEFAULT, config_key
from compileiq_build.search.strategies.base import Context, Proposal, Stop


class Survey:
    name = "survey"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def propose(self, context: Context) -> Proposal | Stop:
        space = context.space
        for dim in space.dimensions:
            for value in dim.values:
                config = {**space.default_config(), dim.key: value}
                if config_key(config) not in context.tried:
                    return Proposal(config, "screen")
        # One fixed sequence per seed, skipping what was tried: a resumed run continues it.
        rng = random.Random(f"survey:{self.seed}")
        for _ in range(100_000):
            config = {d.key: rng.choice((DEFAULT, *d.values)) for d in space.dimensions}
            # Every configuration is compiled, even one of a code already measured: the table
            # records each configuration's code.
            if config_key(config) not in context.tried:
                return Proposal(config, "sample")
        return Stop("no untried configuration left in the sample")

