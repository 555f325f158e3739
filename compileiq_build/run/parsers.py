"""Read measurements from what benchmarks print: NVBench JSON, Google Benchmark JSON, CSV,
a user's regex, or the process wall time.

Each parser returns one `Reading` per entry the output reports (NVBench states,
Google Benchmark cases, CSV rows); a benchmark with several entries yields one
workload per entry.  Times are in seconds; rates are kept as printed.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from compileiq_build.project.manifest import UNIT_SECONDS, Benchmark

_GBENCH_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
# NVBench summaries, best first: the isolated (cold) GPU time, then the batch GPU time,
# then the host-measured time for CPU-only benchmarks.
_NVBENCH_TAGS = ("nv/cold/time/gpu/median", "nv/cold/time/gpu/mean", "nv/batch/time/gpu/mean",
                 "nv/cold/time/cpu/median", "nv/cold/time/cpu/mean")


_NVBENCH_MARKDOWN = re.compile(r"^# Benchmark Results|\|\s*GPU Time\s*\||^Run:\s+\[\d+/\d+\]", re.M)
_GBENCH_CONSOLE = re.compile(r"^Benchmark\s+Time\s+CPU\s+Iterations", re.M)


class ParseError(ValueError):
    """The benchmark's output does not hold the value its registration promises."""


@dataclass(frozen=True)
class Reading:
    entry: str  # "" when the benchmark reports a single value
    value: float  # seconds for times; the printed number for rates
    printed: str = ""  # the number as printed, where the output is text (REGEX, CSV)


# A value printed with fewer digits than this (relative) hides the gains tuning looks for.
COARSE = 0.001


def resolution(printed: str) -> float | None:
    """The relative step of a printed number: '0.00019' -> 1e-5 / 1.9e-4, about 5%."""
    try:
        number = Decimal(printed.strip())
    except InvalidOperation:
        return None
    if not number.is_finite() or number == 0:
        return None
    exponent = number.as_tuple().exponent
    return float(Decimal(10) ** exponent / abs(number)) if isinstance(exponent, int) else None


def _positive(number: float, text: object) -> float:
    if not (number > 0 and math.isfinite(number)):
        raise ParseError(f"measured value {text!r} is not a positive finite number")
    return number


def _float(text: object, what: str) -> float:
    try:
        return float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ParseError(f"{what} {text!r} is not a number") from None


def _scale(bench: Benchmark, number: float) -> float:
    return number if bench.higher_is_better else number * UNIT_SECONDS[bench.unit]


# A named group as most regex dialects write it, `(?<name>...)`; Python's is `(?P<name>...)`.
_NAMED_GROUP = re.compile(r"\(\?<(?=[A-Za-z_])")


def parse_regex(bench: Benchmark, stdout: str) -> list[Reading]:
    """The first capture group of the last match; with a group `name`, one entry per name
    matched (its last match), its value in the group `value` or else the first unnamed one."""
    try:  # ^ and $ match at each line
        pattern = re.compile(_NAMED_GROUP.sub("(?P<", bench.regex), re.MULTILINE)
    except re.error as exc:
        raise ParseError(f"REGEX {bench.regex!r} is not a valid regular expression: {exc}") from None
    named = set(pattern.groupindex.values())
    value = pattern.groupindex.get("value") or next(
        (i for i in range(1, pattern.groups + 1) if i not in named), None)
    if value is None:
        raise ParseError(f"REGEX {bench.regex!r} has no capture group for the value (an unnamed "
                         "group, or one named 'value')")
    matches = list(pattern.finditer(stdout))
    if not matches:
        raise ParseError(f"REGEX {bench.regex!r} matched nothing in the output")
    if "name" not in pattern.groupindex:
        text = matches[-1].group(value)  # the last report: earlier ones may be warm-ups
        return [Reading("", _scale(bench, _positive(_float(text, "REGEX captured"), text)), text)]
    last = {m.group("name").strip(): m.group(value) for m in matches}
    readings = []
    for name, text in last.items():
        if not name:
            raise ParseError(f"REGEX {bench.regex!r}: the group 'name' matched an empty name")
        number = _positive(_float(text, f"REGEX captured for {name!r}"), text)
        readings.append(Reading(name, _scale(bench, number), text))
    return readings


