"""Parsers on outputs captured from the real programs (tests/data/), and on hostile input."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compileiq_build.project.manifest import Benchmark
from compileiq_build.run.measure import coarse_values, resolve_format, run_workload
from compileiq_build.run.parsers import (
    ParseError,
    detect_format,
    parse_csv,
    parse_gbench,
    parse_nvbench,
    parse_regex,
    resolution,
)

DATA = Path(__file__).resolve().parent / "data"


def bench(**kw) -> Benchmark:
    base = dict(name="b", index=0, executable="", executable_target="", args=(), targets=("t",),
                format="gbench", regex="", column="", unit="s", higher_is_better=False, workdir="",
                timeout=None, labels=())
    base.update(kw)
    return Benchmark(**base)


def _program(tmp_path: Path, name: str) -> Path:
    """One of the Python benchmark programs in tests/data, as an executable of its own."""
    exe = tmp_path / name
    exe.write_text(f"#!{sys.executable}\n" + (DATA / name).read_text())
    exe.chmod(0o755)
    return exe


def test_gbench_plain_run_gives_one_workload_per_case():
    readings = parse_gbench(bench(), (DATA / "gbench_plain.json").read_text())
    names = [r.entry for r in readings]
    assert names == ["sum_list/1024", "sum_list/4096", "sum_list/16384", "sort_small"]
    raw = json.loads((DATA / "gbench_plain.json").read_text())["benchmarks"]
    assert readings[0].value == pytest.approx(raw[0]["real_time"] * 1e-9)  # time_unit ns -> s


def test_gbench_repetitions_use_the_median_aggregate():
    (reading,) = parse_gbench(bench(), (DATA / "gbench_repetitions.json").read_text())
    raw = json.loads((DATA / "gbench_repetitions.json").read_text())["benchmarks"]
    median = next(b for b in raw if b.get("aggregate_name") == "median")
    assert reading.entry == "" and reading.value == pytest.approx(median["real_time"] * 1e-9)


def test_gbench_console_output_is_refused_with_advice():
    with pytest.raises(ParseError, match="--benchmark_format=json"):
        parse_gbench(bench(), (DATA / "gbench_console.txt").read_text())


def test_real_google_benchmark_process(tmp_path):
    pytest.importorskip("google_benchmark")
    exe = _program(tmp_path, "gbench_program.py")
    b = bench(args=("--benchmark_min_time=0.01s", "--benchmark_filter=sum_list"), format="auto")
    resolved = resolve_format(b, exe, timeout=120)
    assert resolved.format == "gbench"  # FORMAT auto recognised the JSON
    run = run_workload(resolved, exe, timeout=120)
    assert run.ok, run.error
    assert [s.workload for s in run.samples] == ["b[--benchmark_min_time=0.01s --benchmark_filter=sum_list]/"
                                                 f"sum_list/{n}" for n in (1024, 4096, 16384)]
    assert all(s.cost and s.cost > 0 for s in run.samples)


NVBENCH = sorted(DATA.glob("nvbench_*.json"))


@pytest.mark.skipif(not NVBENCH, reason="no captured NVBench output")
@pytest.mark.parametrize("path", NVBENCH, ids=[p.name for p in NVBENCH])
def test_nvbench_captured_outputs(path):
    doc = json.loads(path.read_text())
    readings = parse_nvbench(bench(format="nvbench"), path.read_text())
    states = [s for b in doc["benchmarks"] for s in b["states"] if not s.get("is_skipped")]
    assert len(readings) == (len(states) if len(states) > 1 else 1)
    for r in readings:
        assert 0 < r.value < 10
    if len(states) > 1:
        assert len({r.entry for r in readings}) == len(readings)


@pytest.mark.parametrize("name,expected", [
    ("gbench_plain.json", "gbench"), ("gbench_console.txt", "gbench"),
    ("nvbench_markdown.txt", "nvbench"), ("nvbench_single.json", "nvbench"),
])
def test_format_auto_recognises_captured_outputs(name, expected):
    assert detect_format((DATA / name).read_text()) == expected
    assert detect_format("time_ms: 1.0\ncheck: ok\n") is None


def test_csv_column_and_rows():
    text = "size,time_ms,gflops\n1024,0.5,10\n2048,3.5,12\n"
    rows = parse_csv(bench(format="csv", column="time_ms", unit="ms"), "warming up\n" + text)
    assert [(r.entry, r.value) for r in rows] == [("1024", 0.0005), ("2048", 0.0035)]
    (one,) = parse_csv(bench(format="csv", column="gflops", higher_is_better=True), "gflops\n12.5\n")
    assert one.entry == "" and one.value == 12.5
    with pytest.raises(ParseError, match="no CSV with a column 'missing'"):
        parse_csv(bench(format="csv", column="missing"), text)


@given(st.text(max_size=300))
def test_hostile_text_never_crashes_a_parser(text):
    for parse, b in ((parse_gbench, bench()), (parse_nvbench, bench(format="nvbench")),
                     (parse_csv, bench(format="csv", column="t")),
                     (parse_regex, bench(format="regex", regex=r"t=(\S+)"))):
        try:
            readings = parse(b, text)
        except ParseError:
            continue
        assert all(r.value > 0 and math.isfinite(r.value) for r in readings)


JSONISH = st.recursive(st.none() | st.booleans() | st.floats() | st.text(max_size=5) | st.integers(),
                       lambda c: st.lists(c, max_size=3) | st.dictionaries(
                           st.sampled_from(["benchmarks", "context", "states", "summaries", "tag", "data",
                                            "name", "value", "real_time", "time_unit", "run_type"]),
                           c, max_size=4), max_leaves=25)


@given(JSONISH)
def test_hostile_json_never_crashes_the_json_parsers(doc):
    text = json.dumps(doc)
    for parse, b in ((parse_gbench, bench()), (parse_nvbench, bench(format="nvbench"))):
        try:
            readings = parse(b, text)
        except ParseError:
            continue
        assert all(r.value > 0 and math.isfinite(r.value) for r in readings)


@pytest.mark.gpu
def test_real_nvbench_process(tmp_path):
    pytest.importorskip("cuda.bench")
    pytest.importorskip("cupy")
    exe = _program(tmp_path, "nvbench_program.py")
    b = bench(args=("-b", "saxpy"), format="auto")
    resolved = resolve_format(b, exe, timeout=300)
    assert resolved.format == "nvbench"  # recognised from its markdown output
    run = run_workload(resolved, exe, timeout=300)
    assert run.ok, run.error
    assert len(run.samples) == 2  # one workload per NVBench state (two Elements values)
    assert all(s.workload.startswith("b[-b saxpy]/saxpy[") and s.cost > 0 for s in run.samples)


def test_csv_on_real_google_benchmark_csv_output():
    rows = parse_csv(bench(format="csv", column="real_time", unit="ns"), (DATA / "gbench.csv").read_text())
    assert [r.entry for r in rows] == ["sum_list/1024", "sum_list/4096", "sum_list/16384", "sort_small"]
    assert rows[0].value == pytest.approx(6227.33e-9)


def test_regex_on_real_sample_benchmark_outputs():
    (t,) = parse_regex(bench(format="regex", regex=r"time_ms: ([0-9.eE+-]+)", unit="ms"),
                       (DATA / "sample_bench_matmul.txt").read_text())
    assert t.value == pytest.approx(0.563641e-3)
    (rate,) = parse_regex(bench(format="regex", regex=r"^gbps: ([0-9.eE+-]+)$", higher_is_better=True),
                          (DATA / "sample_bench_blur.txt").read_text())
    assert rate.value == pytest.approx(19.4899)  # ^ and $ match per line


def test_printed_resolution():
    assert resolution("0.00019") == pytest.approx(1e-5 / 1.9e-4)
    assert resolution("4172961.043") == pytest.approx(1e-3 / 4172961.043)
    assert resolution("1.5e-3") == pytest.approx(0.1 / 1.5)
    assert resolution("nan") is None and resolution("0") is None and resolution("x") is None


def test_a_value_printed_with_too_few_digits_is_warned_about(tmp_path):
    # As BabelStream prints Triad's time: "%.5f" seconds of a 0.2 ms kernel.
    exe = tmp_path / "coarse"
    exe.write_text(f"#!{sys.executable}\nprint('Triad 4172961.043 0.00019')\n")
    exe.chmod(0o755)
    time = run_workload(bench(format="regex", regex=r"Triad +\S+ +([0-9.]+)"), exe, timeout=60)
    assert time.ok and time.samples[0].printed == "0.00019"
    [warning] = coarse_values(time)
    assert "prints its value as '0.00019', a resolution of 5.3%" in warning
    rate_bench = bench(format="regex", regex=r"Triad +([0-9.]+)", higher_is_better=True)
    rate = run_workload(rate_bench, exe, timeout=60)
    assert rate.ok and coarse_values(rate) == []


# test-backend-ops perf (ggml) prints one line per op case; the data file is its output, colour
# codes included, captured on an H200 (two runs; docs/real-projects.md).
BACKEND_OPS = r"^  (?<name>[A-Z_]+\(.*\)):\s+\d+ runs -\s+([0-9.]+) us/run"


def test_a_named_group_makes_one_workload_per_case():
    readings = parse_regex(bench(format="regex", regex=BACKEND_OPS, unit="us"),
                           (DATA / "test_backend_ops_perf.txt").read_text())
    assert [r.entry.split("(")[0] for r in readings] == ["MUL_MAT", "SOFT_MAX", "ROPE"]
    assert readings[0].entry.startswith("MUL_MAT(type_a=q4_0,type_b=f32,m=4096,n=512")
    assert [r.value for r in readings] == pytest.approx([321.38e-6, 288.89e-6, 12.25e-6])
    assert readings[2].printed == "12.25"  # the coarse-value check sees what was printed


def test_named_groups_value_and_repeated_cases():
    text = "warmup a=9.0 b=1\nrun a=1.5 b=2\nrun b=2.5 a=7\n"
    # The value group wins over the first unnamed one; a case printed twice keeps its last line.
    readings = parse_regex(bench(format="regex", regex=r"(run|warmup) (?P<name>\w)=(?P<value>[0-9.]+)"), text)
    assert [(r.entry, r.value) for r in readings] == [("a", 1.5), ("b", 2.5)]
    with pytest.raises(ParseError, match="no capture group for the value"):
        parse_regex(bench(format="regex", regex=r"(?<name>\w)="), text)
    # Lookbehinds are not named groups.
    (only,) = parse_regex(bench(format="regex", regex=r"(?<=a=)([0-9.]+)"), text)
    assert only.value == 7.0


def test_a_real_process_with_a_named_group_gives_a_sample_per_case(tmp_path):
    exe = tmp_path / "ops"
    exe.write_text(f"#!{sys.executable}\nprint(open({str(DATA / 'test_backend_ops_perf.txt')!r}).read())\n")
    exe.chmod(0o755)
    run = run_workload(bench(format="regex", regex=BACKEND_OPS, unit="us", name="ops"), exe, timeout=60)
    assert run.ok and len(run.samples) == 3
    assert run.samples[1].workload.startswith("ops/SOFT_MAX(type=f32,ne=[4096,4096,5,1]")
    assert coarse_values(run) == []
