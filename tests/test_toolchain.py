"""The toolchain file: no flag text can change the CMake code, output is stable."""

from __future__ import annotations

import json
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compileiq_build.decide.selection import NoWinner, Winner, WorkloadGain
from compileiq_build.decide.stats import RatioEstimate
from compileiq_build.errors import CompileIQError
from compileiq_build.results.toolchain import Provenance, bracket, render, variable_name

PROV = Provenance("2026-11-30", "NVIDIA H200 (sm_90)", "580.1", (("CUDA", "NVIDIA 13.0.88"),), "staged")


def _winner(target: str, flags: tuple[str, ...], workload: str = "gemm[--n 4096]") -> Winner:
    gain = WorkloadGain(workload, RatioEstimate(0.95, 0.94, 0.96, 10))
    return Winner(target, {"CUDA": "sm_90"}, "k", {"CUDA": flags}, (gain,), 12)


# Any flag text but what a CMake list cannot hold as one element (';', '[', ']', line
# breaks: no compiler flag has them, and render() refuses them).
FLAG = st.text(st.characters(blacklist_characters=";[]\x00\r\n", blacklist_categories=("Cs",)),
               min_size=1, max_size=40).filter(lambda f: not f.endswith("\\"))


@settings(max_examples=25, deadline=None)
@given(st.lists(FLAG, min_size=1, max_size=6), st.text(max_size=30))
def test_any_flag_text_round_trips_through_cmake(cmake, tmp_path_factory, flags, workload):
    tmp = tmp_path_factory.mktemp("tc")
    text = render([_winner("my-lib", tuple(flags), workload)],
                  [NoWinner("other", {"CUDA": "sm_90"}, "reason\nset(EVIL 1)")], PROV)
    (tmp / "tc.cmake").write_text(text)
    var = variable_name("my_lib", "CUDA", "sm_90")
    (tmp / "read.cmake").write_text(
        f'include("{tmp}/tc.cmake")\n'
        'if(DEFINED EVIL)\n  message(FATAL_ERROR "comment text became code")\nendif()\n'
        f'list(LENGTH {var} n)\nmessage(STATUS "COUNT=${{n}}")\n'
        f'foreach(f IN LISTS {var})\n  message(STATUS "FLAG=${{f}}=END")\nendforeach()\n')
    proc = subprocess.run([cmake, "-P", str(tmp / "read.cmake")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert f"-- COUNT={len(flags)}" in proc.stdout
    for f in flags:
        assert f"-- FLAG={f}=END" in proc.stdout


@pytest.mark.parametrize("flag", ["-Da;b", "-D[x", "-Dy]", "-a\nset(EVIL 1)", "-Dz\\"])
def test_flags_a_list_cannot_hold_are_refused(flag):
    with pytest.raises(CompileIQError, match="cannot hold"):
        render([_winner("t", (flag,))], [], PROV)


def test_output_is_stable_and_sorted():
    winners = [_winner("zeta", ("--maxrregcount=128",)), _winner("alpha", ("--ptxas-options=-O2",))]
    a = render(winners, [], PROV)
    b = render(list(reversed(winners)), [], PROV)
    assert a == b
    assert a.index("COMPILEIQ_FLAGS_alpha_CUDA_sm_90") < a.index("COMPILEIQ_FLAGS_zeta_CUDA_sm_90")
    assert "1.053x (1.042x .. 1.064x)" in a  # speedup and interval of 0.95 [0.94, 0.96]


def test_no_path_of_the_tuning_machine_reaches_the_file():
    workload = "bude[--deck /work/main/.real/minibude/data/bm1 --out=/tmp/x.csv --n 4/2 rel/data]"
    text = render([_winner("bude", ("-O2",), workload)], [], PROV)
    assert "bude[--deck .../bm1 --out=.../x.csv --n 4/2 rel/data]: 1.053x" in text
    assert "/work" not in text and "/tmp" not in text


def test_bracket_level_grows_past_closing_text():
    assert bracket("a") == "[=[a]=]"
    assert bracket("x]=]y") == "[==[x]=]y]==]"
    assert json.dumps(variable_name("a-b.c", "CXX", "x86_64")) == '"COMPILEIQ_FLAGS_a_b_c_CXX_x86_64"'


def test_host_specific_flags_are_marked_in_the_file():
    march = Winner("saxpy", {"CXX": "x86_64"}, "k", {"CXX": ("-O3", "-march=native")},
                   (WorkloadGain("w", RatioEstimate(0.5, 0.4, 0.6, 10)),), 3)
    text = render([march], [], PROV)
    assert ("# saxpy: CXX for x86_64\n# -march=native: specific to the CPU of the machine it was tuned on\n"
            "# (tune --allow-host-specific); on other CPUs the binaries may stop with an illegal "
            "instruction.\nset(COMPILEIQ_FLAGS_saxpy_CXX_x86_64\n") in text
    plain = Winner("saxpy", {"CXX": "x86_64"}, "k", {"CXX": ("-O3",)}, march.gains, 3)
    assert "specific to the CPU" not in render([plain], [], PROV)
