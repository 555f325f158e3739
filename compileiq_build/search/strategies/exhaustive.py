"""Exhaustive: every configuration in order (or every known candidate); for small spaces."""

from __future__ import annotations

import itertools

from compileiq_build.build.space import DEFAULT
from compileiq_build.search.strategies.base import Context, Proposal, Stop


class Exhaustive:
    name = "exhaustive"

    def propose(self, context: Context) -> Proposal | Stop:
        if context.closed:
            choices = context.choices()
            return Proposal(choices[0], "exhaustive") if choices else Stop("every candidate was measured")
        dims = context.space.dimensions
        keys = [d.key for d in dims]
        for values in itertools.product(*((DEFAULT, *d.values) for d in dims)):
            config = dict(zip(keys, values, strict=True))
            if context.fresh(config):
                return Proposal(config, "exhaustive")
        return Stop("every configuration of the space was measured")
