"""The search stage's stopping rules simulated over benchmark noise: pairs per neutral candidate
and the power to find a faster one, with the indifference zone and without it.

A candidate of a given cost ratio is measured in pairs of log-normal noise of sd `noise` per
paired log ratio, under `racing.sampling_done` as `tune`'s search stage calls it during
screening (incumbent the baseline, no finalists yet); "faster" is `stats.ratio_estimate`'s call
when it stops.  No GPU, no build: the rules alone, over the noise levels seen on GPUs (0.1-0.5%)
and on CPU benchmarks (1-5%).

    python -m benchmarks.racing_simulation [--runs 2000] [--noises 0.003 0.015] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from compileiq_build.decide.racing import Race, Sampling, raced_out, sampling_done
from compileiq_build.decide.stats import ratio_estimate

NOISES = (0.001, 0.003, 0.005, 0.008, 0.015, 0.03, 0.05)
RATIOS = (1.0, 0.995, 0.99, 0.98, 0.95)
# on: the noise is known from the target's earlier evaluations; first: not yet (its first
# evaluations: the zone reads the candidate's own interval); off: no indifference zone.
ZONES = ("on", "first", "off")


def measure(rng: np.random.Generator, ratio: float, race: Race | None, workloads: int = 1,
            sampling: Sampling | None = None, noise: float = 0.003) -> tuple[int, bool, bool]:
    """One measurement of a candidate `ratio` times the baseline's cost, at `noise`: (pairs
    taken, raced out?, called faster?)."""
    sampling = sampling or Sampling()
    costs: dict[str, tuple[list[float], list[float]]] = {f"w{i}": ([], []) for i in range(workloads)}
    for pairs in range(1, sampling.max_pairs + 1):
        for cand, base in costs.values():
            base.append(float(np.exp(rng.normal(0, noise / np.sqrt(2)))))
            cand.append(float(ratio * np.exp(rng.normal(0, noise / np.sqrt(2)))))
        if sampling_done(costs, pairs, sampling, 0.0, race):
            break
    raced = bool(raced_out(costs, pairs, race))
    faster = not raced and all(ratio_estimate(c, b).faster for c, b in costs.values())
    return pairs, raced, faster


def simulate(runs: int, noises: tuple[float, ...] = NOISES, seed: int = 0) -> list[dict]:
    """Per noise level and `ZONES` (incumbent the baseline): mean pairs and the share called
    faster, per candidate ratio."""
    rows = []
    for noise in noises:
        for zone in ZONES:
            known = {} if zone == "first" else {"w0": noise}
            race = Race(None, known, incumbent=None if zone == "off" else 1.0)
            row: dict = {"noise": noise, "zone": zone}
            for ratio in RATIOS:
                rng = np.random.default_rng(seed)
                done = [measure(rng, ratio, race, noise=noise) for _ in range(runs)]
                row[f"{ratio}"] = {"pairs": float(np.mean([p for p, *_ in done])),
                                   "faster": sum(f for *_, f in done) / runs}
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=2000)
    p.add_argument("--noises", type=float, nargs="+", default=list(NOISES),
                   help="sd of the paired log ratio, e.g. 0.003 for 0.3%%")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    rows = simulate(args.runs, tuple(args.noises))
    print("noise  zone  | " + " | ".join(f"{r}: pairs faster" for r in RATIOS))
    for row in rows:
        cells = " | ".join(f"{row[str(r)]['pairs']:5.1f} {row[str(r)]['faster']:6.1%}" for r in RATIOS)
        print(f"{row['noise']:5.1%}  {row['zone']:5} | {cells}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
