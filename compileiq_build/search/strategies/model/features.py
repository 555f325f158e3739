"""What the model reads of a configuration besides its time: the options it changes, its option
values one-hot, and the compile-time features of its code (registers, spills, instruction mix).

A configuration of a code whose features are known has them: configurations of one code are one
point, wherever in the space they lie.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from compileiq_build.build.space import BASELINE, DEFAULT, Config, FlagSpace, config_key
from compileiq_build.search.strategies.base import Context


def changed_options(config: Config, base: Config) -> list[str]:
    return [k for k, v in config.items() if base.get(k) != v]


def best_config(context: Context) -> Config:
    """The best measured configuration, the project's flags while none was measured faster than
    them: a move measured slower is no better a centre than the baseline (in the open evaluation,
    when every screening move of ten evaluations measured slower, the model spent the other five
    on the least slow move, 1.0008x, with one or two options more, and found nothing)."""
    return min(((c, t.ratio) for c, t in context.measured if t.ratio is not None and t.ratio < 1.0),
               key=lambda ct: ct[1], default=(context.space.default_config(), 1.0))[0]


def best_ratio(context: Context) -> float:
    """The best measured cost ratio, 1.0 (the project's flags) before any beats it."""
    return min([1.0, *(t.ratio for _, t in context.measured if t.ratio is not None)])


def code_count(features: Mapping[str, float], name: str) -> float:
    """A count over the code's kernels (`all:` totals, codeinfo.py), or a table's own; NaN if unknown."""
    return float(features.get(f"all:{name}", features.get(name, math.nan)))


def one_hot(space: FlagSpace, configs: Sequence[Config]) -> np.ndarray:
    """One column per non-default value of every dimension."""
    columns = [(d.key, v) for d in space.dimensions for v in d.values]
    index = {kv: i for i, kv in enumerate(columns)}
    x = np.zeros((len(configs), len(columns)))
    for r, c in enumerate(configs):
        for k, v in c.items():
            if (i := index.get((k, v))) is not None:
                x[r, i] = 1.0
    return x


def config_features(context: Context, configs: Sequence[Config], totals: bool = True
                    ) -> list[Mapping[str, float]]:
    """Each configuration's compile-time features, where known: those of its code (a configuration
    of a code whose features are known has them), with `totals` those over kernels only
    (per-kernel columns are many, for few rows)."""
    by_code = {c.code: c.features for c in context.known if c.code and c.features}
    own = {config_key(context.space.full_config(c.config)): c.features for c in context.known if c.features}
    codes = context.codes
    rows = [own.get(key := config_key(c)) or by_code.get(codes.get(key, ""), {}) for c in configs]
    return [({k: v for k, v in r.items() if k.startswith("all:")} if totals else {}) or r for r in rows]


def standardized_features(context: Context, configs: Sequence[Config]) -> np.ndarray:
    """The configurations' compile-time features (`config_features`), a column per feature that varies
    among the known ones, standardized; NaN where a configuration's features are not known."""
    rows = config_features(context, configs)
    names = sorted({k for r in rows for k in r})
    f = np.array([[float(r.get(n, math.nan)) for n in names] for r in rows]).reshape(len(rows), len(names))
    known = ~np.isnan(f).all(axis=0)
    f = f[:, known]
    mu, sd = np.nanmean(f, axis=0), np.nanstd(f, axis=0)
    varies = sd > 0
    return (f[:, varies] - mu[varies]) / sd[varies]


def without_passengers(context: Context, config: Config) -> Config:
    """`config` with every value whose one-option move compiled to the baseline's machine code set
    back to the default: such a value is a passenger alone, and most often in company too."""
    base, default, codes = context.codes.get(BASELINE, ""), context.space.default_config(), context.codes
    if not base:
        return dict(config)
    return {k: (DEFAULT if v != DEFAULT and codes.get(config_key({**default, k: v})) == base else v)
            for k, v in config.items()}
