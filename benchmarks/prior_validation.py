"""The prior validated leave-one-project-out: replays on every corpus table, with and without it,
against random search and the peers.

For each project of the corpus, a prior is fitted on the tables of every other project (no kernel
of the project under test is seen), and each of that project's tables is replayed
(`search_replay.run_ours`: `tune`'s loop, closed, compiling `--compile-ahead` configurations
ahead per evaluation) at every budget, by the model, made as `tune` makes it, with that prior and
without one.  Random
search and the peers (`benchmarks/peers.py`) run once at the largest budget and are read at each
budget from the prefix of their run.  Reported per method and budget: the median and quartiles of
the fraction of the optimum's gain reached and the share of tables short of 0.90, over all tables
and over those whose optimum gains at least `--min-gain` (below it the optimum is within the
noise of the measurement, and so is any fraction of it); a plot of the fraction against
evaluations (median and quartiles).

    python -m benchmarks.prior_validation benchmarks/corpus/tables --json out.json --plot out.png
        [--budgets 5 10 20] [--seeds 3] [--peers optuna-tpe smac ...] [--jobs 2]

Random search and the peers do not depend on this package's strategy: `--no-ours` runs only
them, and `--others-from FILE` reads theirs from such a run (the same tables, budgets and seeds)
instead of running them again, so that a change to the strategy is measured in minutes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from benchmarks.peers import PEERS, PeerUnavailable
from benchmarks.search_replay import Table, load_table, ours, run_ours, run_peer
from compileiq_build.search.prior import Prior, fit, read_table

OURS = ("model+prior", "model")


def fraction(table: Table, measured: Sequence[float]) -> float:
    base = table.times[table.baseline]
    gain = base - table.optimum
    return (base - min([base, *measured])) / gain if gain > 0 else 1.0


def trace(table: Table, measured: Sequence[float], budget: int) -> list[float]:
    """The fraction reached after each evaluation 1..budget (the last one held where it stopped)."""
    return [fraction(table, measured[:k]) for k in range(1, budget + 1)]


def _replay(job: tuple[Path, list[Path], list[int], int, list[str], int, bool, dict | None]) -> dict:
    """One table: the model with the left-out prior and without, at each budget (unless not
    `ours`); the others once, unless given (`given`: an earlier run's result for this table)."""
    path, training, budgets, seeds, peers, ahead, ours, given = job
    table = load_table(path)
    # A table of fewer codes than a budget is measured whole before it: no peer could spend more.
    codes = len(set(table.codes)) - 1
    asked = budgets
    top = min(max(budgets), codes)
    out: dict = {"table": path.stem, "optimum_gain": table.times[table.baseline] / table.optimum - 1.0,
                 "rows": len(table.rows), "at": {}, "trace": {}}
    if ours:
        _ours(out, table, training, asked, codes, ahead)
    if given is not None:
        for key in ("at", "trace"):
            out[key].update({k: v for k, v in given[key].items() if k not in OURS})
        out["unavailable"] = given.get("unavailable", {})
        return out
    others: dict[str, list[list[float]]] = {"random": [
        trace(table, run_ours(table, ours(table, "random", seed), top), top)
        for seed in range(seeds)]}
    for name in peers:
        try:
            others[name] = [trace(table, run_peer(table, PEERS[name], top, seed, name), top)
                            for seed in range(seeds)]
        except PeerUnavailable as exc:
            out.setdefault("unavailable", {})[name] = str(exc)
    for name, traces in others.items():
        mean_trace = [statistics.median(t[k] for t in traces) for k in range(top)]
        out["trace"][name] = mean_trace + [mean_trace[-1]] * (max(asked) - top)
        out["at"][name] = {str(b): mean_trace[min(b, top) - 1] for b in asked}
    return out


def _ours(out: dict, table: Table, training: list[Path], asked: list[int], codes: int, ahead: int) -> None:
    """The model with a prior fitted on `training` and without one, at each budget, and traces."""
    prior = Prior(fit([read_table(p) for p in training]), {}, Path("left-out"))
    top = min(max(asked), codes)
    for name, given in (("model+prior", prior), ("model", None)):
        def run(budget: int, given: Prior | None = given) -> list[float]:
            return run_ours(table, ours(table, "model", 0, lambda: given), budget, ahead)

        out["at"][name] = {str(b): fraction(table, run(min(b, codes))) for b in asked}
        measured = run(top)
        out["trace"][name] = trace(table, measured, top) + [fraction(table, measured)] * (max(asked) - top)


def _quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        v = values[0] if values else float("nan")
        return v, v, v
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], statistics.median(values), q[2]


