"""`report`, `emit` and `space`: read what is stored or probed, print or write it."""

from __future__ import annotations

import csv
import datetime
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from compileiq_build.build.space import DEFAULT, FlagSpace, Prober, build_space
from compileiq_build.decide.selection import (
    SAME_AS_BASELINE,
    NoWinner,
    Outcome,
    Winner,
    decide,
    decisions,
    merged,
    outcomes,
    pairs,
    portable_set,
    remeasured,
    verdict_counts,
)
from compileiq_build.decide.stats import geometric_mean, relative_spread
from compileiq_build.errors import CompileIQError
from compileiq_build.machine.cpu import cpu_load_lines
from compileiq_build.machine.gpu import shared_gpu_lines
from compileiq_build.project.manifest import load_project
from compileiq_build.project.workspace import Workspace
from compileiq_build.results.effects import (
    estimates_text,
    one_option_moves,
    predicted_lines,
    removals,
    speedup_text,
)
from compileiq_build.results.toolchain import (
    DEFAULT_NAME,
    measured_codes,
    provenance,
    render,
    source_digests,
    write,
)
from compileiq_build.run.profiler import cmake_target_of, table_lines
from compileiq_build.store.database import Store, read_store


def _open(build_dir: Path) -> Store:
    workspace = Workspace(build_dir)
    if not workspace.store.is_file():
        raise CompileIQError(f"no results in {workspace.build_dir} yet ({workspace.store} is missing). "
                             f"Run: python -m compileiq_build tune {workspace.build_dir}")
    return read_store(workspace.store)


def pending_text(decision: Winner | NoWinner) -> str:
    """The candidates that rank above the decision in the search but were never re-measured."""
    than = " than the winner" if isinstance(decision, Winner) else ""
    return (f"not yet validated: {', '.join(decision.pending)} (faster{than} in the search; "
            "the next `tune` re-measures them)")


def _values(store: Store, evaluation: int) -> dict[tuple[str, str], list[float]]:
    out: dict[tuple[str, str], list[float]] = {}
    for workload, role, value in store.values(evaluation):
        out.setdefault((workload, role), []).append(value)
    return out


def _describe(values: list[float] | None, rate: bool) -> str:
    """Median as the benchmark measured it, with its relative spread (MAD/median)."""
    if not values:
        return "n/a"
    med = statistics.median(values)
    shown = f"{med:.6g}" if rate else f"{1e3 * med:.6g} ms"
    return f"{shown} (spread {100 * relative_spread(values):.2f}%, n={len(values)})"


def _effect_lines(measured: list[Outcome], decision: Winner | NoWinner) -> list[str]:
    """The sections "Measured effects of single options" and "Removing each option of the winner"."""
    lines = ["  Measured effects of single options (each alone against the baseline):"]
    for m in one_option_moves(measured):
        shown = f"{estimates_text(m.estimates)}: " if m.estimates else ""
        count = f" (measured in {m.measured_with} configurations)" if m.outcome is None else ""
        lines.append(f"    {m.option} ({m.flag}): {shown}{m.finding}{count}")
    if len(lines) == 1:
        lines.append("    none: no configuration with an option was measured")
    if isinstance(decision, Winner):
        lines.append("  Removing each option of the winner (the winner minus it, against the winner's "
                     f"{estimates_text({g.workload: g.estimate for g in decision.gains})}):")
        for r in removals(decision, measured):
            shown = f"{estimates_text(r.estimates)}: " if r.estimates else ""
            lines.append(f"    without {r.option} ({r.flag}): {shown}{r.finding}")
    return lines


def report(build_dir: Path) -> str:
    rates = {b.workload for b in load_project(build_dir.resolve()).benchmarks if b.higher_is_better}
    store = _open(build_dir)
    try:
        lines = []
        profiled = set()
        for target, arch in pairs(store):
            searched = outcomes(store, target, arch, "search")
            lines.append(f"{target} ({', '.join(sorted(arch.values()))}): {len(searched)} "
                         f"candidates measured ({verdict_counts(searched)})")
            decision = decide(store, target, arch)
            if isinstance(decision, Winner):
                lines.append(f"  winner: {decision.config_key}")
                lines.append(f"  flags:  {' '.join(f for fl in decision.flags.values() for f in fl)}")
                if decision.dropped:
                    lines.append(f"  validated as {decision.validated}; left out of the shipped flags:")
                    lines += [f"    {d.option}: {d.why}" for d in decision.dropped]
                if decision.unchecked:
                    lines.append(f"  not checked (minimizing stopped before their removal was measured or "
                                 f"compiled): {', '.join(decision.unchecked)}")
                values = _values(store, decision.evidence)
                for g in decision.gains:
                    base, cand = values.get((g.workload, "baseline")), values.get((g.workload, "candidate"))
                    rate = g.workload in rates
                    lines.append(f"    {g.workload}: {speedup_text(g.estimate)}"
                                 f"; baseline {_describe(base, rate)}, tuned {_describe(cand, rate)}")
            else:
                lines.append(f"  no winner: {decision.reason}")
            if decision.pending:
                lines.append(f"  {pending_text(decision)}")
            measured = searched + remeasured(store, target, arch)
            lines += _effect_lines(measured, decision)
            lines += predicted_lines(store.sessions(), target, decision)
            cmake = cmake_target_of(target)
            if (cmake, str(arch)) not in profiled and (kernels := store.kernel_times(cmake, arch)):
                profiled.add((cmake, str(arch)))
                lines += [f"  where the baseline's GPU time goes in {cmake} (ncu):", *table_lines(kernels)]
        # A target profiled (`profile`) but not searched yet.
        for cmake, arch in store.profiled():
            if (cmake, str(arch)) not in profiled:
                archs = ", ".join(sorted(arch.values()))
                lines += [f"where the baseline's GPU time goes in {cmake} ({archs}, ncu; not searched yet):",
                          *table_lines(store.kernel_times(cmake, arch))]
        lines += shared_gpu_lines(store.sessions())
        lines += [f"warning: {line}" for line in cpu_load_lines(store.sessions())]
        return "\n".join(lines) if lines else "the store holds no evaluations yet"
    finally:
        store.close()


