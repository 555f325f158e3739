"""The exploiting phases: combine (during screening too), then the local step.

- combine during screening: as soon as the best so far and another one-option move were each
  measured faster than the project's flags beyond the noise, the best with that move, one at a
  time, before the next screening move: a search of ten evaluations spent them all on screening
  and measured the helpful moves together only after it (live, a gemm held half its gain within
  ten evaluations, and the rest came at the eleventh).
- combine: the best so far with one more of the moves that helped (one-option moves measured
  faster than the project's flags), the one the model predicts best (no exploration bonus), while
  it is predicted to beat the best; measured before the model explores, as the moves that
  helped, combined, are where a search of twenty evaluations finds the rest of the gain (live, a
  public SGEMM's two best moves were never measured together while the model explored
  configurations of nine options, each slower).  The spill rule does not hold here (spills.py).
- local: once for every new best configuration, the untried configuration whose code is nearest
  to the best code (compile-time features where compiled; where not, the best less one of its
  options first, the option whose move alone did least first, then fewest options changed; ties
  to the better predicted mean), however the model ranks it.  Options are counted by code: two
  values whose one-option moves compiled to one code count as one, and a configuration stands for
  the nearest known one of its code; without compile-time features these counts are all it has.
  The last fraction of a percent lies in small variants of the best code, which the model cannot
  resolve from a few measurements of other codes, and combining carries options along that the
  best does not need (the replays that showed both: benchmarks/results/search/README.md).
- register: the best with a partner that moves the register count too, and the best or a move
  that helped with a value that makes a register count neither gives (`register_choice`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from compileiq_build.build.space import BASELINE, DEFAULT, Config, config_key
from compileiq_build.search.strategies.base import Context
from compileiq_build.search.strategies.model.features import (
    best_config,
    changed_options,
    code_count,
    config_features,
    standardized_features,
)
from compileiq_build.search.strategies.model.pool import register_moves
from compileiq_build.search.strategies.model.spills import spilling_mask


def helpful_moves(context: Context, noise: float | None = None) -> list[tuple[str, str]]:
    """(dimension, value) of the one-option moves measured faster than the project's flags,
    fastest first; with `noise`, only those significantly faster, by more than it."""
    default = context.space.default_config()
    below = 1.0 if noise is None else 1.0 - noise
    moves = []
    for config, trial in context.measured:
        moved = changed_options(config, default)
        if (trial.ratio is not None and trial.ratio < below and len(moved) == 1
                and (noise is None or trial.faster)):
            moves.append((trial.ratio, moved[0], config[moved[0]]))
    return [(dim, value) for _, dim, value in sorted(moves)]


def combinations(context: Context, incumbent: Config, noise: float | None = None) -> list[Config]:
    """The incumbent with one more move that helped (`helpful_moves`), each fresh (untried, of
    code not measured); in a closed context, those it holds."""
    return _with_each(context, incumbent, helpful_moves(context, noise))


def _with_each(context: Context, incumbent: Config, moves: Sequence[tuple[str, str]]) -> list[Config]:
    """The incumbent with each (dimension, value) of `moves` it does not set, fresh ones (untried,
    of code not measured); in a closed context, those it holds."""
    configs = [{**incumbent, dim: value} for dim, value in moves if incumbent[dim] != value]
    configs = [c for c in configs if context.fresh(c)]
    if context.closed:
        available = {config_key(c) for c in context.choices()}
        configs = [c for c in configs if config_key(c) in available]
    return configs


def early_combination(context: Context, noise: float) -> Config | None:
    """During screening: the best so far with one more move measured faster beyond `noise` (the
    fastest such move first), while no such combination is in flight and the best itself was
    faster beyond the noise; None otherwise."""
    if any(t.pending and t.phase == "combine" for t in context.history):
        return None  # one at a time: the next one builds on what this one measures
    incumbent = best_config(context)
    best = context.outcome(incumbent)
    if best is None or not best.faster or best.ratio is None or best.ratio >= 1.0 - noise:
        return None
    return next(iter(combinations(context, incumbent, noise)), None)


def register_partners(context: Context, incumbent: Config) -> list[Config]:
    """The incumbent with one value of another dimension whose move alone changed the register
    count, where one of the incumbent's own values did too; fresh ones only."""
    registers = register_moves(context)
    own = {k for k, v in incumbent.items() if (k, v) in registers}
    if not own:
        return []
    return _with_each(context, incumbent, [(k, v) for k, v in sorted(registers) if k not in own])


# The best and the moves that helped most, at most: whose neighbours `register_choice` reads.
ANCHORS = 3


def register_anchors(context: Context, incumbent: Config, noise: float) -> list[Config]:
    """The best so far, then the one-option moves measured faster beyond `noise`, fastest first:
    ANCHORS configurations at most."""
    default = context.space.default_config()
    moves = [{**default, dim: value} for dim, value in helpful_moves(context, noise)]
    return [incumbent, *(m for m in moves if m != incumbent)][:ANCHORS]


def neighbours(context: Context, anchor: Config) -> list[Config]:
    """The anchor with one value of a dimension it leaves at the default: one value per code its
    one-option move compiled to (values of one code alone act alike), passengers (the baseline's
    code) left out; fresh ones only."""
    alone = _alone_codes(context)
    base = alone("", DEFAULT)
    seen: set[tuple[str, str]] = set()
    moves = []
    for d in context.space.dimensions:
        if anchor[d.key] == DEFAULT:
            for value in d.values:
                if (code := alone(d.key, value)) != base and (d.key, code) not in seen:
                    seen.add((d.key, code))
                    moves.append((d.key, value))
    return _with_each(context, anchor, moves)


