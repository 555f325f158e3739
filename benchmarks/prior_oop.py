"""The prior judged out of project: calibration, ranking and abstention on kernels it never saw.

Each held-out group's tables (leave-one-project-out, or leave-one-program-out: a program is the
project and the table's JSON `program`) are predicted by a prior fitted, with the package's own
fit, on the other groups' tables.  Every table row but the baseline is predicted once, from its
options and the baseline's code (`--compiled`: with its own code's features too, as after
compiling ahead).  Reported:
- the calibration table: rows binned by predicted gain, against the measured ratio (clipped at
  1.1, as the search clips) and the shares measured faster (<= 1/1.01) and slower (>= 1.01);
- per kernel, Spearman's rho of predicted and measured times (median, quartiles);
- on kernels whose best row gains >= 1%: the share of the best row's gain reached by the prior's
  top 1 and the best of its top 3, against a random pick (the expectation over the table's rows);
- "predicted gain beyond the noise": precision (share of the rows it says so of that measure
  faster) and coverage (share of the kernels with a gain >= 1% where it says so of some row);
  the shipped recipe says so where it predicts a gain > 2%, a calibrated one where it is
  `confident` (prior.confident); and of the rows it says lose beyond the noise, the shares
  measured slower and faster (a loss predicted where there is a gain hides it from the search);
- where a recipe gives a spread: the share of measured log ratios within 1 and 2 sd of the mean.

Recipes (`--recipe`, several allowed): `shipped` (the package's `fit` of format 1: one booster,
its prediction as is), `current` (the package's `fit` and `Prior.predict_interval` as they are
now), and variants of the current one for the features/objective ablations (see RECIPES).

    python -m benchmarks.prior_oop benchmarks/corpus/tables [--by project|program] [--compiled]
        [--recipe shipped current ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from compileiq_build.search.prior import (
    CLIP,
    FLOOR,
    INPUTS,
    KernelTable,
    Prior,
    confident,
    encode,
    fit,
    read_table,
)

NOISE = math.log(1.02)  # "a gain beyond the noise"
FASTER, SLOWER = -math.log(1.01), math.log(1.01)
BINS = (("a gain > 10%", math.log(1.10), math.inf), ("a gain 5-10%", math.log(1.05), math.log(1.10)),
        ("a gain 2-5%", math.log(1.02), math.log(1.05)), ("a gain 0-2%", 1e-12, math.log(1.02)),
        ("a loss", -math.inf, 1e-12))


@dataclass(frozen=True)
class Predicted:
    """A held-out table's rows (baseline left out): measured and predicted log ratios."""

    table: str
    group: str
    measured: np.ndarray  # log(time / baseline time), clipped at CLIP above
    mean: np.ndarray
    sd: np.ndarray  # nan where the recipe gives none
    says: np.ndarray  # bool: the recipe says this row gains beyond the noise
    loss: np.ndarray  # bool: ... loses beyond the noise
    options: np.ndarray  # options set per row


# A recipe: training tables -> (held-out table, compiled) -> (mean, sd, speaks) per row of the table.
Recipe = Callable[[Sequence[KernelTable]], Callable[[KernelTable, bool], tuple[np.ndarray, ...]]]


def _rows(table: KernelTable, compiled: bool) -> np.ndarray:
    base = table.features[table.baseline]
    return np.array([encode(c, f if compiled else None, base)
                     for c, f in zip(table.configs, table.features, strict=True)], dtype=float)


def shipped(train: Sequence[KernelTable]) -> Callable[[KernelTable, bool], tuple[np.ndarray, ...]]:
    """The recipe of the format-1 prior (one booster; `fit1` reproduces it)."""
    booster = fit1(train)

    def predict(table: KernelTable, compiled: bool) -> tuple[np.ndarray, ...]:
        mean = np.minimum(booster.predict(_rows(table, compiled)), CLIP)
        return mean, np.full(len(mean), np.nan), np.abs(mean) > NOISE
    return predict


