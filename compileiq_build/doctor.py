"""`doctor`: what is installed, which GPU, and what is missing with the command that fixes it."""

from __future__ import annotations

import json
from pathlib import Path

from compileiq_build import __version__, cmake_dir
from compileiq_build.machine import environment
from compileiq_build.project.workspace import Workspace

_FIXES = {
    "cmake": "python -m pip install cmake",
    "ninja": "python -m pip install ninja",
    "nvcc": "install the CUDA toolkit and put its bin folder on PATH (needed for CUDA targets only)",
    "c++": "install a C++ compiler, e.g. apt-get install g++",
    "cuobjdump": "python -m pip install nvidia-cuda-cuobjdump (machine-code dedup of CUDA candidates)",
    "nvdisasm": "python -m pip install nvidia-cuda-nvdisasm (machine-code dedup of CUDA candidates)",
    "ncu": "install Nsight Compute, part of the CUDA toolkit (where the GPU time goes; tune goes on without)",
}
_OPTIONAL = ("nvcc", "cuobjdump", "nvdisasm", "ncu")


def _build_dir(build_dir: Path) -> tuple[list[str], bool]:
    """Whether a build folder was configured with this CompileIQ module, and how to fix it."""
    from compileiq_build.errors import CompileIQError
    from compileiq_build.project.manifest import load_project

    fix = (f"configure it: cmake -S <source> -B {build_dir} -G Ninja "
           "-DCompileIQ_ROOT=$(python -m compileiq_build --cmake-dir)")
    try:
        project = load_project(build_dir)
    except CompileIQError as exc:
        return [f"build folder {build_dir}: PROBLEM: {exc}"], False
    manifest = json.loads(Workspace(build_dir).manifest.read_text())
    version = manifest.get("compileiq_version")
    if version != __version__:
        return [f"build folder {build_dir}: configured with CompileIQ {version}, this is {__version__}: "
                f"re-{fix[0].lower()}{fix[1:]}"], False
    targets = ", ".join(t.name for t in project.targets)
    return [f"build folder {build_dir}: CompileIQ {version} module found; tuned targets {targets}; "
            f"{len(project.benchmarks)} benchmark registrations"], True


def doctor(build_dir: Path | None = None) -> tuple[str, bool]:
    lines = [f"compileiq_build {__version__}", f"CMake module: {cmake_dir()}"]
    ok = True
    for name in ("cmake", "ninja", "nvcc", "c++", "cuobjdump", "nvdisasm", "ncu"):
        path = environment.find_tool(name)
        version = environment.tool_version(path)
        if version:
            lines.append(f"{name:6} {version} ({path})")
        else:
            lines.append(f"{name:6} MISSING: {_FIXES[name]}")
            ok = ok and name in _OPTIONAL
    gpus = environment.detect_gpus()
    for g in gpus:
        lines.append(f"GPU {g.index}: {g.name} ({g.arch_key}), driver {g.driver}, "
                     f"SM {g.sm_clock_mhz} MHz, {g.temperature_c} C")
    if not gpus:
        lines.append("GPU: none found by nvidia-smi (C++ targets can still be tuned)")
    if build_dir is not None:
        more, fine = _build_dir(build_dir)
        lines += more
        ok = ok and fine
    return "\n".join(lines), ok
