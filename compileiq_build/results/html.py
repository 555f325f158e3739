"""`report --html`: one self-contained HTML file with the evidence behind each decision.

Per target: speedups with intervals per workload, the convergence curve per
strategy, how candidates fared (and why the invalid ones failed), what single options did as
measured (effects.py: one-option moves, and the winner without each of its options),
every measured candidate in a sortable table, the winning flags, and the machine.
Charts are inline SVG and the table sorts with a few lines of inline script: nothing
is fetched to view the file.
"""

from __future__ import annotations

import html
import math
import shlex
import statistics
import subprocess
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from compileiq_build import __version__
from compileiq_build.decide.selection import (
    SAME_AS_BASELINE,
    NoWinner,
    Outcome,
    Winner,
    decide,
    evaluation_numbers,
    log_order,
    outcomes,
    pairs,
    remeasured,
)
from compileiq_build.decide.stats import relative_spread
from compileiq_build.machine.cpu import cpu_load_lines
from compileiq_build.machine.environment import find_tool
from compileiq_build.machine.gpu import shared_gpu_lines, slowdowns
from compileiq_build.project.manifest import Project, load_project
from compileiq_build.project.workspace import Workspace
from compileiq_build.results.effects import (
    Move,
    Removal,
    estimates_text,
    one_option_moves,
    predicted_lines,
    removals,
    speedup_text,
)
from compileiq_build.results.toolchain import DEFAULT_NAME
from compileiq_build.run.profiler import cmake_target_of, table_lines
from compileiq_build.store.database import Store

_COLORS = ("#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b83280")
_VERDICT_COLORS = {"faster": "#2f855a", "neutral": "#a0aec0", "slower": "#c05621", "invalid": "#c53030"}


@dataclass(frozen=True)
class CandidateRow:
    """One measured candidate of the search, as the candidates table shows it."""

    order: int  # its place among the target's candidates, in the order the log showed them
    id: int | None  # its evaluation's number, as the log counts them; None: it reused a measured code
    flags: str
    verdict: str
    speedup: float | None  # geometric mean over workloads; None when invalid
    intervals: str  # per workload, with pairs
    pairs: int  # fewest pairs over its workloads
    digest: str  # short machine-code digest
    note: str  # why it has no samples of its own


def _candidate_row(o: Outcome, order: int, numbers: dict[int, int]) -> CandidateRow:
    """`numbers`: store id -> evaluation number (progress.evaluation_numbers)."""
    row = o.evaluation
    flags = " ".join(f for fl in row.flags.values() for f in fl) or "(the project's flags)"
    own = o.valid and row.same_as != SAME_AS_BASELINE
    twin = f"#{numbers[row.same_as]}" if row.same_as in numbers else "an earlier measurement"
    note = ("same machine code as the baseline: not run" if row.same_as == SAME_AS_BASELINE
            else f"same machine code as {twin}: its samples" if row.same_as is not None else "")
    return CandidateRow(order, numbers.get(row.id), flags,
                        o.verdict if row.same_as != SAME_AS_BASELINE else "same code",
                        1 / o.ratio if o.ratio else None, estimates_text(o.estimates) if own else "",
                        min((e.pairs for e in o.estimates.values()), default=0) if own else 0,
                        row.digest[:12], note)


@dataclass(frozen=True)
class WorkloadTimes:
    workload: str
    baseline: str  # median as the benchmark reports it, with its spread
    tuned: str


@dataclass(frozen=True)
class Ships:
    """What a target ships, as the report says it: the flags before and after, the shipped
    configuration's re-measured times, and the search's best, which stands above them."""

    baseline_flags: dict[str, str]  # language -> the project's own compile options ('' unknown)
    flags: dict[str, str]  # language -> the shipped flags (none without a winner)
    times: list[WorkloadTimes]
    search_best: float | None  # the best speedup the search measured (best of many: biased high)
    noise: float | None  # median relative spread of the baseline's runs, over the search


@dataclass(frozen=True)
class TargetView:
    target: str
    arch: str
    decision: Winner | NoWinner
    measured: int
    verdicts: dict[str, int]
    failures: list[tuple[str, str]]  # (configuration, reason)
    convergence_svg: str
    verdict_svg: str
    speedup_svg: str
    moves: list[Move]
    removals: list[Removal]
    candidates: list[CandidateRow]
    kernels: list[str]  # where the baseline's GPU time goes (profile.table_lines)
    codes: int  # distinct machine codes measured by the search (the baseline's not counted)
    reused: int  # candidates that compiled to a code measured before and took its samples
    ships: Ships
    predicted: list[str]  # what the prior predicted of the winner (effects.predicted_lines)