def fit1(train: Sequence[KernelTable]):
    """The format-1 prior's fit: one booster on every row twice (prior.fit before issue 42)."""
    import lightgbm

    from compileiq_build.search.prior import CATEGORIES, FEATURES, training_rows

    params = {"objective": "regression", "learning_rate": 0.05, "num_leaves": 15, "min_data_in_leaf": 20,
              "feature_fraction": 0.8, "bagging_fraction": 0.8, "bagging_freq": 1, "lambda_l2": 1.0,
              "verbosity": -1, "seed": 0, "deterministic": True, "num_threads": 1}
    x, y, w = training_rows(train)
    categorical = [FEATURES.index(f"opt_{c}") for c in CATEGORIES]
    data = lightgbm.Dataset(x, y, weight=w * len(train), feature_name=list(FEATURES),
                            categorical_feature=categorical, free_raw_data=False)
    return lightgbm.train(params, data, num_boost_round=300)


def current(inputs: Sequence[str] = INPUTS, floor: float = FLOOR) -> Recipe:
    """The package's prior as it is (`prior.fit`, with these inputs and floor of the targets),
    ranked by `predict_interval`'s mean before it abstains, saying so where `confident`."""
    def recipe(train: Sequence[KernelTable]) -> Callable[[KernelTable, bool], tuple[np.ndarray, ...]]:
        prior = Prior(fit(train, inputs, floor), {}, Path("held-out"))

        def predict(table: KernelTable, compiled: bool) -> tuple[np.ndarray, ...]:
            base = table.features[table.baseline]
            features = table.features if compiled else [None] * len(table.configs)
            mean, sd = prior.predict_interval(table.configs, features, base, abstain=False)
            return mean, sd, confident(mean, sd)
        return predict
    return recipe


RECIPES: dict[str, Recipe] = {
    "shipped": shipped, "current": current(),
    # Which inputs carry across projects, and a floor under the targets (one project's 3-5x gains).
    "options": current(("opt_",)), "options+kind": current(("opt_", "kind_")),
    "options+change": current(("opt_", "change_")), "floor-20%": current(floor=math.log(0.8)),
    "options+kind floor-20%": current(("opt_", "kind_"), math.log(0.8)),
}


# What the compiler's resource report gives (codeinfo.resource_report), per function and in total.
REPORTED = ("registers", "spill_bytes", "stack_bytes", "smem_bytes", "registers_max")


def without_report(table: KernelTable) -> KernelTable:
    """The table with its baseline's code read as live runs read it after profiling before
    f81836b: by a build that compiled nothing, so without the resource report."""
    base = {k: v for k, v in table.features[table.baseline].items() if k.rsplit(":", 1)[-1] not in REPORTED}
    features = [base if i == table.baseline else f for i, f in enumerate(table.features)]
    return replace(table, features=features)


def held_out(tables: Sequence[KernelTable], groups: Sequence[str], recipe: Recipe,
             compiled: bool, baseline_report: bool = True) -> list[Predicted]:
    out = []
    for group in sorted(set(groups)):
        train = [t for t, g in zip(tables, groups, strict=True) if g != group]
        predict = recipe(train)
        for table, g in zip(tables, groups, strict=True):
            if g != group:
                continue
            mean, sd, speaks = predict(table if baseline_report else without_report(table), compiled)
            keep = np.arange(len(table.times)) != table.baseline
            keep &= np.isfinite(table.log_ratios())
            options = np.array([sum(v != "default" for v in c.values()) for c in table.configs])
            out.append(Predicted(table.name, group, table.log_ratios()[keep], mean[keep], sd[keep],
                                 (speaks & (mean < 0))[keep], (speaks & (mean > 0))[keep], options[keep]))
        print(f"  {group}: trained on {len(train)} tables", file=sys.stderr, flush=True)
    return out


def _random_best_of(shares: np.ndarray, k: int) -> float:
    """Expected best share of k rows drawn without replacement (exact)."""
    s = np.sort(shares)[::-1]
    n = len(s)
    if n <= k:
        return float(s.max())
    ways = np.array([math.comb(n - 1 - i, k - 1) for i in range(n)], dtype=float)
    return float((s * ways).sum() / math.comb(n, k))