def export(build_dir: Path, csv: Path | None, parquet: Path | None) -> int:
    """Write every stored measurement as a table; returns the number of rows."""
    store = _open(build_dir)
    try:
        table = store.measurements()
    finally:
        store.close()
    try:
        if csv:
            table.to_csv(csv, index=False)
        if parquet:
            table.to_parquet(parquet, index=False)
    except OSError as exc:
        raise CompileIQError(f"cannot write the export: {exc}") from None
    return len(table)


def searched_targets(build_dir: Path) -> list[str]:
    """The targets with a search in the build folder's store."""
    store = _open(build_dir)
    try:
        return sorted({t for t, _ in pairs(store)})
    finally:
        store.close()


def table(build_dir: Path, path: Path, target: str | None) -> int:
    """The search's measurements of one target as a replay table (benchmarks/search_replay.py):
    a column per dimension (labels, `default` for the project's setting), `code` (a label of the
    machine code: rows of one code were measured once), `feature:<name>` columns of the compiled
    code (resource report, instruction mix), `time`: the geometric mean over the workloads of
    the baseline's median time times the candidate's median paired ratio, and `spread`: the
    relative half-width of its ratio's interval (what the measurement resolved; the replayed
    model's stop rule needs it)."""
    store = _open(build_dir)
    try:
        found = pairs(store)
        names = sorted({t for t, _ in found})
        if target is None and len(names) == 1:
            target = names[0]
        if target not in names:
            raise CompileIQError(f"name the target of the table with --target: {', '.join(names) or 'none'}")
        arch = next(a for t, a in found if t == target)
        searched = [o for o in outcomes(store, target, arch, "search") if o.valid]
        base: dict[str, list[float]] = {}
        for o in searched:
            ev = store.evaluation(o.evaluation.same_as) if o.evaluation.same_as else o.evaluation
            for workload, role, _, cost, error in store.samples(ev.id):
                if role == "baseline" and not error and cost:
                    base.setdefault(workload, []).append(cost)
        base_time = {w: statistics.median(v) for w, v in base.items()}
        if not base_time:
            raise CompileIQError(f"no baseline measurement of {target} is stored")
        dims = sorted({k for o in searched for k in o.evaluation.config})
        features = sorted({f for o in searched for f in (o.evaluation.features or {})})

        def time_of(ratios: dict[str, float]) -> float:
            return geometric_mean([ratios.get(w, 1.0) * t for w, t in sorted(base_time.items())])

        twin = next((o.evaluation for o in searched
                     if o.evaluation.same_as == SAME_AS_BASELINE and o.evaluation.digest), None)
        # A candidate of the baseline's code gives the baseline row its features (the prior needs them).
        rows: dict[str, dict[str, object]] = {"baseline": {
            **dict.fromkeys(dims, DEFAULT), "code": twin.digest[:16] if twin else "baseline",
            **{f"feature:{f}": ((twin.features or {}) if twin else {}).get(f, "") for f in features},
            "time": time_of({}), "spread": ""}}
        for o in searched:
            ratios = {w: e.ratio for w, e in o.estimates.items() if w in base_time}
            row: dict[str, object] = {d: o.evaluation.config.get(d, DEFAULT) for d in dims}
            row["code"] = o.evaluation.digest[:16] or f"evaluation{o.evaluation.id}"
            row.update({f"feature:{f}": (o.evaluation.features or {}).get(f, "") for f in features})
            row["time"] = time_of(ratios)
            row["spread"] = f"{o.spread:.6g}" if o.spread is not None and math.isfinite(o.spread) else ""
            rows.setdefault(o.evaluation.config_key, row)
    finally:
        store.close()
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, [d.split(":", 1)[-1] for d in dims] + ["code"]
                                + [f"feature:{x}" for x in features] + ["time", "spread"])
        writer.writeheader()
        for row in rows.values():
            writer.writerow({k.split(":", 1)[-1] if not k.startswith("feature:") else k: v
                             for k, v in row.items()})
    return len(rows)


