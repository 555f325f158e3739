"""The model-guided search (`ModelGuided`, the default strategy), one module per phase.

From the bottom up: features.py (what the model reads of a configuration), stop.py (the stop
rules and the measured noise), fit.py (ridge regression plus a Gaussian process over options and
code), spills.py (the spill rule), pool.py (the untried configurations ranked), transfer.py (the
warm start from other targets), screen.py (one-option moves, or a learned prior's guesses),
local.py (combine and the local step), strategy.py (`ModelGuided`: propose, vet, scout).  A
module imports only from those before it.  The design's history and the measurements behind it:
benchmarks/results/search/README.md, "Design notes of the model strategy".
"""

from __future__ import annotations

from compileiq_build.search.strategies.model.screen import screening_moves, spread_order, value_order
from compileiq_build.search.strategies.model.spills import spilling_mask
from compileiq_build.search.strategies.model.stop import FREE_STREAK, STOP_KAPPA
from compileiq_build.search.strategies.model.strategy import ModelGuided
from compileiq_build.search.strategies.model.transfer import transfer_holds

__all__ = ["FREE_STREAK", "STOP_KAPPA", "ModelGuided", "screening_moves", "spilling_mask", "spread_order",
           "transfer_holds", "value_order"]
