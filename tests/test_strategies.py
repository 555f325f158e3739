"""Strategies: staged, exhaustive and random on their own, then the contract every registered
strategy keeps (fresh proposals, a Stop when nothing is left, stateless, closed pools respected),
and the survey, which maps a space on purpose."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from compileiq_build.build.space import BASELINE, DEFAULT, Config, Dimension, FlagSpace, config_key
from compileiq_build.options import STRATEGIES
from compileiq_build.search.strategies import (
    REGISTRY,
    Candidate,
    Context,
    Exhaustive,
    Proposal,
    RandomSearch,
    Staged,
    Stop,
    Survey,
    Trial,
    make_strategy,
)

SPACE = FlagSpace((
    Dimension("CXX", "O", ("2", "3"), "-O{v}", 1),
    Dimension("CXX", "unroll", ("on",), "-funroll-loops", 2),
))


def _run(strategy, outcome, limit=50):
    history = []
    while len(history) < limit:
        result = strategy.propose(Context(SPACE, history))
        if isinstance(result, Stop):
            return history
        ratio, faster = outcome(result.config)
        history.append(Trial(result.config, ratio, faster, phase=result.phase))
    raise AssertionError("strategy did not stop")


def test_flags_of_a_configuration():
    config = {"CXX:O": "3", "CXX:unroll": "on"}
    assert SPACE.flags(config) == {"CXX": ("-O3", "-funroll-loops")}
    assert SPACE.flags(SPACE.default_config()) == {}
    assert config_key(SPACE.default_config()) == "baseline"
    assert SPACE.size == 6


def test_staged_moves_to_the_best_value_then_explores_around_it():
    gains = {"CXX:O=2": 0.8, "CXX:O=3": 0.7, "CXX:O=3 CXX:unroll=on": 0.65}

    def outcome(config):
        r = gains.get(config_key(config), 1.02)
        return r, r < 1.0

    history = _run(Staged(), outcome)
    keys = [config_key(t.config) for t in history]
    assert keys[:3] == ["CXX:O=2", "CXX:O=3", "CXX:O=3 CXX:unroll=on"]
    assert len(keys) == len(set(keys))


def test_staged_ignores_gains_that_are_not_significant():
    history = _run(Staged(), lambda c: (0.9, False))
    keys = [config_key(t.config) for t in history]
    assert keys == ["CXX:O=2", "CXX:O=3", "CXX:unroll=on"]  # the incumbent never moved


def test_exhaustive_visits_every_configuration_once():
    history = _run(Exhaustive(), lambda c: (1.0, False))
    keys = {config_key(t.config) for t in history}
    assert len(history) == len(keys) == SPACE.size - 1  # all but the baseline itself
    assert "baseline" not in keys


def test_random_never_repeats_and_is_reproducible():
    a = _run(RandomSearch(seed=3), lambda c: (1.0, False))
    b = _run(RandomSearch(seed=3), lambda c: (1.0, False))
    assert [t.config for t in a] == [t.config for t in b]
    keys = [config_key(t.config) for t in a]
    assert len(keys) == len(set(keys)) == SPACE.size - 1
    assert all(v in (DEFAULT, *d.values) for t in a for d in SPACE.dimensions
               for v in [t.config[d.key]])


def test_warm_start_takes_other_targets_of_the_same_architecture(tmp_path):
    from types import SimpleNamespace

    from compileiq_build.decide.selection import TargetResults
    from compileiq_build.search.history import transfer
    from compileiq_build.store.database import MEASURED, open_store
    from compileiq_build.store.records import Sample

    store = open_store(tmp_path)
    session = store.start_session("test", {})
    cuda, host = {"CUDA": "sm_90"}, {"CXX": "x86_64"}
    for target, arch, config, cost in (("gemm", cuda, {"CUDA:rul": "3"}, 0.9),
                                       ("nbody", cuda, {"CUDA:rul": "1"}, 1.2),
                                       ("host", host, {"CXX:O": "3"}, 0.5),
                                       ("stencil", cuda, {"CUDA:rul": "2"}, 0.8)):
        e = store.begin_evaluation(session, target, arch, config_key(config), config, {}, "model", "search")
        for rep in range(5):
            store.add_sample(e, "candidate", rep, Sample("w", cost, cost, 0.1, 0, ""))
            store.add_sample(e, "baseline", rep, Sample("w", 1.0, 1.0, 0.1, 0, ""))
        store.finish_evaluation(e, MEASURED)
    evaluator = SimpleNamespace(store=store, target=SimpleNamespace(name="stencil"), arch_keys=cuda,
                                results=TargetResults(store, "stencil", cuda))
    prior = transfer(evaluator)
    assert sorted((config_key(t.config), t.ratio, t.faster) for t in prior) == [
        ("CUDA:rul=1", 1.2, False), ("CUDA:rul=3", 0.9, True)]  # not its own, not another arch's
    store.close()


# -- the contract of every registered strategy ----------------------------------------------

SMALL = FlagSpace((
    Dimension("T", "a", ("1", "2"), "-a{v}", 1),
    Dimension("T", "b", ("x",), "-b{v}", 1),
    Dimension("T", "c", ("on",), "-c", 2),
))  # 3 * 2 * 2 = 12 configurations


def _small_configs() -> list[Config]:
    keys = [d.key for d in SMALL.dimensions]
    return [dict(zip(keys, v, strict=True))
            for v in itertools.product(*((DEFAULT, *d.values) for d in SMALL.dimensions))]


def _ratio(config: Config) -> float:
    """Deterministic: a=1 costs, a=2 helps, b=x helps only with a=2, c costs a little."""
    r = {"default": 1.0, "1": 1.01, "2": 0.97}[config["T:a"]]
    r -= 0.02 if config["T:a"] == "2" and config["T:b"] == "x" else 0.0
    return r + (0.004 if config["T:c"] == "on" else 0.0)


def _code(config: Config) -> str:
    """c=on compiles to the same code as c=default while a is default (two configurations share
    the codes of two others, one of them the baseline's), and b=x alone to the code of a=2
    alone: a move along one dimension repeats a move along another."""
    a, b, c = config["T:a"], config["T:b"], config["T:c"]
    if a == DEFAULT:
        c = DEFAULT
        if b == "x":
            a, b = "2", DEFAULT
    return f"{a}/{b}/{c}"


CANDIDATES = [Candidate(c, _code(c), {"registers": float(len(config_key(c)))}) for c in _small_configs()]
BASE_CODE = _code(SMALL.default_config())
POOL = [c for c in CANDIDATES if c.config["T:b"] == DEFAULT or c.config["T:a"] == "2"]  # 8 of 12
CONTRACT = [s for s in REGISTRY if s != "survey"]


def test_every_strategy_the_cli_offers_has_a_factory_and_no_other():
    assert list(REGISTRY) == list(STRATEGIES)


def _drive(name: str, known: list[Candidate], closed: bool, seed: int = 1) -> tuple[list[Trial], Stop, int]:
    """Runs a strategy to its Stop with up to two proposals in flight (pending, their code known
    as if compiled), checking each proposal against the contract; returns the trials, the Stop,
    and how many proposals were checked."""
    strategy = make_strategy(name, seed)
    history: list[Trial] = []
    known_keys = {config_key(c.config) for c in known}
    for step in range(40):
        context = Context(SMALL, list(history), known, closed=closed, baseline_code=BASE_CODE)
        result = strategy.propose(context)
        # (c) stateless: the same context again, and a new instance, give the same answer
        again = Context(SMALL, list(history), known, closed=closed, baseline_code=BASE_CODE)
        assert strategy.propose(again) == result, name
        assert make_strategy(name, seed).propose(again) == result, name
        if isinstance(result, Stop):
            # (b) a Stop with nothing pending means nothing fresh is left
            return history, result, step
        assert isinstance(result, Proposal) and result.phase
        config = SMALL.full_config(result.config)
        key = config_key(config)
        # (a) never a configuration tried or pending, nor one of a code measured or pending
        assert key != BASELINE and key not in {config_key(SMALL.full_config(t.config)) for t in history}, name
        assert _code(config) not in {t.code for t in history} | {BASE_CODE}, (name, key)
        # (d) closed: only the known pool
        if closed:
            assert key in known_keys, (name, key)
        history.append(Trial(config, None, False, code=_code(config), pending=True, phase=result.phase))
        if sum(t.pending for t in history) > 1:  # the older of two in flight is measured
            i = next(i for i, t in enumerate(history) if t.pending)
            r = _ratio(history[i].config)
            history[i] = replace(history[i], ratio=r, faster=r < 0.999, spread=0.001, pending=False)
    raise AssertionError(f"{name} did not stop")


@pytest.mark.parametrize("name", CONTRACT)
@pytest.mark.parametrize("closed", [False, True], ids=["open", "closed"])
def test_every_strategy_keeps_the_contract(name, closed):
    """(a) fresh proposals, (c) stateless, (d) closed pools, checked on every proposal (in
    `_drive`) with some codes shared and proposals in flight; and the run ends with a Stop."""
    history, stop, _ = _drive(name, POOL if closed else CANDIDATES, closed)
    assert stop.reason
    assert history, name


@pytest.mark.parametrize("name", CONTRACT)
@pytest.mark.parametrize("closed", [False, True], ids=["open", "closed"])
def test_every_strategy_stops_when_nothing_is_left(name, closed):
    """(b) Every code measured (open: the whole space; closed: the known pool, while the space
    has configurations outside it): the strategy returns Stop, not a configuration."""
    pool = POOL if closed else CANDIDATES
    codes: dict[str, Config] = {}
    for c in pool:
        codes.setdefault(c.code, c.config)
    history = [Trial(c, _ratio(c), _ratio(c) < 0.999, 0.001, code)
               for code, c in codes.items() if code != BASE_CODE]
    context = Context(SMALL, history, pool, closed=closed, baseline_code=BASE_CODE)
    assert not context.choices()
    result = make_strategy(name, 0).propose(context)
    assert isinstance(result, Stop), (name, result)
    # Everything tried (no codes at all): the same.
    everything = [Trial(c, _ratio(c), False) for c in _small_configs() if config_key(c) != BASELINE]
    assert isinstance(make_strategy(name, 0).propose(Context(SMALL, everything)), Stop), name


@pytest.mark.parametrize("name", ["exhaustive", "random"])
def test_covering_strategies_measure_every_code_once(name):
    """Exhaustive and random stop only when every code is measured: each code once, the
    baseline's never, in the open space and in the closed pool."""
    for known, closed in ((CANDIDATES, False), (POOL, True)):
        history, _, _ = _drive(name, known, closed)
        codes = [t.code for t in history]
        assert sorted(codes) == sorted({c.code for c in known} - {BASE_CODE}), (name, closed)


# -- survey ----------------------------------------------------------------------------------

def test_survey_maps_the_space_moves_first_then_samples():
    """Every one-option move in dimension order (values as listed), then uniform samples, no
    configuration twice; it proposes configurations of measured codes on purpose (a recorded
    table needs every configuration's code), so the code contract does not apply."""
    history: list[Trial] = []
    phases = []
    while len(history) < 40:
        context = Context(SMALL, list(history), CANDIDATES, baseline_code=BASE_CODE)
        result = Survey(seed=2).propose(context)
        assert Survey(seed=2).propose(context) == result
        if isinstance(result, Stop):
            break
        phases.append(result.phase)
        r = _ratio(result.config)
        history.append(Trial(result.config, r, r < 0.999, 0.001, _code(result.config)))
    keys = [config_key(SMALL.full_config(t.config)) for t in history]
    assert keys[:4] == ["T:a=1", "T:a=2", "T:b=x", "T:c=on"]
    assert phases == ["screen"] * 4 + ["sample"] * (len(keys) - 4)
    assert len(keys) == len(set(keys)) == SMALL.size - 1 and BASELINE not in keys
    assert "T:c=on" in keys and _code({"T:a": DEFAULT, "T:b": DEFAULT, "T:c": "on"}) == BASE_CODE


def test_each_target_draws_differently_and_a_seed_repeats_its_draws():
    """Live, every kernel's random run began with one same draw (seed 0 for all): a target's
    seed mixes --seed with its name."""
    from compileiq_build.search.target import target_seed

    def first(seed: int) -> Config:
        proposal = RandomSearch(seed).propose(Context(SPACE))
        assert isinstance(proposal, Proposal)
        return proposal.config

    draws = {config_key(first(target_seed(0, name))) for name in ("gemm", "bude", "stream", "gelu")}
    assert len(draws) > 1
    assert first(target_seed(0, "gemm")) == first(target_seed(0, "gemm")) != first(target_seed(1, "gemm"))
