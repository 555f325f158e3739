"""benchmarks/harness_ab.py: interleaved rounds of real processes, read and summarized."""

from __future__ import annotations

import json
import sys

import pytest

from benchmarks import harness_ab


def _command(figure: str) -> str:
    return f"{sys.executable} -c \"print('time_ms: {figure}')\""


def test_a_variant_faster_in_every_round_is_confirmed_and_an_equal_one_is_not(tmp_path, capsys):
    out = tmp_path / "summary.json"
    harness_ab.main(["--rounds", "6", "--regex", r"time_ms: ([0-9.]+)", "--json", str(out),
                     "--variant", "baseline", _command("2.0"), "--variant", "tuned", _command("1.6"),
                     "--variant", "same", _command("2.0")])
    summary = json.loads(out.read_text())["summary"]
    assert summary["tuned"]["median_speedup"] == pytest.approx(1.25)
    assert summary["tuned"]["confirmed_faster"] and not summary["same"]["confirmed_faster"]
    assert "tuned: 1.2500x [1.2500, 1.2500] over 6 rounds: faster" in capsys.readouterr().out


def test_a_variant_without_its_figure_stops_the_run_with_its_output():
    with pytest.raises(SystemExit, match=r"exit 3, no figure matching (.|\n)*crashed here"):
        harness_ab.main(["--rounds", "2", "--regex", r"time_ms: ([0-9.]+)", "--variant", "baseline",
                         _command("1.0"), "--variant", "broken",
                         f"{sys.executable} -c \"print('crashed here'); raise SystemExit(3)\""])


@pytest.mark.parametrize("seed", range(4))
def test_speedups_are_over_the_first_variant_whatever_order_the_rounds_run_in(tmp_path, seed):
    """Each round runs the variants in a random order; the speedups are over the baseline (the
    first --variant), not over whichever ran first in the first round (the second live sitting's
    figures were over the random run's build)."""
    out = tmp_path / "summary.json"
    harness_ab.main(["--rounds", "3", "--seed", str(seed), "--regex", r"time_ms: ([0-9.]+)",
                     "--json", str(out), "--variant", "baseline", _command("2.0"),
                     "--variant", "slow", _command("2.5"), "--variant", "tuned", _command("1.6")])
    summary = json.loads(out.read_text())["summary"]
    assert summary["baseline"]["median_speedup"] == 1.0
    assert summary["tuned"]["median_speedup"] == pytest.approx(1.25)
    assert summary["slow"]["median_speedup"] == pytest.approx(0.8)
