"""The default strategy: informative seeds, then a model of the measured landscape.

Each proposal names its phase, for the log:

- **transfer** (warm start): the best faster configurations of other targets in the store
  (up to TRANSFER_SEEDS), as long as they gain here at least half of what they gained there.
- **prior** (with a prior learned across kernels, prior.py, in place of screening): the untried
  configuration of the best predicted mean, one option or several, for the screening share of the
  budget.  The prior is the mean of the fit below, times a scale fitted here (1 a priori, prior
  spread PRIOR_SCALE_SD): where the measurements contradict it the scale falls towards 0 and the
  search goes on as without it.  While it guesses, the one-option moves are compiled ahead, best
  predicted first, so that their code informs the guesses.
- **screen** (unless what transferred from other targets informs the model): one-option moves
  away from the project's flags, in passes over the dimensions in
  stage order (common to exotic), each pass taking every dimension's next value; a dimension's
  values come extremes first (0 and 10 before 4).  A move whose machine code was measured is
  known without measuring.  Screening spends at most SCREEN_SHARE of the budget: what it leaves
  unmeasured, the model ranks.
- **combine**: the configuration the model predicts best (no exploration bonus): the moves that
  helped, combined.  COMBINE such proposals at most.
- **local**: once for every new best configuration, the untried configuration whose code is
  nearest to the best code (compile-time features where compiled; where not, the best less one
  of its options first, the option whose move alone did least first, then fewest options
  changed; ties to the better predicted mean), however the model ranks it.  Options are counted
  by code: two values whose one-option moves compiled to one code count as one (on the sample
  gemm `--register-usage-level` 0-3 are one code), and a configuration stands for the nearest
  known one of its code.  Without compile-time features (a table without them) these counts
  are all the local step has: on the recorded gemm table they take it from 0.892 of the
  optimum's gain to 1.000.  The last fraction of a percent lies in small variants of the
  best code (the sample gemm's optimum differs from its runner-up by one store cache operator),
  differences the model cannot resolve from a few measurements of other codes; and combining
  carries options along that the best does not need (on the H200 every run's best within 20
  evaluations was the gemm's optimum plus `-dscm=cg`, which only minimizing took away).
- **model**: the lowest confidence bound of the prediction (mean minus `kappa` standard
  deviations).

Codes that spill more than the least-spilling code known are left out of the model's and the
local step's proposals until a measured code that spills more was faster than the baseline:
their features lie far from every measured code, their wide interval would draw the bound to
them, and spills to local memory are slowdowns but rarely.  Combine proposals are not: on the
H200 one measured a register cap that spilled (0.100x, 2 pairs), but the replays that left
spilling code out of combine too ended short where they had not (the recorded gemm table at
--compile-ahead 5: 0.892 of the optimum's gain in 20 of 20 seeds, against 1.000; synthetic_008:
0.947 against 1.000; benchmarks/results/search/compile_ahead/): a combination
measured spilling teaches the fit what the caps do.  Where a configuration is not
compiled yet, an additive model of the spills over the options, fitted on every compiled
configuration (measured or not), predicts them; `scout` names such configurations last, so a
wrong prediction stands until other compiled configurations (every screening move is compiled
ahead) correct it.  And a proposal that compiles to code that spills more (`vet`) is not
measured.

While the GPU measures, `scout` names what to compile ahead: the screening moves to come, then
the untried configurations of lowest bound whose code is unknown.  Their codes and features
arrive as known candidates: a move whose code was measured costs nothing, and the process
predicts the others from their code.

The model of log(cost ratio) has two parts.  Additive effects of every option value (Bayesian
ridge regression on one-hot values: a value never measured keeps its prior spread, so the
bound explores it where it could pay) and a Gaussian process fitted to what the effects miss
(interactions), over the options and the compile-time features of each configuration's code
(registers, spills, instruction mix), where known: configurations of similar code are predicted
alike.  Configurations whose code was measured enter the fit with that code's ratio: the classes
of identical code are data.  Candidates of one code are one choice.  At 20 evaluations the
process reached more than a bagged LightGBM ensemble in its place, on the recorded tables of the
whole space and on synthetic ones (benchmarks/results/search/large/README.md).

It stops when even the optimistic bound (mean minus STOP_KAPPA standard deviations: proposals
explore with kappa 2, stopping takes the nearer bound, or a flat landscape would be measured
whole) of every untried configuration beats the best so far by less than the measured noise
(the median half-width of the measured ratios' intervals); before that it measures, along every
dimension, one configuration that changes only that dimension of the incumbent (the model may
have missed an interaction).  That stop is for a search that found nothing faster than the
project's flags beyond the noise (nothing to refine): once it holds such a winner, it spends the
budget it was given (lowest bound first).  Near the best the model's confidence is not evidence:
the last fraction of a percent lies in interactions a few measurements of other codes do not
show (the sample nbody's optimum is its best one-option move plus `-dscm=cg`, which alone is
slower; the model stopped at 10 of 20 evaluations, at 0.955 of the optimum's gain, and with the
budget spent it reaches it; benchmarks/results/search/large/README.md).

It also stops after FREE_STREAK proposals in a row (of its phases
after screening) compiled to machine code measured before: where most options leave the code
as it is (the sample nbody: 41 codes in 261 configurations), the bound keeps drawing it to
configurations it has not compiled, which are then the same code again, a compile each (on the
H200, 69 such compiles in a row after the optimum was found, until the time limit).
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from compileiq_build.space import BASELINE, DEFAULT, Config, Dimension, FlagSpace, config_key
from compileiq_build.strategies.base import Candidate, Context, Proposal, Stop, Trial

if TYPE_CHECKING:
    from compileiq_build.prior import Prior

# Cost ratio assumed for a configuration that failed to build or run, and the clip of measured
# ones: 10% slower than the project's flags is simply bad, and how much worse (-maxrregcount=32
# on a GEMM is 28 times slower) says nothing about where the optimum lies.  Left unclipped, such
# ratios set the Gaussian process's amplitude and hide the percent-level differences searched
# for (benchmarks/results/search/synthetic/README.md).
INVALID_RATIO = 1.1
POOL = 4000
SCREEN_SHARE = 0.5
COMBINE = 2
# Prior spread of one option value's effect on log(cost ratio): a few percent.
EFFECT_PRIOR = 0.05
# Evaluations of other targets (warm start) count this much in the fit.
TRANSFER_WEIGHT = 0.5
TRANSFER_SEEDS = 4
# Standard deviations of the optimistic bound that the stop rule weighs (module docstring).
STOP_KAPPA = 1.0
# Prior spread of the scale of the learned prior's predictions, around 1 (prior.py; `_predict`).
PRIOR_SCALE_SD = 0.5
PRIOR_TRIES = 2  # guesses of the prior that must gain, or screening takes over
FREE_STREAK = 10  # proposals in a row of measured code (module docstring): a budget evaluation's compiles
MODEL_PHASES = ("combine", "local", "model")  # the phases after screening


def _transfers(transfer: Sequence[tuple[Config, Trial]],
               trials: Sequence[tuple[Config, Trial]]) -> bool | None:
    """Whether the other targets' faster configurations measured here gained here at least half
    of what they gained there (log ratios, on average); None before one was measured here."""
    there = {config_key(c): math.log(t.ratio) for c, t in transfer if t.faster and t.ratio}
    pairs = [(math.log(t.ratio) if t.ratio else math.log(INVALID_RATIO), there[config_key(c)])
             for c, t in trials if config_key(c) in there]
    if not pairs:
        return None
    return sum(h for h, _ in pairs) <= 0.5 * sum(t for _, t in pairs)


def _fits(space: FlagSpace, config: Mapping[str, str]) -> bool:
    """A configuration measured for another target that this space can express."""
    values = {d.key: (DEFAULT, *d.values) for d in space.dimensions}
    return all(k in values and v in values[k] for k, v in config.items())


def spread_order(dim: Dimension) -> list[str]:
    """A dimension's values, extremes first, then each time the value farthest from those taken
    (numeric values), or as listed."""
    try:
        numbers = [float(v) for v in dim.values]
    except ValueError:
        return list(dim.values)
    order = [int(np.argmin(numbers)), int(np.argmax(numbers))] if len(numbers) > 1 else [0]
    while len(order) < len(numbers):
        gaps = [min(abs(x - numbers[j]) for j in order) if i not in order else -1.0
                for i, x in enumerate(numbers)]
        order.append(int(np.argmax(gaps)))
    return [dim.values[i] for i in dict.fromkeys(order)]


def screening_moves(space: FlagSpace) -> list[Config]:
    """One-option moves in passes over the dimensions (stage order), each taking the next value."""
    orders = [spread_order(d) for d in space.dimensions]
    moves = []
    for step in range(max((len(o) for o in orders), default=0)):
        for dim, order in zip(space.dimensions, orders, strict=True):
            if step < len(order):
                moves.append({**space.default_config(), dim.key: order[step]})
    return moves


def _changed(config: Config, base: Config) -> list[str]:
    return [k for k, v in config.items() if base.get(k) != v]


class ModelGuided:
    name = "model"

    def __init__(self, seed: int = 0, kappa: float = 2.0, noise: float = 0.002,
                 transfer: Sequence[Trial] = (), prior: Prior | None = None) -> None:
        self.seed = seed
        self.transfer = transfer  # evaluations of other targets: the first proposals, and rows of the fit
        self.prior = prior  # the model learned across kernels (prior.py): the mean of the fit
        self.kappa = kappa
        self.noise = noise  # relative: gains predicted below this are not worth measuring

    # -- the strategy ---------------------------------------------------------------
    def propose(self, context: Context) -> Proposal | Stop:
        space = context.space
        rng = random.Random(f"{self.seed}:{len(context.history)}")
        measured = context.measured
        transfer = [(space.full_config(t.config), t) for t in self.transfer if _fits(space, t.config)]
        if (seed := self._transfer(context, transfer)) is not None:
            return Proposal(seed, "transfer")
        if not _transfers(transfer, measured):
            transfer = []
        # What transferred from other targets informs the model as screening would.
        if not transfer and self._learned(context) and (guess := self._prior_guess(context, rng)) is not None:
            return Proposal(guess, "prior")
        if not transfer and (move := self._screen(context)) is not None:
            return Proposal(move, "screen")
        if (streak := _free_streak(context)) >= FREE_STREAK:
            return Stop(f"its last {streak} proposals compiled to machine code measured before")
        pool = self._pool(context, rng)
        if not pool:
            return Stop("every configuration of the space was measured")
        mean, std = self._predict(context, transfer, pool)
        best = min([1.0, *(t.ratio for _, t in measured if t.ratio is not None)])
        combined = sum(len(_changed(c, space.default_config())) > 1 for c, _ in measured)
        if combined < COMBINE:
            choice = int(np.argmin(mean))
            if mean[choice] < math.log(best):
                return Proposal(pool[choice], "combine")
        spilling = _spilling(context, pool)
        bound = np.where(spilling, np.inf, mean - self.kappa * std)
        incumbent = min(((c, t.ratio) for c, t in measured if t.ratio is not None),
                        key=lambda ct: ct[1], default=(space.default_config(), 1.0))[0]
        if best < 1.0 and (local := _unrefined(context, incumbent, pool, mean, spilling)) is not None:
            return Proposal(pool[local], "local", config_key(incumbent))
        choice = int(np.argmin(bound))
        if not np.isfinite(bound[choice]):
            return Stop("every untried configuration left compiles to code that spills more than "
                        "the least-spilling code known (the spill rule)")
        noise, measured_noise = self._noise(measured)
        if (mean - STOP_KAPPA * std).min() > math.log(best) + math.log1p(-noise):
            if (check := self._unchecked_neighbour(incumbent, measured, pool, bound)) is not None:
                return Proposal(pool[check], "model")
            # A winner beyond the noise: the rest of the budget goes to the bound (module docstring).
            if context.budget is None or best > 1.0 - noise:
                what = "the measured noise" if measured_noise else "the assumed noise"
                return Stop(f"the model predicts that no untried configuration beats the best so far "
                            f"({1 / best:.3f}x) by more than {what} ({100 * noise:.2f}%)")
        return Proposal(pool[choice], "model")

    @staticmethod
    def vet(context: Context, proposal: Proposal, candidate: Candidate) -> str:
        """Why not to measure a proposal of the model or the local step now compiled: its code
        spills more than the least-spilling code known (the spill rule), or ""."""
        if proposal.phase not in ("local", "model") or candidate.code in context.by_code:
            return ""  # screening and combine may measure spills (module docstring); a measured code is free
        if not _spilling(context, [context.space.full_config(candidate.config)])[0]:
            return ""
        return (f"its code spills {_spill_bytes(candidate.features):.0f} bytes, more than the "
                f"least-spilling code known (the spill rule)")

    def scout(self, context: Context, count: int) -> list[Config]:
        """Configurations to compile ahead while the GPU measures (pipeline.py), whose code and
        compile-time features inform the choice before they are measured: while screening, the
        one-option moves (with a prior, best predicted first: their code informs its guesses);
        then the untried configurations of lowest bound whose code is unknown, those predicted to
        spill last."""
        known = set(context.codes)
        available = {config_key(c) for c in context.choices()} if context.closed else None
        if _screening(context):
            moves = [m for m in self._moves(context) if context.fresh(m) and config_key(m) not in known
                     and (available is None or config_key(m) in available)]
            if moves:
                return moves[:count]
        rng = random.Random(f"{self.seed}:{len(context.history)}")  # the pool `propose` ranks next
        pool = [c for c in self._pool(context, rng) if config_key(c) not in known]
        if not pool:
            return []
        mean, std = self._predict(context, [], pool)
        # Those left out for spilling (predicted, as none is compiled) come last, as in `propose`.
        bound = np.where(_spilling(context, pool), np.inf, mean - self.kappa * std)
        return [pool[i] for i in np.argsort(bound, kind="stable")[:count]]

    # -- phases -------------------------------------------------------------------
    def _transfer(self, context: Context, transfer: Sequence[tuple[Config, Trial]]) -> Config | None:
        """Other targets' best configurations first, while what was taken from them holds up."""
        if len(context.measured) >= TRANSFER_SEEDS or _transfers(transfer, context.measured) is False:
            return None
        ranked = sorted(((t.ratio, config_key(c), c) for c, t in transfer
                         if t.faster and t.ratio is not None and context.fresh(c)), key=lambda rkc: rkc[:2])
        for _, _, config in ranked:
            if not context.closed or config in context.choices():
                return config
        return None

    def _screen(self, context: Context) -> Config | None:
        if not _screening(context):
            return None
        available = context.choices() if context.closed else None
        for move in screening_moves(context.space):
            if context.fresh(move) and (available is None or move in available):
                return move
        return None

    def _prior_guess(self, context: Context, rng: random.Random) -> Config | None:
        """While screening with a prior: the untried configuration of the best predicted mean
        (the prior, scaled and corrected by what was measured here), one-option moves or not."""
        guessed = [t for _, t in context.measured if t.phase == "prior"]
        noise, _ = self._noise(context.measured)
        # Two guesses that gained nothing beyond the noise: the prior does not know this code,
        # and screening takes over.
        if len(guessed) >= PRIOR_TRIES and not any(t.ratio and t.ratio < 1 - noise for t in guessed):
            return None
        if not _screening(context) or not (pool := self._pool(context, rng)):
            return None
        mean, _ = self._predict(context, [], pool)
        return pool[int(np.argmin(np.where(_spilling(context, pool), np.inf, mean)))]

    def _moves(self, context: Context) -> list[Config]:
        """The one-option moves in screening order; with a prior, best predicted first."""
        moves = screening_moves(context.space)
        if not self._learned(context):
            return moves
        mean, _ = self._predict(context, [], moves)
        return [moves[i] for i in np.argsort(mean, kind="stable")]

    def _pool(self, context: Context, rng: random.Random) -> list[Config]:
        """Untried configurations to rank, one per known machine code."""
        space = context.space
        if context.closed:
            configs = context.choices()
        else:
            dims = space.dimensions
            choices = [(DEFAULT, *d.values) for d in dims]
            if space.size <= POOL:
                configs = [dict(zip((d.key for d in dims), values, strict=True))
                           for values in itertools.product(*choices)]
            else:
                configs = [{d.key: rng.choice(c) for d, c in zip(dims, choices, strict=True)}
                           for _ in range(POOL)]
                # Around the best so far: one dimension changed, and pairs of changes.
                incumbent = min(((c, t.ratio) for c, t in context.measured if t.ratio is not None),
                                key=lambda ct: ct[1], default=(space.default_config(), 1.0))[0]
                for d, c in zip(dims, choices, strict=True):
                    configs += [{**incumbent, d.key: v} for v in c]
                for _ in range(POOL // 4):
                    a, b = rng.sample(range(len(dims)), 2) if len(dims) > 1 else (0, 0)
                    configs.append({**incumbent, dims[a].key: rng.choice(choices[a]),
                                    dims[b].key: rng.choice(choices[b])})
                configs += [space.full_config(c.config) for c in context.known]
        unique: dict[str, Config] = {}
        codes = context.codes
        for c in configs:
            key = config_key(c)
            if context.fresh(c) and key != BASELINE:
                # Of one code, the configuration with the fewest options set stands for it.
                label = codes.get(key) or key
                if label not in unique or len(_changed(c, space.default_config())) < len(
                        _changed(unique[label], space.default_config())):
                    unique[label] = c
        return list(unique.values())

    # -- the model ---------------------------------------------------------------------
    def _data(self, context: Context, transfer: Sequence[tuple[Config, Trial]]
              ) -> tuple[list[Config], np.ndarray, np.ndarray]:
        """Rows of the fit: the baseline, the measured configurations, the known configurations of
        a measured code (with that code's ratio), and other targets' rows at TRANSFER_WEIGHT."""
        space = context.space
        rows: list[tuple[Config, float | None, float]] = [(space.default_config(), 1.0, 1.0)]
        rows += [(c, t.ratio, 1.0) for c, t in context.measured]
        seen = {config_key(c) for c, _, _ in rows}
        for cand in context.known:
            config = space.full_config(cand.config)
            if config_key(config) not in seen and cand.code in context.by_code:
                rows.append((config, context.by_code[cand.code].ratio, 1.0))
                seen.add(config_key(config))
        rows += [(c, t.ratio, TRANSFER_WEIGHT) for c, t in transfer]
        target = np.log([min(r, INVALID_RATIO) if r is not None else INVALID_RATIO for _, r, _ in rows])
        return [c for c, _, _ in rows], target, np.array([w for _, _, w in rows])

    def _predict(self, context: Context, transfer: Sequence[tuple[Config, Trial]],
                 pool: list[Config]) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation of log(cost ratio) for every pool configuration."""
        train, target, weight = self._data(context, transfer)
        noise, _ = self._noise(context.measured)
        # The prior learned across kernels is the mean, times a scale fitted here (1 a priori): where
        # the measurements contradict it, the scale falls towards 0 and the search is as without it.
        offset_train, offset_pool = self._prior_mean(context, train), self._prior_mean(context, pool)
        target = target - offset_train
        x_train, x_pool = _one_hot(context.space, train), _one_hot(context.space, pool)
        spreads = np.full(x_train.shape[1], EFFECT_PRIOR)
        if transfer:  # an effect of its own for other targets' rows: the offset between the targets
            x_train = np.hstack([x_train, (weight < 1.0)[:, None].astype(float)])
            x_pool = np.hstack([x_pool, np.zeros((len(pool), 1))])
            spreads = np.append(spreads, EFFECT_PRIOR)
        if self._learned(context):
            x_train = np.hstack([x_train, offset_train[:, None]])
            x_pool = np.hstack([x_pool, offset_pool[:, None]])
            spreads = np.append(spreads, PRIOR_SCALE_SD)
        # Bayesian ridge: effects ~ N(0, EFFECT_PRIOR^2), measurements ~ N(effects, noise^2 / weight).
        precision = (x_train.T * weight) @ x_train / noise**2 + np.diag(spreads**-2.0)
        covariance = np.linalg.inv(precision)
        effects = covariance @ ((x_train.T * weight) @ target) / noise**2
        mean = x_pool @ effects
        var = np.einsum("ij,jk,ik->i", x_pool, covariance, x_pool)
        if len(train) >= 2:
            # What the additive effects miss (interactions), over the options and the code.
            # Its prior spread is that of the landscape measured so far: flat, and it stops.
            spread = max(float(np.var(target)), noise**2)
            gp_mean, gp_var = _gp(context, train, target - x_train @ effects, weight, pool, noise, spread)
            mean, var = mean + gp_mean, var + gp_var
        return mean + offset_pool, np.sqrt(var)

    def _learned(self, context: Context) -> bool:
        """Whether the prior informs this search: one is loaded and the baseline's code is known."""
        return self.prior is not None and bool(context.baseline_features)

    def _prior_mean(self, context: Context, configs: Sequence[Config]) -> np.ndarray:
        """The prior's log(cost ratio) of each configuration (0 without one), from its code's
        features where compiled, else from its options and the baseline's code."""
        if self.prior is None or not context.baseline_features:  # as `_learned`
            return np.zeros(len(configs))
        features = _features(context, configs, totals=False)
        return self.prior.predict(configs, features, context.baseline_features)

    def _noise(self, measured: Sequence[tuple[Config, Trial]]) -> tuple[float, bool]:
        """The gain a measurement resolves: the median half-width of the measured intervals, or
        the assumed `noise` before any (and in replays, which have none); whether measured."""
        spreads = [t.spread for _, t in measured if t.spread is not None and math.isfinite(t.spread)]
        return (max(statistics.median(spreads), 1e-4), True) if spreads else (self.noise, False)

    @staticmethod
    def _unchecked_neighbour(incumbent: Config, measured: Sequence[tuple[Config, Trial]],
                             pool: Sequence[Config], bound: np.ndarray) -> int | None:
        """The most promising untried configuration (index into `pool`) that differs from the
        incumbent in one dimension along which no neighbour of it was measured yet."""
        checked = {d[0] for c, _ in measured if len(d := _changed(c, incumbent)) == 1}
        candidates = [i for i, c in enumerate(pool) if np.isfinite(bound[i])
                      and len(d := _changed(c, incumbent)) == 1 and d[0] not in checked]
        return min(candidates, key=lambda i: bound[i]) if candidates else None


def _spill_bytes(features: Mapping[str, float]) -> float:
    return features.get("all:spill_bytes", features.get("spill_bytes", math.nan))


def _spilling(context: Context, pool: Sequence[Config]) -> np.ndarray:
    """Which pool configurations compile to code that spills more than the least-spilling code
    known, while no measured code that spills more was faster than the baseline.  The model
    would explore them (their features lie far from every measured code), and spills to local
    memory are slowdowns but rarely (benchmarks/results/search/compile_ahead/).  Where a
    configuration's code is not compiled, `_predicted_spills` decides."""
    def spills(configs: Sequence[Config]) -> np.ndarray:
        return np.array([_spill_bytes(f) for f in _features(context, configs, totals=False)], dtype=float)

    compiled = [context.space.full_config(c.config) for c in context.known]
    known = spills(compiled)
    if np.isnan(known).all():
        return np.zeros(len(pool), dtype=bool)
    least = float(np.nanmin(known))
    measured = spills([c for c, _ in context.measured])
    if any(v > least and t.ratio is not None and t.ratio < 1.0
           for v, (_, t) in zip(measured, context.measured, strict=True)):
        return np.zeros(len(pool), dtype=bool)
    values = spills(pool)
    unknown = np.isnan(values)
    if unknown.any():
        keep = ~np.isnan(known)
        values[unknown] = _predicted_spills(
            context.space, [c for c, k in zip(compiled, keep, strict=True) if k], known[keep], least,
            [c for c, u in zip(pool, unknown, strict=True) if u])
    return values > least


def _predicted_spills(space: FlagSpace, compiled: Sequence[Config], spills: np.ndarray, least: float,
                      configs: Sequence[Config]) -> np.ndarray:
    """Spill bytes of configurations not compiled yet, from those compiled: ridge regression of
    log(1 + spills beyond the least) on one-hot option values (a register cap spills whatever
    else is set), so that a value seen spilling once, with nothing else to blame, is predicted
    to spill.  Below one byte beyond the least, the prediction is the least."""
    x, xp = _one_hot(space, compiled), _one_hot(space, configs)
    y = np.log1p(spills - least)
    effects = np.linalg.solve(x.T @ x + np.eye(x.shape[1]), x.T @ y)
    excess = np.expm1(xp @ effects)
    return least + np.where(excess > 1.0, excess, 0.0)


def _free_streak(context: Context) -> int:
    """How many of the last measured proposals of the model's phases after screening, in a row,
    compiled to machine code measured before them (or the baseline's)."""
    seen, streak = {context.baseline_code} - {""}, 0
    for t in context.history:
        if t.pending:
            continue
        free = bool(t.code) and t.code in seen and t.phase in MODEL_PHASES
        streak = streak + 1 if free else 0
        seen.add(t.code)
    return streak


def _screening(context: Context) -> bool:
    """Screening may still spend evaluations (SCREEN_SHARE of the budget)."""
    return context.budget is None or context.spent < math.ceil(SCREEN_SHARE * context.budget)


def _unrefined(context: Context, incumbent: Config, pool: Sequence[Config], mean: np.ndarray,
               spilling: np.ndarray) -> int | None:
    """The untried configuration (an index into `pool`) whose code is nearest to the incumbent's,
    among those not left out for spilling (`_spilling`), unless a local proposal for the
    incumbent was made already and did not compile to the incumbent's own code.  Nearest: by the
    distance of their compile-time features where both are compiled (of those not compiled, the
    incumbent less one of its options comes first, any other after), then by the options
    changed from the incumbent; ties go to the better predicted mean
    (this step exploits).  Decided from the history alone, so that a resumed run, or one with
    proposals in flight, decides alike.  A local proposal is for the configuration it names as
    its parent: while a new best is measured, one for the previous best may be in flight and
    then stand after it in the history (seen on the H200 gemm).  One recorded without a
    parent counts for whatever best it follows."""
    key = config_key(incumbent)
    configs = [config_key(context.space.full_config(t.config)) for t in context.history]
    since = next((i for i, k in enumerate(configs) if k == key), len(configs))
    own = context.history[since].code if since < len(configs) else ""
    later = context.history[since + 1:]
    if not pool or any(t.phase == "local" and t.parent in ("", key) and not (own and t.code == own)
                       for t in later):
        return None
    z = _standardized_features(context, [incumbent, *pool])
    # No feature known (a table without them): no distance, rather than 0 for every pair.
    distance = ((z[1:] - z[0]) ** 2).sum(1) if z.shape[1] else np.full(len(pool), math.nan)
    # Not compiled yet: the incumbent less one of its options first (presumed nearest), the rest
    # last.  A pool configuration stands for its code: of the known ones of that code, the step
    # from the incumbent is the nearest.
    alone = _alone_codes(context)
    same: dict[str, list[Config]] = {}
    for c in context.known:
        if c.code:  # not compiled yet: a code of its own, not one with every other such
            same.setdefault(c.code, []).append(context.space.full_config(c.config))
    codes = context.codes
    steps = [min((_step(x, incumbent, alone) for x in [c, *same.get(codes.get(config_key(c)) or "", [])]),
                 key=lambda rm: (not rm[0], len(rm[1]))) for c in pool]
    removal = np.array([r for r, _ in steps])
    moved = [m for _, m in steps]
    distance = np.where(np.isnan(distance), np.where(removal, 0.0, math.inf), distance)
    # Of the removals, first the option whose move alone did least: likeliest a passenger.
    passenger = [_alone_effect(context, m[0], incumbent[m[0]]) if r else 0.0 for r, m in steps]
    order = [i for i in np.lexsort((mean, passenger, [len(d) for d in moved], distance)) if not spilling[i]]
    return int(order[0]) if order else None


def _alone_codes(context: Context) -> Callable[[str, str], str]:
    """(dimension, value) -> the code of that value alone (its one-option move from the project's
    flags, the default value the baseline's code) where compiled, else a label of the value.
    Values of one code alone act alike: on the sample gemm `--register-usage-level` 0-3 are one
    code, and `--restrict` or `--jump-table-density` alone change nothing."""
    codes, default = context.codes, context.space.default_config()
    base = codes.get(BASELINE, "")

    def alone(dim: str, value: str) -> str:
        if value == DEFAULT:
            return base or f"{dim}={value}"
        return codes.get(config_key({**default, dim: value}), "") or f"{dim}={value}"
    return alone


def _step(config: Config, base: Config, alone: Callable[[str, str], str]) -> tuple[bool, list[str]]:
    """The dimensions where `config` and `base` differ in the code their values give alone
    (`_alone_codes`: where every move is compiled, the options changed that change the code),
    and whether that is one option of `base` taken away."""
    moved = [k for k in config if config[k] != base[k] and alone(k, config[k]) != alone(k, base[k])]
    return len(moved) == 1 and alone(moved[0], config[moved[0]]) == alone(moved[0], DEFAULT), moved


def _alone_effect(context: Context, dim: str, value: str) -> float:
    """|log ratio| measured for `value` of `dim` alone (its one-option move); inf if not measured."""
    trial = context.outcome({**context.space.default_config(), dim: value})
    return abs(math.log(trial.ratio)) if trial is not None and trial.ratio else math.inf


def _standardized_features(context: Context, configs: Sequence[Config]) -> np.ndarray:
    """The configurations' compile-time features (`_features`), a column per feature that varies
    among the known ones, standardized; NaN where a configuration's features are not known."""
    rows = _features(context, configs)
    names = sorted({k for r in rows for k in r})
    f = np.array([[float(r.get(n, math.nan)) for n in names] for r in rows]).reshape(len(rows), len(names))
    known = ~np.isnan(f).all(axis=0)
    f = f[:, known]
    mu, sd = np.nanmean(f, axis=0), np.nanstd(f, axis=0)
    varies = sd > 0
    return (f[:, varies] - mu[varies]) / sd[varies]


def _features(context: Context, configs: Sequence[Config], totals: bool = True) -> list[Mapping[str, float]]:
    """Each configuration's compile-time features, where known: those of its code (a configuration
    of a code whose features are known has them), with `totals` those over kernels only
    (per-kernel columns are many, for few rows)."""
    by_code = {c.code: c.features for c in context.known if c.code and c.features}
    own = {config_key(context.space.full_config(c.config)): c.features for c in context.known if c.features}
    codes = context.codes
    rows = [own.get(key := config_key(c)) or by_code.get(codes.get(key, ""), {}) for c in configs]
    return [({k: v for k, v in r.items() if k.startswith("all:")} if totals else {}) or r for r in rows]


def _gp(context: Context, train: list[Config], target: np.ndarray, weight: np.ndarray,
        pool: list[Config], noise: float, amplitude: float) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian-process regression over the options (one-hot) and the code's features
    (standardized): configurations of similar code are predicted alike."""
    configs = train + pool
    x = _one_hot(context.space, configs)
    z = np.nan_to_num(_standardized_features(context, configs))  # unknown: the mean
    if z.shape[1]:
        # The features together weigh about as much as a few options, however many columns.
        x = np.hstack([x, z / max(1.0, math.sqrt(z.shape[1] / 4))])
    xt, xp = x[:len(train)], x[len(train):]
    # No hyperparameters are fitted on a handful of rows: the length scale is the median squared
    # distance between measured configurations.
    d2 = ((xt[:, None, :] - xt[None, :, :]) ** 2).sum(-1)
    scale = float(np.median(d2[d2 > 0])) if (d2 > 0).any() else 1.0

    def kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return amplitude * np.exp(-((a[:, None, :] - b[None, :, :]) ** 2).sum(-1) / scale)

    k = kernel(xt, xt) + np.diag(noise**2 / weight + 1e-9)
    kp = kernel(xp, xt)
    chol = np.linalg.cholesky(k)
    alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, target))
    v = np.linalg.solve(chol, kp.T)
    return kp @ alpha, np.maximum(amplitude - (v**2).sum(0), 1e-12)


def _one_hot(space: FlagSpace, configs: Sequence[Config]) -> np.ndarray:
    """One column per non-default value of every dimension."""
    columns = [(d.key, v) for d in space.dimensions for v in d.values]
    index = {kv: i for i, kv in enumerate(columns)}
    x = np.zeros((len(configs), len(columns)))
    for r, c in enumerate(configs):
        for k, v in c.items():
            if (i := index.get((k, v))) is not None:
                x[r, i] = 1.0
    return x
