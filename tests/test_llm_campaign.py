"""benchmarks/llm/campaign.py: the parts that run without a GPU and without ggml.

The compile-command diff is checked with real CMake and Ninja on a small project configured in
two folders, as the tool's trees are (seeding a tree is the tool's: tests/test_build_trees.py).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks.llm import campaign

DATA = Path(__file__).parent / "data"


def _configure(src: Path, build: Path, flags_file: Path) -> None:
    subprocess.run(["cmake", "-S", str(src), "-B", str(build), "-G", "Ninja",
                    f"-DFLAGS_FILE={flags_file}", "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"],
                   check=True, capture_output=True)


@pytest.fixture
def two_trees(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A library of two files, one of them reading its flags from a file of its tree (as a
    group's files read the tool's candidate file), configured in two folders."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.c").write_text("int a(int x) { return x * 3; }\n")
    (src / "g.c").write_text("int g(int x) { return x + 1; }\n")
    (src / "main.c").write_text("int a(int); int g(int);\nint main(void) { return a(1) + g(2) - 6; }\n")
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.24)\nproject(p C)\n"
        "add_executable(m main.c a.c g.c)\n"
        "set_property(SOURCE g.c APPEND PROPERTY COMPILE_OPTIONS @${FLAGS_FILE})\n"
        "set_property(SOURCE g.c APPEND PROPERTY OBJECT_DEPENDS ${FLAGS_FILE})\n")
    base, other = tmp_path / "work" / "baseline", tmp_path / "work" / "candidate-0"
    for tree in (base, other):
        tree.mkdir(parents=True)
        (tree / "g.opts").write_text("-O2\n")
        _configure(src, tree, tree / "g.opts")
    return src, base, other


def test_compile_commands_diff_names_differing_files_and_flags(two_trees: tuple[Path, Path, Path]) -> None:
    _, base, other = two_trees
    entries = json.loads((other / "compile_commands.json").read_text())
    for e in entries:
        if e["file"].endswith("a.c"):
            e["command"] += " --maxrregcount=32"
    (other / "compile_commands.json").write_text(json.dumps(entries))
    text = campaign.compile_commands_diff(base, other)
    assert text.splitlines()[0] == "3 compile commands in baseline, 3 in candidate-0"
    assert any(line.endswith("a.c: added --maxrregcount=32; removed -") for line in text.splitlines())
    assert not any(line.split(":")[0].endswith("main.c") for line in text.splitlines()[1:])


def test_the_case_regex_reads_every_case_of_test_backend_ops_perf() -> None:
    text = (DATA / "test_backend_ops_perf.txt").read_text()
    found = {m["name"].split("(")[0]: float(m["us"]) for m in campaign.CASE.finditer(text)}
    assert found == {"MUL_MAT": 321.38, "SOFT_MAX": 288.89, "ROPE": 12.25}


def test_ab_rows_call_a_gain_only_where_the_interval_excludes_one() -> None:
    base = [100.0 + 0.1 * i for i in range(10)]
    times = {("llm_x", "FASTER(x)"): {"baseline": base, "tuned": [v / 1.03 for v in base]},
             ("llm_x", "SAME(x)"): {"baseline": base, "tuned": base[5:] + base[:5]},
             ("llm_x", "ONE_SIDED(x)"): {"baseline": base}}
    rows = {r["case"]: r for r in campaign.ab_rows(times)}
    assert set(rows) == {"FASTER(x)", "SAME(x)"}
    assert rows["FASTER(x)"]["verdict"] == "faster"
    assert rows["FASTER(x)"]["speedup"] == pytest.approx(1.03)
    assert rows["FASTER(x)"]["speedup_low"] > 1.0
    assert rows["SAME(x)"]["verdict"] == "neutral"
    assert rows["SAME(x)"]["speedup_low"] <= 1.0 <= rows["SAME(x)"]["speedup_high"]


def test_search_ended_tells_the_budget_from_the_time_limit() -> None:
    log = ("   ggml-cuda:mmq: budget of 20 evaluations reached\n"
           "   ggml-cuda:fattn: its share of the time limit is used (2 targets were left)\n"
           "   ggml-cuda:rope: time limit reached\n"
           "   ggml-cuda:mmvq: strategy model stops: nothing left to propose\n")
    assert [m["group"] for m in campaign.SEARCH_ENDED.finditer(log)] == ["mmq", "mmvq"]


def test_a_folder_that_is_not_ggml_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        campaign.main(["--ggml", str(tmp_path), "--work", str(tmp_path / "w"), "--out", str(tmp_path / "o"),
                       "configure"])
    assert exc.value.code == 2
    assert "is not a ggml checkout (src/ggml-cuda/CMakeLists.txt is missing)" in capsys.readouterr().err


def test_resuming_writes_to_the_new_sittings_log(tmp_path: Path) -> None:
    """The resume line belongs to the sitting that starts: written to the last one's log, it
    replaced that committed log when the sitting's files were copied back."""
    committed = tmp_path / "results"
    committed.mkdir()
    (committed / campaign.STORE).write_bytes(b"")
    (committed / campaign.STATE).write_text(json.dumps(
        {"gpu": "", "profiled": {}, "searched": [], "sittings": [{"started": "", "log": "x", "ended": ""}]}))
    args = argparse.Namespace(ggml=str(tmp_path), work=str(tmp_path / "w"), out=str(tmp_path / "o"),
                              resume_from=str(committed))
    run = campaign.Campaign(args)
    run.restore()
    assert not (tmp_path / "o" / "ggml_llm_sitting1_log.txt").exists()
    assert "resuming from" in (tmp_path / "o" / "ggml_llm_sitting2_log.txt").read_text()


