"""The run's clock: --time-limit, each target's share of it, the time kept for validating and
minimizing, and Ctrl-C.

`tune` makes one Clock and hands it down with the evaluator: the search loop asks it before each
proposal, the paired runs after each benchmark run, validation and minimizing before each step.
Each asks `why_stop()`; nothing calls back up into tune.  Each target has an equal share of the
time left (what one leaves goes to the next); its search stops early enough to keep what
validating and minimizing take, estimated from the baseline's measured times and CHECKs
(`plan`) and, once candidates were built, from their builds (`built`: a candidate rebuilds the
target's objects, or a group's, against the baseline's full build: 26 s against 155 s live on
ggml), at most a quarter of the share (or one validation, where a quarter cannot hold it): the
search is not starved.  Until a candidate was measured faster than the baseline there is nothing to validate
or minimize but what the next evaluation may find: the search keeps one validation only, and
from the first winner on what validating the faster candidates (FINALISTS at most) and
minimizing one of their options take (`winner`; live, searches that found nothing left 47-48 s
of a 180 s limit unspent, with their budget left).  After the search, validation and minimizing
run to the share's end, and a measurement the end reaches stops after the benchmark run in
progress.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from compileiq_build.decide.selection import FINALISTS
from compileiq_build.errors import CompileIQError

RESERVE_SHARE = 0.25  # of a target's share, at most kept from its search (unless one validation needs more)


@dataclass(frozen=True)
class StepTimes:
    """What a target's steps take, measured on its baseline."""

    build_s: float  # building a candidate
    pair_s: float  # a candidate run and a baseline run of every benchmark
    pairs: int  # pairs of a search evaluation at least; validation measures twice as many
    check_s: float = 0.0  # the benchmarks' CHECKs, once each (ggml's attention test: 20 s)

    @property
    def evaluation(self) -> float:
        """A search evaluation that may win (one that cannot skips its check: pairing.py)."""
        return self.build_s + self.check_s + self.pairs * self.pair_s

    @property
    def validation(self) -> float:
        return self.build_s + self.check_s + 2 * self.pairs * self.pair_s


