"""`demo`: copy the bundled sample_project, configure it and tune it end to end."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import tempfile
from pathlib import Path

from compileiq_build import cmake_dir
from compileiq_build.errors import CompileIQError
from compileiq_build.machine import environment, process
from compileiq_build.options import TuneOptions
from compileiq_build.project.manifest import load_project
from compileiq_build.results.progress import Reporter
from compileiq_build.stages.tune import TuneResult, tune

CONFIGURE_TIMEOUT_S = 600  # CMake's CUDA checks take seconds; a hang must not take the whole demo


def sample_project_dir() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here / "sample_project", here.parent / "sample_project"):
        if (candidate / "CMakeLists.txt").is_file():
            return candidate
    raise CompileIQError("the bundled sample_project is missing; reinstall compileiq-build")


def demo(workdir: Path | None, options: TuneOptions, reporter: Reporter, command: str) -> TuneResult:
    """Without `workdir`, in a temporary folder removed at the end, whatever happens: the result
    then names no toolchain file."""
    if workdir is not None:
        return _demo(workdir.resolve(), options, reporter, command)
    with tempfile.TemporaryDirectory(prefix="compileiq-demo-") as folder:
        result = _demo(Path(folder).resolve(), options, reporter, command)
    return dataclasses.replace(result, toolchain=None)


def _demo(workdir: Path, options: TuneOptions, reporter: Reporter, command: str) -> TuneResult:
    source = workdir / "sample_project"
    build = workdir / "build"
    shutil.copytree(sample_project_dir(), source, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("build*", "compileiq-toolchain.cmake"))
    gpus = environment.detect_gpus()
    cmake, ninja = environment.find_tool("cmake"), environment.find_tool("ninja")
    if not cmake or not ninja:
        raise CompileIQError("cmake and ninja are needed: python -m pip install cmake ninja")
    cmd = [cmake, "-S", str(source), "-B", str(build), "-G", "Ninja",
           f"-DCMAKE_MAKE_PROGRAM={ninja}", f"-DCompileIQ_ROOT={cmake_dir()}"]
    if gpus:
        cmd.append(f"-DCMAKE_CUDA_ARCHITECTURES={gpus[0].arch}")
    else:
        cmd.append("-DSAMPLE_WITH_CUDA=OFF")  # nothing to run CUDA kernels on
    reporter.phase(f"configuring {source} in {build}")
    try:
        proc = process.run(cmd, timeout=CONFIGURE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise CompileIQError(f"configuring the sample project took over {CONFIGURE_TIMEOUT_S} s "
                             "and was stopped; run the cmake command by hand to see where it hangs") from None
    if proc.returncode != 0:
        raise CompileIQError(f"configuring the sample project failed:\n{proc.stdout[-2000:]}"
                             f"\n{proc.stderr[-3000:]}")
    project = load_project(build)
    language = "CUDA" if gpus else "CXX"
    targets = [t.name for t in project.targets if language in t.languages]
    reporter.note(f"{'GPU ' + gpus[0].name if gpus else 'no GPU'}: tuning the {language} targets "
                  f"{', '.join(targets)}")
    options = dataclasses.replace(options, targets=options.targets or targets,
                                  output=options.output or source / "compileiq-toolchain.cmake")
    return tune(build, options, reporter, command)
