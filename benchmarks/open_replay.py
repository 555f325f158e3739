"""Replay our model on synthetic landscapes over the whole default CUDA space, open as in `tune`.

The sampled tables of `search_replay` close the search to their rows: a configuration outside
them cannot be proposed, compiled ahead or measured.  `tune` has no such bound, and on the H200
it did what the closed replays could not show (benchmarks/results/search/large/README.md).
Here a landscape of `benchmarks.synthetic` answers any configuration: compiling it
gives its code and features, measuring it the code's time (noise fixed per code).  The model is
made and run as in `tune` (search.target.search_strategy, search.loop.drive): the prior `tune`
loads (`--prior-model PATH`, `--no-prior`), evaluations counted in distinct codes, the candidate
bound, vetting, and `--compile-ahead K` configurations per evaluation that the strategy's
`scout` names compiled ahead; the model knows the code and features of those and of every
configuration it compiled.  The optimum is the best code of the whole space (120,960
configurations, each compiled).

    python -m benchmarks.open_replay [--landscapes 16] [--first-seed 0] [--budget 20]
        [--seeds 20] [--compile-ahead 5] [--json] [--prior-model PATH | --no-prior]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

from benchmarks.search_replay import SHIPPED_PRIOR, prior_from
from benchmarks.synthetic import DIMS, Landscape, code_label
from compileiq_build.build.space import DEFAULT, Config, FlagSpace, dimensions_for
from compileiq_build.search.loop import Measured, drive
from compileiq_build.search.prior import Prior
from compileiq_build.search.strategies import Candidate
from compileiq_build.search.target import search_strategy

SPACE = FlagSpace(tuple(d for d in dimensions_for("CUDA") if d.name in DIMS))


def _plain(config: dict[str, str]) -> dict[str, str]:
    """A strategy's configuration (keys "CUDA:<name>", options left out at their default) as
    the landscape takes it."""
    full = SPACE.full_config(config)
    return {d.name: full[d.key] for d in SPACE.dimensions}


def optimum(land: Landscape) -> float:
    """The best time of the whole space. Every code's noise is drawn here, in a fixed order, so
    that each code keeps one time whatever order a search measures them in."""
    names = list(DIMS)
    codes = {land.compile(dict(zip(names, values, strict=True)))[0]
             for values in itertools.product(*((DEFAULT, *DIMS[n]) for n in names))}
    return min(land.time(c) for c in sorted(codes))


def run(land: Landscape, budget: int, seed: int, ahead: int,
        load_prior: Callable[[], Prior | None] = SHIPPED_PRIOR) -> list[float]:
    """Times measured, in order (one per evaluation), by the model made and run as in `tune`
    (search_strategy, loop.drive) in an open context."""
    base_code, base_features = land.compile(_plain({}))
    base = land.time(base_code)
    codes: dict[str, tuple] = {}  # label -> the landscape's code
    times: list[float] = []

    def compile_(config: Config) -> Candidate:
        code, features = land.compile(_plain(config))
        codes[label := code_label(code)] = code
        return Candidate(config, label, features)

    def measure(config: Config, code: str) -> Measured:
        times.append(t := land.time(codes[code]))
        return Measured(t / base, t < base)

    strategy, _ = search_strategy("model", seed, SPACE, base_features, load_prior)
    drive(strategy, SPACE, budget, compile_, measure, baseline_code=code_label(base_code),
          baseline_features=base_features, compile_ahead=ahead)
    return times


def replay(seed: int, budget: int, seeds: int, ahead: int,
           load_prior: Callable[[], Prior | None] = SHIPPED_PRIOR) -> dict[str, float | int | None]:
    land = Landscape(random.Random(seed))
    best_time = optimum(land)
    base = land.time(land.compile(_plain({}))[0])
    gain = base - best_time
    fractions = []
    for s in range(seeds):
        best = min([base, *run(land, budget, s, ahead, load_prior)])
        fractions.append((base - best) / gain if gain > 0 else 1.0)
    return {"fraction_at_budget": statistics.median(fractions),
            "short_of_95": sum(f < 0.95 for f in fractions), "runs": seeds, "optimum_gain": gain / base}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.open_replay", description=__doc__.split("\n")[0])
    p.add_argument("--landscapes", type=int, default=16)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--budget", type=int, default=20)
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--compile-ahead", type=int, default=5)
    p.add_argument("--json", action="store_true")
    model = p.add_mutually_exclusive_group()
    model.add_argument("--prior-model", type=Path, metavar="PATH",
                       help="the prior's model file, as tune --prior (default: the shipped one)")
    model.add_argument("--no-prior", action="store_true",
                       help="the model without a prior, as tune --no-prior")
    args = p.parse_args(argv)
    load_prior = (lambda: None) if args.no_prior else prior_from(args.prior_model)
    results = {}
    for seed in range(args.first_seed, args.first_seed + args.landscapes):
        results[f"synthetic_{seed:03d}"] = r = replay(seed, args.budget, args.seeds, args.compile_ahead,
                                                      load_prior)
        if not args.json:
            print(f"synthetic_{seed:03d}: {r['fraction_at_budget']:.3f} of the optimum's gain "
                  f"({100 * r['optimum_gain']:.1f}%), {r['short_of_95']} of {r['runs']} seeds short of 95%",
                  flush=True)
    if args.json:
        json.dump(results, sys.stdout, indent=1, sort_keys=True)
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
