"""GPU state while a benchmark runs, read through NVML (never changed: clocks are left alone).

A thread samples the GPU every 50 ms during the run and keeps the lowest SM
clock, the highest temperature and every clock-event (throttle) reason seen.
"""

from __future__ import annotations

import datetime
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

# NVML clock-event reasons that slow the GPU down (idle, application clocks and
# display clocks are not slowdowns).
SLOWDOWNS = {0x4: "software power cap", 0x8: "hardware slowdown", 0x20: "software thermal slowdown",
             0x40: "hardware thermal slowdown", 0x80: "power brake"}
SLOWDOWN_BITS = sum(SLOWDOWNS)
_PERIOD_S = 0.05

try:
    import pynvml
except ImportError:  # nvidia-ml-py is a dependency; without it no state is recorded
    pynvml = None


def _device_index() -> int:
    """The GPU the benchmark sees first: CUDA_VISIBLE_DEVICES' first entry if it is a number."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return int(visible) if visible.isdigit() else 0


class GpuMonitor:
    """Opens NVML once; `watch()` records the state during a block."""

    def __init__(self, enabled: bool = True, index: int | None = None) -> None:
        self.handle: Any = None
        self.uuid = ""
        if pynvml is None or not enabled:
            return
        try:
            pynvml.nvmlInit()
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(_device_index() if index is None else index)
            self.uuid = str(pynvml.nvmlDeviceGetUUID(self.handle))
        except pynvml.NVMLError:
            self.handle = None

    @classmethod
    def disabled(cls) -> GpuMonitor:
        return cls(enabled=False)

    @property
    def available(self) -> bool:
        return self.handle is not None

    def _read(self) -> tuple[int, int, int, int]:
        h = self.handle
        return (pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
                pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
                pynvml.nvmlDeviceGetCurrentClocksEventReasons(h))

    @contextmanager
    def watch(self) -> Iterator[dict[str, Any]]:
        """Yields a dict filled, after the block, with the state seen during it."""
        state: dict[str, Any] = {}
        if not self.available:
            yield state
            return
        readings: list[tuple[int, int, int, int]] = []
        stop = threading.Event()

        def sample() -> None:
            while True:
                try:
                    readings.append(self._read())
                except pynvml.NVMLError:
                    return
                if stop.wait(_PERIOD_S):
                    return

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        try:
            yield state
        finally:
            stop.set()
            thread.join()
            if readings:
                state.update(uuid=self.uuid, **summarize(readings))


def summarize(readings: Sequence[tuple[int, int, int, int]]) -> dict[str, int]:
    """The state over a run's readings (SM clock, memory clock, temperature, clock-event
    reasons).  The SM clock while a slowdown reason was set is kept apart from the lowest of all:
    a benchmark's process idles the GPU at 345 MHz while it sets up, and live on ggml's flash
    attention the warning said "software power cap (SM clock down to 345 MHz)", the idle clock,
    where the capped clock was 1605-1935 MHz."""
    reasons = 0
    for r in readings:
        reasons |= r[3]
    slowed = [r[0] for r in readings if r[3] & SLOWDOWN_BITS]
    return dict(sm_clock_min_mhz=min(r[0] for r in readings), sm_clock_max_mhz=max(r[0] for r in readings),
                mem_clock_mhz=max(r[1] for r in readings), temperature_max_c=max(r[2] for r in readings),
                clock_event_reasons=reasons, readings=len(readings),
                **({"slowed_sm_clock_min_mhz": min(slowed)} if slowed else {}))


@dataclass(frozen=True)
class GpuProcess:
    """A process with a compute context on a GPU, as NVML lists it."""

    gpu: int
    pid: int
    name: str  # '' when the process is not visible from here (another container)
    memory_mib: int | None


def compute_processes(indices: Sequence[int]) -> list[GpuProcess]:
    """Other processes holding these GPUs; empty where NVML is not available."""
    if pynvml is None:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    found = []
    for index in indices:
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except pynvml.NVMLError:
            continue
        for p in procs:
            if p.pid == os.getpid():
                continue
            used = p.usedGpuMemory
            found.append(GpuProcess(index, p.pid, process_name(p.pid),
                                    used // 2**20 if isinstance(used, int) else None))
    return found


def process_name(pid: int) -> str:
    """The command line of `pid`, shortened ('' when /proc does not show it)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = f.read().split(b"\0")
    except OSError:
        return ""
    text = " ".join(w.decode(errors="replace") for w in words if w)
    return text if len(text) <= 80 else text[:77] + "..."


def shared_gpu_error(procs: Sequence[GpuProcess]) -> str:
    """Why measuring on these GPUs now would be wrong, and what to do."""
    listed = "; ".join(f"GPU {p.gpu}: pid {p.pid} ({p.name or 'not visible from here'}"
                       f"{f', {p.memory_mib} MiB' if p.memory_mib is not None else ''})" for p in procs)
    return (f"another process holds the GPU that tune would measure on: {listed}. Its work would "
            "be measured as noise, or as gains and losses. Wait for it to end, choose a free GPU "
            "with --gpus, or measure anyway with --allow-shared-gpu (the report then says so).")


def shared_gpu_lines(sessions: Sequence[tuple[int, float, str, dict[str, Any]]]) -> list[str]:
    """For the reports: the stored sessions (Store.sessions) that measured while other processes
    held the GPU (tune --allow-shared-gpu)."""
    lines = []
    for session, started, _, env in sessions:
        when = datetime.datetime.fromtimestamp(started, datetime.UTC).strftime("%Y-%m-%d %H:%M")
        for p in env.get("shared_gpu") or []:
            lines.append(f"warning: session {session} ({when} UTC) measured on GPU {p['gpu']} while pid "
                         f"{p['pid']} ({p['name'] or 'not visible from here'}) also used it: its "
                         "measurements hold that process's load as noise")
    return lines


def slowdowns(state: dict[str, Any]) -> list[str]:
    """The slowdown reasons in a recorded state, in words."""
    reasons = int(state.get("clock_event_reasons", 0))
    return [text for bit, text in SLOWDOWNS.items() if reasons & bit]
