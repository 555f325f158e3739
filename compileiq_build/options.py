"""What `tune` (and `profile`, `demo`) is asked to do: the command line's options, as one dataclass.

Every stage that needs an option takes it from here, so the stages need not import tune.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from compileiq_build.racing import Sampling


@dataclass
class TuneOptions:
    budget: int = 20  # evaluations (distinct machine codes measured) per target
    max_candidates: int | None = None  # candidates compiled per target, at most; default 10x the budget
    time_limit: float | None = None  # seconds for the whole run: the search leaves time to validate
    strategy: str = "model"
    targets: Sequence[str] = ()
    output: Path | None = None
    jobs: int | None = None  # candidates compiled at once (each in its own build tree), all GPUs together
    gpus: Sequence[int] = ()  # indices of the GPUs to measure on; default all of the first one's kind
    ray: str | None = None  # a Ray cluster's address ("local": start one): workers on its nodes
    build_timeout: float | None = None  # seconds per candidate build; default 20x the baseline's
    repeats: int = 5  # paired runs per workload and candidate, at least
    max_repeats: int = 20  # ... and at most
    precision: float = 0.005  # stop pairing once the interval is this narrow (relative)
    measure_time_cap: float = 300.0  # seconds per workload and candidate
    allow_numerics_change: bool = False
    allow_host_specific: bool = False  # options like -march=native: binaries then need a CPU like this one
    allow_shared_gpu: bool = False  # measure although another process holds the GPU
    profile: bool = True  # profile each CUDA benchmark's baseline once with ncu (profile.py)
    compile_ahead: int = 5  # CUDA: configurations compiled ahead per evaluation of the budget (pipeline.py)
    max_stage: int = 3
    dimensions: Sequence[str] = ()  # only these dimensions (names as `space` prints them)
    fresh: bool = False
    seed: int = 0
    prior: bool = True  # the model learned across kernels (prior.py) steers the model-guided search
    prior_path: Path | None = None  # its file; default <build>/compileiq/prior.txt, else the shipped one

    def sampling(self) -> Sampling:
        """How the search pairs runs (validation and minimizing: twice as many)."""
        return Sampling(self.repeats, max(self.repeats, self.max_repeats), self.precision,
                        self.measure_time_cap)
