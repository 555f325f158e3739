"""`doctor`: what is installed, which GPU, and what is missing with the command that fixes it."""

from __future__ import annotations

import subprocess

from compileiq_build import __version__, cmake_dir, environment

_FIXES = {
    "cmake": "python -m pip install cmake",
    "ninja": "python -m pip install ninja",
    "nvcc": "install the CUDA toolkit and put its bin folder on PATH (needed for CUDA targets only)",
    "c++": "install a C++ compiler, e.g. apt-get install g++",
}


def _version(tool: str | None) -> str:
    if not tool:
        return ""
    try:
        proc = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    return lines[-1] if "nvcc" in tool and lines else (lines[0] if lines else "")


def doctor() -> tuple[str, bool]:
    lines = [f"compileiq_build {__version__}", f"CMake module: {cmake_dir()}"]
    ok = True
    for name in ("cmake", "ninja", "nvcc", "c++"):
        path = environment.find_tool(name)
        version = _version(path)
        if version:
            lines.append(f"{name:6} {version} ({path})")
        else:
            lines.append(f"{name:6} MISSING: {_FIXES[name]}")
            ok = ok and name == "nvcc"
    try:
        import lightgbm

        lines.append(f"lightgbm {lightgbm.__version__}")
    except ImportError:
        lines.append("lightgbm MISSING: python -m pip install lightgbm")
        ok = False
    gpus = environment.detect_gpus()
    for g in gpus:
        lines.append(f"GPU {g.index}: {g.name} ({g.arch_key}), driver {g.driver}, "
                     f"SM {g.sm_clock_mhz} MHz, {g.temperature_c} C")
    if not gpus:
        lines.append("GPU: none found by nvidia-smi (C++ targets can still be tuned)")
    return "\n".join(lines), ok
