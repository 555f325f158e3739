"""The prior: what compiler options do to code like this, learned across kernels (LightGBM).

A LightGBM regression of log(cost ratio) to the project's flags, on three kinds of input: the
candidate's options (each a number or a category), its compiled code's features relative to the
baseline's (registers, occupancy, spills, instruction mix), and the baseline code's own features
(what kind of code it is).  `learn` fits it on the corpus (`benchmarks/corpus/`, one table per
kernel, in the replay format) and writes a model file in LightGBM's text format with a JSON file
beside it (feature names, what it was trained on); the package ships one (`data/prior.txt`).
The model-guided search takes it as the mean of its fit and orders screening by it.  Every row
is learnt twice, once without the candidate's code, so that a configuration not compiled yet is
predicted from its options and the baseline's code alone.

What it does not know (issue 42; benchmarks/prior_oop.py judges it out of project): the model is
an ensemble, one booster per group of tables (a project) left out of its training.  Their mean is
the prediction; its spread (`predict_interval`'s sd) holds their disagreement (an effect only one
project shows) and the error a spread booster expects where each member predicted the project it
did not see (options unlike, many options at once), scaled so that 95% of those errors fall
within 2 sd.  Where the predicted effect is within 2 sd or within the noise (2%), the prior
abstains: it predicts no effect (`confident`; `predict` returns 0 there).
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from compileiq_build.build.space import DEFAULT, Config, FlagSpace

SHIPPED = Path(__file__).parent / "data" / "prior.txt"
FORMAT = 2  # the encoding below and the ensemble; a model file of another format is not loaded
# Numeric options' values when not set: what the compiler does by default (nvcc 13 documentation).
NUMERIC_DEFAULTS = {"ptxas-O": 3.0, "register-usage-level": 5.0, "maxrregcount": 256.0,
                    "jump-table-density": 101.0}
# Options of several non-numeric values: categories, the default first.
CATEGORIES = {"dlcm": ("default", "cg", "cs", "lu", "cv", "ca"), "dscm": ("default", "cg", "cs", "wt", "wb")}
# On/off options; `allow-expensive-optimizations=false` turns a default-on pass off.
SWITCHES = ("allow-expensive-optimizations", "extra-device-vectorization", "restrict", "use_fast_math",
            "ftz", "prec-div", "prec-sqrt", "fmad")
OPTIONS = (*NUMERIC_DEFAULTS, *CATEGORIES, *SWITCHES)
# The code features read (codeinfo: `all:` totals over the kernels that take the time).
_COUNTED = ("ldg", "stg", "lds", "sts", "ldgsts", "ffma", "fmul", "fadd", "mufu", "imad", "bra")
KIND = ("instructions", "registers", "occupancy", "spills", "local", "smem", "constant",
        *(f"share_{op}" for op in _COUNTED))
CHANGE = ("registers", "occupancy", "instructions", "spills", "local",
          *(f"share_{op}" for op in _COUNTED))
# LightGBM's names (no ':' in them).
FEATURES = (*(f"opt_{o}" for o in OPTIONS), *(f"kind_{k}" for k in KIND), *(f"change_{c}" for c in CHANGE))
CLIP = math.log(1.1)  # log ratios above are counted as this, as the search counts them
PARAMS = {"objective": "regression", "learning_rate": 0.05, "num_leaves": 15, "min_data_in_leaf": 20,
          "feature_fraction": 0.8, "bagging_fraction": 0.8, "bagging_freq": 1, "lambda_l2": 1.0,
          "verbosity": -1, "seed": 0, "deterministic": True, "num_threads": 1}
ROUNDS = 300
# The inputs learnt from (FEATURES' prefixes; the others are left out of training, so never read)
# and the floor of the targets (a gain beyond it counts as it): benchmarks/prior_oop.py chose them.
INPUTS = ("opt_", "kind_", "change_")
FLOOR = -math.inf
NOISE = math.log(1.02)  # a predicted effect within it is no effect (as the search's noise)
# Between the members in the model file (LightGBM's text format holds one booster).
SEPARATOR = "\n# compileiq prior: next member\n"
# A single booster (format 1, or a benchmark's own) has no spread: sd 0.
NO_SPREAD = {"scale": 0.0, "least": 0.0}
# The share of the training rows' errors out of group that the spread's 2 sd hold: 97.5%, as on
# new projects it proved optimistic by a few points (benchmarks/prior_oop.py: 95% gave 88-90%).
WITHIN = 0.95


def _option(name: str, value: str) -> float:
    if name in NUMERIC_DEFAULTS:
        return NUMERIC_DEFAULTS[name] if value == DEFAULT else float(value)
    if name in CATEGORIES:
        values = CATEGORIES[name]
        return float(values.index(value)) if value in values else math.nan
    if name == "allow-expensive-optimizations":
        return 0.0 if value == "false" else 1.0
    return 0.0 if value == DEFAULT else 1.0


def _code(features: Mapping[str, float]) -> dict[str, float] | None:
    """The counts the prior reads, from `all:` totals (or a table's own totals); None if unknown."""
    def get(name: str) -> float:
        return float(features.get(f"all:{name}", features.get(name, 0.0)))

    instructions = get("instructions")
    if not features or instructions <= 0:
        return None
    registers = get("registers")
    out = {"instructions": math.log1p(instructions), "registers": registers,
           # Warps an SM can hold by registers alone (64K registers, 64 warps at most).
           "occupancy": min(64.0, 65536.0 / (32.0 * max(registers, 16.0))) / 64.0 if registers else math.nan,
           "spills": math.log1p(get("spill_bytes")), "local": (get("ldl") + get("stl")) / instructions,
           "smem": math.log1p(get("smem_bytes")), "constant": get("ldg.constant") / max(get("ldg"), 1.0)}
    out.update({f"share_{op}": get(op) / instructions for op in _COUNTED})
    return out


def encode(config: Mapping[str, str], features: Mapping[str, float] | None,
           base: Mapping[str, float]) -> list[float]:
    """The prior's inputs for one configuration (keys `<language>:<option>` or bare names), its
    code's features (None or {} when not compiled) and the baseline code's features."""
    names = {key.split(":", 1)[-1]: value for key, value in config.items()}
    row = [_option(o, names.get(o, DEFAULT)) for o in OPTIONS]
    kind = _code(base)
    row += [kind[k] if kind else math.nan for k in KIND]
    own = _code(features) if features else None
    row += [own[c] - kind[c] if own and kind else math.nan for c in CHANGE]
    return row


def options_set(config: Mapping[str, str]) -> int:
    """How many of the prior's options the configuration sets (keys as `encode`'s)."""
    return sum(key.split(":", 1)[-1] in OPTIONS and value != DEFAULT for key, value in config.items())


def confident(mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """Where the prior speaks: a predicted effect beyond 2 sd and beyond the noise (2%)."""
    return np.abs(mean) > np.maximum(2.0 * sd, NOISE)


@dataclass(frozen=True)
class Ensemble:
    """What `fit` makes: boosters each trained without one group of tables, then the booster of
    their spread (`_spread`; none for a single booster), and its calibration (`_interval`)."""

    members: tuple[Any, ...]
    calibration: Mapping[str, float]

    def interval(self, x: np.ndarray, options: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if len(self.members) == 1:
            return np.minimum(self.members[0].predict(x), CLIP), np.zeros(len(x))
        preds = np.array([np.asarray(m.predict(x), dtype=float) for m in self.members[:-1]])
        return _interval(preds, self.members[-1].predict(_spread_inputs(x, options)), self.calibration)

    @property
    def means(self) -> tuple[Any, ...]:
        """The boosters of the mean (the spread's left out)."""
        return self.members if len(self.members) == 1 else self.members[:-1]


@dataclass(frozen=True)
class Prior:
    """A loaded model: predictions of log(cost ratio), and what it was trained on."""

    booster: Any  # an Ensemble, or one lightgbm.Booster (no spread); lightgbm imported where used
    meta: Mapping[str, Any]
    path: Path

    @property
    def _ensemble(self) -> Ensemble:
        return self.booster if isinstance(self.booster, Ensemble) else Ensemble((self.booster,), NO_SPREAD)

    @property
    def label(self) -> str:
        """What the log and the report say of it."""
        return (f"{self.path.name} ({self.meta.get('kernels', '?')} kernels of "
                f"{len(self.meta.get('projects', []))} projects, {str(self.meta.get('digest', ''))[:8]})")

    def predict_interval(self, configs: Sequence[Mapping[str, str]],
                         features: Sequence[Mapping[str, float] | None], base: Mapping[str, float],
                         abstain: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Mean and sd of log(cost ratio) of each configuration, with its code's features where
        compiled.  Where it is not `confident`, the mean is 0 (it abstains: no effect, with its
        spread), unless `abstain` is False (the ensemble's mean, to rank by)."""
        if not configs:
            return np.zeros(0), np.zeros(0)
        x = np.array([encode(c, f, base) for c, f in zip(configs, features, strict=True)], dtype=float)
        mean, sd = self._ensemble.interval(x, np.array([options_set(c) for c in configs], dtype=float))
        return (np.where(confident(mean, sd), mean, 0.0) if abstain else mean), sd

    def predict(self, configs: Sequence[Mapping[str, str]], features: Sequence[Mapping[str, float] | None],
                base: Mapping[str, float]) -> np.ndarray:
        """log(cost ratio) of each configuration, with its code's features where compiled: the
        mean of `predict_interval` (0 where it abstains)."""
        return self.predict_interval(configs, features, base)[0]

    def contributions(self, config: Mapping[str, str], features: Mapping[str, float] | None,
                      base: Mapping[str, float]) -> dict[str, float]:
        """Each option the configuration sets: its share of the predicted log ratio against the
        project's flags (LightGBM's pred_contrib of the configuration less that of the baseline,
        the baseline's code known only where the configuration's is).  The code features' shares
        are summed as `code`, and those of options left as they were (interactions only) as
        `other options`: a prediction, not a measurement."""
        names = {key.split(":", 1)[-1]: value for key, value in config.items()}
        rows = [encode(config, features, base), encode({}, base if features else None, base)]
        x = np.array(rows, dtype=float)
        # The ensemble's mean is the members' mean: so are its contributions.
        contrib = np.mean([np.asarray(m.predict(x, pred_contrib=True)) for m in self._ensemble.means],
                          axis=0)
        out: dict[str, float] = {}
        for name, value in zip(FEATURES, contrib[0, :-1] - contrib[1, :-1], strict=True):
            key = "code"
            if name.startswith("opt_"):
                option = name.removeprefix("opt_")
                key = option if names.get(option, DEFAULT) != DEFAULT else "other options"
            out[key] = out.get(key, 0.0) + float(value)
        return out


def load(path: Path | None = None,
         warn: Callable[[str], None] = lambda text: warnings.warn(text, stacklevel=2)) -> Prior | None:
    """The model at `path` (default: the shipped one), or None with a warning that says why (missing,
    unreadable, of another format, lightgbm not installed): the search then starts without it."""
    path = path or SHIPPED
    meta_path = path.with_suffix(".json")
    if not path.is_file() or not meta_path.is_file():
        warn(f"no prior model at {path} (or its {meta_path.name}): the search starts without one; "
             f"`python -m compileiq_build learn` writes it")
        return None
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as exc:
        warn(f"the prior's {meta_path} is unreadable ({exc}): the search starts without a prior")
        return None
    if (meta.get("format") != FORMAT or meta.get("features") != list(FEATURES)
            or not isinstance(meta.get("calibration"), dict)):
        warn(f"the prior {path} was written for another version of compileiq_build (format "
             f"{meta.get('format')}): the search starts without it; `python -m compileiq_build learn` "
             f"writes a current one")
        return None
    try:
        import lightgbm

        members = tuple(lightgbm.Booster(model_str=text) for text in path.read_text().split(SEPARATOR))
    except ImportError:
        warn("lightgbm is not installed: the search starts without a prior")
        return None
    except Exception as exc:  # LightGBM raises its own error types for a broken file
        warn(f"the prior {path} could not be read ({exc}): the search starts without it")
        return None
    return Prior(Ensemble(members, {k: float(v) for k, v in meta["calibration"].items()}), meta, path)


# -- learning -------------------------------------------------------------------------------
@dataclass(frozen=True)
class KernelTable:
    """One kernel's measured configurations: options, code features, time (lower is better)."""

    name: str
    project: str
    configs: list[Config]
    features: list[dict[str, float]]
    times: list[float]
    baseline: int

    def log_ratios(self) -> np.ndarray:
        return np.minimum(np.log(np.asarray(self.times) / self.times[self.baseline]), CLIP)


def read_table(path: Path, project: str | None = None) -> KernelTable:
    """A table in the replay format (benchmarks/search_replay.py); the project is the JSON beside
    it's `project`, else the file name's part before `__`."""
    import pandas as pd

    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    if "time" not in frame.columns:
        raise ValueError(f"{path}: no 'time' column")
    dims = [c for c in frame.columns if c not in ("time", "code", "spread") and not c.startswith("feature:")]
    feats = [c for c in frame.columns if c.startswith("feature:")]
    configs = [{d: row[d] or DEFAULT for d in dims} for row in frame.to_dict("records")]
    features = [{f.removeprefix("feature:"): float(row[f]) for f in feats if row[f] != ""}
                for row in frame.to_dict("records")]
    times = [float(t) for t in frame["time"]]
    baseline = next((i for i, c in enumerate(configs) if all(v == DEFAULT for v in c.values())), 0)
    if not features[baseline] and "code" in frame.columns:  # a row of the baseline's code has them
        codes = list(frame["code"])
        features[baseline] = next((f for f, c in zip(features, codes, strict=True)
                                   if f and c == codes[baseline]), {})
    meta = path.with_suffix(".json")
    if project is None and meta.is_file():
        project = json.loads(meta.read_text()).get("project")
    return KernelTable(path.stem, project or path.stem.split("__", 1)[0], configs, features, times, baseline)


def _rows(tables: Sequence[KernelTable]) -> tuple[np.ndarray, ...]:
    """`training_rows`, with each row's table (index) and options set."""
    xs, ys, ws, of, k = [], [], [], [], []
    for i, table in enumerate(tables):
        base = table.features[table.baseline]
        y = table.log_ratios()
        ok = np.isfinite(y)
        for with_code in (True, False):
            xs += [encode(c, f if with_code else None, base)
                   for c, f, good in zip(table.configs, table.features, ok, strict=True) if good]
            k += [options_set(c) for c, good in zip(table.configs, ok, strict=True) if good]
        ys += [y[ok], y[ok]]
        ws.append(np.full(2 * int(ok.sum()), 1.0 / max(1, int(ok.sum()))))
        of.append(np.full(2 * int(ok.sum()), i))
    return (np.array(xs, dtype=float), np.concatenate(ys), np.concatenate(ws), np.concatenate(of),
            np.array(k, dtype=float))


def training_rows(tables: Sequence[KernelTable]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inputs, targets and weights: every row of every table twice (with and without its code's
    features), each table weighing the same whatever its size."""
    x, y, w, _, _ = _rows(tables)
    return x, y, w


def _booster(x: np.ndarray, y: np.ndarray, w: np.ndarray, inputs: Sequence[str], floor: float):
    import lightgbm

    x = np.where([f.startswith(tuple(inputs)) for f in FEATURES], x, math.nan)
    y = np.maximum(y, floor)
    categorical = [FEATURES.index(f"opt_{c}") for c in CATEGORIES]
    data = lightgbm.Dataset(x, y, weight=w / w.mean(), feature_name=list(FEATURES),
                            categorical_feature=categorical, free_raw_data=False)
    return lightgbm.train(PARAMS, data, num_boost_round=ROUNDS)


def _groups(tables: Sequence[KernelTable]) -> list[str]:
    """What each member leaves out: a project, where there are 3 or more; else one of up to 5
    folds of the tables (a corpus of one or two projects)."""
    if len({t.project for t in tables}) >= 3:
        return [t.project for t in tables]
    return [f"fold {i % min(5, len(tables))}" for i in range(len(tables))]


def _interval(preds: np.ndarray, spread: np.ndarray, calibration: Mapping[str, float]
              ) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sd of log(cost ratio) from the members' predictions (members x rows) and the
    spread model's (the error expected out of group, `_spread`): sd^2 = (`scale` x that)^2 + the
    members' variance (an effect only some groups show)."""
    mean = np.minimum(preds.mean(axis=0), CLIP)
    error = calibration["scale"] * np.maximum(spread, calibration["least"])
    return mean, np.sqrt(error**2 + preds.var(axis=0))


def _spread_inputs(x: np.ndarray, options: np.ndarray) -> np.ndarray:
    return np.hstack([x, options[:, None]])


def _spread(x: np.ndarray, error: np.ndarray, w: np.ndarray):
    """A booster of the absolute error out of group from the inputs and the options set: where
    the members erred on groups they had not seen (an option's effect that differs between
    projects, many options at once), the spread is wide.  Coarse (large leaves, few rounds)."""
    import lightgbm

    params = {**PARAMS, "num_leaves": 7, "min_data_in_leaf": 100}
    data = lightgbm.Dataset(x, error, weight=w / w.mean(), free_raw_data=False,
                            feature_name=[*FEATURES, "options_set"])
    return lightgbm.train(params, data, num_boost_round=ROUNDS // 3)


def _scale(error: np.ndarray, spread: np.ndarray, var: np.ndarray, w: np.ndarray, least: float) -> float:
    """The spread model's scale that puts WITHIN of the weighted rows' errors within 2 sd."""
    lo, hi = 0.1, 20.0
    for _ in range(40):
        mid = math.sqrt(lo * hi)
        sd = np.sqrt((mid * np.maximum(spread, least)) ** 2 + var)
        within = float((w * (error <= 2.0 * sd)).sum() / w.sum())
        lo, hi = (mid, hi) if within < WITHIN else (lo, mid)
    return hi


def fit(tables: Sequence[KernelTable], inputs: Sequence[str] = INPUTS, floor: float = FLOOR) -> Ensemble:
    """The prior's ensemble on these tables: one booster per group (`_groups`) left out, each
    table weighing the same, deterministic on one thread; and its spread: a booster of each
    row's error by the member that did not see its group (`_spread`), scaled (`_scale`) with the
    variance of the other members' predictions (with the held-out member's, it would grow with
    the error itself), each group's rows by a spread model that did not see it.  `inputs` and
    `floor`: see INPUTS (the benchmark's ablations change them)."""
    x, y, w, of, options = _rows(tables)
    groups = np.array(_groups(tables))[of]
    names = sorted(set(groups))
    members = tuple(_booster(x[groups != g], y[groups != g], w[groups != g], inputs, floor) for g in names)
    preds = np.array([m.predict(x) for m in members])
    own = np.array([names.index(g) for g in groups])
    others = np.ma.masked_array(preds, np.arange(len(members))[:, None] == own[None, :])
    var = np.ma.getdata(others.var(axis=0)) if len(members) > 2 else np.zeros(len(y))
    error = np.abs(y - np.minimum(preds[own, np.arange(len(y))], CLIP))
    z = _spread_inputs(np.where([f.startswith(tuple(inputs)) for f in FEATURES], x, math.nan), options)
    # Scaled on its own predictions of the groups it did not see, as it is used.
    held = np.zeros(len(y))
    for g in names:
        model = _spread(z[groups != g], error[groups != g], w[groups != g])
        held[groups == g] = model.predict(z[groups == g])
    least = NOISE / 4  # the spread model's least: a tree's leaf of no error is luck
    scale = _scale(error, held, var, w, least)
    return Ensemble((*members, _spread(z, error, w)), {"scale": scale, "least": least})


def write(ensemble: Ensemble, tables: Sequence[KernelTable], path: Path) -> dict[str, object]:
    """The model file (the members, SEPARATOR between them) and its JSON beside it; returns the
    metadata written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = SEPARATOR.join(m.model_to_string() for m in ensemble.members)  # the spread's last
    meta = {"format": FORMAT, "features": list(FEATURES), "kernels": len(tables),
            "projects": sorted({t.project for t in tables}), "rows": sum(len(t.times) for t in tables),
            "digest": hashlib.sha256(text.encode()).hexdigest(), "params": PARAMS, "rounds": ROUNDS,
            "members": sorted(set(_groups(tables))), "calibration": dict(ensemble.calibration),
            "inputs": list(INPUTS), "floor": FLOOR}
    path.write_text(text)
    path.with_suffix(".json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return meta


def for_space(space: FlagSpace) -> bool:
    """Whether the prior knows any of this space's options (C++ spaces it does not)."""
    return any(d.name in OPTIONS for d in space.dimensions)
