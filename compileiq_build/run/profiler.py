"""Where the GPU time goes: one profiled run of each benchmark with the project's own flags.

Nsight Compute (`ncu`) times every kernel launch of the run (the metric
gpu__time_duration.sum, clocks left alone: --clock-control none); each kernel is mapped,
by its name in the objects' SASS, to the object file of the tuned target that defines it,
and so to its source file and to the tuned unit (the target, or the group) that holds it.
`tune` prints the table before searching a CUDA target and stores it; `report` shows it;
`profile` prints it and proposes groups: per benchmark, the fewest source files that hold
`COVER` of its GPU time.
"""

from __future__ import annotations

import csv
import io
import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from compileiq_build.build.codeinfo import kernels_of, object_files, object_of
from compileiq_build.machine import process
from compileiq_build.machine.environment import find_tool
from compileiq_build.project.manifest import Benchmark, Target, c_identifier
from compileiq_build.run.measure import benchmark_command
from compileiq_build.store.records import KernelTime

METRIC = "gpu__time_duration.sum"
COVER = 0.9  # a proposed group holds this share of its benchmark's GPU time
SHOWN = 8  # kernels per benchmark in the printed table
HOT = 0.01  # a kernel with this share of a benchmark's GPU time is one the model's features describe
_SECONDS = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3,
            "second": 1.0, "s": 1.0}


class ProfileError(RuntimeError):
    """The profiled run did not give kernel times (no ncu, no counters, a failed run)."""


def cmake_target_of(unit: str) -> str:
    """The CMake target of a tuned unit's name: a group is <target>:<group>, and CMake target
    names hold no ':' (but ALIAS and IMPORTED ones, which are never tuned)."""
    return unit.split(":", 1)[0]


def ncu_command(ncu: str, log: Path, command: Sequence[str]) -> list[str]:
    return [ncu, "--csv", "--print-units", "base", "--metrics", METRIC, "--print-kernel-base", "mangled",
            "--clock-control", "none", "--target-processes", "all", "--log-file", str(log), *command]


def parse_ncu_csv(text: str) -> dict[str, tuple[float, int]]:
    """ncu's --csv report: kernel name -> (seconds over its launches, launches)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        raise ProfileError("ncu reported no kernel: " + (" ".join(lines[-3:]).strip() or "empty output"))
    times: dict[str, tuple[float, int]] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        if row.get("Metric Name") != METRIC or not row.get("Kernel Name"):
            continue
        unit = _SECONDS.get((row.get("Metric Unit") or "").strip())
        try:
            value = float((row.get("Metric Value") or "").replace(",", ""))
        except ValueError:
            continue
        if unit is None:
            raise ProfileError(f"ncu gave {METRIC} in an unknown unit {row.get('Metric Unit')!r}")
        seconds, launches = times.get(row["Kernel Name"], (0.0, 0))
        times[row["Kernel Name"]] = (seconds + value * unit, launches + 1)
    if not times:
        raise ProfileError("ncu's report holds no kernel time")
    return times


def profile_run(bench: Benchmark, executable: Path, timeout: float,
                env: Mapping[str, str] | None = None) -> dict[str, tuple[float, int]]:
    """One run of the benchmark under ncu: its kernels' GPU time."""
    ncu = find_tool("ncu")
    if not ncu:
        raise ProfileError("Nsight Compute (ncu) is not on PATH")
    workdir = Path(bench.workdir) if bench.workdir else executable.parent
    with tempfile.TemporaryDirectory(prefix="compileiq-profile-") as tmp:
        log = Path(tmp) / "ncu.csv"
        try:
            proc = process.run(ncu_command(ncu, log, benchmark_command(bench, executable, Path(tmp))),
                               timeout, cwd=workdir, env={**os.environ, **(env or {})})
        except subprocess.TimeoutExpired:
            raise ProfileError(f"the profiled run took over {timeout:.0f} s") from None
        text = log.read_text(errors="replace") if log.is_file() else ""
    if proc.returncode != 0:
        tail = " ".join((text or proc.stderr).strip().splitlines()[-2:])
        raise ProfileError(f"ncu exited with {proc.returncode}: {tail}")
    return parse_ncu_csv(text)


