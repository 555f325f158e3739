"""Replay search strategies against a recorded table, as if measuring.

TABLE.csv holds one row per configuration: every column other than `time`, `code`, `spread`
and `feature:<name>` is a dimension whose values are opaque labels; `time` is the measured time
(lower is better); the optional `code` column labels each row's machine code (rows of one
label are one point, known to be alike before measuring, as after compiling); `feature:` columns
are numeric features known before measuring; the optional `spread` is the relative half-width
of the row's measured interval, which our strategies see as `tune` would (the model's stop rule
weighs predicted gains against it; without it, the model assumes its default noise).  The
baseline is the row whose dimensions are all `default` (else the first row).

A table may hold a whole space or a sample of it.  Its rows are the pool: our strategies choose
among them (a closed context), and a peer's configuration outside the table is answered by the
nearest row (fewest options changed, ties broken by the seed).  Evaluations count distinct codes
measured, for every strategy and peer alike: a row of a code measured before is answered free.
Every strategy and peer runs through `tune`'s search loop (compileiq_build.search.loop.drive):
its budget, candidate bound, vetting and compiling ahead; our strategies are made as `tune`
makes them, the model with the prior `tune` loads (the shipped one, `--prior-model PATH`'s, or
none with `--no-prior`) wherever the table's options and baseline features let `tune` use it.

For each strategy and seed it replays a search of `--budget` evaluations and reports, as the
median over seeds, the fraction of the optimum's gain reached ((t_baseline - t_best_found) /
(t_baseline - t_optimum)), the evaluations needed to reach 95% of it, and how many seeds ended
short of 95% (the tail a median hides).  The peers (benchmarks/peers.py, `pip install -e
'.[bench]'`) are Optuna's TPE, NVIDIA's compileiq engine, SMAC3 and Kernel Tuner; a peer that
does not install or run says why.

    python -m benchmarks.search_replay TABLE.csv --budget 20 --seeds 20 [--json] [--prior OTHER.csv]
        [--no-features]   # the options alone
        [--prior-model PATH | --no-prior] [--compile-ahead K]
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import math
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks.peers import PEERS, Peer, PeerStrategy, PeerUnavailable
from compileiq_build.build.space import DEFAULT, Config, Dimension, FlagSpace, dimensions_for
from compileiq_build.search.loop import Measured, drive
from compileiq_build.search.prior import Prior
from compileiq_build.search.prior import load as load_prior
from compileiq_build.search.strategies import REGISTRY, Candidate, Strategy, Trial
from compileiq_build.search.target import search_strategy

LANGUAGE = "T"  # dimension keys are "T:<column>"


@dataclass(frozen=True)
class Table:
    dims: dict[str, list[str]]  # column -> labels, "default" first when present
    rows: list[dict[str, str]]
    times: list[float]
    features: list[dict[str, float]]
    codes: list[str]  # a label per row: the table's `code` column, else one per row
    baseline: int
    spreads: list[float | None]  # the table's `spread` column, else None

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

    def nearest(self, config: dict[str, str], rng: random.Random) -> int:
        """The row of `config`, else the row with the fewest options changed (ties at random)."""
        if (i := self.index(config)) is not None:
            return i
        distance = [sum(r[d] != config.get(d, DEFAULT) for d in self.dims) for r in self.rows]
        low = min(distance)
        return rng.choice([i for i, d in enumerate(distance) if d == low])

    @property
    def optimum(self) -> float:
        return min(self.times)


def load_table(path: Path) -> Table:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        columns = reader.fieldnames or []
        if "time" not in columns:
            raise SystemExit(f"{path}: no 'time' column")
        dims = [c for c in columns if c not in ("time", "code", "spread") and not c.startswith("feature:")]
        feats = [c for c in columns if c.startswith("feature:")]
        rows, times, features, codes, spreads = [], [], [], [], []
        for n, r in enumerate(reader):
            rows.append({d: r[d] for d in dims})
            times.append(float(r["time"]))
            features.append({f.removeprefix("feature:"): float(r[f]) for f in feats if r[f] != ""})
            codes.append(r["code"] if "code" in columns and r["code"] else f"row{n}")
            spreads.append(float(r["spread"]) if r.get("spread") else None)
    labels = {d: sorted({r[d] for r in rows}, key=lambda v: (v != DEFAULT, v)) for d in dims}
    baseline = next((i for i, r in enumerate(rows) if all(v == DEFAULT for v in r.values())), 0)
    if not features[baseline]:  # `report --table` before it wrote them: a row of the baseline's code has them
        features[baseline] = next((f for f, c in zip(features, codes, strict=True)
                                   if f and c == codes[baseline]), {})
    return Table(labels, rows, times, features, codes, baseline, spreads)


def without_features(table: Table) -> Table:
    """The table with the options alone (no compile-time features)."""
    return replace(table, features=[{} for _ in table.rows])


def space_of(table: Table) -> FlagSpace:
    """The table's dimensions, in the order `tune` searches them where their names are the tool's
    (stage, then the order of its flag list): a table written by `report --table` has them sorted
    by name."""
    # name -> (stage, place in the tool's list, anchor); a name the tool lacks comes last.
    tools = {d.name: (d.stage, i, d.anchor)
             for lang in ("CUDA", "CXX") for i, d in enumerate(dimensions_for(lang))}
    unknown = (4, 0, "")
    names = sorted(table.dims, key=lambda d: tools.get(d, unknown)[:2])
    return FlagSpace(tuple(Dimension(LANGUAGE, d, tuple(v for v in table.dims[d] if v != DEFAULT), "{v}",
                                     tools.get(d, unknown)[0], anchor=tools.get(d, unknown)[2])
                           for d in names))


def _keyed(row: dict[str, str]) -> dict[str, str]:
    return {f"{LANGUAGE}:{d}": v for d, v in row.items()}


def _plain(config: dict[str, str]) -> dict[str, str]:
    return {k.split(":", 1)[1]: v for k, v in config.items()}


def prior_of(table: Table) -> list[Trial]:
    """Every row of another target's table as a measured evaluation (warm start)."""
    base = table.times[table.baseline]
    return [Trial(_keyed(row), t / base, t / base < 1.0)
            for row, t in zip(table.rows, table.times, strict=True)]