def html(build_dir: Path, path: Path) -> Path:
    from compileiq_build.results.html import write_html

    store = _open(build_dir)
    try:
        write_html(store, path, f"Tuning report: {load_project(build_dir.resolve()).name}", build_dir)
    except OSError as exc:
        raise CompileIQError(f"cannot write the HTML report {path}: {exc.strerror or exc}") from None
    finally:
        store.close()
    return path.resolve()


def emit(build_dir: Path, output: Path | None,
         merge: Sequence[Path] = ()) -> tuple[Path, list[Winner | NoWinner]]:
    """The toolchain file from stored results: this build folder's store, plus the stores
    of other machines (one per GPU architecture) with a portable set across them.  Returns
    where it was written and the decisions in it."""
    project = load_project(build_dir)
    paths = [Workspace(p).store if p.is_dir() else p.resolve() for p in [build_dir, *merge]]
    stores: list[Store] = []
    try:
        for path in paths:
            if not path.is_file():
                raise CompileIQError(f"no results store at {path}. Name a results.sqlite that "
                                     "`tune` wrote (it lies in <build>/compileiq/).")
            stores.append(read_store(path))
        envs, dates, strategies = [], [], set()
        found: list[list[Winner | NoWinner]] = []
        for store, path in zip(stores, paths, strict=True):
            sessions = store.sessions()
            if not sessions:
                raise CompileIQError(f"no tuning session is stored in {path}")
            envs.append(sessions[-1][3])
            dates.append(sessions[-1][1])
            strategies |= {r.strategy for r in store.evaluations(phase="search")}
            found.append(decisions(store))
        # A target the project no longer tunes (renamed or removed): its flags would reach nothing.
        tuned = {t.name for t in project.targets}
        if stale := sorted({d.target for ds in found for d in ds} - tuned):
            print(f"compileiq_build: warning: the stores hold results for {', '.join(stale)}, which "
                  f"the project no longer tunes (renamed or removed?); they are left out of the "
                  f"toolchain file. Tuned now: {', '.join(sorted(tuned)) or 'none'}.", file=sys.stderr)
        found = [[d for d in ds if d.target in tuned] for ds in found]
        winners, losers = merged(*found)  # two stores of one architecture: the first one named wins
        portables = portable_set(stores, winners)
        codes = [c for store, ds in zip(stores, found, strict=True)
                 for c in measured_codes(store, project, [w for w in ds if w in winners])]
    finally:
        for store in stores:
            store.close()
    date = datetime.datetime.fromtimestamp(max(dates), datetime.UTC).date().isoformat()
    prov = provenance(envs, project.compilers, ", ".join(sorted(strategies)) or "none", date)
    path = (output or project.source_dir / DEFAULT_NAME).resolve()
    sources = source_digests(project, [*(w.target for w in winners), *(p.target for p in portables)])
    write(path, render(winners, losers, prov, portables, codes, sources))
    return path, [*winners, *losers]


def show_space(languages: Sequence[str], allow_numerics_change: bool,
               allow_host_specific: bool = False, progress: Callable[[str], None] | None = None) -> str:
    """The space per language: a target tunes one language's options or another's, so their
    counts are not multiplied."""
    from compileiq_build.machine import environment

    compilers = {}
    for lang, tool in (("CUDA", "nvcc"), ("CXX", "c++")):
        path = environment.find_tool(tool)
        if lang in languages and path:
            compilers[lang] = (path, environment.tool_version(path))  # verdicts cached per compiler
    missing = [lang for lang in languages if lang not in compilers]
    cache = Path.home() / ".cache" / "compileiq_build"
    space = build_space([lang for lang in languages if lang in compilers], compilers,
                        Prober(cache, progress=progress), allow_numerics_change,
                        allow_host_specific=allow_host_specific)
    lines = []
    for lang in compilers:
        dims = FlagSpace(tuple(d for d in space.dimensions if d.language == lang))
        lines.append(f"{lang}: {len(dims.dimensions)} dimensions, {dims.size} configurations")
    for d in space.dimensions:
        values = ", ".join(d.values)
        note = f"  ({d.note})" if d.note else ""
        lines.append(f"  {d.key:40} stage {d.stage}  {d.template.replace('{v}', '<v>')}: {values}{note}")
    for r in space.rejected:
        lines.append(f"  dropped {r.flag}: {r.reason}")
    for key in space.excluded_numerics:
        lines.append(f"  excluded {key}: changes numerics (--allow-numerics-change)")
    for key in space.excluded_host_specific:
        lines.append(f"  excluded {key}: binaries run only on CPUs like this one (--allow-host-specific)")
    for lang in missing:
        lines.append(f"  {lang}: no compiler found")
    return "\n".join(lines)

