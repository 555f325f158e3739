"""An open evaluation of the search on landscapes anchored on the corpus's real measurements.

The closed replays (`search_replay`) choose among a table's rows, so a strategy there can never
propose the many-option configurations that lost live; `open_replay`'s landscapes are synthetic.
Here each corpus table (benchmarks/corpus/tables) becomes a `Landscape` over the whole default
CUDA space (120,960 configurations) that answers any configuration from the table's measurements:

- code: a recorded row's own code; else the configuration reduced to canonical values (an option
  whose one-option move compiled to the baseline's code, a passenger, is dropped; one whose move
  compiled to the code of an earlier value of its option, an alias, takes that value): the code
  of a recorded row of that reduced configuration if there is one, else a new code labelled by a
  hash of the table and the reduced configuration;
- time: a recorded code's own; else the baseline's x exp(the sum of the one-option log effects +
  the measured pair interactions (rows of two reduced options) + z (S0 + the sum of |effects|)),
  z drawn per code (a seeded hash) from the table's multi-option rows' residuals against that
  additive prediction, normalised so, of the same sign class of the prediction (helpful,
  neutral, harmful: gains add sub-additively, losses saturate); a class of fewer than MIN_OWN
  rows in the table draws from every table's;
- features: a recorded code's own; else those of the recorded row nearest the reduced
  configuration (fewest options apart), corrected where the two differ by what each differing
  value's one-option move changed in the baseline's: its local-memory features (`LOCAL`: spills,
  stack, local loads and stores) by every option (a register cap that spills alone spills on
  top of a move that did not), a count a dimension sets (its `anchor`: a register cap's
  registers) by that dimension: estimated, not compiled (`judge` measures them on held-out rows);
- the optimum: the best code of the whole space, enumerated (numpy).
`judge` measures these rules on held-out recorded rows (each multi-option row left out in turn);
`reach` says where each landscape's near-optimal configurations lie (`Landscape.reach`).

With `--sources DIR` (a corpus_record manifest.json and the programs' sources, e.g. the ignored
`.corpus_src/`), a table whose program is there is a `CompiledLandscape`: each configuration is
compiled as the corpus was (corpus_record.compile_all: nvcc -ptx, ptxas -v), its kernel's code and
features are the compiler's, and its time is the recorded row's of that code where one is, else
the landscape's answer (one per code).  Options that interact in the compiler then show as they
do live: on lud, `-O1 -dlcm=lu` compiles to the code of a recorded five-option row (40 registers,
0.935x) where the rules above answer it from the two moves alone (32 registers, about 0.995x).

`evaluate` runs, per table, our default strategy ('model', with a prior fitted leave-one-project-
out as prior_validation does, cached), 'model-noprior', 'random' and the peers (TPE, SMAC3 where
installed) at each budget and seed, in an open context through `tune`'s own loop
(search/loop.py's `drive`; the peers as its strategies, peers.PeerStrategy).

    python -m benchmarks.open_eval [--tables N] [--seeds 3] [--budgets 10 20] [--jobs 2]
        [--strategies ...] [--out benchmarks/results/search/open] [--judge]
    python -m benchmarks.open_eval --reach --min-gain 0.01 [--against NAME.jsonl]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from functools import cache, cached_property
from pathlib import Path

import numpy as np

from benchmarks import corpus_record
from benchmarks.peers import PEERS, PeerStrategy, PeerUnavailable
from benchmarks.search_replay import Table, load_table
from compileiq_build.build.space import DEFAULT, Config, FlagSpace, config_key, dimensions_for
from compileiq_build.search.loop import Measured, drive
from compileiq_build.search.prior import FEATURES, FORMAT, PARAMS, ROUNDS, Prior, fit, load, read_table, write
from compileiq_build.search.strategies import Candidate, Strategy, Trial, make_strategy
from compileiq_build.search.target import search_strategy

CORPUS = Path(__file__).parent / "corpus" / "tables"
OUT = Path(__file__).parent / "results" / "search" / "open"
PRIOR_CACHE = Path.home() / ".cache" / "compileiq_build" / "open_eval"  # priors fitted without each project
SPACE = FlagSpace(tuple(d for d in dimensions_for("CUDA") if not d.numerics))
NAMES = tuple(d.name for d in SPACE.dimensions)
VALUES = tuple((DEFAULT, *d.values) for d in SPACE.dimensions)
STRIDE = np.cumprod([1, *(len(v) for v in VALUES[:0:-1])])[::-1].astype(np.int64)  # mixed radix, last fastest
S0 = 0.003  # the residual's scale floor: about the corpus's measurement noise (log ratio)
MIN_OWN = 15  # residuals a table needs in a class to draw from its own
HELPFUL, NEUTRAL, HARMFUL = 0, 1, 2
# The features a new code's estimate corrects by every option's move (what the spill rule reads);
# registers and instructions so corrected came out worse on held-out rows (`judge`), registers
# corrected by the register cap's move alone better.
LOCAL = ("all:spill_bytes", "all:stack_bytes", "all:ldl", "all:stl")


def _class(additive: np.ndarray) -> np.ndarray:
    return np.where(additive < -S0, HELPFUL, np.where(additive > S0, HARMFUL, NEUTRAL))


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 of each element: a seeded hash, vectorised."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


@cache
def whole_space() -> np.ndarray:
    """Every configuration of the space as value indices (0 = default), one row each."""
    grids = np.meshgrid(*(np.arange(len(v)) for v in VALUES), indexing="ij")
    return np.stack([g.ravel() for g in grids], axis=1).astype(np.int64)


def indices(config: Mapping[str, str]) -> np.ndarray:
    """A configuration (option names, or `CUDA:` keys, to values; others default) as indices."""
    plain = {k.split(":", 1)[-1]: v for k, v in config.items()}
    return np.array([VALUES[i].index(plain.get(n, DEFAULT)) for i, n in enumerate(NAMES)], dtype=np.int64)


class Landscape:
    """One table's answers for every configuration of the space (see the module's docstring).

    `pooled`: per sign class, the normalised residuals of every table (drawn where this table has
    fewer than MIN_OWN); `leave_out`: a row held out (`judge`), as if never recorded."""

    def __init__(self, table: Table, name: str, pooled: Mapping[int, np.ndarray] | None = None,
                 leave_out: int | None = None) -> None:
        if set(table.dims) != set(NAMES):
            raise ValueError(f"{name}: its options {sorted(table.dims)} are not the default CUDA space's")
        self.table, self.name = table, name
        keep = [i for i in range(len(table.rows)) if i != leave_out]
        self.rows = np.array([indices(table.rows[i]) for i in keep])
        self.row_ids = np.array(keep)
        b = table.baseline
        self.base, self.base_code = table.times[b], table.codes[b]
        self.log = np.log(np.array([table.times[i] for i in keep]) / self.base)
        # One-option moves: effect and canonical value (passengers -> default, aliases -> the first).
        self.effect = [np.zeros(len(v)) for v in VALUES]
        self.canon = [np.arange(len(v)) for v in VALUES]
        # Per option value, what its move changed in the baseline's `LOCAL` features and registers
        # (0 where not recorded): a new code's are the nearest row's with these corrections.
        anchors = {f"all:{d.anchor}" for d in SPACE.dimensions if d.anchor}
        self.names = [n for n in table.features[b] if n in LOCAL or n in anchors]
        base_counts = np.array([table.features[b][n] for n in self.names], dtype=float)
        self.delta = np.zeros((len(NAMES), max(len(v) for v in VALUES), len(self.names)))
        # Which option's moves correct which feature: every option a local-memory one, a
        # dimension the count it sets.
        corrects = [[n in LOCAL or n == f"all:{dim.anchor}" for n in self.names] for dim in SPACE.dimensions]
        self.corrects = np.array(corrects, dtype=bool)
        for d in range(len(NAMES)):
            first: dict[str, int] = {self.base_code: 0}
            for v in range(1, len(VALUES[d])):
                move = np.zeros(len(NAMES), dtype=np.int64)
                move[d] = v
                r = self._row(move)
                if r < 0:
                    continue  # not recorded: no effect known, its own value
                code = table.codes[self.row_ids[r]]
                self.effect[d][v] = self.log[r]
                moved = table.features[int(self.row_ids[r])]
                self.delta[d, v] = np.array([moved.get(n, 0.0) for n in self.names]) - base_counts
                self.canon[d][v] = first.setdefault(code, v)
        reduced = self.reduce(self.rows)
        self.row_keys = self.rows @ STRIDE
        self._by_key = np.argsort(self.row_keys, kind="stable")
        ckeys = reduced @ STRIDE
        order = np.lexsort((np.arange(len(ckeys)), ckeys != self.row_keys, ckeys))  # exact rows first
        first_of = np.r_[True, ckeys[order][1:] != ckeys[order][:-1]]
        self._ckeys, self._crows = ckeys[order][first_of], order[first_of]
        # Pair interactions: rows of two reduced options, less their two effects.
        self.pairs: dict[tuple[int, int, int, int], float] = {}
        for r, c in enumerate(reduced):
            set_ = np.flatnonzero(c)
            if len(set_) == 2:
                d1, d2 = (int(d) for d in set_)
                g = self.log[r] - self.effect[d1][c[d1]] - self.effect[d2][c[d2]]
                self.pairs.setdefault((d1, int(c[d1]), d2, int(c[d2])), float(g))
        self.own = residuals(self, reduced)
        self.pool = {k: (self.own[k] if len(self.own[k]) >= MIN_OWN or pooled is None or not len(pooled[k])
                         else pooled[k]) for k in (HELPFUL, NEUTRAL, HARMFUL)}
        self.salt = np.uint64(int(hashlib.sha256(name.encode()).hexdigest()[:16], 16))
        self.borrowed = 0  # new codes whose features were estimated from recorded rows
        self._estimated: dict[int, dict[str, float]] = {}  # one object per new code (_MemoPrior keys on it)

    def reduce(self, x: np.ndarray) -> np.ndarray:
        return np.stack([self.canon[d][x[:, d]] for d in range(len(NAMES))], axis=1)

    def _row(self, x: np.ndarray) -> int:
        hits = np.flatnonzero((self.rows == x).all(axis=1))
        return int(hits[0]) if len(hits) else -1

    def _lookup(self, keys: np.ndarray, sorted_keys: np.ndarray, rows: np.ndarray) -> np.ndarray:
        pos = np.clip(np.searchsorted(sorted_keys, keys), 0, len(sorted_keys) - 1)
        return np.where(sorted_keys[pos] == keys, rows[pos], -1)

    def _additive(self, c: np.ndarray) -> np.ndarray:
        """Sum of the one-option effects of reduced configurations, with the pair interactions."""
        total = sum(self.effect[d][c[:, d]] for d in range(len(NAMES)))
        for (d1, v1, d2, v2), g in self.pairs.items():
            total = total + g * ((c[:, d1] == v1) & (c[:, d2] == v2))
        return np.asarray(total, dtype=float)

    def _scale(self, c: np.ndarray) -> np.ndarray:
        return S0 + sum(np.abs(self.effect[d][c[:, d]]) for d in range(len(NAMES)))

    def answer(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For configurations (indices, one per row): the recorded row of their code (-1: a new
        code), their reduced configurations' keys, and their log time ratios to the baseline."""
        c = self.reduce(x)
        sorted_keys = self.row_keys[self._by_key]
        row = self._lookup(x @ STRIDE, sorted_keys, self._by_key)
        ckey = c @ STRIDE
        row = np.where(row >= 0, row, self._lookup(ckey, self._ckeys, self._crows))
        additive = self._additive(c)
        klass = _class(additive)
        effects = np.stack([self.effect[d][c[:, d]] for d in range(len(NAMES))], axis=1)
        # The draw is keyed by the options of a measured effect: codes apart only by options that
        # changed nothing beyond the noise share it, as their times would (no lottery of variants).
        h = _mix((np.where(np.abs(effects) > S0, c, 0) @ STRIDE).astype(np.uint64) ^ self.salt)
        z = np.zeros(len(x))
        for k, pool in self.pool.items():
            if len(pool):
                m = klass == k
                z[m] = pool[(h[m] % np.uint64(len(pool))).astype(np.int64)]
        # No faster than its helpful moves' gains together, no slower than its harmful moves'
        # losses (89% of the corpus's multi-option rows, within S0).
        drawn = np.clip(additive + z * self._scale(c), np.minimum(effects, 0).sum(axis=1) - S0,
                        np.maximum(effects, 0).sum(axis=1) + S0)
        # Configurations of one option set are recorded moves (or of a code recorded): no residual.
        several = (c != 0).sum(axis=1) >= 2
        log = np.where(row >= 0, self.log[np.maximum(row, 0)], np.where(several, drawn, additive))
        return row, ckey, log

    def compile(self, config: Mapping[str, str]) -> tuple[str, dict[str, float]]:
        """The code label and features of a configuration (`tune` gets them by compiling)."""
        x = indices(config)[None]
        row, ckey, _ = self.answer(x)
        if row[0] >= 0:
            i = int(self.row_ids[row[0]])
            return self.table.codes[i], self.table.features[i]
        self.borrowed += 1
        label = "new:" + hashlib.sha256(f"{self.name}:{int(ckey[0])}".encode()).hexdigest()[:12]
        if int(ckey[0]) not in self._estimated:
            self._estimated[int(ckey[0])] = self.estimated_features(self.reduce(x)[0])
        return label, self._estimated[int(ckey[0])]

    def nearest_row(self, c: np.ndarray) -> int:
        """The recorded row (index into self.rows) fewest options apart from `c`, first in table order."""
        return int(np.argmin((self.rows != c).sum(axis=1)))

    def estimated_features(self, c: np.ndarray) -> dict[str, float]:
        """A reduced configuration's features: the nearest recorded row's, with those an option
        corrects (`self.corrects`) plus, for each option where the two differ, the change of
        `c`'s value's move less that of the row's value."""
        near = self.nearest_row(c)
        r = self.rows[near]
        f = self.table.features[int(self.row_ids[near])]
        counts = np.array([f.get(n, 0.0) for n in self.names], dtype=float)
        for d in np.flatnonzero(r != c):
            counts += np.where(self.corrects[d], self.delta[d, c[d]] - self.delta[d, r[d]], 0.0)
        return {**f, **dict(zip(self.names, np.maximum(counts, 0.0).tolist(), strict=True))}

    def time(self, config: Mapping[str, str]) -> float:
        return self.base * math.exp(float(self.answer(indices(config)[None])[2][0]))

    def spread(self, config: Mapping[str, str]) -> float | None:
        """The measured relative half-width of the configuration's recorded code, None if new."""
        row = self.answer(indices(config)[None])[0][0]
        return self.table.spreads[int(self.row_ids[row])] if row >= 0 else None

    @cached_property
    def _everywhere(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.answer(whole_space())

    def optimum(self) -> tuple[float, float]:
        """The best time of the whole space, and the best without the residual draws."""
        row, _, log = self._everywhere
        plain = np.where(row >= 0, log, self._additive(self.reduce(whole_space())))
        return self.base * math.exp(float(log.min())), self.base * math.exp(float(plain.min()))

    def optimum_spread(self) -> float:
        """The relative half-width of the optimum's 95% interval as it was measured: its recorded
        row's, or, for a new code, the table's median (nothing measured it)."""
        row, _, log = self._everywhere
        spreads = [s for s in self.table.spreads if s is not None]
        best = int(row[int(np.argmin(log))])
        own = self.table.spreads[int(self.row_ids[best])] if best >= 0 else None
        return own if own is not None else statistics.median(spreads) if spreads else 0.0

    def reach(self, fraction: float = 0.9) -> dict:
        """Where `fraction` of the optimum's gain is to be had: the share of the space's
        configurations that reach it, and that share and the best gain (over the optimum's)
        outside the codes of recorded rows of several options.  Such a row's neighbours are
        answered from the one-option effects (no faster than the helpful ones together), so where
        the optimum is such a row, its basin (the configurations of its code) is what a search
        must hit: the table's dense measurements do not reach that row's neighbourhood."""
        row, _, log = self._everywhere
        gain = np.expm1(-log)
        best = float(gain.max())
        multi = (self.reduce(self.rows) != 0).sum(axis=1) >= 2
        in_multi = np.where(row >= 0, multi[np.maximum(row, 0)], False)
        near = gain >= fraction * best
        return {"optimum_gain": best, "share": float(near.mean()),
                "share_outside_multi_rows": float((near & ~in_multi).mean()),
                "best_outside_multi_rows": float(gain[~in_multi].max()) / best if best > 0 else 1.0}


class CompiledLandscape(Landscape):
    """A landscape whose codes and features come from compiling the table's program (module
    docstring, `--sources`): a configuration of a recorded row's code takes that row's time and
    spread; one of a code not recorded, the landscape's answer for the first configuration of
    that code measured."""

    def __init__(self, table: Table, name: str, pooled: Mapping[int, np.ndarray] | None,
                 program: corpus_record.Program, meta: Mapping, work: Path) -> None:
        super().__init__(table, name, pooled)
        self.program, self.kernel, self.arch, self.work = program, meta["kernel"], meta["arch"], work
        self.recorded = {code: i for i, code in reversed(list(enumerate(table.codes)))}
        self.spreads = {code: sp for code, sp in reversed(list(zip(table.codes, table.spreads, strict=True)))
                        if sp is not None}  # a code's rows: the first that has one
        self._compiled: dict[str, tuple[str, dict[str, float]] | None] = {}
        self._ptx: dict[tuple[str, ...], tuple[Path, str]] = {}  # one nvcc -ptx per PTX-level options
        self._times: dict[str, float] = {}

    def _compile(self, config: Mapping[str, str]) -> tuple[str, dict[str, float]] | None:
        # As `indices` reads it: option names or `CUDA:` keys.
        full = {d.key: config.get(d.key, config.get(d.name, DEFAULT)) for d in SPACE.dimensions}
        key = config_key(full)
        if key not in self._compiled:
            build = corpus_record.compile_all(
                self.program.path(self.program.entry["kernel_source"]), self.program.dir,
                self.program.nvcc_args, SPACE.dimensions, [full],
                self.work / f"c{len(self._compiled)}", self.arch, 1, made=self._ptx)[0]
            found = None if build.error else corpus_record.kernel_code(build, self.kernel)
            self._compiled[key] = (corpus_record.short_code(found[0]), found[1]) if found else None
        return self._compiled[key]

    def compile(self, config: Mapping[str, str]) -> tuple[str, dict[str, float]]:
        # A failed compile (none in the corpus's tables) is answered by the rules.
        return self._compile(config) or super().compile(config)

    def time(self, config: Mapping[str, str]) -> float:
        compiled = self._compile(config)
        if compiled is None:
            return super().time(config)
        if (row := self.recorded.get(compiled[0])) is not None:
            return self.table.times[row]
        return self._times.setdefault(compiled[0], super().time(config))

    def spread(self, config: Mapping[str, str]) -> float | None:
        compiled = self._compile(config)
        return self.spreads.get(compiled[0]) if compiled else None

    @property
    def compiles(self) -> int:
        return len(self._compiled)


def sources_for(path: Path, sources: Path | None) -> tuple[corpus_record.Program, dict] | None:
    """The table's program in the `--sources` manifest, and the table's JSON; None if not there."""
    if sources is None:
        return None
    meta = json.loads(path.with_suffix(".json").read_text())
    programs = {p.name: p for p in corpus_record.load_manifests([sources / "manifest.json"])}
    program = programs.get(f"{meta['project']}__{meta['program']}")
    return (program, meta) if program is not None else None


def residuals(land: Landscape, reduced: np.ndarray) -> dict[int, np.ndarray]:
    """Per sign class of the additive prediction, the normalised residuals (log ratio less the
    prediction, over S0 + the sum of |effects|) of the rows of two reduced options or more."""
    several = (reduced != 0).sum(axis=1) >= 2
    c = reduced[several]
    additive = land._additive(c)
    z = (land.log[several] - additive) / land._scale(c)
    klass = _class(additive)
    return {k: np.sort(z[klass == k]) for k in (HELPFUL, NEUTRAL, HARMFUL)}


def table_paths(corpus: Path = CORPUS, count: int | None = None) -> list[Path]:
    """The corpus's tables; `count` of them spread over the sorted list (a quick run)."""
    paths = sorted(corpus.glob("*.csv"))
    if count is not None and count < len(paths):
        paths = [paths[round(i * (len(paths) - 1) / max(1, count - 1))] for i in range(count)]
    return paths


def pooled_residuals(paths: Sequence[Path]) -> dict[int, np.ndarray]:
    """Every table's normalised residuals, per class (the fallback of a table with too few)."""
    out: dict[int, list[np.ndarray]] = {HELPFUL: [], NEUTRAL: [], HARMFUL: []}
    for path in paths:
        land = Landscape(load_table(path), path.stem)
        for k, z in land.own.items():
            out[k].append(z)
    return {k: np.sort(np.concatenate(v)) if v else np.zeros(0) for k, v in out.items()}


# -- the search on a landscape ---------------------------------------------------------------
def _search(land: Landscape, strategy: Strategy, budget: int, ahead: int) -> tuple[list[float], list[Trial]]:
    """Times measured, in order, and the trials, by a strategy in an open context through `tune`'s
    loop (loop.drive: the budget in distinct codes, the candidate bound, vetting, compiling
    ahead): compiling answers the landscape's code and features, measuring its time."""
    table = land.table
    spreads = [s for s in table.spreads if s is not None]
    typical = statistics.median(spreads) if spreads else None
    times: list[float] = []

    def compile_(config: Config) -> Candidate:
        code, features = land.compile(config)
        return Candidate(config, code, features)

    def measure(config: Config, code: str) -> Measured:
        times.append(t := land.time(config))
        spread = land.spread(config)
        return Measured(t / land.base, t < land.base, typical if spread is None else spread)

    proposals = drive(strategy, SPACE, budget, compile_, measure, baseline_code=land.base_code,
                      baseline_features=table.features[table.baseline], compile_ahead=ahead)
    return times, proposals.history()[0]


def _peer(land: Landscape, name: str, budget: int, seed: int) -> list[float]:
    """A peer's measured times, through the same loop (benchmarks/peers.py's PeerStrategy)."""
    dims = {n: list(v) for n, v in zip(NAMES, VALUES, strict=True)}
    strategy = PeerStrategy(name, PEERS[name], dims, budget, seed,
                            lambda labels: {f"CUDA:{n}": v for n, v in labels.items()},
                            lambda trial: land.base * (trial.ratio or math.inf))
    try:
        return _search(land, strategy, budget, 0)[0]
    finally:
        strategy.close()


# -- priors left out of the table's project, cached ------------------------------------------
def prior_for(project: str, paths: Sequence[Path], cache_dir: Path) -> Path:
    """A prior fitted (search/prior.py) on the tables of every project but `project`, as
    prior_validation does; the model file is cached under a digest of what it was fitted on."""
    training = [p for p in paths if read_table(p).project != project]
    digest = hashlib.sha256(json.dumps([FORMAT, list(FEATURES), PARAMS, ROUNDS]).encode())
    for p in training:
        digest.update(p.name.encode() + p.read_bytes() + p.with_suffix(".json").read_bytes())
    path = cache_dir / f"prior-without-{project}-{digest.hexdigest()[:16]}.txt"
    if not path.is_file():
        cache_dir.mkdir(parents=True, exist_ok=True)
        tables = [read_table(p) for p in training]
        write(fit(tables), tables, path)  # the model file and its JSON (format 2: an ensemble)
    return path


class _MemoPrior(Prior):
    """A prior whose predictions are remembered per configuration and features (the model's
    scout and propose rank the same pool at each step): the same answers, computed once."""

    def predict_interval(self, configs: Sequence[Mapping[str, str]],
                         features: Sequence[Mapping[str, float] | None], base: Mapping[str, float],
                         abstain: bool = True) -> tuple[np.ndarray, np.ndarray]:
        memo: dict[tuple, tuple[float, float]] = self.__dict__.setdefault("_memo", {})
        # Features are the table's own objects (a row's, or the nearest row's): their identity is theirs.
        keys = [(config_key(c), id(f) if f else 0, id(base), abstain)
                for c, f in zip(configs, features, strict=True)]
        todo = [i for i, k in enumerate(keys) if k not in memo]
        if todo:
            mean, sd = super().predict_interval([configs[i] for i in todo], [features[i] for i in todo], base,
                                                abstain)
            memo.update((keys[i], (float(m), float(s))) for i, m, s in zip(todo, mean, sd, strict=True))
        return (np.array([memo[k][0] for k in keys], dtype=float),
                np.array([memo[k][1] for k in keys], dtype=float))


def _load_prior(path: Path) -> Prior:
    loaded = load(path)
    if loaded is None:
        raise RuntimeError(f"the cached prior {path} did not load: remove it to fit it again")
    return _MemoPrior(loaded.booster, loaded.meta, path)


# -- the evaluation ----------------------------------------------------------------------------
OURS = ("model", "model-noprior", "random")


def _fraction(base: float, optimum: float, times: Sequence[float]) -> float:
    gain = base - optimum
    return (base - min([base, *times])) / gain if gain > 0 else 1.0


def _phases(history: Sequence[Trial]) -> list[list]:
    """Per measured trial: phase, options set, ratio (what the record shows of the failure)."""
    return [[t.phase, len([v for v in t.config.values() if v != DEFAULT]), round(t.ratio, 4)]
            for t in history if t.ratio is not None]


Job = tuple[Path, dict[int, np.ndarray], Path | None, list[int], int, list[str], int, Path | None]


def evaluate_table(job: Job) -> dict:
    """One table: every strategy at every budget and seed (peers and random once at the largest
    budget, read at each from the prefix of their run, as prior_validation does)."""
    path, pooled, prior_path, budgets, seeds, strategies, ahead, sources = job
    started = time.process_time()
    found = sources_for(path, sources)
    land = (CompiledLandscape(load_table(path), path.stem, pooled, *found,
                              Path(tempfile.mkdtemp(prefix=f"open-eval-{path.stem}-")))
            if found else Landscape(load_table(path), path.stem, pooled))
    optimum, plain = land.optimum()
    base = land.base
    best_row = min(land.table.times)
    out: dict = {"table": path.stem, "project": read_table(path).project,
                 "optimum_gain": base / optimum - 1, "optimum_gain_without_residuals": base / plain - 1,
                 "table_optimum_gain": base / best_row - 1, "optimum_spread": land.optimum_spread(),
                 "at": {}, "phases": {}, "unavailable": {}}
    prior = _load_prior(prior_path) if prior_path is not None else None
    top = max(budgets)
    base_features = land.table.features[land.table.baseline]
    for name in strategies:
        runs: dict[str, list[float]] = {str(b): [] for b in budgets}
        try:
            for seed in range(seeds):
                if name in ("model", "model-noprior"):
                    for b in budgets:
                        # As tune makes it: the prior where the space and the baseline's features allow.
                        strategy = (search_strategy("model", seed, SPACE, base_features, lambda: prior)[0]
                                    if name == "model" else make_strategy("model", seed))
                        times, history = _search(land, strategy, b, ahead)
                        runs[str(b)].append(_fraction(base, optimum, times))
                        # Each budget's search is one of its own (screening takes half of it).
                        out.setdefault("traces", {}).setdefault(name, {}).setdefault(str(b), []).append(
                            _phases(history))
                        if b == top:
                            out["phases"].setdefault(name, []).append(_phases(history))
                    continue
                if name == "random":
                    times, _ = _search(land, make_strategy("random", seed), top, 0)
                else:
                    times = _peer(land, name, top, seed)
                for b in budgets:
                    runs[str(b)].append(_fraction(base, optimum, times[:b]))
        except PeerUnavailable as exc:
            out["unavailable"][name] = str(exc)
            continue
        out["at"][name] = runs
    out["borrowed_features"] = land.borrowed
    if isinstance(land, CompiledLandscape):
        out["compiled"] = land.compiles
        shutil.rmtree(land.work, ignore_errors=True)
    out["cpu_s"] = round(time.process_time() - started, 1)
    return out


def beyond_noise(result: dict, fraction: float) -> bool:
    """Whether a search that reached `fraction` of the optimum's gain stopped short of it by more
    than the optimum's own measured 95% half-width: a shortfall inside it, the measurements that
    made the landscape could not tell from none (an optimum that is one noisy row among 80)."""
    optimum = 1 / (1 + result["optimum_gain"])
    found = 1 - fraction * (1 - optimum)
    return found / optimum - 1 > result["optimum_spread"]


def summary(results: Sequence[dict], budgets: Sequence[int], min_gain: float = 0.01) -> list[str]:
    """Per strategy and budget: the median over kernels of the median fraction over seeds, the
    share of kernels whose median is short of 0.90 and, where the results hold the optimum's
    spread, of those short by more than it (`beyond_noise`)."""
    methods = list(dict.fromkeys(m for r in results for m in r["at"]))
    lines = []
    for label, chosen in (("all tables", results),
                          (f"tables whose optimum gains >= {100 * min_gain:g}%",
                           [r for r in results if r["optimum_gain"] >= min_gain])):
        lines.append(f"{label} ({len(chosen)}): median over kernels of the fraction of the optimum's gain "
                     "(median over seeds); share of kernels short of 0.90 (and of those, short by more "
                     "than the optimum's measured 95% half-width: 'beyond')")
        spread = all("optimum_spread" in r for r in chosen)  # not in records made before it was kept
        width = 24 + 12 * spread
        lines.append(f"{'method':16}" + "".join(f"{'budget ' + str(b):>{width}}" for b in budgets))
        for m in methods:
            cells = []
            for b in budgets:
                values = [statistics.median(r["at"][m][str(b)]) for r in chosen if m in r["at"]]
                if not values:
                    cells.append(f"{'-':>{width}}")
                    continue
                short = sum(v < 0.90 for v in values) / len(values)
                cells.append(f"{f'{statistics.median(values):.3f}  {100 * short:.0f}% short':>24}")
                if spread:
                    ran = [r for r in chosen if m in r["at"]]
                    beyond = sum(v < 0.90 and beyond_noise(r, v) for r, v in zip(ran, values, strict=True))
                    cells.append(f"{f'{100 * beyond / len(values):.0f}% beyond':>12}")
            lines.append(f"{m:16}" + "".join(cells))
        lines.append("")
    return lines


def failure_lines(results: Sequence[dict]) -> list[str]:
    """What the model measured per phase: options set and the share measured slower than the
    baseline (>= 1%), over every table and seed at the largest budget."""
    lines = ["per phase at the largest budget: measured configurations, median options set, share >= 1% "
             "slower than the baseline, median ratio"]
    for name in dict.fromkeys(m for r in results for m in r["phases"]):
        by_phase: dict[str, list[tuple[int, float]]] = {}
        for r in results:
            for run in r["phases"].get(name, []):
                for phase, options, ratio in run:
                    by_phase.setdefault(phase, []).append((options, ratio))
        for phase, rows in sorted(by_phase.items()):
            slower = sum(ratio >= 1.01 for _, ratio in rows) / len(rows)
            lines.append(f"  {name:14} {phase:10} {len(rows):6} {statistics.median(o for o, _ in rows):5g} "
                         f"{100 * slower:5.0f}% {statistics.median(r for _, r in rows):8.4f}")
    return lines


# -- how well the landscape answers rows it did not see ----------------------------------------
def _spearman(a: Sequence[float], b: Sequence[float]) -> float:
    from scipy.stats import spearmanr  # type: ignore[import-untyped]

    if len(a) < 3 or len(set(a)) < 2 or len(set(b)) < 2:
        return math.nan
    return float(spearmanr(a, b).statistic)


def judge(paths: Sequence[Path]) -> dict:
    """Each multi-option row of each table left out in turn and answered by the landscape of the
    rest (residual pools of the other tables as the fallback): its code (a recorded code named
    right or wrong; a new code where the code was recorded in another row, or truly new) and its
    time (rank correlation per table, absolute error, how often the 10-90% band of the draw holds
    it, and the precision of a predicted gain)."""
    own = {p: Landscape(load_table(p), p.stem).own for p in paths}
    codes: dict[str, int] = {}
    per_table: dict[str, float] = {}
    rows: list[tuple[float, float, bool, bool]] = []  # predicted, measured, new code, in its band
    features: list[tuple[Mapping[str, float], ...]] = []  # new codes: nearest row's, estimated, measured
    for path in paths:
        table = load_table(path)
        pooled = {k: np.concatenate([own[q][k] for q in paths if q != path])
                  for k in (HELPFUL, NEUTRAL, HARMFUL)}
        tb = table.times[table.baseline]
        predicted, actual = [], []
        for i, config in enumerate(table.rows):
            if sum(v != DEFAULT for v in config.values()) < 2:
                continue
            land = Landscape(table, path.stem, pooled, leave_out=i)
            x = indices(config)[None]
            row, _, log = land.answer(x)
            measured = math.log(table.times[i] / tb)
            if row[0] >= 0:
                kind = "recorded, right" if table.codes[int(land.row_ids[row[0]])] == table.codes[i] else \
                    "recorded, wrong"
                held = True
            else:
                elsewhere = table.codes[i] in {c for j, c in enumerate(table.codes) if j != i}
                kind = "new, though recorded in another row" if elsewhere else "new, right"
                c = land.reduce(x)
                additive, scale = land._additive(c)[0], land._scale(c)[0]
                pool = land.pool[int(_class(np.array([additive]))[0])]
                lo, hi = (np.quantile(pool, [0.1, 0.9]) if (c != 0).sum() >= 2 and len(pool) else (0.0, 0.0))
                held = bool(additive + lo * scale <= measured <= additive + hi * scale)
                near = table.features[int(land.row_ids[land.nearest_row(c[0])])]
                features.append((near, land.estimated_features(c[0]), table.features[i]))
            codes[kind] = codes.get(kind, 0) + 1
            predicted.append(float(log[0]))
            actual.append(measured)
            rows.append((float(log[0]), measured, bool(row[0] < 0), held))
        per_table[path.stem] = _spearman(predicted, actual)
    p, m, new, band = (np.array(v) for v in zip(*rows, strict=True))
    gain = p <= math.log(0.99)
    faster, slower = (float(x.mean()) if gain.any() else None
                      for x in (m[gain] <= math.log(0.99), m[gain] >= math.log(1.01)))
    rhos = [r for r in per_table.values() if math.isfinite(r)]
    return {
        "rows": len(rows), "codes": codes,
        "spearman_per_table_median": statistics.median(rhos),
        "spearman_per_table_quartiles": list(np.quantile(rhos, [0.25, 0.75])),
        "spearman_pooled": _spearman(list(p), list(m)),
        "spearman_new_codes_pooled": _spearman(list(p[new]), list(m[new])),
        "abs_error_median": float(np.median(np.abs(p - m))),
        "abs_error_new_codes_median": float(np.median(np.abs(p[new] - m[new]))),
        "abs_error_new_codes_p90": float(np.quantile(np.abs(p[new] - m[new]), 0.9)),
        "band_10_90_holds_new_codes": float(band[new].mean()),
        "predicted_gain_ge_1pct": int(gain.sum()),
        "predicted_gain_measured_faster_ge_1pct": faster,
        "predicted_gain_measured_slower_ge_1pct": slower,
        "features_new_codes": {way: _feature_errors([(f[k], f[2]) for f in features])
                               for k, way in ((0, "nearest row"), (1, "estimated"))},
        "per_table_spearman": per_table,
    }


def _feature_errors(pairs: Sequence[tuple[Mapping[str, float], Mapping[str, float]]]) -> dict:
    """How answered features match the measured ones on new codes: registers, whether the code
    spills (what the spill rule reads) and the instruction count."""
    def get(f: Mapping[str, float], name: str) -> float:
        return f.get(f"all:{name}", 0.0)
    spilling = [p for p in pairs if get(p[1], "spill_bytes") > 0]
    registers = [abs(get(a, "registers") - get(m, "registers")) for a, m in pairs]
    instructions = [abs(get(a, "instructions") / max(get(m, "instructions"), 1.0) - 1) for a, m in pairs]
    return {
        "registers_abs_error_mean": float(np.mean(registers)),
        "registers_abs_error_p90": float(np.quantile(registers, 0.9)),
        "spills_or_not_right": float(np.mean([(get(a, "spill_bytes") > 0) == (get(m, "spill_bytes") > 0)
                                              for a, m in pairs])),
        "spilling_codes": len(spilling),
        "spilling_codes_answered_spilling": float(np.mean([get(a, "spill_bytes") > 0 for a, _ in spilling]))
        if spilling else None,
        "instructions_rel_error_mean": float(np.mean(instructions)),
        "instructions_rel_error_p90": float(np.quantile(instructions, 0.9)),
    }


def judge_lines(j: dict) -> list[str]:
    q1, q3 = j["spearman_per_table_quartiles"]
    lines = [f"{j['rows']} multi-option rows, each left out and answered by the rest of its table",
             "code: " + ", ".join(f"{k} {v}" for k, v in sorted(j["codes"].items())),
             f"rank correlation of answered and measured log ratios: per table median "
             f"{j['spearman_per_table_median']:.3f} [{q1:.2f}, {q3:.2f}], pooled {j['spearman_pooled']:.3f}, "
             f"new codes pooled {j['spearman_new_codes_pooled']:.3f}",
             f"absolute error of the log ratio: median {j['abs_error_median']:.4f}; new codes median "
             f"{j['abs_error_new_codes_median']:.4f}, 90th percentile {j['abs_error_new_codes_p90']:.4f}",
             f"new codes whose measurement lies in the 10-90% band of the residual draw: "
             f"{100 * j['band_10_90_holds_new_codes']:.0f}% (80% if calibrated)"]
    if j["predicted_gain_ge_1pct"]:
        lines.append(f"answered >= 1% faster: {j['predicted_gain_ge_1pct']} rows, of which "
                     f"{100 * j['predicted_gain_measured_faster_ge_1pct']:.0f}% measured >= 1% faster and "
                     f"{100 * j['predicted_gain_measured_slower_ge_1pct']:.0f}% >= 1% slower")
    for way, e in j["features_new_codes"].items():
        caught = e["spilling_codes_answered_spilling"]
        lines.append(f"features of the new codes, {way}: registers off by "
                     f"{e['registers_abs_error_mean']:.1f} (mean; 90th percentile "
                     f"{e['registers_abs_error_p90']:g}), spilling or not right on "
                     f"{100 * e['spills_or_not_right']:.0f}%, {e['spilling_codes']} codes that spill "
                     f"answered spilling on {'-' if caught is None else f'{100 * caught:.0f}%'}, "
                     f"instructions off by {100 * e['instructions_rel_error_mean']:.1f}% (mean; 90th "
                     f"percentile {100 * e['instructions_rel_error_p90']:.1f}%)")
    return lines


def reach(paths: Sequence[Path], pooled: Mapping[int, np.ndarray], against: Path | None,
          fraction: float = 0.9) -> tuple[list[dict], list[str]]:
    """`Landscape.reach` per table, beside the fractions a search reached (`against`: a NAME.jsonl
    of this evaluation, its 'model' runs), and what a random search's draws would hit."""
    reached = {}
    if against is not None:
        reached = {(r := json.loads(line))["table"]: r["at"].get("model", {})
                   for line in against.read_text().splitlines()}
    rows, lines = [], [f"{'table':58s} {'optimum':>8s} {'share >= ' + str(fraction):>14s} "
                       f"{'outside multi':>14s} {'best outside':>12s} {'random hits @10/@20':>20s} model @20"]
    for q in paths:
        r = {"table": q.stem, **Landscape(load_table(q), q.stem, pooled).reach(fraction)}
        r["random_hits"] = {b: 1 - (1 - r["share"]) ** b for b in (10, 20)}
        r["model"] = reached.get(q.stem, {})
        rows.append(r)
        model = ", ".join(f"{x:.2f}" for x in r["model"].get("20", []))
        lines.append(f"{q.stem[:58]:58s} {100 * r['optimum_gain']:7.1f}% {100 * r['share']:13.2f}% "
                     f"{100 * r['share_outside_multi_rows']:13.2f}% {r['best_outside_multi_rows']:12.2f} "
                     f"{r['random_hits'][10]:9.2f} {r['random_hits'][20]:9.2f}  {model}")
    lone = [r for r in rows if r["share_outside_multi_rows"] == 0]
    lines += ["", f"{len(lone)} of {len(rows)} tables reach {fraction:.2f} of their optimum's gain only "
              f"in the basin of a recorded row of several options"]
    if reached:
        short = [r for r in rows if r["model"].get("20") and min(r["model"]["20"]) < fraction]
        lines.append(f"the model short of {fraction:.2f} at 20 (a seed or more) on {len(short)} tables, "
                     f"{sum(r in lone for r in short)} of them such tables: "
                     + ", ".join(r["table"] for r in short if r in lone))
    return rows, lines


def _commit() -> str:
    import subprocess

    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).parent)
    return proc.stdout.strip() or "unknown (not a git checkout)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.open_eval",
                                description=(__doc__ or "").split("\n")[0])
    p.add_argument("--corpus", type=Path, default=CORPUS)
    p.add_argument("--prior-corpus", type=Path,
                   help="the tables the priors are fitted on, each without the project of the table "
                        "searched (default: --corpus; the corpus where --corpus holds dense_h100's tables)")
    p.add_argument("--tables", type=int, help="this many tables, spread over the corpus (a quick run)")
    p.add_argument("--only", nargs="+", metavar="STEM",
                   help="these tables only (file stems); the landscapes still pool every table's residuals")
    p.add_argument("--min-gain", type=float, default=0.0,
                   help="only the tables whose landscape optimum gains at least this (0.01: 1%%): a gain "
                        "below the noise is none to find, and its fraction is a coin's")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--budgets", type=int, nargs="+", default=[10, 20])
    p.add_argument("--strategies", nargs="+", default=["model", "random", "optuna-tpe", "smac"],
                   choices=[*OURS, *PEERS])
    p.add_argument("--compile-ahead", type=int, default=5,
                   help="configurations compiled ahead per evaluation, at most (default 5; live, "
                        "where the scout compiles while the GPU measures, six stores had 1.3-3.8: "
                        "results/search/open/README.md)")
    p.add_argument("--sources", type=Path,
                   help="a corpus_record manifest's folder (manifest.json and the programs' sources): "
                        "the tables of its programs are compiled, not answered by the rules")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", type=Path, default=OUT, help="where NAME.json and NAME.txt go")
    p.add_argument("--name", default="open_eval")
    p.add_argument("--cache", type=Path, default=PRIOR_CACHE,
                   help="fitted priors, by a digest of their training tables")
    p.add_argument("--judge", action="store_true", help="judge the landscape on held-out rows instead")
    p.add_argument("--reach", action="store_true",
                   help="where each landscape's near-optimal configurations lie, instead of a search")
    p.add_argument("--against", type=Path, help="with --reach: a NAME.jsonl whose 'model' fractions to show")
    p.add_argument("--resume", action="store_true", help="keep the tables already in NAME.jsonl")
    p.add_argument("--report-only", action="store_true",
                   help="write NAME.json and NAME.txt from the tables in NAME.jsonl, running none")
    args = p.parse_args(argv)
    if args.sources is not None and not (args.sources / "manifest.json").is_file():
        p.error(f"--sources {args.sources}: no manifest.json there (corpus_record's manifest of programs)")
    command = "python -m benchmarks.open_eval " + " ".join(argv if argv is not None else sys.argv[1:])
    paths = table_paths(args.corpus, args.tables)
    if args.only:
        if unknown := set(args.only) - {q.stem for q in paths}:
            p.error(f"--only names tables not in {args.corpus}: {', '.join(sorted(unknown))}")
        paths = [q for q in paths if q.stem in args.only]
    all_paths = table_paths(args.corpus)
    pooled = pooled_residuals(all_paths)  # the landscapes' residual draws (0.3 s)
    if args.min_gain > 0:
        paths = [q for q in paths if (land := Landscape(load_table(q), q.stem, pooled)).base
                 >= (1 + args.min_gain) * land.optimum()[0]]
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    if args.reach:
        rows, found = reach(paths, pooled, args.against)
        lines = [f"$ {command}", f"commit {_commit()}, {len(paths)} tables", *found]
        (args.out / f"{args.name}.json").write_text(
            json.dumps({"command": command, "tables": rows}, indent=1) + "\n")
    elif args.judge:
        j = judge(paths)
        lines = [f"$ {command}", f"commit {_commit()}, {len(paths)} tables", *judge_lines(j)]
        (args.out / f"{args.name}.json").write_text(json.dumps({"command": command, **j}, indent=1) + "\n")
    else:
        # Each table's result is appended as it comes (NAME.jsonl): --resume skips those done.
        partial = args.out / f"{args.name}.jsonl"
        done = ({(r := json.loads(line))["table"]: r for line in partial.read_text().splitlines()}
                if (args.resume or args.report_only) and partial.is_file() else {})
        if args.report_only:
            paths = [q for q in paths if q.stem in done]
        elif not args.resume:
            partial.write_text("")
        results = [done[q.stem] for q in paths if q.stem in done]
        todo = [q for q in paths if q.stem not in done]
        projects = {q: read_table(q).project for q in all_paths}
        wanted = sorted({projects[q] for q in todo}) if "model" in args.strategies else []
        training = table_paths(args.prior_corpus) if args.prior_corpus else all_paths
        with ProcessPoolExecutor(args.jobs) as pool:
            # Fitted in workers: LightGBM's OpenMP threads here would hang the workers forked after.
            priors = dict(zip(wanted, pool.map(prior_for, wanted, [training] * len(wanted),
                                               [args.cache] * len(wanted)), strict=True))
        jobs = [(q, pooled, priors.get(projects[q]), args.budgets, args.seeds, args.strategies,
                 args.compile_ahead, args.sources) for q in todo]
        with ProcessPoolExecutor(args.jobs) as pool:
            for r in pool.map(evaluate_table, jobs):
                results.append(r)
                with partial.open("a") as f:
                    f.write(json.dumps(r) + "\n")
                top = str(max(args.budgets))
                shown = ", ".join(f"{m} {statistics.median(v[top]):.2f}" for m, v in r["at"].items())
                print(f"{r['table']}: optimum {100 * r['optimum_gain']:.1f}% ({r['cpu_s']} s): {shown}",
                      file=sys.stderr, flush=True)
        unavailable = {m: why for r in results for m, why in r["unavailable"].items()}
        gains = [r["optimum_gain"] for r in results]
        plain = [r["optimum_gain_without_residuals"] for r in results]
        recorded = [r["table_optimum_gain"] for r in results]
        lines = [f"$ {command}", f"commit {_commit()}, {len(paths)} tables, {args.seeds} seeds, "
                 f"budgets {args.budgets}, compile-ahead {args.compile_ahead}"
                 + (f", compiled from {args.sources} where its programs are" if args.sources else ""),
                 f"optimum gain, median over tables: landscape {100 * statistics.median(gains):.2f}%, "
                 f"without the residual draws {100 * statistics.median(plain):.2f}%, best recorded row "
                 f"{100 * statistics.median(recorded):.2f}%",
                 *(f"{m} unavailable: {why}" for m, why in unavailable.items()), "",
                 *summary(results, args.budgets), *failure_lines(results)]
        (args.out / f"{args.name}.json").write_text(
            json.dumps({"command": command, "commit": _commit(), "results": results}, indent=1) + "\n")
    lines.append(f"wall {time.monotonic() - started:.0f} s")
    (args.out / f"{args.name}.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
