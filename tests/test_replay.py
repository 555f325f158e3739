"""The replay benchmark (benchmarks/search_replay.py) on a small table written here."""

from __future__ import annotations

import csv
import itertools
import json

from benchmarks import search_replay
from compileiq_build.search import RandomSearch


def _table(path, offset: float = 0.0):
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["a", "b", "feature:registers", "time"])
        for i, (a, b) in enumerate(itertools.product(("default", "1", "2", "3"), ("default", "x", "y"))):
            best = a == "2" and b == "y"
            w.writerow([a, b, 32 + 8 * i, (0.9 if best else 1.0 + 0.01 * i) + offset])
    return path


def test_replay_reports_every_strategy(tmp_path, capsys):
    table = _table(tmp_path / "t.csv")
    search_replay.main([str(table), "--budget", "11", "--seeds", "3", "--json",
                        "--strategies", "exhaustive", "random", "model"])
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"exhaustive", "random", "model"}
    # 11 evaluations cover every configuration but the baseline: all reach the optimum.
    for result in out.values():
        assert result["fraction_at_budget"] == 1.0 and 1 <= result["evals_to_95"] <= 11
    assert out["exhaustive"]["evals_to_95"] == 8  # (2, y) is the 8th configuration after the baseline


def test_replay_with_a_prior_table_starts_from_its_best(tmp_path, capsys):
    table = _table(tmp_path / "t.csv")
    prior = _table(tmp_path / "p.csv", offset=0.05)
    search_replay.main([str(table), "--budget", "3", "--seeds", "2", "--json", "--strategies", "model",
                        "--prior", str(prior)])
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == {"fraction_at_budget": 1.0, "evals_to_95": 1}


def test_without_features_the_model_sees_the_options_alone(tmp_path):
    table = search_replay.load_table(_table(tmp_path / "t.csv"))
    given = []

    def make(seed, features, prior):
        given.append(features)
        return RandomSearch(seed)

    search_replay.run_ours(table, make, 2, 0)
    search_replay.run_ours(search_replay.without_features(table), make, 2, 0)
    assert given[0]({"T:a": "1", "T:b": "x"}) == {"registers": 32 + 8 * 4}  # the 5th row
    assert given[1] is None
