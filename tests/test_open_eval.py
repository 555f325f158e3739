"""The open evaluation's landscape (benchmarks/open_eval.py) on a recorded corpus table."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from benchmarks import open_eval
from benchmarks.search_replay import load_table

TABLE = open_eval.CORPUS / "HeCBench__bsearch__kernel_BS.csv"


def _land() -> open_eval.Landscape:
    return open_eval.Landscape(load_table(TABLE), TABLE.stem)


def _moves(table, same_as_baseline: bool) -> list[tuple[str, str]]:
    """The table's one-option moves whose code is (or is not) the baseline's."""
    base = table.codes[table.baseline]
    out = []
    for row, code in zip(table.rows, table.codes, strict=True):
        changed = [(d, v) for d, v in row.items() if v != "default"]
        if len(changed) == 1 and (code == base) == same_as_baseline:
            out.append(changed[0])
    return out


def test_a_recorded_row_is_answered_exactly():
    table, land = load_table(TABLE), _land()
    for i in (table.baseline, 5, len(table.rows) - 1):
        code, features = land.compile(table.rows[i])
        assert code == table.codes[i] and features == table.features[i]
        assert math.isclose(land.time(table.rows[i]), table.times[i], rel_tol=1e-12)
    assert land.borrowed == 0


def test_passengers_keep_the_code_of_the_configuration_without_them():
    table, land = load_table(TABLE), _land()
    passengers = _moves(table, same_as_baseline=True)
    movers = _moves(table, same_as_baseline=False)
    assert passengers and movers  # the table has both kinds
    (d, v), (pd, pv) = movers[0], next(p for p in passengers if p[0] != movers[0][0])
    config = {d: v, pd: pv}
    assert open_eval.indices(config).tolist() not in land.rows.tolist()  # not itself recorded
    row = table.rows.index({**{n: "default" for n in table.dims}, d: v})
    assert land.compile(config) == (table.codes[row], table.features[row])
    assert math.isclose(land.time(config), table.times[row], rel_tol=1e-12)


def test_a_new_code_is_deterministic_and_bounded_by_its_moves():
    table = load_table(TABLE)
    movers = _moves(table, same_as_baseline=False)
    pooled = open_eval.pooled_residuals([TABLE])
    first, second = (open_eval.Landscape(table, TABLE.stem, pooled) for _ in range(2))
    # Three moves of other options whose combination no recorded row's code answers.
    config = next(c for trio in itertools.combinations(movers, 3) if len({d for d, _ in trio}) == 3
                  and first.answer(open_eval.indices(c := dict(trio))[None])[0][0] < 0)
    code, features = first.compile(config)
    assert code.startswith("new:") and code not in table.codes
    assert (code, features) == second.compile(config) and first.borrowed == 1
    assert first.time(config) == second.time(config)
    # Another table's name is another seed: the same configuration draws another residual.
    other = open_eval.Landscape(table, "another table", pooled)
    assert other.compile(config)[0] != code
    base = table.times[table.baseline]
    effects = [math.log(table.times[table.rows.index({**{n: "default" for n in table.dims}, d: v})] / base)
               for d, v in config.items()]
    log = math.log(first.time(config) / base)
    low, high = sum(min(e, 0) for e in effects), sum(max(e, 0) for e in effects)
    assert low - open_eval.S0 <= log <= high + open_eval.S0


def test_the_optimum_is_at_least_the_best_recorded_row():
    table, land = load_table(TABLE), _land()
    optimum, without_residuals = land.optimum()
    assert optimum <= min(table.times) + 1e-12 and without_residuals <= min(table.times) + 1e-12
    row, _, log = land.answer(open_eval.whole_space()[:1000])
    assert np.all(np.isfinite(log)) and (row >= 0).any()


def test_a_peer_searches_the_landscape_through_the_loop():
    """A peer (Kernel Tuner's genetic algorithm) through tune's loop on a landscape: its answers
    are the landscape's times (a float passed where the answer's function goes broke every peer
    run of the open evaluation)."""
    land = _land()
    times = open_eval._peer(land, "kernel-tuner-ga", budget=3, seed=0)
    assert 1 <= len(times) <= 3 and all(math.isfinite(t) and t > 0 for t in times)


def test_a_shortfall_inside_the_optimums_measured_interval_is_not_beyond_the_noise():
    land = _land()
    optimum, _ = land.optimum()
    table = land.table
    recorded = [s for t, s in zip(table.times, table.spreads, strict=True) if math.isclose(t, optimum)]
    assert recorded  # this table's optimum is a recorded row: the spread is that row's interval
    assert land.optimum_spread() in recorded and land.optimum_spread() > 0
    result = {"optimum_gain": 0.10, "optimum_spread": 0.01}
    # Optimum 1/1.1 = 0.9091: fraction 0.95 ends at 0.9136 (0.5% slower), 0.80 at 0.9273 (2% slower).
    assert not open_eval.beyond_noise(result, 0.95)
    assert open_eval.beyond_noise(result, 0.80)
    lines = open_eval.summary([{**result, "at": {"model": {"10": [0.95], "20": [0.80]}}}], [10, 20])
    assert "0.950  0% short" in lines[2] and "0.800  100% short" in lines[2] and "100% beyond" in lines[2]


def test_a_new_code_with_a_register_cap_that_spills_alone_spills():
    path = open_eval.CORPUS / "sample__gemm__sgemm_reg8x8.csv"
    table = load_table(path)
    land = open_eval.Landscape(table, path.stem, open_eval.pooled_residuals([path]))
    default = {n: "default" for n in table.dims}
    cap = {**default, "maxrregcount": "64"}
    assert table.features[table.rows.index(cap)]["all:spill_bytes"] > 0  # the cap alone spills
    # With a move that changed the code without spilling, nearer in table order than the cap.
    other = next((d, v) for d, v in _moves(table, same_as_baseline=False)
                 if d in NAMES_BEFORE_CAP and table.features[table.rows.index({**default, d: v})]
                 ["all:spill_bytes"] == 0)
    config = {**cap, other[0]: other[1]}
    assert land.answer(open_eval.indices(config)[None])[0][0] < 0  # a new code
    code, features = land.compile(config)
    assert code.startswith("new:") and features["all:spill_bytes"] > 0
    reduced = land.reduce(open_eval.indices(config)[None])[0]
    nearest = table.features[int(land.row_ids[land.nearest_row(reduced)])]
    assert nearest["all:spill_bytes"] == 0  # what the features were before: the other move's row
    # The cap sets the register count: the estimate takes its change, the nearest row had none.
    capped = table.features[table.rows.index(cap)]["all:registers"]
    assert abs(features["all:registers"] - capped) < abs(nearest["all:registers"] - capped)
    assert land.compile(config)[1] is features  # one object per code, as the memo of the prior keys it


NAMES_BEFORE_CAP = open_eval.NAMES[:open_eval.NAMES.index("maxrregcount")]


def test_reach_names_an_optimum_that_only_a_recorded_row_of_several_options_holds():
    """bsearch's best row sets several options and gains far more than any one-option move: its
    neighbours are answered from those moves, so only that row's code reaches 0.9 of the gain."""
    table, land = load_table(TABLE), _land()
    base, best = table.times[table.baseline], int(np.argmin(table.times))
    assert sum(v != "default" for v in table.rows[best].values()) >= 2
    gain = base / table.times[best] - 1
    moves = [base / t - 1 for row, t in zip(table.rows, table.times, strict=True)
             if sum(v != "default" for v in row.values()) == 1]
    assert max(moves) < 0.9 * gain
    r = land.reach(0.9)
    assert math.isclose(r["optimum_gain"], base / land.optimum()[0] - 1)
    assert r["share"] > 0 and r["share_outside_multi_rows"] == 0 and r["best_outside_multi_rows"] < 0.9
    # A table whose one-option moves hold its optimum reaches it outside such rows.
    other = open_eval.CORPUS / "HeCBench__nbody__update_particles.csv"
    assert open_eval.Landscape(load_table(other), other.stem).reach(0.9)["share_outside_multi_rows"] > 0