def _svg(width: int, height: int, body: str, label: str) -> str:
    return (f'<svg class="chart" role="img" aria-label="{html.escape(label)}" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">'
            f'<rect width="{width}" height="{height}" fill="#fff"/>{body}</svg>')


def _text(x: float, y: float, s: str, anchor: str = "start", size: int = 11, color: str = "#333",
          cls: str = "") -> str:
    klass = f' class="{cls}"' if cls else ""
    return (f'<text{klass} x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{color}" text-anchor="{anchor}" '
            f'font-family="sans-serif">{html.escape(s)}</text>')


def _ticks(lo: float, hi: float, whole: bool = False, most: int = 6) -> list[float]:
    """Round values from lo to hi, at most `most` of them (whole numbers for counts)."""
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / (most - 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    # Counts start at their first value (evaluation 1, 6, 11, ...); scales at a round one.
    if whole:
        step = max(1.0, math.ceil(step))
    first = lo if whole else math.ceil(lo / step - 1e-9) * step
    return [first + k * step for k in range(int((hi - first) / step + 1e-9) + 1)]


def convergence_chart(series: dict[str, list[float]]) -> str:
    """Best speedup so far against evaluations, one line per strategy."""
    w, h, left, bottom, top, right = 520, 240, 50, 30, 15, 110
    n = max((len(v) for v in series.values()), default=0)
    best = max((max(v) for v in series.values() if v), default=1.0)
    lo, hi = 1.0, max(best, 1.01)
    hi += (hi - lo) * 0.1

    def x(i: int) -> float:
        return left + (w - left - right) * (i / max(n - 1, 1))

    def y(v: float) -> float:
        return top + (h - top - bottom) * (1 - (v - lo) / (hi - lo))

    body = [f'<line x1="{left}" y1="{y(1.0):.1f}" x2="{w - right}" y2="{y(1.0):.1f}" stroke="#999" '
            'stroke-dasharray="4 3"/>',
            f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="#666"/>',
            f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="#666"/>',
            _text((left + w - right) / 2, h - 2, "evaluations", "middle")]
    scale = _ticks(lo, hi)
    decimals = max(2, -math.floor(math.log10(scale[1] - scale[0]))) if len(scale) > 1 else 2
    for v in scale:
        body.append(f'<line x1="{left - 3}" y1="{y(v):.1f}" x2="{left}" y2="{y(v):.1f}" stroke="#666"/>')
        body.append(_text(left - 6, y(v) + 4, f"{v:.{decimals}f}x", "end", cls="ytick"))
    # Evaluation numbers, 1-based as the progress line counts them.
    for i in _ticks(1, n, whole=True):
        xx = x(int(i) - 1)
        body.append(f'<line x1="{xx:.1f}" y1="{h - bottom}" x2="{xx:.1f}" y2="{h - bottom + 3}" '
                    'stroke="#666"/>')
        body.append(_text(xx, h - bottom + 14, f"{int(i)}", "middle", cls="xtick"))
    for k, (name, values) in enumerate(sorted(series.items())):
        color = _COLORS[k % len(_COLORS)]
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
        if len(values) == 1:
            body.append(f'<circle class="data" cx="{x(0):.1f}" cy="{y(values[0]):.1f}" r="3" '
                        f'fill="{color}"/>')
        else:
            body.append(f'<polyline class="data" points="{points}" fill="none" stroke="{color}" '
                        'stroke-width="2"/>')
        body.append(_text(w - right + 8, top + 14 + 16 * k, f"{name} ({len(values)})", color=color))
    return _svg(w, h, "".join(body), "best speedup so far against evaluations")


def bar_chart(items: Sequence[tuple[str, float]], colors: Sequence[str], unit: str, label: str) -> str:
    """Horizontal bars, one per item."""
    w, row, left = 520, 22, 190
    h = max(row * len(items) + 10, 30)
    top = max((v for _, v in items), default=1.0) or 1.0
    body = []
    for i, ((name, value), color) in enumerate(zip(items, colors, strict=True)):
        length = (w - left - 70) * value / top
        body.append(_text(left - 8, 10 + row * i + 12, name[:32], "end"))
        body.append(f'<rect class="data" x="{left}" y="{10 + row * i}" width="{max(length, 1):.1f}" '
                    f'height="{row - 6}" fill="{color}"/>')
        body.append(_text(left + length + 6, 10 + row * i + 12, f"{value:g}{unit}"))
    return _svg(w, h, "".join(body), label)


def speedup_chart(winner: Winner) -> str:
    """Each workload's speedup as a dot with its 95% interval."""
    w, row, left = 520, 26, 190
    gains = winner.gains
    h = row * len(gains) + 40
    values = [1 / g.estimate.high for g in gains] + [1 / g.estimate.low if g.estimate.low > 0 else 1.0
                                                      for g in gains] + [1.0]
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.15 or 0.01
    lo, hi = lo - pad, hi + pad

    def x(v: float) -> float:
        return left + (w - left - 30) * (v - lo) / (hi - lo)

    body = [f'<line x1="{x(1.0):.1f}" y1="5" x2="{x(1.0):.1f}" y2="{h - 25}" stroke="#999" '
            'stroke-dasharray="4 3"/>', _text(x(1.0), h - 10, "1.00x", "middle")]
    for i, g in enumerate(gains):
        e = g.estimate
        yy = 18 + row * i
        upper = 1 / e.low if e.low > 0 else hi
        body.append(_text(left - 8, yy + 4, g.workload[:32], "end"))
        body.append(f'<line class="data" x1="{x(1 / e.high):.1f}" y1="{yy}" x2="{x(min(upper, hi)):.1f}" '
                    f'y2="{yy}" stroke="#2f855a" stroke-width="3"/>')
        body.append(f'<circle class="data" cx="{x(e.speedup):.1f}" cy="{yy}" r="4" fill="#22543d"/>')
        body.append(_text(w - 5, yy + 4, f"{e.speedup:.3f}x", "end"))
    return _svg(w, h, "".join(body), "speedup per workload with 95% interval")


def _median(values: list[float], rate: bool) -> str:
    if not values:
        return "n/a"
    med = statistics.median(values)
    shown = f"{med:.6g}" if rate else f"{1e3 * med:.6g} ms"
    return f"{shown} (spread {100 * relative_spread(values):.2f}%, n={len(values)})"


def _times(store: Store, decision: Winner, rates: set[str]) -> list[WorkloadTimes]:
    """The shipped configuration's re-measurement: baseline and tuned medians per workload."""
    values: dict[tuple[str, str], list[float]] = {}
    for workload, role, value in store.values(decision.evidence):
        values.setdefault((workload, role), []).append(value)
    return [WorkloadTimes(g.workload, _median(values.get((g.workload, "baseline"), []), g.workload in rates),
                          _median(values.get((g.workload, "candidate"), []), g.workload in rates))
            for g in decision.gains]


def _noise(store: Store, searched: Sequence[Outcome]) -> float | None:
    """The median relative spread of the baseline's runs of each search evaluation and workload."""
    spreads = []
    for o in searched:
        if o.evaluation.same_as is None:
            base: dict[str, list[float]] = {}
            for workload, role, value in store.values(o.evaluation.id):
                if role == "baseline":
                    base.setdefault(workload, []).append(value)
            spreads += [relative_spread(v) for v in base.values() if len(v) > 1]
    return statistics.median(spreads) if spreads else None


def baseline_flags(build_dir: Path, project: Project, target: str) -> dict[str, str]:
    """The compile options the project gives the target's sources, per language, as ninja runs
    them in the tuning's baseline tree (less its outputs, includes and CompileIQ's own file);
    empty where that tree or ninja is gone."""
    tree, ninja = Workspace(build_dir).work / "baseline", find_tool("ninja")
    unit = next((t for t in project.targets if t.name == target), None)
    if unit is None or ninja is None or not (tree / "build.ninja").is_file():
        return {}
    try:
        lines = subprocess.run([ninja, "-C", str(tree), "-t", "commands", unit.cmake_target],
                               capture_output=True, text=True, timeout=60).stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return {}
    drop_next = {"-o", "-c", "-MT", "-MF", "-x", "-I", "-isystem", "--options-file"}
    found: dict[str, str] = {}
    suffixes = {"CUDA": ".cu.o", "CXX": ".o"}
    for line in lines:
        words = shlex.split(line) if f"{unit.cmake_target}.dir/" in line else []
        if "-c" not in words:
            continue
        out = words[words.index("-o") + 1] if "-o" in words else ""
        lang = "CUDA" if out.endswith(suffixes["CUDA"]) else "CXX"
        kept, skip = [], False
        for w in words[1:]:
            if skip:
                skip = False
            elif w in drop_next:
                skip = True
            elif not w.startswith(("@", "-I", "-MD", "-isystem")) and w.startswith("-"):
                kept.append(w)
        found.setdefault(lang, " ".join(kept))
    return {lang: flags for lang, flags in found.items() if lang in unit.languages}


def _view(store: Store, target: str, arch: dict[str, str], project: Project | None = None,
          build_dir: Path | None = None) -> TargetView:
    searched = log_order(outcomes(store, target, arch, "search"))
    # A candidate of a code measured before took that one's samples: it is not another finding.
    own = [o for o in searched if o.evaluation.same_as is None or o.evaluation.same_as == SAME_AS_BASELINE]
    verdicts = Counter(o.verdict for o in own)
    failures = [(o.evaluation.config_key, o.error.strip().splitlines()[0][:200] if o.error.strip() else "")
                for o in searched if not o.valid]
    series: dict[str, list[float]] = {}
    best: dict[str, float] = {}
    for o in searched:
        if o.evaluation.same_as is not None:
            continue  # no evaluation spent: the curve's x counts evaluations, as the log does
        s = o.evaluation.strategy
        if o.faster and o.ratio:
            best[s] = max(best.get(s, 1.0), 1 / o.ratio)
        series.setdefault(s, []).append(best.get(s, 1.0))
    order = ["faster", "neutral", "slower", "invalid"]
    counts = [(v, float(verdicts.get(v, 0))) for v in order]
    decision = decide(store, target, arch)
    measured = searched + remeasured(store, target, arch)
    numbers = evaluation_numbers(searched)
    rates = {b.workload for b in project.benchmarks if b.higher_is_better} if project else set()
    faster = [1 / o.ratio for o in searched if o.faster and o.ratio]
    ships = Ships(
        baseline_flags=baseline_flags(build_dir, project, target) if project and build_dir else {},
        flags=({lang: " ".join(f) for lang, f in decision.flags.items()}
               if isinstance(decision, Winner) else {}),
        times=_times(store, decision, rates) if isinstance(decision, Winner) else [],
        search_best=max(faster) if faster else None, noise=_noise(store, searched))
    return TargetView(
        target=target, arch=", ".join(sorted(arch.values())), decision=decision, measured=len(searched),
        verdicts=dict(verdicts), failures=failures,
        convergence_svg=convergence_chart(series) if series else "",
        verdict_svg=bar_chart(counts, [_VERDICT_COLORS[v] for v in order], "", "candidates by verdict"),
        speedup_svg=speedup_chart(decision) if isinstance(decision, Winner) else "",
        moves=one_option_moves(measured),
        removals=removals(decision, measured) if isinstance(decision, Winner) else [],
        candidates=[_candidate_row(o, i, numbers) for i, o in enumerate(searched, 1)],
        kernels=table_lines(store.kernel_times(cmake_target_of(target), arch)),
        codes=len({o.evaluation.id for o in own if o.evaluation.same_as is None}),
        reused=len(searched) - len(own), ships=ships,
        predicted=[line.strip() for line in predicted_lines(store.sessions(), target, decision)])


def _gpu_ranges(store: Store) -> dict[str, Any]:
    states = store.gpu_states()
    if not states:
        return {}
    return {"SM clock (MHz)": f"{min(s['sm_clock_min_mhz'] for s in states)} to "
                              f"{max(s['sm_clock_max_mhz'] for s in states)}",
            "memory clock (MHz)": str(max(s["mem_clock_mhz"] for s in states)),
            "highest temperature (C)": str(max(s["temperature_max_c"] for s in states)),
            "runs with a slowdown reason": str(sum(1 for s in states if slowdowns(s)))}


_ENV = jinja2.Environment(loader=jinja2.PackageLoader("compileiq_build.results", "templates"),
                          autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
                          lstrip_blocks=True)
_ENV.tests["instanceof"] = isinstance


def toolchain_path(sessions: Sequence[tuple[int, float, str, dict[str, object]]], project: Project) -> Path:
    """Where the last `tune` wrote the toolchain file: its --output, else the default."""
    for _, _, command, _ in reversed(sessions):
        words = shlex.split(command)
        if "tune" not in words:
            continue
        for i, w in enumerate(words):
            if w.startswith("--output="):
                return Path(w.split("=", 1)[1])
            if w == "--output" and i + 1 < len(words):
                return Path(words[i + 1])
        break
    return project.source_dir / DEFAULT_NAME


def render_html(store: Store, title: str, build_dir: Path | None = None) -> str:
    """The report; with the build folder it also says what ships where (the toolchain file,
    the project's own flags of each target)."""
    project = load_project(build_dir) if build_dir else None
    views = [_view(store, target, arch, project, build_dir) for target, arch in pairs(store)]
    sessions = store.sessions()
    env = sessions[-1][3] if sessions else {}
    toolchain = toolchain_path(sessions, project) if project else None
    return _ENV.get_template("report.html.j2").render(
        title=title, version=__version__, views=views, env=env, gpu_ranges=_gpu_ranges(store),
        sessions=len(sessions), shared_gpu=shared_gpu_lines(sessions), Winner=Winner,
        speedup_text=speedup_text, estimates_text=estimates_text, toolchain=toolchain,
        toolchain_exists=bool(toolchain and toolchain.is_file()), cpu_load=cpu_load_lines(sessions))


def write_html(store: Store, path: Path, title: str, build_dir: Path | None = None) -> None:
    path.write_text(render_html(store, title, build_dir), encoding="utf-8")
