"""Replay our model on synthetic landscapes over the whole default CUDA space, open as in `tune`.

The sampled tables of `search_replay` close the search to their rows: a configuration outside
them cannot be proposed, compiled ahead or measured.  `tune` has no such bound, and on the H200
it did what the closed replays could not show (benchmarks/results/search/large/README.md).
Here a landscape of `benchmarks.synthetic` answers any configuration: compiling it
gives its code and features, measuring it the code's time (noise fixed per code).  Evaluations
count distinct codes measured, as in `tune` (which also ends a search after ten proposals per
evaluation of the budget, and measures a compiled proposal only if the strategy's `vet`
admits it); `--compile-ahead K` names K configurations per
evaluation to compile (the strategy's `scout`), and the model knows the code and features of
those and of every configuration it measured.  The optimum is the best code of the whole
space (120,960 configurations, each compiled).

    python -m benchmarks.open_replay [--landscapes 16] [--first-seed 0] [--budget 20]
        [--seeds 20] [--compile-ahead 5] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys

from benchmarks.synthetic import DIMS, Landscape, code_label
from compileiq_build.build.space import DEFAULT, FlagSpace, config_key, dimensions_for
from compileiq_build.search.loop import CANDIDATES_PER_EVALUATION
from compileiq_build.search.strategies import Candidate, Context, Proposal, Trial
from compileiq_build.search.strategies.model import ModelGuided

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


def run(land: Landscape, budget: int, seed: int, ahead: int) -> list[float]:
    """Times measured, in order, by the model in an open context."""
    strategy = ModelGuided(seed)
    base_code, _ = land.compile(_plain({}))
    base = land.time(base_code)
    compiled: dict[str, tuple[dict[str, str], tuple, dict[str, float]]] = {}
    history: list[Trial] = []
    measured: dict[tuple, float] = {base_code: base}
    times: list[float] = []

    def compile_(config: dict[str, str]) -> tuple:
        key = config_key(SPACE.full_config(config))
        if key not in compiled:
            code, features = land.compile(_plain(config))
            compiled[key] = (config, code, features)
        return compiled[key][1]

    def context() -> Context:
        known = [Candidate(c, code_label(code), f) for c, code, f in compiled.values()]
        return Context(SPACE, history, known, budget=budget, baseline_code=code_label(base_code))

    # As in `tune`, proposals that keep compiling to measured codes end the search after
    # CANDIDATES_PER_EVALUATION compiles per evaluation of the budget.
    turned_down = 0  # proposals compiled and not measured (the strategy's `vet`)
    while len(times) < budget and len(history) + turned_down < CANDIDATES_PER_EVALUATION * budget:
        for config in strategy.scout(context(), ahead) if ahead else ():
            compile_(config)
        proposal = strategy.propose(context())
        if not isinstance(proposal, Proposal):
            break
        code = compile_(proposal.config)
        features = compiled[config_key(SPACE.full_config(proposal.config))][2]
        if strategy.vet(context(), proposal, Candidate(proposal.config, code_label(code), features)):
            turned_down += 1
            continue
        if code not in measured:  # a code measured before costs no evaluation
            measured[code] = land.time(code)
            times.append(measured[code])
        ratio = measured[code] / base
        history.append(Trial(proposal.config, ratio, ratio < 1.0, code=code_label(code),
                             phase=proposal.phase, parent=proposal.parent))
    return times


def replay(seed: int, budget: int, seeds: int, ahead: int) -> dict[str, float | int | None]:
    land = Landscape(random.Random(seed))
    best_time = optimum(land)
    base = land.time(land.compile(_plain({}))[0])
    gain = base - best_time
    fractions = []
    for s in range(seeds):
        best = min([base, *run(land, budget, s, ahead)])
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
    args = p.parse_args(argv)
    results = {}
    for seed in range(args.first_seed, args.first_seed + args.landscapes):
        results[f"synthetic_{seed:03d}"] = r = replay(seed, args.budget, args.seeds, args.compile_ahead)
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
