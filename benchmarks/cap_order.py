"""Which register cap screening measures first: the order of the values against the corpus.

For every corpus table that measured each cap alone (`--maxrregcount` one-option rows), it lists
the caps that changed the machine code, in two orders: extremes first (`screen.spread_order`) and
nearest the baseline code's registers first (`screen.value_order`, what screening uses), and
where in each the table's best cap comes.  A cap compiled to the baseline's code is free to the
search (known without measuring), so only caps that changed the code count.

    python -m benchmarks.cap_order > benchmarks/results/search/cap_order.txt
"""

from __future__ import annotations

import statistics

from benchmarks.open_eval import load_table, table_paths
from compileiq_build.build.space import dimensions_for
from compileiq_build.search.strategies.model import spread_order, value_order

GAIN = 0.005  # a cap "gains" when its one-option move is at least this much faster
SLOWER = 1.01


def main() -> None:
    cap = next(d for d in dimensions_for("CUDA") if d.name == "maxrregcount")
    rows = []
    for path in table_paths():
        table = load_table(path)
        base = table.times[table.baseline]
        alone = {r["maxrregcount"]: (table.times[i] / base, table.codes[i] == table.codes[table.baseline])
                 for i, r in enumerate(table.rows)
                 if [k for k, v in r.items() if v != "default"] == ["maxrregcount"]}
        if set(alone) != set(cap.values):
            continue
        features = table.features[table.baseline]
        orders = {"spread": spread_order(cap), "nearest": value_order(cap, features)}
        changed = {name: [v for v in order if not alone[v][1]] for name, order in orders.items()}
        best = min(alone, key=lambda v: alone[v][0])
        gain = 1 - alone[best][0]
        rows.append((path.stem, features.get("all:registers"), best, gain, changed,
                     {n: (c.index(best) + 1 if best in c else None) for n, c in changed.items()},
                     {n: (alone[c[0]][0] if c else None) for n, c in changed.items()}))
    print(f"{len(rows)} tables with every cap measured alone; per table: baseline registers, best cap "
          f"(gain), caps that changed the code in each order, the best's place in each")
    for stem, registers, best, gain, changed, place, _ in rows:
        spread, nearest = (",".join(changed[n]) or "-" for n in ("spread", "nearest"))
        print(f"  {stem[:52]:52s} {registers:5.0f} {best:>4s} ({gain:+.2%})  spread {spread:24s}"
              f" nearest {nearest:24s} place {place['spread']}/{place['nearest']}")
    gaining = [r for r in rows if r[3] >= GAIN]
    print(f"\n{len(gaining)} tables whose best cap gains >= {GAIN:.1%}:")
    for name in ("spread", "nearest"):
        places = [r[5][name] for r in gaining]
        slow = sum(r[6][name] is not None and r[6][name] >= SLOWER for r in rows)
        print(f"  {name:8s} best cap's place among the caps that changed the code: mean "
              f"{statistics.mean(places):.2f}, within the first two on {sum(p <= 2 for p in places)}; "
              f"first cap measured >= {SLOWER - 1:.0%} slower on {slow} of {len(rows)} tables")


if __name__ == "__main__":
    main()
