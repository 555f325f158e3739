"""The comparison that decides 'faster': paired ratios with a sign-test (order-statistics) interval."""

from __future__ import annotations

import numpy as np

from compileiq_build.decide.stats import ratio_estimate, relative_spread, speedup_text


def test_identical_distributions_are_not_called_faster():
    rng = np.random.default_rng(1)
    calls = 0
    for _ in range(2000):
        a = rng.normal(1.0, 0.01, 7)
        b = rng.normal(1.0, 0.01, 7)
        calls += ratio_estimate(a, b).faster
    # Seven pairs: 'faster' needs all seven ratios below 1, which happens 1/128 of the time.
    assert calls / 2000 < 0.015


def test_a_clear_five_percent_gain_is_found():
    rng = np.random.default_rng(2)
    a = rng.normal(0.95, 0.005, 7)
    b = rng.normal(1.0, 0.005, 7)
    est = ratio_estimate(a, b)
    assert est.faster and not est.slower
    assert 0.93 < est.ratio < 0.97 and est.low < est.ratio < est.high
    assert abs(est.speedup - 1 / est.ratio) < 1e-12


def test_slower_and_single_pairs():
    est = ratio_estimate([2.0, 2.1, 2.05], [1.0, 1.0, 1.01])
    assert est.slower and not est.faster
    single = ratio_estimate([0.5], [1.0])
    assert not single.faster  # one pair proves nothing


def test_interval_covers_the_median_at_the_promised_rate():
    rng = np.random.default_rng(3)
    for n in (10, 20):
        covered = 0
        for _ in range(1000):
            est = ratio_estimate(rng.lognormal(0.0, 0.02, n), np.ones(n))
            covered += est.low <= 1.0 <= est.high
        assert covered / 1000 >= 0.94


def test_relative_spread():
    assert relative_spread([1.0, 1.0, 1.0]) == 0.0
    assert 0.0 < relative_spread([1.0, 1.02, 0.98, 1.01]) < 0.05


def test_a_verdict_never_prints_as_its_opposite():
    # Live (attention-cuda): "slower: ... 1.000x [1.000, 1.000]" for a candidate 0.03% slower.
    # The interval excludes 1, so its nearer bound must not print as 1.
    slower = ratio_estimate([1.0003, 1.0004, 1.0003, 1.0005, 1.0004], [1.0] * 5)
    faster = ratio_estimate([0.99994, 0.99993, 0.99995, 0.99994, 0.99993], [1.0] * 5)
    assert slower.slower and faster.faster
    assert speedup_text(slower) == "0.9996x [0.9995, 0.9997]"
    assert speedup_text(faster, "x") == "1.0001x [1.0001x, 1.0001x]"
    # Clear or undecided estimates keep three decimals.
    assert speedup_text(ratio_estimate([0.9, 0.91, 0.92], [1.0] * 3)).startswith("1.099x [")
    assert speedup_text(ratio_estimate([0.999, 1.001, 1.0], [1.0] * 3)) == "1.000x [0.999, 1.001]"
