"""Replay search strategies against a recorded table, as if measuring.

TABLE.csv holds one row per configuration of a space: every column other than `time`
is a dimension whose values are opaque labels, except columns named `feature:<name>`,
numeric features known before measuring; `time` is the measured time (lower is better).
The baseline is the row whose dimensions are all `default` (else the first row).

For each strategy and seed it replays a search of `--budget` evaluations and reports,
as the median over seeds, the fraction of the optimum's gain reached
((t_baseline - t_best_found) / (t_baseline - t_optimum)) and the evaluations needed to
reach 95% of it, and how many seeds ended short of 95% (the tail a median hides).  Our
strategies (exhaustive, random, staged, model) run through the same code as `tune`; the
peers are Optuna's TPE sampler and NVIDIA's compileiq engine (`pip install -e '.[bench]'`);
a peer that does not install or run says why.

    python -m benchmarks.search_replay TABLE.csv --budget 30 --seeds 20 [--json] [--prior OTHER.csv]
        [--no-features]   # the options alone, as tune fits them
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks.peers import PEERS, PeerUnavailable
from compileiq_build.model import ModelGuided
from compileiq_build.search import Exhaustive, RandomSearch, Staged, Trial
from compileiq_build.space import DEFAULT, Dimension, FlagSpace

LANGUAGE = "T"  # dimension keys are "T:<column>"


@dataclass(frozen=True)
class Table:
    dims: dict[str, list[str]]  # column -> labels, "default" first when present
    rows: list[dict[str, str]]
    times: list[float]
    features: list[dict[str, float]]
    baseline: int

    def index(self, config: dict[str, str]) -> int | None:
        key = tuple(config.get(d, DEFAULT) for d in self.dims)
        return self._lookup.get(key)

    @property
    def _lookup(self) -> dict[tuple[str, ...], int]:
        cached = self.__dict__.get("_cache")
        if cached is None:
            cached = {tuple(r[d] for d in self.dims): i for i, r in enumerate(self.rows)}
            object.__setattr__(self, "_cache", cached)
        return cached

    @property
    def optimum(self) -> float:
        return min(self.times)


def load_table(path: Path) -> Table:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        columns = reader.fieldnames or []
        if "time" not in columns:
            raise SystemExit(f"{path}: no 'time' column")
        dims = [c for c in columns if c != "time" and not c.startswith("feature:")]
        feats = [c for c in columns if c.startswith("feature:")]
        rows, times, features = [], [], []
        for r in reader:
            rows.append({d: r[d] for d in dims})
            times.append(float(r["time"]))
            features.append({f.removeprefix("feature:"): float(r[f]) for f in feats if r[f] != ""})
    labels = {d: sorted({r[d] for r in rows}, key=lambda v: (v != DEFAULT, v)) for d in dims}
    baseline = next((i for i, r in enumerate(rows) if all(v == DEFAULT for v in r.values())), 0)
    return Table(labels, rows, times, features, baseline)


def without_features(table: Table) -> Table:
    """The table as `tune` sees it before measuring: the options alone (it knows ptxas' resource
    report only for the candidates it compiled)."""
    return replace(table, features=[{} for _ in table.rows])


def space_of(table: Table) -> FlagSpace:
    return FlagSpace(tuple(Dimension(LANGUAGE, d, tuple(v for v in labels if v != DEFAULT), "{v}")
                           for d, labels in table.dims.items()))


def _plain(config: dict[str, str]) -> dict[str, str]:
    return {k.split(":", 1)[1]: v for k, v in config.items()}


def prior_of(table: Table) -> list[Trial]:
    """Every row of another target's table as a measured evaluation (warm start)."""
    base = table.times[table.baseline]
    trials = []
    for row, t in zip(table.rows, table.times, strict=True):
        config = {f"{LANGUAGE}:{d}": v for d, v in row.items()}
        trials.append(Trial(config, t / base, t / base < 1.0))
    return trials


def run_ours(table: Table, make, budget: int, seed: int, prior: list[Trial] | None = None) -> list[float]:
    """Times measured, in order, by one of our strategies (configs missing from the table
    count as failed evaluations, as a failed build would)."""
    space = space_of(table)
    features = (lambda c: table.features[i] if (i := table.index(_plain(c))) is not None else {}) \
        if any(table.features) else None
    strategy = make(seed, features, prior or [])
    base = table.times[table.baseline]
    history: list[Trial] = []
    measured: list[float] = []
    while len(history) < budget:
        config = strategy.propose(space, history)
        if config is None:
            break
        i = table.index(_plain(config))
        t = table.times[i] if i is not None else math.inf
        measured.append(t)
        ratio = t / base if math.isfinite(t) else None
        history.append(Trial(config, ratio, ratio is not None and ratio < 1.0))
    return measured


