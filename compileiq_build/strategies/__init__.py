"""Stage 3: strategies that propose the next configuration to measure, one module each.

Every strategy implements `Strategy.propose(Context) -> Proposal | Stop` (`base.py`); the
registry below builds one by name.
"""

from __future__ import annotations

from collections.abc import Sequence

from compileiq_build.strategies.base import Candidate, Context, Proposal, Stop, Strategy, Trial
from compileiq_build.strategies.exhaustive import Exhaustive
from compileiq_build.strategies.random_search import RandomSearch
from compileiq_build.strategies.staged import Staged
from compileiq_build.strategies.survey import Survey

STRATEGIES = ("model", "staged", "random", "exhaustive", "survey")

__all__ = ["STRATEGIES", "Candidate", "Context", "Exhaustive", "Proposal", "RandomSearch", "Staged", "Stop",
           "Strategy", "Survey", "Trial", "make_strategy"]


def make_strategy(name: str, seed: int = 0, prior: Sequence[Trial] = ()) -> Strategy:
    """`prior`: evaluations of other targets, which the model-guided search starts from."""
    if name == "model":
        from compileiq_build.strategies.model import ModelGuided  # numpy loads only when used

        return ModelGuided(seed, prior=prior)
    if name == "random":
        return RandomSearch(seed)
    if name == "survey":
        return Survey(seed)
    return {"staged": Staged, "exhaustive": Exhaustive}[name]()
