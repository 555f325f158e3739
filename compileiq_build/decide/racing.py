"""When measuring a candidate stops: the stopping rule of paired runs and the racing rules.

From `min_pairs` on, a workload stops once its interval has decided (entirely below or above
1) or is narrower than `precision`, and at the latest after `max_pairs` or `time_cap`.  Two
rules stop a search candidate sooner, each against the noise of a paired log ratio pooled over
the target's earlier search evaluations (`Race`, made by `race_for`):

- racing (`raced_out`; minimizing steps too): from `RACE_PAIRS` pairs on, a candidate that can
  no longer be a winner (a minimizing step: can no longer serve as well as the configuration
  it reduces), and its remaining benchmarks are not run;
- the indifference zone (`indifferent`): from `INDIFFERENT_PAIRS` pairs on, a candidate that
  cannot beat the best so far by a gain worth the noise: `precision`, the resolution the user
  asked for, or more on a benchmark noisier than that.  While another benchmark's pairs cannot
  be judged yet (unknown noise, a probe), a benchmark stops once it alone is indifferent.

Pure functions of the costs so far, apart from `race_for`, which reads the store.  What the
rules cost and save, measured on recorded H200 pairs: benchmarks/results/measurement/README.md.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import TYPE_CHECKING

from compileiq_build.decide.selection import (
    FINALISTS,
    NOISE_MIN,
    NOISE_ZONE,
    NORMAL_STEP,
    TargetResults,
    evaluation_numbers,
    finalists,
)
from compileiq_build.decide.stats import geometric_mean, hodges_lehmann, ratio_estimate

if TYPE_CHECKING:
    from compileiq_build.options import TuneOptions

# A candidate this much slower on its first pairs is not measured further.
HOPELESS_RATIO = 1.5
HOPELESS_PAIRS = 2

# Racing: see the module docstring.
RACE_PAIRS = 2
RACE_FLOOR = 0.005
RACE_SIGMAS = 3.0
RACE_NOISE_MIN = NOISE_MIN  # successive differences of a workload before its noise is trusted
# Indifference zone: see the module docstring.
INDIFFERENT_PAIRS = 2
OWN_NOISE_PAIRS = 5  # a workload of unknown noise: the candidate's own, from 5 pairs (4 steps)
INDIFFERENT_Z = 2.0
HL_SD = 1.03  # sd of the Hodges-Lehmann estimate in units of sd / sqrt(n): 1 at 2 pairs, 1.01-1.05 at 3-20
# NOISE_ZONE (selection.py): the zone's width in units of the workload's noise, where wider than
# --precision; minimizing keeps an option only for a gain beyond the same zone.


@dataclass(frozen=True)
class Sampling:
    min_pairs: int = 5
    max_pairs: int = 20
    precision: float = 0.005  # stop when the interval is narrower than this fraction of the ratio
    time_cap: float = 300.0  # seconds per workload and evaluation

    @classmethod
    def of(cls, options: TuneOptions) -> Sampling:
        """How the search pairs runs, from tune's options (validation and minimizing: `scaled(2)`)."""
        return cls(options.repeats, max(options.repeats, options.max_repeats), options.precision,
                   options.measure_time_cap)

    def scaled(self, factor: int) -> Sampling:
        return Sampling(self.min_pairs * factor, self.max_pairs * factor, self.precision,
                        self.time_cap * factor)


Costs = Mapping[str, tuple[list[float], list[float]]]


@dataclass(frozen=True)
class Race:
    """What a search candidate races against (module docstring)."""

    reference: float | None  # the FINALISTS-th best ratio faster than the baseline; None: fewer
    noise: Mapping[str, float]  # workload entry -> standard deviation of its log paired ratio
    settled: Mapping[str, float] = field(default_factory=dict)  # earlier benchmarks' final low ends
    last: bool = True  # measuring the evaluation's last benchmark: rule (b) bounds every workload
    against: str = "the finalists reach"  # what the reference is, for the reason
    incumbent: float | None = None  # the best search ratio so far (at most 1); None: no indifference
    incumbent_number: int | None = None  # the progress counter's number of the best so far, where known
    precision: float = 0.005  # the indifference zone's width, relative
    others: Costs = field(default_factory=dict)  # the pairs of the evaluation's other benchmarks

    def margin(self, workload: str) -> float | None:
        sigma = self.noise.get(workload)
        return None if sigma is None else max(RACE_FLOOR, RACE_SIGMAS * sigma)