def prior_from(path: Path | None = None) -> Callable[[], Prior | None]:
    """The prior as `tune` loads it: the model file at `path`, else the shipped one; loaded once."""
    return functools.cache(lambda: load_prior(path))


SHIPPED_PRIOR = prior_from()


def ours(table: Table, name: str, seed: int, load_prior: Callable[[], Prior | None] = SHIPPED_PRIOR,
         transfer: Sequence[Trial] = ()) -> Strategy:
    """Our strategy `name` as `tune` makes it for the table's space and baseline (search_strategy):
    the model takes the prior where `tune` would; `transfer` warm-starts it."""
    return search_strategy(name, seed, space_of(table), table.features[table.baseline], load_prior,
                           transfer)[0]


def run_ours(table: Table, strategy: Strategy, budget: int, ahead: int | None = None,
             by_code: dict[str, float] | None = None) -> list[float]:
    """Times measured, in order (one per evaluation), by a strategy choosing among the table's rows
    through `tune`'s loop (loop.drive): a row of a code measured before is free, the budget counts
    distinct codes, the candidate bound, vetting and compiling ahead are tune's.

    Every row's code and features are known from the start (as if all were compiled), unless
    `ahead` is given: then only those of the rows compiled, those proposed and `ahead` per
    evaluation that the strategy's `scout` names (tune --compile-ahead).  `by_code` gets each
    code's time as measured."""
    base = table.times[table.baseline]
    times: list[float] = []

    def row_of(config: Config) -> int:
        if (row := table.index(_plain(config))) is None:
            raise AssertionError(f"{strategy.name} named a configuration outside the table")
        return row

    def compile_row(config: Config) -> Candidate:
        row = row_of(config)
        return Candidate(_keyed(table.rows[row]), table.codes[row], table.features[row])

    def measure(config: Config, code: str) -> Measured:
        row = row_of(config)
        times.append(table.times[row])
        if by_code is not None:
            by_code[code] = table.times[row]
        return Measured(table.times[row] / base, table.times[row] < base, table.spreads[row])

    known = [Candidate(_keyed(r), c, f) if ahead is None or i == table.baseline else Candidate(_keyed(r), "")
             for i, (r, c, f) in enumerate(zip(table.rows, table.codes, table.features, strict=True))]
    drive(strategy, space_of(table), budget, compile_row, measure, baseline_code=table.codes[table.baseline],
          baseline_features=table.features[table.baseline], known=known, closed=True,
          compile_ahead=ahead or 0)
    return times


