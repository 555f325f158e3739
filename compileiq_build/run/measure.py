"""Run one benchmark process: its measurements, its correctness evidence, the GPU's state."""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from compileiq_build.machine import process
from compileiq_build.machine.gpu import GpuMonitor
from compileiq_build.project.manifest import Benchmark
from compileiq_build.run.parsers import (
    COARSE,
    ParseError,
    Reading,
    detect_format,
    parse_csv,
    parse_gbench,
    parse_nvbench,
    parse_regex,
    resolution,
)
from compileiq_build.store.records import Sample

_TAIL = 2000


@dataclass(frozen=True)
class Run:
    """One process run: a sample per reported entry (a single failed sample on error), and
    the checksum or output file the registration names, for comparison with the baseline."""

    samples: list[Sample]
    evidence: str | bytes | None = None

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.samples)

    @property
    def error(self) -> str:
        return next((s.error for s in self.samples if s.error), "")


def cost_of(bench: Benchmark, value: float) -> float:
    return 1.0 / value if bench.higher_is_better else value


def exit_text(code: int) -> str:
    """'exit code 3', or 'killed by SIGSEGV (signal 11)' for a negative code."""
    if code >= 0:
        return f"exit code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = "a signal"
    return f"killed by {name} (signal {-code})"


def _tail(text: str) -> str:
    return text[-_TAIL:].strip()


def _gbench_out(args: tuple[str, ...]) -> str | None:
    for i, a in enumerate(args):
        if a.startswith("--benchmark_out="):
            return a.split("=", 1)[1]
        if a == "--benchmark_out" and i + 1 < len(args):
            return args[i + 1]
    return None


def benchmark_command(bench: Benchmark, executable: Path, scratch: Path) -> list[str]:
    """The benchmark's command line (output files of its format go to `scratch`)."""
    args = list(bench.args)
    if bench.format == "gbench" and not any(a.startswith(("--benchmark_format", "--benchmark_out"))
                                            for a in args):
        args.append("--benchmark_format=json")
    if bench.format == "nvbench":
        args += ["--json", str(scratch / "nvbench.json")]
    return [str(executable), *args]


def _readings(bench: Benchmark, stdout: str, wall: float, workdir: Path, scratch: Path) -> list[Reading]:
    if bench.format == "time":
        return [Reading("", wall)]
    if bench.format == "regex":
        return parse_regex(bench, stdout)
    if bench.format == "csv":
        return parse_csv(bench, stdout)
    if bench.format == "gbench":
        out = _gbench_out(bench.args)
        text = (workdir / out).read_text(errors="replace") if out else stdout
        return parse_gbench(bench, text)
    if bench.format == "nvbench":
        path = scratch / "nvbench.json"
        if not path.is_file():
            raise ParseError("the benchmark wrote no NVBench JSON (is it an NVBench program?)")
        return parse_nvbench(bench, path.read_text(errors="replace"))
    raise ParseError(f"FORMAT {bench.format} was not resolved; run the baseline first")


def _evidence(bench: Benchmark, stdout: str, workdir: Path) -> str | bytes | None:
    if bench.checksum:
        matches = list(re.finditer(bench.checksum, stdout, re.MULTILINE))
        if not matches or not matches[-1].groups():
            raise ParseError(f"CHECKSUM {bench.checksum!r} matched nothing in the output")
        return matches[-1].group(1)
    if bench.output_file:
        path = workdir / bench.output_file
        if not path.is_file():
            raise ParseError(f"the benchmark did not write OUTPUT_FILE {path}")
        return path.read_bytes()
    return None


def run_workload(bench: Benchmark, executable: Path, timeout: float, env: dict[str, str] | None = None,
                 monitor: GpuMonitor | None = None) -> Run:
    """Run the benchmark once; every failure becomes a sample with its error."""
    workdir = Path(bench.workdir) if bench.workdir else executable.parent
    workdir.mkdir(parents=True, exist_ok=True)
    if bench.output_file:
        (workdir / bench.output_file).unlink(missing_ok=True)  # never read a stale file

    def failed(error: str, wall: float = 0.0, code: int | None = None, gpu: dict | None = None) -> Run:
        return Run([Sample(bench.workload, None, None, wall, code, error, gpu or {})])

    with tempfile.TemporaryDirectory(prefix="compileiq-run-") as tmp:
        scratch = Path(tmp)
        start = time.perf_counter()
        state: dict[str, Any] = {}
        try:
            with (monitor or GpuMonitor.disabled()).watch() as state:
                proc = process.run(benchmark_command(bench, executable, scratch), timeout, cwd=workdir,
                                   env={**os.environ, **(env or {})})
        except subprocess.TimeoutExpired:
            return failed(f"timed out after {timeout:.0f} s", time.perf_counter() - start, gpu=state)
        except OSError as exc:
            return failed(f"cannot run {executable}: {exc}")
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            detail = _tail(proc.stderr) or _tail(proc.stdout)
            ended = f"output ends: {detail}" if detail else "it printed nothing"
            return failed(f"{exit_text(proc.returncode)}; {ended}", wall, proc.returncode, state)
        try:
            readings = _readings(bench, proc.stdout, wall, workdir, scratch)
            evidence = _evidence(bench, proc.stdout, workdir)
        except (ParseError, OSError) as exc:
            return failed(f"{exc}; output ends: {_tail(proc.stdout)[-300:]}", wall, 0, state)
    samples = [Sample(f"{bench.workload}/{r.entry}" if r.entry else bench.workload, r.value,
                      cost_of(bench, r.value), wall, 0, "", state, r.printed) for r in readings]
    return Run(samples, evidence)


