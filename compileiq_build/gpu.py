"""GPU state while a benchmark runs, read through NVML (never changed: clocks are left alone).

A thread samples the GPU every 50 ms during the run and keeps the lowest SM
clock, the highest temperature and every clock-event (throttle) reason seen.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# NVML clock-event reasons that slow the GPU down (idle, application clocks and
# display clocks are not slowdowns).
SLOWDOWNS = {0x4: "software power cap", 0x8: "hardware slowdown", 0x20: "software thermal slowdown",
             0x40: "hardware thermal slowdown", 0x80: "power brake"}
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
                reasons = 0
                for r in readings:
                    reasons |= r[3]
                state.update(uuid=self.uuid, sm_clock_min_mhz=min(r[0] for r in readings),
                             sm_clock_max_mhz=max(r[0] for r in readings),
                             mem_clock_mhz=max(r[1] for r in readings),
                             temperature_max_c=max(r[2] for r in readings),
                             clock_event_reasons=reasons, readings=len(readings))


def slowdowns(state: dict[str, Any]) -> list[str]:
    """The slowdown reasons in a recorded state, in words."""
    reasons = int(state.get("clock_event_reasons", 0))
    return [text for bit, text in SLOWDOWNS.items() if reasons & bit]
