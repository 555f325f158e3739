"""Stage 3: strategies that propose the next configuration to measure.

A strategy sees the space and the history of measured configurations and
returns the next untried configuration, or None when it has nothing more to
propose.  Strategies hold no state of their own: the same history gives the
same proposal, so a resumed run continues where it stopped.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from compileiq_build.space import DEFAULT, FlagSpace

Config = dict[str, str]
BASELINE = "baseline"  # the key of the all-default configuration: the project's own flags


def config_key(config: Mapping[str, str]) -> str:
    """Canonical text of a configuration: its non-default settings, sorted."""
    parts = sorted(f"{k}={v}" for k, v in config.items() if v != DEFAULT)
    return " ".join(parts) if parts else BASELINE


@dataclass(frozen=True)
class Trial:
    """What a strategy needs to know of one measured configuration."""

    config: Config
    ratio: float | None  # geometric mean over workloads of candidate/baseline cost; None if invalid
    faster: bool  # significantly faster than the baseline on every workload
    spread: float | None = None  # relative half-width of its ratio's interval: what it could resolve


class Strategy(Protocol):
    name: str

    def propose(self, space: FlagSpace, history: Sequence[Trial]) -> Config | None: ...


def full_config(space: FlagSpace, partial: Mapping[str, str]) -> Config:
    """A stored (or partial) configuration with every dimension of `space` set."""
    config = space.default_config()
    config.update({k: v for k, v in partial.items() if k in config})
    return config


class Staged:
    """Defaults first, then one dimension at a time around the best configuration so far.

    Dimensions come in stage order (common to exotic).  After a dimension's
    values are measured, the incumbent moves to the best of them that was
    significantly faster than the baseline and better than the incumbent.
    Passes repeat until one changes nothing.
    """

    name = "staged"

    def propose(self, space: FlagSpace, history: Sequence[Trial]) -> Config | None:
        seen = {config_key(full_config(space, t.config)): t for t in history}
        incumbent = space.default_config()
        incumbent_ratio = 1.0
        while True:
            moved = False
            for dim in space.dimensions:
                best, best_ratio = None, incumbent_ratio
                for value in (DEFAULT, *dim.values):
                    if value == incumbent[dim.key]:
                        continue
                    config = {**incumbent, dim.key: value}
                    trial = seen.get(config_key(config))
                    if trial is None:
                        return config
                    if trial.faster and trial.ratio is not None and trial.ratio < best_ratio:
                        best, best_ratio = config, trial.ratio
                if best is not None:
                    incumbent, incumbent_ratio, moved = best, best_ratio, True
            if not moved:
                return None


class RandomSearch:
    """Uniform samples of the space, without repeats."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def propose(self, space: FlagSpace, history: Sequence[Trial]) -> Config | None:
        seen = {config_key(full_config(space, t.config)) for t in history} | {BASELINE}
        if len(seen) >= space.size:
            return None
        rng = random.Random(f"{self.seed}:{len(history)}")
        for _ in range(10_000):
            config = {d.key: rng.choice((DEFAULT, *d.values)) for d in space.dimensions}
            if config_key(config) not in seen:
                return config
        return None


class Exhaustive:
    """Every configuration, in order; for small spaces."""

    name = "exhaustive"

    def propose(self, space: FlagSpace, history: Sequence[Trial]) -> Config | None:
        seen = {config_key(full_config(space, t.config)) for t in history} | {BASELINE}
        keys = [d.key for d in space.dimensions]
        for values in itertools.product(*((DEFAULT, *d.values) for d in space.dimensions)):
            config = dict(zip(keys, values, strict=True))
            if config_key(config) not in seen:
                return config
        return None


STRATEGIES = ("model", "staged", "random", "exhaustive")


def make_strategy(name: str, seed: int = 0, prior: Sequence[Trial] = ()) -> Strategy:
    """`prior`: evaluations of other targets, which the model-guided search starts from."""
    if name == "model":
        from compileiq_build.model import ModelGuided  # LightGBM loads only when used

        return ModelGuided(seed, prior=prior)
    if name == "random":
        return RandomSearch(seed)
    return {"staged": Staged, "exhaustive": Exhaustive}[name]()
