"""The spill rule: which configurations compile to code that spills more than the least known.

Such codes are left out of the model's and the local step's proposals until a measured code that
spills more was faster than the baseline: their features lie far from every measured code, their
wide interval would draw the bound to them, and spills to local memory are slowdowns but rarely.
Combine proposals are not: a combination measured spilling teaches the fit what the caps do (the
replays that decided both: benchmarks/results/search/compile_ahead/).  Where a configuration is
not compiled yet, an additive model of the spills over the options, fitted on every compiled
configuration (measured or not), predicts them; `scout` names such configurations last, so a
wrong prediction stands until other compiled configurations (every screening move is compiled
ahead) correct it.  A proposal that compiles to code that spills more is not measured (`vet`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from compileiq_build.build.space import Config, FlagSpace
from compileiq_build.search.strategies.base import Context
from compileiq_build.search.strategies.model.features import code_count, config_features, one_hot


def spill_bytes(features: Mapping[str, float]) -> float:
    return code_count(features, "spill_bytes")


def spilling_mask(context: Context, pool: Sequence[Config]) -> np.ndarray:
    """Which pool configurations compile to code that spills more than the least-spilling code
    known, while no measured code that spills more was faster than the baseline.  The model
    would explore them (their features lie far from every measured code), and spills to local
    memory are slowdowns but rarely (benchmarks/results/search/compile_ahead/).  Where a
    configuration's code is not compiled, `_predicted_spills` decides."""
    def spills(configs: Sequence[Config]) -> np.ndarray:
        features = config_features(context, configs, totals=False)
        return np.array([spill_bytes(f) for f in features], dtype=float)

    compiled = [context.space.full_config(c.config) for c in context.known]
    known = spills(compiled)
    if np.isnan(known).all():
        return np.zeros(len(pool), dtype=bool)
    least = float(np.nanmin(known))
    measured = spills([c for c, _ in context.measured])
    if any(v > least and t.ratio is not None and t.ratio < 1.0
           for v, (_, t) in zip(measured, context.measured, strict=True)):
        return np.zeros(len(pool), dtype=bool)
    values = spills(pool)
    unknown = np.isnan(values)
    if unknown.any():
        keep = ~np.isnan(known)
        values[unknown] = _predicted_spills(
            context.space, [c for c, k in zip(compiled, keep, strict=True) if k], known[keep], least,
            [c for c, u in zip(pool, unknown, strict=True) if u])
    return values > least


def _predicted_spills(space: FlagSpace, compiled: Sequence[Config], spills: np.ndarray, least: float,
                      configs: Sequence[Config]) -> np.ndarray:
    """Spill bytes of configurations not compiled yet, from those compiled: ridge regression of
    log(1 + spills beyond the least) on one-hot option values (a register cap spills whatever
    else is set), so that a value seen spilling once, with nothing else to blame, is predicted
    to spill.  Below one byte beyond the least, the prediction is the least."""
    x, xp = one_hot(space, compiled), one_hot(space, configs)
    y = np.log1p(spills - least)
    effects = np.linalg.solve(x.T @ x + np.eye(x.shape[1]), x.T @ y)
    excess = np.expm1(xp @ effects)
    return least + np.where(excess > 1.0, excess, 0.0)
