"""Noise-aware comparison of a candidate with the baseline.

Candidate and baseline runs are interleaved in pairs, so slow drift of the
machine (clocks, temperature, other load) hits both alike; the statistic is
the median of the per-pair cost ratios, with a bootstrap confidence interval.
A candidate is faster only when the whole interval lies below 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
BOOTSTRAP = 4000


@dataclass(frozen=True)
class RatioEstimate:
    """Candidate cost / baseline cost: below 1 is faster.  ``speedup`` is its inverse."""

    ratio: float
    low: float
    high: float
    pairs: int

    @property
    def faster(self) -> bool:
        return self.high < 1.0

    @property
    def slower(self) -> bool:
        return self.low > 1.0

    @property
    def speedup(self) -> float:
        return 1.0 / self.ratio


def ratio_estimate(candidate: Sequence[float], baseline: Sequence[float],
                   seed: int = 0) -> RatioEstimate:
    """Median of paired ratios with a percentile-bootstrap interval."""
    n = min(len(candidate), len(baseline))
    if n == 0:
        raise ValueError("no paired samples")
    ratios = np.asarray(candidate[:n], dtype=float) / np.asarray(baseline[:n], dtype=float)
    point = float(np.median(ratios))
    if n == 1:
        return RatioEstimate(point, 0.0, math.inf, 1)
    rng = np.random.default_rng(seed)
    medians = np.median(rng.choice(ratios, size=(BOOTSTRAP, n), replace=True), axis=1)
    alpha = (1.0 - CONFIDENCE) / 2.0
    low, high = np.quantile(medians, [alpha, 1.0 - alpha])
    return RatioEstimate(point, float(low), float(high), n)


def geometric_mean(values: Sequence[float]) -> float:
    return float(math.exp(sum(math.log(v) for v in values) / len(values)))


def relative_spread(values: Sequence[float]) -> float:
    """Median absolute deviation over the median: the baseline's run-to-run noise."""
    arr = np.asarray(values, dtype=float)
    med = float(np.median(arr))
    return float(np.median(np.abs(arr - med)) / med) if med > 0 else math.inf
