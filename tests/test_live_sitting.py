"""The live panel's runner (benchmarks/live/sitting.py) on the C++ fixture, on the CPU: real
cmake, ninja, g++, `learn`, `tune` and the harness's rounds, as a GPU sitting runs them on a
public kernel."""

from __future__ import annotations

import json
import tarfile

import pytest

from benchmarks.live.sitting import REPO, main, pack
from benchmarks.sitting import run_logged


def test_a_sitting_tunes_with_a_held_out_prior_times_the_harness_and_resumes(cxx_project, tmp_path, capsys):
    out, work = tmp_path / "out", tmp_path / "work"
    common = ["--source", str(cxx_project), "--target", "bench_saxpy", "--exe-args", "200000 30",
              "--regex", r"time_ms: ([0-9.eE+-]+)", "--runs", "default", "--budget", "1",
              "--targets", "saxpy",
              "--work", str(work), "--out", str(out)]
    # Most of the corpus left out: the learnt prior must not have seen them (and learns fast).
    main(["sitting", *common, "--rounds", "2", "--prior-without", "HeCBench__*", "PolyBench*", "Rodinia__*"])
    status = (out / "status.txt").read_text()
    assert "learning a prior from" in status and status.rstrip().endswith("sitting done")
    assert (out / "prior.txt").is_file() and f"--prior {out / 'prior.txt'}" in status
    assert "--targets saxpy" in status  # only the named targets are tuned
    assert "set(COMPILEIQ_FLAGS_saxpy_CXX_" in (out / "tc_default.cmake").read_text()  # a winner over -O0
    assert (out / "store_default.sqlite").stat().st_size > 0
    assert "saxpy" in (out / "report_default.txt").read_text()
    summary = json.loads((out / "ab.json").read_text())["summary"]
    assert set(summary) == {"baseline", "default"} and summary["default"]["rounds"] == 2
    assert summary["default"]["median_speedup"] > 1.5  # -O0 against an optimising level
    assert (out / "env_before.txt").is_file() and (out / "env_after.txt").is_file()
    # A second call resumes: the ended run is not tuned again.
    main(["sitting", *common, "--rounds", "0"])
    assert "default: tuned in an earlier call" in (out / "status.txt").read_text()
    with tarfile.open(pack(out, tmp_path / "to")) as tar:
        names = set(tar.getnames())
    assert {"out/tc_default.cmake", "out/ab.json", "out/status.txt"} <= names
    capsys.readouterr()


def test_a_source_that_does_not_configure_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "CMakeLists.txt").write_text("this is not cmake\n")
    with pytest.raises(SystemExit) as exc:
        main(["sitting", "--source", str(tmp_path / "src"), "--target", "t", "--regex", "x", "--rounds", "0",
              "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out")])
    assert exc.value.code == 2
    assert "sitting: error: configuring" in capsys.readouterr().err


def test_start_runs_the_sitting_in_the_background_and_wait_packs_what_it_wrote(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)  # where `python -m benchmarks.live.sitting` finds the module
    out = tmp_path / "out"
    main(["start", "--source", str(tmp_path), "--target", "t", "--regex", "x", "--runs", "--rounds", "0",
          "--work", str(tmp_path / "work"), "--out", str(out)])
    main(["wait", "--out", str(out), "--to", str(tmp_path / "to"), "--timeout", "120"])
    shown = capsys.readouterr().out
    assert "sitting ended" in shown and "sitting done" in shown
    with tarfile.open(tmp_path / "to" / "out.tar.gz") as tar:
        assert "out/status.txt" in tar.getnames() and "out/job.pid" not in tar.getnames()


def test_a_logged_command_past_its_timeout_is_stopped_and_its_output_kept(tmp_path, capsys):
    log = tmp_path / "log"
    rc, text = run_logged(["sh", "-c", "echo before; echo err >&2; sleep 30"], 1.0, log)
    assert rc == -1 and text == "before\nerr\n"
    assert log.read_text().startswith("before\nerr\n") and "stopped after 1 s" in log.read_text()
    assert capsys.readouterr().out == "before\nerr\n"  # echoed as it came
