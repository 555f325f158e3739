"""Shared fixtures: real cmake, ninja, g++ and nvcc on small real projects."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from compileiq_build import cmake_dir, environment

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def pytest_collection_modifyitems(config, items):
    if environment.detect_gpus():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (nvidia-smi finds none)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cmake() -> str:
    path = environment.find_tool("cmake")
    assert path, "cmake is a dependency of compileiq-build and must be installed"
    return path


@pytest.fixture(scope="session")
def ninja() -> str:
    path = environment.find_tool("ninja")
    assert path, "ninja is a dependency of compileiq-build and must be installed"
    return path


@pytest.fixture(scope="session")
def nvcc() -> str:
    path = environment.find_tool("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
    if not path:
        pytest.skip("nvcc is not installed")
    return path


class Configure:
    def __init__(self, cmake: str, ninja: str) -> None:
        self.cmake = cmake
        self.ninja = ninja

    def __call__(self, source: Path, build: Path, *defines: str,
                 check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [self.cmake, "-S", str(source), "-B", str(build), "-G", "Ninja",
               f"-DCMAKE_MAKE_PROGRAM={self.ninja}", f"-DCompileIQ_ROOT={cmake_dir()}",
               "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", *defines]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if check:
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc

    def build(self, build: Path, *targets: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([self.ninja, "-C", str(build), *targets], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc


@pytest.fixture(scope="session")
def configure(cmake: str, ninja: str) -> Configure:
    return Configure(cmake, ninja)


@pytest.fixture
def cxx_project(tmp_path: Path) -> Path:
    """A copy of the C++ fixture project (its library is built at -O0 by the project)."""
    dest = tmp_path / "cxx_project"
    shutil.copytree(FIXTURES / "cxx_project", dest)
    return dest


def compile_commands(build: Path) -> dict[str, str]:
    """Source file name -> its compile command."""
    entries = json.loads((build / "compile_commands.json").read_text())
    return {Path(e["file"]).name: e["command"] for e in entries}