class Clock:
    """When to stop: the share's end less the search's reserve, and Ctrl-C."""

    def __init__(self, limit: float | None = None, now: Callable[[], float] = time.monotonic) -> None:
        self.now = now
        self.limit = limit
        self.deadline = now() + limit if limit else None
        self.end = self.deadline  # of the current target's share
        self.share_s = limit  # the current share's length
        self.targets_left = 1
        self.reserve = 0.0  # seconds the search leaves before `end` for validating and minimizing
        self.planned = 0.0  # the reserve once a candidate was faster (`plan`, `winner`)
        self.won = False  # a candidate of this target was faster
        self.times: StepTimes | None = None  # of the current target (`plan`)
        self.compiles = 0  # builds of minimizing planned
        self.finalists = FINALISTS  # validations planned: fewer once fewer candidates were faster
        self.options: int | None = None  # options of the faster candidates, at most (`winner`)
        self.builds: list[float] = []  # seconds of the current target's candidate builds
        self.interrupted = False  # Ctrl-C

    def share(self, targets_left: int) -> None:
        """The next target's share: an equal part of the time left; no reserve yet."""
        self.targets_left, self.reserve, self.planned, self.won = targets_left, 0.0, 0.0, False
        self.times, self.builds, self.finalists, self.options = None, [], FINALISTS, None
        if self.deadline is not None:
            now = self.now()
            self.share_s = max(0.0, self.deadline - now) / targets_left
            self.end = now + self.share_s

    def plan(self, target: str, times: StepTimes, compiles: int, refuse: bool) -> str:
        """Keep what validating FINALISTS candidates and `compiles` builds of minimizing take
        (`keep`); with `refuse`, a share that cannot hold one evaluation and its validation is a
        CompileIQError with the limit that would.  Returns the log line ('' without a limit)."""
        if self.end is None or self.deadline is None or self.share_s is None or self.limit is None:
            return ""
        now = self.now()
        if refuse and self.end - now < times.evaluation + times.validation:
            spent = self.limit - (self.deadline - now)
            would = spent + self.targets_left * (times.evaluation + times.validation)
            raise CompileIQError(
                f"--time-limit {self.limit:.0f}s cannot hold one evaluation of {target} and its "
                f"validation: a build takes {times.build_s:.1f} s"
                + (f", its check {times.check_s:.1f} s" if times.check_s else "")
                + f" and a pair of runs (candidate and "
                f"baseline) {times.pair_s:.1f} s, so {times.pairs} pairs and validating with "
                f"{2 * times.pairs} take {times.evaluation + times.validation:.0f} s"
                + (f" for each of {self.targets_left} targets" if self.targets_left > 1 else "")
                + f", and {spent:.0f} s are spent already. Give --time-limit "
                f"{10 * math.ceil(would / 10):.0f}s or more, or fewer --repeats.")
        self.times, self.compiles = times, compiles
        capped = self._reserve(times)
        return (f"{target}: the search keeps {self.planned:.0f} s of its {self.share_s:.0f} s to validate "
                f"and minimize ({FINALISTS} validations of a build"
                + (f", a check of {times.check_s:.1f} s" if times.check_s else "")
                + f" and {2 * times.pairs} pairs of "
                f"{times.pair_s:.1f} s, {compiles} builds of {times.build_s:.1f} s"
                + (", at most a quarter of the share" if capped else "")
                + f"; {self.reserve:.0f} s until a candidate is faster)")

    def _reserve(self, times: StepTimes) -> bool:
        """Plan the reserve on `times`; whether a quarter of the share capped it."""
        compiles = self.compiles if self.options is None else min(self.compiles, self.options)
        need = self.finalists * times.validation + compiles * times.build_s
        cap = max(RESERVE_SHARE * (self.share_s or 0.0), times.validation)
        self.planned = min(need, cap)
        self.keep(self.planned if self.won else min(times.validation, self.planned))
        return need > cap

    def built(self, seconds: float) -> None:
        """A candidate of the current target built in `seconds`: validating and minimizing rebuild
        such candidates, so the reserve is planned on their median build from now on."""
        self.builds.append(seconds)
        self._replan()

    def winner(self, faster: int = FINALISTS, options: int | None = None) -> None:
        """`faster` candidates were measured faster than the baseline, of at most `options`
        options: the search keeps what validating them (FINALISTS at most) and minimizing the
        winner take.  (Live on ggml's attention, two candidates of one and two options were
        faster, and the search kept 291 s, planned on three validations and six minimizing
        builds; the two validations took 185 s and nothing was left to minimize.)"""
        self.won = True
        self.finalists, self.options = max(1, min(faster, FINALISTS)), options
        self._replan()

    def _replan(self) -> None:
        """The reserve planned again, on the candidates' median build once there is one; only
        during the search under a limit (after it, keep(0): validation and minimizing build
        against the share's end)."""
        if self.times is not None and self.reserve > 0:
            build = statistics.median(self.builds) if self.builds else self.times.build_s
            self._reserve(replace(self.times, build_s=build))

    def keep(self, seconds: float) -> None:
        """The search stops `seconds` before the share's end (0: validation and minimizing run to it)."""
        self.reserve = seconds

    def remaining(self) -> float | None:
        """Seconds until the share's end less the reserve; None without a time limit."""
        return None if self.end is None else self.end - self.reserve - self.now()

    def interrupt(self) -> None:
        self.interrupted = True

    def why_stop(self, need: float = 0.0, in_flight: bool = False) -> str:
        """Why to stop now, or "": Ctrl-C (unless `in_flight`: a measurement in progress
        finishes), or the time (of the share less the reserve) used up, or shorter than `need`
        seconds (a step that would not end in time)."""
        if self.interrupted and not in_flight:
            return "stopped by Ctrl-C"
        left = self.remaining()
        if left is None or left > need:
            return ""
        kept = (f" ({self.reserve:.0f} s kept to validate and minimize the best candidate)"
                if self.reserve >= 1 else "")
        if self.targets_left > 1:
            return f"its share of the time limit is used ({self.targets_left} targets were left){kept}"
        return f"time limit reached{kept}"
