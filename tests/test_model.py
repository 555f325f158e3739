"""The model-guided strategy on synthetic landscapes: finds optima in few evaluations, stops when
nothing is left to gain, and never proposes a measured configuration."""

from __future__ import annotations

import itertools
import statistics

from compileiq_build.model import ModelGuided
from compileiq_build.search import RandomSearch, Trial, config_key
from compileiq_build.space import Dimension, FlagSpace

SPACE = FlagSpace((
    Dimension("CUDA", "rul", tuple(str(i) for i in range(11)), "--rul={v}", 1),
    Dimension("CUDA", "dlcm", ("cg", "cs", "lu", "cv"), "-dlcm={v}", 1),
    Dimension("CUDA", "O", ("1", "2"), "-O{v}", 1),
    Dimension("CUDA", "vec", ("on",), "--vec", 2),
))  # 12 * 5 * 3 * 2 = 360 configurations


def landscape(config: dict[str, str]) -> float:
    """A cost ratio with an interaction: the best register level depends on the cache modifier."""
    rul = 5 if config["CUDA:rul"] == "default" else int(config["CUDA:rul"])
    good = 8 if config["CUDA:dlcm"] == "cg" else 3
    r = 1.0 + 0.004 * abs(rul - good) - (0.03 if config["CUDA:dlcm"] == "cg" else 0.0)
    r += {"default": 0.0, "1": 0.25, "2": 0.0}[config["CUDA:O"]]
    return r - (0.005 if config["CUDA:vec"] == "on" else 0.0)


def _all_configs() -> list[dict[str, str]]:
    keys = [d.key for d in SPACE.dimensions]
    return [dict(zip(keys, v, strict=True))
            for v in itertools.product(*(("default", *d.values) for d in SPACE.dimensions))]


OPTIMUM = min(landscape(c) for c in _all_configs())


def run(strategy, budget: int) -> tuple[float, list[str]]:
    history: list[Trial] = []
    while len(history) < budget:
        config = strategy.propose(SPACE, history)
        if config is None:
            break
        ratio = landscape(config)
        history.append(Trial(config, ratio, ratio < 0.999))
    best = min([1.0, *(t.ratio for t in history)])
    return (1 - best) / (1 - OPTIMUM), [config_key(t.config) for t in history]


def test_model_reaches_the_optimum_region_quickly_and_beats_random():
    model = [run(ModelGuided(seed=s), 40)[0] for s in range(5)]
    rand = [run(RandomSearch(seed=s), 40)[0] for s in range(5)]
    assert statistics.median(model) >= 0.95
    assert statistics.median(model) > statistics.median(rand)


def test_never_repeats_a_configuration():
    _, keys = run(ModelGuided(seed=3), 30)
    assert len(keys) == len(set(keys)) and "baseline" not in keys


def test_stops_when_no_gain_beyond_noise_is_predicted():
    flat = ModelGuided(seed=1, noise=0.01)
    history = []
    while len(history) < 60:
        config = flat.propose(SPACE, history)
        if config is None:
            break
        history.append(Trial(config, 1.0, False))
    assert len(history) < 60
    assert "no untried configuration beats the best so far" in flat.stop_reason


def _flat_search(spread: float | None) -> tuple[int, str]:
    """A landscape 0.5% below the baseline everywhere, measured with intervals of +-`spread`."""
    model = ModelGuided(seed=1)
    history: list[Trial] = []
    while len(history) < 80:
        config = model.propose(SPACE, history)
        if config is None:
            break
        history.append(Trial(config, 0.995, False, spread))
    return len(history), model.stop_reason


def test_the_early_stop_uses_the_measured_noise():
    coarse, why = _flat_search(0.02)  # measurements resolve 2%: no 0.5% gain can be told apart
    assert coarse < 80 and "by more than the measured noise (2.00%)" in why
    fine, why = _flat_search(0.0005)  # they resolve 0.05%: a predicted 0.5% gain is worth measuring
    assert fine > coarse
    unmeasured, why = _flat_search(None)  # no intervals (replays): the assumed 0.2%
    assert unmeasured < fine and "by more than the assumed noise (0.20%)" in why


def test_warm_start_tries_what_was_faster_for_other_targets_first():
    prior = [Trial({"CUDA:rul": "3"}, 0.99, True),
             Trial({"CUDA:rul": "8", "CUDA:dlcm": "cg"}, 0.96, True),
             Trial({"CUDA:rul": "2"}, 1.05, False),
             Trial({"CXX:O": "3"}, 0.5, True)]  # another language: not in this space
    model = ModelGuided(seed=0, prior=prior)
    history: list[Trial] = []
    for _ in range(3):
        config = model.propose(SPACE, history)
        history.append(Trial(config, landscape(config), landscape(config) < 0.999))
    assert config_key(history[0].config) == "CUDA:dlcm=cg CUDA:rul=8"
    assert config_key(history[1].config) == "CUDA:rul=3"
    assert config_key(history[2].config) != "CUDA:rul=2"  # slower there: not taken over


def test_warm_start_from_a_related_target_reaches_the_optimum_sooner():
    """Another target with the same landscape, 1% slower throughout, measured on 40 random
    configurations: starting from it finds the optimum region in fewer evaluations."""
    import random

    sample = random.Random(7).sample(_all_configs(), 40)
    prior = [Trial(c, landscape(c) + 0.01, landscape(c) + 0.01 < 0.999) for c in sample]

    def evaluations_to_95(strategy) -> int:
        history: list[Trial] = []
        while len(history) < 40 and (config := strategy.propose(SPACE, history)) is not None:
            history.append(Trial(config, landscape(config), landscape(config) < 0.999))
            if (1 - min(t.ratio for t in history)) / (1 - OPTIMUM) >= 0.95:
                return len(history)
        return 41

    cold = [evaluations_to_95(ModelGuided(seed=s)) for s in range(3)]
    warm = [evaluations_to_95(ModelGuided(seed=s, prior=prior)) for s in range(3)]
    assert statistics.median(warm) < statistics.median(cold)


def test_other_targets_count_only_when_their_best_gain_here_too():
    from compileiq_build.model import _transfers

    prior = [({"CUDA:rul": "3"}, Trial({"CUDA:rul": "3"}, 0.95, True)),
             ({"CUDA:rul": "1"}, Trial({"CUDA:rul": "1"}, 1.10, False))]
    here = {"CUDA:rul": "3"}
    assert _transfers(prior, [(here, Trial(here, 0.97, True))])  # 3% of the 5%: similar
    assert not _transfers(prior, [(here, Trial(here, 0.996, True))])  # 0.4% of 5%: they differ
    assert not _transfers(prior, [(here, Trial(here, None, False))])  # invalid here
    assert _transfers(prior, []) is None  # nothing of theirs measured here yet