def test_ggml_copy_inside_this_repository_is_not_given_its_commit(tmp_path: Path) -> None:
    """ggml's configure runs `git rev-parse --short HEAD` in its source folder: its copy, with no
    history, lies inside this repository, and sitting 5's log said "ggml commit: 20c4bb5", this
    repository's.  The campaign's children look for no repository above the copies' folder."""
    if not shutil.which("git"):
        pytest.skip("needs git")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", str(tmp_path)], check=True)
    subprocess.run([*git, "-C", str(tmp_path), "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    outer = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "--short", "HEAD"], check=True,
                           capture_output=True, text=True).stdout.strip()
    args = argparse.Namespace(ggml=str(tmp_path / "ggml"), work=str(tmp_path / "w"), out=str(tmp_path / "o"),
                              resume_from=str(tmp_path / "none"))
    run = campaign.Campaign(args)
    copy = run.src / "ggml"
    copy.mkdir(parents=True)
    rc, text = run.run(["git", "rev-parse", "--short", "HEAD"], 60, cwd=copy)
    assert rc != 0 and outer not in text  # git's words depend on the locale; its answer does not


pytestmark = pytest.mark.skipif(not shutil.which("ninja") or not shutil.which("cmake"),
                                reason="needs cmake and ninja")


def test_the_ggml_integration_takes_the_package_or_the_committed_toolchain_file_alone(tmp_path: Path) -> None:
    """A teammate without the compileiq_build package configures ggml with the integration file
    and the campaign's committed toolchain file: the toolchain file's own compileiq_tune() puts
    the winner on exactly its group's file.  Given neither, the configure says what to give.
    A stand-in for ggml's layout (ggml itself is not in this repository): its CUDA target and
    the groups' files, real CMake and nvcc."""
    src = tmp_path / "ggml"
    cuda = src / "src" / "ggml-cuda"
    (cuda / "template-instances").mkdir(parents=True)
    files = ["template-instances/mmq-instance-q4_0.cu", "mmvq.cu",
             "template-instances/fattn-vec-instance-f16-f16.cu", "rope.cu", "other.cu"]
    for name in files:
        (cuda / name).write_text("__global__ void k() {}\n")
    (src / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.24)\nproject(ggml LANGUAGES CXX)\n"
                                        "add_subdirectory(src/ggml-cuda)\n")
    (cuda / "CMakeLists.txt").write_text(f"enable_language(CUDA)\nadd_library(ggml-cuda {' '.join(files)})\n")
    llm = Path(__file__).parents[1] / "benchmarks"
    configure = ["cmake", "-S", str(src), "-G", "Ninja", "-DGGML_CUDA=ON",
                 "-DCMAKE_CUDA_ARCHITECTURES=90-real",
                 f"-DCMAKE_PROJECT_ggml_INCLUDE={llm / 'llm' / 'ggml-compileiq.cmake'}",
                 "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", "-DCMAKE_DISABLE_FIND_PACKAGE_CompileIQ=ON"]
    neither = subprocess.run([*configure, "-B", str(tmp_path / "neither")], capture_output=True, text=True)
    assert neither.returncode != 0
    assert "neither the compileiq_build package" in " ".join(neither.stderr.split())
    toolchain = llm / "results" / "llm" / "ggml-llm-compileiq-toolchain.cmake"
    tuned = subprocess.run([*configure, "-B", str(tmp_path / "tuned"), f"-DCMAKE_TOOLCHAIN_FILE={toolchain}"],
                           capture_output=True, text=True)
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    assert "the toolchain file applies its flags itself" in tuned.stdout
    # Each group's file gets exactly its group's flags as the file sets them (later sittings
    # rewrite the file), the file of no group none of them.
    blocks = re.findall(r"^set\(COMPILEIQ_FLAGS_ggml_cuda_(\w+)_CUDA_sm_90\n(.*?)^\)", toolchain.read_text(),
                        re.M | re.S)
    flags = {group: re.findall(r"\[=\[(.*?)\]=\]", block) for group, block in blocks}
    assert flags.get("mmq"), "the campaign's toolchain file has no flags for mmq"
    commands = {Path(e["file"]).name: e["command"].split() for e in json.loads(
        (tmp_path / "tuned" / "compile_commands.json").read_text())}
    groups = {"mmq": "mmq-instance-q4_0.cu", "mmvq": "mmvq.cu", "fattn": "fattn-vec-instance-f16-f16.cu",
              "rope": "rope.cu"}
    every = {f for group in flags.values() for f in group}
    assert len(commands) == len(files) and not every & set(commands["other.cu"])
    for group, name in groups.items():
        assert set(flags.get(group, [])) == every & set(commands[name]), (group, commands[name])
