"""What `tune` (and `profile`, `demo`) is asked to do: the command line's options, as one dataclass.

Every stage that needs an option takes it from here, so the stages need not import tune.py.
As in scikit-build-core's settings, each field is the one place of its option: its default,
and in its metadata (`Option`) its flag, the validator that parses the flag's text, its help and
its group of --help.  cli.py builds the tune and demo parsers from `dataclasses.fields`, group
by group in the order of GROUPS.  Cheap to import (no numpy): the CLI imports it for --help.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from compileiq_build.errors import CompileIQError

# --help lists the options in these groups, in this order: the search, where it builds and
# measures, how it measures, and what the search starts from.
GROUPS = ("search", "where", "measuring", "start")

# The demo's own defaults.  Six candidates are few for the model's phases; staged's single
# changes found gemm's gain.
# The strategies a user can name; search/strategies/ holds a factory for each (a test checks both agree).
STRATEGIES = ("model", "staged", "random", "exhaustive", "survey")

DEMO_DEFAULTS: dict[str, Any] = {"budget": 6, "strategy": "staged"}


class Option(TypedDict, total=False):
    """A field's command line (a field without a flag has none).  A bool field is a switch that
    sets the other value; `help` is argparse's (%(default)s: the default, %% a percent sign)."""

    flag: str
    group: str  # one of GROUPS
    help: str
    type: Callable[[str], Any]  # parses and validates the flag's text
    metavar: str
    nargs: str
    choices: Sequence[str]
    exclusive: str  # the flags of fields naming the same word here exclude each other
    negation: tuple[str, str]  # a flag, and its help, listed first, that sets the default back


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def count(text: str) -> int:
    """A whole number, 0 or more."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 0 or more")
    return int(text)


def fraction(text: str) -> float:
    """A relative width between 0 and 1 (0.005 = 0.5%)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number like 0.005") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must lie between 0 and 1 (0.005 = 0.5%)")
    return value


def duration(text: str) -> float:
    """Seconds, or numbers with h/m/s: 90, 90s, 30m, 2h, 4m30s, 1h15m."""
    match = _DURATION.fullmatch(text.strip().lower())
    if not match or not any(match.groups()[1:]):
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 90s, 30m, 4m30s or 2h")
    sign, hours, minutes, seconds = match.groups()
    value = (3600 * float(hours or 0) + 60 * float(minutes or 0) + float(seconds or 0)) * (-1 if sign else 1)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"
_DURATION = re.compile(rf"(-)?(?:{_NUMBER}h)?(?:{_NUMBER}m)?(?:{_NUMBER}s?)?")


def gpu_list(text: str) -> tuple[int, ...]:
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() for p in parts) or len(set(parts)) != len(parts):
        raise argparse.ArgumentTypeError(f"expected GPU numbers separated by commas (0,1), got {text!r}")
    return tuple(int(p) for p in parts)


def resolved_path(text: str) -> Path:
    """A path, made absolute against the folder the command runs in."""
    return Path(text).resolve()