def run_peer(table: Table, peer: Peer, budget: int, seed: int, name: str = "peer") -> list[float]:
    """Times measured by a peer engine through the same loop: a configuration outside the table is
    answered by its nearest row (fewest options changed, ties broken by the seed), the same row
    each time the engine asks for it."""
    rng = random.Random(f"nearest:{seed}")

    @functools.cache
    def row(labels: tuple[tuple[str, str], ...]) -> Config:
        return _keyed(table.rows[table.nearest(dict(labels), rng)])

    # The engine is told the time measured (not the loop's ratio times the baseline's: SMAC's
    # forest follows the last bit of its costs).
    by_code = {table.codes[table.baseline]: table.times[table.baseline]}
    strategy = PeerStrategy(name, peer, table.dims, budget, seed, lambda config: row(tuple(config.items())),
                            lambda trial: by_code[trial.code])
    try:
        return run_ours(table, strategy, budget, by_code=by_code)
    finally:
        strategy.close()


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


OURS = ("exhaustive", "random", "staged", "model")  # run by default; any name of REGISTRY may be asked


def replay(table: Table, budget: int, seeds: int, strategies: list[str],
           transfer: list[Trial] | None = None, ahead: int | None = None,
           load_prior: Callable[[], Prior | None] = SHIPPED_PRIOR) -> dict[str, dict]:
    results: dict[str, dict] = {}
    for name in strategies:
        fractions, evals = [], []
        try:
            for seed in range(seeds if name not in ("exhaustive", "staged") else 1):
                if name in REGISTRY:
                    strategy = ours(table, name, seed, load_prior, transfer or ())
                    measured = run_ours(table, strategy, budget, ahead)
                else:
                    measured = run_peer(table, PEERS[name], budget, seed, name)
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
                   choices=[*REGISTRY, *PEERS])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-features", action="store_true",
                   help="ignore the feature: columns: the options (and codes) alone")
    p.add_argument("--prior", type=Path, metavar="TABLE",
                   help="another target's table over the same dimensions: its rows warm-start the model")
    p.add_argument("--compile-ahead", type=int, metavar="K",
                   help="our strategies know a row's code and features only once it is measured or "
                        "named by the strategy's scout, K per evaluation (as tune --compile-ahead K); "
                        "default: every row's from the start")
    model = p.add_mutually_exclusive_group()
    model.add_argument("--prior-model", type=Path, metavar="PATH",
                       help="the prior's model file, as tune --prior (default: the shipped one)")
    model.add_argument("--no-prior", action="store_true",
                       help="the model without a prior, as tune --no-prior")
    args = p.parse_args(argv)
    table = load_table(args.table)
    if args.no_features:
        table = without_features(table)
    transfer = prior_of(load_table(args.prior)) if args.prior else None
    results = replay(table, args.budget, args.seeds, args.strategies, transfer, args.compile_ahead,
                     (lambda: None) if args.no_prior else prior_from(args.prior_model))
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
    print(f"{'strategy':16} {'fraction of optimum gain':>22} {'evaluations to 95%':>20} "
          f"{'runs short of 95%':>18}")
    for name, r in results.items():
        if "unavailable" in r:
            print(f"{name:16} unavailable: {r['unavailable']}")
            continue
        e = r["evals_to_95"]
        shown = "not reached" if e is None or e == math.inf else f"{e:g}"
        short = f"{r['short_of_95']} of {r['runs']}"
        print(f"{name:16} {r['fraction_at_budget']:>22.3f} {shown:>20} {short:>18}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
