"""What the measurements ran on: GPU, driver, CPU, compilers (provenance for results and toolchain)."""

from __future__ import annotations

import platform
import shutil
import subprocess
from dataclasses import asdict, dataclass

_GPU_FIELDS = ("name", "uuid", "driver_version", "compute_cap", "clocks.sm", "clocks.mem",
               "temperature.gpu", "clocks_throttle_reasons.active")


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    uuid: str
    driver: str
    compute_capability: str  # "9.0"
    sm_clock_mhz: str
    mem_clock_mhz: str
    temperature_c: str
    throttle_reasons: str

    @property
    def arch(self) -> str:
        """CUDA architecture number: "9.0" -> "90"."""
        return self.compute_capability.replace(".", "")

    @property
    def arch_key(self) -> str:
        return f"sm_{self.arch}"


def detect_gpus() -> list[Gpu]:
    """GPUs that nvidia-smi sees; empty where there is none (or no driver)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        proc = subprocess.run(
            [smi, f"--query-gpu=index,{','.join(_GPU_FIELDS)}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if proc.returncode != 0:
        return []
    gpus = []
    for line in proc.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == len(_GPU_FIELDS) + 1 and parts[0].isdigit():
            gpus.append(Gpu(int(parts[0]), *parts[1:]))
    return gpus


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe(gpus: list[Gpu]) -> dict[str, object]:
    """A JSON-ready record of the machine, stored with every tuning session."""
    return {
        "host": platform.node(),
        "machine": platform.machine(),
        "cpu": cpu_model(),
        "os": platform.platform(),
        "gpus": [asdict(g) for g in gpus],
    }


def find_tool(name: str) -> str | None:
    """cmake/ninja from their PyPI packages (dependencies of this one), else from PATH."""
    try:
        if name == "cmake":
            import cmake

            path = shutil.which("cmake", path=cmake.CMAKE_BIN_DIR)
        elif name == "ninja":
            import ninja

            path = shutil.which("ninja", path=ninja.BIN_DIR)
        else:
            path = None
    except (ImportError, AttributeError):
        path = None
    return path or shutil.which(name)