def _q(values: Sequence[float]) -> str:
    v = np.asarray([x for x in values if np.isfinite(x)])
    if not len(v):
        return "-"
    lo, med, hi = np.percentile(v, [25, 50, 75])
    return f"{med:.2f} [{lo:.2f}, {hi:.2f}]"


def scores(predicted: Sequence[Predicted], min_gain: float = 0.01) -> dict[str, object]:
    """Every figure of the module's docstring, as a dict (the JSON) of the held-out predictions."""
    from scipy.stats import spearmanr

    y = np.concatenate([p.measured for p in predicted])
    m = np.concatenate([p.mean for p in predicted])
    sd = np.concatenate([p.sd for p in predicted])
    says = np.concatenate([p.says for p in predicted])
    loss = np.concatenate([p.loss for p in predicted])
    options = np.concatenate([p.options for p in predicted])
    gain = -m
    calibration = []
    for label, lo, hi in BINS:
        rows = (gain > lo) & (gain <= hi) if hi < math.inf else gain > lo
        n = int(rows.sum())
        calibration.append({"bin": label, "rows": n,
                            "predicted": float(np.exp(m[rows]).mean()) if n else math.nan,
                            "measured": float(np.exp(y[rows]).mean()) if n else math.nan,
                            "faster": float((y[rows] <= FASTER).mean()) if n else math.nan,
                            "slower": float((y[rows] >= SLOWER).mean()) if n else math.nan})
    rho, top1, top3, rand1, rand3, covered = [], [], [], [], [], []
    for p in predicted:
        if np.ptp(p.mean) > 0 and np.ptp(p.measured) > 0:
            rho.append(float(spearmanr(p.mean, p.measured).statistic))
        best = -p.measured.min()
        if math.expm1(best) < min_gain:
            continue
        shares = np.maximum(0.0, -np.expm1(p.measured)) / -math.expm1(-best)
        order = np.argsort(p.mean, kind="stable")
        top1.append(float(shares[order[0]]))
        top3.append(float(shares[order[:3]].max()))
        rand1.append(float(shares.mean()))
        rand3.append(_random_best_of(shares, 3))
        covered.append(bool(p.says.any()))
    spread = np.isfinite(sd) & (sd > 0)
    z = (y[spread] - m[spread]) / sd[spread] if spread.any() else np.zeros(0)
    many = options >= 3
    return {
        "rows": len(y), "tables": len(predicted), "calibration": calibration,
        "rho": {"median": float(np.median(rho)), "q1": float(np.percentile(rho, 25)),
                "q3": float(np.percentile(rho, 75)), "tables": len(rho)},
        "gains": len(top1),
        "top1": {"mean": float(np.mean(top1)), "median": float(np.median(top1)),
                 "slower_than_baseline": float(np.mean([t == 0 for t in top1]))},
        "top3": {"mean": float(np.mean(top3)), "median": float(np.median(top3))},
        "random1": float(np.mean(rand1)), "random3": float(np.mean(rand3)),
        "says": {"rows": int(says.sum()),
                 "precision": float((y[says] <= FASTER).mean()) if says.any() else math.nan,
                 "measured": float(np.exp(y[says]).mean()) if says.any() else math.nan,
                 "slower": float((y[says] >= SLOWER).mean()) if says.any() else math.nan,
                 "coverage": float(np.mean(covered)), "of_many_options": int((says & many).sum())},
        "loss": {"rows": int(loss.sum()),
                 "slower": float((y[loss] >= SLOWER).mean()) if loss.any() else math.nan,
                 "faster": float((y[loss] <= FASTER).mean()) if loss.any() else math.nan},
        "interval": {"rows": int(spread.sum()),
                     "within_1sd": float((np.abs(z) <= 1).mean()) if len(z) else math.nan,
                     "within_2sd": float((np.abs(z) <= 2).mean()) if len(z) else math.nan},
        "abs_error": {"1-2 options": float(np.abs(y - m)[~many].mean()),
                      ">=3 options": float(np.abs(y - m)[many].mean())},
    }


