"""How much of a corpus table's optimum gain a live `tune` reached within N evaluations.

A live run measures the program through its registered benchmark, the table (corpus_record.py)
the kernel alone: this reads the run's store, takes the best configuration among its first N
evaluations (distinct codes measured; a candidate of code measured before is free), and looks
its time up in the table, by configuration, else by the kernel's code (its source compiled
under that configuration as the recorder compiles it, with --manifest naming where the source
is).  The fraction is (baseline - found) / (baseline - optimum) of the table's times.

    python -m benchmarks.live_vs_table TABLE.csv (--build-dir BUILD_DIR | --config KEY)
        [--target T] [--within 10] [--manifest .corpus_src/manifest.json]

--config looks up one configuration as a tune log prints it, where the run's store was not kept.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from benchmarks import corpus_record
from benchmarks.search_replay import Table, load_table
from compileiq_build.build.space import DEFAULT
from compileiq_build.decide.selection import outcomes, pairs
from compileiq_build.project.workspace import Workspace
from compileiq_build.store.database import read_store


def first_evaluations(build_dir: Path, target: str | None, within: int) -> tuple[str, list]:
    """The target and its search outcomes up to its `within`-th distinct code measured."""
    store = read_store(Workspace(build_dir).store)
    try:
        found = [(t, a) for t, a in pairs(store) if target in (None, t)]
        if not found:
            raise SystemExit(f"{build_dir}: no evaluations of {target or 'any target'}")
        name, arch = found[0]
        kept, measured = [], 0
        for o in outcomes(store, name, arch, "search"):
            if o.evaluation.same_as is None and o.valid:
                measured += 1
                if measured > within:
                    break
            kept.append(o)
        return name, kept
    finally:
        store.close()


def table_config(config_key: str) -> dict[str, str]:
    """A store's configuration key as the table's columns name it (no language prefix)."""
    out = {}
    for part in config_key.split():
        key, value = part.split("=", 1)
        out[key.split(":", 1)[-1]] = value
    return out


def code_of(config: dict[str, str], meta: dict, manifest: Path) -> str:
    """The kernel's code digest under `config`, compiled as the recorder compiles it."""
    entries = json.loads(manifest.read_text())
    entries = entries.get("programs", entries) if isinstance(entries, dict) else entries
    entry = next(e for e in entries if e["project"] == meta["project"] and e["program"] == meta["program"])
    prog = corpus_record.Program(entry, manifest.parent.resolve())
    dims = corpus_record.dimensions()
    full = {d.key: config.get(d.name, DEFAULT) for d in dims}
    with tempfile.TemporaryDirectory() as tmp:
        [build] = corpus_record.compile_all(prog.path(entry["kernel_source"]), prog.dir, prog.nvcc_args,
                                            dims, [full], Path(tmp), meta.get("arch", "sm_90"), 1)
        if build.error:
            raise SystemExit(f"cannot compile {config}: {build.error}")
        found = corpus_record.kernel_code(build, meta["kernel"])
        return found[0] if found else ""


def table_time(table: Table, meta: dict, config_key: str, manifest: Path | None) -> tuple[float, str]:
    """The table's time of a configuration: its row, else the row of the kernel's code under it."""
    wanted = table_config(config_key)
    if (row := table.index(wanted)) is not None:
        return table.times[row], "the table's row of that configuration"
    if not manifest:
        raise SystemExit(f"{config_key} is not a row of the table: give --manifest to compile it")
    code = corpus_record.short_code(code_of(wanted, meta, manifest))
    if code not in table.codes:
        raise SystemExit(f"{config_key}: its code {code} is not in the table")
    return table.times[table.codes.index(code)], f"the table's row of its code {code}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("table", type=Path)
    found = p.add_mutually_exclusive_group(required=True)
    found.add_argument("--build-dir", type=Path, help="the live run's build folder (its store)")
    found.add_argument("--config", help="a configuration as the tune log prints it "
                       "('CUDA:dlcm=cs CUDA:restrict=on'), where the store was not kept")
    p.add_argument("--target")
    p.add_argument("--within", type=int, default=10)
    p.add_argument("--manifest", type=Path, help="where the kernel's source is, for configurations "
                   "the table does not hold")
    args = p.parse_args()
    table = load_table(args.table)
    meta = json.loads(args.table.with_suffix(".json").read_text())
    base, optimum = table.times[table.baseline], table.optimum
    result: dict[str, object] = {"table": args.table.name}
    if args.config:
        found_key: str | None = args.config
    else:
        name, searched = first_evaluations(args.build_dir.resolve(), args.target, args.within)
        best = min((o for o in searched if o.valid and o.ratio is not None), key=lambda o: o.ratio,
                   default=None)
        found_key = best.evaluation.config_key if best and best.ratio is not None and best.ratio < 1 else None
        result |= {"target": name, "within": args.within, "evaluations_read": len(searched),
                   "tune_speedup": round(1 / best.ratio, 4) if best and best.ratio else None}
    if found_key is None:
        found_time, how = base, "no candidate faster than the baseline"
    else:
        found_time, how = table_time(table, meta, found_key, args.manifest)
    gain = base - optimum
    result |= {"found": found_key or "(baseline)", "table_speedup_found": round(base / found_time, 4),
               "table_optimum": round(base / optimum, 4),
               "fraction_of_optimum_gain": round((base - found_time) / gain, 3) if gain > 0 else None,
               "looked_up_as": how}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
