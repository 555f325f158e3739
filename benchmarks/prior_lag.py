"""With the prior against without it, evaluation by evaluation, from two open-evaluation records.

Issue 42 asks that with the prior the search never does worse than without it beyond one
evaluation.  From each table's traces of the searches at `--budget` (`traces` of an open_eval.py
record, or in records before it the largest budget's `phases`: every measured configuration's
ratio, in order; a search at budget 10 is one of its own, not the first half of one at 20), the
best-so-far fraction of the
optimum's gain after n of them, median over the seeds; a table lags where the run with the
prior needs more than one beyond n to reach what the run without it had at n (within
`--tolerance` of the gain).  A configuration of a code measured before is in the traces though
it costs no evaluation, so n counts evaluations approximately (the record's fractions at each
budget are exact).

    python -m benchmarks.prior_lag WITH.jsonl model WITHOUT.jsonl model-noprior [--tolerance 0.02]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

NEVER = 99


def curves(path: Path, strategy: str, budget: int) -> dict[str, list[float]]:
    """Per table, the median over seeds of the best-so-far fraction after 1..budget evaluations."""
    out = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        gain = record["optimum_gain"]
        optimum = 1 / (1 + gain)
        runs = []
        traces = record.get("traces", {}).get(strategy, {}).get(str(budget)) or record["phases"][strategy]
        for trace in traces:
            best, curve = 1.0, []
            for _, _, ratio in trace[:budget]:
                best = min(best, ratio)
                curve.append(min(1.0, (1 - best) / (1 - optimum)) if gain > 0 else 1.0)
            runs.append(curve + [curve[-1] if curve else 0.0] * (budget - len(curve)))
        out[record["table"]] = [statistics.median(x) for x in zip(*runs, strict=True)]
    return out


def lag(with_prior: list[float], without: list[float], tolerance: float) -> int:
    """The most evaluations beyond n that the run with the prior needs to reach the other's level at n."""
    return max(next((m for m, f in enumerate(with_prior) if f >= level - tolerance - 1e-9), NEVER) - n
               for n, level in enumerate(without))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.prior_lag",
                                description=(__doc__ or "").split("\n")[0])
    p.add_argument("with_prior", type=Path)
    p.add_argument("with_strategy")
    p.add_argument("without", type=Path)
    p.add_argument("without_strategy")
    p.add_argument("--budget", type=int, default=20)
    p.add_argument("--tolerance", type=float, default=0.02, help="fractions of the gain this close are equal")
    args = p.parse_args(argv)
    a = curves(args.with_prior, args.with_strategy, args.budget)
    b = curves(args.without, args.without_strategy, args.budget)
    tables = sorted(set(a) & set(b))
    lags = {t: lag(a[t], b[t], args.tolerance) for t in tables}
    late = [t for t in tables if lags[t] > 1]
    print(f"{len(late)} of {len(tables)} tables where the run with the prior lags by more than one "
          f"evaluation (tolerance {args.tolerance:.0%} of the gain) within {args.budget}")
    for t in late:
        shown = "never" if lags[t] >= NEVER - args.budget else f"{lags[t]} evaluations"
        print(f"  {t}: {shown}\n    with    {[round(x, 2) for x in a[t]]}"
              f"\n    without {[round(x, 2) for x in b[t]]}")
    for n in sorted(n for n in {5, 10, 15, args.budget} if n <= args.budget):
        print(f"after {n:2d}: median fraction with {statistics.median(a[t][n - 1] for t in tables):.3f}, "
              f"without {statistics.median(b[t][n - 1] for t in tables):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
