"""Stage 3: strategies that propose the next configuration to measure, one module each.

Every strategy implements `Strategy.propose(Context) -> Proposal | Stop` (`base.py`); the
registry below builds one by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from compileiq_build.strategies.base import Candidate, Context, Proposal, Stop, Strategy, Trial
from compileiq_build.strategies.exhaustive import Exhaustive
from compileiq_build.strategies.random_search import RandomSearch
from compileiq_build.strategies.staged import Staged
from compileiq_build.strategies.survey import Survey

if TYPE_CHECKING:
    from compileiq_build.prior import Prior

STRATEGIES = ("model", "staged", "random", "exhaustive", "survey")

__all__ = ["STRATEGIES", "Candidate", "Context", "Exhaustive", "Proposal", "RandomSearch", "Staged", "Stop",
           "Strategy", "Survey", "Trial", "make_strategy"]


def make_strategy(name: str, seed: int = 0, transfer: Sequence[Trial] = (), prior: Prior | None = None
                  ) -> Strategy:
    """`transfer`: evaluations of other targets, which the model-guided search starts from;
    `prior`: the model learned across kernels (prior.py) that it takes as the mean of its fit."""
    if name == "model":
        from compileiq_build.strategies.model import ModelGuided  # numpy loads only when used

        return ModelGuided(seed, transfer=transfer, prior=prior)
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}: one of {', '.join(STRATEGIES)}")
    if name == "random":
        return RandomSearch(seed)
    if name == "survey":
        return Survey(seed)
    return Staged() if name == "staged" else Exhaustive()