def test_a_compiled_landscape_answers_a_code_as_compiling_gives_it(tmp_path):
    """--sources: the sample gemm's table compiled from sample_project (real nvcc and ptxas): a
    row's configuration compiles to the row's code and takes its time and spread; a
    configuration the table lacks is compiled too, not answered from its moves."""
    import json

    from benchmarks import corpus_record
    from compileiq_build.machine.environment import find_tool

    if not find_tool("nvcc") or not find_tool("cuobjdump"):
        pytest.skip("nvcc or cuobjdump is not installed")
    table_path = open_eval.CORPUS / "sample__gemm__sgemm_reg8x8.csv"
    meta = json.loads(table_path.with_suffix(".json").read_text())
    root = open_eval.CORPUS.parents[2]
    (tmp_path / "manifest.json").write_text(json.dumps([{
        "project": "sample", "program": "gemm", "dir": str(root / "sample_project"),
        "kernel_source": meta["kernel_source"], "nvcc_args": meta["nvcc_args"],
        "sources": meta["kernel_source"], "run": "unused"}]))
    found = open_eval.sources_for(table_path, tmp_path)
    assert found is not None and open_eval.sources_for(table_path, None) is None
    table = load_table(table_path)
    land = open_eval.CompiledLandscape(table, table_path.stem, None, *found, tmp_path / "work")
    best = min(range(len(table.rows)), key=lambda i: table.times[i])
    code, features = land.compile(table.rows[best])
    assert code == table.codes[best] and features["all:registers"] == table.features[best]["all:registers"]
    assert land.time(table.rows[best]) == table.times[best]
    assert land.spread(table.rows[best]) == table.spreads[best]
    # Not in the table: a register cap of 32 with the best's other options (it spills here).
    capped = {**table.rows[best], "maxrregcount": "32"}
    assert not any(row == capped for row in table.rows)
    code, features = land.compile(capped)
    assert code not in table.codes and features["all:spill_bytes"] > 0
    keyed = {f"CUDA:{name}": value for name, value in capped.items()}  # as the search names them
    assert land.time(capped) == land.time(keyed) and land.compiles == 2
    # One nvcc -ptx for both: they differ in ptxas options only.
    assert len(land._ptx) == 1 and corpus_record.short_code("ab" * 20) == "ab" * 8


def test_sources_without_a_manifest_are_refused_with_what_is_missing(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        open_eval.main(["--sources", str(tmp_path), "--out", str(tmp_path)])
    assert exit_.value.code == 2 and "no manifest.json there" in capsys.readouterr().err


def test_the_strategys_choosing_time_is_counted_per_call(tmp_path, capsys):
    from benchmarks import scout_time

    assert scout_time.main([TABLE.stem, "--budgets", "4", "--cache", str(tmp_path)]) == 0
    lines = dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())
    calls = {name: int(lines[name].split()[0]) for name in ("scout", "propose")}
    assert calls["propose"] >= 4 and calls["scout"] >= 1, lines  # four evaluations at least
    assert "ms per call" in lines["scout"] and lines[TABLE.stem].startswith("fraction {'4': [")
