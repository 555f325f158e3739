"""How long the model strategy takes to choose, per call of `scout` and `propose`, on the open
evaluation's landscapes (one seed, compile-ahead as given): the part of a live compile ahead that
is the strategy's own, beside the build and the reading of its code.

    python -m benchmarks.scout_time Rodinia__lud__lud_perimeter HeCBench__wmma__gemm_impl0
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import open_eval
from compileiq_build.search.strategies.model.strategy import ModelGuided


def _timed(calls: dict[str, list[float]], name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    def timed(self: ModelGuided, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return method(self, *args, **kwargs)
        finally:
            calls[name].append(time.perf_counter() - start)
    return timed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scout_time", description=__doc__.split("\n\n")[0])
    p.add_argument("stems", nargs="+", help="table file stems (benchmarks/corpus/tables)")
    p.add_argument("--budgets", type=int, nargs="+", default=[10, 20])
    p.add_argument("--compile-ahead", type=int, default=2)
    p.add_argument("--cache", type=Path, default=open_eval.PRIOR_CACHE,
                   help="the priors fitted without each project")
    args = p.parse_args(argv)
    paths = open_eval.table_paths()
    by_stem = {path.stem: path for path in paths}
    if missing := [s for s in args.stems if s not in by_stem]:
        p.error(f"no such table: {', '.join(missing)}")
    calls: dict[str, list[float]] = {"scout": [], "propose": []}
    originals = {name: getattr(ModelGuided, name) for name in calls}
    for name, method in originals.items():
        setattr(ModelGuided, name, _timed(calls, name, method))
    try:
        pooled = open_eval.pooled_residuals(paths)
        for stem in args.stems:
            path = by_stem[stem]
            prior = open_eval.prior_for(open_eval.read_table(path).project, paths, args.cache)
            result = open_eval.evaluate_table((path, pooled, prior, args.budgets, 1, ["model"],
                                               args.compile_ahead, None))
            print(f"{stem}: fraction {result['at']['model']}")
    finally:  # the class as it was, for whoever runs next in this process
        for name, method in originals.items():
            setattr(ModelGuided, name, method)
    for name, seconds in calls.items():
        mean = sum(seconds) / len(seconds) if seconds else 0.0
        print(f"{name}: {len(seconds)} calls, {sum(seconds):.1f} s, {mean * 1000:.0f} ms per call")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
