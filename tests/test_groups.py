"""Groups of a target's sources (compileiq_tune ... SOURCES ... GROUP): real CMake, Ninja and g++
on a fixture whose tuned library is defined in a subdirectory, with two groups and one source
outside both."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, compile_commands

from compileiq_build.build.codeinfo import object_files
from compileiq_build.project.manifest import load_manifest


@pytest.fixture
def groups_project(tmp_path: Path) -> Path:
    dest = tmp_path / "groups_project"
    shutil.copytree(FIXTURES / "groups_project", dest)
    return dest


def test_a_candidate_of_one_group_rebuilds_only_that_groups_objects(groups_project, configure):
    build = groups_project / "build"
    configure(groups_project, build, "-DCOMPILEIQ_CANDIDATE_FLAGS=ON")
    configure.build(build)
    project = load_manifest(build / "compileiq" / "manifest.json")
    src = groups_project / "src"
    assert [(t.name, t.cmake_target, t.sources, t.source_counts) for t in project.targets] == [
        ("kernels:alpha", "kernels", (str(src / "alpha.cpp"),), {"CXX": 1}),
        ("kernels:gamma", "kernels", (str(src / "gamma/gamma_add.cpp"), str(src / "gamma/gamma_mul.cpp")),
         {"CXX": 2})]
    # Each group is measured with the benchmark that names it.
    assert [b.args[-1] for b in project.benchmarks_for("kernels:alpha")] == ["alpha"]
    assert [b.args[-1] for b in project.benchmarks_for("kernels:gamma")] == ["gammamul"]
    for unit, expected in (("kernels_gamma", ["gamma/gamma_add.cpp.o", "gamma/gamma_mul.cpp.o"]),
                           ("kernels_alpha", ["alpha.cpp.o"])):
        (build / "compileiq" / "candidate" / f"{unit}.CXX.opts").write_text("-O2\n")
        out = configure.build(build, "bench_kernels").stdout
        rebuilt = sorted(re.findall(r"Building CXX object src/CMakeFiles/kernels\.dir/(\S+)", out))
        assert rebuilt == expected and "Re-running CMake" not in out
    # The objects whose code a group's candidate is judged by: its own.
    gamma = project.target("kernels:gamma")
    objects = [p.relative_to(build / "src/CMakeFiles/kernels.dir").as_posix()
               for p in object_files(build, "kernels", gamma.sources)]
    assert objects == ["gamma/gamma_add.cpp.o", "gamma/gamma_mul.cpp.o"]
    assert len(object_files(build, "kernels")) == 4


def test_tune_two_groups_and_the_toolchain_reaches_exactly_their_sources(groups_project, configure):
    build = groups_project / "build"
    configure(groups_project, build)
    # The library's name selects both its groups.
    proc = subprocess.run([sys.executable, "-m", "compileiq_build", "tune", str(build), "--strategy",
                           "staged", "--budget", "2", "--repeats", "3", "--targets", "kernels"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # One workload per printed kernel line (a named group in REGEX); the project builds at -O0,
    # so -O2 and -O3 win for both groups.
    # The registration's name and arguments are shown once, then each case.
    assert re.search(r"kernels:gamma 1/2.*kernels\[100000 20 gammaadd gammamul\]: gammaadd \S+x .*; "
                     r"gammamul \S+x", proc.stderr)
    text = (groups_project / "compileiq-toolchain.cmake").read_text()
    for unit in ("kernels_alpha", "kernels_gamma"):
        assert re.search(rf"^set\(COMPILEIQ_FLAGS_{unit}_CXX_\w+\n  \[=\[-O[23]\]=\]", text, re.M), text
    # Tuning one group again (its search is done: it is decided again) keeps the other's flags.
    again = subprocess.run([sys.executable, "-m", "compileiq_build", "tune", str(build), "--strategy",
                            "staged", "--budget", "2", "--repeats", "3", "--targets", "kernels:alpha"],
                           capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-3000:]
    def flag_blocks(toolchain: str) -> list[str]:
        return re.findall(r"^set\(COMPILEIQ_FLAGS_\w+\n[^)]*\)", toolchain, re.M)

    assert len(flag_blocks(text)) == 2
    assert flag_blocks((groups_project / "compileiq-toolchain.cmake").read_text()) == flag_blocks(text)

    release, plain = groups_project / "release", groups_project / "plain"
    toolchain = groups_project / "compileiq-toolchain.cmake"
    configure(groups_project, release, f"-DCMAKE_TOOLCHAIN_FILE={toolchain}")
    configure(groups_project, plain)
    tuned, before = compile_commands(release), compile_commands(plain)
    units = {t.name: t for t in load_manifest(release / "compileiq" / "manifest.json").targets}
    for name, files in (("kernels:alpha", ["alpha.cpp"]),
                        ("kernels:gamma", ["gamma_add.cpp", "gamma_mul.cpp"])):
        flags = " ".join(units[name].applied_flags["CXX"])
        assert flags
        for f in files:
            assert tuned[f].replace(str(release), "") == before[f].replace(str(plain), "").replace(
                "-O0", f"-O0 {flags}")
    for other in ("beta.cpp", "bench_kernels.cpp"):
        assert tuned[other].replace(str(release), "") == before[other].replace(str(plain), "")
    configure.build(release)


def test_tuning_trees_follow_groups_added_after_they_were_configured(groups_project, configure):
    """The flow `profile` proposes: add its groups to the CMakeLists, configure, tune again. A tree
    configured before kept its old manifest, without the new group (found on ggml)."""
    from compileiq_build.build.trees import BuildTree
    from compileiq_build.project.manifest import load_project

    build = groups_project / "build"
    configure(groups_project, build)
    tree = BuildTree(load_project(build), build / "compileiq" / "work" / "baseline")
    tree.configure("")
    assert [t.name for t in tree.project.targets] == ["kernels:alpha", "kernels:gamma"]
    lists = groups_project / "CMakeLists.txt"
    lists.write_text(lists.read_text().replace(
        "compileiq_tune(kernels LANGUAGES CXX SOURCES gamma/*.cpp)",
        "compileiq_tune(kernels LANGUAGES CXX SOURCES gamma/gamma_add.cpp GROUP add)\n"
        "compileiq_tune(kernels LANGUAGES CXX SOURCES gamma/gamma_mul.cpp GROUP gamma)"))
    configure(groups_project, build)
    again = BuildTree(load_project(build), tree.path)
    again.configure("")
    assert sorted(t.name for t in again.project.targets) == ["kernels:add", "kernels:alpha", "kernels:gamma"]
    # Configured once more with nothing changed, the tree is reused as it is.
    stamp = (tree.path / "CMakeCache.txt").stat().st_mtime_ns
    BuildTree(load_project(build), tree.path).configure("")
    assert (tree.path / "CMakeCache.txt").stat().st_mtime_ns == stamp