def raced_out(costs: Costs, pairs: int, race: Race | None) -> str:
    """Why the candidate can no longer be a winner, or "" while it still can.

    A workload's margin is max(`RACE_FLOOR`, `RACE_SIGMAS` x its pooled sigma); a workload with
    fewer than `RACE_NOISE_MIN` successive differences is never raced.  Out when

    (a) a workload's interval lies above 1 + margin: it can never be faster on every workload,
        which a winner needs; or
    (b) the geometric mean of its intervals' low ends (earlier benchmarks' final low ends
        included, so only while measuring the last one) lies above reference x (1 + mean
        margin).  The reference is the ratio of the `FINALISTS`-th best candidate faster than
        the baseline so far (`decide` validates that many, and the second best wins when the
        best fails validation); for a minimizing step, that of the configuration it reduces.

    With 2 pairs the low end is the smaller ratio: a candidate truly as good as the reference
    is raced out with probability P(z > 3)^2 = 2e-6 under normal noise."""
    if race is None or pairs < RACE_PAIRS:
        return ""
    lows = dict(race.settled)
    for workload, (cand, base) in costs.items():
        lows[workload] = ratio_estimate(cand, base).low
        margin = race.margin(workload)
        if margin is not None and lows[workload] > 1 + margin:
            return (f"raced out after {pairs} pairs: {workload} at least {lows[workload] - 1:.1%} "
                    "slower than the baseline")
    margins = [race.margin(w) for w in lows]
    if race.reference is None or not race.last or None in margins:
        return ""
    bound = geometric_mean(list(lows.values()))
    mean_margin = sum(m for m in margins if m is not None) / len(margins)
    if bound > race.reference * (1 + mean_margin):
        return (f"raced out after {pairs} pairs: at best {1 / bound:.3f}x, {race.against} "
                f"{1 / race.reference:.3f}x")
    return ""


def indifferent(costs: Costs, pairs: int, race: Race | None) -> str:
    """Why the candidate cannot beat the incumbent by a gain worth the noise, or "" while it
    still can.

    The incumbent is the best search candidate found faster, else the baseline.  A workload's
    bound (the evaluation's other benchmarks' pairs included) is its Hodges-Lehmann log ratio
    minus h(n) = `INDIFFERENT_Z` x `HL_SD` x sigma / sqrt(n), 2.3% one sided per look; sigma is
    the noise pooled over the target's earlier evaluations, else, from `OWN_NOISE_PAIRS`, the
    candidate's own (its successive differences, as `race_for` pools them).  The candidate
    stops when the bounds' geometric mean lies above incumbent x (1 - zone), zone the larger of
    the precision and `NOISE_ZONE` x the workloads' mean sigma.  Why the noise: a gain below one
    sigma shows in fewer than 84% of pairs, so the sign test needs 8 or more to call it and the
    zone as many to tell it from nothing; with the precision alone every neutral candidate paid
    that (simulated at 0.8% and 1% noise: 11.0 and 6.2 pairs; 10-13 live on ~1% GPU kernels).
    Why Hodges-Lehmann: the median's sd is 1.25 sigma / sqrt(n), so the same bound took 1.5
    times the pairs.  Now 4.6 pairs from 0.5% to 1.5% noise, 2% gains found as before
    (benchmarks/results/racing/README.md).  One whose interval says faster still gets
    `min_pairs` first (`sampling_done`)."""
    if race is None or race.incumbent is None or pairs < INDIFFERENT_PAIRS:
        return ""
    if pairs <= RACE_PAIRS and not race.last:
        return ""  # a probe (pairing.py): the later benchmarks have no pairs yet
    bounds, sigmas = [], []
    for workload, (cand, base) in {**race.others, **costs}.items():
        if not cand:
            return ""
        logs = [math.log(c / b) for c, b in zip(cand, base, strict=False)]
        sigma = race.noise.get(workload)
        if sigma is None:
            if len(logs) < OWN_NOISE_PAIRS:
                return ""
            sigma = statistics.median(abs(a - b) for a, b in pairwise(logs)) / NORMAL_STEP
        sigmas.append(sigma)
        bounds.append(hodges_lehmann(logs) - INDIFFERENT_Z * HL_SD * sigma / math.sqrt(len(logs)))
    zone = max(race.precision, NOISE_ZONE * statistics.mean(sigmas))
    bound = math.exp(sum(bounds) / len(bounds))
    if bound <= race.incumbent * (1 - zone):
        return ""
    number = f"#{race.incumbent_number}, " if race.incumbent_number else ""
    best = "the baseline" if race.incumbent >= 1 else f"the best so far ({number}{1 / race.incumbent:.3f}x)"
    worth = "" if zone == race.precision else " (the noise's)"
    return (f"indifferent after {pairs} pairs: at best {1 / bound:.3f}x, not {zone:.1%}{worth} "
            f"better than {best}")


