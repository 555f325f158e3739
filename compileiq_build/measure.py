"""Run one benchmark process and read its measurement from what it printed."""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from compileiq_build import process
from compileiq_build.project import UNIT_SECONDS, Benchmark

SUPPORTED_FORMATS = ("regex", "time")
_TAIL = 2000


class ParseError(ValueError):
    """The benchmark's output does not hold the value its registration promises."""


@dataclass(frozen=True)
class Sample:
    """One run of one workload. ``cost`` is lower-is-better (seconds, or 1/rate)."""

    workload: str
    value: float | None  # as the benchmark reported it, in seconds for times
    cost: float | None
    wall_s: float
    exit_code: int | None
    error: str  # empty when the run is valid

    @property
    def ok(self) -> bool:
        return not self.error


def parse_value(bench: Benchmark, stdout: str, wall_s: float) -> float:
    """The measured value: seconds for times, the raw number for rates."""
    if bench.format == "time":
        return wall_s
    if bench.format == "regex":
        try:
            pattern = re.compile(bench.regex)
        except re.error as exc:
            raise ParseError(f"REGEX {bench.regex!r} is not a valid regular expression: {exc}") from None
        if pattern.groups < 1:
            raise ParseError(f"REGEX {bench.regex!r} has no capture group for the value")
        matches = list(pattern.finditer(stdout))
        if not matches:
            raise ParseError(f"REGEX {bench.regex!r} matched nothing in the output")
        text = matches[-1].group(1)  # the last report: earlier ones may be warm-ups
        try:
            number = float(text)
        except (TypeError, ValueError):
            raise ParseError(f"REGEX captured {text!r}, which is not a number") from None
        if not number > 0 or number == float("inf"):
            raise ParseError(f"measured value {text!r} is not a positive finite number")
        return number if bench.higher_is_better else number * UNIT_SECONDS[bench.unit]
    raise ParseError(
        f"FORMAT {bench.format} is not read by this version; use FORMAT regex with REGEX and UNIT, "
        "or FORMAT time"
    )


def cost_of(bench: Benchmark, value: float) -> float:
    return 1.0 / value if bench.higher_is_better else value


def _tail(text: str) -> str:
    return text[-_TAIL:].strip()


def run_workload(bench: Benchmark, executable: Path, timeout: float,
                 env: dict[str, str] | None = None) -> Sample:
    """Run the benchmark once; every failure becomes a Sample with its error."""
    workdir = Path(bench.workdir) if bench.workdir else executable.parent
    workdir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        proc = process.run([str(executable), *bench.args], timeout, cwd=workdir,
                           env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired:
        return Sample(bench.workload, None, None, time.perf_counter() - start, None,
                      f"timed out after {timeout:.0f} s")
    except OSError as exc:
        return Sample(bench.workload, None, None, 0.0, None, f"cannot run {executable}: {exc}")
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        detail = _tail(proc.stderr) or _tail(proc.stdout)
        return Sample(bench.workload, None, None, wall, proc.returncode,
                      f"exit code {proc.returncode}: {detail}")
    try:
        value = parse_value(bench, proc.stdout, wall)
    except ParseError as exc:
        return Sample(bench.workload, None, None, wall, 0, f"{exc}; output ends: {_tail(proc.stdout)[-300:]}")
    return Sample(bench.workload, value, cost_of(bench, value), wall, 0, "")
