"""The committed toolchain file builds where compileiq_build is not installed (issue 41, items 1
and 3): the same flags on the same targets and groups as the module gives them, the project's
compileiq_* calls harmless, and names the file and the project no longer share said at configure."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import FIXTURES, compile_commands

from compileiq_build import cmake_dir
from compileiq_build.decide.selection import NoWinner, Winner, WorkloadGain
from compileiq_build.decide.stats import RatioEstimate
from compileiq_build.project.manifest import load_project
from compileiq_build.results.toolchain import Provenance, render, source_digests

PROV = Provenance("2026-12-05", "CPU", "none", (), "staged")
GAIN = (WorkloadGain("w", RatioEstimate(0.5, 0.4, 0.6, 5)),)
HOST = re.sub(r"[^a-z0-9_]", "_", platform.machine().lower())  # the module's key of this CPU
BARE = {"PATH": "/usr/bin:/bin"}  # a system python3 without compileiq_build, no venv


def _copy(fixture: str, tmp_path: Path) -> Path:
    """A copy of a fixture that loads CompileIQ optionally, as the README recommends."""
    dest = tmp_path / fixture
    shutil.copytree(FIXTURES / fixture, dest)
    cml = dest / "CMakeLists.txt"
    cml.write_text(cml.read_text().replace("find_package(CompileIQ CONFIG REQUIRED)",
                                           "find_package(CompileIQ CONFIG QUIET)"))
    return dest


def _toolchain(project: Path, winners: list[Winner], losers: list[NoWinner] = ()) -> Path:
    path = project / "compileiq-toolchain.cmake"
    path.write_text(render(winners, list(losers), PROV))
    return path


def _bare_configure(configure, project: Path, build: Path, toolchain: Path,
                    *defines: str) -> subprocess.CompletedProcess[str]:
    """Configure as a machine without the package does: no venv on PATH, no CompileIQ_ROOT, no
    package registry, run outside this checkout (python3 -m would import it from there)."""
    home = build.parent / "home"
    home.mkdir(exist_ok=True)
    assert subprocess.run(["python3", "-c", "import compileiq_build"], env=BARE, cwd=home,
                          capture_output=True).returncode != 0, "the system python3 must lack the package"
    return subprocess.run(
        [configure.cmake, "-S", str(project), "-B", str(build), "-G", "Ninja",
         f"-DCMAKE_MAKE_PROGRAM={configure.ninja}", f"-DCMAKE_TOOLCHAIN_FILE={toolchain}",
         "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF", *defines],
        capture_output=True, text=True, env={**BARE, "HOME": str(home)}, cwd=home)


def _same_commands(with_module: Path, bare: Path) -> dict[str, str]:
    """Every source's compile command of the two builds, equal up to the build folder."""
    a, b = compile_commands(with_module), compile_commands(bare)
    assert set(a) == set(b)
    for name in a:
        assert a[name].replace(str(with_module), "@") == b[name].replace(str(bare), "@"), name
    return b


def test_without_the_package_the_file_gives_the_tuned_target_its_flags(configure, tmp_path):
    project = _copy("cxx_project", tmp_path)
    toolchain = _toolchain(project, [Winner("saxpy", {"CXX": HOST}, "k", {"CXX": ("-O2", "-fno-math-errno")},
                                            GAIN, 3)])
    bare = project / "bare"
    proc = _bare_configure(configure, project, bare, toolchain)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "the compileiq_build package is not found here; the toolchain file applies its flags itself" in (
        proc.stdout)
    assert re.search(r"CompileIQ: saxpy \(CXX, \S+\) uses tuned flags: -O2 -fno-math-errno$", proc.stdout,
                     re.M)
    assert "Warning" not in proc.stderr, proc.stderr
    assert not (bare / "compileiq").exists()  # no manifest, no CTest tests: nothing but the flags
    # Exactly what the module gives: the tuned flags after the project's on saxpy.cpp alone.
    module = project / "module"
    configure(project, module, f"-DCMAKE_TOOLCHAIN_FILE={toolchain}")
    commands = _same_commands(module, bare)
    assert "-O0 -O2 -fno-math-errno" in commands["saxpy.cpp"]
    for other in ("untouched.cpp", "bench_saxpy.cpp"):
        assert "-O2" not in commands[other] and "-fno-math-errno" not in commands[other]
    configure.build(bare)


