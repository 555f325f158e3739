"""Stage 3: strategies that propose the next configuration to measure, one module each.

Every strategy implements `Strategy.propose(Context) -> Proposal | Stop` (`base.py`); the
registry below builds one by name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from compileiq_build.search.strategies.base import Candidate, Context, Proposal, Stop, Strategy, Trial
from compileiq_build.search.strategies.exhaustive import Exhaustive
from compileiq_build.search.strategies.random_search import RandomSearch
from compileiq_build.search.strategies.staged import Staged
from compileiq_build.search.strategies.survey import Survey

if TYPE_CHECKING:
    from compileiq_build.search.prior import Prior

# One factory signature for every strategy: (seed, other targets' trials, prior) -> Strategy.
Factory = Callable[[int, Sequence[Trial], "Prior | None"], Strategy]


def _model(seed: int, transfer: Sequence[Trial], prior: Prior | None) -> Strategy:
    from compileiq_build.search.strategies.model import ModelGuided  # numpy loads only when used

    return ModelGuided(seed, transfer=transfer, prior=prior)


REGISTRY: dict[str, Factory] = {
    "model": _model,
    "staged": lambda seed, transfer, prior: Staged(),
    "random": lambda seed, transfer, prior: RandomSearch(seed),
    "exhaustive": lambda seed, transfer, prior: Exhaustive(),
    "survey": lambda seed, transfer, prior: Survey(seed),
}

__all__ = ["REGISTRY", "Candidate", "Context", "Exhaustive", "Factory", "Proposal", "RandomSearch", "Staged",
           "Stop", "Strategy", "Survey", "Trial", "make_strategy"]


def make_strategy(name: str, seed: int = 0, transfer: Sequence[Trial] = (), prior: Prior | None = None
                  ) -> Strategy:
    """`transfer`: evaluations of other targets, which the model-guided search starts from;
    `prior`: the model learned across kernels (prior.py) that it takes as the mean of its fit."""
    if name not in REGISTRY:
        raise ValueError(f"unknown strategy {name!r}: one of {', '.join(REGISTRY)}")
    return REGISTRY[name](seed, transfer, prior)
