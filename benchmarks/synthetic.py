"""Synthetic sampled tables over the whole default CUDA space, for replays that the recorded
tables cannot overfit.

Each landscape is drawn from a small model of how the options act on one kernel, built on what
the recorded H200 tables show (benchmarks/results/search/large/README.md):

- `--register-usage-level` and `-maxrregcount` set the register count together: the level moves
  the count the compiler wants (several levels give one code), a cap below it spills, a cap above
  it changes nothing.  Registers set occupancy, which the kernel needs up to a point; more
  registers also buy some instruction-level parallelism (or cost it).  This is the interaction
  that holds the sample gemm's optimum.
- `-Xptxas -O1` is slower, `-O2` often the default's code.
- Cache modifiers and the other options: small effects, often no change of code at all, and
  some whose effect changes sign in the high-occupancy regime (the trap the sample gemm's
  `-dscm=cg` set).
- A measured time carries noise of about 0.15% per code, as in the recorded tables.

A table is written as `report --table` writes one: the baseline, every one-option move, then
uniform draws (261 rows in all by default), with a `code` column and `feature:` columns.

    python -m benchmarks.synthetic --out DIR [--landscapes 12] [--rows 261]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import math
import random
from dataclasses import dataclass
from pathlib import Path

from compileiq_build.build.space import DEFAULT, dimensions_for

# The default space of `tune`: the numerics-changing options are left out unless asked for.
DIMS = {d.name: d.values for d in dimensions_for("CUDA") if not d.numerics}
SMALL = ("dlcm", "dscm", "allow-expensive-optimizations", "extra-device-vectorization",
         "jump-table-density", "restrict")


@dataclass
class Landscape:
    rng: random.Random

    def __post_init__(self) -> None:
        r = self.rng
        self.threads = r.choice((128, 256, 512))
        self.need0 = r.randrange(40, 200)
        while self.need0 * self.threads > 65536:  # the project's own flags launch
            self.threads //= 2
        self.per_level = r.uniform(0.03, 0.12)  # register demand per level away from 5
        self.levels_per_code = r.choice((1, 2, 3, 4))
        self.saturation = r.uniform(0.6, 1.3) * self._occupancy(self._need(0))  # what it needs
        self.ilp = r.uniform(-0.06, 0.08)  # gain per doubling of registers
        self.spill_cost = r.uniform(2.0, 20.0)
        self.o1 = r.uniform(0.0, 0.06)
        self.o2_same = r.random() < 0.6
        self.o2 = r.gauss(0.0, 0.01)
        # Small options: per value, whether it changes the code, its effect, and its effect in
        # the high-occupancy regime (sometimes of the other sign).
        self.small: dict[tuple[str, str], tuple[bool, float, float]] = {}
        for name in SMALL:
            acts = r.random() < 0.45
            for v in DIMS[name]:
                if not acts or r.random() < 0.3:
                    self.small[name, v] = (False, 0.0, 0.0)
                    continue
                scale = 0.04 if (name, v) == ("dlcm", "cv") else 0.008
                effect = r.gauss(0.0, scale)
                shifted = effect + (r.gauss(0.0, 0.006) if r.random() < 0.3 else 0.0)
                self.small[name, v] = (True, effect, shifted)
        self.noise = {}

    def _need(self, group: int) -> int:
        return max(16, 8 * round(self.need0 * (1 + self.per_level * group * self.levels_per_code) / 8))

    def _occupancy(self, regs: int) -> float:
        blocks = min(32, 65536 // (max(regs, 16) * self.threads))
        return min(1.0, blocks * self.threads / 2048)

    def compile(self, config: dict[str, str]) -> tuple[tuple, dict[str, float]]:
        """The code (a hashable identity) and features of a configuration."""
        level = 5 if config["register-usage-level"] == DEFAULT else int(config["register-usage-level"])
        group = round((level - 5) / self.levels_per_code)
        need = self._need(group)
        cap = 255 if config["maxrregcount"] == DEFAULT else int(config["maxrregcount"])
        regs, spill = min(need, cap), max(0, need - cap)
        opt = config["ptxas-O"]
        opt = "2" if opt == "2" and not self.o2_same else "3" if opt in (DEFAULT, "2") else "1"
        small = tuple((n, config[n]) for n in SMALL if config[n] != DEFAULT and self.small[n, config[n]][0])
        code = (regs, spill, opt, small)
        # As in SASS: the register count, spills, and an instruction-mix count that each
        # change of code moves (cache operators appear as instruction variants).
        features = {"registers_max": regs, "spill_bytes": 4.0 * spill,
                    "all:ffma": 1000 + 40 * group + (20 if opt == "1" else 0),
                    "all:ldg": 200 + 7 * spill, "all:stg": 50 + 5 * spill,
                    "all:inst": 3000 + 60 * group + 25 * spill + 15 * len(small) + (200 if opt == "1" else 0)}
        for name, v in small:
            features[f"all:{name}.{v}"] = 64.0
        return code, features

    def time(self, code: tuple) -> float:
        regs, spill, opt, small = code
        occupancy = self._occupancy(regs)
        t = 1.0 / min(1.0, occupancy / self.saturation) ** 0.8 if occupancy > 0 else 50.0
        t *= 1 - self.ilp * math.log2(regs / self.need0) if regs else 1.0
        t *= 1 + self.spill_cost * spill / (regs + spill)
        t *= 1 + (self.o1 if opt == "1" else self.o2 if opt == "2" else 0.0)
        high = occupancy >= self.saturation
        for name, v in small:
            _, effect, shifted = self.small[name, v]
            t *= 1 + (shifted if high else effect)
        if code not in self.noise:
            self.noise[code] = self.rng.gauss(0.0, 0.0015)
        return t * (1 + self.noise[code])


def code_label(code: tuple) -> str:
    """A landscape's code as a table's `code` column holds it: an opaque label."""
    return hashlib.sha256(repr(code).encode()).hexdigest()[:16]


def _rows(rng: random.Random, count: int) -> list[dict[str, str]]:
    base = {n: DEFAULT for n in DIMS}
    rows = [base] + [{**base, n: v} for n, values in DIMS.items() for v in values]
    seen = {tuple(r.values()) for r in rows}
    while len(rows) < count:
        row = {n: rng.choice((DEFAULT, *values)) for n, values in DIMS.items()}
        if tuple(row.values()) not in seen:
            seen.add(tuple(row.values()))
            rows.append(row)
    return rows


def write_table(path: Path, seed: int, count: int = 261) -> None:
    rng = random.Random(seed)
    land = Landscape(rng)
    rows = _rows(rng, count)
    compiled = [land.compile(r) for r in rows]
    names = sorted({k for _, f in compiled for k in f})
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow([*sorted(DIMS), "code", *(f"feature:{n}" for n in names), "time"])
        for row, (code, feats) in zip(rows, compiled, strict=True):
            w.writerow([*(row[n] for n in sorted(DIMS)), code_label(code),
                        *(feats.get(n, 0.0) for n in names), f"{land.time(code):.6g}"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.synthetic", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--landscapes", type=int, default=12)
    p.add_argument("--rows", type=int, default=261)
    p.add_argument("--first-seed", type=int, default=0)
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for seed in range(args.first_seed, args.first_seed + args.landscapes):
        write_table(args.out / f"synthetic_{seed:03d}.csv", seed, args.rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
