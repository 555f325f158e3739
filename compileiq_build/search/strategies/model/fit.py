"""The model of log(cost ratio): the mean and spread it predicts for untried configurations.

Two parts.  Additive effects of every option value (Bayesian ridge regression on one-hot values:
a value never measured keeps its prior spread, so the bound explores it where it could pay), and
a Gaussian process fitted to what the effects miss (interactions), over the options and the
compile-time features of each configuration's code, where known: configurations of similar code
are predicted alike.  Configurations whose code was measured enter the fit with that code's ratio.
With a prior learned across kernels (prior.py), its predictions for the one-option moves, summed
over a configuration's moves, are the mean, times a scale fitted here (1 a priori, spread
PRIOR_SCALE_SD): where the measurements contradict it, the scale falls towards 0 and the search
goes on as without it.  How the process compared with a bagged LightGBM ensemble in its place:
benchmarks/results/search/large/README.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from compileiq_build.build.space import DEFAULT, Config, config_key
from compileiq_build.search.strategies.base import Context, Trial
from compileiq_build.search.strategies.model.features import config_features, one_hot, standardized_features
from compileiq_build.search.strategies.model.stop import resolved_noise

if TYPE_CHECKING:
    from compileiq_build.search.prior import Prior

# Cost ratio assumed for a configuration that failed to build or run, and the clip of measured
# ones: 10% slower than the project's flags is simply bad, and how much worse says nothing about
# where the optimum lies.  Left unclipped, such ratios set the Gaussian process's amplitude and
# hide the percent-level differences searched for (benchmarks/results/search/synthetic/README.md).
INVALID_RATIO = 1.1
# Prior spread of one option value's effect on log(cost ratio): a few percent.
EFFECT_PRIOR = 0.05
# Evaluations of other targets (warm start) count this much in the fit.
TRANSFER_WEIGHT = 0.5
# Prior spread of the scale of the learned prior's predictions, around 1 (prior.py; `predict`).
PRIOR_SCALE_SD = 0.5


def prior_informs(prior: Prior | None, context: Context) -> bool:
    """Whether the prior informs this search: one is loaded and the baseline's code is known."""
    return prior is not None and bool(context.baseline_features)


def prior_offset(prior: Prior | None, context: Context, configs: Sequence[Config]) -> np.ndarray:
    """The prior's log(cost ratio) of each configuration (0 without one): the sum of its
    predictions for the configuration's one-option moves, each from the move's code's features
    where compiled, else from its option and the baseline's code, and shrunk by its sd.

    Additive, as the effects it offsets: a prediction per whole configuration spoke for some
    (one option) and abstained on their neighbours (several), so the effect fitted to correct it
    where it spoke carried to the neighbours uncorrected (open evaluation: `-Xptxas -O1`,
    predicted and measured slower alone, then proposed three times with other options as a gain).
    """
    if prior is None or not context.baseline_features:  # as `prior_informs`
        return np.zeros(len(configs))
    moved = [[(k, v) for k, v in c.items() if v != DEFAULT] for c in configs]
    moves = list(dict.fromkeys(m for c in moved for m in c))
    if not moves:
        return np.zeros(len(configs))
    base = context.space.default_config()
    singles = [{**base, k: v} for k, v in moves]
    features = config_features(context, singles, totals=False)
    mean, sd = prior.predict_interval(singles, features, context.baseline_features)
    # Its own uncertainty: each prediction shrunk towards no effect by its signal-to-noise,
    # mean^2 / (mean^2 + sd^2) (where it abstains, the mean is 0 already; a confident one keeps
    # 80% or more), rather than one scale for every configuration.
    effect = dict(zip(moves, mean * mean**2 / np.maximum(mean**2 + sd**2, 1e-12), strict=True))
    return np.array([sum(effect[m] for m in c) for c in moved], dtype=float)


def _data(context: Context, transfer: Sequence[tuple[Config, Trial]]
          ) -> tuple[list[Config], np.ndarray, np.ndarray]:
    """Rows of the fit: the baseline, the measured configurations, the known configurations of
    a measured code (with that code's ratio), and other targets' rows at TRANSFER_WEIGHT."""
    space = context.space
    rows: list[tuple[Config, float | None, float]] = [(space.default_config(), 1.0, 1.0)]
    rows += [(c, t.ratio, 1.0) for c, t in context.measured]
    seen = {config_key(c) for c, _, _ in rows}
    for cand in context.known:
        config = space.full_config(cand.config)
        if config_key(config) not in seen and cand.code in context.by_code:
            rows.append((config, context.by_code[cand.code].ratio, 1.0))
            seen.add(config_key(config))
    rows += [(c, t.ratio, TRANSFER_WEIGHT) for c, t in transfer]
    target = np.log([min(r, INVALID_RATIO) if r is not None else INVALID_RATIO for _, r, _ in rows])
    return [c for c, _, _ in rows], target, np.array([w for _, _, w in rows])