def run_check(command: Sequence[str], workdir: Path, timeout: float,
              env: dict[str, str] | None = None) -> tuple[str, float]:
    """Run a benchmark's CHECK once: why it failed ("" when it exited 0, its output then
    unread) and the seconds it took."""
    workdir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        proc = process.run(command, timeout, cwd=workdir, env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:.0f} s", time.perf_counter() - start
    except OSError as exc:
        return f"cannot run {command[0]}: {exc}", 0.0
    wall = time.perf_counter() - start
    if proc.returncode == 0:
        return "", wall
    detail = "\n".join(part for part in (_tail(proc.stdout), _tail(proc.stderr)) if part)
    ended = f"output ends:\n{detail}" if detail else "it printed nothing"
    return f"{exit_text(proc.returncode)}; {ended}", wall


def coarse_values(run: Run) -> list[str]:
    """Warnings for values printed with too few digits to show a gain of a fraction of a
    percent (a time printed as '0.00019' s moves in steps of 5%)."""
    warnings = []
    for sample in run.samples:
        step = resolution(sample.printed) if sample.printed else None
        if step is not None and step > COARSE:
            warnings.append(
                f"benchmark '{sample.workload}' prints its value as {sample.printed!r}, a resolution of "
                f"{100 * step:.2g}%: smaller differences cannot show. Print more digits, or register a "
                "value printed with more (a rate, with HIGHER_IS_BETTER).")
    return warnings


def resolve_format(bench: Benchmark, executable: Path, timeout: float,
                   env: dict[str, str] | None = None) -> Benchmark:
    """FORMAT auto: run once and recognise Google Benchmark (JSON or its console table) or
    NVBench (JSON or its markdown tables); later runs then ask them for JSON."""
    if bench.format != "auto":
        return bench
    if bench.regex:
        return replace(bench, format="regex")
    workdir = Path(bench.workdir) if bench.workdir else executable.parent
    try:
        proc = process.run([str(executable), *bench.args], timeout, cwd=workdir,
                           env={**os.environ, **(env or {})})
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ParseError(f"cannot run it to recognise its output: {exc}") from None
    found = detect_format(proc.stdout)
    if found:
        return replace(bench, format=found)
    raise ParseError("FORMAT auto recognises Google Benchmark JSON and NVBench output, and found "
                     "neither; register it with FORMAT regex (REGEX, UNIT), csv (COLUMN) or time")


def compare_evidence(reference: str | bytes | None, got: str | bytes | None,
                     tolerance: float | None) -> str:
    """Empty when `got` matches the baseline's evidence, else why not."""
    if reference is None:
        return ""
    if got == reference:
        return ""
    if tolerance is None:
        return "differs from the baseline's (exact match required)"
    ref_numbers, got_numbers = _numbers(reference), _numbers(got)
    if ref_numbers is None or got_numbers is None or len(ref_numbers) != len(got_numbers):
        return "differs from the baseline's and is not comparable as numbers"
    for i, (a, b) in enumerate(zip(ref_numbers, got_numbers, strict=True)):
        if not (math.isfinite(b) and abs(a - b) <= tolerance * max(abs(a), abs(b), 1e-30)):
            return f"value {i} is {b!r}, the baseline's {a!r}: beyond TOLERANCE {tolerance:g}"
    return ""


def _numbers(evidence: str | bytes | None) -> list[float] | None:
    if evidence is None:
        return None
    try:
        text = evidence.decode() if isinstance(evidence, bytes) else evidence
        return [float(t) for t in re.split(r"[\s,;]+", text.strip()) if t]
    except (UnicodeDecodeError, ValueError):
        return None
