"""Interleaved A/B rounds in a program's own harness: builds of one program, run in turns.

Each variant is a command (a build of the program: the baseline and the toolchain files to
judge); every round runs each variant once, in a random order drawn per round, and reads one
figure per workload from its output with a regular expression (its first group).  Reported
per variant and workload: the median over rounds of the per-round speedup over the baseline
(baseline cost / variant cost, so > 1 is faster; rates are inverted by --higher-is-better)
and a bootstrap 95% interval of that median.  A figure the harness does not confirm (the
interval holds 1) is no gain.  Full rounds go to --csv; the summary to stdout and --json.

    python -m benchmarks.harness_ab --rounds 12 --regex "time_ms: ([0-9.]+)" \
        --variant baseline "build/bench_gemm --n 2048" --variant tuned "tuned/bench_gemm --n 2048" \
        [--higher-is-better] [--csv rounds.csv] [--json summary.json] [--seed 0]

The first variant is the baseline.  A variant whose output lacks the figure, or that exits
non-zero, stops the run with its output's tail: a comparison with a failed run means nothing.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import re
import shlex
import statistics
import subprocess
import sys
from pathlib import Path


def read_figure(command: str, pattern: re.Pattern[str]) -> float:
    proc = subprocess.run(shlex.split(command), capture_output=True, text=True)
    found = pattern.search(proc.stdout)
    if proc.returncode != 0 or found is None:
        tail = (proc.stdout + proc.stderr)[-2000:]
        raise SystemExit(f"{command!r}: exit {proc.returncode}, no figure matching {pattern.pattern!r}"
                         f"\n{tail}")
    return float(found.group(1))


def bootstrap_median(values: list[float], rng: random.Random, draws: int = 2000) -> tuple[float, float]:
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    return medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]


def run_rounds(variants: dict[str, str], pattern: re.Pattern[str], rounds: int, higher_is_better: bool,
               rng: random.Random) -> list[dict[str, float]]:
    """Per round, each variant's cost (lower is better)."""
    out = []
    for n in range(rounds):
        order = list(variants)
        rng.shuffle(order)
        figures = {name: read_figure(variants[name], pattern) for name in order}
        out.append({name: (1 / v if higher_is_better else v) for name, v in figures.items()})
        shown = ", ".join(f"{k} {figures[k]:g}" for k in variants)
        print(f"round {n + 1}/{rounds}: {shown}", file=sys.stderr)
    return out


def summarize(costs: list[dict[str, float]], base: str, rng: random.Random) -> dict[str, dict[str, float]]:
    """Per variant, the median per-round speedup over `base` and its bootstrap interval.  The
    baseline is named: each round's dict is in that round's random order."""
    summary = {}
    for name in sorted(costs[0], key=lambda n: n != base):
        speedups = [r[base] / r[name] for r in costs]
        low, high = bootstrap_median(speedups, rng)
        summary[name] = {"median_speedup": statistics.median(speedups), "low": low, "high": high,
                         "rounds": len(speedups), "confirmed_faster": low > 1.0,
                         "confirmed_slower": high < 1.0}
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.harness_ab", description=__doc__.split("\n\n")[0])
    p.add_argument("--variant", nargs=2, action="append", metavar=("NAME", "COMMAND"), required=True)
    p.add_argument("--regex", required=True, help="the figure, as the regular expression's first group")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--higher-is-better", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--csv", type=Path)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    variants = dict(args.variant)
    if len(variants) < 2:
        p.error("give the baseline and at least one other --variant")
    pattern = re.compile(args.regex)
    rng = random.Random(args.seed)
    costs = run_rounds(variants, pattern, args.rounds, args.higher_is_better, rng)
    summary = summarize(costs, next(iter(variants)), rng)
    if args.csv:
        with args.csv.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=["round", *variants])
            writer.writeheader()
            writer.writerows({"round": n + 1, **r} for n, r in enumerate(costs))
    if args.json:
        record = {"variants": variants, "regex": args.regex, "summary": summary}
        args.json.write_text(json.dumps(record, indent=1))
    for name, s in summary.items():
        verdict = ("faster" if s["confirmed_faster"] else "slower" if s["confirmed_slower"]
                   else "no confirmed difference")
        print(f"{name}: {s['median_speedup']:.4f}x [{s['low']:.4f}, {s['high']:.4f}] "
              f"over {s['rounds']} rounds: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
