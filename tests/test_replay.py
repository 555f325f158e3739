"""The replay benchmark (benchmarks/search_replay.py) on a small table written here."""

from __future__ import annotations

import csv
import itertools
import json
import random
import threading
from pathlib import Path

import pytest

from benchmarks import search_replay
from compileiq_build.build.space import Config, Dimension, FlagSpace, config_key
from compileiq_build.search.loop import Measured, drive
from compileiq_build.search.strategies import Candidate, Context, Exhaustive, Proposal, RandomSearch, Stop


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
    # 11 evaluations cover every configuration but the baseline: the covering strategies reach the
    # optimum.  Here every single move is slower and the optimum is a pure interaction (2, y): the
    # model may stop once it predicts nothing beyond noise, and says so in its fraction.
    for name in ("exhaustive", "random"):
        assert out[name]["fraction_at_budget"] == 1.0 and 1 <= out[name]["evals_to_95"] <= 11
    assert out["exhaustive"]["evals_to_95"] == 8  # (2, y) is the 8th configuration after the baseline
    assert 0.0 <= out["model"]["fraction_at_budget"] <= 1.0 and out["model"]["short_of_95"] <= 3


def test_replay_with_a_prior_table_starts_from_its_best(tmp_path, capsys):
    table = _table(tmp_path / "t.csv")
    prior = _table(tmp_path / "p.csv", offset=0.05)
    search_replay.main([str(table), "--budget", "3", "--seeds", "2", "--json", "--strategies", "model",
                        "--prior", str(prior)])
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == {"fraction_at_budget": 1.0, "evals_to_95": 1, "short_of_95": 0}


def test_without_features_the_model_sees_the_options_alone(tmp_path):
    """The strategy sees every row as a known candidate with the table's features;
    `without_features` leaves them empty."""
    table = search_replay.load_table(_table(tmp_path / "t.csv"))
    seen = []

    class Spy(RandomSearch):
        def propose(self, context):
            seen.append([(c.config, dict(c.features)) for c in context.known])
            return super().propose(context)

    search_replay.run_ours(table, Spy(0), 2)
    search_replay.run_ours(search_replay.without_features(table), Spy(0), 2)
    assert len(seen[0]) == len(table.rows)
    assert ({"T:a": "1", "T:b": "x"}, {"registers": 32 + 8 * 4}) in seen[0]  # the 5th row
    assert seen[-1] and all(f == {} for _, f in seen[-1])


@pytest.mark.benchmark
def test_the_model_does_not_stop_short_on_the_recorded_nbody_table():
    """On the H200's nbody table, -maxrregcount=32 gains 0.6% at -O1 and 1.6% at the default -O.
    Seeds that saw only the first stopped early with 37% of the gain (3 of 20); the search now
    checks the best configuration along every dimension before it stops."""
    table = search_replay.without_features(search_replay.load_table(
        Path(search_replay.__file__).parent / "data" / "h200_nbody_rul_maxrregcount_O.csv"))
    results = search_replay.replay(table, budget=37, seeds=20, strategies=["model"])["model"]
    assert results["fraction_at_budget"] >= 0.95 and results["short_of_95"] <= 1


# 4 x 4 x 4 labels: large enough that every engine's own stopping rule leaves the budget to the loop.
_DIMS = {"a": ["default", "1", "2", "3"], "b": ["default", "x", "y", "z"], "c": ["default", "p", "q", "r"]}


def _cube(path: Path, free_c: bool = False) -> search_replay.Table:
    """The 4 x 4 x 4 space as a table, each row's time its own; with `free_c`, `c` changes no code."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow([*_DIMS, "code", "time"])
        for i, row in enumerate(itertools.product(*_DIMS.values())):
            w.writerow([*row, "/".join(row[:2] if free_c else row), 1.0 + 0.001 * i])
    return search_replay.load_table(path)


@pytest.mark.parametrize("peer, package", [("smac", "smac"), ("kernel-tuner-bo", "kernel_tuner"),
                                           ("kernel-tuner-ga", "kernel_tuner")])
def test_a_peer_spends_the_budget_as_the_loop_counts_it(tmp_path, peer, package):
    """A peer runs through tune's loop: it measures `budget` distinct codes, never one twice, is
    deterministic for a seed, and its engine's thread ends with the loop."""
    pytest.importorskip(package)
    from benchmarks.peers import PEERS

    table = _cube(tmp_path / "cube.csv")
    measured = search_replay.run_peer(table, PEERS[peer], 10, 3, peer)
    assert len(measured) == 10 and len(set(measured)) == 10  # each row's time is its own
    assert search_replay.run_peer(table, PEERS[peer], 10, 3, peer) == measured
    assert not [t for t in threading.enumerate() if t.name == peer]


