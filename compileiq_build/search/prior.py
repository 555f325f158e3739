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
FORMAT = 1  # the encoding below; a model file of another format is not loaded
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
          "verbosity": -1, "seed": 0, "deterministic": True, "num_threads": 2}
ROUNDS = 300


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


@dataclass(frozen=True)
class Prior:
    """A loaded model: predictions of log(cost ratio), and what it was trained on."""

    booster: Any  # lightgbm.Booster (imported only where a prior is used)
    meta: Mapping[str, Any]
    path: Path

    @property
    def label(self) -> str:
        """What the log and the report say of it."""
        return (f"{self.path.name} ({self.meta.get('kernels', '?')} kernels of "
                f"{len(self.meta.get('projects', []))} projects, {str(self.meta.get('digest', ''))[:8]})")

    def predict(self, configs: Sequence[Mapping[str, str]], features: Sequence[Mapping[str, float] | None],
                base: Mapping[str, float]) -> np.ndarray:
        """log(cost ratio) of each configuration, with its code's features where compiled."""
        if not configs:
            return np.zeros(0)
        x = np.array([encode(c, f, base) for c, f in zip(configs, features, strict=True)], dtype=float)
        return np.minimum(np.asarray(self.booster.predict(x), dtype=float), CLIP)

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
        contrib = np.asarray(self.booster.predict(x, pred_contrib=True))
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
    if meta.get("format") != FORMAT or meta.get("features") != list(FEATURES):
        warn(f"the prior {path} was written for another version of compileiq_build (format "
             f"{meta.get('format')}): the search starts without it; `python -m compileiq_build learn` "
             f"writes a current one")
        return None
    try:
        import lightgbm

        booster = lightgbm.Booster(model_file=str(path))
    except ImportError:
        warn("lightgbm is not installed: the search starts without a prior")
        return None
    except Exception as exc:  # LightGBM raises its own error types for a broken file
        warn(f"the prior {path} could not be read ({exc}): the search starts without it")
        return None
    return Prior(booster, meta, path)


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


def training_rows(tables: Sequence[KernelTable]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inputs, targets and weights: every row of every table twice (with and without its code's
    features), each table weighing the same whatever its size."""
    xs, ys, ws = [], [], []
    for table in tables:
        base = table.features[table.baseline]
        y = table.log_ratios()
        ok = np.isfinite(y)
        for with_code in (True, False):
            xs += [encode(c, f if with_code else None, base)
                   for c, f, good in zip(table.configs, table.features, ok, strict=True) if good]
        ys += [y[ok], y[ok]]
        ws.append(np.full(2 * int(ok.sum()), 1.0 / max(1, int(ok.sum()))))
    return np.array(xs, dtype=float), np.concatenate(ys), np.concatenate(ws)


def fit(tables: Sequence[KernelTable]):
    """A LightGBM booster trained on these tables (deterministic, two threads)."""
    import lightgbm

    x, y, w = training_rows(tables)
    categorical = [FEATURES.index(f"opt_{c}") for c in CATEGORIES]
    data = lightgbm.Dataset(x, y, weight=w * len(tables), feature_name=list(FEATURES),
                            categorical_feature=categorical, free_raw_data=False)
    return lightgbm.train(PARAMS, data, num_boost_round=ROUNDS)


def write(booster, tables: Sequence[KernelTable], path: Path) -> dict[str, object]:
    """The model file and its JSON beside it; returns the metadata written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = booster.model_to_string()
    meta = {"format": FORMAT, "features": list(FEATURES), "kernels": len(tables),
            "projects": sorted({t.project for t in tables}), "rows": sum(len(t.times) for t in tables),
            "digest": hashlib.sha256(text.encode()).hexdigest(), "params": PARAMS, "rounds": ROUNDS}
    path.write_text(text)
    path.with_suffix(".json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return meta


def for_space(space: FlagSpace) -> bool:
    """Whether the prior knows any of this space's options (C++ spaces it does not)."""
    return any(d.name in OPTIONS for d in space.dimensions)
