"""Strategies propose untried configurations; staged walks dimensions around the incumbent."""

from __future__ import annotations

from compileiq_build.search import Exhaustive, RandomSearch, Staged, Trial, config_key
from compileiq_build.space import DEFAULT, Dimension, FlagSpace

SPACE = FlagSpace((
    Dimension("CXX", "O", ("2", "3"), "-O{v}", 1),
    Dimension("CXX", "unroll", ("on",), "-funroll-loops", 2),
))


def _run(strategy, outcome, limit=50):
    history = []
    while len(history) < limit:
        config = strategy.propose(SPACE, history)
        if config is None:
            return history
        ratio, faster = outcome(config)
        history.append(Trial(config, ratio, faster))
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

    from compileiq_build.measure import Sample
    from compileiq_build.store import MEASURED, open_store
    from compileiq_build.tune import Tuner

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
    evaluator = SimpleNamespace(store=store, target=SimpleNamespace(name="stencil"), arch_keys=cuda)
    prior = Tuner._prior(evaluator)
    assert sorted((config_key(t.config), t.ratio, t.faster) for t in prior) == [
        ("CUDA:rul=1", 1.2, False), ("CUDA:rul=3", 0.9, True)]  # not its own, not another arch's
    store.close()