def predict(context: Context, transfer: Sequence[tuple[Config, Trial]], pool: list[Config],
             prior: Prior | None, assumed_noise: float) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of log(cost ratio) for every pool configuration."""
    train, target, weight = _data(context, transfer)
    noise, _ = resolved_noise(context.measured, assumed_noise)
    # The prior learned across kernels is the mean, times a scale fitted here (1 a priori): where
    # the measurements contradict it, the scale falls towards 0 and the search is as without it.
    offset_train, offset_pool = prior_offset(prior, context, train), prior_offset(prior, context, pool)
    target = target - offset_train
    x_train, x_pool = one_hot(context.space, train), one_hot(context.space, pool)
    spreads = np.full(x_train.shape[1], EFFECT_PRIOR)
    if transfer:  # an effect of its own for other targets' rows: the offset between the targets
        x_train = np.hstack([x_train, (weight < 1.0)[:, None].astype(float)])
        x_pool = np.hstack([x_pool, np.zeros((len(pool), 1))])
        spreads = np.append(spreads, EFFECT_PRIOR)
    if prior_informs(prior, context):
        x_train = np.hstack([x_train, offset_train[:, None]])
        x_pool = np.hstack([x_pool, offset_pool[:, None]])
        spreads = np.append(spreads, PRIOR_SCALE_SD)
    # Bayesian ridge: effects ~ N(0, EFFECT_PRIOR^2), measurements ~ N(effects, noise^2 / weight).
    precision = (x_train.T * weight) @ x_train / noise**2 + np.diag(spreads**-2.0)
    covariance = np.linalg.inv(precision)
    effects = covariance @ ((x_train.T * weight) @ target) / noise**2
    mean = x_pool @ effects
    var = np.einsum("ij,jk,ik->i", x_pool, covariance, x_pool)
    if len(train) >= 2:
        # What the additive effects miss (interactions), over the options and the code.
        # Its prior spread is that of the landscape measured so far (flat, and it stops): of the
        # measured ratios themselves where the prior's predictions, taken from them, spread them
        # wider.  A prior that mispredicts would otherwise grant its own errors to every
        # configuration far from those measured (live: an sd of 0.20 on a landscape of 0.03).
        spread = max(min(float(np.var(target)), float(np.var(target + offset_train))), noise**2)
        gp_mean, gp_var = _gp(context, train, target - x_train @ effects, weight, pool, noise, spread)
        mean, var = mean + gp_mean, var + gp_var
    return mean + offset_pool, np.sqrt(var)


def _gp(context: Context, train: list[Config], target: np.ndarray, weight: np.ndarray,
        pool: list[Config], noise: float, amplitude: float) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian-process regression over the options (one-hot) and the code's features
    (standardized): configurations of similar code are predicted alike."""
    configs = train + pool
    x = one_hot(context.space, configs)
    z = np.nan_to_num(standardized_features(context, configs))  # unknown: the mean
    if z.shape[1]:
        # The features together weigh about as much as a few options, however many columns.
        x = np.hstack([x, z / max(1.0, math.sqrt(z.shape[1] / 4))])
    xt, xp = x[:len(train)], x[len(train):]
    # No hyperparameters are fitted on a handful of rows: the length scale is the median squared
    # distance between measured configurations.
    d2 = ((xt[:, None, :] - xt[None, :, :]) ** 2).sum(-1)
    scale = float(np.median(d2[d2 > 0])) if (d2 > 0).any() else 1.0

    def kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return amplitude * np.exp(-((a[:, None, :] - b[None, :, :]) ** 2).sum(-1) / scale)

    k = kernel(xt, xt) + np.diag(noise**2 / weight + 1e-9)
    kp = kernel(xp, xt)
    chol = np.linalg.cholesky(k)
    alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, target))
    v = np.linalg.solve(chol, kp.T)
    return kp @ alpha, np.maximum(amplitude - (v**2).sum(0), 1e-12)