def kernel_sources(tree: Path, units: Sequence[Target]) -> dict[str, tuple[str, str]]:
    """Kernel name -> (its source, relative to the target's folder; the unit holding it), for
    the objects of the CMake target of `units` (all of one target) in a build tree."""
    cmake = units[0].cmake_target
    found: dict[str, tuple[str, str]] = {}
    for obj in object_files(tree, cmake):
        rel = obj.relative_to(next(p for p in obj.parents if p.name == f"{cmake}.dir")).as_posix()
        source = rel.removesuffix(".o").replace("__/", "../")
        unit = next((u.name for u in units if not u.sources or any(object_of(rel, s) for s in u.sources)), "")
        for kernel in kernels_of(obj):
            found.setdefault(kernel, (source, unit))
    return found


def attribute(workload: str, times: Mapping[str, tuple[float, int]],
              sources: Mapping[str, tuple[str, str]]) -> list[KernelTime]:
    """The profile as rows, most time first."""
    rows = [KernelTime(workload, k, s, n, *sources.get(k, ("", ""))) for k, (s, n) in times.items()]
    return sorted(rows, key=lambda r: -r.seconds)


def hot_kernels(rows: Sequence[KernelTime], unit: str, share: float = HOT) -> set[str]:
    """The kernels of `unit` that take at least `share` of some benchmark's GPU time."""
    totals: dict[str, float] = {}
    for r in rows:
        totals[r.workload] = totals.get(r.workload, 0.0) + r.seconds
    return {r.kernel for r in rows if r.unit == unit and r.seconds >= share * (totals[r.workload] or 1.0)}


def table_lines(rows: Sequence[KernelTime], shown: int = SHOWN) -> list[str]:
    """Per benchmark: its hottest kernels with their share of its GPU time and where they live."""
    lines = []
    for workload in dict.fromkeys(r.workload for r in rows):
        mine = [r for r in rows if r.workload == workload]
        total = sum(r.seconds for r in mine) or 1.0
        lines.append(f"  {workload}: {total * 1e3:.3f} ms of GPU time in {len(mine)} kernels")
        for r in mine[:shown]:
            where = f"{r.source} ({r.unit})" if r.unit else (r.source or "not in a tuned target")
            name = _demangled(r.kernel)[:60]
            lines.append(f"    {r.seconds / total:6.1%}  {r.launches:6d}x  {name:60s}  {where}")
        if len(mine) > shown:
            rest = sum(r.seconds for r in mine[shown:])
            lines.append(f"    {rest / total:6.1%}  in {len(mine) - shown} other kernels")
    return lines


def propose_groups(rows: Sequence[KernelTime], target: str) -> list[str]:
    """CMake lines: per benchmark, the fewest sources of `target` that hold COVER of its GPU
    time; benchmarks whose files overlap share one group (a source has one group's flags),
    named after its hottest file."""
    groups: list[tuple[set[str], list[str], dict[str, float]]] = []  # files, workloads, share per file
    for workload in dict.fromkeys(r.workload for r in rows):
        mine = [r for r in rows if r.workload == workload]
        total = sum(r.seconds for r in mine) or 1.0
        share: dict[str, float] = {}
        for r in mine:
            if r.source:
                share[r.source] = share.get(r.source, 0.0) + r.seconds / total
        chosen: dict[str, float] = {}
        for source in sorted(share, key=lambda s: -share[s]):
            if sum(chosen.values()) >= COVER:
                break
            chosen[source] = share[source]
        if not chosen:
            continue
        merged = (set(chosen), [workload], chosen)
        for group in [g for g in groups if g[0] & merged[0]]:
            groups.remove(group)
            shares = {f: group[2].get(f, 0.0) + merged[2].get(f, 0.0) for f in group[0] | merged[0]}
            merged = (group[0] | merged[0], group[1] + merged[1], shares)
        groups.append(merged)
    lines, names = [], set()
    for files, workloads, shares in groups:
        name = base = c_identifier(Path(max(files, key=lambda f: shares[f])).name.split(".")[0])
        n = 1
        while name in names:
            n += 1
            name = f"{base}{n}"
        names.add(name)
        lines.append(f"compileiq_tune({target} SOURCES {' '.join(sorted(files))} GROUP {name})")
        lines.append(f"#   measured by {', '.join(workloads)}: add TARGETS {target}:{name} "
                     f"to {'its registration' if len(workloads) == 1 else 'their registrations'}")
    return lines


def _demangled(name: str) -> str:
    tool = find_tool("cu++filt")
    if not tool or not name.startswith("_Z"):
        return name
    try:
        proc = subprocess.run([tool, name], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return name
    return proc.stdout.strip() or name
