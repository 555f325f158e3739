"""ModelGuided, the default strategy: informative seeds, then a model of the measured landscape.

`propose` takes the phases in turn, each proposal naming its phase for the log: transfer
(transfer.py), prior or screen (screen.py; combine interleaved as soon as two moves helped
beyond the noise, local.py), then combine, register and local (local.py) and model: the
lowest confidence bound of the prediction (mean minus `kappa` standard deviations, fit.py) among
the configurations the spill rule leaves (spills.py), until a stop rule holds (stop.py).  While
the GPU measures, `scout` names what to compile ahead: the screening moves to come, then the
untried configurations of lowest bound whose code is unknown.  Their codes and features arrive
as known candidates: a move whose code was measured costs nothing, and the process predicts the
others from their code.  `vet` turns down a compiled proposal that breaks the spill rule.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from compileiq_build.build.space import Config, config_key
from compileiq_build.search.strategies.base import Candidate, Context, Proposal, Stop, Trial
from compileiq_build.search.strategies.model.features import best_config, best_ratio, changed_options
from compileiq_build.search.strategies.model.fit import predict, prior_informs
from compileiq_build.search.strategies.model.local import (
    combinations,
    early_combination,
    local_choice,
    neighbours,
    register_anchors,
    register_choice,
    register_partners,
)
from compileiq_build.search.strategies.model.pool import candidate_pool
from compileiq_build.search.strategies.model.screen import (
    prior_guess,
    screen_move,
    screening_open,
    screening_order,
)
from compileiq_build.search.strategies.model.spills import spill_bytes, spilling_mask
from compileiq_build.search.strategies.model.stop import (
    FREE_STREAK,
    free_streak,
    no_gain_left,
    resolved_noise,
)
from compileiq_build.search.strategies.model.transfer import expressible, transfer_holds, transfer_seed

if TYPE_CHECKING:
    from compileiq_build.search.prior import Prior


# Options changed from the best so far, at most, of what the model's bound explores (while any is left).
TRUST_RADIUS = 2


class ModelGuided:
    name = "model"

    def __init__(self, seed: int = 0, kappa: float = 2.0, noise: float = 0.002,
                 transfer: Sequence[Trial] = (), prior: Prior | None = None) -> None:
        self.seed = seed
        self.transfer = transfer  # evaluations of other targets: the first proposals, and rows of the fit
        self.prior = prior  # the model learned across kernels (prior.py): the mean of the fit
        self.kappa = kappa
        self.noise = noise  # relative: gains predicted below this are not worth measuring

    def propose(self, context: Context) -> Proposal | Stop:
        space = context.space
        rng = random.Random(f"{self.seed}:{len(context.history)}")
        transfer = [(space.full_config(t.config), t) for t in self.transfer if expressible(space, t.config)]
        if (seed := transfer_seed(context, transfer)) is not None:
            return Proposal(seed, "transfer")
        if not transfer_holds(transfer, context.measured):
            transfer = []
        # What transferred from other targets informs the model as screening would.
        if (not transfer and prior_informs(self.prior, context)
                and (guess := prior_guess(context, self.prior, self.noise)) is not None):
            return Proposal(guess, "prior")
        noise, _ = resolved_noise(context.measured, self.noise)
        if not transfer and (move := screen_move(context, noise)) is not None:
            # The moves that helped beyond the noise, combined before the next screening move.
            if (combo := early_combination(context, noise)) is not None:
                return Proposal(combo, "combine", config_key(best_config(context)))
            return Proposal(move, "screen")
        return self._refine(context, transfer, rng)

    def _refine(self, context: Context, transfer: Sequence[tuple[Config, Trial]],
                rng: random.Random) -> Proposal | Stop:
        """The phases after screening: combine, local and model, or a stop rule."""
        if (streak := free_streak(context)) >= FREE_STREAK:
            return Stop(f"its last {streak} proposals compiled to machine code measured before")
        noise = resolved_noise(context.measured, self.noise)[0]
        pool = candidate_pool(context, rng, noise)
        if not pool:
            return Stop("every configuration of the space was measured")
        best, incumbent = best_ratio(context), best_config(context)
        if combos := combinations(context, incumbent):
            combined, _ = predict(context, transfer, combos, self.prior, self.noise)
            if combined.min() < math.log(best):
                return Proposal(combos[int(np.argmin(combined))], "combine", config_key(incumbent))
        if best < 1.0 and (chosen := register_choice(context, incumbent, noise)) is not None:
            return Proposal(chosen[1], "register", config_key(chosen[0]))
        mean, std = predict(context, transfer, pool, self.prior, self.noise)
        spilling = spilling_mask(context, pool)
        bound = self._bound(pool, incumbent, mean, std, spilling)
        if best < 1.0 and (local := local_choice(context, incumbent, pool, mean, spilling)) is not None:
            return Proposal(pool[local], "local", config_key(incumbent))
        choice = int(np.argmin(bound))
        if not np.isfinite(bound[choice]):
            return Stop("every untried configuration left compiles to code that spills more than "
                        "the least-spilling code known (the spill rule)")
        if (stop := no_gain_left(context, incumbent, pool, mean, std, bound, best, self.noise)) is not None:
            return stop
        return Proposal(pool[choice], "model")

    def _bound(self, pool: Sequence[Config], incumbent: Config, mean: np.ndarray, std: np.ndarray,
               spilling: np.ndarray) -> np.ndarray:
        """The lower confidence bound of each pool configuration, inf for those the spill rule
        leaves out and for those more than TRUST_RADIUS options from the incumbent while any
        nearer is left: the bound's spread grows with the untried options a configuration sets,
        so far configurations would win on spread alone (live, nine-option configurations won it
        on a public SGEMM and measured 0.86-0.99x, one after another)."""
        bound = np.where(spilling, np.inf, mean - self.kappa * std)
        far = np.array([len(changed_options(c, incumbent)) > TRUST_RADIUS for c in pool], dtype=bool)
        near = np.where(far, np.inf, bound)
        return near if np.isfinite(near).any() else bound

    @staticmethod
    def vet(context: Context, proposal: Proposal, candidate: Candidate) -> str:
        """Why not to measure a proposal of the model or the local step now compiled: its code
        spills more than the least-spilling code known (the spill rule), or ""."""
        if proposal.phase not in ("local", "model") or candidate.code in context.by_code:
            return ""  # screening and combine may measure spills (spills.py); a measured code is free
        if not spilling_mask(context, [context.space.full_config(candidate.config)])[0]:
            return ""
        return (f"its code spills {spill_bytes(candidate.features):.0f} bytes, more than the "
                f"least-spilling code known (the spill rule)")

    def scout(self, context: Context, count: int) -> list[Config]:
        """Configurations to compile ahead while the GPU measures (pipeline.py), whose code and
        compile-time features inform the choice before they are measured: while screening, the
        next combination of moves that helped, then the one-option moves (with a prior, best
        predicted first: their code informs its guesses);
        then the moves that helped added to the best (combine), then the untried configurations of
        lowest bound whose code is unknown, those predicted to spill last."""
        known = set(context.codes)
        available = {config_key(c) for c in context.choices()} if context.closed else None
        noise, _ = resolved_noise(context.measured, self.noise)
        if screening_open(context, noise):
            combo = early_combination(context, noise)
            order = screening_order(context, self.prior, self.noise)
            moves = [m for m in [*([combo] if combo else []), *order]
                     if context.fresh(m) and config_key(m) not in known
                     and (available is None or config_key(m) in available)]
            if moves:
                return moves[:count]
        incumbent = best_config(context)
        combos = [c for c in combinations(context, incumbent) if config_key(c) not in known]
        if best_ratio(context) < 1.0:  # the anchors' register partners, for `register_choice`
            combos += [c for c in register_partners(context, incumbent) if config_key(c) not in known]
            combos += [c for anchor in register_anchors(context, incumbent, noise)
                       for c in neighbours(context, anchor) if config_key(c) not in known]
            # One entry per configuration: two anchors' neighbours can coincide (A+b is B+a).
            combos = list({config_key(c): c for c in combos}.values())
        rng = random.Random(f"{self.seed}:{len(context.history)}")  # the pool `propose` ranks next
        pool = [c for c in candidate_pool(context, rng, noise) if config_key(c) not in known]
        if not pool:
            return combos[:count]
        mean, std = predict(context, [], pool, self.prior, self.noise)
        # Those left out for spilling (predicted, as none is compiled) come last, as in `propose`.
        bound = self._bound(pool, incumbent, mean, std, spilling_mask(context, pool))
        ranked = [pool[i] for i in np.argsort(bound, kind="stable")]
        return [*combos, *(c for c in ranked if c not in combos)][:count]