def parse_csv(bench: Benchmark, stdout: str) -> list[Reading]:
    """The COLUMN of every data row under the header line that names it; with several rows,
    the first column names each entry."""
    try:
        rows = list(csv.reader(io.StringIO(stdout, newline=None)))
    except csv.Error as exc:
        raise ParseError(f"the output is not readable as CSV: {exc}") from None
    start = next((i for i, row in enumerate(rows) if bench.column in (c.strip() for c in row)), None)
    if start is None:
        raise ParseError(f"no CSV with a column {bench.column!r} in the output")
    header = [c.strip() for c in rows[start]]
    col = header.index(bench.column)
    body = []
    for row in rows[start + 1:]:
        if len(row) != len(header):
            break  # the table ended
        body.append(row)
    if not body:
        raise ParseError(f"the CSV with column {bench.column!r} has no data row")
    readings = []
    for i, row in enumerate(body):
        text = row[col].strip()
        number = _positive(_float(text, f"CSV column {bench.column!r}"), text)
        name = "" if len(body) == 1 else (row[0].strip() if col != 0 else str(i)) or str(i)
        readings.append(Reading(name, _scale(bench, number), text))
    if len({r.entry for r in readings}) != len(readings):
        raise ParseError("CSV rows do not have distinct names in their first column")
    return readings


def json_object(text: str) -> dict[str, Any] | None:
    start = text.find("{")
    if start < 0:
        return None
    try:
        value = json.loads(text[start:])
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def is_gbench(doc: dict[str, Any] | None) -> bool:
    return (doc is not None and isinstance(doc.get("context"), dict)
            and isinstance(doc.get("benchmarks"), list))


def is_nvbench(doc: dict[str, Any] | None) -> bool:
    benches = doc.get("benchmarks") if doc else None
    return isinstance(benches, list) and bool(benches) and all(
        isinstance(b, dict) and "states" in b for b in benches)


def detect_format(output: str) -> str | None:
    """FORMAT auto: 'gbench' for Google Benchmark (JSON or console table), 'nvbench' for
    NVBench (JSON, markdown or its run log), else None."""
    doc = json_object(output)
    if is_gbench(doc) or _GBENCH_CONSOLE.search(output):
        return "gbench"
    if is_nvbench(doc) or _NVBENCH_MARKDOWN.search(output):
        return "nvbench"
    return None


def parse_gbench(bench: Benchmark, text: str) -> list[Reading]:
    """Google Benchmark JSON: real time per case; with repetitions, the median aggregate."""
    doc = json_object(text)
    if not is_gbench(doc):
        raise ParseError("no Google Benchmark JSON in the output (run it with --benchmark_format=json)")
    assert doc is not None
    entries = [b for b in doc["benchmarks"] if isinstance(b, dict)]
    for b in entries:
        if b.get("error_occurred"):
            raise ParseError(f"case {b.get('name')!r} reported an error: {b.get('error_message', '')}")
    medians = [b for b in entries if b.get("run_type") == "aggregate" and b.get("aggregate_name") == "median"]
    aggregated = {b.get("run_name") for b in medians}
    chosen = medians + [b for b in entries if b.get("run_type", "iteration") == "iteration"
                        and b.get("run_name", b.get("name")) not in aggregated]
    readings: dict[str, float] = {}
    for b in chosen:
        name = str(b.get("run_name") or b.get("name"))
        unit = b.get("time_unit", "ns")
        if unit not in _GBENCH_UNITS:
            raise ParseError(f"case {name!r} has an unknown time_unit {unit!r}")
        number = _positive(_float(b.get("real_time"), f"real_time of {name!r}"), b.get("real_time"))
        readings.setdefault(name, number * _GBENCH_UNITS[unit])  # the median, or the first run
    if not readings:
        raise ParseError("Google Benchmark JSON holds no benchmark results")
    if len(readings) == 1:
        return [Reading("", next(iter(readings.values())))]
    return [Reading(name, value) for name, value in readings.items()]


def _summary(state: dict[str, Any], tag: str) -> float | None:
    for s in state.get("summaries") or []:
        if isinstance(s, dict) and s.get("tag") == tag:
            for d in s.get("data") or []:
                if isinstance(d, dict) and d.get("name") == "value":
                    return _float(d.get("value"), f"NVBench {tag}")
    return None


def parse_nvbench(bench: Benchmark, text: str) -> list[Reading]:
    """NVBench JSON (--json FILE): per state, the isolated GPU time."""
    doc = json_object(text)
    if not is_nvbench(doc):
        raise ParseError("no NVBench JSON found (NVBench writes it with --json FILE)")
    assert doc is not None
    readings = []
    for b in doc["benchmarks"]:
        for state in b.get("states") or []:
            if not isinstance(state, dict) or state.get("is_skipped"):
                continue
            name = f"{b.get('name', '')}[{state.get('name', '')}]"
            for tag in _NVBENCH_TAGS:
                value = _summary(state, tag)
                if value is not None:
                    readings.append(Reading(name, _positive(value, value)))
                    break
            else:
                raise ParseError(f"NVBench state {name} has no GPU or CPU time summary")
    if not readings:
        raise ParseError("NVBench JSON holds no measured state (all skipped?)")
    if len(readings) == 1:
        return [Reading("", readings[0].value)]
    return readings
