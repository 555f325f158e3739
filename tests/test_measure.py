"""Reading values from benchmark output, and running real benchmark processes."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compileiq_build.project.manifest import Benchmark
from compileiq_build.run.measure import compare_evidence, run_workload
from compileiq_build.run.parsers import ParseError, parse_regex


def parse_value(bench: Benchmark, text: str, wall: float) -> float:
    """The single value a time or regex benchmark reports."""
    if bench.format == "time":
        return wall
    (reading,) = parse_regex(bench, text)
    return reading.value


def bench(**kw) -> Benchmark:
    base = dict(name="b", index=0, executable="", executable_target="", args=(), targets=("t",),
                format="regex", regex=r"time_ms: ([0-9.eE+-]+)", column="", unit="ms",
                higher_is_better=False, workdir="", timeout=None, labels=())
    base.update(kw)
    return Benchmark(**base)


def test_regex_in_milliseconds_becomes_seconds():
    assert parse_value(bench(), "warmup\ntime_ms: 2.5\n", 0.1) == pytest.approx(2.5e-3)


def test_the_last_match_counts():
    assert parse_value(bench(unit="s"), "time_ms: 9\ntime_ms: 1.25e-1\n", 0.1) == pytest.approx(0.125)


def test_rates_stay_as_printed():
    b = bench(regex=r"GFLOPS = ([0-9.]+)", higher_is_better=True)
    assert parse_value(b, "N=4096 GFLOPS = 1234.5 (ok)", 0.1) == 1234.5


@pytest.mark.parametrize("unit,factor", [("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)])
def test_units(unit, factor):
    assert parse_value(bench(unit=unit), "time_ms: 3", 0.0) == pytest.approx(3 * factor)


def test_time_format_is_the_wall_time():
    assert parse_value(bench(format="time"), "anything", 0.42) == 0.42


@pytest.mark.parametrize("output,message", [
    ("no number here", "matched nothing"),
    ("time_ms: -1", "not a positive finite number"),
    ("time_ms: 0", "not a positive finite number"),
    ("time_ms: 1e999", "not a positive finite number"),
    ("time_ms: +-", "is not a number"),
])
def test_malformed_output(output, message):
    with pytest.raises(ParseError, match=message):
        parse_value(bench(), output, 0.1)


def test_bad_regex_registration():
    with pytest.raises(ParseError, match="no capture group"):
        parse_value(bench(regex="time_ms"), "time_ms: 1", 0.1)
    with pytest.raises(ParseError, match="not a valid regular expression"):
        parse_value(bench(regex="(unclosed"), "x", 0.1)


@given(st.text(), st.sampled_from([r"time_ms: ([0-9.eE+-]+)", r"(\S+)", r"=\s*(.*)$"]),
       st.booleans())
def test_hostile_output_gives_a_positive_number_or_a_parse_error(text, regex, higher):
    b = bench(regex=regex, higher_is_better=higher, unit="ms" if not higher else "s")
    try:
        value = parse_value(b, text, 0.1)
    except ParseError:
        return
    assert value > 0 and math.isfinite(value)


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "bench.py"
    path.write_text(f"#!{sys.executable}\nimport sys, time\n{body}\n")
    path.chmod(0o755)
    return path


def test_run_workload_records_value_and_wall_time(tmp_path):
    exe = _script(tmp_path, "print('time_ms: 1.5')")
    (sample,) = run_workload(bench(), exe, timeout=30).samples
    assert sample.ok and sample.value == pytest.approx(1.5e-3) and sample.cost == sample.value
    assert sample.wall_s > 0 and sample.exit_code == 0


def test_run_workload_failures_are_samples_with_reasons(tmp_path):
    crash = _script(tmp_path, "print('check: FAILED', file=sys.stderr); sys.exit(3)")
    (sample,) = run_workload(bench(), crash, timeout=30).samples
    assert not sample.ok and sample.exit_code == 3 and "check: FAILED" in sample.error
    hang = _script(tmp_path, "time.sleep(30)")
    (sample,) = run_workload(bench(), hang, timeout=0.5).samples
    assert not sample.ok and "timed out" in sample.error
    missing = run_workload(bench(), tmp_path / "missing", timeout=5)
    assert not missing.ok and "cannot run" in missing.error


def test_rates_become_costs(tmp_path):
    exe = _script(tmp_path, "print('gbps: 400')")
    (sample,) = run_workload(bench(regex=r"gbps: (\S+)", higher_is_better=True), exe, timeout=30).samples
    assert sample.value == 400 and sample.cost == pytest.approx(1 / 400)


def test_checksum_and_output_file_evidence(tmp_path):
    exe = _script(tmp_path, "print('time_ms: 1\\nchecksum: 3.14159')\nopen('out.txt', 'w').write('1 2 3')")
    run = run_workload(bench(checksum=r"checksum: (\S+)", workdir=str(tmp_path)), exe, timeout=30)
    assert run.ok and run.evidence == "3.14159"
    run = run_workload(bench(output_file="out.txt", workdir=str(tmp_path)), exe, timeout=30)
    assert run.ok and run.evidence == b"1 2 3"
    missing = run_workload(bench(checksum=r"crc=(\d+)", workdir=str(tmp_path)), exe, timeout=30)
    assert not missing.ok and "CHECKSUM" in missing.error


@pytest.mark.parametrize("ref,got,tol,ok", [
    ("3.14159", "3.14159", None, True),
    ("3.14159", "3.14160", None, False),
    ("3.14159", "3.14160", 1e-4, True),
    ("3.14159", "3.2", 1e-4, False),
    (b"1 2 3", b"1 2 3.0000001", 1e-6, True),
    (b"1 2 3", b"1 2", 1e-3, False),
    (b"\xff\xfe", b"\xff\xff", 1e-3, False),
    ("1.0", "nan", 1e-3, False),
    (None, "anything", None, True),
])
def test_compare_evidence(ref, got, tol, ok):
    assert (compare_evidence(ref, got, tol) == "") is ok
