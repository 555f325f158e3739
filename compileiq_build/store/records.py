"""The record types the store keeps, owned here so that the store imports nothing that runs.

`run.measure` makes `Sample`s and `run.profiler` makes `KernelTime`s; both sit above the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Sample:
    """One measured value of one workload. ``cost`` is lower-is-better (seconds, or 1/rate)."""

    workload: str
    value: float | None  # as the benchmark reported it, in seconds for times
    cost: float | None
    wall_s: float
    exit_code: int | None
    error: str  # empty when the run is valid
    gpu: dict[str, Any] = field(default_factory=dict)  # state during the run
    printed: str = ""  # the value as the benchmark printed it (text outputs), not stored

    @property
    def ok(self) -> bool:
        return not self.error



@dataclass(frozen=True)
class KernelTime:
    workload: str  # the benchmark registration profiled
    kernel: str  # mangled, as in the SASS
    seconds: float  # over all its launches
    launches: int
    source: str = ""  # the tuned target's source that defines it, relative to the target's folder
    unit: str = ""  # the tuned target or group whose sources hold it ('' when none does)
