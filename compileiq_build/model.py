"""The model-guided strategy: LightGBM fitted on every evaluation so far steers the search.

After a small seed set (random configurations), each proposal fits a bagged
ensemble of small LightGBM models to log(cost ratio) over the flag encodings
(one categorical column per dimension) plus any numeric compile-time features
(registers, spills, ... from the compiler, known without a GPU), predicts every
untried configuration (all of them, or a large sample plus the incumbent's
neighbours in big spaces), and measures the one with the lowest lower confidence
bound (ensemble mean minus `kappa` standard deviations).  The spread of the
bagged models is the exploration: a configuration the models disagree on is
worth measuring even when its mean prediction is not the best.

Every other proposal goes to a value of a dimension never measured yet, the best such
configuration by the bound: the models cannot predict a value they never saw.  Once
every value was measured, it stops early when even the optimistic bound of every
untried configuration beats the incumbent by less than the measured noise (the median
half-width of the measured ratios' intervals), and says so; but first it measures, along
every dimension, one configuration that changes only that dimension of the incumbent.

Warm start: evaluations of other targets in the store (`prior`) come in twice.  Their best
faster configurations are the first seeds (up to TRANSFER_SEEDS), as long as those gain
here at least half of what they gained there.  If they do, the other targets' evaluations
also become rows of every fit, at half weight and marked as borrowed (the trees may learn
how this target differs).  Otherwise the targets differ, and borrowed rows would mislead
the fit: gemm and nbody want opposite register limits.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from compileiq_build.search import BASELINE, Config, Trial, config_key, full_config
from compileiq_build.space import DEFAULT, FlagSpace

# Cost ratio assumed for a configuration that failed to build or run: it must look bad,
# but not so bad that it swamps what the models learn from the valid ones.
INVALID_RATIO = 2.0
POOL = 4000
# Evaluations of other targets (warm start) count this much in the fit: they inform, and the
# target's own measurements outweigh them.
PRIOR_WEIGHT = 0.5
TRANSFER_SEEDS = 4  # seeds taken from other targets' best configurations

Features = Callable[[Config], Mapping[str, float]]


def _transfers(prior: Sequence[tuple[Config, Trial]], trials: Sequence[tuple[Config, Trial]]) -> bool | None:
    """Whether the other targets' faster configurations measured here gained here at least half
    of what they gained there (log ratios, on average); None before one was measured here."""
    there = {config_key(c): math.log(t.ratio) for c, t in prior if t.faster and t.ratio}
    pairs = [(math.log(t.ratio) if t.ratio else math.log(INVALID_RATIO), there[config_key(c)])
             for c, t in trials if config_key(c) in there]
    if not pairs:
        return None
    return sum(h for h, _ in pairs) <= 0.5 * sum(t for _, t in pairs)


def _unchecked_neighbour(incumbent: Config, measured: Sequence[Config], pool: Sequence[Config],
                         bound: np.ndarray) -> int | None:
    """The most promising untried configuration (index into `pool`) that differs from the incumbent
    in one dimension along which no neighbour of the incumbent was measured yet; None once every
    dimension was checked."""
    def changed(c: Config) -> list[str]:
        return [k for k, v in c.items() if incumbent.get(k) != v]

    checked = {d[0] for c in measured if len(d := changed(c)) == 1}
    candidates = [i for i, c in enumerate(pool) if len(d := changed(c)) == 1 and d[0] not in checked]
    return min(candidates, key=lambda i: bound[i]) if candidates else None


def _fits(space: FlagSpace, config: Mapping[str, str]) -> bool:
    """A configuration measured for another target that this space can express."""
    values = {d.key: (DEFAULT, *d.values) for d in space.dimensions}
    return all(k in values and v in values[k] for k, v in config.items())


class ModelGuided:
    name = "model"

    def __init__(self, seed: int = 0, seeds: int = 8, ensemble: int = 8, kappa: float = 2.0,
                 noise: float = 0.002, features: Features | None = None, prior: Sequence[Trial] = ()) -> None:
        self.seed = seed
        self.prior = prior  # evaluations of other targets: the first seeds, and rows of the fit
        self.seeds = seeds
        self.ensemble = ensemble
        self.kappa = kappa
        self.noise = noise  # relative: gains predicted below this are not worth measuring (until measured)
        self.features = features
        self.stop_reason = ""

    # -- candidates -------------------------------------------------------------
    def _pool(self, space: FlagSpace, seen: set[str], incumbent: Config, rng: random.Random) -> list[Config]:
        dims = space.dimensions
        choices = [(DEFAULT, *d.values) for d in dims]
        if space.size <= POOL:
            configs = [dict(zip((d.key for d in dims), values, strict=True))
                       for values in itertools.product(*choices)]
        else:
            configs = [{d.key: rng.choice(c) for d, c in zip(dims, choices, strict=True)}
                       for _ in range(POOL)]
            # Neighbours of the incumbent: one dimension changed, and pairs of changes.
            for d, c in zip(dims, choices, strict=True):
                configs += [{**incumbent, d.key: v} for v in c]
            for _ in range(POOL // 4):
                a, b = rng.sample(range(len(dims)), 2) if len(dims) > 1 else (0, 0)
                configs.append({**incumbent, dims[a].key: rng.choice(choices[a]),
                                dims[b].key: rng.choice(choices[b])})
        unique: dict[str, Config] = {}
        for c in configs:
            key = config_key(c)
            if key not in seen and key != BASELINE:
                unique.setdefault(key, c)
        return list(unique.values())

    def _frame(self, space: FlagSpace, configs: Sequence[Config], borrowed: Sequence[bool]) -> pd.DataFrame:
        columns: dict[str, object] = {}
        if self.prior:  # which rows come from other targets: the trees may learn their offset
            columns["borrowed"] = pd.Categorical([int(b) for b in borrowed], categories=[0, 1])
        for i, d in enumerate(space.dimensions):
            categories = [DEFAULT, *d.values]
            columns[f"d{i}"] = pd.Categorical([c.get(d.key, DEFAULT) for c in configs], categories=categories)
        if self.features:
            rows = [self.features(c) for c in configs]
            for name in sorted({k for r in rows for k in r}):
                columns[f"f_{len(columns)}"] = [float(r.get(name, math.nan)) for r in rows]
        return pd.DataFrame(columns)

    # -- the strategy ---------------------------------------------------------------
    def propose(self, space: FlagSpace, history: Sequence[Trial]) -> Config | None:
        self.stop_reason = ""
        rng = random.Random(f"{self.seed}:{len(history)}")
        trials = [(full_config(space, t.config), t) for t in history]
        seen = {config_key(c) for c, _ in trials}
        ratios = [t.ratio for _, t in trials if t.ratio is not None]
        best = min([1.0, *ratios])
        incumbent = min(((c, t.ratio) for c, t in trials if t.ratio is not None),
                        key=lambda ct: ct[1], default=(space.default_config(), 1.0))[0]
        pool = self._pool(space, seen, incumbent, rng)
        if not pool:
            self.stop_reason = "every configuration of the space was measured"
            return None
        prior = [(full_config(space, t.config), t) for t in self.prior if _fits(space, t.config)]
        if len(trials) < self.seeds:
            # Warm start: what was faster for other targets comes first, for half the seeds at most.
            transfer = sorted(((t.ratio, config_key(c), c) for c, t in prior
                               if t.faster and t.ratio is not None
                               and config_key(c) not in seen | {BASELINE}),
                              key=lambda rkc: rkc[:2])
            # ... as long as what was taken from them holds up here.
            if transfer and len(trials) < TRANSFER_SEEDS and _transfers(prior, trials) is not False:
                return transfer[0][2]
            return rng.choice(pool)
        if not _transfers(prior, trials):
            prior = []
        # The baseline is a measured point too: ratio 1 by definition.
        train = [space.default_config()] + [c for c, _ in trials] + [c for c, _ in prior]
        ratios_all = [1.0] + [t.ratio for _, t in trials] + [t.ratio for _, t in prior]
        # Clipped at the invalid ratio: a configuration 28 times slower (-maxrregcount=32 on a
        # GEMM) is simply bad, and left unclipped it would dominate the squared loss.
        target = np.log([min(r, INVALID_RATIO) if r is not None else INVALID_RATIO for r in ratios_all])
        borrowed = [False] * (1 + len(trials)) + [True] * len(prior)
        predictions = self._ensemble(space, train, target, borrowed, pool, rng)
        mean, std = predictions.mean(axis=0), predictions.std(axis=0)
        bound = mean - self.kappa * std
        # The models know nothing of a value never measured (trees cannot extrapolate to it),
        # and their spread does not show it: every other proposal covers such a value, and
        # the search does not stop before every value was measured once.
        measured = {(k, v) for c, _ in trials for k, v in c.items()}
        unseen = {(d.key, v) for d in space.dimensions for v in d.values} - measured
        covering = [i for i, c in enumerate(pool) if any((k, v) in unseen for k, v in c.items())]
        if covering and (len(trials) - self.seeds) % 2 == 0:
            return pool[min(covering, key=lambda i: bound[i])]
        choice = int(np.argmin(bound))
        noise, measured_noise = self._noise(trials)
        if not unseen and bound[choice] > math.log(best) + math.log1p(-noise):
            # Before stopping, the incumbent is checked along every dimension: the trees may
            # have missed an interaction (nbody gains 1.6% from -maxrregcount=32 at the default
            # -O, and nothing from it at -O1).
            if (check := _unchecked_neighbour(incumbent, [c for c, _ in trials], pool, bound)) is not None:
                return pool[check]
            what = "the measured noise" if measured_noise else "the assumed noise"
            self.stop_reason = (f"the model predicts that no untried configuration beats the best so far "
                                f"({1 / best:.3f}x) by more than {what} ({100 * noise:.2f}%)")
            return None
        return pool[choice]

    def _noise(self, trials: Sequence[tuple[Config, Trial]]) -> tuple[float, bool]:
        """The gain a measurement resolves: the median half-width of the measured intervals, or
        the assumed `noise` before any (and in replays, which have none); whether measured."""
        spreads = [t.spread for _, t in trials if t.spread is not None and math.isfinite(t.spread)]
        return (statistics.median(spreads), True) if spreads else (self.noise, False)

    def _ensemble(self, space: FlagSpace, train: list[Config], target: np.ndarray, borrowed: list[bool],
                  pool: list[Config], rng: random.Random) -> np.ndarray:
        import lightgbm

        x_train = self._frame(space, train, borrowed)
        x_pool = self._frame(space, pool, [False] * len(pool))
        weight = np.array([PRIOR_WEIGHT if b else 1.0 for b in borrowed])
        n = len(train)
        params = {"objective": "regression", "learning_rate": 0.15, "num_leaves": 8,
                  "min_data_in_leaf": 2, "min_data_in_bin": 1, "min_data_per_group": 1,
                  "cat_smooth": 1.0, "cat_l2": 1.0, "max_cat_to_onehot": 16, "lambda_l2": 0.1,
                  "feature_fraction": 0.8, "verbose": -1, "num_threads": 1,
                  "deterministic": True, "force_row_wise": True}
        out = []
        for b in range(self.ensemble):
            rows = [rng.randrange(n) for _ in range(n)]  # bootstrap: the bag's view of the data
            rows[0] = 0  # every bag knows the baseline
            data = lightgbm.Dataset(x_train.iloc[rows], target[rows], weight=weight[rows],
                                    free_raw_data=False)
            booster = lightgbm.train({**params, "seed": self.seed * 100 + b}, data, num_boost_round=40)
            out.append(booster.predict(x_pool))
        return np.vstack(out)
