"""The package hands CMake its module folder, the way pybind11 and nanobind do."""

from __future__ import annotations

import ast
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from compileiq_build import __version__, cmake_dir


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "compileiq_build", *args],
                          capture_output=True, text=True)


def test_cmake_dir_prints_the_folder_with_both_files():
    proc = _cli("--cmake-dir")
    assert proc.returncode == 0
    folder = Path(proc.stdout.strip())
    assert folder == cmake_dir()
    assert (folder / "CompileIQConfig.cmake").is_file()
    assert (folder / "CompileIQ.cmake").is_file()


def test_version():
    proc = _cli("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"compileiq_build {__version__}"


def test_entry_points_for_scikit_build_core():
    for group in ("cmake.module", "cmake.prefix"):
        names = {ep.name: ep.value for ep in metadata.entry_points(group=group)}
        assert names.get("CompileIQ") == "compileiq_build.cmake", group


def _project(tmp_path: Path, loader: str) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "lib.cpp").write_text("int f() { return 1; }\n")
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.24)\nproject(p LANGUAGES CXX)\n"
        f"{loader}\nadd_library(lib STATIC lib.cpp)\ncompileiq_tune(lib LANGUAGES CXX)\n"
        "message(STATUS \"CompileIQ ${COMPILEIQ_VERSION}\")\n")
    return src


def test_find_package_with_compileiq_root(tmp_path, configure):
    src = _project(tmp_path, "find_package(CompileIQ 0.1 CONFIG REQUIRED)")
    proc = configure(src, tmp_path / "build")
    assert f"CompileIQ {__version__}" in proc.stdout
    assert (tmp_path / "build" / "compileiq" / "manifest.json").is_file()


def test_include_with_module_path(tmp_path, cmake, ninja):
    src = _project(tmp_path, "include(CompileIQ)")
    proc = subprocess.run([cmake, "-S", str(src), "-B", str(tmp_path / "b"), "-G", "Ninja",
                           f"-DCMAKE_MAKE_PROGRAM={ninja}", f"-DCMAKE_MODULE_PATH={cmake_dir()}"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert f"CompileIQ {__version__}" in proc.stdout


@pytest.mark.parametrize("wanted", ["1.0", "0.2", "0.0"])
def test_find_package_refuses_an_incompatible_version(tmp_path, configure, wanted):
    # 0.x releases: only the same minor version is compatible (0.1 is, in the test above).
    src = _project(tmp_path, f"find_package(CompileIQ {wanted} CONFIG REQUIRED)")
    proc = configure(src, tmp_path / "build", check=False)
    assert proc.returncode != 0
    said = " ".join(proc.stderr.split())  # CMake wraps its message
    assert f'package "CompileIQ" that is compatible with requested version "{wanted}"' in said, said
    assert f"CompileIQConfig.cmake, version: {__version__}" in said, said


def test_no_docstring_is_over_25_lines():
    """Docstrings say what the code does and why; history and figures go to benchmarks/results."""
    package = Path(__file__).resolve().parents[1] / "compileiq_build"
    offenders = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = len((ast.get_docstring(node) or "").splitlines())
                if lines > 25:
                    name = getattr(node, "name", "<module>")
                    offenders.append(f"{path.relative_to(package.parent)}:{name}: {lines} lines")
    assert not offenders, "docstrings over 25 lines:\n" + "\n".join(offenders)


def test_no_class_over_200_or_function_over_60_lines():
    """A newcomer reads a class or a function whole: the larger ones are split into stages."""
    package = Path(__file__).resolve().parents[1] / "compileiq_build"
    offenders = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                limit = 200
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                limit = 60
            else:
                continue
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > limit:
                offenders.append(f"{path.relative_to(package.parent)}:{node.name}: {lines} lines")
    assert not offenders, "over the limit (classes 200 lines, functions 60):\n" + "\n".join(offenders)