def summary(results: Sequence[dict], budgets: Sequence[int], min_gain: float) -> list[str]:
    methods = list(results[0]["at"])
    lines = []
    for label, chosen in (("all tables", results),
                          (f"tables whose optimum gains >= {100 * min_gain:g}%",
                           [r for r in results if r["optimum_gain"] >= min_gain])):
        lines.append(f"{label} ({len(chosen)}): median [quartiles] of the fraction of the optimum's gain; "
                     "share of tables short of 0.90")
        lines.append(f"{'method':18}" + "".join(f"{'budget ' + str(b):>30}" for b in budgets))
        for m in methods:
            cells = []
            for b in budgets:
                values = [r["at"][m][str(b)] for r in chosen if m in r["at"]]
                if not values:
                    cells.append(f"{'-':>30}")
                    continue
                lo, med, hi = _quartiles(values)
                short = sum(v < 0.90 for v in values) / len(values)
                cells.append(f"{f'{med:.3f} [{lo:.2f}, {hi:.2f}] {100 * short:.0f}%':>30}")
            lines.append(f"{m:18}" + "".join(cells))
        lines.append("")
    return lines


def plot(results: Sequence[dict], path: Path, min_gain: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    chosen = [r for r in results if r["optimum_gain"] >= min_gain]
    fig, ax = plt.subplots(figsize=(8, 5))
    for m in results[0]["trace"]:
        traces = np.array([r["trace"][m] for r in chosen if m in r["trace"]])
        if not len(traces):
            continue
        x = np.arange(1, traces.shape[1] + 1)
        lo, med, hi = np.percentile(traces, [25, 50, 75], axis=0)
        (line,) = ax.plot(x, med, label=m, lw=2.5 if m.startswith("model") else 1.2)
        ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.12)
    ax.set_xlabel("evaluations (distinct machine codes measured)")
    ax.set_ylabel("fraction of the optimum's gain (median, quartiles)")
    ax.set_title(f"leave-one-project-out, {len(chosen)} corpus tables (optimum gain >= {100 * min_gain:g}%)")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.prior_validation",
                                description=(__doc__ or "").split("\n")[0])
    p.add_argument("corpus", type=Path)
    p.add_argument("--budgets", type=int, nargs="+", default=[5, 10, 20])
    p.add_argument("--seeds", type=int, default=3, help="seeds of random search and the peers")
    p.add_argument("--peers", nargs="*", default=list(PEERS), choices=list(PEERS))
    p.add_argument("--compile-ahead", type=int, default=5)
    p.add_argument("--min-gain", type=float, default=0.01)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--json", type=Path)
    p.add_argument("--plot", type=Path)
    p.add_argument("--no-ours", dest="ours", action="store_false",
                   help="run random search and the peers only")
    p.add_argument("--others-from", type=Path,
                   help="random search's and the peers' results from this earlier --json, not run again")
    args = p.parse_args(argv)
    paths = sorted(args.corpus.glob("*.csv"))
    projects = {path: read_table(path).project for path in paths}
    given = ({r["table"]: r for r in json.loads(args.others_from.read_text())}
             if args.others_from else None)
    if given is not None and (missing := [p.stem for p in paths if p.stem not in given]):
        p.error(f"{args.others_from} holds no result for {len(missing)} tables ({missing[0]}, ...)")
    jobs = [(path, [q for q in paths if projects[q] != projects[path]], args.budgets, args.seeds, args.peers,
             args.compile_ahead, args.ours, given[path.stem] if given else None) for path in paths]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = []
        for r in pool.map(_replay, jobs):
            results.append(r)
            top = str(max(args.budgets))
            print(f"{r['table']}: " + ", ".join(f"{m} {v[top]:.2f}" for m, v in r["at"].items()),
                  file=sys.stderr, flush=True)
    for project in sorted(set(projects.values())):
        n = sum(projects[q] == project for q in paths)
        print(f"{project}: {n} tables, prior trained on {len(paths) - n}")
    print("\n".join(summary(results, args.budgets, args.min_gain)))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    if args.plot:
        plot(results, args.plot, args.min_gain)
    return 0


if __name__ == "__main__":
    sys.exit(main())
