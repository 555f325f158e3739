"""What the measurements ran on: GPU, driver, CPU, compilers (provenance for results and toolchain)."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

_GPU_FIELDS = ("index", "name", "uuid", "driver_version", "compute_cap")
# State read with every run; names differ between drivers, so each is optional.
_STATE_FIELDS = ("clocks.sm", "clocks.mem", "temperature.gpu", "clocks_event_reasons.active")


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


def _query(smi: str, fields: tuple[str, ...]) -> list[list[str]] | None:
    try:
        proc = subprocess.run([smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    rows = [[p.strip() for p in line.split(",")] for line in proc.stdout.strip().splitlines()]
    return [r for r in rows if len(r) == len(fields)]


def detect_gpus() -> list[Gpu]:
    """GPUs that nvidia-smi sees; empty where there is none (or no driver)."""
    smi = shutil.which("nvidia-smi")
    rows = _query(smi, _GPU_FIELDS) if smi else None
    if not smi or not rows:
        return []
    state = _query(smi, _STATE_FIELDS) or []
    gpus = []
    for i, row in enumerate(rows):
        if not row[0].isdigit():
            continue
        extra = state[i] if i < len(state) else [""] * len(_STATE_FIELDS)
        gpus.append(Gpu(int(row[0]), *row[1:], *extra))
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
    """A JSON-ready record of the machine, stored with every tuning run."""
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
    path = path or shutil.which(name)
    if not path and name in ("nvcc", "cuobjdump", "nvdisasm", "ncu", "cu++filt"):
        # Where CMake looks for the toolkit, then NVIDIA's PyPI wheels (nvidia/cu*/bin).
        roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
        try:
            import nvidia

            roots += sorted(str(p) for base in nvidia.__path__ for p in Path(base).glob("cu*"))
        except ImportError:
            pass
        for root in filter(None, roots):
            if found := shutil.which(name, path=os.path.join(root, "bin")):
                return found
        if name == "ncu":  # Nsight Compute's own installs, newest first
            def version(folder: Path) -> list[int]:
                return [int(x) if x.isdigit() else -1 for x in folder.name.split(".")]

            for folder in sorted(Path("/opt/nvidia/nsight-compute").glob("*"), key=version, reverse=True):
                if found := shutil.which(name, path=str(folder)):
                    return found
    return path


def tool_version(tool: str | None) -> str:
    """The line of `tool --version` that names its version ('' when it does not run)."""
    if not tool:
        return ""
    try:
        proc = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    nvidia = Path(tool).name in ("nvcc", "cuobjdump", "nvdisasm", "ncu")  # their last line is the build
    return lines[-1] if nvidia and lines else (lines[0] if lines else "")
