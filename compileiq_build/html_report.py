"""`report --html`: one self-contained HTML file with the evidence behind each decision.

Per target: speedups with intervals per workload, the convergence curve per
strategy, how candidates fared (and why the invalid ones failed), which options
mattered (LightGBM feature importance over the measured configurations), the
winning flags, and the machine.  Charts are inline SVG: no script or network
needed to view the file.
"""

from __future__ import annotations

import html
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from compileiq_build import __version__
from compileiq_build.gpu import slowdowns
from compileiq_build.selection import NoWinner, Outcome, Winner, decide, outcomes, pairs
from compileiq_build.space import DEFAULT
from compileiq_build.store import Store

_COLORS = ("#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b83280")
_VERDICT_COLORS = {"faster": "#2f855a", "neutral": "#a0aec0", "slower": "#c05621", "invalid": "#c53030"}


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
    importance_svg: str
    importance_note: str


def _svg(width: int, height: int, body: str, label: str) -> str:
    return (f'<svg class="chart" role="img" aria-label="{html.escape(label)}" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">'
            f'<rect width="{width}" height="{height}" fill="#fff"/>{body}</svg>')


def _text(x: float, y: float, s: str, anchor: str = "start", size: int = 11, color: str = "#333") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{color}" text-anchor="{anchor}" '
            f'font-family="sans-serif">{html.escape(s)}</text>')


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
            'stroke-dasharray="4 3"/>', _text(left - 6, y(1.0) + 4, "1.00x", "end"),
            _text(left - 6, y(hi) + 10, f"{hi:.2f}x", "end"),
            _text((left + w - right) / 2, h - 8, "evaluations", "middle")]
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


def importance(results: Sequence[Outcome]) -> tuple[list[tuple[str, float]], str]:
    """LightGBM gain importance of each option for log(cost ratio), over valid measurements."""
    valid = [o for o in results if o.valid and o.ratio]
    dims = sorted({k for o in valid for k, v in o.evaluation.config.items() if v != DEFAULT})
    if len(valid) < 4 or not dims:
        return [], f"{len(valid)} valid measurements: too few to tell which options matter"
    import lightgbm
    import pandas as pd

    # LightGBM refuses some characters in feature names: columns are numbered.
    frame = pd.DataFrame([{f"f{i}": o.evaluation.config.get(d, DEFAULT) for i, d in enumerate(dims)}
                          for o in valid], dtype="category")
    target = [math.log(o.ratio or 1.0) for o in valid]
    params = {"objective": "regression", "learning_rate": 0.2, "min_data_in_leaf": 2,
              "min_data_in_bin": 1, "min_data_per_group": 1, "cat_smooth": 1.0, "verbose": -1}
    booster = lightgbm.train(params, lightgbm.Dataset(frame, target), num_boost_round=60)
    gains = dict(zip(dims, booster.feature_importance(importance_type="gain"), strict=True))
    total = sum(gains.values())
    if total <= 0:
        return [], "the measurements do not separate the options (no split helped the model)"
    ranked = sorted(((d, round(100 * v / total, 1)) for d, v in gains.items() if v > 0),
                    key=lambda t: -t[1])
    return ranked[:12], (f"LightGBM gain importance for log(time ratio) over {len(valid)} valid "
                         "measurements, in percent")


def _view(store: Store, target: str, arch: dict[str, str]) -> TargetView:
    searched = outcomes(store, target, arch, "search")
    verdicts = Counter(o.verdict for o in searched)
    failures = [(o.evaluation.config_key, o.error.strip().splitlines()[0][:200] if o.error.strip() else "")
                for o in searched if not o.valid]
    series: dict[str, list[float]] = {}
    best: dict[str, float] = {}
    for o in searched:
        s = o.evaluation.strategy
        if o.faster and o.ratio:
            best[s] = max(best.get(s, 1.0), 1 / o.ratio)
        series.setdefault(s, []).append(best.get(s, 1.0))
    order = ["faster", "neutral", "slower", "invalid"]
    counts = [(v, float(verdicts.get(v, 0))) for v in order]
    ranked, note = importance(searched)
    decision = decide(store, target, arch)
    return TargetView(
        target=target, arch=", ".join(sorted(arch.values())), decision=decision, measured=len(searched),
        verdicts=dict(verdicts), failures=failures,
        convergence_svg=convergence_chart(series) if series else "",
        verdict_svg=bar_chart(counts, [_VERDICT_COLORS[v] for v in order], "", "candidates by verdict"),
        speedup_svg=speedup_chart(decision) if isinstance(decision, Winner) else "",
        importance_svg=bar_chart(ranked, [_COLORS[0]] * len(ranked), "%", "option importance")
        if ranked else "",
        importance_note=note)


def _gpu_ranges(store: Store) -> dict[str, Any]:
    states = store.gpu_states()
    if not states:
        return {}
    return {"SM clock (MHz)": f"{min(s['sm_clock_min_mhz'] for s in states)} to "
                              f"{max(s['sm_clock_max_mhz'] for s in states)}",
            "memory clock (MHz)": str(max(s["mem_clock_mhz"] for s in states)),
            "highest temperature (C)": str(max(s["temperature_max_c"] for s in states)),
            "runs with a slowdown reason": str(sum(1 for s in states if slowdowns(s)))}


_ENV = jinja2.Environment(loader=jinja2.PackageLoader("compileiq_build", "templates"),
                          autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
                          lstrip_blocks=True)
_ENV.tests["instanceof"] = isinstance


def render_html(store: Store, title: str) -> str:
    views = [_view(store, target, arch) for target, arch in pairs(store)]
    sessions = store.sessions()
    env = sessions[-1][3] if sessions else {}
    return _ENV.get_template("report.html.j2").render(
        title=title, version=__version__, views=views, env=env, gpu_ranges=_gpu_ranges(store),
        sessions=len(sessions), Winner=Winner)


def write_html(store: Store, path: Path, title: str) -> None:
    path.write_text(render_html(store, title), encoding="utf-8")