def new_count(context: Context, anchor: Config, configs: Sequence[Config]) -> list[bool]:
    """Whether each configuration (the anchor with one value more, compiled) has a register count
    that neither the anchor's code nor that value's one-option move has."""
    default = context.space.default_config()
    added = [next(k for k in c if c[k] != anchor[k]) for c in configs]
    counts = [code_count(f, "registers") for f in config_features(
        context, [anchor, *configs, *({**default, k: c[k]} for k, c in zip(added, configs, strict=True))])]
    own, pairs, alone = counts[0], counts[1:len(configs) + 1], counts[len(configs) + 1:]
    return [not math.isnan(own + n + a) and n not in (own, a) for n, a in zip(pairs, alone, strict=True)]


def register_choice(context: Context, incumbent: Config, noise: float) -> tuple[Config, Config] | None:
    """(anchor, configuration) to measure next, once per anchor (`register` proposals carry it
    as their parent); None while none is compiled (compiling ahead names them) or left.  Of an
    anchor's (`register_anchors`) partners compiled already and not left out for spilling, the
    one whose code's features are nearest the anchor's.  Partners: of the best, a value of
    another dimension whose move alone changed the register count where one of the best's did
    too (`register_partners`); of every anchor, a value that makes a register count neither it
    nor the value alone has (`new_count`).  ptxas allocates registers under all its options at
    once, so their effects do not add, and the model, which adds them, ranks such a pair by the
    partner's effect alone: live on the sample's gemm (H100) each cap alone was 3-30% slower,
    with register-usage-level 0-3 the best known, 1.024-1.031x against 1.018x (pool.py keeps
    such pairs in the pool); Rodinia's lud perimeter kernel keeps 32 registers with `-Xptxas -O1`
    and with `-dlcm=lu` alone, takes 40 with both, and is 6.7% faster so (1.3% with `-O1`
    alone, 0.8% slower with `-dlcm=lu` alone: benchmarks/corpus/dense_h100)."""
    compiled = set(context.codes)
    for anchor in register_anchors(context, incumbent, noise):
        key = config_key(anchor)
        if any(t.phase == "register" and t.parent == key for t in context.history):
            continue
        near = [c for c in neighbours(context, anchor) if config_key(c) in compiled]
        partners = [c for c, new in zip(near, new_count(context, anchor, near), strict=True) if new]
        if anchor is incumbent:
            partners += [c for c in register_partners(context, incumbent)
                         if config_key(c) in compiled and c not in partners]
        if partners:
            partners = [c for c, s in zip(partners, spilling_mask(context, partners), strict=True) if not s]
        if partners and (z := standardized_features(context, [anchor, *partners])).shape[1]:
            distance = np.nansum((z[1:] - z[0]) ** 2, axis=1)
            return anchor, partners[int(np.argmin(distance))]
    return None


LOCAL_REPEATS = 2  # local proposals of the incumbent's own code, at most, before the model's turn


def local_choice(context: Context, incumbent: Config, pool: Sequence[Config], mean: np.ndarray,
               spilling: np.ndarray) -> int | None:
    """The untried configuration (an index into `pool`) whose code is nearest to the incumbent's,
    among those not left out for spilling (`spilling_mask`), unless a local proposal for the
    incumbent was made already and did not compile to the incumbent's own code.  Nearest: by the
    distance of their compile-time features where both are compiled (of those not compiled, the
    incumbent less one of its options comes first, any other after), then by the options
    changed from the incumbent; ties go to the better predicted mean
    (this step exploits).  Decided from the history alone, so that a resumed run, or one with
    proposals in flight, decides alike.  A local proposal is for the configuration it names as
    its parent: while a new best is measured, one for the previous best may be in flight and
    then stand after it in the history.  One recorded without a parent counts for whatever best
    it follows."""
    key = config_key(incumbent)
    configs = [config_key(context.space.full_config(t.config)) for t in context.history]
    since = next((i for i, k in enumerate(configs) if k == key), len(configs))
    own = context.history[since].code if since < len(configs) else ""
    later = context.history[since + 1:]
    mine = [t for t in later if t.phase == "local" and t.parent in ("", key)]
    # Done once one is in flight or compiled to another code; and after LOCAL_REPEATS of the
    # incumbent's own code, which cost a compile each and tell nothing: on lud's compiled
    # perimeter kernel ten in a row ended the search (the free streak) before the register step.
    if not pool or any(not (own and t.code == own) for t in mine) or len(mine) >= LOCAL_REPEATS:
        return None
    z = standardized_features(context, [incumbent, *pool])
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
    keys = (mean, np.array(passenger), np.array([len(d) for d in moved]), distance)
    order = [i for i in np.lexsort(keys) if not spilling[i]]
    return int(order[0]) if order else None


def _alone_codes(context: Context) -> Callable[[str, str], str]:
    """(dimension, value) -> the code of that value alone (its one-option move from the project's
    flags, the default value the baseline's code) where compiled, else a label of the value.
    Values of one code alone act alike (benchmarks/results/search/README.md has an example)."""
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