def sampling_done(costs: Costs, pairs: int, sampling: Sampling, elapsed: float,
                  race: Race | None = None) -> bool:
    """The stopping rule: costs maps each workload entry to (candidate, baseline) costs, paired."""
    ratios = [[c / b for c, b in zip(*pair, strict=True)] for pair in costs.values()]
    if pairs >= HOPELESS_PAIRS and any(min(r) > HOPELESS_RATIO for r in ratios):
        return True
    if raced_out(costs, pairs, race):
        return True
    if indifferent(costs, pairs, race) and (pairs >= sampling.min_pairs or not any(
            ratio_estimate(c, b).faster for c, b in costs.values())):
        return True  # one that looks faster still gets the pairs that a "faster" call needs
    if (race is not None and pairs >= sampling.min_pairs and _unjudged(race)
            and indifferent(costs, pairs, replace(race, others={}, last=True))):
        # The later benchmarks decide: this one alone gains nothing worth the zone (live, a
        # gemm's first candidate took 20 pairs of its first benchmark, the second's 2-pair probe
        # being of unknown noise; its second benchmark then called it indifferent after 5).
        return True
    if elapsed > sampling.time_cap:
        return True
    if pairs < sampling.min_pairs:
        return False
    for cand, base in costs.values():
        est = ratio_estimate(cand, base)
        if not (est.faster or est.slower or est.high - est.low < sampling.precision * est.ratio):
            return False
    return True



def _unjudged(race: Race) -> bool:
    """Whether another benchmark's pairs stop `indifferent` from judging: a workload of unknown
    noise with fewer than `OWN_NOISE_PAIRS` pairs (a target's first evaluations, a probe)."""
    return any(w not in race.noise and len(cand) < OWN_NOISE_PAIRS for w, (cand, _) in race.others.items())


def race_for(results: TargetResults, evaluation: int, precision: float, reference: float | None = None,
             against: str = "the finalists reach") -> Race:
    """Each workload's noise, from the target's earlier search evaluations (tens of rows:
    cheap enough at the start of every evaluation), and the reference: `reference`, else the
    FINALISTS-th best ratio of the search so far, and then the incumbent (the best ratio
    faster than the baseline, else 1) for the indifference zone."""
    incumbent, number = None, None
    if reference is None:
        measured = [o for o in results.outcomes("search") if o.evaluation.id != evaluation]
        best = finalists(measured, FINALISTS)
        reference = best[-1].ratio if len(best) == FINALISTS else None
        incumbent = min(1.0, best[0].ratio or 1.0) if best else 1.0
        if best:  # named as the log numbered it (a reused code: the evaluation that measured it)
            first = best[0].evaluation
            number = evaluation_numbers(measured).get(first.same_as or first.id)
    return Race(reference, results.noise(), against=against, incumbent=incumbent, precision=precision,
                incumbent_number=number)
