"""Evaluate: candidate and baseline runs alternate in a random order within each pair (a fixed
order would turn any first-run/second-run effect into a fake gain), reproducibly per evaluation."""

from __future__ import annotations

import random

from conftest import cxx_evaluator

from compileiq_build.decide.racing import Sampling


def _first_roles(store, evaluation: int) -> list[str]:
    """The role that ran first in each pair, from the order the samples were stored."""
    first: dict[int, str] = {}
    for _, role, rep, _, _ in store.samples(evaluation):
        first.setdefault(rep, role)
    return [first[r] for r in sorted(first)]


def test_the_order_within_each_pair_is_random_and_reproducible(cxx_project, configure):
    evaluator, store = cxx_evaluator(cxx_project, configure, [1])
    config, flags = {"CXX:O": "2"}, {"CXX": ("-O2",)}
    built = evaluator.build(flags, evaluator.workers[0], 0)
    outcome = evaluator.evaluate(config, flags, "exhaustive", "validate", built, sampling=Sampling(12, 12))
    order = _first_roles(store, outcome.evaluation.id)
    assert len(order) == 12 and {"candidate", "baseline"} == set(order)  # both orders occur
    # The order comes from the evaluation's own seed: a resumed run orders its pairs alike.
    index = evaluator.benchmarks[0].index
    assert order == [random.Random(f"{outcome.evaluation.id}:{index}:{rep}").sample(
        ("candidate", "baseline"), 2)[0] for rep in range(12)]
    store.close()