def summary(name: str, s: dict) -> list[str]:
    lines = [f"## {name}: {s['tables']} tables, {s['rows']} rows", "",
             "| prior predicts | rows | mean predicted ratio | mean measured (clipped at 1.1) "
             "| measured faster (<= 1/1.01) | measured slower (>= 1.01) |", "|---|---|---|---|---|---|"]
    for c in s["calibration"]:
        lines.append(f"| {c['bin']} | {c['rows']} | {c['predicted']:.3f} | {c['measured']:.3f} "
                     f"| {100 * c['faster']:.0f}% | {100 * c['slower']:.0f}% |")
    r, t1, t3, says = s["rho"], s["top1"], s["top3"], s["says"]
    lines += ["", f"- per-kernel Spearman rho: median {r['median']:.2f} (quartiles {r['q1']:.2f} / "
              f"{r['q3']:.2f}, {r['tables']} tables)",
              f"- {s['gains']} kernels with a gain >= 1%: top 1 {t1['mean']:.2f} of the best gain (median "
              f"{t1['median']:.2f}; random {s['random1']:.2f}), top 3 {t3['mean']:.2f} (median "
              f"{t3['median']:.2f}; random {s['random3']:.2f}); top 1 no faster than the baseline on "
              f"{100 * t1['slower_than_baseline']:.0f}%",
              f"- says 'gain beyond 2%' of {says['rows']} rows ({says['of_many_options']} of >= 3 options): "
              f"precision {100 * says['precision']:.0f}% measured faster, {100 * says['slower']:.0f}% slower "
              f"(mean measured {says['measured']:.3f}); coverage {100 * says['coverage']:.0f}% of the "
              f"kernels with a gain >= 1%",
              f"- says 'loss beyond 2%' of {s['loss']['rows']} rows: {100 * s['loss']['slower']:.0f}% "
              f"measured slower, {100 * s['loss']['faster']:.0f}% faster",
              f"- mean |error| of the log ratio: 1-2 options {s['abs_error']['1-2 options']:.3f}, "
              f">= 3 options {s['abs_error']['>=3 options']:.3f}"]
    if s["interval"]["rows"]:
        lines.append(f"- measured within 1 sd of the mean: {100 * s['interval']['within_1sd']:.0f}% "
                     f"(68% if calibrated), within 2 sd: {100 * s['interval']['within_2sd']:.0f}% (95%)")
    return [*lines, ""]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.prior_oop",
                                description=(__doc__ or "").split("\n")[0])
    p.add_argument("corpus", type=Path)
    p.add_argument("--by", choices=("project", "program"), default="project")
    p.add_argument("--compiled", action="store_true", help="predict each row with its code's features")
    p.add_argument("--recipe", nargs="+", default=["shipped"], choices=list(RECIPES))
    p.add_argument("--min-gain", type=float, default=0.01)
    p.add_argument("--json", type=Path)
    p.add_argument("--no-baseline-report", action="store_true",
                   help="predict with the baseline's code features less the compiler's resource report "
                        "(registers, spills, stack, shared memory), as live runs read them before f81836b")
    args = p.parse_args(argv)
    paths = sorted(args.corpus.glob("*.csv"))
    if not paths:
        p.error(f"no tables (*.csv) in {args.corpus}")
    tables = [read_table(path) for path in paths]
    groups = [t.project if args.by == "project" else
              f"{t.project}/{json.loads(path.with_suffix('.json').read_text()).get('program', t.name)}"
              for t, path in zip(tables, paths, strict=True)]
    results = {}
    print(f"# leave-one-{args.by}-out, {len(set(groups))} groups, rows "
          f"{'with' if args.compiled else 'without'} their code's features"
          f"{', the baseline without its resource report' if args.no_baseline_report else ''}\n")
    for name in args.recipe:
        print(f"{name}:", file=sys.stderr)
        results[name] = scores(held_out(tables, groups, RECIPES[name], args.compiled,
                                        not args.no_baseline_report), args.min_gain)
        print("\n".join(summary(name, results[name])), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
