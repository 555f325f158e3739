"""Every proposal of our strategies replayed on corpus tables, as text to compare before and after
a refactoring that must not change behaviour (a move of files, a rename).

For each of `--tables` tables spread over the corpus, each strategy and seed, closed and with
compile-ahead, it prints the configurations proposed, each with its phase, and the times
measured.  Run it on the tree before the change and on the tree after, then compare the files:
byte-identical output is the evidence the issue of a refactoring asks for.

    python -m benchmarks.proposal_trace OUT.txt [--tables 6] [--budget 12] [--seeds 2]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from benchmarks import search_replay
from compileiq_build.search.strategies import Context, Proposal, Stop, Strategy

CORPUS = Path(__file__).parent / "corpus" / "tables"


class Traced:
    """A strategy whose proposals are written down as they are made."""

    def __init__(self, inner: Strategy, lines: list[str]) -> None:
        self.inner, self.lines, self.name = inner, lines, inner.name

    def propose(self, context: Context) -> Proposal | Stop:
        result = self.inner.propose(context)
        self.lines.append(repr(result.config) + " " + result.phase if isinstance(result, Proposal)
                          else f"stop: {result.reason}")
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # scout and vet, where the strategy has them


def trace(tables: int, budget: int, seeds: int) -> list[str]:
    paths = sorted(CORPUS.glob("*.csv"))
    chosen = paths[:: max(1, len(paths) // tables)][:tables]
    lines: list[str] = []
    for path in chosen:
        table = search_replay.load_table(path)
        for name in ("model", "staged", "random"):
            for seed in range(seeds):
                for ahead in (None, 8):
                    strategy = Traced(search_replay.ours(table, name, seed), lines)
                    header = len(lines)
                    times = search_replay.run_ours(table, strategy, budget, ahead)
                    lines.insert(header, f"{path.name} {name} seed {seed} ahead {ahead}: {times}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.proposal_trace",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--tables", type=int, default=6)
    p.add_argument("--budget", type=int, default=12)
    p.add_argument("--seeds", type=int, default=2)
    args = p.parse_args(argv)
    lines = trace(args.tables, args.budget, args.seeds)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"{len(lines)} lines to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