def run_peer(table: Table, peer, budget: int, seed: int) -> list[float]:
    measured: list[float] = []

    def evaluate(config: dict[str, str]) -> float:
        i = table.index(config)
        t = table.times[i] if i is not None else math.inf
        measured.append(t)
        return t

    peer(table.dims, evaluate, budget, seed)
    return measured


def _fraction(table: Table, measured: list[float]) -> float:
    base = table.times[table.baseline]
    gain = base - table.optimum
    best = min([base, *measured])
    return (base - best) / gain if gain > 0 else 1.0


def _evals_to(table: Table, measured: list[float], level: float) -> int | None:
    for k in range(1, len(measured) + 1):
        if _fraction(table, measured[:k]) >= level:
            return k
    return None


OURS: dict[str, Callable] = {
    "exhaustive": lambda seed, features, prior: Exhaustive(),
    "random": lambda seed, features, prior: RandomSearch(seed),
    "staged": lambda seed, features, prior: Staged(),
    "model": lambda seed, features, prior: ModelGuided(seed, features=features, prior=prior),
}


def replay(table: Table, budget: int, seeds: int, strategies: list[str],
           prior: list[Trial] | None = None) -> dict[str, dict]:
    results: dict[str, dict] = {}
    for name in strategies:
        fractions, evals = [], []
        try:
            for seed in range(seeds if name not in ("exhaustive", "staged") else 1):
                if name in OURS:
                    measured = run_ours(table, OURS[name], budget, seed, prior)
                else:
                    measured = run_peer(table, PEERS[name], budget, seed)
                fractions.append(_fraction(table, measured))
                evals.append(_evals_to(table, measured, 0.95))
        except PeerUnavailable as exc:
            results[name] = {"fraction_at_budget": None, "evals_to_95": None, "unavailable": str(exc)}
            continue
        reached = sorted(e for e in evals if e is not None)
        # Median evaluations to 95%, counting runs that never got there as beyond the budget.
        median_evals = None
        if len(reached) * 2 > len(evals):
            padded = reached + [math.inf] * (len(evals) - len(reached))
            median_evals = statistics.median(padded)
        results[name] = {"fraction_at_budget": statistics.median(fractions), "evals_to_95": median_evals,
                         "short_of_95": sum(f < 0.95 for f in fractions), "runs": len(fractions)}
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.search_replay",
                                description="Replay search strategies against a recorded table.")
    p.add_argument("table", type=Path)
    p.add_argument("--budget", type=int, required=True)
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--strategies", nargs="+", default=[*OURS, *PEERS],
                   choices=[*OURS, *PEERS])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-features", action="store_true",
                   help="ignore the feature: columns, as tune does (it fits on the options alone)")
    p.add_argument("--prior", type=Path, metavar="TABLE",
                   help="another target's table over the same dimensions: its rows warm-start the model")
    args = p.parse_args(argv)
    table = load_table(args.table)
    if args.no_features:
        table = without_features(table)
    prior = prior_of(load_table(args.prior)) if args.prior else None
    results = replay(table, args.budget, args.seeds, args.strategies, prior)
    if args.json:
        def finite(e: float | None) -> float | None:
            return None if e is None or e == math.inf else e

        print(json.dumps({k: {"fraction_at_budget": v["fraction_at_budget"],
                              "evals_to_95": finite(v["evals_to_95"]),
                              **({"short_of_95": v["short_of_95"]} if "short_of_95" in v else {}),
                              **({"unavailable": v["unavailable"]} if "unavailable" in v else {})}
                          for k, v in results.items()}))
        return 0
    base, best = table.times[table.baseline], table.optimum
    print(f"{args.table.name}: {len(table.rows)} configurations, baseline {base:.6g}, optimum {best:.6g} "
          f"({base / best:.4f}x); budget {args.budget} ({100 * args.budget / len(table.rows):.1f}% of the "
          f"table), {args.seeds} seeds")
    print(f"{'strategy':12} {'fraction of optimum gain':>26} {'evaluations to 95%':>20} "
          f"{'runs short of 95%':>18}")
    for name, r in results.items():
        if "unavailable" in r:
            print(f"{name:12} unavailable: {r['unavailable']}")
            continue
        e = r["evals_to_95"]
        shown = "not reached" if e is None or e == math.inf else f"{e:g}"
        short = f"{r['short_of_95']} of {r['runs']}"
        print(f"{name:12} {r['fraction_at_budget']:>26.3f} {shown:>20} {short:>18}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
