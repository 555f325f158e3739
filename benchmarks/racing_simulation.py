"""The search stage's stopping rules simulated over benchmark noise: pairs per neutral candidate
and the power to find a faster one, with the indifference zone and without it.

A candidate of a given cost ratio is measured in pairs of log-normal noise of sd `noise` per
paired log ratio, under `racing.sampling_done` as `tune`'s search stage calls it during
screening (incumbent the baseline, no finalists yet); "faster" is `stats.ratio_estimate`'s call
when it stops.  A/A: a neutral candidate called faster is validated as `tune` does (twice the
pairs, fresh draws, no zone): `aa_winners` counts those that pass both.  No GPU, no build: the
rules alone, over the noise levels seen on GPUs (0.1-1%: ~1% on kernels that print bandwidth)
and on CPU benchmarks (1-5%).  `--recorded` draws the noise's shape (tails, runs of one sign)
from the H200 A/A pools instead: their log ratios in order, centred and scaled to `noise`.

    python -m benchmarks.racing_simulation [--runs 2000] [--noises 0.003 0.015] [--recorded] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from itertools import pairwise
from pathlib import Path

import numpy as np

from compileiq_build.decide.racing import NORMAL_STEP, Race, Sampling, raced_out, sampling_done
from compileiq_build.decide.stats import ratio_estimate

POOLS = Path(__file__).parent / "results" / "measurement"

NOISES = (0.001, 0.003, 0.005, 0.008, 0.01, 0.015, 0.03, 0.05)
RATIOS = (1.0, 0.995, 0.99, 0.985, 0.98, 0.95)
# on: the noise is known from the target's earlier evaluations; first: not yet (its first
# evaluations: the zone reads the candidate's own interval); off: no indifference zone.
ZONES = ("on", "first", "off")


def recorded() -> list[list[float]]:
    """The H200 A/A pools' log ratios in order, each pool centred on its median and divided by
    its noise as `race_for` measures it (successive differences)."""
    pools = []
    for path in sorted(POOLS.glob("measurement_pools*.json")):
        logs = [math.log(r["cand"] / r["base"]) for r in json.loads(path.read_text())["aa"]]
        centre = statistics.median(logs)
        sd = statistics.median(abs(a - b) for a, b in pairwise(logs)) / NORMAL_STEP
        pools.append([(x - centre) / sd for x in logs])
    return pools


def measure(rng: np.random.Generator, ratio: float, race: Race | None, workloads: int = 1,
            sampling: Sampling | None = None, noise: float = 0.003,
            shape: list[list[float]] | None = None) -> tuple[int, bool, bool]:
    """One measurement of a candidate `ratio` times the baseline's cost, at `noise`: (pairs
    taken, raced out?, called faster?).  With `shape` (`recorded()`), each workload's pairs
    follow a window of a recorded pool from a random start (wrapping around)."""
    sampling = sampling or Sampling()
    costs: dict[str, tuple[list[float], list[float]]] = {f"w{i}": ([], []) for i in range(workloads)}
    starts = [(pool, int(rng.integers(len(pool)))) for pool in
              (shape[int(rng.integers(len(shape)))] for _ in costs)] if shape else []
    for pairs in range(1, sampling.max_pairs + 1):
        for i, (cand, base) in enumerate(costs.values()):
            if shape:
                pool, start = starts[i]
                base.append(1.0)
                cand.append(float(ratio * np.exp(noise * pool[(start + pairs - 1) % len(pool)])))
                continue
            base.append(float(np.exp(rng.normal(0, noise / np.sqrt(2)))))
            cand.append(float(ratio * np.exp(rng.normal(0, noise / np.sqrt(2)))))
        if sampling_done(costs, pairs, sampling, 0.0, race):
            break
    raced = bool(raced_out(costs, pairs, race))
    faster = not raced and all(ratio_estimate(c, b).faster for c, b in costs.values())
    return pairs, raced, faster


def simulate(runs: int, noises: tuple[float, ...] = NOISES, seed: int = 0,
             shape: list[list[float]] | None = None) -> list[dict]:
    """Per noise level and `ZONES` (incumbent the baseline): mean pairs and the share called
    faster, per candidate ratio; and the neutral candidates that validation then passes."""
    rows = []
    validation = Sampling().scaled(2)
    for noise in noises:
        for zone in ZONES:
            known = {} if zone == "first" else {"w0": noise}
            race = Race(None, known, incumbent=None if zone == "off" else 1.0)
            row: dict = {"noise": noise, "zone": zone}
            called = {}
            for ratio in RATIOS:
                rng = np.random.default_rng(seed)
                done = [measure(rng, ratio, race, noise=noise, shape=shape) for _ in range(runs)]
                called[ratio] = sum(f for *_, f in done)
                row[f"{ratio}"] = {"pairs": float(np.mean([p for p, *_ in done])),
                                   "faster": called[ratio] / runs}
            rng = np.random.default_rng(seed + 1)
            row["aa_winners"] = sum(measure(rng, 1.0, None, sampling=validation, noise=noise, shape=shape)[2]
                                    for _ in range(called[1.0]))
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=2000)
    p.add_argument("--noises", type=float, nargs="+", default=list(NOISES),
                   help="sd of the paired log ratio, e.g. 0.003 for 0.3%%")
    p.add_argument("--recorded", action="store_true", help="the noise's shape from the H200 A/A pools")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    rows = simulate(args.runs, tuple(args.noises), shape=recorded() if args.recorded else None)
    print("noise  zone  | " + " | ".join(f"{r}: pairs faster" for r in RATIOS)
          + f" | A/A winners of {args.runs}")
    for row in rows:
        cells = " | ".join(f"{row[str(r)]['pairs']:5.1f} {row[str(r)]['faster']:6.1%}" for r in RATIOS)
        print(f"{row['noise']:5.1%}  {row['zone']:5} | {cells} | {row['aa_winners']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
