"""compileiq_build: tune the compiler flags of CUDA and C++ CMake targets by measuring them."""

from pathlib import Path

__version__ = "0.1.0"

__all__ = ["__version__", "cmake_dir"]


def cmake_dir() -> Path:
    """The folder holding CompileIQConfig.cmake and CompileIQ.cmake.

    Inside a wheel the files sit in the package; in a source checkout (and an
    editable install, which imports from it) they sit in the top-level cmake/.
    """
    here = Path(__file__).resolve().parent
    for candidate in (here / "cmake", here.parent / "cmake"):
        if (candidate / "CompileIQConfig.cmake").is_file():
            return candidate
    raise FileNotFoundError(f"CompileIQConfig.cmake not found next to {here}; reinstall compileiq-build")