def test_a_code_measured_before_does_not_spend_a_peers_budget(tmp_path):
    """`c` changes no code here: the loop answers those rows free, and the peer goes on to 10
    distinct codes."""
    pytest.importorskip("kernel_tuner")
    from benchmarks.peers import PEERS

    table = _cube(tmp_path / "cube.csv", free_c=True)
    measured = search_replay.run_peer(table, PEERS["kernel-tuner-bo"], 10, 0)
    assert len(measured) == 10 and len(set(measured)) == 10


def _sampled_table(path: Path) -> Path:
    """A sample of a 4 x 4 x 4 space with a `code` column and no features: `c` changes no code, and
    (a=3, b=z) is the optimum, one code of two rows."""
    rows = [("default", "default", "default")] + [r for r in itertools.product(
        ("default", "1", "2", "3"), ("default", "x", "y", "z"), ("default", "p", "q", "r")) if r[2] in "pq"]
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["a", "b", "c", "code", "time"])
        for a, b, c in rows:
            w.writerow([a, b, c, f"{a}/{b}", 0.9 if (a, b) == ("3", "z") else 1.0 + 0.01 * len(a + b)])
    return path


def test_a_sampled_table_with_codes_counts_distinct_codes(tmp_path, capsys):
    path = _sampled_table(tmp_path / "sampled.csv")
    search_replay.main([str(path), "--budget", "6", "--seeds", "3", "--json",
                        "--strategies", "model", "random", "exhaustive"])
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"model", "random", "exhaustive"}
    assert all({"fraction_at_budget", "short_of_95"} <= set(r) for r in out.values())
    table = search_replay.load_table(path)
    # Every strategy measures 6 distinct codes: rows of a code measured before are free.
    for name in ("random", "exhaustive"):
        measured = search_replay.run_ours(table, search_replay.ours(table, name, 0), 6)
        assert len(measured) == 6
    # A configuration outside the table is answered by the row with the fewest options changed.
    assert table.rows[table.nearest({"a": "3", "b": "z", "c": "r"}, random.Random(0))]["a"] == "3"


def test_a_spread_column_is_the_noise_the_replayed_model_stops_on(tmp_path):
    """`spread` (what `report --table` writes: each row's measured half-width) is not a
    dimension; the model's stop rule weighs predicted gains against it, as in `tune`."""
    plain = _sampled_table(tmp_path / "plain.csv")
    lines = plain.read_text().splitlines()
    noisy = tmp_path / "noisy.csv"
    noisy.write_text("\n".join([lines[0] + ",spread", *(line + ",0.2" for line in lines[1:])]) + "\n")
    table = search_replay.load_table(noisy)
    assert set(table.dims) == {"a", "b", "c"} and table.spreads[1] == 0.2
    # Measurements that resolve 20%: no predicted gain is worth measuring; the table without
    # the column leaves the model its assumed 0.2%, and it goes on.
    coarse = search_replay.run_ours(table, search_replay.ours(table, "model", 0), 20)
    fine = search_replay.run_ours(search_replay.load_table(plain), search_replay.ours(table, "model", 0), 20)
    assert len(coarse) < len(fine)


@pytest.mark.benchmark
def test_compiling_ahead_is_what_lets_the_model_reach_the_gemm_optimum():
    """On the H200's gemm table the optimum is an interaction of two options, one code of 115.
    Knowing codes and features only of what it measured, the model ends far short of it (0.49
    of its gain); naming 5 configurations a evaluation to compile ahead (tune --compile-ahead 5)
    it gets 0.89 of the gain (benchmarks/results/search/compile_ahead/), and with every row's
    code known all of it: a register cap measured slower alone stays in the pool in company of
    another value that moved the register count (pool.py; 0.89 before)."""
    table = search_replay.load_table(Path(search_replay.__file__).parent / "data"
                                     / "h200_gemm_default_space_sample.csv")
    runs = {ahead: search_replay.replay(table, budget=20, seeds=2, strategies=["model"], ahead=ahead)["model"]
            for ahead in (0, 5, None)}
    blind, ahead, known = (runs[a]["fraction_at_budget"] for a in (0, 5, None))
    assert known == 1.0 and ahead >= blind + 0.3