@dataclass
class TuneOptions:
    # The search.
    budget: int = field(default=20, metadata=Option(
        flag="--budget", group="search", type=positive_int,
        help="evaluations per target: distinct machine codes measured; a candidate whose code was "
        "measured before costs a compile only (default %(default)s)"))
    max_candidates: int | None = field(default=None, metadata=Option(
        flag="--max-candidates", group="search", type=positive_int, metavar="N",
        help="candidates compiled per target, at most (default 10 times the budget)"))
    time_limit: float | None = field(default=None, metadata=Option(
        flag="--time-limit", group="search", type=duration,
        help="end the run within this long (90s, 30m, 4m30s, 2h), validating and minimizing included: "
        "the search keeps the time they take, at most a quarter"))
    strategy: str = field(default="model", metadata=Option(
        flag="--strategy", group="search", choices=STRATEGIES,
        help="search strategy (default %(default)s; model: one-option moves, their combination, then "
        "a model of the measurements; survey: every one-option move, then a uniform sample, to map "
        "a space)"))
    targets: Sequence[str] = field(default=(), metadata=Option(
        flag="--targets", group="search", nargs="+", metavar="TARGET",
        help="tune only these targets or groups (<target>:<group>; a target names all its groups)"))
    dimensions: Sequence[str] = field(default=(), metadata=Option(
        flag="--dimensions", group="search", nargs="+", metavar="NAME",
        help="search only these dimensions of the space (names as `space` prints them)"))
    output: Path | None = field(default=None, metadata=Option(
        flag="--output", group="search", type=resolved_path,
        help="toolchain file to write (default: compileiq-toolchain.cmake in the project's source "
        "folder)"))
    max_stage: int = 3  # the space's options up to this stage (space.py); no flag
    # Where it builds and measures.
    jobs: int | None = field(default=None, metadata=Option(
        flag="--jobs", group="where", type=positive_int,
        help="candidates compiled at once, each in its own build tree, while the benchmarks of "
        "others run; shared among the GPUs (default: a quarter of the cores, at most 8)"))
    gpus: Sequence[int] = field(default=(), metadata=Option(
        flag="--gpus", group="where", type=gpu_list, metavar="LIST",
        help="GPUs to measure on, one worker each, as nvidia-smi numbers them: 0,1 (default: every "
        "GPU of the first one's kind that CUDA_VISIBLE_DEVICES allows)"))
    ray: str | None = field(default=None, metadata=Option(
        flag="--ray", group="where", metavar="ADDRESS",
        help="build and measure on the nodes of this Ray cluster, one worker per GPU ('local' starts "
        "one here; needs compileiq-build[ray] on every node, and the project at the same path on "
        "each); --jobs is then per worker (default 2)"))
    build_timeout: float | None = field(default=None, metadata=Option(
        flag="--build-timeout", group="where", type=duration,
        help="stop a candidate's build after this long (default: 20 times the baseline build, at "
        "least 5 minutes)"))
    # How it measures.
    repeats: int = field(default=5, metadata=Option(
        flag="--repeats", group="measuring", type=positive_int,
        help="paired candidate/baseline runs per workload, at least (default %(default)s)"))
    max_repeats: int = field(default=20, metadata=Option(
        flag="--max-repeats", group="measuring", type=positive_int,
        help="... and at most, while the comparison is undecided (default %(default)s)"))
    precision: float = field(default=0.005, metadata=Option(
        flag="--precision", group="measuring", type=fraction,
        help="stop pairing once the 95%% interval of the ratio is narrower than this, or once the "
        "candidate cannot beat the best so far by this much (relative: 0.01 = 1%%; default "
        "%(default)s)"))
    measure_time_cap: float = 300.0  # seconds per workload and candidate; no flag
    allow_numerics_change: bool = field(default=False, metadata=Option(
        flag="--allow-numerics-change", group="measuring",
        help="also try options that change floating-point results (fast math, ...)"))
    allow_host_specific: bool = field(default=False, metadata=Option(
        flag="--allow-host-specific", group="measuring",
        help="also try options tied to this machine's CPU (-march=native): the binaries then run "
        "only on CPUs like this one, and the toolchain file says so"))
    compile_ahead: int = field(default=5, metadata=Option(
        flag="--compile-ahead", group="measuring", type=count, metavar="N",
        help="CUDA targets: while the GPU measures, compile up to N configurations per evaluation "
        "started ahead, in as many trees as the candidates', for their machine code and features "
        "(default %(default)s; 0: off)"))
    profile: bool = field(default=True, metadata=Option(
        flag="--no-profile", group="measuring",
        help="do not profile the benchmarks' baseline with ncu before searching CUDA targets"))
    allow_shared_gpu: bool = field(default=False, metadata=Option(
        flag="--allow-shared-gpu", group="measuring",
        help="measure although another process holds the GPU (the report says so)"))
    # What the search starts from.
    prior: bool = field(default=True, metadata=Option(
        flag="--no-prior", group="start", exclusive="prior",
        help="start the model-guided search without the prior learned across kernels"))
    prior_path: Path | None = field(default=None, metadata=Option(
        flag="--prior", group="start", exclusive="prior", type=resolved_path, metavar="PATH",
        help="the prior's model file (default: BUILD_DIR/compileiq/prior.txt if `learn --add` wrote "
        "one, else the one shipped)"))
    seed: int = field(default=0, metadata=Option(
        flag="--seed", group="start", type=int,
        help="seed of the strategies' random draws (default %(default)s), mixed with each target's name "
        "so that targets draw differently: the configurations random "
        "proposes, survey's sample after its one-option moves, and the sample the model ranks in a "
        "large space (a small one it ranks whole); staged and exhaustive draw nothing, and the order "
        "of paired runs does not depend on it"))
    fresh: bool = field(default=False, metadata=Option(
        flag="--fresh", group="start", exclusive="fresh",
        help="discard the stored results of this build folder and start over",
        negation=("--resume", "continue the search stored in this build folder, as tune does "
                  "without the flag: what was measured is not measured again and counts against "
                  "--budget; an evaluation cut short is measured afresh")))

    def __post_init__(self) -> None:
        # Flags that contradict each other: said before anything is built.
        if self.max_repeats < self.repeats:
            raise CompileIQError(f"--max-repeats {self.max_repeats} is below --repeats {self.repeats}: "
                                 "--repeats is the least number of paired runs, --max-repeats the most. "
                                 f"Raise --max-repeats to {self.repeats} or more, or lower --repeats.")
