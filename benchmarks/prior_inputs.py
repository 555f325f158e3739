"""Which inputs the prior learns from: options alone, or also the kind of code, ranked as a prior.

Leave-one-project-out over the corpus: for each project, a prior is fitted on the other projects'
tables with each set of inputs (columns of `prior.encode`), and ranks the held-out kernels' table
rows.  A ranking is scored by what a search that measured its top k rows would have found: the
fraction of the table's optimum gain reached by the best of them (k = 1, 3, 5), on tables whose
optimum gains at least `--min-gain`; and by the Spearman correlation of predicted and measured
times.  This scores the prior's ranking alone, not a search that uses it
(`benchmarks/prior_validation.py` replays those).

Inputs compared:
- options: the candidate's options;
- kind: also the baseline code's features (registers, occupancy, spills, instruction mix);
- kind+change (compiled): also the candidate code's features relative to the baseline's, every
  row ranked with its code known (as if all were compiled ahead);
- kind+change (not compiled): the same model, every row ranked without its code (the shipped
  prior's inputs; it is trained on every row twice, with and without its code).

    python -m benchmarks.prior_inputs benchmarks/corpus/tables [--min-gain 0.01] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from compileiq_build.search.prior import (
    CATEGORIES,
    FEATURES,
    PARAMS,
    ROUNDS,
    KernelTable,
    encode,
    read_table,
    training_rows,
)

INPUTS = ("options", "kind", "kind+change (compiled)", "kind+change (not compiled)")
PREFIXES = {"options": ("opt_",), "kind": ("opt_", "kind_"), "kind+change": ("opt_", "kind_", "change_")}


def _columns(inputs: str) -> list[int]:
    return [i for i, f in enumerate(FEATURES) if f.startswith(PREFIXES[inputs])]


def _fit(tables: Sequence[KernelTable], inputs: str) -> Callable[[np.ndarray], np.ndarray]:
    """A booster fitted as `prior.fit` fits the shipped one (the rows of `prior.training_rows`:
    each table weighing the same, every row with and without its code), on the columns of
    `inputs` alone; it predicts from full rows."""
    import lightgbm

    x, y, w = training_rows(tables)
    columns = _columns(inputs)
    categorical = [columns.index(FEATURES.index(f"opt_{c}")) for c in CATEGORIES]
    data = lightgbm.Dataset(x[:, columns], y, weight=w * len(tables), categorical_feature=categorical)
    booster = lightgbm.train(PARAMS, data, num_boost_round=ROUNDS)
    return lambda rows: booster.predict(rows[:, columns])


def rank_scores(tables: Sequence[KernelTable], min_gain: float) -> dict[str, dict[str, list[float]]]:
    """Per inputs, per held-out table with an optimum gain of at least `min_gain`: the fractions
    of the optimum's gain of the best of the top 1, 3 and 5 predicted rows, and Spearman's rho."""
    from scipy.stats import spearmanr

    out: dict[str, dict[str, list[float]]] = {name: {} for name in INPUTS}
    for project in sorted({t.project for t in tables}):
        train = [t for t in tables if t.project != project]
        models = {name: _fit(train, name) for name in PREFIXES}
        for table in (t for t in tables if t.project == project):
            times = np.asarray(table.times)
            base_time, base = times[table.baseline], table.features[table.baseline]
            gain = 1 - times.min() / base_time
            if gain < min_gain:
                continue
            for name in INPUTS:
                compiled = name.endswith("(compiled)")
                x = np.array([encode(c, f if compiled else None, base)
                              for c, f in zip(table.configs, table.features, strict=True)], dtype=float)
                predicted = models[name.split(" ")[0]](x)
                order = np.argsort(predicted, kind="stable")
                found = [max(0.0, (1 - times[order[:k]].min() / base_time) / gain) for k in (1, 3, 5)]
                out[name][table.name] = [*found, float(spearmanr(predicted, times).statistic)]
    return out


def summary(scores: dict[str, dict[str, list[float]]]) -> list[str]:
    lines = ["inputs                         top 1: mean (median)  top 3            top 5            rho"
             "     top 3 vs options: better / worse"]
    reference = scores["options"]
    for name, per_table in scores.items():
        a = np.array(list(per_table.values()))
        cells = [f"{a[:, k].mean():.3f} ({np.median(a[:, k]):.2f})" for k in range(3)]
        better = sum(v[1] > reference[t][1] + 1e-9 for t, v in per_table.items())
        worse = sum(v[1] < reference[t][1] - 1e-9 for t, v in per_table.items())
        lines.append(f"{name:30s} {cells[0]:21s} {cells[1]:16s} {cells[2]:16s} {np.nanmean(a[:, 3]):.3f}"
                     f"    {better} / {worse}")
    return [f"{len(reference)} held-out tables", *lines]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.prior_inputs",
                                description=(__doc__ or "").split("\n")[0])
    p.add_argument("corpus", type=Path)
    p.add_argument("--min-gain", type=float, default=0.01)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    tables = [read_table(path) for path in sorted(args.corpus.glob("*.csv"))]
    if not tables:
        p.error(f"no tables (*.csv) in {args.corpus}")
    scores = rank_scores(tables, args.min_gain)
    print("\n".join(summary(scores)))
    if args.json:
        args.json.write_text(json.dumps(scores, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