def test_an_open_replay_measures_distinct_codes_of_the_whole_space():
    """benchmarks.open_replay: the model may propose any configuration of the default CUDA
    space, as in `tune`; a code measured before costs nothing, and no search beats the optimum
    of the whole space."""
    from benchmarks import open_replay
    from benchmarks.synthetic import Landscape

    land = Landscape(random.Random(3))
    best = open_replay.optimum(land)  # every configuration compiled: the test's cost, paid once
    for seed in (0, 1):
        times = open_replay.run(land, budget=8, seed=seed, ahead=3)
        assert len(times) == 8 and len(set(times)) == 8  # one time per code: 8 distinct codes
        assert min(times) >= best


_LINE = FlagSpace((Dimension("T", "a", ("1", "2", "3", "4", "5", "6"), "{v}"),))
_CODES = {"default": "A", "1": "A", "2": "B", "3": "B", "4": "C", "5": "D", "6": "E"}


def _line_compile(compiled: list[str]):
    def compile_(config: Config) -> Candidate:
        value = _LINE.full_config(config)["T:a"]
        compiled.append(value)
        return Candidate(config, _CODES[value], {"spills": float(value == "4")})

    return compile_


def test_drive_counts_the_budget_in_codes_as_tune_does():
    """loop.drive, the loop of the replays: a code measured before (or the baseline's) takes that
    measurement and `measure` sees each new code once; the budget counts codes; the candidate
    bound counts compiles."""
    measured: list[str] = []

    def measure(config: Config, code: str) -> Measured:
        measured.append(code)
        return Measured(0.9, True, 0.01)

    proposals = drive(Exhaustive(), _LINE, 3, _line_compile([]), measure, baseline_code="A")
    assert measured == ["B", "C", "D"] and proposals.finished == "budget of 3 evaluations reached"
    trials = {t.config["T:a"]: t for t in proposals.history()[0]}
    assert list(trials) == ["1", "2", "3", "4", "5"]
    assert trials["1"].ratio == 1.0 and not trials["1"].faster  # the baseline's code
    assert trials["3"].ratio == 0.9 and trials["3"].spread == 0.01  # B's measurement
    bounded = drive(Exhaustive(), _LINE, 3, _line_compile([]), measure, baseline_code="A", max_candidates=2)
    assert bounded.finished == "2 candidates compiled"


def test_drive_compiles_ahead_and_vets_as_tune_does():
    """Compiling ahead: what `scout` names, at most K per evaluation started (tune compiles while
    the GPU measures one); a proposal `vet` turns down is a known candidate, not measured, and
    counts against the candidate bound."""

    class Scouting(Exhaustive):
        def propose(self, context: Context) -> Proposal | Stop:
            spilling = {config_key(c.config) for c in context.known if c.features.get("spills")}
            return next((Proposal({"T:a": v}, "line") for v in _LINE.dimensions[0].values
                         if context.fresh({"T:a": v}) and f"T:a={v}" not in spilling), Stop("done"))

        def scout(self, context: Context, count: int) -> list[Config]:
            return [{"T:a": v} for v in _LINE.dimensions[0].values
                    if context.fresh({"T:a": v}) and config_key({"T:a": v}) not in context.codes][:count]

        def vet(self, context: Context, proposal: Proposal, candidate: Candidate) -> str:
            return "it spills" if candidate.features.get("spills") else ""

    compiled: list[str] = []
    proposals = drive(Scouting(), _LINE, 2, _line_compile(compiled),
                      lambda config, code: Measured(0.9, True), baseline_code="A", compile_ahead=1)
    trials, known = proposals.history()
    # Ahead: "1" before the first evaluation (A, the baseline's: Exhaustive skips it), "3" before
    # the second (B, measured by then: skipped too); proposed: "2" (B), "4" (turned down), "5" (D).
    assert compiled == ["1", "2", "3", "4", "5"] and list(proposals.ahead) == ["T:a=1", "T:a=3"]
    assert [t.config["T:a"] for t in trials] == ["2", "5"] and proposals.turned_down == 1
    assert "4" in {c.config["T:a"] for c in known}