def test_without_the_package_groups_in_a_subdirectory_get_their_own_flags(configure, tmp_path):
    project = _copy("groups_project", tmp_path)
    toolchain = _toolchain(project, [
        Winner("kernels:alpha", {"CXX": HOST}, "k", {"CXX": ("-O1",)}, GAIN, 3),
        Winner("kernels:gamma", {"CXX": HOST}, "k", {"CXX": ("-O3", "-funroll-loops")}, GAIN, 3)])
    bare = project / "bare"
    proc = _bare_configure(configure, project, bare, toolchain)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    module = project / "module"
    configure(project, module, f"-DCMAKE_TOOLCHAIN_FILE={toolchain}")
    commands = _same_commands(module, bare)
    assert "-O1" in commands["alpha.cpp"] and "-O3" not in commands["alpha.cpp"]
    gamma = [name for name in commands if name not in ("alpha.cpp", "beta.cpp", "bench_kernels.cpp")]
    assert gamma and all("-O3 -funroll-loops" in commands[g] for g in gamma)
    for untuned in ("beta.cpp", "bench_kernels.cpp"):
        assert "-O1" not in commands[untuned] and "-O3" not in commands[untuned]
    configure.build(bare)


def test_without_the_package_cuda_groups_get_their_device_flags(configure, nvcc, tmp_path):
    project = _copy("cuda_groups_project", tmp_path)
    toolchain = _toolchain(project, [
        Winner("ops:scale", {"CUDA": "sm_90"}, "k", {"CUDA": ("--maxrregcount=64",)}, GAIN, 3),
        Winner("ops:rest", {"CUDA": "sm_90"}, "k", {"CUDA": ("--extra-device-vectorization",)}, GAIN, 3)])
    cuda = (f"-DCMAKE_CUDA_COMPILER={nvcc}", "-DCMAKE_CUDA_ARCHITECTURES=90")
    bare = project / "bare"
    proc = _bare_configure(configure, project, bare, toolchain, *cuda)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    module = project / "module"
    configure(project, module, f"-DCMAKE_TOOLCHAIN_FILE={toolchain}", *cuda)
    commands = _same_commands(module, bare)
    assert "--maxrregcount=64" in commands["scale.cu"] and "vectorization" not in commands["scale.cu"]
    for rest in ("reduce.cu", "copy.cu"):
        assert "--extra-device-vectorization" in commands[rest] and "maxrregcount" not in commands[rest]
    assert "maxrregcount" not in commands["bench_ops.cu"]
    configure.build(bare, "ops")


