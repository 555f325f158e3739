"""Competing CPU load while CPU benchmarks are measured: the shared-GPU check's counterpart.

Other processes' CPU time over a window is the machine's busy time (/proc/stat) less this
process's own and its descendants' (builds, benchmarks): those finished (os.times) and those
running (/proc/<pid>/stat).  A CPU benchmark sharing its cores with that load
measures it as noise, or worse as a difference between candidate and baseline.
"""

from __future__ import annotations

import datetime
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BUSY_CORES = 0.5  # other processes' use, in cores on average over a window, that is reported
WINDOW_S = 5.0
MIN_WINDOW_S = 1.0  # a last window shorter than this is too short to judge


def _machine_busy_s(stat: Path = Path("/proc/stat")) -> float | None:
    """CPU seconds all processes have used since boot (every core), or None off Linux."""
    try:
        fields = stat.read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own_s() -> float:
    """CPU seconds of this process and all its descendants, finished (os.times) or running."""
    t = os.times()
    parents: dict[int, list[tuple[int, float]]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        # After the name: state, ppid, ..., utime (14th field of the line), stime, cutime, cstime.
        ticks = sum(int(v) for v in fields[11:15])
        seconds = ticks / os.sysconf("SC_CLK_TCK")
        parents.setdefault(int(fields[1]), []).append((int(stat.parent.name), seconds))
    running, todo = 0.0, [os.getpid()]
    while todo:
        for pid, seconds in parents.get(todo.pop(), []):
            running += seconds
            todo.append(pid)
    return t.user + t.system + t.children_user + t.children_system + running


def load_average() -> float | None:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class Busy:
    """A window in which other processes used the CPU."""

    started: float  # time.time()
    seconds: float
    cores: float  # other processes' CPU use, in cores, on average over the window
    load: float | None  # the load average at its end

    def text(self) -> str:
        when = datetime.datetime.fromtimestamp(self.started, datetime.UTC).strftime("%H:%M:%S")
        load = f", load average {self.load:.2f}" if self.load is not None else ""
        return (f"other processes used {self.cores:.1f} of {os.cpu_count()} CPU cores for "
                f"{self.seconds:.0f} s from {when} UTC{load}")


class CpuLoadMonitor:
    """Samples, every `window` seconds in a thread of its own, how much CPU other processes use;
    `on_busy` hears of each episode beyond BUSY_CORES as it begins (consecutive windows make one,
    in `busy`).  A context manager."""

    def __init__(self, on_busy: Callable[[Busy], None], window: float = WINDOW_S,
                 threshold: float = BUSY_CORES) -> None:
        self.on_busy, self.window, self.threshold = on_busy, window, threshold
        self.busy: list[Busy] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-load", daemon=True)
        # The open window: the machine's and our CPU seconds, and when, at its start.
        self._machine: float | None = None
        self._own, self._start, self._wall = 0.0, 0.0, 0.0

    def __enter__(self) -> CpuLoadMonitor:
        if _machine_busy_s() is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
            # The last, partial window counts too: a tune shorter than one window was not seen.
            if time.monotonic() - self._wall >= MIN_WINDOW_S:
                self._sample()

    def _run(self) -> None:
        self._machine, self._own, self._start, self._wall = (
            _machine_busy_s(), _own_s(), time.time(), time.monotonic())
        while not self._stop.wait(self.window):
            if not self._sample():
                return

    def _sample(self) -> bool:
        """Closes the window that began at the last sample; False off Linux."""
        machine, own, now = _machine_busy_s(), _own_s(), time.monotonic()
        if self._machine is None or machine is None:
            return False
        cores = max(0.0, (machine - self._machine) - (own - self._own)) / max(now - self._wall, 1e-6)
        if cores >= self.threshold:
            busy = Busy(self._start, now - self._wall, cores, load_average())
            last = self.busy[-1] if self.busy else None
            if last and busy.started - (last.started + last.seconds) < self.window:
                # The same episode goes on: one entry, its average over the whole of it.
                seconds = last.seconds + busy.seconds
                mean = (last.cores * last.seconds + cores * busy.seconds) / seconds
                self.busy[-1] = Busy(last.started, seconds, mean, busy.load)
            else:
                self.busy.append(busy)
                self.on_busy(busy)
        self._machine, self._own, self._start, self._wall = machine, own, time.time(), now
        return True


def cpu_load_lines(sessions: Sequence[tuple[int, float, str, dict[str, Any]]]) -> list[str]:
    """For the reports: what each stored session recorded of other processes' CPU load while
    it measured CPU benchmarks (tune's `cpu_load`, target -> its windows in words)."""
    lines = []
    for session, _, _, env in sessions:
        for target, windows in sorted((env.get("cpu_load") or {}).items()):
            lines.append(f"session {session}, {target}: {'; '.join(windows)}: its CPU benchmarks "
                         "hold that load as noise")
    return lines
