"""The prior (prior.py): learnt from tables, loaded, and used by the model-guided search.

The kernels here are synthetic, with one rule that holds across them: a raised register-usage
level gains on register-hungry code, and a register cap below the code's registers spills and
loses.  A prior learnt from some kernels must carry that rule to another, and a prior that learnt
the opposite must cost the search only a few evaluations."""

from __future__ import annotations

import csv
import json
import math
import random
import re
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from compileiq_build.build.space import DEFAULT, Dimension, FlagSpace, config_key
from compileiq_build.search.prior import FEATURES, load
from compileiq_build.search.strategies import Candidate, Context, Proposal, Trial
from compileiq_build.search.strategies.model import ModelGuided

DIMS = {"register-usage-level": ["0", "5", "10"], "maxrregcount": ["32", "64", "128"], "dlcm": ["cg", "cs"],
        "restrict": ["on"]}
SPACE = FlagSpace(tuple(Dimension("CUDA", name, tuple(values), "{v}") for name, values in DIMS.items()))


def _kernel(registers: int, rule: int = 1):
    """A kernel's (config -> (time, features)): `rule` 1 as described above, -1 the opposite."""
    def measure(config: dict[str, str]) -> tuple[float, dict[str, float]]:
        level = int(config.get("register-usage-level", DEFAULT).replace(DEFAULT, "5"))
        cap = int(config.get("maxrregcount", DEFAULT).replace(DEFAULT, "255"))
        used = min(registers + (level - 5) * 4, cap)
        spills = max(0, registers - cap) * 8
        # 10% at level 10: beyond what a prior of six kernels is unsure of (it abstains within it).
        ratio = 1.0 - rule * 0.02 * (level - 5) * (registers > 64)
        ratio *= 1.3 if spills else 1.0
        ratio *= 0.99 if config.get("dlcm") == "cg" else 1.0
        features = {"all:registers": used, "all:spill_bytes": spills, "all:instructions": 1000 + spills,
                    "all:ldg": 100, "all:ffma": 400, "all:ldl": spills // 4, "all:stl": spills // 4}
        return 10.0 * ratio, features
    return measure


def _configs(n: int, seed: int) -> list[dict[str, str]]:
    rng = random.Random(seed)
    out = {config_key({}): {d: DEFAULT for d in DIMS}}
    for d, values in DIMS.items():
        for v in values:
            c = {**dict.fromkeys(DIMS, DEFAULT), d: v}
            out[config_key(c)] = c
    while len(out) < n:
        c = {d: rng.choice([DEFAULT, *v]) for d, v in DIMS.items()}
        out[config_key(c)] = c
    return list(out.values())


def _write_table(path: Path, measure, project: str) -> None:
    rows = []
    for config in _configs(40, zlib.crc32(path.name.encode()) % 1000):
        time, features = measure(config)
        rows.append({**config, "time": time, **{f"feature:{k}": v for k, v in features.items()}})
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    path.with_suffix(".json").write_text(json.dumps({"project": project}))


def _corpus(folder: Path, rule: int) -> Path:
    folder.mkdir()
    for i, registers in enumerate((72, 80, 96, 120, 160, 200)):  # all register-hungry: the rule holds
        _write_table(folder / f"p{i % 3}__k{i}.csv", _kernel(registers, rule), f"p{i % 3}")
    return folder


def _learn(corpus: Path, output: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "compileiq_build", "learn", "--corpus", str(corpus),
                           "--output", str(output)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def learned(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("prior")
    proc = _learn(_corpus(folder / "corpus", rule=1), folder / "prior.txt")
    assert proc.returncode == 0, proc.stderr
    assert "6 kernels of 3 projects" in proc.stdout
    return folder / "prior.txt"


def test_learn_writes_a_model_that_carries_the_rule_to_an_unseen_kernel(learned):
    meta = json.loads(learned.with_suffix(".json").read_text())
    assert meta["features"] == list(FEATURES) and meta["kernels"] == 6 and meta["rows"] == 240
    prior = load(learned)
    assert prior is not None and "6 kernels of 3 projects" in prior.label
    unseen = _kernel(140)
    base = unseen({})[1]
    configs = [{"CUDA:register-usage-level": "10"}, {"CUDA:maxrregcount": "32"}, {}]
    # Compiled (code features known) and not compiled yet (options and the baseline's code only).
    for features in ([unseen({k.split(":")[1]: v for k, v in c.items()})[1] for c in configs], [None] * 3):
        (level10, cap32, baseline), _ = prior.predict_interval(configs, features, base, abstain=False)
        assert level10 < -0.02 and cap32 > 0.05 and abs(baseline) < 0.005
    contributions = prior.contributions({"CUDA:register-usage-level": "10"}, None, base)
    assert min(contributions, key=contributions.get) == "register-usage-level"


def test_the_shipped_model_is_what_learn_makes_of_the_committed_corpus(tmp_path):
    """A stale model file (the corpus or the encoding changed, `learn` not run) fails here."""
    from compileiq_build.search.learn import CORPUS
    from compileiq_build.search.prior import SHIPPED

    proc = _learn(CORPUS, tmp_path / "prior.txt")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "prior.txt").read_text() == SHIPPED.read_text()
    shipped = json.loads(SHIPPED.with_suffix(".json").read_text())
    assert json.loads((tmp_path / "prior.json").read_text()) == shipped


def test_a_missing_broken_or_stale_model_is_a_warning_and_no_prior(tmp_path, learned):
    said: list[str] = []
    assert load(tmp_path / "none.txt", said.append) is None
    broken = tmp_path / "broken.txt"
    broken.write_text("not a model")
    broken.with_suffix(".json").write_text(learned.with_suffix(".json").read_text())
    assert load(broken, said.append) is None
    stale = tmp_path / "stale.txt"
    stale.write_text(learned.read_text())
    stale.with_suffix(".json").write_text(json.dumps({"format": 0, "features": ["x"]}))
    assert load(stale, said.append) is None
    assert [s.split(" ")[:2] for s in said] == [["no", "prior"], ["the", "prior"], ["the", "prior"]]
    assert "learn" in said[0] and "could not be read" in said[1] and "another version" in said[2]


def test_learn_reports_a_folder_without_tables(tmp_path):
    proc = _learn(tmp_path, tmp_path / "p.txt")
    assert proc.returncode != 0 and "no corpus tables" in proc.stderr and "Traceback" not in proc.stderr


def _search(measure, prior, budget: int) -> list[float]:
    """A closed search over a kernel's table (every configuration compiled): the ratios measured."""
    configs = _configs(60, 5)
    results = {config_key(c): measure(c) for c in configs}
    base_time, base_features = results[config_key({})]
    keyed = [{f"CUDA:{k}": v for k, v in c.items()} for c in configs]
    known = [Candidate(k, config_key(k), results[config_key(c)][1])
             for k, c in zip(keyed, configs, strict=True)]
    history: list[Trial] = []
    strategy = ModelGuided(prior=prior)
    while len(history) < budget:
        context = Context(SPACE, history, known, closed=True, budget=budget, baseline_code=config_key({}),
                          baseline_features=base_features)
        proposal = strategy.propose(context)
        if not isinstance(proposal, Proposal):
            break
        ratio = results[config_key({k.split(":")[1]: v for k, v in proposal.config.items()})][0] / base_time
        history.append(Trial(proposal.config, ratio, ratio < 1, 0.002, config_key(proposal.config),
                             phase=proposal.phase))
    return [t.ratio for t in history]


def _evaluations_to_optimum(ratios: list[float], optimum: float) -> int:
    return next((i + 1 for i, r in enumerate(ratios) if r <= optimum + 1e-9), len(ratios) + 1)


def test_the_prior_brings_the_optimum_sooner_and_a_wrong_one_costs_little(tmp_path, learned):
    unseen = _kernel(140)
    optimum = min(unseen(c)[0] for c in _configs(60, 5)) / unseen({})[0]
    right = load(learned)
    _learn(_corpus(tmp_path / "opposite", rule=-1), tmp_path / "wrong.txt")
    wrong = load(tmp_path / "wrong.txt")
    assert right is not None and wrong is not None
    without = _evaluations_to_optimum(_search(unseen, None, 20), optimum)
    with_right = _evaluations_to_optimum(_search(unseen, right, 20), optimum)
    with_wrong = _evaluations_to_optimum(_search(unseen, wrong, 20), optimum)
    assert with_right < without <= 20
    assert with_wrong <= without + 4


@pytest.mark.gpu
def test_tune_on_a_gpu_starts_from_the_shipped_prior_and_without_it_when_asked(tmp_path, configure):
    """The sample nbody, a few evaluations each way: the log says which prior steered the search,
    the first proposals are the prior's, and the report shows its prediction beside the measurements."""
    from conftest import ROOT

    logs = {}
    for name, extra in (("with", []), ("without", ["--no-prior"])):
        build = tmp_path / name
        configure(ROOT / "sample_project", build, "-DCMAKE_CUDA_ARCHITECTURES=native")
        proc = subprocess.run([sys.executable, "-m", "compileiq_build", "tune", str(build), "--targets",
                               "nbody_kernels", "--budget", "4", "--repeats", "2", "--max-repeats", "3",
                               "--no-profile", "--output", str(tmp_path / f"{name}.cmake"), *extra],
                              capture_output=True, text=True, timeout=1800)
        assert proc.returncode == 0, proc.stderr[-3000:]
        logs[name] = proc.stderr
    assert "nbody_kernels: prior prior.txt (" in logs["with"]
    assert "nbody_kernels: prior off (--no-prior)" in logs["without"]
    assert re.search(r"\] prior: CUDA:", logs["with"]) and not re.search(r"\] prior: ", logs["without"])
    assert re.search(r"\] screen: CUDA:", logs["without"])
    report = subprocess.run([sys.executable, "-m", "compileiq_build", "report", str(tmp_path / "with")],
                            capture_output=True, text=True)
    assert "prior of its last search: prior.txt (" in report.stdout


def test_the_prior_s_guesses_stop_when_they_compile_to_code_measured_before(learned):
    """An open search where dlcm and restrict leave the code as it is (as on many kernels): guesses
    that vary them compile to a measured code, a compile each for nothing; the prior's phase
    gives way after two such in a row."""
    from compileiq_build.search.strategies.model.screen import PRIOR_TRIES

    prior = load(learned)
    unseen = _kernel(140)
    base_time, base_features = unseen({})

    def code(config):  # only the register options reach the machine code
        return config_key({k: v for k, v in config.items() if "dlcm" not in k and "restrict" not in k})

    history: list[Trial] = []
    known: list[Candidate] = []
    for _ in range(30):
        context = Context(SPACE, history, known, budget=20, baseline_code=code(SPACE.default_config()),
                          baseline_features=base_features)
        proposal = ModelGuided(prior=prior).propose(context)
        if not isinstance(proposal, Proposal) or proposal.phase != "prior":
            break
        plain = {k.split(":")[1]: v for k, v in proposal.config.items()}
        measured = context.by_code.get(code(proposal.config))
        ratio = measured.ratio if measured else unseen({k: v for k, v in plain.items()
                                                        if k not in ("dlcm", "restrict")})[0] / base_time
        history.append(Trial(proposal.config, ratio, ratio < 0.998, 0.002, code(proposal.config),
                             phase="prior"))
    guesses = [t for t in history if t.phase == "prior"]
    seen, streak, longest = {code(SPACE.default_config())}, 0, 0
    for t in guesses:
        streak = streak + 1 if t.code in seen else 0
        longest = max(longest, streak)
        seen.add(t.code)
    assert guesses and guesses[0].ratio < 0.99  # its first guess gains (the rule it learnt)
    print(f"{len(guesses)} guesses, {len(seen) - 1} new codes, longest run of repeats {longest}")
    assert longest <= PRIOR_TRIES and len(guesses) < 30


def test_guesses_in_flight_count_until_measured(tmp_path):
    """`tune` proposes while the GPU measures: a prior that learnt the opposite rule has at most
    PRIOR_TRIES guesses out before one is measured, then screening fills the other slots."""
    from compileiq_build.search.strategies.model.screen import PRIOR_TRIES

    _learn(_corpus(tmp_path / "opposite", rule=-1), tmp_path / "wrong.txt")
    wrong = load(tmp_path / "wrong.txt")
    _, base_features = _kernel(140)({})
    history: list[Trial] = []
    for _ in range(6):  # six proposals in flight, none measured yet
        context = Context(SPACE, history, budget=20, baseline_code=config_key({}),
                          baseline_features=base_features)
        proposal = ModelGuided(prior=wrong).propose(context)
        assert isinstance(proposal, Proposal)
        history.append(Trial(proposal.config, None, False, pending=True, phase=proposal.phase))
    phases = [t.phase for t in history]
    guesses = phases.count("prior")  # fewer where it abstains on its next-best guess
    assert 1 <= guesses <= PRIOR_TRIES and phases == ["prior"] * guesses + ["screen"] * (6 - guesses)


# -- what the prior does not know (issue 42) ------------------------------------------------------
def _table(name: str, project: str, registers: int, rng: random.Random, jackpot: bool = False,
           spread: float = 0.0):
    """A kernel's table in memory: `_kernel`'s rule, `restrict` halving the time where `jackpot`
    (one project's effect), and each option value's effect of this kernel ~ N(0, spread)."""
    from compileiq_build.search.prior import KernelTable

    measure = _kernel(registers)
    own = {(d, v): rng.gauss(0.0, spread) for d, values in DIMS.items() for v in values}
    configs = _configs(40, rng.randrange(1000))
    times, features = [], []
    for config in configs:
        time, code = measure(config)
        time *= 0.5 if jackpot and config["restrict"] == "on" else 1.0
        time *= math.exp(sum(own[(d, v)] for d, v in config.items() if v != DEFAULT))
        times.append(time)
        features.append({k: float(v) for k, v in code.items()})
    return KernelTable(name, project, configs, features, times, 0)


def _ensemble_prior(tables):
    from compileiq_build.search.prior import Prior, fit

    return Prior(fit(tables), {}, Path("test"))


def test_the_prior_abstains_on_an_effect_one_project_shows_and_is_surer_of_one_all_show():
    """`restrict` halves the time in one project only: the members that saw it and the one that
    did not disagree, so it abstains there; a register cap that spills slows every project's
    kernels, and of that it is far surer."""
    from compileiq_build.search.prior import confident

    rng = random.Random(0)
    tables = [_table(f"k{i}", f"p{i % 4}", registers, rng, jackpot=i % 4 == 0)
              for i, registers in enumerate(range(80, 240, 12))]
    prior = _ensemble_prior(tables)
    base = _kernel(176)({})[1]  # as a kernel of the project where restrict gains
    configs = [{"CUDA:restrict": "on"}, {"CUDA:maxrregcount": "32"}, {}]
    mean, sd = prior.predict_interval(configs, [None] * 3, base, abstain=False)
    assert mean[0] < -0.1 and sd[0] > -mean[0] / 2  # it would have predicted a gain: not sure of it
    assert mean[1] > 0.05 and sd[1] < sd[0] / 2  # (1.3x, counted as 1.1x: prior.CLIP)
    says = confident(mean, sd)
    assert not says[0] and not says[2]
    abstained, same_sd = prior.predict_interval(configs, [None] * 3, base)
    assert list(abstained) == [0.0, mean[1] if says[1] else 0.0, 0.0] and list(same_sd) == list(sd)
    assert list(prior.predict(configs, [None] * 3, base)) == list(abstained)


def test_the_spread_is_calibrated_on_kernels_of_a_project_never_seen():
    """Kernels whose options each have an effect of their own (~ N(0, 3%)) beside the shared rule:
    on new kernels of a new project, about 95% of the measured log ratios lie within 2 sd of the
    prediction (the abstention's bound), and the spread is not too narrow within 1 sd either
    (heavy tails: more than 68% lie there; seeded, deterministic)."""
    rng = random.Random(42)
    train = [_table(f"k{i}", f"p{i % 5}", rng.randrange(40, 220), rng, spread=0.03) for i in range(20)]
    prior = _ensemble_prior(train)
    z = []
    for i in range(10):
        table = _table(f"new{i}", "new", rng.randrange(40, 220), rng, spread=0.03)
        keyed = [{f"CUDA:{k}": v for k, v in c.items()} for c in table.configs]
        mean, sd = prior.predict_interval(keyed, table.features, table.features[0], abstain=False)
        z += list(np.abs(table.log_ratios() - mean)[1:] / sd[1:])
    within = [float(np.mean(np.array(z) <= k)) for k in (1, 2)]
    print(f"within 1 sd: {within[0]:.2f}, within 2 sd: {within[1]:.2f}")
    assert within[0] >= 0.6 and 0.85 <= within[1] <= 0.99


def test_a_single_booster_has_no_spread_and_speaks_beyond_the_noise(learned):
    """A format-1 model (one booster, as benchmarks build): sd 0, confident wherever the predicted
    effect is beyond the noise, as it was used before it knew its spread."""
    from compileiq_build.search.prior import NOISE, Prior

    loaded = load(learned)
    assert loaded is not None
    single = Prior(loaded.booster.members[0], {}, Path("one"))
    base = _kernel(140)({})[1]
    configs = [{"CUDA:register-usage-level": "10"}, {"CUDA:maxrregcount": "32"}, {}]
    raw, sd = single.predict_interval(configs, [None] * 3, base, abstain=False)
    mean, _ = single.predict_interval(configs, [None] * 3, base)
    assert list(sd) == [0.0] * 3
    assert list(mean) == [r if abs(r) > NOISE else 0.0 for r in raw]


def test_the_report_shows_the_prior_s_uncertainty_and_when_it_abstained():
    """What `target.predicted` records, as the text report (and the HTML one) show it."""
    from compileiq_build.decide.selection import Winner
    from compileiq_build.results.effects import predicted_lines

    winner = Winner("t", {"CUDA": "sm_90"}, "CUDA:restrict=on", {"CUDA": ("-restrict",)}, (), 3)
    found = {"config": "CUDA:restrict=on", "prior": "prior.txt (83 kernels of 6 projects, 0123abcd)",
             "total": -0.05, "contributions": {"restrict": -0.05}, "mean": -0.05, "sd": 0.04,
             "confident": False}
    sessions = [(1, 0.0, "tune", {"prior_used": {"t": "prior.txt (...)"}, "predicted": {"t": found}})]
    lines = predicted_lines(sessions, "t", winner)
    assert "-4.9% in all; restrict -4.9%" in lines[1]
    assert lines[2] == ("    it abstained: -4.9% +/- 8.3% (2 sd) is within its uncertainty or the noise "
                        "(2%), so the search took no effect from it")
    sessions[0][3]["predicted"]["t"] = {**found, "sd": 0.01, "confident": True}
    assert predicted_lines(sessions, "t", winner)[2].startswith("    its uncertainty: -4.9% +/- 2.0% (2 sd)")
    del found["sd"]  # a store of a prior that knew no spread
    sessions[0][3]["predicted"]["t"] = found
    assert len(predicted_lines(sessions, "t", winner)) == 2
    # As the search takes it (model/fit.py): per one-option move, summed where it spoke.
    sessions[0][3]["predicted"]["t"] = {**found, "moves": {"CUDA:restrict=on": [-0.05, 0.04, 0.0],
                                                           "CUDA:rul=10": [-0.06, 0.01, -0.058]}}
    head, detail = predicted_lines(sessions, "t", winner)[2:]
    assert head.startswith("    as the search took it, option by option") and "-5.6% in all" in head
    assert detail == "      restrict=on -4.9% +/- 8.3% abstained; rul=10 -5.8% +/- 2.0% taken"
    sessions[0][3]["predicted"]["t"]["moves"]["CUDA:rul=10"][2] = 0.0
    assert "abstained on every option" in predicted_lines(sessions, "t", winner)[2]


def test_the_report_records_of_each_option_what_the_search_took_of_the_prior(learned):
    """`target.predicted` records, per option of the winner, the prior's mean and sd of that
    one-option move, read from the move's compiled code where there is one, and what the search's
    fit took of it: the shrunk mean where the prior spoke, 0 where it abstained."""
    from compileiq_build.decide.selection import Winner
    from compileiq_build.search.target import predicted

    prior = load(learned)
    kernel = _kernel(140)
    base = kernel({})[1]
    winner_config = SPACE.full_config({"CUDA:register-usage-level": "10", "CUDA:dlcm": "cg"})
    level10 = SPACE.full_config({"CUDA:register-usage-level": "10"})
    known = [Candidate(c, f"code{i}", kernel({k.split(":")[1]: v for k, v in c.items()})[1])
             for i, c in enumerate((winner_config, level10))]  # dlcm=cg alone not compiled
    winner = Winner("t", {"CUDA": "sm_90"}, config_key(winner_config), {"CUDA": ()}, (), 3)
    found = predicted(prior, known, base, SPACE, winner)
    assert found["config"] == config_key(winner_config)
    assert set(found["moves"]) == {"CUDA:register-usage-level=10", "CUDA:dlcm=cg"}
    mean, sd, took = found["moves"]["CUDA:register-usage-level=10"]
    abstained = found["moves"]["CUDA:dlcm=cg"][2]
    # Read with its compiled code's features, as the search reads the move, not without them.
    with_code, without = prior.predict_interval([level10] * 2, [known[1].features, None], base,
                                                abstain=False)[0]
    assert mean == pytest.approx(with_code) and with_code != pytest.approx(without)
    assert mean < -0.02 and took == pytest.approx(mean**3 / (mean**2 + sd**2))  # as the kernel's rule says
    assert abstained == 0.0