@pytest.mark.parametrize("bare", [False, True], ids=["module", "no-package"])
def test_names_the_file_and_the_project_no_longer_share_are_said(configure, tmp_path, bare):
    """A target renamed since tuning: the file's old name reaches nothing, the new one gets no
    flags; the configure says both, each once."""
    project = _copy("cxx_project", tmp_path)
    cml = project / "CMakeLists.txt"
    cml.write_text(cml.read_text().replace("saxpy STATIC", "saxpy2 STATIC").replace(
        "PRIVATE saxpy untouched", "PRIVATE saxpy2 untouched").replace("(saxpy PRIVATE", "(saxpy2 PRIVATE")
        .replace("compileiq_tune(saxpy ", "compileiq_tune(saxpy2 "))
    toolchain = _toolchain(project, [Winner("saxpy", {"CXX": HOST}, "k", {"CXX": ("-O2",)}, GAIN, 3)],
                           [NoWinner("untouched_old", {"CXX": HOST}, "no candidate beat the baseline")])
    build = project / "build"
    if bare:
        proc = _bare_configure(configure, project, build, toolchain)
    else:
        proc = configure(project, build, f"-DCMAKE_TOOLCHAIN_FILE={toolchain}", check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    message = " ".join(proc.stderr.split())
    assert ("CompileIQ: the toolchain file tunes saxpy, untouched_old, which this project does not mark "
            "with compileiq_tune() (renamed or removed since it was tuned?): those flags reach nothing. "
            "Tuned here: saxpy2.") in message, message
    assert ("CompileIQ: these tuned targets keep the project's flags, as the toolchain file has none for "
            "them here: saxpy2 (CXX) is not in the toolchain file: not tuned yet (tune --targets left it "
            "out), or marked for tuning or renamed since the file was written.") in message, message
    assert message.count("keep the project's flags") == 1
    assert message.count("which this project does not") == 1
    assert "-O2" not in compile_commands(build)["saxpy.cpp"]


def test_a_unit_kept_at_the_projects_flags_is_not_warned_about(cxx_project, configure):
    toolchain = _toolchain(cxx_project, [], [NoWinner("saxpy", {"CXX": HOST}, "no candidate beat it")])
    proc = configure(cxx_project, cxx_project / "build", f"-DCMAKE_TOOLCHAIN_FILE={toolchain}",
                     f"-DCompileIQ_ROOT={cmake_dir()}")
    assert "CompileIQ" not in proc.stderr, proc.stderr


def test_a_configure_warns_where_a_tuned_targets_sources_changed_since(configure, tmp_path):
    project = _copy("cxx_project", tmp_path)
    configure(project, project / "build")
    tuned = load_project(project / "build")
    assert next(t for t in tuned.targets if t.name == "saxpy").files == ("saxpy.cpp",)  # not saxpy.h
    toolchain = project / "compileiq-toolchain.cmake"
    toolchain.write_text(render([Winner("saxpy", {"CXX": HOST}, "k", {"CXX": ("-O2",)}, GAIN, 3)], [], PROV,
                                sources=source_digests(tuned, ["saxpy"])))
    text = toolchain.read_text()
    assert re.search(r"^set\(COMPILEIQ_SOURCES_saxpy \[=*\[[0-9a-f]{64}\]=*\]\)$", text, re.M)
    assert str(project) not in text
    changed = ("CMake Warning", "the sources of saxpy have changed since its flags were tuned",
               "python -m compileiq_build check BUILD_DIR")

    def configures() -> list[str]:
        """The stderr of a configure with the package and of one without it."""
        module = configure(project, project / "module", f"-DCMAKE_TOOLCHAIN_FILE={toolchain}")
        bare = _bare_configure(configure, project, project / "bare", toolchain)
        assert bare.returncode == 0, bare.stderr[-3000:]
        return [" ".join(module.stderr.split()), " ".join(bare.stderr.split())]

    assert not any(any(c in err for c in changed) for err in configures())  # as tuned: nothing said
    (project / "saxpy.h").write_text((project / "saxpy.h").read_text() + "// a header: not covered\n")
    assert not any(changed[1] in err for err in configures())
    (project / "saxpy.cpp").write_text((project / "saxpy.cpp").read_text() + "// edited\n")
    for err in configures():
        assert all(c in err for c in changed), err
        assert err.count("have changed since its flags were tuned") == 1  # untouched is not tuned


def test_a_groups_sources_are_its_own_files_relative_to_the_source_folder(configure, tmp_path):
    project = _copy("groups_project", tmp_path)
    configure(project, project / "build")
    tuned = load_project(project / "build")
    files = {t.name: t.files for t in tuned.targets}
    assert files == {"kernels:alpha": ("src/alpha.cpp",),
                     "kernels:gamma": ("src/gamma/gamma_add.cpp", "src/gamma/gamma_mul.cpp")}
    toolchain = project / "compileiq-toolchain.cmake"
    winners = [Winner(name, {"CXX": HOST}, "k", {"CXX": ("-O1",)}, GAIN, 3) for name in files]
    toolchain.write_text(render(winners, [], PROV, sources=source_digests(tuned, files)))
    (project / "src" / "beta.cpp").write_text((project / "src" / "beta.cpp").read_text() + "// untuned\n")
    (project / "src" / "gamma" / "gamma_mul.cpp").write_text("// gone\n")
    proc = _bare_configure(configure, project, project / "bare", toolchain)
    assert proc.returncode == 0, proc.stderr[-3000:]
    err = " ".join(proc.stderr.split())
    assert "the sources of kernels:gamma have changed" in err and "sources of kernels:alpha" not in err, err
