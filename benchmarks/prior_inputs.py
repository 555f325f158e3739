"""Which inputs the prior should learn from: options alone, or also the kind of code.

Leave-one-project-out over the corpus: for each project, a prior is fitted on the other projects'
tables with each set of inputs, and ranks the held-out kernels' table rows.  A ranking is scored
by what a search that measured its top k rows would have found: the fraction of the table's
optimum gain reached by the best of them (k = 1, 3, 5), on tables whose optimum gains at least
`--min-gain`; and by the Spearman correlation of predicted and measured times.

Inputs compared:
- options: the candidate's options (`prior.encode`), what `learn` fits;
- kind: also the baseline code's features (registers, occupancy, spills, instruction mix);
- kind+change (compiled): also the candidate code's features relative to the baseline's, every
  row ranked with its code known (as if all were compiled ahead);
- kind+change (not compiled): the same model, every row ranked without its code (trained on
  every row twice, with and without it, as the prior was until this comparison).

    python -m benchmarks.prior_inputs benchmarks/corpus/tables [--min-gain 0.01] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from compileiq_build.prior import CATEGORIES, OPTIONS, PARAMS, ROUNDS, KernelTable, encode, read_table

# The code features the richer inputs read (codeinfo's `all:` totals over a kernel's functions).
_COUNTED = ("ldg", "stg", "lds", "sts", "ldgsts", "ffma", "fmul", "fadd", "mufu", "imad", "bra")
KIND = ("instructions", "registers", "occupancy", "spills", "local", "smem", "constant",
        *(f"share_{op}" for op in _COUNTED))
CHANGE = ("registers", "occupancy", "instructions", "spills", "local", *(f"share_{op}" for op in _COUNTED))
INPUTS = ("options", "kind", "kind+change (compiled)", "kind+change (not compiled)")


def _code(features: Mapping[str, float]) -> dict[str, float] | None:
    """A code's counts, from `all:` totals; None if unknown."""
    def get(name: str) -> float:
        return float(features.get(f"all:{name}", features.get(name, 0.0)))

    instructions = get("instructions")
    if not features or instructions <= 0:
        return None
    registers = get("registers")
    out = {"instructions": math.log1p(instructions), "registers": registers,
           # Warps an SM can hold by registers alone (64K registers, 64 warps at most).
           "occupancy": min(64.0, 65536.0 / (32.0 * max(registers, 16.0))) / 64.0 if registers else math.nan,
           "spills": math.log1p(get("spill_bytes")), "local": (get("ldl") + get("stl")) / instructions,
           "smem": math.log1p(get("smem_bytes")), "constant": get("ldg.constant") / max(get("ldg"), 1.0)}
    out.update({f"share_{op}": get(op) / instructions for op in _COUNTED})
    return out


def _row(config: Mapping[str, str], features: Mapping[str, float] | None, base: Mapping[str, float],
         kind: bool, change: bool) -> list[float]:
    row = encode(config)
    base_code = _code(base)
    if kind:
        row += [base_code[k] if base_code else math.nan for k in KIND]
    if change:
        own = _code(features) if features else None
        row += [own[c] - base_code[c] if own and base_code else math.nan for c in CHANGE]
    return row


def _fit(tables: Sequence[KernelTable], kind: bool, change: bool) -> Callable[[np.ndarray], np.ndarray]:
    """A booster on these tables (each weighing the same); with `change`, every row twice, with
    and without its code's features."""
    import lightgbm

    xs, ys, ws = [], [], []
    for table in tables:
        base = table.features[table.baseline]
        y = table.log_ratios()
        ok = np.isfinite(y)
        for with_code in ((True, False) if change else (False,)):
            xs += [_row(c, f if with_code else None, base, kind, change)
                   for c, f, good in zip(table.configs, table.features, ok, strict=True) if good]
            ys.append(y[ok])
            ws.append(np.full(int(ok.sum()), 1.0 / max(1, int(ok.sum()))))
    x, w = np.array(xs, dtype=float), np.concatenate(ws)
    categorical = [OPTIONS.index(c) for c in CATEGORIES]
    data = lightgbm.Dataset(x, np.concatenate(ys), weight=w * len(tables), categorical_feature=categorical)
    return lightgbm.train(PARAMS, data, num_boost_round=ROUNDS).predict


def rank_scores(tables: Sequence[KernelTable], min_gain: float) -> dict[str, dict[str, list[float]]]:
    """Per inputs, per held-out table with an optimum gain of at least `min_gain`: the fractions
    of the optimum's gain of the best of the top 1, 3 and 5 predicted rows, and Spearman's rho."""
    from scipy.stats import spearmanr

    out: dict[str, dict[str, list[float]]] = {name: {} for name in INPUTS}
    for project in sorted({t.project for t in tables}):
        train = [t for t in tables if t.project != project]
        models = {"options": _fit(train, False, False), "kind": _fit(train, True, False)}
        models["kind+change"] = _fit(train, True, True)
        for table in (t for t in tables if t.project == project):
            times = np.asarray(table.times)
            base_time, base = times[table.baseline], table.features[table.baseline]
            gain = 1 - times.min() / base_time
            if gain < min_gain:
                continue
            for name in INPUTS:
                kind, change = name != "options", name.startswith("kind+change")
                compiled = name.endswith("(compiled)")
                x = np.array([_row(c, f if compiled else None, base, kind, change)
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
