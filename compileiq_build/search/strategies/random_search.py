"""Random search: uniform samples of the space (or of the known candidates), without repeats."""

from __future__ import annotations

import random

from compileiq_build.build.space import DEFAULT
from compileiq_build.search.strategies.base import Context, Proposal, Stop


class RandomSearch:
    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def propose(self, context: Context) -> Proposal | Stop:
        rng = random.Random(f"{self.seed}:{len(context.history)}")
        if context.closed:
            if choices := context.choices():
                return Proposal(rng.choice(choices), "random")
            return Stop("every candidate was measured")
        space = context.space
        if len(context.tried) >= space.size:
            return Stop("every configuration of the space was measured")
        for _ in range(10_000):
            config = {d.key: rng.choice((DEFAULT, *d.values)) for d in space.dimensions}
            if context.fresh(config):
                return Proposal(config, "random")
        return Stop("no untried configuration found in 10,000 draws")
